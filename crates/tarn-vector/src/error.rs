//! The crate's error type.

/// What can go wrong building or opening a graph.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The caller passed something out of range (parameters, shapes).
    #[error("{0}")]
    InvalidParameter(String),
    /// The bytes of a graph file are damaged or not a graph file.
    #[error("damaged graph file: {0}")]
    Corrupt(String),
    /// Writing the graph failed.
    #[error("writing a graph: {0}")]
    Io(#[source] std::io::Error),
    /// The build was cancelled through its progress hook.
    #[error("graph build cancelled")]
    Cancelled,
    /// A bug in Tarn.
    #[error("internal error: {0}")]
    Internal(String),
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
