//! The segment file's layout: its format version, tail, trailer and sections, and how
//! the bytes of a batch's rows are counted when it is cut into blocks. Read by
//! `segment` (the reader), written by `segment_writer`.
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

use datafusion::arrow::array::{Array, RecordBatch};
use datafusion::arrow::datatypes::DataType;
use serde::{Deserialize, Serialize};
use tarn_catalog::{ColumnId, TableId};

use crate::layout::SegmentId;

/// On-disk format version of segment files.
pub const SEGMENT_FORMAT_VERSION: u32 = 2;
pub(crate) const MAGIC: &[u8; 8] = b"TARNSEG\0";
pub(crate) const TAIL_LEN: usize = 20;
// Offsets in the tail.
pub(crate) const T_TRAILER_LEN: usize = 0;
pub(crate) const T_TRAILER_CRC: usize = 4;
pub(crate) const T_FORMAT: usize = 8;
pub(crate) const T_MAGIC: usize = 12;
/// Rows per block of a segment file: DataFusion's batch size, so a scan hands out whole
/// blocks (slices would be accounted at their block's full size).
pub const BLOCK_ROWS: usize = 8192;
/// Bytes past which a block is cut into smaller ones (down to one row): a block is read
/// whole, so 8,192 rows of 1 MB texts made one 8 GB block that no query could read
/// under its memory limit. The size of the statements' batches of wide rows
/// (`txn::BATCH_BYTES` in tarn-sql): with blocks of 32 MiB, the blocks a sort's input
/// held on their way to it left no room for its merge.
pub const BLOCK_BYTES: usize = 8 << 20;
pub(crate) const ROW_ID_FIELD: &str = "row_id";

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
    pub(crate) first_row_id: u64,
    pub(crate) last_row_id: u64,
    pub(crate) rows: u64,
    pub(crate) crc: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Trailer {
    pub(crate) format: u32,
    pub(crate) table: TableId,
    pub(crate) segment: SegmentId,
    pub(crate) rows: u64,
    pub(crate) ipc_len: u64,
    /// The IPC file's magic and schema message, before the first block.
    pub(crate) ipc_head: Section,
    /// The IPC file's end-of-stream marker, footer, footer length and magic.
    pub(crate) ipc_footer: Section,
    pub(crate) blocks: Vec<BlockMeta>,
    pub(crate) stats: Option<Section>,
    pub(crate) keys: Vec<(KeySpec, Section)>,
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
