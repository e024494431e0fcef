//! How many bytes each row of an Arrow array holds: what sized calls and aggregates
//! (`datafusion_ext::functions::bounded`) measure their inputs by, and what a join's
//! widest build row is found by (`datafusion_ext::context::join_rows`). A leaf.

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::datatypes::DataType;

use super::numeric_text::text_lengths;

/// About how many bytes each row of `a` holds (NULL: 0): text and binary exactly, a
/// list (or map) the bytes of its own elements, measured the same way, and 8 for its
/// offset, a struct the sum of its fields, a fixed-width value its width, anything else
/// its share of the bytes the array's visible rows take. Exact per row where it
/// matters: one row of a 24 MB text in a list among thousands of short ones is 24 MB,
/// not the list's average element.
pub(crate) fn array_row_bytes(a: &ArrayRef) -> Vec<u64> {
    use datafusion::arrow::array::OffsetSizeTrait;
    let rows = a.len();
    let nulls_zero = |mut v: Vec<u64>| {
        for (i, b) in v.iter_mut().enumerate() {
            if a.is_null(i) {
                *b = 0;
            }
        }
        v
    };
    /// Per row, the bytes of the child rows its offsets span.
    fn spans<O: OffsetSizeTrait>(offsets: &[O], child: &ArrayRef) -> Vec<u64> {
        // Elements of one width (a vector's floats): counted, not measured one by one.
        if let Some(width) = child.data_type().primitive_width() {
            return offsets
                .windows(2)
                .map(|w| ((w[1] - w[0]).as_usize() as u64).saturating_mul(width as u64) + 8)
                .collect();
        }
        let each = array_row_bytes(child);
        let mut prefix = Vec::with_capacity(each.len() + 1);
        let mut sum = 0u64;
        prefix.push(0);
        for b in each {
            sum = sum.saturating_add(b);
            prefix.push(sum);
        }
        let at = |o: O| prefix.get(o.as_usize()).copied().unwrap_or(sum);
        offsets
            .windows(2)
            .map(|w| at(w[1]).saturating_sub(at(w[0])).saturating_add(8))
            .collect()
    }
    if let Some(width) = a.data_type().primitive_width() {
        return nulls_zero(vec![width as u64; rows]);
    }
    match a.data_type() {
        DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView => text_lengths(
            &datafusion::logical_expr::ColumnarValue::Array(a.clone()),
            a.len(),
        )
        .unwrap_or_default()
        .into_iter()
        .map(Option::unwrap_or_default)
        .collect(),
        DataType::List(_) => {
            let l = a.as_list::<i32>();
            nulls_zero(spans(l.value_offsets(), l.values()))
        }
        DataType::LargeList(_) => {
            let l = a.as_list::<i64>();
            nulls_zero(spans(l.value_offsets(), l.values()))
        }
        DataType::Map(..) => {
            let m = a.as_map();
            let entries: ArrayRef = std::sync::Arc::new(m.entries().clone());
            nulls_zero(spans(m.value_offsets(), &entries))
        }
        DataType::FixedSizeList(..) => {
            let l = a.as_fixed_size_list();
            let n = l.value_length().max(0) as usize;
            if let Some(width) = l.value_type().primitive_width() {
                return nulls_zero(vec![(n * width) as u64; rows]);
            }
            let each = array_row_bytes(l.values());
            nulls_zero(
                (0..rows)
                    .map(|i| {
                        let from = (l.value_offset(i).max(0) as usize).min(each.len());
                        let to = from.saturating_add(n).min(each.len());
                        each[from..to].iter().sum::<u64>()
                    })
                    .collect(),
            )
        }
        DataType::Struct(_) => nulls_zero(columns_row_bytes(a.as_struct().columns(), rows)),
        _ => {
            // The bytes of the rows shown (a slice's share, not its whole buffers).
            let bytes = a.to_data().get_slice_memory_size().unwrap_or(0) as u64;
            let each = bytes.checked_div(rows as u64).unwrap_or(0).max(1);
            nulls_zero(vec![each; rows])
        }
    }
}

/// The bytes of each of `rows` rows over `columns` together: per row, the sum of its
/// values in each (see [`array_row_bytes`]); a struct's fields, a batch's columns.
pub(crate) fn columns_row_bytes(columns: &[ArrayRef], rows: usize) -> Vec<u64> {
    let mut total = vec![0u64; rows];
    for c in columns {
        for (t, b) in total.iter_mut().zip(array_row_bytes(c)) {
            *t = t.saturating_add(b);
        }
    }
    total
}
