//! Converting written values to a column's stored type, with the checks PostgreSQL makes
//! on assignment (NOT NULL, varchar length, uuid and JSON syntax) and Tarn's vector
//! validation (dimension, NULL elements, NaN/Inf, ragged bags).

use std::sync::Arc;

use base64::Engine as _;
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BinaryBuilder, FixedSizeListArray, Float32Array, Float64Array,
    ListArray, StringArray, StringBuilder, new_null_array,
};
use datafusion::arrow::buffer::{NullBuffer, OffsetBuffer};
use datafusion::arrow::compute::{CastOptions, cast_with_options};
use datafusion::arrow::datatypes::{DataType, Field, Float64Type};
use datafusion::arrow::util::display::FormatOptions;
use tarn_catalog::{ColumnDef, SqlType};

use crate::ast::array_text::{ArrayText, parse_array_text};
use crate::ast::types::arrow_type;
use crate::error::{Error, Result, bad};
use crate::value::encode::encode_value;

const STRICT: CastOptions<'static> = CastOptions {
    safe: false,
    format_options: FormatOptions::new(),
};

/// A column's values converted to its stored type, and the vector dimension the values
/// fixed if the column had none yet.
pub struct Coerced {
    /// The stored array.
    pub array: ArrayRef,
    /// A dimension seen for the first time (the caller records it durably).
    pub new_dim: Option<u32>,
}

/// Converts `array` to the stored type of `col` and validates it.
pub fn coerce_column(array: &ArrayRef, col: &ColumnDef) -> Result<Coerced> {
    let mut new_dim = None;
    let out = if col.ty.is_vector() {
        let (a, dim) = coerce_vector(array, col)?;
        new_dim = dim;
        a
    } else {
        coerce_plain(array, col)?
    };
    check_years(&out, col)?;
    if !col.nullable && out.null_count() > 0 {
        return bad(format!(
            "null value in column \"{}\" violates not-null constraint",
            col.name
        ));
    }
    Ok(Coerced {
        array: out,
        new_dim,
    })
}

/// Refuses a date or timestamp outside the days a table stores
/// ([`tarn_ingest::STORED_DAYS`]; 400, as PostgreSQL's `date out of range` / `timestamp
/// out of range`). Queries compute past them (`date '9999-12-31' + 1`, `make_date(-5, 1,
/// 1)`); a value written out of them would export in a form (`+10000-01-01`,
/// `-0004-01-01`) that reads back as text.
fn check_years(array: &ArrayRef, col: &ColumnDef) -> Result<()> {
    use datafusion::arrow::compute::kernels::aggregate::{max, min};
    use datafusion::arrow::datatypes::{Date32Type, TimeUnit, TimestampMicrosecondType};
    use tarn_ingest::{DAY_MICROS, STORED_DAYS};
    let (first, last, what) = match array.data_type() {
        DataType::Date32 => {
            let a = array.as_primitive::<Date32Type>();
            (min(a).map(i64::from), max(a).map(i64::from), "date")
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            let a = array.as_primitive::<TimestampMicrosecondType>();
            let day = |m: i64| m.div_euclid(DAY_MICROS);
            (min(a).map(day), max(a).map(day), "timestamp")
        }
        _ => return Ok(()),
    };
    if first.is_some_and(|d| d < STORED_DAYS.0) || last.is_some_and(|d| d > STORED_DAYS.1) {
        return bad(format!(
            "{what} out of range for column \"{}\": stored dates and timestamps are \
             from 0001-01-01 to 9999-12-31",
            col.name
        ));
    }
    Ok(())
}

fn type_label(col: &ColumnDef) -> String {
    match &col.ty {
        SqlType::Varchar(Some(n)) => format!("character varying({n})"),
        t => t.pg_name().to_string(),
    }
}

fn cast_error(col: &ColumnDef, e: impl std::fmt::Display) -> Error {
    let msg = crate::error::clean_message(&e.to_string());
    Error::BadRequest(format!(
        "invalid value for column \"{}\" of type {}: {msg}",
        col.name,
        type_label(col)
    ))
}

/// Whether `t` is a list of floats or decimals.
pub(crate) fn fractional_list(t: &DataType) -> bool {
    match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => matches!(
            f.data_type(),
            DataType::Float16
                | DataType::Float32
                | DataType::Float64
                | DataType::Decimal128(..)
                | DataType::Decimal256(..)
        ),
        _ => false,
    }
}

/// A list of floats or decimals with each element rounded to a whole number (ties to
/// even, or away from zero), as float8 elements: what a cast to an integer array
/// reads, since Arrow's cast of the elements cuts off their fractions (`{2.7}` was
/// `{2}`; PostgreSQL's is `{3}`). `None` for any other array.
pub(crate) fn rounded_elements(array: &ArrayRef, ties_even: bool) -> Result<Option<ArrayRef>> {
    if !fractional_list(array.data_type()) {
        return Ok(None);
    }
    let round = |values: &ArrayRef| rounded(values, ties_even);
    let field = || Arc::new(Field::new_list_field(DataType::Float64, true));
    Ok(match array.data_type() {
        DataType::List(_) => {
            let l = array.as_list::<i32>();
            Some(Arc::new(ListArray::try_new(
                field(),
                l.offsets().clone(),
                round(l.values())?,
                l.nulls().cloned(),
            )?))
        }
        DataType::LargeList(_) => {
            let l = array.as_list::<i64>();
            Some(Arc::new(datafusion::arrow::array::LargeListArray::try_new(
                field(),
                l.offsets().clone(),
                round(l.values())?,
                l.nulls().cloned(),
            )?))
        }
        DataType::FixedSizeList(_, n) => {
            let l = array.as_fixed_size_list();
            Some(Arc::new(FixedSizeListArray::try_new(
                field(),
                *n,
                round(l.values())?,
                l.nulls().cloned(),
            )?))
        }
        _ => None,
    })
}

/// Numbers as float8, rounded to whole numbers (ties to even, or away from zero).
fn rounded(values: &ArrayRef, ties_even: bool) -> Result<ArrayRef> {
    let f = cast_with_options(values, &DataType::Float64, &STRICT)?;
    let rounded: Float64Array = f.as_primitive::<Float64Type>().unary(|v| {
        if ties_even {
            v.round_ties_even()
        } else {
            v.round()
        }
    });
    Ok(Arc::new(rounded))
}

fn strings(array: &ArrayRef) -> Result<StringArray> {
    let utf8 = cast_with_options(array, &DataType::Utf8, &STRICT)?;
    Ok(utf8.as_string::<i32>().clone())
}

fn coerce_plain(array: &ArrayRef, col: &ColumnDef) -> Result<ArrayRef> {
    let target = arrow_type(&col.ty);
    if array.data_type() == &DataType::Null {
        return Ok(new_null_array(&target, array.len()));
    }
    // PostgreSQL assigns no number to a boolean column and no boolean to a number
    // column (Arrow cast 2 and 0.5 to true, true to 1).
    let source = array.data_type();
    if (target == DataType::Boolean && source.is_numeric())
        || (target.is_numeric() && source == &DataType::Boolean)
    {
        return bad(format!(
            "column \"{}\" is of type {} but expression is of type {}; rewrite or cast the \
             expression",
            col.name,
            type_label(col),
            crate::error::pg_type_names(&source.to_string())
        ));
    }
    // Numeric text is bounded before Arrow parses it (see `MAX_NUMERIC_TEXT`), and read
    // in scientific notation too (`'1.5e2'`), as a cast to numeric reads it.
    let plain;
    let array = if matches!(target, DataType::Decimal128(..) | DataType::Decimal256(..)) {
        crate::value::numeric_text::check_numeric_text(
            &datafusion::logical_expr::ColumnarValue::Array(array.clone()),
            array.len(),
        )?;
        plain = crate::value::numeric_text::plain_numeric_array(array.clone());
        &plain
    } else {
        array
    };
    match &col.ty {
        SqlType::Jsonb => {
            let mut b = StringBuilder::with_capacity(array.len(), array.len() * 16);
            let field = Field::new("v", array.data_type().clone(), true);
            let is_text = matches!(
                array.data_type(),
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
            );
            let text = if is_text { Some(strings(array)?) } else { None };
            let mut json = tarn_ingest::JsonbText::new();
            for i in 0..array.len() {
                if array.is_null(i) {
                    b.append_null();
                    continue;
                }
                if let Some(t) = &text {
                    let stored = json.canonical(t.value(i)).map_err(|e| {
                        Error::BadRequest(format!(
                            "invalid input syntax for type json (column \"{}\"): {e}",
                            col.name
                        ))
                    })?;
                    b.append_value(stored);
                    continue;
                }
                let value = encode_value(&field, array, i)?;
                // Written into the builder's buffer, then the row is closed.
                std::fmt::Write::write_fmt(&mut b, format_args!("{value}"))
                    .map_err(|e| Error::Internal(e.to_string()))?;
                b.append_value("");
            }
            Ok(Arc::new(b.finish()))
        }
        SqlType::Uuid => {
            let s = strings(array)?;
            let mut b = StringBuilder::with_capacity(s.len(), s.len() * 36);
            for v in s.iter() {
                match v {
                    None => b.append_null(),
                    Some(v) => {
                        let u = crate::value::text_input::uuid_from_text(v).ok_or_else(|| {
                            Error::BadRequest(format!(
                                "invalid input syntax for type uuid: {}",
                                tarn_catalog::shown(v)
                            ))
                        })?;
                        b.append_value(u.hyphenated().to_string());
                    }
                }
            }
            Ok(Arc::new(b.finish()))
        }
        SqlType::Varchar(Some(n)) => {
            let s = strings(array)?;
            if s.iter().flatten().any(|v| v.chars().count() > *n as usize) {
                return bad(format!("value too long for type character varying({n})"));
            }
            Ok(Arc::new(s))
        }
        SqlType::Bytea
            if matches!(
                array.data_type(),
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
            ) =>
        {
            let s = strings(array)?;
            let mut b = BinaryBuilder::new();
            for v in s.iter() {
                match v {
                    None => b.append_null(),
                    Some(v) => b.append_value(
                        crate::value::text_input::bytea_from_text(v).map_err(Error::BadRequest)?,
                    ),
                }
            }
            Ok(Arc::new(b.finish()))
        }
        // PostgreSQL rounds the elements too.
        SqlType::Int4Array | SqlType::Int8Array if fractional_list(array.data_type()) => {
            let whole = rounded_elements(array, false)?.unwrap_or_else(|| array.clone());
            cast_with_options(&whole, &target, &STRICT).map_err(|e| cast_error(col, e))
        }
        SqlType::TextArray | SqlType::Int4Array | SqlType::Int8Array
            if matches!(
                array.data_type(),
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
            ) =>
        {
            let s = strings(array)?;
            let mut items: Vec<Option<Vec<Option<String>>>> = Vec::with_capacity(s.len());
            for v in s.iter() {
                items.push(match v {
                    None => None,
                    Some(v) => match parse_array_text(v)? {
                        ArrayText::List(list) => Some(
                            list.into_iter()
                                .map(|i| match i {
                                    ArrayText::Item(x) => Ok(x),
                                    ArrayText::List(_) => bad(format!(
                                        "column \"{}\" takes a one-dimensional array",
                                        col.name
                                    )),
                                })
                                .collect::<Result<_>>()?,
                        ),
                        ArrayText::Item(_) => return bad("malformed array literal"),
                    },
                });
            }
            let values: Vec<Option<String>> = items.iter().flatten().flatten().cloned().collect();
            let lens: Vec<usize> = items
                .iter()
                .map(|i| i.as_ref().map_or(0, |v| v.len()))
                .collect();
            let nulls = NullBuffer::from(items.iter().map(|i| i.is_some()).collect::<Vec<_>>());
            let values: ArrayRef = Arc::new(StringArray::from(values));
            let list = ListArray::try_new(
                Arc::new(Field::new_list_field(DataType::Utf8, true)),
                OffsetBuffer::from_lengths(lens),
                values,
                Some(nulls),
            )?;
            cast_with_options(&(Arc::new(list) as ArrayRef), &target, &STRICT)
                .map_err(|e| cast_error(col, e))
        }
        SqlType::Int2 | SqlType::Int4 | SqlType::Int8
            if matches!(
                array.data_type(),
                DataType::Float32 | DataType::Float64 | DataType::Decimal128(..)
            ) =>
        {
            // PostgreSQL rounds when assigning a fractional number to an integer column.
            cast_with_options(&rounded(array, false)?, &target, &STRICT)
                .map_err(|e| cast_error(col, e))
        }
        SqlType::Timestamp | SqlType::Timestamptz | SqlType::Date
            if matches!(
                array.data_type(),
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
            ) =>
        {
            // Read as a cast of a quoted literal is (no year 0; past microseconds,
            // rounded), then by Arrow's parser.
            let s = strings(array)?;
            let read_as = match col.ty {
                SqlType::Date => crate::ast::types::DateTimeTarget::Date,
                SqlType::Timestamp => crate::ast::types::DateTimeTarget::Timestamp,
                _ => crate::ast::types::DateTimeTarget::Timestamptz,
            };
            let mut fixed: Option<StringBuilder> = None;
            for (i, v) in s.iter().enumerate() {
                let changed = match v {
                    Some(v) => crate::ast::types::date_time_text(v, read_as)?,
                    None => None,
                };
                if changed.is_some() && fixed.is_none() {
                    let mut b = StringBuilder::with_capacity(s.len(), s.value_data().len() + 16);
                    for j in 0..i {
                        b.append_option(s.is_valid(j).then(|| s.value(j)));
                    }
                    fixed = Some(b);
                }
                if let Some(b) = fixed.as_mut() {
                    match (changed, v) {
                        (Some(c), _) => b.append_value(c),
                        (None, v) => b.append_option(v),
                    }
                }
            }
            let source: ArrayRef = match fixed {
                Some(mut b) => Arc::new(b.finish()),
                None => Arc::new(s),
            };
            cast_with_options(&source, &target, &STRICT).map_err(|e| cast_error(col, e))
        }
        SqlType::Float4 | SqlType::Float8 => {
            let out = if array.data_type() == &target {
                array.clone()
            } else {
                cast_with_options(array, &target, &STRICT).map_err(|e| cast_error(col, e))?
            };
            float_in_range(array, &out, &col.ty)?;
            Ok(out)
        }
        _ => {
            if array.data_type() == &target {
                return Ok(array.clone());
            }
            // An array of arrays into a column of one level fewer: Arrow would write each
            // inner array as its display text (`[a, b]`).
            let depth = crate::ast::types::list_depth;
            if depth(&target) >= 1 && depth(array.data_type()) > depth(&target) {
                return bad(format!(
                    "column \"{}\" is of type {} but expression is of type {}",
                    col.name,
                    type_label(col),
                    crate::error::pg_type_names(&array.data_type().to_string())
                ));
            }
            let out = cast_with_options(array, &target, &STRICT).map_err(|e| cast_error(col, e))?;
            // Arrow casts a value that is not a list into a one-element list, a NULL
            // too (`[null]`); a NULL stays NULL, as the statement path stores it.
            if let (Some(list), Some(nulls)) = (out.as_list_opt::<i32>(), array.nulls())
                && !matches!(
                    array.data_type(),
                    DataType::List(_) | DataType::LargeList(_)
                )
            {
                let (field, offsets, values, _) = list.clone().into_parts();
                return Ok(Arc::new(ListArray::try_new(
                    field,
                    offsets,
                    values,
                    Some(nulls.clone()),
                )?));
            }
            Ok(out)
        }
    }
}

/// PostgreSQL refuses a number too large for `real`/`double precision` (`3.5e38` into
/// a `real` column, `'1e1000'` into a `double precision` one) instead of storing
/// Infinity, and one too small that is not zero (`1e-46` into a `real` column) instead
/// of storing 0; the words `Infinity`/`inf` (signed) stay infinite.
fn float_in_range(source: &ArrayRef, out: &ArrayRef, ty: &SqlType) -> Result<()> {
    let out = cast_with_options(out, &DataType::Float64, &STRICT)?;
    let out = out.as_primitive::<Float64Type>();
    let text = matches!(
        source.data_type(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    );
    let zeros = out.iter().flatten().any(|v| v == 0.0);
    let infinite = out.iter().flatten().any(f64::is_infinite);
    if !infinite && !zeros {
        return Ok(());
    }
    let type_name = if *ty == SqlType::Float4 {
        "real"
    } else {
        "double precision"
    };
    // A number source as float8 (a zero is a zero only if it was one).
    let numbers = if !text && zeros {
        let n = cast_with_options(source, &DataType::Float64, &STRICT).ok();
        n.filter(|n| n.data_type() == &DataType::Float64)
    } else {
        None
    };
    let numbers = numbers.as_ref().map(|n| n.as_primitive::<Float64Type>());
    // The source as written: only for text, or to tell Infinity written from overflow.
    let texts = if text || infinite {
        Some(cast_with_options(source, &DataType::Utf8, &STRICT)?)
    } else {
        None
    };
    let texts = texts.as_ref().map(|t| t.as_string::<i32>());
    // Text is named as written (PostgreSQL's words for its input); a number by the way
    // it left the type's range.
    let refuse = |written: &str, how: &str| {
        if text {
            bad(format!(
                "{} is out of range for type {type_name}",
                tarn_catalog::shown(written)
            ))
        } else {
            bad(format!("value out of range: {how}"))
        }
    };
    for i in 0..out.len() {
        if out.is_null(i) || source.is_null(i) {
            continue;
        }
        let v = out.value(i);
        let written = texts.map_or("", |t| t.value(i).trim());
        if v == 0.0 {
            let underflow = if text {
                tarn_ingest::underflows(written, v)
            } else {
                numbers.is_some_and(|n| n.is_valid(i) && n.value(i) != 0.0)
            };
            if !underflow {
                continue;
            }
            return refuse(written, "underflow");
        }
        if !v.is_infinite() {
            continue;
        }
        let word = written.trim_start_matches(['+', '-']).to_ascii_lowercase();
        if word == "inf" || word == "infinity" {
            continue;
        }
        return refuse(written, "overflow");
    }
    Ok(())
}

/// Decodes padded base64 (how bytea values are returned).
pub fn decode_base64(s: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(s).ok()
}

type Vector = Vec<Option<f64>>;

/// One row's value as nested numbers: depth 1 for a vector, 2 for a bag of vectors.
enum Nested {
    Null,
    Vec(Vector),
    Bag(Vec<Option<Vector>>),
}

fn numbers_of(values: &ArrayRef) -> Result<Vector> {
    let f = cast_with_options(values, &DataType::Float64, &STRICT)?;
    Ok(f.as_primitive::<Float64Type>().iter().collect())
}

fn list_children(array: &ArrayRef) -> Result<Vec<Option<ArrayRef>>> {
    let list = cast_with_options(
        array,
        &DataType::List(Arc::new(Field::new_list_field(
            match array.data_type() {
                DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
                    f.data_type().clone()
                }
                other => other.clone(),
            },
            true,
        ))),
        &STRICT,
    )?;
    let list = list.as_list::<i32>();
    Ok((0..list.len())
        .map(|i| (!list.is_null(i)).then(|| list.value(i)))
        .collect())
}

fn text_item_numbers(items: &[ArrayText], col: &ColumnDef) -> Result<Vector> {
    items
        .iter()
        .map(|i| match i {
            ArrayText::Item(None) => Ok(None),
            ArrayText::Item(Some(s)) => s.trim().parse::<f64>().map(Some).map_err(|_| {
                Error::BadRequest(format!(
                    "column \"{}\": invalid number \"{s}\" in vector",
                    col.name
                ))
            }),
            ArrayText::List(_) => bad(format!(
                "column \"{}\": vectors are one-dimensional arrays of float4",
                col.name
            )),
        })
        .collect()
}

fn nested_rows(array: &ArrayRef, col: &ColumnDef, multi: bool) -> Result<Vec<Nested>> {
    let wrong_shape = || {
        Error::BadRequest(format!(
            "column \"{}\" of type {} takes {}, not {}",
            col.name,
            if multi { "float4[][]" } else { "float4[]" },
            if multi {
                "an array of vectors"
            } else {
                "an array of numbers"
            },
            crate::error::pg_type_names(&array.data_type().to_string())
        ))
    };
    match array.data_type() {
        DataType::Null => Ok((0..array.len()).map(|_| Nested::Null).collect()),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            let s = strings(array)?;
            s.iter()
                .map(|v| {
                    let Some(v) = v else { return Ok(Nested::Null) };
                    let ArrayText::List(items) = parse_array_text(v)? else {
                        return Err(wrong_shape());
                    };
                    if multi {
                        let bag = items
                            .iter()
                            .map(|i| match i {
                                ArrayText::List(inner) => text_item_numbers(inner, col).map(Some),
                                ArrayText::Item(None) => Ok(None),
                                ArrayText::Item(Some(_)) => Err(wrong_shape()),
                            })
                            .collect::<Result<_>>()?;
                        Ok(Nested::Bag(bag))
                    } else {
                        Ok(Nested::Vec(text_item_numbers(&items, col)?))
                    }
                })
                .collect()
        }
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..) => {
            let rows = list_children(array)?;
            rows.into_iter()
                .map(|row| {
                    let Some(values) = row else {
                        return Ok(Nested::Null);
                    };
                    if multi {
                        if !matches!(
                            values.data_type(),
                            DataType::List(_)
                                | DataType::LargeList(_)
                                | DataType::FixedSizeList(..)
                                | DataType::Null
                        ) {
                            return Err(wrong_shape());
                        }
                        if values.data_type() == &DataType::Null {
                            return Ok(Nested::Bag(vec![None; values.len()]));
                        }
                        let bag = list_children(&values)?
                            .into_iter()
                            .map(|v| v.map(|v| numbers_of(&v)).transpose())
                            .collect::<Result<_>>()?;
                        Ok(Nested::Bag(bag))
                    } else {
                        if matches!(
                            values.data_type(),
                            DataType::List(_)
                                | DataType::LargeList(_)
                                | DataType::FixedSizeList(..)
                        ) {
                            return Err(wrong_shape());
                        }
                        Ok(Nested::Vec(numbers_of(&values)?))
                    }
                })
                .collect()
        }
        _ => Err(wrong_shape()),
    }
}

fn check_vector(
    v: &Vector,
    col: &ColumnDef,
    dim: &mut Option<u32>,
    out: &mut Vec<f32>,
) -> Result<()> {
    if v.iter().any(|x| x.is_none()) {
        return bad(format!(
            "column \"{}\": vector elements must not be NULL",
            col.name
        ));
    }
    if v.iter()
        .flatten()
        .any(|x| !x.is_finite() || !(*x as f32).is_finite())
    {
        return bad(format!(
            "column \"{}\": vector elements must be finite float32 numbers (no NaN or Infinity)",
            col.name
        ));
    }
    // Too small for a float32 and not zero: stored, it would be 0 (PostgreSQL's real
    // refuses it as out of range).
    if let Some(x) = v
        .iter()
        .flatten()
        .find(|x| **x != 0.0 && (**x as f32) == 0.0)
    {
        return bad(format!(
            "column \"{}\": vector element {x:e} is out of range for type real (value out of \
             range: underflow)",
            col.name
        ));
    }
    if v.is_empty() {
        return bad(format!(
            "column \"{}\": a vector needs at least one dimension",
            col.name
        ));
    }
    let n = v.len() as u32;
    match dim {
        Some(d) if *d != n => return bad(format!("expected {d} dimensions, not {n}")),
        Some(_) => {}
        None => *dim = Some(n),
    }
    out.extend(v.iter().flatten().map(|x| *x as f32));
    Ok(())
}

fn coerce_vector(array: &ArrayRef, col: &ColumnDef) -> Result<(ArrayRef, Option<u32>)> {
    let multi = col.ty == SqlType::MultiVector;
    let rows = nested_rows(array, col, multi)?;
    let known = col.dimension();
    let mut dim = known;
    let mut values: Vec<f32> = Vec::new();
    let mut valid = Vec::with_capacity(rows.len());
    // Offsets of the outer list (rows) and, for bags, of the inner vectors.
    let mut row_lens = Vec::with_capacity(rows.len());
    let mut inner_lens = Vec::new();
    for row in &rows {
        match row {
            Nested::Null => {
                valid.push(false);
                row_lens.push(0);
            }
            Nested::Vec(v) => {
                check_vector(v, col, &mut dim, &mut values)?;
                valid.push(true);
                row_lens.push(v.len());
            }
            Nested::Bag(bag) => {
                let mut row_dim: Option<usize> = None;
                for v in bag {
                    let Some(v) = v else {
                        return bad(format!(
                            "column \"{}\": vector elements must not be NULL",
                            col.name
                        ));
                    };
                    if row_dim.is_some_and(|d| d != v.len()) {
                        return bad(format!(
                            "column \"{}\": all vectors of a row must have the same dimension (ragged array)",
                            col.name
                        ));
                    }
                    row_dim = Some(v.len());
                    check_vector(v, col, &mut dim, &mut values)?;
                    inner_lens.push(v.len());
                }
                valid.push(true);
                row_lens.push(bag.len());
            }
        }
    }
    let item = Arc::new(Field::new_list_field(DataType::Float32, true));
    let values: ArrayRef = Arc::new(Float32Array::from(values));
    let nulls = Some(NullBuffer::from(valid));
    let array: ArrayRef = if multi {
        let inner = ListArray::try_new(
            item.clone(),
            OffsetBuffer::from_lengths(inner_lens),
            values,
            None,
        )?;
        Arc::new(ListArray::try_new(
            Arc::new(Field::new_list_field(DataType::List(item), true)),
            OffsetBuffer::from_lengths(row_lens),
            Arc::new(inner),
            nulls,
        )?)
    } else if let SqlType::Vector { dim: Some(d) } = col.ty {
        // Null rows still take `d` slots in a fixed-size list.
        let mut padded = Vec::with_capacity(rows.len() * d as usize);
        let mut pos = 0;
        let src = values.as_primitive::<datafusion::arrow::datatypes::Float32Type>();
        for len in &row_lens {
            if *len == 0 {
                padded.extend(std::iter::repeat_n(0.0f32, d as usize));
            } else {
                padded.extend_from_slice(&src.values()[pos..pos + len]);
                pos += len;
            }
        }
        Arc::new(FixedSizeListArray::try_new(
            item,
            d as i32,
            Arc::new(Float32Array::from(padded)),
            nulls,
        )?)
    } else {
        Arc::new(ListArray::try_new(
            item,
            OffsetBuffer::from_lengths(row_lens),
            values,
            nulls,
        )?)
    };
    let new_dim = if known.is_none() { dim } else { None };
    Ok((array, new_dim))
}
