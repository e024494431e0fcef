//! Similarity scores (SPEC §5): cosine for vectors, MaxSim for bags of vectors. Higher
//! is better; a zero vector has no direction, so it scores `None` (SQL NULL).
//!
//! The kernels work in `f32`. Vectors are validated on write (no NaN or infinity), but
//! finite values can still overflow or underflow a sum of squares in `f32`
//! (`[1e30, 1e30]`, `[1e-30]`); those rare cases are recomputed in `f64` so that no
//! finite input ever scores NaN.

use crate::kernels::{self, Kernel};

/// `dot / sqrt(|q|² |v|²)` clamped to [-1, 1]; `None` for a zero vector. One square
/// root of the product (rather than a product of roots) keeps a vector's similarity
/// with itself at exactly 1 far more often.
#[inline]
fn finish(dot: f32, q_norm_sq: f32, v_norm_sq: f32, q: &[f32], v: &[f32]) -> Option<f32> {
    let denom = q_norm_sq * v_norm_sq;
    if denom.is_normal() && dot.is_finite() {
        let s = dot / denom.sqrt();
        if s.is_finite() {
            return Some(s.clamp(-1.0, 1.0));
        }
    }
    cosine_f64(q, v)
}

/// Cosine similarity in `f64`, scaled so that no finite input overflows.
fn cosine_f64(q: &[f32], v: &[f32]) -> Option<f32> {
    let scale = |x: &[f32]| x.iter().fold(0f64, |m, e| m.max((*e as f64).abs()));
    let (sq, sv) = (scale(q), scale(v));
    if sq == 0.0 || sv == 0.0 || !sq.is_finite() || !sv.is_finite() {
        return None;
    }
    let (mut dot, mut nq, mut nv) = (0f64, 0f64, 0f64);
    for (a, b) in q.iter().zip(v) {
        let (a, b) = (*a as f64 / sq, *b as f64 / sv);
        dot += a * b;
        nq += a * a;
        nv += b * b;
    }
    if nq == 0.0 || nv == 0.0 {
        return None;
    }
    Some((dot / (nq.sqrt() * nv.sqrt())).clamp(-1.0, 1.0) as f32)
}

/// The Euclidean norm of `v` as the kernels compute it (`0` for a zero vector; callers
/// fall back to [`cosine`] when it is not a normal float).
pub fn norm(v: &[f32]) -> f32 {
    kernels::dot(v, v).sqrt()
}

/// Cosine similarity of `q` and `v` in [-1, 1]; `None` when either is a zero vector.
pub fn cosine(q: &[f32], v: &[f32]) -> Option<f32> {
    let (dot, v_sq) = kernels::dot_norm(q, v);
    finish(dot, kernels::dot(q, q), v_sq, q, v)
}

/// A query vector prepared for scoring many stored vectors: its norm is computed once.
#[derive(Debug, Clone)]
pub struct Query<'a> {
    q: &'a [f32],
    norm_sq: f32,
    funcs: kernels::Functions,
}

impl<'a> Query<'a> {
    /// Prepares `q`; `None` when it is a zero vector (every score would be NULL).
    pub fn new(q: &'a [f32]) -> Option<Self> {
        Self::prepare(q, kernels::functions())
    }

    /// Like [`Query::new`], scoring with `kernel` (for tests and benchmarks of each
    /// kernel); `None` also when the CPU cannot run it.
    pub fn with_kernel(q: &'a [f32], kernel: Kernel) -> Option<Self> {
        Self::prepare(q, kernel.functions()?)
    }

    fn prepare(q: &'a [f32], funcs: kernels::Functions) -> Option<Self> {
        if q.iter().all(|x| *x == 0.0) {
            return None;
        }
        let (_, norm_sq) = (funcs.dot_norm)(q, q);
        Some(Query { q, norm_sq, funcs })
    }

    /// The vector.
    pub fn vector(&self) -> &'a [f32] {
        self.q
    }

    /// Cosine similarity with the stored vector `v` (one pass over `v`).
    #[inline]
    pub fn cosine(&self, v: &[f32]) -> Option<f32> {
        let (dot, v_sq) = (self.funcs.dot_norm)(self.q, v);
        finish(dot, self.norm_sq, v_sq, self.q, v)
    }

    /// Cosine similarity of the query with each of the `values.len() / dim` vectors
    /// stored back to back in `values`, written to `out`.
    pub fn cosine_each(&self, values: &[f32], dim: usize, out: &mut Vec<Option<f32>>) {
        out.clear();
        if dim == 0 {
            return;
        }
        out.extend(values.chunks_exact(dim).map(|v| self.cosine(v)));
    }
}

/// A bag of query vectors prepared for MaxSim.
#[derive(Debug, Clone)]
pub struct BagQuery<'a> {
    vectors: Vec<Query<'a>>,
    dim: usize,
}

impl<'a> BagQuery<'a> {
    /// Prepares the `values.len() / dim` vectors of `values`. Zero vectors have no
    /// direction and are left out; `None` when nothing is left (every score NULL).
    pub fn new(values: &'a [f32], dim: usize) -> Option<Self> {
        Self::with_kernel(values, dim, Kernel::best())
    }

    /// Like [`BagQuery::new`], scoring with `kernel`.
    pub fn with_kernel(values: &'a [f32], dim: usize, kernel: Kernel) -> Option<Self> {
        if dim == 0 {
            return None;
        }
        let vectors: Vec<Query<'a>> = values
            .chunks_exact(dim)
            .filter_map(|v| Query::with_kernel(v, kernel))
            .collect();
        (!vectors.is_empty()).then_some(BagQuery { vectors, dim })
    }

    /// The query vectors that take part (zero vectors dropped).
    pub fn vectors(&self) -> &[Query<'a>] {
        &self.vectors
    }

    /// MaxSim with a stored bag (its vectors back to back in `values`): for each query
    /// vector the best cosine over the bag's vectors, summed. Zero vectors in the bag
    /// are skipped; `None` when the bag has no non-zero vector.
    pub fn maxsim(&self, values: &[f32]) -> Option<f32> {
        self.maxsim_of(values.chunks_exact(self.dim))
    }

    /// [`BagQuery::maxsim`] over a bag given vector by vector.
    pub fn maxsim_of<'v>(&self, bag: impl IntoIterator<Item = &'v [f32]>) -> Option<f32> {
        let mut best = vec![f32::NEG_INFINITY; self.vectors.len()];
        let mut any = false;
        for v in bag {
            for (b, q) in best.iter_mut().zip(&self.vectors) {
                if let Some(s) = q.cosine(v) {
                    any = true;
                    if s > *b {
                        *b = s;
                    }
                }
            }
        }
        any.then(|| best.iter().sum())
    }

    /// Dimensions of the query vectors.
    pub fn dim(&self) -> usize {
        self.dim
    }
}

/// Scales `v` to unit length; `None` for a zero vector.
pub fn normalized(v: &[f32]) -> Option<Vec<f32>> {
    let n = norm(v);
    if n.is_normal() && n.is_finite() {
        let out: Vec<f32> = v.iter().map(|x| x / n).collect();
        if out.iter().all(|x| x.is_finite()) {
            return Some(out);
        }
    }
    // Overflow or underflow of the f32 sum of squares: scale first, in f64.
    let scale = v.iter().fold(0f64, |m, e| m.max((*e as f64).abs()));
    if scale == 0.0 || !scale.is_finite() {
        return None;
    }
    let n = v
        .iter()
        .map(|x| (*x as f64 / scale).powi(2))
        .sum::<f64>()
        .sqrt();
    Some(v.iter().map(|x| (*x as f64 / scale / n) as f32).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn naive_cosine(a: &[f32], b: &[f32]) -> Option<f64> {
        let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
        let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
        let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
        (na > 0.0 && nb > 0.0).then(|| dot / (na * nb))
    }

    fn naive_maxsim(q: &[f32], d: &[f32], dim: usize) -> Option<f64> {
        let mut total = 0.0;
        let mut any = false;
        let mut used = false;
        for qv in q.chunks_exact(dim) {
            let mut best: Option<f64> = None;
            for dv in d.chunks_exact(dim) {
                if let Some(s) = naive_cosine(qv, dv) {
                    best = Some(best.map_or(s, |b: f64| b.max(s)));
                }
            }
            if qv.iter().any(|x| *x != 0.0) {
                used = true;
                if let Some(b) = best {
                    any = true;
                    total += b;
                }
            }
        }
        (used && any).then_some(total)
    }

    #[test]
    fn zero_vectors_score_null() {
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), None);
        assert_eq!(cosine(&[1.0, 0.0], &[0.0, 0.0]), None);
        assert!(Query::new(&[0.0, 0.0]).is_none());
        assert!(BagQuery::new(&[0.0, 0.0, 0.0, 0.0], 2).is_none());
        let q = BagQuery::new(&[1.0, 0.0], 2).expect("non-zero");
        assert_eq!(q.maxsim(&[0.0, 0.0]), None);
        assert_eq!(q.maxsim(&[]), None);
    }

    #[test]
    fn extreme_finite_values_never_give_nan() {
        let big = [1e30f32, 1e30];
        let tiny = [1e-30f32, 0.0];
        assert!((cosine(&big, &big).expect("direction") - 1.0).abs() < 1e-6);
        assert!((cosine(&tiny, &[1.0, 0.0]).expect("direction") - 1.0).abs() < 1e-6);
        assert!((cosine(&[f32::MAX, f32::MAX], &[1.0, 1.0]).expect("d") - 1.0).abs() < 1e-6);
        let n = normalized(&big).expect("direction");
        assert!((n[0] - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);
        let n = normalized(&tiny).expect("direction");
        assert_eq!(n, vec![1.0, 0.0]);
        assert_eq!(normalized(&[0.0, 0.0]), None);
    }

    #[test]
    fn opposite_and_identical() {
        assert!((cosine(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0]).expect("d") - 1.0).abs() < 1e-6);
        assert!((cosine(&[1.0, 2.0, 3.0], &[-2.0, -4.0, -6.0]).expect("d") + 1.0).abs() < 1e-6);
        assert!(cosine(&[1.0, 0.0], &[0.0, 5.0]).expect("d").abs() < 1e-7);
    }

    fn vecs(dim: usize, n: usize) -> impl Strategy<Value = Vec<f32>> {
        proptest::collection::vec(
            prop_oneof![Just(0.0f32), -100f32..100.0, -1e-3f32..1e-3],
            dim * n,
        )
    }

    proptest! {
        #[test]
        fn cosine_matches_naive(dim in 1usize..80, seed in vecs(80, 2)) {
            let (a, b) = (&seed[..dim], &seed[80..80 + dim]);
            let want = naive_cosine(a, b);
            let mut gots = vec![cosine(a, b)];
            for k in Kernel::supported() {
                gots.push(Query::with_kernel(a, k).and_then(|q| q.cosine(b)));
            }
            for got in gots {
                match (got, want) {
                    (None, None) => {}
                    (Some(got), Some(want)) => prop_assert!((got as f64 - want).abs() < 1e-4,
                        "{got} vs {want}"),
                    (got, want) => prop_assert!(false, "{got:?} vs {want:?}"),
                }
            }
        }

        #[test]
        fn maxsim_matches_naive(dim in 1usize..40, nq in 1usize..5, nd in 0usize..6,
                                values in vecs(40, 11)) {
            let q = &values[..nq * dim];
            let d = &values[nq * dim..(nq + nd) * dim];
            let want = naive_maxsim(q, d, dim);
            for k in Kernel::supported() {
                let got = BagQuery::with_kernel(q, dim, k).and_then(|b| b.maxsim(d));
                match (got, want) {
                    (None, None) => {}
                    (Some(got), Some(want)) => prop_assert!((got as f64 - want).abs() < 1e-3,
                        "{k:?}: {got} vs {want}"),
                    (got, want) => prop_assert!(false, "{k:?}: {got:?} vs {want:?}"),
                }
            }
        }

        #[test]
        fn normalized_has_unit_length(v in vecs(50, 1)) {
            if let Some(n) = normalized(&v) {
                let len: f64 = n.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
                prop_assert!((len - 1.0).abs() < 1e-5);
            } else {
                prop_assert!(v.iter().all(|x| *x == 0.0));
            }
        }
    }
}
