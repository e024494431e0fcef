//! How many rows of a join's probe side go into one step of the join, from the widest
//! row of its build side. DataFusion's joins repeat a build row once per probe row they
//! meet in a batch (a cross join copies it into an array as long as the probe batch),
//! so one build row of 24 MB (a three-million-element array) met by a batch of 8,192
//! probe rows asked for one allocation of 196 GB, and the process aborted before any
//! limit could be checked. Splitting the probe batches keeps each step's output near
//! [`STEP_BYTES`], whatever the width of the rows: the join runs (slower, under the
//! statement's timeout and `query_memory`) instead of aborting.
//!
//! A hash join's build row that matches many probe rows of one batch is repeated once
//! per match; splitting the probe side bounds that too, at the cost of smaller steps.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::DataType;

/// About the most bytes of repeated build rows one step of a join makes.
const STEP_BYTES: usize = 16 << 20;

/// The role a held node plays under a join (see the module documentation).
#[derive(Debug, Clone)]
pub(crate) enum JoinSide {
    /// The build side: the widest row of each batch is recorded.
    Build(Arc<AtomicUsize>),
    /// The probe side: batches are passed on in pieces of as many rows as the build
    /// side's widest row allows.
    Probe(Arc<AtomicUsize>),
}

/// One shared width for the two sides of a join.
pub(crate) fn sides() -> (JoinSide, JoinSide) {
    let widest = Arc::new(AtomicUsize::new(0));
    (JoinSide::Build(widest.clone()), JoinSide::Probe(widest))
}

impl JoinSide {
    /// Records `batch`'s widest row (build side).
    pub(crate) fn measure(&self, batch: &RecordBatch) {
        if let JoinSide::Build(widest) = self {
            widest.fetch_max(widest_row(batch), Ordering::Relaxed);
        }
    }

    /// The most probe rows one step may take (probe side), `None` for no limit.
    pub(crate) fn step_rows(&self) -> Option<usize> {
        match self {
            JoinSide::Probe(widest) => match widest.load(Ordering::Relaxed) {
                0 => None,
                w => Some((STEP_BYTES / w).max(1)),
            },
            JoinSide::Build(_) => None,
        }
    }
}

/// The bytes of the widest row of `batch`: the sum over its columns of each row's
/// values, from the offsets of variable-width columns (a list's elements at the
/// average width of its values) and the average width of any other column.
pub(crate) fn widest_row(batch: &RecordBatch) -> usize {
    let rows = batch.num_rows();
    if rows == 0 {
        return 0;
    }
    let mut fixed = 0usize;
    let mut per_row: Option<Vec<usize>> = None;
    for column in batch.columns() {
        let mut add = |f: &dyn Fn(usize) -> usize| {
            let widths = per_row.get_or_insert_with(|| vec![0; rows]);
            for (i, w) in widths.iter_mut().enumerate() {
                *w = w.saturating_add(f(i));
            }
        };
        match column.data_type() {
            DataType::Utf8 => {
                let o = column.as_string::<i32>().value_offsets();
                add(&|i| (o[i + 1] - o[i]).max(0) as usize);
            }
            DataType::Binary => {
                let o = column.as_binary::<i32>().value_offsets();
                add(&|i| (o[i + 1] - o[i]).max(0) as usize);
            }
            DataType::LargeUtf8 => {
                let o = column.as_string::<i64>().value_offsets();
                add(&|i| (o[i + 1] - o[i]).max(0) as usize);
            }
            DataType::LargeBinary => {
                let o = column.as_binary::<i64>().value_offsets();
                add(&|i| (o[i + 1] - o[i]).max(0) as usize);
            }
            DataType::Utf8View => {
                let v = column.as_string_view();
                add(&|i| v.views()[i] as u32 as usize);
            }
            DataType::BinaryView => {
                let v = column.as_binary_view();
                add(&|i| v.views()[i] as u32 as usize);
            }
            DataType::List(_) => {
                let l = column.as_list::<i32>();
                let each = element_bytes(l.values());
                let o = l.value_offsets();
                add(&|i| (o[i + 1] - o[i]).max(0) as usize * each);
            }
            DataType::LargeList(_) => {
                let l = column.as_list::<i64>();
                let each = element_bytes(l.values());
                let o = l.value_offsets();
                add(&|i| (o[i + 1] - o[i]).max(0) as usize * each);
            }
            _ => fixed = fixed.saturating_add(column.get_array_memory_size() / rows),
        }
    }
    per_row
        .and_then(|w| w.into_iter().max())
        .unwrap_or(0)
        .saturating_add(fixed)
}

/// The average bytes of one element of a list's values (at least one).
fn element_bytes(values: &dyn Array) -> usize {
    (values.get_array_memory_size() / values.len().max(1)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, ListArray, StringArray};
    use datafusion::arrow::datatypes::Int64Type;

    #[test]
    fn the_widest_row_is_found_among_narrow_ones() {
        let mut items = vec![Some(vec![Some(1i64)]); 99];
        items.push(Some((0..10_000).map(Some).collect()));
        let list = ListArray::from_iter_primitive::<Int64Type, _, _>(items);
        let text = StringArray::from_iter_values((0..100).map(|i| "x".repeat(i)));
        let ids = Int64Array::from_iter_values(0..100);
        let batch = RecordBatch::try_from_iter(vec![
            ("l", Arc::new(list) as _),
            ("t", Arc::new(text) as _),
            ("i", Arc::new(ids) as _),
        ])
        .unwrap();
        let w = widest_row(&batch);
        // 10,000 elements of about 8 bytes (more with the values' spare capacity), 99
        // bytes of text and an id.
        assert!((80_000..200_000).contains(&w), "{w}");
        let (build, probe) = sides();
        assert_eq!(probe.step_rows(), None);
        build.measure(&batch);
        assert_eq!(probe.step_rows(), Some(STEP_BYTES / w));
    }
}
