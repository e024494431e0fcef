//! JSON values (as query results encode them) back to Arrow arrays of a column's type:
//! used for the value of rows written before `ALTER TABLE … ADD COLUMN … DEFAULT`.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BinaryArray, BooleanArray, Float64Array, Int64Array, NullArray, StringArray,
};
use datafusion::common::ScalarValue;
use serde_json::Value;
use tarn_catalog::{ColumnDef, SqlType};

use crate::error::Result;
use crate::value::coerce::{coerce_column, decode_base64};

fn array_text(v: &Value) -> String {
    match v {
        Value::Array(items) => format!(
            "{{{}}}",
            items.iter().map(array_text).collect::<Vec<_>>().join(",")
        ),
        Value::Null => "NULL".into(),
        Value::String(s) => format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\"")),
        other => other.to_string(),
    }
}

/// An array of `n` copies of `value` in the stored type of `col`.
pub fn json_to_array(value: &Value, col: &ColumnDef, n: usize) -> Result<ArrayRef> {
    let one: ArrayRef = match (value, &col.ty) {
        (Value::Null, _) => Arc::new(NullArray::new(1)),
        (v, SqlType::Jsonb) => Arc::new(StringArray::from(vec![v.to_string()])),
        (Value::Bool(b), _) => Arc::new(BooleanArray::from(vec![*b])),
        (Value::Number(x), _) => match x.as_i64() {
            Some(i) => Arc::new(Int64Array::from(vec![i])),
            None => Arc::new(Float64Array::from(vec![x.as_f64().unwrap_or(0.0)])),
        },
        (Value::String(s), SqlType::Bytea) => {
            let bytes = decode_base64(s).unwrap_or_else(|| s.as_bytes().to_vec());
            Arc::new(BinaryArray::from(vec![bytes.as_slice()]))
        }
        (Value::String(s), _) => Arc::new(StringArray::from(vec![s.clone()])),
        (v @ Value::Array(_), _) => Arc::new(StringArray::from(vec![array_text(v)])),
        (v @ Value::Object(_), _) => Arc::new(StringArray::from(vec![v.to_string()])),
    };
    let mut nullable = col.clone();
    nullable.nullable = true;
    let stored = coerce_column(&one, &nullable)?.array;
    Ok(ScalarValue::try_from_array(&stored, 0)?.to_array_of_size(n)?)
}
