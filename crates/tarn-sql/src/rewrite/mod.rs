//! Statement rewrites before DataFusion plans a statement: `$n` parameters bound as
//! literals (`params`) and PostgreSQL's output column names (`names`). Stands on
//! `datafusion_ext` (the functions parameters bind to) and below it.

pub(crate) mod names;
pub(crate) mod params;
pub(crate) mod to_char;
