//! Tarn's side of `benches/compare/vectors.py`: vector search on the data directory the
//! script writes, measured three ways, and one JSON object on stdout (progress on
//! stderr).
//!
//! ```text
//! tarn-vector-bench --data DIR --work WORKDIR [--efs 16,32,64,128,256] [--threads 1,2]
//!                   [--m 16] [--ef-construction 200] [--phase graph|table|sql]
//!                   [--graph-file PATH]
//! ```
//!
//! - `graph`: one HNSW graph over all vectors, built and searched through `tarn-vector`
//!   directly (what hnswlib and faiss do), plus the exact kernel scan and a memory
//!   bandwidth reference.
//! - `table`: the vectors loaded into an engine table (`insert_arrow`, 10,000-row
//!   commits), compacted (`VACUUM`), indexed (`CREATE INDEX … WITH (m, ef_construction)`,
//!   timed), then searched through SQL (`SET engine.ef_search`, `ORDER BY e <#> $1 DESC
//!   LIMIT 10`), through `tarn-search` directly on the same files, filtered at every
//!   threshold of `meta.json`, and exactly (after `DROP INDEX`).
//!
//! - `sql`: the SQL searches alone (top-10 and filtered), on the database a `table` run
//!   left in `WORKDIR` (its index built again first, since `table` ends by dropping it).
//!
//! Without `--phase` `graph` and `table` run, each in a child process of this binary so that each
//! phase's peak memory (VmHWM) is its own.
//!
//! `DIR` holds `meta.json` (`n`, `dim`, `nq`, `thresholds`), `base.f32` (n × dim),
//! `cat.i32` (n), `queries.f32` (nq × dim), `gt.i32` (nq × 100, exact top-100 row
//! indices by cosine) and `gt_cat_<t>.i32` (nq × 10, exact top-10 among rows with
//! `cat < t`, padded with -1). Row `i` of `base.f32` is stored with `id = i`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{
    ArrayRef, AsArray, FixedSizeListArray, Float32Array, Int32Array, Int64Array,
};
use datafusion::arrow::buffer::{BooleanBuffer, Buffer};
use datafusion::arrow::datatypes::{DataType, Field, Int32Type, Int64Type, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use serde_json::{Value, json};
use tarn::{Options, Session, SyncMode, Tarn};
use tarn_benches::{fixture_with_key, reconnect};
use tarn_search::{IndexUse, QueryValue, RowFilter, SearchRequest};
use tarn_storage::{Chunk, Database, StorageOptions, TableVersion};
use tarn_vector::{Graph, HnswParams, Query};

const K: usize = 10;
/// Rows per `insert_arrow` commit while loading.
const LOAD_BATCH: usize = 10_000;
/// Each measurement repeats the query set until at least this much time has passed.
const MIN_RUN: Duration = Duration::from_millis(1500);
/// The best pass is taken among this many (the peers' `best_time` takes up to five).
const BEST_OF: usize = 5;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Res<T> = Result<T, BoxError>;

struct Args {
    data: PathBuf,
    work: PathBuf,
    efs: Vec<usize>,
    threads: Vec<usize>,
    params: HnswParams,
    phase: Option<String>,
    /// `graph` phase: reuse this graph file when it exists (else build and save it), so
    /// that tuning the search does not rebuild a 1M graph each time.
    graph_file: Option<PathBuf>,
}

fn parse_args() -> Res<Args> {
    let mut args = Args {
        data: PathBuf::new(),
        work: PathBuf::new(),
        efs: vec![16, 32, 64, 128, 256],
        threads: vec![1, 2],
        params: HnswParams::default(),
        phase: None,
        graph_file: None,
    };
    let list = |v: Option<String>| -> Res<Vec<usize>> {
        let v = v.ok_or("a list needs a value")?;
        Ok(v.split(',')
            .map(|s| s.trim().parse())
            .collect::<Result<_, _>>()?)
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--data" => args.data = it.next().ok_or("--data needs a value")?.into(),
            "--work" => args.work = it.next().ok_or("--work needs a value")?.into(),
            "--efs" => args.efs = list(it.next())?,
            "--threads" => args.threads = list(it.next())?,
            "--m" => args.params.m = it.next().ok_or("--m needs a value")?.parse()?,
            "--ef-construction" => {
                args.params.ef_construction = it
                    .next()
                    .ok_or("--ef-construction needs a value")?
                    .parse()?
            }
            "--phase" => args.phase = Some(it.next().ok_or("--phase needs a value")?),
            "--graph-file" => {
                args.graph_file = Some(it.next().ok_or("--graph-file needs a value")?.into())
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    if args.data.as_os_str().is_empty() || args.work.as_os_str().is_empty() {
        return Err("--data DIR and --work DIR are required".into());
    }
    Ok(args)
}

/// The data directory's small files (the base vectors are read where needed).
struct Data {
    dir: PathBuf,
    n: usize,
    dim: usize,
    nq: usize,
    thresholds: Vec<i32>,
    queries: Vec<f32>,
    /// nq × 100.
    gt: Vec<i32>,
    /// Per threshold, nq × 10 (-1 = fewer matches).
    gt_cat: Vec<Vec<i32>>,
}

fn read_f32(path: &Path) -> Res<Vec<f32>> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

fn read_i32(path: &Path) -> Res<Vec<i32>> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(bytes
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

impl Data {
    fn load(dir: &Path) -> Res<Data> {
        let meta: Value = serde_json::from_slice(&std::fs::read(dir.join("meta.json"))?)?;
        let get = |k: &str| -> Res<usize> {
            Ok(meta[k].as_u64().ok_or(format!("meta.json: {k}"))? as usize)
        };
        let (n, dim, nq) = (get("n")?, get("dim")?, get("nq")?);
        let thresholds: Vec<i32> = meta["thresholds"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_i64())
                    .map(|v| v as i32)
                    .collect()
            })
            .unwrap_or_default();
        let gt_cat = thresholds
            .iter()
            .map(|t| read_i32(&dir.join(format!("gt_cat_{t}.i32"))))
            .collect::<Res<_>>()?;
        Ok(Data {
            dir: dir.to_path_buf(),
            n,
            dim,
            nq,
            thresholds,
            queries: read_f32(&dir.join("queries.f32"))?,
            gt: read_i32(&dir.join("gt.i32"))?,
            gt_cat,
        })
    }

    fn query(&self, i: usize) -> &[f32] {
        &self.queries[i * self.dim..(i + 1) * self.dim]
    }

    /// recall@10 of `found` (ids per query) against the exact top 10.
    fn recall(&self, found: &[Vec<i64>]) -> f64 {
        recall(found, &self.gt, 100)
    }
}

/// Share of the true top-10 (row `i` of `truth`, `stride` wide; -1 pads) found.
fn recall(found: &[Vec<i64>], truth: &[i32], stride: usize) -> f64 {
    let (mut hits, mut total) = (0usize, 0usize);
    for (i, f) in found.iter().enumerate() {
        let t: Vec<i64> = truth[i * stride..i * stride + K]
            .iter()
            .filter(|&&v| v >= 0)
            .map(|&v| v as i64)
            .collect();
        total += t.len();
        hits += t.iter().filter(|v| f.contains(v)).count();
    }
    if total == 0 {
        1.0
    } else {
        hits as f64 / total as f64
    }
}

/// Peak resident memory of this process so far, in MiB (VmHWM).
fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Passes over a query set, repeated until [`MIN_RUN`] has passed: the fastest of the
/// first [`BEST_OF`] and the throughput over all of them.
struct Passes {
    nq: usize,
    start: Instant,
    best: f64,
    count: usize,
}

impl Passes {
    fn new(nq: usize) -> Self {
        Passes {
            nq,
            start: Instant::now(),
            best: f64::MAX,
            count: 0,
        }
    }

    /// Whether another pass is due.
    fn more(&self) -> bool {
        self.count == 0 || self.start.elapsed() < MIN_RUN
    }

    /// One pass that began at `began` is over.
    fn done(&mut self, began: Instant) {
        if self.count < BEST_OF {
            self.best = self.best.min(began.elapsed().as_secs_f64());
        }
        self.count += 1;
    }

    /// (queries per second of the best pass, over all passes).
    fn rates(&self) -> (f64, f64) {
        (
            self.nq as f64 / self.best,
            (self.nq * self.count) as f64 / self.start.elapsed().as_secs_f64(),
        )
    }
}

/// Runs `search(i)` for every query, split across `threads` threads, repeating the set
/// until [`MIN_RUN`] has passed: (ids of the first pass, queries per second of the
/// fastest of the first [`BEST_OF`] passes, queries per second over all passes). The
/// best pass is what the comparison script reports, as it does for hnswlib and faiss
/// (their best of up to five passes): on a shared machine whose speed drifts it is the
/// steadier figure.
fn measure(
    nq: usize,
    threads: usize,
    search: &(dyn Fn(usize) -> Vec<i64> + Sync),
) -> (Vec<Vec<i64>>, f64, f64) {
    let mut first: Vec<Vec<i64>> = Vec::new();
    let mut passes = Passes::new(nq);
    while passes.more() {
        let began = Instant::now();
        let parts: Vec<Vec<Vec<i64>>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| s.spawn(move || (t..nq).step_by(threads).map(search).collect::<Vec<_>>()))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a search thread panicked"))
                .collect()
        });
        passes.done(began);
        if first.is_empty() {
            // Back to query order: thread t answered queries t, t + threads, …
            first = vec![Vec::new(); nq];
            for (t, part) in parts.into_iter().enumerate() {
                for (j, ids) in part.into_iter().enumerate() {
                    first[t + j * threads] = ids;
                }
            }
        }
    }
    let (best, mean) = passes.rates();
    (first, best, mean)
}

/// One run: `qps` is the fastest pass's, `mean_qps` the throughput over all passes.
fn run_json(ef: usize, threads: usize, recall: f64, (qps, mean): (f64, f64)) -> Value {
    json!({"ef": ef, "threads": threads, "recall": recall, "qps": qps, "mean_qps": mean})
}

/// One graph over everything, through `tarn-vector`.
fn phase_graph(args: &Args, data: &Data) -> Res<Value> {
    let base = read_f32(&data.dir.join("base.f32"))?;
    let start = Instant::now();
    let (graph, build_s) = match &args.graph_file {
        Some(path) if path.exists() => {
            eprintln!("graph: reading {}", path.display());
            let g = Graph::open(Buffer::from_vec(std::fs::read(path)?))?;
            let p = args.params;
            if (g.len(), g.dim(), g.m(), g.ef_construction())
                != (data.n, data.dim, p.m, p.ef_construction)
            {
                return Err(
                    format!("{} was built from other data or parameters", path.display()).into(),
                );
            }
            (g, None)
        }
        _ => {
            eprintln!("graph: building over {} × {}", data.n, data.dim);
            let ids: Vec<u32> = (0..data.n as u32).collect();
            let mut file = Vec::new();
            tarn_vector::build(&base, data.dim, &ids, args.params, &(), &mut file)?;
            let build_s = start.elapsed().as_secs_f64();
            eprintln!("graph: built in {build_s:.1} s");
            if let Some(path) = &args.graph_file {
                std::fs::write(path, &file)?;
            }
            (Graph::open(Buffer::from_vec(file))?, Some(build_s))
        }
    };
    let mut runs = Vec::new();
    for &ef in &args.efs {
        for &threads in &args.threads {
            let search = |i: usize| {
                graph
                    .search(data.query(i), K, ef, None)
                    .into_iter()
                    .map(|(id, _)| id as i64)
                    .collect()
            };
            let (found, qps, mean) = measure(data.nq, threads, &search);
            let r = data.recall(&found);
            eprintln!(
                "graph: ef {ef} threads {threads}: recall {r:.4}, {qps:.0} q/s (mean {mean:.0})"
            );
            runs.push(run_json(ef, threads, r, (qps, mean)));
        }
    }
    let peak = peak_rss_mb();

    // Exact: the kernel over the contiguous matrix, one query at a time.
    let bytes = (data.n * data.dim * 4) as f64;
    let mut out = Vec::with_capacity(data.n);
    let mut best = f64::MAX;
    for i in 0..data.nq.min(20) {
        let q = Query::new(data.query(i)).ok_or("zero query")?;
        let start = Instant::now();
        q.cosine_each(&base, data.dim, &mut out);
        best = best.min(start.elapsed().as_secs_f64());
        std::hint::black_box(&out);
    }
    let gbps_kernel = bytes / best / 1e9;
    drop(base);
    let bandwidth_gbps = read_bandwidth();
    eprintln!("exact kernel {gbps_kernel:.1} GB/s; read bandwidth {bandwidth_gbps:.1} GB/s");
    Ok(json!({
        "graph": {"build_s": build_s, "peak_rss_mb": peak, "runs": runs,
                   "size_bytes": graph.size_bytes()},
        "exact": {"gbps_kernel": gbps_kernel, "bandwidth_gbps": bandwidth_gbps},
    }))
}

/// Single-thread read bandwidth: the best of several sums over 1 GiB (what an exact
/// scan is bounded by).
fn read_bandwidth() -> f64 {
    let words = (1usize << 30) / 8;
    let v: Vec<u64> = (0..words as u64).collect();
    let mut best = f64::MAX;
    for _ in 0..5 {
        let start = Instant::now();
        // Four accumulators so the adds are not one dependency chain.
        let mut acc = [0u64; 4];
        for c in v.chunks_exact(4) {
            for j in 0..4 {
                acc[j] = acc[j].wrapping_add(c[j]);
            }
        }
        std::hint::black_box(acc);
        best = best.min(start.elapsed().as_secs_f64());
    }
    (words * 8) as f64 / best / 1e9
}

const CREATE: &str = r#"CREATE TABLE "ws"."t" (id INT8, e FLOAT4[DIM], cat INT4) USING engine"#;
const TOP: &str = r#"SELECT id FROM "ws"."t" ORDER BY e <#> $1::float4[] DESC LIMIT 10"#;

/// The index both phases build (`IF NOT EXISTS`: the `sql` phase finds it gone or
/// there).
fn create_index(p: HnswParams) -> String {
    format!(
        r#"CREATE INDEX IF NOT EXISTS e_idx ON "ws"."t" USING engine_index (e DESC) WITH (m = {}, ef_construction = {})"#,
        p.m, p.ef_construction
    )
}

fn ids_of(batches: &[RecordBatch]) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect()
}

/// Loads `base.f32` and `cat.i32` in commits of [`LOAD_BATCH`] rows, reading the files
/// as it goes (the input never sits in memory whole).
async fn load(s: &Session, data: &Data) -> Res<()> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new(
            "e",
            DataType::FixedSizeList(
                Arc::new(Field::new("item", DataType::Float32, true)),
                data.dim as i32,
            ),
            false,
        ),
        Field::new("cat", DataType::Int32, false),
    ]));
    let mut base = std::fs::File::open(data.dir.join("base.f32"))?;
    let cat = read_i32(&data.dir.join("cat.i32"))?;
    let mut buf = vec![0u8; LOAD_BATCH * data.dim * 4];
    let mut at = 0;
    while at < data.n {
        let rows = LOAD_BATCH.min(data.n - at);
        let bytes = &mut buf[..rows * data.dim * 4];
        base.read_exact(bytes)?;
        let values: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(at as i64..(at + rows) as i64)),
            Arc::new(FixedSizeListArray::try_new(
                Arc::new(Field::new("item", DataType::Float32, true)),
                data.dim as i32,
                Arc::new(Float32Array::from(values)),
                None,
            )?),
            Arc::new(Int32Array::from(cat[at..at + rows].to_vec())),
        ];
        s.insert_arrow("ws", "t", &[RecordBatch::try_new(schema.clone(), columns)?])
            .await?;
        at += rows;
    }
    Ok(())
}

fn query_params(data: &Data) -> Vec<Value> {
    (0..data.nq)
        .map(|i| Value::from(data.query(i).iter().map(|&v| v as f64).collect::<Vec<_>>()))
        .collect()
}

/// Runs `sql` with each query's parameter from `threads` tasks at once, repeating the
/// set until [`MIN_RUN`]: (ids of the first pass, best-pass and mean queries per second
/// as [`measure`] reports them, latencies of the first pass in ms).
async fn measure_sql(
    s: &Session,
    sql: &str,
    params: &[Value],
    threads: usize,
) -> Res<(Vec<Vec<i64>>, f64, f64, Vec<f64>)> {
    let nq = params.len();
    // Shared, not cloned per pass: copying a vector parameter is the bench's cost.
    let params: Arc<Vec<Value>> = Arc::new(params.to_vec());
    let mut first: Vec<Vec<i64>> = Vec::new();
    let mut latencies = vec![0.0; nq];
    let mut passes = Passes::new(nq);
    while passes.more() {
        let began = Instant::now();
        let mut tasks = Vec::new();
        for t in 0..threads {
            let (s, sql, params) = (s.clone(), sql.to_string(), params.clone());
            tasks.push(tokio::spawn(async move {
                let mut out = Vec::with_capacity(nq / threads + 1);
                for i in (t..nq).step_by(threads) {
                    let p = &params[i];
                    let t0 = Instant::now();
                    let r = s.query_arrow("ws", &sql, std::slice::from_ref(p)).await?;
                    let secs = t0.elapsed().as_secs_f64();
                    out.push((i, ids_of(r.batches.as_deref().unwrap_or(&[])), secs));
                }
                Ok::<_, tarn::Error>(out)
            }));
        }
        let mut pass = vec![Vec::new(); nq];
        for t in tasks {
            for (i, ids, secs) in t.await?? {
                pass[i] = ids;
                if first.is_empty() {
                    latencies[i] = secs * 1e3;
                }
            }
        }
        passes.done(began);
        if first.is_empty() {
            first = pass;
        }
    }
    let (best, mean) = passes.rates();
    Ok((first, best, mean, latencies))
}

/// The top-10 through SQL at every ef (`SET engine.ef_search`, reset after) and thread
/// count.
async fn sql_runs(s: &Session, args: &Args, data: &Data, params: &[Value]) -> Res<Vec<Value>> {
    let mut runs = Vec::new();
    for &ef in &args.efs {
        s.query("ws", &format!("SET engine.ef_search = {ef}"), &[])
            .await?;
        for &threads in &args.threads {
            let (found, qps, mean, _) = measure_sql(s, TOP, params, threads).await?;
            let r = data.recall(&found);
            eprintln!(
                "sql: ef {ef} threads {threads}: recall {r:.4}, {qps:.0} q/s (mean {mean:.0})"
            );
            runs.push(run_json(ef, threads, r, (qps, mean)));
        }
    }
    s.query("ws", "RESET engine.ef_search", &[]).await?;
    Ok(runs)
}

/// `WHERE cat < t` searches through SQL at every threshold of the data (default
/// `ef_search`, one thread).
async fn sql_filtered(s: &Session, data: &Data, params: &[Value]) -> Res<Vec<Value>> {
    let mut filtered = Vec::new();
    for (j, t) in data.thresholds.iter().enumerate() {
        let sql = format!(
            r#"SELECT id FROM "ws"."t" WHERE cat < {t} ORDER BY e <#> $1::float4[] DESC LIMIT 10"#
        );
        // Filtered figures are latencies, and their QPS the throughput of all passes.
        let (found, _, qps, lat) = measure_sql(s, &sql, params, 1).await?;
        let r = recall(&found, &data.gt_cat[j], K);
        let short = found
            .iter()
            .enumerate()
            .filter(|(i, f)| {
                let want = data.gt_cat[j][i * K..(i + 1) * K]
                    .iter()
                    .filter(|&&v| v >= 0);
                f.len() < want.count()
            })
            .count();
        eprintln!(
            "sql: cat < {t}: recall {r:.4}, p50 {:.2} ms, {qps:.0} q/s, {short} short",
            percentile(&lat, 0.5)
        );
        filtered.push(
            json!({"threshold": t, "recall": r, "qps": qps, "short_results": short,
            "p50_ms": percentile(&lat, 0.5), "p99_ms": percentile(&lat, 0.99),
            "mean_ms": mean(&lat)}),
        );
    }
    Ok(filtered)
}

fn percentile(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// The table: load, index, search through SQL, through `tarn-search`, exactly.
fn phase_table(args: &Args, data: &Data) -> Res<Value> {
    let db_dir = args.work.join("db");
    let _ = std::fs::remove_dir_all(&db_dir);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let options = || Options::new().sync(SyncMode::Process);
    let params = query_params(data);

    // Load, compact, index; then SQL searches.
    let (mut sql, secret) = rt.block_on(async {
        let tarn = Tarn::open_with(&db_dir, options()).await?;
        let (s, secret) = fixture_with_key(&tarn).await?;
        s.query("ws", &CREATE.replace("DIM", &data.dim.to_string()), &[])
            .await?;
        eprintln!("table: loading {} rows", data.n);
        let start = Instant::now();
        load(&s, data).await?;
        s.query("ws", r#"VACUUM "ws"."t""#, &[]).await?;
        let load_s = start.elapsed().as_secs_f64();
        eprintln!("table: loaded and compacted in {load_s:.1} s; indexing");
        let start = Instant::now();
        s.query("ws", &create_index(args.params), &[]).await?;
        let build_s = start.elapsed().as_secs_f64();
        eprintln!("table: CREATE INDEX took {build_s:.1} s");
        let explain = s
            .query_arrow(
                "ws",
                &format!("EXPLAIN ANALYZE {TOP}"),
                std::slice::from_ref(&params[0]),
            )
            .await?;
        let plan = format!("{:?}", explain.batches);
        let segments = plan
            .split("graph_segments=")
            .nth(1)
            .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|d| d.parse::<usize>().ok());
        let runs = sql_runs(&s, args, data, &params).await?;
        let filtered = sql_filtered(&s, data, &params).await?;
        let peak = peak_rss_mb();
        tarn.close().await?;
        std::fs::write(args.work.join("secret"), &secret)?;
        Ok::<_, BoxError>((
            json!({"load_s": load_s, "build_s": build_s, "segments": segments,
                   "peak_rss_mb": peak, "runs": runs, "filtered": filtered}),
            secret,
        ))
    })?;

    // The same files through tarn-search.
    let (search, exact_filtered, gbps_search) = direct(args, data, &db_dir)?;
    if let Some(f) = sql["filtered"].as_array_mut() {
        for (f, ms) in f.iter_mut().zip(exact_filtered) {
            f["exact_mean_ms"] = json!(ms.0);
            f["direct_mean_ms"] = json!(ms.1);
            f["direct_recall"] = json!(ms.2);
        }
    }

    // Exact through SQL: no index.
    let gbps_sql = rt.block_on(async {
        let tarn = Tarn::open_with(&db_dir, options()).await?;
        let s = reconnect(&tarn, &secret).await?;
        s.query("ws", "DROP INDEX e_idx", &[]).await?;
        let few = &params[..params.len().min(20)];
        let mut best = f64::MAX;
        for p in few {
            let start = Instant::now();
            s.query_arrow("ws", TOP, std::slice::from_ref(p)).await?;
            best = best.min(start.elapsed().as_secs_f64());
        }
        tarn.close().await?;
        Ok::<_, BoxError>((data.n * data.dim * 4) as f64 / best / 1e9)
    })?;
    Ok(json!({"sql": sql, "search": search,
              "exact": {"gbps_search": gbps_search, "gbps_sql": gbps_sql}}))
}

/// SQL searches, then the same through `tarn-search`, on the database a `table` phase
/// left in `WORKDIR/db` (nothing is loaded; the index is built again if it was
/// dropped): for profiling the statement path alone.
fn phase_sql(args: &Args, data: &Data) -> Res<Value> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let params = query_params(data);
    let secret = std::fs::read_to_string(args.work.join("secret"))?;
    let sql = rt.block_on(async {
        let tarn = Tarn::open_with(args.work.join("db"), Options::new()).await?;
        let s = reconnect(&tarn, &secret).await?;
        // The table phase ends by dropping the index (for its exact figure).
        let start = Instant::now();
        s.query("ws", &create_index(args.params), &[]).await?;
        eprintln!("sql: index ready in {:.1} s", start.elapsed().as_secs_f64());
        let runs = sql_runs(&s, args, data, &params).await?;
        let filtered = sql_filtered(&s, data, &params).await?;
        tarn.close().await?;
        Ok::<_, BoxError>(json!({"runs": runs, "filtered": filtered}))
    })?;
    // And tarn-search on the same files, in the same process, for the SQL ÷ direct ratio.
    let (search, _, _) = direct(args, data, &args.work.join("db"))?;
    Ok(json!({"sql": sql, "search": search}))
}

/// `cat < t`, evaluated a block at a time.
struct CatBelow {
    column: tarn_catalog::ColumnId,
    t: i32,
}

impl RowFilter for CatBelow {
    fn block_mask(
        &self,
        chunk: &Chunk,
        live: Option<&BooleanBuffer>,
    ) -> tarn_search::Result<Option<BooleanBuffer>> {
        let cat = chunk
            .column(self.column)
            .expect("cat is stored")
            .as_primitive::<Int32Type>();
        let pass = BooleanBuffer::collect_bool(cat.len(), |i| {
            live.is_none_or(|l| l.value(i)) && cat.value(i) < self.t
        });
        Ok(Some(pass))
    }
}

/// Through `tarn-search` on the database the SQL phase built: (runs, per threshold
/// (exact ms, graph ms, graph recall), exact GB/s).
#[allow(clippy::type_complexity)]
fn direct(args: &Args, data: &Data, dir: &Path) -> Res<(Value, Vec<(f64, f64, f64)>, f64)> {
    let db = Database::open(
        dir,
        StorageOptions {
            sync: SyncMode::Process,
            background: false,
            index_builder: Some(Arc::new(tarn_search::SearchIndexBuilder)),
            ..StorageOptions::default()
        },
    )?;
    let catalog = db.catalog();
    let def = catalog.table("bench", "ws", "t").ok_or("table t")?.clone();
    let e = def.column("e").ok_or("column e")?.id;
    let cat = def.column("cat").ok_or("column cat")?.id;
    let index = catalog
        .indexes_of(def.id)
        .first()
        .map(|i| i.id)
        .ok_or("no index")?;
    let version: Arc<TableVersion> = db.table(def.id).ok_or("table data")?.snapshot();
    // Rows were appended in order with nothing deleted: row id = first + id.
    let first = version.next_row_id() - data.n as u64;
    for probe in [0, data.n / 2, data.n - 1] {
        let rows = version.rows(&[first + probe as u64])?;
        let (chunk, pos) = rows.first().ok_or("probe row")?;
        let id_col = def.column("id").ok_or("column id")?.id;
        let got = chunk
            .column(id_col)
            .ok_or("id stored")?
            .as_primitive::<Int64Type>()
            .value(pos[0]);
        if got != probe as i64 {
            return Err(format!(
                "row id {} holds id {got}, not {probe}",
                first + probe as u64
            )
            .into());
        }
    }
    let queries: Vec<QueryValue> = (0..data.nq)
        .map(|i| QueryValue::Vector(data.query(i).to_vec()))
        .collect();
    let search = |i: usize, ef: Option<usize>, filter: Option<&dyn RowFilter>| -> Vec<i64> {
        let req = SearchRequest {
            column: e,
            query: &queries[i],
            k: K,
            filter,
            index: ef.map(|ef| IndexUse {
                id: index,
                ef_search: ef,
            }),
        };
        tarn_search::top_k(&version, &req)
            .expect("search")
            .into_iter()
            .map(|s| (s.id - first) as i64)
            .collect()
    };
    let mut runs = Vec::new();
    for &ef in &args.efs {
        for &threads in &args.threads {
            let (found, qps, mean) = measure(data.nq, threads, &|i| search(i, Some(ef), None));
            let r = data.recall(&found);
            eprintln!(
                "search: ef {ef} threads {threads}: recall {r:.4}, {qps:.0} q/s (mean {mean:.0})"
            );
            runs.push(run_json(ef, threads, r, (qps, mean)));
        }
    }
    let mut filtered = Vec::new();
    for (j, &t) in data.thresholds.iter().enumerate() {
        let f = CatBelow { column: cat, t };
        let timed = |ef: Option<usize>| {
            let few = data.nq.min(100);
            let start = Instant::now();
            let found: Vec<Vec<i64>> = (0..few).map(|i| search(i, ef, Some(&f))).collect();
            (start.elapsed().as_secs_f64() * 1e3 / few as f64, found)
        };
        let (exact_ms, _) = timed(None);
        let (graph_ms, found) = timed(Some(tarn_search::DEFAULT_EF_SEARCH));
        let r = recall(&found, &data.gt_cat[j], K);
        eprintln!(
            "search: cat < {t}: graph {graph_ms:.2} ms (recall {r:.4}), exact {exact_ms:.2} ms"
        );
        filtered.push((exact_ms, graph_ms, r));
    }
    let mut best = f64::MAX;
    for i in 0..data.nq.min(10) {
        let start = Instant::now();
        std::hint::black_box(search(i, None, None));
        best = best.min(start.elapsed().as_secs_f64());
    }
    let gbps = (data.n * data.dim * 4) as f64 / best / 1e9;
    Ok((json!({"runs": runs}), filtered, gbps))
}

/// Runs this binary again for one phase and returns its JSON.
fn child(phase: &str) -> Res<Value> {
    let exe = std::env::current_exe()?;
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    args.extend(["--phase".into(), phase.into()]);
    let out = Command::new(exe)
        .args(args)
        .stderr(std::process::Stdio::inherit())
        .output()?;
    if !out.status.success() {
        return Err(format!("phase {phase} failed: {}", out.status).into());
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(&k) {
                    Some(existing) => merge(existing, v),
                    None => {
                        a.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

fn main() -> ExitCode {
    let run = || -> Res<Value> {
        let args = parse_args()?;
        std::fs::create_dir_all(&args.work)?;
        let data = Data::load(&args.data)?;
        let mut out = json!({"n": data.n, "dim": data.dim, "nq": data.nq,
            "m": args.params.m, "ef_construction": args.params.ef_construction,
            "kernel": format!("{:?}", tarn_vector::Kernel::best())});
        match args.phase.as_deref() {
            Some("graph") => merge(&mut out, phase_graph(&args, &data)?),
            Some("table") => merge(&mut out, phase_table(&args, &data)?),
            Some("sql") => merge(&mut out, phase_sql(&args, &data)?),
            Some(other) => return Err(format!("unknown phase {other}").into()),
            None => {
                merge(&mut out, child("graph")?);
                merge(&mut out, child("table")?);
            }
        }
        Ok(out)
    };
    match run() {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tarn-vector-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
