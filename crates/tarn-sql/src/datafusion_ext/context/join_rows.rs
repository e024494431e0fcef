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
//!
//! A nested-loop or cross join also does work for every pair of a probe batch and the
//! whole build side in one step (its filter over 8,192 × 5,000,000 pairs ran for a
//! minute past the statement's timeout and its caller's disconnect, with no point to
//! stop at): there a step also takes at most [`STEP_PAIRS`] pairs, so the statement
//! yields, and can stop, between steps.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::arrow::array::RecordBatch;

use crate::value::sizes::columns_row_bytes;

/// About the most bytes of repeated build rows one step of a join makes.
const STEP_BYTES: usize = 16 << 20;

/// The most (probe row, build row) pairs one step of a nested-loop or cross join
/// takes: a few milliseconds of a join filter.
const STEP_PAIRS: usize = 1 << 22;

/// What the build side of a join has shown: its widest row, and (for joins that
/// visit every pair) its rows.
#[derive(Debug, Default)]
pub(crate) struct Build {
    widest: AtomicUsize,
    rows: AtomicUsize,
    every_pair: bool,
}

/// The role a held node plays under a join (see the module documentation).
#[derive(Debug, Clone)]
pub(crate) enum JoinSide {
    /// The build side: the widest row of each batch is recorded (and its rows).
    Build(Arc<Build>),
    /// The probe side: batches are passed on in pieces of as many rows as the build
    /// side's widest row (and rows) allow.
    Probe(Arc<Build>),
}

/// One shared record of the build side for the two sides of a join; `every_pair` for
/// a nested-loop or cross join.
pub(crate) fn sides(every_pair: bool) -> (JoinSide, JoinSide) {
    let build = Arc::new(Build {
        every_pair,
        ..Build::default()
    });
    (JoinSide::Build(build.clone()), JoinSide::Probe(build))
}

impl JoinSide {
    /// Records `batch`'s widest row (build side).
    pub(crate) fn measure(&self, batch: &RecordBatch) {
        if let JoinSide::Build(build) = self {
            build.widest.fetch_max(widest_row(batch), Ordering::Relaxed);
            if build.every_pair {
                build.rows.fetch_add(batch.num_rows(), Ordering::Relaxed);
            }
        }
    }

    /// The most probe rows one step may take (probe side), `None` for no limit.
    pub(crate) fn step_rows(&self) -> Option<usize> {
        match self {
            JoinSide::Probe(build) => {
                let by_bytes = match build.widest.load(Ordering::Relaxed) {
                    0 => None,
                    w => Some((STEP_BYTES / w).max(1)),
                };
                let by_pairs = match build.rows.load(Ordering::Relaxed) {
                    0 => None,
                    n => Some((STEP_PAIRS / n).max(1)),
                };
                match (by_bytes, by_pairs) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            }
            JoinSide::Build(_) => None,
        }
    }
}

/// The bytes of the widest row of `batch`: the sum over its columns of each row's
/// values (see [`columns_row_bytes`]).
pub(crate) fn widest_row(batch: &RecordBatch) -> usize {
    columns_row_bytes(batch.columns(), batch.num_rows())
        .into_iter()
        .max()
        .unwrap_or(0) as usize
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
        // One long text among many short ones in a list column: the row is as wide as
        // its text, not its count times the average element.
        let mut texts = datafusion::arrow::array::ListBuilder::new(
            datafusion::arrow::array::StringBuilder::new(),
        );
        for i in 0..1000 {
            for _ in 0..100 {
                texts.values().append_value("a");
            }
            if i == 7 {
                texts.values().append_value("x".repeat(1_000_000));
            }
            texts.append(true);
        }
        let wide = RecordBatch::try_from_iter(vec![("t", Arc::new(texts.finish()) as _)]).unwrap();
        assert!(widest_row(&wide) >= 1_000_000, "{}", widest_row(&wide));
        assert!(
            widest_row(&wide.slice(8, 10)) < 1_000,
            "{}",
            widest_row(&wide.slice(8, 10))
        );
        let (build, probe) = sides(false);
        assert_eq!(probe.step_rows(), None);
        build.measure(&batch);
        assert_eq!(probe.step_rows(), Some(STEP_BYTES / w));
        // A join of every pair takes at most STEP_PAIRS pairs a step.
        let (build, probe) = sides(true);
        let narrow = RecordBatch::try_from_iter(vec![(
            "n",
            Arc::new(datafusion::arrow::array::Int64Array::from(vec![1i64; 8192])) as _,
        )])
        .unwrap();
        for _ in 0..100 {
            build.measure(&narrow);
        }
        assert_eq!(probe.step_rows(), Some(STEP_PAIRS / 819_200));
    }
}
