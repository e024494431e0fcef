//! `tarn demo`: a newcomer's first five minutes (SPEC §9). Loads the CISI abstracts
//! shipped in the repository, with their MiniLM embeddings, into workspace `demo`,
//! builds an HNSW and a BM25 index with a progress bar, then runs each kind of search —
//! BM25, "more like this", hybrid with each side's score, filtered — printing the SQL,
//! the rows and the time each took. A second run finds the data and indexes in place.

use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};
use tarn::{BuildProgress, Session};

use crate::{ensure_workspace, format_table};

const CORPUS: &str = include_str!("../../../data/cisi/corpus.jsonl");
const EMBEDDINGS: &[u8] = include_bytes!("../../../data/cisi/corpus_emb.f32");
const QUERIES: &str = include_str!("../../../data/cisi/queries.jsonl");
const QUERY_EMBEDDINGS: &[u8] = include_bytes!("../../../data/cisi/queries_emb.f32");
const DIM: usize = 384;
const WS: &str = "demo";

/// The progress bar of the index build under way, fed by [`index_progress`].
static BAR: Mutex<Option<ProgressBar>> = Mutex::new(None);

fn bar() -> MutexGuard<'static, Option<ProgressBar>> {
    // A panic while drawing leaves nothing half-updated worth refusing.
    BAR.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The host callback of index builds (`Options::on_index_progress`): moves the demo's
/// bar when one is shown, does nothing otherwise.
pub fn index_progress(p: BuildProgress) {
    if let Some(bar) = bar().as_ref() {
        bar.set_length(p.rows as u64);
        bar.set_position(p.rows_done as u64);
        if p.segments > 1 {
            bar.set_message(format!("segment {} of {}", p.segments_done + 1, p.segments));
        }
    }
}

fn parse_err(e: impl std::fmt::Display) -> tarn::Error {
    tarn::Error::new(tarn::ErrorKind::Internal, e.to_string())
}

/// Row `i` of a shipped `n × 384` little-endian float32 file.
fn embedding(data: &[u8], i: usize) -> Vec<f32> {
    data[i * DIM * 4..(i + 1) * DIM * 4]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// `(id, text)` of each line of a shipped `.jsonl` file.
fn lines(text: &str) -> tarn::Result<Vec<(i64, String)>> {
    text.lines()
        .map(|line| {
            let doc: Value = serde_json::from_str(line).map_err(parse_err)?;
            let id = doc["id"].as_str().and_then(|s| s.parse().ok());
            let text = doc["text"].as_str();
            match (id, text) {
                (Some(id), Some(text)) => Ok((id, text.to_string())),
                _ => Err(parse_err(format!("a CISI line without id or text: {line}"))),
            }
        })
        .collect()
}

/// Prints `sql`, runs it and prints its rows as an aligned table with the time taken.
async fn show(s: &Session, title: &str, sql: &str, params: &[Value]) -> tarn::Result<()> {
    println!("\n── {title}\n{sql}");
    let r = s.query(WS, sql, params).await?;
    if let Some(rows) = &r.rows {
        print!("{}", format_table(&r.columns, rows));
    }
    let plural = if r.row_count == 1 { "" } else { "s" };
    println!(
        "({} row{plural}, {:.1} ms)",
        r.row_count, r.execution_time_ms
    );
    Ok(())
}

/// Loads the corpus unless a previous run did: returns whether it loaded.
async fn load(s: &Session) -> tarn::Result<bool> {
    let docs = lines(CORPUS)?;
    let count = r#"SELECT count(*) AS n FROM "demo"."docs""#;
    if let Ok(r) = s.query(WS, count, &[]).await
        && r.rows
            .as_ref()
            .and_then(|rows| rows.first()?.first()?.as_u64())
            == Some(docs.len() as u64)
    {
        return Ok(false);
    }
    s.query(WS, r#"DROP TABLE IF EXISTS "demo"."docs""#, &[])
        .await?;
    let create = r#"CREATE TABLE "demo"."docs" (
  id BIGINT PRIMARY KEY,
  title TEXT NOT NULL,
  body TEXT,
  embedding FLOAT4[384]
) USING engine"#;
    println!("{create}");
    s.query(WS, create, &[]).await?;
    let batch: Vec<Vec<Value>> = docs
        .iter()
        .enumerate()
        .map(|(i, (id, text))| {
            let title: String = text
                .lines()
                .next()
                .unwrap_or(text)
                .chars()
                .take(80)
                .collect();
            vec![
                json!(id),
                json!(title),
                json!(text),
                json!(embedding(EMBEDDINGS, i)),
            ]
        })
        .collect();
    let insert = r#"INSERT INTO "demo"."docs" VALUES ($1, $2, $3, $4::float4[])"#;
    let loaded = s.query_batch(WS, insert, &batch).await?;
    println!(
        "{insert}\n  loaded {} CISI abstracts with their 384-dimensional MiniLM embeddings \
         in {:.0} ms (one atomic batch)",
        loaded.rows_affected, loaded.execution_time_ms
    );
    // Seal the rows into a segment file, so the indexes below are built over it now
    // (rows still in memory are searched exactly, without an index).
    let vacuum = r#"VACUUM "demo"."docs""#;
    let started = Instant::now();
    s.query(WS, vacuum, &[]).await?;
    println!(
        "{vacuum}\n  sealed into a segment in {:.0} ms",
        started.elapsed().as_secs_f64() * 1e3
    );
    Ok(true)
}

/// Runs a `CREATE INDEX`, drawing the build's progress.
async fn create_index(s: &Session, sql: &str, label: &str) -> tarn::Result<()> {
    println!("{sql}");
    let progress = ProgressBar::new(0).with_style(
        ProgressStyle::with_template("  {prefix:<5} [{bar:40}] {pos}/{len} rows {msg}")
            .map_err(parse_err)?
            .progress_chars("=> "),
    );
    progress.set_prefix(label.to_string());
    *bar() = Some(progress.clone());
    let started = Instant::now();
    let result = s.query(WS, sql, &[]).await;
    bar().take();
    progress.finish_and_clear();
    result?;
    println!(
        "  {label} index ready in {:.0} ms",
        started.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}

/// Builds the demo workspace and runs each kind of search over it.
pub async fn run(s: &Session, dir: &Path) -> tarn::Result<()> {
    let started = Instant::now();
    ensure_workspace(s, WS).await?;
    if !load(s).await? {
        println!("\"demo\".\"docs\" is already loaded (a previous run): reusing it");
    }
    create_index(
        s,
        r#"CREATE INDEX IF NOT EXISTS docs_embedding ON "demo"."docs" USING engine_index (embedding)"#,
        "HNSW",
    )
    .await?;
    create_index(
        s,
        r#"CREATE INDEX IF NOT EXISTS docs_body ON "demo"."docs" USING engine_index (body) WITH (index_type = 'bm25')"#,
        "BM25",
    )
    .await?;

    show(
        s,
        "BM25: `text <#> 'query'` is the BM25 score (0 when no word matches)",
        r#"SELECT id, title, body <#> 'retrieval of "scientific information" -medical' AS score
FROM "demo"."docs"
ORDER BY score DESC
LIMIT 5"#,
        &[],
    )
    .await?;

    show(
        s,
        "More like this: a stored row's embedding as the query (cosine, higher is closer)",
        r#"SELECT id, title, embedding <#> (SELECT embedding FROM "demo"."docs" WHERE id = 1) AS score
FROM "demo"."docs"
WHERE id <> 1
ORDER BY score DESC
LIMIT 5"#,
        &[],
    )
    .await?;

    // A judged CISI query, with the MiniLM embedding of its text computed offline (Tarn
    // stores and searches vectors; it does not compute them).
    let queries = lines(QUERIES)?;
    let (qid, text) = &queries[2];
    let vector = embedding(QUERY_EMBEDDINGS, 2);
    let text: String = text
        .split_whitespace()
        .take(12)
        .collect::<Vec<_>>()
        .join(" ");
    println!("\n$1 = the MiniLM embedding of CISI query {qid}, $2 = its text: {text:?}");
    show(
        s,
        "Hybrid: BM25 and vector scores, each min-max normalized over the candidates, fused 0.5/0.5",
        r#"SELECT id, title,
       scores.vector AS vector, scores.text AS bm25, scores.fused AS fused
FROM (
  SELECT id, title,
         (embedding, body) <#> engine_hybrid_scores($1::float4[], $2) AS scores
  FROM "demo"."docs"
  ORDER BY (embedding, body) <#> engine_hybrid_record($1::float4[], $2) DESC
  LIMIT 5
)
ORDER BY fused DESC"#,
        &[json!(vector), json!(text)],
    )
    .await?;

    show(
        s,
        "Filtered: only rows passing WHERE; still the 5 best of them",
        r#"SELECT id, title, embedding <#> $1::float4[] AS score
FROM "demo"."docs"
WHERE body ILIKE '%catalog%'
ORDER BY score DESC
LIMIT 5"#,
        &[json!(vector)],
    )
    .await?;

    let explain = r#"EXPLAIN SELECT id FROM "demo"."docs"
ORDER BY (embedding, body) <#> engine_hybrid_record($1::float4[], $2, 0.7, 0.3, 'rrf') DESC
LIMIT 10"#;
    println!("\n── EXPLAIN names the indexes and the fusion a search uses\n{explain}");
    let plan = s.query(WS, explain, &[json!(vector), json!(text)]).await?;
    for row in plan.rows.iter().flatten() {
        if let [Value::String(kind), Value::String(plan)] = row.as_slice()
            && kind == "physical_plan"
        {
            for line in plan.lines() {
                println!("  {line}");
            }
        }
    }

    let dir = dir.display();
    println!(
        "\nDemo done in {:.1} s. The data stays in {dir}; go on from here with\n  \
         tarn --data {dir} sql -w demo \"SELECT id, title, body <#> 'library' AS score \
         FROM demo.docs ORDER BY score DESC LIMIT 3\"\n  \
         tarn --data {dir} sql -w demo -     (statements from standard input, each ending in ;)\n  \
         tarn --data {dir} tables -w demo docs",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
