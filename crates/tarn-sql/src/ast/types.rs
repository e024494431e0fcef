//! SQL types: from sqlparser's `DataType` to the catalog's [`SqlType`], and from there
//! to the one Arrow type each is stored as.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, TimeUnit};
use datafusion::sql::sqlparser::ast::{self, ArrayElemTypeDef, ExactNumberInfo, TimezoneInfo};
use tarn_catalog::SqlType;

use crate::error::{Error, Result, bad};

/// Extension name marking a Utf8 field as JSON (also what `datafusion-functions-json` emits).
pub const JSON_EXTENSION: &str = "arrow.json";
const EXTENSION_KEY: &str = "ARROW:extension:name";

/// Numeric without precision: PostgreSQL's is unbounded; Tarn stores Decimal128(38, 10).
const DEFAULT_NUMERIC: (u8, i8) = (38, 10);

/// A declared column type: its SQL type and whether it is a serial (sequence default).
pub struct DeclaredType {
    /// The type.
    pub ty: SqlType,
    /// `SERIAL` or `BIGSERIAL`.
    pub serial: bool,
}

/// Maps a column type as written to the catalog's type.
pub fn declared_type(dt: &ast::DataType) -> Result<DeclaredType> {
    use ast::DataType as D;
    let plain = |ty| Ok(DeclaredType { ty, serial: false });
    match dt {
        D::SmallInt(_) | D::Int2(_) => plain(SqlType::Int2),
        D::Int(_) | D::Integer(_) | D::Int4(_) => plain(SqlType::Int4),
        D::BigInt(_) | D::Int8(_) => plain(SqlType::Int8),
        D::Real | D::Float4 => plain(SqlType::Float4),
        D::DoublePrecision | D::Float8 | D::Double(_) => plain(SqlType::Float8),
        D::Float(info) => match info {
            ExactNumberInfo::Precision(p) if *p <= 24 => plain(SqlType::Float4),
            _ => plain(SqlType::Float8),
        },
        D::Numeric(info) | D::Decimal(info) | D::Dec(info) => {
            // Checked as written: a precision of 258 had been cut to a u8 (2), and the
            // column silently became numeric(2, 0).
            let (p, s): (u64, i64) = match info {
                ExactNumberInfo::None => (DEFAULT_NUMERIC.0.into(), DEFAULT_NUMERIC.1.into()),
                ExactNumberInfo::Precision(p) => (*p, 0),
                ExactNumberInfo::PrecisionAndScale(p, s) => (*p, *s),
            };
            if !(1..=38).contains(&p) || s < 0 || s as u64 > p {
                return bad(format!(
                    "NUMERIC precision must be between 1 and 38 and scale between 0 and the precision, not ({p}, {s})"
                ));
            }
            plain(SqlType::Numeric {
                precision: p as u8,
                scale: s as i8,
            })
        }
        D::Bool | D::Boolean => plain(SqlType::Bool),
        D::Text | D::String(None) => plain(SqlType::Text),
        D::Varchar(len) | D::CharacterVarying(len) | D::CharVarying(len) => {
            plain(SqlType::Varchar(char_len(len.as_ref(), "varchar")?))
        }
        D::Char(len) | D::Character(len) => {
            char_len(len.as_ref(), "character")?;
            plain(SqlType::Text)
        }
        D::Uuid => plain(SqlType::Uuid),
        D::JSON | D::JSONB => plain(SqlType::Jsonb),
        D::Date => plain(SqlType::Date),
        D::Timestamp(_, tz) => match tz {
            TimezoneInfo::None | TimezoneInfo::WithoutTimeZone => plain(SqlType::Timestamp),
            _ => plain(SqlType::Timestamptz),
        },
        D::Bytea => plain(SqlType::Bytea),
        D::Array(ArrayElemTypeDef::SquareBracket(inner, size)) => {
            let inner_ty = declared_type(inner)?.ty;
            match (inner_ty, size) {
                (SqlType::Float4, None) => plain(SqlType::Vector { dim: None }),
                (SqlType::Float4, Some(n)) => {
                    if *n == 0 || *n > 65_536 {
                        return bad(format!(
                            "vector dimension must be between 1 and 65536, not {n}"
                        ));
                    }
                    plain(SqlType::Vector {
                        dim: Some(*n as u32),
                    })
                }
                (SqlType::Vector { dim: None }, None) => plain(SqlType::MultiVector),
                (SqlType::Text, None) => plain(SqlType::TextArray),
                (SqlType::Int4, None) => plain(SqlType::Int4Array),
                (SqlType::Int8, None) => plain(SqlType::Int8Array),
                _ => bad(format!("array type {dt} is not supported")),
            }
        }
        D::Custom(name, _) => {
            let n = name.to_string().to_lowercase();
            match n.as_str() {
                "serial" | "serial4" => Ok(DeclaredType {
                    ty: SqlType::Int4,
                    serial: true,
                }),
                "bigserial" | "serial8" => Ok(DeclaredType {
                    ty: SqlType::Int8,
                    serial: true,
                }),
                "timestamptz" => plain(SqlType::Timestamptz),
                "json" | "jsonb" => plain(SqlType::Jsonb),
                "float4" => plain(SqlType::Float4),
                "float8" => plain(SqlType::Float8),
                _ => bad(format!("type \"{n}\" does not exist")),
            }
        }
        other => bad(format!("type \"{other}\" does not exist")),
    }
}

/// Longest `varchar(n)` / `char(n)`, as in PostgreSQL.
const MAX_CHAR_LEN: u64 = 10_485_760;

/// The length of `varchar(n)` / `char(n)`, checked as PostgreSQL checks it (a length of
/// 2^32 + 1 had been cut to a u32, 1, and the column silently became varchar(1)).
fn char_len(len: Option<&ast::CharacterLength>, ty: &str) -> Result<Option<u32>> {
    match len {
        Some(ast::CharacterLength::IntegerLength { length: 0, .. }) => {
            bad(format!("length for type {ty} must be at least 1"))
        }
        Some(ast::CharacterLength::IntegerLength { length, .. }) if *length > MAX_CHAR_LEN => bad(
            format!("length for type {ty} cannot exceed {MAX_CHAR_LEN}, not {length}"),
        ),
        Some(ast::CharacterLength::IntegerLength { length, .. }) => Ok(Some(*length as u32)),
        _ => Ok(None),
    }
}

/// Field metadata marking JSON text.
pub fn json_metadata() -> HashMap<String, String> {
    HashMap::from([(EXTENSION_KEY.to_string(), JSON_EXTENSION.to_string())])
}

/// Whether a field carries JSON text.
pub fn is_json_field(field: &Field) -> bool {
    field.metadata().get(EXTENSION_KEY).map(String::as_str) == Some(JSON_EXTENSION)
        || field.metadata().get("is_json").map(String::as_str) == Some("true")
}

fn f32_item() -> Arc<Field> {
    Arc::new(Field::new_list_field(DataType::Float32, true))
}

/// How many list levels `t` has (0 for a scalar): Tarn's array types have one
/// (`FLOAT4[][]`, a bag of vectors, two).
pub(crate) fn list_depth(t: &DataType) -> usize {
    match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            1 + list_depth(f.data_type())
        }
        _ => 0,
    }
}

/// The Arrow type a column of `ty` is stored and scanned as.
pub fn arrow_type(ty: &SqlType) -> DataType {
    match ty {
        SqlType::Int2 => DataType::Int16,
        SqlType::Int4 => DataType::Int32,
        SqlType::Int8 => DataType::Int64,
        SqlType::Float4 => DataType::Float32,
        SqlType::Float8 => DataType::Float64,
        SqlType::Numeric { precision, scale } => DataType::Decimal128(*precision, *scale),
        SqlType::Bool => DataType::Boolean,
        SqlType::Text | SqlType::Varchar(_) | SqlType::Uuid | SqlType::Jsonb => DataType::Utf8,
        SqlType::Date => DataType::Date32,
        SqlType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
        SqlType::Timestamptz => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        SqlType::Bytea => DataType::Binary,
        SqlType::Vector { dim: Some(n) } => DataType::FixedSizeList(f32_item(), *n as i32),
        SqlType::Vector { dim: None } => DataType::List(f32_item()),
        SqlType::MultiVector => DataType::List(Arc::new(Field::new_list_field(
            DataType::List(f32_item()),
            true,
        ))),
        SqlType::TextArray => DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))),
        SqlType::Int4Array => {
            DataType::List(Arc::new(Field::new_list_field(DataType::Int32, true)))
        }
        SqlType::Int8Array => {
            DataType::List(Arc::new(Field::new_list_field(DataType::Int64, true)))
        }
        _ => DataType::Utf8,
    }
}

/// The field a column is exposed as to SQL (named, typed, JSON marked).
pub fn column_field(name: &str, ty: &SqlType, nullable: bool) -> Field {
    let f = Field::new(name, arrow_type(ty), nullable);
    if *ty == SqlType::Jsonb {
        f.with_metadata(json_metadata())
    } else {
        f
    }
}

/// The SQL type a query result column becomes in `CREATE TABLE … AS SELECT`.
pub fn sql_type_of(field: &Field) -> Result<SqlType> {
    if is_json_field(field) {
        return Ok(SqlType::Jsonb);
    }
    Ok(match field.data_type() {
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => SqlType::Int2,
        DataType::Int32 | DataType::UInt16 => SqlType::Int4,
        DataType::Int64 | DataType::UInt32 | DataType::UInt64 => SqlType::Int8,
        DataType::Float16 | DataType::Float32 => SqlType::Float4,
        DataType::Float64 => SqlType::Float8,
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => SqlType::Numeric {
            precision: (*p).min(38),
            scale: (*s).max(0),
        },
        DataType::Boolean => SqlType::Bool,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null => SqlType::Text,
        DataType::Date32 | DataType::Date64 => SqlType::Date,
        DataType::Timestamp(_, None) => SqlType::Timestamp,
        DataType::Timestamp(_, Some(_)) => SqlType::Timestamptz,
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => SqlType::Bytea,
        DataType::FixedSizeList(item, n) if is_float(item.data_type()) => SqlType::Vector {
            dim: Some(*n as u32),
        },
        DataType::List(item) | DataType::LargeList(item) => match item.data_type() {
            t if is_float(t) => SqlType::Vector { dim: None },
            DataType::List(inner) | DataType::FixedSizeList(inner, _)
                if is_float(inner.data_type()) =>
            {
                SqlType::MultiVector
            }
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => SqlType::TextArray,
            DataType::Int32 | DataType::Int16 | DataType::Int8 => SqlType::Int4Array,
            DataType::Int64 => SqlType::Int8Array,
            other => {
                return bad(format!(
                    "cannot store a column of type {}[]",
                    crate::error::pg_type_names(&other.to_string())
                ));
            }
        },
        DataType::Union(..) => SqlType::Jsonb,
        other => {
            return bad(format!(
                "cannot store a column of type {}",
                crate::error::pg_type_names(&other.to_string())
            ));
        }
    })
}

fn is_float(t: &DataType) -> bool {
    matches!(t, DataType::Float16 | DataType::Float32 | DataType::Float64)
}

/// `::timestamp` and `::timestamptz` (and `TIMESTAMP '…'`) without a precision mean
/// microseconds, Tarn's stored unit. DataFusion reads them as nanoseconds, whose range
/// (1677–2262) is narrower than the stored one: `t < '1000-01-01'::timestamptz` failed
/// on a column that holds `0001-01-01` and `9999-12-31`.
///
/// A quoted literal cast to a date or timestamp is also read as PostgreSQL reads it:
/// digits past the microsecond round to it (half to even, as PostgreSQL's `rint`;
/// Arrow's parser cut them off), and a year 0 or before is a 400 (there is no year 0;
/// Arrow's parser took `0000-01-01`).
pub fn timestamp_casts(stmt: &mut ast::Statement) -> Result<()> {
    fn micro(t: &mut ast::DataType) {
        if let ast::DataType::Timestamp(precision @ None, _) = t {
            *precision = Some(6);
        }
    }
    // A literal's time without seconds (`'2024-01-01 10:30'`), which PostgreSQL reads
    // and Arrow's parser does not, gets them; past microseconds, it is rounded.
    fn literal(t: &ast::DataType, value: &mut ast::Value) -> Result<()> {
        let target = match t {
            ast::DataType::Timestamp(
                _,
                ast::TimezoneInfo::WithTimeZone | ast::TimezoneInfo::Tz,
            ) => DateTimeTarget::Timestamptz,
            ast::DataType::Timestamp(..) => DateTimeTarget::Timestamp,
            ast::DataType::Date => DateTimeTarget::Date,
            _ => return Ok(()),
        };
        if let ast::Value::SingleQuotedString(text) = value
            && let Some(fixed) = date_time_text(text, target)?
        {
            *text = fixed;
        }
        Ok(())
    }
    let mut refused = None;
    let _ = ast::visit_expressions_mut(stmt, |e| {
        let r = match e {
            ast::Expr::Cast {
                data_type, expr, ..
            } => {
                let r = match expr.as_mut() {
                    ast::Expr::Value(v) => literal(data_type, &mut v.value),
                    _ => Ok(()),
                };
                micro(data_type);
                r
            }
            ast::Expr::TypedString(ts) => {
                let r = literal(&ts.data_type, &mut ts.value.value);
                micro(&mut ts.data_type);
                r
            }
            _ => Ok(()),
        };
        match r {
            Ok(()) => std::ops::ControlFlow::Continue(()),
            Err(e) => {
                refused = Some(e);
                std::ops::ControlFlow::Break(())
            }
        }
    });
    refused.map_or(Ok(()), Err)
}

/// A date's or timestamp's text as PostgreSQL reads it, where Arrow's parser (which
/// reads it next) differs: a 400 for a year 0 or before; a time without seconds gets
/// them; digits past the microsecond round to it. `None` when the text is fine as it is.
pub(crate) fn date_time_text(text: &str, target: DateTimeTarget) -> Result<Option<String>> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('-') || trimmed.starts_with("0000-") {
        return Err(Error::BadRequest(format!(
            "date/time field value out of range: {}",
            tarn_catalog::shown(text)
        )));
    }
    if target == DateTimeTarget::Date {
        return Ok(None);
    }
    // A `timestamp` (without time zone) ignores a zone written in its text, as
    // PostgreSQL's does; Arrow's parser turned `10:00+02:00` into 08:00.
    let unzoned = (target == DateTimeTarget::Timestamp)
        .then(|| without_zone(text))
        .flatten();
    let text = unzoned.as_deref().unwrap_or(text);
    let with = with_seconds(text);
    let rounded = round_to_micros(with.as_deref().unwrap_or(text));
    Ok(rounded.or(with).or(unzoned))
}

/// What a date or timestamp text is read into (see [`date_time_text`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DateTimeTarget {
    /// `date`.
    Date,
    /// `timestamp` (without time zone): a zone in the text is ignored.
    Timestamp,
    /// `timestamptz`: a zone in the text says which instant.
    Timestamptz,
}

/// `YYYY-MM-DD[ T]HH:MM[:SS[.f…]]` followed by a UTC offset (`Z`, `+02`, `-05:30`,
/// `+0530`), without it; `None` for any other text.
fn without_zone(text: &str) -> Option<String> {
    let t = text.trim();
    let b = t.as_bytes();
    if b.len() < 17 || !matches!(b.get(10), Some(b' ' | b'T' | b't')) {
        return None;
    }
    let time_end = 11
        + b[11..]
            .iter()
            .take_while(|c| c.is_ascii_digit() || matches!(c, b':' | b'.'))
            .count();
    let zone = t[time_end..].trim();
    let offset = |z: &str| {
        let digits: String = z.chars().filter(|c| *c != ':').collect();
        !digits.is_empty()
            && digits.len() <= 6
            && digits.chars().all(|c| c.is_ascii_digit())
            && z.chars().all(|c| c.is_ascii_digit() || c == ':')
    };
    let is_zone =
        zone.eq_ignore_ascii_case("z") || zone.strip_prefix(['+', '-']).is_some_and(offset);
    is_zone.then(|| t[..time_end].to_string())
}

/// `YYYY-MM-DD HH:MM:SS.f…` (or with `T`, then any zone) with more than six digits of
/// fraction, rounded to six (half to even) with the carry into the seconds and beyond:
/// `…23:59:59.9999996` is the next day. `None` for any other text.
fn round_to_micros(text: &str) -> Option<String> {
    let t = text.trim();
    let b = t.as_bytes();
    if b.len() < 21 || !matches!(b[10], b' ' | b'T' | b't') || b[19] != b'.' {
        return None;
    }
    let digits = b[20..].iter().take_while(|c| c.is_ascii_digit()).count();
    if digits <= 6 {
        return None;
    }
    let fraction = &t[20..20 + digits];
    let zone = &t[20 + digits..];
    let base = chrono::NaiveDateTime::parse_from_str(
        &t[..19].replace(['T', 't'], " "),
        "%Y-%m-%d %H:%M:%S",
    )
    .ok()?;
    // Rounded as uploads round it (tarn-ingest reads their timestamps).
    let micros = tarn_ingest::fraction_micros(fraction.as_bytes());
    let at = base.checked_add_signed(chrono::TimeDelta::microseconds(micros))?;
    Some(format!("{}{zone}", at.format("%Y-%m-%d %H:%M:%S%.6f")))
}

/// `YYYY-MM-DD HH:MM` (or with `T`), optionally followed by a zone (`Z`, `+02`,
/// `-05:30`), with `:00` seconds put in; `None` for any other text.
fn with_seconds(text: &str) -> Option<String> {
    let t = text.trim();
    let b = t.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let shape = b.len() >= 16
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && matches!(b[10], b' ' | b'T')
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16);
    let zone = &t[16.min(t.len())..];
    let zone_ok = zone.is_empty()
        || zone == "Z"
        || (zone.starts_with(['+', '-'])
            && zone[1..].bytes().all(|c| c.is_ascii_digit() || c == b':'));
    (shape && zone_ok).then(|| format!("{}:00{zone}", &t[..16]))
}

#[cfg(test)]
mod seconds_tests {
    #[test]
    fn fractions_past_microseconds_round_half_to_even() {
        use super::round_to_micros as r;
        assert_eq!(
            r("2024-01-01 00:00:00.1234565").as_deref(),
            Some("2024-01-01 00:00:00.123456")
        );
        assert_eq!(
            r("2024-01-01 00:00:00.1234575").as_deref(),
            Some("2024-01-01 00:00:00.123458")
        );
        assert_eq!(
            r("2024-01-01 00:00:00.12345650001Z").as_deref(),
            Some("2024-01-01 00:00:00.123457Z")
        );
        assert_eq!(
            r("1999-12-31T23:59:59.9999996+02:00").as_deref(),
            Some("2000-01-01 00:00:00.000000+02:00")
        );
        assert_eq!(r("2024-01-01 00:00:00.123456"), None);
        assert_eq!(r("2024-01-01"), None);
    }

    #[test]
    fn times_without_seconds_get_them() {
        use super::with_seconds as w;
        assert_eq!(
            w("2024-01-01 10:30").as_deref(),
            Some("2024-01-01 10:30:00")
        );
        assert_eq!(
            w("2024-01-01T10:30Z").as_deref(),
            Some("2024-01-01T10:30:00Z")
        );
        assert_eq!(
            w("2024-01-01 10:30+02:00").as_deref(),
            Some("2024-01-01 10:30:00+02:00")
        );
        assert_eq!(w("2024-01-01 10:30:15"), None);
        assert_eq!(w("2024-01-01"), None);
        assert_eq!(w("2024-01-01 10:30 junk"), None);
    }
}
