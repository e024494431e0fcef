//! Crash consistency (docs/style.md "Tests", in the style of redb's crash tests): a child
//! process writes statements while checkpoints and compaction run in the background
//! with a tiny memtable, and is killed with SIGKILL at a random moment. After every
//! kill the database must open, hold every acknowledged statement wholly, and hold
//! every other statement wholly or not at all.
//!
//! `kill_9_rounds` runs 20 rounds; `kill_9_many_rounds` (ignored, run it with
//! `cargo test --workspace --test integration -- --ignored kill_9_many_rounds`) runs 500.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;
use tarn::{Options, SyncMode, Tarn};
use tarn_tests::{child_lines, child_test, fixture_with_key, reconnect};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn child_options() -> Options {
    Options::new()
        .sync(SyncMode::Process)
        .memtable_bytes(16 << 10)
}

/// Not a test on its own: the child process. Statement `n` inserts 10 rows
/// `(n, 0..10)`; after each insert with `n % 4 == 3` it deletes statement `n - 3`'s
/// rows. Prints `ins N` / `del N` once the statement returned.
#[tokio::test]
#[ignore = "child process of the kill -9 tests"]
async fn crash_child_writer() -> TestResult {
    let Ok(dir) = std::env::var("TARN_CRASH_DIR") else {
        return Ok(());
    };
    let start: u64 = std::env::var("TARN_CRASH_START")?.parse()?;
    let tarn = Tarn::open_with(&dir, child_options()).await?;
    let s = reconnect(&tarn, &std::fs::read_to_string(format!("{dir}/key"))?).await?;
    let mut out = std::io::stdout();
    for n in start.. {
        let values: Vec<String> = (0..10)
            .map(|i| format!("({n}, {i}, 'row {i} of statement {n}, padded to make rows wider')"))
            .collect();
        s.query(
            "ws",
            &format!(r#"INSERT INTO "ws"."k" VALUES {}"#, values.join(", ")),
            &[],
        )
        .await?;
        writeln!(out, "ins {n}")?;
        out.flush()?;
        if n % 4 == 3 {
            s.query(
                "ws",
                r#"DELETE FROM "ws"."k" WHERE stmt = $1"#,
                &[json!(n - 3)],
            )
            .await?;
            writeln!(out, "del {}", n - 3)?;
            out.flush()?;
        }
        // Views are catalog records: created and dropped under the same kills.
        if n % 5 == 2 {
            s.query(
                "ws",
                &format!(
                    r#"CREATE VIEW "ws"."v{n}" AS SELECT count(*) AS c FROM "ws"."k" WHERE stmt = {n}"#
                ),
                &[],
            )
            .await?;
            writeln!(out, "view {n}")?;
            out.flush()?;
            if n >= 10 {
                // Said before the drop runs: killed during it, the view may be either.
                writeln!(out, "dropping {}", n - 10)?;
                out.flush()?;
                s.query(
                    "ws",
                    &format!(r#"DROP VIEW IF EXISTS "ws"."v{}""#, n - 10),
                    &[],
                )
                .await?;
                writeln!(out, "unview {}", n - 10)?;
                out.flush()?;
            }
        }
    }
    Ok(())
}

/// A small deterministic generator (xorshift) for kill times.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

async fn run_rounds(rounds: u64) -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().to_string_lossy().to_string();
    let secret = {
        let tarn = Tarn::open(&path).await?;
        let (s, secret) = fixture_with_key(&tarn).await?;
        std::fs::write(format!("{path}/key"), &secret)?;
        s.query(
            "ws",
            r#"CREATE TABLE "ws"."k" (stmt INT8, i INT, v TEXT, PRIMARY KEY (stmt, i)) USING engine"#,
            &[],
        )
        .await?;
        secret
    };
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    // What the parent knows: statements acknowledged as inserted / deleted.
    let mut inserted: BTreeMap<u64, bool> = BTreeMap::new();
    let mut deleted: BTreeMap<u64, bool> = BTreeMap::new();
    // Per view: acknowledged as created (`Some(true)`) or dropped (`Some(false)`), or
    // its drop started unacknowledged (`None`: either is right).
    let mut views: BTreeMap<u64, Option<bool>> = BTreeMap::new();
    let mut next = 0u64;
    for round in 0..rounds {
        let mut child = child_test(&format!("{}::crash_child_writer", module_path!()))?
            .env("TARN_CRASH_DIR", &path)
            .env("TARN_CRASH_START", next.to_string())
            .stdout(Stdio::piped())
            .spawn()?;
        let (rx, reader) = child_lines(&mut child)?;
        // Kill after the first acknowledgement plus a random 0–150 ms.
        let delay = Duration::from_millis(rng.next() % 150);
        let mut killed_at = None;
        let mut max_ins = None;
        let mut note =
            |line: &str, max_ins: &mut Option<u64>| -> Result<bool, Box<dyn std::error::Error>> {
                if let Some(n) = line.strip_prefix("ins ") {
                    let n: u64 = n.trim().parse()?;
                    inserted.insert(n, true);
                    *max_ins = Some(n);
                    return Ok(true);
                } else if let Some(n) = line.strip_prefix("del ") {
                    deleted.insert(n.trim().parse()?, true);
                } else if let Some(n) = line.strip_prefix("view ") {
                    views.insert(n.trim().parse()?, Some(true));
                } else if let Some(n) = line.strip_prefix("dropping ") {
                    views.insert(n.trim().parse()?, None);
                } else if let Some(n) = line.strip_prefix("unview ") {
                    views.insert(n.trim().parse()?, Some(false));
                }
                Ok(false)
            };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match rx.recv_timeout(Duration::from_millis(5)) {
                Ok(line) => {
                    if note(&line, &mut max_ins)? {
                        killed_at.get_or_insert(Instant::now() + delay);
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
            if killed_at.is_some_and(|t| Instant::now() >= t) {
                child.kill()?; // SIGKILL
                break;
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: child made no progress"
            );
        }
        child.wait()?;
        // Acknowledgements the child printed before it died still count.
        for line in rx.iter() {
            note(&line, &mut max_ins)?;
        }
        let _ = reader.join();
        let max_ins = max_ins.ok_or("child acknowledged nothing")?;
        // The child may have written (unacknowledged) statements past max_ins + 1 at most.
        next = max_ins + 2;

        let tarn = Tarn::open(&path).await?;
        let s = reconnect(&tarn, &secret).await?;
        let counts = s
            .query(
                "ws",
                r#"SELECT stmt, count(*) FROM "ws"."k" GROUP BY stmt ORDER BY stmt"#,
                &[],
            )
            .await?
            .rows
            .unwrap_or_default();
        let found: BTreeMap<u64, u64> = counts
            .iter()
            .map(|r| {
                (
                    r[0].as_u64().unwrap_or(u64::MAX),
                    r[1].as_u64().unwrap_or(0),
                )
            })
            .collect();
        for (stmt, count) in &found {
            assert_eq!(*count, 10, "round {round}: statement {stmt} is torn");
            assert!(
                !deleted.contains_key(stmt),
                "round {round}: statement {stmt} was deleted (acknowledged) but is back"
            );
        }
        for stmt in inserted.keys() {
            // Statement `stmt` (if a multiple of 4) is deleted right after statement
            // `stmt + 3`, which may have run (unacknowledged) if it is below `next`.
            let may_be_deleted = stmt % 4 == 0 && stmt + 3 < next;
            assert!(
                found.contains_key(stmt) || may_be_deleted,
                "round {round}: acknowledged statement {stmt} lost"
            );
        }
        // Every acknowledged view is there and reads; every acknowledged drop holds;
        // any other view (created or dropped unacknowledged) reads if it is there.
        for (n, alive) in views.iter_mut() {
            let r = s
                .query("ws", &format!(r#"SELECT c FROM "ws"."v{n}""#), &[])
                .await;
            match (*alive, r) {
                (Some(true), Ok(r)) => assert_eq!(r.row_count, 1, "round {round}: view v{n}"),
                (Some(true), Err(e)) => {
                    panic!("round {round}: acknowledged view v{n} lost: {e}")
                }
                (Some(false), Ok(_)) => panic!("round {round}: dropped view v{n} is back"),
                (None, Ok(r)) => {
                    assert_eq!(r.row_count, 1, "round {round}: view v{n}");
                    // Its drop did not land; there after a reopen, it must stay.
                    *alive = Some(true);
                }
                (Some(false) | None, Err(e)) => {
                    assert_eq!(e.status(), 404, "round {round}: v{n}: {e}");
                    // Gone now, it may never come back.
                    *alive = Some(false);
                }
            }
        }
        for v in s.views("ws").await? {
            let r = s
                .query("ws", &format!(r#"SELECT c FROM "ws"."{}""#, v.name), &[])
                .await;
            assert!(
                r.is_ok(),
                "round {round}: view {} does not read: {r:?}",
                v.name
            );
        }
        // The rows read the same through the key index as through a scan.
        if let Some((&stmt, _)) = found.iter().next_back() {
            let r = s
                .query(
                    "ws",
                    r#"SELECT v FROM "ws"."k" WHERE stmt = $1 AND i = 7"#,
                    &[json!(stmt)],
                )
                .await?;
            assert_eq!(r.rows.map(|r| r.len()), Some(1), "round {round}");
        }
    }
    Ok(())
}

#[tokio::test]
async fn kill_9_rounds() -> TestResult {
    run_rounds(20).await
}

#[tokio::test]
#[ignore = "long: 500 rounds"]
async fn kill_9_many_rounds() -> TestResult {
    run_rounds(500).await
}
