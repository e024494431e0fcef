//! Recursive queries over table columns.
//!
//! A table's columns carry Tarn's field metadata (which table and column they are, for
//! `<#>` and the output names), and DataFusion 55 runs a recursive CTE only when its
//! recursive term's columns carry the same metadata as its first term's: the classic
//! `WITH RECURSIVE r(n, s) AS (SELECT 1, s FROM t UNION ALL SELECT n + 1, s || 'x'
//! FROM r …)` failed with "Cannot project plan column 1 … field metadata differs",
//! a query PostgreSQL runs. A CTE's columns are not a table's: this analyzer rule
//! plans the columns the terms disagree on through `__nullable` (the identity, whose
//! column has no metadata) in both terms, so that they agree.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, RecursiveQuery};
use datafusion::optimizer::AnalyzerRule;

/// The analyzer rule; install after DataFusion's own.
#[derive(Debug, Default)]
pub struct PlainRecursiveColumns;

impl AnalyzerRule for PlainRecursiveColumns {
    fn name(&self) -> &str {
        "tarn_plain_recursive_columns"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|plan| match plan {
            LogicalPlan::RecursiveQuery(q) if !differing(&q).is_empty() => {
                let columns = differing(&q);
                let static_term = Arc::new(plain(Arc::unwrap_or_clone(q.static_term), &columns)?);
                let recursive_term =
                    Arc::new(plain(Arc::unwrap_or_clone(q.recursive_term), &columns)?);
                Ok(Transformed::yes(LogicalPlan::RecursiveQuery(
                    RecursiveQuery::try_new(q.name, static_term, recursive_term, q.is_distinct)?,
                )))
            }
            other => Ok(Transformed::no(other)),
        })
        .map(|t| t.data)
    }
}

/// The positions of the columns whose metadata the two terms disagree on (a jsonb
/// column both terms mark as such keeps its mark).
fn differing(q: &RecursiveQuery) -> Vec<usize> {
    q.static_term
        .schema()
        .fields()
        .iter()
        .zip(q.recursive_term.schema().fields())
        .enumerate()
        .filter(|(_, (a, b))| a.metadata() != b.metadata())
        .map(|(i, _)| i)
        .collect()
}

/// `plan` with its columns at `columns` passed through `__nullable`.
fn plain(plan: LogicalPlan, columns: &[usize]) -> Result<LogicalPlan> {
    let exprs: Vec<Expr> = plan
        .schema()
        .iter()
        .enumerate()
        .map(|(i, (q, f))| {
            let c = Expr::Column(datafusion::common::Column::new(q.cloned(), f.name()));
            if !columns.contains(&i) {
                c
            } else {
                crate::datafusion_ext::plan::decorrelate::nullable_udf()
                    .call(vec![c])
                    .alias_qualified(q.cloned(), f.name())
            }
        })
        .collect();
    LogicalPlanBuilder::from(plan).project(exprs)?.build()
}
