//! The only place that knows how a table's rows, segments, deletes and search indexes
//! line up (docs/design.md "Search"). `tarn-vector` scores vectors and walks graphs
//! without knowing what a row is; `tarn-sql` plans queries without knowing what a
//! segment is; this crate answers "the k best live rows of this snapshot that pass this
//! filter" over both.
//!
//! - [`RowFilter`]: the one way a filter reaches search — a mask per block, gathered
//!   into a per-segment row set where an index needs one up front.
//! - [`top_k`]: merges per-segment top-k lists into the table's, in SPEC §5's order:
//!   exact over the memtable and unindexed segments, through each segment's graph
//!   where it has one.
//! - [`TextSearch`]: text `<#>` (BM25) with the statistics of the snapshot's live rows,
//!   through each segment's text index, or analyzing unindexed rows on the spot.
//! - [`hybrid_top_k`]: hybrid `<#>`: both arms' candidates, exact arm scores for each,
//!   fused by `tarn-hybrid`.
//! - [`SearchIndexBuilder`]: builds a segment's graph or text index file (storage
//!   calls it from the background worker and from `CREATE INDEX`).

mod build;
mod error;
mod hybrid;
mod score;
mod text;
mod topk;

pub use build::{DEFAULT_EF_SEARCH, SearchIndexBuilder, ef_search, hnsw_params, is_vector_index};
pub use error::{Error, Result};
pub use hybrid::{HybridRequest, TextArm, arm_candidates, arm_scores, hybrid_top_k};
pub use score::{QueryValue, score_rows};
pub use tarn_hybrid::{ArmScores, Fuser, Fusion, Weights as HybridWeights};
pub use tarn_text::{TextQuery, Tokenizer};
pub use tarn_vector::{Scored, TopK};
pub use text::{TextSearch, is_text_index, text_at, tokenizer};
pub use topk::{
    IndexUse, RowFilter, SearchRequest, SearchStats, top_k, top_k_with_stats, unscored_top_k,
};
