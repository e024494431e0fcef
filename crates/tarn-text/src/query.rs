//! The query side of text `<#>`: a lenient parser that never fails on user text.
//!
//! The grammar is tantivy's query language cut down to what a search box needs:
//! - a word is a run of characters other than whitespace and `"`;
//! - `"a quoted phrase"` matches its words in order, next to each other;
//! - a `+` right before a word or phrase makes it required, a `-` makes it excluded
//!   (elsewhere both are part of the word);
//! - everything else is text: `OR`, `AND`, `field:value`, `*`, `^`, parentheses and
//!   an unbalanced `"` are read as words (the analyzer then keeps what it keeps of
//!   them), so no input is an error.
//!
//! Each word or phrase is analyzed with the index's tokenizer, as tantivy's query
//! parser does: no token drops it, one token is a term, several are a phrase at the
//! tokens' positions (trigrams, which have no positions, are separate terms); a word or
//! phrase written twice the same way counts once, as in tantivy's parser. A
//! document matches when it has every required clause, no excluded one, and, without
//! required clauses, at least one optional clause. Its score sums the scores of the
//! clauses it matches, in query order.

use std::collections::HashMap;

use crate::analyzer::{Tokenizer, for_each_token};

/// How a clause takes part, as tantivy's `Occur`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Occur {
    /// May match; adds to the score when it does.
    Should,
    /// Must match (`+`).
    Must,
    /// Must not match (`-`).
    MustNot,
}

/// A term, or a phrase of terms at offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clause {
    /// How it takes part.
    pub occur: Occur,
    /// (position offset, index into [`TextQuery::terms`]); one item for a term.
    pub terms: Vec<(usize, usize)>,
}

impl Clause {
    /// Whether it is a phrase.
    pub fn is_phrase(&self) -> bool {
        self.terms.len() > 1
    }
}

/// A parsed and analyzed query.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TextQuery {
    /// Distinct terms (analyzed tokens), in order of first use.
    pub terms: Vec<String>,
    /// Clauses in query order.
    pub clauses: Vec<Clause>,
}

impl TextQuery {
    /// Parses `text` leniently (see the module docs) and analyzes it with `tokenizer`.
    pub fn parse(text: &str, tokenizer: Tokenizer) -> TextQuery {
        let mut analyzer = tokenizer.analyzer();
        let mut q = TextQuery::default();
        let mut ids: HashMap<String, usize> = HashMap::new();
        // A unit written twice the same way counts once, as in tantivy's parser
        // (which compares what was written, not the analyzed terms).
        let mut seen: std::collections::HashSet<(Occur, bool, &str)> = Default::default();
        for (occur, quoted, unit) in units(text) {
            if !seen.insert((occur, quoted, unit)) {
                continue;
            }
            let mut tokens: Vec<(usize, usize)> = Vec::new();
            for_each_token(&mut analyzer, unit, |tok, pos| {
                let next = ids.len();
                let id = *ids.entry(tok.to_string()).or_insert(next);
                if id == q.terms.len() {
                    q.terms.push(tok.to_string());
                }
                tokens.push((pos, id));
            });
            if tokens.is_empty() {
                continue;
            }
            let clauses: Vec<Clause> = if tokenizer.has_positions() {
                let first = tokens.iter().map(|(p, _)| *p).min().unwrap_or(0);
                let terms = tokens.into_iter().map(|(p, id)| (p - first, id)).collect();
                vec![Clause { occur, terms }]
            } else {
                // A word without positions (ngram) is the set of its trigrams: one
                // repeated ('aaaa', 'abcabc') counts once.
                let mut distinct = std::collections::HashSet::new();
                tokens
                    .into_iter()
                    .filter(|(_, id)| distinct.insert(*id))
                    .map(|(_, id)| Clause {
                        occur,
                        terms: vec![(0, id)],
                    })
                    .collect()
            };
            q.clauses.extend(clauses);
        }
        q
    }

    /// Whether no document can match (no clause, or only excluded ones).
    pub fn matches_nothing(&self) -> bool {
        self.clauses.iter().all(|c| c.occur == Occur::MustNot)
    }
}

/// The words and phrases of `text` with their occurrence and whether they were
/// quoted, in order.
fn units(text: &str) -> Vec<(Occur, bool, &str)> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(c) = text[i..].chars().next() {
        if c.is_whitespace() {
            i += c.len_utf8();
            continue;
        }
        // `+` or `-` opens a unit when the unit follows it directly.
        let next = text[i + c.len_utf8()..].chars().next();
        let occur = match (c, next) {
            ('+', Some(n)) if !n.is_whitespace() => Occur::Must,
            ('-', Some(n)) if !n.is_whitespace() => Occur::MustNot,
            _ => Occur::Should,
        };
        let start = if occur == Occur::Should { i } else { i + 1 };
        let rest = &text[start..];
        if let Some(quoted) = rest.strip_prefix('"')
            && let Some(len) = quoted.find('"')
        {
            out.push((occur, true, &quoted[..len]));
            i = start + 1 + len + 1;
            continue;
        }
        // A word; an unbalanced `"` is skipped as a separator.
        let from = if rest.starts_with('"') {
            start + 1
        } else {
            start
        };
        let end = text[from..]
            .find(|ch: char| ch.is_whitespace() || ch == '"')
            .map_or(text.len(), |e| from + e);
        if end > from {
            out.push((occur, false, &text[from..end]));
        }
        // Always past `c` (a lone `+` before a space is a word of its own).
        i = end.max(i + c.len_utf8());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(q: &TextQuery) -> Vec<(Occur, Vec<(usize, &str)>)> {
        q.clauses
            .iter()
            .map(|c| {
                (
                    c.occur,
                    c.terms
                        .iter()
                        .map(|(o, t)| (*o, q.terms[*t].as_str()))
                        .collect(),
                )
            })
            .collect()
    }

    #[test]
    fn words_phrases_required_and_excluded() {
        let q = TextQuery::parse(r#"Cats +dogs -"big birds" Running"#, Tokenizer::EnStem);
        assert_eq!(
            shape(&q),
            vec![
                (Occur::Should, vec![(0, "cat")]),
                (Occur::Must, vec![(0, "dog")]),
                (Occur::MustNot, vec![(0, "big"), (1, "bird")]),
                (Occur::Should, vec![(0, "run")]),
            ]
        );
        assert_eq!(q.terms, ["cat", "dog", "big", "bird", "run"]);
    }

    #[test]
    fn hostile_text_is_reduced_to_words() {
        for text in [
            "\"unbalanced quote",
            "a OR b AND (c",
            "title:foo bar*",
            "+ - \" ++x --y",
            "🦀 emoji 🦀",
            "",
            "   ",
            "\"\"",
            "x^2 ~ [a TO b] {c}",
            "\u{3000}wide\u{3000}space\u{3000}+\u{3000}-\u{3000}\"",
            "+",
            "-",
            "\"",
        ] {
            let q = TextQuery::parse(text, Tokenizer::Default);
            for c in &q.clauses {
                assert!(!c.terms.is_empty(), "{text}");
            }
        }
        let q = TextQuery::parse("\"unbalanced quote", Tokenizer::Default);
        assert_eq!(q.terms, ["unbalanced", "quote"]);
        let q = TextQuery::parse("title:foo bar*", Tokenizer::Default);
        assert_eq!(
            shape(&q),
            vec![
                (Occur::Should, vec![(0, "title"), (1, "foo")]),
                (Occur::Should, vec![(0, "bar")]),
            ]
        );
        let big = "word ".repeat(20_000) + "\"";
        let q = TextQuery::parse(&big, Tokenizer::EnStem);
        assert_eq!(q.terms, ["word"]);
        assert_eq!(q.clauses.len(), 1);
    }

    #[test]
    fn tokenizers_shape_terms() {
        let q = TextQuery::parse("Hello-World \"a b\"", Tokenizer::Whitespace);
        assert_eq!(
            shape(&q),
            vec![
                (Occur::Should, vec![(0, "Hello-World")]),
                (Occur::Should, vec![(0, "a"), (1, "b")]),
            ]
        );
        let q = TextQuery::parse("\"New York\" x", Tokenizer::Raw);
        assert_eq!(q.terms, ["New York", "x"]);
        let q = TextQuery::parse("-Hello", Tokenizer::Ngram);
        assert_eq!(q.terms, ["hel", "ell", "llo"]);
        assert!(q.clauses.iter().all(|c| c.occur == Occur::MustNot));
        assert!(q.matches_nothing());
    }
}
