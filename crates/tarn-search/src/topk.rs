//! The k best live rows of a table snapshot for a `<#>` query, in SPEC §5's order
//! (score descending, NULL last, row id ascending).
//!
//! Per segment: the memtable and segments without an index file are scanned exactly;
//! an indexed segment first turns the filter and its deletes into the set of allowed
//! positions, then searches exactly over a small set, or walks its graph with the set
//! as the filter, widening `ef` until it has `min(k, allowed)` rows (and scanning
//! exactly if the graph cannot reach them). Candidates are scored again from the
//! stored vectors, so a score is the same bits on every path.

use std::collections::BTreeSet;

use datafusion::arrow::buffer::BooleanBuffer;
use roaring::RoaringBitmap;
use tarn_catalog::{ColumnId, IndexId};
use tarn_storage::{Chunk, IndexFile, SegmentRef, TableVersion};
use tarn_vector::{Graph, Scored, TopK};

use crate::score::{QueryValue, score_rows};
use crate::{Error, Result};

/// A filter on a table's rows, evaluated a block at a time: the one way filters reach
/// search, whether a segment is scanned exactly or searched through an index.
pub trait RowFilter: Send + Sync {
    /// Which rows of `chunk` pass (`true` = pass); `None` when all of them do. Only
    /// the rows `live` marks (all when `None`) are evaluated: a deleted or superseded
    /// row must not make the filter fail (say, divide by zero); the others are `false`.
    /// A mask has one value per row of `chunk`; any other length is an error.
    fn block_mask(
        &self,
        chunk: &Chunk,
        live: Option<&BooleanBuffer>,
    ) -> Result<Option<BooleanBuffer>>;
}

/// Which index answers, and how wide its search is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexUse {
    /// The index (its per-segment files).
    pub id: IndexId,
    /// Width of the graph search (at least k).
    pub ef_search: usize,
}

/// A top-k request.
#[derive(Clone, Copy)]
pub struct SearchRequest<'a> {
    /// The vector or bag column scored.
    pub column: ColumnId,
    /// The query value.
    pub query: &'a QueryValue,
    /// Rows wanted (`usize::MAX`: every row, ordered).
    pub k: usize,
    /// Only rows passing this filter count.
    pub filter: Option<&'a dyn RowFilter>,
    /// The column's index, if it has one.
    pub index: Option<IndexUse>,
}

impl std::fmt::Debug for SearchRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchRequest")
            .field("column", &self.column)
            .field("k", &self.k)
            .field("filtered", &self.filter.is_some())
            .field("index", &self.index)
            .finish()
    }
}

/// What a search did, for `EXPLAIN ANALYZE`-style reporting and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SearchStats {
    /// Segments answered through their graph.
    pub graph_segments: usize,
    /// Segments (or memtable runs) scanned exactly.
    pub exact_segments: usize,
    /// Indexed segments whose allowed set was small enough to scan exactly.
    pub small_sets: usize,
    /// Graph searches that had to fall back to an exact scan.
    pub fallbacks: usize,
}

/// Allowed sets at most this large (or this share of the segment) are scanned exactly
/// rather than walked in the graph.
const EXACT_SET_ROWS: u64 = 2048;
const EXACT_SET_SHARE: f64 = 0.02;
/// MaxSim candidates taken per query vector, per row wanted.
const MAXSIM_CANDIDATES_PER_K: usize = 10;

/// The `min(k, matching rows)` best live rows of `version` passing the filter, best
/// first, as (row id, score). Rows whose score is NULL (NULL or zero vectors) rank
/// last, so they fill the result only when fewer scored rows match.
pub fn top_k(version: &TableVersion, req: &SearchRequest<'_>) -> Result<Vec<Scored>> {
    Ok(top_k_with_stats(version, req)?.0)
}

/// [`top_k`], also saying which path each segment took.
pub fn top_k_with_stats(
    version: &TableVersion,
    req: &SearchRequest<'_>,
) -> Result<(Vec<Scored>, SearchStats)> {
    let mut best = TopK::new(req.k);
    let mut stats = SearchStats::default();
    for s in version.segments() {
        let file = req
            .index
            .filter(|_| req.k != usize::MAX && !s.segment().in_memory())
            .and_then(|u| s.segment().index(u.id).map(|f| (u, f)));
        match file {
            Some((u, file)) => graph_segment(s, &file, u, req, &mut best, &mut stats)?,
            None => {
                stats.exact_segments += 1;
                exact_segment(s, req, None, &mut best)?
            }
        }
    }
    Ok((best.into_sorted(), stats))
}

/// Scores the live rows of `s` that pass the filter (and, when given, are in `only`).
fn exact_segment(
    s: &SegmentRef,
    req: &SearchRequest<'_>,
    only: Option<&RoaringBitmap>,
    best: &mut TopK,
) -> Result<()> {
    for (bi, slot) in s.segment().blocks().iter().enumerate() {
        let (lo, hi) = (slot.start as u32, (slot.start + slot.rows) as u32);
        if only.is_some_and(|o| o.range_cardinality(lo..hi) == 0) {
            continue;
        }
        let chunk = s.segment().block(bi)?;
        let live = s.block_mask(bi);
        // With `only`, the filter already went into it.
        let pass = match (req.filter, only) {
            (Some(f), None) => checked_mask(f, &chunk, live.as_ref())?,
            _ => None,
        };
        let keep = |i: &usize| {
            live.as_ref().is_none_or(|m| m.value(*i)) && pass.as_ref().is_none_or(|m| m.value(*i))
        };
        // With `only` (a graph's candidates, or a small allowed set) just its rows are
        // visited; otherwise every row of the block.
        let rows: Vec<usize> = match only {
            Some(o) => o
                .range(lo..hi)
                .map(|p| (p - lo) as usize)
                .filter(keep)
                .collect(),
            None => (0..chunk.num_rows()).filter(keep).collect(),
        };
        let ids = chunk.row_ids();
        match chunk.column(req.column) {
            Some(stored) => score_rows(stored, req.query, rows, |i, score| {
                best.push(ids.value(i), score)
            })?,
            // A column added after this block was written: NULL in every row.
            None => rows.into_iter().for_each(|i| best.push(ids.value(i), None)),
        }
    }
    Ok(())
}

/// The first `k` live rows of `version` passing `filter`, by row id, each scoring NULL:
/// the answer to a NULL query, under which every row scores NULL (SPEC §5: ties by row
/// id).
pub fn unscored_top_k(
    version: &TableVersion,
    k: usize,
    filter: Option<&dyn RowFilter>,
) -> Result<Vec<Scored>> {
    let mut best = TopK::new(k);
    for s in version.segments() {
        for bi in 0..s.segment().blocks().len() {
            let chunk = s.segment().block(bi)?;
            let pass = passing_rows(s, bi, &chunk, filter)?;
            let ids = chunk.row_ids();
            for i in 0..chunk.num_rows() {
                if pass.as_ref().is_none_or(|m| m.value(i)) {
                    best.push(ids.value(i), None);
                }
            }
        }
    }
    Ok(best.into_sorted())
}

/// The rows of block `bi` of `s` (decoded as `chunk`) that are live and pass `filter`:
/// `None` when every row does.
pub(crate) fn passing_rows(
    s: &SegmentRef,
    bi: usize,
    chunk: &Chunk,
    filter: Option<&dyn RowFilter>,
) -> Result<Option<BooleanBuffer>> {
    let live = s.block_mask(bi);
    let pass = match filter {
        Some(f) => checked_mask(f, chunk, live.as_ref())?,
        None => None,
    };
    Ok(match (live, pass) {
        (Some(l), Some(p)) => Some(&l & &p),
        (l, p) => l.or(p),
    })
}

/// `filter`'s mask of `chunk` (see [`RowFilter::block_mask`]), refused unless it has
/// one value per row.
pub(crate) fn checked_mask(
    filter: &dyn RowFilter,
    chunk: &Chunk,
    live: Option<&BooleanBuffer>,
) -> Result<Option<BooleanBuffer>> {
    let mask = filter.block_mask(chunk, live)?;
    if let Some(m) = &mask
        && m.len() != chunk.num_rows()
    {
        return Err(Error::Internal(format!(
            "a filter gave {} values for a block of {} rows",
            m.len(),
            chunk.num_rows()
        )));
    }
    Ok(mask)
}

/// The positions of `s` that are live and pass the filter; `None` when there is no
/// filter (then only the deletion bitmap counts).
pub(crate) fn allowed_positions(
    s: &SegmentRef,
    filter: Option<&dyn RowFilter>,
) -> Result<Option<RoaringBitmap>> {
    let Some(filter) = filter else {
        return Ok(None);
    };
    let mut out = RoaringBitmap::new();
    for (bi, slot) in s.segment().blocks().iter().enumerate() {
        let chunk = s.segment().block(bi)?;
        let mask = checked_mask(filter, &chunk, s.block_mask(bi).as_ref())?;
        let base = slot.start as u32;
        match mask {
            // Rows appended in order: a push onto the last container, where `insert`
            // would search for it every time.
            Some(m) if m.count_set_bits() < slot.rows => {
                out.append(m.set_indices().map(|i| base + i as u32))
                    .map_err(|e| Error::Internal(format!("row set out of order: {e}")))?;
            }
            // Every row passes: the block as one range.
            _ => {
                out.insert_range(base..base + slot.rows as u32);
            }
        }
    }
    out -= s.deletes();
    Ok(Some(out))
}

fn graph_segment(
    s: &SegmentRef,
    file: &IndexFile,
    u: IndexUse,
    req: &SearchRequest<'_>,
    best: &mut TopK,
    stats: &mut SearchStats,
) -> Result<()> {
    let allowed = allowed_positions(s, req.filter)?;
    let rows = s.segment().num_rows() as u64;
    let count = allowed.as_ref().map_or(s.live_count() as u64, |a| a.len());
    if count == 0 {
        return Ok(());
    }
    // At most `count` rows can come back, whatever LIMIT asked for.
    let want = (req.k as u64).min(count) as usize;
    if allowed.is_some()
        && (count <= EXACT_SET_ROWS.max(8 * want as u64)
            || (count as f64) <= EXACT_SET_SHARE * rows as f64)
    {
        stats.small_sets += 1;
        return exact_segment(s, req, allowed.as_ref(), best);
    }
    let graph = file.loaded(|bytes| {
        let g = Graph::open(bytes).map_err(|e| e.to_string())?;
        // Every node must name a row of this segment (a checksummed file from
        // elsewhere could name others, and silently shorten results).
        if let Some(bad) = g.ids().iter().find(|&&p| p as u64 >= rows) {
            return Err(format!(
                "graph names position {bad} of a {rows}-row segment"
            ));
        }
        Ok(g)
    })?;
    let deletes = s.deletes();
    let allow = |pos: u32| match &allowed {
        Some(a) => a.contains(pos),
        None => !deletes.contains(pos),
    };
    let filter: Option<&dyn Fn(u32) -> bool> = if allowed.is_some() || !deletes.is_empty() {
        Some(&allow)
    } else {
        None
    };
    let nodes = graph.len().max(1);
    let mut ef = u.ef_search.max(want).min(nodes);
    let candidates: BTreeSet<u32> = loop {
        let found: BTreeSet<u32> = match req.query {
            QueryValue::Vector(q) => graph
                .search(q, want, ef, filter)
                .into_iter()
                .map(|(pos, _)| pos)
                .collect(),
            // MaxSim: the nearest vectors of each query vector name the candidate rows
            // (a row's score sums its best match per query vector, so the best rows
            // need not be among any one vector's k nearest: take more, then rank
            // exactly).
            QueryValue::Bag { values, dim } => {
                let per_vector = ef
                    .max(MAXSIM_CANDIDATES_PER_K.saturating_mul(want))
                    .min(nodes);
                values
                    .chunks_exact((*dim).max(1))
                    .flat_map(|qv| graph.search(qv, per_vector, per_vector, filter))
                    .map(|(pos, _)| pos)
                    .collect()
            }
        };
        if found.len() >= want || ef >= nodes {
            break found;
        }
        ef = ef.saturating_mul(2).min(nodes);
    };
    if candidates.len() < want {
        // The graph cannot reach enough allowed rows (NULL or zero vectors are not in
        // it, or the walk is cut off): never return fewer than asked.
        stats.fallbacks += 1;
        return exact_segment(s, req, allowed.as_ref(), best);
    }
    stats.graph_segments += 1;
    let only: RoaringBitmap = candidates.into_iter().collect();
    exact_segment(s, req, Some(&only), best)
}
