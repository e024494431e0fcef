//! Statement rewrites before DataFusion plans a statement: `$n` parameters bound as
//! literals (`params`), PostgreSQL's output column names (`names`) and views expanded
//! where they are read (`views`), USING and NATURAL joins' columns as PostgreSQL's
//! (`using_joins`). Stands on
//! `datafusion_ext` (the functions parameters bind to) and below it.

pub(crate) mod names;
pub(crate) mod params;
pub(crate) mod to_char;
pub(crate) mod using_joins;
pub(crate) mod views;
