//! PostgreSQL array text (`{0.1,0.2}`, `{{1,2},{3,4}}`, `{"a b",NULL}`) read into a tree
//! of items: one reader for the parameter binder, casts, jsonb paths and searches. A
//! leaf.

use crate::error::{Error, Result};

/// A parsed PostgreSQL array literal.
#[derive(Debug, PartialEq)]
pub enum ArrayText {
    /// An element (`None` for NULL).
    Item(Option<String>),
    /// A nested array.
    List(Vec<ArrayText>),
}

/// Parses PostgreSQL array text such as `{0.1,0.2}`, `{{1,2},{3,4}}` or `{"a b",NULL}`.
pub fn parse_array_text(text: &str) -> Result<ArrayText> {
    // Quoted as other values are (the first 64 characters and the length), not whole.
    let malformed = || {
        Error::BadRequest(format!(
            "malformed array literal: {}",
            tarn_catalog::shown(text)
        ))
    };
    let chars: Vec<char> = text.trim().chars().collect();
    let mut pos = 0;
    let out = parse_list(&chars, &mut pos, 0).ok_or_else(malformed)?;
    if pos != chars.len() {
        return Err(malformed());
    }
    Ok(out)
}

fn parse_list(c: &[char], pos: &mut usize, depth: usize) -> Option<ArrayText> {
    if depth > 8 || c.get(*pos) != Some(&'{') {
        return None;
    }
    *pos += 1;
    let mut items = Vec::new();
    skip_ws(c, pos);
    if c.get(*pos) == Some(&'}') {
        *pos += 1;
        return Some(ArrayText::List(items));
    }
    loop {
        skip_ws(c, pos);
        match c.get(*pos)? {
            '{' => items.push(parse_list(c, pos, depth + 1)?),
            '"' => {
                *pos += 1;
                let mut s = String::new();
                loop {
                    match c.get(*pos)? {
                        '\\' => {
                            s.push(*c.get(*pos + 1)?);
                            *pos += 2;
                        }
                        '"' => {
                            *pos += 1;
                            break;
                        }
                        ch => {
                            s.push(*ch);
                            *pos += 1;
                        }
                    }
                }
                items.push(ArrayText::Item(Some(s)));
            }
            _ => {
                let start = *pos;
                while let Some(ch) = c.get(*pos) {
                    if *ch == ',' || *ch == '}' {
                        break;
                    }
                    *pos += 1;
                }
                let raw: String = c[start..*pos].iter().collect();
                let raw = raw.trim();
                if raw.is_empty() {
                    return None;
                }
                items.push(ArrayText::Item(if raw.eq_ignore_ascii_case("null") {
                    None
                } else {
                    Some(raw.to_string())
                }));
            }
        }
        skip_ws(c, pos);
        match c.get(*pos)? {
            ',' => *pos += 1,
            '}' => {
                *pos += 1;
                return Some(ArrayText::List(items));
            }
            _ => return None,
        }
    }
}

fn skip_ws(c: &[char], pos: &mut usize) {
    while c.get(*pos).is_some_and(|ch| ch.is_whitespace()) {
        *pos += 1;
    }
}
