//! Helpers shared by Tarn's integration tests: a fresh database with a user, an
//! organization and workspaces, reached only through the public API.

use tarn::{Session, Tarn};

/// A database with user `test@example.com`, organization `test` and workspaces `ws`
/// and `other`, and the session scoped to `test`.
pub async fn fixture(tarn: &Tarn) -> tarn::Result<Session> {
    let user = tarn.create_user("test@example.com", "Test").await?;
    let key = tarn.create_api_key(&user.id, "tests").await?;
    let s = tarn.connect(&key.secret).await?;
    s.create_organization("test", "Test").await?;
    let s = s.with_org("test");
    s.create_workspace("ws", "Workspace").await?;
    s.create_workspace("other", "Other").await?;
    Ok(s)
}

/// How a JSON result value is written in `.slt` files: NULL, text as is, `(empty)` for
/// the empty string, anything else as JSON.
pub fn slt_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => "NULL".into(),
        serde_json::Value::String(s) if s.is_empty() => "(empty)".into(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
