//! Hybrid `<#>` over a table snapshot (SPEC §5): the candidates are the union of each
//! arm's best rows (the vector arm's top `n` by similarity, the text arm's top `n`
//! matching rows by BM25, `n` = max(4k, 100)); every candidate gets both arms' scores
//! exactly, read from its stored row; `tarn-hybrid` normalizes each arm over the
//! candidates and fuses them.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};

use tarn_catalog::ColumnId;
use tarn_hybrid::{ArmScores, Fuser, Fusion, Weights};
use tarn_storage::TableVersion;
use tarn_vector::{Scored, TopK};

use crate::score::{QueryValue, score_rows};
use crate::text::{AllMatches, TextSearch};
use crate::topk::{IndexUse, RowFilter, SearchRequest, passing_rows, top_k};
use crate::{Error, Result};

/// Live rows from which a hybrid top-k runs its two arms on two threads: below, both
/// arms together cost about what starting a thread does.
const PARALLEL_ARMS_ROWS: usize = 1_000;

/// Arm threads running now, across every search of the process: at most one per core,
/// so that many hybrid searches at once do not start a thread each (the arms then run
/// one after the other on the searching thread, as on a busy machine they would anyway).
static ARM_THREADS: AtomicUsize = AtomicUsize::new(0);

/// A claim on one of the [`ARM_THREADS`], given back when dropped.
struct ArmThread;

impl ArmThread {
    fn claim() -> Option<ArmThread> {
        // Asked once: on Linux the answer reads the cgroup's CPU quota from files,
        // which cost more than a small hybrid search.
        static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let cores =
            *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        ARM_THREADS
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < cores).then_some(n + 1)
            })
            .ok()
            .map(|_| ArmThread)
    }
}

impl Drop for ArmThread {
    fn drop(&mut self) {
        ARM_THREADS.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The message of a panic caught from a thread.
fn panic_text(p: &(dyn std::any::Any + Send)) -> &str {
    tarn_storage::panic_message(p).unwrap_or("a panic")
}

/// Candidates each arm contributes for `k` rows wanted.
pub fn arm_candidates(k: usize) -> usize {
    k.saturating_mul(4).max(100)
}

/// A hybrid query over one snapshot.
pub struct HybridRequest<'a> {
    /// The vector (or bag) column and the query of the vector arm.
    pub vector_column: ColumnId,
    /// The vector arm's query; `None` (a NULL query) makes that arm NULL for every row.
    pub vector: Option<&'a QueryValue>,
    /// The vector column's index, if any.
    pub vector_index: Option<IndexUse>,
    /// The text arm, prepared on the same snapshot; `None` (a NULL query) makes that
    /// arm NULL for every row.
    pub text: Option<&'a TextSearch>,
    /// The arms' weights.
    pub weights: Weights,
    /// How each arm is normalized.
    pub fusion: Fusion,
    /// Rows wanted (`usize::MAX`: every live row of the table is a candidate, whatever
    /// the filter, which then only picks the rows returned).
    pub k: usize,
    /// Only rows passing this filter count.
    pub filter: Option<&'a dyn RowFilter>,
}

impl std::fmt::Debug for HybridRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HybridRequest")
            .field("k", &self.k)
            .field("fusion", &self.fusion)
            .finish()
    }
}

/// The ids of the live rows of `version` passing `filter`, in row order.
fn live_ids(version: &TableVersion, filter: Option<&dyn RowFilter>) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    for s in version.segments() {
        for bi in 0..s.segment().blocks().len() {
            let chunk = s.segment().block(bi)?;
            let ids = chunk.row_ids();
            match passing_rows(s, bi, &chunk, filter)? {
                Some(m) => out.extend(m.set_indices().map(|i| ids.value(i))),
                None => out.extend(ids.values().iter().copied()),
            }
        }
    }
    Ok(out)
}

/// How [`arm_scores`] gets a row's text score.
#[derive(Clone, Copy)]
pub enum TextArm<'a> {
    /// Analyzing the row's text on the spot.
    Analyze(&'a TextSearch),
    /// From the scores of every matching row (gathered through the index); a row
    /// absent from them matches nothing.
    Matches(&'a TextSearch, &'a HashMap<u64, f32>),
}

/// Both arms' exact scores of the live rows among `ids` (in `ids`' order, rows no
/// longer live left out): (row id, scores).
pub fn arm_scores(
    version: &TableVersion,
    ids: &[u64],
    vector_column: ColumnId,
    vector: Option<&QueryValue>,
    text: Option<TextArm<'_>>,
) -> Result<Vec<(u64, ArmScores)>> {
    let mut out = Vec::with_capacity(ids.len());
    let mut m = match text {
        Some(TextArm::Analyze(t)) => Some(t.matcher()),
        _ => None,
    };
    for (chunk, positions) in version.rows(ids)? {
        let row_ids = chunk.row_ids();
        let mut v: Vec<Option<f32>> = Vec::with_capacity(positions.len());
        match (chunk.column(vector_column), vector) {
            (Some(a), Some(q)) => score_rows(a, q, positions.iter().copied(), |_, s| v.push(s))?,
            _ => v.resize(positions.len(), None),
        }
        for (j, &p) in positions.iter().enumerate() {
            let id = row_ids.value(p);
            let t = match (text, m.as_mut()) {
                (Some(TextArm::Analyze(text)), Some(m)) => text.score(m, text.text_of(&chunk, p)),
                // A row that matches nothing scores 0 unless its text is NULL.
                (Some(TextArm::Matches(text, scores)), _) => match scores.get(&id) {
                    Some(s) => Some(*s),
                    None => text.text_of(&chunk, p).map(|_| 0.0),
                },
                _ => None,
            };
            out.push((
                id,
                ArmScores {
                    vector: v[j],
                    text: t,
                },
            ));
        }
    }
    Ok(out)
}

/// The fused ranking: `min(k, matching rows)` rows by fused score (NULL last, then row
/// id), each with its arms' scores, and the fuser the candidates gave (so the same
/// fused scores can be recomputed from arm scores).
pub fn hybrid_top_k(
    version: &TableVersion,
    req: &HybridRequest<'_>,
) -> Result<(Vec<(Scored, ArmScores)>, Fuser)> {
    // Without LIMIT every live row is a candidate (the normalization does not depend
    // on WHERE); the filter only picks the rows returned. The text arm's score of
    // every matching row then comes through the index in one pass (analyzing each
    // row's text again would cost more than the whole search).
    let mut text_scores: Option<HashMap<u64, f32>> = match req.text {
        Some(t) if req.k == usize::MAX => {
            let mut m = HashMap::new();
            t.for_each_match(version, None, &mut |id, s| {
                m.insert(id, s);
            })?;
            Some(m)
        }
        _ => None,
    };
    let (ids, returned): (Vec<u64>, Option<BTreeSet<u64>>) = if req.k == usize::MAX {
        let returned = match req.filter {
            Some(f) => Some(live_ids(version, Some(f))?.into_iter().collect()),
            None => None,
        };
        (live_ids(version, None)?, returned)
    } else {
        let n = arm_candidates(req.k);
        let vector_arm = || -> Result<Vec<Scored>> {
            let Some(vector) = req.vector else {
                return Ok(Vec::new());
            };
            top_k(
                version,
                &SearchRequest {
                    column: req.vector_column,
                    query: vector,
                    k: n,
                    filter: req.filter,
                    index: req.vector_index,
                },
            )
        };
        // The text arm's best rows: through postings pruned below the n-th score, or
        // (when finding them scores every match anyway) from every match's score,
        // which then also scores the other arm's candidates.
        let text_arm = || -> Result<(Vec<Scored>, Option<AllMatches>)> {
            let Some(t) = req.text else {
                return Ok((Vec::new(), None));
            };
            if t.prunes() {
                Ok((t.top_matches(version, n, req.filter)?, None))
            } else {
                let all = t.all_matches(version, req.filter)?;
                Ok((all.best(version, n)?, Some(all)))
            }
        };
        // The arms are independent: over a table large enough to pay for a thread,
        // and when a core is free, the vector arm runs on a thread of its own while
        // this thread runs the text arm (an error of either waits for the other).
        let live: usize = version.segments().iter().map(|s| s.live_count()).sum();
        let claim = (live >= PARALLEL_ARMS_ROWS && req.vector.is_some() && req.text.is_some())
            .then(ArmThread::claim)
            .flatten();
        let (vector_best, (text_best, all)) = if let Some(_claim) = claim {
            std::thread::scope(|scope| {
                let vector = std::thread::Builder::new()
                    .name("tarn-hybrid-arm".into())
                    .spawn_scoped(scope, vector_arm);
                let text = text_arm();
                let vector = match vector {
                    Ok(handle) => handle.join().unwrap_or_else(|p| {
                        Err(Error::Internal(format!(
                            "the vector arm panicked: {}",
                            panic_text(p.as_ref())
                        )))
                    }),
                    // No thread to be had: the arm runs here.
                    Err(_) => vector_arm(),
                };
                Ok::<_, Error>((vector?, text?))
            })?
        } else {
            (vector_arm()?, text_arm()?)
        };
        let mut set: BTreeSet<u64> = vector_best
            .iter()
            .filter(|s| s.score.is_some())
            .map(|s| s.id)
            .collect();
        let mut scores: HashMap<u64, f32> = HashMap::new();
        for s in text_best {
            if let Some(score) = s.score {
                scores.insert(s.id, score);
            }
            set.insert(s.id);
        }
        let ids: Vec<u64> = if set.len() < req.k {
            // Fewer candidates than rows wanted: every row passing the filter is one,
            // so the result still has min(k, matching rows) rows.
            live_ids(version, req.filter)?
        } else {
            set.into_iter().collect()
        };
        // The text scores of the candidates the text arm did not bring.
        if let Some(t) = req.text {
            let rest: Vec<u64> = ids
                .iter()
                .copied()
                .filter(|id| !scores.contains_key(id))
                .collect();
            scores.extend(match &all {
                Some(all) => all.scores_of(version, &rest)?,
                None => t.scores_of(version, &rest)?,
            });
            text_scores = Some(scores);
        }
        (ids, None)
    };
    let text = match (req.text, &text_scores) {
        (Some(t), Some(scores)) => Some(TextArm::Matches(t, scores)),
        _ => None,
    };
    let scored = arm_scores(version, &ids, req.vector_column, req.vector, text)?;
    let arms: Vec<ArmScores> = scored.iter().map(|(_, a)| *a).collect();
    let fuser = Fuser::over(&arms, req.weights, req.fusion);
    let mut best = TopK::new(req.k.min(scored.len()));
    for (id, a) in &scored {
        if returned.as_ref().is_none_or(|r| r.contains(id)) {
            best.push(*id, fuser.fuse(*a));
        }
    }
    let by_id: std::collections::HashMap<u64, ArmScores> = scored.into_iter().collect();
    let ranked = best
        .into_sorted()
        .into_iter()
        .map(|s| {
            let a = by_id.get(&s.id).copied().unwrap_or(ArmScores {
                vector: None,
                text: None,
            });
            (s, a)
        })
        .collect();
    Ok((ranked, fuser))
}
