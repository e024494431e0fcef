use datafusion::error::DataFusionError;

/// Errors of the SQL layer, split by who is at fault: the statement (`BadRequest`,
/// `NotFound`, `Conflict`) or Tarn (`Storage`, `Internal`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Invalid SQL, types, parameters or values.
    #[error("{0}")]
    BadRequest(String),
    /// A relation, schema or index that does not exist (a missing column is a
    /// `BadRequest`, as in SPEC §2).
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
    /// The runtime the work was on is shutting down: nothing of it was applied.
    #[error("{0}")]
    Unavailable(String),
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

impl Error {
    /// A copy of this error, for errors that reach us through a shared handle.
    pub(crate) fn duplicate(&self) -> Error {
        match self {
            Error::BadRequest(m) => Error::BadRequest(m.clone()),
            Error::NotFound(m) => Error::NotFound(m.clone()),
            Error::Conflict(m) => Error::Conflict(m.clone()),
            Error::Storage(s) => Error::Storage(s.duplicate()),
            Error::Internal(m) => Error::Internal(m.clone()),
            Error::Unavailable(m) => Error::Unavailable(m.clone()),
        }
    }
}

/// A blocking or spawned task that did not finish: cancelled means the runtime is
/// shutting down and the task never ran (or was stopped at an await), so nothing of
/// `what` was applied — a 503, not a bug; a panic is a bug.
pub(crate) fn join_error(e: tokio::task::JoinError, what: &str) -> Error {
    if e.is_cancelled() {
        Error::Unavailable(format!(
            "the server is shutting down: the {what} was stopped before it applied anything; retry"
        ))
    } else {
        Error::Internal(format!("{what} task failed: {e}"))
    }
}

/// The error of a statement whose work panicked (see `SqlEngine::with_timeout`).
pub(crate) fn panic_error(payload: &(dyn std::any::Any + Send)) -> Error {
    let msg = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("a panic without a message");
    if msg.contains("offset overflow") {
        Error::BadRequest(
            "a result is too large: a text, binary or array column passes 2 GiB in one batch \
             of rows; select fewer or shorter values"
                .into(),
        )
    } else {
        Error::Internal(format!(
            "the statement failed inside the query engine and applied nothing: {msg}"
        ))
    }
}

/// Maps a DataFusion error back to Tarn's: our own errors (and storage's) come back out
/// of `External`, wherever DataFusion nested or shared them (contexts, shared errors of
/// joins, collections, Arrow's external errors), with their kind; DataFusion's own are
/// stripped of their wrappers and classified.
fn from_datafusion(e: DataFusionError) -> Error {
    match e {
        DataFusionError::External(inner) => match inner.downcast::<Error>() {
            Ok(ours) => *ours,
            Err(other) => match other.downcast::<tarn_storage::Error>() {
                Ok(s) => Error::Storage(*s),
                Err(other) => from_foreign(other.as_ref()),
            },
        },
        DataFusionError::Context(_, inner) | DataFusionError::Diagnostic(_, inner) => {
            from_datafusion(*inner)
        }
        DataFusionError::Shared(inner) => match std::sync::Arc::try_unwrap(inner) {
            Ok(inner) => from_datafusion(inner),
            Err(shared) => classify(&shared),
        },
        DataFusionError::Collection(errs) => {
            // The most serious of several errors speaks for them.
            let mut all: Vec<Error> = errs.into_iter().map(from_datafusion).collect();
            all.sort_by_key(|e| match e {
                Error::Storage(_) | Error::Internal(_) => 0,
                _ => 1,
            });
            all.into_iter()
                .next()
                .unwrap_or_else(|| Error::Internal("empty error collection".into()))
        }
        other => classify(&other),
    }
}

/// Classifies a DataFusion error seen by reference (ours inside are copied out).
fn classify(e: &DataFusionError) -> Error {
    match e {
        DataFusionError::External(inner) => from_foreign(inner.as_ref()),
        DataFusionError::Context(_, inner) | DataFusionError::Diagnostic(_, inner) => {
            classify(inner)
        }
        DataFusionError::Shared(inner) => classify(inner),
        DataFusionError::Collection(errs) => errs
            .iter()
            .map(classify)
            .min_by_key(|e| match e {
                Error::Storage(_) | Error::Internal(_) => 0,
                _ => 1,
            })
            .unwrap_or_else(|| Error::Internal("empty error collection".into())),
        DataFusionError::SchemaError(s, _) => {
            use datafusion::common::SchemaError;
            match s.as_ref() {
                SchemaError::FieldNotFound { field, .. } => {
                    Error::BadRequest(format!("column \"{}\" does not exist", field.name()))
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
        // DataFusion lists the pool's top consumers on the lines after the first.
        DataFusionError::ResourcesExhausted(msg) => Error::BadRequest(format!(
            "query memory limit (query_memory) exceeded: {}",
            msg.lines()
                .next()
                .unwrap_or(msg)
                .trim_end_matches(" with top memory consumers (across reservations) as:")
        )),
        // Not the statement's fault: a bug, I/O (spill files), a task that panicked or
        // was cancelled, the FFI boundary.
        DataFusionError::Internal(msg) | DataFusionError::Ffi(msg) => Error::Internal(msg.clone()),
        DataFusionError::IoError(io) => Error::Internal(io.to_string()),
        DataFusionError::ExecutionJoin(j) if j.is_cancelled() => {
            Error::Unavailable("the server is shutting down: the query was stopped; retry".into())
        }
        DataFusionError::ExecutionJoin(j) => Error::Internal(format!("query task failed: {j}")),
        DataFusionError::ObjectStore(e) => Error::Internal(e.to_string()),
        DataFusionError::ArrowError(a, _) => match a.as_ref() {
            datafusion::arrow::error::ArrowError::ExternalError(inner) => {
                from_foreign(inner.as_ref())
            }
            datafusion::arrow::error::ArrowError::IoError(m, _) => Error::Internal(m.clone()),
            other => Error::BadRequest(arrow_message(other)),
        },
        other => Error::BadRequest(clean_message(&other.to_string())),
    }
}

/// An error of some other type carried in an `External`: ours or storage's somewhere in
/// its chain keep their kind; DataFusion's and Arrow's are classified; anything else is
/// not an error about the statement (say, a spill file's I/O) and is a 500.
fn from_foreign(e: &(dyn std::error::Error + 'static)) -> Error {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(ours) = err.downcast_ref::<Error>() {
            return ours.duplicate();
        }
        if let Some(s) = err.downcast_ref::<tarn_storage::Error>() {
            return Error::Storage(s.duplicate());
        }
        if let Some(df) = err.downcast_ref::<DataFusionError>() {
            return classify(df);
        }
        if let Some(a) = err.downcast_ref::<datafusion::arrow::error::ArrowError>() {
            return classify(&DataFusionError::ArrowError(Box::new(copy_arrow(a)), None));
        }
        cur = err.source();
    }
    let msg = clean_message(&e.to_string());
    // A pattern the user wrote that does not compile (`'a' ~ '('`): their input.
    if msg.starts_with("regex parse error") {
        return Error::BadRequest(format!(
            "invalid regular expression: {}",
            msg.split_whitespace().collect::<Vec<_>>().join(" ")
        ));
    }
    Error::Internal(msg)
}

/// Arrow errors are not `Clone`; the variants classification looks at are copied, the
/// others keep their text.
fn copy_arrow(a: &datafusion::arrow::error::ArrowError) -> datafusion::arrow::error::ArrowError {
    use datafusion::arrow::error::ArrowError as A;
    match a {
        A::DivideByZero => A::DivideByZero,
        A::CastError(m) => A::CastError(m.clone()),
        A::ComputeError(m) => A::ComputeError(m.clone()),
        A::InvalidArgumentError(m) => A::InvalidArgumentError(m.clone()),
        A::IoError(m, e) => A::IoError(m.clone(), std::io::Error::new(e.kind(), e.to_string())),
        other => A::ComputeError(other.to_string()),
    }
}

fn arrow_message(e: &datafusion::arrow::error::ArrowError) -> String {
    use datafusion::arrow::error::ArrowError;
    match e {
        ArrowError::DivideByZero => "division by zero".into(),
        ArrowError::CastError(m)
        | ArrowError::ComputeError(m)
        | ArrowError::InvalidArgumentError(m) => clean_message(m),
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
    let m = m.lines().next().unwrap_or(m).trim();
    // A function's own refusal of its argument types, wrapped by DataFusion's coercion
    // ("Function 'f' user-defined coercion failed with: External error: <ours>. No
    // function matches …"): ours is the message.
    if m.starts_with("Function '")
        && let Some((_, inner)) = m.split_once("coercion failed with: ")
    {
        let inner = inner.split(". No function matches").next().unwrap_or(inner);
        return clean_message(inner);
    }
    // An outer column left in a plan: a correlated shape unnesting does not cover.
    if m.starts_with("Physical plan does not support logical expression OuterReferenceColumn") {
        return "this correlated subquery is not supported: it refers to an outer column \
                where it cannot be unnested (a correlated LATERAL subquery with ORDER BY … \
                LIMIT, for one); write it as a scalar subquery in the SELECT list, or as a join"
            .into();
    }
    // PostgreSQL's words for what DataFusion and Arrow say otherwise.
    if m.starts_with("Scalar subquery returned more than one row") {
        return "more than one row returned by a subquery used as an expression".into();
    }
    for (arrow, pg) in [
        ("Int64Array overflow", "bigint out of range"),
        ("Int32Array overflow", "integer out of range"),
        ("Int16Array overflow", "smallint out of range"),
        ("Arithmetic overflow", "bigint out of range"),
    ] {
        if m.starts_with(arrow) {
            return pg.into();
        }
    }
    m.to_string()
}

#[cfg(test)]
mod join_tests {
    use super::*;

    /// A task stopped by its runtime's shutdown (what a statement cut by a host's
    /// shutdown drain saw as 500 "commit task failed: task 22 was cancelled") is a
    /// 503-style error saying nothing was applied; a panic stays a bug.
    #[test]
    fn a_cancelled_task_is_unavailable_and_a_panic_internal() -> std::result::Result<(), String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .map_err(|e| e.to_string())?;
        let cancelled = rt.block_on(async {
            let h = tokio::spawn(std::future::pending::<()>());
            h.abort();
            h.await
        });
        let Err(e) = cancelled else {
            return Err("the task finished".into());
        };
        assert!(
            matches!(join_error(e, "commit"), Error::Unavailable(m) if m.contains("before it applied anything"))
        );
        let panicked: std::result::Result<(), _> =
            rt.block_on(async { tokio::spawn(async { panic!("boom") }).await });
        let Err(e) = panicked else {
            return Err("the task finished".into());
        };
        assert!(matches!(join_error(e, "commit"), Error::Internal(_)));
        Ok(())
    }
}
