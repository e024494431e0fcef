//! Fusion of a vector arm and a text arm (SPEC §5), knowing nothing of tables: each
//! arm's scores over a candidate set are normalized over that set, then weighted and
//! added: `w_vector * v + w_text * t`.
//!
//! - `minmax` (the default): `(s - min) / (max - min)`, 0 when all are equal.
//! - `softmax`: `exp(s - max) / Σ exp(s - max)` over the candidates.
//! - `rrf`: `1 / (60 + rank)`, rank 1 for the best score; equal scores share the best
//!   rank among them, so a score's rank does not depend on row order.
//!
//! A NULL arm score (a NULL or zero vector, a NULL text) takes no part in its arm's
//! normalization and contributes 0; a candidate whose both arms are NULL fuses to NULL.
//! The sums run in `f64`, so the fused score of a candidate depends only on its own two
//! scores and the arms' [`Norm`]s, whatever the order of the candidates.

/// How each arm's scores are normalized over the candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Fusion {
    /// `(s - min) / (max - min)`.
    #[default]
    MinMax,
    /// `exp(s - max) / Σ exp(s - max)`.
    Softmax,
    /// `1 / (60 + rank)`.
    Rrf,
}

/// RRF's constant.
pub const RRF_K: f64 = 60.0;

impl Fusion {
    /// The fusion named `name` (`minmax`, `softmax` or `rrf`, any case).
    pub fn from_name(name: &str) -> Option<Fusion> {
        match name.to_ascii_lowercase().as_str() {
            "minmax" => Some(Fusion::MinMax),
            "softmax" => Some(Fusion::Softmax),
            "rrf" => Some(Fusion::Rrf),
            _ => None,
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Fusion::MinMax => "minmax",
            Fusion::Softmax => "softmax",
            Fusion::Rrf => "rrf",
        }
    }
}

/// The weights of the two arms, each in [0, 1].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weights {
    /// Weight of the vector arm.
    pub vector: f64,
    /// Weight of the text arm.
    pub text: f64,
}

impl Default for Weights {
    fn default() -> Self {
        Weights {
            vector: 0.5,
            text: 0.5,
        }
    }
}

impl Weights {
    /// The weights, if both are in [0, 1] (else a message saying which is not).
    pub fn new(vector: f64, text: f64) -> Result<Weights, String> {
        for (name, w) in [("vector", vector), ("text", text)] {
            if !(0.0..=1.0).contains(&w) {
                return Err(format!(
                    "the {name} weight of a hybrid search must be between 0 and 1, not {w}"
                ));
            }
        }
        Ok(Weights { vector, text })
    }
}

/// One arm's normalization over a candidate set.
#[derive(Debug, Clone, PartialEq)]
pub struct Norm {
    fusion: Fusion,
    min: f64,
    max: f64,
    /// softmax: Σ exp(s - max).
    sum: f64,
    /// rrf: the candidates' scores, descending.
    sorted: Vec<f64>,
}

impl Norm {
    /// The normalization of the arm's candidate scores (NULLs are left out).
    pub fn over(fusion: Fusion, scores: impl Iterator<Item = Option<f32>>) -> Norm {
        let values: Vec<f64> = scores.flatten().map(f64::from).collect();
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let sum = match fusion {
            Fusion::Softmax => values.iter().map(|s| (s - max).exp()).sum(),
            _ => 0.0,
        };
        let sorted = match fusion {
            Fusion::Rrf => {
                let mut v = values;
                v.sort_by(|a, b| b.total_cmp(a));
                v
            }
            _ => Vec::new(),
        };
        Norm {
            fusion,
            min,
            max,
            sum,
            sorted,
        }
    }

    /// The normalized value of score `s` (0 for NULL).
    pub fn normalize(&self, s: Option<f32>) -> f64 {
        let Some(s) = s.map(f64::from) else {
            return 0.0;
        };
        match self.fusion {
            Fusion::MinMax => {
                let span = self.max - self.min;
                if span > 0.0 && span.is_finite() {
                    ((s - self.min) / span).clamp(0.0, 1.0)
                } else {
                    0.0
                }
            }
            Fusion::Softmax => {
                if self.sum > 0.0 {
                    (s - self.max).exp() / self.sum
                } else {
                    0.0
                }
            }
            Fusion::Rrf => {
                // 1 + the number of candidates scoring strictly higher.
                let higher = self.sorted.partition_point(|&x| x > s);
                1.0 / (RRF_K + (higher + 1) as f64)
            }
        }
    }
}

/// The normalizations of both arms over one candidate set, and the weights: what a
/// fused score is made of.
#[derive(Debug, Clone, PartialEq)]
pub struct Fuser {
    /// Weights of the arms.
    pub weights: Weights,
    /// The vector arm's normalization.
    pub vector: Norm,
    /// The text arm's normalization.
    pub text: Norm,
}

/// Both arms' scores of one candidate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ArmScores {
    /// Vector arm (cosine or MaxSim); `None` for NULL.
    pub vector: Option<f32>,
    /// Text arm (BM25, 0 when no term matches); `None` for NULL text.
    pub text: Option<f32>,
}

impl Fuser {
    /// The fuser of `candidates` (each candidate's two arm scores).
    pub fn over(candidates: &[ArmScores], weights: Weights, fusion: Fusion) -> Fuser {
        Fuser {
            weights,
            vector: Norm::over(fusion, candidates.iter().map(|c| c.vector)),
            text: Norm::over(fusion, candidates.iter().map(|c| c.text)),
        }
    }

    /// The fused score of a candidate: NULL when both arms are NULL.
    pub fn fuse(&self, c: ArmScores) -> Option<f32> {
        if c.vector.is_none() && c.text.is_none() {
            return None;
        }
        let v = self.weights.vector * self.vector.normalize(c.vector);
        let t = self.weights.text * self.text.normalize(c.text);
        Some((v + t) as f32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(v: Option<f32>, t: Option<f32>) -> ArmScores {
        ArmScores { vector: v, text: t }
    }

    #[test]
    fn minmax_weights_and_nulls() {
        let cands = [
            c(Some(0.9), Some(0.0)),
            c(Some(0.5), Some(4.0)),
            c(Some(0.1), Some(2.0)),
            c(None, None),
        ];
        let f = Fuser::over(&cands, Weights::default(), Fusion::MinMax);
        let got: Vec<Option<f32>> = cands.iter().map(|&x| f.fuse(x)).collect();
        assert_eq!(got[0], Some(0.5));
        assert_eq!(got[1], Some(0.75));
        assert_eq!(got[2], Some(0.25));
        assert_eq!(got[3], None);
        let f = Fuser::over(&cands, Weights::new(1.0, 0.0).expect("w"), Fusion::MinMax);
        assert_eq!(f.fuse(cands[0]), Some(1.0));
        // All equal: 0.
        let same = [c(Some(0.3), Some(1.0)), c(Some(0.3), Some(1.0))];
        let f = Fuser::over(&same, Weights::default(), Fusion::MinMax);
        assert_eq!(f.fuse(same[0]), Some(0.0));
    }

    #[test]
    fn softmax_sums_to_one_per_arm() {
        let cands = [
            c(Some(0.9), Some(3.0)),
            c(Some(0.5), Some(1.0)),
            c(Some(0.1), None),
        ];
        let f = Fuser::over(&cands, Weights::new(1.0, 0.0).expect("w"), Fusion::Softmax);
        let total: f64 = cands
            .iter()
            .map(|&x| f64::from(f.fuse(x).unwrap_or(0.0)))
            .sum();
        assert!((total - 1.0).abs() < 1e-6, "{total}");
        let f = Fuser::over(&cands, Weights::new(0.0, 1.0).expect("w"), Fusion::Softmax);
        assert_eq!(f.fuse(cands[2]), Some(0.0), "NULL text contributes nothing");
    }

    #[test]
    fn rrf_ranks_share_ties() {
        let cands = [
            c(Some(0.9), Some(1.0)),
            c(Some(0.9), Some(3.0)),
            c(Some(0.1), Some(1.0)),
        ];
        let f = Fuser::over(&cands, Weights::new(1.0, 1.0).expect("w"), Fusion::Rrf);
        let r = |rank: f64| 1.0 / (RRF_K + rank);
        assert_eq!(f.fuse(cands[0]), Some((r(1.0) + r(2.0)) as f32));
        assert_eq!(f.fuse(cands[1]), Some((r(1.0) + r(1.0)) as f32));
        assert_eq!(f.fuse(cands[2]), Some((r(3.0) + r(2.0)) as f32));
    }

    #[test]
    fn weights_outside_0_1_are_refused() {
        assert!(Weights::new(1.5, 0.5).is_err());
        assert!(Weights::new(0.5, -0.1).is_err());
        assert!(Weights::new(f64::NAN, 0.5).is_err());
        assert!(Weights::new(0.0, 1.0).is_ok());
        assert_eq!(Fusion::from_name("RRF"), Some(Fusion::Rrf));
        assert_eq!(Fusion::from_name("max"), None);
    }
}
