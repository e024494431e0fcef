//! JSON rows from a stream of chunks: one top-level array of objects, or objects one
//! after another (NDJSON, or any whitespace between them). The framer finds where each
//! object ends without parsing it, so memory holds one row at a time; serde_json then
//! parses the row into its keys in document order.

use std::collections::HashMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{MapAccess, Visitor};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Before the first value: an array or a stream.
    Start,
    /// Inside the top-level array, expecting a row (or `]` when `after_comma` is false).
    ArrayValue { after_comma: bool },
    /// Inside the top-level array after a row: `,` or `]`.
    ArrayNext,
    /// After the top-level array: only whitespace.
    ArrayDone,
    /// A stream of objects.
    Stream,
}

/// What [`Framer::next`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    NeedInput,
    /// A whole row in [`Framer::row`].
    Row,
    End,
}

/// Splits JSON bytes into rows.
pub(crate) struct Framer {
    mode: Mode,
    row: Vec<u8>,
    in_row: bool,
    depth: u32,
    in_string: bool,
    escape: bool,
    line: u64,
    row_line: u64,
    max_row_bytes: usize,
    /// Digits in a row just before the byte being read (outside strings).
    digits: u32,
    /// The row has a run of [`LONG_DIGITS`] digits or more outside its strings.
    long_number: bool,
}

/// Digits (a point between them included) of the shortest number `serde_json` may read
/// as another: a decimal of sixteen significant digits may be one a float8 rounds
/// (integers beyond int8 have 19). A row with a number this long may hold one, which
/// only its text can tell.
const LONG_DIGITS: u32 = 16;

impl Framer {
    pub(crate) fn new(max_row_bytes: usize) -> Self {
        Self {
            mode: Mode::Start,
            row: Vec::new(),
            in_row: false,
            depth: 0,
            in_string: false,
            escape: false,
            line: 1,
            row_line: 1,
            max_row_bytes,
            digits: 0,
            long_number: false,
        }
    }

    /// The last row has a number long enough to be an integer beyond int8 (which
    /// `serde_json` reads as a float): its values must be read from their text.
    pub(crate) fn long_number(&self) -> bool {
        self.long_number
    }

    /// The row's bytes (after [`Step::Row`]).
    pub(crate) fn row(&self) -> &[u8] {
        &self.row
    }

    /// The line the last row starts on.
    pub(crate) fn row_line(&self) -> u64 {
        self.row_line
    }

    fn unexpected(&self, b: u8, what: &str) -> String {
        let shown = if b.is_ascii_graphic() {
            format!("'{}'", b as char)
        } else {
            format!("byte 0x{b:02x}")
        };
        format!("line {}: expected {what}, found {shown}", self.line)
    }

    /// Reads from `input` (an empty slice ends the data) up to the end of the next row.
    pub(crate) fn next(&mut self, input: &[u8]) -> Result<(usize, Step), String> {
        if input.is_empty() {
            if self.in_row {
                return Err(format!(
                    "line {}: the data ends inside a row",
                    self.row_line
                ));
            }
            return match self.mode {
                Mode::ArrayValue { .. } | Mode::ArrayNext => Err(format!(
                    "line {}: the data ends before the array's ']'",
                    self.line
                )),
                _ => Ok((0, Step::End)),
            };
        }
        let mut i = 0;
        while i < input.len() {
            if self.in_row {
                // Copy up to the row's end (or the chunk's) in one go. Structure is
                // walked byte by byte; strings are skipped to the next quote or
                // backslash (a short look first, then memchr for long strings). Line
                // ends are counted outside strings only: a raw line end inside a string
                // is invalid JSON, so that row fails with serde_json's own line number.
                let start = i;
                let mut done = false;
                while i < input.len() {
                    if self.in_string {
                        if self.escape {
                            self.escape = false;
                            i += 1;
                            continue;
                        }
                        match find_quote_or_backslash(&input[i..]) {
                            None => i = input.len(),
                            Some(k) => {
                                i += k;
                                if input[i] == b'"' {
                                    self.in_string = false;
                                } else {
                                    self.escape = true;
                                }
                                i += 1;
                            }
                        }
                        continue;
                    }
                    let b = input[i];
                    i += 1;
                    if b.is_ascii_digit() {
                        self.digits += 1;
                        self.long_number |= self.digits >= LONG_DIGITS;
                        continue;
                    }
                    // A decimal's digits run on over its point.
                    if b == b'.' && self.digits > 0 {
                        continue;
                    }
                    self.digits = 0;
                    match b {
                        b'"' => self.in_string = true,
                        b'\n' => self.line += 1,
                        b'{' | b'[' => self.depth += 1,
                        b'}' | b']' => {
                            self.depth -= 1;
                            if self.depth == 0 {
                                done = true;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                self.row.extend_from_slice(&input[start..i]);
                if self.row.len() > self.max_row_bytes {
                    return Err(format!(
                        "line {}: a row longer than {} MiB",
                        self.row_line,
                        self.max_row_bytes >> 20
                    ));
                }
                if done {
                    self.in_row = false;
                    if matches!(self.mode, Mode::ArrayValue { .. }) {
                        self.mode = Mode::ArrayNext;
                    }
                    return Ok((i, Step::Row));
                }
                continue;
            }
            let b = input[i];
            match b {
                b'\n' => {
                    self.line += 1;
                    i += 1;
                    continue;
                }
                b' ' | b'\t' | b'\r' => {
                    i += 1;
                    continue;
                }
                _ => {}
            }
            match self.mode {
                Mode::Start if b == b'[' => {
                    self.mode = Mode::ArrayValue { after_comma: false };
                    i += 1;
                }
                Mode::Start => self.mode = Mode::Stream,
                Mode::ArrayValue { after_comma: false } if b == b']' => {
                    self.mode = Mode::ArrayDone;
                    i += 1;
                }
                Mode::ArrayNext if b == b',' => {
                    self.mode = Mode::ArrayValue { after_comma: true };
                    i += 1;
                }
                Mode::ArrayNext if b == b']' => {
                    self.mode = Mode::ArrayDone;
                    i += 1;
                }
                Mode::ArrayNext => return Err(self.unexpected(b, "',' or ']' between rows")),
                Mode::ArrayDone => {
                    return Err(self.unexpected(b, "nothing after the array's ']'"));
                }
                Mode::ArrayValue { .. } | Mode::Stream => {
                    if b != b'{' {
                        return Err(self.unexpected(b, "a JSON object for each row"));
                    }
                    self.row.clear();
                    self.in_row = true;
                    self.row_line = self.line;
                    self.depth = 0;
                    self.in_string = false;
                    self.escape = false;
                    self.digits = 0;
                    self.long_number = false;
                }
            }
        }
        Ok((i, Step::NeedInput))
    }
}

/// The offset of the first `"` or `\\` in `bytes`. Most strings in rows are short, so
/// a plain loop looks at the first bytes before memchr's vector search takes over.
fn find_quote_or_backslash(bytes: &[u8]) -> Option<usize> {
    const SHORT: usize = 24;
    let head = &bytes[..bytes.len().min(SHORT)];
    if let Some(k) = head.iter().position(|&b| b == b'"' || b == b'\\') {
        return Some(k);
    }
    if bytes.len() <= SHORT {
        return None;
    }
    memchr::memchr2(b'"', b'\\', &bytes[SHORT..]).map(|k| k + SHORT)
}

/// A row's keys and values in document order (serde_json's own map sorts its keys).
pub(crate) struct Row(pub(crate) Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Row {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct RowVisitor;
        impl<'de> Visitor<'de> for RowVisitor {
            type Value = Row;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Row, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some((k, v)) = map.next_entry::<String, Value>()? {
                    out.push((k, v));
                }
                Ok(Row(out))
            }
        }
        d.deserialize_map(RowVisitor)
    }
}

/// Per value of a framed row, in document order: whether it is an integer beyond int8
/// (read from the values' text; `serde_json` gives such a number as a float). Empty if
/// the row does not parse (its error comes from [`parse_row`]).
pub(crate) fn inexact_numbers(bytes: &[u8]) -> Vec<bool> {
    spelled(bytes, crate::infer::is_inexact_number)
}

/// Per value of a framed row, in document order: whether it is written `-0`, which
/// `serde_json` gives as the float -0.0 (an integer column's 0, as in CSV).
pub(crate) fn minus_zero_integers(bytes: &[u8]) -> Vec<bool> {
    spelled(bytes, |t| t.trim() == "-0")
}

/// Per value of a framed row, in document order: `test` of the value's text as written.
fn spelled(bytes: &[u8], test: fn(&str) -> bool) -> Vec<bool> {
    struct Flags(Vec<bool>);
    struct Seed(fn(&str) -> bool);
    impl<'de> serde::de::DeserializeSeed<'de> for Seed {
        type Value = Flags;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Flags, D::Error> {
            struct FlagVisitor(fn(&str) -> bool);
            impl<'de> Visitor<'de> for FlagVisitor {
                type Value = Flags;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a JSON object")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Flags, A::Error> {
                    let mut out = Vec::new();
                    while let Some((_, v)) =
                        map.next_entry::<serde::de::IgnoredAny, &serde_json::value::RawValue>()?
                    {
                        out.push((self.0)(v.get()));
                    }
                    Ok(Flags(out))
                }
            }
            d.deserialize_map(FlagVisitor(self.0))
        }
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    serde::de::DeserializeSeed::deserialize(Seed(test), &mut de)
        .map(|f| f.0)
        .unwrap_or_default()
}

/// Parses a framed row; an error names the line it is on (`first_line`: the row's).
pub(crate) fn parse_row(bytes: &[u8], first_line: u64) -> Result<Row, String> {
    serde_json::from_slice::<Row>(bytes).map_err(|e| {
        let line = first_line + (e.line() as u64).saturating_sub(1);
        format!("line {line}: invalid JSON: {e}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(data: &[u8], chunk: usize) -> Result<Vec<(u64, String)>, String> {
        let mut f = Framer::new(1 << 20);
        let mut out = Vec::new();
        let mut chunks = data.chunks(chunk);
        let mut pending: &[u8] = &[];
        loop {
            if pending.is_empty() {
                match chunks.next() {
                    Some(c) => pending = c,
                    None => {
                        let (_, step) = f.next(&[])?;
                        assert_eq!(step, Step::End);
                        return Ok(out);
                    }
                }
            }
            let (n, step) = f.next(pending)?;
            pending = &pending[n..];
            if step == Step::Row {
                out.push((f.row_line(), String::from_utf8_lossy(f.row()).into_owned()));
            }
        }
    }

    #[test]
    fn frames_arrays_and_streams() {
        let array = b"[\n {\"a\": \"}\\\"\"},\n {\"b\": [1, {\"c\": 2}]}\n]\n";
        let ndjson = b"{\"a\": 1}\n\n{\"b\":\n 2}\n";
        for chunk in 1..array.len() {
            let got = rows(array, chunk).expect("array");
            assert_eq!(got.len(), 2);
            assert_eq!(got[0], (2, "{\"a\": \"}\\\"\"}".into()));
            assert_eq!(got[1].0, 3);
            let got = rows(ndjson, chunk).expect("ndjson");
            assert_eq!(got.iter().map(|r| r.0).collect::<Vec<_>>(), vec![1, 3]);
        }
        // Line numbers after rows that span lines, with strings past the short scan.
        let long = "twenty-five bytes or more: } ] { [ \\\" \\\\ and more";
        let text = format!(
            "{{\"a\":\n\"{long}\"}}\n{{\"b\": \"{long}\",\n\n \"c\": [\n1]}}\r\n{{\"d\": 4}}\n"
        );
        for chunk in 1..text.len() {
            let got = rows(text.as_bytes(), chunk).expect("multi-line rows");
            assert_eq!(got.iter().map(|r| r.0).collect::<Vec<_>>(), vec![1, 3, 7]);
            assert_eq!(got[2].1, "{\"d\": 4}");
            let bad = format!("{text}\n x");
            let err = rows(bad.as_bytes(), chunk).expect_err("not an object");
            assert!(err.starts_with("line 9: expected a JSON object"), "{err}");
        }
        assert_eq!(rows(b"[]", 1).expect("empty").len(), 0);
        assert_eq!(rows(b"", 1).expect("nothing").len(), 0);
    }

    #[test]
    fn refuses_what_is_not_rows() {
        for (bad, needle) in [
            (&b"[1, 2]"[..], "line 1: expected a JSON object"),
            (b"{\"a\":1} x", "a JSON object"),
            (b"[{\"a\":1} {\"b\":2}]", "',' or ']'"),
            (b"[{\"a\":1}] [", "nothing after"),
            (b"[{\"a\":1},", "ends before"),
            (b"{\"a\":\n[1,", "line 1: the data ends inside a row"),
        ] {
            let err = rows(bad, 3).expect_err("refused");
            assert!(err.contains(needle), "{err}");
        }
    }

    #[test]
    fn keeps_key_order() {
        let row = parse_row(br#"{"z": 1, "a": {"y": 2, "b": 3}}"#, 1).expect("row");
        let keys: Vec<&str> = row.0.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, vec!["z", "a"]);
        let err = parse_row(b"{\"a\":\n\n tru}", 7).err().expect("bad");
        assert!(err.starts_with("line 9:"), "{err}");
    }
}

/// Why [`decode_row`] refused a row.
pub(crate) enum RowError {
    /// A value that does not fit its column (`why` says how).
    Cell {
        line: u64,
        column: usize,
        why: String,
    },
    /// Anything else, with its line.
    Row(String),
}

/// What went wrong inside the deserializer (its error carries only the position).
#[derive(Default)]
struct Trouble {
    /// Why a value did not fit its column.
    cell: Option<String>,
    column: Option<usize>,
    message: Option<String>,
}

struct KeySeed<'a> {
    names: &'a [String],
    index: &'a HashMap<String, usize>,
    guess: usize,
    trouble: &'a mut Trouble,
}

impl<'de> serde::de::DeserializeSeed<'de> for KeySeed<'_> {
    type Value = usize;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = usize;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<usize, E> {
        // Rows usually list their keys in one order: try the next column first.
        if self.names.get(self.guess).is_some_and(|n| n == s) {
            return Ok(self.guess);
        }
        match self.index.get(s) {
            Some(&i) => Ok(i),
            None => {
                self.trouble.message = Some(format!("key \"{s}\" is not a column"));
                Err(E::custom("key"))
            }
        }
    }
}

struct RowSeed<'a> {
    /// Values are read from their text (see [`crate::build::CellSeed::exact`]).
    exact: bool,
    builders: &'a mut [crate::build::ColumnBuilder],
    names: &'a [String],
    index: &'a HashMap<String, usize>,
    seen: &'a mut [bool],
    trouble: &'a mut Trouble,
}

impl<'de> Visitor<'de> for RowSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.seen.iter_mut().for_each(|s| *s = false);
        let mut guess = 0;
        loop {
            let key = map.next_key_seed(KeySeed {
                names: self.names,
                index: self.index,
                guess,
                trouble: self.trouble,
            })?;
            let Some(i) = key else { break };
            if self.seen[i] {
                self.trouble.message = Some(format!("key \"{}\" appears twice", self.names[i]));
                return Err(serde::de::Error::custom("twice"));
            }
            self.seen[i] = true;
            self.trouble.column = Some(i);
            map.next_value_seed(crate::build::CellSeed {
                column: &mut self.builders[i],
                failure: &mut self.trouble.cell,
                exact: self.exact,
            })?;
            guess = i + 1;
        }
        for (b, seen) in self.builders.iter_mut().zip(self.seen.iter()) {
            if !seen {
                b.push_null();
            }
        }
        Ok(())
    }
}

fn deserialize_row<'de, R: serde_json::de::Read<'de>>(
    mut de: serde_json::Deserializer<R>,
    seed: RowSeed<'_>,
) -> serde_json::Result<()> {
    serde::Deserializer::deserialize_map(&mut de, seed)?;
    de.end()
}

/// Decodes one framed row (starting on `first_line`) straight into the column
/// builders: each column gets one value (NULL for a missing key). `exact`: the row may
/// hold integers beyond int8 ([`Framer::long_number`]), so values are read from their
/// text.
pub(crate) fn decode_row(
    bytes: &[u8],
    first_line: u64,
    exact: bool,
    builders: &mut [crate::build::ColumnBuilder],
    names: &[String],
    index: &HashMap<String, usize>,
    seen: &mut [bool],
) -> Result<(), RowError> {
    let mut trouble = Trouble::default();
    let seed = RowSeed {
        exact,
        builders,
        names,
        index,
        seen,
        trouble: &mut trouble,
    };
    // Checked as UTF-8 once (one fast pass) rather than string by string; a row that is
    // not UTF-8 is parsed as bytes, so that serde_json says where.
    let res = match std::str::from_utf8(bytes) {
        Ok(text) => deserialize_row(serde_json::Deserializer::from_str(text), seed),
        Err(_) => deserialize_row(serde_json::Deserializer::from_slice(bytes), seed),
    };
    let Err(e) = res else {
        return Ok(());
    };
    let line = first_line + (e.line() as u64).saturating_sub(1);
    if let (Some(why), Some(column)) = (trouble.cell.take(), trouble.column) {
        return Err(RowError::Cell { line, column, why });
    }
    Err(RowError::Row(match trouble.message {
        Some(m) => format!("line {line}: {m}"),
        None => format!("line {line}: invalid JSON: {e}"),
    }))
}
