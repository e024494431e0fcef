use std::path::PathBuf;

/// Errors of the storage layer. "The disk is corrupt", "I/O failed", "your input is
/// wrong" and "bug" are kept apart so the facade can give each its status.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O call failed.
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A checksum or structure check failed: the file is corrupt.
    #[error("corruption detected in {}: {message}", path.display())]
    Corrupt {
        /// The corrupt file.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },
    /// A file was written by another on-disk format version.
    #[error("{} has on-disk format version {found}, this build of Tarn reads version {supported}", path.display())]
    FormatVersion {
        /// The file.
        path: PathBuf,
        /// The version in the file.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// Another process holds the database directory.
    #[error("database \"{}\" is locked by another process", path.display())]
    Locked {
        /// The database directory.
        path: PathBuf,
    },
    /// A catalog op did not apply.
    #[error(transparent)]
    Catalog(#[from] tarn_catalog::Error),
    /// Arrow failed to encode or decode data.
    #[error("arrow error: {0}")]
    Arrow(#[from] datafusion::arrow::error::ArrowError),
    /// The commit group this write belonged to failed to reach the disk.
    #[error("write-ahead log write failed: {0}")]
    CommitFailed(String),
    /// An internal invariant broke (a bug).
    #[error("internal storage error: {0}")]
    Internal(String),
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

/// Result of storage operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
