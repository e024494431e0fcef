//! Tarn's side of `benches/compare/compare.py`: loads the shared TSV input into fresh
//! on-disk databases and times bulk insert, a scan + aggregate and primary-key point
//! lookups; bulk loads are timed three ways: `insert_arrow`, 1000-row literal INSERTs
//! and `query_batch` in 10,000-row batches. `--durable-inserts N` also times N
//! single-row INSERTs into a fresh `SyncMode::Full` database, each its own statement
//! and commit (one fdatasync each). Prints one JSON object on stdout (progress goes to
//! stderr).
//!
//! ```text
//! tarn-compare --data DIR [--rows N] [--batch-rows 100000] [--lookups 10000]
//!              [--skip-values] [--skip-full] [--durable-inserts N]
//! ```
//!
//! `DIR` holds `data.tsv` (header `id body x meta`, tab-separated, no quoting) and
//! `keys.txt` (one lookup key per line), both written by `compare.py`. The databases are
//! created under `DIR/tarn-*` (removed first).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{ArrayBuilder, Float64Builder, Int64Builder, StringBuilder};
use datafusion::arrow::record_batch::RecordBatch;
use serde_json::json;
use tarn::{Options, Session, SyncMode, Tarn};
use tarn_benches::{CREATE_T, GROUP_BY, POINT_LOOKUP, fixture, row_schema};

struct Args {
    data: PathBuf,
    rows: Option<usize>,
    batch_rows: usize,
    lookups: usize,
    skip_values: bool,
    skip_full: bool,
    durable_inserts: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        data: PathBuf::new(),
        rows: None,
        batch_rows: 100_000,
        lookups: 10_000,
        skip_values: false,
        skip_full: false,
        durable_inserts: 0,
    };
    let mut it = std::env::args().skip(1);
    let number = |name: &str, v: Option<String>| -> Result<usize, String> {
        let v = v.ok_or_else(|| format!("{name} needs a value"))?;
        v.replace('_', "")
            .parse()
            .map_err(|e| format!("{name} {v}: {e}"))
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--data" => args.data = it.next().ok_or("--data needs a value")?.into(),
            "--rows" => args.rows = Some(number("--rows", it.next())?),
            "--batch-rows" => args.batch_rows = number("--batch-rows", it.next())?.max(1),
            "--lookups" => args.lookups = number("--lookups", it.next())?,
            "--skip-values" => args.skip_values = true,
            "--skip-full" => args.skip_full = true,
            "--durable-inserts" => args.durable_inserts = number("--durable-inserts", it.next())?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if args.data.as_os_str().is_empty() {
        return Err("--data DIR is required".into());
    }
    Ok(args)
}

/// The first `rows` rows (all without a limit) of the TSV, in batches of `batch_rows`.
fn read_tsv(
    path: &Path,
    rows: Option<usize>,
    batch_rows: usize,
) -> Result<Vec<RecordBatch>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut lines = text.lines();
    lines.next(); // header
    let limit = rows.unwrap_or(usize::MAX);
    let mut batches = Vec::new();
    let new_builders = || {
        (
            Int64Builder::with_capacity(batch_rows),
            StringBuilder::with_capacity(batch_rows, batch_rows * 50),
            Float64Builder::with_capacity(batch_rows),
            StringBuilder::with_capacity(batch_rows, batch_rows * 28),
        )
    };
    let (mut ids, mut bodies, mut xs, mut metas) = new_builders();
    let mut n = 0usize;
    let mut flush = |ids: &mut Int64Builder,
                     bodies: &mut StringBuilder,
                     xs: &mut Float64Builder,
                     metas: &mut StringBuilder|
     -> Result<(), String> {
        if ids.is_empty() {
            return Ok(());
        }
        let batch = RecordBatch::try_new(
            row_schema(),
            vec![
                Arc::new(ids.finish()),
                Arc::new(bodies.finish()),
                Arc::new(xs.finish()),
                Arc::new(metas.finish()),
            ],
        )
        .map_err(|e| e.to_string())?;
        batches.push(batch);
        Ok(())
    };
    for (lineno, line) in lines.enumerate() {
        if n >= limit {
            break;
        }
        let bad = || format!("{} line {}: malformed row", path.display(), lineno + 2);
        let mut f = line.split('\t');
        let (Some(id), Some(body), Some(x), Some(meta), None) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            return Err(bad());
        };
        ids.append_value(id.parse().map_err(|_| bad())?);
        bodies.append_value(body);
        xs.append_value(x.parse().map_err(|_| bad())?);
        metas.append_value(meta);
        n += 1;
        if ids.len() == batch_rows {
            flush(&mut ids, &mut bodies, &mut xs, &mut metas)?;
        }
    }
    flush(&mut ids, &mut bodies, &mut xs, &mut metas)?;
    if let Some(want) = rows
        && n < want
    {
        return Err(format!(
            "{} has {n} rows, fewer than --rows {want}",
            path.display()
        ));
    }
    Ok(batches)
}

fn read_keys(path: &Path, limit: usize) -> Result<Vec<i64>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .take(limit)
        .map(|l| l.trim().parse().map_err(|e| format!("key {l}: {e}")))
        .collect()
}

async fn fresh(dir: &Path, sync: SyncMode) -> Result<(Tarn, Session), String> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let tarn = Tarn::open_with(dir, Options::default().sync(sync))
        .await
        .map_err(|e| e.to_string())?;
    let s = fixture(&tarn).await.map_err(|e| e.to_string())?;
    s.query("ws", CREATE_T, &[])
        .await
        .map_err(|e| e.to_string())?;
    Ok((tarn, s))
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => dir_bytes(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

/// Times `insert_arrow` of all batches, one call (one commit) per batch.
async fn load_arrow(s: &Session, batches: &[RecordBatch]) -> Result<Duration, String> {
    let start = Instant::now();
    for b in batches {
        s.insert_arrow("ws", "t", std::slice::from_ref(b))
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(start.elapsed())
}

fn sql_text(v: &str) -> String {
    format!("'{}'", v.replace('\'', "''"))
}

/// Every row of the batches: id, body, x and meta (JSON text).
fn rows(batches: &[RecordBatch]) -> impl Iterator<Item = (i64, &str, f64, &str)> {
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::{Float64Type, Int64Type};
    batches.iter().flat_map(|b| {
        let ids = b.column(0).as_primitive::<Int64Type>();
        let bodies = b.column(1).as_string::<i32>();
        let xs = b.column(2).as_primitive::<Float64Type>();
        let metas = b.column(3).as_string::<i32>();
        (0..b.num_rows()).map(move |i| (ids.value(i), bodies.value(i), xs.value(i), metas.value(i)))
    })
}

/// `INSERT … VALUES` statements of `per` rows each, built from the batches.
fn values_statements(batches: &[RecordBatch], per: usize) -> Vec<String> {
    let tuples: Vec<String> = rows(batches)
        .map(|(id, body, x, meta)| format!("({id}, {}, {x:?}, {})", sql_text(body), sql_text(meta)))
        .collect();
    tuples
        .chunks(per)
        .map(|c| format!(r#"INSERT INTO "ws"."t" VALUES {}"#, c.join(", ")))
        .collect()
}

/// `insert_arrow` (and DuckDB's Arrow insert in `compare.py`) are timed this many times,
/// best kept: each takes under a second, so one busy moment of a shared machine would
/// otherwise decide the ratio.
const ARROW_RUNS: usize = 3;

/// The batch INSERT whose parameter sets [`parameter_sets`] builds.
const INSERT_PARAMS: &str = r#"INSERT INTO "ws"."t" VALUES ($1, $2, $3, $4)"#;

/// One parameter set per row: id, body, x and meta (JSON text, as a client sends it).
fn parameter_sets(batches: &[RecordBatch]) -> Vec<Vec<serde_json::Value>> {
    rows(batches)
        .map(|(id, body, x, meta)| vec![json!(id), json!(body), json!(x), json!(meta)])
        .collect()
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}

async fn run(args: Args) -> Result<serde_json::Value, String> {
    let start = Instant::now();
    let batches = read_tsv(&args.data.join("data.tsv"), args.rows, args.batch_rows)?;
    let parse_s = start.elapsed().as_secs_f64();
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    let keys = read_keys(&args.data.join("keys.txt"), args.lookups)?;
    eprintln!("tarn: parsed {rows} rows in {parse_s:.2} s");

    // (1a) insert_arrow, SyncMode::Process, best of `ARROW_RUNS` fresh databases (the
    // last is kept for the queries below).
    let dir = args.data.join("tarn-arrow");
    let mut arrow_runs = Vec::new();
    let (mut tarn, mut s) = fresh(&dir, SyncMode::Process).await?;
    for run in 0..ARROW_RUNS {
        if run > 0 {
            drop((s, tarn));
            (tarn, s) = fresh(&dir, SyncMode::Process).await?;
        }
        arrow_runs.push(load_arrow(&s, &batches).await?.as_secs_f64());
    }
    let insert_arrow = arrow_runs.iter().copied().fold(f64::INFINITY, f64::min);
    let disk_bytes = dir_bytes(&dir);
    eprintln!(
        "tarn: insert_arrow (process) best {insert_arrow:.2} s of {arrow_runs:.2?}, {disk_bytes} bytes on disk"
    );

    // (1b) insert_arrow, SyncMode::Full (fdatasync per commit).
    let mut insert_arrow_full = None;
    if !args.skip_full {
        let dir = args.data.join("tarn-arrow-full");
        let (t, s) = fresh(&dir, SyncMode::Full).await?;
        let secs = load_arrow(&s, &batches).await?.as_secs_f64();
        eprintln!("tarn: insert_arrow (full) {secs:.2} s");
        insert_arrow_full = Some(secs);
        drop((s, t));
        std::fs::remove_dir_all(&dir).map_err(|e| e.to_string())?;
    }

    // (1c) literal multi-row INSERT … VALUES, 1000 rows per statement (text built first,
    // untimed; only the statements' execution is timed).
    let mut values = None;
    if !args.skip_values {
        let dir = args.data.join("tarn-values");
        let (t, s) = fresh(&dir, SyncMode::Process).await?;
        let build = Instant::now();
        let stmts = values_statements(&batches, 1000);
        let build_s = build.elapsed().as_secs_f64();
        let exec = Instant::now();
        for sql in &stmts {
            s.query("ws", sql, &[]).await.map_err(|e| e.to_string())?;
        }
        let exec_s = exec.elapsed().as_secs_f64();
        eprintln!("tarn: values_1000 {exec_s:.2} s (+{build_s:.2} s building the text)");
        values = Some((exec_s, build_s));
        drop((stmts, s, t));
        std::fs::remove_dir_all(&dir).map_err(|e| e.to_string())?;
    }
    // (1d) query_batch of `INSERT … VALUES ($1, $2, $3, $4)`, 10,000 parameter sets per
    // call (sets built first, untimed).
    let mut batch_10k = None;
    if !args.skip_values {
        let dir = args.data.join("tarn-batch");
        let (t, s) = fresh(&dir, SyncMode::Process).await?;
        let sets = parameter_sets(&batches);
        let exec = Instant::now();
        for chunk in sets.chunks(10_000) {
            s.query_batch("ws", INSERT_PARAMS, chunk)
                .await
                .map_err(|e| e.to_string())?;
        }
        let exec_s = exec.elapsed().as_secs_f64();
        eprintln!("tarn: query_batch 10k {exec_s:.2} s");
        batch_10k = Some(exec_s);
        drop((sets, s, t));
        std::fs::remove_dir_all(&dir).map_err(|e| e.to_string())?;
    }
    // The rows of (4), the durable single-row INSERTs (parameter sets built now, untimed).
    let durable_sets: Vec<Vec<serde_json::Value>> = crate::rows(&batches)
        .take(args.durable_inserts)
        .map(|(id, body, x, meta)| vec![json!(id), json!(body), json!(x), json!(meta)])
        .collect();
    drop(batches);

    // (2) scan + aggregate: one warm-up, best of 5.
    let mut scan_runs = Vec::new();
    let mut check = (0i64, 0.0f64);
    for i in 0..6 {
        let t = Instant::now();
        let out = s
            .query_arrow("ws", GROUP_BY, &[])
            .await
            .map_err(|e| e.to_string())?;
        let secs = t.elapsed().as_secs_f64();
        let batches = out.batches.unwrap_or_default();
        let groups: usize = batches.iter().map(|b| b.num_rows()).sum();
        if groups != 100.min(rows) {
            return Err(format!("scan returned {groups} groups"));
        }
        // A checksum compare.py matches across engines: Σ count and Σ avg over groups.
        check = (0, 0.0);
        for b in &batches {
            use datafusion::arrow::array::AsArray;
            use datafusion::arrow::datatypes::{Float64Type, Int64Type};
            check.0 += b
                .column(1)
                .as_primitive::<Int64Type>()
                .iter()
                .flatten()
                .sum::<i64>();
            check.1 += b
                .column(2)
                .as_primitive::<Float64Type>()
                .iter()
                .flatten()
                .sum::<f64>();
        }
        if i > 0 {
            scan_runs.push(secs);
        }
    }
    let scan_best = scan_runs.iter().copied().fold(f64::INFINITY, f64::min);
    eprintln!("tarn: scan best {scan_best:.4} s");

    // (3) point lookups by primary key.
    let mut lat = Vec::with_capacity(keys.len());
    for k in &keys {
        let t = Instant::now();
        let r = s
            .query("ws", POINT_LOOKUP, &[json!(k)])
            .await
            .map_err(|e| e.to_string())?;
        lat.push(t.elapsed().as_secs_f64());
        if r.row_count != 1 {
            return Err(format!("lookup of {k} returned {} rows", r.row_count));
        }
    }
    let mean = lat.iter().sum::<f64>() / lat.len().max(1) as f64;
    lat.sort_by(f64::total_cmp);
    eprintln!(
        "tarn: lookup p50 {:.1} µs over {} keys",
        quantile(&lat, 0.5) * 1e6,
        lat.len()
    );
    // Closing checkpoints: the log's rows are in segments and the log is empty.
    tarn.close().await.map_err(|e| e.to_string())?;
    drop((s, tarn));
    let disk_bytes_closed = dir_bytes(&dir);

    // (4) single-row durable INSERTs, once the bulk-loaded database is closed (its
    // checkpoint does not compete): `SyncMode::Full`, one statement (one commit, one
    // fdatasync) each, into a fresh database.
    let mut durable = None;
    if !durable_sets.is_empty() {
        let dir = args.data.join("tarn-durable");
        let (t, s) = fresh(&dir, SyncMode::Full).await?;
        let mut lat = Vec::with_capacity(durable_sets.len());
        let exec = Instant::now();
        for set in &durable_sets {
            let one = Instant::now();
            s.query("ws", INSERT_PARAMS, set)
                .await
                .map_err(|e| e.to_string())?;
            lat.push(one.elapsed().as_secs_f64());
        }
        let exec_s = exec.elapsed().as_secs_f64();
        lat.sort_by(f64::total_cmp);
        let n = durable_sets.len();
        eprintln!(
            "tarn: {n} durable single-row inserts in {exec_s:.2} s ({:.0}/s)",
            n as f64 / exec_s
        );
        durable = Some((n, exec_s, quantile(&lat, 0.5)));
        drop((s, t));
        std::fs::remove_dir_all(&dir).map_err(|e| e.to_string())?;
    }

    Ok(json!({
        "engine": "tarn",
        "version": env!("CARGO_PKG_VERSION"),
        "rows": rows,
        "batch_rows": args.batch_rows,
        "parse_s": parse_s,
        "insert_arrow_s": insert_arrow,
        "insert_arrow_runs_s": arrow_runs,
        "insert_arrow_full_s": insert_arrow_full,
        "values_1000_s": values.map(|v| v.0),
        "values_1000_build_s": values.map(|v| v.1),
        "batch_10k_s": batch_10k,
        "durable_inserts": durable.map(|d| d.0),
        "durable_insert_s": durable.map(|d| d.1),
        "durable_insert_p50_s": durable.map(|d| d.2),
        "disk_bytes": disk_bytes,
        "disk_bytes_closed": disk_bytes_closed,
        "scan_runs_s": scan_runs,
        "scan_best_s": scan_best,
        "scan_check": [check.0, check.1],
        "lookups": lat.len(),
        "lookup_p50_s": quantile(&lat, 0.5),
        "lookup_p99_s": quantile(&lat, 0.99),
        "lookup_mean_s": mean,
        "durability": "SyncMode::Process (write() per commit, no fsync); insert_arrow_full_s and durable_insert_s: SyncMode::Full (fdatasync per commit)",
    }))
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("tarn-compare: {e}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tarn-compare: {e}");
            ExitCode::FAILURE
        }
    }
}
