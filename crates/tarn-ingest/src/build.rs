//! Column builders: each value of a row, as CSV text or as a JSON value, converted to
//! the column's inferred type or refused with the reason.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanBuilder, Date32Builder, Float32Builder, Float64Builder, Int64Builder,
    ListBuilder, StringBuilder, TimestampMicrosecondBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field};
use serde_json::Value;

use crate::ColumnType;
use crate::infer::{parse_bool, parse_date, parse_float, parse_int, parse_timestamp, parse_vector};

/// Microseconds in a day (a date in a timestamp column is its midnight, UTC).
const DAY_MICROS: i64 = 86_400_000_000;

/// Longest value quoted back in an error message.
const QUOTED_CHARS: usize = 60;

/// A value quoted for an error message (cut, so that a huge value cannot make a huge
/// message).
pub(crate) fn quote(s: &str) -> String {
    let mut out: String = s.chars().take(QUOTED_CHARS).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    format!("{out:?}")
}

fn quote_json(v: &Value) -> String {
    quote(&v.to_string())
}

enum Values {
    Int(Int64Builder),
    Float(Float64Builder),
    Bool(BooleanBuilder),
    Date(Date32Builder),
    Timestamp(TimestampMicrosecondBuilder),
    /// Text, and JSON as its canonical text.
    Text(StringBuilder),
    Vector(ListBuilder<Float32Builder>),
}

/// One column's values of the batch being built, and what was seen of the column in
/// the whole file.
pub(crate) struct ColumnBuilder {
    ty: ColumnType,
    values: Values,
    /// Some value so far was NULL or missing.
    pub(crate) has_null: bool,
    /// The vector length every row must have (set by the first vector).
    pub(crate) dim: Option<u32>,
    scratch: Vec<f32>,
}

impl ColumnBuilder {
    pub(crate) fn new(ty: ColumnType, dim: Option<u32>) -> Self {
        let values = match ty {
            ColumnType::Int8 => Values::Int(Int64Builder::new()),
            ColumnType::Float8 => Values::Float(Float64Builder::new()),
            ColumnType::Bool => Values::Bool(BooleanBuilder::new()),
            ColumnType::Date => Values::Date(Date32Builder::new()),
            ColumnType::Timestamptz => {
                Values::Timestamp(TimestampMicrosecondBuilder::new().with_timezone("UTC"))
            }
            ColumnType::Text | ColumnType::Jsonb => Values::Text(StringBuilder::new()),
            ColumnType::Vector => Values::Vector(
                ListBuilder::new(Float32Builder::new())
                    .with_field(Arc::new(Field::new_list_field(DataType::Float32, true))),
            ),
        };
        Self {
            ty,
            values,
            has_null: false,
            dim,
            scratch: Vec::new(),
        }
    }

    pub(crate) fn push_null(&mut self) {
        self.has_null = true;
        match &mut self.values {
            Values::Int(b) => b.append_null(),
            Values::Float(b) => b.append_null(),
            Values::Bool(b) => b.append_null(),
            Values::Date(b) => b.append_null(),
            Values::Timestamp(b) => b.append_null(),
            Values::Text(b) => b.append_null(),
            Values::Vector(b) => b.append_null(),
        }
    }

    fn expected(&self) -> &'static str {
        match self.ty {
            ColumnType::Int8 => "an integer",
            ColumnType::Float8 => "a number",
            ColumnType::Bool => "true or false",
            ColumnType::Date => "a date (YYYY-MM-DD)",
            ColumnType::Timestamptz => "a timestamp (YYYY-MM-DD HH:MM[:SS][±HH:MM])",
            ColumnType::Text => "text",
            ColumnType::Jsonb => "JSON",
            ColumnType::Vector => "an array of numbers",
        }
    }

    fn push_vector_scratch(&mut self, n: u32) -> Result<(), String> {
        match self.dim {
            Some(d) if d != n => {
                self.scratch.clear();
                return Err(format!(
                    "a vector of {n} dimensions, not {d} like the rows before"
                ));
            }
            _ => self.dim = Some(n),
        }
        if let Values::Vector(b) = &mut self.values {
            b.values().append_slice(&self.scratch);
            b.append(true);
        }
        self.scratch.clear();
        Ok(())
    }

    /// Appends one CSV field (the empty field is NULL). The error says what was wrong.
    pub(crate) fn push_text(&mut self, s: &str) -> Result<(), String> {
        if s.is_empty() {
            self.push_null();
            return Ok(());
        }
        let expected = self.expected();
        let bad = || format!("{} is not {expected}", quote(s));
        match self.ty {
            ColumnType::Vector => {
                let mut scratch = std::mem::take(&mut self.scratch);
                let n = parse_vector(s, &mut scratch);
                self.scratch = scratch;
                let n = n.map_err(|why| format!("{} is not a vector: {why}", quote(s)))?;
                return self.push_vector_scratch(n);
            }
            ColumnType::Jsonb => {
                let v: Value = serde_json::from_str(s)
                    .map_err(|e| format!("{} is not JSON ({e})", quote(s)))?;
                if let Values::Text(b) = &mut self.values {
                    b.append_value(v.to_string());
                }
                return Ok(());
            }
            _ => {}
        }
        match &mut self.values {
            // Leading zeros are not an integer (inference keeps such values text).
            Values::Int(b) => b.append_value(
                parse_int(s)
                    .filter(|_| !crate::infer::has_leading_zero(s.trim()))
                    .ok_or_else(bad)?,
            ),
            Values::Float(b) => b.append_value(
                parse_float(s)
                    .or_else(|| parse_int(s).map(|v| v as f64))
                    .ok_or_else(bad)?,
            ),
            Values::Bool(b) => b.append_value(parse_bool(s).ok_or_else(bad)?),
            Values::Date(b) => b.append_value(parse_date(s).ok_or_else(bad)?),
            Values::Timestamp(b) => b.append_value(
                parse_timestamp(s)
                    .or_else(|| parse_date(s).map(|d| i64::from(d) * DAY_MICROS))
                    .ok_or_else(bad)?,
            ),
            Values::Text(b) => b.append_value(s),
            Values::Vector(_) => return Err(bad()),
        }
        Ok(())
    }

    /// Appends one JSON value (`None`: the key is missing, NULL).
    pub(crate) fn push_json(&mut self, v: Option<&Value>) -> Result<(), String> {
        let v = match v {
            None | Some(Value::Null) => {
                self.push_null();
                return Ok(());
            }
            Some(v) => v,
        };
        let expected = self.expected();
        let bad = || format!("{} is not {expected}", quote_json(v));
        if self.ty == ColumnType::Vector {
            let Value::Array(items) = v else {
                return Err(bad());
            };
            if items.is_empty() {
                return Err(format!("{} is not a vector: an empty array", quote_json(v)));
            }
            for item in items {
                match item.as_f64().map(|f| f as f32) {
                    Some(f) if f.is_finite() => self.scratch.push(f),
                    _ => {
                        self.scratch.clear();
                        return Err(format!(
                            "{} is not a vector: elements must be finite float4 numbers",
                            quote_json(v)
                        ));
                    }
                }
            }
            let n = u32::try_from(items.len()).map_err(|_| "too many elements".to_string())?;
            return self.push_vector_scratch(n);
        }
        let jsonb = self.ty == ColumnType::Jsonb;
        match &mut self.values {
            Values::Int(b) => b.append_value(v.as_i64().ok_or_else(bad)?),
            Values::Float(b) => b.append_value(
                v.as_f64()
                    .filter(|f| v.is_number() && f.is_finite())
                    .ok_or_else(bad)?,
            ),
            Values::Bool(b) => b.append_value(v.as_bool().ok_or_else(bad)?),
            Values::Date(b) => b.append_value(v.as_str().and_then(parse_date).ok_or_else(bad)?),
            Values::Timestamp(b) => b.append_value(
                v.as_str()
                    .and_then(|s| {
                        parse_timestamp(s)
                            .or_else(|| parse_date(s).map(|d| i64::from(d) * DAY_MICROS))
                    })
                    .ok_or_else(bad)?,
            ),
            Values::Text(b) if jsonb => b.append_value(v.to_string()),
            // A text column takes any value: strings as they are, the rest as JSON text.
            Values::Text(b) => match v {
                Value::String(s) => b.append_value(s),
                other => b.append_value(other.to_string()),
            },
            Values::Vector(_) => return Err(bad()),
        }
        Ok(())
    }

    /// The values appended since the last call, as one array.
    pub(crate) fn finish(&mut self) -> ArrayRef {
        match &mut self.values {
            Values::Int(b) => Arc::new(b.finish()),
            Values::Float(b) => Arc::new(b.finish()),
            Values::Bool(b) => Arc::new(b.finish()),
            Values::Date(b) => Arc::new(b.finish()),
            Values::Timestamp(b) => Arc::new(b.finish()),
            Values::Text(b) => Arc::new(b.finish()),
            Values::Vector(b) => Arc::new(b.finish()),
        }
    }
}

/// The Arrow type batches carry for a column of `ty`.
pub(crate) fn arrow_type(ty: ColumnType) -> DataType {
    match ty {
        ColumnType::Int8 => DataType::Int64,
        ColumnType::Float8 => DataType::Float64,
        ColumnType::Bool => DataType::Boolean,
        ColumnType::Date => DataType::Date32,
        ColumnType::Timestamptz => DataType::Timestamp(
            datafusion::arrow::datatypes::TimeUnit::Microsecond,
            Some("UTC".into()),
        ),
        ColumnType::Text | ColumnType::Jsonb => DataType::Utf8,
        ColumnType::Vector => {
            DataType::List(Arc::new(Field::new_list_field(DataType::Float32, true)))
        }
    }
}
