use datafusion::error::DataFusionError;
// A value from a statement is quoted in a message as `shown` quotes it: a long one in
// part, with its length (a 600,000-digit value quoted whole left no room for what was
// wrong with it).
use tarn_catalog::shown;

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
        // A keyword where an operator was expected (`x COLLATE "C"`): the parser names
        // its token by its Rust form.
        if let Some(word) = msg
            .strip_prefix("No infix parser for token Word(Word { value: \"")
            .and_then(|w| w.split('"').next())
        {
            return Error::BadRequest(format!("syntax error at or near \"{word}\""));
        }
        Error::BadRequest(syntax_error(&msg))
    }
}

/// PostgreSQL's words for a parser error (`syntax error at or near "SELEC"`, `syntax
/// error at end of input`), with what sqlparser expected and the position, from
/// sqlparser's `Expected: an SQL statement, found: SELEC at Line: 1, Column: 1`.
fn syntax_error(msg: &str) -> String {
    let Some((expected, found)) = msg
        .strip_prefix("Expected: ")
        .and_then(|m| m.rsplit_once(", found: "))
    else {
        return format!("syntax error: {msg}");
    };
    if found == "EOF" {
        return format!("syntax error at end of input (expected {expected})");
    }
    match found.rsplit_once(" at Line: ").and_then(|(token, at)| {
        let (line, column) = at.split_once(", Column: ")?;
        Some((
            token,
            line.parse::<u64>().ok()?,
            column.parse::<u64>().ok()?,
        ))
    }) {
        Some((token, line, column)) => format!(
            "syntax error at or near \"{token}\" (line {line}, column {column}; expected \
             {expected})"
        ),
        None => format!("syntax error at or near \"{found}\" (expected {expected})"),
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

/// A statement's fault found inside DataFusion (a function's argument, a search's
/// column): carried through DataFusion's error as Tarn's 400.
pub(crate) fn bad_request(msg: String) -> datafusion::error::DataFusionError {
    datafusion::error::DataFusionError::External(Box::new(Error::BadRequest(msg)))
}

/// The error of a statement whose work panicked (see `SqlEngine::with_timeout`).
pub(crate) fn panic_error(payload: &(dyn std::any::Any + Send)) -> Error {
    panicked(tarn_storage::panic_message(payload).unwrap_or("a panic without a message"))
}

/// The panic a task of DataFusion's reported in `text` (`task 13 panicked with message
/// "offset overflow"`), as [`panic_error`] says it; `None` if `text` tells of none.
fn task_panic(text: &str) -> Option<Error> {
    let (_, rest) = text.split_once("panicked with message ")?;
    Some(panicked(rest.trim().trim_matches('"')))
}

/// What a column past Arrow's 2 GiB per batch is said as, however Arrow reported it.
const TOO_LARGE: &str = "a result is too large: a text, binary or array column passes 2 GiB \
                         in one batch of rows; select fewer or shorter values";

fn panicked(msg: &str) -> Error {
    if msg.contains("offset overflow") {
        Error::BadRequest(TOO_LARGE.into())
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
    // A pattern past the regex crate's size limit, however it came wrapped (every error
    // passes here first): DataFusion's regexp_replace called it an internal error (a
    // 500), Arrow's `~` printed the Rust enum.
    if let Some(m) = regex_too_large(&e.to_string()) {
        return Error::BadRequest(m);
    }
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
            consumer_in_words(
                msg.lines()
                    .next()
                    .unwrap_or(msg)
                    .trim_end_matches(" with top memory consumers (across reservations) as:")
            )
        )),
        // A map function given something else: the argument's fault, said as DataFusion
        // says it ("Expected a Map type, got Int64.") but in PostgreSQL's type names.
        DataFusionError::Internal(msg) if msg.starts_with("Expected a Map type") => {
            Error::BadRequest(clean_message(msg))
        }
        // `max`/`min`/`first_value` of values DataFusion cannot order (arrays of arrays,
        // structs holding lists): the statement asked for it, not a bug of Tarn's.
        DataFusionError::Internal(msg) if msg.starts_with("Uncomparable values") => {
            Error::BadRequest(
                "could not compare these values: ordering (max, min, first_value) of arrays of \
                 arrays and of structs holding arrays is not supported"
                    .to_string(),
            )
        }
        // Not the statement's fault: a bug, I/O (spill files), a task that panicked or
        // was cancelled, the FFI boundary.
        DataFusionError::Internal(msg) | DataFusionError::Ffi(msg) => Error::Internal(msg.clone()),
        DataFusionError::IoError(io) => Error::Internal(io.to_string()),
        DataFusionError::ExecutionJoin(j) if j.is_cancelled() => {
            Error::Unavailable("the server is shutting down: the query was stopped; retry".into())
        }
        DataFusionError::ExecutionJoin(j) => task_panic(&j.to_string())
            .unwrap_or_else(|| Error::Internal(format!("query task failed: {j}"))),
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

/// A pool refusal naming one of DataFusion's operators (`Additional allocation failed
/// for PartialHashAggregateStream[0]`) in words: what the statement was doing.
fn consumer_in_words(first_line: &str) -> String {
    const PREFIX: &str = "Additional allocation failed for ";
    let Some(rest) = first_line.strip_prefix(PREFIX) else {
        return first_line.to_string();
    };
    // `Name[partition]`, then whatever DataFusion says after it.
    let (name, tail) = match rest.find(['[', ' ']) {
        Some(i) => {
            let tail = rest[i..]
                .strip_prefix('[')
                .and_then(|t| t.split_once(']'))
                .map_or(&rest[i..], |(_, t)| t);
            (&rest[..i], tail)
        }
        None => (rest, ""),
    };
    let words = match name {
        n if n.contains("HashAggregate") || n.contains("GroupedTopK") => "an aggregate's groups",
        n if n.contains("ExternalSorter") || n.contains("Sort") => "a sort",
        n if n.starts_with("HashJoin") || n.contains("SymmetricHashJoin") => "a hash join",
        n if n.contains("NestedLoopJoin") || n.contains("CrossJoin") => "a join",
        n if n.contains("SortMergeJoin") => "a merge join",
        n if n.contains("Repartition") => "passing rows between partitions",
        n if n.contains("Window") => "a window",
        n if n.contains("Recursive") => "a recursive query's rows",
        n if n.contains("Distinct") => "a DISTINCT",
        _ => return first_line.to_string(),
    };
    format!("{PREFIX}{words}{tail}")
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
    let text = e.to_string();
    if let Some(panic) = task_panic(&text) {
        return panic;
    }
    let msg = clean_message(&text);
    // A pattern the user wrote that does not compile (`'a' ~ '('`): their input.
    if msg.starts_with("invalid regular expression") {
        return Error::BadRequest(msg);
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
        "Parser error: ",
        "Resources exhausted: ",
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
    // A pattern that does not compile: the regex crate says where on later lines.
    let full = m;
    if full.contains("regex parse error") {
        return regex_error(full);
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
    // A call no signature takes: the argument types DataFusion lists on a later line
    // (the first names only the first argument that failed).
    const NO_MATCH: &str = "No function matches the given name and argument types '";
    if let Some(at) = full.find(NO_MATCH)
        && let Some((call, _)) = full[at + NO_MATCH.len()..].split_once('\'')
        && let Some((name, args)) = call.split_once('(')
        && let Some(args) = args.strip_suffix(')')
    {
        return no_such_function(name, &pg_type_names(args));
    }
    // `INTERVAL $$1 day$$` (or an expression): DataFusion prints the parser's AST.
    if m.starts_with("Unsupported interval argument") {
        return "an INTERVAL literal takes a quoted string or a number (INTERVAL '1 day'); \
                for an expression, cast it: (expr)::interval"
            .into();
    }
    // An outer column left in a plan: a correlated shape unnesting does not cover.
    if m.starts_with("Physical plan does not support logical expression OuterReferenceColumn") {
        return "this correlated subquery is not supported: it refers to an outer column \
                where it cannot be unnested; write it as a scalar subquery in the SELECT \
                list, or as a join"
            .into();
    }
    // `lag(x, t.n)`: DataFusion takes the offset as a constant only.
    if m.starts_with("There is only support Literal types for field at idx: 1 in Window Function") {
        return "the offset of lag and lead must be a constant here, not a column or an \
                expression of columns"
            .into();
    }
    // A window function or a set-returning function where a row's value is wanted
    // (WHERE, an aggregate's argument): PostgreSQL's words, not DataFusion's plan dump.
    if m.starts_with("Physical plan does not support logical expression WindowFunction") {
        return "window functions are not allowed here (WHERE, GROUP BY, an aggregate's \
                argument); compute them in a subquery and filter its result"
            .into();
    }
    if m.starts_with("Aggregate function calls cannot contain window function calls") {
        return "aggregate function calls cannot contain window function calls; compute the \
                window function in a subquery and aggregate its result"
            .into();
    }
    if m.starts_with("Unnest should be rewritten") {
        return "set-returning functions (unnest) are not allowed here (WHERE, ORDER BY, an \
                aggregate's argument); unnest in the FROM list or a subquery"
            .into();
    }
    // PostgreSQL's words for what DataFusion and Arrow say otherwise.
    if m.starts_with("Scalar subquery returned more than one row") {
        return "more than one row returned by a subquery used as an expression".into();
    }
    // A function no one defined, in PostgreSQL's words.
    if let Some(name) = m
        .strip_prefix("Invalid function '")
        .and_then(|r| r.split_once('\''))
        .map(|(n, _)| n)
    {
        return format!(
            "function {name} does not exist: no function matches the given name; you might \
             need to add explicit type casts"
        );
    }
    if let Some(rest) = m.strip_prefix("Order by column out of bounds, specified: ") {
        let n = rest.split(',').next().unwrap_or(rest);
        return format!("ORDER BY position {n} is not in select list");
    }
    if m.starts_with("Substring without for/from is not valid") {
        return "substring needs FROM or FOR (substring(text FROM start [FOR count]), or \
                substr(text, start [, count]))"
            .into();
    }
    // An aggregate that cannot take rows back out of a window frame that slides.
    if let Some((_, call)) = m.split_once(
        "Aggregate can not be used as a sliding accumulator because `retract_batch` is not implemented: ",
    ) {
        let name = call.split('(').next().unwrap_or(call).trim();
        return format!(
            "{name} over a window frame that does not start at UNBOUNDED PRECEDING is not \
             supported; use ROWS BETWEEN UNBOUNDED PRECEDING AND …, or an aggregate over a \
             subquery"
        );
    }
    // DataFusion says "While expanding wildcard" of any column missing from GROUP BY,
    // wildcard or not.
    if let Some((_, rest)) = m.split_once("While expanding wildcard, column \"")
        && let Some((column, _)) = rest.split_once("\" must appear in the GROUP BY clause")
    {
        // PostgreSQL names the column by its table (`t.body`), not its workspace too.
        let parts: Vec<&str> = column.split('.').collect();
        let column = match parts.as_slice() {
            [.., table, name] if parts.len() > 2 => format!("{table}.{name}"),
            _ => column.to_string(),
        };
        return format!(
            "column {} must appear in the GROUP BY clause or be used in an aggregate function",
            shown(&column)
        );
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
    if let Some(pg) = pg_wording(m) {
        return pg;
    }
    pg_type_names(m)
}

/// "invalid regular expression: …" from the regex crate's several-line message
/// ("regex parse error:", the pattern, a caret, "error: unclosed group"), however
/// DataFusion wrapped it.
fn regex_error(text: &str) -> String {
    let after = text
        .split_once("regex parse error:")
        .map_or(text, |(_, r)| r);
    let mut lines = after.lines().map(str::trim).filter(|l| !l.is_empty());
    let pattern = lines.next().unwrap_or_default();
    let what = lines
        .find_map(|l| l.strip_prefix("error: "))
        .map(|w| w.trim_end_matches(['~', ')']).trim())
        .unwrap_or("it does not compile");
    format!("invalid regular expression: {what} in {}", shown(pattern))
}

/// The refusal of a regular expression that compiles past the regex crate's size
/// limit, from either wording of it.
fn regex_too_large(text: &str) -> Option<String> {
    let limit = if let Some((_, rest)) = text.split_once("Compiled regex exceeds size limit of ") {
        rest.split(' ').next()
    } else if let Some((_, rest)) = text.split_once("CompiledTooBig(") {
        rest.split(')').next()
    } else {
        return None;
    };
    Some(format!(
        "invalid regular expression: regular expression is too complex (it compiles past {} \
         bytes); write a shorter pattern",
        limit.unwrap_or("the limit of")
    ))
}

/// PostgreSQL's message for a call of `name` with arguments of types `args` (already
/// in PostgreSQL's names) that no function takes.
fn no_such_function(name: &str, args: &str) -> String {
    format!(
        "function {name}({args}) does not exist: no function matches the given name and \
         argument types; you might need to add explicit type casts"
    )
}

/// The operator of sqlparser's `Custom("%-")`, as written.
fn custom_operator(name: &str) -> Option<&str> {
    name.strip_prefix("Custom(\"")?.strip_suffix("\")")
}

/// PostgreSQL's wording for DataFusion's refusals of types: operators and functions
/// that do not take the argument types, VALUES rows of different types.
fn pg_wording(m: &str) -> Option<String> {
    // "Cannot infer common string type for string concat operation bigint || bigint":
    // `1 || 2`, which PostgreSQL has no operator for either.
    if let Some(ops) =
        m.strip_prefix("Cannot infer common string type for string concat operation ")
    {
        return Some(format!(
            "operator does not exist: {}",
            pg_type_names(ops.trim())
        ));
    }
    // "Aggregate function calls cannot be nested: 'sum(v.a)' is nested inside …".
    if m.starts_with("Aggregate function calls cannot be nested") {
        return Some("aggregate function calls cannot be nested".into());
    }
    if m.starts_with("Aggregate functions are not allowed in the WHERE clause") {
        return Some(
            "aggregate functions are not allowed in WHERE; filter groups with HAVING".into(),
        );
    }
    // "Invalid window frame: start bound (CURRENT ROW) cannot be larger than end bound
    // (1 PRECEDING)": PostgreSQL's words for the frames it refuses too. (It allows `2
    // PRECEDING AND 3 PRECEDING`, an empty frame, which DataFusion refuses: said as is.)
    if let Some(rest) = m.strip_prefix("Invalid window frame: start bound (")
        && let Some((start, rest)) = rest.split_once(") cannot be larger than end bound (")
    {
        let end = rest.trim_end_matches(')');
        let pg = match (start, end) {
            ("CURRENT ROW", e) if e.ends_with("PRECEDING") => {
                Some("frame starting from current row cannot have preceding rows")
            }
            (s, e) if s.ends_with("FOLLOWING") && e.ends_with("PRECEDING") => {
                Some("frame starting from following row cannot have preceding rows")
            }
            (s, "CURRENT ROW") if s.ends_with("FOLLOWING") => {
                Some("frame starting from following row cannot end with current row")
            }
            _ => None,
        };
        return Some(match pg {
            Some(pg) => pg.to_string(),
            None => format!(
                "window frame starting at {start} ends before it starts, at {end}: empty \
                 frames are not supported"
            ),
        });
    }
    // "99999.0 is too large to store in a Decimal128 of precision 4. Max is 999.9" (the
    // type perhaps already said as numeric): PostgreSQL's overflow, with its detail.
    if let Some((_, rest)) = m.split_once(" is too large to store in a ")
        && let Some((_, rest)) = rest.split_once(" of precision ")
        && let Some((precision, max)) = rest.split_once(". Max is ")
        && let Ok(precision) = precision.trim().parse::<u32>()
    {
        let scale = max.trim().split_once('.').map_or(0, |(_, f)| {
            f.chars().take_while(char::is_ascii_digit).count() as u32
        });
        return Some(format!(
            "numeric field overflow: a field with precision {precision}, scale {scale} must \
             round to an absolute value less than 10^{}",
            precision.saturating_sub(scale)
        ));
    }
    // "Date part 'CENTURY' not supported".
    if let Some(rest) = m.strip_prefix("Date part '")
        && let Some(unit) = rest.strip_suffix("' not supported")
    {
        return Some(format!(
            "unit \"{}\" is not supported by EXTRACT and date_part",
            unit.to_lowercase()
        ));
    }
    if m.starts_with("LIKE does not support escape_char other than the backslash") {
        return Some(
            "LIKE … ESCAPE with a character other than the backslash needs a quoted pattern \
             (not a column or parameter)"
                .into(),
        );
    }
    // `WITH d AS (DELETE … RETURNING …) SELECT …`: DataFusion's "Query DELETE … not
    // implemented yet", the whole statement quoted.
    if let Some(rest) = m.strip_prefix("Query ")
        && rest.ends_with(" not implemented yet")
    {
        let verb = rest.split_whitespace().next().unwrap_or("").to_uppercase();
        if matches!(verb.as_str(), "INSERT" | "UPDATE" | "DELETE") {
            return Some(format!(
                "{verb} inside WITH or a subquery is not supported; run it as a statement \
                 of its own (with RETURNING)"
            ));
        }
    }
    // `FROM t, LATERAL generate_series(1, t.n)`: a table function's arguments must be
    // constants here (DataFusion printed the column's structure).
    // In a LATERAL subquery the column is the query around it's (the same).
    if m.contains("must be an INTEGER or NULL, got Column(")
        || (m.starts_with("Argument #") && m.contains("got OuterReferenceColumn("))
    {
        return Some(
            "a function in FROM takes constant arguments, not columns of other tables \
             (LATERAL is not supported there); write generate_series(1, t.n) as a SELECT \
             item of a query over t, or LATERAL (SELECT unnest(generate_series(1, t.n)) AS \
             g) l"
                .into(),
        );
    }
    // `j -> 'k'` is a JSON value of its own type (the JSON functions' union), which
    // DataFusion named in full, Arrow's metadata and all, when it met jsonb or text.
    if m.contains("Union(Sparse") {
        return Some(
            "a value of -> (a JSON value) cannot be combined here with a value of another \
             type; cast it, as (j -> 'k')::jsonb, or use ->> for text"
                .into(),
        );
    }
    // "Cannot coerce arithmetic expression A + B to valid types",
    // "Cannot infer common argument type for comparison operation A = B".
    for prefix in [
        "Cannot coerce arithmetic expression ",
        "Cannot infer common argument type for comparison operation ",
    ] {
        if let Some(rest) = m.strip_prefix(prefix) {
            let rest = rest.strip_suffix(" to valid types").unwrap_or(rest);
            return Some(format!(
                "operator does not exist: {}; you might need to add explicit type casts",
                pg_type_names(rest)
            ));
        }
    }
    // A function's signature check, in its several forms; the argument types from
    // "… argument types 'f(A, B)'" when DataFusion gives them, else from "received A".
    let function = ["Function '", "call to '"].iter().find_map(|p| {
        let at = m.find(p)? + p.len();
        let name = m[at..].split('\'').next()?;
        (m.contains("failed to match any signature")
            || m.contains("No function matches")
            || m.contains("Failed to coerce arguments")
            || m[at..].contains("' requires ")
            || m[at..].contains("' expects "))
        .then_some(name)
    });
    if let Some(name) = function {
        let listed = format!("argument types '{name}(");
        let from_list = m
            .find(&listed)
            .map(|at| &m[at + listed.len()..])
            .and_then(|args| args.split_once(")'").map(|(args, _)| args))
            .filter(|args| !args.contains(['\'', ':']));
        // "… coercion from Int64, Utf8 to the signature …": every argument's type.
        let from_list = from_list.or_else(|| {
            let at = m.find("coercion from ")? + "coercion from ".len();
            m[at..]
                .split_once(" to the signature")
                .map(|(args, _)| args)
                .filter(|args| !args.contains(['\'', ':']))
        });
        let args = match from_list {
            Some(args) => pg_type_names(args),
            // "… but received String (DataType: Utf8)": the data type when given.
            None => m
                .split_once("but received ")
                .map(|(_, t)| {
                    match t
                        .split_once("(DataType: ")
                        .and_then(|(_, dt)| arrow_type(dt))
                    {
                        Some((pg, _)) => pg,
                        None => pg_type_names(t.split(['.', ',']).next().unwrap_or(t).trim()),
                    }
                })
                .unwrap_or_default(),
        };
        return Some(no_such_function(name, &args));
    }
    // "Error parsing timestamp from 'x': …": PostgreSQL's invalid input.
    if let Some(rest) = m.strip_prefix("Error parsing timestamp from '")
        && let Some((value, _)) = rest.split_once("': ")
    {
        // With a format (`to_timestamp('x', 'y')`): "'x' using format 'y': …".
        if let Some((value, format)) = value.split_once("' using format '") {
            return Some(format!(
                "invalid value {} for the timestamp format {}",
                shown(value),
                shown(format)
            ));
        }
        return Some(format!(
            "invalid input syntax for type timestamp: {}",
            shown(value)
        ));
    }
    // "Cannot cast to Decimal128(38, 10). Overflowing on inf": PostgreSQL's overflow.
    if let Some(rest) = m.strip_prefix("Cannot cast to ")
        && let Some((ty, value)) = rest.split_once(". Overflowing on ")
    {
        let value = match value.trim() {
            "inf" | "-inf" | "NaN" => "an infinite value".to_string(),
            v => shown(v),
        };
        return Some(format!(
            "numeric field overflow: {value} does not fit in {}",
            pg_type_names(ty)
        ));
    }
    // "Decimal(precision = 0, scale = 0) should satisfy `0 < precision <= 76`, …".
    if let Some(rest) = m.strip_prefix("Decimal(precision = ")
        && let Some((precision, rest)) = rest.split_once(", scale = ")
        && let Some((scale, _)) = rest.split_once(") should satisfy")
    {
        return Some(format!(
            "NUMERIC precision must be between 1 and 76 and scale between 0 and the \
             precision, not ({precision}, {scale})"
        ));
    }
    // "Unsupported binary operator: LtDashGt", or an operator the planner let through
    // that execution refuses ("Utf8 operator 'AtAt' is not supported in the physical
    // expr"): the operator as it was written.
    let refused = m.strip_prefix("Unsupported binary operator: ").or_else(|| {
        let (_, rest) = m.split_once(" operator '")?;
        rest.strip_suffix("' is not supported in the physical expr")
    });
    if let Some(name) = refused {
        // `OPERATOR(pg_catalog.+)`: PGCustomBinaryOperator(["pg_catalog", "+"]).
        let custom = name
            .trim()
            .strip_prefix("PGCustomBinaryOperator([")
            .and_then(|r| r.strip_suffix("])"))
            .map(|parts| {
                let parts: Vec<&str> = parts.split(", ").map(|p| p.trim_matches('"')).collect();
                format!("OPERATOR({})", parts.join("."))
            });
        if let Some(custom) = custom {
            return Some(format!("operator does not exist: {custom}"));
        }
        // An operator sqlparser read as one it does not know (`7 %- 3`: `%-`, as in
        // PostgreSQL, which has no such operator either): `Custom("%-")`.
        let name = custom_operator(name.trim()).unwrap_or(name);
        let written = match name.trim() {
            "LtDashGt" => "<->",
            "DoubleHash" => "##",
            "AtAt" => "@@",
            "AtQuestion" => "@?",
            "Question" => "?",
            "QuestionAnd" => "?&",
            "QuestionPipe" => "?|",
            "HashMinus" => "#-",
            "Spaceship" => "<=>",
            "DuckIntegerDivide" => "//",
            "MyIntegerDivide" => "DIV",
            "PGOverlap" => "&&",
            "ArrowAt" => "<@",
            "AtArrow" => "@>",
            "PGStartsWith" => "^@",
            "AndLt" => "&<",
            "AndGt" => "&>",
            "LtLtPipe" => "<<|",
            "PipeGtGt" => "|>>",
            "AndLtPipe" => "&<|",
            "PipeAndGt" => "|&>",
            "LtCaret" => "<^",
            "GtCaret" => ">^",
            "QuestionHash" => "?#",
            "QuestionDash" => "?-",
            "QuestionDashPipe" => "?-|",
            "QuestionDoublePipe" => "?||",
            "At" => "@",
            "TildeEq" => "~=",
            "Assignment" => ":=",
            "Xor" => "XOR",
            "Overlaps" => "OVERLAPS",
            other => other,
        };
        let hint = match written {
            "<->" | "<=>" => "; similarity is scored with <#> (higher is better)",
            "@@" => "; text is searched with <#> (BM25, higher is better)",
            _ => "",
        };
        return Some(format!("operator does not exist: {written}{hint}"));
    }
    // "Unsupported SQL unary operator DoubleAt": a prefix operator Tarn does not have.
    if let Some(name) = m.strip_prefix("Unsupported SQL unary operator ") {
        let name = custom_operator(name.trim()).unwrap_or(name);
        let written = match name.trim() {
            "DoubleAt" => "@@",
            "PGBitwiseNot" => "~",
            "BitwiseNot" => "~",
            "PGSquareRoot" => "|/",
            "PGCubeRoot" => "||/",
            "PGPostfixFactorial" => "!",
            "PGPrefixFactorial" => "!!",
            "PGAbs" => "@",
            "BangNot" => "!",
            "Hash" => "#",
            "AtDashAt" => "@-@",
            "QuestionDash" => "?-",
            "QuestionPipe" => "?|",
            other => other,
        };
        return Some(format!("operator does not exist: prefix {written}"));
    }
    // "Cannot create filter with non-boolean predicate 'e <#> …' returning real".
    if let Some(rest) = m.strip_prefix("Cannot create filter with non-boolean predicate '")
        && let Some((_, ty)) = rest.rsplit_once("' returning ")
    {
        return Some(format!(
            "argument of WHERE must be type boolean, not type {}",
            pg_type_names(ty.trim())
        ));
    }
    // "LIMIT must be >= 0, '-1' was provided", "OFFSET must be >=0, …": PostgreSQL's
    // words; "Expected LIMIT to be an integer or null, but got text": its type refusal.
    for clause in ["LIMIT", "OFFSET"] {
        if m.starts_with(&format!("{clause} must be >")) && m.ends_with("was provided") {
            return Some(format!("{clause} must not be negative"));
        }
        if let Some(ty) = m.strip_prefix(&format!(
            "Expected {clause} to be an integer or null, but got "
        )) {
            return Some(format!(
                "argument of {clause} must be type bigint, not type {}",
                pg_type_names(ty.trim())
            ));
        }
    }
    // "Cannot cast LIST to non-list data type real": a nested array (a large parameter
    // bound as one Arrow list) cast to a one-dimensional array type, as the small one's
    // `cannot cast type bigint[][] to real[]` says.
    if let Some(ty) = m.strip_prefix("Cannot cast LIST to non-list data type ") {
        return Some(format!(
            "cannot cast a nested array to type {}[]: its elements are arrays (a bag of \
             vectors is FLOAT4[][])",
            pg_type_names(ty.trim())
        ));
    }
    // "Cannot cast to FixedSizeList(3): value at index 0 has length 2": `x::real[3]`.
    if let Some(rest) = m.strip_prefix("Cannot cast to FixedSizeList(")
        && let Some((want, rest)) = rest.split_once("):")
        && let Some((_, got)) = rest.rsplit_once(" has length ")
    {
        return Some(format!(
            "cannot cast an array of {} elements to an array of exactly {want} (a vector \
             type's dimension)",
            got.trim()
        ));
    }
    // "Unable to represent 2000000000 years as months in a signed 32-bit integer".
    if let Some(rest) = m.strip_prefix("Unable to represent ")
        && let Some((value, _)) = rest.split_once(" as ")
    {
        return Some(format!(
            "interval field value out of range: {}",
            shown(value)
        ));
    }
    // "Cannot cast timestamp value 9223372037 to timestamp: converted value exceeds the
    // representable i64 range".
    if m.starts_with("Cannot cast timestamp value ") && m.contains("representable i64 range") {
        return Some(
            "timestamp out of range: this function's timestamps (nanoseconds since 1970 \
             in 64 bits) run from 1677-09-21 to 2262-04-11"
                .into(),
        );
    }
    // "Cannot cast string 'a' to value of Int64 type", "Cannot cast value 'x' to value
    // of Boolean type", "Invalid input syntax for type interval: \"x\"": PostgreSQL's
    // invalid input, the value quoted in part.
    for prefix in ["Cannot cast string '", "Cannot cast value '"] {
        if let Some(rest) = m.strip_prefix(prefix)
            && let Some((value, ty)) = rest.rsplit_once("' to value of ")
        {
            let ty = ty.strip_suffix(" type").unwrap_or(ty);
            return Some(format!(
                "invalid input syntax for type {}: {}",
                pg_type_names(ty),
                shown(value)
            ));
        }
    }
    if let Some(value) = m.strip_prefix("Invalid input syntax for type interval: ") {
        return Some(format!(
            "invalid input syntax for type interval: {}",
            shown(value.trim_matches('"'))
        ));
    }
    // A map function given something else ("Expected a Map type, got Int64.").
    if let Some((_, ty)) = m.split_once("Expected a Map type, got ") {
        return Some(format!(
            "expected a map, not {}",
            pg_type_names(ty.trim_end_matches('.'))
        ));
    }
    // Arrow's own refusal past its 32-bit offsets ("Offset overflow error: 2160000000").
    if m.starts_with("Offset overflow error") {
        return Some(TOO_LARGE.into());
    }
    // PostgreSQL's words for planner refusals DataFusion words its own way.
    if m.starts_with("Too many columns! The subquery should only return one column") {
        return Some("subquery must return only one column".into());
    }
    // Two result columns of one name inside a query (`SELECT *, *`, `SELECT t.*, t.*`
    // in a subquery): PostgreSQL returns both; DataFusion needs one name per column.
    if let Some(rest) =
        m.strip_prefix("Projections require unique expression names but the expression \"")
        && let Some((expr, rest)) = rest.split_once("\" at position ")
        && let Some((first, rest)) = rest.split_once(" and ")
        && let Some((_, rest)) = rest.split_once("\" at position ")
        && let Some(second) = rest.split(' ').next()
        && let (Ok(first), Ok(second)) = (first.parse::<usize>(), second.parse::<usize>())
    {
        let column = expr.rsplit('.').next().unwrap_or(expr);
        return Some(format!(
            "column \"{column}\" is selected twice (result columns {} and {}); \
             Tarn needs one name per result column: give one an alias (AS)",
            first + 1,
            second + 1
        ));
    }
    if let Some(field) = m.strip_prefix("Schema contains duplicate qualified field name ") {
        // "ws.t.id": the relation named twice is the part before the column.
        let parts: Vec<&str> = field.trim().split('.').collect();
        let table = parts.len().checked_sub(2).map_or(field, |i| parts[i]);
        return Some(format!(
            "table name \"{table}\" specified more than once (give each an alias)"
        ));
    }
    if let Some(rest) = m.strip_prefix("Can't cast value ")
        && let Some((_, ty)) = rest.split_once(" to type ")
    {
        return Some(format!("{} out of range", pg_type_names(ty.trim())));
    }
    if let Some(rest) = m.strip_prefix("Unsupported CAST from ")
        && let Some((from, to)) = rest.split_once(" to ")
    {
        return Some(format!(
            "cannot cast type {} to {}",
            pg_type_names(from.trim()),
            pg_type_names(to.trim())
        ));
    }
    if let Some(rest) = m.strip_prefix("Cannot get result type for temporal operation ") {
        let operation = rest.split(": ").next().unwrap_or(rest);
        return Some(format!(
            "operator does not exist: {}",
            pg_type_names(operation)
        ));
    }
    // generate_series/range with a zero step, as PostgreSQL says it (DataFusion's table
    // and scalar forms word it two ways of their own).
    if m.starts_with("Step cannot be zero") || m.starts_with("step can't be 0 for function") {
        return Some("step size cannot equal zero".into());
    }
    // A type DataFusion does not plan (`money`, `xml`, `interval day`, `double(10)`).
    if let Some(ty) = m.strip_prefix("Unsupported SQL type ") {
        let ty = ty
            .strip_prefix("(precision/scale not supported) ")
            .unwrap_or(ty)
            .to_lowercase();
        return Some(format!(
            "type {} is not supported",
            tarn_catalog::shown(&ty)
        ));
    }
    // Syntax DataFusion does not plan, said without its syntax tree.
    if let Some(node) = m.strip_prefix("Unsupported ast node in sqltorel: ") {
        let what = node.split(['{', '(', ' ']).next().unwrap_or(node);
        return Some(format!("{what} is not supported"));
    }
    // `a.value` where `a` is a column of a scalar type: PostgreSQL's missing column.
    if let Some(rest) = m.strip_prefix("Cannot access field at argument ")
        && let Some((_, rest)) = rest.split_once(": type ")
        && let Some(ty) = rest.strip_suffix(" is not Struct, Map, or Null")
    {
        return Some(format!(
            "a value of type {} has no fields (.name reads a field of a record or map)",
            pg_type_names(ty)
        ));
    }
    if m.starts_with("Dot access not supported for non-string expr") {
        return Some("field access (.name) on this expression is not supported".into());
    }
    if let Some(value) = m.strip_prefix("Unsupported Value '") {
        let what = value.split(['(', '\'']).next().unwrap_or(value);
        return Some(literal_kind(what));
    }
    if let Some(what) = m.strip_suffix(" literals are not supported") {
        return Some(literal_kind(what));
    }
    if let Some(rest) = m.strip_prefix("Inconsistent metadata across values list at row ") {
        let column = rest
            .split("column ")
            .nth(1)
            .and_then(|c| c.split(|ch: char| !ch.is_ascii_digit()).next())
            .and_then(|c| c.parse::<usize>().ok())
            .map_or(String::new(), |c| format!(" {}", c + 1));
        return Some(format!(
            "VALUES rows give column{column} different types (jsonb in one row, text in \
             another): cast every row's value to one type, as in '[]'::jsonb"
        ));
    }
    // `1 -> 'k'`, `j -> 1.5`, `json_length(1)`: the JSON functions' own refusal, which
    // names the function `->` is planned as rather than the operator written.
    if let Some(rest) = m.strip_prefix("Unexpected argument type to '")
        && let Some((name, rest)) = rest.split_once("' at position ")
        && let Some((position, rest)) = rest.split_once(", expected ")
        && let Some((_, got)) = rest.split_once(", got ")
    {
        let got = pg_type_names(got.trim_end_matches('.'));
        let (what, side) = if position == "1" {
            ("a JSON document (jsonb or text)", "left")
        } else {
            ("a key (text) or an array index (integer)", "right")
        };
        return Some(match name {
            "json_get" => format!("-> takes {what} on its {side}, not {got}"),
            "json_as_text" => format!("->> and #>> take {what} on their {side}, not {got}"),
            "json_get_json" => format!("#> takes {what} on its {side}, not {got}"),
            _ => format!("{name}() takes {what} as argument {position}, not {got}"),
        });
    }
    if let Some(rest) = m.strip_prefix("Fail to find the coerced type, errors: ") {
        return Some(format!(
            "the arguments have no common type: {}",
            clean_message(rest)
        ));
    }
    None
}

/// "… literals are not supported" for a kind of literal sqlparser reads and DataFusion
/// does not plan, named as it is written.
fn literal_kind(what: &str) -> String {
    match what {
        "SingleQuotedByteStringLiteral" | "DoubleQuotedByteStringLiteral" => {
            "bit-string literals (B'…') are not supported; write an integer, or bytea as \
             '\\x…'"
                .into()
        }
        "UnicodeStringLiteral" => "Unicode escape strings (U&'…') are not supported; write \
                                   the characters, or E'\\u0061' escapes"
            .into(),
        "NationalStringLiteral" => {
            "national character strings (N'…') are not supported; write '…'".into()
        }
        other => format!("{other} literals are not supported"),
    }
}

/// `msg` with Arrow's type names (`List(Float32)`, `Utf8`, `Decimal128(10, 2)`,
/// `Struct("a": Int64)`) as PostgreSQL's (`real[]`, `text`, `numeric(10,2)`, `record`).
pub(crate) fn pg_type_names(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    let mut rest = msg;
    while !rest.is_empty() {
        let boundary = out
            .chars()
            .last()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        if boundary && let Some((pg, len)) = arrow_type(rest) {
            out.push_str(&pg);
            rest = &rest[len..];
            continue;
        }
        let Some(c) = rest.chars().next() else { break };
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// The Arrow type named at the start of `s` (a name, and its parenthesized parameters
/// if it has any): PostgreSQL's name for it and the bytes it takes.
fn arrow_type(s: &str) -> Option<(String, usize)> {
    let name_len = s
        .find(|c: char| !c.is_ascii_alphanumeric())
        .unwrap_or(s.len());
    let name = &s[..name_len];
    // Its parameters, parentheses balanced.
    let (params, len) = if s[name_len..].starts_with('(') {
        let mut depth = 0usize;
        let mut end = None;
        for (i, c) in s[name_len..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(name_len + i);
                        break;
                    }
                }
                _ => {}
            }
        }
        let end = end?;
        (Some(&s[name_len + 1..end]), end + 1)
    } else {
        (None, name_len)
    };
    let pg: String = match (name, params) {
        // A value's debug form (`Int64(1)`, `Utf8("a")`, `Boolean(true)`): the value.
        (
            "Int8" | "Int16" | "Int32" | "Int64" | "UInt8" | "UInt16" | "UInt32" | "UInt64"
            | "Float16" | "Float32" | "Float64" | "Boolean",
            Some(p),
        ) => p.to_string(),
        ("Utf8" | "LargeUtf8" | "Utf8View", Some(p)) => match p.strip_prefix('"') {
            Some(q) => format!("'{}'", q.strip_suffix('"').unwrap_or(q)),
            None => p.to_string(),
        },
        ("Decimal32" | "Decimal64" | "Decimal128" | "Decimal256", None) => "numeric".into(),
        ("Int8" | "Int16", None) => "smallint".into(),
        ("Int32", None) => "integer".into(),
        ("Int64" | "UInt8" | "UInt16" | "UInt32", None) => "bigint".into(),
        ("UInt64", None) => "numeric".into(),
        ("Float16" | "Float32", None) => "real".into(),
        ("Float64", None) => "double precision".into(),
        ("Utf8" | "LargeUtf8" | "Utf8View", None) => "text".into(),
        ("Boolean", None) => "boolean".into(),
        ("Binary" | "LargeBinary" | "BinaryView", None) => "bytea".into(),
        ("FixedSizeBinary", Some(_)) => "bytea".into(),
        ("Date32" | "Date64", None) => "date".into(),
        ("Null", None) => "unknown".into(),
        // `numeric` written without a precision is numeric(38,10) inside: said as written.
        ("Decimal128", Some("38, 10")) => "numeric".into(),
        ("Decimal32" | "Decimal64" | "Decimal128" | "Decimal256", Some(p)) => {
            format!("numeric({})", p.replace(' ', ""))
        }
        ("Timestamp", Some(p)) => {
            if p.ends_with("None") || !p.contains(',') {
                "timestamp".into()
            } else {
                "timestamptz".into()
            }
        }
        ("Time32" | "Time64", Some(_)) => "time".into(),
        ("Interval" | "Duration", Some(_)) => "interval".into(),
        ("Struct", Some(_)) | ("Map", Some(_)) => "record".into(),
        // A literal's debug form, `Literal(Utf8("a"), None)`: its type.
        ("Literal", Some(p)) => {
            let inner = p.split(['(', ',']).next().unwrap_or(p).trim();
            arrow_type(inner).map_or_else(|| "a literal".into(), |(t, _)| t)
        }
        ("List" | "LargeList" | "ListView" | "LargeListView" | "FixedSizeList", Some(p)) => {
            // `List(Float32)`, `List(nullable Float32)`, `FixedSizeList(3 x Float32)`,
            // or a field's debug form: the first type named inside.
            let mut inner = None;
            let mut at = 0;
            while at < p.len() {
                let here = &p[at..];
                let starts = at == 0
                    || !p[..at]
                        .chars()
                        .last()
                        .is_some_and(|c| c.is_alphanumeric() || c == '_');
                if starts && let Some((t, _)) = arrow_type(here) {
                    inner = Some(t);
                    break;
                }
                at += here.chars().next().map_or(1, char::len_utf8);
            }
            format!("{}[]", inner?)
        }
        _ => return None,
    };
    Some((pg, len))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool refusal says what the statement was doing, not DataFusion's operator.
    #[test]
    fn memory_refusals_name_what_held_the_memory() {
        let e = from_datafusion(DataFusionError::ResourcesExhausted(
            "Additional allocation failed for PartialHashAggregateStream[0] with top memory \
             consumers (across reservations) as:\n  x#1(can spill: false) consumed 10 B"
                .into(),
        ));
        assert_eq!(
            e.to_string(),
            "query memory limit (query_memory) exceeded: Additional allocation failed for an \
             aggregate's groups"
        );
        for (name, words) in [
            ("ExternalSorter[1]", "a sort"),
            ("HashJoinInput[0]", "a hash join"),
            ("RecursiveQueryHashTable", "a recursive query's rows"),
            // Tarn's own consumers are named in words already.
            ("rows of large values", "rows of large values"),
        ] {
            assert_eq!(
                consumer_in_words(&format!("Additional allocation failed for {name}")),
                format!("Additional allocation failed for {words}")
            );
        }
    }

    #[test]
    fn a_task_that_panicked_past_arrow_offsets_is_the_statements_400() {
        let e = task_panic("task 13 panicked with message \"offset overflow\"");
        assert!(matches!(e, Some(Error::BadRequest(m)) if m.contains("a result is too large")));
        assert!(matches!(
            task_panic("task 2 panicked with message \"boom\""),
            Some(Error::Internal(_))
        ));
        assert!(task_panic("task 2 was cancelled").is_none());
    }

    #[test]
    fn arrows_offset_overflow_is_said_in_tarns_words() {
        assert_eq!(
            clean_message("Offset overflow error: 2160000000"),
            TOO_LARGE
        );
    }

    #[test]
    fn regex_errors_say_what_is_wrong() {
        let m = regex_error("regex parse error:\n    (\n    ^\nerror: unclosed group");
        assert_eq!(m, "invalid regular expression: unclosed group in \"(\"");
    }
}
