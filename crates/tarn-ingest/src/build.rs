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
use crate::infer::{
    DAY_MICROS, has_leading_zero, is_big_integer, is_long_decimal, looks_integer, parse_bool,
    parse_date, parse_float, parse_int, parse_timestamp, parse_vector,
};
use crate::jsonb::JsonbText;

/// A timestamptz column's value: a timestamp, or a date (its midnight, UTC).
fn timestamp_or_date(s: &str) -> Option<i64> {
    parse_timestamp(s).or_else(|| parse_date(s).map(|d| i64::from(d) * DAY_MICROS))
}

/// Why `s` is no value of a timestamptz column when it is a timestamp: outside the
/// years a table stores.
fn out_of_range(s: &str) -> Option<String> {
    crate::infer::parse_any_timestamp(s).map(|_| {
        format!(
            "{} is a timestamp outside years 1 to 9999 in UTC, which a table does not store",
            quote(s)
        )
    })
}

/// Why an integer past ±2^53 (`shown` as written) does not go into a float8 column: it
/// would be stored as another number.
fn rounded_into_float8(shown: &str) -> String {
    format!(
        "{} is an integer a float8 column would round (past 2^53); only an int8 or text \
         column keeps it exactly",
        quote(shown)
    )
}

fn rounded_decimal(shown: &str) -> String {
    format!(
        "{} has more digits than a float8 column keeps (it would be rounded); only a text \
         column keeps it exactly",
        quote(shown)
    )
}

/// Why an integer beyond int8 (`shown` as written) does not fit a column of `ty`, if
/// that is why: an int8 column cannot hold it, and a float8 column would round it (the
/// sample makes a column with one text, which keeps its digits).
fn beyond_int8(ty: ColumnType, shown: &str) -> Option<String> {
    match ty {
        ColumnType::Int8 => Some(format!("{} is out of range for int8", quote(shown))),
        ColumnType::Float8 => Some(format!(
            "{} is an integer beyond int8, which only a text column keeps exactly",
            quote(shown)
        )),
        _ => None,
    }
}

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
    /// Writes nested JSON values as their stored text (jsonb and text columns).
    json: JsonbText,
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
            json: JsonbText::new(),
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

    pub(crate) fn expected(&self) -> &'static str {
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

    /// Appends the empty string (a quoted empty CSV field, `""`): only text holds it
    /// (PostgreSQL's COPY refuses it for other types too).
    pub(crate) fn push_empty_string(&mut self) -> Result<(), String> {
        match (self.ty, &mut self.values) {
            (ColumnType::Text, Values::Text(b)) => {
                b.append_value("");
                Ok(())
            }
            _ => Err(format!(
                "\"\" (an empty string) is not {}; an empty field without quotes is NULL",
                self.expected()
            )),
        }
    }

    /// Appends one CSV field (the empty field is NULL; a quoted empty one goes to
    /// [`ColumnBuilder::push_empty_string`]). The error says what was wrong.
    pub(crate) fn push_text(&mut self, s: &str) -> Result<(), String> {
        if s.is_empty() {
            self.push_null();
            return Ok(());
        }
        let expected = self.expected();
        let bad = || format!("{} is not {expected}", quote(s));
        // Integers as inference reads them: beyond int8 (text there) never rounded into
        // a float8 nor refused as "not an integer"; leading zeros (text there) never a
        // number.
        let t = s.trim();
        if looks_integer(t) {
            if parse_int(t).is_none()
                && let Some(why) = beyond_int8(self.ty, s)
            {
                return Err(why);
            }
            if has_leading_zero(t) && matches!(self.ty, ColumnType::Int8 | ColumnType::Float8) {
                return Err(bad());
            }
            if self.ty == ColumnType::Float8
                && let Some(v) = parse_int(t)
                && !crate::infer::exact_in_float8(v)
            {
                return Err(rounded_into_float8(s));
            }
        }
        match self.ty {
            ColumnType::Vector => {
                let mut scratch = std::mem::take(&mut self.scratch);
                let n = parse_vector(s, &mut scratch);
                self.scratch = scratch;
                let n = n.map_err(|why| format!("{} is not a vector: {why}", quote(s)))?;
                return self.push_vector_scratch(n);
            }
            ColumnType::Jsonb => {
                let text = self
                    .json
                    .canonical(s)
                    .map_err(|e| format!("{} is not JSON ({e})", quote(s)))?;
                if let Values::Text(b) = &mut self.values {
                    b.append_value(text);
                }
                return Ok(());
            }
            _ => {}
        }
        match &mut self.values {
            Values::Int(b) => b.append_value(parse_int(s).ok_or_else(bad)?),
            // Digits alone are a decimal to `parse_float` too (`-0` stays negative).
            Values::Float(_) if is_long_decimal(t) => {
                return Err(rounded_decimal(s));
            }
            Values::Float(b) => b.append_value(parse_float(s).ok_or_else(bad)?),
            Values::Bool(b) => b.append_value(parse_bool(s).ok_or_else(bad)?),
            Values::Date(b) => b.append_value(parse_date(s).ok_or_else(bad)?),
            Values::Timestamp(b) => b.append_value(
                timestamp_or_date(s).ok_or_else(|| out_of_range(s).unwrap_or_else(bad))?,
            ),
            Values::Text(b) => b.append_value(s),
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

/// Deserializes one JSON value straight into a column builder, without building a
/// `serde_json::Value` for scalars (the common case: numbers, strings, booleans).
pub(crate) struct CellSeed<'a> {
    pub(crate) column: &'a mut ColumnBuilder,
    /// Where a value that does not fit leaves the reason: serde's error carries the
    /// position, this the cause (so the message can name the column and say what was
    /// wrong).
    pub(crate) failure: &'a mut Option<String>,
    /// Read the value's text first: the row may hold an integer beyond int8, which
    /// `serde_json` would give as a float (so its digits would be lost). Slower, so
    /// only for rows the framer saw a long run of digits in.
    pub(crate) exact: bool,
}

impl CellSeed<'_> {
    fn fail<E: serde::de::Error>(&mut self, why: String) -> E {
        *self.failure = Some(why);
        E::custom("cell")
    }

    fn mismatch<E: serde::de::Error>(&mut self, shown: &str) -> E {
        let why = format!("{} is not {}", quote(shown), self.column.expected());
        self.fail(why)
    }

    /// A whole JSON value (objects, arrays) written by `write` into the column's
    /// [`JsonbText`], as jsonb or text takes it.
    fn nested<E: serde::de::Error>(
        &mut self,
        write: impl FnOnce(&mut JsonbText) -> Result<(), E>,
    ) -> Result<(), E> {
        self.column.json.clear();
        write(&mut self.column.json)?;
        match (self.column.ty, &mut self.column.values) {
            (ColumnType::Jsonb | ColumnType::Text, Values::Text(b)) => {
                b.append_value(self.column.json.text());
                Ok(())
            }
            _ => {
                let shown = self.column.json.text().to_string();
                Err(self.mismatch(&shown))
            }
        }
    }
}

impl CellSeed<'_> {
    /// A value from its JSON text: an integer beyond int8 as its digits (text) or
    /// refused, anything else as the fast path reads it.
    fn read_text<E: serde::de::Error>(mut self, text: &str) -> Result<(), E> {
        if is_long_decimal(text) {
            // A decimal longer than a float8 keeps: its digits in a text column, refused
            // by a float8 one (which would round it), read as it is elsewhere.
            if let (ColumnType::Text, Values::Text(b)) = (self.column.ty, &mut self.column.values) {
                b.append_value(text);
                return Ok(());
            }
            if self.column.ty == ColumnType::Float8 {
                return Err(self.fail(rounded_decimal(text)));
            }
        }
        if is_big_integer(text) {
            if let (ColumnType::Text, Values::Text(b)) = (self.column.ty, &mut self.column.values) {
                b.append_value(text);
                return Ok(());
            }
            if let Some(why) = beyond_int8(self.column.ty, text) {
                return Err(self.fail(why));
            }
            // jsonb keeps what INSERT keeps (serde_json's number); the other types refuse
            // it as they refuse any number.
        }
        let mut de = serde_json::Deserializer::from_str(text);
        serde::Deserializer::deserialize_any(&mut de, self).map_err(E::custom)
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for CellSeed<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.exact {
            let raw = <&serde_json::value::RawValue as serde::Deserialize>::deserialize(d)?;
            return self.read_text(raw.get());
        }
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for CellSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.column.push_null();
        Ok(())
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<(), E> {
        self.column.push_null();
        Ok(())
    }

    fn visit_bool<E: serde::de::Error>(mut self, v: bool) -> Result<(), E> {
        match &mut self.column.values {
            Values::Bool(b) => b.append_value(v),
            Values::Text(b) => b.append_value(if v { "true" } else { "false" }),
            _ => return Err(self.mismatch(if v { "true" } else { "false" })),
        }
        Ok(())
    }

    fn visit_i64<E: serde::de::Error>(mut self, v: i64) -> Result<(), E> {
        match &mut self.column.values {
            Values::Int(b) => b.append_value(v),
            Values::Float(_) if !crate::infer::exact_in_float8(v) => {
                return Err(self.fail(rounded_into_float8(&v.to_string())));
            }
            Values::Float(b) => b.append_value(v as f64),
            Values::Text(b) => b.append_value(v.to_string()),
            _ => return Err(self.mismatch(&v.to_string())),
        }
        Ok(())
    }

    fn visit_u64<E: serde::de::Error>(mut self, v: u64) -> Result<(), E> {
        match (&mut self.column.values, i64::try_from(v)) {
            (Values::Int(b), Ok(i)) => b.append_value(i),
            (Values::Float(_), Ok(i)) if !crate::infer::exact_in_float8(i) => {
                return Err(self.fail(rounded_into_float8(&v.to_string())));
            }
            (Values::Float(b), Ok(i)) => b.append_value(i as f64),
            (Values::Text(b), _) => b.append_value(v.to_string()),
            (_, Err(_)) => {
                let shown = v.to_string();
                let why = beyond_int8(self.column.ty, &shown).unwrap_or_else(|| {
                    format!("{} is not {}", quote(&shown), self.column.expected())
                });
                return Err(self.fail(why));
            }
            _ => return Err(self.mismatch(&v.to_string())),
        }
        Ok(())
    }

    fn visit_f64<E: serde::de::Error>(mut self, v: f64) -> Result<(), E> {
        match &mut self.column.values {
            Values::Float(b) if v.is_finite() => b.append_value(v),
            // `-0`, which `serde_json` reads as -0.0: an integer column's 0.
            Values::Int(b) if v == 0.0 && v.is_sign_negative() => b.append_value(0),
            // The number's JSON text, as a `Value` would print it.
            Values::Text(b) => b.append_value(Value::from(v).to_string()),
            _ => return Err(self.mismatch(&Value::from(v).to_string())),
        }
        Ok(())
    }

    fn visit_str<E: serde::de::Error>(mut self, s: &str) -> Result<(), E> {
        let jsonb = self.column.ty == ColumnType::Jsonb;
        match &mut self.column.values {
            Values::Text(b) if jsonb => {
                let json = &mut self.column.json;
                json.clear();
                json.push_string(s);
                b.append_value(json.text());
            }
            Values::Text(b) => b.append_value(s),
            Values::Date(b) => match parse_date(s) {
                Some(d) => b.append_value(d),
                None => return Err(self.mismatch(&Value::from(s).to_string())),
            },
            Values::Timestamp(b) => match timestamp_or_date(s) {
                Some(t) => b.append_value(t),
                None => match out_of_range(s) {
                    Some(why) => return Err(self.fail(why)),
                    None => return Err(self.mismatch(&Value::from(s).to_string())),
                },
            },
            _ => return Err(self.mismatch(&Value::from(s).to_string())),
        }
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        if self.column.ty != ColumnType::Vector {
            return self.nested(|json| json.visitor().visit_seq(seq));
        }
        let start = self.column.scratch.len();
        loop {
            match seq.next_element::<f64>() {
                Ok(Some(f)) if crate::infer::fits_float4(f) => self.column.scratch.push(f as f32),
                Ok(None) => break,
                _ => {
                    self.column.scratch.truncate(start);
                    return Err(self
                        .fail("not a vector: elements must be float4 numbers, finite, and zero or at least 1e-45 in magnitude".to_string()));
                }
            }
        }
        let n = self.column.scratch.len() - start;
        if n == 0 {
            return Err(self.fail("[] is not a vector: an empty array".to_string()));
        }
        let n = u32::try_from(n).map_err(|_| self.fail::<A::Error>("too many elements".into()))?;
        self.column
            .push_vector_scratch(n)
            .map_err(|why| self.fail::<A::Error>(why))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(mut self, map: A) -> Result<(), A::Error> {
        self.nested(|json| json.visitor().visit_map(map))
    }
}
