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

mod array_in;
mod array_text;
mod bulk;
mod clock;
mod coerce;
mod ddl;
mod decorrelate;
mod depth;
mod dialect;
mod dispatch;
mod dml;
mod encode;
mod engine;
mod error;
mod expansion;
mod fast;
mod fast_search;
mod functions;
mod guard;
mod held;
mod hybrid;
mod ident;
mod index_ddl;
mod jsonb;
mod key_predicate;
mod names;
mod numeric_input;
mod on_conflict;
mod order_fix;
mod output_limits;
mod overflow;
mod param_array;
mod params;
mod provider;
mod read_view;
mod recursive;
mod result;
mod score_order_rule;
mod search_exec;
mod search_rule;
mod settings;
mod shared;
mod similarity;
mod similarity_planner;
mod text_search;
mod txn;
mod types;
mod values;
mod values_subquery;

pub use ddl::{check_column_name, check_table_name};
pub use dialect::EngineDialect;
pub use encode::{encode_rows, encode_value, json_size};
pub use engine::SqlEngine;
pub use error::{Error, Result};
pub use provider::{EngineTable, table_schema};
pub use result::{BatchTotals, StatementResult};
pub use settings::{EF_SEARCH, Settings};
pub use shared::{Limits, Locks};
pub use tarn_alloc::StatementAllocator;
pub use txn::batch_bytes;
pub use types::{arrow_type, is_json_field};
