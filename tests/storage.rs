//! Storage through the public API: tables sealed into segment files, reopened, pruned,
//! compacted and vacuumed; exact row counts and sizes; a failing disk.

use std::sync::Arc;

use serde_json::{Value, json};
use tarn::arrow::array::RecordBatch;
use tarn::storage::{Fault, FaultOp, FaultyBackend};
use tarn::{Options, Session, SyncMode, Tarn};
use tarn_tests::{fixture_with_key, id_body_x_batch, reconnect};

type TestResult = Result<(), Box<dyn std::error::Error>>;

async fn rows(s: &Session, sql: &str) -> Result<Vec<Vec<Value>>, tarn::Error> {
    Ok(s.query("ws", sql, &[]).await?.rows.unwrap_or_default())
}

fn batch(from: i64, to: i64) -> Result<RecordBatch, tarn::arrow::error::ArrowError> {
    id_body_x_batch(
        from..to,
        |i| format!("row {i:08} with a body of about fifty bytes"),
        10.0,
    )
}

fn segment_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir.join("segments")).map_or(0, |d| d.count())
}

async fn open(dir: &std::path::Path) -> tarn::Result<Tarn> {
    Tarn::open_with(
        dir,
        Options::new()
            .sync(SyncMode::Process)
            .memtable_bytes(1 << 20)
            .background_maintenance(false),
    )
    .await
}

#[tokio::test]
async fn tables_live_in_segments_and_reopen_from_them() -> TestResult {
    let dir = tempfile::tempdir()?;
    let tarn = open(dir.path()).await?;
    let (s, secret) = fixture_with_key(&tarn).await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."t" (id INT8 PRIMARY KEY, body TEXT, x FLOAT8) USING engine"#,
        &[],
    )
    .await?;
    for i in 0..20 {
        s.insert_arrow("ws", "t", &[batch(i * 10_000, (i + 1) * 10_000)?])
            .await?;
    }
    assert!(segment_files(dir.path()) >= 1, "the memtable was sealed");
    let agg = r#"SELECT count(*), sum(id), round(sum(x)) FROM "ws"."t""#;
    let expect = vec![vec![
        json!(200_000),
        json!(19_999_900_000i64),
        json!(9_990_000.0),
    ]];
    assert_eq!(rows(&s, agg).await?, expect);
    // Key lookups and pruned ranges over sealed segments.
    assert_eq!(
        rows(&s, r#"SELECT body FROM "ws"."t" WHERE id = 123456"#).await?,
        vec![vec![json!("row 00123456 with a body of about fifty bytes")]]
    );
    assert_eq!(
        rows(
            &s,
            r#"SELECT count(*) FROM "ws"."t" WHERE id >= 150000 AND id < 150100"#
        )
        .await?,
        vec![vec![json!(100)]]
    );
    assert_eq!(
        rows(&s, r#"SELECT id FROM "ws"."t" ORDER BY id DESC LIMIT 2"#).await?,
        vec![vec![json!(199_999)], vec![json!(199_998)]]
    );
    assert_eq!(
        rows(&s, r#"SELECT id FROM "ws"."t" LIMIT 3"#).await?.len(),
        3
    );
    // Deletes and updates mark bitmaps; UPDATE by key.
    let del = s
        .query("ws", r#"DELETE FROM "ws"."t" WHERE id % 3 = 0"#, &[])
        .await?;
    assert_eq!(del.rows_affected, 66_667);
    s.query("ws", r#"UPDATE "ws"."t" SET x = -1 WHERE id = 100001"#, &[])
        .await?;
    let details = s.table("ws", "t").await?;
    assert_eq!(details.row_count, 133_333);
    let size_before = details.size_mb;
    assert!(size_before > 1.0, "{size_before}");
    // Duplicate keys are caught against sealed segments.
    let err = s
        .query(
            "ws",
            r#"INSERT INTO "ws"."t" VALUES (100001, 'dup', 0)"#,
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(err.status(), 409);
    // A deleted key may be used again.
    s.query("ws", r#"INSERT INTO "ws"."t" VALUES (3, 'back', 0)"#, &[])
        .await?;
    s.query("ws", r#"VACUUM "ws"."t""#, &[]).await?;
    let details = s.table("ws", "t").await?;
    assert_eq!(details.row_count, 133_334);
    assert!(
        details.size_mb < size_before,
        "{} < {size_before}",
        details.size_mb
    );
    let check = r#"SELECT count(*), sum(id), min(x) FROM "ws"."t""#;
    let before = rows(&s, check).await?;
    drop(s);
    drop(tarn);
    let wal_bytes: u64 = std::fs::read_dir(dir.path().join("wal"))?
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    assert!(
        wal_bytes < 4096,
        "a clean close leaves the log empty: {wal_bytes}"
    );
    let tarn = open(dir.path()).await?;
    let s = reconnect(&tarn, &secret).await?;
    assert_eq!(rows(&s, check).await?, before);
    assert_eq!(
        rows(&s, r#"SELECT body, x FROM "ws"."t" WHERE id = 100001"#).await?,
        vec![vec![
            json!("row 00100001 with a body of about fifty bytes"),
            json!(-1.0)
        ]]
    );
    assert_eq!(
        rows(&s, r#"SELECT body FROM "ws"."t" WHERE id = 3"#).await?,
        vec![vec![json!("back")]]
    );
    assert!(
        rows(&s, r#"SELECT body FROM "ws"."t" WHERE id = 6"#)
            .await?
            .is_empty()
    );
    Ok(())
}

/// Durable, no background worker (commits run the checkpoints they make due), on `disk`.
fn on_faulty_disk(disk: &FaultyBackend, memtable_bytes: usize) -> Options {
    Options::new()
        .sync(SyncMode::Full)
        .memtable_bytes(memtable_bytes)
        .background_maintenance(false)
        .file_backend(Arc::new(disk.clone()))
}

/// A database in `dir` with table `"ws"."t"` holding rows 0..1000.
async fn faulty_table(
    dir: &std::path::Path,
    options: Options,
) -> Result<(Tarn, Session, String), Box<dyn std::error::Error>> {
    let tarn = Tarn::open_with(dir, options).await?;
    let (s, secret) = fixture_with_key(&tarn).await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."t" (id INT8 PRIMARY KEY, body TEXT, x FLOAT8) USING engine"#,
        &[],
    )
    .await?;
    s.insert_arrow("ws", "t", &[batch(0, 1000)?]).await?;
    Ok((tarn, s, secret))
}

#[tokio::test]
async fn a_failing_disk_fails_statements_cleanly_and_recovers() -> TestResult {
    let dir = tempfile::tempdir()?;
    let disk = FaultyBackend::new();
    let options = || on_faulty_disk(&disk, 64 << 10);
    let (tarn, s, secret) = faulty_table(dir.path(), options()).await?;
    let mut next = 1000;
    for fault in [Fault::NoSpace, Fault::WriteIo, Fault::SyncIo] {
        disk.set(fault);
        // Small writes fail at the log, big ones at the log or the checkpoint after it.
        let err = s
            .query("ws", r#"INSERT INTO "ws"."t" VALUES (-1, 'lost', 0)"#, &[])
            .await
            .unwrap_err();
        assert_eq!(err.status(), 500, "{fault:?}: {err}");
        let err = s.query("ws", r#"VACUUM "ws"."t""#, &[]).await.unwrap_err();
        assert_eq!(err.status(), 500, "{fault:?}: {err}");
        // Reads go on, and the failed statement left nothing behind.
        assert_eq!(
            rows(&s, r#"SELECT count(*) FROM "ws"."t" WHERE id = -1"#).await?,
            vec![vec![json!(0)]]
        );
        disk.clear();
        s.insert_arrow("ws", "t", &[batch(next, next + 3000)?])
            .await?;
        next += 3000;
    }
    s.query("ws", r#"VACUUM "ws"."t""#, &[]).await?;
    let expect = rows(&s, r#"SELECT count(*), sum(id) FROM "ws"."t""#).await?;
    assert_eq!(expect[0][0], json!(next));
    drop(s);
    drop(tarn);
    let tarn = Tarn::open_with(dir.path(), options()).await?;
    let s = reconnect(&tarn, &secret).await?;
    assert_eq!(
        rows(&s, r#"SELECT count(*), sum(id) FROM "ws"."t""#).await?,
        expect
    );
    Ok(())
}

/// Every kind of file call failing in turn (create, open, write, fsync, set_len, rename,
/// directory fsync, remove): statements either commit or fail with a 500 and leave
/// nothing; a commit whose checkpoint fails afterwards is still reported as committed;
/// and once the disk heals, everything acknowledged is there, also after a reopen.
#[tokio::test]
async fn every_failing_file_call_fails_cleanly_and_nothing_acknowledged_is_lost() -> TestResult {
    for op in FaultOp::ALL {
        let dir = tempfile::tempdir()?;
        let disk = FaultyBackend::new();
        // A small memtable: commits run the checkpoints themselves.
        let options = || on_faulty_disk(&disk, 16 << 10);
        let (tarn, s, secret) = faulty_table(dir.path(), options()).await?;
        let mut acked: Vec<(i64, i64)> = vec![(0, 1000)];
        let mut failed: Vec<(i64, i64)> = Vec::new();
        disk.set(Fault::Op(op));
        // The log needs only writes and fsyncs (of its file, and of the directory once
        // a checkpoint moved it to a new file) once it is open: with any other call
        // failing, commits succeed even though the checkpoints they trigger fail.
        let log_fails = matches!(op, FaultOp::Write | FaultOp::Sync | FaultOp::SyncDir);
        let mut next = 1000;
        for round in 0..3 {
            let range = (next, next + 500);
            next += 500;
            match s.insert_arrow("ws", "t", &[batch(range.0, range.1)?]).await {
                Ok(_) => acked.push(range),
                Err(e) => {
                    assert_eq!(e.status(), 500, "{op:?} round {round}: {e}");
                    assert!(
                        log_fails,
                        "{op:?}: a committed statement was reported as failed: {e}"
                    );
                    failed.push(range);
                }
            }
            match s.query("ws", r#"VACUUM "ws"."t""#, &[]).await {
                Ok(_) => {}
                Err(e) => assert_eq!(e.status(), 500, "{op:?} VACUUM: {e}"),
            }
        }
        assert!(
            !log_fails || !failed.is_empty(),
            "{op:?}: nothing failed, the fault was not exercised"
        );
        let count = |ranges: &[(i64, i64)]| ranges.iter().map(|(a, b)| b - a).sum::<i64>();
        assert_eq!(
            rows(&s, r#"SELECT count(*) FROM "ws"."t""#).await?,
            vec![vec![json!(count(&acked))]],
            "{op:?}"
        );
        // Opening a second handle while the disk fails: refused (locked), never harm.
        assert!(Tarn::open_with(dir.path(), options()).await.is_err());
        disk.clear();
        s.insert_arrow("ws", "t", &[batch(next, next + 10)?])
            .await?;
        acked.push((next, next + 10));
        s.query("ws", r#"VACUUM "ws"."t""#, &[]).await?;
        tarn.close().await?;
        // Reopening on a failing disk: an error or the data, and no file changed by a
        // failed attempt.
        disk.set(Fault::Op(op));
        match Tarn::open_with(dir.path(), options()).await {
            Ok(t) => t
                .close()
                .await
                .or_else(|e| if e.status() == 500 { Ok(()) } else { Err(e) })?,
            Err(e) => assert_eq!(e.status(), 500, "{op:?} open: {e}"),
        }
        disk.clear();
        let tarn = Tarn::open_with(dir.path(), options()).await?;
        let s = reconnect(&tarn, &secret).await?;
        let mut ids = Vec::new();
        for (a, b) in &acked {
            ids.extend(*a..*b);
        }
        let got = rows(&s, r#"SELECT count(*), sum(id) FROM "ws"."t""#).await?;
        assert_eq!(
            got,
            vec![vec![json!(ids.len()), json!(ids.iter().sum::<i64>())]],
            "{op:?} after reopen"
        );
        for (a, _) in &failed {
            assert_eq!(
                rows(
                    &s,
                    &format!(r#"SELECT count(*) FROM "ws"."t" WHERE id = {a}"#)
                )
                .await?,
                vec![vec![json!(0)]],
                "{op:?}: a failed statement came back"
            );
        }
        tarn.close().await?;
    }
    Ok(())
}

/// The calls only an open makes (opening the log to append, cutting its torn tail):
/// failing, the open is a 500 that changes no file; healed, it opens with everything.
#[tokio::test]
async fn an_open_that_cannot_open_or_cut_the_log_changes_nothing() -> TestResult {
    let dir = tempfile::tempdir()?;
    let disk = FaultyBackend::new();
    let options = || Options::new().file_backend(Arc::new(disk.clone()));
    let secret = {
        let tarn = Tarn::open_with(dir.path(), options()).await?;
        let (s, secret) = fixture_with_key(&tarn).await?;
        s.query(
            "ws",
            r#"CREATE TABLE "ws"."t" (id INT8 PRIMARY KEY) USING engine"#,
            &[],
        )
        .await?;
        s.query("ws", r#"INSERT INTO "ws"."t" VALUES (1), (2), (3)"#, &[])
            .await?;
        drop(s);
        drop(tarn); // on the runtime: no closing checkpoint, the rows are in the log
        secret
    };
    // A torn tail to cut.
    let wal = std::fs::read_dir(dir.path().join("wal"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .max()
        .ok_or("no log file")?;
    let mut bytes = std::fs::read(&wal)?;
    bytes.extend_from_slice(&[0x47; 100]);
    std::fs::write(&wal, &bytes)?;
    let snapshot = |d: &std::path::Path| -> std::io::Result<Vec<(std::path::PathBuf, Vec<u8>)>> {
        let mut out = Vec::new();
        for sub in ["", "wal", "segments"] {
            for e in std::fs::read_dir(d.join(sub))? {
                let p = e?.path();
                if p.is_file() && p.file_name().is_some_and(|n| n != "LOCK") {
                    out.push((p.clone(), std::fs::read(&p)?));
                }
            }
        }
        out.sort();
        Ok(out)
    };
    for op in [FaultOp::Open, FaultOp::SetLen, FaultOp::Sync] {
        let before = snapshot(dir.path())?;
        disk.set(Fault::Op(op));
        let err = Tarn::open_with(dir.path(), options()).await.unwrap_err();
        assert_eq!(err.status(), 500, "{op:?}: {err}");
        disk.clear();
        // (A failed fsync comes after the torn tail was cut: harmless, and the next
        // open cuts nothing more.)
        if op != FaultOp::Sync {
            assert_eq!(
                snapshot(dir.path())?,
                before,
                "{op:?}: a failed open changed files"
            );
        }
    }
    let tarn = Tarn::open_with(dir.path(), options()).await?;
    let s = reconnect(&tarn, &secret).await?;
    assert_eq!(
        rows(&s, r#"SELECT count(*) FROM "ws"."t""#).await?,
        vec![vec![json!(3)]]
    );
    tarn.close().await?;
    Ok(())
}
