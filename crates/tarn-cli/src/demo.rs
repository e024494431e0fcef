//! `tarn demo`: loads the CISI abstracts (shipped in the repository, with their MiniLM
//! embeddings) into an engine table and runs a few queries over them.

use serde_json::{Value, json};
use tarn::Session;

use crate::{ensure_workspace, format_table};

const CORPUS: &str = include_str!("../../../data/cisi/corpus.jsonl");
const EMBEDDINGS: &[u8] = include_bytes!("../../../data/cisi/corpus_emb.f32");
const DIM: usize = 384;
const WS: &str = "demo";

fn embedding(i: usize) -> Vec<f32> {
    EMBEDDINGS[i * DIM * 4..(i + 1) * DIM * 4]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

async fn show(s: &Session, title: &str, sql: &str, params: &[Value]) -> tarn::Result<()> {
    println!("\n-- {title}\n{sql}");
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

/// Builds the demo workspace and prints query results.
pub async fn run(s: &Session) -> tarn::Result<()> {
    ensure_workspace(s, WS).await?;
    s.query(WS, r#"DROP TABLE IF EXISTS "demo"."docs""#, &[])
        .await?;
    s.query(
        WS,
        r#"CREATE TABLE "demo"."docs" (
             id BIGINT PRIMARY KEY,
             title TEXT NOT NULL,
             body TEXT,
             embedding FLOAT4[384],
             added_at TIMESTAMPTZ DEFAULT NOW()
           ) USING engine"#,
        &[],
    )
    .await?;
    let mut batch = Vec::new();
    for (i, line) in CORPUS.lines().enumerate() {
        let doc: Value = serde_json::from_str(line)
            .map_err(|e| tarn::Error::new(tarn::ErrorKind::Internal, e.to_string()))?;
        let text = doc["text"].as_str().unwrap_or_default();
        let title = text
            .lines()
            .next()
            .unwrap_or(text)
            .chars()
            .take(80)
            .collect::<String>();
        let id: i64 = doc["id"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or(i as i64 + 1);
        batch.push(vec![
            json!(id),
            json!(title),
            json!(text),
            json!(embedding(i)),
        ]);
    }
    let loaded = s
        .query_batch(
            WS,
            r#"INSERT INTO "demo"."docs" (id, title, body, embedding) VALUES ($1, $2, $3, $4)"#,
            &batch,
        )
        .await?;
    println!(
        "loaded {} CISI abstracts with 384-dimensional embeddings in {:.0} ms (one atomic batch)",
        loaded.rows_affected, loaded.execution_time_ms
    );
    show(
        s,
        "how big is it",
        r#"SELECT count(*), avg(length(body)) AS avg_chars FROM "demo"."docs""#,
        &[],
    )
    .await?;
    show(
        s,
        "keyword filter with a parameter",
        r#"SELECT id, title FROM "demo"."docs" WHERE body ILIKE $1 ORDER BY id LIMIT 5"#,
        &[json!("%information retrieval%")],
    )
    .await?;
    show(
        s,
        "aggregation",
        r#"SELECT length(body) / 500 * 500 AS chars_bucket, count(*) FROM "demo"."docs" GROUP BY 1 ORDER BY 1"#,
        &[],
    )
    .await?;
    show(
        s,
        "UPDATE … RETURNING",
        r#"UPDATE "demo"."docs" SET title = upper(title) WHERE id = $1 RETURNING id, title"#,
        &[json!(1)],
    )
    .await?;
    let details = s.table(WS, "docs").await?;
    println!(
        "\n\"demo\".\"docs\": {} rows, {:.1} MB, columns: {}",
        details.row_count,
        details.size_mb,
        details
            .columns
            .iter()
            .map(|c| format!("{} {}", c.name, c.data_type))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("\nVector, BM25 and hybrid search (`<#>`) come with the search issues.");
    Ok(())
}
