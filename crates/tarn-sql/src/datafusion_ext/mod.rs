//! Tarn's extensions to Apache DataFusion, and the one place they are installed
//! (`session`). From the top down:
//!
//! - `session`: every function, rule, planner and setting installed into the session,
//!   in one commented list;
//! - `plan`: analyzer and optimizer rules, the `<#>` search node and its exec, the
//!   physical rules;
//! - `provider`: the catalog (organization = catalog, workspace = schema) and tables;
//! - `functions`: scalar and aggregate functions and the expression planners of
//!   operators (`<#>`, `||`, `->`);
//! - `context`: the statement's view of the database, its held large values and output
//!   limits, which the others share.

pub(crate) mod context;
pub(crate) mod functions;
pub(crate) mod plan;
pub(crate) mod provider;
pub(crate) mod session;
