//! The database directory's layout, and the names of its files: a leaf every module
//! that finds or lists files reads.
//!
//! ```text
//! LOCK                   held (flock) by the process that has the database open
//! TARN_FORMAT            "format N"
//! MANIFEST               the last checkpoint (catalog, segments, deletion bitmaps)
//! wal/NNNNNNNNNN.wal     write-ahead log files since that checkpoint
//! segments/T-S.seg       segment S of table T
//! segments/T-S.I.idx     the file of index I over segment S of table T
//! segments/T-S.I.idx.tmp an index file being built (deleted at open)
//! files/                 the bytes of workspace files (`blobs.rs`)
//! ```

use std::collections::HashSet;
use std::path::Path;

use tarn_catalog::{IndexId, TableId};

use crate::backend::FileBackend;
use crate::{Error, Result};

/// The directory of segment files and their index files.
pub(crate) const SEGMENTS_DIR: &str = "segments";
/// The directory of write-ahead log files.
pub(crate) const WAL_DIR: &str = "wal";

/// Segment ids are unique within a database and never reused.
pub type SegmentId = u64;

/// File name of segment `id` of table `table`.
pub fn segment_file_name(table: TableId, id: SegmentId) -> String {
    format!("{table}-{id}.seg")
}

/// The (table, segment) ids of a segment file name.
pub(crate) fn parse_segment_file_name(name: &str) -> Option<(TableId, SegmentId)> {
    let (t, s) = name.strip_suffix(".seg")?.split_once('-')?;
    Some((t.parse().ok()?, s.parse().ok()?))
}

/// File name of index `index` of segment `segment` of table `table`.
pub fn index_file_name(table: TableId, segment: SegmentId, index: IndexId) -> String {
    format!("{table}-{segment}.{index}.idx")
}

/// The ids of an index file name.
pub(crate) fn parse_index_file_name(name: &str) -> Option<(TableId, SegmentId, IndexId)> {
    let (ts, i) = name.strip_suffix(".idx")?.split_once('.')?;
    let (t, s) = ts.split_once('-')?;
    Some((t.parse().ok()?, s.parse().ok()?, i.parse().ok()?))
}

/// Deletes the segment and index files in `dir` that `keep` / `keep_indexes` do not
/// name, except those of segments numbered `keep_from` or higher (written after the
/// caller took its lists), and `.idx.tmp` files when `temporaries`.
pub(crate) fn remove_unreferenced(
    backend: &dyn FileBackend,
    dir: &Path,
    keep: &HashSet<(TableId, SegmentId)>,
    keep_indexes: &HashSet<(TableId, SegmentId, IndexId)>,
    keep_from: SegmentId,
    temporaries: bool,
) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        let remove = if let Some(ids) = parse_segment_file_name(name) {
            ids.1 < keep_from && !keep.contains(&ids)
        } else if let Some(ids) = parse_index_file_name(name) {
            ids.1 < keep_from && !keep_indexes.contains(&ids)
        } else {
            temporaries && name.ends_with(".idx.tmp")
        };
        if remove {
            let path = dir.join(name);
            backend.remove(&path).map_err(|e| Error::io(&path, e))?;
        }
    }
    Ok(())
}

/// The segment files in `dir` as (table, segment) ids (none when `dir` does not exist).
pub(crate) fn list_segment_files(dir: &Path) -> Result<Vec<(TableId, SegmentId)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        if let Some(ids) = entry.file_name().to_str().and_then(parse_segment_file_name) {
            out.push(ids);
        }
    }
    Ok(out)
}
