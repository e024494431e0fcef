//! A table's rows: immutable chunks of Arrow columns with row ids and deletion masks,
//! published as versions that readers snapshot.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use datafusion::arrow::array::BooleanArray;
use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, UInt64Array};
use datafusion::arrow::buffer::BooleanBuffer;
use datafusion::arrow::compute::{concat_batches, filter_record_batch};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::row::{RowConverter, SortField};
use parking_lot::{Mutex, RwLock};
use tarn_catalog::{ColumnId, TableId};

use crate::{Error, Result};

/// Rows per chunk beyond which appends start a new chunk instead of merging.
const CHUNK_TARGET_ROWS: usize = 64 * 1024;

/// Name of the Arrow field that stores column `id` (stored data never uses names).
pub fn column_field_name(id: ColumnId) -> String {
    format!("c{id}")
}

fn field_column_id(field: &Field) -> Option<ColumnId> {
    field.name().strip_prefix('c')?.parse().ok()
}

/// An immutable run of rows. Deletes produce a new chunk with a new mask; the data
/// arrays are shared.
#[derive(Debug)]
pub struct Chunk {
    row_ids: UInt64Array,
    batch: RecordBatch,
    columns: HashMap<ColumnId, usize>,
    /// `None` when every row is live.
    live: Option<BooleanBuffer>,
    live_count: usize,
}

impl Chunk {
    fn new(row_ids: UInt64Array, batch: RecordBatch, live: Option<BooleanBuffer>) -> Self {
        let columns = batch
            .schema()
            .fields()
            .iter()
            .enumerate()
            .filter_map(|(i, f)| field_column_id(f).map(|id| (id, i)))
            .collect();
        let live_count = live
            .as_ref()
            .map_or(batch.num_rows(), |l| l.count_set_bits());
        Chunk {
            row_ids,
            batch,
            columns,
            live,
            live_count,
        }
    }

    /// Rows stored, live or not.
    pub fn num_rows(&self) -> usize {
        self.batch.num_rows()
    }

    /// Live rows.
    pub fn live_count(&self) -> usize {
        self.live_count
    }

    /// Row ids, ascending.
    pub fn row_ids(&self) -> &UInt64Array {
        &self.row_ids
    }

    /// The stored array of column `id`; `None` when the column was added after this
    /// chunk was written.
    pub fn column(&self, id: ColumnId) -> Option<&ArrayRef> {
        self.columns.get(&id).map(|&i| self.batch.column(i))
    }

    /// Liveness mask (`true` = live); `None` when all rows are live.
    pub fn live(&self) -> Option<&BooleanBuffer> {
        self.live.as_ref()
    }

    /// Bytes held by the chunk's arrays.
    pub fn memory_size(&self) -> usize {
        self.batch.get_array_memory_size() + self.row_ids.get_array_memory_size()
    }

    fn position(&self, row_id: u64) -> Option<usize> {
        self.row_ids.values().binary_search(&row_id).ok()
    }

    fn is_live(&self, i: usize) -> bool {
        self.live.as_ref().is_none_or(|l| l.value(i))
    }

    /// This chunk with deleted rows dropped, as (row ids, batch).
    fn compacted(&self) -> Result<(UInt64Array, RecordBatch)> {
        match &self.live {
            None => Ok((self.row_ids.clone(), self.batch.clone())),
            Some(mask) => {
                let mask = BooleanArray::new(mask.clone(), None);
                let ids = datafusion::arrow::compute::filter(&self.row_ids, &mask)?;
                let ids = ids
                    .as_any()
                    .downcast_ref::<UInt64Array>()
                    .cloned()
                    .ok_or_else(|| Error::Internal("row ids are not u64".into()))?;
                Ok((ids, filter_record_batch(&self.batch, &mask)?))
            }
        }
    }
}

/// One published state of a table. Readers hold an `Arc` of it for a whole statement.
#[derive(Debug, Default, Clone)]
pub struct TableVersion {
    chunks: Vec<Arc<Chunk>>,
    next_row_id: u64,
    live_rows: u64,
    sequences: BTreeMap<ColumnId, i64>,
}

impl TableVersion {
    /// The chunks, in row id order.
    pub fn chunks(&self) -> &[Arc<Chunk>] {
        &self.chunks
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

    /// Bytes held by the table's arrays.
    pub fn memory_size(&self) -> usize {
        self.chunks.iter().map(|c| c.memory_size()).sum()
    }

    fn locate(&self, row_id: u64) -> Option<(usize, usize)> {
        let ci = self
            .chunks
            .partition_point(|c| c.row_ids.values().last().is_some_and(|&l| l < row_id));
        let chunk = self.chunks.get(ci)?;
        chunk.position(row_id).map(|i| (ci, i))
    }

    /// Live positions of `row_ids`, grouped by chunk index.
    fn positions(&self, row_ids: &[u64]) -> BTreeMap<usize, Vec<usize>> {
        let mut by_chunk: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for &id in row_ids {
            if let Some((c, i)) = self.locate(id)
                && self.chunks[c].is_live(i)
            {
                by_chunk.entry(c).or_default().push(i);
            }
        }
        by_chunk
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
            next.chunks.push(Arc::new(Chunk::new(
                row_ids.slice(off, len),
                batch.slice(off, len),
                None,
            )));
            merge_tail(&mut next.chunks)?;
            off += len;
        }
        next.next_row_id = first_row_id + n as u64;
        next.live_rows += n as u64;
        Ok(next)
    }

    /// This version with `row_ids` deleted (ids that are not live are ignored).
    pub fn with_delete(&self, row_ids: &[u64]) -> TableVersion {
        let mut next = self.clone();
        for (c, positions) in self.positions(row_ids) {
            let chunk = &self.chunks[c];
            let mut mask: Vec<bool> = (0..chunk.num_rows()).map(|i| chunk.is_live(i)).collect();
            for &p in &positions {
                mask[p] = false;
            }
            next.live_rows -= positions.len() as u64;
            next.chunks[c] = Arc::new(Chunk::new(
                chunk.row_ids.clone(),
                chunk.batch.clone(),
                Some(BooleanBuffer::from(mask)),
            ));
        }
        next.chunks.retain(|c| c.live_count > 0);
        next
    }

    /// This version with the sequence of `column` advanced to at least `value`.
    pub fn with_sequence(&self, column: ColumnId, value: i64) -> TableVersion {
        let mut next = self.clone();
        let v = next.sequences.entry(column).or_insert(0);
        *v = (*v).max(value);
        next
    }

    /// Whether `row_id` is a live row.
    pub fn contains(&self, row_id: u64) -> bool {
        self.locate(row_id)
            .is_some_and(|(c, i)| self.chunks[c].is_live(i))
    }
}

/// Hash index over the values of a set of columns, for uniqueness checks.
struct KeyIndex {
    columns: Vec<ColumnId>,
    converter: RowConverter,
    map: HashMap<Box<[u8]>, u64>,
}

impl KeyIndex {
    /// Encoded keys of `arrays` rows; `None` for rows with a NULL key part (NULLs never
    /// conflict, as in PostgreSQL).
    fn keys(&self, arrays: &[ArrayRef]) -> Result<Vec<Option<Box<[u8]>>>> {
        let rows = self.converter.convert_columns(arrays)?;
        Ok((0..rows.num_rows())
            .map(|i| {
                if arrays.iter().any(|a| a.is_null(i)) {
                    None
                } else {
                    Some(rows.row(i).as_ref().into())
                }
            })
            .collect())
    }

    fn chunk_arrays(&self, chunk: &Chunk) -> Option<Vec<ArrayRef>> {
        self.columns
            .iter()
            .map(|c| chunk.column(*c).cloned())
            .collect()
    }

    fn add_chunk(&mut self, chunk: &Chunk) -> Result<()> {
        self.add_range(chunk, 0)
    }

    /// Adds the live rows of `chunk` whose row id is at least `from`.
    fn add_range(&mut self, chunk: &Chunk, from: u64) -> Result<()> {
        let Some(arrays) = self.chunk_arrays(chunk) else {
            return Ok(());
        };
        for (i, key) in self.keys(&arrays)?.into_iter().enumerate() {
            if let Some(key) = key
                && chunk.is_live(i)
                && chunk.row_ids.value(i) >= from
            {
                self.map.insert(key, chunk.row_ids.value(i));
            }
        }
        Ok(())
    }
}

/// A table's data: the current version plus key indexes. Writers are serialized by the
/// caller (one writer per table, held from validation until the commit is applied).
pub struct TableStore {
    id: TableId,
    current: RwLock<Arc<TableVersion>>,
    keys: Mutex<Vec<KeyIndex>>,
}

impl std::fmt::Debug for TableStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableStore").field("id", &self.id).finish()
    }
}

impl TableStore {
    pub(crate) fn new(id: TableId) -> Self {
        TableStore {
            id,
            current: RwLock::new(Arc::new(TableVersion::default())),
            keys: Mutex::new(Vec::new()),
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

    /// For each row of `arrays` (values of `columns`), the live row of the published
    /// table with the same key, if any. Rows with a NULL key part never match (as in
    /// PostgreSQL). The index is built on first use and kept up to date by commits.
    pub fn key_matches(
        &self,
        columns: &[ColumnId],
        arrays: &[ArrayRef],
    ) -> Result<Vec<Option<u64>>> {
        let mut indexes = self.keys.lock();
        let idx = match indexes.iter().position(|k| k.columns == columns) {
            Some(i) => i,
            None => {
                let fields = arrays
                    .iter()
                    .map(|a| SortField::new(a.data_type().clone()))
                    .collect();
                let mut index = KeyIndex {
                    columns: columns.to_vec(),
                    converter: RowConverter::new(fields)?,
                    map: HashMap::new(),
                };
                for chunk in self.snapshot().chunks() {
                    index.add_chunk(chunk)?;
                }
                indexes.push(index);
                indexes.len() - 1
            }
        };
        let index = &indexes[idx];
        Ok(index
            .keys(arrays)?
            .iter()
            .map(|k| k.as_ref().and_then(|k| index.map.get(k).copied()))
            .collect())
    }

    pub(crate) fn apply_insert(&self, first_row_id: u64, batch: &RecordBatch) -> Result<()> {
        let mut current = self.current.write();
        let next = current.with_insert(first_row_id, batch)?;
        let mut keys = self.keys.lock();
        for key in keys.iter_mut() {
            // The new rows are the tail of the new version.
            for c in next.chunks.iter().rev() {
                key.add_range(c, first_row_id)?;
                if c.row_ids
                    .values()
                    .first()
                    .is_some_and(|&f| f <= first_row_id)
                {
                    break;
                }
            }
        }
        *current = Arc::new(next);
        Ok(())
    }

    pub(crate) fn apply_delete(&self, row_ids: &[u64]) -> Result<()> {
        let mut current = self.current.write();
        let mut keys = self.keys.lock();
        if !keys.is_empty() {
            for (c, positions) in current.positions(row_ids) {
                let chunk = &current.chunks[c];
                for key in keys.iter_mut() {
                    let Some(arrays) = key.chunk_arrays(chunk) else {
                        continue;
                    };
                    let idx = UInt64Array::from_iter_values(positions.iter().map(|&p| p as u64));
                    let taken = arrays
                        .iter()
                        .map(|a| datafusion::arrow::compute::take(a, &idx, None))
                        .collect::<Result<Vec<_>, _>>()?;
                    // Only forget a key still pointing at the deleted row: an insert of the
                    // same key in the same commit may already have replaced it.
                    for (k, &p) in key.keys(&taken)?.into_iter().zip(&positions) {
                        let row_id = chunk.row_ids.value(p);
                        if let Some(k) = k
                            && key.map.get(&k) == Some(&row_id)
                        {
                            key.map.remove(&k);
                        }
                    }
                }
            }
        }
        let next = current.with_delete(row_ids);
        *current = Arc::new(next);
        Ok(())
    }

    pub(crate) fn apply_sequence(&self, column: ColumnId, value: i64) {
        let mut current = self.current.write();
        let next = current.with_sequence(column, value);
        *current = Arc::new(next);
    }

    /// Forgets key indexes (their columns changed); they are rebuilt on next use.
    pub fn reset_key_indexes(&self) {
        self.keys.lock().clear();
    }
}

/// Merges the last two chunks while they are of similar size (a binary counter), so
/// single-row inserts do not leave a long tail of tiny chunks and each row is copied
/// O(log CHUNK_TARGET_ROWS) times.
fn merge_tail(chunks: &mut Vec<Arc<Chunk>>) -> Result<()> {
    while chunks.len() >= 2 {
        let last = &chunks[chunks.len() - 1];
        let prev = &chunks[chunks.len() - 2];
        if last.live_count < prev.live_count
            || prev.live_count + last.live_count > CHUNK_TARGET_ROWS
            || prev.batch.schema() != last.batch.schema()
        {
            break;
        }
        let (ids_a, a) = prev.compacted()?;
        let (ids_b, b) = last.compacted()?;
        let batch = concat_batches(&a.schema(), [&a, &b])?;
        let ids = UInt64Array::from_iter_values(
            ids_a.values().iter().chain(ids_b.values().iter()).copied(),
        );
        chunks.truncate(chunks.len() - 2);
        chunks.push(Arc::new(Chunk::new(ids, batch, None)));
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
