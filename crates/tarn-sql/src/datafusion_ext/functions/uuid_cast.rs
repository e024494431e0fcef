//! `x::uuid`, `CAST(x AS UUID)` and `UUID '…'`: DataFusion has no UUID type ("Unsupported
//! SQL type UUID"), and Tarn stores a `uuid` column as its canonical text (lowercase,
//! hyphenated), so a cast to uuid is a call of [`TO_UUID`], which checks the text and
//! writes it as a `uuid` column stores it. Braces, upper case and missing hyphens are
//! accepted, as PostgreSQL accepts them; anything else is PostgreSQL's `invalid input
//! syntax for type uuid`.

use datafusion::arrow::datatypes::DataType;

use crate::value::text_input::uuid_from_text;
use datafusion::common::Result as DfResult;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// Name of the function casts to uuid become (see `jsonb::rewrite_casts`).
pub const TO_UUID: &str = "tarn_to_uuid";

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
        super::map_text(&args, 36, |v, out| match uuid_from_text(v) {
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
