//! Storage benchmarks over one on-disk database of `TARN_BENCH_ROWS` rows (default
//! 10,000,000) of (id int8 primary key, body text ~50 B, x float8, meta jsonb small),
//! generated with a fixed seed and loaded once with `insert_arrow` (100,000-row commits,
//! `SyncMode::Process`) into a tempdir. Parameters are in the bench names.
//!
//! - `scan_aggregate_{rows}/{tarn,memtable}`: `SELECT id % 100 AS g, count(*), avg(x) …
//!   GROUP BY g` on Tarn and on a DataFusion `MemTable` holding the same batches in the
//!   same number of partitions as Tarn's scan (the CPU count). An interleaved best-of-5
//!   after the group prints ratio = memtable time ÷ tarn time.
//! - `point_lookup_pk/{rows}`: `SELECT * … WHERE id = $1`, keys pre-drawn (fixed seed),
//!   cycled.
//! - `open_time/{rows}`: `Tarn::open_with` of the built database after dropping the
//!   previous handle (the drop is not timed); first/min/median/max are printed too.
//! - `update_by_key/process/{rows}`: `UPDATE … SET x = x + 1 WHERE id = $1`. The first
//!   UPDATE after the reopen is timed on its own and printed (it touches cold pages of
//!   the mapped segments).
//! - `writer_stall/vacuum/{rows}`: a background task inserts single rows in a loop while
//!   `VACUUM "ws"."t"` runs; the criterion figure is the max insert latency per window
//!   (p99 and max are also printed). A VACUUM error is reported once and the window is
//!   still measured (at least `MIN_WINDOW`).
//!
//! Run: `TARN_BENCH_ROWS=1000000 cargo bench -p tarn-benches --bench storage`.

// criterion's macros generate undocumented public functions.
#![allow(missing_docs)]

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use datafusion::datasource::MemTable;
use datafusion::prelude::{SessionConfig, SessionContext};
use serde_json::json;
use tarn::{Options, Session, SyncMode, Tarn};
use tarn_benches::{
    CREATE_T, GROUP_BY, POINT_LOOKUP, SplitMix64, body_text, fixture_with_key, generate, reconnect,
};

const SEED: u64 = 0x5EED_7A2D;
const LOAD_BATCH: usize = 100_000;
const KEYS: usize = 4096;
const MIN_WINDOW: Duration = Duration::from_millis(200);
const UPDATE: &str = r#"UPDATE "ws"."t" SET x = x + 1 WHERE id = $1"#;
const INSERT: &str = r#"INSERT INTO "ws"."t" VALUES ($1, $2, $3, $4)"#;
const VACUUM: &str = r#"VACUUM "ws"."t""#;

fn rows() -> usize {
    match std::env::var("TARN_BENCH_ROWS") {
        Ok(v) => v
            .replace('_', "")
            .parse()
            .unwrap_or_else(|_| panic!("TARN_BENCH_ROWS={v} is not a row count")),
        Err(_) => 10_000_000,
    }
}

fn options() -> Options {
    Options::default().sync(SyncMode::Process)
}

/// Creates the database in `dir` and loads `n` rows with ids `1..=n`.
async fn build(dir: &std::path::Path, n: usize) -> (Tarn, Session, String) {
    let tarn = Tarn::open_with(dir, options()).await.expect("open");
    let (s, secret) = fixture_with_key(&tarn).await.expect("fixture");
    s.query("ws", CREATE_T, &[]).await.expect("create");
    let mut rng = SplitMix64::new(SEED);
    let (mut gen_time, mut load_time) = (Duration::ZERO, Duration::ZERO);
    let mut id = 1i64;
    while (id as usize) <= n {
        let len = LOAD_BATCH.min(n + 1 - id as usize);
        let t = Instant::now();
        let batch = generate(&mut rng, id, len);
        gen_time += t.elapsed();
        let t = Instant::now();
        s.insert_arrow("ws", "t", &[batch]).await.expect("load");
        load_time += t.elapsed();
        id += len as i64;
    }
    let bytes: u64 = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0);
    eprintln!(
        "storage: loaded {n} rows in {:.2} s with insert_arrow ({:.0} rows/s; generating took \
         {:.2} s, untimed); {:.0} MB on disk",
        load_time.as_secs_f64(),
        n as f64 / load_time.as_secs_f64(),
        gen_time.as_secs_f64(),
        bytes as f64 / 1e6
    );
    (tarn, s, secret)
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

async fn memtable(s: &Session, parts: usize) -> SessionContext {
    let all = s
        .query_arrow("ws", r#"SELECT * FROM "ws"."t""#, &[])
        .await
        .expect("read back");
    let batches = all.batches.unwrap_or_default();
    let per = batches.len().div_ceil(parts).max(1);
    let partitions: Vec<Vec<_>> = batches.chunks(per).map(|c| c.to_vec()).collect();
    let table = MemTable::try_new(all.schema.clone(), partitions).expect("memtable");
    let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(parts));
    ctx.catalog("datafusion")
        .expect("default catalog")
        .register_schema(
            "ws",
            Arc::new(datafusion::catalog::MemorySchemaProvider::new()),
        )
        .expect("schema");
    ctx.register_table("ws.t", Arc::new(table))
        .expect("register");
    ctx
}

async fn run_tarn_scan(s: &Session) {
    let out = s.query_arrow("ws", GROUP_BY, &[]).await.expect("query");
    assert!(out.batches.is_some_and(|b| !b.is_empty()));
}

async fn run_memtable_scan(ctx: &SessionContext) {
    let out = ctx
        .sql(GROUP_BY)
        .await
        .expect("plan")
        .collect()
        .await
        .expect("run");
    assert!(!out.is_empty());
}

fn storage(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let n = rows();
    let dir = tempfile::tempdir().expect("tempdir");
    let (tarn, s, secret) = rt.block_on(build(dir.path(), n));
    let tarn = Some(tarn);

    // --- scan_aggregate: Tarn vs MemTable ----------------------------------------------
    let parts = std::thread::available_parallelism().map_or(1, |p| p.get());
    {
        let ctx = rt.block_on(memtable(&s, parts));
        let mut g = c.benchmark_group(format!("scan_aggregate_{n}"));
        g.throughput(Throughput::Elements(n as u64));
        g.sampling_mode(SamplingMode::Flat);
        g.bench_function("tarn", |b| b.to_async(&rt).iter(|| run_tarn_scan(&s)));
        g.bench_function("memtable", |b| {
            b.to_async(&rt).iter(|| run_memtable_scan(&ctx))
        });
        g.finish();
        // Interleaved best of 5 for the ratio (criterion does not hand back its figures).
        let (mut tarn_best, mut mem_best) = (Duration::MAX, Duration::MAX);
        for _ in 0..5 {
            let t = Instant::now();
            rt.block_on(run_tarn_scan(&s));
            tarn_best = tarn_best.min(t.elapsed());
            let t = Instant::now();
            rt.block_on(run_memtable_scan(&ctx));
            mem_best = mem_best.min(t.elapsed());
        }
        eprintln!(
            "scan_aggregate_{n}: best of 5, {parts} partitions: tarn {tarn_best:?}, memtable \
             {mem_best:?}, ratio memtable/tarn = {:.3}",
            mem_best.as_secs_f64() / tarn_best.as_secs_f64()
        );
    }

    // --- point_lookup_pk ----------------------------------------------------------------
    let mut rng = SplitMix64::new(SEED ^ 0x100C);
    let keys: Vec<i64> = (0..KEYS).map(|_| 1 + rng.below(n as u64) as i64).collect();
    {
        let mut g = c.benchmark_group("point_lookup_pk");
        g.sampling_mode(SamplingMode::Flat);
        let mut i = 0usize;
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.to_async(&rt).iter(|| {
                let k = keys[i % keys.len()];
                i += 1;
                let s = &s;
                async move {
                    let r = s
                        .query("ws", POINT_LOOKUP, &[json!(k)])
                        .await
                        .expect("lookup");
                    assert_eq!(r.row_count, 1, "key {k}");
                }
            })
        });
        g.finish();
    }

    // --- open_time -----------------------------------------------------------------------
    drop(s);
    let slot = Arc::new(Mutex::new(tarn));
    let opens = Arc::new(Mutex::new(Vec::new()));
    let s = {
        let mut g = c.benchmark_group("open_time");
        g.sampling_mode(SamplingMode::Flat);
        g.warm_up_time(Duration::from_millis(10));
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let (slot, opens) = (slot.clone(), opens.clone());
                let path = dir.path().to_path_buf();
                async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        // Drop every handle first (releases the directory lock); untimed.
                        let previous = slot.lock().expect("slot").take();
                        drop(previous);
                        let t = Instant::now();
                        let db = Tarn::open_with(&path, options()).await.expect("reopen");
                        let took = t.elapsed();
                        total += took;
                        opens.lock().expect("opens").push(took);
                        *slot.lock().expect("slot") = Some(db);
                    }
                    total
                }
            })
        });
        g.finish();
        // The first open (criterion's warm-up) can differ a lot from the steady state.
        let mut opens = opens.lock().expect("opens").clone();
        if let Some(first) = opens.first().copied() {
            opens.sort();
            eprintln!(
                "open_time/{n}: {} opens: first {first:?}, min {:?}, median {:?}, max {:?}",
                opens.len(),
                opens[0],
                quantile(&opens, 0.5),
                opens[opens.len() - 1]
            );
        }
        let t = slot.lock().expect("slot").clone().expect("open handle");
        rt.block_on(reconnect(&t, &secret)).expect("reconnect")
    };

    // --- update_by_key ---------------------------------------------------------------
    {
        // The first write after a reopen also rebuilds the in-memory primary-key index
        // (lazily, for the unique check): timed on its own, outside criterion.
        let t = Instant::now();
        rt.block_on(s.query("ws", UPDATE, &[json!(keys[1])]))
            .expect("first update");
        eprintln!(
            "update_by_key/process/{n}: first UPDATE after reopen took {:?}",
            t.elapsed()
        );
        let mut g = c.benchmark_group("update_by_key");
        g.sampling_mode(SamplingMode::Flat);
        let mut i = 0usize;
        g.bench_function(BenchmarkId::new("process", n), |b| {
            b.to_async(&rt).iter(|| {
                let k = keys[(i * 7 + 3) % keys.len()];
                i += 1;
                let s = &s;
                async move {
                    let r = s.query("ws", UPDATE, &[json!(k)]).await.expect("update");
                    assert_eq!(r.rows_affected, 1, "key {k}");
                }
            })
        });
        g.finish();
    }

    // --- writer_stall ----------------------------------------------------------------
    {
        let next_id = Arc::new(AtomicI64::new(n as i64 + 1));
        let noted = AtomicBool::new(false);
        let mut g = c.benchmark_group("writer_stall");
        g.sampling_mode(SamplingMode::Flat);
        // The figure is the max insert latency of a window, not the window's length; tiny
        // warm-up and measurement times keep criterion at one window per sample.
        g.warm_up_time(Duration::from_millis(1));
        g.measurement_time(Duration::from_millis(1));
        g.bench_function(BenchmarkId::new("vacuum", n), |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let (s, next_id, noted) = (s.clone(), next_id.clone(), &noted);
                async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += stall_window(&s, &next_id, noted).await;
                    }
                    total
                }
            })
        });
        g.finish();
    }
    drop(s);
    drop(slot);
}

/// One window: single-row inserts in a background task while VACUUM runs (at least
/// `MIN_WINDOW`). Returns the max insert latency; prints it with the p99.
async fn stall_window(s: &Session, next_id: &Arc<AtomicI64>, noted: &AtomicBool) -> Duration {
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (s, stop, next_id) = (s.clone(), stop.clone(), next_id.clone());
        tokio::spawn(async move {
            let mut rng = SplitMix64::new(SEED ^ next_id.load(Ordering::Relaxed) as u64);
            let mut body = String::new();
            let mut lat = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let id = next_id.fetch_add(1, Ordering::Relaxed);
                body_text(&mut rng, &mut body);
                let params = [
                    json!(id),
                    json!(body),
                    json!(rng.unit() * 1000.0),
                    json!(format!(r#"{{"k":{},"tag":"w"}}"#, rng.below(1000))),
                ];
                let t = Instant::now();
                s.query("ws", INSERT, &params).await.expect("insert");
                lat.push(t.elapsed());
            }
            lat
        })
    };
    let t = Instant::now();
    let vacuum = s.query("ws", VACUUM, &[]).await;
    let vacuum_time = t.elapsed();
    if let Err(e) = &vacuum
        && !noted.swap(true, Ordering::Relaxed)
    {
        eprintln!(
            "writer_stall: note: {VACUUM} failed ({e}); measuring the inserts over a \
             {MIN_WINDOW:?} window without it"
        );
    }
    if vacuum_time < MIN_WINDOW {
        tokio::time::sleep(MIN_WINDOW - vacuum_time).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut lat = writer.await.expect("writer task");
    lat.sort();
    let max = lat.last().copied().unwrap_or_default();
    eprintln!(
        "writer_stall: vacuum {} in {vacuum_time:?}; {} inserts, p50 {:?}, p99 {:?}, max {max:?}",
        if vacuum.is_ok() { "ok" } else { "failed" },
        lat.len(),
        quantile(&lat, 0.5),
        quantile(&lat, 0.99),
    );
    max
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = storage
}
criterion_main!(benches);
