//! `<#>` through the public API (SPEC §5): every way of passing a query vector, top-k
//! against a brute-force model with deletes, updates, filters and segments, freshness
//! across VACUUM and reopen, and the plan that answers it.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tarn::{ErrorKind, Options, Session, SyncMode, Tarn};
use tarn_tests::{Rng, child_test, fixture, fixture_with_key, reconnect};

type TestResult = Result<(), Box<dyn std::error::Error>>;

async fn rows(s: &Session, sql: &str, params: &[Value]) -> Result<Vec<Vec<Value>>, tarn::Error> {
    Ok(s.query("ws", sql, params).await?.rows.unwrap_or_default())
}

fn ids(rows: &[Vec<Value>]) -> Vec<i64> {
    rows.iter().filter_map(|r| r[0].as_i64()).collect()
}

#[tokio::test]
async fn query_vectors_in_every_form() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let s = fixture(&tarn).await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."t" (id INT, e FLOAT4[3], b FLOAT4[][]) USING engine"#,
        &[],
    )
    .await?;
    s.query(
        "ws",
        r#"INSERT INTO "ws"."t" VALUES (1, '{1,0,0}', '{{1,0,0},{0,1,0}}'), (2, '{0,1,0}', '{{0,0,1}}')"#,
        &[],
    )
    .await?;
    let top = r#"SELECT id FROM "ws"."t" ORDER BY e <#> $1::float4[] DESC LIMIT 1"#;
    assert_eq!(
        ids(&rows(&s, top, &[json!([0.1, 0.9, 0.0])]).await?),
        vec![2]
    );
    assert_eq!(ids(&rows(&s, top, &[json!("{0.9,0.1,0}")]).await?), vec![1]);
    let bag = r#"SELECT id FROM "ws"."t" ORDER BY b <#> $1::float4[][] DESC LIMIT 1"#;
    assert_eq!(ids(&rows(&s, bag, &[json!([[0, 0, 1]])]).await?), vec![2]);
    assert_eq!(ids(&rows(&s, bag, &[json!("{{0,1,0}}")]).await?), vec![1]);

    for (param, message) in [
        (json!([1, 2]), "expected 3 dimensions, not 2"),
        (json!("{1,2,3,4}"), "expected 3 dimensions, not 4"),
        // Past 4,096 elements an array binds as one list, made once.
        (json!(vec![0.5; 5000]), "expected 3 dimensions, not 5000"),
        (
            json!([1, null, 0]),
            "column \"e\": vector elements must not be NULL",
        ),
        (
            json!([1e39, 0, 0]),
            "column \"e\": vector elements must be finite",
        ),
    ] {
        let err = s
            .query("ws", top, std::slice::from_ref(&param))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::BadRequest, "{param}: {err}");
        assert!(err.to_string().contains(message), "{param}: {err}");
    }
    let err = s
        .query("ws", bag, &[json!([[1, 0, 0], [1, 0]])])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("ragged"), "{err}");
    Ok(())
}

/// What the test knows of each live row: its vector (None = NULL), its category and
/// the order in which it was (last) written, which is the row id order.
#[derive(Clone)]
struct Row {
    v: Option<Vec<f32>>,
    cat: i64,
    seq: u64,
}

/// Which model rows a query's filter keeps.
type RowTest = Box<dyn Fn(&Row) -> bool>;

fn cosine(a: &[f32], b: &[f32]) -> Option<f64> {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    (na > 0.0 && nb > 0.0).then(|| dot / (na * nb))
}

fn vector(r: &mut Rng, dim: usize) -> Vec<f32> {
    (0..dim)
        .map(|_| (r.below(2001) as f32 - 1000.0) / 1000.0)
        .collect()
}

fn literal(v: &[f32]) -> String {
    let parts: Vec<String> = v.iter().map(|x| x.to_string()).collect();
    format!("'{{{}}}'", parts.join(","))
}

#[tokio::test]
async fn top_k_equals_brute_force_across_segments_deletes_and_filters() -> TestResult {
    let dir = tempfile::tempdir()?;
    let tarn = Tarn::open_with(
        dir.path(),
        Options::new()
            .sync(SyncMode::Process)
            .memtable_bytes(64 << 10)
            .background_maintenance(false),
    )
    .await?;
    let s = fixture(&tarn).await?;
    let dim = 8;
    create_t(&s).await?;
    let mut rng = Rng(42);
    let mut model: BTreeMap<i64, Row> = BTreeMap::new();
    let mut seq = 0u64;
    let mut next_id = 0i64;
    for round in 0..6 {
        // Inserts (a few NULL vectors), then deletes and updates of random rows.
        let mut values = Vec::new();
        for _ in 0..300 {
            let v = (rng.below(20) != 0).then(|| vector(&mut rng, dim));
            let cat = rng.below(10) as i64;
            values.push(format!(
                "({next_id}, {}, {cat})",
                v.as_ref().map_or("NULL".into(), |v| literal(v))
            ));
            model.insert(next_id, Row { v, cat, seq });
            seq += 1;
            next_id += 1;
        }
        s.query(
            "ws",
            &format!(r#"INSERT INTO "ws"."t" VALUES {}"#, values.join(", ")),
            &[],
        )
        .await?;
        for _ in 0..30 {
            let id = rng.below(next_id as u64) as i64;
            s.query(
                "ws",
                &format!(r#"DELETE FROM "ws"."t" WHERE id = {id}"#),
                &[],
            )
            .await?;
            model.remove(&id);
        }
        for _ in 0..30 {
            let id = rng.below(next_id as u64) as i64;
            let v = vector(&mut rng, dim);
            let n = s
                .query(
                    "ws",
                    &format!(r#"UPDATE "ws"."t" SET e = {} WHERE id = {id}"#, literal(&v)),
                    &[],
                )
                .await?
                .rows_affected;
            if n == 1 {
                let row = model.get_mut(&id).ok_or("model out of step")?;
                row.v = Some(v);
                row.seq = seq;
                seq += 1;
            }
        }
        if round % 2 == 1 {
            s.query("ws", r#"VACUUM "ws"."t""#, &[]).await?;
        }

        for _ in 0..8 {
            let q = vector(&mut rng, dim);
            let k = [1, 5, 10, 50, 2000][rng.below(5) as usize];
            let (filter, pass): (String, RowTest) = match rng.below(3) {
                0 => (String::new(), Box::new(|_| true)),
                1 => {
                    let c = rng.below(10) as i64;
                    (
                        format!("WHERE cat = {c}"),
                        Box::new(move |r: &Row| r.cat == c),
                    )
                }
                _ => ("WHERE cat < 2".into(), Box::new(|r: &Row| r.cat < 2)),
            };
            let sql = format!(
                r#"SELECT id, e <#> {q} AS score FROM "ws"."t" {filter} ORDER BY score DESC LIMIT {k}"#,
                q = literal(&q)
            );
            let got = rows(&s, &sql, &[]).await?;
            let mut want: Vec<(i64, Option<f64>, u64)> = model
                .iter()
                .filter(|(_, r)| pass(r))
                .map(|(id, r)| (*id, r.v.as_ref().and_then(|v| cosine(v, &q)), r.seq))
                .collect();
            want.sort_by(|a, b| match (a.1, b.1) {
                (Some(x), Some(y)) => y.total_cmp(&x).then(a.2.cmp(&b.2)),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => a.2.cmp(&b.2),
            });
            want.truncate(k);
            assert_eq!(got.len(), want.len(), "{sql}");
            for (g, w) in got.iter().zip(&want) {
                let score = g[1].as_f64();
                match (score, w.1) {
                    (Some(gs), Some(ws)) => {
                        assert!((gs - ws).abs() < 1e-5, "{sql}: {g:?} vs {w:?}")
                    }
                    (None, None) => assert_eq!(g[0].as_i64(), Some(w.0), "{sql}"),
                    _ => panic!("{sql}: {g:?} vs {w:?}"),
                }
            }
            // Scores are distinct random values: the ids agree too, except between
            // scores equal in float32.
            let got_ids = ids(&got);
            let want_ids: Vec<i64> = want.iter().map(|w| w.0).collect();
            let agree = got_ids
                .iter()
                .zip(&want_ids)
                .filter(|(a, b)| a == b)
                .count();
            assert!(
                agree + 2 >= want_ids.len(),
                "{sql}: {got_ids:?} vs {want_ids:?}"
            );
        }
    }
    Ok(())
}

#[tokio::test]
async fn rows_are_searchable_when_the_statement_returns() -> TestResult {
    let dir = tempfile::tempdir()?;
    let options = || {
        Options::new()
            .sync(SyncMode::Process)
            .memtable_bytes(16 << 10)
            .background_maintenance(false)
    };
    let tarn = Tarn::open_with(dir.path(), options()).await?;
    let (s, secret) = fixture_with_key(&tarn).await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."t" (id INT PRIMARY KEY, e FLOAT4[4]) USING engine"#,
        &[],
    )
    .await?;
    let values: Vec<String> = (0..500)
        .map(|i| format!("({i}, '{{{},{},1,1}}')", i % 7, i % 11))
        .collect();
    s.query(
        "ws",
        &format!(r#"INSERT INTO "ws"."t" VALUES {}"#, values.join(",")),
        &[],
    )
    .await?;
    s.query("ws", r#"VACUUM "ws"."t""#, &[]).await?;
    let top1 = r#"SELECT id FROM "ws"."t" ORDER BY e <#> $1::float4[] DESC LIMIT 1"#;
    let probe = json!([-5, 9, -3, 0.5]);

    s.query(
        "ws",
        r#"INSERT INTO "ws"."t" VALUES (1000, '{-5,9,-3,0.5}')"#,
        &[],
    )
    .await?;
    assert_eq!(
        ids(&rows(&s, top1, std::slice::from_ref(&probe)).await?),
        vec![1000]
    );
    // Updated: the new vector is found, the old one is not.
    s.query(
        "ws",
        r#"UPDATE "ws"."t" SET e = '{7,-2,4,-9}' WHERE id = 1000"#,
        &[],
    )
    .await?;
    assert_ne!(
        ids(&rows(&s, top1, std::slice::from_ref(&probe)).await?),
        vec![1000]
    );
    assert_eq!(
        ids(&rows(&s, top1, &[json!([7, -2, 4, -9])]).await?),
        vec![1000]
    );
    // Sealed into a segment, then deleted.
    s.query("ws", r#"VACUUM "ws"."t""#, &[]).await?;
    assert_eq!(
        ids(&rows(&s, top1, &[json!([7, -2, 4, -9])]).await?),
        vec![1000]
    );
    s.query("ws", r#"DELETE FROM "ws"."t" WHERE id = 1000"#, &[])
        .await?;
    assert_ne!(
        ids(&rows(&s, top1, &[json!([7, -2, 4, -9])]).await?),
        vec![1000]
    );
    // And after a reopen.
    s.query(
        "ws",
        r#"INSERT INTO "ws"."t" VALUES (2000, '{1,-8,6,-4}')"#,
        &[],
    )
    .await?;
    tarn.close().await?;
    drop(tarn);
    let tarn = Tarn::open_with(dir.path(), options()).await?;
    let s = reconnect(&tarn, &secret).await?;
    assert_eq!(
        ids(&rows(&s, top1, &[json!([1, -8, 6, -4])]).await?),
        vec![2000]
    );
    assert_ne!(
        ids(&rows(&s, top1, &[json!([7, -2, 4, -9])]).await?),
        vec![1000]
    );
    assert_eq!(
        rows(&s, r#"SELECT count(*) FROM "ws"."t""#, &[]).await?,
        vec![vec![json!(501)]]
    );
    Ok(())
}

#[tokio::test]
async fn explain_names_the_search_node() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let s = fixture(&tarn).await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."t" (id INT, e FLOAT4[2], cat TEXT) USING engine"#,
        &[],
    )
    .await?;
    for sql in [
        r#"CREATE VIEW "ws"."tv" AS SELECT id, e FROM "ws"."t" WHERE cat <> 'b'"#,
        r#"CREATE VIEW "ws"."tvv" AS SELECT * FROM "ws"."tv" WHERE id > 0"#,
        r#"CREATE VIEW "ws"."scored" AS SELECT id, e <#> '{1,0}' AS s FROM "ws"."t""#,
    ] {
        s.query("ws", sql, &[]).await?;
    }
    let plan = |sql: &str| {
        let s = s.clone();
        let sql = format!("EXPLAIN {sql}");
        async move {
            let r = rows(&s, &sql, &[]).await?;
            Ok::<String, tarn::Error>(
                r.iter()
                    .map(|row| {
                        row.iter()
                            .map(|v| v.to_string())
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .collect::<Vec<_>>()
                    .join("\n"),
            )
        }
    };
    for sql in [
        r#"SELECT id, e <#> '{1,0}' AS s FROM "ws"."t" ORDER BY s DESC LIMIT 3"#,
        r#"SELECT id FROM "ws"."t" WHERE cat = 'a' ORDER BY e <#> '{1,0}' DESC LIMIT 3 OFFSET 2"#,
        r#"SELECT * FROM (SELECT id, e <#> '{1,0}' AS s FROM "ws"."t") AS x ORDER BY x.s DESC LIMIT 3"#,
        r#"WITH c AS (SELECT id, e FROM "ws"."t" WHERE cat <> 'b') SELECT id FROM c ORDER BY e <#> '{0,1}' DESC LIMIT 2"#,
        r#"SELECT id FROM "ws"."t" ORDER BY e <#> '{1,0}' DESC"#,
        // Through views: a filtering view, a view of a view, and a view's score column.
        r#"SELECT id FROM "ws"."tv" ORDER BY e <#> '{1,0}' DESC LIMIT 3"#,
        r#"SELECT id FROM "ws"."tvv" ORDER BY e <#> '{0,1}' DESC LIMIT 2"#,
        r#"SELECT id FROM "ws"."scored" ORDER BY s DESC LIMIT 3"#,
    ] {
        let p = plan(sql).await?;
        assert!(p.contains("TarnSearch"), "{sql}:\n{p}");
        assert!(p.contains("SearchExec"), "{sql}:\n{p}");
        assert!(!p.contains("SortExec"), "{sql}:\n{p}");
    }
    // Shapes the node does not take: ascending, a second key, a join above the scan.
    for sql in [
        r#"SELECT id FROM "ws"."t" ORDER BY e <#> '{1,0}' ASC LIMIT 3"#,
        r#"SELECT id FROM "ws"."t" ORDER BY e <#> '{1,0}' DESC, id LIMIT 3"#,
    ] {
        let p = plan(sql).await?;
        assert!(!p.contains("TarnSearch"), "{sql}:\n{p}");
    }
    Ok(())
}

/// Creates the table most tests search: `"ws"."t" (id, e FLOAT4[], cat)`.
async fn create_t(s: &Session) -> tarn::Result<()> {
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."t" (id INT PRIMARY KEY, e FLOAT4[], cat INT) USING engine"#,
        &[],
    )
    .await
    .map(|_| ())
}

/// Options of the on-disk index tests: no background worker, so segments and builds
/// happen exactly when the test says.
fn manual() -> Options {
    Options::new()
        .sync(SyncMode::Process)
        .memtable_bytes(1 << 20)
        .background_maintenance(false)
}

fn index_files(dir: &std::path::Path) -> Vec<(String, std::time::SystemTime)> {
    let mut out: Vec<(String, std::time::SystemTime)> = std::fs::read_dir(dir.join("segments"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().to_string();
                    let modified = e.metadata().ok()?.modified().ok()?;
                    name.contains(".idx").then_some((name, modified))
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

async fn insert_vectors(s: &Session, rng: &mut Rng, from: i64, n: i64, dim: usize) -> TestResult {
    for start in (from..from + n).step_by(500) {
        let values: Vec<String> = (start..(start + 500).min(from + n))
            .map(|i| format!("({i}, {}, {})", literal(&vector(rng, dim)), i % 10))
            .collect();
        s.query(
            "ws",
            &format!(r#"INSERT INTO "ws"."t" VALUES {}"#, values.join(",")),
            &[],
        )
        .await?;
    }
    Ok(())
}

async fn explain_analyze(s: &Session, sql: &str) -> Result<String, tarn::Error> {
    let r = rows(s, &format!("EXPLAIN ANALYZE {sql}"), &[]).await?;
    Ok(r.iter()
        .map(|row| {
            row.iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n"))
}

#[tokio::test]
async fn hnsw_index_is_built_used_persisted_and_dropped() -> TestResult {
    let dir = tempfile::tempdir()?;
    let tarn = Tarn::open_with(dir.path(), manual()).await?;
    let (s, secret) = fixture_with_key(&tarn).await?;
    let dim = 16;
    create_t(&s).await?;
    let mut rng = Rng(7);
    insert_vectors(&s, &mut rng, 0, 4000, dim).await?;
    assert!(index_files(dir.path()).is_empty());
    s.query("ws", r#"CREATE INDEX e_idx ON "ws"."t" USING engine_index (e) WITH (m = 12, ef_construction = 100)"#, &[])
        .await?;
    // CREATE INDEX returned with the existing rows indexed.
    let built = index_files(dir.path());
    assert_eq!(built.len(), 1, "{built:?}");
    // Rows written after the index are searchable at once (the memtable is exact).
    insert_vectors(&s, &mut rng, 4000, 300, dim).await?;

    let sql = |q: &[f32], filter: &str, k: usize| {
        format!(
            r#"SELECT id FROM "ws"."t" {filter} ORDER BY e <#> {} DESC LIMIT {k}"#,
            literal(q)
        )
    };
    let mut hits = 0;
    let mut total = 0;
    for _ in 0..20 {
        let q = vector(&mut rng, dim);
        for filter in ["", "WHERE cat = 3"] {
            let got = ids(&rows(&s, &sql(&q, filter, 10), &[]).await?);
            // Without LIMIT the node ranks exactly: the reference.
            let exact_sql = format!(
                r#"SELECT id FROM "ws"."t" {filter} ORDER BY e <#> {} DESC"#,
                literal(&q)
            );
            let exact = ids(&rows(&s, &exact_sql, &[]).await?);
            assert_eq!(got.len(), 10);
            hits += got.iter().filter(|id| exact[..10].contains(id)).count();
            total += 10;
        }
    }
    let recall = hits as f64 / total as f64;
    assert!(recall >= 0.95, "recall@10 {recall}");
    let plan = explain_analyze(&s, &sql(&vector(&mut rng, dim), "", 10)).await?;
    assert!(plan.contains("index=e_idx ef_search=128"), "{plan}");
    assert!(plan.contains("graph_segments=1"), "{plan}");

    // SET engine.ef_search: this session's later queries (and its clones'), not others'.
    let other = reconnect(&tarn, &secret).await?;
    s.query("ws", "SET engine.ef_search = 200", &[]).await?;
    let q = vector(&mut rng, dim);
    let plan = explain_analyze(&s.clone(), &sql(&q, "", 10)).await?;
    assert!(plan.contains("index=e_idx ef_search=200"), "{plan}");
    let plan = explain_analyze(&other, &sql(&q, "", 10)).await?;
    assert!(plan.contains("index=e_idx ef_search=128"), "{plan}");
    assert_eq!(
        rows(&s, "SHOW engine.ef_search", &[]).await?,
        vec![vec![json!("200")]]
    );
    let err = s
        .query_batch("ws", "SET engine.ef_search = 5", &[vec![]])
        .await
        .unwrap_err();
    assert_eq!(err.status(), 400, "{}", err.message());
    // A width below k still returns k rows (the search widens until it has them).
    s.query("ws", "SET engine.ef_search TO 1", &[]).await?;
    assert_eq!(ids(&rows(&s, &sql(&q, "", 10), &[]).await?).len(), 10);
    s.query("ws", "RESET engine.ef_search", &[]).await?;
    let plan = explain_analyze(&s, &sql(&q, "", 10)).await?;
    assert!(plan.contains("index=e_idx ef_search=128"), "{plan}");
    assert_eq!(
        rows(&s, "SHOW engine.ef_search", &[]).await?,
        vec![vec![json!("default")]]
    );

    // Reopen: the graph is read back, not rebuilt.
    tarn.close().await?;
    drop(tarn);
    let tarn = Tarn::open_with(dir.path(), manual()).await?;
    let s = reconnect(&tarn, &secret).await?;
    let plan = explain_analyze(&s, &sql(&vector(&mut rng, dim), "", 5)).await?;
    assert!(plan.contains("graph_segments=1"), "{plan}");
    let after = index_files(dir.path());
    // close() sealed the 300 newer rows into a second segment, which has no graph yet.
    assert!(after.contains(&built[0]), "{built:?} vs {after:?}");

    // VACUUM compacts into one segment, builds its graph and drops the old file.
    s.query("ws", r#"DELETE FROM "ws"."t" WHERE id < 100"#, &[])
        .await?;
    s.query("ws", r#"VACUUM "ws"."t""#, &[]).await?;
    let compacted = index_files(dir.path());
    assert_eq!(compacted.len(), 1, "{compacted:?}");
    assert_ne!(compacted[0].0, built[0].0);
    let plan = explain_analyze(&s, &sql(&vector(&mut rng, dim), "WHERE cat < 5", 10)).await?;
    assert!(plan.contains("graph_segments=1"), "{plan}");
    assert_eq!(
        rows(&s, r#"SELECT count(*) FROM "ws"."t" WHERE id < 100"#, &[]).await?,
        vec![vec![json!(0)]]
    );

    // DROP INDEX: the plan goes exact and the file goes with the next checkpoint.
    s.query("ws", "DROP INDEX e_idx", &[]).await?;
    let plan = explain_analyze(&s, &sql(&vector(&mut rng, dim), "", 10)).await?;
    assert!(plan.contains("index=none"), "{plan}");
    s.query("ws", r#"VACUUM "ws"."t""#, &[]).await?;
    assert!(index_files(dir.path()).is_empty());
    Ok(())
}

#[tokio::test]
async fn filtered_top_k_never_under_returns_at_any_selectivity() -> TestResult {
    let dir = tempfile::tempdir()?;
    let tarn = Tarn::open_with(dir.path(), manual()).await?;
    let s = fixture(&tarn).await?;
    let dim = 8;
    create_t(&s).await?;
    let mut rng = Rng(11);
    insert_vectors(&s, &mut rng, 0, 5000, dim).await?;
    s.query(
        "ws",
        r#"CREATE INDEX ON "ws"."t" USING engine_index (e)"#,
        &[],
    )
    .await?;
    for (filter, matching) in [
        ("", 5000),
        ("WHERE id % 10 = 0", 500),
        ("WHERE id % 100 = 0", 50),
        ("WHERE id % 1000 = 0", 5),
        ("WHERE id = 4242", 1),
        ("WHERE id < 0", 0),
    ] {
        let q = vector(&mut rng, dim);
        let sql = format!(
            r#"SELECT id FROM "ws"."t" {filter} ORDER BY e <#> {} DESC LIMIT 10"#,
            literal(&q)
        );
        let got = ids(&rows(&s, &sql, &[]).await?);
        assert_eq!(got.len(), 10.min(matching), "{sql}");
        let exact_sql = format!(
            r#"SELECT id FROM "ws"."t" {filter} ORDER BY e <#> {} DESC"#,
            literal(&q)
        );
        let exact = ids(&rows(&s, &exact_sql, &[]).await?);
        let hits = got
            .iter()
            .filter(|id| exact[..got.len()].contains(id))
            .count();
        assert!(
            hits + 1 >= got.len(),
            "{sql}: {got:?} vs {:?}",
            &exact[..got.len()]
        );
    }
    Ok(())
}

#[tokio::test]
async fn maxsim_index_ranks_bags() -> TestResult {
    let dir = tempfile::tempdir()?;
    let tarn = Tarn::open_with(dir.path(), manual()).await?;
    let s = fixture(&tarn).await?;
    let dim = 8;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."b" (id INT PRIMARY KEY, e FLOAT4[][]) USING engine"#,
        &[],
    )
    .await?;
    let mut rng = Rng(5);
    let mut values = Vec::new();
    for i in 0..1500 {
        let bag: Vec<String> = (0..1 + i % 3)
            .map(|_| {
                let v: Vec<String> = vector(&mut rng, dim)
                    .iter()
                    .map(|x| x.to_string())
                    .collect();
                format!("{{{}}}", v.join(","))
            })
            .collect();
        values.push(format!("({i}, '{{{}}}')", bag.join(",")));
    }
    for chunk in values.chunks(500) {
        s.query(
            "ws",
            &format!(r#"INSERT INTO "ws"."b" VALUES {}"#, chunk.join(",")),
            &[],
        )
        .await?;
    }
    s.query(
        "ws",
        r#"CREATE INDEX ON "ws"."b" USING engine_index (e)"#,
        &[],
    )
    .await?;
    let mut hits = 0;
    for _ in 0..10 {
        let q: Vec<String> = (0..2)
            .map(|_| {
                let v: Vec<String> = vector(&mut rng, dim)
                    .iter()
                    .map(|x| x.to_string())
                    .collect();
                format!("{{{}}}", v.join(","))
            })
            .collect();
        let q = format!("'{{{}}}'::float4[][]", q.join(","));
        let got = ids(&rows(
            &s,
            &format!(r#"SELECT id FROM "ws"."b" ORDER BY e <#> {q} DESC LIMIT 10"#),
            &[],
        )
        .await?);
        let exact = ids(&rows(
            &s,
            &format!(r#"SELECT id FROM "ws"."b" ORDER BY e <#> {q} DESC"#),
            &[],
        )
        .await?);
        assert_eq!(got.len(), 10);
        hits += got.iter().filter(|id| exact[..10].contains(id)).count();
    }
    assert!(hits >= 90, "recall@10 {}", hits as f64 / 100.0);
    let plan = explain_analyze(
        &s,
        r#"SELECT id FROM "ws"."b" ORDER BY e <#> '{{1,0,0,0,0,0,0,0}}'::float4[][] DESC LIMIT 3"#,
    )
    .await?;
    assert!(plan.contains("graph_segments=1"), "{plan}");
    Ok(())
}

/// Not a test on its own: the child of `kill_9_during_index_builds`. Builds the index
/// (CREATE INDEX IF NOT EXISTS), then keeps compacting (each VACUUM builds the graph
/// of the new segment), printing `built` after each.
#[tokio::test]
#[ignore = "child process of kill_9_during_index_builds"]
async fn index_build_child() -> TestResult {
    let Ok(dir) = std::env::var("TARN_INDEX_DIR") else {
        return Ok(());
    };
    let tarn = Tarn::open_with(&dir, manual()).await?;
    let s = reconnect(&tarn, &std::fs::read_to_string(format!("{dir}/key"))?).await?;
    s.query(
        "ws",
        r#"CREATE INDEX IF NOT EXISTS e_idx ON "ws"."t" USING engine_index (e)"#,
        &[],
    )
    .await?;
    println!("built");
    for i in 0.. {
        s.query(
            "ws",
            &format!(r#"DELETE FROM "ws"."t" WHERE id = {i}"#),
            &[],
        )
        .await?;
        s.query("ws", r#"VACUUM "ws"."t""#, &[]).await?;
        println!("built");
    }
    Ok(())
}

#[tokio::test]
async fn kill_9_during_index_builds() -> TestResult {
    use std::process::Stdio;
    let dir = tempfile::tempdir()?;
    let path = dir.path().to_string_lossy().to_string();
    let dim = 32;
    let secret = {
        let tarn = Tarn::open_with(&path, manual()).await?;
        let (s, secret) = fixture_with_key(&tarn).await?;
        std::fs::write(format!("{path}/key"), &secret)?;
        create_t(&s).await?;
        insert_vectors(&s, &mut Rng(3), 0, 6000, dim).await?;
        tarn.close().await?;
        secret
    };
    let mut rng = Rng(99);
    for round in 0..5 {
        let mut child = child_test(&format!("{}::index_build_child", module_path!()))?
            .env("TARN_INDEX_DIR", &path)
            .stdout(Stdio::null())
            .spawn()?;
        std::thread::sleep(std::time::Duration::from_millis(200 + rng.below(1500)));
        child.kill()?;
        child.wait()?;

        let tarn = Tarn::open_with(&path, manual()).await?;
        let s = reconnect(&tarn, &secret).await?;
        let leftovers: Vec<String> = std::fs::read_dir(dir.path().join("segments"))?
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().to_string())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "round {round}: {leftovers:?}");
        // Every stored row is still found as its own nearest neighbour.
        let live = rows(
            &s,
            r#"SELECT id, e FROM "ws"."t" ORDER BY id LIMIT 3 OFFSET 1000"#,
            &[],
        )
        .await?;
        for r in &live {
            let q = r[1].clone();
            let top = rows(
                &s,
                r#"SELECT id FROM "ws"."t" ORDER BY e <#> $1::float4[] DESC LIMIT 1"#,
                &[q],
            )
            .await?;
            assert_eq!(
                ids(&top),
                vec![r[0].as_i64().unwrap_or(-1)],
                "round {round}"
            );
        }
        // An index the crash left without its files says so, where a CLI user looks.
        let details = s.table("ws", "t").await?;
        for i in &details.indexes {
            assert_eq!(
                i.status == "building",
                i.segments_indexed < i.segments,
                "round {round}: {i:?}"
            );
        }
        // And the index builds again.
        s.query(
            "ws",
            r#"CREATE INDEX IF NOT EXISTS e_idx ON "ws"."t" USING engine_index (e)"#,
            &[],
        )
        .await?;
        s.query("ws", r#"VACUUM "ws"."t""#, &[]).await?;
        assert_eq!(index_files(dir.path()).len(), 1, "round {round}");
        let details = s.table("ws", "t").await?;
        assert!(
            details
                .indexes
                .iter()
                .all(|i| i.status == "ready" && i.segments_indexed == i.segments),
            "round {round}: {:?}",
            details.indexes
        );
        tarn.close().await?;
    }
    Ok(())
}

#[tokio::test]
async fn checkpoints_during_a_build_never_lose_its_file() -> TestResult {
    let dir = tempfile::tempdir()?;
    let tarn = Tarn::open_with(dir.path(), manual()).await?;
    let (s, secret) = fixture_with_key(&tarn).await?;
    create_t(&s).await?;
    s.query("ws", r#"CREATE TABLE "ws"."other" (id INT)"#, &[])
        .await?;
    insert_vectors(&s, &mut Rng(21), 0, 8000, 48).await?;
    s.query("ws", r#"VACUUM "ws"."t""#, &[]).await?;
    // The build runs while another table is vacuumed over and over (each VACUUM
    // checkpoints and cleans up the segments directory).
    let build = {
        let s = s.clone();
        tokio::spawn(async move {
            s.query(
                "ws",
                r#"CREATE INDEX e_idx ON "ws"."t" USING engine_index (e)"#,
                &[],
            )
            .await
        })
    };
    let mut n = 0;
    while !build.is_finished() {
        s.query(
            "ws",
            &format!(r#"INSERT INTO "ws"."other" VALUES ({n})"#),
            &[],
        )
        .await?;
        s.query("ws", r#"VACUUM "ws"."other""#, &[]).await?;
        n += 1;
    }
    build.await??;
    assert_eq!(index_files(dir.path()).len(), 1);
    tarn.close().await?;
    drop(tarn);
    let tarn = Tarn::open_with(dir.path(), manual()).await?;
    let s = reconnect(&tarn, &secret).await?;
    let plan = explain_analyze(
        &s,
        &format!(
            r#"SELECT id FROM "ws"."t" ORDER BY e <#> {} DESC LIMIT 5"#,
            literal(&vector(&mut Rng(1), 48))
        ),
    )
    .await?;
    assert!(plan.contains("graph_segments=1"), "{plan}");
    Ok(())
}

#[tokio::test]
async fn filters_see_only_live_rows_and_limits_are_clamped() -> TestResult {
    let dir = tempfile::tempdir()?;
    let tarn = Tarn::open_with(dir.path(), manual()).await?;
    let s = fixture(&tarn).await?;
    create_t(&s).await?;
    let mut rng = Rng(8);
    insert_vectors(&s, &mut rng, 0, 3000, 8).await?;
    s.query(
        "ws",
        r#"CREATE INDEX ON "ws"."t" USING engine_index (e)"#,
        &[],
    )
    .await?;
    // cat = 0 in every tenth row; those rows are then updated: their old versions
    // stay in the segment, deleted, and must not be divided by.
    s.query("ws", r#"UPDATE "ws"."t" SET cat = 1 WHERE cat = 0"#, &[])
        .await?;
    let q = literal(&vector(&mut rng, 8));
    for limit in ["5", "1000000000000", "9223372036854775807"] {
        let sql = format!(
            r#"SELECT id FROM "ws"."t" WHERE 10 / cat >= 1 ORDER BY e <#> {q} DESC LIMIT {limit}"#
        );
        let got = rows(&s, &sql, &[]).await?;
        assert_eq!(got.len(), if limit == "5" { 5 } else { 3000 }, "{sql}");
    }
    let sql = format!(
        r#"SELECT id FROM "ws"."t" ORDER BY e <#> {q} DESC LIMIT 5 OFFSET 9223372036854775000"#
    );
    assert!(rows(&s, &sql, &[]).await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn similarity_needs_float4_vectors() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let s = fixture(&tarn).await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."t" (id INT, a INT4[], e FLOAT4[]) USING engine"#,
        &[],
    )
    .await?;
    s.query(
        "ws",
        r#"INSERT INTO "ws"."t" VALUES (1, '{1,2}', '{1,2}')"#,
        &[],
    )
    .await?;
    let err = s
        .query("ws", r#"SELECT a <#> ARRAY[1, 2] FROM "ws"."t""#, &[])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadRequest, "{err}");
    assert!(err.to_string().contains("cast it with ::float4[]"), "{err}");
    assert_eq!(
        rows(
            &s,
            r#"SELECT a::float4[] <#> ARRAY[1, 2] FROM "ws"."t""#,
            &[]
        )
        .await?,
        vec![vec![json!(1.0)]]
    );
    Ok(())
}

/// A NULL vector that reaches `<#>` through a join, a UNION or an outer join's missing
/// side scores NULL, as a stored NULL does (those plans build a NULL vector over NULL
/// elements, which was refused as "vector elements must not be NULL"); a vector that
/// is there with a NULL element is still refused.
#[tokio::test]
async fn null_vectors_from_joins_and_unions_score_null() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let s = fixture(&tarn).await?;
    for sql in [
        r#"CREATE TABLE "ws"."h" (id INT, e FLOAT4[2], b FLOAT4[][], body TEXT) USING engine"#,
        r#"INSERT INTO "ws"."h" VALUES (1, '{1,0}', '{{1,0}}', 'apple'), (2, NULL, NULL, NULL), (3, '{0,1}', '{{0,1}}', 'pear')"#,
        r#"CREATE INDEX ON "ws"."h" USING engine_index (body) WITH (index_type = 'bm25')"#,
    ] {
        s.query("ws", sql, &[]).await?;
    }
    let h = r#""ws"."h""#;
    for (sql, want) in [
        (
            format!(
                "SELECT x.id, y.id, x.e <#> '{{1,0}}' FROM {h} x, {h} y WHERE x.id < 3 AND y.id < 3 ORDER BY 1, 2"
            ),
            json!([[1, 1, 1.0], [1, 2, 1.0], [2, 1, null], [2, 2, null]]),
        ),
        (
            format!(
                "SELECT x.id, y.e <#> '{{1,0}}' FROM {h} x LEFT JOIN {h} y ON y.id = x.id + 1 ORDER BY 1"
            ),
            json!([[1, null], [2, 0.0], [3, null]]),
        ),
        (
            format!(
                "SELECT id, e <#> '{{1,0}}' FROM (SELECT id, e FROM {h} WHERE id < 3 UNION ALL SELECT 3, NULL) t ORDER BY 1"
            ),
            json!([[1, 1.0], [2, null], [3, null]]),
        ),
        (
            format!(
                "SELECT x.id, y.id, x.b <#> '{{{{1,0}}}}' FROM {h} x, {h} y WHERE x.id < 3 AND y.id < 3 ORDER BY 1, 2"
            ),
            json!([[1, 1, 1.0], [1, 2, 1.0], [2, 1, null], [2, 2, null]]),
        ),
        (
            format!(
                "SELECT x.id, y.id, (x.e, y.body) <#> engine_hybrid_record('{{1,0}}', 'apple') FROM {h} x, {h} y ORDER BY 1, 2"
            ),
            // Each arm min-max normalized over the table's rows (1 for row 1, 0 for row
            // 3), a NULL arm adding nothing: as the pairs of one table's rows would.
            json!([
                [1, 1, 1.0],
                [1, 2, 0.5],
                [1, 3, 0.5],
                [2, 1, 0.5],
                [2, 2, null],
                [2, 3, 0.0],
                [3, 1, 0.5],
                [3, 2, 0.0],
                [3, 3, 0.0]
            ]),
        ),
    ] {
        assert_eq!(json!(rows(&s, &sql, &[]).await?), want, "{sql}");
    }
    let err = s
        .query(
            "ws",
            "SELECT x <#> '{1,0}' FROM (VALUES (ARRAY[1, NULL]::float4[])) v(x)",
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadRequest, "{err}");
    assert!(err.to_string().contains("must not be NULL"), "{err}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn searches_and_writes_progress_while_an_index_builds() -> TestResult {
    let dir = tempfile::tempdir()?;
    let tarn = Tarn::open_with(dir.path(), manual()).await?;
    let s = fixture(&tarn).await?;
    create_t(&s).await?;
    let dim = 32;
    let mut rng = Rng(31);
    insert_vectors(&s, &mut rng, 0, 8_000, dim).await?;
    s.query("ws", r#"VACUUM "ws"."t""#, &[]).await?;
    let build = {
        let s = s.clone();
        tokio::spawn(async move {
            s.query(
                "ws",
                r#"CREATE INDEX ON "ws"."t" USING engine_index (e)"#,
                &[],
            )
            .await
        })
    };
    let (mut searches, mut writes) = (0, 0);
    let mut next = 1_000_000;
    // At least one round, however fast the build: then as long as it runs.
    while searches == 0 || !build.is_finished() {
        let q1 = literal(&vector(&mut rng, dim));
        let q2 = literal(&vector(&mut rng, dim));
        let a = format!(r#"SELECT id FROM "ws"."t" ORDER BY e <#> {q1} DESC LIMIT 10"#);
        let b =
            format!(r#"SELECT id FROM "ws"."t" WHERE cat = 3 ORDER BY e <#> {q2} DESC LIMIT 10"#);
        let w = format!(r#"INSERT INTO "ws"."t" VALUES ({next}, {q1}, 3)"#);
        let (ra, rb, rw) =
            tokio::join!(rows(&s, &a, &[]), rows(&s, &b, &[]), s.query("ws", &w, &[]));
        assert_eq!(ra?.len(), 10);
        assert_eq!(rb?.len(), 10);
        rw?;
        searches += 2;
        writes += 1;
        next += 1;
    }
    build.await??;
    // Both kinds of statement went on while the graph was being built.
    assert!(
        searches >= 2 && writes >= 1,
        "{searches} searches, {writes} writes"
    );
    // And every row written meanwhile is found.
    let got = rows(
        &s,
        r#"SELECT count(*) FROM "ws"."t" WHERE id >= 1000000"#,
        &[],
    )
    .await?;
    assert_eq!(got, vec![vec![json!(writes)]]);
    Ok(())
}

/// A parameterized statement run again (the engine keeps it parsed) takes each run's
/// parameters, through the planner and the search fast path alike; errors are reported
/// each time, never remembered, and leave the statement working.
#[tokio::test]
async fn a_statement_run_again_takes_its_new_parameters() -> TestResult {
    let dir = tempfile::tempdir()?;
    let tarn = Tarn::open_with(dir.path(), manual()).await?;
    let s = fixture(&tarn).await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."t" (id INT, e FLOAT4[2]) USING engine"#,
        &[],
    )
    .await?;
    s.query(
        "ws",
        r#"INSERT INTO "ws"."t" VALUES (1, '{1,0}'), (2, '{0,1}'), (3, '{-1,0}')"#,
        &[],
    )
    .await?;
    let planned = r#"SELECT id FROM "ws"."t" WHERE id >= $1 ORDER BY id"#;
    let search = r#"SELECT id FROM "ws"."t" ORDER BY e <#> $1 DESC LIMIT 1"#;
    let broken = r#"SELECT id FROM "ws"."t" WHERE id >= $1 ORDER BY"#;
    for _ in 0..2 {
        assert_eq!(
            rows(&s, planned, &[json!(2)]).await?,
            vec![vec![json!(2)], vec![json!(3)]]
        );
        assert_eq!(rows(&s, planned, &[json!(3)]).await?, vec![vec![json!(3)]]);
        assert_eq!(
            rows(&s, search, &[json!([0, 1])]).await?,
            vec![vec![json!(2)]]
        );
        assert_eq!(
            rows(&s, search, &[json!([-1, 0])]).await?,
            vec![vec![json!(3)]]
        );
        let err = s
            .query("ws", search, &[json!([1, 2, 3])])
            .await
            .unwrap_err();
        assert_eq!(err.status(), 400, "{}", err.message());
        assert!(
            err.message().contains("expected 2 dimensions"),
            "{}",
            err.message()
        );
        let err = s.query("ws", broken, &[json!(1)]).await.unwrap_err();
        assert_eq!(err.status(), 400, "{}", err.message());
    }
    Ok(())
}

/// The fast path's WHERE reads NULLs, columns added after the rows were written (with
/// and without a default), deleted rows, INT2 columns and `$n` integers as the planner
/// does.
#[tokio::test]
async fn filtered_fast_search_reads_nulls_added_columns_and_deletes_as_the_planner() -> TestResult {
    let dir = tempfile::tempdir()?;
    let tarn = Tarn::open_with(dir.path(), manual()).await?;
    let s = fixture(&tarn).await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."f" (id INT8, small INT2, e FLOAT4[3]) USING engine"#,
        &[],
    )
    .await?;
    let mut rng = Rng(9);
    let values: Vec<String> = (0..400)
        .map(|i| {
            let small = if i % 5 == 0 {
                "NULL".to_string()
            } else {
                (i % 7 - 3).to_string()
            };
            format!("({i}, {small}, {})", literal(&vector(&mut rng, 3)))
        })
        .collect();
    s.query(
        "ws",
        &format!(r#"INSERT INTO "ws"."f" VALUES {}"#, values.join(",")),
        &[],
    )
    .await?;
    // Sealed before the columns exist: its blocks lack them.
    s.query("ws", r#"VACUUM "ws"."f""#, &[]).await?;
    s.query(
        "ws",
        r#"ALTER TABLE "ws"."f" ADD COLUMN d INT4 DEFAULT 7"#,
        &[],
    )
    .await?;
    s.query("ws", r#"ALTER TABLE "ws"."f" ADD COLUMN n INT4"#, &[])
        .await?;
    s.query(
        "ws",
        r#"INSERT INTO "ws"."f" VALUES (1000, 1, '{1,2,3}', 8, 1), (1001, NULL, '{3,2,1}', NULL, NULL)"#,
        &[],
    )
    .await?;
    s.query("ws", r#"DELETE FROM "ws"."f" WHERE id % 9 = 0"#, &[])
        .await?;
    let q = json!([0.3, -1.0, 0.5]);
    for w in [
        "small > 0",
        "small <> 1",
        "small = $2",
        "d = 7",
        "d >= 8",
        "n = 1",
        "n < 5",
        "id < 300 AND small <= -1 AND d = 7",
    ] {
        let sql =
            format!(r#"SELECT id, e <#> $1 AS s FROM "ws"."f" WHERE {w} ORDER BY s DESC LIMIT 15"#);
        let planned = sql.replace(" WHERE ", " WHERE true AND ");
        let params = if w.contains("$2") {
            vec![q.clone(), json!(2)]
        } else {
            vec![q.clone()]
        };
        let fast = rows(&s, &sql, &params).await?;
        assert_eq!(fast, rows(&s, &planned, &params).await?, "{w}");
        assert!(!fast.is_empty() || w.starts_with("n <"), "{w}");
    }
    Ok(())
}

/// The search fast path (plain top-k statements, answered without the planner) gives
/// exactly what the planned search node gives: the same rows, order, scores, names and
/// types, with ties, NULL and zero vectors, deletes, OFFSET, an index and the session's
/// `ef_search`. `WHERE true` sends the same statement through the planner.
#[tokio::test]
async fn fast_search_equals_the_planned_search() -> TestResult {
    let dir = tempfile::tempdir()?;
    let tarn = Tarn::open_with(dir.path(), manual()).await?;
    let s = fixture(&tarn).await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."t" (id INT, e FLOAT4[4], label TEXT) USING engine"#,
        &[],
    )
    .await?;
    let mut rng = Rng(5);
    let mut values = Vec::new();
    for i in 0..1200 {
        let e = match i % 50 {
            0 => "NULL".to_string(),
            1 => "'{0,0,0,0}'".to_string(),
            // Duplicates: ties broken by row id.
            2 | 3 => "'{1,2,3,4}'".to_string(),
            _ => literal(&vector(&mut rng, 4)),
        };
        values.push(format!("({i}, {e}, 'l{i}')"));
    }
    s.query(
        "ws",
        &format!(r#"INSERT INTO "ws"."t" VALUES {}"#, values.join(",")),
        &[],
    )
    .await?;
    s.query("ws", r#"DELETE FROM "ws"."t" WHERE id % 7 = 0"#, &[])
        .await?;
    let q = literal(&vector(&mut rng, 4));
    let forms = [
        format!(r#"SELECT id, e <#> {q} AS s FROM "ws"."t" ORDER BY s DESC LIMIT 10"#),
        format!(r#"SELECT * FROM "ws"."t" ORDER BY e <#> {q} DESC LIMIT 5 OFFSET 3"#),
        format!(
            r#"SELECT label, e <#> {q} FROM "ws"."t" x ORDER BY x.e <#> {q} DESC NULLS LAST LIMIT 8"#
        ),
        r#"SELECT id, e <#> '{1,2,3,4}' AS s FROM "ws"."t" ORDER BY s DESC LIMIT 4"#.into(),
        r#"SELECT id FROM "ws"."t" ORDER BY e <#> $1::float4[] DESC LIMIT 6"#.into(),
        r#"SELECT id, label FROM "ws"."t" ORDER BY e <#> $1 DESC LIMIT 2000 OFFSET 1100"#.into(),
        format!(r#"SELECT id FROM "ws"."t" ORDER BY e <#> {q} DESC LIMIT 0"#),
        format!(r#"SELECT ID, e, e <#> {q} AS Score FROM "ws"."t" ORDER BY Score DESC LIMIT 3"#),
        r#"SELECT id FROM "ws"."t" ORDER BY e <#> ARRAY[9007199254740993, 1, 2, 3] DESC LIMIT 3"#
            .into(),
        // Filtered: conjunctions of integer comparisons are answered without the
        // planner too.
        format!(r#"SELECT id, e <#> {q} AS s FROM "ws"."t" WHERE id < 600 ORDER BY s DESC LIMIT 10"#),
        r#"SELECT id FROM "ws"."t" WHERE id >= 100 AND (id <> 150 AND id <= 1100) ORDER BY e <#> $1 DESC LIMIT 7"#.into(),
        format!(r#"SELECT id FROM "ws"."t" WHERE id = -5 ORDER BY e <#> {q} DESC LIMIT 3"#),
        format!(r#"SELECT id, label FROM "ws"."t" WHERE id > 1190 ORDER BY e <#> {q} DESC LIMIT 20"#),
        format!(r#"SELECT x.id FROM "ws"."t" x WHERE x.id < 300 AND id = 2 ORDER BY x.e <#> {q} DESC LIMIT 5"#),
    ];
    let param = json!([0.5, -1.0, 2.0, 0.25]);
    let compare = |sql: String| {
        let s = s.clone();
        let param = param.clone();
        async move {
            let params: Vec<Value> = if sql.contains("$1") {
                vec![param]
            } else {
                vec![]
            };
            let fast = s.query("ws", &sql, &params).await?;
            let planned_sql = sql.replace(" WHERE ", " WHERE true AND ");
            let planned_sql = planned_sql.replace(
                r#"FROM "ws"."t" x ORDER"#,
                r#"FROM "ws"."t" x WHERE true ORDER"#,
            );
            let planned_sql = planned_sql.replace(
                r#"FROM "ws"."t" ORDER"#,
                r#"FROM "ws"."t" WHERE true ORDER"#,
            );
            assert_ne!(planned_sql, sql);
            let planned = s.query("ws", &planned_sql, &params).await?;
            assert_eq!(fast.columns, planned.columns, "{sql}");
            assert_eq!(fast.rows, planned.rows, "{sql}");
            // The same Arrow schema (types, nullability, vector metadata).
            let fast_arrow = s.query_arrow("ws", &sql, &params).await?;
            let planned_arrow = s.query_arrow("ws", &planned_sql, &params).await?;
            assert_eq!(fast_arrow.schema, planned_arrow.schema, "{sql}");
            Ok::<usize, tarn::Error>(fast.row_count as usize)
        }
    };
    for sql in &forms {
        compare(sql.clone()).await?;
    }
    // Through the graph: a sealed, indexed segment, and a narrow session width.
    s.query(
        "ws",
        r#"CREATE INDEX e_idx ON "ws"."t" USING engine_index (e DESC)"#,
        &[],
    )
    .await?;
    s.query("ws", r#"VACUUM "ws"."t""#, &[]).await?;
    let plan = explain_analyze(&s, &forms[0]).await?;
    assert!(plan.contains("graph_segments=1"), "{plan}");
    for ef in ["DEFAULT", "3"] {
        s.query("ws", &format!("SET engine.ef_search = {ef}"), &[])
            .await?;
        for sql in &forms {
            compare(sql.clone()).await?;
        }
    }
    // A parameter as array text, or with integers, reads as the planner reads it; a
    // missing one is the planner's 400.
    let by_param = r#"SELECT id, e <#> $1 AS s FROM "ws"."t" ORDER BY s DESC LIMIT 5"#;
    let planned = r#"SELECT id, e <#> $1 AS s FROM "ws"."t" WHERE true ORDER BY s DESC LIMIT 5"#;
    for p in [json!("{0.5,-1,2,0.25}"), json!([1, -2, 3, 4])] {
        assert_eq!(
            rows(&s, by_param, std::slice::from_ref(&p)).await?,
            rows(&s, planned, std::slice::from_ref(&p)).await?
        );
    }
    let err = s.query("ws", by_param, &[]).await.unwrap_err();
    assert_eq!(err.status(), 400, "{}", err.message());

    // Rows found at once after a write, gone at once after a delete.
    s.query(
        "ws",
        r#"INSERT INTO "ws"."t" VALUES (5000, '{0.5,-1,2,0.25}', 'new')"#,
        &[],
    )
    .await?;
    let top = r#"SELECT id, e <#> $1 AS s FROM "ws"."t" ORDER BY s DESC LIMIT 1"#;
    assert_eq!(
        rows(&s, top, std::slice::from_ref(&param)).await?,
        vec![vec![json!(5000), json!(1.0)]]
    );
    s.query("ws", r#"DELETE FROM "ws"."t" WHERE id = 5000"#, &[])
        .await?;
    assert_ne!(
        ids(&rows(&s, top, std::slice::from_ref(&param)).await?),
        vec![5000]
    );
    // Errors are the planner's: names it refuses, arrays that are not FLOAT4 vectors
    // (even on an empty table), the wrong dimension.
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."ints" (id INT, a INT4[]) USING engine"#,
        &[],
    )
    .await?;
    // Duplicate output names are PostgreSQL's: allowed, on both paths.
    for sql in [
        r#"SELECT id, id FROM "ws"."t" ORDER BY e <#> '{1,0,0,0}' DESC LIMIT 3"#,
        r#"SELECT id, e <#> '{1,0,0,0}' AS id FROM "ws"."t" ORDER BY e <#> '{1,0,0,0}' DESC LIMIT 3"#,
    ] {
        let r = s.query("ws", sql, &[]).await?;
        assert_eq!(r.columns, vec!["id", "id"], "{sql}");
        assert_eq!(r.row_count, 3, "{sql}");
    }
    for sql in [r#"SELECT id FROM "ws"."ints" ORDER BY a <#> ARRAY[1,2] DESC LIMIT 5"#] {
        let err = s.query("ws", sql, &[]).await.unwrap_err();
        assert_eq!(err.status(), 400, "{sql}: {}", err.message());
    }
    // The wrong dimension is 400.
    let err = s.query("ws", top, &[json!([1, 2])]).await.unwrap_err();
    assert_eq!(err.status(), 400);
    assert!(
        err.message().contains("expected 4 dimensions, not 2"),
        "{}",
        err.message()
    );
    Ok(())
}

/// `ORDER BY <#> … DESC` puts NULL scores last in every plan, not only where the search
/// node answers (issue: a filter it cannot take, a subquery vector, `LIMIT (SELECT 1)`,
/// a window column or GROUP BY returned the NULL-scored row first).
#[tokio::test]
async fn null_scores_sort_last_in_every_top_k_shape() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let s = fixture(&tarn).await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."n" (id INT, e FLOAT4[], body TEXT) USING engine"#,
        &[],
    )
    .await?;
    s.query(
        "ws",
        r#"INSERT INTO "ws"."n" VALUES (1, '{1,0}', 'apple pie'), (2, NULL, 'apple'), (3, '{0,1}', 'pear')"#,
        &[],
    )
    .await?;
    s.query(
        "ws",
        r#"CREATE INDEX ON "ws"."n" USING engine_index (body) WITH (index_type = 'bm25')"#,
        &[],
    )
    .await?;
    let all = json!([[1, 1.0], [3, 0.0], [2, null]]);
    let first = json!([[1, 1.0]]);
    let n = r#""ws"."n""#;
    for (sql, want) in [
        (
            format!(
                "SELECT id, e <#> '{{1,0}}' AS s FROM {n} WHERE random() < 2 ORDER BY s DESC LIMIT 1"
            ),
            &first,
        ),
        (
            format!("SELECT id, e <#> '{{1,0}}' AS s FROM {n} WHERE random() < 2 ORDER BY s DESC"),
            &all,
        ),
        (
            format!(
                "SELECT id, e <#> (SELECT e FROM {n} WHERE id = 1) AS s FROM {n} ORDER BY s DESC LIMIT 1"
            ),
            &first,
        ),
        (
            format!("SELECT id, e <#> '{{1,0}}' AS s FROM {n} ORDER BY s DESC LIMIT (SELECT 1)"),
            &first,
        ),
        (
            format!(
                "SELECT id, s FROM (SELECT id, e <#> '{{1,0}}' AS s, count(*) OVER () AS c FROM {n}) x ORDER BY s DESC LIMIT 1"
            ),
            &first,
        ),
        (
            format!("SELECT id, e <#> '{{1,0}}' AS s FROM {n} GROUP BY id, e ORDER BY s DESC"),
            &all,
        ),
        (
            format!(
                "SELECT id, e <#> '{{1,0}}' AS s FROM {n} GROUP BY id, e ORDER BY 2 DESC LIMIT 1"
            ),
            &first,
        ),
        (
            format!(
                "SELECT x.id, x.s FROM (SELECT id, e <#> '{{1,0}}' AS s FROM {n}) x JOIN {n} m ON m.id = x.id ORDER BY x.s DESC"
            ),
            &all,
        ),
        (
            format!(
                "SELECT id, e <#> '{{1,0}}' AS s FROM {n} WHERE id < 3 UNION ALL SELECT id, e <#> '{{1,0}}' FROM {n} WHERE id >= 3 ORDER BY s DESC"
            ),
            &all,
        ),
        (
            format!(
                "WITH c AS (SELECT id, e <#> '{{1,0}}' AS s FROM {n}) SELECT id, s FROM c WHERE random() < 2 ORDER BY s DESC"
            ),
            &all,
        ),
        // A score a LATERAL subquery computes, however the join is written.
        (
            format!(
                "SELECT id, s FROM {n} k, LATERAL (SELECT k.e <#> '{{1,0}}' AS s) l ORDER BY s DESC"
            ),
            &all,
        ),
        (
            format!(
                "SELECT id, s FROM {n} k LEFT JOIN LATERAL (SELECT k.e <#> '{{1,0}}' AS s) l ON true ORDER BY 2 DESC LIMIT 1"
            ),
            &first,
        ),
        // A scalar subquery whose column is a score, correlated or not.
        (
            format!("SELECT id, (SELECT e <#> '{{1,0}}') AS s FROM {n} ORDER BY s DESC"),
            &all,
        ),
        (
            format!(
                "SELECT id, CAST((SELECT max(k2.e <#> '{{1,0}}') FROM {n} k2 WHERE k2.id = k.id) AS real) AS s FROM {n} k ORDER BY s DESC"
            ),
            &all,
        ),
        // Keys computed from a score: arithmetic, COALESCE, aggregates, windows.
        (
            format!(
                "SELECT id, (e <#> '{{1,0}}') * 1 AS s FROM {n} ORDER BY (e <#> '{{1,0}}') * 2 DESC"
            ),
            &all,
        ),
        (
            format!(
                "SELECT id, COALESCE(e <#> '{{1,0}}', NULL) AS s FROM {n} WHERE random() < 2 ORDER BY s DESC LIMIT 3"
            ),
            &all,
        ),
        (
            format!("SELECT id, max(e <#> '{{1,0}}') AS s FROM {n} GROUP BY id ORDER BY s DESC"),
            &all,
        ),
        (
            format!(
                "SELECT id, max(e <#> '{{1,0}}') OVER (PARTITION BY id) AS s FROM {n} ORDER BY s DESC"
            ),
            &all,
        ),
    ] {
        let got = s.query("ws", &sql, &[]).await?.rows;
        assert_eq!(json!(got), *want, "{sql}");
    }
    // Hybrid: the vector arm from a subquery ranks as with the vector written out.
    let literal = format!(
        "SELECT id FROM {n} ORDER BY (e, body) <#> engine_hybrid_record('{{1,0}}', 'apple') DESC"
    );
    let subquery = format!(
        "SELECT id FROM {n} WHERE random() < 2 ORDER BY (e, body) <#> engine_hybrid_record((SELECT e FROM {n} WHERE id = 1), 'apple') DESC"
    );
    assert_eq!(
        s.query("ws", &subquery, &[]).await?.rows,
        s.query("ws", &literal, &[]).await?.rows
    );
    // A column that is not a score keeps PostgreSQL's placement, also when a score of
    // the same name stands on the side a semi join drops.
    let sql = format!(
        "SELECT a.s FROM (SELECT NULL::real AS s UNION ALL SELECT 1::real) a LEFT SEMI JOIN (SELECT e <#> '{{1,0}}' AS s FROM {n}) b ON true ORDER BY s DESC"
    );
    assert_eq!(
        json!(s.query("ws", &sql, &[]).await?.rows),
        json!([[null], [1.0]])
    );
    // NULLS FIRST, written, is kept.
    let sql = format!("SELECT id FROM {n} ORDER BY e <#> '{{1,0}}' DESC NULLS FIRST LIMIT 1");
    assert_eq!(json!(s.query("ws", &sql, &[]).await?.rows), json!([[2]]));
    // DISTINCT ON keeps each group's best match, not its NULL score.
    let sql = format!(
        "SELECT DISTINCT ON (g) g, id FROM (SELECT id, e, (id > 2)::int AS g FROM {n}) x ORDER BY g, e <#> '{{1,0}}' DESC"
    );
    assert_eq!(
        json!(s.query("ws", &sql, &[]).await?.rows),
        json!([[0, 1], [1, 3]])
    );
    // An aggregate's own ORDER BY and a window's: the best match first there too,
    // NULLS FIRST kept where written.
    for (sql, want) in [
        (
            format!("SELECT array_agg(id ORDER BY e <#> '{{1,0}}' DESC) FROM {n}"),
            json!([[[1, 3, 2]]]),
        ),
        (
            format!("SELECT array_agg(id ORDER BY e <#> '{{1,0}}' DESC) AS a, count(*) FROM {n}"),
            json!([[[1, 3, 2], 3]]),
        ),
        (
            format!("SELECT array_agg(id ORDER BY e <#> '{{1,0}}' DESC NULLS FIRST) FROM {n}"),
            json!([[[2, 1, 3]]]),
        ),
        (
            format!(
                "SELECT id, row_number() OVER (ORDER BY e <#> '{{1,0}}' DESC) FROM {n} ORDER BY id"
            ),
            json!([[1, 1], [2, 3], [3, 2]]),
        ),
        (
            format!(
                "SELECT id, row_number() OVER (ORDER BY e <#> '{{1,0}}' DESC NULLS FIRST) FROM {n} ORDER BY id"
            ),
            json!([[1, 2], [2, 1], [3, 3]]),
        ),
    ] {
        assert_eq!(json!(s.query("ws", &sql, &[]).await?.rows), want, "{sql}");
    }
    // A NULL query scores every row NULL: ties by row id (insertion order).
    s.query(
        "ws",
        &format!(
            "INSERT INTO {n} SELECT x, ARRAY[x::float4, 1], 'x' FROM generate_series(4, 3000) g(x)"
        ),
        &[],
    )
    .await?;
    for sql in [
        format!("SELECT id FROM {n} ORDER BY e <#> NULL DESC LIMIT 5"),
        format!("SELECT id FROM {n} WHERE id > 0 ORDER BY e <#> NULL::float4[] DESC LIMIT 5"),
        // Text alike (the text node had left a NULL query to a sort in no order).
        format!("SELECT id FROM {n} ORDER BY body <#> NULL DESC LIMIT 5"),
        // A volatile filter too (it had left the plan to a sort: 2, 3, 4, 5, 1).
        format!("SELECT id FROM {n} WHERE random() < 2 ORDER BY e <#> NULL DESC LIMIT 5"),
        format!("SELECT id FROM {n} WHERE random() < 2 ORDER BY body <#> NULL DESC LIMIT 5"),
    ] {
        assert_eq!(
            json!(s.query("ws", &sql, &[]).await?.rows),
            json!([[1], [2], [3], [4], [5]]),
            "{sql}"
        );
    }
    // The text node answers a NULL query, past deletes and through filters.
    s.query("ws", &format!("DELETE FROM {n} WHERE id = 4"), &[])
        .await?;
    let sql = format!("SELECT id FROM {n} WHERE id > 2 ORDER BY body <#> NULL::text DESC LIMIT 5");
    assert_eq!(
        json!(s.query("ws", &sql, &[]).await?.rows),
        json!([[3], [5], [6], [7], [8]]),
        "{sql}"
    );
    let plan = json!(s.query("ws", &format!("EXPLAIN {sql}"), &[]).await?.rows).to_string();
    assert!(
        plan.contains("TarnSearch") && plan.contains("text(NULL)"),
        "{plan}"
    );
    Ok(())
}

/// An index build is bounded by its statement: CREATE INDEX waits for it until the
/// statement timeout, then returns with a notice while the build goes on in the
/// background (shown as `building`); a build whose caller went away goes on too. Either
/// stops when its index or table is dropped or the database closes, and leaves no
/// `.idx.tmp` (a CREATE INDEX whose client disconnected built for minutes, also after
/// its table was dropped, and SIGTERM then waited 30 s for the close).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn index_builds_stop_with_their_index_table_or_database() -> TestResult {
    let dir = tempfile::tempdir()?;
    // Each progress report of a build waits, so a build takes seconds.
    let slow = || {
        manual()
            .query_timeout(std::time::Duration::from_millis(1500))
            .on_index_progress(|_| std::thread::sleep(std::time::Duration::from_millis(500)))
    };
    let tarn = Tarn::open_with(dir.path(), slow()).await?;
    let (s, secret) = fixture_with_key(&tarn).await?;
    create_t(&s).await?;
    let mut rng = Rng(5);
    insert_vectors(&s, &mut rng, 0, 12_000, 16).await?;
    s.query("ws", r#"VACUUM "ws"."t""#, &[]).await?;
    let tmp_files = || {
        std::fs::read_dir(dir.path().join("segments"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().to_string())
                    .filter(|n| n.ends_with(".idx.tmp"))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    let wait_for = |what: &'static str, f: &dyn Fn() -> bool| -> TestResult {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !f() {
            if std::time::Instant::now() > until {
                return Err(format!("{what} did not happen").into());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Ok(())
    };

    // Past the statement timeout: a notice, and the index shows as building.
    let r = s
        .query(
            "ws",
            r#"CREATE INDEX e_idx ON "ws"."t" USING engine_index (e)"#,
            &[],
        )
        .await?;
    assert!(
        r.notices
            .iter()
            .any(|n| n.contains("built in the background")),
        "{r:?}"
    );
    let building = &s.table("ws", "t").await?.indexes[0];
    assert_eq!(building.status, "building", "{building:?}");
    assert!(
        building.segments_indexed < building.segments,
        "{building:?}"
    );
    // Dropped while it builds: the build stops and leaves nothing.
    s.query("ws", r#"DROP INDEX "ws"."e_idx""#, &[]).await?;
    wait_for("the build's temporary file going", &|| {
        tmp_files().is_empty()
    })?;
    // In a batch, the same notice.
    let b = s
        .query_batch(
            "ws",
            r#"CREATE INDEX e_idx ON "ws"."t" USING engine_index (e)"#,
            &[vec![]],
        )
        .await?;
    assert!(
        b.notices
            .iter()
            .any(|n| n.contains("built in the background")),
        "{b:?}"
    );
    s.query("ws", r#"DROP INDEX "ws"."e_idx""#, &[]).await?;
    wait_for("the build's temporary file going", &|| {
        tmp_files().is_empty()
    })?;

    // A caller that goes away leaves the build to the background; dropping the table
    // stops it.
    let gone = tokio::time::timeout(
        std::time::Duration::from_millis(300),
        s.query(
            "ws",
            r#"CREATE INDEX e_idx ON "ws"."t" USING engine_index (e)"#,
            &[],
        ),
    )
    .await;
    assert!(gone.is_err(), "the CREATE INDEX returned within 300 ms");
    wait_for("a build", &|| !tmp_files().is_empty())?;
    s.query("ws", r#"DROP TABLE "ws"."t""#, &[]).await?;
    wait_for("the build's temporary file going", &|| {
        tmp_files().is_empty()
    })?;

    // A host that starts closing (a server's drain on SIGTERM) gets its CREATE INDEX
    // answered at once with the notice, not at the statement timeout (here 10 min),
    // and the database closes promptly under the build.
    tarn.close().await?;
    drop(s);
    drop(tarn);
    let tarn = Tarn::open_with(
        dir.path(),
        slow().query_timeout(std::time::Duration::from_secs(600)),
    )
    .await?;
    let s = reconnect(&tarn, &secret).await?;
    create_t(&s).await?;
    insert_vectors(&s, &mut rng, 0, 12_000, 16).await?;
    s.query("ws", r#"VACUUM "ws"."t""#, &[]).await?;
    let create = {
        let s = s.clone();
        tokio::spawn(async move {
            s.query(
                "ws",
                r#"CREATE INDEX e_idx ON "ws"."t" USING engine_index (e)"#,
                &[],
            )
            .await
        })
    };
    wait_for("a build", &|| !tmp_files().is_empty())?;
    tarn.begin_close();
    let r = tokio::time::timeout(std::time::Duration::from_secs(30), create).await???;
    // It says the shutdown stopped it (the statement timeout had been blamed).
    assert!(
        r.notices
            .iter()
            .any(|n| n.contains("stopped by the shutdown") && !n.contains("query_timeout")),
        "{r:?}"
    );
    let started = std::time::Instant::now();
    tokio::time::timeout(std::time::Duration::from_secs(20), tarn.close()).await??;
    eprintln!("closed under a build in {:?}", started.elapsed());
    assert!(tmp_files().is_empty(), "{:?}", tmp_files());
    drop(s);
    drop(tarn);
    // Reopened without the slow hook, the index is still building until VACUUM.
    let tarn = Tarn::open_with(dir.path(), manual()).await?;
    let s = reconnect(&tarn, &secret).await?;
    let i = &s.table("ws", "t").await?.indexes[0];
    assert_eq!(i.status, "building", "{i:?}");
    let explain = format!(
        r#"EXPLAIN SELECT id FROM "ws"."t" ORDER BY e <#> {} DESC LIMIT 3"#,
        literal(&vector(&mut rng, 16))
    );
    let plan = json!(rows(&s, &explain, &[]).await?).to_string();
    assert!(plan.contains("(e_idx building: "), "{plan}");
    s.query("ws", r#"VACUUM "ws"."t""#, &[]).await?;
    let plan = json!(rows(&s, &explain, &[]).await?).to_string();
    assert!(!plan.contains("building"), "{plan}");
    let i = &s.table("ws", "t").await?.indexes[0];
    assert_eq!(
        (i.status.as_str(), i.segments_indexed),
        ("ready", i.segments),
        "{i:?}"
    );
    Ok(())
}
