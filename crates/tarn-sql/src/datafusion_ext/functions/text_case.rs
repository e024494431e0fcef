//! `upper`, `lower` and `initcap` as PostgreSQL maps case: one character at a time, each
//! to one character. Rust's (and so DataFusion's) full mappings turn one character into
//! several (`upper('straße')` was `STRASSE`, `lower('İ')` an `i` and a combining dot);
//! PostgreSQL keeps a character whose case form is not a single character, so
//! `upper('straße')` is `STRAßE` and lengths do not change.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};

/// Which mapping.
#[derive(Debug, PartialEq, Eq, Hash, Clone, Copy)]
enum Case {
    Upper,
    Lower,
    /// The first letter of each run of letters and digits upper, the rest lower.
    Initcap,
}

/// DataFusion's `upper`, `lower` or `initcap` (its name, signature and types), mapping
/// case a character at a time.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct CaseMap {
    inner: Arc<ScalarUDF>,
    case: Case,
}

/// The three functions over DataFusion's, for those `get` finds.
pub(crate) fn case_maps(get: impl Fn(&str) -> Option<Arc<ScalarUDF>>) -> Vec<ScalarUDF> {
    [
        ("upper", Case::Upper),
        ("lower", Case::Lower),
        ("initcap", Case::Initcap),
    ]
    .into_iter()
    .filter_map(|(name, case)| {
        get(name).map(|inner| ScalarUDF::new_from_impl(CaseMap { inner, case }))
    })
    .collect()
}

fn upper(c: char) -> char {
    let mut m = c.to_uppercase();
    match (m.next(), m.next()) {
        (Some(u), None) => u,
        _ => c,
    }
}

fn lower(c: char) -> char {
    let mut m = c.to_lowercase();
    match (m.next(), m.next()) {
        (Some(l), None) => l,
        _ => c,
    }
}

/// `text` mapped by `case` onto `out`.
fn map(text: &str, case: Case, out: &mut String) {
    let mut in_word = false;
    for c in text.chars() {
        out.push(match case {
            Case::Upper => upper(c),
            Case::Lower => lower(c),
            Case::Initcap => {
                let first = !in_word;
                in_word = c.is_alphanumeric();
                if first { upper(c) } else { lower(c) }
            }
        });
    }
}

impl ScalarUDFImpl for CaseMap {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        // ASCII text maps alike either way, and DataFusion's loop over it is far faster
        // than a character at a time (a statement's timeout is checked between batches).
        if args.args.first().is_some_and(all_ascii) {
            return self.inner.invoke_with_args(args);
        }
        let return_type = args.return_field.data_type().clone();
        let case = self.case;
        let mut buf = String::new();
        let out = super::map_text(&args, 16, |v, b| {
            buf.clear();
            map(v, case, &mut buf);
            b.append_value(&buf);
            Ok(())
        })?;
        // The type DataFusion's function gives (text of the argument's kind).
        match (&out, &return_type) {
            (_, DataType::Utf8) => Ok(out),
            (ColumnarValue::Array(a), t) => Ok(ColumnarValue::Array(
                datafusion::arrow::compute::cast(a, t)?,
            )),
            (ColumnarValue::Scalar(s), t) => Ok(ColumnarValue::Scalar(s.cast_to(t)?)),
        }
    }
}

/// Whether every value of `v` is ASCII text (false for what is not text).
fn all_ascii(v: &ColumnarValue) -> bool {
    use datafusion::arrow::array::AsArray;
    use datafusion::common::ScalarValue;
    match v {
        ColumnarValue::Scalar(
            ScalarValue::Utf8(s) | ScalarValue::LargeUtf8(s) | ScalarValue::Utf8View(s),
        ) => s.as_deref().is_none_or(str::is_ascii),
        ColumnarValue::Array(a) => match a.data_type() {
            DataType::Utf8 => a.as_string::<i32>().values().is_ascii(),
            DataType::LargeUtf8 => a.as_string::<i64>().values().is_ascii(),
            DataType::Utf8View => a.as_string_view().iter().flatten().all(str::is_ascii),
            _ => false,
        },
        ColumnarValue::Scalar(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapped(t: &str, case: Case) -> String {
        let mut s = String::new();
        map(t, case, &mut s);
        s
    }

    #[test]
    fn one_character_each_as_postgresql() {
        assert_eq!(mapped("straße", Case::Upper), "STRAßE");
        assert_eq!(mapped("ÉTÉ İ", Case::Lower), "été İ");
        assert_eq!(mapped("ΐ", Case::Upper), "ΐ");
        assert_eq!(
            mapped("hello wORLD-x1y ßa", Case::Initcap),
            "Hello World-X1y ßa"
        );
        assert_eq!(mapped("éa", Case::Upper), "ÉA");
    }
}
