//! HNSW graphs: built by Tarn (see `builder.rs`) into one immutable, checksummed file
//! that Tarn maps and searches in place.
//!
//! The file keeps every neighbour list in one array with a fixed stride (as hnswlib
//! does) and the vectors normalized back to back; a search uses a reusable visited
//! set and a filter that is applied while walking, never after (a filter applied to
//! the top `k` afterwards can return fewer than `k` rows).
//!
//! File layout (little-endian; the footer is last so the file is written in one pass
//! and the body starts page-aligned in the mapping):
//!
//! ```text
//! vectors  n × dim f32   unit length, so cosine similarity is a dot product
//! ids      n u32         the caller's id of each node (e.g. a position in a segment)
//! layer0   n × (1 + m0) u32   neighbour count, then neighbours (node numbers)
//! upper_at n u32         start of the node's upper layers in `upper`, or u32::MAX
//! upper    u32 …         per node with level L ≥ 1: L, then L × (1 + m) u32
//! footer   64 bytes      see `Footer`
//! ```

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::Write;

use arrow_buffer::{Buffer, ScalarBuffer};
use parking_lot::Mutex;

use crate::builder::{self, Linked};
use crate::error::{Error, Result};
pub use crate::hnsw::{BuildProgress, HnswParams};
use crate::hnsw::{MAX_LAYERS, NONE, Near, PREFETCH_LINES, Visited};
use crate::kernels;
use crate::score::normalized;

/// Version of the graph file format.
pub const GRAPH_FORMAT_VERSION: u32 = 1;

const MAGIC: &[u8; 8] = b"TARNHNSW";
const FOOTER_BYTES: usize = 64;
// Offsets in the footer (see `Footer`).
const F_WORDS: usize = 8;
const F_BODY_LEN: usize = 44;
const F_CRC: usize = 60;
/// Seed of the level draw: a build's levels are the same every time.
const LEVEL_SEED: u64 = 0x7461_726E_6873_776E;
/// Cache lines of a layer-0 list prefetched ahead of its expansion: the count and 47
/// neighbours, the whole list up to m 23 (m 16's takes three lines).
const LIST_PREFETCH_LINES: usize = 3;

/// Builds the graph of the `ids.len()` vectors stored back to back in `vectors` (each
/// `dim` long) and writes its file to `out`. Zero vectors have no direction and are
/// left out (they score NULL). Returns the number of nodes written.
pub fn build(
    vectors: &[f32],
    dim: usize,
    ids: &[u32],
    params: HnswParams,
    progress: &dyn BuildProgress,
    out: &mut dyn Write,
) -> Result<usize> {
    params.check()?;
    if dim == 0 || vectors.len() != dim * ids.len() {
        return Err(Error::InvalidParameter(format!(
            "{} values do not make {} vectors of {dim} dimensions",
            vectors.len(),
            ids.len()
        )));
    }
    if ids.len() >= NONE as usize {
        return Err(Error::InvalidParameter(format!(
            "a graph holds fewer than {NONE} vectors, not {}",
            ids.len()
        )));
    }
    // Unit vectors, back to back, with the ids of the non-zero ones.
    let mut unit: Vec<f32> = Vec::with_capacity(vectors.len());
    let mut node_ids: Vec<u32> = Vec::with_capacity(ids.len());
    for (v, id) in vectors.chunks_exact(dim).zip(ids) {
        if let Some(u) = normalized(v) {
            unit.extend_from_slice(&u);
            node_ids.push(*id);
        }
    }
    let n = node_ids.len();
    // A bug in the builder must fail this build, not the process that runs it.
    let linked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        builder::link(&unit, dim, params, LEVEL_SEED, progress)
    }))
    .map_err(|_| Error::Internal("panicked while building a graph".into()))??;
    let Linked {
        entry,
        max_level,
        layer0,
        upper_at,
        upper,
    } = linked;

    let mut w = CrcWriter {
        out,
        crc: crc32fast::Hasher::new(),
        len: 0,
    };
    write_words(&mut w, &unit, f32::to_le_bytes)?;
    write_words(&mut w, &node_ids, u32::to_le_bytes)?;
    write_words(&mut w, &layer0, u32::to_le_bytes)?;
    write_words(&mut w, &upper_at, u32::to_le_bytes)?;
    write_words(&mut w, &upper, u32::to_le_bytes)?;
    let footer = Footer {
        dim: dim as u32,
        n: n as u32,
        m: params.m as u32,
        max_level: max_level as u32,
        entry: if n == 0 { NONE } else { entry },
        upper_len: upper.len() as u32,
        ef_construction: params.ef_construction as u32,
        body_len: w.len,
        body_crc: w.crc.clone().finalize(),
    };
    w.out.write_all(&footer.encode()).map_err(Error::Io)?;
    Ok(n)
}

struct CrcWriter<'a> {
    out: &'a mut dyn Write,
    crc: crc32fast::Hasher,
    len: u64,
}

impl CrcWriter<'_> {
    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.crc.update(bytes);
        self.len += bytes.len() as u64;
        self.out.write_all(bytes).map_err(Error::Io)
    }
}

/// Writes 4-byte words little-endian, through a buffer.
fn write_words<T: Copy>(w: &mut CrcWriter<'_>, v: &[T], le: fn(T) -> [u8; 4]) -> Result<()> {
    let mut buf = Vec::with_capacity(64 * 1024);
    for chunk in v.chunks(16 * 1024) {
        buf.clear();
        for x in chunk {
            buf.extend_from_slice(&le(*x));
        }
        w.put(&buf)?;
    }
    Ok(())
}

/// The last 64 bytes of a graph file:
///
/// ```text
/// 0  b"TARNHNSW"
/// 8  format version, dim, n, m, max_level, entry, upper_len, ef_construction,
///    body_crc: nine u32 (F_WORDS)
/// 44 body_len u64 (F_BODY_LEN)
/// 52 reserved (zeros)
/// 60 crc32 of the 60 bytes before it (F_CRC)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Footer {
    dim: u32,
    n: u32,
    m: u32,
    max_level: u32,
    entry: u32,
    upper_len: u32,
    ef_construction: u32,
    body_len: u64,
    body_crc: u32,
}

impl Footer {
    fn encode(&self) -> [u8; FOOTER_BYTES] {
        let mut b = [0u8; FOOTER_BYTES];
        b[0..8].copy_from_slice(MAGIC);
        let words = [
            GRAPH_FORMAT_VERSION,
            self.dim,
            self.n,
            self.m,
            self.max_level,
            self.entry,
            self.upper_len,
            self.ef_construction,
            self.body_crc,
        ];
        for (i, w) in words.iter().enumerate() {
            b[F_WORDS + 4 * i..F_WORDS + 4 * (i + 1)].copy_from_slice(&w.to_le_bytes());
        }
        b[F_BODY_LEN..F_BODY_LEN + 8].copy_from_slice(&self.body_len.to_le_bytes());
        let crc = crc32fast::hash(&b[..F_CRC]);
        b[F_CRC..FOOTER_BYTES].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> std::result::Result<Footer, String> {
        if b.len() != FOOTER_BYTES || !b.starts_with(MAGIC) {
            return Err("not a Tarn graph file (bad magic)".into());
        }
        // The footer's length was checked above: every field is there.
        let at = |at: usize| tarn_format::u32_at(b, at).unwrap_or_default();
        if crc32fast::hash(&b[..F_CRC]) != at(F_CRC) {
            return Err("footer checksum mismatch".into());
        }
        // The nine words, in `encode`'s order.
        let word = |i: usize| at(F_WORDS + 4 * i);
        let version = word(0);
        if version != GRAPH_FORMAT_VERSION {
            return Err(format!(
                "graph format {version}, this build reads {GRAPH_FORMAT_VERSION}"
            ));
        }
        Ok(Footer {
            dim: word(1),
            n: word(2),
            m: word(3),
            max_level: word(4),
            entry: word(5),
            upper_len: word(6),
            ef_construction: word(7),
            body_crc: word(8),
            body_len: tarn_format::u64_at(b, F_BODY_LEN).unwrap_or_default(),
        })
    }
}

/// A graph file, mapped (or in memory) and verified, ready to search.
#[derive(Debug)]
pub struct Graph {
    dim: usize,
    n: usize,
    m: usize,
    max_level: usize,
    entry: u32,
    ef_construction: usize,
    vectors: ScalarBuffer<f32>,
    ids: ScalarBuffer<u32>,
    layer0: ScalarBuffer<u32>,
    upper_at: ScalarBuffer<u32>,
    upper: ScalarBuffer<u32>,
    /// Visited sets of finished searches, reused by the next ones.
    pool: Mutex<Vec<Visited>>,
}

impl Graph {
    /// Opens a graph file held in `bytes` (typically a read-only mapping, which the
    /// graph then reads in place): checks the footer, the checksum of every byte and
    /// the structure, so that no damaged or hostile file is ever walked.
    pub fn open(bytes: Buffer) -> Result<Graph> {
        let corrupt = |m: String| Error::Corrupt(m);
        if cfg!(target_endian = "big") {
            return Err(Error::InvalidParameter(
                "graph files are little-endian; this host is not".into(),
            ));
        }
        let len = bytes.len();
        if len < FOOTER_BYTES {
            return Err(corrupt(format!(
                "{len} bytes is too short for a graph file"
            )));
        }
        let f = Footer::decode(&bytes[len - FOOTER_BYTES..]).map_err(corrupt)?;
        let body_len = len - FOOTER_BYTES;
        if f.body_len != body_len as u64 {
            return Err(corrupt(format!(
                "body is {body_len} bytes, the footer says {}",
                f.body_len
            )));
        }
        if crc32fast::hash(&bytes[..body_len]) != f.body_crc {
            return Err(corrupt("body checksum mismatch".into()));
        }
        let (dim, n, m) = (f.dim as usize, f.n as usize, f.m as usize);
        if dim == 0 || !(2..=HnswParams::MAX_M).contains(&m) || f.max_level as usize >= MAX_LAYERS {
            return Err(corrupt(format!(
                "implausible header: dim {dim}, m {m}, max level {}",
                f.max_level
            )));
        }
        let m0 = 2 * m;
        // Section sizes in u32 words; checked arithmetic so a hostile footer cannot wrap.
        let sizes = [
            n.checked_mul(dim),
            Some(n),
            n.checked_mul(1 + m0),
            Some(n),
            Some(f.upper_len as usize),
        ];
        let mut offsets = Vec::with_capacity(sizes.len());
        let mut at = 0usize;
        for s in sizes {
            let words = s.ok_or_else(|| corrupt("section sizes overflow".into()))?;
            offsets.push((at, words));
            at = words
                .checked_mul(4)
                .and_then(|b| at.checked_add(b))
                .ok_or_else(|| corrupt("section sizes overflow".into()))?;
        }
        if at != body_len {
            return Err(corrupt(format!(
                "sections take {at} bytes, the body is {body_len}"
            )));
        }
        if bytes.as_ptr().align_offset(4) != 0 {
            return Err(Error::InvalidParameter(
                "graph bytes must be 4-byte aligned".into(),
            ));
        }
        let f32s = |(off, words): (usize, usize)| {
            ScalarBuffer::<f32>::new(bytes.slice_with_length(off, words * 4), 0, words)
        };
        let u32s = |(off, words): (usize, usize)| {
            ScalarBuffer::<u32>::new(bytes.slice_with_length(off, words * 4), 0, words)
        };
        let g = Graph {
            dim,
            n,
            m,
            max_level: f.max_level as usize,
            entry: f.entry,
            ef_construction: f.ef_construction as usize,
            vectors: f32s(offsets[0]),
            ids: u32s(offsets[1]),
            layer0: u32s(offsets[2]),
            upper_at: u32s(offsets[3]),
            upper: u32s(offsets[4]),
            pool: Mutex::new(Vec::new()),
        };
        g.check_structure().map_err(corrupt)?;
        Ok(g)
    }

    /// Every count within its stride, every neighbour a node, every upper block inside
    /// `upper`, the entry point on the top level: a walk can then never index out of
    /// bounds, whatever the bytes were.
    fn check_structure(&self) -> std::result::Result<(), String> {
        let (n, m, m0) = (self.n, self.m, 2 * self.m);
        if n == 0 {
            return if self.entry == NONE {
                Ok(())
            } else {
                Err("empty graph with an entry point".into())
            };
        }
        if self.entry as usize >= n {
            return Err(format!("entry point {} of {n} nodes", self.entry));
        }
        let node_ok = |x: u32| (x as usize) < n;
        for node in 0..n {
            let slot = &self.layer0[node * (1 + m0)..(node + 1) * (1 + m0)];
            let count = slot[0] as usize;
            if count > m0 || !slot[1..1 + count].iter().all(|x| node_ok(*x)) {
                return Err(format!("bad layer-0 neighbours of node {node}"));
            }
            let at = self.upper_at[node];
            if at == NONE {
                continue;
            }
            let at = at as usize;
            let level = *self.upper.get(at).ok_or("upper layers out of range")? as usize;
            if level == 0 || level > self.max_level {
                return Err(format!("node {node} has level {level}"));
            }
            let end = at + 1 + level * (1 + m);
            if end > self.upper.len() {
                return Err(format!("upper layers of node {node} out of range"));
            }
            for l in 0..level {
                let s = at + 1 + l * (1 + m);
                let count = self.upper[s] as usize;
                let on_layer = |x: &u32| node_ok(*x) && self.level(*x) > l;
                if count > m || !self.upper[s + 1..s + 1 + count].iter().all(on_layer) {
                    return Err(format!("bad layer-{} neighbours of node {node}", l + 1));
                }
            }
        }
        if self.level(self.entry) != self.max_level {
            return Err("the entry point is not on the top level".into());
        }
        Ok(())
    }

    fn level(&self, node: u32) -> usize {
        match self.upper_at.get(node as usize) {
            None | Some(&NONE) => 0,
            Some(&at) => self.upper.get(at as usize).map_or(0, |l| *l as usize),
        }
    }

    /// Neighbours of `node` on `layer` (which must be ≤ its level).
    #[inline]
    fn neighbours(&self, node: u32, layer: usize) -> &[u32] {
        if layer == 0 {
            let s = node as usize * (1 + 2 * self.m);
            let count = self.layer0[s] as usize;
            &self.layer0[s + 1..s + 1 + count]
        } else {
            let at = self.upper_at[node as usize] as usize;
            let s = at + 1 + (layer - 1) * (1 + self.m);
            let count = self.upper[s] as usize;
            &self.upper[s + 1..s + 1 + count]
        }
    }

    /// The layer-0 record of `node`: its neighbour count, then room for 2m neighbours.
    #[inline]
    fn list0(&self, node: u32) -> &[u32] {
        let stride = 1 + 2 * self.m;
        let s = node as usize * stride;
        &self.layer0[s..s + stride]
    }

    #[inline]
    fn vector(&self, node: u32) -> &[f32] {
        let s = node as usize * self.dim;
        &self.vectors[s..s + self.dim]
    }

    /// Dimensions of the vectors.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Nodes (non-zero vectors) in the graph.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether the graph has no node.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The build's `m`.
    pub fn m(&self) -> usize {
        self.m
    }

    /// The build's `ef_construction`.
    pub fn ef_construction(&self) -> usize {
        self.ef_construction
    }

    /// The caller's id of each node, in node order.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// Bytes of the file the graph reads.
    pub fn size_bytes(&self) -> usize {
        (self.vectors.len()
            + self.ids.len()
            + self.layer0.len()
            + self.upper_at.len()
            + self.upper.len())
            * 4
            + FOOTER_BYTES
    }

    /// The (up to) `k` nodes most similar to `query` whose id `allow` accepts, as
    /// `(id, cosine similarity)`, best first; `ef` (≥ k) is the width of the search.
    /// `query` need not be unit length; a zero query finds nothing.
    ///
    /// The filter is applied while walking (hnswlib's way): rejected nodes are still
    /// traversed but never enter the result, and the walk goes on until `ef` accepted
    /// nodes are found or the reachable graph is exhausted, so a filter never shrinks
    /// the result below what the graph can reach.
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        ef: usize,
        allow: Option<&dyn Fn(u32) -> bool>,
    ) -> Vec<(u32, f32)> {
        if self.n == 0 || k == 0 || query.len() != self.dim {
            return Vec::new();
        }
        let Some(q) = normalized(query) else {
            return Vec::new();
        };
        let funcs = kernels::functions();
        let dist = |node: u32| 1.0 - (funcs.dot)(&q, self.vector(node));
        // Neither can exceed the graph: a huge LIMIT must not become a huge allocation.
        let k = k.min(self.n);
        let ef = ef.max(k).min(self.n);

        let mut ep = self.entry;
        let mut d_ep = dist(ep);
        for layer in (1..=self.max_level).rev() {
            loop {
                let mut changed = false;
                for &nb in self.neighbours(ep, layer) {
                    let d = dist(nb);
                    if d < d_ep {
                        d_ep = d;
                        ep = nb;
                        changed = true;
                    }
                }
                if !changed {
                    break;
                }
            }
        }

        let mut visited = self
            .pool
            .lock()
            .pop()
            .unwrap_or_else(|| Visited::new(self.n));
        visited.start();
        let accepted = |node: u32| allow.is_none_or(|f| f(self.ids[node as usize]));
        let mut candidates: BinaryHeap<Reverse<Near>> = BinaryHeap::with_capacity(ef * 4);
        let mut results: BinaryHeap<Near> = BinaryHeap::with_capacity(ef + 1);
        visited.insert(ep);
        candidates.push(Reverse(Near(d_ep, ep)));
        if accepted(ep) {
            results.push(Near(d_ep, ep));
        }
        let mut bound = if results.len() >= ef {
            results.peek().map_or(f32::INFINITY, |r| r.0)
        } else {
            f32::INFINITY
        };
        let mut fresh: Vec<u32> = Vec::with_capacity(2 * self.m);
        while let Some(Reverse(Near(d, node))) = candidates.pop() {
            if d > bound && results.len() >= ef {
                break;
            }
            // The list of the node likely expanded next, while this one's neighbours
            // are scored (unless one of them comes closer).
            if let Some(Reverse(Near(_, next))) = candidates.peek() {
                kernels::prefetch(self.list0(*next), LIST_PREFETCH_LINES);
            }
            // Unvisited neighbours first, their vectors prefetched, then scored.
            fresh.clear();
            for &nb in self.neighbours(node, 0) {
                if visited.insert(nb) {
                    kernels::prefetch(self.vector(nb), PREFETCH_LINES);
                    fresh.push(nb);
                }
            }
            for &nb in &fresh {
                let d = dist(nb);
                if results.len() < ef || d < bound {
                    candidates.push(Reverse(Near(d, nb)));
                    if accepted(nb) {
                        results.push(Near(d, nb));
                        if results.len() > ef {
                            results.pop();
                        }
                        if results.len() >= ef {
                            bound = results.peek().map_or(f32::INFINITY, |r| r.0);
                        }
                    }
                }
            }
        }
        self.pool.lock().push(visited);
        let mut out: Vec<Near> = results.into_vec();
        out.sort();
        out.truncate(k);
        out.into_iter()
            .map(|Near(d, node)| (self.ids[node as usize], (1.0 - d).clamp(-1.0, 1.0)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (SplitMix64).
    pub(crate) struct Rng(u64);
    impl Rng {
        pub(crate) fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        pub(crate) fn f32(&mut self) -> f32 {
            (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        }
    }

    fn clustered(n: usize, dim: usize, seed: u64) -> Vec<f32> {
        let mut r = Rng(seed);
        let centers: Vec<f32> = (0..16 * dim).map(|_| r.f32()).collect();
        let mut out = Vec::with_capacity(n * dim);
        for _ in 0..n {
            let c = (r.next() % 16) as usize;
            for j in 0..dim {
                out.push(centers[c * dim + j] + 0.3 * r.f32());
            }
        }
        out
    }

    fn built(vectors: &[f32], dim: usize, params: HnswParams) -> Graph {
        let ids: Vec<u32> = (0..(vectors.len() / dim) as u32).collect();
        let mut bytes = Vec::new();
        build(vectors, dim, &ids, params, &(), &mut bytes).expect("build");
        Graph::open(Buffer::from_vec(bytes)).expect("open")
    }

    fn exact(
        vectors: &[f32],
        dim: usize,
        q: &[f32],
        k: usize,
        allow: &dyn Fn(u32) -> bool,
    ) -> Vec<u32> {
        let mut t = crate::TopK::new(k);
        for (i, v) in vectors.chunks_exact(dim).enumerate() {
            if allow(i as u32) {
                t.push(i as u64, crate::score::cosine(q, v));
            }
        }
        t.into_sorted().into_iter().map(|s| s.id as u32).collect()
    }

    #[test]
    fn recall_on_clustered_data() {
        let (n, dim) = (3000, 32);
        let data = clustered(n, dim, 7);
        let g = built(&data, dim, HnswParams::default());
        assert_eq!(g.len(), n);
        let queries = clustered(50, dim, 99);
        let mut hits = 0;
        for q in queries.chunks_exact(dim) {
            let want = exact(&data, dim, q, 10, &|_| true);
            let got: Vec<u32> = g
                .search(q, 10, 128, None)
                .into_iter()
                .map(|(id, _)| id)
                .collect();
            assert_eq!(got.len(), 10);
            hits += got.iter().filter(|id| want.contains(id)).count();
        }
        let recall = hits as f64 / 500.0;
        assert!(recall >= 0.95, "recall {recall}");
    }

    #[test]
    fn links_have_no_self_or_duplicates_and_reach_every_node() {
        let (n, dim) = (3000, 32);
        let data = clustered(n, dim, 11);
        let params = HnswParams::default();
        let g = built(&data, dim, params);
        let mut links = 0;
        for node in 0..n as u32 {
            for layer in 0..=g.level(node) {
                let list = g.neighbours(node, layer);
                let mut sorted = list.to_vec();
                sorted.sort_unstable();
                sorted.dedup();
                assert_eq!(sorted.len(), list.len(), "node {node} layer {layer}");
                assert!(!list.contains(&node), "node {node} links to itself");
            }
            assert!(
                !g.neighbours(node, 0).is_empty(),
                "node {node} lost its links"
            );
            links += g.neighbours(node, 0).len();
        }
        assert!(2 * links >= n * params.m, "{links} links over {n} nodes");
        assert_eq!(unreachable(&g), 0);
        assert!(g.max_level > 0, "3000 nodes at m 16 have upper layers");
    }

    /// Nodes a walk on layer 0 (where every search ends) cannot reach from the entry
    /// point.
    fn unreachable(g: &Graph) -> usize {
        if g.is_empty() {
            return 0;
        }
        let mut seen = vec![false; g.len()];
        let mut stack = vec![g.entry];
        seen[g.entry as usize] = true;
        while let Some(x) = stack.pop() {
            for &nb in g.neighbours(x, 0) {
                if !std::mem::replace(&mut seen[nb as usize], true) {
                    stack.push(nb);
                }
            }
        }
        seen.iter().filter(|s| !**s).count()
    }

    #[test]
    fn identical_vectors_stay_reachable_and_searchable() {
        let (n, dim) = (1000, 8);
        let data: Vec<f32> = (0..n * dim).map(|i| (i % dim) as f32 + 1.0).collect();
        let g = built(&data, dim, HnswParams::default());
        assert_eq!(unreachable(&g), 0);
        let q = &data[..dim];
        assert_eq!(g.search(q, 10, 64, None).len(), 10);
        let sevenths = |id: u32| id.is_multiple_of(7);
        let got = g.search(q, 10, 64, Some(&sevenths));
        assert_eq!(got.len(), 10);
        assert!(got.iter().all(|(id, s)| sevenths(*id) && *s > 0.999));
    }

    #[test]
    fn small_and_extreme_parameters_build_whole_graphs() {
        for n in [1, 2, 3] {
            let data = clustered(n, 4, 8);
            let g = built(&data, 4, HnswParams::default());
            assert_eq!(g.search(&data[..4], 5, 10, None).len(), n);
        }
        let data = clustered(400, 16, 9);
        for (m, ef_construction) in [(2, 1), (2, 64), (128, 200), (16, 1)] {
            let g = built(&data, 16, HnswParams { m, ef_construction });
            assert_eq!(unreachable(&g), 0, "m {m} ef {ef_construction}");
            for node in 0..400 {
                assert!(!g.neighbours(node, 0).is_empty(), "m {m}: node {node}");
            }
            let q = &data[16..32];
            let want = exact(&data, 16, q, 10, &|_| true);
            let got = g.search(q, 10, 400, None);
            assert_eq!(got.len(), 10);
            // ef_search = n walks the whole (connected) graph: exact.
            assert!(got.iter().all(|(id, _)| want.contains(id)), "m {m}");
        }
    }

    #[test]
    fn progress_rises_to_the_total_over_several_batches() {
        struct Seen(Mutex<Vec<(usize, usize)>>);
        impl BuildProgress for Seen {
            fn inserted(&self, done: usize, total: usize) {
                self.0.lock().push((done, total));
            }
        }
        let (n, dim) = (9000, 8);
        let data = clustered(n, dim, 4);
        let ids: Vec<u32> = (0..n as u32).collect();
        let seen = Seen(Mutex::new(Vec::new()));
        let params = HnswParams {
            m: 8,
            ef_construction: 32,
        };
        let mut bytes = Vec::new();
        build(&data, dim, &ids, params, &seen, &mut bytes).expect("build");
        let seen = seen.0.into_inner();
        assert!(seen.len() >= 3, "{seen:?}");
        assert!(seen.windows(2).all(|w| w[0].0 < w[1].0), "{seen:?}");
        assert_eq!(seen.last(), Some(&(n, n)));
        let g = Graph::open(Buffer::from_vec(bytes)).expect("open");
        assert_eq!(unreachable(&g), 0);
    }

    #[test]
    fn many_copies_of_one_vector_keep_a_way_out() {
        // 100 copies of one vector among 900 others: a list chosen with the heuristic
        // keeps at most two copies of its own point (one of any other), so the group
        // keeps links out and a walk that enters it can leave it.
        let (n, dim) = (1000, 16);
        let mut data = clustered(n, dim, 5);
        let copy = data[..dim].to_vec();
        for i in 0..100 {
            data[i * dim..(i + 1) * dim].copy_from_slice(&copy);
        }
        let g = built(&data, dim, HnswParams::default());
        let exits = (0..100u32)
            .filter(|&node| g.neighbours(node, 0).iter().any(|&o| o >= 100))
            .count();
        assert!(exits > 0, "no copy links out of the group");
        // A walk that starts at the copies and may return none of them gets out.
        let others = |id: u32| id >= 100;
        let out = g.search(&copy, 10, 64, Some(&others));
        assert_eq!(out.len(), 10, "{out:?}");
        let want = exact(&data, dim, &copy, 10, &others);
        let hits = out.iter().filter(|(id, _)| want.contains(id)).count();
        assert!(hits >= 9, "{hits} of 10 nearest non-copies: {out:?}");
        // A search for the copies' point finds copies only.
        let found = g.search(&copy, 10, 64, None);
        assert_eq!(found.len(), 10);
        assert!(found.iter().all(|&(id, _)| id < 100), "{found:?}");
    }

    #[test]
    fn small_integer_vectors_link_every_node_and_the_last_step_stops_when_asked() {
        // Vectors of small integers (many copies of few directions, as a table filled
        // from `generate_series` has) leave hundreds of nodes for the last linking step.
        let (n, dim) = (60_000usize, 8);
        let data: Vec<f32> = (0..n)
            .flat_map(|g| (0..dim).map(move |j| ((g * (j + 3)) % 10) as f32))
            .collect();
        let g = built(&data, dim, HnswParams::default());
        assert_eq!(unreachable(&g), 0);
        // Cancelled once every vector is in: the linking step looks and stops (before,
        // it ran to its end, minutes on 2.4M such vectors, holding a closing database).
        struct AfterInserts {
            inserted: std::sync::atomic::AtomicBool,
            looks: std::sync::atomic::AtomicUsize,
        }
        impl BuildProgress for AfterInserts {
            fn inserted(&self, done: usize, total: usize) {
                if done == total {
                    self.inserted
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                }
            }
            fn cancelled(&self) -> bool {
                // The look right after the last insert lets the build go on.
                self.inserted.load(std::sync::atomic::Ordering::Relaxed)
                    && self
                        .looks
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                        >= 1
            }
        }
        let ids: Vec<u32> = (0..n as u32).collect();
        let stop = AfterInserts {
            inserted: std::sync::atomic::AtomicBool::new(false),
            looks: std::sync::atomic::AtomicUsize::new(0),
        };
        let mut out = Vec::new();
        assert!(matches!(
            build(&data, dim, &ids, HnswParams::default(), &stop, &mut out),
            Err(Error::Cancelled)
        ));
        assert!(stop.looks.load(std::sync::atomic::Ordering::Relaxed) >= 2);
    }

    #[test]
    fn filtered_search_never_under_returns() {
        let (n, dim) = (2000, 16);
        let data = clustered(n, dim, 3);
        let g = built(
            &data,
            dim,
            HnswParams {
                m: 8,
                ef_construction: 64,
            },
        );
        let q = &clustered(1, dim, 5)[..];
        for modulus in [1u32, 10, 100, 1000] {
            let allow = move |id: u32| id.is_multiple_of(modulus);
            let matching = (0..n as u32).filter(|i| allow(*i)).count();
            let got = g.search(q, 10, 10, Some(&allow));
            assert_eq!(got.len(), matching.min(10), "1/{modulus}");
            assert!(got.iter().all(|(id, _)| allow(*id)));
            assert!(got.windows(2).all(|w| w[0].1 >= w[1].1));
        }
    }

    #[test]
    fn zero_vectors_are_left_out_and_ids_kept() {
        let data = vec![1.0, 0.0, 0.0, 0.0, 0.0, 1.0, -1.0, 0.0];
        let ids = [10, 11, 12, 13];
        let mut bytes = Vec::new();
        let n = build(&data, 2, &ids, HnswParams::default(), &(), &mut bytes).expect("build");
        assert_eq!(n, 3);
        let g = Graph::open(Buffer::from_vec(bytes)).expect("open");
        assert_eq!(g.ids(), &[10, 12, 13]);
        let got = g.search(&[1.0, 0.1], 3, 10, None);
        assert_eq!(
            got.iter().map(|r| r.0).collect::<Vec<_>>(),
            vec![10, 12, 13]
        );
        assert!(g.search(&[0.0, 0.0], 3, 10, None).is_empty());
    }

    #[test]
    fn visited_marks_survive_the_epoch_wrapping_around() {
        let mut v = Visited::new(3);
        v.start();
        assert!(v.insert(1));
        assert!(!v.insert(1));
        // A full cycle of epochs later (the wrap clears the marks), node 1 is new again
        // and marks keep working.
        for _ in 0..u16::MAX as usize + 1 {
            v.start();
            assert!(v.insert(0));
        }
        assert!(v.insert(1));
        assert!(!v.insert(1));
        assert!(!v.insert(0));
        assert!(v.insert(2));
    }

    #[test]
    fn empty_graph_round_trips() {
        let mut bytes = Vec::new();
        build(&[], 4, &[], HnswParams::default(), &(), &mut bytes).expect("build");
        let g = Graph::open(Buffer::from_vec(bytes)).expect("open");
        assert!(g.is_empty());
        assert!(g.search(&[1.0, 0.0, 0.0, 0.0], 5, 10, None).is_empty());
    }

    #[test]
    fn every_flipped_byte_and_truncation_is_refused() {
        let data = clustered(40, 4, 1);
        let ids: Vec<u32> = (0..40).collect();
        let mut bytes = Vec::new();
        build(
            &data,
            4,
            &ids,
            HnswParams {
                m: 4,
                ef_construction: 16,
            },
            &(),
            &mut bytes,
        )
        .expect("build");
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x41;
            assert!(Graph::open(Buffer::from_vec(b)).is_err(), "flip at {i}");
        }
        for len in 0..bytes.len() {
            assert!(
                Graph::open(Buffer::from_vec(bytes[..len].to_vec())).is_err(),
                "len {len}"
            );
        }
    }

    #[test]
    fn bad_parameters_are_refused() {
        let mut out = Vec::new();
        for (m, ef) in [(1, 10), (HnswParams::MAX_M + 1, 10), (16, 0)] {
            let p = HnswParams {
                m,
                ef_construction: ef,
            };
            assert!(matches!(
                build(&[1.0], 1, &[0], p, &(), &mut out),
                Err(Error::InvalidParameter(_))
            ));
        }
        assert!(
            build(
                &[1.0, 2.0, 3.0],
                2,
                &[0],
                HnswParams::default(),
                &(),
                &mut out
            )
            .is_err()
        );
    }

    #[test]
    fn cancellation_stops_the_build() {
        struct Stop;
        impl BuildProgress for Stop {
            fn inserted(&self, _: usize, _: usize) {}
            fn cancelled(&self) -> bool {
                true
            }
        }
        let data = clustered(10, 4, 2);
        let ids: Vec<u32> = (0..10).collect();
        let mut out = Vec::new();
        assert!(matches!(
            build(&data, 4, &ids, HnswParams::default(), &Stop, &mut out),
            Err(Error::Cancelled)
        ));
        // Cancelled between batches, after some progress.
        struct After(std::sync::atomic::AtomicBool);
        impl BuildProgress for After {
            fn inserted(&self, _: usize, _: usize) {
                self.0.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            fn cancelled(&self) -> bool {
                self.0.load(std::sync::atomic::Ordering::Relaxed)
            }
        }
        let data = clustered(5000, 4, 2);
        let ids: Vec<u32> = (0..5000).collect();
        let stop = After(std::sync::atomic::AtomicBool::new(false));
        assert!(matches!(
            build(&data, 4, &ids, HnswParams::default(), &stop, &mut out),
            Err(Error::Cancelled)
        ));
    }
}
