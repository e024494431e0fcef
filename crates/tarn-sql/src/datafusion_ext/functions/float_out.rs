//! `engine_float_out(x)`: a float as PostgreSQL writes it as text, for casts of floats
//! to text (and the elements of float arrays written as text). Arrow's cast wrote `1.0`
//! for 1, `1e20` for 1e+20 and `inf` for Infinity.
//!
//! PostgreSQL (with its default `extra_float_digits = 1`) writes the shortest digits
//! that read back as the same float, in fixed notation when the decimal exponent is at
//! least -4 and below 15 (6 for `real`), else as `d.ddde+XX` with a signed exponent of
//! at least two digits; `NaN`, `Infinity` and `-Infinity` by name. Rust's `{:e}` gives
//! the same shortest digits.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Float32Type, Float64Type};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

/// The function's name.
pub(crate) const FLOAT_OUT: &str = "engine_float_out";

/// See the module docs.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct FloatOut {
    signature: Signature,
}

impl FloatOut {
    pub(crate) fn new() -> Self {
        FloatOut {
            signature: Signature::uniform(
                1,
                vec![DataType::Float32, DataType::Float64],
                Volatility::Immutable,
            ),
        }
    }
}

impl ScalarUDFImpl for FloatOut {
    fn name(&self) -> &str {
        FLOAT_OUT
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let out = float_text(&arrays[0])?;
        if scalar {
            Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?))
        } else {
            Ok(ColumnarValue::Array(out))
        }
    }
}

/// A float array written as text, NULL for NULL.
pub(crate) fn float_text(a: &ArrayRef) -> Result<ArrayRef> {
    let mut out = StringBuilder::with_capacity(a.len(), a.len() * 8);
    let mut text = String::new();
    for i in 0..a.len() {
        if a.is_null(i) {
            out.append_null();
            continue;
        }
        text.clear();
        match a.data_type() {
            DataType::Float64 => write_float8(a.as_primitive::<Float64Type>().value(i), &mut text),
            DataType::Float32 => write_float4(a.as_primitive::<Float32Type>().value(i), &mut text),
            other => return exec_err!("engine_float_out of {other}"),
        }
        out.append_value(&text);
    }
    Ok(Arc::new(out.finish()))
}

/// Writes a `double precision` as PostgreSQL does.
pub(crate) fn write_float8(v: f64, out: &mut String) {
    if !v.is_finite() {
        return write_special(v.is_nan(), v > 0.0, out);
    }
    write_shortest(&format!("{v:e}"), 15, out);
}

/// Writes a `real` as PostgreSQL does.
pub(crate) fn write_float4(v: f32, out: &mut String) {
    if !v.is_finite() {
        return write_special(v.is_nan(), v > 0.0, out);
    }
    write_shortest(&format!("{v:e}"), 6, out);
}

fn write_special(nan: bool, positive: bool, out: &mut String) {
    out.push_str(match (nan, positive) {
        (true, _) => "NaN",
        (false, true) => "Infinity",
        (false, false) => "-Infinity",
    });
}

/// Writes `sci` (Rust's shortest `{:e}` form: `-1.25e-7`, `1e20`) in fixed notation
/// when its exponent is in `-4..fixed_below`, else as PostgreSQL's `1.25e-07`.
fn write_shortest(sci: &str, fixed_below: i32, out: &mut String) {
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (negative, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    if negative {
        out.push('-');
    }
    if !(-4..fixed_below).contains(&exp) {
        out.push_str(mantissa);
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        let abs = exp.unsigned_abs();
        if abs < 10 {
            out.push('0');
        }
        out.push_str(&abs.to_string());
        return;
    }
    // The significant digits, without the point: d.ddd × 10^exp.
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if exp < 0 {
        out.push_str("0.");
        for _ in 0..(-exp - 1) {
            out.push('0');
        }
        out.push_str(&digits);
        return;
    }
    let whole = exp as usize + 1;
    if digits.len() <= whole {
        out.push_str(&digits);
        for _ in digits.len()..whole {
            out.push('0');
        }
    } else {
        out.push_str(&digits[..whole]);
        out.push('.');
        out.push_str(&digits[whole..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f8(v: f64) -> String {
        let mut s = String::new();
        write_float8(v, &mut s);
        s
    }

    fn f4(v: f32) -> String {
        let mut s = String::new();
        write_float4(v, &mut s);
        s
    }

    /// Each expected text is PostgreSQL 15's for the same value.
    #[test]
    fn floats_are_written_as_postgresql_writes_them() {
        assert_eq!(f8(1e15), "1e+15");
        assert_eq!(f8(123456789012345.6), "123456789012345.6");
        assert_eq!(f8(0.0001), "0.0001");
        assert_eq!(f8(0.00001), "1e-05");
        assert_eq!(f8(1.5e-300), "1.5e-300");
        assert_eq!(f8(1e100), "1e+100");
        assert_eq!(f8(2.5), "2.5");
        assert_eq!(f8(100.0), "100");
        assert_eq!(f8(-0.0), "-0");
        assert_eq!(f8(0.0), "0");
        assert_eq!(f8(-12.75), "-12.75");
        assert_eq!(f8(f64::NAN), "NaN");
        assert_eq!(f8(f64::NEG_INFINITY), "-Infinity");
        assert_eq!(f8(f64::INFINITY), "Infinity");
        assert_eq!(f8(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(f4(1e6), "1e+06");
        assert_eq!(f4(123456.0), "123456");
        assert_eq!(f4(1234567.0), "1.234567e+06");
        assert_eq!(f4(0.1), "0.1");
    }
}
