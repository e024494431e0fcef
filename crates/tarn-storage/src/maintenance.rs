//! Maintenance: checkpoints (seal the memtable into segment files, write a manifest,
//! cut the log), compaction (merge small segments, drop deleted rows), the background
//! worker that runs both when budgets are exceeded, and the cleanup of files that no
//! manifest references.
//!
//! A checkpoint or compaction that is interrupted (a crash, a failing disk, the database
//! closing) publishes nothing: its files are orphans that the next successful
//! checkpoint, or the next open, deletes on the word of a manifest it has read.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use datafusion::arrow::array::{RecordBatch, UInt64Array};
use datafusion::arrow::compute::concat_batches;
use roaring::RoaringBitmap;
use tarn_catalog::{IndexId, TableId};

use crate::compaction::{SegmentStats, runs_to_rewrite};
use crate::index::live_index_ids;
use crate::layout::remove_unreferenced;
use crate::manifest::{Manifest, SegmentEntry, TableEntry};
use crate::segment::{Segment, SegmentId};
use crate::segment_format::{self, BLOCK_BYTES, BLOCK_ROWS, KeySpec};
use crate::segment_writer;
use crate::state::{Inner, catalog_size, key_specs};
use crate::table::{SegmentRef, TableStore, TableVersion};
use crate::{Error, Result};

/// WAL bytes since the last checkpoint beyond which the worker checkpoints anyway (so
/// open time stays bounded even when the memtable stays small, say with many deletes).
const CHECKPOINT_WAL_BYTES: u64 = 256 << 20;
/// A sealed run waiting to replace its memtable segments: (table, old run, new file).
type Swap = (Arc<TableStore>, Vec<Arc<Segment>>, Arc<Segment>);

/// What a checkpoint's cut captured.
struct Cut {
    /// Every record up to this LSN is in the captured state.
    lsn: u64,
    /// The first log file after the cut.
    wal_seq: u64,
    catalog: Arc<tarn_catalog::Catalog>,
    versions: Vec<(TableId, Arc<TableStore>, Arc<TableVersion>)>,
    estimated_catalog: u64,
    /// The memtable estimate the cut took over.
    memtable: u64,
}

impl Inner {
    pub(crate) fn has_unsealed_work(&self) -> bool {
        self.tables()
            .values()
            .any(|t| t.snapshot().memtable_bytes() > 0)
            || self.wal().is_some_and(|w| w.current_len() > 64)
            // Files of dropped tables that the manifest still names (say the drop was
            // replayed at open from a log file that is not the current one).
            || self.flags().files_dropped.load(Ordering::Acquire)
    }

    pub(crate) fn run_worker(&self) {
        let mut failures = 0u32;
        loop {
            // After failures (a full or failing disk), back off: every attempt rotates
            // the WAL and writes files that are then thrown away. The next commit or
            // VACUUM reports the disk's state to its caller.
            let pause = Duration::from_millis(500) * 2u32.pow(failures.min(6));
            if !self.wait_for_work(pause, failures == 0) {
                return;
            }
            failures = match self.maintain(false) {
                Ok(()) => 0,
                Err(_) => failures + 1,
            };
            // Index files of segments sealed or compacted just now are built right
            // after, outside the maintenance lock (a build takes long). A failed build
            // is remembered and skipped; it does not slow the checkpoints down.
            if failures == 0
                && let Err(e) = self.build_indexes(None, &|_| {})
            {
                tracing::warn!(error = %e, "background index build failed");
            }
        }
    }

    /// Checkpoints when the memtable or the WAL is over budget or tables with files
    /// were dropped, then compacts what needs it (and checkpoints again so the
    /// compacted files replace the old ones).
    pub(crate) fn maintain(&self, force_checkpoint: bool) -> Result<()> {
        if self.dir().is_none() {
            return Ok(());
        }
        let _m = self.maintenance_lock()?;
        if let Some(m) = self.poisoned() {
            return Err(Error::Poisoned(m));
        }
        let wal_len = self.wal().map_or(0, |w| w.current_len());
        if force_checkpoint
            || self.flags().files_dropped.load(Ordering::Acquire)
            || self.counters().mem_estimate.load(Ordering::Relaxed) > self.options().memtable_bytes
            || wal_len > CHECKPOINT_WAL_BYTES
        {
            self.checkpoint_locked()?;
        }
        let ids: Vec<TableId> = self.tables().keys().copied().collect();
        let mut compacted = false;
        for id in ids {
            compacted |= self.compact_table(id, false)?;
        }
        if compacted {
            self.checkpoint_locked()?;
        }
        Ok(())
    }

    /// Writes one segment file from `blocks`, with the table's key sections.
    pub(crate) fn write_segment(
        &self,
        table: TableId,
        schema: &datafusion::arrow::datatypes::SchemaRef,
        blocks: impl IntoIterator<Item = Result<(UInt64Array, RecordBatch)>>,
    ) -> Result<Arc<Segment>> {
        let specs = key_specs(&self.catalog(), table);
        let specs: Vec<KeySpec> = specs
            .into_iter()
            .filter(|s| {
                s.columns.iter().all(|c| {
                    schema
                        .field_with_name(&crate::column_field_name(*c))
                        .is_ok()
                })
            })
            .collect();
        let id = self
            .counters()
            .next_segment_id
            .fetch_add(1, Ordering::Relaxed);
        // Stops between blocks when the database closes (the file is then an orphan).
        let stop = &self.flags().stopping;
        let blocks = blocks.into_iter().map(|b| {
            if stop.load(Ordering::Acquire) {
                Err(Error::Closed)
            } else {
                b
            }
        });
        let seg = segment_writer::write(
            &self.options().backend,
            &self.seg_dir()?,
            table,
            id,
            schema,
            blocks,
            &specs,
        )?;
        self.flags().seg_dir_dirty.store(true, Ordering::Release);
        seg.verify_key_sections()?;
        Ok(Arc::new(seg))
    }

    /// Seals the memtable, writes a manifest, cuts the WAL and deletes files nothing
    /// references any more. Callers hold `maintenance`.
    pub(crate) fn checkpoint_locked(&self) -> Result<()> {
        let Some(wal) = self.wal() else {
            return Ok(());
        };
        // After a commit failed to publish, memory lacks a logged record: a checkpoint
        // of it would drop that record for good. The log stays the truth.
        if let Some(m) = self.poisoned() {
            return Err(Error::Poisoned(m));
        }
        // 1. The cut: no commit is between prepare and publish while the gate is held.
        let (cut, files_dropped, blobs) = {
            let _gate = self.locks().gate.write();
            let (lsn, seq) = wal.rotate()?;
            // Blobs of files deleted before the cut: their records are not in this
            // checkpoint's catalog, so once its manifest is durable they can go.
            let blobs = self.take_dropped_blobs();
            // Drops publish under the gate: every table dropped before the cut is left
            // out of this checkpoint's manifest (and its files deleted); one dropped
            // after it sets the flag again.
            let files_dropped = self.flags().files_dropped.swap(false, Ordering::AcqRel);
            // Attached before the cut: this manifest covers them (or their table was
            // dropped before it, and replay starts after their records).
            self.attached_since_cut().clear();
            let catalog = self.catalog();
            let versions: Vec<(TableId, Arc<TableStore>, Arc<TableVersion>)> = self
                .tables()
                .iter()
                .map(|(id, store)| (*id, store.clone(), store.freeze()))
                .collect();
            let cut = Cut {
                lsn,
                wal_seq: seq,
                catalog,
                versions,
                estimated_catalog: self.counters().catalog_bytes.load(Ordering::Relaxed),
                memtable: self.counters().mem_estimate.swap(0, Ordering::Relaxed),
            };
            (cut, files_dropped, blobs)
        };
        let memtable = cut.memtable;
        let res = self.seal_and_record(wal, cut);
        if res.is_ok()
            && let Err(e) = self.blobs().remove(&blobs)
        {
            tracing::warn!("blobs of deleted files not removed (the next open will): {e}");
        }
        if res.is_err() {
            self.drop_blobs_later(blobs);
            // Nothing was sealed: the memtable is still over budget, so the worker (or
            // the next commit) tries again.
            self.counters()
                .mem_estimate
                .fetch_add(memtable, Ordering::Relaxed);
            if files_dropped {
                self.flags().files_dropped.store(true, Ordering::Release);
            }
        }
        res
    }

    /// The rest of a checkpoint, after the cut: seal, write the manifest, swap the
    /// files in, delete what is redundant.
    fn seal_and_record(&self, wal: &crate::wal::Wal, cut: Cut) -> Result<()> {
        let Cut {
            lsn,
            wal_seq,
            catalog,
            versions,
            estimated_catalog,
            ..
        } = cut;
        let dir = self
            .dir()
            .map(std::path::Path::to_path_buf)
            .unwrap_or_default();
        // 2. Seal each table's memtable: consecutive in-memory segments with one schema
        //    become one file holding all their rows (deleted ones too, so positions and
        //    deletion bitmaps carry over unchanged).
        let mut entries = Vec::with_capacity(versions.len());
        let mut swaps: Vec<Swap> = Vec::new();
        for (id, store, version) in &versions {
            if self.flags().stopping.load(Ordering::Acquire) {
                return Err(Error::Closed);
            }
            let mut segs = Vec::new();
            let all = version.segments();
            let mut i = 0;
            while i < all.len() {
                let s = &all[i];
                if !s.segment().in_memory() {
                    // Index files of dropped indexes are no longer named (and go below).
                    let indexes = live_index_ids(&catalog, *id, s.segment().index_ids());
                    for gone in s.segment().index_ids() {
                        if !indexes.contains(&gone) {
                            s.segment().detach_index(gone);
                        }
                    }
                    let mut entry =
                        SegmentEntry::new(s.segment().id().unwrap_or_default(), s.deletes())?;
                    entry.indexes = indexes;
                    segs.push(entry);
                    i += 1;
                    continue;
                }
                let mut j = i + 1;
                while j < all.len()
                    && all[j].segment().in_memory()
                    && all[j].segment().schema() == s.segment().schema()
                {
                    j += 1;
                }
                let run = &all[i..j];
                let chunks = run
                    .iter()
                    .map(|r| r.segment().block(0))
                    .collect::<Result<Vec<_>>>()?;
                let blocks = chunks.iter().flat_map(|chunk| {
                    let n = chunk.num_rows();
                    (0..n.div_ceil(BLOCK_ROWS)).map(move |b| {
                        let off = b * BLOCK_ROWS;
                        let len = BLOCK_ROWS.min(n - off);
                        Ok((
                            chunk.row_ids().slice(off, len),
                            chunk.batch().slice(off, len),
                        ))
                    })
                });
                let new = self.write_segment(*id, s.segment().schema(), blocks)?;
                let mut deletes = RoaringBitmap::new();
                let mut base = 0u32;
                for r in run {
                    deletes.extend(r.deletes().iter().map(|p| p + base));
                    base += r.segment().num_rows() as u32;
                }
                segs.push(SegmentEntry::new(new.id().unwrap_or_default(), &deletes)?);
                swaps.push((
                    store.clone(),
                    run.iter().map(|r| r.segment().clone()).collect(),
                    new,
                ));
                i = j;
            }
            entries.push(TableEntry {
                id: *id,
                next_row_id: version.next_row_id(),
                sequences: version.sequences().iter().map(|(c, v)| (*c, *v)).collect(),
                segments: segs,
            });
        }
        // Segment files written since the last manifest (sealed here, or compacted)
        // must keep their names after a power cut before a manifest names them.
        if self.flags().seg_dir_dirty.swap(false, Ordering::AcqRel) {
            let seg_dir = self.seg_dir()?;
            if let Err(e) = self.options().backend.sync_dir(&seg_dir) {
                self.flags().seg_dir_dirty.store(true, Ordering::Release);
                return Err(Error::io(&seg_dir, e));
            }
        }
        // 3. The manifest makes the checkpoint durable. The log file it names must
        //    exist after a power cut first.
        let wal_seq = wal.sync_file(wal_seq)?;
        let exact = catalog_size(&catalog)?;
        let manifest = Manifest {
            lsn,
            wal_seq,
            next_segment_id: self.counters().next_segment_id.load(Ordering::Relaxed),
            catalog: catalog.snapshot(),
            tables: entries,
        };
        manifest.write(self.options().backend.as_ref(), &dir)?;
        // Commits since the cut only added to the estimate: take off what it overstated.
        let over = estimated_catalog.saturating_sub(exact);
        let _ =
            self.counters()
                .catalog_bytes
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                    Some(v.saturating_sub(over))
                });
        let referenced: HashSet<(TableId, SegmentId)> = manifest
            .tables
            .iter()
            .flat_map(|t| t.segments.iter().map(move |s| (t.id, s.id)))
            .collect();
        let mut keep_indexes: HashSet<(TableId, SegmentId, IndexId)> = manifest
            .tables
            .iter()
            .flat_map(|t| {
                t.segments
                    .iter()
                    .flat_map(move |s| s.indexes.iter().map(move |i| (t.id, s.id, *i)))
            })
            .collect();
        // 4. Readers now get the mapped files instead of the memtable.
        for (store, old, new) in swaps {
            store.replace(&old, new, None)?;
        }
        // 5. What the checkpoint made redundant.
        wal.remove_before(wal_seq)?;
        let mut keep = referenced;
        // Segments numbered from here on are written after these lists are taken (an
        // upload stages one at any time): they stay.
        let keep_from = self.counters().next_segment_id.load(Ordering::Acquire);
        // Staged files (uploads not committed yet) before the tables: a commit
        // publishes its table before it forgets the staged ids, so read in this order
        // every file is in one or the other.
        keep.extend(self.staging().ids());
        // Files attached since the cut: the log after this checkpoint's manifest has
        // their `Attach` records, which replay needs even if the table was dropped
        // since.
        keep.extend(self.attached_since_cut().iter().copied());
        for store in self.tables().values() {
            for s in store.snapshot().segments() {
                if let Some(id) = s.segment().id() {
                    keep.insert((store.id(), id));
                    for i in s.segment().index_ids() {
                        keep_indexes.insert((store.id(), id, i));
                    }
                }
            }
        }
        // Index builds write temporary files while a checkpoint may run: leave those.
        remove_unreferenced(
            self.options().backend.as_ref(),
            &self.seg_dir()?,
            &keep,
            &keep_indexes,
            keep_from,
            false,
        )
    }

    /// Merges small segments of table `id` and drops deleted rows (all of its segments
    /// when `force`). Returns whether anything changed. Callers hold `maintenance`.
    pub(crate) fn compact_table(&self, id: TableId, force: bool) -> Result<bool> {
        if self.dir().is_none() {
            return Ok(false);
        }
        let Some(store) = self.table(id) else {
            return Ok(false);
        };
        let version = store.snapshot();
        let sealed = version.segments();
        // Neighbours with one schema share a number (runs never cross a change).
        let mut schema = 0;
        let stats: Vec<SegmentStats> = sealed
            .iter()
            .enumerate()
            .map(|(k, s)| {
                if k > 0 && s.segment().schema() != sealed[k - 1].segment().schema() {
                    schema += 1;
                }
                SegmentStats {
                    in_memory: s.segment().in_memory(),
                    schema,
                    rows: s.segment().num_rows(),
                    deleted: s.deletes().len() as usize,
                }
            })
            .collect();
        let mut changed = false;
        for range in runs_to_rewrite(&stats, force) {
            let run = &sealed[range];
            for s in run {
                s.segment().verify_all()?;
            }
            let blocks = LiveBlocks::new(run.to_vec(), &self.flags().stopping);
            let new = self.write_segment(id, run[0].segment().schema(), blocks)?;
            let old: Vec<Arc<Segment>> = run.iter().map(|s| s.segment().clone()).collect();
            let built_from: Vec<Arc<RoaringBitmap>> =
                run.iter().map(|s| s.deletes_arc().clone()).collect();
            if store.replace(&old, new, Some(&built_from))? {
                changed = true;
            }
        }
        Ok(changed)
    }
}

/// The live rows of a run of segments as blocks of about `BLOCK_ROWS` rows (or
/// `BLOCK_BYTES`), for compaction. Full blocks pass through untouched (zero copy from
/// the mapped files); blocks thinned by deletes are combined.
pub(crate) struct LiveBlocks<'a> {
    run: Vec<SegmentRef>,
    /// Set when the database closes: the rewrite stops early (and publishes nothing).
    stop: &'a AtomicBool,
    seg: usize,
    block: usize,
    pending: Vec<(UInt64Array, RecordBatch)>,
    pending_rows: usize,
    pending_bytes: usize,
}

impl<'a> LiveBlocks<'a> {
    pub(crate) fn new(run: Vec<SegmentRef>, stop: &'a AtomicBool) -> Self {
        LiveBlocks {
            run,
            stop,
            seg: 0,
            block: 0,
            pending: Vec::new(),
            pending_rows: 0,
            pending_bytes: 0,
        }
    }

    fn flush(&mut self) -> Option<Result<(UInt64Array, RecordBatch)>> {
        if self.pending.is_empty() {
            return None;
        }
        let parts = std::mem::take(&mut self.pending);
        self.pending_rows = 0;
        self.pending_bytes = 0;
        if parts.len() == 1 {
            return parts.into_iter().next().map(Ok);
        }
        let schema = parts[0].1.schema();
        let ids = UInt64Array::from_iter_values(
            parts.iter().flat_map(|(i, _)| i.values().iter().copied()),
        );
        Some(
            concat_batches(&schema, parts.iter().map(|(_, b)| b))
                .map(|b| (ids, b))
                .map_err(Error::from),
        )
    }
}

impl Iterator for LiveBlocks<'_> {
    type Item = Result<(UInt64Array, RecordBatch)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.stop.load(Ordering::Acquire) {
                return Some(Err(Error::Closed));
            }
            let Some(s) = self.run.get(self.seg) else {
                return self.flush();
            };
            if self.block >= s.segment().blocks().len() {
                self.seg += 1;
                self.block = 0;
                continue;
            }
            let live = match s.live_block(self.block) {
                Ok(l) => l,
                Err(e) => return Some(Err(e)),
            };
            self.block += 1;
            if live.1.num_rows() == 0 {
                continue;
            }
            self.pending_rows += live.1.num_rows();
            // By bytes too: 1 MB rows in blocks of 32 combined up to 4,096 rows were
            // 4 GB in one allocation, past a text column's 2 GiB offsets.
            self.pending_bytes = self
                .pending_bytes
                .saturating_add(segment_format::used_bytes(&live.1));
            self.pending.push(live);
            if self.pending_rows >= BLOCK_ROWS / 2 || self.pending_bytes >= BLOCK_BYTES / 2 {
                return self.flush();
            }
        }
    }
}
