use datafusion::error::DataFusionError;

/// Errors of the SQL layer, split by who is at fault: the statement (`BadRequest`,
/// `NotFound`, `Conflict`) or Tarn (`Storage`, `Internal`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Invalid SQL, types, parameters or values.
    #[error("{0}")]
    BadRequest(String),
    /// A relation, schema or column that does not exist.
    #[error("{0}")]
    NotFound(String),
    /// Already exists, or a unique/primary key violation.
    #[error("{0}")]
    Conflict(String),
    /// The storage layer failed.
    #[error(transparent)]
    Storage(#[from] tarn_storage::Error),
    /// A bug.
    #[error("internal error: {0}")]
    Internal(String),
}

/// Result of the SQL layer.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Shorthand for a 400 error.
pub(crate) fn bad<T>(msg: impl Into<String>) -> Result<T> {
    Err(Error::BadRequest(msg.into()))
}

impl From<DataFusionError> for Error {
    fn from(e: DataFusionError) -> Self {
        from_datafusion(e)
    }
}

impl From<datafusion::arrow::error::ArrowError> for Error {
    fn from(e: datafusion::arrow::error::ArrowError) -> Self {
        from_datafusion(DataFusionError::ArrowError(Box::new(e), None))
    }
}

impl From<datafusion::sql::sqlparser::parser::ParserError> for Error {
    fn from(e: datafusion::sql::sqlparser::parser::ParserError) -> Self {
        let msg = e.to_string();
        let msg = msg
            .strip_prefix("sql parser error: ")
            .unwrap_or(&msg)
            .to_string();
        Error::BadRequest(format!("syntax error: {msg}"))
    }
}

/// Maps a DataFusion error back to Tarn's: our own errors come back out of
/// `External`, DataFusion's own are stripped of their wrappers and classified.
fn from_datafusion(e: DataFusionError) -> Error {
    match e {
        DataFusionError::External(inner) => match inner.downcast::<Error>() {
            Ok(ours) => *ours,
            Err(other) => match other.downcast::<tarn_storage::Error>() {
                Ok(s) => Error::Storage(*s),
                Err(other) => Error::BadRequest(other.to_string()),
            },
        },
        DataFusionError::Context(_, inner) => from_datafusion(*inner),
        DataFusionError::Shared(inner) => match std::sync::Arc::try_unwrap(inner) {
            Ok(inner) => from_datafusion(inner),
            Err(shared) => Error::BadRequest(clean_message(&shared.to_string())),
        },
        DataFusionError::Diagnostic(_, inner) => from_datafusion(*inner),
        DataFusionError::Collection(mut errs) if !errs.is_empty() => {
            from_datafusion(errs.remove(0))
        }
        DataFusionError::SchemaError(ref s, _) => {
            use datafusion::common::SchemaError;
            match s.as_ref() {
                SchemaError::FieldNotFound { field, .. } => {
                    Error::NotFound(format!("column \"{}\" does not exist", field.name()))
                }
                SchemaError::AmbiguousReference { field } if field.relation.is_none() => {
                    Error::BadRequest(format!(
                        "column reference \"{}\" is ambiguous",
                        field.name()
                    ))
                }
                _ => Error::BadRequest(clean_message(&e.to_string())),
            }
        }
        DataFusionError::ResourcesExhausted(msg) => {
            Error::BadRequest(format!("query memory limit exceeded: {msg}"))
        }
        DataFusionError::Internal(msg) => Error::Internal(msg),
        DataFusionError::IoError(io) => Error::Internal(io.to_string()),
        DataFusionError::ArrowError(a, _) => Error::BadRequest(arrow_message(&a)),
        other => Error::BadRequest(clean_message(&other.to_string())),
    }
}

fn arrow_message(e: &datafusion::arrow::error::ArrowError) -> String {
    use datafusion::arrow::error::ArrowError;
    match e {
        ArrowError::DivideByZero => "division by zero".into(),
        ArrowError::CastError(m)
        | ArrowError::ComputeError(m)
        | ArrowError::InvalidArgumentError(m) => m.clone(),
        other => clean_message(&other.to_string()),
    }
}

/// Strips DataFusion's "Error during planning: " style prefixes: messages are for people.
pub(crate) fn clean_message(msg: &str) -> String {
    const PREFIXES: &[&str] = &[
        "DataFusion error: ",
        "Error during planning: ",
        "Execution error: ",
        "This feature is not implemented: ",
        "Arrow error: ",
        "Invalid argument error: ",
        "Cast error: ",
        "Compute error: ",
        "Schema error: ",
        "SQL error: ",
        "External error: ",
        "Divide by zero error",
    ];
    let mut m = msg.trim();
    loop {
        let before = m;
        for p in PREFIXES {
            if *p == "Divide by zero error" && m.starts_with(p) {
                return "division by zero".into();
            }
            if let Some(rest) = m.strip_prefix(p) {
                m = rest.trim_start();
            }
        }
        if m == before {
            break;
        }
    }
    // DataFusion sometimes appends a backtrace hint or a context line; keep the first line.
    m.lines().next().unwrap_or(m).trim().to_string()
}
