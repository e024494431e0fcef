//! A table's rows: immutable segments (sealed files or in-memory memtable runs), each
//! with a deletion bitmap, published as versions that readers snapshot.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, UInt64Array};
use datafusion::arrow::buffer::BooleanBuffer;
use datafusion::arrow::compute::{concat_batches, filter_record_batch};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use parking_lot::{Mutex, RwLock};
use roaring::RoaringBitmap;
use tarn_catalog::{ColumnId, TableId};

use crate::chunk::{Chunk, column_field_name};
use crate::keymap::KeyMap;
use crate::keys::{self, EncodedKeys};
use crate::segment::Segment;
use crate::{Error, Result};

/// Rows per in-memory segment beyond which appends start a new one instead of merging
/// (a scan hands out whole segments as batches, like sealed blocks).
const CHUNK_TARGET_ROWS: usize = crate::segment_format::BLOCK_ROWS;

/// Most bytes two in-memory segments may hold to be merged into one: merging saves a
/// segment's overhead for small rows, and copies large ones for nothing (a batch of
/// one-megabyte rows held every row twice, and up to twice more while the largest
/// merges ran).
const MERGE_BYTES: u64 = 2 << 20;

/// A segment as a table version sees it: the immutable rows plus which are deleted.
#[derive(Debug, Clone)]
pub struct SegmentRef {
    segment: Arc<Segment>,
    /// Deleted positions within the segment.
    deletes: Arc<RoaringBitmap>,
}

impl SegmentRef {
    pub(crate) fn new(segment: Arc<Segment>, deletes: Arc<RoaringBitmap>) -> Self {
        SegmentRef { segment, deletes }
    }

    pub(crate) fn deletes_arc(&self) -> &Arc<RoaringBitmap> {
        &self.deletes
    }

    /// The rows.
    pub fn segment(&self) -> &Arc<Segment> {
        &self.segment
    }

    /// Deleted positions.
    pub fn deletes(&self) -> &RoaringBitmap {
        &self.deletes
    }

    /// Live rows.
    pub fn live_count(&self) -> usize {
        self.segment.num_rows() - self.deletes.len() as usize
    }

    /// Liveness mask of block `i` (`true` = live); `None` when every row of it is live.
    pub fn block_mask(&self, i: usize) -> Option<BooleanBuffer> {
        let slot = self.segment.blocks().get(i)?;
        let (lo, hi) = (slot.start as u32, (slot.start + slot.rows) as u32);
        if self.deletes.range_cardinality(lo..hi) == 0 {
            return None;
        }
        let mut mask = vec![true; slot.rows];
        for p in self.deletes.range(lo..hi) {
            mask[(p - lo) as usize] = false;
        }
        Some(BooleanBuffer::from(mask))
    }

    /// Whether position `p` is live.
    pub fn is_live(&self, p: usize) -> bool {
        !self.deletes.contains(p as u32)
    }

    /// Block `i` with deleted rows dropped.
    pub fn live_block(&self, i: usize) -> Result<(UInt64Array, RecordBatch)> {
        let chunk = self.segment.block(i)?;
        match self.block_mask(i) {
            None => Ok((chunk.row_ids().clone(), chunk.batch().clone())),
            Some(mask) => {
                let mask = BooleanArray::new(mask, None);
                let ids = datafusion::arrow::compute::filter(chunk.row_ids(), &mask)?;
                let ids = ids
                    .as_any()
                    .downcast_ref::<UInt64Array>()
                    .cloned()
                    .ok_or_else(|| Error::Internal("row ids are not u64".into()))?;
                Ok((ids, filter_record_batch(chunk.batch(), &mask)?))
            }
        }
    }

    /// Row id at position `p`.
    fn row_id_at(&self, p: usize) -> Result<u64> {
        let blocks = self.segment.blocks();
        let bi = blocks.partition_point(|b| b.start + b.rows <= p);
        let slot = blocks
            .get(bi)
            .ok_or_else(|| Error::Internal(format!("position {p} out of range")))?;
        Ok(self.segment.block(bi)?.row_ids().value(p - slot.start))
    }
}

/// One published state of a table. Readers hold an `Arc` of it for a whole statement.
#[derive(Debug, Default, Clone)]
pub struct TableVersion {
    segments: Vec<SegmentRef>,
    next_row_id: u64,
    live_rows: u64,
    sequences: BTreeMap<ColumnId, i64>,
}

impl TableVersion {
    pub(crate) fn from_parts(
        segments: Vec<SegmentRef>,
        next_row_id: u64,
        sequences: BTreeMap<ColumnId, i64>,
    ) -> Self {
        let live_rows = segments.iter().map(|s| s.live_count() as u64).sum();
        TableVersion {
            segments,
            next_row_id,
            live_rows,
            sequences,
        }
    }

    /// Whether `other` is the same state (same segments and deletion bitmaps), even if
    /// it is a different copy.
    pub fn same_as(&self, other: &TableVersion) -> bool {
        self.next_row_id == other.next_row_id
            && self.live_rows == other.live_rows
            && self.segments.len() == other.segments.len()
            && self.segments.iter().zip(&other.segments).all(|(a, b)| {
                Arc::ptr_eq(&a.segment, &b.segment) && Arc::ptr_eq(&a.deletes, &b.deletes)
            })
    }

    /// The segments, in row id order.
    pub fn segments(&self) -> &[SegmentRef] {
        &self.segments
    }

    /// Live rows.
    pub fn row_count(&self) -> u64 {
        self.live_rows
    }

    /// The row id the next inserted row gets.
    pub fn next_row_id(&self) -> u64 {
        self.next_row_id
    }

    /// Last value handed out by the sequence of `column` (0 before the first).
    pub fn sequence(&self, column: ColumnId) -> i64 {
        self.sequences.get(&column).copied().unwrap_or(0)
    }

    /// Sequence values, by column.
    pub fn sequences(&self) -> &BTreeMap<ColumnId, i64> {
        &self.sequences
    }

    /// Bytes of the table: segment files on disk plus the memtable in memory.
    pub fn size_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.segment.bytes()).sum()
    }

    /// Bytes of the memtable (in-memory segments).
    pub fn memtable_bytes(&self) -> u64 {
        self.segments
            .iter()
            .filter(|s| s.segment.in_memory())
            .map(|s| s.segment.bytes())
            .sum()
    }

    /// The segment and position holding `row_id`.
    fn locate(&self, row_id: u64) -> Result<Option<(usize, usize)>> {
        let si = self
            .segments
            .partition_point(|s| s.segment.last_row_id() < row_id);
        let Some(s) = self.segments.get(si) else {
            return Ok(None);
        };
        if s.segment.num_rows() == 0 || row_id < s.segment.first_row_id() {
            return Ok(None);
        }
        Ok(s.segment.position(row_id)?.map(|p| (si, p)))
    }

    /// Whether `row_id` is a live row.
    pub fn contains(&self, row_id: u64) -> Result<bool> {
        Ok(self
            .locate(row_id)?
            .is_some_and(|(s, p)| self.segments[s].is_live(p)))
    }

    /// The live rows among `row_ids`, grouped by segment: (index into
    /// [`TableVersion::segments`], ascending positions in it), segments in order.
    pub fn positions(&self, row_ids: &[u64]) -> Result<Vec<(usize, Vec<u32>)>> {
        let mut by_segment: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
        for &id in row_ids {
            if let Some((si, p)) = self.locate(id)?
                && self.segments[si].is_live(p)
            {
                by_segment.entry(si).or_default().push(p as u32);
            }
        }
        Ok(by_segment
            .into_iter()
            .map(|(si, mut ps)| {
                ps.sort_unstable();
                ps.dedup();
                (si, ps)
            })
            .collect())
    }

    /// The live rows among `row_ids`, grouped by chunk: (chunk, positions in it).
    pub fn rows(&self, row_ids: &[u64]) -> Result<Vec<(Arc<Chunk>, Vec<usize>)>> {
        let mut out: Vec<(Arc<Chunk>, Vec<usize>)> = Vec::new();
        for &id in row_ids {
            let Some((si, p)) = self.locate(id)? else {
                continue;
            };
            let s = &self.segments[si];
            if !s.is_live(p) {
                continue;
            }
            let blocks = s.segment.blocks();
            let bi = blocks.partition_point(|b| b.start + b.rows <= p);
            let chunk = s.segment.block(bi)?;
            let local = p - blocks[bi].start;
            match out.last_mut() {
                Some((c, ps)) if Arc::ptr_eq(c, &chunk) => ps.push(local),
                _ => out.push((chunk, vec![local])),
            }
        }
        Ok(out)
    }

    /// This version plus `batch` as rows `first_row_id..`. Pure: used both to publish
    /// commits and to build a batch's private view of its own pending writes.
    pub fn with_insert(&self, first_row_id: u64, batch: &RecordBatch) -> Result<TableVersion> {
        let n = batch.num_rows();
        let mut next = self.clone();
        if n == 0 {
            return Ok(next);
        }
        if first_row_id < self.next_row_id {
            return Err(Error::Internal(format!("row id {first_row_id} reused")));
        }
        let row_ids = UInt64Array::from_iter_values(first_row_id..first_row_id + n as u64);
        // Split big inserts so scans can spread them over partitions.
        let mut off = 0;
        while off < n {
            let len = CHUNK_TARGET_ROWS.min(n - off);
            next.segments.push(SegmentRef::new(
                Arc::new(Segment::memory(
                    row_ids.slice(off, len),
                    batch.slice(off, len),
                )),
                Arc::new(RoaringBitmap::new()),
            ));
            merge_tail(&mut next.segments)?;
            off += len;
        }
        next.next_row_id = first_row_id + n as u64;
        next.live_rows += n as u64;
        Ok(next)
    }

    /// This version with `row_ids` deleted (ids that are not live are ignored).
    pub fn with_delete(&self, row_ids: &[u64]) -> Result<TableVersion> {
        let mut next = self.clone();
        let mut by_segment: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
        for &id in row_ids {
            if let Some((s, p)) = self.locate(id)?
                && self.segments[s].is_live(p)
            {
                by_segment.entry(s).or_default().push(p as u32);
            }
        }
        for (s, positions) in by_segment {
            let mut bitmap = RoaringBitmap::clone(&self.segments[s].deletes);
            let before = bitmap.len();
            bitmap.extend(positions);
            next.live_rows -= bitmap.len() - before;
            next.segments[s].deletes = Arc::new(bitmap);
        }
        next.segments.retain(|s| s.live_count() > 0);
        Ok(next)
    }

    /// This version with the sequence of `column` advanced to at least `value`.
    pub fn with_sequence(&self, column: ColumnId, value: i64) -> TableVersion {
        let mut next = self.clone();
        let v = next.sequences.entry(column).or_insert(0);
        *v = (*v).max(value);
        next
    }

    /// Marks every in-memory segment as being sealed (they stop merging) and returns
    /// this version.
    pub(crate) fn freeze(&self) {
        for s in &self.segments {
            if s.segment.in_memory() {
                s.segment.freeze();
            }
        }
    }

    /// This version with the run of segments `old` (consecutive, by identity) replaced
    /// by `new`, which holds the rows of `old` minus those deleted in `built_from` (the
    /// deletion bitmaps `new` was built from; `None`: `new` holds every row). Deletes
    /// that reached `old` since are carried over by row id. `None` when the run is no
    /// longer there (the caller drops `new`).
    pub(crate) fn with_replaced(
        &self,
        old: &[Arc<Segment>],
        new: Arc<Segment>,
        built_from: Option<&[Arc<RoaringBitmap>]>,
    ) -> Result<Option<TableVersion>> {
        let Some(first) = old.first() else {
            return Ok(None);
        };
        let Some(start) = self
            .segments
            .iter()
            .position(|s| Arc::ptr_eq(&s.segment, first))
        else {
            return Ok(None);
        };
        if start + old.len() > self.segments.len()
            || !old
                .iter()
                .zip(&self.segments[start..])
                .all(|(o, s)| Arc::ptr_eq(o, &s.segment))
        {
            return Ok(None);
        }
        let mut deletes = RoaringBitmap::new();
        let mut new_rows = 0usize;
        for (i, s) in self.segments[start..start + old.len()].iter().enumerate() {
            new_rows += s.live_count();
            // Only deletes newer than the ones `new` was built without need carrying.
            let newer = match built_from.and_then(|b| b.get(i)) {
                Some(before) => RoaringBitmap::clone(&s.deletes) - before.as_ref(),
                None => RoaringBitmap::clone(&s.deletes),
            };
            for p in newer.iter() {
                let row_id = s.row_id_at(p as usize)?;
                if let Some(np) = new.position(row_id)? {
                    deletes.insert(np as u32);
                }
            }
        }
        let replacement = SegmentRef::new(new, Arc::new(deletes));
        if replacement.live_count() != new_rows {
            return Err(Error::Internal(format!(
                "replacement segment has {} live rows, expected {new_rows}",
                replacement.live_count()
            )));
        }
        let mut next = self.clone();
        next.segments
            .splice(start..start + old.len(), [replacement]);
        next.segments.retain(|s| s.live_count() > 0);
        Ok(Some(next))
    }
}

/// In-memory key maps over the memtable rows, per key column set.
type MemKeys = HashMap<Vec<ColumnId>, KeyMap>;

/// What a commit adds to a table's memtable key maps: the keys of its inserted rows for
/// every column set that had a map when the commit was prepared.
#[derive(Debug, Default)]
pub(crate) struct KeyAdditions {
    /// The column sets with a map at prepare time (in the order of `keys`).
    sets: Vec<Vec<ColumnId>>,
    /// Per set, the keys of each inserted batch with the batch's first row id.
    keys: Vec<Vec<(EncodedKeys, u64)>>,
    /// Whether the commit inserted rows at all.
    inserted: bool,
}

/// A table's data: the current version plus key lookups. A commit prepares the next
/// version under the table's commit lock (which maintenance swaps take too), logs it and
/// publishes it with one pointer swap, so readers see all of a commit or none of it.
pub struct TableStore {
    id: TableId,
    current: RwLock<Arc<TableVersion>>,
    /// Keys of the rows in in-memory segments (sealed segments carry key sections).
    mem_keys: Mutex<MemKeys>,
    /// Held from a commit's prepare to its publish, and by maintenance swaps: nothing
    /// else changes the version in between.
    commit: Mutex<()>,
}

impl std::fmt::Debug for TableStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableStore").field("id", &self.id).finish()
    }
}

fn add_mem_keys(map: &mut KeyMap, columns: &[ColumnId], chunk: &Chunk) -> Result<()> {
    if let Some(keys) = chunk_keys(columns, chunk)? {
        map.reserve(keys.len(), keys.total_bytes());
        for (k, &r) in keys.iter().zip(chunk.row_ids().values().iter()) {
            if let Some(k) = k {
                map.push(k, r);
            }
        }
    }
    Ok(())
}

/// The keys over `columns` of every row of `chunk` (`None` when the chunk predates one
/// of the columns).
fn chunk_keys(columns: &[ColumnId], chunk: &Chunk) -> Result<Option<EncodedKeys>> {
    let Some(arrays) = columns
        .iter()
        .map(|c| chunk.column(*c).cloned())
        .collect::<Option<Vec<_>>>()
    else {
        return Ok(None);
    };
    Ok(Some(keys::encode_keys(&arrays)?))
}

impl TableStore {
    pub(crate) fn new(id: TableId) -> Self {
        Self::with_version(id, TableVersion::default())
    }

    pub(crate) fn with_version(id: TableId, version: TableVersion) -> Self {
        TableStore {
            id,
            current: RwLock::new(Arc::new(version)),
            mem_keys: Mutex::new(HashMap::new()),
            commit: Mutex::new(()),
        }
    }

    /// The table id.
    pub fn id(&self) -> TableId {
        self.id
    }

    /// A consistent snapshot of the table.
    pub fn snapshot(&self) -> Arc<TableVersion> {
        self.current.read().clone()
    }

    pub(crate) fn commit_lock(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.commit.lock()
    }

    /// Whether key lookups over `columns` need no building (the memtable's key map and
    /// every sealed segment's key section are ready), so they can run on any thread.
    pub fn keys_ready(&self, columns: &[ColumnId]) -> bool {
        if !self.mem_keys.lock().contains_key(columns) {
            return false;
        }
        self.snapshot()
            .segments
            .iter()
            .filter(|s| !s.segment.in_memory())
            .all(|s| s.segment.key_section_ready(columns))
    }

    /// Builds what [`TableStore::keys_ready`] lacks: the memtable's key map and the key
    /// sections of segments written before the key existed (reads whole segments, so
    /// async callers run it on a blocking thread).
    pub fn prepare_keys(&self, columns: &[ColumnId]) -> Result<()> {
        self.key_lookup(columns, &[])?;
        for s in self.snapshot().segments.iter() {
            if !s.segment.in_memory() {
                s.segment.prepare_key_section(columns)?;
            }
        }
        Ok(())
    }

    /// For each row of `arrays` (values of `columns`), the live row ids of the
    /// published table with that key, plus the snapshot they were found in. Rows with a
    /// NULL key part match nothing (as in PostgreSQL). Costs a hash probe for the
    /// memtable and a binary search per sealed segment; never scans the table (but may
    /// build a missing key map or section: see [`TableStore::keys_ready`]).
    pub fn key_lookup(
        &self,
        columns: &[ColumnId],
        arrays: &[ArrayRef],
    ) -> Result<(Arc<TableVersion>, Vec<Vec<u64>>)> {
        self.key_lookup_encoded(columns, &keys::encode_keys(arrays)?)
    }

    /// [`TableStore::key_lookup`] of keys already encoded.
    pub fn key_lookup_encoded(
        &self,
        columns: &[ColumnId],
        encoded: &EncodedKeys,
    ) -> Result<(Arc<TableVersion>, Vec<Vec<u64>>)> {
        // A missing map is built without the lock (it reads the whole memtable, and
        // commits that insert publish under the lock) from the version of the moment,
        // and kept only if nothing was published meanwhile; after a few tries it is
        // built under the lock, where no insert can publish.
        let mut attempt = 0;
        let mem = loop {
            let mem = self.mem_keys.lock();
            if mem.contains_key(columns) {
                break mem;
            }
            let locked = attempt >= 3;
            attempt += 1;
            let version = self.snapshot();
            let held = if locked {
                Some(mem)
            } else {
                drop(mem);
                None
            };
            let mut map = KeyMap::new();
            for s in version.segments.iter().filter(|s| s.segment.in_memory()) {
                add_mem_keys(&mut map, columns, s.segment.block(0)?.as_ref())?;
            }
            let mut mem = held.unwrap_or_else(|| self.mem_keys.lock());
            if locked || Arc::ptr_eq(&version, &self.snapshot()) {
                mem.insert(columns.to_vec(), map);
            }
        };
        // Commits publish the maps and the version under both locks: read them together.
        let version = self.snapshot();
        let mut found: Vec<Vec<u64>> = vec![Vec::new(); encoded.len()];
        if let Some(map) = mem.get(columns) {
            for (key, f) in encoded.iter().zip(found.iter_mut()) {
                if let Some(key) = key {
                    f.extend_from_slice(map.get(key));
                }
            }
        }
        drop(mem);
        // Each sealed segment is probed for all keys at once (its section and filter
        // looked up once).
        for s in version.segments.iter().filter(|s| !s.segment.in_memory()) {
            s.segment.key_lookup_many(columns, encoded, &mut found)?;
        }
        let mut out = Vec::with_capacity(found.len());
        for ids in found {
            let mut live = Vec::with_capacity(ids.len());
            for id in ids {
                if version.contains(id)? {
                    live.push(id);
                }
            }
            live.sort_unstable();
            live.dedup();
            out.push(live);
        }
        Ok((version, out))
    }

    /// For each row of `arrays` (values of `columns`), the live row of the published
    /// table with the same key, if any (for uniqueness checks).
    pub fn key_matches(
        &self,
        columns: &[ColumnId],
        arrays: &[ArrayRef],
    ) -> Result<Vec<Option<u64>>> {
        let (_, found) = self.key_lookup(columns, arrays)?;
        Ok(found.into_iter().map(|ids| ids.first().copied()).collect())
    }

    /// [`TableStore::key_matches`] of keys already encoded.
    pub fn key_matches_encoded(
        &self,
        columns: &[ColumnId],
        encoded: &EncodedKeys,
    ) -> Result<Vec<Option<u64>>> {
        let (_, found) = self.key_lookup_encoded(columns, encoded)?;
        Ok(found.into_iter().map(|ids| ids.first().copied()).collect())
    }

    /// Encodes the keys that inserting `batch` as rows `first_row_id..` adds to the
    /// memtable key maps (part of preparing a commit: it can fail, publishing cannot).
    pub(crate) fn key_additions(
        &self,
        into: &mut KeyAdditions,
        first_row_id: u64,
        batch: &RecordBatch,
    ) -> Result<()> {
        if !into.inserted {
            into.inserted = true;
            into.sets = self.mem_keys.lock().keys().cloned().collect();
            into.keys = (0..into.sets.len()).map(|_| Vec::new()).collect();
        }
        if into.sets.is_empty() || batch.num_rows() == 0 {
            return Ok(());
        }
        let chunk = Chunk::new(
            UInt64Array::from_iter_values(first_row_id..first_row_id + batch.num_rows() as u64),
            batch.clone(),
        );
        for (cols, keys) in into.sets.iter().zip(into.keys.iter_mut()) {
            if let Some(k) = chunk_keys(cols, &chunk)? {
                keys.push((k, first_row_id));
            }
        }
        Ok(())
    }

    /// Adds a prepared commit's keys to the memtable key maps, before its version is
    /// published (harmless: lookups drop row ids their version does not hold). Done
    /// outside the publish lock, because a big insert's keys take a while. Returns the
    /// column sets whose maps now hold the commit's rows. Cannot fail.
    pub(crate) fn add_keys(&self, additions: KeyAdditions) -> Option<Vec<Vec<ColumnId>>> {
        if !additions.inserted {
            return None;
        }
        let mut mem = self.mem_keys.lock();
        // A map built after the commit was prepared lacks its rows: drop it, it is
        // rebuilt on next use.
        mem.retain(|cols, _| additions.sets.contains(cols));
        for (cols, keys) in additions.sets.iter().zip(additions.keys) {
            if let Some(map) = mem.get_mut(cols) {
                for (batch, first) in keys {
                    map.reserve(batch.len(), batch.total_bytes());
                    for (i, k) in batch.iter().enumerate() {
                        if let Some(k) = k {
                            map.push(k, first + i as u64);
                        }
                    }
                }
            }
        }
        Some(mem.keys().cloned().collect())
    }

    /// Publishes a prepared version. `with_keys`: the maps [`TableStore::add_keys`]
    /// filled (any other was built from the old version since, and is dropped). Cannot
    /// fail; quick, as it runs under the publish lock.
    pub(crate) fn publish(&self, version: Arc<TableVersion>, with_keys: Option<&[Vec<ColumnId>]>) {
        match with_keys {
            Some(sets) => {
                let mut mem = self.mem_keys.lock();
                mem.retain(|cols, _| sets.contains(cols));
                *self.current.write() = version;
            }
            // Without new rows the maps stay right as they are.
            None => *self.current.write() = version,
        }
    }

    /// Freezes the memtable for sealing and returns the version it belongs to.
    pub(crate) fn freeze(&self) -> Arc<TableVersion> {
        let current = self.current.read();
        current.freeze();
        current.clone()
    }

    /// Swaps `old` for `new` (see [`TableVersion::with_replaced`]). Waits for a commit
    /// of this table in flight; blocks readers only for the pointer swap.
    pub(crate) fn replace(
        &self,
        old: &[Arc<Segment>],
        new: Arc<Segment>,
        built_from: Option<&[Arc<RoaringBitmap>]>,
    ) -> Result<bool> {
        let _commit = self.commit.lock();
        let Some(next) = self.snapshot().with_replaced(old, new, built_from)? else {
            return Ok(false);
        };
        let mut mem = self.mem_keys.lock();
        if old.iter().any(|s| s.in_memory()) {
            // The sealed rows' keys now live in the new segment's key sections.
            mem.clear();
        }
        *self.current.write() = Arc::new(next);
        Ok(true)
    }

    /// Forgets in-memory key maps (their columns changed); they are rebuilt on next use.
    /// Waits for a commit in flight, whose keys would otherwise miss a rebuilt map.
    pub fn reset_key_indexes(&self) {
        let _commit = self.commit.lock();
        self.mem_keys.lock().clear();
    }
}

/// Merges the last two in-memory segments while they are of similar size (a binary
/// counter), so single-row inserts do not leave a long tail of tiny segments and each
/// row is copied O(log CHUNK_TARGET_ROWS) times. Frozen segments (being sealed) and
/// sealed ones never merge here, nor do segments that together pass [`MERGE_BYTES`].
fn merge_tail(segments: &mut Vec<SegmentRef>) -> Result<()> {
    while segments.len() >= 2 {
        let last = &segments[segments.len() - 1];
        let prev = &segments[segments.len() - 2];
        let mergeable = |s: &SegmentRef| s.segment.in_memory() && !s.segment.is_frozen();
        if !mergeable(last)
            || !mergeable(prev)
            || last.live_count() < prev.live_count()
            || prev.live_count() + last.live_count() > CHUNK_TARGET_ROWS
            || prev.segment.bytes() + last.segment.bytes() > MERGE_BYTES
        {
            break;
        }
        let (ids_a, a) = prev.live_block(0)?;
        let (ids_b, b) = last.live_block(0)?;
        if a.schema() != b.schema() {
            break;
        }
        let batch = concat_batches(&a.schema(), [&a, &b])?;
        let ids = UInt64Array::from_iter_values(
            ids_a.values().iter().chain(ids_b.values().iter()).copied(),
        );
        segments.truncate(segments.len() - 2);
        segments.push(SegmentRef::new(
            Arc::new(Segment::memory(ids, batch)),
            Arc::new(RoaringBitmap::new()),
        ));
    }
    Ok(())
}

/// Builds a schema whose fields are named by column id, for batches handed to storage.
pub fn stored_schema(columns: &[(ColumnId, DataType, bool)]) -> Arc<Schema> {
    Arc::new(Schema::new(
        columns
            .iter()
            .map(|(id, ty, nullable)| Field::new(column_field_name(*id), ty.clone(), *nullable))
            .collect::<Vec<_>>(),
    ))
}
