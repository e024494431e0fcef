//! Scalar and aggregate functions Tarn adds to DataFusion or wraps, and the expression
//! planners that turn operators into them.

pub(crate) mod any_large;
pub(crate) mod array_in;
pub(crate) mod array_out;
pub(crate) mod bounded;
pub(crate) mod bounded_aggregate;
pub(crate) mod bytea_in;
pub(crate) mod checked_arithmetic;
pub(crate) mod clock;
pub(crate) mod const_array;
pub(crate) mod float_out;
pub(crate) mod hybrid;
pub(crate) mod interval_key;
pub(crate) mod jsonb;
pub(crate) mod length;
pub(crate) mod named_cast;
pub(crate) mod numeric_input;
pub(crate) mod param_array;
pub(crate) mod param_text;
pub(crate) mod pg_typeof;
pub(crate) mod similarity;
pub(crate) mod similarity_planner;
pub(crate) mod text_case;
pub(crate) mod text_concat;
pub(crate) mod text_search;
pub(crate) mod uuid_cast;

/// The text each value of a one-argument call's argument (cast to text) becomes under
/// `f`, which writes it to the builder (NULL stays NULL; a constant gives a constant):
/// the body of the casts to types stored as canonical text (`jsonb`, `uuid`).
pub(crate) fn map_text(
    args: &datafusion::logical_expr::ScalarFunctionArgs,
    bytes_per_value: usize,
    mut f: impl FnMut(
        &str,
        &mut datafusion::arrow::array::StringBuilder,
    ) -> datafusion::common::Result<()>,
) -> datafusion::common::Result<datafusion::logical_expr::ColumnarValue> {
    use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
    use datafusion::logical_expr::ColumnarValue;
    let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
    let arrays = ColumnarValue::values_to_arrays(&args.args)?;
    let text = datafusion::arrow::compute::cast(
        &arrays[0],
        &datafusion::arrow::datatypes::DataType::Utf8,
    )?;
    let text = text.as_string::<i32>();
    let mut out = StringBuilder::with_capacity(text.len(), text.len() * bytes_per_value);
    for v in text.iter() {
        match v {
            None => out.append_null(),
            Some(v) => f(v, &mut out)?,
        }
    }
    let out: ArrayRef = std::sync::Arc::new(out.finish());
    if scalar {
        return Ok(ColumnarValue::Scalar(
            datafusion::common::ScalarValue::try_from_array(&out, 0)?,
        ));
    }
    Ok(ColumnarValue::Array(out))
}
