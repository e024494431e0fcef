//! Texts analyzed once and kept in memory as a small inverted index, for texts that have
//! no index file (a table's memtable, a segment whose index is not built yet): the first
//! query analyzes them, the next ones read postings instead of analyzing every text
//! again. Scores are those a [`Matcher`](crate::Matcher) gives the same text analyzed on
//! the spot, bit for bit: the per-text match is rebuilt from the postings and scored by
//! the same [`Weights::score`].

use std::collections::HashMap;

use crate::analyzer::{Tokenizer, for_each_token};
use crate::query::TextQuery;
use crate::score::{DocMatch, Stats, Weights, clause_freqs};

/// Length of a NULL text.
const NULL: u32 = u32::MAX;

/// One term's occurrences: the texts holding it (ascending), and for each its positions.
#[derive(Debug, Default)]
struct Postings {
    texts: Vec<u32>,
    /// `starts[j]..starts[j + 1]` (or `..positions.len()` for the last) are the
    /// positions of the term in `texts[j]`.
    starts: Vec<u32>,
    positions: Vec<u32>,
}

impl Postings {
    fn positions_of(&self, j: usize) -> &[u32] {
        let start = self.starts[j] as usize;
        let end = self
            .starts
            .get(j + 1)
            .map_or(self.positions.len(), |&e| e as usize);
        &self.positions[start..end]
    }
}

/// A numbered list of texts, analyzed (see the module docs).
#[derive(Debug)]
pub struct MemoryIndex {
    tokenizer: Tokenizer,
    /// Each text's length in tokens (`NULL` for NULL).
    lengths: Vec<u32>,
    docs: u64,
    tokens: u64,
    terms: HashMap<Box<str>, Postings>,
}

impl MemoryIndex {
    /// Analyzes `texts` (in order; `None` is NULL) with `tokenizer`.
    pub fn build<'a>(
        texts: impl Iterator<Item = Option<&'a str>>,
        tokenizer: Tokenizer,
    ) -> MemoryIndex {
        let mut analyzer = tokenizer.analyzer();
        let mut terms: HashMap<Box<str>, Postings> = HashMap::new();
        let mut lengths = Vec::new();
        let (mut docs, mut tokens) = (0u64, 0u64);
        for (i, text) in texts.enumerate() {
            let i = i as u32;
            let Some(text) = text else {
                lengths.push(NULL);
                continue;
            };
            let mut len = 0u32;
            for_each_token(&mut analyzer, text, |tok, pos| {
                len = len.saturating_add(1);
                let p = match terms.get_mut(tok) {
                    Some(p) => p,
                    None => terms.entry(tok.into()).or_default(),
                };
                if p.texts.last() != Some(&i) {
                    p.texts.push(i);
                    p.starts.push(p.positions.len() as u32);
                }
                p.positions.push(pos as u32);
            });
            lengths.push(len.min(NULL - 1));
            docs += 1;
            tokens += u64::from(len);
        }
        for p in terms.values_mut() {
            p.texts.shrink_to_fit();
            p.starts.shrink_to_fit();
            p.positions.shrink_to_fit();
        }
        MemoryIndex {
            tokenizer,
            lengths,
            docs,
            tokens,
            terms,
        }
    }

    /// The tokenizer the texts were analyzed with.
    pub fn tokenizer(&self) -> Tokenizer {
        self.tokenizer
    }

    /// Number of texts (NULL included).
    pub fn len(&self) -> usize {
        self.lengths.len()
    }

    /// Whether there are no texts.
    pub fn is_empty(&self) -> bool {
        self.lengths.is_empty()
    }

    /// Bytes held, roughly (for memory accounting).
    pub fn memory_size(&self) -> usize {
        let postings: usize = self
            .terms
            .iter()
            .map(|(t, p)| t.len() + 64 + 4 * (p.texts.len() + p.starts.len() + p.positions.len()))
            .sum();
        postings + 4 * self.lengths.len()
    }

    /// The statistics of `query`'s terms over the texts `live` lets through (like
    /// [`TextIndex::stats`](crate::TextIndex::stats)).
    pub fn stats(&self, query: &TextQuery, live: &dyn Fn(u32) -> bool) -> Stats {
        let mut s = Stats::new(query);
        let all_live = (0..self.lengths.len() as u32).all(live);
        if all_live {
            s.docs = self.docs;
            s.tokens = self.tokens;
        } else {
            for (i, &l) in self.lengths.iter().enumerate() {
                if l != NULL && live(i as u32) {
                    s.docs += 1;
                    s.tokens += u64::from(l);
                }
            }
        }
        for (df, t) in s.doc_freq.iter_mut().zip(&query.terms) {
            if let Some(p) = self.terms.get(t.as_str()) {
                *df = if all_live {
                    p.texts.len() as u64
                } else {
                    p.texts.iter().filter(|&&i| live(i)).count() as u64
                };
            }
        }
        s
    }

    /// Calls `emit(text number, score)` for every text that matches the query of
    /// `weights` and that `allow` lets through, in ascending text order, with the score
    /// [`Weights::score`] gives the text analyzed on the spot.
    pub fn search(
        &self,
        weights: &Weights,
        allow: &dyn Fn(u32) -> bool,
        emit: &mut dyn FnMut(u32, f32),
    ) {
        let query = weights.query();
        if query.matches_nothing() || weights.stats().docs == 0 {
            return;
        }
        // (text, query term, index in that term's postings), grouped by text below.
        let lists: Vec<Option<&Postings>> = query
            .terms
            .iter()
            .map(|t| self.terms.get(t.as_str()))
            .collect();
        let mut occurrences: Vec<(u32, u32, u32)> = Vec::new();
        for (t, p) in lists.iter().enumerate() {
            if let Some(p) = p {
                occurrences.extend(
                    p.texts
                        .iter()
                        .enumerate()
                        .map(|(j, &text)| (text, t as u32, j as u32)),
                );
            }
        }
        occurrences.sort_unstable();
        let mut positions: Vec<Vec<u32>> = vec![Vec::new(); query.terms.len()];
        let mut at = 0;
        while at < occurrences.len() {
            let text = occurrences[at].0;
            let end = at + occurrences[at..].partition_point(|o| o.0 == text);
            if allow(text) {
                for p in &mut positions {
                    p.clear();
                }
                for &(_, t, j) in &occurrences[at..end] {
                    if let Some(p) = lists[t as usize] {
                        positions[t as usize].extend_from_slice(p.positions_of(j as usize));
                    }
                }
                let m = DocMatch {
                    len: Some(self.lengths[text as usize]),
                    freq: clause_freqs(query, &positions),
                };
                let score = weights.score(&m);
                if score > 0.0 {
                    emit(text, score);
                }
            }
            at = end;
        }
    }

    /// The scores of the texts at `texts` (ascending, distinct), in that order, as
    /// [`MemoryIndex::search`] gives them: `None` for a text that matches nothing.
    pub fn score_texts(&self, weights: &Weights, texts: &[u32]) -> Vec<Option<f32>> {
        let mut out = vec![None; texts.len()];
        self.search(
            weights,
            &|t| texts.binary_search(&t).is_ok(),
            &mut |t, score| {
                if let Ok(j) = texts.binary_search(&t) {
                    out[j] = Some(score);
                }
            },
        );
        out
    }
}
