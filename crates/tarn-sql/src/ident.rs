//! Identifiers as PostgreSQL reads them: unquoted names fold to lower case, object names
//! split into their parts, and relation names quoted back for messages. A leaf: it
//! imports nothing of the crate but its error type.

use datafusion::sql::sqlparser::ast::{Ident, ObjectName};

use crate::error::{Error, Result};

/// Normalizes an identifier as PostgreSQL does: unquoted names fold to lower case.
pub fn normalize(id: &Ident) -> String {
    if id.quote_style.is_some() {
        id.value.clone()
    } else {
        id.value.to_lowercase()
    }
}

/// The parts of an object name, normalized.
pub fn name_parts(name: &ObjectName) -> Result<Vec<String>> {
    name.0
        .iter()
        .map(|p| {
            p.as_ident()
                .map(normalize)
                .ok_or_else(|| Error::BadRequest(format!("invalid name {name}")))
        })
        .collect()
}

/// Display form of a relation name for messages: `"ws"."docs"`.
pub fn quoted(parts: &[String]) -> String {
    parts
        .iter()
        .map(|p| format!("\"{p}\""))
        .collect::<Vec<_>>()
        .join(".")
}
