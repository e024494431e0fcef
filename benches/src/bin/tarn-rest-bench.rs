//! The library side of the REST host's benchmark (issue 12): the same requests that
//! `benches/compare/rest.py` sends through HTTP with `wrk`, made straight through
//! `Session::query`, so that the ratio is what HTTP costs.
//!
//! ```text
//! tarn-rest-bench prepare DIR [--rows 100000] [--dim 128]
//! tarn-rest-bench direct DIR --secret KEY --workload lookup|search [--conns 2] [--secs 10] [--rows N] [--dim D]
//! ```
//!
//! `prepare` creates user, key, organization `bench`, workspace `bench` and table
//! `items (id INT8 PRIMARY KEY, title TEXT, embedding FLOAT4[])` with `--rows` rows of
//! random `--dim`-dimensional vectors and an `engine_index` on them, then prints
//! `{"secret": …}`. `direct` runs `--conns` tasks, each making one request after the
//! other for `--secs` seconds (a key lookup of a random id, or a top-10 search for one
//! of 256 random vectors, as the wrk script does), and prints requests/s and the p50
//! and p99 latencies as JSON. Each request connects with the key first, as the server
//! does for every HTTP request.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tarn::Tarn;
use tarn_benches::SplitMix64;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The statements, shared with `benches/compare/rest.py` (which reads them from
/// `tarn-rest-bench sql`).
const LOOKUP: &str = r#"SELECT id, title FROM "bench"."items" WHERE id = $1"#;
const SEARCH: &str = r#"SELECT id, title, embedding <#> $1::float4[] AS score FROM "bench"."items" ORDER BY score DESC LIMIT 10"#;

struct Args {
    command: String,
    dir: String,
    rows: usize,
    dim: usize,
    workload: String,
    conns: usize,
    secs: f64,
    secret: String,
}

fn args() -> Result<Args, BoxError> {
    let mut it = std::env::args().skip(1);
    let command = it
        .next()
        .ok_or("usage: tarn-rest-bench prepare|direct|sql DIR …")?;
    let mut a = Args {
        command,
        dir: String::new(),
        rows: 100_000,
        dim: 128,
        workload: "lookup".into(),
        conns: 2,
        secs: 10.0,
        secret: String::new(),
    };
    if a.command != "sql" {
        a.dir = it.next().ok_or("DIR is required")?;
    }
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--rows" => a.rows = value()?.parse()?,
            "--dim" => a.dim = value()?.parse()?,
            "--workload" => a.workload = value()?,
            "--conns" => a.conns = value()?.parse()?,
            "--secs" => a.secs = value()?.parse()?,
            "--secret" => a.secret = value()?,
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    Ok(a)
}

fn vector(rng: &mut SplitMix64, dim: usize) -> Value {
    Value::from(
        (0..dim)
            .map(|_| (rng.unit() * 2.0 - 1.0) as f32)
            .collect::<Vec<f32>>(),
    )
}

async fn prepare(a: &Args) -> Result<(), BoxError> {
    let tarn = Tarn::open(&a.dir).await?;
    let user = tarn.create_user("bench@example.com", "Bench").await?;
    let key = tarn.create_api_key(&user.id, "bench").await?;
    let s = tarn.connect(&key.secret).await?;
    s.create_organization("bench", "Bench").await?;
    let s = s.with_org("bench");
    s.create_workspace("bench", "Bench").await?;
    s.query(
        "bench",
        r#"CREATE TABLE "bench"."items" (id INT8 PRIMARY KEY, title TEXT, embedding FLOAT4[]) USING engine"#,
        &[],
    )
    .await?;
    let mut rng = SplitMix64::new(7);
    let insert = r#"INSERT INTO "bench"."items" VALUES ($1, $2, $3)"#;
    for from in (0..a.rows).step_by(10_000) {
        let sets: Vec<Vec<Value>> = (from..(from + 10_000).min(a.rows))
            .map(|i| {
                vec![
                    json!(i),
                    json!(format!("item number {i}")),
                    vector(&mut rng, a.dim),
                ]
            })
            .collect();
        s.query_batch("bench", insert, &sets).await?;
    }
    let t = Instant::now();
    s.query(
        "bench",
        r#"CREATE INDEX items_vec ON "bench"."items" USING engine_index (embedding)"#,
        &[],
    )
    .await?;
    eprintln!("index built in {:.1} s", t.elapsed().as_secs_f64());
    tarn.close().await?;
    println!("{}", json!({ "secret": key.secret }));
    Ok(())
}

async fn direct(a: &Args) -> Result<(), BoxError> {
    let tarn = Tarn::open(&a.dir).await?;
    let secret = Arc::new(a.secret.clone());
    let mut rng = SplitMix64::new(11);
    let queries: Arc<Vec<Value>> = Arc::new((0..256).map(|_| vector(&mut rng, a.dim)).collect());
    let (sql, search) = match a.workload.as_str() {
        "lookup" => (LOOKUP, false),
        "search" => (SEARCH, true),
        other => return Err(format!("unknown workload {other}").into()),
    };
    let deadline = Instant::now() + Duration::from_secs_f64(a.secs);
    let mut tasks = Vec::new();
    for c in 0..a.conns {
        let (tarn, secret, queries) = (tarn.clone(), secret.clone(), queries.clone());
        let rows = a.rows as u64;
        tasks.push(tokio::spawn(async move {
            let mut rng = SplitMix64::new(100 + c as u64);
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                let param = if search {
                    queries[rng.below(queries.len() as u64) as usize].clone()
                } else {
                    json!(rng.below(rows))
                };
                let t = Instant::now();
                let s = tarn.connect(&secret).await?.with_org("bench");
                let r = s.query("bench", sql, &[param]).await?;
                // What the server does with the answer: serialize it.
                let body = serde_json::to_vec(&r).map_err(|e| e.to_string())?;
                std::hint::black_box(body);
                latencies.push(t.elapsed());
            }
            Ok::<_, BoxError>(latencies)
        }));
    }
    let started = Instant::now();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await??);
    }
    let elapsed = started.elapsed().as_secs_f64().max(a.secs);
    all.sort();
    let pct = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1e3)
    };
    println!(
        "{}",
        json!({
            "workload": a.workload,
            "conns": a.conns,
            "requests": all.len(),
            "rps": all.len() as f64 / elapsed,
            "p50_ms": pct(0.50),
            "p99_ms": pct(0.99),
        })
    );
    tarn.close().await?;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let result = match args() {
        Ok(a) => match a.command.as_str() {
            "prepare" => prepare(&a).await,
            "direct" => direct(&a).await,
            "sql" => {
                println!("{}", json!({ "lookup": LOOKUP, "search": SEARCH }));
                Ok(())
            }
            other => Err(format!("unknown command {other}").into()),
        },
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tarn-rest-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
