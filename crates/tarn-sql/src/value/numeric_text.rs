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

/// Numeric text in scientific notation (`1.5e2`, `-2E-3`) as plain decimal text
/// (`150`, `-0.002`), which Arrow's decimal parser reads; `None` for text that is not
/// in that notation (left to the parser, which reads or refuses it). PostgreSQL's
/// numeric input takes the exponent form. An exponent past ±1000 is left as it is: no
/// numeric Tarn stores has that many digits, and the parser's refusal says so.
pub(crate) fn plain_numeric_text(text: &str) -> Option<String> {
    let t = text.trim();
    let (mantissa, exponent) = t.split_once(['e', 'E'])?;
    let exponent: i64 = exponent.parse().ok()?;
    if exponent.abs() > 1000 {
        return None;
    }
    let (sign, digits) = match mantissa.as_bytes().first()? {
        b'-' => ("-", &mantissa[1..]),
        b'+' => ("", &mantissa[1..]),
        _ => ("", mantissa),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.is_empty() && frac.is_empty()
        || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
    {
        return None;
    }
    // All the digits, and where the point goes among them.
    let all: String = format!("{int}{frac}");
    let point = int.len() as i64 + exponent;
    let (int, frac) = if point <= 0 {
        (
            "0".to_string(),
            format!("{}{all}", "0".repeat(point.unsigned_abs() as usize)),
        )
    } else if point as usize >= all.len() {
        (
            format!("{all}{}", "0".repeat(point as usize - all.len())),
            String::new(),
        )
    } else {
        (
            all[..point as usize].to_string(),
            all[point as usize..].to_string(),
        )
    };
    Some(if frac.is_empty() {
        format!("{sign}{int}")
    } else {
        format!("{sign}{int}.{frac}")
    })
}

/// A text array with its values in scientific notation made plain
/// ([`plain_numeric_text`]); any other array as it is.
pub(crate) fn plain_numeric_array(
    a: datafusion::arrow::array::ArrayRef,
) -> datafusion::arrow::array::ArrayRef {
    use datafusion::arrow::array::{AsArray, StringArray};
    if a.data_type() != &DataType::Utf8 {
        return a;
    }
    let text = a.as_string::<i32>();
    if !text.iter().flatten().any(|t| t.contains(['e', 'E'])) {
        return a;
    }
    let plain: StringArray = text
        .iter()
        .map(|t| t.map(|t| plain_numeric_text(t).unwrap_or_else(|| t.to_string())))
        .collect();
    std::sync::Arc::new(plain)
}

#[cfg(test)]
mod plain_tests {
    use super::plain_numeric_text as plain;

    #[test]
    fn scientific_numeric_text_is_made_plain() {
        assert_eq!(plain("1.5e2").as_deref(), Some("150"));
        assert_eq!(plain(" -2E-3 ").as_deref(), Some("-0.002"));
        assert_eq!(plain("+.5e1").as_deref(), Some("5"));
        assert_eq!(plain("12.34e1").as_deref(), Some("123.4"));
        assert_eq!(plain("1e0").as_deref(), Some("1"));
        assert_eq!(plain("5.e-1").as_deref(), Some("0.5"));
        assert_eq!(plain("1.5"), None);
        assert_eq!(plain("e5"), None);
        assert_eq!(plain("1e"), None);
        assert_eq!(plain("1x5e2"), None);
        assert_eq!(plain("1e100000"), None);
    }
}
