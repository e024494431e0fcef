//! The k best `(id, score)` pairs of a stream, in SPEC §5's order: score descending,
//! NULL scores last, then id ascending (ties break by insertion order).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// One scored row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scored {
    /// The caller's id (a row id, or a position within a segment).
    pub id: u64,
    /// Similarity; `None` (NULL) ranks below every score.
    pub score: Option<f32>,
}

/// SPEC §5's order: `Less` means `a` ranks before `b`.
pub fn rank_order(a: &Scored, b: &Scored) -> Ordering {
    match (a.score, b.score) {
        (Some(x), Some(y)) => y.total_cmp(&x),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
    .then(a.id.cmp(&b.id))
}

/// Heap entry whose maximum is the worst-ranked pair, so the heap root is the one to
/// evict.
#[derive(Debug, Clone, Copy)]
struct Worst(Scored);

impl PartialEq for Worst {
    fn eq(&self, other: &Self) -> bool {
        rank_order(&self.0, &other.0) == Ordering::Equal
    }
}
impl Eq for Worst {}
impl PartialOrd for Worst {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Worst {
    fn cmp(&self, other: &Self) -> Ordering {
        rank_order(&self.0, &other.0)
    }
}

/// Keeps the `k` best pairs pushed into it.
#[derive(Debug, Clone)]
pub struct TopK {
    k: usize,
    heap: BinaryHeap<Worst>,
}

impl TopK {
    /// An empty collector of the `k` best.
    pub fn new(k: usize) -> Self {
        TopK {
            k,
            heap: BinaryHeap::with_capacity(k.min(1 << 16) + 1),
        }
    }

    /// Offers a pair; it stays if it ranks among the `k` best so far.
    #[inline]
    pub fn push(&mut self, id: u64, score: Option<f32>) {
        if self.k == 0 {
            return;
        }
        let s = Scored { id, score };
        if self.heap.len() < self.k {
            self.heap.push(Worst(s));
        } else if let Some(mut top) = self.heap.peek_mut()
            && rank_order(&s, &top.0) == Ordering::Less
        {
            *top = Worst(s);
        }
    }

    /// The worst pair kept, once `k` are kept: anything ranking after it cannot enter.
    pub fn threshold(&self) -> Option<Scored> {
        (self.heap.len() == self.k)
            .then(|| self.heap.peek().map(|w| w.0))
            .flatten()
    }

    /// Pairs kept.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// The kept pairs, best first.
    pub fn into_sorted(self) -> Vec<Scored> {
        let mut v: Vec<Scored> = self.heap.into_iter().map(|w| w.0).collect();
        v.sort_by(rank_order);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn keeps_the_k_best_in_order(
            scores in proptest::collection::vec(prop_oneof![Just(None), (-3i8..3).prop_map(|x| Some(x as f32))], 0..200),
            k in 0usize..50,
        ) {
            let mut t = TopK::new(k);
            let all: Vec<Scored> = scores.iter().enumerate()
                .map(|(i, s)| Scored { id: i as u64, score: *s }).collect();
            // Push in a scrambled order: the result must not depend on it.
            for i in (0..all.len()).rev() {
                t.push(all[i].id, all[i].score);
            }
            let mut want = all.clone();
            want.sort_by(rank_order);
            want.truncate(k);
            prop_assert_eq!(t.into_sorted(), want);
        }
    }
}
