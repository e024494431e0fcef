//! Tarn's vector search primitives. Knows nothing of tables: vectors and ids go in,
//! `(id, score)` comes out.
//!
//! - [`kernels`]: dot products with SIMD chosen at run time (AVX-512F, AVX2 + FMA,
//!   NEON, scalar).
//! - [`score`]: cosine similarity and MaxSim (SPEC §5), NULL for zero vectors.
//! - [`TopK`]: the k best in SPEC §5's order (score descending, NULL last, id
//!   ascending).
//! - [`graph`]: HNSW graphs, built by Tarn straight into a checksummed file that is
//!   searched in place (mapped), with filters applied during the walk.

mod builder;
pub mod error;
pub mod graph;
mod hnsw;
pub mod kernels;
pub mod score;
mod topk;

pub use error::{Error, Result};
pub use graph::{BuildProgress, GRAPH_FORMAT_VERSION, Graph, HnswParams, build};
pub use kernels::Kernel;
pub use score::{BagQuery, Query, cosine, normalized};
pub use topk::{Scored, TopK, rank_order};
