//! Tarn's SQL layer: the PostgreSQL-flavoured dialect, the statement router, Tarn's own
//! DDL and DML executor, and the glue that lets Apache DataFusion plan and run queries
//! over Tarn's tables.
//!
//! A statement is parsed with [`EngineDialect`], its `$n` parameters are bound as
//! literals, and then it is routed: SELECT and EXPLAIN go to DataFusion with Tarn's
//! catalog (catalog = organization, schema = workspace); CREATE/DROP/ALTER TABLE,
//! CREATE/DROP INDEX and INSERT/UPDATE/DELETE are executed by Tarn, which plans only their read side with
//! DataFusion. Every statement (or batch) writes through one transaction that is logged
//! as one WAL record.
//!
//! The crate is in folders by role, each importing only from those below it (and no
//! file importing one that imports it back): `router` (the [`SqlEngine`]) → `fast_path`
//! → `statement` → `rewrite` → `datafusion_ext` (`session` → `plan` → `provider` →
//! `functions` → `context`) → `value` → `ast` → `error`. ARCHITECTURE.md maps each
//! concept to its file.

mod ast;
mod datafusion_ext;
mod error;
mod fast_path;
mod rewrite;
mod router;
mod statement;
mod value;

pub use ast::dialect::EngineDialect;
pub use ast::types::{arrow_type, is_json_field};
pub use datafusion_ext::context::deadline::{CallStop, StopHandle, Stoppable, stoppable};
pub use datafusion_ext::provider::{EngineTable, table_schema};
pub use error::{Error, Result};
pub use router::{SqlEngine, returns_rows_only};
pub use statement::ddl::{check_column_name, check_table_name};
pub use statement::result::{BatchTotals, StatementResult};
pub use statement::settings::{EF_SEARCH, Settings};
pub use statement::shared::{Limits, Locks};
pub use statement::txn::batch_bytes;
pub use tarn_alloc::StatementAllocator;
pub use value::encode::{encode_rows, encode_value, json_size};
