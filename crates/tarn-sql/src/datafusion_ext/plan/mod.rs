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
pub(crate) mod signed_results;
pub(crate) mod values_subquery;
