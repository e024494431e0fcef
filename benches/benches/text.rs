//! BM25 and hybrid search benchmarks of the BM25 + hybrid issue, on the CISI abstracts
//! shipped in `data/cisi` (1460 documents with MiniLM embeddings, 76 queries, cycled).
//! The larger side-by-side figures (100k documents, tantivy's Python bindings, LanceDB,
//! freshness) come from `benches/compare/text.py`; these keep the per-query costs in
//! view between runs.
//!
//! - `cisi_top10/tantivy`: tantivy's own top-10 (`QueryParser`, lenient, `en_stem`) on
//!   an in-memory index of the same texts, linked in: the floor.
//! - `cisi_top10/{bm25,vector,hybrid}`: the same top-10 through SQL on an indexed table
//!   (one segment: HNSW and BM25 files), with the query as a parameter.
//! - `bm25_index_build`: `CREATE INDEX … bm25` over the sealed 1460 rows (throughput in
//!   documents).
//!
//! Run: `cargo bench --bench text` (no `-p`: it would resolve features differently and
//! rebuild DataFusion).

// criterion's macros generate undocumented public functions.
#![allow(missing_docs)]

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};
use tantivy::collector::TopDocs;
use tantivy::query::QueryParser;
use tantivy::schema::{IndexRecordOption, TextFieldIndexing, TextOptions};
use tantivy::{Index, IndexWriter, TantivyDocument};
use tarn::{Options, Session, SyncMode, Tarn};
use tarn_benches::fixture;

const DIM: usize = 384;

fn cisi(name: &str) -> Vec<u8> {
    let path = format!("{}/../data/cisi/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn texts(name: &str) -> Vec<(i64, String)> {
    String::from_utf8(cisi(name))
        .expect("utf-8")
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("json");
            let id = v["id"].as_str().and_then(|s| s.parse().ok()).expect("id");
            (id, v["text"].as_str().expect("text").to_string())
        })
        .collect()
}

fn embeddings(name: &str) -> Vec<Value> {
    cisi(name)
        .chunks_exact(DIM * 4)
        .map(|row| {
            json!(
                row.chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect::<Vec<_>>()
            )
        })
        .collect()
}

async fn load(s: &Session, docs: &[(i64, String)], emb: &[Value]) -> tarn::Result<()> {
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."cisi" (id BIGINT PRIMARY KEY, body TEXT, e FLOAT4[384]) USING engine"#,
        &[],
    )
    .await?;
    let batch: Vec<Vec<Value>> = docs
        .iter()
        .zip(emb)
        .map(|((id, t), e)| vec![json!(id), json!(t), e.clone()])
        .collect();
    s.query_batch(
        "ws",
        r#"INSERT INTO "ws"."cisi" VALUES ($1, $2, $3::float4[])"#,
        &batch,
    )
    .await?;
    s.query("ws", r#"VACUUM "ws"."cisi""#, &[]).await?;
    s.query(
        "ws",
        r#"CREATE INDEX cisi_e ON "ws"."cisi" USING engine_index (e)"#,
        &[],
    )
    .await?;
    Ok(())
}

const BM25_INDEX: &str =
    r#"CREATE INDEX cisi_body ON "ws"."cisi" USING engine_index (body) WITH (index_type = 'bm25')"#;

fn text(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let docs = texts("corpus.jsonl");
    let emb = embeddings("corpus_emb.f32");
    let queries: Vec<Value> = texts("queries.jsonl")
        .into_iter()
        .map(|(_, t)| json!(t))
        .collect();
    let query_emb = embeddings("queries_emb.f32");
    let dir = tempfile::tempdir().expect("tempdir");
    let (_tarn, s) = rt.block_on(async {
        let tarn = Tarn::open_with(
            dir.path(),
            Options::new()
                .sync(SyncMode::Process)
                .background_maintenance(false),
        )
        .await
        .expect("open");
        let s = fixture(&tarn).await.expect("fixture");
        load(&s, &docs, &emb).await.expect("load");
        (tarn, s)
    });

    let mut g = c.benchmark_group("bm25_index_build");
    g.throughput(Throughput::Elements(docs.len() as u64));
    g.sample_size(10);
    g.bench_function("cisi", |bench| {
        bench.iter(|| {
            rt.block_on(async {
                s.query("ws", BM25_INDEX, &[]).await.expect("index");
                s.query("ws", "DROP INDEX cisi_body", &[])
                    .await
                    .expect("drop")
            })
        })
    });
    g.finish();
    rt.block_on(s.query("ws", BM25_INDEX, &[])).expect("index");

    let mut g = c.benchmark_group("cisi_top10");
    let (index, parser) = tantivy_index(&docs);
    let reader = index.reader().expect("reader");
    let mut i = 0;
    g.bench_function("tantivy", |bench| {
        bench.iter(|| {
            i = (i + 1) % queries.len();
            let (q, _) = parser.parse_query_lenient(queries[i].as_str().unwrap_or(""));
            reader
                .searcher()
                .search(&q, &TopDocs::with_limit(10).order_by_score())
                .expect("search")
        })
    });
    for (name, sql) in [
        (
            "bm25",
            r#"SELECT id FROM "ws"."cisi" ORDER BY body <#> $1 DESC LIMIT 10"#,
        ),
        (
            "vector",
            r#"SELECT id FROM "ws"."cisi" ORDER BY e <#> $1::float4[] DESC LIMIT 10"#,
        ),
        (
            "hybrid",
            r#"SELECT id FROM "ws"."cisi" ORDER BY (e, body) <#> engine_hybrid_record($1::float4[], $2) DESC LIMIT 10"#,
        ),
    ] {
        let mut i = 0;
        g.bench_function(name, |bench| {
            bench.iter(|| {
                i = (i + 1) % queries.len();
                let params = match name {
                    "bm25" => vec![queries[i].clone()],
                    "vector" => vec![query_emb[i].clone()],
                    _ => vec![query_emb[i].clone(), queries[i].clone()],
                };
                rt.block_on(s.query_arrow("ws", sql, &params))
                    .expect("search")
            })
        });
    }
    g.finish();
}

/// tantivy's own index of `docs` (`en_stem`, positions, one segment).
fn tantivy_index(docs: &[(i64, String)]) -> (Index, QueryParser) {
    let mut sb = tantivy::schema::Schema::builder();
    let body = sb.add_text_field(
        "body",
        TextOptions::default().set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer("en_stem")
                .set_index_option(IndexRecordOption::WithFreqsAndPositions),
        ),
    );
    let index = Index::create_in_ram(sb.build());
    let mut w: IndexWriter = index
        .writer_with_num_threads(1, 100_000_000)
        .expect("writer");
    for (_, t) in docs {
        let mut d = TantivyDocument::default();
        d.add_text(body, t);
        w.add_document(d).expect("add");
    }
    w.commit().expect("commit");
    let parser = QueryParser::for_index(&index, vec![body]);
    (index, parser)
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = benches;
    config = config();
    targets = text
}
criterion_main!(benches);
