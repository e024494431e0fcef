//! The stored text of a jsonb value, written while `serde_json` parses it.
//!
//! A jsonb cell is stored as the compact text of the parsed value: no insignificant
//! whitespace, object keys in byte order with the last of duplicate keys kept, numbers
//! and strings as `serde_json` prints them — what parsing into a `serde_json::Value` and
//! printing it gives. Building that tree allocates a `String` per key and a `BTreeMap`
//! node per object, which was most of the cost of bulk inserts and uploads into tables
//! with a jsonb column; [`JsonbText`] writes the same text from `serde_json`'s parse
//! events instead, reusing its buffers from one value to the next. The parser is
//! `serde_json`'s own, so what is accepted, how numbers are read and every error
//! message are the tree path's.

use std::fmt::{self, Write as _};

use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};

/// Capacity a [`JsonbText`] keeps between values (larger buffers are freed).
const KEPT_BYTES: usize = 64 << 10;

/// Writes the stored text of JSON values; keeps its buffers between values.
#[derive(Debug, Default)]
pub struct JsonbText {
    out: String,
    /// Keys of the objects being written, decoded (they decide the order).
    keys: String,
    /// Members of the objects being written, innermost last.
    members: Vec<Member>,
}

/// One object member already written: its decoded key (a range of `keys`) and the range
/// of `"key":value` in `out`.
#[derive(Debug)]
struct Member {
    key: (usize, usize),
    start: usize,
    end: usize,
}

impl JsonbText {
    /// A writer with empty buffers.
    pub fn new() -> Self {
        Self::default()
    }

    /// The stored text of the JSON document `input`, or `serde_json`'s error for it.
    pub fn canonical(&mut self, input: &str) -> Result<&str, serde_json::Error> {
        self.clear();
        let mut de = serde_json::Deserializer::from_str(input);
        Canonical(self).deserialize(&mut de)?;
        de.end()?;
        Ok(&self.out)
    }

    /// Forgets the last value. Buffers a huge value grew are given back, so that a
    /// writer kept per column holds no more than [`KEPT_BYTES`] between values.
    pub(crate) fn clear(&mut self) {
        for buf in [&mut self.out, &mut self.keys] {
            buf.clear();
            buf.shrink_to(KEPT_BYTES);
        }
        self.members.clear();
        self.members
            .shrink_to(KEPT_BYTES / std::mem::size_of::<Member>());
    }

    /// The text written since the last [`JsonbText::clear`].
    pub(crate) fn text(&self) -> &str {
        &self.out
    }

    /// Writes `s` as a JSON string.
    pub(crate) fn push_string(&mut self, s: &str) {
        push_json_string(&mut self.out, s);
    }

    /// A visitor writing the next value (for a caller inside a `serde_json` parse).
    pub(crate) fn visitor(&mut self) -> Canonical<'_> {
        Canonical(self)
    }
}

/// Appends `s` as a JSON string, escaped as `serde_json` escapes it: `"`, `\` and the
/// control characters (`\b \t \n \f \r` by name, the rest as `\u00xx`).
fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    let bytes = s.as_bytes();
    let mut from = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let named = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\t' => "\\t",
            b'\r' => "\\r",
            0x08 => "\\b",
            0x0c => "\\f",
            0..0x20 => "",
            _ => continue,
        };
        out.push_str(&s[from..i]);
        if named.is_empty() {
            let _ = write!(out, "\\u{b:04x}");
        } else {
            out.push_str(named);
        }
        from = i + 1;
    }
    out.push_str(&s[from..]);
    out.push('"');
}

/// Writes one value into the [`JsonbText`] it borrows.
pub(crate) struct Canonical<'a>(&'a mut JsonbText);

impl<'de> DeserializeSeed<'de> for Canonical<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

/// Appends a key, decoded, to the keys buffer and gives its range.
struct KeySeed<'a>(&'a mut String);

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = (usize, usize);

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(usize, usize), D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = (usize, usize);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<(usize, usize), E> {
        let start = self.0.len();
        self.0.push_str(s);
        Ok((start, self.0.len()))
    }
}

impl<'de> Visitor<'de> for Canonical<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.0.out.push_str("null");
        Ok(())
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<(), E> {
        self.0.out.push_str(if v { "true" } else { "false" });
        Ok(())
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<(), E> {
        let _ = write!(self.0.out, "{v}");
        Ok(())
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<(), E> {
        let _ = write!(self.0.out, "{v}");
        Ok(())
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<(), E> {
        // serde_json's parser yields finite numbers only; printed by serde_json.
        let n = serde_json::Number::from_f64(v)
            .ok_or_else(|| E::custom(format!("{v} is not a JSON number")))?;
        let _ = write!(self.0.out, "{n}");
        Ok(())
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<(), E> {
        push_json_string(&mut self.0.out, s);
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let w = self.0;
        w.out.push('[');
        let mut first = true;
        loop {
            let at = w.out.len();
            if !first {
                w.out.push(',');
            }
            if seq.next_element_seed(Canonical(w))?.is_none() {
                w.out.truncate(at);
                break;
            }
            first = false;
        }
        w.out.push(']');
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let w = self.0;
        w.out.push('{');
        let body = w.out.len();
        let first_member = w.members.len();
        let first_key = w.keys.len();
        while let Some(key) = map.next_key_seed(KeySeed(&mut w.keys))? {
            if w.members.len() > first_member {
                w.out.push(',');
            }
            let start = w.out.len();
            push_json_string(&mut w.out, &w.keys[key.0..key.1]);
            w.out.push(':');
            map.next_value_seed(Canonical(w))?;
            w.members.push(Member {
                key,
                start,
                end: w.out.len(),
            });
        }
        let keys = &w.keys;
        let key = |m: &Member| &keys[m.key.0..m.key.1];
        let members = &mut w.members[first_member..];
        if !members.windows(2).all(|p| key(&p[0]) < key(&p[1])) {
            // Sorted by key (stable, so equal keys keep their input order), and the last
            // of each run of equal keys kept, as inserting into a map does.
            members.sort_by(|a, b| key(a).cmp(key(b)));
            let written = w.out.split_off(body);
            let mut kept = 0;
            for j in 0..members.len() {
                if members
                    .get(j + 1)
                    .is_some_and(|next| key(next) == key(&members[j]))
                {
                    continue;
                }
                if kept > 0 {
                    w.out.push(',');
                }
                let m = &members[j];
                w.out.push_str(&written[m.start - body..m.end - body]);
                kept += 1;
            }
        }
        w.out.push('}');
        w.members.truncate(first_member);
        w.keys.truncate(first_key);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tree path [`JsonbText`] must match, text for text and error for error.
    fn via_tree(input: &str) -> Result<String, String> {
        serde_json::from_str::<serde_json::Value>(input)
            .map(|v| v.to_string())
            .map_err(|e| e.to_string())
    }

    fn check(w: &mut JsonbText, input: &str) -> bool {
        let got = w
            .canonical(input)
            .map(str::to_string)
            .map_err(|e| e.to_string());
        assert_eq!(got, via_tree(input), "{input:?}");
        got.is_ok()
    }

    #[test]
    fn matches_the_tree_path_on_written_examples() {
        let mut w = JsonbText::new();
        let valid = [
            r#"{"k": 12, "tag": "red"}"#,
            r#" { "b" : [1, 2 ,{"z":null,"a":true}], "a": false } "#,
            r#"{"a":1,"a":2,"b":3,"a":4}"#,
            r#"{"é":1,"e":2,"f":3}"#,
            r#"{"b":{"y":1,"x":2},"a":{"d":[{"q":1,"p":2}],"c":0}}"#,
            r#"{"\u0062":1,"a":2,"b":3}"#,
            r#"{"a\"":1,"a":2,"a\u0001":3,"a\\":4}"#,
            "[]",
            "{}",
            "[ { } , [ ] ]",
            r#""plain""#,
            r#""tab\tand \u00e9 and \/ and \ud83d\ude00 and \u001f \b\f\r\n""#,
            "0",
            "-1",
            "18446744073709551615",
            "-9223372036854775808",
            "1.5",
            "-0",
            "-0.0",
            "1e3",
            "18446744073709551616",
            "-9223372036854775809",
            "1E+2",
            "0.000001",
            "123456789012345678901234567890",
            "[1.0, 2.50, -0.0, 1e-7, 5e-324, 1.7976931348623157e308]",
            "\n\t\r true \n",
        ];
        for input in valid {
            assert!(check(&mut w, input), "{input:?} refused");
        }
        let invalid = [
            "",
            " ",
            "{",
            "[1,]",
            "{\"a\":1,}",
            "01",
            "-",
            "1.",
            ".5",
            "+1",
            "1e",
            "tru",
            "nul",
            "\"open",
            "\"a\u{1}\"",
            "[1 2]",
            "{\"a\" 1}",
            "{1:2}",
            "1 2",
            "NaN",
            "\"\\x\"",
            "\"\\ud800\"",
            "[1]x",
            "{\"a\":1}}",
            "1e400",
        ];
        for input in invalid {
            assert!(!check(&mut w, input), "{input:?} accepted");
        }
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert!(check(&mut w, &deep));
        let too_deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(!check(&mut w, &too_deep));
    }

    /// A small deterministic generator of JSON text: valid documents with random
    /// whitespace, key orders, duplicates, escapes and number spellings.
    struct Gen(u64);

    impl Gen {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn pick<'s>(&mut self, items: &[&'s str]) -> &'s str {
            items[(self.next() % items.len() as u64) as usize]
        }
        fn ws(&mut self) -> &'static str {
            self.pick(&["", "", "", " ", "\n", " \t\r "])
        }
        fn doc(&mut self, depth: u32, s: &mut String) {
            let kind = if depth > 3 {
                self.next() % 4
            } else {
                self.next() % 6
            };
            match kind {
                0 => s.push_str(self.pick(&[
                    "0",
                    "-0",
                    "7",
                    "-42",
                    "1.5",
                    "1e2",
                    "2E-3",
                    "-0.0",
                    "1.25e+300",
                    "9223372036854775807",
                    "-9223372036854775808",
                    "18446744073709551615",
                    "18446744073709551616",
                    "99999999999999999999999",
                    "0.1",
                    "3.0",
                ])),
                1 => s.push_str(self.pick(&["true", "false", "null"])),
                2 | 3 => s.push_str(self.pick(&[
                    r#""""#,
                    r#""a""#,
                    r#""red""#,
                    r#""é""#,
                    r#""\"q\"""#,
                    r#""\\""#,
                    r#""\u0041\u00e9""#,
                    r#""\n\t""#,
                    r#""\ud83d\ude00""#,
                    r#""x\/y""#,
                    r#""\u001f""#,
                    "\"\u{7f}\"",
                ])),
                4 => {
                    s.push('[');
                    let n = self.next() % 4;
                    for i in 0..n {
                        if i > 0 {
                            s.push(',');
                        }
                        s.push_str(self.ws());
                        self.doc(depth + 1, s);
                        s.push_str(self.ws());
                    }
                    s.push(']');
                }
                _ => {
                    s.push('{');
                    let n = self.next() % 5;
                    for i in 0..n {
                        if i > 0 {
                            s.push(',');
                        }
                        s.push_str(self.ws());
                        let key = self.pick(&[
                            r#""a""#,
                            r#""b""#,
                            r#""ab""#,
                            r#""B""#,
                            r#""""#,
                            r#""é""#,
                            r#""k""#,
                            r#""tag""#,
                            r#""\u0062""#,
                            r#""z""#,
                            r#""a\"""#,
                        ]);
                        s.push_str(key);
                        s.push_str(self.ws());
                        s.push(':');
                        s.push_str(self.ws());
                        self.doc(depth + 1, s);
                    }
                    s.push_str(self.ws());
                    s.push('}');
                }
            }
        }
    }

    #[test]
    fn matches_the_tree_path_on_generated_and_damaged_documents() {
        let mut g = Gen(0x9E37_79B9_7F4A_7C15);
        let mut w = JsonbText::new();
        for _ in 0..20_000 {
            let mut doc = String::new();
            doc.push_str(g.ws());
            g.doc(0, &mut doc);
            doc.push_str(g.ws());
            assert!(check(&mut w, &doc));
            // The same document damaged at one byte.
            let mut bytes = doc.into_bytes();
            let at = (g.next() % bytes.len() as u64) as usize;
            const NOISE: &[u8] = b"{}[],:\"\\ 0e-.x";
            let noise = NOISE[(g.next() % NOISE.len() as u64) as usize];
            match g.next() % 3 {
                0 => {
                    bytes.remove(at);
                }
                1 => bytes.insert(at, noise),
                _ => bytes[at] = noise,
            }
            if let Ok(damaged) = String::from_utf8(bytes) {
                check(&mut w, &damaged);
            }
        }
    }
}
