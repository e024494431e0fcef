//! Text read as PostgreSQL's input functions read it, for the types Tarn reads itself:
//! bytea ([`bytea_from_text`]) and uuid ([`uuid_from_text`]). Both the casts in a plan
//! (`functions::bytea_in`, `functions::uuid_cast`) and writes into a column
//! (`coerce`) call them, so a value reads the same either way.
//!
//! bytea has PostgreSQL's two input forms: hex, `\x` then pairs of hex digits
//! (whitespace allowed between pairs), and escape, where `\\` is one backslash, `\ooo`
//! (three octal digits, the first 0–3) is that byte and every other character is its own
//! UTF-8 bytes.

/// A uuid as PostgreSQL reads one: 32 hex digits, in either case, optionally in braces,
/// with a hyphen allowed after any group of four digits; spaces around it are ignored.
pub(crate) fn uuid_from_text(text: &str) -> Option<uuid::Uuid> {
    let t = text.trim();
    let t = match t.strip_prefix('{') {
        Some(inner) => inner.strip_suffix('}')?,
        None => t,
    };
    let mut value: u128 = 0;
    let mut digits: u32 = 0;
    let mut hyphen_ok = false;
    for c in t.chars() {
        if c == '-' {
            if !hyphen_ok || digits == 32 {
                return None;
            }
            hyphen_ok = false;
            continue;
        }
        let d = c.to_digit(16)?;
        if digits == 32 {
            return None;
        }
        value = value << 4 | u128::from(d);
        digits += 1;
        hyphen_ok = digits.is_multiple_of(4);
    }
    (digits == 32).then(|| uuid::Uuid::from_u128(value))
}

/// `s` read as PostgreSQL reads bytea input (see the module docs), or its error message.
pub(crate) fn bytea_from_text(s: &str) -> std::result::Result<Vec<u8>, String> {
    if let Some(hex) = s.strip_prefix("\\x") {
        let digit = |c: u8| match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            b'A'..=b'F' => Ok(c - b'A' + 10),
            _ => Err(format!(
                "invalid hexadecimal digit: \"{}\"",
                hex_char_at(hex, c)
            )),
        };
        let mut out = Vec::with_capacity(hex.len() / 2);
        let mut bytes = hex.bytes();
        while let Some(c) = bytes.next() {
            if matches!(c, b' ' | b'\t' | b'\n' | b'\r') {
                continue;
            }
            let high = digit(c)?;
            let low = match bytes.next() {
                Some(c) => digit(c)?,
                None => return Err("invalid hexadecimal data: odd number of digits".into()),
            };
            out.push(high << 4 | low);
        }
        return Ok(out);
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let octal = |c: u8, max: u8| (b'0'..=max).contains(&c);
        match b.get(i + 1..i + 4) {
            _ if b.get(i + 1) == Some(&b'\\') => {
                out.push(b'\\');
                i += 2;
            }
            Some(&[a, m, l]) if octal(a, b'3') && octal(m, b'7') && octal(l, b'7') => {
                out.push((a - b'0') << 6 | (m - b'0') << 3 | (l - b'0'));
                i += 4;
            }
            _ => return Err("invalid input syntax for type bytea".into()),
        }
    }
    Ok(out)
}

/// The character of `hex` that starts with byte `c` (the first such), for the message.
fn hex_char_at(hex: &str, c: u8) -> char {
    hex.char_indices()
        .find(|(i, _)| hex.as_bytes()[*i] == c)
        .map(|(_, ch)| ch)
        .unwrap_or(char::REPLACEMENT_CHARACTER)
}

#[cfg(test)]
mod tests {
    use super::{bytea_from_text, uuid_from_text};

    #[test]
    fn reads_the_forms_postgres_reads() {
        let canonical = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11";
        for ok in [
            "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
            "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
            "a0eebc999c0b4ef8bb6d6bb9bd380a11",
            "a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11",
            "{a0eebc999c0b4ef8bb6d6bb9bd380a11}",
            " a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11 ",
        ] {
            assert_eq!(
                uuid_from_text(ok)
                    .map(|u| u.hyphenated().to_string())
                    .as_deref(),
                Some(canonical),
                "{ok}"
            );
        }
        for bad in [
            "",
            "x",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a111",
            "-a0eebc999c0b4ef8bb6d6bb9bd380a11",
            "a0eebc999c0b4ef8bb6d6bb9bd380a11-",
            "a0e-ebc999c0b4ef8bb6d6bb9bd380a11",
            "a0eebc99--9c0b-4ef8-bb6d-6bb9bd380a11",
            "{a0eebc999c0b4ef8bb6d6bb9bd380a11",
            "urn:uuid:a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        ] {
            assert!(uuid_from_text(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn reads_hex_and_escape_forms_as_postgresql() {
        assert_eq!(bytea_from_text("\\x4142").unwrap(), b"AB");
        assert_eq!(bytea_from_text("\\x41 42\n").unwrap(), b"AB");
        assert_eq!(bytea_from_text("\\x").unwrap(), b"");
        assert_eq!(bytea_from_text("abc").unwrap(), b"abc");
        assert_eq!(bytea_from_text("a\\\\b\\101").unwrap(), b"a\\bA");
        assert_eq!(bytea_from_text("é").unwrap(), "é".as_bytes());
        for (bad, msg) in [
            ("\\x414", "invalid hexadecimal data: odd number of digits"),
            ("\\x4g", "invalid hexadecimal digit: \"g\""),
            ("\\x4 1", "invalid hexadecimal digit: \" \""),
            ("a\\b", "invalid input syntax for type bytea"),
            ("\\400", "invalid input syntax for type bytea"),
            ("\\", "invalid input syntax for type bytea"),
        ] {
            assert_eq!(bytea_from_text(bad).unwrap_err(), msg, "{bad:?}");
        }
    }
}
