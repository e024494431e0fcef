//! The data model of Tarn: users, API keys, organizations, members, workspaces,
//! tables, columns and indexes, plus the rules their ids follow.
//!
//! This crate does no I/O. [`Catalog`] is a plain in-memory structure changed only
//! through [`CatalogOp`]s; `tarn-storage` logs every op in the write-ahead log before
//! applying it, so replaying the log rebuilds exactly the same catalog.

mod catalog;
mod files;
mod ops;
mod schema;
mod tenancy;
mod time;
mod types;
mod views;

pub use catalog::{Catalog, CatalogSnapshot, encoded_len};
pub use files::FileRecord;
pub use ops::{CatalogOp, Removed};
pub use schema::{ColumnDef, ColumnDefault, IndexDef, IndexType, TableDef};
pub use tenancy::{ApiKeyRecord, MemberRecord, OrgRecord, Role, UserRecord, WorkspaceRecord};
pub use time::Timestamp;
pub use types::SqlType;
pub use views::{ViewColumn, ViewDef, ViewId};

/// Internal, immutable id of a table. Names are attributes; ids never change or get reused.
pub type TableId = u64;
/// Internal, immutable id of a column within its table.
pub type ColumnId = u32;
/// Internal, immutable id of an index. Names are attributes; ids never change or get reused.
pub type IndexId = u64;

/// Errors of catalog validation and application.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An id does not follow the id rules.
    #[error("{0}")]
    InvalidId(String),
    /// Something that must not exist already exists.
    #[error("{0}")]
    AlreadyExists(String),
    /// Something that must exist does not.
    #[error("{0}")]
    NotFound(String),
    /// An op does not fit the catalog it is applied to (a replay bug or corruption).
    #[error("inconsistent catalog op: {0}")]
    Inconsistent(String),
}

/// Result of catalog operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `value` as an error message quotes it: whole when short, else its first 64
/// characters and its length (a 50 MB id must not come back as a 50 MB message). Inside
/// the double quotes, `"` and `\` are escaped with a backslash, and a line break, tab,
/// other control character or [hidden control](is_hidden_control) is written as in a
/// PostgreSQL escape string (`\n`, `\t`, `\x1B`, `\u202E`, `\U000E0041`), so that
/// no message can carry a terminal escape sequence or reorder what it says.
pub fn shown(value: &str) -> String {
    const MAX: usize = 64;
    let (head, cut) = match value.char_indices().nth(MAX) {
        None => (value, false),
        Some((at, _)) => (&value[..at], true),
    };
    let mut out = String::with_capacity(head.len() + 2);
    out.push('"');
    for c in head.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x80 && c.is_control() => {
                out.push_str(&format!("\\x{:02X}", c as u32));
            }
            c if is_hidden_control(c) => {
                if (c as u32) <= 0xFFFF {
                    out.push_str(&format!("\\u{:04X}", c as u32));
                } else {
                    out.push_str(&format!("\\U{:08X}", c as u32));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    if cut {
        out.push_str(&format!("… ({} bytes)", value.len()));
    }
    out
}

/// Whether `c` may not appear in a name or label shown to people: control characters,
/// line and paragraph separators (a name on two lines forges log and listing lines),
/// every bidirectional control (Unicode's Bidi_Control: they can reorder what a name
/// seems to say, its extension for one), and invisible format characters (a zero-width
/// space, word joiner, byte order mark, soft hyphen or annotation mark makes two names
/// that look the same), the invisible tag characters (U+E0000–U+E007F: any ASCII
/// text can ride invisibly in a name in them; only subdivision flag emoji use them) and
/// supplementary variation selectors (U+E0100–U+E01EF, which can carry bytes the same
/// way), the combining grapheme joiner, the Hangul fillers (blank-looking names) and
/// the invisible musical format characters.
/// The zero-width joiner and non-joiner stay: scripts and emoji sequences need them.
pub fn is_hidden_control(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{061C}'
                | '\u{200B}'
                | '\u{200E}'
                | '\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{2069}'
                | '\u{FEFF}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{180E}'
                | '\u{206A}'..='\u{206F}'
                | '\u{E0000}'..='\u{E007F}'
                | '\u{E0100}'..='\u{E01EF}'
                | '\u{034F}'
                | '\u{115F}'
                | '\u{1160}'
                | '\u{3164}'
                | '\u{FFA0}'
                | '\u{1D173}'..='\u{1D17A}'
        )
}

/// Checks an organization or workspace id: 1–63 characters of `[a-z0-9_-]`, starting
/// with a letter or digit. `what` names the id in the message.
pub fn validate_id(what: &str, id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 63
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        && id
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidId(format!(
            "invalid {what} id {}: use 1-63 characters of a-z, 0-9, '_' and '-', starting with a letter or digit",
            shown(id)
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_rules() {
        for ok in ["a", "docs", "0abc", "a-b_c", &"x".repeat(63)] {
            assert!(validate_id("workspace", ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", "_a", "Abc", "a b", "a.b", "é", &"x".repeat(64)] {
            let err = validate_id("workspace", bad).unwrap_err().to_string();
            assert!(err.starts_with("invalid workspace id"), "{err}");
        }
    }
}
