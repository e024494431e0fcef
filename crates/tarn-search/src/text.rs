//! Text `<#>` over a table snapshot: BM25 with the statistics of the snapshot's live
//! rows (SPEC §5), through each sealed segment's text index where it has one, and by
//! analyzing the text on the spot in the memtable and in segments whose index is not
//! built yet. A row scores the same bits on every path, so its score depends neither
//! on how rows are split into segments nor on how much is indexed yet.

use std::collections::HashMap;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::datatypes::DataType;
use tarn_catalog::{ColumnId, IndexDef, IndexId, IndexType};
use tarn_storage::{SegmentRef, TableVersion};
use tarn_text::{Matcher, MemoryIndex, Stats, TextIndex, TextQuery, Tokenizer, Weights};
use tarn_vector::{Scored, TopK};

use crate::topk::{RowFilter, passing_rows};
use crate::{Error, Result};

/// Whether `index` is a text (`bm25`) index.
pub fn is_text_index(index: &IndexDef) -> bool {
    index.index_type == IndexType::Bm25
}

/// The tokenizer of a `bm25` index (its `tokenizer` option; `en_stem` by default).
pub fn tokenizer(index: &IndexDef) -> Tokenizer {
    index
        .options
        .get("tokenizer")
        .and_then(|t| Tokenizer::from_name(t))
        .unwrap_or_default()
}

/// The text of row `i` of a text array (`None` for NULL or a non-text array).
pub fn text_at(a: &ArrayRef, i: usize) -> Option<&str> {
    if a.is_null(i) {
        return None;
    }
    match a.data_type() {
        DataType::Utf8 => Some(a.as_string::<i32>().value(i)),
        DataType::LargeUtf8 => Some(a.as_string::<i64>().value(i)),
        DataType::Utf8View => Some(a.as_string_view().value(i)),
        _ => None,
    }
}

/// The text of row `i` of a block whose column is `array`; in a block written before
/// the column was added (no array), its `missing` text (or NULL) in every row.
fn row_text<'a>(
    array: Option<&'a ArrayRef>,
    missing: Option<&'a str>,
    i: usize,
) -> Option<&'a str> {
    match array {
        Some(a) => text_at(a, i),
        None => missing,
    }
}

/// Refuses a column that does not hold text (an index on it is damage or a bug).
pub(crate) fn check_text(a: &ArrayRef) -> Result<()> {
    match a.data_type() {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Ok(()),
        other => Err(Error::Internal(format!(
            "a text index over a column of type {other}"
        ))),
    }
}

/// A text query prepared against one table snapshot: the BM25 weights its live rows
/// give. Score rows of the same snapshot with it.
#[derive(Debug)]
pub struct TextSearch {
    column: ColumnId,
    /// The text of rows in blocks written before the column existed.
    missing: Option<String>,
    index: IndexId,
    tokenizer: Tokenizer,
    weights: Weights,
}

/// The texts of segment `s` that has no file of `index`, analyzed once for every query
/// of the segment's lifetime (or until its file is attached).
fn memory_index(
    s: &SegmentRef,
    index: IndexId,
    column: ColumnId,
    missing: Option<&str>,
    tokenizer: Tokenizer,
) -> Result<std::sync::Arc<MemoryIndex>> {
    s.segment().derived(index, || -> Result<MemoryIndex> {
        let mut chunks = Vec::with_capacity(s.segment().blocks().len());
        for bi in 0..s.segment().blocks().len() {
            let chunk = s.segment().block(bi)?;
            if let Some(a) = chunk.column(column) {
                check_text(a)?;
            }
            chunks.push(chunk);
        }
        let texts = chunks.iter().flat_map(|chunk| {
            let array = chunk.column(column);
            (0..chunk.num_rows()).map(move |i| row_text(array, missing, i))
        });
        Ok(MemoryIndex::build(texts, tokenizer))
    })
}

/// The text index file of segment `s`, opened (once per segment).
fn segment_index(s: &SegmentRef, index: IndexId) -> Result<Option<std::sync::Arc<TextIndex>>> {
    if s.segment().in_memory() {
        return Ok(None);
    }
    let Some(file) = s.segment().index(index) else {
        return Ok(None);
    };
    let rows = s.segment().num_rows();
    let idx = file.loaded(|bytes| {
        let idx = TextIndex::open(bytes.as_slice()).map_err(|e| e.to_string())?;
        if idx.len() != rows {
            return Err(format!(
                "text index of {} rows for a {rows}-row segment",
                idx.len()
            ));
        }
        Ok(idx)
    })?;
    Ok(Some(idx))
}

impl TextSearch {
    /// Parses `query` with the tokenizer of `index` (a `bm25` index on `column`) and
    /// gathers its statistics over the live rows of `version`. `missing` is the text of
    /// rows written before the column was added (`ADD COLUMN … DEFAULT`), `None` for
    /// NULL: what a scan reads for them.
    pub fn prepare(
        version: &TableVersion,
        column: ColumnId,
        missing: Option<&str>,
        index: &IndexDef,
        query: &str,
    ) -> Result<TextSearch> {
        let tokenizer = tokenizer(index);
        let q = TextQuery::parse(query, tokenizer);
        let mut stats = Stats::new(&q);
        if !q.matches_nothing() {
            for s in version.segments() {
                match segment_index(s, index.id)? {
                    Some(idx) => {
                        let deletes = s.deletes();
                        let part = idx.stats(&q, &mut deletes.iter(), &|p| deletes.contains(p))?;
                        stats.add(&part);
                    }
                    None => {
                        let mem = memory_index(s, index.id, column, missing, tokenizer)?;
                        let deletes = s.deletes();
                        stats.add(&mem.stats(&q, &|p| !deletes.contains(p)));
                    }
                }
            }
        }
        let weights = Weights::new(&q, stats)?;
        Ok(TextSearch {
            column,
            missing: missing.map(str::to_string),
            index: index.id,
            tokenizer,
            weights,
        })
    }

    /// The weights (query and statistics).
    pub fn weights(&self) -> &Weights {
        &self.weights
    }

    /// A matcher for scoring texts one by one with [`TextSearch::score`].
    pub fn matcher(&self) -> Matcher<'_> {
        Matcher::new(self.weights.query(), self.tokenizer)
    }

    /// The score of one text of the snapshot: NULL for NULL, 0 when it matches nothing.
    pub fn score(&self, matcher: &mut Matcher<'_>, text: Option<&str>) -> Option<f32> {
        text?;
        Some(self.weights.score(&matcher.matches(text)))
    }

    /// Whether no row can match (a query of only excluded words, or no documents).
    fn matches_nothing(&self) -> bool {
        self.weights.query().matches_nothing() || self.weights.stats().docs == 0
    }

    /// Whether the best matches come through pruned postings (a query of few
    /// clauses); else finding them scores every match anyway, and keeping every
    /// match's score costs about what [`TextSearch::top_matches`] does.
    pub fn prunes(&self) -> bool {
        TextIndex::prunes(self.weights.query())
    }

    /// The scored column.
    pub fn column(&self) -> ColumnId {
        self.column
    }

    /// The text of row `i` of `chunk`: its value, or the column's missing text when the
    /// block was written before the column existed.
    pub fn text_of<'a>(&'a self, chunk: &'a tarn_storage::Chunk, i: usize) -> Option<&'a str> {
        row_text(chunk.column(self.column), self.missing.as_deref(), i)
    }

    /// The `min(k, matching rows)` best live rows of `version` (the snapshot it was
    /// prepared on) passing `filter`, in SPEC §5's order: rows matching the query by
    /// score, then rows with text that match nothing (score 0) and rows whose text is
    /// NULL (score NULL), each by row id.
    pub fn top_k(
        &self,
        version: &TableVersion,
        k: usize,
        filter: Option<&dyn RowFilter>,
    ) -> Result<Vec<Scored>> {
        let best = self.ranked_matches(version, k, filter)?;
        let nothing = self.matches_nothing();
        if best.len() >= k {
            return Ok(best);
        }
        // Too few matches: the rest of the result is rows scoring 0, then NULL. One
        // exact pass over every row ranks them all (a row analyzed on the spot scores
        // the same bits as through its index).
        let mut best = TopK::new(k);
        let mut m = self.matcher();
        for s in version.segments() {
            for_each_loose(
                s,
                self.column,
                self.missing.as_deref(),
                filter,
                |id, text| {
                    let score = match text {
                        Some(_) if nothing => Some(0.0),
                        _ => self.score(&mut m, text),
                    };
                    best.push(id, score);
                },
            )?;
        }
        Ok(best.into_sorted())
    }
}

/// The row ids at `positions` (ascending) of segment `s`.
fn row_ids(s: &SegmentRef, positions: impl Iterator<Item = u32>) -> Result<Vec<u64>> {
    let blocks = s.segment().blocks();
    let mut out = Vec::new();
    let mut cur: Option<(usize, std::sync::Arc<tarn_storage::Chunk>)> = None;
    for p in positions {
        let p = p as usize;
        let bi = blocks.partition_point(|b| b.start + b.rows <= p);
        if bi >= blocks.len() {
            return Err(Error::Internal(format!(
                "position {p} past the segment's end"
            )));
        }
        if cur.as_ref().is_none_or(|(b, _)| *b != bi) {
            cur = Some((bi, s.segment().block(bi)?));
        }
        if let Some((_, chunk)) = &cur {
            out.push(chunk.row_ids().value(p - blocks[bi].start));
        }
    }
    Ok(out)
}

impl TextSearch {
    /// The `min(k, matching rows)` best live rows passing `filter` that match the query
    /// (score above 0), best first.
    pub fn top_matches(
        &self,
        version: &TableVersion,
        k: usize,
        filter: Option<&dyn RowFilter>,
    ) -> Result<Vec<Scored>> {
        self.ranked_matches(version, k, filter)
    }

    /// The best matching rows (at most `k`, best first; fewer only when fewer match).
    /// An indexed segment gives only the matches that can still rank (its postings
    /// pruned below the k-th score found so far); the other segments' texts are
    /// analyzed once and kept (see [`memory_index`]).
    fn ranked_matches(
        &self,
        version: &TableVersion,
        k: usize,
        filter: Option<&dyn RowFilter>,
    ) -> Result<Vec<Scored>> {
        let mut best = TopK::new(k);
        if self.matches_nothing() || k == 0 {
            return Ok(Vec::new());
        }
        // The largest segments first (the indexed ones, where pruning pays): the
        // smaller ones then meet a high floor already.
        let mut segments: Vec<&SegmentRef> = version.segments().iter().collect();
        segments.sort_by_key(|s| std::cmp::Reverse(s.segment().num_rows()));
        for s in segments {
            let Some(idx) = segment_index(s, self.index)? else {
                self.each_segment_match(s, filter, &mut |id, score| best.push(id, Some(score)))?;
                continue;
            };
            let allowed = crate::topk::allowed_positions(s, filter)?;
            let deletes = s.deletes();
            let floor = if best.len() >= k {
                best.threshold().and_then(|t| t.score)
            } else {
                None
            };
            let mut hits = idx.top(&self.weights, k, floor, &|p| match &allowed {
                Some(a) => a.contains(p),
                None => !deletes.contains(p),
            })?;
            hits.sort_unstable_by_key(|h| h.0);
            let ids = row_ids(s, hits.iter().map(|h| h.0))?;
            for (id, (_, score)) in ids.into_iter().zip(hits) {
                best.push(id, Some(score));
            }
        }
        Ok(best.into_sorted())
    }

    /// The scores of the live rows among `ids` that match the query (a row absent
    /// from the answer scores 0, or NULL when its text is NULL): through each
    /// segment's index, or its texts analyzed once.
    pub fn scores_of(&self, version: &TableVersion, ids: &[u64]) -> Result<HashMap<u64, f32>> {
        let mut out = HashMap::new();
        if self.matches_nothing() {
            return Ok(out);
        }
        for (si, positions) in version.positions(ids)? {
            let s = &version.segments()[si];
            let scores = match segment_index(s, self.index)? {
                Some(idx) => idx.score_positions(&self.weights, &positions)?,
                None => memory_index(
                    s,
                    self.index,
                    self.column,
                    self.missing.as_deref(),
                    self.tokenizer,
                )?
                .score_texts(&self.weights, &positions),
            };
            let ids = row_ids(s, positions.iter().copied())?;
            for (id, score) in ids.into_iter().zip(scores) {
                if let Some(score) = score {
                    out.insert(id, score);
                }
            }
        }
        Ok(out)
    }

    /// Calls `each(row id, score)` for every matching live row of `s` passing
    /// `filter`.
    fn each_segment_match(
        &self,
        s: &SegmentRef,
        filter: Option<&dyn RowFilter>,
        each: &mut dyn FnMut(u64, f32),
    ) -> Result<()> {
        let hits = self.segment_matches(s, filter)?;
        let ids = row_ids(s, hits.iter().map(|h| h.0))?;
        for (id, (_, score)) in ids.into_iter().zip(hits) {
            each(id, score);
        }
        Ok(())
    }

    /// Every matching live row of `s` passing `filter`: (position, score), by
    /// position; through the segment's index file or its texts analyzed once.
    fn segment_matches(
        &self,
        s: &SegmentRef,
        filter: Option<&dyn RowFilter>,
    ) -> Result<Vec<(u32, f32)>> {
        let allowed = crate::topk::allowed_positions(s, filter)?;
        let deletes = s.deletes();
        let allow = |p: u32| match &allowed {
            Some(a) => a.contains(p),
            None => !deletes.contains(p),
        };
        let mut hits: Vec<(u32, f32)> = Vec::new();
        match segment_index(s, self.index)? {
            Some(idx) => {
                idx.search(&self.weights, &allow, &mut |p, score| hits.push((p, score)))?
            }
            None => memory_index(
                s,
                self.index,
                self.column,
                self.missing.as_deref(),
                self.tokenizer,
            )?
            .search(&self.weights, &allow, &mut |p, score| hits.push((p, score))),
        }
        hits.sort_unstable_by_key(|h| h.0);
        Ok(hits)
    }

    /// Calls `each(row id, score)` for every live row of `version` passing `filter`
    /// that matches the query (score above 0), in no particular order: through the
    /// index where a segment has one, analyzing the text on the spot elsewhere.
    pub fn for_each_match(
        &self,
        version: &TableVersion,
        filter: Option<&dyn RowFilter>,
        each: &mut dyn FnMut(u64, f32),
    ) -> Result<()> {
        if self.matches_nothing() {
            return Ok(());
        }
        for s in version.segments() {
            self.each_segment_match(s, filter, each)?;
        }
        Ok(())
    }

    /// Every live row of `version` passing `filter` that matches the query, with its
    /// score, kept by segment and position (no row id is read until asked for).
    pub(crate) fn all_matches(
        &self,
        version: &TableVersion,
        filter: Option<&dyn RowFilter>,
    ) -> Result<AllMatches> {
        let by_segment = if self.matches_nothing() {
            vec![Vec::new(); version.segments().len()]
        } else {
            version
                .segments()
                .iter()
                .map(|s| self.segment_matches(s, filter))
                .collect::<Result<_>>()?
        };
        Ok(AllMatches { by_segment })
    }
}

/// Every matching row of a snapshot passing a filter, with its score (see
/// [`TextSearch::all_matches`]): for each segment of the snapshot, (position, score) by
/// position. Ask it about the same snapshot only.
#[derive(Debug)]
pub(crate) struct AllMatches {
    by_segment: Vec<Vec<(u32, f32)>>,
}

/// [`AllMatches`] asked about a snapshot other than its own (a bug).
fn other_snapshot() -> Error {
    Error::Internal("text matches asked about another snapshot".into())
}

impl AllMatches {
    /// The `min(n, matches)` best matches of `version` (the snapshot they were found
    /// in), best first, ties by row id (rows ascend with (segment, position)).
    pub(crate) fn best(&self, version: &TableVersion, n: usize) -> Result<Vec<Scored>> {
        let mut all: Vec<(f32, usize, u32)> = self
            .by_segment
            .iter()
            .enumerate()
            .flat_map(|(si, hits)| hits.iter().map(move |&(p, score)| (score, si, p)))
            .collect();
        let order = |a: &(f32, usize, u32), b: &(f32, usize, u32)| {
            b.0.total_cmp(&a.0).then((a.1, a.2).cmp(&(b.1, b.2)))
        };
        if all.len() > n && n > 0 {
            all.select_nth_unstable_by(n - 1, order);
        }
        all.truncate(n);
        // Row ids a segment at a time (by position), then best first.
        all.sort_unstable_by_key(|a| (a.1, a.2));
        let mut out = Vec::with_capacity(all.len());
        for run in all.chunk_by(|a, b| a.1 == b.1) {
            let s = version
                .segments()
                .get(run[0].1)
                .ok_or_else(other_snapshot)?;
            let ids = row_ids(s, run.iter().map(|a| a.2))?;
            out.extend(ids.into_iter().zip(run).map(|(id, a)| Scored {
                id,
                score: Some(a.0),
            }));
        }
        out.sort_unstable_by(|a, b| {
            let (a_score, b_score) = (a.score.unwrap_or(0.0), b.score.unwrap_or(0.0));
            b_score.total_cmp(&a_score).then(a.id.cmp(&b.id))
        });
        Ok(out)
    }

    /// The scores of the rows among `ids` that match (a row absent from the answer
    /// matches nothing, is no longer live or fails the filter the matches were found
    /// with).
    pub(crate) fn scores_of(
        &self,
        version: &TableVersion,
        ids: &[u64],
    ) -> Result<HashMap<u64, f32>> {
        let mut out = HashMap::new();
        for (si, positions) in version.positions(ids)? {
            let hits = self.by_segment.get(si).ok_or_else(other_snapshot)?;
            let found: Vec<(u32, f32)> = positions
                .iter()
                .filter_map(|p| {
                    let i = hits.binary_search_by_key(p, |h| h.0).ok()?;
                    Some(hits[i])
                })
                .collect();
            let ids = row_ids(&version.segments()[si], found.iter().map(|h| h.0))?;
            for (id, (_, score)) in ids.into_iter().zip(found) {
                out.insert(id, score);
            }
        }
        Ok(out)
    }
}

/// Calls `each(row id, text)` for every live row of `s` that passes `filter`.
fn for_each_loose(
    s: &SegmentRef,
    column: ColumnId,
    missing: Option<&str>,
    filter: Option<&dyn RowFilter>,
    mut each: impl FnMut(u64, Option<&str>),
) -> Result<()> {
    for bi in 0..s.segment().blocks().len() {
        let chunk = s.segment().block(bi)?;
        let pass = passing_rows(s, bi, &chunk, filter)?;
        let ids = chunk.row_ids();
        let array = chunk.column(column);
        if let Some(a) = array {
            check_text(a)?;
        }
        for i in 0..chunk.num_rows() {
            if pass.as_ref().is_some_and(|m| !m.value(i)) {
                continue;
            }
            each(ids.value(i), row_text(array, missing, i));
        }
    }
    Ok(())
}
