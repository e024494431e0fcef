//! `engine_bytea_in(text)`: text read as a bytea as PostgreSQL's `byteain` reads it, for
//! every cast of text to bytea in a plan (`'\x4142'::bytea`, `$1::bytea`, a text compared
//! with a bytea). Arrow's cast took the text's UTF-8 bytes, so `'\x4142'::bytea` was six
//! bytes, not two. The reading itself is [`bytea_from_text`], which writes into a bytea
//! column use too.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BinaryBuilder};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

use crate::value::text_input::bytea_from_text;

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
