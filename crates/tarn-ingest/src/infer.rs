//! Type inference: what one value looks like ([`Kind`]), how kinds of one column
//! combine, and the strict parsers inference and decoding share.

use serde_json::Value;

use crate::ColumnType;

/// What the values of a column seen so far look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Only NULLs (or nothing) so far.
    Null,
    Bool,
    Int,
    /// An int8 a float8 cannot hold exactly (beyond ±2^53): int8 beside integers, text
    /// beside floats, which would round it.
    WideInt,
    Float,
    Date,
    Timestamp,
    /// Arrays of numbers, all of length `dim`; `json`: all written as JSON arrays
    /// (`[1, 2]`), none in PostgreSQL's array text (`{1,2}`, CSV only), which is not
    /// JSON.
    Vector {
        dim: u32,
        json: bool,
    },
    Json,
    /// A CSV field that is a JSON string (`"s"`, quotes included) or `null`: jsonb
    /// beside JSON arrays and objects (as a jsonb column's export writes them), text
    /// otherwise.
    JsonText,
    Text,
}

impl Kind {
    /// The kind of a column holding values of both `self` and `other`. `json_source`:
    /// the file is JSON, where every value is also a JSON value (a column of objects and
    /// numbers stays JSON; in CSV it becomes text).
    pub(crate) fn merge(self, other: Kind, json_source: bool) -> Kind {
        use Kind::*;
        match (self, other) {
            (Null, k) | (k, Null) => k,
            (a, b) if a == b => a,
            (Int, Float) | (Float, Int) => Float,
            (Int, WideInt) | (WideInt, Int) => WideInt,
            (Date, Timestamp) | (Timestamp, Date) => Timestamp,
            (Vector { dim: a, json: x }, Vector { dim: b, json: y }) if a == b => Vector {
                dim: a,
                json: x && y,
            },
            // In JSON files every value is JSON: arrays of different lengths, or beside
            // other values, are JSON.
            (Json, _) | (_, Json) | (Vector { .. }, _) | (_, Vector { .. }) if json_source => Json,
            // In CSV the same for JSON arrays and objects among themselves (so that
            // vectors of different lengths are jsonb from either format); beside other
            // fields (a CSV `42` is not a JSON number), or written `{1,2}` (not JSON),
            // they keep their text.
            (Json | Vector { json: true, .. }, Json | Vector { json: true, .. }) => Json,
            (Json | Vector { json: true, .. }, JsonText)
            | (JsonText, Json | Vector { json: true, .. }) => Json,
            _ => Text,
        }
    }

    /// The column type a column of this kind gets.
    pub(crate) fn column_type(self) -> ColumnType {
        match self {
            Kind::Null | Kind::Text | Kind::JsonText => ColumnType::Text,
            Kind::Bool => ColumnType::Bool,
            Kind::Int | Kind::WideInt => ColumnType::Int8,
            Kind::Float => ColumnType::Float8,
            Kind::Date => ColumnType::Date,
            Kind::Timestamp => ColumnType::Timestamptz,
            Kind::Vector { .. } => ColumnType::Vector,
            Kind::Json => ColumnType::Jsonb,
        }
    }
}

/// The kind of one CSV field (`None`: the empty field, NULL).
pub(crate) fn classify_text(s: &str) -> Kind {
    if s.is_empty() {
        return Kind::Null;
    }
    let t = s.trim();
    if t.eq_ignore_ascii_case("true") || t.eq_ignore_ascii_case("false") {
        return Kind::Bool;
    }
    if looks_integer(t) {
        // Leading zeros (zip codes, ids) and integers beyond int8 keep their text.
        return match parse_int(t) {
            Some(_) if has_leading_zero(t) => Kind::Text,
            Some(v) => int_kind(v),
            None => Kind::Text,
        };
    }
    if parse_date(t).is_some() {
        return Kind::Date;
    }
    if parse_timestamp(t).is_some() {
        return Kind::Timestamp;
    }
    if looks_decimal(t) {
        return match parse_float(t) {
            Some(_) if float8_rounds(t) => Kind::Text,
            Some(_) => Kind::Float,
            None => Kind::Text,
        };
    }
    if t == "null"
        || (t.len() >= 2
            && t.starts_with('"')
            && t.ends_with('"')
            && serde_json::from_str::<serde_json::Value>(t).is_ok_and(|v| v.is_string()))
    {
        return Kind::JsonText;
    }
    if t.starts_with('{') || t.starts_with('[') {
        let mut scratch = Vec::new();
        if let Ok(dim) = parse_vector(t, &mut scratch) {
            return Kind::Vector {
                dim,
                json: t.starts_with('['),
            };
        }
        // Parsed as decoding will parse it (same depth limit, same number range), and
        // as it stores it: written out while parsed. As a `serde_json::Value` tree a 60
        // MB cell of small arrays took 2.2 GB.
        if crate::JsonbText::new().canonical(t).is_ok() {
            return Kind::Json;
        }
    }
    Kind::Text
}

/// The kind of one JSON value (a missing key is NULL).
pub(crate) fn classify_json(v: &Value) -> Kind {
    match v {
        Value::Null => Kind::Null,
        Value::Bool(_) => Kind::Bool,
        Value::Number(n) if n.is_i64() => n.as_i64().map_or(Kind::Int, int_kind),
        Value::Number(_) => Kind::Float,
        // A JSON string is text unless it is an ISO date or timestamp: "42" stays text.
        Value::String(s) => {
            if parse_date(s).is_some() {
                Kind::Date
            } else if parse_timestamp(s).is_some() {
                Kind::Timestamp
            } else {
                Kind::Text
            }
        }
        Value::Array(items) => {
            let numbers = items.iter().all(|x| x.as_f64().is_some_and(fits_float4));
            if numbers && !items.is_empty() && items.len() <= u32::MAX as usize {
                Kind::Vector {
                    dim: items.len() as u32,
                    json: true,
                }
            } else {
                Kind::Json
            }
        }
        Value::Object(_) => Kind::Json,
    }
}

/// Digits with an optional sign: an integer however large.
pub(crate) fn looks_integer(t: &str) -> bool {
    let d = t.strip_prefix(['+', '-']).unwrap_or(t);
    !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())
}

/// A JSON number literal that is an integer (no point, no exponent) beyond int8, which
/// `serde_json` reads as the nearest float: such a value is text, with its digits.
pub(crate) fn is_big_integer(literal: &str) -> bool {
    looks_integer(literal) && literal.parse::<i64>().is_err()
}

/// An integer written with a leading zero (`007`): text, as zip codes and ids are.
pub(crate) fn has_leading_zero(t: &str) -> bool {
    let d = t.strip_prefix(['+', '-']).unwrap_or(t);
    d.len() > 1 && d.starts_with('0')
}

/// A decimal or exponent number: digits with a point or an exponent, nothing else
/// (`inf`, `NaN`, `1_000` and `0x10` are text).
fn looks_decimal(t: &str) -> bool {
    let b = t.as_bytes();
    b.iter().any(u8::is_ascii_digit)
        && b.iter()
            .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'+' | b'-'))
}

/// An int8 from text (surrounding whitespace allowed).
pub(crate) fn parse_int(s: &str) -> Option<i64> {
    let t = s.trim();
    if !looks_integer(t) {
        return None;
    }
    t.parse::<i64>().ok()
}

/// A finite float8 from text; `None` too for a number too small for a float8 (`1e-400`,
/// which parses as 0 though its digits are not all zero): never a changed value.
pub(crate) fn parse_float(s: &str) -> Option<f64> {
    let t = s.trim();
    if !looks_decimal(t) {
        return None;
    }
    let v = t.parse::<f64>().ok().filter(|v| v.is_finite())?;
    (!underflows(t, v)).then_some(v)
}

/// Whether the decimal `text` (digits with a point or an exponent) has more digits
/// than a float8 keeps: its nearest float8 reads back as another number
/// (`3.14159265358979323846`), so a float8 column would change it. Such a value is
/// text, as an integer beyond int8 is.
pub(crate) fn float8_rounds(text: &str) -> bool {
    let t = text.trim();
    // Seventeen significant digits or fewer: the float8 comes back as written when
    // printed with as many (fifteen or fewer always do; `0.10000000000000001` is 0.1 to
    // seventeen digits). Counted before anything is parsed (most values are short).
    let significant = t
        .split(['e', 'E'])
        .next()
        .unwrap_or(t)
        .bytes()
        .filter(u8::is_ascii_digit)
        .skip_while(|&b| b == b'0')
        .count();
    if significant <= 15 {
        return false;
    }
    let Ok(v) = t.parse::<f64>() else {
        return false;
    };
    if !v.is_finite() || v == 0.0 {
        // Zero, or too small for a float8 (`underflows` tells those apart).
        return false;
    }
    let written = decimal_digits(t);
    if written == decimal_digits(&format!("{:e}", v.abs())) {
        return false;
    }
    let n = written.0.len();
    !(n <= 17 && written == decimal_digits(&format!("{:.*e}", n.saturating_sub(1), v.abs())))
}

/// The significant digits of a decimal number's text and the power of ten of its first
/// one (sign ignored): equal for texts of one value (`1.50` and `15e-1`).
fn decimal_digits(t: &str) -> (String, i64) {
    let t = t.trim_start_matches(['+', '-']);
    let (mantissa, exp) = match t.split_once(['e', 'E']) {
        // An exponent past i64 (or near its ends) is no float8's anyway: clamped.
        Some((m, e)) => (m, e.parse::<i64>().unwrap_or(0).clamp(-1 << 40, 1 << 40)),
        None => (t, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits: String = int.chars().chain(frac.chars()).collect();
    let lead = digits.len() - digits.trim_start_matches('0').len();
    let digits = digits
        .trim_start_matches('0')
        .trim_end_matches('0')
        .to_string();
    let first = exp
        .saturating_add(int.len() as i64)
        .saturating_sub(lead as i64);
    if digits.is_empty() {
        (digits, 0)
    } else {
        (digits, first)
    }
}

/// A decimal (a point or an exponent, not digits alone) with more digits than a float8
/// keeps (see [`float8_rounds`]).
pub(crate) fn is_long_decimal(t: &str) -> bool {
    !looks_integer(t) && looks_decimal(t) && float8_rounds(t)
}

/// A JSON number literal that `serde_json` would read as another number: an integer
/// beyond int8 (read as the nearest float) or a decimal with more digits than a float8
/// keeps. Such a value is text, with its digits.
pub(crate) fn is_inexact_number(literal: &str) -> bool {
    is_big_integer(literal) || is_long_decimal(literal)
}

/// Whether `parsed`, read from the number `text`, is a zero the text is not: a value
/// too small for the float it was read into (`1e-400`), whose digits are not all zero.
pub fn underflows(text: &str, parsed: f64) -> bool {
    let mantissa = text.split(['e', 'E']).next().unwrap_or(text);
    parsed == 0.0 && mantissa.bytes().any(|b| matches!(b, b'1'..=b'9'))
}

/// Whether a float8 holds `v` exactly for certain: every integer within ±2^53 is one.
pub(crate) fn exact_in_float8(v: i64) -> bool {
    v.unsigned_abs() <= 1 << 53
}

/// [`Kind::Int`], or [`Kind::WideInt`] for an integer a float8 would round.
fn int_kind(v: i64) -> Kind {
    if exact_in_float8(v) {
        Kind::Int
    } else {
        Kind::WideInt
    }
}

/// `true`/`false` in any case.
pub(crate) fn parse_bool(s: &str) -> Option<bool> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("true") {
        Some(true)
    } else if t.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    }
}

fn two(b: &[u8]) -> Option<u32> {
    match b {
        [x @ b'0'..=b'9', y @ b'0'..=b'9'] => Some(u32::from(x - b'0') * 10 + u32::from(y - b'0')),
        _ => None,
    }
}

/// Days since 1970-01-01 of an ISO date `YYYY-MM-DD` (a real calendar day).
pub(crate) fn parse_date(s: &str) -> Option<i32> {
    let b = s.trim().as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let year = two(&b[0..2])? * 100 + two(&b[2..4])?;
    // There is no year 0 (1 BC comes before AD 1): PostgreSQL refuses `0000-01-01`.
    if year == 0 {
        return None;
    }
    let date = chrono::NaiveDate::from_ymd_opt(year as i32, two(&b[5..7])?, two(&b[8..10])?)?;
    Some(chrono::Datelike::num_days_from_ce(&date) - 719_163)
}

/// The microseconds a fraction of a second written with `digits` (ASCII digits after the
/// point) stands for, rounded to the microsecond as PostgreSQL rounds it (`rint`: half
/// to even); 1,000,000 when it rounds up to the next second (`.9999996`).
pub fn fraction_micros(digits: &[u8]) -> i64 {
    let mut micros = 0i64;
    for (i, c) in digits.iter().enumerate().take(6) {
        micros += i64::from(c.wrapping_sub(b'0')) * 10i64.pow(5 - i as u32);
    }
    if digits.len() > 6 {
        let up = match digits[6] {
            b'6'..=b'9' => true,
            b'5' => digits[7..].iter().any(|&c| c != b'0') || micros % 2 == 1,
            _ => false,
        };
        if up {
            micros += 1;
        }
    }
    micros
}

/// Microseconds since the epoch (UTC) of an ISO timestamp: `YYYY-MM-DD`, `T`, `t` or a
/// space, `HH:MM[:SS[.fraction]]`, then `Z` or an offset `±HH[[:]MM]`, or nothing (UTC).
/// Digits past microseconds round to the nearest microsecond.
pub(crate) fn parse_timestamp(s: &str) -> Option<i64> {
    parse_any_timestamp(s).filter(|m| (FIRST_MICROS..=LAST_MICROS).contains(m))
}

/// [`parse_timestamp`] without its range: a timestamp an offset carries past years 1 to
/// 9999 too (what an error about it says).
pub(crate) fn parse_any_timestamp(s: &str) -> Option<i64> {
    let b = s.trim().as_bytes();
    if b.len() < 16 || !matches!(b[10], b'T' | b't' | b' ') || b[13] != b':' {
        return None;
    }
    let days = i64::from(parse_date(std::str::from_utf8(&b[..10]).ok()?)?);
    let (hour, minute) = (two(&b[11..13])?, two(&b[14..16])?);
    let mut rest = &b[16..];
    let mut second = 0;
    let mut micros = 0i64;
    if let [b':', s1, s2, tail @ ..] = rest {
        second = two(&[*s1, *s2])?;
        rest = tail;
        if let [b'.', tail @ ..] = rest {
            let n = tail.iter().take_while(|c| c.is_ascii_digit()).count();
            if n == 0 {
                return None;
            }
            micros = fraction_micros(&tail[..n]);
            rest = &tail[n..];
        }
    }
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let offset_minutes: i64 = match rest {
        [] | [b'Z'] | [b'z'] => 0,
        [sign @ (b'+' | b'-'), tz @ ..] => {
            let (h, m) = match tz {
                [h1, h2] => (two(&[*h1, *h2])?, 0),
                [h1, h2, m1, m2] => (two(&[*h1, *h2])?, two(&[*m1, *m2])?),
                [h1, h2, b':', m1, m2] => (two(&[*h1, *h2])?, two(&[*m1, *m2])?),
                _ => return None,
            };
            if h > 15 || m > 59 {
                return None;
            }
            let off = i64::from(h * 60 + m);
            if *sign == b'-' { -off } else { off }
        }
        _ => return None,
    };
    let seconds =
        days * 86_400 + i64::from(hour * 3600 + minute * 60 + second) - offset_minutes * 60;
    Some(seconds * 1_000_000 + micros)
}

/// Microseconds in a day.
pub const DAY_MICROS: i64 = 86_400_000_000;

/// The first and last day a table stores, in days since 1970-01-01: `0001-01-01` and
/// `9999-12-31`, the years every reader of an export (CSV, JSON, an import into Tarn or
/// another database) writes with four digits. SQL writes past them are refused; an
/// upload's value past them is no date or timestamp.
pub const STORED_DAYS: (i64, i64) = (-719_162, 2_932_896);

/// `0001-01-01T00:00:00Z` and `9999-12-31T23:59:59.999999Z` in microseconds since the
/// epoch: the timestamps a table stores (an offset can carry `0001-01-01T00:00:00+01:00`
/// into year 0 in UTC: such a value leaves its column text).
const FIRST_MICROS: i64 = STORED_DAYS.0 * DAY_MICROS;
const LAST_MICROS: i64 = (STORED_DAYS.1 + 1) * DAY_MICROS - 1;

/// Appends the elements of an array of numbers (`[1, 2.5]`, or PostgreSQL's `{1,2.5}`)
/// to `out` and returns its length. Elements must be finite float4 numbers; an empty
/// array is not a vector.
/// Whether `v` is stored as a float4 vector element unchanged but for rounding: finite
/// there, and not a non-zero too small for it (stored, it would be 0; PostgreSQL's
/// real refuses it as an underflow, as Tarn's INSERT does).
pub(crate) fn fits_float4(v: f64) -> bool {
    let f = v as f32;
    f.is_finite() && (f != 0.0 || v == 0.0)
}

pub(crate) fn parse_vector(s: &str, out: &mut Vec<f32>) -> Result<u32, &'static str> {
    let t = s.trim();
    let inner = t
        .strip_prefix('[')
        .and_then(|x| x.strip_suffix(']'))
        .or_else(|| t.strip_prefix('{').and_then(|x| x.strip_suffix('}')))
        .ok_or("not an array of numbers")?;
    if inner.trim().is_empty() {
        return Err("an empty array is not a vector");
    }
    let start = out.len();
    for item in inner.split(',') {
        let v = parse_float(item)
            .or_else(|| parse_int(item).map(|i| i as f64))
            .ok_or("not an array of numbers")?;
        if !fits_float4(v) || (v == 0.0 && underflows(item.trim(), v)) {
            out.truncate(start);
            return Err(
                "vector elements must be float4 numbers: finite, and zero or at least \
                 1e-45 in magnitude",
            );
        }
        out.push(v as f32);
    }
    u32::try_from(out.len() - start).map_err(|_| "too many elements")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_fields() {
        let cases = [
            ("", Kind::Null),
            ("42", Kind::Int),
            ("-7", Kind::Int),
            ("007", Kind::Text),
            ("0", Kind::Int),
            ("99999999999999999999", Kind::Text),
            ("1.5", Kind::Float),
            ("1e3", Kind::Float),
            ("-.5", Kind::Float),
            ("inf", Kind::Text),
            ("NaN", Kind::Text),
            ("TRUE", Kind::Bool),
            ("false", Kind::Bool),
            ("2024-02-29", Kind::Date),
            ("2023-02-29", Kind::Text),
            ("2024-01-02T03:04:05Z", Kind::Timestamp),
            ("2024-01-02 03:04", Kind::Timestamp),
            ("2024-01-02 03:04:05.123456789+05:30", Kind::Timestamp),
            ("2024-01-02 25:04", Kind::Text),
            ("[1, 2.5, 3]", Kind::Vector { dim: 3, json: true }),
            (
                "{1,2}",
                Kind::Vector {
                    dim: 2,
                    json: false,
                },
            ),
            ("[]", Kind::Json),
            ("{\"a\": 1}", Kind::Json),
            ("[1, \"x\"]", Kind::Json),
            ("hello", Kind::Text),
        ];
        for (s, k) in cases {
            assert_eq!(classify_text(s), k, "{s:?}");
        }
    }

    #[test]
    fn merges_kinds() {
        // A CSV JSON string or `null` is jsonb beside JSON objects and arrays, else text.
        assert_eq!(classify_text("\"s\""), Kind::JsonText);
        assert_eq!(classify_text("null"), Kind::JsonText);
        assert_eq!(classify_text("\"s"), Kind::Text);
        assert_eq!(Kind::Json.merge(Kind::JsonText, false), Kind::Json);
        assert_eq!(Kind::JsonText.merge(Kind::Null, false), Kind::JsonText);
        assert_eq!(Kind::JsonText.column_type(), ColumnType::Text);
        assert_eq!(Kind::JsonText.merge(Kind::Text, false), Kind::Text);
        assert_eq!(Kind::Int.merge(Kind::Float, false), Kind::Float);
        // An integer a float8 would round keeps the column int8 or makes it text.
        assert_eq!(classify_text("9007199254740993"), Kind::WideInt);
        assert_eq!(classify_text("9007199254740992"), Kind::Int);
        assert_eq!(Kind::Int.merge(Kind::WideInt, false), Kind::WideInt);
        assert_eq!(Kind::WideInt.merge(Kind::Float, false), Kind::Text);
        assert_eq!(Kind::WideInt.column_type(), ColumnType::Int8);
        // A number too small for a float8 is text, not 0.
        assert_eq!(classify_text("1e-400"), Kind::Text);
        assert_eq!(classify_text("0.0e-400"), Kind::Float);
        // More digits than a float8 keeps: text; as many as it keeps: a float.
        assert_eq!(classify_text("3.14159265358979323846"), Kind::Text);
        // Timestamps round to the microsecond; there is no year 0.
        assert_eq!(
            parse_timestamp("1999-12-31T23:59:59.9999996Z"),
            parse_timestamp("2000-01-01T00:00:00Z")
        );
        assert_eq!(
            parse_timestamp("2000-01-01T00:00:00.0000004Z"),
            parse_timestamp("2000-01-01T00:00:00Z")
        );
        assert_eq!(parse_date("0000-01-01"), None);
        // Only what a table stores: years 1 to 9999 in UTC.
        assert_eq!(parse_timestamp("0001-01-01T00:00:00+01:00"), None);
        assert!(parse_timestamp("0001-01-01T00:00:00Z").is_some());
        assert!(parse_timestamp("9999-12-31T23:59:59.999999Z").is_some());
        assert_eq!(parse_timestamp("9999-12-31T23:30:00-01:00"), None);
        assert_eq!(FIRST_MICROS, -62_135_596_800_000_000);
        assert_eq!(LAST_MICROS, 253_402_300_799_999_999);
        assert_eq!(parse_date("0001-01-01"), Some(STORED_DAYS.0 as i32));
        assert_eq!(parse_date("9999-12-31"), Some(STORED_DAYS.1 as i32));
        // Halves to even, as PostgreSQL's rint.
        let at = |f: &str| parse_timestamp(&format!("2000-01-01T00:00:00.{f}Z"));
        assert_eq!(at("0000005"), at("000000"));
        assert_eq!(at("0000015"), at("000002"));
        assert_eq!(at("00000050001"), at("000001"));
        assert_eq!(at("1234565"), at("123456"));
        assert_eq!(classify_text("0000-01-01"), Kind::Text);
        assert_eq!(classify_text("0.30000000000000004"), Kind::Float);
        assert_eq!(classify_text("1.2345678901234500000"), Kind::Float);
        assert_eq!(classify_text("123456789.123456789"), Kind::Text);
        // Seventeen digits that print the same float8 (`%.17g`'s output) are a float.
        assert_eq!(classify_text("0.10000000000000001"), Kind::Float);
        assert_eq!(classify_text("0.33333333333333331"), Kind::Float);
        assert_eq!(classify_text("0.12345678901234567"), Kind::Text);
        // Exponents past any float8: no panic.
        assert!(!float8_rounds(
            "0.00001234567890123456789e-9223372036854775808"
        ));
        assert!(!float8_rounds("1234567890123456789e9223372036854775807"));
        assert!(is_inexact_number("1.00000000000000001"));
        assert!(!is_inexact_number("1.5e300"));
        assert!(is_inexact_number("99999999999999999999"));
        assert_eq!(Kind::Date.merge(Kind::Timestamp, false), Kind::Timestamp);
        assert_eq!(Kind::Int.merge(Kind::Bool, false), Kind::Text);
        let v = |dim, json| Kind::Vector { dim, json };
        assert_eq!(v(2, true).merge(v(3, true), false), Kind::Json);
        assert_eq!(v(2, true).merge(v(3, true), true), Kind::Json);
        assert_eq!(v(2, true).merge(v(2, false), false), v(2, false));
        assert_eq!(v(2, false).merge(v(3, false), false), Kind::Text);
        assert_eq!(v(2, true).merge(v(3, false), false), Kind::Text);
        assert_eq!(v(2, true).merge(Kind::Json, false), Kind::Json);
        assert_eq!(v(2, false).merge(Kind::Json, false), Kind::Text);
        assert_eq!(v(2, true).merge(Kind::Int, false), Kind::Text);
        assert_eq!(v(2, true).merge(Kind::Int, true), Kind::Json);
        assert_eq!(Kind::Json.merge(Kind::Int, true), Kind::Json);
        assert_eq!(Kind::Json.merge(Kind::Text, false), Kind::Text);
        assert_eq!(Kind::Null.merge(Kind::Int, false), Kind::Int);
    }

    #[test]
    fn parses_timestamps() {
        assert_eq!(parse_timestamp("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_timestamp("1970-01-01 01:00:00+01:00"), Some(0));
        assert_eq!(parse_timestamp("1970-01-01 00:00:01.5"), Some(1_500_000));
        assert_eq!(parse_timestamp("1969-12-31T23:59:59Z"), Some(-1_000_000));
        assert_eq!(parse_date("1970-01-02"), Some(1));
        assert_eq!(parse_date("1969-12-31"), Some(-1));
    }
}
