//! A run of stored rows with their row ids (`Chunk`), and how stored fields are named
//! (by column id, never by name). A leaf: segments and table versions both hold chunks.

use std::collections::HashMap;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::Field;
use tarn_catalog::ColumnId;

/// Name of the Arrow field that stores column `id` (stored data never uses names).
pub fn column_field_name(id: ColumnId) -> String {
    format!("c{id}")
}

fn field_column_id(field: &Field) -> Option<ColumnId> {
    field.name().strip_prefix('c')?.parse().ok()
}

/// An immutable run of rows with their row ids: a memtable run or one block of a
/// segment file (whose arrays point into the mapped file).
#[derive(Debug)]
pub struct Chunk {
    row_ids: UInt64Array,
    batch: RecordBatch,
    columns: HashMap<ColumnId, usize>,
}

impl Chunk {
    pub(crate) fn new(row_ids: UInt64Array, batch: RecordBatch) -> Self {
        let columns = batch
            .schema()
            .fields()
            .iter()
            .enumerate()
            .filter_map(|(i, f)| field_column_id(f).map(|id| (id, i)))
            .collect();
        Chunk {
            row_ids,
            batch,
            columns,
        }
    }

    /// Rows stored, live or not.
    pub fn num_rows(&self) -> usize {
        self.batch.num_rows()
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

    /// The stored batch (fields named by column id).
    pub fn batch(&self) -> &RecordBatch {
        &self.batch
    }

    /// Bytes held by the chunk's arrays.
    pub fn memory_size(&self) -> usize {
        self.batch.get_array_memory_size() + self.row_ids.get_array_memory_size()
    }
}
