//! Helpers shared by Tarn's integration tests: a fresh database with a user, an
//! organization and workspaces, reached only through the public API.

use std::sync::Arc;

use tarn::arrow::array::{Float64Array, Int64Array, RecordBatch, StringArray};
use tarn::arrow::datatypes::{DataType, Field, Schema};
use tarn::{Session, Tarn};

/// A database with user `test@example.com`, organization `test` and workspaces `ws`
/// and `other`, and the session scoped to `test`.
pub async fn fixture(tarn: &Tarn) -> tarn::Result<Session> {
    Ok(fixture_with_key(tarn).await?.0)
}

/// [`fixture`], also returning the API key's secret (to reconnect after a reopen).
pub async fn fixture_with_key(tarn: &Tarn) -> tarn::Result<(Session, String)> {
    let user = tarn.create_user("test@example.com", "Test").await?;
    let key = tarn.create_api_key(&user.id, "tests").await?;
    let s = tarn.connect(&key.secret).await?;
    s.create_organization("test", "Test").await?;
    let s = s.with_org("test");
    s.create_workspace("ws", "Workspace").await?;
    s.create_workspace("other", "Other").await?;
    Ok((s, key.secret))
}

/// A session of organization `test` for an existing key (after a reopen).
pub async fn reconnect(tarn: &Tarn, secret: &str) -> tarn::Result<Session> {
    Ok(tarn.connect(secret).await?.with_org("test"))
}

/// Rows `ids` of (id INT8, body TEXT, x FLOAT8) with `body(id)` and `x = id % 1000 / scale`.
pub fn id_body_x_batch(
    ids: std::ops::Range<i64>,
    body: impl Fn(i64) -> String,
    scale: f64,
) -> Result<RecordBatch, tarn::arrow::error::ArrowError> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("body", DataType::Utf8, true),
        Field::new("x", DataType::Float64, true),
    ]));
    let ids: Vec<i64> = ids.collect();
    let bodies: Vec<String> = ids.iter().map(|i| body(*i)).collect();
    let x: Vec<f64> = ids.iter().map(|i| (*i % 1000) as f64 / scale).collect();
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(StringArray::from(bodies)),
            Arc::new(Float64Array::from(x)),
        ],
    )
}

/// A small deterministic generator (xorshift64*) for the randomized tests: fixed seeds,
/// repeatable runs.
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number below `n` (0 for 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64().checked_rem(n).unwrap_or(0)
    }
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
