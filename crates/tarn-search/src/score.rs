//! Exact scores of stored vectors and bags, read in place from Arrow arrays (the
//! contiguous float32 values buffer; no per-row allocation).

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, FixedSizeListArray, GenericListArray, OffsetSizeTrait,
};
use datafusion::arrow::datatypes::{DataType, Float32Type};
use tarn_vector::{BagQuery, Query};

use crate::{Error, Result};

/// A query value of `<#>`: one vector, or a bag of vectors back to back.
#[derive(Debug, Clone, PartialEq)]
pub enum QueryValue {
    /// One vector (cosine similarity).
    Vector(Vec<f32>),
    /// A bag of `values.len() / dim` vectors (MaxSim).
    Bag {
        /// The vectors, back to back.
        values: Vec<f32>,
        /// Dimensions of each.
        dim: usize,
    },
}

impl QueryValue {
    /// Dimensions of the query's vectors.
    pub fn dim(&self) -> usize {
        match self {
            QueryValue::Vector(v) => v.len(),
            QueryValue::Bag { dim, .. } => *dim,
        }
    }
}

/// The vectors of an array of `FLOAT4[]` / `FLOAT4[n]` values, row by row.
pub(crate) enum VectorRows<'a> {
    Fixed {
        a: &'a FixedSizeListArray,
        values: &'a [f32],
        dim: usize,
    },
    List32 {
        a: &'a GenericListArray<i32>,
        values: &'a [f32],
    },
    List64 {
        a: &'a GenericListArray<i64>,
        values: &'a [f32],
    },
}

fn f32_values(values: &ArrayRef) -> Result<&[f32]> {
    match values.data_type() {
        DataType::Float32 => Ok(values.as_primitive::<Float32Type>().values()),
        other => Err(Error::BadRequest(format!(
            "expected float32 vectors, got {other}"
        ))),
    }
}

impl<'a> VectorRows<'a> {
    pub(crate) fn of(a: &'a ArrayRef) -> Result<VectorRows<'a>> {
        let (rows, child) = match a.data_type() {
            DataType::FixedSizeList(_, d) => {
                let f = a.as_fixed_size_list();
                let rows = VectorRows::Fixed {
                    a: f,
                    values: f32_values(f.values())?,
                    dim: *d as usize,
                };
                (rows, f.values())
            }
            DataType::List(_) => {
                let l = a.as_list::<i32>();
                let rows = VectorRows::List32 {
                    a: l,
                    values: f32_values(l.values())?,
                };
                (rows, l.values())
            }
            DataType::LargeList(_) => {
                let l = a.as_list::<i64>();
                let rows = VectorRows::List64 {
                    a: l,
                    values: f32_values(l.values())?,
                };
                (rows, l.values())
            }
            other => return Err(Error::BadRequest(format!("expected vectors, got {other}"))),
        };
        // A NULL row may sit over NULL elements (a join's or a UNION's NULL vector is
        // built that way); only a vector that is there must have all of its elements.
        if let Some(nulls) = child.logical_nulls().filter(|n| n.null_count() > 0) {
            for i in 0..rows.len() {
                if let Some(r) = rows.range(i)
                    && nulls.slice(r.start, r.len()).null_count() > 0
                {
                    return Err(Error::BadRequest("vector elements must not be NULL".into()));
                }
            }
        }
        Ok(rows)
    }

    /// Where row `i`'s elements are in the values buffer; `None` when the row is NULL.
    #[inline]
    fn range(&self, i: usize) -> Option<std::ops::Range<usize>> {
        fn list<O: OffsetSizeTrait>(
            a: &GenericListArray<O>,
            i: usize,
        ) -> Option<std::ops::Range<usize>> {
            if a.is_null(i) {
                return None;
            }
            let off = a.value_offsets();
            Some(off[i].as_usize()..off[i + 1].as_usize())
        }
        match self {
            VectorRows::Fixed { a, dim, .. } => {
                if a.is_null(i) {
                    return None;
                }
                let s = (a.offset() + i) * dim;
                Some(s..s + dim)
            }
            VectorRows::List32 { a, .. } => list(a, i),
            VectorRows::List64 { a, .. } => list(a, i),
        }
    }

    /// The vector of row `i`; `None` when NULL.
    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<&'a [f32]> {
        let values = match self {
            VectorRows::Fixed { values, .. }
            | VectorRows::List32 { values, .. }
            | VectorRows::List64 { values, .. } => *values,
        };
        values.get(self.range(i)?)
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            VectorRows::Fixed { a, .. } => a.len(),
            VectorRows::List32 { a, .. } => a.len(),
            VectorRows::List64 { a, .. } => a.len(),
        }
    }
}

fn mismatch(have: usize, want: usize) -> Error {
    Error::BadRequest(format!("expected {have} dimensions, not {want}"))
}

/// Scores the rows `rows` (positions in `stored`, a vector or bag column) against
/// `query`, calling `emit(row, score)` for each, in the order given. A NULL row, a zero
/// vector or a zero query scores `None`. Only the rows named are visited, so rescoring
/// a graph's k candidates costs k scores, not a pass over the block.
pub fn score_rows(
    stored: &ArrayRef,
    query: &QueryValue,
    rows: impl IntoIterator<Item = usize>,
    mut emit: impl FnMut(usize, Option<f32>),
) -> Result<()> {
    if stored.data_type() == &DataType::Null {
        rows.into_iter().for_each(|i| emit(i, None));
        return Ok(());
    }
    match query {
        QueryValue::Vector(q) => {
            let vectors = VectorRows::of(stored)?;
            let query = Query::new(q);
            for i in rows {
                match (vectors.get(i), &query) {
                    (Some(v), _) if v.len() != q.len() => return Err(mismatch(v.len(), q.len())),
                    (Some(v), Some(q)) => emit(i, q.cosine(v)),
                    _ => emit(i, None),
                }
            }
        }
        QueryValue::Bag { values, dim } => {
            let query = BagQuery::new(values, *dim);
            let bags = match stored.data_type() {
                DataType::List(_) => stored.as_list::<i32>(),
                other => {
                    return Err(Error::BadRequest(format!(
                        "expected bags of vectors, got {other}"
                    )));
                }
            };
            let inner: ArrayRef = bags.values().clone();
            let vectors = VectorRows::of(&inner)?;
            let offsets = bags.value_offsets();
            for i in rows {
                if bags.is_null(i) {
                    emit(i, None);
                    continue;
                }
                let (lo, hi) = (offsets[i] as usize, offsets[i + 1] as usize);
                let bag = || (lo..hi).filter_map(|j| vectors.get(j));
                if let Some(v) = bag().find(|v| v.len() != *dim) {
                    return Err(mismatch(v.len(), *dim));
                }
                emit(i, query.as_ref().and_then(|q| q.maxsim_of(bag())));
            }
        }
    }
    Ok(())
}
