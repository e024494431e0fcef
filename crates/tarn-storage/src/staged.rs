//! Staged segments: rows written straight into segment files for a table that does not
//! exist yet (an upload of a file larger than memory), then attached to it by the one
//! commit that creates it ([`Op::Attach`](crate::Op::Attach)). Until then no reader sees
//! them and the log holds none of their bytes; a crash leaves files no manifest or
//! record names, which the next open deletes.
//!
//! Staged files are kept by checkpoints (which delete unreferenced files) until their
//! commit publishes them, or their [`Stager`] is dropped without one.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use datafusion::arrow::array::UInt64Array;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use tarn_catalog::TableId;

use crate::database::Database;
use crate::segment::{Segment, SegmentId};
use crate::segment_format::BLOCK_ROWS;
use crate::segment_writer::SegmentWriter;
use crate::staging::{STAGED_SEGMENT_ROWS, StagedTable};
use crate::state::Inner;
use crate::{Error, Result};

/// Rows being written for a table that its creating commit will attach them to
/// ([`Database::stage`]). Dropped before that commit, it deletes what it wrote.
pub struct Stager {
    inner: Arc<Inner>,
    table: TableId,
    schema: SchemaRef,
    writer: Option<(SegmentId, SegmentWriter)>,
    next_row_id: u64,
}

impl std::fmt::Debug for Stager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stager")
            .field("table", &self.table)
            .field("rows", &self.next_row_id)
            .finish()
    }
}

impl Database {
    /// A table id no other caller gets: CREATE TABLE and uploads take theirs here, so an
    /// upload can write its table's files before the table exists.
    pub fn reserve_table_id(&self) -> TableId {
        let committed = self.inner.catalog().next_table_id();
        let reserved = &self.inner.counters().reserved_table_id;
        let mut cur = reserved.load(Ordering::Relaxed);
        loop {
            let id = cur.max(committed).max(1);
            match reserved.compare_exchange(cur, id + 1, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return id,
                Err(v) => cur = v,
            }
        }
    }

    /// Starts staging rows of `schema` (fields named by column id, as for
    /// [`crate::Op::Insert`]) for table `table` (from [`Database::reserve_table_id`]),
    /// which does not exist yet. The commit that creates the table attaches them with
    /// [`crate::Op::Attach`].
    pub fn stage(&self, table: TableId, schema: SchemaRef) -> Result<Stager> {
        self.inner.check_open()?;
        let mut tables = self.inner.staging().tables.lock();
        if tables.contains_key(&table) || self.inner.tables().contains_key(&table) {
            return Err(Error::Internal(format!("table {table} is taken")));
        }
        tables.insert(table, StagedTable::default());
        Ok(Stager {
            inner: self.inner.clone(),
            table,
            schema,
            writer: None,
            next_row_id: 0,
        })
    }
}

impl Stager {
    /// The schema rows are staged with.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// Rows staged so far.
    pub fn rows(&self) -> u64 {
        self.next_row_id
    }

    fn register(&self, id: SegmentId, seg: Option<Arc<Segment>>) -> Result<()> {
        let mut tables = self.inner.staging().tables.lock();
        let staged = tables
            .get_mut(&self.table)
            .filter(|s| !s.claimed)
            .ok_or_else(|| Error::Internal("staged rows were abandoned".into()))?;
        match staged.segments.iter_mut().find(|(i, _)| *i == id) {
            Some(slot) => slot.1 = seg,
            None => staged.segments.push((id, seg)),
        }
        Ok(())
    }

    /// Appends `batch` (rows of the schema given to [`Database::stage`]).
    pub fn push(&mut self, batch: &RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.inner.check_open()?;
        if self.inner.flags().stopping.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        if batch.schema().fields() != self.schema.fields() {
            return Err(Error::Internal("staged rows of another schema".into()));
        }
        let Some(seg_dir) = self
            .inner
            .dir()
            .as_ref()
            .map(|d| d.join(crate::layout::SEGMENTS_DIR))
        else {
            // In memory: the rows are the segment.
            let id = self
                .inner
                .counters()
                .next_segment_id
                .fetch_add(1, Ordering::Relaxed);
            let ids = UInt64Array::from_iter_values(
                self.next_row_id..self.next_row_id + batch.num_rows() as u64,
            );
            self.register(id, Some(Arc::new(Segment::memory(ids, batch.clone()))))?;
            self.next_row_id += batch.num_rows() as u64;
            return Ok(());
        };
        let mut off = 0;
        while off < batch.num_rows() {
            if self.writer.is_none() {
                // Checked before each new file: after `close` the directory may be
                // another process's.
                self.inner.check_open()?;
                let id = self
                    .inner
                    .counters()
                    .next_segment_id
                    .fetch_add(1, Ordering::Relaxed);
                // Registered before the file exists, so no checkpoint deletes it.
                self.register(id, None)?;
                let w = SegmentWriter::create(
                    &self.inner.options().backend,
                    &seg_dir,
                    self.table,
                    id,
                    &self.schema,
                    &[],
                )?;
                self.inner
                    .flags()
                    .seg_dir_dirty
                    .store(true, Ordering::Release);
                self.writer = Some((id, w));
            }
            let Some((_, w)) = &mut self.writer else {
                return Err(Error::Internal("no staged segment writer".into()));
            };
            let room = (STAGED_SEGMENT_ROWS - w.rows()) as usize;
            let len = (batch.num_rows() - off).min(BLOCK_ROWS).min(room);
            let ids =
                UInt64Array::from_iter_values(self.next_row_id..self.next_row_id + len as u64);
            w.push(&ids, &batch.slice(off, len))?;
            self.next_row_id += len as u64;
            off += len;
            if w.rows() >= STAGED_SEGMENT_ROWS {
                self.seal()?;
            }
        }
        Ok(())
    }

    fn seal(&mut self) -> Result<()> {
        if let Some((id, w)) = self.writer.take() {
            let seg = Arc::new(w.finish()?);
            self.register(id, Some(seg))?;
        }
        Ok(())
    }

    /// Ends the rows: the last file is finished and every file made durable (its
    /// name too). Returns the op that attaches them, for the commit creating the
    /// table.
    pub fn finish(&mut self) -> Result<crate::Op> {
        self.seal()?;
        if let Some(dir) = self.inner.dir() {
            let seg_dir = dir.join(crate::layout::SEGMENTS_DIR);
            self.inner
                .options()
                .backend
                .sync_dir(&seg_dir)
                .map_err(|e| Error::io(&seg_dir, e))?;
        }
        let segments = self
            .inner
            .staging()
            .tables
            .lock()
            .get(&self.table)
            .map(|s| s.segments.iter().map(|(id, _)| *id).collect::<Vec<_>>())
            .ok_or_else(|| Error::Internal("staged rows were abandoned".into()))?;
        Ok(crate::Op::Attach {
            table: self.table,
            segments: Arc::from(segments),
            rows: self.next_row_id,
        })
    }
}

impl Drop for Stager {
    fn drop(&mut self) {
        let released = self.inner.flags().released.load(Ordering::Acquire);
        if let Some((_, w)) = &mut self.writer
            && released
        {
            w.keep_file();
        }
        // The writer removes its own unfinished file.
        self.writer = None;
        let mut tables = self.inner.staging().tables.lock();
        if tables.get(&self.table).is_some_and(|s| s.claimed) {
            // A commit took them: published, or (if it failed after logging) left for
            // the next open to attach or delete.
            return;
        }
        let Some(staged) = tables.remove(&self.table) else {
            return;
        };
        drop(tables);
        // Once the directory is another process's, its files are not ours to delete
        // (the next open deletes what is left).
        if self.inner.flags().released.load(Ordering::Acquire) {
            return;
        }
        if let Some(dir) = self.inner.dir() {
            for (id, _) in staged.segments {
                let path = dir
                    .join(crate::layout::SEGMENTS_DIR)
                    .join(crate::layout::segment_file_name(self.table, id));
                let _ = self.inner.options().backend.remove(&path);
            }
        }
    }
}
