//! BM25 text search with tantivy, knowing nothing of tables (docs/design.md "Search").
//!
//! - [`Tokenizer`]: the analyzers a `bm25` index may name.
//! - [`TextQuery`]: a lenient parse of a user's query (words, "phrases", +required,
//!   -excluded; never an error).
//! - [`TextIndex`]: one index over a numbered list of texts (a segment's rows), kept
//!   in one checksummed file; it reports the statistics of any subset of its texts and
//!   scores its matches with statistics given from outside.
//! - [`MemoryIndex`]: texts in no index file, analyzed once and kept in memory.
//! - [`Matcher`] and [`Weights`]: the same scores for texts in no index, analyzed on
//!   the spot.
//!
//! The caller gathers [`Stats`] over everything searched (indexes and loose texts),
//! makes one [`Weights`] from them, and scores every part with it: a text then scores
//! the same wherever it is, and as tantivy would score it in one index of all of them.

mod analyzer;
mod index;
mod memory;
mod query;
mod score;

pub use analyzer::Tokenizer;
pub use index::{TextIndex, build};
pub use memory::MemoryIndex;
pub use query::{Clause, Occur, TextQuery};
pub use score::{DocMatch, Matcher, Stats, Weights};

/// What can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// tantivy failed.
    #[error("text index: {0}")]
    Tantivy(String),
    /// An index file is damaged.
    #[error("{0}")]
    Corrupt(String),
    /// Writing an index file failed.
    #[error("{0}")]
    Io(String),
    /// A build was cancelled.
    #[error("cancelled")]
    Cancelled,
}

impl From<tantivy::TantivyError> for Error {
    fn from(e: tantivy::TantivyError) -> Self {
        Error::Tantivy(e.to_string())
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Tantivy(e.to_string())
    }
}

/// This crate's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;
