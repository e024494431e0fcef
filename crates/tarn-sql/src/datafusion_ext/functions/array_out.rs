//! `engine_array_out(a)`: an array as PostgreSQL writes it as text (`{1,2}`,
//! `{a,"b c",NULL}`, `{{1,2},{3,4}}`), for casts of arrays to text. Arrow's cast wrote
//! `[1, 2]` and `[a, b c, ]`: NULL and `''` looked alike, and Tarn could not read back
//! its own output, since text to array reads PostgreSQL's form (`array_in`).
//!
//! Each element is written as Tarn casts that element's type to text; an element is
//! quoted when it is empty, is `NULL` in any case, or holds a brace, comma, quote,
//! backslash or white space, with `"` and `\` escaped by a backslash, as `array_out`
//! does.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

/// The function's name.
pub(crate) const ARRAY_OUT: &str = "engine_array_out";

/// See the module docs.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct ArrayOut {
    signature: Signature,
}

impl ArrayOut {
    pub(crate) fn new() -> Self {
        ArrayOut {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

/// Whether `t` is an array type this function writes.
pub(crate) fn is_array(t: &DataType) -> bool {
    matches!(
        t,
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..)
    )
}

impl ScalarUDFImpl for ArrayOut {
    fn name(&self) -> &str {
        ARRAY_OUT
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
        let a = &arrays[0];
        let mut out = StringBuilder::with_capacity(a.len(), a.len() * 8);
        let mut text = String::new();
        for i in 0..a.len() {
            if a.is_null(i) {
                out.append_null();
                continue;
            }
            text.clear();
            write_array(&a.slice(i, 1), 0, &mut text)?;
            out.append_value(&text);
        }
        let out: ArrayRef = Arc::new(out.finish());
        if scalar {
            Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?))
        } else {
            Ok(ColumnarValue::Array(out))
        }
    }
}

/// The elements of row `row` of list array `list`, or `None` for another type.
pub(crate) fn elements(list: &ArrayRef, row: usize) -> Option<ArrayRef> {
    match list.data_type() {
        DataType::List(_) => Some(list.as_list::<i32>().value(row)),
        DataType::LargeList(_) => Some(list.as_list::<i64>().value(row)),
        DataType::FixedSizeList(..) => Some(list.as_fixed_size_list().value(row)),
        _ => None,
    }
}

/// Writes row `row` of list array `list` (not NULL) to `out`.
fn write_array(list: &ArrayRef, row: usize, out: &mut String) -> Result<()> {
    let Some(items) = elements(list, row) else {
        return Ok(());
    };
    out.push('{');
    if is_array(items.data_type()) {
        for i in 0..items.len() {
            if i > 0 {
                out.push(',');
            }
            if items.is_null(i) {
                out.push_str("NULL");
            } else {
                write_array(&items, i, out)?;
            }
        }
    } else {
        let text = if matches!(items.data_type(), DataType::Float32 | DataType::Float64) {
            super::float_out::float_text(&items)?
        } else {
            datafusion::arrow::compute::cast(&items, &DataType::Utf8)?
        };
        let text = text.as_string::<i32>();
        for i in 0..text.len() {
            if i > 0 {
                out.push(',');
            }
            if text.is_null(i) {
                out.push_str("NULL");
            } else {
                write_element(text.value(i), out);
            }
        }
    }
    out.push('}');
    Ok(())
}

/// One element's text, quoted when `array_in` would read it otherwise.
fn write_element(e: &str, out: &mut String) {
    let quote = e.is_empty()
        || e.eq_ignore_ascii_case("NULL")
        || e.chars()
            .any(|c| matches!(c, '{' | '}' | ',' | '"' | '\\') || c.is_whitespace());
    if !quote {
        out.push_str(e);
        return;
    }
    out.push('"');
    for c in e.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_are_quoted_as_array_in_reads_them() {
        let mut s = String::new();
        for e in [
            "a",
            "",
            "NULL",
            "null",
            "b c",
            "x,y",
            "q\"t",
            "back\\slash",
            "{",
        ] {
            s.clear();
            write_element(e, &mut s);
            let want = match e {
                "a" => "a",
                "" => "\"\"",
                "NULL" => "\"NULL\"",
                "null" => "\"null\"",
                "b c" => "\"b c\"",
                "x,y" => "\"x,y\"",
                "q\"t" => "\"q\\\"t\"",
                "back\\slash" => "\"back\\\\slash\"",
                _ => "\"{\"",
            };
            assert_eq!(s, want, "{e:?}");
        }
    }
}
