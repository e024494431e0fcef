//! Tarn's storage layer: one write-ahead log for the whole database (catalog changes and
//! data in one ordered stream), group commit, recovery, and tables kept as immutable
//! Arrow chunks that readers snapshot.
//!
//! Storage is synchronous; async callers reach it through `spawn_blocking` so an fsync
//! never stalls a tokio worker.

mod database;
mod error;
mod record;
mod table;
mod wal;

pub use database::{DB_FORMAT_VERSION, Database, StorageOptions};
pub use error::{Error, Result};
pub use record::Op;
pub use table::{Chunk, TableStore, TableVersion, column_field_name, stored_schema};
pub use wal::{SyncMode, WAL_FORMAT_VERSION};
