//! Shared setup for Tarn's benchmarks: fixtures, a seeded generator and the schema of the
//! storage / comparison table `"ws"."t"` (id int8 primary key, body text ~50 B, x float8,
//! meta jsonb).

use std::sync::Arc;

use datafusion::arrow::array::{Float64Array, Int64Array, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use tarn::{Session, Tarn};

/// A user, organization `bench` and workspace `ws`; the session scoped to `bench`.
pub async fn fixture(tarn: &Tarn) -> tarn::Result<Session> {
    Ok(fixture_with_key(tarn).await?.0)
}

/// As [`fixture`], also returning the API key secret so the caller can reconnect after
/// reopening the database (see [`reconnect`]).
pub async fn fixture_with_key(tarn: &Tarn) -> tarn::Result<(Session, String)> {
    let user = tarn.create_user("bench@example.com", "Bench").await?;
    let key = tarn.create_api_key(&user.id, "bench").await?;
    let s = tarn.connect(&key.secret).await?;
    s.create_organization("bench", "Bench").await?;
    let s = s.with_org("bench");
    s.create_workspace("ws", "Bench").await?;
    Ok((s, key.secret))
}

/// The session of [`fixture_with_key`] on a reopened database.
pub async fn reconnect(tarn: &Tarn, secret: &str) -> tarn::Result<Session> {
    Ok(tarn.connect(secret).await?.with_org("bench"))
}

/// The table the storage bench and the engine comparison use.
pub const CREATE_T: &str =
    r#"CREATE TABLE "ws"."t" (id INT8 PRIMARY KEY, body TEXT, x FLOAT8, meta JSONB) USING engine"#;

/// Full scan + aggregate used by the storage bench and the comparison.
pub const GROUP_BY: &str = r#"SELECT id % 100 AS g, count(*), avg(x) FROM "ws"."t" GROUP BY g"#;

/// Primary-key point lookup (one parameter).
pub const POINT_LOOKUP: &str = r#"SELECT * FROM "ws"."t" WHERE id = $1"#;

/// Arrow schema of `"ws"."t"` as the benches write it (jsonb travels as JSON text).
pub fn row_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("body", DataType::Utf8, true),
        Field::new("x", DataType::Float64, true),
        Field::new("meta", DataType::Utf8, true),
    ]))
}

/// SplitMix64: a tiny, fixed-seed, dependency-free generator (not for cryptography).
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`; the modulo bias is irrelevant here).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

const WORDS: [&str; 16] = [
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
    "kilo", "lima", "mike", "november", "oscar", "papa",
];
const TAGS: [&str; 8] = [
    "red", "green", "blue", "cyan", "magenta", "yellow", "black", "white",
];

/// One body text of about 50 bytes.
pub fn body_text(rng: &mut SplitMix64, out: &mut String) {
    out.clear();
    while out.len() < 44 {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
    }
    out.truncate(44);
    out.push_str(&format!(" {:05}", rng.below(100_000)));
}

/// Rows `first_id .. first_id + n` of `"ws"."t"`, values drawn from `rng` (so a fixed
/// seed and the same call sequence give the same data).
pub fn generate(rng: &mut SplitMix64, first_id: i64, n: usize) -> RecordBatch {
    let ids: Vec<i64> = (first_id..first_id + n as i64).collect();
    let mut bodies = StringBuilder::with_capacity(n, n * 50);
    let mut metas = StringBuilder::with_capacity(n, n * 28);
    let mut xs = Vec::with_capacity(n);
    let mut text = String::with_capacity(64);
    for _ in 0..n {
        body_text(rng, &mut text);
        bodies.append_value(&text);
        xs.push((rng.unit() * 1_000_000.0).round() / 1000.0);
        metas.append_value(format!(
            r#"{{"k":{},"tag":"{}"}}"#,
            rng.below(1000),
            TAGS[rng.below(TAGS.len() as u64) as usize]
        ));
    }
    RecordBatch::try_new(
        row_schema(),
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(bodies.finish()),
            Arc::new(Float64Array::from(xs)),
            Arc::new(metas.finish()),
        ],
    )
    .expect("batch matches row_schema")
}
