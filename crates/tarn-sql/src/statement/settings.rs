//! Session settings: `SET`, `RESET` and `SHOW` of the parameters a session may change
//! (SPEC §5). Today that is `engine.ef_search`, the HNSW search width of the session's
//! later queries.
//!
//! A setting lives as long as the session that set it: each statement is its own
//! transaction, so `SET LOCAL` (which PostgreSQL scopes to a transaction block) would
//! have no effect and is refused rather than silently ignored.

use std::sync::Arc;

use datafusion::arrow::array::StringArray;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::sql::sqlparser::ast::{
    ContextModifier, Expr, Ident, ObjectName, Reset, ResetStatement, Set, Statement, Value,
};

use crate::error::{Result, bad};
use crate::statement::result::StatementResult;

/// The setting `SET engine.ef_search = n` changes.
pub const EF_SEARCH: &str = "engine.ef_search";

/// The range of `engine.ef_search` (that of the index option `ef_search`).
pub const EF_SEARCH_RANGE: std::ops::RangeInclusive<usize> = 1..=100_000;

/// What a session has changed with `SET`; `None` means the default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    /// HNSW search width for vector searches (`None`: each index's own `ef_search`).
    pub ef_search: Option<usize>,
}

/// Whether `stmt` is a session command (`SET`, `RESET`, `SHOW`) this module runs.
pub(crate) fn is_session_command(stmt: &Statement) -> bool {
    matches!(
        stmt,
        Statement::Set(_) | Statement::Reset(_) | Statement::ShowVariable { .. }
    )
}

/// Runs the session command `stmt` against `settings`.
pub(crate) fn run(stmt: &Statement, settings: &mut Settings) -> Result<StatementResult> {
    match stmt {
        Statement::Set(Set::SingleAssignment {
            scope,
            hivevar: false,
            variable,
            values,
        }) => {
            match scope {
                None | Some(ContextModifier::Session) => {}
                Some(ContextModifier::Local) => {
                    return bad(
                        "SET LOCAL has no effect: each statement is its own transaction; use SET",
                    );
                }
                Some(ContextModifier::Global) => {
                    return bad("SET GLOBAL is not supported: settings belong to the session");
                }
            }
            let name = parameter_of(variable)?;
            let [value] = values.as_slice() else {
                return bad(format!("SET {name} takes one value"));
            };
            let text = value_text(value).unwrap_or_else(|| value.to_string());
            let value = if text.eq_ignore_ascii_case("default") {
                None
            } else {
                Some(ef_search_value(&text)?)
            };
            settings.ef_search = value;
            Ok(StatementResult::none(0))
        }
        Statement::Reset(ResetStatement { reset }) => {
            match reset {
                Reset::ALL => *settings = Settings::default(),
                Reset::ConfigurationParameter(name) => {
                    parameter_of(name)?;
                    settings.ef_search = None;
                }
            }
            Ok(StatementResult::none(0))
        }
        Statement::ShowVariable { variable } => {
            let name = parameter(&variable.iter().collect::<Vec<_>>())?;
            let value = settings
                .ef_search
                .map_or_else(|| "default".to_string(), |n| n.to_string());
            let schema = Arc::new(Schema::new(vec![Field::new(name, DataType::Utf8, false)]));
            let batch = RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(StringArray::from(vec![value]))],
            )?;
            Ok(StatementResult {
                columns: vec![name.to_string()],
                schema,
                batches: Some(vec![batch]),
                rows_affected: 0,
                notices: Vec::new(),
            })
        }
        _ => bad("this form of SET is not supported: SET engine.ef_search = n"),
    }
}

fn parameter_of(name: &ObjectName) -> Result<&'static str> {
    parameter(
        &name
            .0
            .iter()
            .filter_map(|p| p.as_ident())
            .collect::<Vec<_>>(),
    )
}

/// The known parameter `parts` names (case-insensitive, as in PostgreSQL), or 400
/// `unrecognized configuration parameter`.
fn parameter(parts: &[&Ident]) -> Result<&'static str> {
    let name = parts
        .iter()
        .map(|p| p.value.to_lowercase())
        .collect::<Vec<_>>()
        .join(".");
    if name == EF_SEARCH {
        Ok(EF_SEARCH)
    } else {
        bad(format!("unrecognized configuration parameter \"{name}\""))
    }
}

/// A SET value as text: a number, a string, or an identifier such as `DEFAULT`.
fn value_text(e: &Expr) -> Option<String> {
    match e {
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) => Some(n.clone()),
            Value::SingleQuotedString(s) => Some(s.clone()),
            _ => None,
        },
        Expr::Identifier(id) => Some(id.value.clone()),
        _ => None,
    }
}

fn ef_search_value(text: &str) -> Result<usize> {
    match text.trim().parse::<usize>() {
        Ok(n) if EF_SEARCH_RANGE.contains(&n) => Ok(n),
        _ => bad(format!(
            "invalid value for parameter \"{EF_SEARCH}\": \"{text}\" (an integer from {} to {})",
            EF_SEARCH_RANGE.start(),
            EF_SEARCH_RANGE.end()
        )),
    }
}
