//! String constants written side by side, read as PostgreSQL reads them: separated by
//! whitespace that holds a line break, they are one constant (`'a'` newline `'b'` is
//! `'ab'`, the SQL standard's continuation); on one line, the second is a syntax error.
//! sqlparser read `SELECT 'a' 'b'` as the constant `'a'` named `b`.

use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan, Whitespace};

use crate::error::{Result, bad};

/// `tokens` with each continued string constant joined into one token; a 400 for two
/// string constants on one line, and for a string constant right after what ends an
/// expression (`1 'b'`, `(x) 'b'`, `'a'::text 'b'`): PostgreSQL takes no string for a
/// column's name, which sqlparser did.
pub(crate) fn join_continued(tokens: Vec<TokenWithSpan>) -> Result<Vec<TokenWithSpan>> {
    let mut out: Vec<TokenWithSpan> = Vec::with_capacity(tokens.len());
    // Where the last string constant is in `out` (one that may continue: `'…'` or
    // `E'…'`), and whether a line break followed it (and nothing but white space and
    // `--` comments, which alone PostgreSQL lets stand between the parts).
    let mut last_string: Option<(usize, Continued)> = None;
    // Whether the last significant token ends an expression, so that a string constant
    // after it could only be a name.
    let mut after_operand = false;
    // The last two significant tokens were `::` and a word: a type's name.
    let mut cast: [bool; 2] = [false, false];
    for t in tokens {
        match &t.token {
            Token::Whitespace(w) => {
                if let Some((_, state)) = last_string.as_mut() {
                    *state = match (*state, w) {
                        (Continued::Blocked, _) => Continued::Blocked,
                        (_, Whitespace::MultiLineComment(_)) => Continued::Blocked,
                        (_, Whitespace::Newline | Whitespace::SingleLineComment { .. }) => {
                            Continued::Broken
                        }
                        (state, _) => state,
                    };
                }
                out.push(t);
                continue;
            }
            Token::SingleQuotedString(s) => {
                if let Some((at, state)) = last_string {
                    if state != Continued::Broken {
                        return side_by_side(&t, Some(s));
                    }
                    if let Token::SingleQuotedString(first) | Token::EscapedStringLiteral(first) =
                        &mut out[at].token
                    {
                        first.push_str(s);
                        out[at].span.end = t.span.end;
                        // The whitespace between goes: the constant is one token.
                        out.truncate(at + 1);
                        last_string = Some((at, Continued::No));
                        continue;
                    }
                }
                if after_operand {
                    return side_by_side(&t, Some(s));
                }
                last_string = Some((out.len(), Continued::No));
            }
            Token::EscapedStringLiteral(_)
            | Token::NationalStringLiteral(_)
            | Token::HexStringLiteral(_)
            | Token::UnicodeStringLiteral(_)
            | Token::DollarQuotedString(_)
                if last_string.is_some() || after_operand =>
            {
                return side_by_side(&t, None);
            }
            Token::EscapedStringLiteral(_) => last_string = Some((out.len(), Continued::No)),
            _ => last_string = None,
        }
        cast = [cast[1], t.token == Token::DoubleColon];
        after_operand = match &t.token {
            Token::Number(..)
            | Token::RParen
            | Token::RBracket
            | Token::SingleQuotedString(_)
            | Token::EscapedStringLiteral(_)
            | Token::NationalStringLiteral(_)
            | Token::HexStringLiteral(_)
            | Token::UnicodeStringLiteral(_)
            | Token::DollarQuotedString(_) => true,
            // A type's name after `::`.
            Token::Word(_) => cast[0],
            _ => false,
        };
        out.push(t);
    }
    Ok(out)
}

/// Where a string constant stands after another (see [`join_continued`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Continued {
    /// Nothing but spaces since: on one line.
    No,
    /// A line break since, with only white space and `--` comments: a continuation.
    Broken,
    /// A `/* */` comment since: no continuation.
    Blocked,
}

/// The syntax error for string constant `t` where no string may stand.
fn side_by_side<T>(t: &TokenWithSpan, text: Option<&str>) -> Result<T> {
    let near = match text {
        Some(s) => format!(
            " {}",
            tarn_catalog::shown(&format!("'{}'", s.replace('\'', "''")))
        ),
        None => String::new(),
    };
    bad(format!(
        "syntax error at or near{near} (line {}, column {}): a string constant after an \
         expression (string constants side by side are one constant only across a line \
         break, and a column is named by an identifier, not a string)",
        t.span.start.line, t.span.start.column
    ))
}

#[cfg(test)]
mod tests {
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    use super::*;

    fn strings(sql: &str) -> Result<Vec<String>> {
        let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
            .tokenize_with_location()
            .unwrap_or_default();
        Ok(join_continued(tokens)?
            .into_iter()
            .filter_map(|t| match t.token {
                Token::SingleQuotedString(s) => Some(s),
                _ => None,
            })
            .collect())
    }

    #[test]
    fn constants_continue_across_line_breaks_only() {
        assert_eq!(
            strings("SELECT 'a'\n 'b'\n'c', 'd'").ok(),
            Some(vec!["abc".into(), "d".into()])
        );
        assert_eq!(
            strings("SELECT 'a' -- note\n'b'").ok(),
            Some(vec!["ab".into()])
        );
        assert!(strings("SELECT 'a' 'b'").is_err());
        assert!(strings("SELECT 'a' /* x */ 'b'").is_err());
        assert!(strings("SELECT 'a' /* x */\n'b'").is_err());
        // An escape string continues too; a string after other constants, a bracket
        // or a cast is no name.
        assert!(strings("SELECT E'a'\n'b'").is_ok());
        for sql in [
            "SELECT E'a' 'b'",
            "SELECT $$a$$ 'b'",
            "SELECT $$a$$\n'b'",
            "SELECT X'ff' 'b'",
            "SELECT 1 'b'",
            "SELECT (1) 'b'",
            "SELECT 'a'::text 'b'",
        ] {
            assert!(strings(sql).is_err(), "{sql}");
        }
        assert!(strings("SELECT DATE '2024-01-01', INTERVAL '1 day', x::text LIKE 'a'").is_ok());
        assert_eq!(
            strings("SELECT 'a' AS \"b\", x LIKE 'a' ESCAPE 'b'").ok(),
            Some(vec!["a".into(), "a".into(), "b".into()])
        );
    }
}
