//! Correlated subqueries, timed (issue 13's benchmark; the comparison with DuckDB and
//! SQLite is `benches/compare/subquery.py`, which runs this binary).
//!
//! ```text
//! tarn-subquery-bench --csv PATH --query SQL [--query SQL …] [--runs 3]
//! ```
//!
//! Loads `PATH` (a CSV file with a header row) with `Session::upload_table` into table
//! `"ws"."t"` of an in-memory database, then runs each query `--runs` times after one
//! warm-up run. Prints one JSON object: per query, the seconds of each run, the row count
//! and the sum of every integer cell (a checksum the script compares across engines).

use std::process::ExitCode;
use std::time::Instant;

use serde_json::{Value, json};
use tarn::Tarn;
use tarn_benches::fixture;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

async fn main_() -> Result<Value, BoxError> {
    let mut csv = None;
    let mut queries = Vec::new();
    let mut runs = 3usize;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--csv" => csv = Some(value()?),
            "--query" => queries.push(value()?),
            "--runs" => runs = value()?.parse()?,
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    let csv = csv.ok_or("--csv is required")?;
    let tarn = Tarn::in_memory().await?;
    let s = fixture(&tarn).await?;
    let f = tokio::fs::File::open(&csv).await?;
    let up = s.upload_table("ws", "t", "t.csv", f).await?;
    let mut out = Vec::new();
    for q in &queries {
        let mut seconds = Vec::new();
        let mut last = None;
        for i in 0..=runs {
            let t = Instant::now();
            let r = s.query("ws", q, &[]).await?;
            if i > 0 {
                seconds.push(t.elapsed().as_secs_f64());
            }
            last = Some(r);
        }
        let r = last.ok_or("no run")?;
        let rows = r.rows.unwrap_or_default();
        let checksum: i64 = rows
            .iter()
            .flatten()
            .filter_map(Value::as_i64)
            .fold(0i64, i64::wrapping_add);
        out.push(json!({
            "query": q,
            "seconds": seconds,
            "rows": rows.len(),
            "checksum": checksum,
        }));
    }
    tarn.close().await?;
    Ok(json!({ "rows": up.row_count, "queries": out }))
}

#[tokio::main]
async fn main() -> ExitCode {
    match main_().await {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tarn-subquery-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
