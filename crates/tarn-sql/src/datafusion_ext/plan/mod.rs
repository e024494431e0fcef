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

use datafusion::common::DFSchema;
use datafusion::logical_expr::LogicalPlan;

/// The schema a plan node's expressions are written against: its one input's, or (for a
/// join, a leaf or a node of several inputs) its own.
pub(crate) fn input_schema(plan: &LogicalPlan) -> Arc<DFSchema> {
    match plan.inputs().as_slice() {
        [input] => input.schema().clone(),
        _ => plan.schema().clone(),
    }
}
