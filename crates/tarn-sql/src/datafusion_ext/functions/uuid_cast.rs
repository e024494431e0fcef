//! `x::uuid`, `CAST(x AS UUID)` and `UUID '…'`: DataFusion has no UUID type ("Unsupported
//! SQL type UUID"), and Tarn stores a `uuid` column as its canonical text (lowercase,
//! hyphenated), so a cast to uuid is a call of [`TO_UUID`], which checks the text and
//! writes it as a `uuid` column stores it. Braces, upper case and missing hyphens are
//! accepted, as PostgreSQL accepts them; anything else is PostgreSQL's `invalid input
//! syntax for type uuid`.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::Result as DfResult;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// Name of the function casts to uuid become (see `jsonb::rewrite_casts`).
pub const TO_UUID: &str = "tarn_to_uuid";

/// A uuid as PostgreSQL reads one: 32 hex digits, in either case, optionally in braces,
/// with a hyphen allowed after any group of four digits; spaces around it are ignored.
pub(crate) fn parse(text: &str) -> Option<uuid::Uuid> {
    let t = text.trim();
    let t = match t.strip_prefix('{') {
        Some(inner) => inner.strip_suffix('}')?,
        None => t,
    };
    let mut value: u128 = 0;
    let mut digits: u32 = 0;
    let mut hyphen_ok = false;
    for c in t.chars() {
        if c == '-' {
            if !hyphen_ok || digits == 32 {
                return None;
            }
            hyphen_ok = false;
            continue;
        }
        let d = c.to_digit(16)?;
        if digits == 32 {
            return None;
        }
        value = value << 4 | u128::from(d);
        digits += 1;
        hyphen_ok = digits.is_multiple_of(4);
    }
    (digits == 32).then(|| uuid::Uuid::from_u128(value))
}

/// [`TO_UUID`]: text to a uuid's canonical text.
pub fn to_uuid_udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(ToUuid {
        signature: Signature::any(1, Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ToUuid {
    signature: Signature,
}

impl ScalarUDFImpl for ToUuid {
    fn name(&self) -> &str {
        TO_UUID
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> DfResult<DataType> {
        // As in PostgreSQL, only text (or an untyped NULL) casts to uuid.
        match &args[0] {
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null => {
                Ok(DataType::Utf8)
            }
            other => Err(crate::error::bad_request(format!(
                "cannot cast type {} to uuid",
                crate::datafusion_ext::functions::similarity::pg_type(other)
            ))),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        super::map_text(&args, 36, |v, out| match parse(v) {
            Some(u) => {
                out.append_value(u.hyphenated().to_string());
                Ok(())
            }
            None => Err(crate::error::bad_request(format!(
                "invalid input syntax for type uuid: {}",
                tarn_catalog::shown(v)
            ))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn reads_the_forms_postgres_reads() {
        let canonical = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11";
        for ok in [
            "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
            "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
            "a0eebc999c0b4ef8bb6d6bb9bd380a11",
            "a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11",
            "{a0eebc999c0b4ef8bb6d6bb9bd380a11}",
            " a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11 ",
        ] {
            assert_eq!(
                parse(ok).map(|u| u.hyphenated().to_string()).as_deref(),
                Some(canonical),
                "{ok}"
            );
        }
        for bad in [
            "",
            "x",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a111",
            "-a0eebc999c0b4ef8bb6d6bb9bd380a11",
            "a0eebc999c0b4ef8bb6d6bb9bd380a11-",
            "a0e-ebc999c0b4ef8bb6d6bb9bd380a11",
            "a0eebc99--9c0b-4ef8-bb6d-6bb9bd380a11",
            "{a0eebc999c0b4ef8bb6d6bb9bd380a11",
            "urn:uuid:a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        ] {
            assert!(parse(bad).is_none(), "{bad}");
        }
    }
}
