//! The manifest: what a checkpoint holds. Written to a temporary name, fsynced, renamed
//! over `MANIFEST` and the directory fsynced, so a crash leaves the old or the new one.
//!
//! ```text
//! offset 0   b"TARNMAN\0"
//!        8   format version u32        (VERSION_AT)
//!        12  body length u32           (LEN_AT)
//!        16  crc32(body) u32           (CRC_AT)
//!        20  body: JSON                (HEADER_LEN)
//! ```

use std::path::Path;

use base64::Engine as _;
use roaring::RoaringBitmap;
use serde::{Deserialize, Serialize};
use tarn_catalog::{CatalogSnapshot, ColumnId, IndexId, TableId};

use crate::backend::FileBackend;
use crate::segment::SegmentId;
use crate::{Error, Result};

const MAGIC: &[u8; 8] = b"TARNMAN\0";
const VERSION_AT: usize = 8;
const LEN_AT: usize = 12;
const CRC_AT: usize = 16;
const HEADER_LEN: usize = 20;
/// On-disk format version of the manifest.
pub const MANIFEST_FORMAT_VERSION: u32 = 1;
/// File name of the manifest in the database directory.
pub const MANIFEST_FILE: &str = "MANIFEST";

/// One segment of a table at the checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SegmentEntry {
    /// Segment id (file `segments/{table}-{id}.seg`).
    pub id: SegmentId,
    /// Deleted positions: a serialized roaring bitmap, base64.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub deletes: String,
    /// Index files built over the segment (`segments/{table}-{id}.{index}.idx`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub indexes: Vec<IndexId>,
}

impl SegmentEntry {
    /// An entry for segment `id` with `deletes`.
    pub fn new(id: SegmentId, deletes: &RoaringBitmap) -> Result<Self> {
        let deletes = if deletes.is_empty() {
            String::new()
        } else {
            let mut bytes = Vec::with_capacity(deletes.serialized_size());
            deletes
                .serialize_into(&mut bytes)
                .map_err(|e| Error::Internal(format!("deletion bitmap: {e}")))?;
            base64::engine::general_purpose::STANDARD.encode(bytes)
        };
        Ok(SegmentEntry {
            id,
            deletes,
            indexes: Vec::new(),
        })
    }

    /// The deletion bitmap.
    pub fn deletes(&self) -> std::result::Result<RoaringBitmap, String> {
        if self.deletes.is_empty() {
            return Ok(RoaringBitmap::new());
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&self.deletes)
            .map_err(|e| e.to_string())?;
        RoaringBitmap::deserialize_from(&bytes[..]).map_err(|e| e.to_string())
    }
}

/// One table at the checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TableEntry {
    /// Table id.
    pub id: TableId,
    /// The next row id to hand out.
    pub next_row_id: u64,
    /// Sequence values by column.
    pub sequences: Vec<(ColumnId, i64)>,
    /// Segments in row id order.
    pub segments: Vec<SegmentEntry>,
}

/// A checkpoint: the catalog and every table's segments as of WAL position `lsn`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Manifest {
    /// Every record up to this LSN is in the checkpoint.
    pub lsn: u64,
    /// The first WAL file still needed.
    pub wal_seq: u64,
    /// Segment ids below this one may exist; new ones start here.
    pub next_segment_id: SegmentId,
    /// The catalog.
    pub catalog: CatalogSnapshot,
    /// The tables.
    pub tables: Vec<TableEntry>,
}

impl Manifest {
    /// Reads the manifest in `dir`, if there is one.
    pub fn read(dir: &Path) -> Result<Option<Manifest>> {
        let path = dir.join(MANIFEST_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(&path, e)),
        };
        let corrupt = |message: &str| Error::Corrupt {
            path: path.clone(),
            message: message.to_string(),
        };
        let field = |at: usize| tarn_format::u32_at(&bytes, at);
        let version = match field(VERSION_AT) {
            Some(v) if bytes.starts_with(MAGIC) => v,
            _ => return Err(corrupt("not a Tarn manifest (bad magic)")),
        };
        if version != MANIFEST_FORMAT_VERSION {
            return Err(Error::FormatVersion {
                path,
                found: version,
                supported: MANIFEST_FORMAT_VERSION,
            });
        }
        let (Some(len), Some(crc)) = (field(LEN_AT), field(CRC_AT)) else {
            return Err(corrupt("shorter than its header"));
        };
        let len = len as usize;
        let body = bytes
            .get(HEADER_LEN..HEADER_LEN + len)
            .filter(|_| bytes.len() == HEADER_LEN + len)
            .ok_or_else(|| corrupt("length does not match the file"))?;
        if crc32fast::hash(body) != crc {
            return Err(corrupt("checksum mismatch"));
        }
        let m = serde_json::from_slice(body).map_err(|e| Error::Corrupt {
            path: path.clone(),
            message: format!("undecodable body: {e}"),
        })?;
        Ok(Some(m))
    }

    /// Writes this manifest atomically into `dir` (temporary file, fsync, rename,
    /// directory fsync).
    pub fn write(&self, backend: &dyn FileBackend, dir: &Path) -> Result<()> {
        let body = serde_json::to_vec(self)
            .map_err(|e| Error::Internal(format!("encoding manifest: {e}")))?;
        let len = u32::try_from(body.len()).map_err(|_| Error::TooLarge {
            what: "the manifest".into(),
            size: body.len() as u64,
            limit: u32::MAX as u64,
        })?;
        let mut bytes = Vec::with_capacity(body.len() + HEADER_LEN);
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&MANIFEST_FORMAT_VERSION.to_le_bytes());
        bytes.extend_from_slice(&len.to_le_bytes());
        bytes.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        bytes.extend_from_slice(&body);
        let path = dir.join(MANIFEST_FILE);
        crate::backend::write_atomic(backend, &path, &bytes).map_err(|e| Error::io(&path, e))
    }
}
