//! The database: the owner of one directory. It takes the directory lock, checks the
//! format, recovers (manifest, segments, write-ahead log) and wires the commit path
//! (`commit.rs`) and maintenance (`maintenance.rs`: checkpoints, compaction, the
//! background worker, file cleanup).
//!
//! The directory's layout is in `layout.rs`.
//!
//! Opening reads and verifies everything before it changes anything: a database that
//! fails to open leaves its files exactly as they were. A directory without a MANIFEST
//! is new only if it holds no data either; a new database gets its first WAL file and an
//! empty MANIFEST (both fsynced) before it is used, so from then on a missing MANIFEST
//! is damage, never "a new database".

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;

use parking_lot::Mutex;
use tarn_catalog::{Catalog, TableId};

use crate::backend::FileBackend;
use crate::blobs::Blobs;
use crate::commit::BuiltVersion;
use crate::index_file::IndexFile;
use crate::layout::{index_file_name, list_segment_files, remove_unreferenced, segment_file_name};
use crate::manifest::{MANIFEST_FILE, Manifest};
use crate::record::{self, Op};
use crate::segment::Segment;
use crate::segment::SegmentId;
use crate::state::{Inner, StorageOptions, catalog_size, lock_dir};
use crate::table::{SegmentRef, TableStore, TableVersion};
use crate::wal::Wal;
use crate::{Error, Result};

const FORMAT_FILE: &str = "TARN_FORMAT";
/// On-disk format version of a database directory.
pub const DB_FORMAT_VERSION: u32 = 3;
/// One database: its catalog and tables, durable through one write-ahead log and
/// checkpoints into segment files.
pub struct Database {
    pub(crate) inner: Arc<Inner>,
    worker: Mutex<Option<JoinHandle<()>>>,
    /// Held through `close`, so a second call returns once the first is done.
    closing: Mutex<()>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("dir", &self.inner.dir())
            .finish()
    }
}

impl Database {
    /// A database without files.
    pub fn in_memory() -> Self {
        Self::start(Inner::new(
            None,
            StorageOptions {
                background: false,
                ..StorageOptions::default()
            },
            None,
        ))
    }

    fn start(inner: Inner) -> Self {
        let inner = Arc::new(inner);
        // Open replayed the drop of a table whose files the manifest still names: the
        // worker checkpoints them away first thing.
        if inner.flags().files_dropped.load(Ordering::Acquire) {
            inner.wake_worker();
        }
        let worker = (inner.options().background && inner.dir().is_some()).then(|| {
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
            closing: Mutex::new(()),
        }
    }

    /// Opens or creates the database in `dir`: takes the directory lock, checks the
    /// format version, loads the last checkpoint and replays the write-ahead log after
    /// it. Everything is read and verified before anything is written or deleted, so a
    /// failed open changes nothing. Open time grows with the number of segments and the
    /// log since the last checkpoint, not with the table sizes or history.
    pub fn open(dir: &Path, options: StorageOptions) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let lock = lock_dir(dir)?;
        // 1. Read and verify; change nothing.
        let format_present = check_format(dir)?;
        let manifest = Manifest::read(dir)?;
        let seg_dir = dir.join(crate::layout::SEGMENTS_DIR);
        let wal_dir = dir.join(crate::layout::WAL_DIR);
        let (first_seq, after_lsn) = manifest.as_ref().map_or((1, 0), |m| (m.wal_seq, m.lsn));
        let mut recovered = Wal::recover(&wal_dir, first_seq, after_lsn, manifest.is_some())?;
        let seg_files = list_segment_files(&seg_dir)?;
        let new = manifest.is_none();
        let manifest = match manifest {
            Some(m) => m,
            // A new database has at most a first log file with nothing in it (its
            // creation stopped before the MANIFEST was written). Anything more means a
            // MANIFEST existed: without it, refuse rather than start afresh.
            None if recovered.has_groups || recovered.max_seq > 1 || !seg_files.is_empty() => {
                return Err(Error::Corrupt {
                    path: dir.join(MANIFEST_FILE),
                    message: format!(
                        "missing, but the directory holds data ({} segment files, \
                         write-ahead log files up to number {}{}); refusing to open it as a \
                         new database",
                        seg_files.len(),
                        recovered.max_seq,
                        if recovered.has_groups {
                            " with records"
                        } else {
                            ""
                        }
                    ),
                });
            }
            None => Manifest {
                lsn: 0,
                wal_seq: 1,
                next_segment_id: 1,
                ..Manifest::default()
            },
        };
        let manifest_path = dir.join(MANIFEST_FILE);
        let mut inner = Inner::new(Some(dir.to_path_buf()), options, Some(lock));
        let mut referenced = HashSet::new();
        let mut referenced_indexes = HashSet::new();
        {
            let mut tables = inner.tables_mut();
            for t in &manifest.tables {
                let mut segments = Vec::with_capacity(t.segments.len());
                for e in &t.segments {
                    let path = seg_dir.join(segment_file_name(t.id, e.id));
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
                    for &index in &e.indexes {
                        let path = seg_dir.join(index_file_name(t.id, e.id, index));
                        // An index file is derived data: one that cannot be mapped is
                        // built again rather than keeping the database shut.
                        match IndexFile::open(index, path) {
                            Ok(file) => {
                                seg.attach_index(Arc::new(file));
                                referenced_indexes.insert((t.id, e.id, index));
                            }
                            Err(err) => {
                                tracing::warn!(error = %err, "index file unreadable; it will be rebuilt");
                            }
                        }
                    }
                    segments.push(SegmentRef::new(Arc::new(seg), Arc::new(deletes)));
                }
                let version = TableVersion::from_parts(
                    segments,
                    t.next_row_id,
                    t.sequences.iter().copied().collect::<BTreeMap<_, _>>(),
                );
                tables.insert(t.id, Arc::new(TableStore::with_version(t.id, version)));
            }
        }
        let catalog = Catalog::from_snapshot(manifest.catalog.clone());
        inner
            .counters()
            .catalog_bytes
            .store(catalog_size(&catalog)?, Ordering::Relaxed);
        inner.publish_catalog(Arc::new(catalog));
        inner
            .counters()
            .next_segment_id
            .store(manifest.next_segment_id.max(1), Ordering::Relaxed);
        for entry in std::mem::take(&mut recovered.entries) {
            let bad = |message: String| Error::Corrupt {
                path: entry.path.to_path_buf(),
                message: format!("record {}: {message}", entry.lsn),
            };
            let ops = record::decode(&entry.body, bad)?;
            inner.replay(&ops).map_err(|e| match e {
                // Damage met in a segment while replaying names that segment.
                e @ (Error::Corrupt { .. } | Error::Io { .. }) => e,
                e => Error::Corrupt {
                    path: entry.path.to_path_buf(),
                    message: format!("record {} does not apply: {e}", entry.lsn),
                },
            })?;
        }
        // Segments replayed records attached (uploads since the manifest): the log
        // names them until the next checkpoint, also when their table was dropped
        // since (replay needs them again if this process dies before that).
        referenced.extend(inner.attached_since_cut().iter().copied());
        for (id, store) in inner.tables().iter() {
            for seg in store.snapshot().segments() {
                if let Some(s) = seg.segment().id() {
                    referenced.insert((*id, s));
                }
            }
        }
        // 2. Everything checked out: clean up and start writing.
        let backend = inner.options().backend.clone();
        if !format_present {
            write_format(backend.as_ref(), dir)?;
        }
        std::fs::create_dir_all(&seg_dir).map_err(|e| Error::io(&seg_dir, e))?;
        inner.blobs().create_dir(backend.as_ref(), dir)?;
        let wal = recovered.open(inner.options().sync, backend.clone())?;
        let wal_seq = wal.current_seq();
        inner.set_wal(wal);
        // Blobs no record names: an upload or a delete a crash interrupted. Best
        // effort: a blob that cannot be removed now is tried again at the next open.
        inner.blobs().sweep(&inner.catalog().file_ids());
        if new {
            Manifest {
                wal_seq,
                ..manifest
            }
            .write(backend.as_ref(), dir)?;
        } else {
            // Files the manifest does not reference: a checkpoint or compaction died
            // before its manifest was written.
            remove_unreferenced(
                backend.as_ref(),
                &seg_dir,
                &referenced,
                &referenced_indexes,
                SegmentId::MAX,
                true,
            )?;
        }
        Ok(Self::start(inner))
    }

    /// The database directory (`None` in memory).
    pub fn dir(&self) -> Option<&Path> {
        self.inner.dir()
    }

    /// The bytes of workspace files.
    pub fn blobs(&self) -> &Blobs {
        self.inner.blobs()
    }

    /// A snapshot of the catalog.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.inner.catalog()
    }

    /// The data of table `id`.
    pub fn table(&self, id: TableId) -> Option<Arc<TableStore>> {
        self.inner.table(id)
    }

    /// The current versions of tables `ids`, all as of one instant between commits (a
    /// commit that wrote several of them is seen wholly or not at all). Tables that do
    /// not exist are left out.
    pub fn pin(&self, ids: &[TableId]) -> HashMap<TableId, Arc<TableVersion>> {
        let _p = self.inner.locks().publish.read();
        let tables = self.inner.tables();
        ids.iter()
            .filter_map(|id| tables.get(id).map(|s| (*id, s.snapshot())))
            .collect()
    }

    /// Logs `ops` as one record and, once durable, publishes them (see `commit.rs`):
    /// everything that can fail is checked before the log is written, and readers see
    /// all of the ops or none. Nothing is applied when logging fails. Callers hold the
    /// locks that make the ops valid (the DDL lock for catalog changes, the writer lock
    /// of each table written) until this returns.
    pub fn commit(&self, ops: Vec<Op>) -> Result<()> {
        self.inner.commit(ops, Vec::new())
    }

    /// [`Database::commit`] of ops whose writer already applied them to versions of its
    /// tables (see [`BuiltVersion`]): those are published as they are when nothing
    /// changed the tables meanwhile, instead of applying the ops again.
    pub fn commit_built(&self, ops: Vec<Op>, built: Vec<BuiltVersion>) -> Result<()> {
        self.inner.commit(ops, built)
    }

    /// Seals the memtable into segment files, writes a new manifest and cuts the WAL.
    pub fn checkpoint(&self) -> Result<()> {
        let _m = self.inner.maintenance_lock()?;
        self.inner.checkpoint_locked()
    }

    /// Compacts table `id` now (VACUUM): seals its memtable, merges its segments and
    /// drops deleted rows, and checkpoints the result; then builds the index files of
    /// its new segments. Whether those were all built (not when the database began
    /// closing under the build, or a build failed: searches read those segments
    /// exactly until they are).
    pub fn vacuum(&self, id: TableId) -> Result<bool> {
        self.inner.check_open()?;
        {
            let _m = self.inner.maintenance_lock()?;
            self.inner.checkpoint_locked()?;
            self.inner.compact_table(id, true)?;
            self.inner.checkpoint_locked()?;
        }
        // The compaction is done and durable; a graph that fails to build is logged
        // and searched exactly meanwhile.
        match self.inner.build_indexes(Some(id), &|_| {}) {
            Ok(_) => Ok(true),
            Err(Error::Closed) => Ok(false),
            Err(e) => {
                tracing::warn!(table = id, error = %e, "index build after VACUUM failed");
                Ok(false)
            }
        }
    }

    /// Runs one round of background maintenance now (checkpoint if due, compaction of
    /// every table that needs it, index files of new segments). For tests and
    /// benchmarks.
    pub fn maintain(&self) -> Result<()> {
        self.inner.maintain(true)?;
        self.inner.build_indexes(None, &|_| {})?;
        Ok(())
    }

    /// How far index `index` of table `id` covers the table's sealed segments:
    /// `(segments with its file, sealed segments)`, `None` for an index without
    /// per-segment files. Fewer means a build is under way or pending (after CREATE
    /// INDEX, compaction or a crash); searches read the uncovered segments exactly.
    pub fn index_coverage(
        &self,
        id: TableId,
        index: tarn_catalog::IndexId,
    ) -> Option<(usize, usize)> {
        self.inner.index_coverage(id, index)
    }

    /// Seals table `id`'s memtable and builds the index files its sealed segments
    /// lack, reporting progress (what `CREATE INDEX` waits for). Returns the number of
    /// files built.
    pub fn build_indexes(
        &self,
        id: TableId,
        progress: &dyn Fn(crate::BuildProgress),
    ) -> Result<usize> {
        self.inner.check_open()?;
        {
            let _m = self.inner.maintenance_lock()?;
            self.inner.checkpoint_locked()?;
        }
        self.inner.build_indexes(Some(id), progress)
    }

    /// Whether [`Database::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.inner.flags().closed.load(Ordering::Acquire)
    }

    /// Closes the database: later commits fail with [`Error::Closed`], the background
    /// worker stops, commits in flight finish, a checkpoint seals the memtable (so the
    /// next open replays nothing) and the directory lock is released, so the directory
    /// can be opened again, by this process or another. Blocking (fsyncs): async callers
    /// run it on a blocking thread. Idempotent.
    pub fn close(&self) -> Result<()> {
        let _closing = self.closing.lock();
        if self.inner.flags().closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.stop_worker();
        // An index build (a statement's, running on after its caller) sees `closed` at
        // its next step and removes its temporary file: wait for that, so that no build
        // touches the directory once its lock is released.
        drop(self.inner.locks().index_build.lock());
        // Commits check `closed` under the gate: once we hold it, none is in flight and
        // none will start.
        drop(self.inner.locks().gate.write());
        // Held until the lock is released, and every maintenance entry point checks
        // `released` under it: nothing touches the directory after it is given up.
        let _m = self.inner.locks().maintenance.lock();
        let res = if self.inner.dir().is_some() && self.inner.has_unsealed_work() {
            self.inner.checkpoint_locked()
        } else {
            Ok(())
        };
        self.inner.release_dir_lock();
        self.inner.flags().released.store(true, Ordering::Release);
        res
    }

    fn stop_worker(&self) {
        self.inner.flags().stopping.store(true, Ordering::Release);
        self.inner.shut_worker_down();
        if let Some(h) = self.worker.lock().take() {
            // Maintenance checks `stopping` between blocks, so this is short.
            let _ = h.join();
        }
        self.inner.flags().stopping.store(false, Ordering::Release);
    }
}

impl Drop for Database {
    /// Dropping without [`Database::close`] stops the worker; then, unless this thread
    /// is a tokio runtime's (where blocking would stall other tasks), it checkpoints so
    /// the next open replays nothing. Skipping that checkpoint loses nothing: the log
    /// holds every commit.
    fn drop(&mut self) {
        if self.is_closed() {
            return;
        }
        self.stop_worker();
        let on_runtime = tokio::runtime::Handle::try_current().is_ok();
        if !on_runtime
            && self.inner.dir().is_some()
            && self.inner.has_unsealed_work()
            && self.inner.poisoned().is_none()
            && let Err(e) = self.checkpoint()
        {
            tracing::warn!("closing checkpoint failed (the log still holds every commit): {e}");
        }
    }
}

/// Reads `TARN_FORMAT`: `Ok(false)` when it is missing, an error when it names another
/// version or is unreadable.
fn check_format(dir: &Path) -> Result<bool> {
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
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io(&path, e)),
    }
}

fn write_format(backend: &dyn FileBackend, dir: &Path) -> Result<()> {
    let path = dir.join(FORMAT_FILE);
    let text = format!("tarn database\nformat {DB_FORMAT_VERSION}\n");
    crate::backend::write_atomic(backend, &path, text.as_bytes()).map_err(|e| Error::io(&path, e))
}

#[cfg(test)]
#[path = "database_tests.rs"]
pub(crate) mod tests;
