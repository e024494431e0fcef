//! String constants written side by side, read as PostgreSQL reads them: separated by
//! whitespace that holds a line break, they are one constant (`'a'` newline `'b'` is
//! `'ab'`, the SQL standard's continuation); on one line, the second is a syntax error.
//! sqlparser read `SELECT 'a' 'b'` as the constant `'a'` named `b`.

use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan, Whitespace};

use crate::error::{Result, bad};

/// `tokens` with each continued string constant joined into one token; a 400 for two
/// string constants on one line.
pub(crate) fn join_continued(tokens: Vec<TokenWithSpan>) -> Result<Vec<TokenWithSpan>> {
    let mut out: Vec<TokenWithSpan> = Vec::with_capacity(tokens.len());
    // Where the last string constant is in `out`, and whether a line break followed it.
    let mut last_string: Option<(usize, bool)> = None;
    for t in tokens {
        match &t.token {
            Token::Whitespace(w) => {
                if let Some((_, broken)) = last_string.as_mut() {
                    *broken |= matches!(
                        w,
                        Whitespace::Newline | Whitespace::SingleLineComment { .. }
                    );
                }
                out.push(t);
                continue;
            }
            Token::SingleQuotedString(s) => {
                if let Some((at, broken)) = last_string {
                    if !broken {
                        return bad(format!(
                            "syntax error at or near {} (line {}, column {}): string \
                             constants side by side are one constant only across a line \
                             break",
                            tarn_catalog::shown(&format!("'{}'", s.replace('\'', "''"))),
                            t.span.start.line,
                            t.span.start.column
                        ));
                    }
                    if let Token::SingleQuotedString(first) = &mut out[at].token {
                        first.push_str(s);
                        out[at].span.end = t.span.end;
                        // The whitespace between goes: the constant is one token.
                        out.truncate(at + 1);
                        last_string = Some((at, false));
                        continue;
                    }
                }
                last_string = Some((out.len(), false));
            }
            Token::EscapedStringLiteral(_)
            | Token::NationalStringLiteral(_)
            | Token::HexStringLiteral(_)
            | Token::UnicodeStringLiteral(_)
                if last_string.is_some_and(|(_, broken)| !broken) =>
            {
                return bad(format!(
                    "syntax error at or near line {}, column {}: string constants side by \
                     side are one constant only across a line break",
                    t.span.start.line, t.span.start.column
                ));
            }
            _ => last_string = None,
        }
        out.push(t);
    }
    Ok(out)
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
        assert_eq!(
            strings("SELECT 'a' AS \"b\", x LIKE 'a' ESCAPE 'b'").ok(),
            Some(vec!["a".into(), "a".into(), "b".into()])
        );
    }
}
