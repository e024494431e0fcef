//! Building the search index files of sealed segments: one immutable file per (segment, index),
//! built off the write path by an [`IndexBuilder`] that a layer above supplies (storage
//! does not know what an HNSW graph is), written beside the segment, named by the
//! manifest, dropped with its segment or its index.
//!
//! A build writes `T-S.I.idx.tmp`, fsyncs it, renames it to `T-S.I.idx`, then attaches
//! it to the segment and writes a manifest that names it. A crash before that manifest
//! leaves a file nothing references; open deletes it and the next build makes it again.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tarn_catalog::{ColumnDef, IndexDef, IndexId, TableId};

use crate::backend::WriteFile;
use crate::index::{BuildProgress, built_indexes, live_index_ids};
use crate::index_file::IndexFile;
use crate::layout::index_file_name;
use crate::segment::Segment;
use crate::state::Inner;
use crate::{Error, Result};

impl Inner {
    /// `(segments with a file of index, sealed segments)` of table `table`; `None` when
    /// the index makes no per-segment files (or the table or index is gone). Segments
    /// kept in memory (an in-memory database) never get files and are not counted.
    pub(crate) fn index_coverage(&self, table: TableId, index: IndexId) -> Option<(usize, usize)> {
        let builder = self.options().index_builder.as_ref()?;
        let catalog = self.catalog();
        let def = catalog
            .indexes_of(table)
            .into_iter()
            .find(|i| i.id == index)?
            .clone();
        if !builder.builds(&def) {
            return None;
        }
        let store = self.table(table)?;
        let snapshot = store.snapshot();
        let sealed: Vec<_> = snapshot
            .segments()
            .iter()
            .filter(|s| !s.segment().in_memory())
            .collect();
        let indexed = sealed
            .iter()
            .filter(|s| s.segment().index(index).is_some())
            .count();
        Some((indexed, sealed.len()))
    }

    /// Builds the missing index files of the sealed segments of `table` (every table
    /// when `None`), attaches them and writes a manifest naming them. Returns the
    /// number of files built. Readers and writers go on meanwhile; the only lock held
    /// for longer than a pointer swap is the one that keeps two builds apart.
    pub(crate) fn build_indexes(
        &self,
        table: Option<TableId>,
        progress: &dyn Fn(BuildProgress),
    ) -> Result<usize> {
        let Some(builder) = self.options().index_builder.clone() else {
            return Ok(0);
        };
        if self.dir().is_none() {
            return Ok(0);
        }
        let _one_build = self.locks().index_build.lock();
        let catalog = self.catalog();
        let tables: Vec<TableId> = match table {
            Some(t) => vec![t],
            None => self.tables().keys().copied().collect(),
        };
        // What to build: (table, segment, index, column).
        let mut work: Vec<(TableId, Arc<Segment>, IndexDef, ColumnDef)> = Vec::new();
        for t in tables {
            let indexes = built_indexes(&catalog, t, builder.as_ref());
            if indexes.is_empty() {
                continue;
            }
            let Some(store) = self.table(t) else {
                continue;
            };
            for s in store.snapshot().segments() {
                if s.segment().in_memory() {
                    continue;
                }
                for (index, col) in &indexes {
                    if s.segment().index(index.id).is_none() {
                        work.push((t, s.segment().clone(), index.clone(), col.clone()));
                    }
                }
            }
        }
        if work.is_empty() {
            return Ok(0);
        }
        let seg_dir = self.seg_dir()?;
        let total = work.len();
        let mut attached = 0;
        let mut first_error = None;
        for (n, (t, segment, index, col)) in work.into_iter().enumerate() {
            if self.flags().stopping.load(Ordering::Acquire)
                || self.flags().closed.load(Ordering::Acquire)
            {
                return Err(Error::Closed);
            }
            let sid = segment.id().unwrap_or_default();
            if self.build_failed((t, sid, index.id))
                || live_index_ids(&self.catalog(), t, vec![index.id]).is_empty()
            {
                continue;
            }
            let path = seg_dir.join(index_file_name(t, sid, index.id));
            let tmp = path.with_extension("idx.tmp");
            let report = |rows_done: usize, rows: usize| {
                progress(BuildProgress {
                    segments_done: n,
                    segments: total,
                    rows_done,
                    rows,
                })
            };
            // A build stops when the worker stops, the database closes, or its index or
            // table is dropped (a dropped index's build would otherwise run on for
            // minutes, holding the one build slot and a file that is thrown away).
            let dropped = || live_index_ids(&self.catalog(), t, vec![index.id]).is_empty();
            let closing = || {
                self.flags().stopping.load(Ordering::Acquire)
                    || self.flags().closed.load(Ordering::Acquire)
            };
            let stop = || closing() || dropped();
            // Written under the temporary name, which checkpoints leave alone: a file
            // gets its final name only when it is attached (below), so no cleanup can
            // take a finished file that nothing references yet.
            let written = (|| -> Result<()> {
                let file = self
                    .options()
                    .backend
                    .create(&tmp)
                    .map_err(|e| Error::io(&tmp, e))?;
                let mut out = BufferedFile::new(file, &tmp);
                builder.build(&index, &col, &segment, &report, &stop, &mut out)?;
                out.finish()
            })();
            let result = written.and_then(|()| self.attach_built(t, &segment, &index, &tmp, &path));
            match result {
                Ok(true) => attached += 1,
                Ok(false) => {}
                Err(e) => {
                    let _ = self.options().backend.remove(&tmp);
                    if matches!(e, Error::Closed) {
                        if closing() {
                            return Err(e);
                        }
                        // Stopped because its index or table went: nothing to keep.
                        continue;
                    }
                    // Not retried until the next open: a file that cannot be built must
                    // not hold back every other index or the worker's other work.
                    tracing::warn!(table = t, segment = sid, index = index.id, error = %e, "index build failed");
                    self.note_failed_build((t, sid, index.id));
                    first_error.get_or_insert(e);
                }
            }
        }
        progress(BuildProgress {
            segments_done: total,
            segments: total,
            rows_done: 0,
            rows: 0,
        });
        if attached > 0 {
            let _m = self.maintenance_lock()?;
            self.checkpoint_locked()?;
        }
        match first_error {
            Some(e) if attached == 0 => Err(e),
            _ => Ok(attached),
        }
    }

    /// Gives a built file its final name and attaches it to `segment`, if the segment
    /// is still part of the table and the index still exists (else the file goes).
    /// Under the maintenance lock, so no checkpoint runs between the rename and the
    /// attach. Returns whether it was attached.
    fn attach_built(
        &self,
        table: TableId,
        segment: &Arc<Segment>,
        index: &IndexDef,
        tmp: &Path,
        path: &Path,
    ) -> Result<bool> {
        let _m = self.maintenance_lock()?;
        let catalog = self.catalog();
        let present = self.table(table).is_some_and(|store| {
            store
                .snapshot()
                .segments()
                .iter()
                .any(|s| Arc::ptr_eq(s.segment(), segment))
        });
        if !present || live_index_ids(&catalog, table, vec![index.id]).is_empty() {
            let _ = self.options().backend.remove(tmp);
            return Ok(false);
        }
        let backend = &self.options().backend;
        backend.rename(tmp, path).map_err(|e| Error::io(path, e))?;
        if let Some(dir) = path.parent() {
            backend.sync_dir(dir).map_err(|e| Error::io(dir, e))?;
        }
        segment.attach_index(Arc::new(IndexFile::open(index.id, path.to_path_buf())?));
        Ok(true)
    }
}

/// A backend file written through a buffer (builders write many small pieces), then
/// fsynced.
struct BufferedFile<'a> {
    file: Box<dyn WriteFile>,
    buf: Vec<u8>,
    path: &'a Path,
}

impl<'a> BufferedFile<'a> {
    fn new(file: Box<dyn WriteFile>, path: &'a Path) -> Self {
        BufferedFile {
            file,
            buf: Vec::with_capacity(1 << 20),
            path,
        }
    }

    fn finish(mut self) -> Result<()> {
        self.flush_buf().map_err(|e| Error::io(self.path, e))?;
        self.file.sync_data().map_err(|e| Error::io(self.path, e))
    }

    fn flush_buf(&mut self) -> std::io::Result<()> {
        if !self.buf.is_empty() {
            self.file.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }
}

impl std::io::Write for BufferedFile<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= 1 << 20 {
            self.flush_buf()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.flush_buf()
    }
}
