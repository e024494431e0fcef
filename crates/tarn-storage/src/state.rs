//! The state one open database shares between its handle, its committers, its index
//! builds and its background worker ([`Inner`]), with the options it was opened with.
//! Below the modules that act on it (`commit.rs`, `maintenance.rs`, `index_build.rs`,
//! `staged.rs`) and the handle that owns it (`database.rs`).

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use tarn_catalog::{Catalog, TableId};

use crate::backend::{FileBackend, StdBackend};
use crate::blobs::Blobs;
use crate::segment_format::KeySpec;
use crate::staging::Staging;
use crate::table::TableStore;
use crate::wal::{SyncMode, Wal};
use crate::{Error, Result};

/// Largest encoded catalog (it is rewritten whole into every manifest).
pub const MAX_CATALOG_BYTES: u64 = 256 << 20;

/// Default memtable budget: beyond it, a checkpoint seals the memtable into segments.
pub const DEFAULT_MEMTABLE_BYTES: u64 = 64 << 20;

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
    /// Builds per-segment search index files (supplied by the search layer); `None`:
    /// no index files are built and search scans exactly.
    pub index_builder: Option<Arc<dyn crate::IndexBuilder>>,
}

impl Default for StorageOptions {
    fn default() -> Self {
        StorageOptions {
            sync: SyncMode::Full,
            backend: Arc::new(StdBackend),
            memtable_bytes: DEFAULT_MEMTABLE_BYTES,
            background: true,
            index_builder: None,
        }
    }
}

/// What the background worker is asked to do.
#[derive(Default)]
struct WorkerState {
    shutdown: bool,
    wake: bool,
}

/// The state shared by the database handle, committers and the background worker,
/// grouped by what it is for: what the database holds, the locks that order its work,
/// the flags of its life cycle, its counters, and work left for the next checkpoint.
/// Its fields are private to this module: the modules that act on it reach them
/// through the methods below, which say what each use is for (publish a catalog, wake
/// the worker, poison writes, remember a failed build, …).
pub(crate) struct Inner {
    dir: Option<PathBuf>,
    wal: Option<Wal>,
    options: StorageOptions,
    /// The directory lock, released by `close`.
    lock: Mutex<Option<DirLock>>,
    catalog: RwLock<Arc<Catalog>>,
    tables: RwLock<HashMap<TableId, Arc<TableStore>>>,
    /// The bytes of workspace files.
    blobs: Blobs,
    /// Segments written for tables their commits have not created yet (uploads).
    staging: Staging,
    locks: Locks,
    flags: Flags,
    counters: Counters,
    worker: Mutex<WorkerState>,
    worker_cv: Condvar,
    /// Why writes stopped, after a logged commit failed to publish.
    poisoned: Mutex<Option<String>>,
    /// (table, segment, index) files whose build failed since open: not retried.
    failed_builds: Mutex<HashSet<(TableId, crate::SegmentId, tarn_catalog::IndexId)>>,
    /// Blobs whose records a commit deleted while the log was not fsynced at each
    /// commit (`SyncMode::Process`): removed by the next checkpoint, once a manifest
    /// without their records is durable (`flags.files_dropped` makes one due).
    blobs_dropped: Mutex<Vec<String>>,
    /// Segments attached (`Op::Attach`) by records after the last checkpoint's cut:
    /// kept until a manifest covers those records.
    attached_since_cut: Mutex<Vec<(TableId, crate::SegmentId)>>,
    /// An upper bound of each creator's share of the catalog (see
    /// `Inner::apply_catalog_ops`), by user id; empty while the catalog is too small for
    /// a share to matter.
    share_bounds: Mutex<HashMap<String, crate::commit::ShareBound>>,
}

/// The locks that order a database's work, in the order they are taken.
#[derive(Default)]
pub(crate) struct Locks {
    /// Serializes commits that change the catalog, from prepare to publish.
    pub(crate) catalog_commit: Mutex<()>,
    /// Commits hold it shared from prepare to publish; a checkpoint's cut holds it
    /// exclusively, so the cut sees exactly the records up to one LSN.
    pub(crate) gate: RwLock<()>,
    /// Held exclusively while a commit publishes its tables and catalog; readers that
    /// pin several tables hold it shared, so they see all of a commit or none of it.
    pub(crate) publish: RwLock<()>,
    /// Serializes checkpoints and compactions.
    pub(crate) maintenance: Mutex<()>,
    /// Keeps index builds apart (held for a whole build, unlike `maintenance`).
    pub(crate) index_build: Mutex<()>,
}

/// Where a database is in its life, and what a checkpoint owes.
#[derive(Default)]
pub(crate) struct Flags {
    /// Set by `close`: commits fail.
    pub(crate) closed: AtomicBool,
    /// Set while the worker is being stopped: long maintenance stops between blocks.
    pub(crate) stopping: AtomicBool,
    /// Set once `close` released the directory lock: maintenance must not touch the
    /// directory any more (another process may own it).
    pub(crate) released: AtomicBool,
    /// A segment file was written since `segments/` was last fsynced: its name must be
    /// made durable before a manifest names it.
    pub(crate) seg_dir_dirty: AtomicBool,
    /// A commit (or, at open, a replayed record) dropped a table that has segment
    /// files — DROP TABLE, or deleting its workspace or organization. The last
    /// manifest still names those files, so they and their index files stay on disk
    /// until a checkpoint writes a manifest without them: one is due (see
    /// `Inner::commit` and `Inner::maintain`), so that a delete gives its disk space
    /// back when it returns (no worker) or just after (the worker), not only at the
    /// next checkpoint some later write happens to cause, or at close.
    pub(crate) files_dropped: AtomicBool,
}

/// A database's counters.
pub(crate) struct Counters {
    pub(crate) next_segment_id: AtomicU64,
    /// Estimated memtable bytes since the last checkpoint.
    pub(crate) mem_estimate: AtomicU64,
    /// Upper bound of the catalog's encoded size (exact at open and each checkpoint).
    pub(crate) catalog_bytes: AtomicU64,
    /// The catalog's size limit ([`crate::MAX_CATALOG_BYTES`]; lowered by tests).
    pub(crate) max_catalog_bytes: AtomicU64,
    /// Table ids handed out by `reserve_table_id` are below this.
    pub(crate) reserved_table_id: AtomicU64,
}

/// The directory's `LOCK` file, locked. The lock is released explicitly when this is
/// dropped: a child process the host forks keeps a copy of the descriptor until it
/// executes, and closing ours alone would leave the directory locked until then (a
/// reopen right after `close` could fail with "locked by another process").
#[derive(Debug)]
pub(crate) struct DirLock(File);

impl Drop for DirLock {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

pub(crate) fn lock_dir(dir: &Path) -> Result<DirLock> {
    let lock_path = dir.join("LOCK");
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| Error::io(&lock_path, e))?;
    match lock.try_lock() {
        Ok(()) => Ok(DirLock(lock)),
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

impl Inner {
    pub(crate) fn new(
        dir: Option<PathBuf>,
        options: StorageOptions,
        lock: Option<DirLock>,
    ) -> Self {
        Inner {
            wal: None,
            lock: Mutex::new(lock),
            catalog: RwLock::new(Arc::new(Catalog::new())),
            tables: RwLock::new(HashMap::new()),
            blobs: Blobs::new(dir.as_deref(), options.backend.clone()),
            staging: Default::default(),
            locks: Locks::default(),
            flags: Flags::default(),
            counters: Counters {
                next_segment_id: AtomicU64::new(1),
                mem_estimate: AtomicU64::new(0),
                catalog_bytes: AtomicU64::new(0),
                max_catalog_bytes: AtomicU64::new(MAX_CATALOG_BYTES),
                reserved_table_id: AtomicU64::new(0),
            },
            worker: Mutex::new(WorkerState::default()),
            worker_cv: Condvar::new(),
            poisoned: Mutex::new(None),
            failed_builds: Mutex::new(HashSet::new()),
            blobs_dropped: Mutex::new(Vec::new()),
            attached_since_cut: Mutex::new(Vec::new()),
            share_bounds: Mutex::new(HashMap::new()),
            dir,
            options,
        }
    }

    /// The database's directory (none in memory).
    pub(crate) fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The write-ahead log (none in memory).
    pub(crate) fn wal(&self) -> Option<&Wal> {
        self.wal.as_ref()
    }

    /// Installs the log opened after recovery (at open, before the state is shared).
    pub(crate) fn set_wal(&mut self, wal: Wal) {
        self.wal = Some(wal);
    }

    /// The options the database was opened with.
    pub(crate) fn options(&self) -> &StorageOptions {
        &self.options
    }

    /// The bounds of the creators' shares of the catalog, held by a catalog commit
    /// (catalog commits are serialized, so the lock is never contended).
    pub(crate) fn share_bounds(
        &self,
    ) -> parking_lot::MutexGuard<'_, HashMap<String, crate::commit::ShareBound>> {
        self.share_bounds.lock()
    }

    /// The published catalog.
    pub(crate) fn catalog(&self) -> Arc<Catalog> {
        self.catalog.read().clone()
    }

    /// Publishes `catalog` (a commit, under `publish` and `catalog_commit`).
    pub(crate) fn publish_catalog(&self, catalog: Arc<Catalog>) {
        *self.catalog.write() = catalog;
    }

    /// Takes the published catalog out, leaving an empty one: for replay at open, which
    /// changes it in place (nothing else holds it yet) and publishes the result.
    pub(crate) fn take_catalog(&self) -> Arc<Catalog> {
        std::mem::take(&mut *self.catalog.write())
    }

    /// The published tables.
    pub(crate) fn tables(&self) -> RwLockReadGuard<'_, HashMap<TableId, Arc<TableStore>>> {
        self.tables.read()
    }

    /// The published tables, to change (a commit's publish, open, checkpoints).
    pub(crate) fn tables_mut(&self) -> RwLockWriteGuard<'_, HashMap<TableId, Arc<TableStore>>> {
        self.tables.write()
    }

    /// The bytes of workspace files.
    pub(crate) fn blobs(&self) -> &Blobs {
        &self.blobs
    }

    /// Segments written for tables their commits have not created yet.
    pub(crate) fn staging(&self) -> &Staging {
        &self.staging
    }

    /// The locks that order the database's work.
    pub(crate) fn locks(&self) -> &Locks {
        &self.locks
    }

    /// Where the database is in its life.
    pub(crate) fn flags(&self) -> &Flags {
        &self.flags
    }

    /// The database's counters.
    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Asks the background worker for a round of maintenance.
    pub(crate) fn wake_worker(&self) {
        let mut w = self.worker.lock();
        w.wake = true;
        self.worker_cv.notify_all();
    }

    /// Tells the background worker to stop (it returns from its next wait).
    pub(crate) fn shut_worker_down(&self) {
        let mut w = self.worker.lock();
        w.shutdown = true;
        self.worker_cv.notify_all();
    }

    /// The worker's wait between rounds: until woken, or `pause` (at once when woken
    /// and `eager`). False when the worker is to stop.
    pub(crate) fn wait_for_work(&self, pause: std::time::Duration, eager: bool) -> bool {
        let mut w = self.worker.lock();
        if !w.shutdown && (!w.wake || !eager) {
            self.worker_cv.wait_for(&mut w, pause);
        }
        if w.shutdown {
            return false;
        }
        w.wake = false;
        true
    }

    /// Why writes stopped, if a logged commit failed to publish.
    pub(crate) fn poisoned(&self) -> Option<String> {
        self.poisoned.lock().clone()
    }

    /// Stops writes for good: a logged commit failed to publish.
    pub(crate) fn poison(&self, why: String) {
        *self.poisoned.lock() = Some(why);
    }

    /// Whether the build of this (table, segment, index) file failed since open (it is
    /// not retried).
    pub(crate) fn build_failed(
        &self,
        file: (TableId, crate::SegmentId, tarn_catalog::IndexId),
    ) -> bool {
        self.failed_builds.lock().contains(&file)
    }

    /// Remembers that the build of this file failed.
    pub(crate) fn note_failed_build(
        &self,
        file: (TableId, crate::SegmentId, tarn_catalog::IndexId),
    ) {
        self.failed_builds.lock().insert(file);
    }

    /// Blobs whose records a commit deleted, to remove once a manifest without them
    /// is durable (see the field).
    pub(crate) fn drop_blobs_later(&self, blobs: impl IntoIterator<Item = String>) {
        self.blobs_dropped.lock().extend(blobs);
    }

    /// The blobs left by [`Inner::drop_blobs_later`], taken for removal.
    pub(crate) fn take_dropped_blobs(&self) -> Vec<String> {
        std::mem::take(&mut *self.blobs_dropped.lock())
    }

    /// Segments attached by records after the last checkpoint's cut (see the field).
    pub(crate) fn attached_since_cut(
        &self,
    ) -> parking_lot::MutexGuard<'_, Vec<(TableId, crate::SegmentId)>> {
        self.attached_since_cut.lock()
    }

    pub(crate) fn table(&self, id: TableId) -> Option<Arc<TableStore>> {
        self.tables.read().get(&id).cloned()
    }

    /// Lets the directory's lock go (`close`): another process may open it now.
    pub(crate) fn release_dir_lock(&self) {
        self.lock.lock().take();
    }

    /// The directory of segment files (none for an in-memory database).
    pub(crate) fn seg_dir(&self) -> Result<PathBuf> {
        self.dir
            .as_ref()
            .map(|d| d.join(crate::layout::SEGMENTS_DIR))
            .ok_or_else(|| Error::Internal("in-memory database has no segments".into()))
    }

    /// Takes the maintenance lock, unless `close` has given the directory up.
    pub(crate) fn maintenance_lock(&self) -> Result<parking_lot::MutexGuard<'_, ()>> {
        let m = self.locks.maintenance.lock();
        if self.flags.released.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(m)
    }
}

/// The encoded size of `catalog`, as a manifest holds it.
pub(crate) fn catalog_size(catalog: &Catalog) -> Result<u64> {
    tarn_catalog::encoded_len(&catalog.snapshot())
        .map_err(|e| Error::Internal(format!("encoding the catalog: {e}")))
}
