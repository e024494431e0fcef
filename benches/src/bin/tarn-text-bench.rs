//! Tarn's side of `benches/compare/text.py`: BM25 and hybrid search measured through
//! SQL, next to tantivy (the Rust library, linked into this binary) on the same
//! documents and queries, in one process. Prints one JSON object on stdout (progress on
//! stderr) and writes the documents it generated for the Python peers.
//!
//! ```text
//! tarn-text-bench --work DIR [--docs 100000] [--cisi data/cisi] [--phase cisi|synth]
//!                 [--runs bm25,hybrid,…] [--short-words 3]
//! ```
//!
//! - `cisi`: the 1460 CISI abstracts with their MiniLM embeddings, both indexes, the 76
//!   judged queries: latency and nDCG@10 of BM25, vector and hybrid top-10 through SQL
//!   (and of each fusion), beside tantivy's own top-10 (`QueryParser`, lenient, OR of
//!   the words) on the same text.
//! - `synth`: `--docs` documents of 4–10 sentences drawn (seeded) from the CISI
//!   abstracts, written to `DIR/synth.jsonl`: indexing throughput (Tarn: `insert_arrow`
//!   commits, `VACUUM`, then `CREATE INDEX … bm25` timed; tantivy: one `IndexWriter`
//!   thread) and BM25 top-10 latency over the CISI queries; then the freshness cost: the
//!   same queries right after inserting 1, 100 and 10,000 more documents (in the
//!   memtable, scored exactly), and once `VACUUM` has indexed them.
//!
//! Each latency is the mean per query of the best of up to five passes over the query
//! set (passes repeat until 1.5 s have passed), one query at a time.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{ArrayRef, AsArray, Int64Array, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use serde_json::{Value, json};
use tantivy::collector::TopDocs;
use tantivy::query::QueryParser;
use tantivy::schema::{FAST, IndexRecordOption, TextFieldIndexing, TextOptions};
use tantivy::{Index, IndexWriter, TantivyDocument};
use tarn::{Options, Session, SyncMode, Tarn};
use tarn_benches::{SplitMix64, fixture};

const K: usize = 10;
const DIM: usize = 384;
/// Rows per `insert_arrow` commit while loading.
const LOAD_BATCH: usize = 10_000;
const MIN_RUN: Duration = Duration::from_millis(1500);
const BEST_OF: usize = 5;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Res<T> = Result<T, BoxError>;

struct Args {
    work: PathBuf,
    cisi: PathBuf,
    docs: usize,
    phase: Option<String>,
    /// The `cisi` runs to measure (all when `None`): to profile one of them alone.
    runs: Option<Vec<String>>,
    /// Words of each "short" query (the first words of each judged query).
    short_words: usize,
}

fn parse_args() -> Res<Args> {
    let mut args = Args {
        work: PathBuf::new(),
        cisi: PathBuf::from("data/cisi"),
        docs: 100_000,
        phase: None,
        runs: None,
        short_words: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--work" => args.work = value()?.into(),
            "--cisi" => args.cisi = value()?.into(),
            "--docs" => args.docs = value()?.parse()?,
            "--phase" => args.phase = Some(value()?),
            "--short-words" => args.short_words = value()?.parse()?,
            "--runs" => args.runs = Some(value()?.split(',').map(str::to_owned).collect()),
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    if args.work.as_os_str().is_empty() {
        return Err("--work DIR is required".into());
    }
    Ok(args)
}

/// The CISI collection as shipped in `data/cisi`.
struct Cisi {
    docs: Vec<(i64, String)>,
    doc_emb: Vec<Vec<f32>>,
    queries: Vec<(i64, String)>,
    query_emb: Vec<Vec<f32>>,
    /// Relevant document ids of each query (in `queries` order).
    relevant: Vec<Vec<i64>>,
}

fn lines(path: &std::path::Path) -> Res<Vec<(i64, String)>> {
    std::fs::read_to_string(path)?
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l)?;
            let id = v["id"]
                .as_str()
                .and_then(|s| s.parse().ok())
                .ok_or("a line without an id")?;
            Ok((id, v["text"].as_str().ok_or("no text")?.to_string()))
        })
        .collect()
}

fn embeddings(path: &std::path::Path) -> Res<Vec<Vec<f32>>> {
    Ok(std::fs::read(path)?
        .chunks_exact(DIM * 4)
        .map(|row| {
            row.chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect()
        })
        .collect())
}

impl Cisi {
    fn load(dir: &std::path::Path) -> Res<Cisi> {
        let queries = lines(&dir.join("queries.jsonl"))?;
        let qrels = std::fs::read_to_string(dir.join("qrels.tsv"))?;
        let relevant = queries
            .iter()
            .map(|(q, _)| {
                qrels
                    .lines()
                    .filter_map(|l| {
                        let mut f = l.split('\t');
                        let (qid, did) = (f.next()?.parse::<i64>().ok()?, f.next()?.parse().ok()?);
                        (qid == *q).then_some(did)
                    })
                    .collect()
            })
            .collect();
        Ok(Cisi {
            docs: lines(&dir.join("corpus.jsonl"))?,
            doc_emb: embeddings(&dir.join("corpus_emb.f32"))?,
            query_emb: embeddings(&dir.join("queries_emb.f32"))?,
            queries,
            relevant,
        })
    }

    /// Mean nDCG@10 (binary relevance) of one ranking per query.
    /// The first `words` words of each query, as query parameters.
    fn short_queries(&self, words: usize) -> Vec<Value> {
        self.queries
            .iter()
            .map(|(_, t)| {
                json!(
                    t.split_whitespace()
                        .take(words)
                        .collect::<Vec<_>>()
                        .join(" ")
                )
            })
            .collect()
    }

    fn ndcg(&self, ranked: &[Vec<i64>]) -> f64 {
        let total: f64 = ranked
            .iter()
            .zip(&self.relevant)
            .map(|(r, rel)| {
                let dcg: f64 = r
                    .iter()
                    .take(K)
                    .enumerate()
                    .filter(|(_, id)| rel.contains(id))
                    .map(|(i, _)| 1.0 / (i as f64 + 2.0).log2())
                    .sum();
                let ideal: f64 = (0..rel.len().min(K))
                    .map(|i| 1.0 / (i as f64 + 2.0).log2())
                    .sum();
                if ideal > 0.0 { dcg / ideal } else { 0.0 }
            })
            .sum();
        total / ranked.len() as f64
    }
}

/// Runs `one(i)` for every query `i` in passes (see the module docs): the rankings of
/// the first pass and the mean milliseconds per query of the best pass.
async fn measure<F, Fut>(nq: usize, mut one: F) -> Res<(Vec<Vec<i64>>, f64)>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Res<Vec<i64>>>,
{
    let (mut first, mut best) = (Vec::new(), f64::INFINITY);
    let began = Instant::now();
    for pass in 0..BEST_OF {
        let t0 = Instant::now();
        let mut ranked = Vec::with_capacity(nq);
        for i in 0..nq {
            ranked.push(one(i).await?);
        }
        best = best.min(t0.elapsed().as_secs_f64() * 1e3 / nq as f64);
        if pass == 0 {
            first = ranked;
        }
        if began.elapsed() >= MIN_RUN && pass >= 1 {
            break;
        }
    }
    Ok((first, best))
}

fn ids(r: &tarn::ArrowResult) -> Vec<i64> {
    r.batches
        .iter()
        .flatten()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect()
}

async fn sql_top(s: &Session, sql: &str, params: Vec<Value>) -> Res<Vec<i64>> {
    Ok(ids(&s.query_arrow("ws", sql, &params).await?))
}

/// tantivy over `docs`, with its `en_stem` tokenizer (what Tarn's default names).
struct Tantivy {
    /// One searcher for every query, so that segment numbers stay those of `ids`.
    searcher: tantivy::Searcher,
    /// Each segment's `id` column, opened once (opening it per hit costs more than
    /// the search).
    ids: Vec<tantivy::columnar::Column<i64>>,
    parser: QueryParser,
}

impl Tantivy {
    fn build<'a>(docs: impl Iterator<Item = (i64, &'a str)>) -> Res<Tantivy> {
        let mut sb = tantivy::schema::Schema::builder();
        let id = sb.add_i64_field("id", FAST);
        let body = sb.add_text_field(
            "body",
            TextOptions::default().set_indexing_options(
                TextFieldIndexing::default()
                    .set_tokenizer("en_stem")
                    .set_index_option(IndexRecordOption::WithFreqsAndPositions),
            ),
        );
        let index = Index::create_in_ram(sb.build());
        let mut writer: IndexWriter = index.writer_with_num_threads(1, 500_000_000)?;
        for (i, text) in docs {
            let mut doc = TantivyDocument::default();
            doc.add_i64(id, i);
            doc.add_text(body, text);
            writer.add_document(doc)?;
        }
        writer.commit()?;
        let searcher = index.reader()?.searcher();
        let ids = searcher
            .segment_readers()
            .iter()
            .map(|r| r.fast_fields().i64("id"))
            .collect::<Result<_, _>>()?;
        let parser = QueryParser::for_index(&index, vec![body]);
        Ok(Tantivy {
            searcher,
            ids,
            parser,
        })
    }

    fn top(&self, text: &str) -> Res<Vec<i64>> {
        let (query, _) = self.parser.parse_query_lenient(text);
        let top = self
            .searcher
            .search(&query, &TopDocs::with_limit(K).order_by_score())?;
        top.iter()
            .map(|(_, addr)| {
                let col = self
                    .ids
                    .get(addr.segment_ord as usize)
                    .ok_or("no segment")?;
                Ok(col.first(addr.doc_id).ok_or("no id")?)
            })
            .collect()
    }
}

fn manual() -> Options {
    Options::new()
        .sync(SyncMode::Process)
        .background_maintenance(false)
        .memtable_bytes(512 << 20)
}

async fn phase_cisi(args: &Args) -> Res<Value> {
    let cisi = Cisi::load(&args.cisi)?;
    let dir = args.work.join("cisi");
    let _ = std::fs::remove_dir_all(&dir);
    let tarn = Tarn::open_with(&dir, manual()).await?;
    let s = fixture(&tarn).await?;
    for sql in [
        r#"CREATE TABLE "ws"."cisi" (id BIGINT PRIMARY KEY, body TEXT, e FLOAT4[384]) USING engine"#,
        r#"CREATE INDEX cisi_e ON "ws"."cisi" USING engine_index (e)"#,
        r#"CREATE INDEX cisi_body ON "ws"."cisi" USING engine_index (body) WITH (index_type = 'bm25')"#,
    ] {
        s.query("ws", sql, &[]).await?;
    }
    let batch: Vec<Vec<Value>> = cisi
        .docs
        .iter()
        .zip(&cisi.doc_emb)
        .map(|((id, text), e)| vec![json!(id), json!(text), json!(e)])
        .collect();
    s.query_batch(
        "ws",
        r#"INSERT INTO "ws"."cisi" VALUES ($1, $2, $3::float4[])"#,
        &batch,
    )
    .await?;
    s.query("ws", r#"VACUUM "ws"."cisi""#, &[]).await?;
    eprintln!("cisi: loaded and indexed");

    let nq = cisi.queries.len();
    let vectors: Vec<Value> = cisi.query_emb.iter().map(|e| json!(e)).collect();
    let texts: Vec<Value> = cisi.queries.iter().map(|(_, t)| json!(t)).collect();
    let shorts = cisi.short_queries(args.short_words);
    // BM25 binds the text alone ($1); the others the vector ($1) and the text ($2).
    let runs: [(&str, String); 11] = [
        (
            "bm25",
            r#"SELECT id FROM "ws"."cisi" ORDER BY body <#> $1 DESC LIMIT 10"#.into(),
        ),
        (
            "vector",
            r#"SELECT id FROM "ws"."cisi" ORDER BY e <#> $1::float4[] DESC LIMIT 10"#.into(),
        ),
        // The same through DataFusion's planner and the search node (`WHERE true` keeps
        // them off the fast path): what the fast path saves.
        (
            "bm25_planned",
            r#"SELECT id FROM "ws"."cisi" WHERE true ORDER BY body <#> $1 DESC LIMIT 10"#.into(),
        ),
        (
            "vector_planned",
            r#"SELECT id FROM "ws"."cisi" WHERE true ORDER BY e <#> $1::float4[] DESC LIMIT 10"#
                .into(),
        ),
        // The arms as the hybrid runs them: each at top max(4k, 100) = 100.
        (
            "bm25_top100",
            r#"SELECT id FROM "ws"."cisi" ORDER BY body <#> $1 DESC LIMIT 100"#.into(),
        ),
        (
            "vector_top100",
            r#"SELECT id FROM "ws"."cisi" ORDER BY e <#> $1::float4[] DESC LIMIT 100"#.into(),
        ),
        // Short queries (each judged query's first `--short-words` words): few clauses, so
        // the BM25 top-k prunes postings (block-max WAND) instead of a dense pass.
        (
            "bm25_short",
            r#"SELECT id FROM "ws"."cisi" ORDER BY body <#> $1 DESC LIMIT 10"#.into(),
        ),
        ("hybrid", hybrid("")),
        ("hybrid_0.7_0.3", hybrid(", 0.7, 0.3")),
        ("hybrid_softmax", hybrid(", 0.5, 0.5, 'softmax'")),
        ("hybrid_rrf", hybrid(", 0.5, 0.5, 'rrf'")),
    ];
    let mut tarn_out = serde_json::Map::new();
    for (name, sql) in &runs {
        if args
            .runs
            .as_ref()
            .is_some_and(|r| !r.iter().any(|r| r == name))
        {
            continue;
        }
        let (ranked, ms) = measure(nq, |i| {
            let params = match *name {
                "bm25" | "bm25_planned" | "bm25_top100" => vec![texts[i].clone()],
                "bm25_short" => vec![shorts[i].clone()],
                "vector" | "vector_planned" | "vector_top100" => vec![vectors[i].clone()],
                _ => vec![vectors[i].clone(), texts[i].clone()],
            };
            let (s, sql) = (s.clone(), sql.clone());
            async move { sql_top(&s, &sql, params).await }
        })
        .await?;
        let ndcg = cisi.ndcg(&ranked);
        eprintln!("cisi: tarn {name}: {ms:.3} ms, nDCG@10 {ndcg:.3}");
        tarn_out.insert(name.to_string(), json!({"ms": ms, "ndcg10": ndcg}));
    }
    tarn.close().await?;

    let t0 = Instant::now();
    let tv = Tantivy::build(cisi.docs.iter().map(|(i, t)| (*i, t.as_str())))?;
    let build_s = t0.elapsed().as_secs_f64();
    let (ranked, ms) = measure(nq, |i| {
        let r = tv.top(&cisi.queries[i].1);
        async move { r }
    })
    .await?;
    let ndcg = cisi.ndcg(&ranked);
    eprintln!("cisi: tantivy bm25: {ms:.3} ms, nDCG@10 {ndcg:.3}");
    // A run left out (`--runs`) counts as NaN.
    let ms_of = |name: &str| {
        tarn_out
            .get(name)
            .and_then(|r| r["ms"].as_f64())
            .unwrap_or(f64::NAN)
    };
    let parts = ms_of("bm25") + ms_of("vector");
    let parts100 = ms_of("bm25_top100") + ms_of("vector_top100");
    let hybrid_ms = ms_of("hybrid");
    Ok(json!({
        "docs": cisi.docs.len(),
        "queries": nq,
        "tarn": tarn_out,
        "tantivy": {"bm25": {"ms": ms, "ndcg10": ndcg}, "build_s": build_s},
        "hybrid_vs_parts": hybrid_ms / parts,
        "hybrid_vs_parts_top100": hybrid_ms / parts100,
        "bm25_tarn_vs_tantivy": ms_of("bm25") / ms,
    }))
}

fn hybrid(args: &str) -> String {
    format!(
        r#"SELECT id FROM "ws"."cisi" ORDER BY (e, body) <#> engine_hybrid_record($1::float4[], $2{args}) DESC LIMIT 10"#
    )
}

/// `n` documents of 4–10 sentences drawn from the CISI abstracts (seeded).
fn synth_docs(cisi: &Cisi, n: usize, seed: u64) -> Vec<String> {
    let sentences: Vec<&str> = cisi
        .docs
        .iter()
        .flat_map(|(_, t)| t.split(". "))
        .map(str::trim)
        .filter(|s| s.split_whitespace().count() >= 4)
        .collect();
    let mut rng = SplitMix64::new(seed);
    (0..n)
        .map(|_| {
            let k = 4 + (rng.next_u64() % 7) as usize;
            (0..k)
                .map(|_| sentences[(rng.next_u64() % sentences.len() as u64) as usize])
                .collect::<Vec<_>>()
                .join(". ")
        })
        .collect()
}

async fn insert_docs(s: &Session, first_id: usize, docs: &[String]) -> Res<()> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("body", DataType::Utf8, true),
    ]));
    for (c, chunk) in docs.chunks(LOAD_BATCH).enumerate() {
        let start = first_id + c * LOAD_BATCH;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(
                start as i64..(start + chunk.len()) as i64,
            )),
            Arc::new(StringArray::from_iter_values(chunk)),
        ];
        s.insert_arrow("ws", "t", &[RecordBatch::try_new(schema.clone(), columns)?])
            .await?;
    }
    Ok(())
}

async fn phase_synth(args: &Args) -> Res<Value> {
    let cisi = Cisi::load(&args.cisi)?;
    let docs = synth_docs(&cisi, args.docs, 42);
    let extra = synth_docs(&cisi, 10_101, 7);
    let mut out = String::new();
    for (i, d) in docs.iter().enumerate() {
        out.push_str(&json!({"id": i, "text": d}).to_string());
        out.push('\n');
    }
    std::fs::create_dir_all(&args.work)?;
    std::fs::write(args.work.join("synth.jsonl"), out)?;
    let words: usize = docs.iter().map(|d| d.split_whitespace().count()).sum();
    let bytes: usize = docs.iter().map(String::len).sum();
    eprintln!(
        "synth: {} docs, {:.0} words and {:.0} bytes each on average",
        docs.len(),
        words as f64 / docs.len() as f64,
        bytes as f64 / docs.len() as f64
    );
    let nq = cisi.queries.len();

    let dir = args.work.join("synth-db");
    let _ = std::fs::remove_dir_all(&dir);
    let tarn = Tarn::open_with(&dir, manual()).await?;
    let s = fixture(&tarn).await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."t" (id BIGINT PRIMARY KEY, body TEXT) USING engine"#,
        &[],
    )
    .await?;
    let t0 = Instant::now();
    insert_docs(&s, 0, &docs).await?;
    s.query("ws", r#"VACUUM "ws"."t""#, &[]).await?;
    let load_s = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    s.query(
        "ws",
        r#"CREATE INDEX t_body ON "ws"."t" USING engine_index (body) WITH (index_type = 'bm25')"#,
        &[],
    )
    .await?;
    let index_s = t0.elapsed().as_secs_f64();
    eprintln!("synth: tarn load {load_s:.1} s, bm25 index {index_s:.1} s");
    let sql = r#"SELECT id FROM "ws"."t" ORDER BY body <#> $1 DESC LIMIT 10"#;
    let texts: Vec<Value> = cisi.queries.iter().map(|(_, t)| json!(t)).collect();
    let shorts = cisi.short_queries(args.short_words);
    let bm25_of = |s: Session, texts: Vec<Value>| {
        move |i: usize| {
            let (s, p) = (s.clone(), texts[i].clone());
            async move { sql_top(&s, sql, vec![p]).await }
        }
    };
    let bm25 = |s: Session| bm25_of(s, texts.clone());
    let (tarn_ranked, tarn_ms) = measure(nq, bm25(s.clone())).await?;
    eprintln!("synth: tarn bm25 {tarn_ms:.3} ms");
    let (tarn_short_ranked, tarn_short_ms) =
        measure(nq, bm25_of(s.clone(), shorts.clone())).await?;
    eprintln!("synth: tarn bm25 short queries {tarn_short_ms:.3} ms");

    let t0 = Instant::now();
    let tv = Tantivy::build(docs.iter().enumerate().map(|(i, d)| (i as i64, d.as_str())))?;
    let tv_index_s = t0.elapsed().as_secs_f64();
    let (tv_ranked, tv_ms) = measure(nq, |i| {
        let r = tv.top(&cisi.queries[i].1);
        async move { r }
    })
    .await?;
    let (tv_short_ranked, tv_short_ms) = measure(nq, |i| {
        let r = shorts[i]
            .as_str()
            .ok_or("short query")
            .map_err(Into::into)
            .and_then(|q| tv.top(q));
        async move { r }
    })
    .await?;
    eprintln!(
        "synth: tantivy index {tv_index_s:.1} s, bm25 {tv_ms:.3} ms, short {tv_short_ms:.3} ms"
    );
    // The same documents in the same top 10 (ties and float rounding may reorder a
    // few): how many of tantivy's top-10 ids Tarn also returned.
    let overlap = |tarn: &[Vec<i64>], tv: &[Vec<i64>]| -> f64 {
        let common: usize = tarn
            .iter()
            .zip(tv)
            .map(|(a, b)| b.iter().filter(|id| a.contains(id)).count())
            .sum();
        common as f64 / (nq * K) as f64
    };

    // Freshness: rows in the memtable are scored exactly until VACUUM indexes them.
    let mut fresh = Vec::new();
    let mut next = docs.len();
    let mut used = 0;
    for n in [1usize, 100, 10_000] {
        insert_docs(&s, next, &extra[used..used + n]).await?;
        next += n;
        used += n;
        // The first query analyzes the new rows (kept for the next queries).
        let t0 = Instant::now();
        sql_top(&s, sql, vec![texts[0].clone()]).await?;
        let first_ms = t0.elapsed().as_secs_f64() * 1e3;
        let (_, ms) = measure(nq, bm25(s.clone())).await?;
        eprintln!(
            "synth: tarn bm25 after {n} fresh rows: first query {first_ms:.3} ms, then {ms:.3} ms"
        );
        fresh.push(json!({"fresh_rows": used, "first_ms": first_ms, "ms": ms}));
    }
    s.query("ws", r#"VACUUM "ws"."t""#, &[]).await?;
    let (_, caught_up) = measure(nq, bm25(s.clone())).await?;
    eprintln!("synth: tarn bm25 once VACUUM indexed them: {caught_up:.3} ms");
    tarn.close().await?;

    Ok(json!({
        "docs": docs.len(),
        "avg_words": words as f64 / docs.len() as f64,
        "avg_bytes": bytes as f64 / docs.len() as f64,
        "queries": nq,
        "tarn": {
            "load_s": load_s,
            "index_s": index_s,
            "index_docs_per_s": docs.len() as f64 / index_s,
            "load_and_index_docs_per_s": docs.len() as f64 / (load_s + index_s),
            "bm25_ms": tarn_ms,
            "bm25_short_ms": tarn_short_ms,
        },
        "tantivy": {
            "index_s": tv_index_s,
            "index_docs_per_s": docs.len() as f64 / tv_index_s,
            "threads": 1,
            "bm25_ms": tv_ms,
            "bm25_short_ms": tv_short_ms,
        },
        "bm25_tarn_vs_tantivy": tarn_ms / tv_ms,
        "bm25_short_tarn_vs_tantivy": tarn_short_ms / tv_short_ms,
        "top10_overlap": overlap(&tarn_ranked, &tv_ranked),
        "short_top10_overlap": overlap(&tarn_short_ranked, &tv_short_ranked),
        "freshness": fresh,
        "caught_up_ms": caught_up,
    }))
}

async fn run(args: Args) -> Res<Value> {
    let mut out = json!({});
    if args.phase.as_deref().is_none_or(|p| p == "cisi") {
        out["cisi"] = phase_cisi(&args).await?;
    }
    if args.phase.as_deref().is_none_or(|p| p == "synth") {
        out["synth"] = phase_synth(&args).await?;
    }
    Ok(out)
}

fn main() -> ExitCode {
    let result = parse_args().and_then(|args| {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?
            .block_on(run(args))
    });
    match result {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tarn-text-bench: {e}");
            ExitCode::from(1)
        }
    }
}
