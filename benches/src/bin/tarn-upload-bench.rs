//! `Session::upload_table` of one file, timed (issue 11's benchmark; the comparison
//! with DuckDB and SQLite is `benches/compare/upload.py`, which runs this binary).
//!
//! ```text
//! tarn-upload-bench --file PATH [--runs 3] [--work DIR]
//! ```
//!
//! Each run uploads `PATH` (read with `tokio::fs::File`) into a table of a fresh
//! database in `--work` (default: the temporary directory) with `SyncMode::Full`: the
//! upload returns once its rows are durable. Prints one JSON object: seconds per run,
//! rows, bytes, and the columns with their inferred types.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use serde_json::json;
use tarn::{Options, Tarn};
use tarn_benches::fixture;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

async fn main_() -> Result<serde_json::Value, BoxError> {
    let mut file = None;
    let mut runs = 3usize;
    let mut work = std::env::temp_dir();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--file" => file = Some(PathBuf::from(value()?)),
            "--runs" => runs = value()?.parse()?,
            "--work" => work = PathBuf::from(value()?),
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    let file = file.ok_or("--file is required")?;
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or("--file needs a file name")?
        .to_string();
    let bytes = std::fs::metadata(&file)?.len();
    let mut seconds = Vec::new();
    let mut last = None;
    for _ in 0..runs {
        let tmp = tempfile::tempdir_in(&work)?;
        let tarn = Tarn::open_with(tmp.path().join("db"), Options::new()).await?;
        let s = fixture(&tarn).await?;
        let f = tokio::fs::File::open(&file).await?;
        let t = Instant::now();
        let up = s.upload_table("ws", "t", &name, f).await?;
        seconds.push(t.elapsed().as_secs_f64());
        let table = s.table("ws", "t").await?;
        last = Some((up, table));
        tarn.close().await?;
    }
    let (up, table) = last.ok_or("--runs 0")?;
    Ok(json!({
        "file": file,
        "bytes": bytes,
        "rows": up.row_count,
        "seconds": seconds,
        "columns": table
            .columns
            .iter()
            .map(|c| format!("{} {}{}", c.name, c.data_type, if c.nullable { "" } else { " not null" }))
            .collect::<Vec<_>>(),
    }))
}

#[tokio::main]
async fn main() -> ExitCode {
    match main_().await {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tarn-upload-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
