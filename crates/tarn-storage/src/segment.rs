//! Segments: immutable runs of a table's rows. A sealed segment is one file, read through
//! `mmap` with zero copy; the memtable is made of in-memory segments of the same shape.
//!
//! Segment file (little-endian):
//!
//! ```text
//! Arrow IPC file     row_id u64 + one field per column, named c{column id};
//!                    blocks of up to BLOCK_ROWS rows; its head (magic, schema) and its
//!                    footer (schema, block list) are checksummed like the blocks
//! stats section      Arrow IPC stream of one 2-row batch: per column min, max
//! key sections       one per key index (see keys.rs)
//! trailer            JSON: format, ids, per-block row id ranges and crc32, the IPC
//!                    head and footer as sections, section offsets, lengths and crc32s
//! tail (20 bytes)    trailer length u32 | crc32(trailer) u32 | format u32 | b"TARNSEG\0"
//! ```
//!
//! Every byte that is read is checksummed. The tail, trailer, IPC head and footer,
//! and statistics are verified at open (before anything in them is parsed); a block's
//! checksum is verified the first time the block is touched after open (and
//! remembered), and a key section's on its first lookup, so scans stay zero-copy and a
//! flipped byte is reported as corruption naming the file instead of being returned as
//! data (or reaching a decoder that could misread it).

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, UInt64Array};
use datafusion::arrow::buffer::Buffer;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::ipc::convert::fb_to_schema;
use datafusion::arrow::ipc::reader::{FileDecoder, StreamReader, read_footer_length};
use datafusion::arrow::ipc::writer::{FileWriter, StreamWriter};
use datafusion::arrow::ipc::{Block, root_as_footer};
use datafusion::common::ScalarValue;
use datafusion::functions_aggregate::min_max::{MaxAccumulator, MinAccumulator};
use datafusion::logical_expr::Accumulator;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tarn_catalog::{ColumnId, IndexId, TableId};

use crate::backend::{FileBackend, WriteFile};
use crate::chunk::{Chunk, column_field_name};
use crate::index_file::IndexFile;
use crate::keys::{self, EncodedKeys, KeyFilter, KeySection};
use crate::{Error, Result};

/// On-disk format version of segment files.
pub const SEGMENT_FORMAT_VERSION: u32 = 2;
const MAGIC: &[u8; 8] = b"TARNSEG\0";
pub(crate) const TAIL_LEN: usize = 20;
// Offsets in the tail.
const T_TRAILER_LEN: usize = 0;
const T_TRAILER_CRC: usize = 4;
const T_FORMAT: usize = 8;
const T_MAGIC: usize = 12;
/// Rows per block of a segment file: DataFusion's batch size, so a scan hands out whole
/// blocks (slices would be accounted at their block's full size).
pub const BLOCK_ROWS: usize = 8192;
/// Bytes past which a block is cut into smaller ones (down to one row): a block is read
/// whole, so 8,192 rows of 1 MB texts made one 8 GB block that no query could read
/// under its memory limit. The size of the statements' batches of wide rows
/// (`txn::BATCH_BYTES` in tarn-sql): with blocks of 32 MiB, the blocks a sort's input
/// held on their way to it left no room for its merge.
pub const BLOCK_BYTES: usize = 8 << 20;
const ROW_ID_FIELD: &str = "row_id";

pub use crate::layout::SegmentId;

/// A key index a segment carries: its columns and whether the key is unique.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KeySpec {
    /// Key columns, in key order.
    pub columns: Vec<ColumnId>,
    /// PRIMARY KEY / UNIQUE (`true`) or a plain equality index (`exact_text`).
    pub unique: bool,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Section {
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) crc: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BlockMeta {
    first_row_id: u64,
    last_row_id: u64,
    rows: u64,
    pub(crate) crc: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Trailer {
    format: u32,
    table: TableId,
    segment: SegmentId,
    rows: u64,
    pub(crate) ipc_len: u64,
    /// The IPC file's magic and schema message, before the first block.
    pub(crate) ipc_head: Section,
    /// The IPC file's end-of-stream marker, footer, footer length and magic.
    pub(crate) ipc_footer: Section,
    pub(crate) blocks: Vec<BlockMeta>,
    pub(crate) stats: Option<Section>,
    pub(crate) keys: Vec<(KeySpec, Section)>,
}

/// A key section: a verified slice of the mapped file, or one built in memory.
enum KeyBytes<'a> {
    Stored(&'a [u8]),
    Built(Arc<Vec<u8>>),
}

/// Per-column min and max of a segment (for pruning). Columns without statistics
/// (vectors, JSON, all-NULL) are absent.
pub type Stats = HashMap<ColumnId, (ScalarValue, ScalarValue)>;

/// One block: a run of rows, decoded on first touch.
#[derive(Debug)]
pub struct BlockSlot {
    /// First row id in the block.
    pub first_row_id: u64,
    /// Last row id in the block.
    pub last_row_id: u64,
    /// Rows in the block.
    pub rows: usize,
    /// Position of the block's first row within the segment.
    pub start: usize,
    crc: u32,
    ipc: Option<Block>,
    data: OnceLock<Arc<Chunk>>,
}

impl BlockSlot {
    /// The bytes of the block: its encoded size in the file, or its size in memory for
    /// a memtable's. (What a scan of it holds, about.)
    pub fn bytes(&self) -> usize {
        match &self.ipc {
            Some(b) => usize::try_from(b.bodyLength()).unwrap_or(usize::MAX),
            None => self.data.get().map_or(0, |c| used_bytes(c.batch())),
        }
    }
}

struct FileSource {
    path: PathBuf,
    /// The mapped file. Blocks are decoded from slices of it, each its own Arrow buffer,
    /// so memory accounting (DataFusion's pool) sees a block's size, not the file's.
    buf: bytes::Bytes,
    decoder: FileDecoder,
    keys: Vec<(KeySpec, Section, OnceLock<()>)>,
}

/// Immutable rows of a table: a sealed file or an in-memory run (part of the memtable).
pub struct Segment {
    id: Option<SegmentId>,
    schema: SchemaRef,
    file: Option<FileSource>,
    blocks: Vec<BlockSlot>,
    rows: usize,
    bytes: u64,
    stats: Stats,
    /// Set when a checkpoint starts sealing this in-memory segment: it no longer merges.
    frozen: AtomicBool,
    /// Key sections built in memory for keys the file does not carry (an index created
    /// after the segment was written).
    built_keys: Mutex<HashMap<Vec<ColumnId>, Arc<Vec<u8>>>>,
    /// Bloom filters of the key sections, built on first probe.
    key_filters: Mutex<HashMap<Vec<ColumnId>, Arc<KeyFilter>>>,
    /// Search index files built over this segment, by index id.
    indexes: Mutex<std::collections::BTreeMap<IndexId, Arc<IndexFile>>>,
    /// What the search layer derived from the rows for an index without a file here
    /// (see [`Segment::derived`]), by index id.
    derived: Mutex<std::collections::BTreeMap<IndexId, Arc<dyn std::any::Any + Send + Sync>>>,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("id", &self.id)
            .field("rows", &self.rows)
            .finish()
    }
}

impl Segment {
    /// An in-memory segment (memtable) of `row_ids` and their rows.
    pub fn memory(row_ids: UInt64Array, batch: RecordBatch) -> Self {
        let chunk = Chunk::new(row_ids, batch);
        let rows = chunk.num_rows();
        let slot = BlockSlot {
            first_row_id: chunk.row_ids().values().first().copied().unwrap_or(0),
            last_row_id: chunk.row_ids().values().last().copied().unwrap_or(0),
            rows,
            start: 0,
            crc: 0,
            ipc: None,
            data: OnceLock::new(),
        };
        let bytes = chunk.memory_size() as u64;
        let schema = chunk.batch().schema();
        let _ = slot.data.set(Arc::new(chunk));
        Segment {
            id: None,
            schema,
            file: None,
            blocks: vec![slot],
            rows,
            bytes,
            stats: Stats::new(),
            frozen: AtomicBool::new(false),
            built_keys: Mutex::new(HashMap::new()),
            key_filters: Mutex::new(HashMap::new()),
            indexes: Mutex::new(std::collections::BTreeMap::new()),
            derived: Mutex::new(std::collections::BTreeMap::new()),
        }
    }

    /// The stored schema (fields named by column id, no row ids).
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The segment id; `None` for in-memory segments.
    pub fn id(&self) -> Option<SegmentId> {
        self.id
    }

    /// Whether the rows are in memory (part of the memtable).
    pub fn in_memory(&self) -> bool {
        self.file.is_none()
    }

    /// The file, for sealed segments.
    pub fn path(&self) -> Option<&Path> {
        self.file.as_ref().map(|f| f.path.as_path())
    }

    /// Rows stored (live or deleted).
    pub fn num_rows(&self) -> usize {
        self.rows
    }

    /// Bytes on disk (sealed) or held in memory (memtable).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Column statistics (sealed segments only).
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The blocks, in row id order.
    pub fn blocks(&self) -> &[BlockSlot] {
        &self.blocks
    }

    /// First row id.
    pub fn first_row_id(&self) -> u64 {
        self.blocks.first().map_or(0, |b| b.first_row_id)
    }

    /// Last row id.
    pub fn last_row_id(&self) -> u64 {
        self.blocks.last().map_or(0, |b| b.last_row_id)
    }

    pub(crate) fn freeze(&self) {
        self.frozen.store(true, Ordering::Release);
    }

    /// The file of index `id` built over this segment, if there is one yet.
    pub fn index(&self, id: IndexId) -> Option<Arc<IndexFile>> {
        self.indexes.lock().get(&id).cloned()
    }

    /// Ids of the index files built over this segment.
    pub fn index_ids(&self) -> Vec<IndexId> {
        self.indexes.lock().keys().copied().collect()
    }

    pub(crate) fn attach_index(&self, file: Arc<IndexFile>) {
        // The file answers for the rows from now on.
        self.derived.lock().remove(&file.index_id());
        self.indexes.lock().insert(file.index_id(), file);
    }

    pub(crate) fn detach_index(&self, id: IndexId) {
        self.derived.lock().remove(&id);
        self.indexes.lock().remove(&id);
    }

    /// What the search layer makes of this segment's rows for index `id` while the
    /// segment has no file of it (the memtable, or a build still to come) — e.g. texts
    /// analyzed once for many queries: made by `make` on first use, then shared until
    /// the index's file is attached or the segment is dropped. Concurrent callers wait
    /// for one `make`.
    pub fn derived<T: std::any::Any + Send + Sync, E>(
        &self,
        id: IndexId,
        make: impl FnOnce() -> std::result::Result<T, E>,
    ) -> std::result::Result<Arc<T>, E> {
        let mut slot = self.derived.lock();
        if let Some(v) = slot.get(&id).and_then(|v| v.clone().downcast::<T>().ok()) {
            return Ok(v);
        }
        let v = Arc::new(make()?);
        // A file attached meanwhile answers from now on: keep nothing beside it.
        if !self.indexes.lock().contains_key(&id) {
            slot.insert(id, v.clone() as Arc<dyn std::any::Any + Send + Sync>);
        }
        Ok(v)
    }

    pub(crate) fn is_frozen(&self) -> bool {
        self.frozen.load(Ordering::Acquire)
    }

    fn corrupt(&self, message: String) -> Error {
        Error::Corrupt {
            path: self.path().map(Path::to_path_buf).unwrap_or_default(),
            message,
        }
    }

    /// Block `i`, verified and decoded on first touch.
    pub fn block(&self, i: usize) -> Result<Arc<Chunk>> {
        let slot = self
            .blocks
            .get(i)
            .ok_or_else(|| Error::Internal(format!("block {i} out of range")))?;
        if let Some(c) = slot.data.get() {
            return Ok(c.clone());
        }
        let (Some(file), Some(block)) = (&self.file, &slot.ipc) else {
            return Err(Error::Internal("in-memory segment without data".into()));
        };
        let start = usize::try_from(block.offset()).unwrap_or(usize::MAX);
        let len = (block.metaDataLength() as usize).saturating_add(block.bodyLength() as usize);
        if start
            .checked_add(len)
            .is_none_or(|end| end > file.buf.len())
        {
            return Err(self.corrupt(format!("block {i} lies outside the file")));
        }
        let bytes = file.buf.slice(start..start + len);
        if crc32fast::hash(&bytes) != slot.crc {
            return Err(self.corrupt(format!("block {i} fails its checksum")));
        }
        let batch = crate::untrusted::decode(|| {
            file.decoder
                .read_record_batch(block, &Buffer::from(bytes))
                .map_err(|e| e.to_string())
        })
        .map_err(|e| self.corrupt(format!("block {i}: {e}")))?
        .ok_or_else(|| self.corrupt(format!("block {i} is empty")))?;
        let row_ids = batch
            .column(0)
            .as_any()
            .downcast_ref::<UInt64Array>()
            .cloned()
            .ok_or_else(|| self.corrupt(format!("block {i} has no row ids")))?;
        if row_ids.len() != slot.rows {
            return Err(self.corrupt(format!(
                "block {i} has {} rows, not {}",
                row_ids.len(),
                slot.rows
            )));
        }
        let mut data = batch;
        data.remove_column(0);
        let chunk = Arc::new(Chunk::new(row_ids, data));
        let _ = slot.data.set(chunk.clone());
        Ok(chunk)
    }

    /// Position within the segment of `row_id`, if stored here.
    pub fn position(&self, row_id: u64) -> Result<Option<usize>> {
        let bi = self.blocks.partition_point(|b| b.last_row_id < row_id);
        let Some(slot) = self.blocks.get(bi) else {
            return Ok(None);
        };
        if row_id < slot.first_row_id {
            return Ok(None);
        }
        // Row ids ascend within a block; when they leave no gap (as appends make them)
        // the position is arithmetic, with no block to read and search (so the block's
        // checksum is checked when a row of it is read, not here).
        if slot.last_row_id - slot.first_row_id + 1 == slot.rows as u64 {
            return Ok(Some(slot.start + (row_id - slot.first_row_id) as usize));
        }
        let chunk = self.block(bi)?;
        Ok(chunk
            .row_ids()
            .values()
            .binary_search(&row_id)
            .ok()
            .map(|p| slot.start + p))
    }

    /// The stored key section over `columns`, checksum verified (once), if the file has
    /// one.
    fn stored_key_section(&self, columns: &[ColumnId]) -> Result<Option<&[u8]>> {
        let Some(file) = &self.file else {
            return Ok(None);
        };
        let Some((_, section, checked)) = file.keys.iter().find(|(s, _, _)| s.columns == columns)
        else {
            return Ok(None);
        };
        let bytes = section_bytes(file, section)
            .ok_or_else(|| self.corrupt("key section lies outside the file".into()))?;
        if checked.get().is_none() {
            if crc32fast::hash(bytes) != section.crc {
                return Err(self.corrupt("key section fails its checksum".into()));
            }
            let _ = checked.set(());
        }
        Ok(Some(bytes))
    }

    /// Whether a lookup over `columns` needs no work beyond a binary search: the file's
    /// section is verified, or one was built in memory.
    pub fn key_section_ready(&self, columns: &[ColumnId]) -> bool {
        let stored = self.file.as_ref().and_then(|f| {
            f.keys
                .iter()
                .find(|(s, _, _)| s.columns == columns)
                .map(|(_, _, checked)| checked.get().is_some())
        });
        match stored {
            Some(verified) => verified,
            None => self.built_keys.lock().contains_key(columns),
        }
    }

    /// Verifies the stored key section over `columns`, or builds one in memory when the
    /// file has none (an index created after the segment was written).
    pub fn prepare_key_section(&self, columns: &[ColumnId]) -> Result<()> {
        self.key_section(columns).map(|_| ())
    }

    fn key_section(&self, columns: &[ColumnId]) -> Result<KeyBytes<'_>> {
        if let Some(bytes) = self.stored_key_section(columns)? {
            return Ok(KeyBytes::Stored(bytes));
        }
        let cached = self.built_keys.lock().get(columns).cloned();
        Ok(KeyBytes::Built(match cached {
            Some(b) => b,
            None => {
                let b = Arc::new(self.build_key_section(columns)?);
                self.built_keys.lock().insert(columns.to_vec(), b.clone());
                b
            }
        }))
    }

    /// Adds to `found[i]` the row ids stored under key `i` of `keys` in the key index over
    /// `columns` (built in memory first when the file has no such section). Reads the
    /// section once, and skips keys its filter rules out.
    pub fn key_lookup_many(
        &self,
        columns: &[ColumnId],
        keys: &EncodedKeys,
        found: &mut [Vec<u64>],
    ) -> Result<()> {
        let section = self.key_section(columns)?;
        let bytes: &[u8] = match &section {
            KeyBytes::Stored(b) => b,
            KeyBytes::Built(b) => b,
        };
        let s = KeySection::parse(bytes).map_err(|e| self.corrupt(e.to_string()))?;
        if s.is_empty() {
            return Ok(());
        }
        let cached = self.key_filters.lock().get(columns).cloned();
        let filter = match cached {
            Some(f) => f,
            None => {
                let f = Arc::new(KeyFilter::new(&s));
                self.key_filters.lock().insert(columns.to_vec(), f.clone());
                f
            }
        };
        for (key, f) in keys.iter().zip(found.iter_mut()) {
            if let Some(key) = key
                && filter.may_contain(key)
            {
                f.extend(s.lookup(key));
            }
        }
        Ok(())
    }

    fn build_key_section(&self, columns: &[ColumnId]) -> Result<Vec<u8>> {
        let mut b = keys::KeyBuilder::default();
        for i in 0..self.blocks.len() {
            let chunk = self.block(i)?;
            let Some(arrays) = columns
                .iter()
                .map(|c| chunk.column(*c).cloned())
                .collect::<Option<Vec<_>>>()
            else {
                continue;
            };
            b.add(&arrays, chunk.row_ids().values())?;
        }
        Ok(b.finish())
    }

    /// Verifies every block and section checksum (compaction reads everything anyway).
    pub fn verify_all(&self) -> Result<()> {
        for i in 0..self.blocks.len() {
            self.block(i)?;
        }
        self.verify_key_sections()
    }

    /// Verifies the key sections' checksums (once each). Maintenance does it for the
    /// segments it writes, so that the first uniqueness check after a checkpoint or
    /// compaction is a binary search, not a read of the whole section.
    pub fn verify_key_sections(&self) -> Result<()> {
        if let Some(file) = &self.file {
            for (spec, _, _) in &file.keys {
                self.stored_key_section(&spec.columns)?;
            }
        }
        Ok(())
    }

    /// Opens a sealed segment file, checking its trailer (blocks are checked on first
    /// touch).
    pub fn open(path: &Path, table: TableId, id: SegmentId) -> Result<Segment> {
        let corrupt = |message: String| Error::Corrupt {
            path: path.to_path_buf(),
            message,
        };
        let buf = crate::mmap::map(path).map_err(|e| Error::io(path, e))?;
        let b: &[u8] = &buf;
        let tail = b
            .get(b.len().saturating_sub(TAIL_LEN)..)
            .unwrap_or_default();
        let field = |at: usize| tarn_format::u32_at(tail, at);
        let (Some(trailer_len), Some(trailer_crc), Some(format), true) = (
            field(T_TRAILER_LEN),
            field(T_TRAILER_CRC),
            field(T_FORMAT),
            tail.len() == TAIL_LEN && &tail[T_MAGIC..] == MAGIC,
        ) else {
            return Err(corrupt("not a Tarn segment (bad tail)".into()));
        };
        let trailer_len = trailer_len as usize;
        if format != SEGMENT_FORMAT_VERSION {
            return Err(Error::FormatVersion {
                path: path.to_path_buf(),
                found: format,
                supported: SEGMENT_FORMAT_VERSION,
            });
        }
        let trailer_start = b
            .len()
            .checked_sub(TAIL_LEN + trailer_len)
            .ok_or_else(|| corrupt("trailer length out of range".into()))?;
        let trailer_bytes = &b[trailer_start..b.len() - TAIL_LEN];
        if crc32fast::hash(trailer_bytes) != trailer_crc {
            return Err(corrupt("trailer fails its checksum".into()));
        }
        let trailer: Trailer =
            serde_json::from_slice(trailer_bytes).map_err(|e| corrupt(format!("trailer: {e}")))?;
        if trailer.table != table || trailer.segment != id {
            return Err(corrupt(format!(
                "holds segment {} of table {}, expected segment {id} of table {table}",
                trailer.segment, trailer.table
            )));
        }
        let ipc_len = usize::try_from(trailer.ipc_len).unwrap_or(usize::MAX);
        if ipc_len < 10 || ipc_len > trailer_start {
            return Err(corrupt("data section out of range".into()));
        }
        for (name, sec) in [("head", &trailer.ipc_head), ("footer", &trailer.ipc_footer)] {
            let ok = usize::try_from(sec.offset.saturating_add(sec.len))
                .is_ok_and(|end| end <= ipc_len)
                && b.get(sec.offset as usize..(sec.offset + sec.len) as usize)
                    .is_some_and(|bytes| crc32fast::hash(bytes) == sec.crc);
            if !ok {
                return Err(corrupt(format!("Arrow IPC {name} fails its checksum")));
            }
        }
        if trailer.ipc_footer.offset + trailer.ipc_footer.len != ipc_len as u64 {
            return Err(corrupt(
                "Arrow IPC footer does not end the data section".into(),
            ));
        }
        let ipc = &b[..ipc_len];
        let mut footer_len_bytes = [0u8; 10];
        footer_len_bytes.copy_from_slice(&ipc[ipc_len - 10..]);
        let footer_len =
            read_footer_length(footer_len_bytes).map_err(|e| corrupt(format!("footer: {e}")))?;
        let footer_start = (ipc_len - 10)
            .checked_sub(footer_len)
            .ok_or_else(|| corrupt("footer out of range".into()))?;
        let footer = root_as_footer(&ipc[footer_start..ipc_len - 10])
            .map_err(|e| corrupt(format!("footer: {e}")))?;
        let schema = crate::untrusted::decode(|| Ok(footer.schema().map(fb_to_schema)))
            .map_err(|e| corrupt(format!("footer: {e}")))?
            .ok_or_else(|| corrupt("footer has no schema".into()))?;
        let ipc_blocks: Vec<Block> = footer
            .recordBatches()
            .map(|v| v.iter().copied().collect())
            .unwrap_or_default();
        if ipc_blocks.len() != trailer.blocks.len() {
            return Err(corrupt("block count mismatch".into()));
        }
        let decoder = FileDecoder::new(Arc::new(schema.clone()), footer.version());
        let mut start = 0;
        let mut blocks = Vec::with_capacity(ipc_blocks.len());
        for (meta, ipc) in trailer.blocks.iter().zip(ipc_blocks) {
            blocks.push(BlockSlot {
                first_row_id: meta.first_row_id,
                last_row_id: meta.last_row_id,
                rows: meta.rows as usize,
                start,
                crc: meta.crc,
                ipc: Some(ipc),
                data: OnceLock::new(),
            });
            start += meta.rows as usize;
        }
        if start as u64 != trailer.rows {
            return Err(corrupt("row count mismatch".into()));
        }
        let source = FileSource {
            path: path.to_path_buf(),
            buf: buf.clone(),
            decoder,
            keys: trailer
                .keys
                .iter()
                .map(|(s, sec)| (s.clone(), *sec, OnceLock::new()))
                .collect(),
        };
        let stats = match &trailer.stats {
            Some(sec) => {
                read_stats(&source, sec).map_err(|e| corrupt(format!("statistics: {e}")))?
            }
            None => Stats::new(),
        };
        let bytes = b.len() as u64;
        let data_fields: Vec<_> = schema.fields().iter().skip(1).cloned().collect();
        Ok(Segment {
            id: Some(id),
            schema: Arc::new(Schema::new(data_fields)),
            bytes,
            file: Some(source),
            blocks,
            rows: start,
            stats,
            frozen: AtomicBool::new(true),
            built_keys: Mutex::new(HashMap::new()),
            key_filters: Mutex::new(HashMap::new()),
            indexes: Mutex::new(std::collections::BTreeMap::new()),
            derived: Mutex::new(std::collections::BTreeMap::new()),
        })
    }
}

fn section_bytes<'a>(file: &'a FileSource, s: &Section) -> Option<&'a [u8]> {
    let start = usize::try_from(s.offset).ok()?;
    let end = start.checked_add(usize::try_from(s.len).ok()?)?;
    file.buf.get(start..end)
}

fn read_stats(file: &FileSource, sec: &Section) -> Result<Stats> {
    let bytes = section_bytes(file, sec).ok_or_else(|| Error::Internal("out of range".into()))?;
    if crc32fast::hash(bytes) != sec.crc {
        return Err(Error::Internal("checksum mismatch".into()));
    }
    let batch = crate::untrusted::decode(|| {
        let mut reader =
            StreamReader::try_new(std::io::Cursor::new(bytes), None).map_err(|e| e.to_string())?;
        reader
            .next()
            .ok_or_else(|| "no batch".to_string())?
            .map_err(|e| e.to_string())
    })
    .map_err(Error::Internal)?;
    let mut stats = Stats::new();
    for (field, col) in batch.schema().fields().iter().zip(batch.columns()) {
        let Some(id) = field.name().strip_prefix('c').and_then(|s| s.parse().ok()) else {
            continue;
        };
        if col.len() == 2 && !col.is_null(0) && !col.is_null(1) {
            let min =
                ScalarValue::try_from_array(col, 0).map_err(|e| Error::Internal(e.to_string()))?;
            let max =
                ScalarValue::try_from_array(col, 1).map_err(|e| Error::Internal(e.to_string()))?;
            stats.insert(id, (min, max));
        }
    }
    Ok(stats)
}

/// Counts bytes and checksums the stream written through it, buffering small writes.
struct CrcWriter {
    file: Box<dyn WriteFile>,
    path: PathBuf,
    buf: Vec<u8>,
    pos: u64,
    crc: crc32fast::Hasher,
}

impl CrcWriter {
    fn take_crc(&mut self) -> u32 {
        std::mem::take(&mut self.crc).finalize()
    }

    fn drain(&mut self) -> std::io::Result<()> {
        if !self.buf.is_empty() {
            self.file.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    fn pad_to(&mut self, align: u64) -> std::io::Result<()> {
        let pad = (align - self.pos % align) % align;
        self.write_all(&vec![0u8; pad as usize])
    }

    fn section(&mut self, bytes: &[u8]) -> Result<Section> {
        self.pad_to(8).map_err(|e| Error::io(&self.path, e))?;
        let offset = self.pos;
        self.take_crc();
        self.write_all(bytes)
            .map_err(|e| Error::io(&self.path, e))?;
        Ok(Section {
            offset,
            len: bytes.len() as u64,
            crc: self.take_crc(),
        })
    }
}

impl Write for CrcWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.crc.update(data);
        self.pos += data.len() as u64;
        self.buf.extend_from_slice(data);
        if self.buf.len() >= 1 << 20 {
            self.drain()?;
        }
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.drain()
    }
}

fn stats_accumulators(schema: &Schema) -> Vec<Option<(MinAccumulator, MaxAccumulator)>> {
    schema
        .fields()
        .iter()
        .map(|f| {
            let sortable = matches!(
                f.data_type(),
                DataType::Int8
                    | DataType::Int16
                    | DataType::Int32
                    | DataType::Int64
                    | DataType::UInt64
                    | DataType::Float32
                    | DataType::Float64
                    | DataType::Decimal128(_, _)
                    | DataType::Date32
                    | DataType::Timestamp(_, _)
                    | DataType::Boolean
                    | DataType::Utf8
            );
            if !sortable {
                return None;
            }
            Some((
                MinAccumulator::try_new(f.data_type()).ok()?,
                MaxAccumulator::try_new(f.data_type()).ok()?,
            ))
        })
        .collect()
}

/// Writes a segment file from `blocks` (row ids ascending, each batch with fields named by
/// column id and the same schema) with key sections for `keys`, fsyncs it and opens it.
/// The caller makes the name durable (directory fsync) before referencing it.
pub fn write(
    backend: &Arc<dyn FileBackend>,
    dir: &Path,
    table: TableId,
    id: SegmentId,
    schema: &SchemaRef,
    blocks: impl IntoIterator<Item = Result<(UInt64Array, RecordBatch)>>,
    keys: &[KeySpec],
) -> Result<Segment> {
    let mut writer = SegmentWriter::create(backend, dir, table, id, schema, keys)?;
    for block in blocks {
        let (row_ids, batch) = block?;
        writer.push(&row_ids, &batch)?;
    }
    writer.finish()
}

/// A segment file being written block by block (for writers that get their rows a
/// few at a time, such as an upload). Dropped unfinished, it removes its file.
pub struct SegmentWriter {
    backend: Arc<dyn FileBackend>,
    path: PathBuf,
    table: TableId,
    id: SegmentId,
    schema: SchemaRef,
    keys: Vec<KeySpec>,
    state: Option<WriterState>,
}

struct WriterState {
    writer: FileWriter<CrcWriter>,
    file_schema: SchemaRef,
    ipc_head: Section,
    metas: Vec<BlockMeta>,
    rows: u64,
    accs: Vec<Option<(MinAccumulator, MaxAccumulator)>>,
    key_entries: Vec<keys::KeyBuilder>,
}

impl SegmentWriter {
    /// Creates segment file `id` of `table` in `dir` for rows of `schema`.
    pub fn create(
        backend: &Arc<dyn FileBackend>,
        dir: &Path,
        table: TableId,
        id: SegmentId,
        schema: &SchemaRef,
        keys: &[KeySpec],
    ) -> Result<Self> {
        let path = dir.join(crate::layout::segment_file_name(table, id));
        let file = backend.create(&path).map_err(|e| Error::io(&path, e))?;
        let mut this = Self {
            backend: backend.clone(),
            path: path.clone(),
            table,
            id,
            schema: schema.clone(),
            keys: keys.to_vec(),
            state: None,
        };
        let mut fields = vec![Field::new(ROW_ID_FIELD, DataType::UInt64, false)];
        fields.extend(schema.fields().iter().map(|f| f.as_ref().clone()));
        let file_schema = Arc::new(Schema::new(fields));
        let out = CrcWriter {
            file,
            path,
            buf: Vec::with_capacity(1 << 20),
            pos: 0,
            crc: crc32fast::Hasher::new(),
        };
        let mut writer = FileWriter::try_new(out, &file_schema)?;
        let ipc_head = Section {
            offset: 0,
            len: writer.get_ref().pos,
            crc: writer.get_mut().take_crc(),
        };
        this.state = Some(WriterState {
            writer,
            file_schema,
            ipc_head,
            metas: Vec::new(),
            rows: 0,
            accs: stats_accumulators(schema),
            key_entries: keys.iter().map(|_| keys::KeyBuilder::default()).collect(),
        });
        Ok(this)
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.state.as_ref().map_or(0, |s| s.rows)
    }

    /// Appends one block: `row_ids` ascending and above every earlier block's.
    pub fn push(&mut self, row_ids: &UInt64Array, batch: &RecordBatch) -> Result<()> {
        let st = self
            .state
            .as_mut()
            .ok_or_else(|| Error::Internal("segment writer used after an error".into()))?;
        let res = st.push(&self.schema, &self.keys, row_ids, batch);
        if res.is_err() {
            self.state = None;
        }
        res
    }

    /// Leaves the file where it is when this writer is dropped (its directory may
    /// belong to another process by then).
    pub fn keep_file(&mut self) {
        self.path = PathBuf::new();
    }

    /// Writes the statistics, key sections and trailer, fsyncs the file and opens it.
    pub fn finish(mut self) -> Result<Segment> {
        let st = self
            .state
            .take()
            .ok_or_else(|| Error::Internal("segment writer used after an error".into()))?;
        finish_into(
            st,
            &self.path,
            self.table,
            self.id,
            &self.schema,
            &self.keys,
        )?;
        let seg = Segment::open(&self.path, self.table, self.id);
        if seg.is_ok() {
            // Keep the file: it is the caller's now.
            self.path = PathBuf::new();
        }
        seg
    }
}

impl Drop for SegmentWriter {
    fn drop(&mut self) {
        if !self.path.as_os_str().is_empty() {
            self.state = None;
            let _ = self.backend.remove(&self.path);
        }
    }
}

impl WriterState {
    fn push(
        &mut self,
        schema: &SchemaRef,
        keys: &[KeySpec],
        row_ids: &UInt64Array,
        batch: &RecordBatch,
    ) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        if batch.schema().fields() != schema.fields() {
            return Err(Error::Internal(
                "segment blocks with different schemas".into(),
            ));
        }
        for (acc, col) in self.accs.iter_mut().zip(batch.columns()) {
            if let Some((min, max)) = acc
                && (min.update_batch(std::slice::from_ref(col)).is_err()
                    || max.update_batch(std::slice::from_ref(col)).is_err())
            {
                *acc = None;
            }
        }
        for (spec, entries) in keys.iter().zip(self.key_entries.iter_mut()) {
            let arrays = spec
                .columns
                .iter()
                .map(|c| {
                    batch
                        .column_by_name(&column_field_name(*c))
                        .cloned()
                        .ok_or_else(|| Error::Internal(format!("key column {c} missing")))
                })
                .collect::<Result<Vec<ArrayRef>>>()?;
            entries.add(&arrays, row_ids.values())?;
        }
        let mut columns: Vec<ArrayRef> = vec![Arc::new(row_ids.clone())];
        columns.extend(batch.columns().iter().cloned());
        let out_batch = RecordBatch::try_new(self.file_schema.clone(), columns)?;
        let mut pieces = Vec::new();
        cut_by_bytes(out_batch, &mut pieces)?;
        for piece in pieces {
            let ids = piece
                .column(0)
                .as_any()
                .downcast_ref::<UInt64Array>()
                .ok_or_else(|| Error::Internal("a block without row ids".into()))?;
            let (first_row_id, last_row_id) = (
                ids.values().first().copied().unwrap_or(0),
                ids.values().last().copied().unwrap_or(0),
            );
            self.writer.write(&piece)?;
            self.metas.push(BlockMeta {
                first_row_id,
                last_row_id,
                rows: piece.num_rows() as u64,
                crc: self.writer.get_mut().take_crc(),
            });
            self.rows += piece.num_rows() as u64;
        }
        Ok(())
    }
}

/// `batch` in blocks of at most [`BLOCK_BYTES`] each (or of one row), in order, by
/// halving, sized by [`used_bytes`].
fn cut_by_bytes(batch: RecordBatch, out: &mut Vec<RecordBatch>) -> Result<()> {
    let rows = batch.num_rows();
    if rows <= 1 || used_bytes(&batch) <= BLOCK_BYTES {
        out.push(batch);
        return Ok(());
    }
    let half = rows / 2;
    cut_by_bytes(batch.slice(0, half), out)?;
    cut_by_bytes(batch.slice(half, rows - half), out)
}

/// The bytes the rows of `batch` use, not the size of the buffers they are slices of:
/// a slice of a list keeps its parent's whole child array, which Arrow's own slice size
/// counts whole, so it is followed through the offsets here.
pub fn used_bytes(batch: &RecordBatch) -> usize {
    batch
        .columns()
        .iter()
        .map(|c| data_bytes(&c.to_data()))
        .fold(0, usize::saturating_add)
}

fn data_bytes(data: &datafusion::arrow::array::ArrayData) -> usize {
    let len = data.len();
    let nulls = if data.nulls().is_some() {
        len.div_ceil(8)
    } else {
        0
    };
    let child = |start: usize, n: usize| {
        data.child_data()
            .first()
            .filter(|c| start.saturating_add(n) <= c.len())
            .map_or(0, |c| data_bytes(&c.slice(start, n)))
    };
    let listed = |start: usize, end: usize, offset_bytes: usize| {
        (len + 1) * offset_bytes + nulls + child(start, end.saturating_sub(start))
    };
    match data.data_type() {
        DataType::List(_) | DataType::Map(_, _) if len > 0 => {
            let o = &data.buffer::<i32>(0)[..=len];
            listed(o[0].max(0) as usize, o[len].max(0) as usize, 4)
        }
        DataType::LargeList(_) if len > 0 => {
            let o = &data.buffer::<i64>(0)[..=len];
            listed(o[0].max(0) as usize, o[len].max(0) as usize, 8)
        }
        DataType::FixedSizeList(_, size) => {
            let size = (*size).max(0) as usize;
            nulls + child(data.offset() * size, len * size)
        }
        _ => data
            .get_slice_memory_size()
            .unwrap_or_else(|_| data.get_buffer_memory_size()),
    }
}

fn finish_into(
    st: WriterState,
    path: &Path,
    table: TableId,
    id: SegmentId,
    schema: &SchemaRef,
    keys: &[KeySpec],
) -> Result<()> {
    let io = |e: std::io::Error| Error::io(path, e);
    let WriterState {
        mut writer,
        ipc_head,
        metas,
        rows,
        mut accs,
        key_entries,
        ..
    } = st;
    let footer_start = writer.get_ref().pos;
    writer.finish()?;
    let mut out = writer.into_inner()?;
    let ipc_len = out.pos;
    let ipc_footer = Section {
        offset: footer_start,
        len: ipc_len - footer_start,
        crc: out.take_crc(),
    };
    // Statistics: one 2-row batch (min, max) over the columns that have them.
    let mut stat_fields = Vec::new();
    let mut stat_cols: Vec<ArrayRef> = Vec::new();
    for (field, acc) in schema.fields().iter().zip(accs.iter_mut()) {
        if let Some((min, max)) = acc
            && let (Ok(lo), Ok(hi)) = (min.evaluate(), max.evaluate())
            && !lo.is_null()
            && !hi.is_null()
            && let Ok(arr) = ScalarValue::iter_to_array([lo, hi])
        {
            stat_fields.push(Field::new(field.name(), arr.data_type().clone(), true));
            stat_cols.push(arr);
        }
    }
    let stats = if stat_cols.is_empty() {
        None
    } else {
        let s = Arc::new(Schema::new(stat_fields));
        let batch = RecordBatch::try_new(s.clone(), stat_cols)?;
        let mut bytes = Vec::new();
        let mut w = StreamWriter::try_new(&mut bytes, &s)?;
        w.write(&batch)?;
        w.finish()?;
        drop(w);
        Some(out.section(&bytes)?)
    };
    let mut key_sections = Vec::with_capacity(keys.len());
    for (spec, entries) in keys.iter().zip(key_entries) {
        let bytes = entries.finish();
        key_sections.push((spec.clone(), out.section(&bytes)?));
    }
    let trailer = Trailer {
        format: SEGMENT_FORMAT_VERSION,
        table,
        segment: id,
        rows,
        ipc_len,
        ipc_head,
        ipc_footer,
        blocks: metas,
        stats,
        keys: key_sections,
    };
    let json = serde_json::to_vec(&trailer)
        .map_err(|e| Error::Internal(format!("segment trailer: {e}")))?;
    out.write_all(&json).map_err(io)?;
    out.write_all(&(json.len() as u32).to_le_bytes())
        .map_err(io)?;
    out.write_all(&crc32fast::hash(&json).to_le_bytes())
        .map_err(io)?;
    out.write_all(&SEGMENT_FORMAT_VERSION.to_le_bytes())
        .map_err(io)?;
    out.write_all(MAGIC).map_err(io)?;
    out.drain().map_err(io)?;
    out.file.sync_data().map_err(io)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{ListArray, StringArray};
    use datafusion::arrow::datatypes::Int64Type;

    fn batch_of(column: ArrayRef) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "c",
            column.data_type().clone(),
            true,
        )]));
        RecordBatch::try_new(schema, vec![column]).expect("batch")
    }

    #[test]
    fn a_slice_of_a_list_counts_its_own_rows_not_its_parents_child() {
        // 200,000 lists of 30 int8s: a 48 MB child. A slice of 8,192 of them keeps
        // that whole child, which Arrow's slice size counts; its rows use 2 MB.
        let lists = ListArray::from_iter_primitive::<Int64Type, _, _>(
            (0..200_000i64).map(|i| Some((0..30).map(move |j| Some(i + j)))),
        );
        let all = batch_of(Arc::new(lists));
        let slice = all.slice(100_000, 8192);
        let used = used_bytes(&slice);
        assert!(
            (8192 * 30 * 8..8192 * 30 * 8 + 8192 * 8).contains(&used),
            "{used}"
        );
        let mut pieces = Vec::new();
        cut_by_bytes(slice, &mut pieces).expect("cut");
        assert_eq!(pieces.len(), 1, "a 2 MB block was cut");
        // Texts of 1 MB: blocks of at most BLOCK_BYTES, in order, every row kept.
        let texts: ArrayRef = Arc::new(StringArray::from_iter_values(
            (0..100).map(|i| format!("{i:07}{}", "x".repeat(1 << 20))),
        ));
        let mut pieces = Vec::new();
        cut_by_bytes(batch_of(texts.clone()), &mut pieces).expect("cut");
        assert!(pieces.len() >= 4, "{} blocks", pieces.len());
        assert!(pieces.iter().all(|p| used_bytes(p) <= BLOCK_BYTES));
        let rows: Vec<String> = pieces
            .iter()
            .flat_map(|p| {
                let a = p
                    .column(0)
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .expect("text");
                (0..a.len())
                    .map(|i| a.value(i)[..7].to_string())
                    .collect::<Vec<_>>()
            })
            .collect();
        let want: Vec<String> = (0..100).map(|i| format!("{i:07}")).collect();
        assert_eq!(rows, want);
    }
}
