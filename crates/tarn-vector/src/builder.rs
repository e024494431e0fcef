//! Tarn's HNSW construction (Malkov & Yashunin, and hnswlib's choices where the paper
//! leaves room), writing straight into the layout of the graph file.
//!
//! Why not `hnsw_rs` (which built Tarn's first graphs, in the same file format): when
//! a back-link overflows a full list, hnsw_rs drops the farthest link instead of
//! choosing the list again, so on clustered data the lists fill with near duplicates
//! and lose the long links a search needs to cross between clusters. Choosing its
//! links again afterwards brought 100k × 384 to hnswlib's recall, but not 1M × 128
//! (recall@10 at ef 64: 0.834 against hnswlib's 0.952), took 4× hnswlib's time and
//! 4.6× its memory, since every point was an `Arc` with a lock per neighbour list.
//!
//! The algorithm, per inserted node `q` of level `L` (levels drawn once, up front,
//! with `P(level ≥ l) = m^-l`):
//! - walk greedily from the entry point down to layer `L + 1`;
//! - on each layer `L..=0`, search `ef_construction` wide, keep up to `m` of the
//!   results with the neighbour-selection heuristic ([`Builder::select`]), link `q`
//!   to them and them back to `q`; a full list (`m`, or `2m` on layer 0) takes the
//!   back-link only if choosing the list again with the heuristic keeps it.
//!
//! Lists live in flat arrays of atomics (count, then entries, fixed stride) with one
//! lock per node: a writer holds the node's lock, a reader takes it to copy the list,
//! and no thread ever holds two node locks, so the build cannot deadlock. The
//! entry point has its own lock, held through an insertion only by the rare node that
//! raises the top level.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::hnsw::{BuildProgress, HnswParams, MAX_LAYERS, NONE, Near, PREFETCH_LINES, Visited};
use crate::kernels;

/// Vectors inserted per progress report and cancellation check.
const BUILD_STEP: usize = 4096;

/// Two unit vectors this similar are the same point: [`Builder::select`] keeps at
/// most one of them per list, so that many copies of one vector cannot fill each
/// other's lists and wall a walk in.
const SAME_POINT: f32 = 1.0 - 1e-6;

/// A finished graph, in the graph file's layout (see `graph.rs`).
pub(crate) struct Linked {
    /// Node with the highest level, or [`NONE`] when there are no nodes.
    pub entry: u32,
    pub max_level: usize,
    /// `n × (1 + 2m)`: count, then neighbours.
    pub layer0: Vec<u32>,
    /// Start of each node's block in `upper`, or [`NONE`] on level 0.
    pub upper_at: Vec<u32>,
    /// Per node of level `L ≥ 1`: `L`, then `L × (1 + m)`.
    pub upper: Vec<u32>,
}

/// Links the `n` unit vectors stored back to back in `unit` into an HNSW graph.
pub(crate) fn link(
    unit: &[f32],
    dim: usize,
    params: HnswParams,
    seed: u64,
    progress: &dyn BuildProgress,
) -> Result<Linked> {
    let n = unit.len() / dim;
    let b = Builder::new(unit, dim, params, seed)?;
    if n > 0 {
        b.insert(0, &mut Visited::new(n));
    }
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let mut visits: Vec<Visited> = Vec::new();
    let mut start = 1.min(n);
    while start < n {
        if progress.cancelled() {
            return Err(Error::Cancelled);
        }
        let end = (start + BUILD_STEP).min(n);
        b.insert_range(start..end, threads, &mut visits);
        progress.inserted(end, n);
        start = end;
    }
    if n <= 1 {
        progress.inserted(n, n);
    }
    if progress.cancelled() {
        return Err(Error::Cancelled);
    }
    b.connect(progress)?;
    Ok(b.finish())
}

struct Builder<'a> {
    unit: &'a [f32],
    dim: usize,
    m: usize,
    ef: usize,
    dot: fn(&[f32], &[f32]) -> f32,
    levels: Vec<u8>,
    layer0: Vec<AtomicU32>,
    upper_at: Vec<u32>,
    upper: Vec<AtomicU32>,
    locks: Vec<Mutex<()>>,
    /// Entry point and top level; `NONE` before the first insertion.
    top: Mutex<(u32, usize)>,
}

impl<'a> Builder<'a> {
    fn new(unit: &'a [f32], dim: usize, params: HnswParams, seed: u64) -> Result<Self> {
        let n = unit.len() / dim;
        let m = params.m;
        // hnswlib's level multiplier 1 / ln m: each layer holds about 1/m of the one
        // below it.
        let mult = 1.0 / (m as f64).ln();
        let mut rng = SplitMix(seed);
        let levels: Vec<u8> = (0..n)
            .map(|_| {
                // Uniform in (0, 1]: never ln 0.
                let u = ((rng.next() >> 11) + 1) as f64 / (1u64 << 53) as f64;
                ((-u.ln() * mult) as usize).min(MAX_LAYERS - 1) as u8
            })
            .collect();
        let mut upper_at = vec![NONE; n];
        let mut upper_len = 0usize;
        for (node, &level) in levels.iter().enumerate() {
            if level > 0 {
                upper_at[node] = u32::try_from(upper_len)
                    .ok()
                    .filter(|&at| at != NONE)
                    .ok_or_else(|| Error::InvalidParameter("graph too large".into()))?;
                upper_len += 1 + level as usize * (1 + m);
            }
        }
        if upper_len >= NONE as usize {
            return Err(Error::InvalidParameter("graph too large".into()));
        }
        let upper: Vec<AtomicU32> = (0..upper_len).map(|_| AtomicU32::new(0)).collect();
        for (node, &level) in levels.iter().enumerate() {
            if level > 0 {
                upper[upper_at[node] as usize].store(level as u32, Ordering::Relaxed);
            }
        }
        Ok(Builder {
            unit,
            dim,
            m,
            // hnswlib's floor: a search narrower than m could not fill a list.
            ef: params.ef_construction.max(m),
            dot: kernels::functions().dot,
            layer0: (0..n * (1 + 2 * m)).map(|_| AtomicU32::new(0)).collect(),
            upper_at,
            upper,
            locks: (0..n).map(|_| Mutex::new(())).collect(),
            levels,
            top: Mutex::new((NONE, 0)),
        })
    }

    #[inline]
    fn vector(&self, node: u32) -> &[f32] {
        let s = node as usize * self.dim;
        &self.unit[s..s + self.dim]
    }

    /// `1 - cosine` of two nodes (unit vectors).
    #[inline]
    fn dist(&self, a: &[f32], node: u32) -> f32 {
        1.0 - (self.dot)(a, self.vector(node))
    }

    /// Most neighbours a list on `layer` holds.
    fn cap(&self, layer: usize) -> usize {
        if layer == 0 { 2 * self.m } else { self.m }
    }

    /// The count word and entries of `node`'s list on `layer` (≤ its level).
    fn slot(&self, node: u32, layer: usize) -> &[AtomicU32] {
        if layer == 0 {
            let s = node as usize * (1 + 2 * self.m);
            &self.layer0[s..s + 1 + 2 * self.m]
        } else {
            let s = self.upper_at[node as usize] as usize + 1 + (layer - 1) * (1 + self.m);
            &self.upper[s..s + 1 + self.m]
        }
    }

    /// Copies `node`'s list on `layer` into `out`, under the node's lock.
    fn read(&self, node: u32, layer: usize, out: &mut Vec<u32>) {
        out.clear();
        let _guard = self.locks[node as usize].lock();
        read_slot(self.slot(node, layer), out);
    }

    /// Inserts the nodes of `range`, spread over `threads` threads (reusing a visited
    /// set per thread across calls); where no thread can be started, the rest is done
    /// on this one.
    fn insert_range(
        &self,
        range: std::ops::Range<usize>,
        threads: usize,
        visits: &mut Vec<Visited>,
    ) {
        let n = self.levels.len();
        while visits.len() < threads {
            visits.push(Visited::new(n));
        }
        let next = AtomicUsize::new(range.start);
        let work = |visited: &mut Visited| {
            loop {
                let node = next.fetch_add(1, Ordering::Relaxed);
                if node >= range.end {
                    break;
                }
                self.insert(node as u32, visited);
            }
        };
        std::thread::scope(|scope| {
            let (mine, others) = visits.split_first_mut().expect("one visited set a thread");
            let handles: Vec<_> = others
                .iter_mut()
                .filter_map(|visited| {
                    std::thread::Builder::new()
                        .spawn_scoped(scope, || work(visited))
                        .ok()
                })
                .collect();
            work(mine);
            for h in handles {
                if let Err(panic) = h.join() {
                    std::panic::resume_unwind(panic);
                }
            }
        });
    }

    /// Inserts one node (its vector is already in place; its lists are empty or hold
    /// back-links that arrived early).
    fn insert(&self, q: u32, visited: &mut Visited) {
        let level = self.levels[q as usize] as usize;
        let qv = self.vector(q);
        let mut top = self.top.lock();
        let (entry, max_level) = *top;
        if entry == NONE {
            *top = (q, level);
            return;
        }
        // Only a node that raises the top level holds the entry lock throughout (so
        // that no other insertion starts from a half-linked entry point).
        let raising = if level > max_level {
            Some(top)
        } else {
            drop(top);
            None
        };
        let mut buf = Vec::with_capacity(2 * self.m);
        let mut ep = self.descend(qv, entry, max_level, level + 1, &mut buf);
        // Every layer's own list is written before any node links back to `q`: until
        // then no other insertion can find `q`, so none finds it half linked.
        let mut chosen: Vec<(usize, Vec<u32>)> = Vec::with_capacity(level + 1);
        for layer in (0..=level.min(max_level)).rev() {
            let found = self.search_layer(qv, ep, q, layer, visited, &mut buf);
            if let Some(&nearest) = found.first() {
                ep = nearest;
            }
            let list = self.select(q, found, self.m);
            self.write(q, layer, &list);
            chosen.push((layer, list));
        }
        for (layer, list) in chosen {
            for s in list {
                self.link_back(s, q, layer);
            }
        }
        if let Some(mut top) = raising {
            *top = (q, level);
        }
    }

    /// Walks greedily from `entry` (on `from`) down to layer `to`, returning the node
    /// nearest `qv` found there.
    fn descend(&self, qv: &[f32], entry: u32, from: usize, to: usize, buf: &mut Vec<u32>) -> Near {
        let mut ep = Near(self.dist(qv, entry), entry);
        for layer in (to..=from).rev() {
            loop {
                let mut changed = false;
                self.read(ep.1, layer, buf);
                for &nb in buf.iter() {
                    let d = self.dist(qv, nb);
                    if d < ep.0 {
                        ep = Near(d, nb);
                        changed = true;
                    }
                }
                if !changed {
                    break;
                }
            }
        }
        ep
    }

    /// The (up to) `ef_construction` nearest nodes to `qv` on `layer` reachable from
    /// `ep`, nearest first, never `skip` (the node being linked).
    fn search_layer(
        &self,
        qv: &[f32],
        ep: Near,
        skip: u32,
        layer: usize,
        visited: &mut Visited,
        buf: &mut Vec<u32>,
    ) -> Vec<Near> {
        visited.start();
        visited.insert(ep.1);
        visited.insert(skip);
        let mut candidates: BinaryHeap<Reverse<Near>> = BinaryHeap::with_capacity(self.ef * 2);
        let mut results: BinaryHeap<Near> = BinaryHeap::with_capacity(self.ef + 1);
        candidates.push(Reverse(ep));
        if ep.1 != skip {
            results.push(ep);
        }
        while let Some(Reverse(c)) = candidates.pop() {
            if results.len() >= self.ef && results.peek().is_some_and(|w| c.0 > w.0) {
                break;
            }
            self.read(c.1, layer, buf);
            buf.retain(|&nb| visited.insert(nb));
            for &nb in buf.iter() {
                kernels::prefetch(self.vector(nb), PREFETCH_LINES);
            }
            for &nb in buf.iter() {
                let d = self.dist(qv, nb);
                if results.len() < self.ef || results.peek().is_some_and(|w| d < w.0) {
                    candidates.push(Reverse(Near(d, nb)));
                    results.push(Near(d, nb));
                    if results.len() > self.ef {
                        results.pop();
                    }
                }
            }
        }
        results.into_sorted_vec()
    }

    /// HNSW's neighbour-selection heuristic for `owner`'s list: walking `cands`
    /// (distances to `owner`) nearest first, one is kept only when it is nearer
    /// `owner` than to every one kept before it. The list then points in different
    /// directions instead of into one cluster, which keeps the long links between
    /// clusters. Fewer candidates than `cap` are all kept (as hnswlib does: a small
    /// graph has no links to spare).
    ///
    /// Copies of one vector need two more rules, or they wall a walk in: a list keeps
    /// at most one copy of any point (two of the owner's own, so that its copies form
    /// a connected group), and candidates at exactly the same distance are taken in
    /// an order of their own per owner, not by node number, so that copies do not all
    /// pick the same few and leave the rest unreachable.
    fn select(&self, owner: u32, mut cands: Vec<Near>, cap: usize) -> Vec<u32> {
        if cands.len() < cap {
            return cands.into_iter().map(|c| c.1).collect();
        }
        cands.sort_by(|a, b| {
            a.0.total_cmp(&b.0)
                .then_with(|| mix(owner, a.1).cmp(&mix(owner, b.1)))
        });
        let mut kept: Vec<u32> = Vec::with_capacity(cap);
        // The kept neighbours that are not copies of the owner.
        let mut directions: Vec<u32> = Vec::with_capacity(cap);
        let mut own_copies = 0;
        for Near(d, c) in cands {
            if kept.len() == cap {
                break;
            }
            let sim = 1.0 - d;
            if sim >= SAME_POINT {
                // A copy of the owner's point says nothing about direction (every
                // candidate is exactly as near it as the owner), so it turns no
                // candidate away either.
                if own_copies < 2 {
                    own_copies += 1;
                    kept.push(c);
                }
                continue;
            }
            // (A copy of a kept direction is nearer it, at similarity ~1, than the
            // owner, so it is turned away here too.)
            let cv = self.vector(c);
            if directions
                .iter()
                .all(|&s| (self.dot)(cv, self.vector(s)) <= sim)
            {
                kept.push(c);
                directions.push(c);
            }
        }
        kept
    }

    /// Sets `q`'s own list on `layer` (no other node links to `q` yet).
    fn write(&self, q: u32, layer: usize, list: &[u32]) {
        let _guard = self.locks[q as usize].lock();
        write_slot(self.slot(q, layer), list);
    }

    /// Adds `q` to `s`'s list on `layer`; a full list is chosen again with `q` among
    /// the candidates.
    fn link_back(&self, s: u32, q: u32, layer: usize) {
        let _guard = self.locks[s as usize].lock();
        let slot = self.slot(s, layer);
        let count = slot[0].load(Ordering::Relaxed) as usize;
        let cap = self.cap(layer);
        if slot[1..1 + count]
            .iter()
            .any(|x| x.load(Ordering::Relaxed) == q)
        {
            return;
        }
        if count < cap {
            slot[1 + count].store(q, Ordering::Relaxed);
            slot[0].store(count as u32 + 1, Ordering::Relaxed);
            return;
        }
        let sv = self.vector(s);
        let cands: Vec<Near> = slot[1..1 + count]
            .iter()
            .map(|x| x.load(Ordering::Relaxed))
            .chain(std::iter::once(q))
            .map(|c| Near(self.dist(sv, c), c))
            .collect();
        let kept = self.select(s, cands, cap);
        write_slot(slot, &kept);
    }

    /// Links every node that a walk from the entry point cannot reach on layer 0
    /// (choosing lists with the heuristic can leave a few, which a search could then
    /// never return) from a reachable node whose list has room: the nearest one a
    /// search finds, else the first one a breadth-first walk out from the search's
    /// results reaches. Looks at `progress` for a cancellation every few thousand steps
    /// of work: on data with many copies of one point, a large graph can leave many
    /// nodes to link.
    fn connect(&self, progress: &dyn BuildProgress) -> Result<()> {
        let n = self.levels.len();
        let entry = self.top.lock().0;
        if n < 2 || entry == NONE {
            return Ok(());
        }
        let mut reached = vec![false; n];
        let mut stack = Vec::new();
        let mut list = Vec::new();
        let mut reach_from = |start: u32, reached: &mut Vec<bool>| {
            if std::mem::replace(&mut reached[start as usize], true) {
                return;
            }
            stack.push(start);
            while let Some(x) = stack.pop() {
                read_slot(self.slot(x, 0), &mut list);
                for &nb in &list {
                    if !std::mem::replace(&mut reached[nb as usize], true) {
                        stack.push(nb);
                    }
                }
            }
        };
        reach_from(entry, &mut reached);
        let mut visited = Visited::new(n);
        let mut buf = Vec::new();
        let mut seen = Visited::new(n);
        let mut queue = std::collections::VecDeque::new();
        let mut around = Vec::new();
        // Set once a breadth-first walk over every reachable node found no room: room
        // only shrinks, and nothing is reached without a host, so none appears later.
        let mut saturated = false;
        // Work since the last look at `progress`: a node to link counts 64, a node the
        // breadth-first walk visits 1.
        let mut work = 0usize;
        let look = |work: &mut usize, add: usize| -> Result<()> {
            *work += add;
            if *work >= 4096 {
                *work = 0;
                if progress.cancelled() {
                    return Err(Error::Cancelled);
                }
            }
            Ok(())
        };
        for u in 0..n as u32 {
            if reached[u as usize] {
                continue;
            }
            look(&mut work, 64)?;
            let uv = self.vector(u);
            let max_level = self.levels[entry as usize] as usize;
            let room = |c: u32| {
                let count = self.slot(c, 0)[0].load(Ordering::Relaxed) as usize;
                reached[c as usize] && count < self.cap(0)
            };
            // Near `u` through the upper layers first; the node reached there may be
            // unreachable on layer 0 itself, so failing that, from the entry point
            // (a walk from which finds only reachable nodes).
            let near = self.descend(uv, entry, max_level, 1, &mut buf);
            let mut host = None;
            let mut found = Vec::new();
            for ep in [near, Near(self.dist(uv, entry), entry)] {
                found = self.search_layer(uv, ep, u, 0, &mut visited, &mut buf);
                host = found.iter().map(|c| c.1).find(|&c| room(c));
                if host.is_some() {
                    break;
                }
            }
            if host.is_none() && !saturated {
                // Every node the walks found is full (a narrow ef_construction, or many
                // copies of one point, finds few): the first node with room in a
                // breadth-first walk out from them, nearest first. (A scan of every
                // node for the nearest with room made this quadratic: a graph of 2.4M
                // clustered vectors spent minutes here.)
                seen.start();
                queue.clear();
                for c in found.iter().map(|c| c.1).filter(|&c| reached[c as usize]) {
                    if seen.insert(c) {
                        queue.push_back(c);
                    }
                }
                if seen.insert(entry) {
                    queue.push_back(entry);
                }
                while let Some(x) = queue.pop_front() {
                    look(&mut work, 1)?;
                    if room(x) {
                        host = Some(x);
                        break;
                    }
                    read_slot(self.slot(x, 0), &mut around);
                    for &nb in &around {
                        if seen.insert(nb) {
                            queue.push_back(nb);
                        }
                    }
                }
                saturated = host.is_none();
            }
            if let Some(host) = host {
                let slot = self.slot(host, 0);
                let count = slot[0].load(Ordering::Relaxed) as usize;
                slot[1 + count].store(u, Ordering::Relaxed);
                slot[0].store(count as u32 + 1, Ordering::Relaxed);
                reach_from(u, &mut reached);
            }
        }
        Ok(())
    }

    fn finish(self) -> Linked {
        let (entry, max_level) = *self.top.lock();
        Linked {
            entry,
            max_level,
            layer0: self.layer0.into_iter().map(AtomicU32::into_inner).collect(),
            upper_at: self.upper_at,
            upper: self.upper.into_iter().map(AtomicU32::into_inner).collect(),
        }
    }
}

fn read_slot(slot: &[AtomicU32], out: &mut Vec<u32>) {
    out.clear();
    let count = slot[0].load(Ordering::Relaxed) as usize;
    out.extend(slot[1..1 + count].iter().map(|x| x.load(Ordering::Relaxed)));
}

/// Writes a list into a slot (the caller holds the node's lock, or is alone).
fn write_slot(slot: &[AtomicU32], list: &[u32]) {
    for (x, &v) in slot[1..].iter().zip(list) {
        x.store(v, Ordering::Relaxed);
    }
    slot[0].store(list.len() as u32, Ordering::Relaxed);
}

/// A per-owner order of node numbers (for breaking exact ties in [`Builder::select`]).
fn mix(owner: u32, node: u32) -> u64 {
    SplitMix((u64::from(owner) << 32) | u64::from(node)).next()
}

/// SplitMix64: a small, seedable generator for the levels (reproducible given the
/// seed; the links are not, since threads insert in an order of their own).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}
