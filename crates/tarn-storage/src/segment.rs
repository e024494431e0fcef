//! Segments: immutable runs of a table's rows. A sealed segment is one file, read through
//! `mmap` with zero copy; the memtable is made of in-memory segments of the same shape.
//! The file's layout is in `segment_format`, its writing in `segment_writer`.
//!
//! Every byte that is read is checksummed. The tail, trailer, IPC head and footer,
//! and statistics are verified at open (before anything in them is parsed); a block's
//! checksum is verified the first time the block is touched after open (and
//! remembered), and a key section's on its first lookup, so scans stay zero-copy and a
//! flipped byte is reported as corruption naming the file instead of being returned as
//! data (or reaching a decoder that could misread it).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::{Array, RecordBatch, UInt64Array};
use datafusion::arrow::buffer::Buffer;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::ipc::convert::fb_to_schema;
use datafusion::arrow::ipc::reader::{FileDecoder, StreamReader, read_footer_length};
use datafusion::arrow::ipc::{Block, root_as_footer};
use datafusion::common::ScalarValue;
use parking_lot::Mutex;
use tarn_catalog::{ColumnId, IndexId, TableId};

use crate::chunk::Chunk;
use crate::index_file::IndexFile;
use crate::keys::{self, EncodedKeys, KeyFilter, KeySection};
use crate::{Error, Result};

pub use crate::layout::SegmentId;
use crate::segment_format::*;

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
