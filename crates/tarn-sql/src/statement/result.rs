//! What a statement or a batch hands back to its caller. A leaf.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Schema, SchemaRef};

/// What one statement produced.
#[derive(Debug, Clone)]
pub struct StatementResult {
    /// Output column names (PostgreSQL's); empty without a result set.
    pub columns: Vec<String>,
    /// The result set's schema, fields named as `columns`.
    pub schema: SchemaRef,
    /// Result rows; `None` for statements without a result set.
    pub batches: Option<Vec<RecordBatch>>,
    /// Rows written.
    pub rows_affected: u64,
    /// What the caller should know though the statement succeeded (PostgreSQL's
    /// NOTICE), such as an index build that goes on in the background.
    pub notices: Vec<String>,
}

impl StatementResult {
    pub(crate) fn none(rows_affected: u64) -> Self {
        StatementResult {
            columns: vec![],
            schema: Arc::new(Schema::empty()),
            batches: None,
            rows_affected,
            notices: Vec::new(),
        }
    }

    /// Rows in the result set.
    pub fn row_count(&self) -> u64 {
        self.batches
            .as_ref()
            .map_or(0, |b| b.iter().map(|b| b.num_rows() as u64).sum())
    }
}

/// Totals of a batch.
#[derive(Debug, Clone, Default)]
pub struct BatchTotals {
    /// Parameter sets run.
    pub statements: u64,
    /// Sum of rows written.
    pub rows_affected: u64,
    /// Sum of rows returned.
    pub row_count: u64,
    /// What the caller should know though the batch succeeded (an index build that
    /// goes on in the background), as `StatementResult::notices`.
    pub notices: Vec<String>,
}
