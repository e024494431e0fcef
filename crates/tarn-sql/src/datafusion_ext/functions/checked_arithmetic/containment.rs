//! `array_has_all` and `array_has_any` (`@>`, `<@`, `&&`) in time linear in their
//! arrays. DataFusion's compare every element of one array with every element of the
//! other: two arrays of 200,000 elements took minutes in one call that no timeout or
//! disconnect could stop. Large arrays are compared through a hash set of the first's
//! elements instead, with DataFusion's meaning (elements equal as its row format
//! compares them, NULL elements equal to each other, a NULL array NULL); small ones go
//! to DataFusion's own kernels.

use super::*;
use datafusion::arrow::array::{BooleanBufferBuilder, OffsetSizeTrait};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::row::{RowConverter, SortField};

/// Below this many element comparisons in a batch DataFusion's kernels answer.
const NESTED_LOOP_WORK: u128 = 4_000_000;

/// A list array's elements and the offsets of each row's elements in them.
fn list_parts(a: &ArrayRef) -> Option<(ArrayRef, Vec<usize>)> {
    fn offsets<O: OffsetSizeTrait>(o: &[O]) -> Vec<usize> {
        o.iter().map(|v| v.as_usize()).collect()
    }
    match a.data_type() {
        DataType::List(_) => {
            let l = a.as_list::<i32>();
            Some((l.values().clone(), offsets(l.value_offsets())))
        }
        DataType::LargeList(_) => {
            let l = a.as_list::<i64>();
            Some((l.values().clone(), offsets(l.value_offsets())))
        }
        DataType::FixedSizeList(_, n) => {
            let l = a.as_fixed_size_list();
            let n = usize::try_from(*n).ok()?;
            Some((l.values().clone(), (0..=l.len()).map(|i| i * n).collect()))
        }
        _ => None,
    }
}

/// `array_has_all` (`all`) or `array_has_any` of `args`, hashed when large.
pub(super) fn containment(
    inner: &ScalarUDF,
    args: ScalarFunctionArgs,
    all: bool,
) -> DfResult<ColumnarValue> {
    let scalar = args
        .args
        .iter()
        .all(|a| matches!(a, ColumnarValue::Scalar(_)));
    let arrays = ColumnarValue::values_to_arrays(&args.args)?;
    let (Some(h), Some(n)) = (arrays.first(), arrays.get(1)) else {
        return inner.invoke_with_args(args);
    };
    let (Some((h_values, h_offsets)), Some((n_values, n_offsets))) = (list_parts(h), list_parts(n))
    else {
        return inner.invoke_with_args(args);
    };
    let rows = h.len().min(n.len());
    let work: u128 = (0..rows)
        .map(|i| {
            let a = h_offsets[i + 1] - h_offsets[i];
            let b = n_offsets[i + 1] - n_offsets[i];
            a as u128 * b as u128
        })
        .sum();
    if work <= NESTED_LOOP_WORK || h_values.data_type() != n_values.data_type() {
        return inner.invoke_with_args(args);
    }
    let converter = RowConverter::new(vec![SortField::new(h_values.data_type().clone())])?;
    let h_rows = converter.convert_columns(&[h_values])?;
    let n_rows = converter.convert_columns(&[n_values])?;
    let nulls = NullBuffer::union(h.nulls(), n.nulls());
    let mut out = BooleanBufferBuilder::new(rows);
    let mut set = std::collections::HashSet::new();
    for i in 0..rows {
        if i % 256 == 0 {
            crate::datafusion_ext::context::deadline::check()?;
        }
        if nulls.as_ref().is_some_and(|b| b.is_null(i)) {
            out.append(false);
            continue;
        }
        set.clear();
        set.extend((h_offsets[i]..h_offsets[i + 1]).map(|j| h_rows.row(j)));
        let mut needles = (n_offsets[i]..n_offsets[i + 1]).map(|j| n_rows.row(j));
        out.append(if all {
            needles.all(|r| set.contains(&r))
        } else {
            needles.any(|r| set.contains(&r))
        });
    }
    columnar(Arc::new(BooleanArray::new(out.finish(), nulls)), scalar)
}

/// PostgreSQL's `levenshtein` (fuzzystrmatch) takes arguments of at most 255
/// characters: its cost is the product of their lengths, and two of 250,000 took
/// minutes in one call no timeout could stop.
pub(super) fn levenshtein(inner: &ScalarUDF, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
    const MAX: usize = 255;
    for a in &args.args {
        let too_long = |s: &str| s.len() > MAX && s.chars().count() > MAX;
        let long = match a {
            ColumnarValue::Scalar(s) => match s {
                ScalarValue::Utf8(Some(s))
                | ScalarValue::LargeUtf8(Some(s))
                | ScalarValue::Utf8View(Some(s)) => too_long(s),
                _ => false,
            },
            ColumnarValue::Array(arr) => match arr.data_type() {
                DataType::Utf8 => arr.as_string::<i32>().iter().flatten().any(too_long),
                DataType::LargeUtf8 => arr.as_string::<i64>().iter().flatten().any(too_long),
                DataType::Utf8View => arr.as_string_view().iter().flatten().any(too_long),
                _ => false,
            },
        };
        if long {
            return exec_err!("levenshtein argument exceeds maximum length of {MAX} characters");
        }
    }
    inner.invoke_with_args(args)
}
