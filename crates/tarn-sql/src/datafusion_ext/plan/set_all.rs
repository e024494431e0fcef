//! `EXCEPT ALL` and `INTERSECT ALL` as PostgreSQL means them: multisets. DataFusion 55
//! plans them as an anti or semi join of all columns, which drops every copy of a row
//! the right side has once (`{1,1,1,2} EXCEPT ALL {1}` was `{2}`, not `{1,1,2}`) and
//! keeps every copy the left side has (`{1,1,2,2} INTERSECT ALL {1,2,2,2}` was
//! `{1,1,2,2}`, not `{1,2,2}`).
//!
//! Each side's rows are numbered within their group of equal rows (`row_number()`
//! partitioned by every column), and the join matches the numbers too: the k-th copy
//! of a row on the left is removed (EXCEPT) or kept (INTERSECT) when the right has at
//! least k copies, which is the multiset difference and intersection.
//!
//! The join is told by what only a set operation plans before the subqueries are
//! unnested: an anti or semi join with no filter whose keys are every column of both
//! sides, NULLs equal. `EXCEPT` and `INTERSECT` without ALL put a DISTINCT on the left
//! first and are left as they are.

use std::sync::Arc;

use datafusion::common::tree_node::Transformed;
use datafusion::common::{NullEquality, Result};
use datafusion::config::ConfigOptions;
use datafusion::logical_expr::{
    Expr, ExprFunctionExt, Join, JoinType, LogicalPlan, LogicalPlanBuilder, col,
};
use datafusion::optimizer::AnalyzerRule;

/// The rule; install before the subqueries are unnested.
#[derive(Debug, Default)]
pub(crate) struct SetOperationsAll;

impl AnalyzerRule for SetOperationsAll {
    fn name(&self) -> &str {
        "tarn_set_operations_all"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|p| match p {
            LogicalPlan::Join(j) if set_operation_all(&j) => Ok(Transformed::yes(numbered(j)?)),
            other => Ok(Transformed::no(other)),
        })
        .map(|t| t.data)
    }
}

/// Whether `j` is how DataFusion plans `EXCEPT ALL` / `INTERSECT ALL`.
fn set_operation_all(j: &Join) -> bool {
    let width = j.left.schema().fields().len();
    matches!(j.join_type, JoinType::LeftAnti | JoinType::LeftSemi)
        && j.null_equality == NullEquality::NullEqualsNull
        && !j.null_aware
        && j.filter.is_none()
        && width > 0
        && j.on.len() == width
        && j.right.schema().fields().len() == width
        && j.on
            .iter()
            .all(|(l, r)| matches!((l, r), (Expr::Column(_), Expr::Column(_))))
        && !matches!(j.left.as_ref(), LogicalPlan::Distinct(_))
}

/// `plan` with its rows numbered within their groups of equal rows, as column `name`.
fn ranked(plan: Arc<LogicalPlan>, name: &str) -> Result<LogicalPlan> {
    let columns: Vec<Expr> = plan
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    let rank = datafusion::functions_window::expr_fn::row_number()
        .partition_by(columns)
        .build()?
        .alias(name);
    LogicalPlanBuilder::from(plan).window(vec![rank])?.build()
}

/// The join of [`set_operation_all`], matching copies by their numbers.
fn numbered(j: Join) -> Result<LogicalPlan> {
    const LEFT: &str = "__tarn_copy_l";
    const RIGHT: &str = "__tarn_copy_r";
    let output: Vec<Expr> = j
        .left
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    let left = Arc::new(ranked(j.left, LEFT)?);
    let right = Arc::new(ranked(j.right, RIGHT)?);
    let mut on = j.on;
    on.push((col(LEFT), col(RIGHT)));
    let join = Join::try_new(
        left,
        right,
        on,
        None,
        j.join_type,
        j.join_constraint,
        NullEquality::NullEqualsNull,
        false,
    )?;
    LogicalPlanBuilder::from(LogicalPlan::Join(join))
        .project(output)?
        .build()
}
