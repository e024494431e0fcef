//! `length(bytea)` (and `char_length`, `character_length`, `octet_length`): the number
//! of bytes, as in PostgreSQL. DataFusion's `character_length` takes text only and cast a bytea to text
//! first, so `length(sha256('a'))` failed with "Encountered non UTF-8 data". Text and
//! everything else go to DataFusion's function as before.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// DataFusion's `character_length`, with bytes counted for bytea arguments.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct Length {
    inner: Arc<ScalarUDF>,
    signature: Signature,
}

impl Length {
    /// Over `inner`, DataFusion's `character_length` (which `length` and `char_length`
    /// name too).
    pub(crate) fn new(inner: Arc<ScalarUDF>) -> Self {
        Length {
            inner,
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

fn bytes(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView
    )
}

impl ScalarUDFImpl for Length {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        match arg_types {
            [t] if bytes(t) => Ok(vec![DataType::Binary]),
            [t @ (DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)] => {
                Ok(vec![t.clone()])
            }
            // Anything else is read as its text, as DataFusion's signature coerces it.
            [_] => Ok(vec![DataType::Utf8]),
            _ => datafusion::common::plan_err!(
                "{} takes one argument, not {}",
                self.name(),
                arg_types.len()
            ),
        }
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types {
            [t] if bytes(t) => Ok(DataType::Int32),
            _ => self.inner.return_type(arg_types),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        match args.args.as_slice() {
            [ColumnarValue::Array(a)] if bytes(a.data_type()) => {
                let a = datafusion::arrow::compute::cast(a, &DataType::Binary)?;
                Ok(ColumnarValue::Array(
                    datafusion::arrow::compute::kernels::length::length(&a)?,
                ))
            }
            [ColumnarValue::Scalar(s)] if bytes(&s.data_type()) => {
                let n = match s {
                    ScalarValue::Binary(v)
                    | ScalarValue::LargeBinary(v)
                    | ScalarValue::BinaryView(v) => v.as_ref().map(|b| b.len() as i32),
                    _ => None,
                };
                Ok(ColumnarValue::Scalar(ScalarValue::Int32(n)))
            }
            _ => self.inner.invoke_with_args(args),
        }
    }
}
