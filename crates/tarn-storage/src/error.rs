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
    /// An input is larger than the storage format allows (a 400: the caller should split
    /// it).
    #[error("{what} of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// What was too large.
        what: String,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The database was closed ([`crate::Database::close`]).
    #[error("the database is closed")]
    Closed,
    /// A logged commit could not be published (a bug); the database stopped accepting
    /// writes so that memory and log cannot diverge.
    #[error("the database stopped accepting writes after an internal error ({0}); reopen it")]
    Poisoned(String),
    /// An internal invariant broke (a bug).
    #[error("internal storage error: {0}")]
    Internal(String),
}

impl Error {
    /// A copy of this error, for errors that reach the caller through a shared handle
    /// (an I/O error keeps its kind and text).
    pub fn duplicate(&self) -> Error {
        match self {
            Error::Io { path, source } => Error::Io {
                path: path.clone(),
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            Error::Corrupt { path, message } => Error::Corrupt {
                path: path.clone(),
                message: message.clone(),
            },
            Error::FormatVersion {
                path,
                found,
                supported,
            } => Error::FormatVersion {
                path: path.clone(),
                found: *found,
                supported: *supported,
            },
            Error::Locked { path } => Error::Locked { path: path.clone() },
            Error::Catalog(e) => Error::Internal(e.to_string()),
            Error::Arrow(e) => Error::Internal(format!("arrow error: {e}")),
            Error::CommitFailed(m) => Error::CommitFailed(m.clone()),
            Error::TooLarge { what, size, limit } => Error::TooLarge {
                what: what.clone(),
                size: *size,
                limit: *limit,
            },
            Error::Closed => Error::Closed,
            Error::Poisoned(m) => Error::Poisoned(m.clone()),
            Error::Internal(m) => Error::Internal(m.clone()),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

/// Result of storage operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
