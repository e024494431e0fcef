//! The segments staged for tables not created yet (see `staged.rs`, which writes
//! them): kept by checkpoints until the commit that creates their table attaches them.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use roaring::RoaringBitmap;
use tarn_catalog::TableId;

use crate::segment::{Segment, SegmentId};
use crate::table::SegmentRef;
use crate::{Error, Result};

/// Rows per staged segment file (compaction's target: it leaves them as they are).
pub(crate) const STAGED_SEGMENT_ROWS: u64 = 1 << 20;

/// The segments staged for tables not created yet.
#[derive(Default)]
pub(crate) struct Staging {
    pub(crate) tables: Mutex<HashMap<TableId, StagedTable>>,
}

#[derive(Default)]
pub(crate) struct StagedTable {
    /// Segment ids in row order; `None` while the file is being written.
    pub(crate) segments: Vec<(SegmentId, Option<Arc<Segment>>)>,
    /// A commit attaching them is under way: it owns the files now.
    pub(crate) claimed: bool,
}

impl Staging {
    /// Every staged segment id (files a checkpoint must keep).
    pub(crate) fn ids(&self) -> Vec<(TableId, SegmentId)> {
        self.tables
            .lock()
            .iter()
            .flat_map(|(t, s)| s.segments.iter().map(move |(id, _)| (*t, *id)))
            .collect()
    }

    /// Hands table `table`'s segments `ids` to the commit that attaches them.
    pub(crate) fn claim(&self, table: TableId, ids: &[SegmentId]) -> Result<Vec<Arc<Segment>>> {
        let mut tables = self.tables.lock();
        let staged = tables
            .get_mut(&table)
            .filter(|s| !s.claimed)
            .ok_or_else(|| Error::Internal(format!("no staged rows for table {table}")))?;
        let segs = staged
            .segments
            .iter()
            .map(|(id, seg)| seg.clone().map(|s| (*id, s)))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Error::Internal("a staged segment is still being written".into()))?;
        if segs.iter().map(|(id, _)| *id).ne(ids.iter().copied()) {
            return Err(Error::Internal(format!(
                "the staged segments of table {table} are not the ones attached"
            )));
        }
        staged.claimed = true;
        Ok(segs.into_iter().map(|(_, s)| s).collect())
    }

    /// Forgets table `table`'s staged segments once a commit published them.
    pub(crate) fn published(&self, table: TableId) {
        self.tables.lock().remove(&table);
    }
}

/// Table `table`'s version once `segments` (rows `0..rows`) are attached to it.
pub(crate) fn attached_segments(segments: Vec<Arc<Segment>>) -> Vec<SegmentRef> {
    segments
        .into_iter()
        .map(|s| SegmentRef::new(s, Arc::new(RoaringBitmap::new())))
        .collect()
}
