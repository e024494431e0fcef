//! Every byte read from disk is checksummed (SPEC §3): a small database's files are
//! damaged one way at a time — each byte flipped (all bytes of small files, a dense
//! sample of large ones), each file truncated and removed — and every outcome must be
//! the right data, or an error with status 500 that names the damaged file, never wrong
//! data, a panic or a 400. An open that fails changes no file.
//!
//! The write-ahead log's last commit group is the one exception the format cannot tell
//! apart: damage there looks exactly like a write torn by a crash, so recovery drops
//! that (unacknowledged-looking) group, and the data is the state before it. A log
//! truncated anywhere looks like one that ended early, so any prefix of the log's
//! statements is accepted there; damage in the middle of the log is always an error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use tarn::Tarn;
use tarn_tests::{fixture_with_key, reconnect};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Files by path, with their bytes.
type Files = BTreeMap<PathBuf, Vec<u8>>;

/// One way to damage a file; returns whether the damage lies in the log's last group.
type Damage = Box<dyn Fn(&mut Vec<u8>) -> bool>;

/// Statements after the checkpoint: they live in the write-ahead log only.
const LOGGED: i64 = 5;

/// Bytes of a log file's header.
const HEADER: usize = 40;

/// The rows after the checkpoint's 300 and the first `j` logged statements (10 each).
fn expected(j: i64) -> Vec<Vec<Value>> {
    (0..300 + j * 10)
        .map(|i| {
            vec![
                json!(i),
                json!(format!("body {}", i % 37)),
                json!(i as f64 / 4.0),
            ]
        })
        .collect()
}

/// The files of a database directory with their bytes (the lock file aside).
fn files(dir: &Path) -> Files {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n != "LOCK") {
                out.insert(path.clone(), std::fs::read(&path).unwrap_or_default());
            }
        }
    }
    out
}

/// Writes `files` (paths relative to `dir`) into `dir`.
fn write_files(dir: &Path, files: Files) -> std::io::Result<()> {
    for (rel, bytes) in files {
        let path = dir.join(rel);
        if let Some(p) = path.parent() {
            std::fs::create_dir_all(p)?;
        }
        std::fs::write(&path, bytes)?;
    }
    Ok(())
}

/// Builds the database: 300 rows sealed into a segment (with key sections for the
/// primary key and an exact_text index), then `LOGGED` statements in the log.
async fn build(dir: &Path) -> Result<String, Box<dyn std::error::Error>> {
    let tarn = Tarn::open(dir).await?;
    let (s, secret) = fixture_with_key(&tarn).await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."t" (id INT8 PRIMARY KEY, body TEXT, x FLOAT8) USING engine"#,
        &[],
    )
    .await?;
    s.query(
        "ws",
        r#"CREATE INDEX t_body ON "ws"."t" USING engine_index (body) WITH (index_type = 'exact_text')"#,
        &[],
    )
    .await?;
    // Many commits first, so the log's LSNs are far from small numbers when the
    // checkpoint cuts it (recovery must not lean on LSNs starting near 0).
    s.query("ws", r#"CREATE TABLE "ws"."pad" (n INT) USING engine"#, &[])
        .await?;
    for n in 0..200 {
        s.query("ws", r#"INSERT INTO "ws"."pad" VALUES ($1)"#, &[json!(n)])
            .await?;
    }
    s.query("ws", r#"DROP TABLE "ws"."pad""#, &[]).await?;
    let insert = |from: i64, to: i64| {
        let values: Vec<String> = (from..to)
            .map(|i| format!("({i}, 'body {}', {})", i % 37, i as f64 / 4.0))
            .collect();
        format!(r#"INSERT INTO "ws"."t" VALUES {}"#, values.join(", "))
    };
    s.query("ws", &insert(0, 300), &[]).await?;
    s.query("ws", r#"VACUUM "ws"."t""#, &[]).await?;
    for j in 0..LOGGED {
        s.query("ws", &insert(300 + j * 10, 310 + j * 10), &[])
            .await?;
    }
    // Dropped on the runtime: no closing checkpoint, the statements stay in the log.
    drop(s);
    drop(tarn);
    Ok(secret)
}

/// What a damaged database gave.
enum Outcome {
    /// The data after the first `j` logged statements.
    Data(i64),
    /// An error naming the damaged file.
    Refused,
}

/// Opens `dir` and reads everything: by scan, by primary key, by the exact_text index.
async fn check(dir: &Path, secret: &str, damaged: &Path) -> Result<Outcome, String> {
    let name = damaged
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let refused = |e: tarn::Error| -> Result<Outcome, String> {
        if e.status() == 500 && e.message().contains(&name) {
            Ok(Outcome::Refused)
        } else {
            Err(format!("damage to {name} gave {} {e}", e.status()))
        }
    };
    let before = files(dir);
    let tarn = match Tarn::open(dir).await {
        Ok(t) => t,
        Err(e) => {
            if files(dir) != before {
                return Err(format!("a failed open ({e}) changed files"));
            }
            return refused(e);
        }
    };
    let s = reconnect(&tarn, secret)
        .await
        .map_err(|e| format!("reconnect: {e}"))?;
    // First through a join, whose build side reaches the probe side as a shared error:
    // damage met there must still come out as itself.
    let r = s
        .query(
            "ws",
            r#"SELECT count(*) FROM "ws"."t" AS a JOIN "ws"."t" AS b ON a.id = b.id + 1"#,
            &[],
        )
        .await;
    let joined = match r {
        Ok(r) => r.rows.unwrap_or_default(),
        Err(e) => return refused(e),
    };
    let scan = match s
        .query("ws", r#"SELECT id, body, x FROM "ws"."t" ORDER BY id"#, &[])
        .await
    {
        Ok(r) => r.rows.unwrap_or_default(),
        Err(e) => return refused(e),
    };
    let Some(j) = (0..=LOGGED).find(|j| scan == expected(*j)) else {
        return Err(format!(
            "damage to {name} gave wrong data ({} rows)",
            scan.len()
        ));
    };
    if joined != vec![vec![json!(300 + j * 10 - 1)]] {
        return Err(format!("damage to {name}: the join is wrong"));
    }
    // The key indexes must agree with the scan (or fail naming the file).
    for id in [7i64, 299, 300 + j * 10 - 1] {
        let r = s
            .query(
                "ws",
                r#"SELECT body FROM "ws"."t" WHERE id = $1"#,
                &[json!(id)],
            )
            .await;
        match r {
            Ok(r) if id < 300 + j * 10 => {
                if r.rows != Some(vec![vec![json!(format!("body {}", id % 37))]]) {
                    return Err(format!("damage to {name}: key lookup of {id} is wrong"));
                }
            }
            Ok(_) => {}
            Err(e) => return refused(e),
        }
    }
    let r = s
        .query(
            "ws",
            r#"SELECT count(*) FROM "ws"."t" WHERE body = 'body 5'"#,
            &[],
        )
        .await;
    match r {
        Ok(r) => {
            let want = expected(j)
                .iter()
                .filter(|r| r[1] == json!("body 5"))
                .count();
            if r.rows != Some(vec![vec![json!(want)]]) {
                return Err(format!("damage to {name}: exact_text lookup is wrong"));
            }
        }
        Err(e) => return refused(e),
    }
    Ok(Outcome::Data(j))
}

/// Which bytes of a file of `len` bytes to flip: all of small files, both ends and
/// every 13th byte of large ones.
fn offsets(len: usize) -> Vec<usize> {
    if len <= 4096 {
        return (0..len).collect();
    }
    (0..len)
        .filter(|&i| i < 1024 || i + 2048 >= len || i % 13 == 0)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_damaged_byte_is_an_error_naming_the_file_or_the_right_data() -> TestResult {
    let pristine_dir = tempfile::tempdir()?;
    let secret = build(pristine_dir.path()).await?;
    let pristine = files(pristine_dir.path());
    let rel = |p: &Path| p.strip_prefix(pristine_dir.path()).map(Path::to_path_buf);
    assert!(
        pristine
            .keys()
            .any(|p| p.extension().is_some_and(|e| e == "seg"))
    );
    assert!(
        pristine
            .keys()
            .any(|p| p.extension().is_some_and(|e| e == "wal"))
    );
    let trial = |mutate: &dyn Fn(&mut Files)| {
        let mut f = Files::new();
        for (p, b) in &pristine {
            if let Ok(r) = rel(p) {
                f.insert(r, b.clone());
            }
        }
        mutate(&mut f);
        f
    };
    // The undamaged database reads back whole.
    let ok_dir = tempfile::tempdir()?;
    write_files(ok_dir.path(), trial(&|_| {}))?;
    assert!(matches!(
        check(ok_dir.path(), &secret, Path::new("none")).await,
        Ok(Outcome::Data(LOGGED))
    ));

    let mut tally: BTreeMap<String, (usize, usize, usize)> = BTreeMap::new();
    for (path, bytes) in &pristine {
        let r = rel(path)?;
        let is_wal = r.extension().is_some_and(|e| e == "wal");
        // Where the last commit group of the log starts: a flip from there on may only
        // drop that group.
        let last_group = if is_wal {
            find_last_group(bytes)
        } else {
            usize::MAX
        };
        let mut cases: Vec<(String, Damage)> = Vec::new();
        for at in offsets(bytes.len()) {
            cases.push((
                format!("flip byte {at}"),
                Box::new(move |b: &mut Vec<u8>| {
                    b[at] ^= 0x5A;
                    at >= last_group
                }),
            ));
        }
        if is_wal {
            // Damage in the middle of the log and a last group torn by a crash too: still
            // damage in acknowledged history.
            let torn = last_group + (bytes.len() - last_group) / 2;
            for at in (HEADER..last_group).step_by(7) {
                cases.push((
                    format!("flip byte {at} and tear the last group at {torn}"),
                    Box::new(move |b: &mut Vec<u8>| {
                        b[at] ^= 0x5A;
                        b.truncate(torn);
                        false
                    }),
                ));
            }
        }
        for cut in [
            0,
            1,
            bytes.len() / 3,
            bytes.len() / 2,
            bytes.len().saturating_sub(1),
        ] {
            cases.push((
                format!("truncate to {cut}"),
                Box::new(move |b: &mut Vec<u8>| {
                    b.truncate(cut);
                    true
                }),
            ));
        }
        for (what, damage) in cases {
            let dir = tempfile::tempdir()?;
            let files_now = trial(&|f| {
                if let Some(b) = f.get_mut(&r) {
                    damage(b);
                }
            });
            let tail_ok = damage(&mut bytes.clone());
            write_files(dir.path(), files_now)?;
            let damaged = dir.path().join(&r);
            let outcome = check(dir.path(), &secret, &damaged)
                .await
                .map_err(|e| format!("{}: {what}: {e}", r.display()))?;
            let t = tally.entry(r.display().to_string()).or_default();
            match outcome {
                Outcome::Refused => t.1 += 1,
                Outcome::Data(LOGGED) => t.0 += 1,
                Outcome::Data(j) => {
                    let truncated = what.starts_with("truncate");
                    assert!(
                        is_wal && ((truncated) || (tail_ok && j == LOGGED - 1)),
                        "{}: {what}: the data lost statements ({j} of {LOGGED} left)",
                        r.display()
                    );
                    t.2 += 1;
                }
            }
        }
        // Removed.
        let dir = tempfile::tempdir()?;
        let files_now = trial(&|f| {
            f.remove(&r);
        });
        write_files(dir.path(), files_now)?;
        match check(dir.path(), &secret, &dir.path().join(&r)).await {
            Ok(Outcome::Data(LOGGED)) | Ok(Outcome::Refused) => {}
            Ok(Outcome::Data(j)) => {
                panic!("{} removed: {j} of {LOGGED} statements left", r.display())
            }
            Err(e) => panic!("{} removed: {e}", r.display()),
        }
    }
    // Every kind of file was damaged, and damage was detected, not just survived.
    for (file, (data, refused, dropped_tail)) in &tally {
        eprintln!(
            "{file}: {data} read back whole, {refused} refused, {dropped_tail} lost the log's tail"
        );
    }
    assert!(tally.values().map(|t| t.1).sum::<usize>() > 100);
    Ok(())
}

/// The offset of the last commit group of a WAL file: the last `GRP1` magic.
fn find_last_group(bytes: &[u8]) -> usize {
    bytes
        .windows(4)
        .rposition(|w| w == b"GRP1")
        .unwrap_or(usize::MAX)
}

/// A database whose data is all in the catalog (users, keys, workspaces, an empty
/// table) still holds data: without its MANIFEST it is refused, not opened empty.
#[tokio::test]
async fn a_catalog_only_database_without_its_manifest_is_refused() -> TestResult {
    let dir = tempfile::tempdir()?;
    {
        let tarn = Tarn::open(dir.path()).await?;
        let (s, _) = fixture_with_key(&tarn).await?;
        s.query(
            "ws",
            r#"CREATE TABLE "ws"."empty" (a INT) USING engine"#,
            &[],
        )
        .await?;
        tarn.close().await?;
    }
    std::fs::remove_file(dir.path().join("MANIFEST"))?;
    let before = files(dir.path());
    let err = Tarn::open(dir.path()).await.unwrap_err();
    assert_eq!(err.status(), 500, "{err}");
    assert!(err.message().contains("MANIFEST"), "{err}");
    assert_eq!(files(dir.path()), before);
    Ok(())
}

/// With two live log files (a checkpoint failed after it moved the log to a new file),
/// the second file's header says how far the first one's durable records went: damage
/// at the end of the first file is refused, not taken for a torn tail.
#[tokio::test]
async fn damage_at_the_end_of_an_earlier_log_file_is_refused() -> TestResult {
    use std::sync::Arc;
    use tarn::storage::{Fault, FaultOp, FaultyBackend};
    let dir = tempfile::tempdir()?;
    let disk = FaultyBackend::new();
    let options = || {
        tarn::Options::new()
            .background_maintenance(false)
            .file_backend(Arc::new(disk.clone()))
    };
    let secret = {
        let tarn = Tarn::open_with(dir.path(), options()).await?;
        let (s, secret) = fixture_with_key(&tarn).await?;
        s.query(
            "ws",
            r#"CREATE TABLE "ws"."t" (id INT8 PRIMARY KEY) USING engine"#,
            &[],
        )
        .await?;
        s.query("ws", r#"INSERT INTO "ws"."t" VALUES (1), (2)"#, &[])
            .await?;
        // The manifest's rename fails: the log has moved on to a new file already.
        disk.set(Fault::Op(FaultOp::Rename));
        assert!(s.query("ws", r#"VACUUM "ws"."t""#, &[]).await.is_err());
        disk.clear();
        s.query("ws", r#"INSERT INTO "ws"."t" VALUES (3)"#, &[])
            .await?;
        drop(s);
        drop(tarn);
        secret
    };
    let pristine = files(dir.path());
    let mut wal: Vec<&PathBuf> = pristine
        .keys()
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    wal.sort();
    assert_eq!(wal.len(), 2, "{wal:?}");
    let first = wal[0].clone();
    let bytes = &pristine[&first];
    let last_group = find_last_group(bytes);
    let mut damages: Vec<Vec<u8>> = (last_group..bytes.len())
        .map(|at| {
            let mut b = bytes.clone();
            b[at] ^= 0x5A;
            b
        })
        .collect();
    damages.push(bytes[..last_group].to_vec());
    for damaged in damages {
        let trial = tempfile::tempdir()?;
        let mut f = Files::new();
        for (p, b) in &pristine {
            let rel = p.strip_prefix(dir.path())?.to_path_buf();
            let b = if *p == first {
                damaged.clone()
            } else {
                b.clone()
            };
            f.insert(rel, b);
        }
        write_files(trial.path(), f)?;
        let rel = first.strip_prefix(dir.path())?;
        match check(trial.path(), &secret, &trial.path().join(rel)).await {
            Ok(Outcome::Refused) => {}
            Ok(Outcome::Data(j)) => panic!("damage at the end of {rel:?} gave data ({j})"),
            Err(e) => panic!("{e}"),
        }
    }
    Ok(())
}
