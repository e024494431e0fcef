//! `engine_bytea_in(text)`: text read as a bytea as PostgreSQL's `byteain` reads it, for
//! every cast of text to bytea in a plan (`'\x4142'::bytea`, `$1::bytea`, a text compared
//! with a bytea). Arrow's cast took the text's UTF-8 bytes, so `'\x4142'::bytea` was six
//! bytes, not two. Writing into a bytea column reads text the same way
//! ([`bytea_from_text`]).
//!
//! PostgreSQL's two input forms: hex, `\x` then pairs of hex digits (whitespace allowed
//! between pairs), and escape, where `\\` is one backslash, `\ooo` (three octal digits,
//! the first 0–3) is that byte and every other character is its own UTF-8 bytes.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BinaryBuilder};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

/// The function's name.
pub(crate) const BYTEA_IN: &str = "engine_bytea_in";

/// See the module docs.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct ByteaIn {
    signature: Signature,
}

impl ByteaIn {
    pub(crate) fn new() -> Self {
        ByteaIn {
            signature: Signature::exact(vec![DataType::Utf8], Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for ByteaIn {
    fn name(&self) -> &str {
        BYTEA_IN
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Binary)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let text = datafusion::arrow::compute::cast(&arrays[0], &DataType::Utf8)?;
        let text = text.as_string::<i32>();
        let mut out = BinaryBuilder::with_capacity(text.len(), text.value_data().len());
        for v in text.iter() {
            match v {
                None => out.append_null(),
                Some(v) => out.append_value(bytea_from_text(v).map_err(crate::error::bad_request)?),
            }
        }
        let out: ArrayRef = Arc::new(out.finish());
        if scalar {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?));
        }
        Ok(ColumnarValue::Array(out))
    }
}

/// `s` read as PostgreSQL reads bytea input (see the module docs), or its error message.
pub(crate) fn bytea_from_text(s: &str) -> std::result::Result<Vec<u8>, String> {
    if let Some(hex) = s.strip_prefix("\\x") {
        let digit = |c: u8| match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            b'A'..=b'F' => Ok(c - b'A' + 10),
            _ => Err(format!(
                "invalid hexadecimal digit: \"{}\"",
                hex_char_at(hex, c)
            )),
        };
        let mut out = Vec::with_capacity(hex.len() / 2);
        let mut bytes = hex.bytes();
        while let Some(c) = bytes.next() {
            if matches!(c, b' ' | b'\t' | b'\n' | b'\r') {
                continue;
            }
            let high = digit(c)?;
            let low = match bytes.next() {
                Some(c) => digit(c)?,
                None => return Err("invalid hexadecimal data: odd number of digits".into()),
            };
            out.push(high << 4 | low);
        }
        return Ok(out);
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let octal = |c: u8, max: u8| (b'0'..=max).contains(&c);
        match b.get(i + 1..i + 4) {
            _ if b.get(i + 1) == Some(&b'\\') => {
                out.push(b'\\');
                i += 2;
            }
            Some(&[a, m, l]) if octal(a, b'3') && octal(m, b'7') && octal(l, b'7') => {
                out.push((a - b'0') << 6 | (m - b'0') << 3 | (l - b'0'));
                i += 4;
            }
            _ => return Err("invalid input syntax for type bytea".into()),
        }
    }
    Ok(out)
}

/// The character of `hex` that starts with byte `c` (the first such), for the message.
fn hex_char_at(hex: &str, c: u8) -> char {
    hex.char_indices()
        .find(|(i, _)| hex.as_bytes()[*i] == c)
        .map(|(_, ch)| ch)
        .unwrap_or(char::REPLACEMENT_CHARACTER)
}

#[cfg(test)]
mod tests {
    use super::bytea_from_text;

    #[test]
    fn reads_hex_and_escape_forms_as_postgresql() {
        assert_eq!(bytea_from_text("\\x4142").unwrap(), b"AB");
        assert_eq!(bytea_from_text("\\x41 42\n").unwrap(), b"AB");
        assert_eq!(bytea_from_text("\\x").unwrap(), b"");
        assert_eq!(bytea_from_text("abc").unwrap(), b"abc");
        assert_eq!(bytea_from_text("a\\\\b\\101").unwrap(), b"a\\bA");
        assert_eq!(bytea_from_text("é").unwrap(), "é".as_bytes());
        for (bad, msg) in [
            ("\\x414", "invalid hexadecimal data: odd number of digits"),
            ("\\x4g", "invalid hexadecimal digit: \"g\""),
            ("\\x4 1", "invalid hexadecimal digit: \" \""),
            ("a\\b", "invalid input syntax for type bytea"),
            ("\\400", "invalid input syntax for type bytea"),
            ("\\", "invalid input syntax for type bytea"),
        ] {
            assert_eq!(bytea_from_text(bad).unwrap_err(), msg, "{bad:?}");
        }
    }
}
