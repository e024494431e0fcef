//! Arrow arrays to the JSON values of query results (SPEC §4.9), in one place.

use base64::Engine as _;
use chrono::{DateTime, NaiveDate};
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, BooleanArray, Date32Array, Decimal128Array,
    FixedSizeListArray, LargeBinaryArray, LargeListArray, ListArray, StructArray, UnionArray,
};
use datafusion::arrow::datatypes::{
    DataType, Field, Float16Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type,
    Int64Type, TimeUnit, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use serde_json::{Number, Value};

use crate::ast::types::is_json_field;
use crate::error::{Error, Result};

/// Encodes row `i` of `array` (described by `field`) as a JSON value.
pub fn encode_value(field: &Field, array: &ArrayRef, i: usize) -> Result<Value> {
    if array.is_null(i) {
        return Ok(Value::Null);
    }
    let json = is_json_field(field);
    encode(array.as_ref(), i, json)
}

/// Encodes whole columns into rows, charging each row's JSON size to `charge` (the
/// statement's share of the `query_memory` pool, see `SqlEngine::reserve`) in steps:
/// a result whose JSON form would pass the limit is its 400, not a process grown past
/// its memory.
pub fn encode_rows(
    fields: &[&Field],
    columns: &[ArrayRef],
    rows: &mut Vec<Vec<Value>>,
    charge: &mut dyn FnMut(usize) -> Result<()>,
) -> Result<()> {
    /// Rows charged at once (one pool lock per step, not per row), or fewer once their
    /// bytes reach [`STEP_BYTES`]: 200 rows of a million numbers each had grown the host
    /// to 6.9 GB before the first charge said they were past a 2 GiB limit.
    const STEP: usize = 256;
    const STEP_BYTES: usize = 1 << 20;
    let n = columns.first().map_or(0, |c| c.len());
    let mut pending = 0;
    for i in 0..n {
        let mut row = Vec::with_capacity(columns.len());
        // The row's place in `rows` (which the caller sizes), and its own block.
        pending += std::mem::size_of::<Vec<Value>>() + heap_block(columns.len() * VALUE_SIZE);
        for (field, col) in fields.iter().zip(columns) {
            // A large array is charged before it is encoded: its JSON form takes a
            // value (32 bytes) per element, eight times its Arrow form.
            let ahead = list_elements(col.as_ref(), i).saturating_mul(VALUE_SIZE);
            let ahead = if ahead >= STEP_BYTES {
                charge(std::mem::take(&mut pending) + ahead)?;
                ahead
            } else {
                0
            };
            let v = encode_value(field, col, i)?;
            pending += json_size(&v).saturating_sub(ahead);
            row.push(v);
        }
        rows.push(row);
        if i % STEP == STEP - 1 || pending >= STEP_BYTES {
            charge(std::mem::take(&mut pending))?;
        }
    }
    charge(pending)
}

const VALUE_SIZE: usize = std::mem::size_of::<Value>();

/// The elements of row `i` of `array` when it is a list (its first level), else 0.
fn list_elements(array: &dyn Array, i: usize) -> usize {
    if array.is_null(i) {
        return 0;
    }
    if let Some(l) = array.as_list_opt::<i32>() {
        return l.value_length(i).max(0) as usize;
    }
    if let Some(l) = array.as_list_opt::<i64>() {
        return l.value_length(i).max(0) as usize;
    }
    if let Some(l) = array.as_fixed_size_list_opt() {
        return l.value_length().max(0) as usize;
    }
    0
}

/// What a heap block of `n` bytes takes from the system allocator: its header and its
/// rounding to 16 bytes, 32 at least (glibc's chunks; others are alike). A result is
/// millions of small blocks — a row, a short string — and counting only their bytes
/// let 20M two-column rows counted at 1.9 GB hold 3 GB.
fn heap_block(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        (n + 8).next_multiple_of(16).max(32)
    }
}

/// What `v` costs as a result: the bytes it holds on the heap, or its JSON text where
/// that is longer (escapes: a control character is one byte held and six written), so
/// the body a host serializes is bounded too.
pub fn json_size(v: &Value) -> usize {
    match v {
        Value::String(s) => {
            let escapes = s
                .bytes()
                .filter(|b| *b < 0x20 || *b == b'"' || *b == b'\\')
                .count();
            heap_block(s.capacity()).max(s.len() + 2 + 5 * escapes)
        }
        Value::Array(a) => {
            heap_block(a.capacity() * VALUE_SIZE) + a.iter().map(json_size).sum::<usize>()
        }
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| heap_block(k.capacity()) + heap_block(2 * VALUE_SIZE) + json_size(v))
            .sum(),
        _ => 0,
    }
}

fn float(f: f64) -> Value {
    match Number::from_f64(f) {
        Some(n) => Value::Number(n),
        None if f.is_nan() => Value::String("NaN".into()),
        None if f > 0.0 => Value::String("Infinity".into()),
        None => Value::String("-Infinity".into()),
    }
}

/// The shortest decimal text that round-trips an f32, as a JSON number (`0.1`, not
/// `0.10000000149011612`).
fn float32(f: f32) -> Value {
    if !f.is_finite() {
        return float(f as f64);
    }
    let text = format!("{f}");
    text.parse::<f64>().map(float).unwrap_or(Value::Null)
}

/// A jsonb cell as its JSON value, refused past `json_tree::TREE_LIMIT`: its tree is
/// built before it can be charged to the statement.
fn parse_json(text: &str) -> Result<Value> {
    if let Some(message) = crate::value::json_tree::too_large(
        text,
        "for a JSON answer (select it as text, j::text, or as Arrow)",
    ) {
        return Err(Error::BadRequest(message));
    }
    Ok(serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string())))
}

/// Formats microseconds since the epoch: fraction only when non-zero, `Z` with a zone.
pub fn format_timestamp_micros(micros: i64, utc: bool) -> Option<String> {
    let dt = DateTime::from_timestamp_micros(micros)?.naive_utc();
    let base = dt.format("%Y-%m-%dT%H:%M:%S").to_string();
    let frac = micros.rem_euclid(1_000_000);
    let mut out = if frac == 0 {
        base
    } else {
        let f = format!("{frac:06}");
        format!("{base}.{}", f.trim_end_matches('0'))
    };
    if utc {
        out.push('Z');
    }
    Some(out)
}

fn list_values(values: &ArrayRef, json_items: bool) -> Result<Value> {
    let mut out = Vec::with_capacity(values.len());
    for j in 0..values.len() {
        out.push(if values.is_null(j) {
            Value::Null
        } else {
            encode(values.as_ref(), j, json_items)?
        });
    }
    Ok(Value::Array(out))
}

fn encode(array: &dyn Array, i: usize, json: bool) -> Result<Value> {
    if array.is_null(i) {
        return Ok(Value::Null);
    }
    Ok(match array.data_type() {
        DataType::Null => Value::Null,
        DataType::Boolean => Value::Bool(
            array
                .as_boolean_opt()
                .map(|a: &BooleanArray| a.value(i))
                .unwrap_or(false),
        ),
        DataType::Int8 => Value::from(array.as_primitive::<Int8Type>().value(i)),
        DataType::Int16 => Value::from(array.as_primitive::<Int16Type>().value(i)),
        DataType::Int32 => Value::from(array.as_primitive::<Int32Type>().value(i)),
        DataType::Int64 => Value::from(array.as_primitive::<Int64Type>().value(i)),
        DataType::UInt8 => Value::from(array.as_primitive::<UInt8Type>().value(i)),
        DataType::UInt16 => Value::from(array.as_primitive::<UInt16Type>().value(i)),
        DataType::UInt32 => Value::from(array.as_primitive::<UInt32Type>().value(i)),
        DataType::UInt64 => Value::from(array.as_primitive::<UInt64Type>().value(i)),
        DataType::Float16 => float32(array.as_primitive::<Float16Type>().value(i).to_f32()),
        DataType::Float32 => float32(array.as_primitive::<Float32Type>().value(i)),
        DataType::Float64 => float(array.as_primitive::<Float64Type>().value(i)),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            let s = match array.data_type() {
                DataType::Utf8 => array.as_string::<i32>().value(i),
                DataType::LargeUtf8 => array.as_string::<i64>().value(i),
                _ => array.as_string_view().value(i),
            };
            if json {
                parse_json(s)?
            } else {
                Value::String(s.to_string())
            }
        }
        DataType::Decimal128(..) => {
            let a = array
                .as_any()
                .downcast_ref::<Decimal128Array>()
                .ok_or_else(|| Error::Internal("decimal downcast".into()))?;
            Value::String(a.value_as_string(i))
        }
        DataType::Date32 => {
            let days = array
                .as_any()
                .downcast_ref::<Date32Array>()
                .map(|a| a.value(i))
                .unwrap_or(0);
            let date = NaiveDate::from_ymd_opt(1970, 1, 1)
                .and_then(|d| d.checked_add_signed(chrono::Duration::days(days as i64)));
            match date {
                Some(d) => Value::String(d.format("%Y-%m-%d").to_string()),
                None => fallback(array, i)?,
            }
        }
        DataType::Timestamp(unit, tz) => {
            let v = match unit {
                TimeUnit::Second => array
                    .as_primitive::<datafusion::arrow::datatypes::TimestampSecondType>()
                    .value(i)
                    .checked_mul(1_000_000),
                TimeUnit::Millisecond => array
                    .as_primitive::<datafusion::arrow::datatypes::TimestampMillisecondType>()
                    .value(i)
                    .checked_mul(1_000),
                TimeUnit::Microsecond => Some(
                    array
                        .as_primitive::<datafusion::arrow::datatypes::TimestampMicrosecondType>()
                        .value(i),
                ),
                TimeUnit::Nanosecond => Some(
                    array
                        .as_primitive::<datafusion::arrow::datatypes::TimestampNanosecondType>()
                        .value(i)
                        .div_euclid(1_000),
                ),
            };
            match v.and_then(|m| format_timestamp_micros(m, tz.is_some())) {
                Some(s) => Value::String(s),
                None => fallback(array, i)?,
            }
        }
        DataType::Binary => bytes(
            array
                .as_any()
                .downcast_ref::<BinaryArray>()
                .map(|a| a.value(i)),
        ),
        DataType::LargeBinary => bytes(
            array
                .as_any()
                .downcast_ref::<LargeBinaryArray>()
                .map(|a| a.value(i)),
        ),
        DataType::BinaryView => bytes(Some(array.as_binary_view().value(i))),
        DataType::List(item) => {
            let a = array
                .as_any()
                .downcast_ref::<ListArray>()
                .ok_or_else(|| Error::Internal("list downcast".into()))?;
            list_values(&a.value(i), is_json_field(item))?
        }
        DataType::LargeList(item) => {
            let a = array
                .as_any()
                .downcast_ref::<LargeListArray>()
                .ok_or_else(|| Error::Internal("list downcast".into()))?;
            list_values(&a.value(i), is_json_field(item))?
        }
        DataType::FixedSizeList(item, _) => {
            let a = array
                .as_any()
                .downcast_ref::<FixedSizeListArray>()
                .ok_or_else(|| Error::Internal("list downcast".into()))?;
            list_values(&a.value(i), is_json_field(item))?
        }
        DataType::Struct(fields) => {
            let a = array
                .as_any()
                .downcast_ref::<StructArray>()
                .ok_or_else(|| Error::Internal("struct downcast".into()))?;
            let mut map = serde_json::Map::new();
            for (f, col) in fields.iter().zip(a.columns()) {
                map.insert(f.name().clone(), encode_value(f, col, i)?);
            }
            Value::Object(map)
        }
        DataType::Union(fields, _) => {
            // JSON values from `datafusion-functions-json` (`->`): the active child holds
            // the value; `array`/`object` children hold JSON text.
            let a = array
                .as_any()
                .downcast_ref::<UnionArray>()
                .ok_or_else(|| Error::Internal("union downcast".into()))?;
            let type_id = a.type_id(i);
            let offset = a.value_offset(i);
            let child = a.child(type_id);
            let field = fields
                .iter()
                .find(|(id, _)| *id == type_id)
                .map(|(_, f)| f.clone());
            let is_json = field
                .as_ref()
                .is_some_and(|f| is_json_field(f) || f.name() == "array" || f.name() == "object");
            if child.is_null(offset) || matches!(child.data_type(), DataType::Null) {
                Value::Null
            } else {
                encode(child.as_ref(), offset, is_json)?
            }
        }
        DataType::Dictionary(_, value_type) => {
            let casted = datafusion::arrow::compute::cast(&array.slice(i, 1), value_type)?;
            encode(casted.as_ref(), 0, json)?
        }
        _ => fallback(array, i)?,
    })
}

fn bytes(b: Option<&[u8]>) -> Value {
    Value::String(base64::engine::general_purpose::STANDARD.encode(b.unwrap_or_default()))
}

fn fallback(array: &dyn Array, i: usize) -> Result<Value> {
    let opts = FormatOptions::default();
    let f = ArrayFormatter::try_new(array, &opts)?;
    Ok(Value::String(f.value(i).to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        assert_eq!(
            format_timestamp_micros(1_795_137_554_000_000, true).as_deref(),
            Some("2026-11-20T01:19:14Z")
        );
        assert_eq!(
            format_timestamp_micros(1_795_137_554_123_456, false).as_deref(),
            Some("2026-11-20T01:19:14.123456")
        );
        assert_eq!(
            format_timestamp_micros(1_795_137_554_120_000, true).as_deref(),
            Some("2026-11-20T01:19:14.12Z")
        );
    }

    #[test]
    fn floats_are_shortest() {
        assert_eq!(float32(0.1).to_string(), "0.1");
        assert_eq!(float32(1.0).to_string(), "1.0");
        assert_eq!(float(f64::NAN), Value::String("NaN".into()));
    }
}
