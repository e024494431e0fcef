//! Cancellation safety (SPEC §3): a host drops futures mid-call — a timeout, a web
//! framework whose client went away. Whatever await point that happens at, the database
//! must be as if the call completed or never started: commits keep their locks until
//! published, so no other writer can see a snapshot without them, reuse their row ids or
//! slip past their keys, and the database always reopens.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::json;
use tarn::{Options, Session, Tarn};
use tarn_tests::{Rng, fixture_with_key, reconnect};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// What happened to one call: acknowledged, failed, or unknown (its future was dropped).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Outcome {
    Done,
    Failed,
    Dropped,
}

async fn with_timeout<T>(
    rng: &mut Rng,
    f: impl Future<Output = tarn::Result<T>>,
) -> (Outcome, Option<T>) {
    // Immediate drops (the first poll), short ones (inside a statement or commit) and
    // none at all.
    let micros = match rng.next_u64() % 4 {
        0 => 0,
        1 => rng.next_u64() % 300,
        2 => rng.next_u64() % 5_000,
        _ => 1_000_000,
    };
    match tokio::time::timeout(Duration::from_micros(micros), f).await {
        Ok(Ok(v)) => (Outcome::Done, Some(v)),
        Ok(Err(e)) => {
            assert_ne!(e.status(), 500, "a cancelled neighbour caused a 500: {e}");
            (Outcome::Failed, None)
        }
        Err(_) => (Outcome::Dropped, None),
    }
}

/// The parent's record: per key, outcomes of its insert, updates and delete.
#[derive(Default)]
struct Log {
    inserts: BTreeMap<i64, Outcome>,
    /// (acknowledged, attempted) updates per key.
    updates: BTreeMap<i64, (u32, u32)>,
    deletes: BTreeMap<i64, Outcome>,
    batches: BTreeMap<i64, Outcome>,
    workspaces: BTreeMap<String, Outcome>,
    views: BTreeMap<String, Outcome>,
}

async fn writer(s: Session, w: i64, log: Arc<Mutex<Log>>, ops: usize) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (w as u64 + 1).wrapping_mul(0x1234_5678_9ABC));
    let own = format!(r#""ws"."w{w}""#);
    let mut mine: Vec<i64> = Vec::new();
    for n in 0..ops as i64 {
        let id = w * 1_000_000 + n;
        match rng.next_u64() % 7 {
            6 => {
                // Keys every writer competes for: a commit whose caller went away must
                // still hold its lock, or another writer's check misses its key.
                let key = rng.next_u64() % 256;
                let sql = r#"INSERT INTO "ws"."u" (key, w) VALUES ($1, $2)"#;
                with_timeout(&mut rng, s.query("ws", sql, &[json!(key), json!(w)])).await;
            }
            0 | 1 => {
                let sql = r#"INSERT INTO "ws"."k" (id, w, v) VALUES ($1, $2, '')"#;
                let (o, _) =
                    with_timeout(&mut rng, s.query("ws", sql, &[json!(id), json!(w)])).await;
                log.lock().inserts.insert(id, o);
                mine.push(id);
            }
            2 if !mine.is_empty() => {
                let target = mine[(rng.next_u64() % mine.len() as u64) as usize];
                let sql = r#"UPDATE "ws"."k" SET v = v || 'u' WHERE id = $1"#;
                let (o, _) = with_timeout(&mut rng, s.query("ws", sql, &[json!(target)])).await;
                let mut l = log.lock();
                let e = l.updates.entry(target).or_default();
                e.1 += 1;
                if o == Outcome::Done {
                    e.0 += 1;
                }
            }
            3 if !mine.is_empty() => {
                let target = mine.swap_remove((rng.next_u64() % mine.len() as u64) as usize);
                let sql = r#"DELETE FROM "ws"."k" WHERE id = $1"#;
                let (o, _) = with_timeout(&mut rng, s.query("ws", sql, &[json!(target)])).await;
                log.lock().deletes.insert(target, o);
            }
            4 => {
                // A batch: three rows of its own table, all or none.
                let sets: Vec<Vec<serde_json::Value>> =
                    (0..3).map(|i| vec![json!(id), json!(i)]).collect();
                let sql = format!(r#"INSERT INTO {own} (b, i) VALUES ($1, $2)"#);
                let (o, _) = with_timeout(&mut rng, s.query_batch("ws", &sql, &sets)).await;
                log.lock().batches.insert(id, o);
            }
            _ => {
                if rng.next_u64().is_multiple_of(5) {
                    // A view: a catalog change through the log, dropped mid-way too.
                    let v = format!("v{w}_{n}");
                    let sql = format!(
                        r#"CREATE VIEW "ws"."{v}" AS SELECT count(*) AS c FROM "ws"."k" WHERE w = {w}"#
                    );
                    let (o, _) = with_timeout(&mut rng, s.query("ws", &sql, &[])).await;
                    log.lock().views.insert(v, o);
                } else if rng.next_u64().is_multiple_of(4) {
                    let ws = format!("w{w}-{n}");
                    let (o, _) = with_timeout(&mut rng, s.create_workspace(&ws, "x")).await;
                    log.lock().workspaces.insert(ws, o);
                } else {
                    let sql = r#"SELECT count(*), count(DISTINCT id) FROM "ws"."k""#;
                    let (_, r) = with_timeout(&mut rng, s.query("ws", sql, &[])).await;
                    if let Some(r) = r {
                        let row = &r.rows.unwrap_or_default()[0];
                        assert_eq!(row[0], row[1], "duplicate keys visible");
                    }
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dropped_calls_leave_nothing_torn_and_the_database_reopens() -> TestResult {
    let dir = tempfile::tempdir()?;
    const WRITERS: i64 = 8;
    let log = Arc::new(Mutex::new(Log::default()));
    let secret = {
        // A small memtable: checkpoints and compaction run while commits are dropped.
        let tarn = Tarn::open_with(dir.path(), Options::new().memtable_bytes(32 << 10)).await?;
        let (s, secret) = fixture_with_key(&tarn).await?;
        s.query(
            "ws",
            r#"CREATE TABLE "ws"."k" (id INT8 PRIMARY KEY, w INT, v TEXT) USING engine"#,
            &[],
        )
        .await?;
        s.query(
            "ws",
            r#"CREATE TABLE "ws"."u" (id SERIAL PRIMARY KEY, key INT8 UNIQUE, w INT) USING engine"#,
            &[],
        )
        .await?;
        for w in 0..WRITERS {
            let sql = format!(
                r#"CREATE TABLE "ws"."w{w}" (id SERIAL PRIMARY KEY, b INT8, i INT, UNIQUE (b, i)) USING engine"#
            );
            s.query("ws", &sql, &[]).await?;
        }
        let tasks: Vec<_> = (0..WRITERS)
            .map(|w| tokio::spawn(writer(s.clone(), w, log.clone(), 120)))
            .collect();
        for t in tasks {
            t.await?;
        }
        // Commits whose callers went away finish on their own; closing waits for them.
        tarn.close().await?;
        secret
    };
    let tarn = Tarn::open(dir.path()).await?;
    let s = reconnect(&tarn, &secret).await?;
    let rows = s
        .query("ws", r#"SELECT id, v FROM "ws"."k""#, &[])
        .await?
        .rows
        .unwrap_or_default();
    let found: BTreeMap<i64, String> = rows
        .iter()
        .map(|r| {
            (
                r[0].as_i64().unwrap_or(-1),
                r[1].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(found.len(), rows.len(), "duplicate keys after reopen");
    let log = std::mem::take(&mut *log.lock());
    for (id, o) in &log.inserts {
        let deleted = log.deletes.get(id);
        match (o, deleted) {
            (Outcome::Done, None | Some(Outcome::Failed)) => {
                assert!(found.contains_key(id), "acknowledged insert {id} lost")
            }
            (Outcome::Failed, _) => assert!(!found.contains_key(id), "failed insert {id} present"),
            _ => {}
        }
    }
    for (id, o) in &log.deletes {
        if *o == Outcome::Done {
            assert!(
                !found.contains_key(id),
                "acknowledged delete of {id} undone"
            );
        }
    }
    for (id, (done, tried)) in &log.updates {
        if let Some(v) = found.get(id) {
            let n = v.len() as u32;
            assert!(
                *done <= n && n <= *tried,
                "key {id}: {n} updates, {done}..={tried} expected"
            );
        }
    }
    for w in 0..WRITERS {
        let sql = format!(r#"SELECT b, count(*) FROM "ws"."w{w}" GROUP BY b"#);
        let groups = s.query("ws", &sql, &[]).await?.rows.unwrap_or_default();
        let got: BTreeMap<i64, i64> = groups
            .iter()
            .map(|r| (r[0].as_i64().unwrap_or(-1), r[1].as_i64().unwrap_or(-1)))
            .collect();
        for (b, c) in &got {
            assert_eq!(*c, 3, "batch {b} is torn");
        }
        for (b, o) in log.batches.range(w * 1_000_000..(w + 1) * 1_000_000) {
            match o {
                Outcome::Done => assert!(got.contains_key(b), "acknowledged batch {b} lost"),
                Outcome::Failed => assert!(!got.contains_key(b), "failed batch {b} present"),
                Outcome::Dropped => {}
            }
        }
        // Serial values were handed out once each.
        let sql = format!(r#"SELECT count(*), count(DISTINCT id) FROM "ws"."w{w}""#);
        let r = s.query("ws", &sql, &[]).await?.rows.unwrap_or_default();
        assert_eq!(r[0][0], r[0][1]);
    }
    let r = s
        .query(
            "ws",
            r#"SELECT count(*), count(DISTINCT key), count(DISTINCT id) FROM "ws"."u""#,
            &[],
        )
        .await?
        .rows
        .unwrap_or_default();
    assert_eq!(r[0][0], r[0][1], "a unique key was inserted twice");
    assert_eq!(r[0][0], r[0][2], "a serial value was handed out twice");
    assert!(r[0][0].as_i64().unwrap_or(0) > 0);
    let workspaces: Vec<String> = s
        .workspaces()
        .await?
        .data
        .into_iter()
        .map(|w| w.id)
        .collect();
    for (ws, o) in &log.workspaces {
        match o {
            Outcome::Done => assert!(workspaces.contains(ws), "workspace {ws} lost"),
            Outcome::Failed => assert!(!workspaces.contains(ws)),
            Outcome::Dropped => {}
        }
    }
    let views: Vec<String> = s.views("ws").await?.into_iter().map(|v| v.name).collect();
    for (v, o) in &log.views {
        match o {
            Outcome::Done => assert!(views.contains(v), "view {v} lost"),
            Outcome::Failed => assert!(!views.contains(v), "failed view {v} present"),
            Outcome::Dropped => {}
        }
    }
    // Every view there (acknowledged or not) reads.
    for v in &views {
        let sql = format!(r#"SELECT c FROM "ws"."{v}""#);
        assert_eq!(s.query("ws", &sql, &[]).await?.row_count, 1, "view {v}");
    }
    assert!(!log.views.is_empty(), "no view was created");
    // Some inserts were dropped after their commit had started, and completed anyway:
    // the case the commit's owned locks are for.
    let completed_without_caller = log
        .inserts
        .iter()
        .filter(|(id, o)| **o == Outcome::Dropped && found.contains_key(id))
        .count();
    assert!(
        completed_without_caller > 0,
        "no dropped insert committed: the drops never hit a commit"
    );
    // Enough calls were really dropped mid-way for the test to mean something.
    let dropped = log
        .inserts
        .values()
        .chain(log.deletes.values())
        .filter(|o| **o == Outcome::Dropped)
        .count();
    assert!(dropped > 20, "only {dropped} calls were dropped");
    tarn.close().await?;
    Ok(())
}

/// A statement still planning (one long poll, which dropping or aborting its future does
/// not reach) stops at its next planning check when its `StopHandle` is raised, as the
/// REST host does when the client disconnects; before, it planned on for its whole
/// planning time (35 s for this shape in a release build), a core busy for nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_statement_ends_in_the_middle_of_its_planning() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let (s, _) = fixture_with_key(&tarn).await?;
    // 250 terms: under the 256 levels a chain of `+` may nest.
    let n = 250;
    let params: Vec<serde_json::Value> = (0..n)
        .map(|i| json!((0..5000).map(|j| f64::from(i + j)).collect::<Vec<_>>()))
        .collect();
    let sql = format!(
        "SELECT {}",
        (1..=n)
            .map(|i| format!("cardinality(${i}::float8[])"))
            .collect::<Vec<_>>()
            .join(" + ")
    );
    // Stopped at several moments of its planning: each phase (DataFusion's analyzer,
    // optimizer and physical rules, the naming of its expressions, Tarn's own steps)
    // looks at the stop. Before, a stop 20 s in (while DataFusion named the chain's
    // levels, from about 15 to 45 s in a debug build) let the naming run to its end, and
    // the statement timeout fired 10–24 s late.
    for wait in [300, 2_000, 20_000] {
        let (s, sql, params) = (s.clone(), sql.clone(), params.clone());
        let (fut, stop) = tarn::stoppable(async move { s.query("ws", &sql, &params).await });
        let started = std::time::Instant::now();
        let task = tokio::spawn(fut);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        // A build fast enough to plan it all before a late stop leaves that stop
        // nothing to stop (the earlier ones still test the early phases).
        if wait > 300 && task.is_finished() {
            eprintln!("planned in under {wait} ms: no stop to test there");
            continue;
        }
        stop.stop();
        let stopped = std::time::Instant::now();
        let out = tokio::time::timeout(Duration::from_secs(60), task).await??;
        let after_stop = stopped.elapsed();
        match out {
            Err(e) => {
                assert_eq!(e.kind(), tarn::ErrorKind::BadRequest, "{e}");
                assert!(
                    e.message()
                        .contains("canceling statement due to user request"),
                    "{e}"
                );
            }
            // Planning ended just as the stop came (a late moment on a fast build).
            Ok(_) if wait > 300 => {
                eprintln!("planned in about {wait} ms: no stop to test there");
                continue;
            }
            Ok(_) => panic!(
                "the statement answered after {:?}: it was not planning any more when stopped",
                started.elapsed()
            ),
        }
        eprintln!("stopped {wait} ms in: ended {after_stop:?} after the stop");
        assert!(stop.is_stopped());
        // A phase that does not look would run on for seconds (the whole plan takes
        // tens of them); this bound only catches that.
        assert!(
            after_stop < Duration::from_secs(5),
            "stopped {wait} ms in, the statement planned on for {after_stop:?}"
        );
    }
    Ok(())
}
