//! Subqueries inside `VALUES` rows (scalar, EXISTS, IN, ANY/ALL).
//!
//! DataFusion 55 plans a `VALUES` list into a memory source whose rows it evaluates
//! while planning, before any uncorrelated scalar subquery of the statement has run:
//! `INSERT … VALUES (1, (SELECT …))` or `SELECT * FROM (VALUES ((SELECT …)))` failed
//! with the internal error "ScalarSubqueryExpr evaluated before the subquery was
//! executed" (a 500 for valid SQL that PostgreSQL runs). This analyzer rule rewrites a
//! `Values` node whose rows hold a scalar subquery into a `UNION ALL` of one-row
//! projections, which run after the subqueries, as the projections of any SELECT do.
//! The rows' expressions are already cast to the list's column types (DataFusion does
//! that when it builds the `Values` node), so the output schema is unchanged.
//!
//! ```text
//! before: Values: (Int64(1), (<subquery>)), (Int64(2), Utf8("x"))
//! after:  Union
//!           Projection: Int64(1) AS column1, (<subquery>) AS column2
//!             EmptyRelation: rows=1
//!           Projection: Int64(2) AS column1, Utf8("x") AS column2
//!             EmptyRelation: rows=1
//! ```

use std::sync::Arc;

use datafusion::common::Result as DfResult;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, Union, Values};
use datafusion::optimizer::AnalyzerRule;

/// The analyzer rule; install after DataFusion's own.
#[derive(Debug, Default)]
pub struct ValuesSubqueries;

impl AnalyzerRule for ValuesSubqueries {
    fn name(&self) -> &str {
        "tarn_values_subqueries"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> DfResult<LogicalPlan> {
        plan.transform_up_with_subqueries(|plan| match plan {
            LogicalPlan::Values(values) if has_scalar_subquery(&values)? => {
                Ok(Transformed::yes(projections(values)?))
            }
            other => Ok(Transformed::no(other)),
        })
        .map(|t| t.data)
    }
}

fn has_scalar_subquery(values: &Values) -> DfResult<bool> {
    for e in values.values.iter().flatten() {
        if e.exists(|e| {
            Ok(matches!(
                e,
                Expr::ScalarSubquery(_)
                    | Expr::Exists(_)
                    | Expr::InSubquery(_)
                    | Expr::SetComparison(_)
            ))
        })? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// One projection over a one-row relation per row, under a `UNION ALL` when there are
/// several.
fn projections(values: Values) -> DfResult<LogicalPlan> {
    let Values { schema, values } = values;
    let mut rows = Vec::with_capacity(values.len());
    for row in values {
        let exprs = row
            .into_iter()
            .zip(schema.fields())
            .map(|(e, f)| e.alias(f.name()));
        rows.push(Arc::new(
            LogicalPlanBuilder::empty(true).project(exprs)?.build()?,
        ));
    }
    if rows.len() == 1 {
        return Ok(Arc::unwrap_or_clone(rows.remove(0)));
    }
    Ok(LogicalPlan::Union(Union::try_new_with_loose_types(rows)?))
}
