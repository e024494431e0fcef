//! Vector search benchmarks of the vector search issue. Seeded clustered data (20,000 ×
//! 128, 200 clusters), parameters in the bench names. The full-size figures against
//! hnswlib, faiss and LanceDB come from `benches/compare/vectors.py`; these keep the
//! inner loops and the SQL overhead in view between runs.
//!
//! - `kernel_dot/{kernel}/{dim}`: one dot product on every kernel this CPU runs.
//! - `graph_search/ef{16,64,256}`: one top-10 walk of a 20,000-node graph (M 16,
//!   ef_construction 200) through `tarn-vector`.
//! - `top10/{sql_fast,sql_planned}`: the same top-10 on the same data in an indexed
//!   table (one segment, one graph, default ef_search 64): the SQL statement that takes
//!   the fast path, and the same statement with `WHERE true`, which goes through
//!   DataFusion's planner and the search node. `graph_search/ef64` is the walk alone.
//! - `exact_scan/{kernel,sql}`: scoring all 20,000 vectors (throughput in bytes).
//!
//! Run: `cargo bench --bench vector` (no `-p`: it would resolve features differently
//! and rebuild DataFusion).

// criterion's macros generate undocumented public functions.
#![allow(missing_docs)]

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use datafusion::arrow::buffer::Buffer;
use serde_json::{Value, json};
use tarn::{Options, SyncMode, Tarn};
use tarn_benches::fixture;
use tarn_vector::{Graph, HnswParams, Kernel, Query};

const N: usize = 20_000;
const DIM: usize = 128;

/// xorshift64*: the same data on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Roughly normal: the sum of four uniforms, centred.
    fn normal(&mut self) -> f32 {
        (0..4)
            .map(|_| (self.next() >> 11) as f32 / (1u64 << 53) as f32)
            .sum::<f32>()
            - 2.0
    }
}

/// `n` vectors around 200 seeded centres, back to back.
fn clustered(rng: &mut Rng, n: usize) -> Vec<f32> {
    let centres: Vec<f32> = (0..200 * DIM).map(|_| rng.normal() * 2.0).collect();
    let mut out = Vec::with_capacity(n * DIM);
    for _ in 0..n {
        let c = (rng.next() % 200) as usize;
        out.extend((0..DIM).map(|j| centres[c * DIM + j] + rng.normal()));
    }
    out
}

fn kernels(c: &mut Criterion) {
    let mut g = c.benchmark_group("kernel_dot");
    let mut rng = Rng(7);
    for dim in [128usize, 384, 768] {
        let a: Vec<f32> = (0..dim).map(|_| rng.normal()).collect();
        let b: Vec<f32> = (0..dim).map(|_| rng.normal()).collect();
        g.throughput(Throughput::Bytes((dim * 8) as u64));
        for kernel in Kernel::supported() {
            let Some(f) = kernel.functions() else {
                continue;
            };
            g.bench_function(BenchmarkId::new(format!("{kernel:?}"), dim), |bench| {
                bench.iter(|| (f.dot)(std::hint::black_box(&a), std::hint::black_box(&b)))
            });
        }
    }
    g.finish();
}

/// The base vectors and 256 queries, the same for every group.
fn data() -> (Vec<f32>, Vec<f32>) {
    let mut rng = Rng(11);
    let base = clustered(&mut rng, N);
    (base, clustered(&mut rng, 256))
}

fn graph(c: &mut Criterion) {
    let (base, queries) = data();
    let ids: Vec<u32> = (0..N as u32).collect();
    let mut file = Vec::new();
    tarn_vector::build(&base, DIM, &ids, HnswParams::default(), &(), &mut file).expect("build");
    let graph = Graph::open(Buffer::from_vec(file)).expect("open");
    let mut g = c.benchmark_group("graph_search");
    for ef in [16usize, 64, 256] {
        let mut i = 0;
        g.bench_function(format!("ef{ef}"), |bench| {
            bench.iter(|| {
                i = (i + 1) % 256;
                graph.search(&queries[i * DIM..(i + 1) * DIM], 10, ef, None)
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("exact_scan");
    g.throughput(Throughput::Bytes((N * DIM * 4) as u64));
    let q = Query::new(&queries[..DIM]).expect("query");
    let mut out = Vec::with_capacity(N);
    g.bench_function("kernel", |bench| {
        bench.iter(|| q.cosine_each(&base, DIM, &mut out))
    });
    g.finish();
}

fn sql(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let (base, queries) = data();
    let queries: Vec<Value> = queries.chunks_exact(DIM).map(|q| json!(q)).collect();
    let s = rt.block_on(async {
        let tarn = Tarn::open_with(dir.path(), Options::new().sync(SyncMode::Process))
            .await
            .expect("open");
        let s = fixture(&tarn).await.expect("fixture");
        s.query(
            "ws",
            &format!(r#"CREATE TABLE "ws"."t" (id INT8, e FLOAT4[{DIM}]) USING engine"#),
            &[],
        )
        .await
        .expect("create");
        for (b, chunk) in base.chunks(1000 * DIM).enumerate() {
            let sets: Vec<Vec<Value>> = chunk
                .chunks_exact(DIM)
                .enumerate()
                .map(|(i, v)| vec![json!(b * 1000 + i), json!(v)])
                .collect();
            s.query_batch("ws", r#"INSERT INTO "ws"."t" VALUES ($1, $2)"#, &sets)
                .await
                .expect("insert");
        }
        s.query("ws", r#"VACUUM "ws"."t""#, &[])
            .await
            .expect("vacuum");
        s.query(
            "ws",
            r#"CREATE INDEX e_idx ON "ws"."t" USING engine_index (e DESC)"#,
            &[],
        )
        .await
        .expect("index");
        (tarn, s)
    });
    let (_tarn, s) = s;
    let mut g = c.benchmark_group("top10");
    for (name, sql) in [
        (
            "sql_fast",
            r#"SELECT id FROM "ws"."t" ORDER BY e <#> $1 DESC LIMIT 10"#,
        ),
        (
            "sql_planned",
            r#"SELECT id FROM "ws"."t" WHERE true ORDER BY e <#> $1 DESC LIMIT 10"#,
        ),
    ] {
        let mut i = 0;
        g.bench_function(name, |bench| {
            bench.iter(|| {
                i = (i + 1) % queries.len();
                rt.block_on(s.query_arrow("ws", sql, std::slice::from_ref(&queries[i])))
                    .expect("search")
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("exact_scan");
    g.throughput(Throughput::Bytes((N * DIM * 4) as u64));
    let exact = r#"SELECT id FROM "ws"."t" ORDER BY e <#> $1 DESC LIMIT 10"#;
    rt.block_on(s.query("ws", "DROP INDEX e_idx", &[]))
        .expect("drop index");
    g.bench_function("sql", |bench| {
        bench.iter(|| {
            rt.block_on(s.query_arrow("ws", exact, std::slice::from_ref(&queries[0])))
                .expect("search")
        })
    });
    g.finish();
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
    targets = kernels, graph, sql
}
criterion_main!(benches);
