//! The stored text of a jsonb value, written in one pass over the input.
//!
//! A jsonb cell is stored as the compact text of the parsed value: no insignificant
//! whitespace, object keys in byte order with the last of duplicate keys kept, numbers and
//! strings as `serde_json` prints them. That is what parsing into a `serde_json::Value`
//! and printing it gives, but building the tree allocates a `String` per key and a
//! `BTreeMap` node per object, which was most of the cost of a bulk insert into a table
//! with a jsonb column. [`canonical_json`] writes the same text straight from the input.
//!
//! It handles the shapes bulk data has — objects, arrays, plain keys, strings, integers,
//! `true`/`false`/`null` — and gives up (returns `false`) on anything it does not
//! reproduce exactly by construction: an escape inside a key, very deep nesting, and any
//! syntax error. The caller then takes the `serde_json` path, which reports errors in its
//! own words. Strings with escapes and numbers other than plain in-range integers are
//! handed to `serde_json` one token at a time, so their spelling is its spelling.

/// Nesting deeper than this goes to `serde_json`, whose own limit (128) decides.
const MAX_DEPTH: usize = 64;

/// Appends the stored text of the JSON document `input` to `out` and returns `true`, or
/// returns `false` with `out` unchanged in length when the caller must parse `input` with
/// `serde_json` instead (a syntax error, or a shape this writer leaves to `serde_json`).
pub(crate) fn canonical_json(input: &str, out: &mut String) -> bool {
    let start = out.len();
    let mut w = Writer {
        text: input,
        bytes: input.as_bytes(),
        pos: 0,
        out,
        members: Vec::new(),
    };
    let ok = w.value(0).is_some() && {
        w.skip_ws();
        w.pos == w.bytes.len()
    };
    if !ok {
        w.out.truncate(start);
    }
    ok
}

/// One object member already written to the output: its key (raw, escape-free) and the
/// byte range of `"key":value` in the output.
struct Member<'a> {
    key: &'a str,
    start: usize,
    end: usize,
}

struct Writer<'a, 'o> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    out: &'o mut String,
    /// Members of the objects being written, innermost last (one stack, reused).
    members: Vec<Member<'a>>,
}

impl<'a> Writer<'a, '_> {
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn value(&mut self, depth: usize) -> Option<()> {
        self.skip_ws();
        match self.peek()? {
            b'{' => self.object(depth + 1),
            b'[' => self.array(depth + 1),
            b'"' => self.string(),
            b't' => self.word("true"),
            b'f' => self.word("false"),
            b'n' => self.word("null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn word(&mut self, word: &str) -> Option<()> {
        if !self.text[self.pos..].starts_with(word) {
            return None;
        }
        self.pos += word.len();
        self.out.push_str(word);
        Some(())
    }

    /// Scans the string token at `pos` (an opening quote); returns its byte range,
    /// quotes included, and whether it holds an escape.
    fn string_token(&mut self) -> Option<(usize, usize, bool)> {
        let start = self.pos;
        let mut i = start + 1;
        let mut escaped = false;
        loop {
            match *self.bytes.get(i)? {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    // Skip the escaped byte; `serde_json` validates the escape.
                    i += 2;
                    continue;
                }
                // A raw control character is a syntax error.
                0..0x20 => return None,
                _ => i += 1,
            }
        }
        self.pos = i + 1;
        Some((start, i + 1, escaped))
    }

    fn string(&mut self) -> Option<()> {
        let (start, end, escaped) = self.string_token()?;
        let token = &self.text[start..end];
        if escaped {
            // Decoded and printed by serde_json, so `\u00e9`, `\/` and the like come out
            // exactly as the tree path prints them.
            let s: String = serde_json::from_str(token).ok()?;
            let printed = serde_json::to_string(&s).ok()?;
            self.out.push_str(&printed);
        } else {
            self.out.push_str(token);
        }
        Some(())
    }

    fn number(&mut self) -> Option<()> {
        let start = self.pos;
        let negative = self.bytes[start] == b'-';
        let mut i = start + usize::from(negative);
        let digits_start = i;
        while self.bytes.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        let int_digits = i - digits_start;
        let mut plain = true;
        while let Some(b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-') = self.bytes.get(i) {
            plain = false;
            i += 1;
        }
        self.pos = i;
        let token = &self.text[start..i];
        let leading_zero = int_digits > 1 && self.bytes[digits_start] == b'0';
        if plain && int_digits > 0 && !leading_zero {
            let digits = &self.text[digits_start..i];
            // In range, serde_json keeps an integer as it is written; `-0` and values
            // past 64 bits become floats, whose printing is serde_json's business.
            let verbatim = if negative {
                digits != "0" && token.parse::<i64>().is_ok()
            } else {
                digits.parse::<u64>().is_ok()
            };
            if verbatim {
                self.out.push_str(token);
                return Some(());
            }
        }
        let n: serde_json::Number = serde_json::from_str(token).ok()?;
        self.out.push_str(&n.to_string());
        Some(())
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.pos += 1;
        self.out.push('[');
        self.skip_ws();
        if self.peek()? == b']' {
            self.pos += 1;
            self.out.push(']');
            return Some(());
        }
        loop {
            self.value(depth)?;
            self.skip_ws();
            match self.peek()? {
                b',' => {
                    self.pos += 1;
                    self.out.push(',');
                }
                b']' => {
                    self.pos += 1;
                    self.out.push(']');
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn object(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.pos += 1;
        self.out.push('{');
        let body = self.out.len();
        let first = self.members.len();
        self.skip_ws();
        if self.peek()? == b'}' {
            self.pos += 1;
            self.out.push('}');
            return Some(());
        }
        loop {
            self.skip_ws();
            if self.peek()? != b'"' {
                return None;
            }
            let (start, end, escaped) = self.string_token()?;
            if escaped {
                // Sorting needs the decoded key; left to serde_json.
                return None;
            }
            let key = &self.text[start + 1..end - 1];
            let member_start = self.out.len();
            self.out.push_str(&self.text[start..end]);
            self.skip_ws();
            if self.peek()? != b':' {
                return None;
            }
            self.pos += 1;
            self.out.push(':');
            self.value(depth)?;
            self.members.push(Member {
                key,
                start: member_start,
                end: self.out.len(),
            });
            self.skip_ws();
            match self.peek()? {
                b',' => {
                    self.pos += 1;
                    self.out.push(',');
                }
                b'}' => {
                    self.pos += 1;
                    break;
                }
                _ => return None,
            }
        }
        let members = &mut self.members[first..];
        let in_order = members.windows(2).all(|w| w[0].key < w[1].key);
        if in_order {
            self.out.push('}');
        } else {
            // Sorted by key (stable, so equal keys keep their input order) and the last of
            // each run of equal keys kept, as inserting into a map does.
            members.sort_by(|a, b| a.key.cmp(b.key));
            let written = self.out.split_off(body);
            let mut kept = 0;
            for j in 0..members.len() {
                if members
                    .get(j + 1)
                    .is_some_and(|next| next.key == members[j].key)
                {
                    continue;
                }
                if kept > 0 {
                    self.out.push(',');
                }
                let m = &members[j];
                self.out.push_str(&written[m.start - body..m.end - body]);
                kept += 1;
            }
            self.out.push('}');
        }
        self.members.truncate(first);
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tree path this writer must match.
    fn via_tree(input: &str) -> Option<String> {
        serde_json::from_str::<serde_json::Value>(input)
            .ok()
            .map(|v| v.to_string())
    }

    fn check(input: &str) -> bool {
        let mut out = String::from("prefix");
        let handled = canonical_json(input, &mut out);
        match via_tree(input) {
            Some(expected) if handled => assert_eq!(&out["prefix".len()..], expected, "{input:?}"),
            Some(_) => assert_eq!(out, "prefix", "{input:?}"),
            None => assert!(!handled, "accepted invalid JSON {input:?}"),
        }
        handled
    }

    #[test]
    fn matches_the_tree_path_on_written_examples() {
        let handled = [
            r#"{"k": 12, "tag": "red"}"#,
            r#" { "b" : [1, 2 ,{"z":null,"a":true}], "a": false } "#,
            r#"{"a":1,"a":2,"b":3,"a":4}"#,
            r#"{"é":1,"e":2,"f":3}"#,
            r#"[]"#,
            r#"{}"#,
            r#"[ { } , [ ] ]"#,
            r#""plain""#,
            r#""tab\tand \u00e9 and \/ and \ud83d\ude00""#,
            r#"{"k":"a\"b"}"#,
            "0",
            "-1",
            "18446744073709551615",
            "-9223372036854775808",
            "1.5",
            "-0",
            "1e3",
            "18446744073709551616",
            "-9223372036854775809",
            "1E+2",
            "0.000001",
            "123456789012345678901234567890",
            "[1.0, 2.50, -0.0, 1e-7]",
            "\n\t\r true \n",
        ];
        for input in handled {
            assert!(check(input), "{input:?} went to serde_json");
        }
        let refused = [
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
            r#"{"k\n":1}"#,
            "[1]x",
            "{\"a\":1}}",
        ];
        for input in refused {
            assert!(!check(input), "{input:?} was accepted");
        }
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert!(!check(&deep));
        let too_deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(!check(&too_deep));
    }

    /// A small deterministic generator of JSON-ish text: valid documents with random
    /// whitespace, key orders, duplicates, escapes and number spellings, then the same
    /// with a byte changed, dropped or inserted.
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
    fn matches_the_tree_path_on_generated_documents() {
        let mut g = Gen(0x9E37_79B9_7F4A_7C15);
        let mut handled = 0;
        for _ in 0..20_000 {
            let mut doc = String::new();
            doc.push_str(g.ws());
            g.doc(0, &mut doc);
            doc.push_str(g.ws());
            handled += usize::from(check(&doc));
            // The same document damaged at one byte.
            let mut bytes = doc.clone().into_bytes();
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
                check(&damaged);
            }
        }
        // Documents with escaped keys go to serde_json; the rest are written here.
        assert!(
            handled > 12_000,
            "only {handled} of 20000 written in one pass"
        );
    }
}
