//! The database: directory lock, catalog, tables, the commit path, checkpoints and
//! compaction.
//!
//! Directory layout:
//!
//! ```text
//! LOCK                 held (flock) by the process that has the database open
//! TARN_FORMAT          "format N"
//! MANIFEST             the last checkpoint (catalog, segments, deletion bitmaps)
//! wal/NNNNNNNNNN.wal   write-ahead log files since that checkpoint
//! segments/T-S.seg     segment S of table T
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use datafusion::arrow::array::{RecordBatch, UInt64Array};
use datafusion::arrow::compute::concat_batches;
use parking_lot::{Condvar, Mutex, RwLock};
use roaring::RoaringBitmap;
use tarn_catalog::{Catalog, CatalogOp, TableId};

use crate::backend::{FileBackend, StdBackend};
use crate::manifest::{Manifest, SegmentEntry, TableEntry};
use crate::record::{self, Op};
use crate::segment::{self, BLOCK_ROWS, KeySpec, Segment, SegmentId};
use crate::table::{SegmentRef, TableStore, TableVersion};
use crate::wal::{SyncMode, Wal};
use crate::{Error, Result};

const FORMAT_FILE: &str = "TARN_FORMAT";
/// On-disk format version of a database directory.
pub const DB_FORMAT_VERSION: u32 = 2;
/// Default memtable budget: beyond it, a checkpoint seals the memtable into segments.
pub const DEFAULT_MEMTABLE_BYTES: u64 = 64 << 20;
/// WAL bytes since the last checkpoint beyond which the worker checkpoints anyway (so
/// open time stays bounded even when the memtable stays small, say with many deletes).
const CHECKPOINT_WAL_BYTES: u64 = 256 << 20;
/// Compaction merges runs of segments up to this many live rows.
const COMPACT_TARGET_ROWS: usize = 1 << 20;
/// A segment with fewer live rows than this is "small" and worth merging.
const COMPACT_SMALL_ROWS: usize = COMPACT_TARGET_ROWS / 4;
/// A segment whose deleted share exceeds this is rewritten.
const COMPACT_DELETED_SHARE: f64 = 0.3;

/// Storage options.
#[derive(Debug, Clone)]
pub struct StorageOptions {
    /// When a commit counts as durable.
    pub sync: SyncMode,
    /// Where files are written (the real disk, or a fault-injecting wrapper).
    pub backend: Arc<dyn FileBackend>,
    /// Memtable budget in bytes (all tables together): past it, a checkpoint seals the
    /// memtable into segment files.
    pub memtable_bytes: u64,
    /// Run checkpoints and compaction on a background thread.
    pub background: bool,
}

impl Default for StorageOptions {
    fn default() -> Self {
        StorageOptions {
            sync: SyncMode::Full,
            backend: Arc::new(StdBackend),
            memtable_bytes: DEFAULT_MEMTABLE_BYTES,
            background: true,
        }
    }
}

/// A sealed run waiting to replace its memtable segments: (table, old run, new file).
type Swap = (Arc<TableStore>, Vec<Arc<Segment>>, Arc<Segment>);

/// What the background worker is asked to do.
#[derive(Default)]
struct WorkerState {
    shutdown: bool,
    wake: bool,
}

struct Inner {
    dir: Option<PathBuf>,
    wal: Option<Wal>,
    options: StorageOptions,
    _lock: Option<File>,
    catalog: RwLock<Arc<Catalog>>,
    tables: RwLock<HashMap<TableId, Arc<TableStore>>>,
    /// Commits hold it shared from WAL append to apply; a checkpoint's cut holds it
    /// exclusively, so the cut sees exactly the records up to one LSN.
    gate: RwLock<()>,
    /// Serializes checkpoints and compactions.
    maintenance: Mutex<()>,
    next_segment_id: AtomicU64,
    /// Estimated memtable bytes since the last checkpoint.
    mem_estimate: AtomicU64,
    worker: Mutex<WorkerState>,
    worker_cv: Condvar,
}

/// One database: its catalog and tables, durable through one write-ahead log and
/// checkpoints into segment files.
pub struct Database {
    inner: Arc<Inner>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("dir", &self.inner.dir)
            .finish()
    }
}

fn lock_dir(dir: &Path) -> Result<File> {
    let lock_path = dir.join("LOCK");
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| Error::io(&lock_path, e))?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::Locked {
            path: dir.to_path_buf(),
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::io(&lock_path, e)),
    }
}

/// The key indexes segments of table `table` carry: PRIMARY KEY and UNIQUE constraints
/// (unique) and `exact_text` indexes (not unique).
pub fn key_specs(catalog: &Catalog, table: TableId) -> Vec<KeySpec> {
    catalog
        .key_column_sets(table)
        .into_iter()
        .map(|(columns, unique)| KeySpec { columns, unique })
        .collect()
}

impl Database {
    /// A database without files.
    pub fn in_memory() -> Self {
        Self::start(Inner {
            dir: None,
            wal: None,
            options: StorageOptions {
                background: false,
                ..StorageOptions::default()
            },
            _lock: None,
            catalog: RwLock::new(Arc::new(Catalog::new())),
            tables: RwLock::new(HashMap::new()),
            gate: RwLock::new(()),
            maintenance: Mutex::new(()),
            next_segment_id: AtomicU64::new(1),
            mem_estimate: AtomicU64::new(0),
            worker: Mutex::new(WorkerState::default()),
            worker_cv: Condvar::new(),
        })
    }

    fn start(inner: Inner) -> Self {
        let inner = Arc::new(inner);
        let worker = (inner.options.background && inner.dir.is_some()).then(|| {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("tarn-maintenance".into())
                .spawn(move || inner.run_worker())
        });
        let worker = match worker {
            Some(Ok(h)) => Some(h),
            // No thread: checkpoints then happen on close and on VACUUM only.
            _ => None,
        };
        Database {
            inner,
            worker: Mutex::new(worker),
        }
    }

    /// Opens or creates the database in `dir`: takes the directory lock, checks the
    /// format version, loads the last checkpoint and replays the write-ahead log after
    /// it. Open time grows with the number of segments and the log since the last
    /// checkpoint, not with the table sizes or history.
    pub fn open(dir: &Path, options: StorageOptions) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let lock = lock_dir(dir)?;
        check_format(dir)?;
        let seg_dir = dir.join("segments");
        std::fs::create_dir_all(&seg_dir).map_err(|e| Error::io(&seg_dir, e))?;
        let manifest = Manifest::read(dir)?.unwrap_or(Manifest {
            wal_seq: 1,
            next_segment_id: 1,
            ..Manifest::default()
        });
        let manifest_path = dir.join(crate::manifest::MANIFEST_FILE);
        let catalog = Catalog::from_snapshot(manifest.catalog.clone());
        let mut tables = HashMap::new();
        let mut referenced = HashSet::new();
        for t in &manifest.tables {
            let mut segments = Vec::with_capacity(t.segments.len());
            for e in &t.segments {
                let path = seg_dir.join(segment::file_name(t.id, e.id));
                let seg = Segment::open(&path, t.id, e.id)?;
                let deletes = e.deletes().map_err(|m| Error::Corrupt {
                    path: manifest_path.clone(),
                    message: format!("deletion bitmap of segment {}: {m}", e.id),
                })?;
                if deletes.max().is_some_and(|m| m as usize >= seg.num_rows()) {
                    return Err(Error::Corrupt {
                        path: manifest_path.clone(),
                        message: format!("deletion bitmap of segment {} out of range", e.id),
                    });
                }
                referenced.insert((t.id, e.id));
                segments.push(SegmentRef::new(Arc::new(seg), Arc::new(deletes)));
            }
            let version = TableVersion::from_parts(
                segments,
                t.next_row_id,
                t.sequences.iter().copied().collect::<BTreeMap<_, _>>(),
            );
            tables.insert(t.id, Arc::new(TableStore::with_version(t.id, version)));
        }
        // Files no checkpoint references: a checkpoint or compaction died before its
        // manifest was written.
        remove_unreferenced(options.backend.as_ref(), &seg_dir, &referenced)?;
        let wal_dir = dir.join("wal");
        let (wal, entries) = Wal::open(
            &wal_dir,
            options.sync,
            options.backend.clone(),
            manifest.wal_seq,
            manifest.lsn,
        )?;
        let inner = Inner {
            dir: Some(dir.to_path_buf()),
            wal: None,
            options,
            _lock: Some(lock),
            catalog: RwLock::new(Arc::new(catalog)),
            tables: RwLock::new(tables),
            gate: RwLock::new(()),
            maintenance: Mutex::new(()),
            next_segment_id: AtomicU64::new(manifest.next_segment_id.max(1)),
            mem_estimate: AtomicU64::new(0),
            worker: Mutex::new(WorkerState::default()),
            worker_cv: Condvar::new(),
        };
        for entry in entries {
            let bad = |message: String| Error::Corrupt {
                path: wal_dir.clone(),
                message: format!("record {}: {message}", entry.lsn),
            };
            let ops = record::decode(&entry.body, bad)?;
            inner.apply(&ops).map_err(|e| Error::Corrupt {
                path: wal_dir.clone(),
                message: format!("record {} does not apply: {e}", entry.lsn),
            })?;
        }
        Ok(Self::start(Inner {
            wal: Some(wal),
            ..inner
        }))
    }

    /// The database directory (`None` in memory).
    pub fn dir(&self) -> Option<&Path> {
        self.inner.dir.as_deref()
    }

    /// A snapshot of the catalog.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.inner.catalog.read().clone()
    }

    /// The data of table `id`.
    pub fn table(&self, id: TableId) -> Option<Arc<TableStore>> {
        self.inner.table(id)
    }

    /// Logs `ops` as one record and, once durable, applies them. Nothing is applied when
    /// logging fails. Callers hold the locks that make the ops valid (the DDL lock for
    /// catalog changes, the writer lock of each table written).
    pub fn commit(&self, ops: Vec<Op>) -> Result<()> {
        self.inner.commit(ops)
    }

    /// Seals the memtable into segment files, writes a new manifest and cuts the WAL.
    pub fn checkpoint(&self) -> Result<()> {
        let _m = self.inner.maintenance.lock();
        self.inner.checkpoint_locked()
    }

    /// Compacts table `id` now (VACUUM): seals its memtable, merges its segments and
    /// drops deleted rows, and checkpoints the result.
    pub fn vacuum(&self, id: TableId) -> Result<()> {
        let _m = self.inner.maintenance.lock();
        self.inner.checkpoint_locked()?;
        self.inner.compact_table(id, true)?;
        self.inner.checkpoint_locked()
    }

    /// Runs one round of background maintenance now (checkpoint if due, compaction of
    /// every table that needs it). For tests and benchmarks.
    pub fn maintain(&self) -> Result<()> {
        self.inner.maintain(true)
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        {
            let mut w = self.inner.worker.lock();
            w.shutdown = true;
            self.inner.worker_cv.notify_all();
        }
        if let Some(h) = self.worker.lock().take() {
            let _ = h.join();
        }
        // A clean close leaves nothing to replay: the next open is fast.
        if self.inner.dir.is_some() && self.inner.has_unsealed_work() {
            let _ = self.checkpoint();
        }
    }
}

impl Inner {
    fn table(&self, id: TableId) -> Option<Arc<TableStore>> {
        self.tables.read().get(&id).cloned()
    }

    fn commit(&self, ops: Vec<Op>) -> Result<()> {
        if ops.is_empty() {
            return Ok(());
        }
        let added: u64 = ops
            .iter()
            .map(|op| match op {
                Op::Insert { batch, .. } => batch.get_array_memory_size() as u64,
                _ => 0,
            })
            .sum();
        {
            let _gate = self.gate.read();
            if let Some(wal) = &self.wal {
                wal.append(&record::encode(&ops)?)?;
            }
            self.apply(&ops)?;
        }
        if self.wal.is_some() {
            let total = self.mem_estimate.fetch_add(added, Ordering::Relaxed) + added;
            if total > self.options.memtable_bytes {
                if self.options.background {
                    self.wake_worker();
                } else {
                    // No worker: this writer pays for the checkpoint.
                    self.maintain(false)?;
                }
            }
        }
        Ok(())
    }

    fn wake_worker(&self) {
        let mut w = self.worker.lock();
        w.wake = true;
        self.worker_cv.notify_all();
    }

    fn has_unsealed_work(&self) -> bool {
        self.tables
            .read()
            .values()
            .any(|t| t.snapshot().memtable_bytes() > 0)
            || self.wal.as_ref().is_some_and(|w| w.current_len() > 64)
    }

    fn run_worker(&self) {
        let mut failures = 0u32;
        loop {
            {
                let mut w = self.worker.lock();
                // After failures (a full or failing disk), back off: every attempt
                // rotates the WAL and writes files that are then thrown away. The
                // next commit or VACUUM reports the disk's state to its caller.
                let pause = Duration::from_millis(500) * 2u32.pow(failures.min(6));
                if !w.shutdown && (!w.wake || failures > 0) {
                    self.worker_cv.wait_for(&mut w, pause);
                }
                if w.shutdown {
                    return;
                }
                w.wake = false;
            }
            failures = match self.maintain(false) {
                Ok(()) => 0,
                Err(_) => failures + 1,
            };
        }
    }

    /// Checkpoints when the memtable or the WAL is over budget, then compacts what
    /// needs it (and checkpoints again so the compacted files replace the old ones).
    fn maintain(&self, force_checkpoint: bool) -> Result<()> {
        if self.dir.is_none() {
            return Ok(());
        }
        let _m = self.maintenance.lock();
        let wal_len = self.wal.as_ref().map_or(0, |w| w.current_len());
        if force_checkpoint
            || self.mem_estimate.load(Ordering::Relaxed) > self.options.memtable_bytes
            || wal_len > CHECKPOINT_WAL_BYTES
        {
            self.checkpoint_locked()?;
        }
        let ids: Vec<TableId> = self.tables.read().keys().copied().collect();
        let mut compacted = false;
        for id in ids {
            compacted |= self.compact_table(id, false)?;
        }
        if compacted {
            self.checkpoint_locked()?;
        }
        Ok(())
    }

    fn seg_dir(&self) -> Result<PathBuf> {
        self.dir
            .as_ref()
            .map(|d| d.join("segments"))
            .ok_or_else(|| Error::Internal("in-memory database has no segments".into()))
    }

    /// Writes one segment file from `blocks`, with the table's key sections.
    fn write_segment(
        &self,
        table: TableId,
        schema: &datafusion::arrow::datatypes::SchemaRef,
        blocks: impl IntoIterator<Item = Result<(UInt64Array, RecordBatch)>>,
    ) -> Result<Arc<Segment>> {
        let specs = key_specs(&self.catalog.read(), table);
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
        let id = self.next_segment_id.fetch_add(1, Ordering::Relaxed);
        let seg = segment::write(
            self.options.backend.as_ref(),
            &self.seg_dir()?,
            table,
            id,
            schema,
            blocks,
            &specs,
        )?;
        Ok(Arc::new(seg))
    }

    /// Seals the memtable, writes a manifest, cuts the WAL and deletes files nothing
    /// references any more. Callers hold `maintenance`.
    fn checkpoint_locked(&self) -> Result<()> {
        let Some(wal) = &self.wal else {
            return Ok(());
        };
        let dir = self.dir.clone().unwrap_or_default();
        // 1. The cut: no commit is between WAL append and apply while the gate is held.
        let (lsn, wal_seq, catalog, versions) = {
            let _gate = self.gate.write();
            let (lsn, seq) = wal.rotate()?;
            let catalog = self.catalog.read().clone();
            let versions: Vec<(TableId, Arc<TableStore>, Arc<TableVersion>)> = self
                .tables
                .read()
                .iter()
                .map(|(id, store)| (*id, store.clone(), store.freeze()))
                .collect();
            self.mem_estimate.store(0, Ordering::Relaxed);
            (lsn, seq, catalog, versions)
        };
        // 2. Seal each table's memtable: consecutive in-memory segments with one schema
        //    become one file holding all their rows (deleted ones too, so positions and
        //    deletion bitmaps carry over unchanged).
        let mut entries = Vec::with_capacity(versions.len());
        let mut swaps: Vec<Swap> = Vec::new();
        let mut wrote = false;
        for (id, store, version) in &versions {
            let mut segs = Vec::new();
            let all = version.segments();
            let mut i = 0;
            while i < all.len() {
                let s = &all[i];
                if !s.segment().in_memory() {
                    segs.push(SegmentEntry::new(
                        s.segment().id().unwrap_or_default(),
                        s.deletes(),
                    )?);
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
                wrote = true;
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
        if wrote {
            let seg_dir = self.seg_dir()?;
            self.options
                .backend
                .sync_dir(&seg_dir)
                .map_err(|e| Error::io(&seg_dir, e))?;
        }
        // 3. The manifest makes the checkpoint durable.
        let manifest = Manifest {
            lsn,
            wal_seq,
            next_segment_id: self.next_segment_id.load(Ordering::Relaxed),
            catalog: catalog.snapshot(),
            tables: entries,
        };
        manifest.write(self.options.backend.as_ref(), &dir)?;
        let referenced: HashSet<(TableId, SegmentId)> = manifest
            .tables
            .iter()
            .flat_map(|t| t.segments.iter().map(move |s| (t.id, s.id)))
            .collect();
        // 4. Readers now get the mapped files instead of the memtable.
        for (store, old, new) in swaps {
            store.replace(&old, new, None)?;
        }
        // 5. What the checkpoint made redundant.
        wal.remove_before(wal_seq)?;
        let mut keep = referenced;
        for store in self.tables.read().values() {
            for s in store.snapshot().segments() {
                if let Some(id) = s.segment().id() {
                    keep.insert((store.id(), id));
                }
            }
        }
        remove_unreferenced(self.options.backend.as_ref(), &self.seg_dir()?, &keep)
    }

    /// Merges small segments of table `id` and drops deleted rows (all of its segments
    /// when `force`). Returns whether anything changed. Callers hold `maintenance`.
    fn compact_table(&self, id: TableId, force: bool) -> Result<bool> {
        if self.dir.is_none() {
            return Ok(false);
        }
        let Some(store) = self.table(id) else {
            return Ok(false);
        };
        let version = store.snapshot();
        let sealed = version.segments();
        let mut changed = false;
        let mut i = 0;
        while i < sealed.len() {
            if sealed[i].segment().in_memory() {
                i += 1;
                continue;
            }
            // A run of sealed segments with one schema, up to the target size.
            let mut j = i;
            let mut live = 0;
            while j < sealed.len()
                && !sealed[j].segment().in_memory()
                && sealed[j].segment().schema() == sealed[i].segment().schema()
                && (j == i || live + sealed[j].live_count() <= COMPACT_TARGET_ROWS)
                && (force || j == i || sealed[j].live_count() < COMPACT_SMALL_ROWS)
            {
                live += sealed[j].live_count();
                j += 1;
            }
            let run = &sealed[i..j];
            let has_deletes = run.iter().any(|s| !s.deletes().is_empty());
            let worth = if force {
                run.len() > 1 || has_deletes
            } else {
                run.len() >= 4
                    || run.iter().any(|s| {
                        s.deletes().len() as f64
                            > COMPACT_DELETED_SHARE * s.segment().num_rows() as f64
                    })
            };
            if !worth {
                i = j.max(i + 1);
                continue;
            }
            for s in run {
                s.segment().verify_all()?;
            }
            let blocks = LiveBlocks::new(run.to_vec());
            let new = self.write_segment(id, run[0].segment().schema(), blocks)?;
            let old: Vec<Arc<Segment>> = run.iter().map(|s| s.segment().clone()).collect();
            let built_from: Vec<Arc<RoaringBitmap>> =
                run.iter().map(|s| s.deletes_arc().clone()).collect();
            if store.replace(&old, new, Some(&built_from))? {
                changed = true;
            }
            i = j;
        }
        Ok(changed)
    }

    fn apply(&self, ops: &[Op]) -> Result<()> {
        // Catalog changes are prepared on a copy and published after the data ops, so
        // a reader never sees a new table before its rows.
        // The catalog lock is held from copy to publish so concurrent commits (say, two
        // inserts that each fix a vector dimension) never lose each other's changes.
        let has_catalog_ops = ops.iter().any(|op| matches!(op, Op::Catalog(_)));
        let mut catalog_guard = has_catalog_ops.then(|| self.catalog.write());
        let mut catalog: Option<Catalog> = None;
        let mut dropped = Vec::new();
        let mut created = HashMap::new();
        for op in ops {
            if let (Op::Catalog(c), Some(guard)) = (op, &catalog_guard) {
                let cat = catalog.get_or_insert_with(|| Catalog::clone(guard));
                dropped.extend(cat.apply(c)?);
                if let CatalogOp::CreateTable(t) = c {
                    created.insert(t.id, Arc::new(TableStore::new(t.id)));
                }
            }
        }
        for op in ops {
            let store = |table: &TableId| {
                created
                    .get(table)
                    .cloned()
                    .or_else(|| self.table(*table))
                    .ok_or_else(|| Error::Internal(format!("table {table} has no storage")))
            };
            match op {
                Op::Catalog(_) => {}
                Op::Insert {
                    table,
                    first_row_id,
                    batch,
                } => store(table)?.apply_insert(*first_row_id, batch)?,
                Op::Delete { table, row_ids } => store(table)?.apply_delete(row_ids)?,
                Op::SetSequence {
                    table,
                    column,
                    value,
                } => store(table)?.apply_sequence(*column, *value),
            }
        }
        let mut tables = self.tables.write();
        tables.extend(created);
        for id in dropped {
            tables.remove(&id);
        }
        if let (Some(cat), Some(guard)) = (catalog, catalog_guard.as_mut()) {
            **guard = Arc::new(cat);
        }
        Ok(())
    }
}

/// The live rows of a run of segments as blocks of about `BLOCK_ROWS` rows, for
/// compaction. Full blocks pass through untouched (zero copy from the mapped files);
/// blocks thinned by deletes are combined.
struct LiveBlocks {
    run: Vec<SegmentRef>,
    seg: usize,
    block: usize,
    pending: Vec<(UInt64Array, RecordBatch)>,
    pending_rows: usize,
}

impl LiveBlocks {
    fn new(run: Vec<SegmentRef>) -> Self {
        LiveBlocks {
            run,
            seg: 0,
            block: 0,
            pending: Vec::new(),
            pending_rows: 0,
        }
    }

    fn flush(&mut self) -> Option<Result<(UInt64Array, RecordBatch)>> {
        if self.pending.is_empty() {
            return None;
        }
        let parts = std::mem::take(&mut self.pending);
        self.pending_rows = 0;
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

impl Iterator for LiveBlocks {
    type Item = Result<(UInt64Array, RecordBatch)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
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
            self.pending.push(live);
            if self.pending_rows >= BLOCK_ROWS / 2 {
                return self.flush();
            }
        }
    }
}

/// Deletes segment files in `dir` that `keep` does not list.
fn remove_unreferenced(
    backend: &dyn FileBackend,
    dir: &Path,
    keep: &HashSet<(TableId, SegmentId)>,
) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".seg")) else {
            continue;
        };
        let Some((t, s)) = stem.split_once('-') else {
            continue;
        };
        let (Ok(t), Ok(s)) = (t.parse::<TableId>(), s.parse::<SegmentId>()) else {
            continue;
        };
        if !keep.contains(&(t, s)) {
            let path = entry.path();
            backend.remove(&path).map_err(|e| Error::io(&path, e))?;
        }
    }
    Ok(())
}

fn check_format(dir: &Path) -> Result<()> {
    let path = dir.join(FORMAT_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let found = text
                .lines()
                .find_map(|l| l.strip_prefix("format "))
                .and_then(|v| v.trim().parse::<u32>().ok())
                .ok_or_else(|| Error::Corrupt {
                    path: path.clone(),
                    message: "no format line".into(),
                })?;
            if found != DB_FORMAT_VERSION {
                return Err(Error::FormatVersion {
                    path,
                    found,
                    supported: DB_FORMAT_VERSION,
                });
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let tmp = dir.join(format!("{FORMAT_FILE}.tmp"));
            std::fs::write(&tmp, format!("tarn database\nformat {DB_FORMAT_VERSION}\n"))
                .map_err(|e| Error::io(&tmp, e))?;
            File::open(&tmp)
                .and_then(|f| f.sync_all())
                .map_err(|e| Error::io(&tmp, e))?;
            std::fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e))?;
            crate::wal::sync_parent(&path)
        }
        Err(e) => Err(Error::io(&path, e)),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch};
    use datafusion::arrow::datatypes::DataType;
    use tarn_catalog::{CatalogOp, OrgRecord, TableDef, WorkspaceRecord};

    use super::*;
    use crate::stored_schema;
    use datafusion::arrow::array::Array;

    fn batch(values: &[i64]) -> RecordBatch {
        let schema = stored_schema(&[(1, DataType::Int64, true)]);
        let col: ArrayRef = Arc::new(Int64Array::from(values.to_vec()));
        RecordBatch::try_new(schema, vec![col]).expect("batch")
    }

    /// Org `o`, workspace `w` and table 1 `t` with `columns` and `unique` constraints.
    fn create_ops(
        columns: Vec<tarn_catalog::ColumnDef>,
        unique: Vec<(String, Vec<u32>)>,
    ) -> Vec<Op> {
        vec![
            Op::Catalog(CatalogOp::CreateOrg(OrgRecord {
                id: "o".into(),
                name: "o".into(),
                creator: "u".into(),
                created_at: String::new(),
            })),
            Op::Catalog(CatalogOp::CreateWorkspace(WorkspaceRecord {
                id: "w".into(),
                org_id: "o".into(),
                name: "w".into(),
                created_at: String::new(),
            })),
            Op::Catalog(CatalogOp::CreateTable(TableDef {
                id: 1,
                org_id: "o".into(),
                workspace_id: "w".into(),
                name: "t".into(),
                engine: true,
                columns,
                next_column_id: 2,
                unique_constraints: unique,
                created_at: String::new(),
            })),
        ]
    }

    fn setup(db: &Database) -> Result<()> {
        let mut ops = create_ops(vec![], vec![]);
        ops.push(Op::Insert {
            table: 1,
            first_row_id: 0,
            batch: batch(&[10, 20]),
        });
        db.commit(ops)
    }

    #[test]
    fn key_index_survives_delete_and_reinsert_in_one_commit() -> Result<()> {
        let db = Database::in_memory();
        setup(&db)?;
        let store = db
            .table(1)
            .ok_or_else(|| Error::Internal("no table".into()))?;
        let key = |v: i64| -> Vec<ArrayRef> { vec![Arc::new(Int64Array::from(vec![v]))] };
        assert_eq!(store.key_matches(&[1], &key(10))?, vec![Some(0)]);
        // UPDATE of row 0 keeping its key: the insert is applied before the delete.
        db.commit(vec![
            Op::Insert {
                table: 1,
                first_row_id: 2,
                batch: batch(&[10]),
            },
            Op::Delete {
                table: 1,
                row_ids: Arc::from(vec![0u64]),
            },
        ])?;
        assert_eq!(store.key_matches(&[1], &key(10))?, vec![Some(2)]);
        assert_eq!(store.snapshot().row_count(), 2);
        Ok(())
    }

    #[test]
    fn replay_rebuilds_the_same_state() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
        {
            let db = Database::open(dir.path(), StorageOptions::default())?;
            setup(&db)?;
            db.commit(vec![Op::Delete {
                table: 1,
                row_ids: Arc::from(vec![1u64]),
            }])?;
            assert!(matches!(
                Database::open(dir.path(), StorageOptions::default()),
                Err(Error::Locked { .. })
            ));
        }
        let db = Database::open(dir.path(), StorageOptions::default())?;
        let snap = db
            .table(1)
            .map(|s| s.snapshot())
            .ok_or_else(|| Error::Internal("no table".into()))?;
        assert_eq!(snap.row_count(), 1);
        assert!(snap.contains(0)? && !snap.contains(1)?);
        assert_eq!(snap.next_row_id(), 2);
        assert!(db.catalog().table("o", "w", "t").is_some());
        Ok(())
    }

    fn keyed_setup(db: &Database) -> Result<()> {
        db.commit(create_ops(
            vec![tarn_catalog::ColumnDef {
                id: 1,
                name: "k".into(),
                ty: tarn_catalog::SqlType::Int8,
                nullable: false,
                default: None,
                primary_key: true,
                unique: false,
                missing: None,
                vector_dim: None,
            }],
            vec![("t_pkey".into(), vec![1])],
        ))
    }

    fn insert_range(db: &Database, from: i64, to: i64) -> Result<()> {
        let next = db.table(1).map_or(0, |s| s.snapshot().next_row_id());
        db.commit(vec![Op::Insert {
            table: 1,
            first_row_id: next,
            batch: batch(&(from..to).collect::<Vec<_>>()),
        }])
    }

    fn key(v: i64) -> Vec<ArrayRef> {
        vec![Arc::new(Int64Array::from(vec![v]))]
    }

    fn store(db: &Database) -> Result<Arc<TableStore>> {
        db.table(1)
            .ok_or_else(|| Error::Internal("no table".into()))
    }

    fn values(db: &Database) -> Result<Vec<i64>> {
        let snap = store(db)?.snapshot();
        let mut out = Vec::new();
        for s in snap.segments() {
            for b in 0..s.segment().blocks().len() {
                let (_, batch) = s.live_block(b)?;
                let col = batch
                    .column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .ok_or_else(|| Error::Internal("not i64".into()))?;
                out.extend(col.values().iter().copied());
            }
        }
        Ok(out)
    }

    fn quiet() -> StorageOptions {
        StorageOptions {
            sync: SyncMode::Process,
            background: false,
            ..StorageOptions::default()
        }
    }

    fn seg_files(dir: &Path) -> usize {
        std::fs::read_dir(dir.join("segments")).map_or(0, |d| d.count())
    }

    #[test]
    fn checkpoint_seals_segments_cuts_the_log_and_reopens_from_them() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
        {
            let db = Database::open(dir.path(), quiet())?;
            keyed_setup(&db)?;
            for i in 0..10 {
                insert_range(&db, i * 20_000, (i + 1) * 20_000)?;
            }
            let ids: Vec<u64> = (0..200_000).step_by(7).collect();
            db.commit(vec![Op::Delete {
                table: 1,
                row_ids: ids.into(),
            }])?;
            db.checkpoint()?;
            let snap = store(&db)?.snapshot();
            assert!(snap.segments().iter().all(|s| !s.segment().in_memory()));
            assert_eq!(snap.memtable_bytes(), 0);
            assert!(seg_files(dir.path()) >= 1);
            // The log holds nothing before the checkpoint any more.
            let wal_files = std::fs::read_dir(dir.path().join("wal"))
                .map_err(|e| Error::io("wal", e))?
                .count();
            assert_eq!(wal_files, 1);
            // Deletes and inserts after the checkpoint go to the log.
            db.commit(vec![Op::Delete {
                table: 1,
                row_ids: vec![1u64].into(),
            }])?;
            insert_range(&db, 200_000, 200_010)?;
            // Keys are found in the sealed segments' key sections.
            assert_eq!(store(&db)?.key_matches(&[1], &key(8))?, vec![Some(8)]);
            assert_eq!(store(&db)?.key_matches(&[1], &key(7))?, vec![None]);
            std::mem::forget(db); // a crash: no checkpoint on close
        }
        // Reopen without the lock of the "crashed" process: copy the directory.
        let copy = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
        copy_dir(dir.path(), copy.path())?;
        let db = Database::open(copy.path(), quiet())?;
        let expected: Vec<i64> = (0..200_010)
            .filter(|v| *v >= 200_000 || (v % 7 != 0 && *v != 1))
            .collect();
        assert_eq!(values(&db)?, expected);
        assert_eq!(store(&db)?.snapshot().row_count(), expected.len() as u64);
        assert_eq!(
            store(&db)?.key_matches(&[1], &key(200_005))?,
            vec![Some(200_005)]
        );
        assert_eq!(store(&db)?.key_matches(&[1], &key(1))?, vec![None]);
        Ok(())
    }

    fn copy_dir(from: &Path, to: &Path) -> Result<()> {
        for entry in std::fs::read_dir(from).map_err(|e| Error::io(from, e))? {
            let entry = entry.map_err(|e| Error::io(from, e))?;
            let target = to.join(entry.file_name());
            if entry.path().is_dir() {
                std::fs::create_dir_all(&target).map_err(|e| Error::io(&target, e))?;
                copy_dir(&entry.path(), &target)?;
            } else {
                std::fs::copy(entry.path(), &target).map_err(|e| Error::io(&target, e))?;
            }
        }
        Ok(())
    }

    #[test]
    fn compaction_merges_small_segments_and_drops_deleted_rows() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
        let db = Database::open(dir.path(), quiet())?;
        keyed_setup(&db)?;
        for i in 0..6 {
            insert_range(&db, i * 1000, (i + 1) * 1000)?;
            db.checkpoint()?;
        }
        assert_eq!(store(&db)?.snapshot().segments().len(), 6);
        let ids: Vec<u64> = (0..6000).filter(|i| i % 2 == 0).collect();
        db.commit(vec![Op::Delete {
            table: 1,
            row_ids: ids.into(),
        }])?;
        let before = store(&db)?.snapshot().size_bytes();
        db.maintain()?;
        let snap = store(&db)?.snapshot();
        assert_eq!(snap.segments().len(), 1);
        assert!(snap.segments()[0].deletes().is_empty());
        assert!(snap.size_bytes() < before);
        assert_eq!(seg_files(dir.path()), 1);
        let expected: Vec<i64> = (0..6000).filter(|v| v % 2 == 1).collect();
        assert_eq!(values(&db)?, expected);
        assert_eq!(store(&db)?.key_matches(&[1], &key(4001))?, vec![Some(4001)]);
        drop(db);
        let db = Database::open(dir.path(), quiet())?;
        assert_eq!(values(&db)?, expected);
        Ok(())
    }

    #[test]
    fn deletes_during_compaction_are_carried_to_its_output() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
        let db = Database::open(dir.path(), quiet())?;
        keyed_setup(&db)?;
        for i in 0..3 {
            insert_range(&db, i * 100, (i + 1) * 100)?;
            db.checkpoint()?;
        }
        db.commit(vec![Op::Delete {
            table: 1,
            row_ids: vec![5u64].into(),
        }])?;
        // Compaction builds its output from this snapshot…
        let st = store(&db)?;
        let snap = st.snapshot();
        let run: Vec<SegmentRef> = snap.segments().to_vec();
        let new =
            db.inner
                .write_segment(1, run[0].segment().schema(), LiveBlocks::new(run.clone()))?;
        // …while a writer deletes more rows.
        db.commit(vec![Op::Delete {
            table: 1,
            row_ids: vec![6u64, 150, 299].into(),
        }])?;
        let old: Vec<Arc<Segment>> = run.iter().map(|s| s.segment().clone()).collect();
        let built: Vec<Arc<RoaringBitmap>> = run.iter().map(|s| s.deletes_arc().clone()).collect();
        assert!(st.replace(&old, new, Some(&built))?);
        let expected: Vec<i64> = (0..300).filter(|v| ![5, 6, 150, 299].contains(v)).collect();
        assert_eq!(values(&db)?, expected);
        assert_eq!(st.snapshot().row_count(), 296);
        Ok(())
    }

    #[test]
    fn flipped_bytes_are_corruption_naming_the_file() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
        {
            let db = Database::open(dir.path(), quiet())?;
            keyed_setup(&db)?;
            insert_range(&db, 0, 5000)?;
            db.checkpoint()?;
        }
        let seg = std::fs::read_dir(dir.path().join("segments"))
            .map_err(|e| Error::io("segments", e))?
            .next()
            .ok_or_else(|| Error::Internal("no segment".into()))?
            .map_err(|e| Error::io("segments", e))?
            .path();
        let good = std::fs::read(&seg).map_err(|e| Error::io(&seg, e))?;
        // In a data block: open works, reading the block is corruption, never data.
        let mut bad = good.clone();
        bad[2000] ^= 0x10;
        std::fs::write(&seg, &bad).map_err(|e| Error::io(&seg, e))?;
        {
            let db = Database::open(dir.path(), quiet())?;
            let err = values(&db).unwrap_err().to_string();
            assert!(err.contains("corruption") && err.contains(".seg"), "{err}");
        }
        // In the trailer: open refuses.
        let mut bad = good.clone();
        let n = bad.len();
        bad[n - 30] ^= 0x10;
        std::fs::write(&seg, &bad).map_err(|e| Error::io(&seg, e))?;
        let err = Database::open(dir.path(), quiet()).unwrap_err().to_string();
        assert!(err.contains("corruption") && err.contains(".seg"), "{err}");
        std::fs::write(&seg, &good).map_err(|e| Error::io(&seg, e))?;
        // In the manifest.
        let manifest = dir.path().join("MANIFEST");
        let mut m = std::fs::read(&manifest).map_err(|e| Error::io(&manifest, e))?;
        let mid = m.len() / 2;
        m[mid] ^= 0x01;
        std::fs::write(&manifest, &m).map_err(|e| Error::io(&manifest, e))?;
        let err = Database::open(dir.path(), quiet()).unwrap_err().to_string();
        assert!(
            err.contains("corruption") && err.contains("MANIFEST"),
            "{err}"
        );
        Ok(())
    }

    #[test]
    fn a_failing_disk_fails_cleanly_and_the_database_recovers() -> Result<()> {
        use crate::backend::{Fault, FaultyBackend};
        let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
        let disk = FaultyBackend::new();
        let options = StorageOptions {
            sync: SyncMode::Full,
            backend: Arc::new(disk.clone()),
            background: false,
            ..StorageOptions::default()
        };
        {
            let db = Database::open(dir.path(), options.clone())?;
            keyed_setup(&db)?;
            insert_range(&db, 0, 100)?;
            for fault in [Fault::NoSpace, Fault::WriteIo, Fault::SyncIo] {
                disk.set(fault);
                assert!(insert_range(&db, 1000, 1010).is_err(), "{fault:?}");
                assert!(db.checkpoint().is_err(), "{fault:?}");
                // Nothing of the failed statement is visible.
                assert_eq!(store(&db)?.snapshot().row_count(), 100);
                disk.clear();
            }
            insert_range(&db, 100, 200)?;
            db.checkpoint()?;
            insert_range(&db, 200, 210)?;
            std::mem::forget(db);
        }
        let copy = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
        copy_dir(dir.path(), copy.path())?;
        let db = Database::open(copy.path(), quiet())?;
        assert_eq!(values(&db)?, (0..210).collect::<Vec<_>>());
        Ok(())
    }
}
