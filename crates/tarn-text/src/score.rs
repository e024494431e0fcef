//! BM25 with statistics given from outside, and exact scoring of texts that are in no
//! index.
//!
//! A score is tantivy's: `Bm25Weight` (k1 = 1.2, b = 0.75, the length quantized to
//! tantivy's one-byte field norm) for each clause, summed over the clauses a document
//! matches, in query order. The statistics (documents, tokens, document frequencies)
//! are the caller's — for a table, those of its live rows — so a text scores the same
//! whether it is read from an index or analyzed on the spot, and whichever index it is
//! in.

use std::collections::HashMap;

use tantivy::Term;
use tantivy::fieldnorm::FieldNormReader;
use tantivy::query::{Bm25StatisticsProvider, Bm25Weight};
use tantivy::schema::Field;
use tantivy::tokenizer::TextAnalyzer;

use crate::analyzer::{Tokenizer, for_each_token};
use crate::query::{Occur, TextQuery};

/// BM25 statistics of a set of documents for one query's terms.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Documents (non-NULL texts).
    pub docs: u64,
    /// Tokens over all documents.
    pub tokens: u64,
    /// Documents containing each of the query's terms (by [`TextQuery::terms`] index).
    pub doc_freq: Vec<u64>,
}

impl Stats {
    /// Empty statistics for `query`.
    pub fn new(query: &TextQuery) -> Stats {
        Stats {
            docs: 0,
            tokens: 0,
            doc_freq: vec![0; query.terms.len()],
        }
    }

    /// Adds the statistics of another set of documents.
    pub fn add(&mut self, other: &Stats) {
        self.docs += other.docs;
        self.tokens += other.tokens;
        for (a, b) in self.doc_freq.iter_mut().zip(&other.doc_freq) {
            *a += b;
        }
    }
}

/// [`Stats`] as tantivy asks for them (its field is the one text field of every index
/// this crate makes).
pub(crate) struct Provider<'a> {
    pub stats: &'a Stats,
    pub ids: HashMap<&'a str, usize>,
}

impl<'a> Provider<'a> {
    pub fn new(query: &'a TextQuery, stats: &'a Stats) -> Self {
        let ids = query
            .terms
            .iter()
            .enumerate()
            .map(|(i, t)| (t.as_str(), i))
            .collect();
        Provider { stats, ids }
    }
}

impl Bm25StatisticsProvider for Provider<'_> {
    fn total_num_tokens(&self, _field: Field) -> tantivy::Result<u64> {
        Ok(self.stats.tokens)
    }

    fn total_num_docs(&self) -> tantivy::Result<u64> {
        Ok(self.stats.docs)
    }

    fn doc_freq(&self, term: &Term) -> tantivy::Result<u64> {
        let df = term
            .value()
            .as_str()
            .and_then(|t| self.ids.get(t))
            .and_then(|&i| self.stats.doc_freq.get(i))
            .copied()
            .unwrap_or(0);
        // tantivy asserts df <= N; statistics gathered over the same rows keep it.
        Ok(df.min(self.stats.docs))
    }
}

/// The indexed text field: the first field of every index's schema (`index.rs` builds
/// the schema so).
pub(crate) const TEXT_FIELD: Field = Field::from_field_id(0);

/// The term `text` of the text field.
pub(crate) fn term(text: &str) -> Term {
    Term::from_field_text(TEXT_FIELD, text)
}

/// The per-clause BM25 weights of a query under given statistics.
pub struct Weights {
    query: TextQuery,
    stats: Stats,
    /// One per clause; `None` when no document can match (no documents at all).
    clause: Vec<Option<Bm25Weight>>,
    /// Required clauses.
    required: usize,
}

impl std::fmt::Debug for Weights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Weights")
            .field("stats", &self.stats)
            .field("clauses", &self.clause.len())
            .finish()
    }
}

impl Weights {
    /// The weights of `query`'s clauses under `stats`.
    pub fn new(query: &TextQuery, stats: Stats) -> crate::Result<Weights> {
        let mut clause = Vec::with_capacity(query.clauses.len());
        {
            let provider = Provider::new(query, &stats);
            for c in &query.clauses {
                if stats.docs == 0 || c.occur == Occur::MustNot {
                    clause.push(None);
                    continue;
                }
                let terms: Vec<Term> = c
                    .terms
                    .iter()
                    .map(|(_, t)| term(&query.terms[*t]))
                    .collect();
                clause.push(Some(Bm25Weight::for_terms(&provider, &terms)?));
            }
        }
        Ok(Weights {
            query: query.clone(),
            stats,
            clause,
            required: query
                .clauses
                .iter()
                .filter(|c| c.occur == Occur::Must)
                .count(),
        })
    }

    /// The query.
    pub fn query(&self) -> &TextQuery {
        &self.query
    }

    /// The statistics.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Clause `i`'s score in a document of field norm id `norm` where it occurs `freq`
    /// times (a term's frequency, or a phrase's number of places).
    pub(crate) fn clause_score(&self, i: usize, norm: u8, freq: u32) -> f32 {
        self.clause[i].as_ref().map_or(0.0, |w| w.score(norm, freq))
    }

    /// The score of a document matched as `m`: 0 when it does not match the query.
    pub fn score(&self, m: &DocMatch) -> f32 {
        let Some(len) = m.len else {
            return 0.0;
        };
        let norm = norm_id(len);
        let mut required = 0;
        let mut any = false;
        let mut score = 0.0f32;
        for (i, c) in self.query.clauses.iter().enumerate() {
            let freq = m.freq[i];
            if freq == 0 {
                continue;
            }
            match c.occur {
                Occur::MustNot => return 0.0,
                Occur::Must => required += 1,
                Occur::Should => {}
            }
            any = true;
            score += self.clause_score(i, norm, freq);
        }
        if !any || required < self.required {
            return 0.0;
        }
        score
    }

    /// The most any clause's true maximum score (its weight: frequency → ∞ at length
    /// 0) exceeds tantivy's `max_score` (the longest length with a huge frequency):
    /// how far tantivy's global bounds may fall short (at least 1).
    pub(crate) fn max_score_shortfall(&self) -> f32 {
        self.clause
            .iter()
            .flatten()
            .map(|w| {
                let sup = w.score(0, u32::MAX);
                let max = w.max_score();
                if max > 0.0 { sup / max } else { f32::INFINITY }
            })
            .fold(1.0f32, f32::max)
    }

    /// Required clauses.
    pub(crate) fn required(&self) -> usize {
        self.required
    }
}

/// tantivy's one-byte code of a field length.
pub(crate) fn norm_id(len: u32) -> u8 {
    FieldNormReader::constant(1, len).fieldnorm_id(0)
}

/// What a query needs to know of one text: its length in tokens and how often each
/// clause occurs in it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DocMatch {
    /// Tokens; `None` for NULL (not a document).
    pub len: Option<u32>,
    /// Per clause: term frequency, or number of places the phrase occurs.
    pub freq: Vec<u32>,
}

impl DocMatch {
    /// Whether the text contains any of the query's terms.
    pub fn has_terms(&self) -> bool {
        self.freq.iter().any(|&f| f > 0)
    }
}

/// Analyzes texts that are in no index, for one query: [`Matcher::analyze`] gives each
/// text's [`DocMatch`] and adds it to the statistics.
pub struct Matcher<'q> {
    query: &'q TextQuery,
    analyzer: TextAnalyzer,
    ids: HashMap<&'q str, usize>,
    /// Scratch: positions of each term in the current text.
    positions: Vec<Vec<u32>>,
}

impl std::fmt::Debug for Matcher<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Matcher").finish()
    }
}

impl<'q> Matcher<'q> {
    /// A matcher of `query`'s terms in texts analyzed by `tokenizer`.
    pub fn new(query: &'q TextQuery, tokenizer: Tokenizer) -> Self {
        Matcher {
            query,
            analyzer: tokenizer.analyzer(),
            ids: query
                .terms
                .iter()
                .enumerate()
                .map(|(i, t)| (t.as_str(), i))
                .collect(),
            positions: vec![Vec::new(); query.terms.len()],
        }
    }

    /// Analyzes `text` (NULL: `None`), adding it to `stats`.
    pub fn analyze(&mut self, text: Option<&str>, stats: &mut Stats) -> DocMatch {
        let m = self.matches(text);
        if m.len.is_some() {
            stats.docs += 1;
            stats.tokens += u64::from(m.len.unwrap_or(0));
            for (df, p) in stats.doc_freq.iter_mut().zip(&self.positions) {
                if !p.is_empty() {
                    *df += 1;
                }
            }
        }
        m
    }

    /// Analyzes `text` (NULL: `None`) for scoring only.
    pub fn matches(&mut self, text: Option<&str>) -> DocMatch {
        let Some(text) = text else {
            return DocMatch {
                len: None,
                freq: vec![0; self.query.clauses.len()],
            };
        };
        for p in &mut self.positions {
            p.clear();
        }
        let mut len = 0u32;
        let (ids, positions) = (&self.ids, &mut self.positions);
        for_each_token(&mut self.analyzer, text, |tok, pos| {
            len = len.saturating_add(1);
            if let Some(&i) = ids.get(tok) {
                positions[i].push(pos as u32);
            }
        });
        DocMatch {
            len: Some(len),
            freq: clause_freqs(self.query, &self.positions),
        }
    }
}

/// Each clause's frequency in a text where each of `query`'s terms occurs at
/// `positions` (by [`TextQuery::terms`] index, ascending).
pub(crate) fn clause_freqs(query: &TextQuery, positions: &[Vec<u32>]) -> Vec<u32> {
    query
        .clauses
        .iter()
        .map(|c| match c.terms.as_slice() {
            [(_, t)] => positions[*t].len() as u32,
            terms => phrase_count(terms, positions),
        })
        .collect()
}

/// Places where the phrase (terms at offsets) starts: positions `p` where each term
/// `t` at offset `o` occurs at `p + o`.
fn phrase_count(terms: &[(usize, usize)], positions: &[Vec<u32>]) -> u32 {
    let Some(&(o0, t0)) = terms.first() else {
        return 0;
    };
    positions[t0]
        .iter()
        .filter(|&&p| {
            let Some(start) = p.checked_sub(o0 as u32) else {
                return false;
            };
            terms[1..]
                .iter()
                .all(|&(o, t)| positions[t].binary_search(&(start + o as u32)).is_ok())
        })
        .count() as u32
}
