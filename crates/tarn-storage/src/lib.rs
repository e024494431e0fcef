//! Tarn's storage layer: one write-ahead log for the whole database (catalog changes and
//! data in one ordered stream), group commit, recovery, checkpoints into immutable
//! segment files read through `mmap`, deletion bitmaps, snapshots, compaction and key
//! indexes.
//!
//! Storage is synchronous; async callers reach it through `spawn_blocking` so an fsync
//! never stalls a tokio worker.

#![deny(unsafe_code)]

mod backend;
mod blobs;
mod chunk;
mod commit;
mod compaction;
mod database;
mod error;
#[doc(hidden)]
pub mod fuzzing;
mod index;
mod index_build;
mod index_file;
mod keymap;
mod keys;
mod layout;
mod maintenance;
mod manifest;
mod mmap;
mod record;
mod segment;
mod segment_format;
mod segment_writer;
mod staged;
mod staging;
mod state;
mod table;
mod untrusted;
pub use untrusted::panic_message;
mod wal;

pub use backend::{
    Fault, FaultOp, FaultyBackend, FileBackend, PowerCutDisk, StdBackend, WriteFile,
};
pub use blobs::{BLOB_BLOCK, BlobReader, BlobSource, BlobWriter, Blobs, FILES_DIR};
pub use chunk::{Chunk, column_field_name};
pub use commit::BuiltVersion;
pub use database::{DB_FORMAT_VERSION, Database};
pub use error::{Error, Result};
pub use index::{BuildProgress, IndexBuilder};
pub use index_file::IndexFile;
pub use keymap::KeyMap;
pub use keys::{EncodedKeys, encode_keys};
pub use layout::index_file_name;
pub use manifest::MANIFEST_FORMAT_VERSION;
pub use record::Op;
pub use segment::{Segment, SegmentId};
pub use segment_format::{BLOCK_BYTES, BLOCK_ROWS, KeySpec, SEGMENT_FORMAT_VERSION, used_bytes};
pub use staged::Stager;
pub use state::{DEFAULT_MEMTABLE_BYTES, MAX_CATALOG_BYTES, StorageOptions, key_specs};
pub use table::{SegmentRef, TableStore, TableVersion, stored_schema};
pub use wal::{MAX_RECORD_BYTES, SyncMode, WAL_FORMAT_VERSION};
