//! Text read as a number, sized first: Arrow parses numeric text through a recursive
//! parser, so text longer than [`MAX_NUMERIC_TEXT`] is refused before it is parsed —
//! by the write path for numeric columns and by `engine_numeric_input` for casts.

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::common::Result;
use datafusion::logical_expr::ColumnarValue;

/// Most characters of text read as a number (`'…'::numeric`, text into a numeric
/// column). Arrow parses numeric text through num-bigint's recursive parser: 600,000
/// digits overflowed a statement thread's stack and aborted the process. A numeric
/// holds 38 digits here; PostgreSQL's own limit is 131,072 before the point.
pub const MAX_NUMERIC_TEXT: u64 = 1000;

/// Refuses text in `arg` (of `rows` rows) longer than [`MAX_NUMERIC_TEXT`], before it
/// is read as a number; values of other types pass.
pub(crate) fn check_numeric_text(arg: &ColumnarValue, rows: usize) -> crate::error::Result<()> {
    if !matches!(
        arg.data_type(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    ) {
        return Ok(());
    }
    let lengths = text_lengths(arg, rows).map_err(|e| crate::Error::Internal(e.to_string()))?;
    match lengths
        .into_iter()
        .flatten()
        .find(|l| *l > MAX_NUMERIC_TEXT)
    {
        Some(len) => Err(crate::Error::BadRequest(format!(
            "invalid input syntax for type numeric: a value of {len} characters (numeric \
             text is at most {MAX_NUMERIC_TEXT} characters)"
        ))),
        None => Ok(()),
    }
}

/// The byte length of each row of a text (or binary) argument (`None`: NULL; `None`
/// for every row of an argument of another type), without making a constant into an
/// array (a 1 MB constant over 8,192 rows would be 8 GB).
pub(crate) fn text_lengths(arg: &ColumnarValue, rows: usize) -> Result<Vec<Option<u64>>> {
    use datafusion::common::ScalarValue as S;
    Ok(match arg {
        ColumnarValue::Scalar(s) => {
            let len = match s {
                S::Utf8(v) | S::LargeUtf8(v) | S::Utf8View(v) => v.as_ref().map(|s| s.len()),
                S::Binary(v) | S::LargeBinary(v) | S::BinaryView(v) => v.as_ref().map(Vec::len),
                _ => None,
            };
            vec![len.map(|l| l as u64); rows]
        }
        ColumnarValue::Array(a) => {
            let Ok(lengths) = datafusion::arrow::compute::kernels::length::length(a) else {
                return Ok(vec![None; a.len()]);
            };
            let lengths = datafusion::arrow::compute::cast(&lengths, &DataType::Int64)?;
            let lengths = lengths.as_primitive::<Int64Type>();
            (0..lengths.len())
                .map(|i| (!lengths.is_null(i)).then(|| lengths.value(i).max(0) as u64))
                .collect()
        }
    })
}
