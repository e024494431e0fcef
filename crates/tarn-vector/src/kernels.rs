//! Dot products over `f32` slices, the inner loop of every score: SIMD where the CPU has
//! it (AVX-512F, AVX2 + FMA, NEON), chosen once at run time, with a scalar fallback.
//!
//! Exact search is bound by memory bandwidth, so the kernels read each stored vector
//! once: [`dot_norm`] gives the dot product with the query and the vector's squared norm
//! in the same pass.
//!
//! This is the crate's one module with `unsafe`: the intrinsics need it, and each use is
//! guarded by the feature check that selected the kernel.
#![allow(unsafe_code)]

use std::sync::OnceLock;

/// An implementation of the kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kernel {
    /// Portable Rust, four independent accumulators (the compiler vectorizes it for the
    /// baseline target).
    Scalar,
    /// x86-64 AVX2 with fused multiply-add, 8 lanes.
    Avx2,
    /// x86-64 AVX-512F, 16 lanes, masked tails.
    Avx512,
    /// AArch64 NEON (ASIMD), 4 lanes.
    Neon,
}

impl Kernel {
    /// Every kernel, fastest first.
    pub const ALL: [Kernel; 4] = [Kernel::Avx512, Kernel::Avx2, Kernel::Neon, Kernel::Scalar];

    /// Whether this CPU can run the kernel.
    pub fn is_supported(self) -> bool {
        match self {
            Kernel::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            #[cfg(target_arch = "aarch64")]
            Kernel::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// The kernels this CPU supports, fastest first (always ends with `Scalar`).
    pub fn supported() -> Vec<Kernel> {
        Kernel::ALL
            .into_iter()
            .filter(|k| k.is_supported())
            .collect()
    }

    /// The kernel the crate uses: the fastest supported one.
    pub fn best() -> Kernel {
        static BEST: OnceLock<Kernel> = OnceLock::new();
        *BEST.get_or_init(|| Kernel::supported()[0])
    }

    /// Functions of this kernel, or `None` when the CPU cannot run it.
    pub fn functions(self) -> Option<Functions> {
        if !self.is_supported() {
            return None;
        }
        Some(match self {
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => Functions {
                dot: x86::dot_avx2,
                dot_norm: x86::dot_norm_avx2,
            },
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => Functions {
                dot: x86::dot_avx512,
                dot_norm: x86::dot_norm_avx512,
            },
            #[cfg(target_arch = "aarch64")]
            Kernel::Neon => Functions {
                dot: arm::dot_neon,
                dot_norm: arm::dot_norm_neon,
            },
            _ => Functions {
                dot: dot_scalar,
                dot_norm: dot_norm_scalar,
            },
        })
    }
}

/// The kernels of one implementation. Both take slices of equal length (the shorter one
/// decides otherwise).
#[derive(Clone, Copy)]
pub struct Functions {
    /// `Σ a[i]·b[i]`.
    pub dot: fn(&[f32], &[f32]) -> f32,
    /// `(Σ q[i]·v[i], Σ v[i]²)`: a score and the stored vector's squared norm in one
    /// pass over `v`.
    pub dot_norm: fn(&[f32], &[f32]) -> (f32, f32),
}

impl std::fmt::Debug for Functions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Functions")
    }
}

fn best_functions() -> &'static Functions {
    static F: OnceLock<Functions> = OnceLock::new();
    F.get_or_init(|| {
        Kernel::best().functions().unwrap_or(Functions {
            dot: dot_scalar,
            dot_norm: dot_norm_scalar,
        })
    })
}

/// `Σ a[i]·b[i]` with the best kernel.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    (best_functions().dot)(a, b)
}

/// `(Σ q[i]·v[i], Σ v[i]²)` with the best kernel.
#[inline]
pub fn dot_norm(q: &[f32], v: &[f32]) -> (f32, f32) {
    (best_functions().dot_norm)(q, v)
}

/// The best kernel's functions, for loops that call them many times.
pub fn functions() -> Functions {
    *best_functions()
}

/// Asks the CPU to start loading the first `lines` cache lines of `v`, so that a graph
/// walk can fetch all of a node's neighbours at once and then score them from cache
/// (each neighbour's vector sits somewhere random in memory; waiting for them one at a
/// time is most of a walk's cost). A no-op where there is no stable prefetch intrinsic.
#[inline]
pub fn prefetch<T>(v: &[T], lines: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let bytes = std::mem::size_of_val(v);
        let start = v.as_ptr().cast::<i8>();
        for line in 0..lines.min(bytes.div_ceil(64)) {
            // SAFETY: prefetching never faults, and the address lies inside `v`; SSE is
            // part of the x86-64 baseline.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(line * 64)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (v, lines);
}

fn dot_scalar(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; 8];
    let chunks = n / 8;
    for c in 0..chunks {
        let (x, y) = (&a[c * 8..c * 8 + 8], &b[c * 8..c * 8 + 8]);
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut sum: f32 = acc.iter().sum();
    for i in chunks * 8..n {
        sum += a[i] * b[i];
    }
    sum
}

fn dot_norm_scalar(q: &[f32], v: &[f32]) -> (f32, f32) {
    let n = q.len().min(v.len());
    let (q, v) = (&q[..n], &v[..n]);
    let mut d = [0f32; 8];
    let mut s = [0f32; 8];
    let chunks = n / 8;
    for c in 0..chunks {
        let (x, y) = (&q[c * 8..c * 8 + 8], &v[c * 8..c * 8 + 8]);
        for i in 0..8 {
            d[i] += x[i] * y[i];
            s[i] += y[i] * y[i];
        }
    }
    let mut dot: f32 = d.iter().sum();
    let mut norm: f32 = s.iter().sum();
    for i in chunks * 8..n {
        dot += q[i] * v[i];
        norm += v[i] * v[i];
    }
    (dot, norm)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    pub(super) fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        // SAFETY: this function is only handed out by `Kernel::functions` after
        // `is_supported` saw AVX2 and FMA; `n` bounds both slices.
        unsafe { dot_avx2_impl(a.as_ptr(), b.as_ptr(), n) }
    }

    pub(super) fn dot_norm_avx2(q: &[f32], v: &[f32]) -> (f32, f32) {
        let n = q.len().min(v.len());
        // SAFETY: as in `dot_avx2`.
        unsafe { dot_norm_avx2_impl(q.as_ptr(), v.as_ptr(), n) }
    }

    pub(super) fn dot_avx512(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        // SAFETY: handed out only after `is_supported` saw AVX-512F; `n` bounds both.
        unsafe { dot_avx512_impl(a.as_ptr(), b.as_ptr(), n) }
    }

    pub(super) fn dot_norm_avx512(q: &[f32], v: &[f32]) -> (f32, f32) {
        let n = q.len().min(v.len());
        // SAFETY: as in `dot_avx512`.
        unsafe { dot_norm_avx512_impl(q.as_ptr(), v.as_ptr(), n) }
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn hsum256(v: __m256) -> f32 {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps(v, 1);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0b01));
        _mm_cvtss_f32(s)
    }

    /// Four 8-lane accumulators (32 floats a step) hide the FMA latency.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot_avx2_impl(a: *const f32, b: *const f32, n: usize) -> f32 {
        // SAFETY (whole body): every load reads `[i, i + 8)` with `i + 8 <= n`.
        unsafe {
            let mut acc = [_mm256_setzero_ps(); 4];
            let mut i = 0;
            while i + 32 <= n {
                for (k, a_k) in acc.iter_mut().enumerate() {
                    let x = _mm256_loadu_ps(a.add(i + 8 * k));
                    let y = _mm256_loadu_ps(b.add(i + 8 * k));
                    *a_k = _mm256_fmadd_ps(x, y, *a_k);
                }
                i += 32;
            }
            while i + 8 <= n {
                let x = _mm256_loadu_ps(a.add(i));
                let y = _mm256_loadu_ps(b.add(i));
                acc[0] = _mm256_fmadd_ps(x, y, acc[0]);
                i += 8;
            }
            let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
            let mut sum = hsum256(s);
            while i < n {
                sum += *a.add(i) * *b.add(i);
                i += 1;
            }
            sum
        }
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot_norm_avx2_impl(q: *const f32, v: *const f32, n: usize) -> (f32, f32) {
        // SAFETY (whole body): every load reads `[i, i + 8)` with `i + 8 <= n`.
        unsafe {
            let mut d = [_mm256_setzero_ps(); 2];
            let mut s = [_mm256_setzero_ps(); 2];
            let mut i = 0;
            while i + 16 <= n {
                for k in 0..2 {
                    let x = _mm256_loadu_ps(q.add(i + 8 * k));
                    let y = _mm256_loadu_ps(v.add(i + 8 * k));
                    d[k] = _mm256_fmadd_ps(x, y, d[k]);
                    s[k] = _mm256_fmadd_ps(y, y, s[k]);
                }
                i += 16;
            }
            while i + 8 <= n {
                let x = _mm256_loadu_ps(q.add(i));
                let y = _mm256_loadu_ps(v.add(i));
                d[0] = _mm256_fmadd_ps(x, y, d[0]);
                s[0] = _mm256_fmadd_ps(y, y, s[0]);
                i += 8;
            }
            let mut dot = hsum256(_mm256_add_ps(d[0], d[1]));
            let mut norm = hsum256(_mm256_add_ps(s[0], s[1]));
            while i < n {
                let (x, y) = (*q.add(i), *v.add(i));
                dot += x * y;
                norm += y * y;
                i += 1;
            }
            (dot, norm)
        }
    }

    /// Mask of the first `r` (< 16) lanes.
    #[inline]
    fn tail_mask(r: usize) -> __mmask16 {
        ((1u32 << r) - 1) as __mmask16
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn dot_avx512_impl(a: *const f32, b: *const f32, n: usize) -> f32 {
        // SAFETY (whole body): full loads read `[i, i + 16)` with `i + 16 <= n`; the
        // masked tail load touches only lanes `< n - i`.
        unsafe {
            let mut acc = [_mm512_setzero_ps(); 2];
            let mut i = 0;
            while i + 32 <= n {
                for (k, a_k) in acc.iter_mut().enumerate() {
                    let x = _mm512_loadu_ps(a.add(i + 16 * k));
                    let y = _mm512_loadu_ps(b.add(i + 16 * k));
                    *a_k = _mm512_fmadd_ps(x, y, *a_k);
                }
                i += 32;
            }
            while i + 16 <= n {
                let x = _mm512_loadu_ps(a.add(i));
                let y = _mm512_loadu_ps(b.add(i));
                acc[0] = _mm512_fmadd_ps(x, y, acc[0]);
                i += 16;
            }
            if i < n {
                let m = tail_mask(n - i);
                let x = _mm512_maskz_loadu_ps(m, a.add(i));
                let y = _mm512_maskz_loadu_ps(m, b.add(i));
                acc[1] = _mm512_fmadd_ps(x, y, acc[1]);
            }
            _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]))
        }
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn dot_norm_avx512_impl(q: *const f32, v: *const f32, n: usize) -> (f32, f32) {
        // SAFETY (whole body): as in `dot_avx512_impl`.
        unsafe {
            let mut d = _mm512_setzero_ps();
            let mut s = _mm512_setzero_ps();
            let mut i = 0;
            while i + 16 <= n {
                let x = _mm512_loadu_ps(q.add(i));
                let y = _mm512_loadu_ps(v.add(i));
                d = _mm512_fmadd_ps(x, y, d);
                s = _mm512_fmadd_ps(y, y, s);
                i += 16;
            }
            if i < n {
                let m = tail_mask(n - i);
                let x = _mm512_maskz_loadu_ps(m, q.add(i));
                let y = _mm512_maskz_loadu_ps(m, v.add(i));
                d = _mm512_fmadd_ps(x, y, d);
                s = _mm512_fmadd_ps(y, y, s);
            }
            (_mm512_reduce_add_ps(d), _mm512_reduce_add_ps(s))
        }
    }
}

#[cfg(target_arch = "aarch64")]
mod arm {
    use std::arch::aarch64::*;

    pub(super) fn dot_neon(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        // SAFETY: handed out only after `is_supported` saw NEON; `n` bounds both.
        unsafe { dot_neon_impl(a.as_ptr(), b.as_ptr(), n) }
    }

    pub(super) fn dot_norm_neon(q: &[f32], v: &[f32]) -> (f32, f32) {
        let n = q.len().min(v.len());
        // SAFETY: as in `dot_neon`.
        unsafe { dot_norm_neon_impl(q.as_ptr(), v.as_ptr(), n) }
    }

    #[target_feature(enable = "neon")]
    unsafe fn dot_neon_impl(a: *const f32, b: *const f32, n: usize) -> f32 {
        // SAFETY (whole body): every load reads `[i, i + 4)` with `i + 4 <= n`.
        unsafe {
            let mut acc = [vdupq_n_f32(0.0); 4];
            let mut i = 0;
            while i + 16 <= n {
                for (k, a_k) in acc.iter_mut().enumerate() {
                    let x = vld1q_f32(a.add(i + 4 * k));
                    let y = vld1q_f32(b.add(i + 4 * k));
                    *a_k = vfmaq_f32(*a_k, x, y);
                }
                i += 16;
            }
            while i + 4 <= n {
                acc[0] = vfmaq_f32(acc[0], vld1q_f32(a.add(i)), vld1q_f32(b.add(i)));
                i += 4;
            }
            let s = vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3]));
            let mut sum = vaddvq_f32(s);
            while i < n {
                sum += *a.add(i) * *b.add(i);
                i += 1;
            }
            sum
        }
    }

    #[target_feature(enable = "neon")]
    unsafe fn dot_norm_neon_impl(q: *const f32, v: *const f32, n: usize) -> (f32, f32) {
        // SAFETY (whole body): every load reads `[i, i + 4)` with `i + 4 <= n`.
        unsafe {
            let mut d = [vdupq_n_f32(0.0); 2];
            let mut s = [vdupq_n_f32(0.0); 2];
            let mut i = 0;
            while i + 8 <= n {
                for k in 0..2 {
                    let x = vld1q_f32(q.add(i + 4 * k));
                    let y = vld1q_f32(v.add(i + 4 * k));
                    d[k] = vfmaq_f32(d[k], x, y);
                    s[k] = vfmaq_f32(s[k], y, y);
                }
                i += 8;
            }
            while i + 4 <= n {
                let x = vld1q_f32(q.add(i));
                let y = vld1q_f32(v.add(i));
                d[0] = vfmaq_f32(d[0], x, y);
                s[0] = vfmaq_f32(s[0], y, y);
                i += 4;
            }
            let mut dot = vaddvq_f32(vaddq_f32(d[0], d[1]));
            let mut norm = vaddvq_f32(vaddq_f32(s[0], s[1]));
            while i < n {
                let (x, y) = (*q.add(i), *v.add(i));
                dot += x * y;
                norm += y * y;
                i += 1;
            }
            (dot, norm)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn naive(a: &[f32], b: &[f32]) -> (f64, f64) {
        let dot = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
        let mag = a
            .iter()
            .zip(b)
            .map(|(x, y)| (*x as f64 * *y as f64).abs())
            .sum();
        (dot, mag)
    }

    fn close(got: f32, want: f64, magnitude: f64, n: usize) -> bool {
        // f32 accumulation in any order errs by at most about n·ε·Σ|a·b|.
        let tol = (n as f64 + 2.0) * f32::EPSILON as f64 * magnitude + 1e-30;
        (got as f64 - want).abs() <= tol
    }

    #[test]
    fn scalar_is_always_supported_and_last() {
        let s = Kernel::supported();
        assert_eq!(s.last(), Some(&Kernel::Scalar));
        assert!(s.contains(&Kernel::best()));
        assert_eq!(s[0], Kernel::best());
    }

    #[test]
    fn unsupported_kernels_are_not_handed_out() {
        for k in Kernel::ALL {
            assert_eq!(k.functions().is_some(), k.is_supported(), "{k:?}");
        }
    }

    #[test]
    fn every_length_up_to_70_on_every_kernel() {
        let a: Vec<f32> = (0..70).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..70).map(|i| (i as f32 * 0.11).cos()).collect();
        for k in Kernel::supported() {
            let f = k.functions().expect("supported");
            for n in 0..=70 {
                let (want, mag) = naive(&a[..n], &b[..n]);
                assert!(
                    close((f.dot)(&a[..n], &b[..n]), want, mag, n),
                    "{k:?} n={n}"
                );
                let (d, s) = (f.dot_norm)(&a[..n], &b[..n]);
                let (ws, smag) = naive(&b[..n], &b[..n]);
                assert!(close(d, want, mag, n), "{k:?} n={n}");
                assert!(close(s, ws, smag, n), "{k:?} n={n}");
            }
        }
    }

    proptest! {
        #[test]
        fn kernels_match_naive(
            pairs in proptest::collection::vec((-1e3f32..1e3, -1e3f32..1e3), 0..600)
        ) {
            let (a, b): (Vec<f32>, Vec<f32>) = pairs.into_iter().unzip();
            let (want, mag) = naive(&a, &b);
            let (wn, nmag) = naive(&b, &b);
            for k in Kernel::supported() {
                let f = k.functions().expect("supported");
                prop_assert!(close((f.dot)(&a, &b), want, mag, a.len()), "{:?}", k);
                let (d, s) = (f.dot_norm)(&a, &b);
                prop_assert!(close(d, want, mag, a.len()), "{:?}", k);
                prop_assert!(close(s, wn, nmag, a.len()), "{:?}", k);
            }
        }
    }
}
