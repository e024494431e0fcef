//! What the graph's builder and its search share: the build's parameters and progress,
//! the limits of a graph, and the pieces of a walk (visited marks, candidates by
//! distance). A leaf: `graph.rs` (the file and its search) and `builder.rs` (linking
//! the nodes) both take from it and not from each other's insides.

use crate::error::{Error, Result};

/// Layers a graph may have (at m 2 a node reaches layer 16 with probability 2^-16;
/// levels are capped there).
pub(crate) const MAX_LAYERS: usize = 16;
pub(crate) const NONE: u32 = u32::MAX;
/// Cache lines of each neighbour's vector prefetched during a walk, at most (the
/// hardware prefetcher follows on from there). Measured on 100k × 384: 0 lines
/// 2,460–2,960 q/s at ef 64, 4 lines 2,900–3,060, the whole vector (24) no better.
pub(crate) const PREFETCH_LINES: usize = 4;
/// Build parameters (SPEC §5 index options `m`, `ef_construction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HnswParams {
    /// Neighbours kept per node on the upper layers (twice as many on layer 0).
    pub m: usize,
    /// Width of the search that picks a new node's neighbours.
    pub ef_construction: usize,
}

impl Default for HnswParams {
    fn default() -> Self {
        HnswParams {
            m: 16,
            ef_construction: 200,
        }
    }
}

impl HnswParams {
    /// Largest `m` accepted (layer-0 lists of 2·m = 256 neighbours are far past where
    /// recall stops improving, and bound the file's stride).
    pub const MAX_M: usize = 128;

    pub(crate) fn check(&self) -> Result<()> {
        if !(2..=Self::MAX_M).contains(&self.m) {
            return Err(Error::InvalidParameter(format!(
                "m must be between 2 and {}, not {}",
                Self::MAX_M,
                self.m
            )));
        }
        if !(1..=100_000).contains(&self.ef_construction) {
            return Err(Error::InvalidParameter(format!(
                "ef_construction must be between 1 and 100000, not {}",
                self.ef_construction
            )));
        }
        Ok(())
    }
}

/// What [`build`](crate::build) reports while it works.
pub trait BuildProgress {
    /// `done` of `total` vectors are in the graph.
    fn inserted(&self, done: usize, total: usize);
    /// Whether to give up (the build then returns [`Error::Cancelled`]).
    fn cancelled(&self) -> bool {
        false
    }
}

impl BuildProgress for () {
    fn inserted(&self, _: usize, _: usize) {}
}

/// A reusable "visited" mark per node: a node is visited when its mark equals the
/// current epoch, so clearing is a counter increment. Marks are 16 bits (as hnswlib's):
/// half the cache a 32-bit mark takes, for a full clear once in 65,535 searches.
#[derive(Debug)]
pub(crate) struct Visited {
    marks: Vec<u16>,
    epoch: u16,
}

impl Visited {
    pub(crate) fn new(n: usize) -> Self {
        Visited {
            marks: vec![0; n],
            epoch: 0,
        }
    }

    pub(crate) fn start(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.marks.fill(0);
            self.epoch = 1;
        }
    }

    /// Marks `node`; `true` when it was not marked yet.
    #[inline]
    pub(crate) fn insert(&mut self, node: u32) -> bool {
        let m = &mut self.marks[node as usize];
        if *m == self.epoch {
            false
        } else {
            *m = self.epoch;
            true
        }
    }
}

/// `(distance, node)` ordered by distance, then node.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Near(pub(crate) f32, pub(crate) u32);
impl Eq for Near {}
impl PartialOrd for Near {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Near {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
    }
}
