//! Search quality on real data (issue 9, item 5): the CISI collection shipped in
//! `data/cisi` — 1460 library-science abstracts with MiniLM embeddings, 76 judged
//! queries — is loaded through SQL, indexed with HNSW and BM25, and every judged query
//! is run through `<#>` as BM25, as vector search and as each hybrid fusion. The test
//! prints nDCG@10 for each, checks BM25 and exact cosine against the collection's
//! reference figures (`data/cisi/README.md`), and asserts that the default hybrid beats
//! both arms alone.

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};
use tarn::{Session, Tarn};
use tarn_tests::fixture;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const DIM: usize = 384;

fn data(name: &str) -> Vec<u8> {
    let path = format!("{}/../data/cisi/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `(id, text)` of each line of a CISI `.jsonl` file.
fn lines(name: &str) -> Vec<(i64, String)> {
    String::from_utf8(data(name))
        .expect("utf-8")
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("json line");
            let id = v["id"].as_str().and_then(|s| s.parse().ok()).expect("id");
            (id, v["text"].as_str().expect("text").to_string())
        })
        .collect()
}

/// Row `i` of a `n × 384` little-endian float32 file.
fn embeddings(name: &str) -> Vec<Vec<f32>> {
    data(name)
        .chunks_exact(DIM * 4)
        .map(|row| {
            row.chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect()
        })
        .collect()
}

/// nDCG@10 with binary relevance.
fn ndcg10(ranked: &[i64], relevant: &HashSet<i64>) -> f64 {
    let dcg: f64 = ranked
        .iter()
        .take(10)
        .enumerate()
        .filter(|(_, id)| relevant.contains(id))
        .map(|(i, _)| 1.0 / (i as f64 + 2.0).log2())
        .sum();
    let ideal: f64 = (0..relevant.len().min(10))
        .map(|i| 1.0 / (i as f64 + 2.0).log2())
        .sum();
    if ideal == 0.0 { 0.0 } else { dcg / ideal }
}

async fn ids(s: &Session, sql: &str, params: &[Value]) -> Result<Vec<i64>, tarn::Error> {
    let rows = s.query("ws", sql, params).await?.rows.unwrap_or_default();
    Ok(rows
        .iter()
        .map(|r| r[0].as_i64().expect("integer id"))
        .collect())
}

#[tokio::test]
async fn cisi_ndcg_hybrid_beats_bm25_and_vector() -> TestResult {
    let docs = lines("corpus.jsonl");
    let doc_emb = embeddings("corpus_emb.f32");
    let queries = lines("queries.jsonl");
    let query_emb = embeddings("queries_emb.f32");
    assert_eq!((docs.len(), doc_emb.len()), (1460, 1460));
    assert_eq!((queries.len(), query_emb.len()), (76, 76));
    let mut qrels: HashMap<i64, HashSet<i64>> = HashMap::new();
    for line in String::from_utf8(data("qrels.tsv"))?.lines() {
        let mut f = line.split('\t');
        let (q, d) = (f.next(), f.next());
        let (Some(q), Some(d)) = (q, d) else {
            panic!("qrels line {line:?}")
        };
        qrels.entry(q.parse()?).or_default().insert(d.parse()?);
    }

    let tarn = Tarn::in_memory().await?;
    let s = fixture(&tarn).await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."cisi" (id BIGINT PRIMARY KEY, body TEXT, e FLOAT4[384]) USING engine"#,
        &[],
    )
    .await?;
    s.query(
        "ws",
        r#"CREATE INDEX cisi_e ON "ws"."cisi" USING engine_index (e)"#,
        &[],
    )
    .await?;
    s.query(
        "ws",
        r#"CREATE INDEX cisi_body ON "ws"."cisi" USING engine_index (body) WITH (index_type = 'bm25')"#,
        &[],
    )
    .await?;
    let batch: Vec<Vec<Value>> = docs
        .iter()
        .zip(&doc_emb)
        .map(|((id, text), e)| vec![json!(id), json!(text), json!(e)])
        .collect();
    s.query_batch(
        "ws",
        r#"INSERT INTO "ws"."cisi" VALUES ($1, $2, $3::float4[])"#,
        &batch,
    )
    .await?;
    // Seal the rows into a segment and build both indexes on it, so the searches below
    // go through the HNSW graph and the tantivy postings, not the exact memtable path.
    s.query("ws", r#"VACUUM "ws"."cisi""#, &[]).await?;
    let plan = format!(
        "{:?}",
        s.query(
            "ws",
            r#"EXPLAIN SELECT id FROM "ws"."cisi" ORDER BY (e, body) <#> engine_hybrid_record($1::float4[], $2) DESC LIMIT 10"#,
            &[json!(query_emb[0]), json!(queries[0].1)],
        )
        .await?
        .rows
    );
    assert!(
        plan.contains("cisi_e") && plan.contains("cisi_body (bm25)"),
        "{plan}"
    );

    let runs: [(&str, String); 6] = [
        (
            "BM25 (en_stem)",
            r#"SELECT id FROM "ws"."cisi" ORDER BY body <#> $2 DESC LIMIT 10"#.into(),
        ),
        (
            "vector (cosine, HNSW)",
            r#"SELECT id FROM "ws"."cisi" ORDER BY e <#> $1::float4[] DESC LIMIT 10"#.into(),
        ),
        ("hybrid minmax 0.5/0.5 (default)", hybrid("")),
        ("hybrid minmax 0.7/0.3", hybrid(", 0.7, 0.3")),
        ("hybrid softmax 0.5/0.5", hybrid(", 0.5, 0.5, 'softmax'")),
        ("hybrid rrf", hybrid(", 0.5, 0.5, 'rrf'")),
    ];
    let mut means = Vec::new();
    for (name, sql) in &runs {
        let mut total = 0.0;
        for ((qid, text), e) in queries.iter().zip(&query_emb) {
            // The parameters the statement takes ($1 the vector, $2 the text).
            let params = if sql.contains("$2") {
                vec![json!(e), json!(text)]
            } else {
                vec![json!(e)]
            };
            let ranked = ids(&s, sql, &params).await?;
            assert_eq!(ranked.len(), 10, "{name}, query {qid}");
            total += ndcg10(&ranked, &qrels[qid]);
        }
        means.push(total / queries.len() as f64);
    }
    println!("nDCG@10 over the {} judged CISI queries:", queries.len());
    for ((name, _), m) in runs.iter().zip(&means) {
        println!("  {name:<34} {m:.3}");
    }
    // The collection's reference figures (BM25 by tantivy itself, exact cosine, and the
    // hybrid runs computed outside Tarn); a faithful BM25 and cosine land within 0.01.
    let reference = [0.332, 0.421, 0.434, 0.453, 0.368, 0.435];
    for (((name, _), m), r) in runs.iter().zip(&means).zip(reference) {
        assert!(
            (m - r).abs() <= 0.01,
            "{name}: nDCG@10 {m:.3}, reference {r:.3}"
        );
    }
    assert!(
        means[2] > means[0] && means[2] > means[1],
        "the default hybrid ({:.3}) must beat BM25 ({:.3}) and vector ({:.3})",
        means[2],
        means[0],
        means[1]
    );
    Ok(())
}

fn hybrid(args: &str) -> String {
    format!(
        r#"SELECT id FROM "ws"."cisi" ORDER BY (e, body) <#> engine_hybrid_record($1::float4[], $2{args}) DESC LIMIT 10"#
    )
}
