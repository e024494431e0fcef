//! Planner-free paths that give the planned path's answer faster: key lookups
//! (`key_lookup`), `<#>` top-k searches (`top_k`) and batch and literal inserts
//! (`insert`). Each answers only shapes it is sure of and returns `None` otherwise; the
//! router then plans the statement. Stands on `statement`.

pub(crate) mod insert;
pub(crate) mod key_lookup;
pub(crate) mod top_k;
