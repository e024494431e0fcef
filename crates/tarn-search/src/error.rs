//! The crate's error type.

/// What can go wrong in a search.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The request does not fit the table (wrong column, wrong dimension).
    #[error("{0}")]
    BadRequest(String),
    /// Reading the table failed (damage, I/O).
    #[error(transparent)]
    Storage(#[from] tarn_storage::Error),
    /// A vector index failed.
    #[error(transparent)]
    Vector(#[from] tarn_vector::Error),
    /// A text index failed (damage is a storage error naming the file).
    #[error(transparent)]
    Text(#[from] tarn_text::Error),
    /// Evaluating a filter failed (the caller's error, passed through).
    #[error("{0}")]
    Filter(Box<dyn std::error::Error + Send + Sync>),
    /// A bug.
    #[error("internal error: {0}")]
    Internal(String),
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
