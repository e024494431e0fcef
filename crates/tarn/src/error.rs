use std::time::Duration;

use serde::Serialize;

/// What went wrong, as a category with an HTTP-style status (SPEC §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub enum ErrorKind {
    /// 400: invalid SQL, parameters, ids, types, vectors, uploads.
    BadRequest,
    /// 401: missing, unknown or revoked API key.
    Unauthorized,
    /// 403: role too low.
    Forbidden,
    /// 404: the resource does not exist (or belongs to another organization).
    NotFound,
    /// 409: already exists, unique violation, database locked.
    Conflict,
    /// 429: rate limited.
    TooManyRequests,
    /// 500: a bug or an I/O failure; never bad input.
    Internal,
    /// 503: the database is closed or the host is shutting down; nothing of the call
    /// was applied, and it can be retried once the host is back.
    Unavailable,
}

impl ErrorKind {
    /// The HTTP-style status.
    pub fn status(self) -> u16 {
        match self {
            ErrorKind::BadRequest => 400,
            ErrorKind::Unauthorized => 401,
            ErrorKind::Forbidden => 403,
            ErrorKind::NotFound => 404,
            ErrorKind::Conflict => 409,
            ErrorKind::TooManyRequests => 429,
            ErrorKind::Internal => 500,
            ErrorKind::Unavailable => 503,
        }
    }
}

/// Longest message an error carries, in bytes: messages quote the caller's input (a
/// value that does not parse, an unknown name), and a 30 MB parameter must not come
/// back as a 30 MB error.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// `message` cut to [`MAX_MESSAGE_BYTES`] (at a character boundary), saying so.
fn cap_message(message: String) -> String {
    if message.len() <= MAX_MESSAGE_BYTES {
        return message;
    }
    let mut cut = MAX_MESSAGE_BYTES - 64;
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    format!(
        "{}… (message cut: {} bytes)",
        &message[..cut],
        message.len()
    )
}

/// Tarn's one error type: a kind, a message for people, and for 429 the wait.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    kind: ErrorKind,
    message: String,
    retry_after: Option<Duration>,
}

impl Error {
    /// An error of `kind` with `message` (for host programs that wrap Tarn).
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: cap_message(message.into()),
            retry_after: None,
        }
    }

    pub(crate) fn bad(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::BadRequest, message)
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }

    pub(crate) fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Conflict, message)
    }

    pub(crate) fn rate_limited(wait: Duration) -> Self {
        Error {
            kind: ErrorKind::TooManyRequests,
            message: format!("rate limit exceeded; retry after {} ms", wait.as_millis()),
            retry_after: Some(wait),
        }
    }

    /// The category.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The HTTP-style status (400, 401, 403, 404, 409, 429, 500, 503).
    pub fn status(&self) -> u16 {
        self.kind.status()
    }

    /// The message, without any wrapper prefixes.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// For 429: how long to wait before retrying.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
}

impl Serialize for Error {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Error", 3)?;
        st.serialize_field("status", &self.status())?;
        st.serialize_field("kind", &self.kind)?;
        st.serialize_field("message", &self.message)?;
        st.end()
    }
}

impl From<tarn_sql::Error> for Error {
    fn from(e: tarn_sql::Error) -> Self {
        use tarn_sql::Error as E;
        match e {
            E::BadRequest(m) => Error::bad(m),
            E::NotFound(m) => Error::not_found(m),
            E::Conflict(m) => Error::conflict(m),
            E::Storage(s) => s.into(),
            E::Unavailable(m) => Error::new(ErrorKind::Unavailable, m),
            other => Error::new(ErrorKind::Internal, other.to_string()),
        }
    }
}

impl From<tarn_storage::Error> for Error {
    fn from(e: tarn_storage::Error) -> Self {
        match e {
            tarn_storage::Error::Locked { .. } => Error::conflict(e.to_string()),
            // Too big for the log record or the manifest: the caller's input, so a 400
            // naming the limit.
            tarn_storage::Error::TooLarge { .. } => Error::bad(e.to_string()),
            // A catalog change that no longer applies when its commit is prepared (a
            // concurrent change won): the catalog's own kind (404, 409).
            tarn_storage::Error::Catalog(c) => c.into(),
            // Refused before anything was logged: the caller may retry elsewhere or later.
            tarn_storage::Error::Closed => Error::new(
                ErrorKind::Unavailable,
                "the database is closed (the host is shutting down): nothing was applied",
            ),
            other => Error::new(ErrorKind::Internal, other.to_string()),
        }
    }
}

impl From<tarn_catalog::Error> for Error {
    fn from(e: tarn_catalog::Error) -> Self {
        use tarn_catalog::Error as E;
        match e {
            E::InvalidId(m) => Error::bad(m),
            E::AlreadyExists(m) => Error::conflict(m),
            E::NotFound(m) => Error::not_found(m),
            other => Error::new(ErrorKind::Internal, other.to_string()),
        }
    }
}

/// Result with Tarn's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
