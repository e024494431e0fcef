//! SQL benchmarks of the foundation issue. Fixed data, parameters in the bench names.
//!
//! - `insert_single/{fsync,process}`: one-row INSERT statements, one after another.
//! - `insert_bulk/values_1000`: 1000-row literal VALUES statements (throughput in rows).
//! - `insert_bulk/arrow_1000`: `insert_arrow` of one 1000-row record batch.
//! - `insert_bulk/batch_1000`: `query_batch` with 1000 parameter sets.
//! - `insert_concurrent/{one_table,separate_tables}/{1,4,16}`: durable (fsync) single-row
//!   INSERT statements from 1, 4 or 16 concurrent writers on a multi-threaded runtime, all
//!   into one table or each into its own; throughput in statements/s. Group commit
//!   shares one fsync among the writers waiting at that moment.
//! - `scan_groupby_1M/{tarn,memtable}`: `SELECT id % 100, count(*), avg(x) … GROUP BY` over
//!   1M rows of (int8, text ~50 B, float8) in Tarn and in a DataFusion `MemTable` in the
//!   same run; ratio = memtable time ÷ tarn time.
//!
//! Run: `cargo bench -p tarn-benches --bench sql`.

// criterion's macros generate undocumented public functions.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;
use serde_json::json;
use tarn::{Options, Session, SyncMode, Tarn};
use tarn_benches::fixture;

const TEXT: &str = "the quick brown fox jumps over the lazy dog, twice";

fn values(start: i64, n: i64) -> String {
    (start..start + n)
        .map(|i| format!("({i}, '{TEXT} {}', {}.5)", i % 1000, i % 997))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn setup(sync: SyncMode) -> (tempfile::TempDir, Tarn, Session) {
    let dir = tempfile::tempdir().expect("tempdir");
    let tarn = Tarn::open_with(dir.path(), Options::default().sync(sync))
        .await
        .expect("open");
    let s = fixture(&tarn).await.expect("fixture");
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."t" (id INT8, s TEXT, x FLOAT8) USING engine"#,
        &[],
    )
    .await
    .expect("create");
    (dir, tarn, s)
}

fn inserts(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut g = c.benchmark_group("insert_single");
    g.throughput(Throughput::Elements(1));
    for (name, sync) in [("fsync", SyncMode::Full), ("process", SyncMode::Process)] {
        let (_dir, _tarn, s) = rt.block_on(setup(sync));
        let mut i = 0i64;
        g.bench_function(name, |b| {
            b.to_async(&rt).iter(|| {
                i += 1;
                let s = s.clone();
                async move {
                    s.query(
                        "ws",
                        r#"INSERT INTO "ws"."t" VALUES ($1, $2, $3)"#,
                        &[json!(i), json!(TEXT), json!(0.5)],
                    )
                    .await
                    .expect("insert")
                }
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("insert_bulk");
    g.throughput(Throughput::Elements(1000));
    let (_dir, _tarn, s) = rt.block_on(setup(SyncMode::Full));
    let mut start = 0i64;
    // Inputs are built in the (untimed) setup of `iter_batched`: only Tarn is measured.
    g.bench_function("values_1000", |b| {
        b.to_async(&rt).iter_batched(
            || {
                start += 1000;
                format!(r#"INSERT INTO "ws"."t" VALUES {}"#, values(start, 1000))
            },
            |sql| {
                let s = s.clone();
                async move { s.query("ws", &sql, &[]).await.expect("insert") }
            },
            BatchSize::PerIteration,
        )
    });
    let schema = Arc::new(datafusion::arrow::datatypes::Schema::new(vec![
        datafusion::arrow::datatypes::Field::new(
            "id",
            datafusion::arrow::datatypes::DataType::Int64,
            false,
        ),
        datafusion::arrow::datatypes::Field::new(
            "s",
            datafusion::arrow::datatypes::DataType::Utf8,
            false,
        ),
        datafusion::arrow::datatypes::Field::new(
            "x",
            datafusion::arrow::datatypes::DataType::Float64,
            false,
        ),
    ]));
    g.bench_function("arrow_1000", |b| {
        b.to_async(&rt).iter_batched(
            || {
                start += 1000;
                let ids: Vec<i64> = (start..start + 1000).collect();
                let texts: Vec<String> =
                    ids.iter().map(|i| format!("{TEXT} {}", i % 1000)).collect();
                let xs: Vec<f64> = ids.iter().map(|i| (i % 997) as f64 + 0.5).collect();
                datafusion::arrow::record_batch::RecordBatch::try_new(
                    schema.clone(),
                    vec![
                        Arc::new(datafusion::arrow::array::Int64Array::from(ids)),
                        Arc::new(datafusion::arrow::array::StringArray::from(texts)),
                        Arc::new(datafusion::arrow::array::Float64Array::from(xs)),
                    ],
                )
                .expect("batch")
            },
            |batch| {
                let s = s.clone();
                async move { s.insert_arrow("ws", "t", &[batch]).await.expect("insert") }
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("batch_1000", |b| {
        b.to_async(&rt).iter_batched(
            || {
                start += 1000;
                (start..start + 1000)
                    .map(|i| vec![json!(i), json!(TEXT), json!(0.5)])
                    .collect::<Vec<_>>()
            },
            |sets| {
                let s = s.clone();
                async move {
                    s.query_batch("ws", r#"INSERT INTO "ws"."t" VALUES ($1, $2, $3)"#, &sets)
                        .await
                        .expect("batch")
                }
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

/// Durable single-row inserts from `writers` concurrent tasks: into `"ws"."t"` for all of
/// them, or `"ws"."t{w}"` each.
fn concurrent_inserts(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut g = c.benchmark_group("insert_concurrent");
    g.throughput(Throughput::Elements(1));
    for separate in [false, true] {
        for writers in [1usize, 4, 16] {
            let (_dir, _tarn, s) = rt.block_on(setup(SyncMode::Full));
            rt.block_on(async {
                for w in 0..writers {
                    let sql = format!(
                        r#"CREATE TABLE "ws"."t{w}" (id INT8, s TEXT, x FLOAT8) USING engine"#
                    );
                    s.query("ws", &sql, &[]).await.expect("create");
                }
            });
            let kind = if separate {
                "separate_tables"
            } else {
                "one_table"
            };
            let next = Arc::new(std::sync::atomic::AtomicI64::new(0));
            g.bench_function(BenchmarkId::new(kind, writers), |b| {
                b.to_async(&rt).iter_custom(|iters| {
                    let (s, next) = (s.clone(), next.clone());
                    async move {
                        let start = std::time::Instant::now();
                        let mut tasks = Vec::with_capacity(writers);
                        for w in 0..writers {
                            let (s, next) = (s.clone(), next.clone());
                            // Iterations are shared out; the first writers take the rest.
                            let n = iters / writers as u64
                                + u64::from((w as u64) < iters % writers as u64);
                            let sql = if separate {
                                format!(r#"INSERT INTO "ws"."t{w}" VALUES ($1, $2, $3)"#)
                            } else {
                                r#"INSERT INTO "ws"."t" VALUES ($1, $2, $3)"#.to_string()
                            };
                            tasks.push(tokio::spawn(async move {
                                for _ in 0..n {
                                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                    s.query("ws", &sql, &[json!(i), json!(TEXT), json!(0.5)])
                                        .await
                                        .expect("insert");
                                }
                            }));
                        }
                        for t in tasks {
                            t.await.expect("writer");
                        }
                        start.elapsed()
                    }
                })
            });
        }
    }
    g.finish();
}

const ROWS: i64 = 1_000_000;
const GROUP_BY: &str = "SELECT id % 100 AS g, count(*), avg(x) FROM \"ws\".\"t\" GROUP BY id % 100";

fn scan(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (_dir, _tarn, s) = rt.block_on(setup(SyncMode::Process));
    rt.block_on(async {
        for start in (0..ROWS).step_by(10_000) {
            let sql = format!(r#"INSERT INTO "ws"."t" VALUES {}"#, values(start, 10_000));
            s.query("ws", &sql, &[]).await.expect("load");
        }
    });
    let ctx = SessionContext::new();
    rt.block_on(async {
        let all = s
            .query_arrow("ws", r#"SELECT * FROM "ws"."t""#, &[])
            .await
            .expect("read back");
        // The same batches, spread over as many partitions as Tarn's scan uses.
        let batches = all.batches.unwrap_or_default();
        let parts = ctx.state().config().target_partitions().max(1);
        let per = batches.len().div_ceil(parts).max(1);
        let partitions: Vec<Vec<_>> = batches.chunks(per).map(|c| c.to_vec()).collect();
        let table = MemTable::try_new(all.schema.clone(), partitions).expect("memtable");
        let schema = datafusion::catalog::MemorySchemaProvider::new();
        ctx.catalog("datafusion")
            .expect("default catalog")
            .register_schema("ws", Arc::new(schema))
            .expect("schema");
        ctx.register_table("ws.t", Arc::new(table))
            .expect("register");
    });
    let mut g = c.benchmark_group("scan_groupby_1M");
    g.throughput(Throughput::Elements(ROWS as u64));
    g.measurement_time(Duration::from_secs(6));
    g.bench_function(BenchmarkId::new("tarn", ROWS), |b| {
        b.to_async(&rt).iter(|| {
            let s = s.clone();
            async move { s.query_arrow("ws", GROUP_BY, &[]).await.expect("query") }
        })
    });
    g.bench_function(BenchmarkId::new("memtable", ROWS), |b| {
        b.to_async(&rt).iter(|| {
            let ctx = ctx.clone();
            async move {
                ctx.sql(GROUP_BY)
                    .await
                    .expect("plan")
                    .collect()
                    .await
                    .expect("run")
            }
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    targets = inserts, concurrent_inserts, scan
}
criterion_main!(benches);
