//! Rules over DataFusion's plans (analyzer, optimizer and physical) and the `<#>`
//! search node with its execution plan.

pub(crate) mod decorrelate;
pub(crate) mod expansion;
pub(crate) mod lazy_fallible;
pub(crate) mod merge_to_sort;
pub(crate) mod recursive;
pub(crate) mod score_nulls_last;
pub(crate) mod search_exec;
pub(crate) mod search_rule;
pub(crate) mod set_all;
pub(crate) mod signed_results;
pub(crate) mod unknown_literals;
pub(crate) mod values_subquery;

use std::sync::Arc;

use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result as DfResult};
use datafusion::logical_expr::{LogicalPlan, Union};

/// The schema a plan node's expressions are written against: its one input's, or (for a
/// join, a leaf or a node of several inputs) its own.
pub(crate) fn input_schema(plan: &LogicalPlan) -> Arc<DFSchema> {
    match plan.inputs().as_slice() {
        [input] => input.schema().clone(),
        _ => plan.schema().clone(),
    }
}

/// `plan` with every node's schema derived anew, subqueries included, after a rule
/// changed expression types (schemas derived before keep the old types; a union, which
/// keeps its inputs' old types and nullability, is built again from its inputs).
pub(crate) fn rederive_schemas(plan: LogicalPlan) -> DfResult<LogicalPlan> {
    plan.transform_up_with_subqueries(|p| match p {
        LogicalPlan::Union(u) => Ok(Transformed::yes(LogicalPlan::Union(
            Union::try_new_with_loose_types(u.inputs)?,
        ))),
        other => Ok(Transformed::yes(other.recompute_schema()?)),
    })
    .map(|t| t.data)
}
