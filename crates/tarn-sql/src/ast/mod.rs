//! SQL as text and syntax tree, before any planning: the dialect, identifier folding,
//! the nesting-depth limit, PostgreSQL array text, SQL type names and their Arrow types,
//! and reading key predicates out of a WHERE clause. Imports nothing of the crate but
//! its error type.

pub(crate) mod array_text;
pub(crate) mod depth;
pub(crate) mod dialect;
pub(crate) mod ident;
pub(crate) mod key_predicate;
pub(crate) mod pg_forms;
pub(crate) mod strings;
pub(crate) mod types;
pub(crate) mod unsupported;
