//! Workspace files (SPEC §7): uploads streamed with their SHA-256, records, paging,
//! downloads that seek, deletes and cascades, the size limit found while streaming,
//! uploads that fail or are dropped halfway, and crashes (kill -9 and power cuts) at
//! any point: never a record without its bytes, never bytes without a record once the
//! database has opened again.

use std::collections::{BTreeMap, BTreeSet};
use std::io::SeekFrom;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tarn::storage::{Fault, FaultOp, FaultyBackend, PowerCutDisk};
use tarn::{ErrorKind, Options, Session, SyncMode, Tarn};
use tarn_tests::{Rng, fixture, fixture_with_key, reconnect, run_and_kill};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncSeekExt, ReadBuf};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn sha_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `n` bytes that differ from file to file (`seed`).
fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed | 1);
    (0..n).map(|_| rng.next_u64() as u8).collect()
}

/// The names in the database's blob directory.
fn blob_names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir.join("files"))
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

async fn content(s: &Session, ws: &str, id: &str) -> tarn::Result<Vec<u8>> {
    let mut c = s.file_content(ws, id).await?;
    let mut out = Vec::new();
    c.reader
        .read_to_end(&mut out)
        .await
        .map_err(|e| tarn::Error::new(ErrorKind::Internal, e.to_string()))?;
    Ok(out)
}

/// A reader that gives `data` in small pieces and then fails, or (with `hang`) never
/// ends: a client that breaks off or stalls mid-upload.
struct Broken {
    data: Vec<u8>,
    at: usize,
    hang: bool,
}

impl AsyncRead for Broken {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.at < self.data.len() {
            let n = (self.data.len() - self.at).min(buf.remaining()).min(50_000);
            let at = self.at;
            buf.put_slice(&self.data[at..at + n]);
            self.at += n;
            return Poll::Ready(Ok(()));
        }
        if self.hang {
            // Never woken: the caller gives up on the upload.
            Poll::Pending
        } else {
            Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "client went away",
            )))
        }
    }
}

#[tokio::test]
async fn files_round_trip_with_their_sha256_and_seek() -> TestResult {
    let dir = tempfile::tempdir()?;
    let tarn = Tarn::open(dir.path()).await?;
    let (s, secret) = fixture_with_key(&tarn).await?;
    // Several of the upload's chunks and an odd tail; an empty file; one in memory.
    let big = bytes((3 << 20) + 12_345, 1);
    let info = s
        .upload_file("ws", "big.bin", "application/octet-stream", &big[..])
        .await?;
    assert_eq!(info.workspace_id, "ws");
    assert_eq!(info.filename, "big.bin");
    assert_eq!(info.size_bytes, big.len() as u64);
    assert_eq!(info.sha256, sha_hex(&big));
    assert_eq!(info.id.len(), 36, "a UUID: {}", info.id);
    assert!(info.created_at.ends_with('Z'), "{}", info.created_at);
    assert_eq!(s.file("ws", &info.id).await?, info);
    assert_eq!(content(&s, "ws", &info.id).await?, big);

    // Ranges: seek, then read.
    let mut c = s.file_content("ws", &info.id).await?;
    assert_eq!(c.media_type, "application/octet-stream");
    assert_eq!(c.size_bytes, big.len() as u64);
    c.reader.seek(SeekFrom::Start(2_000_000)).await?;
    let mut part = vec![0u8; 1000];
    c.reader.read_exact(&mut part).await?;
    assert_eq!(part, big[2_000_000..2_001_000]);
    c.reader.seek(SeekFrom::End(-10)).await?;
    let mut tail = Vec::new();
    c.reader.read_to_end(&mut tail).await?;
    assert_eq!(tail, big[big.len() - 10..]);

    let empty = s.upload_file("ws", "empty", "", &b""[..]).await?;
    assert_eq!(empty.size_bytes, 0);
    assert_eq!(empty.media_type, "application/octet-stream");
    assert_eq!(empty.sha256, sha_hex(b""));
    assert_eq!(content(&s, "ws", &empty.id).await?, b"");

    // The bytes and records survive a reopen.
    tarn.close().await?;
    drop(tarn);
    let tarn = Tarn::open(dir.path()).await?;
    let s = reconnect(&tarn, &secret).await?;
    assert_eq!(s.file("ws", &info.id).await?, info);
    assert_eq!(content(&s, "ws", &info.id).await?, big);
    assert_eq!(s.files("ws", None, None).await?.total_count, 2);
    assert_eq!(
        blob_names(dir.path()),
        BTreeSet::from([info.id.clone(), empty.id.clone()])
    );
    tarn.close().await?;

    let mem = Tarn::in_memory().await?;
    let m = fixture(&mem).await?;
    let f = m
        .upload_file("ws", "m.txt", "text/plain", &big[..1000])
        .await?;
    assert_eq!(content(&m, "ws", &f.id).await?, big[..1000]);
    m.delete_file("ws", &f.id).await?;
    assert_eq!(
        m.file_content("ws", &f.id)
            .await
            .map(drop)
            .unwrap_err()
            .status(),
        404
    );
    Ok(())
}

#[tokio::test]
async fn files_list_newest_first_in_pages() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let s = fixture(&tarn).await?;
    let mut ids = Vec::new();
    for i in 0..25 {
        let name = format!("f{i:02}.txt");
        ids.push(
            s.upload_file("ws", &name, "text/plain", name.as_bytes())
                .await?
                .id,
        );
    }
    s.upload_file("other", "elsewhere.txt", "text/plain", &b"x"[..])
        .await?;
    ids.reverse(); // newest first
    let all = s.files("ws", None, None).await?;
    assert_eq!((all.total_count, all.limit, all.offset), (25, 100, 0));
    let got: Vec<String> = all.data.iter().map(|f| f.id.clone()).collect();
    assert_eq!(got, ids);
    let page = s.files("ws", Some(10), Some(20)).await?;
    assert_eq!(page.data.len(), 5);
    assert_eq!(page.data[0].id, ids[20]);
    assert_eq!((page.total_count, page.limit, page.offset), (25, 10, 20));
    let count_only = s.files("ws", Some(0), None).await?;
    assert!(count_only.data.is_empty());
    assert_eq!(count_only.total_count, 25);
    assert!(
        s.files("ws", Some(1000), Some(1 << 40))
            .await?
            .data
            .is_empty()
    );
    let e = s.files("ws", Some(1001), None).await.unwrap_err();
    assert_eq!(e.status(), 400);
    assert!(e.message().contains("1000"), "{e}");
    // The JSON shape of the service.
    let v = serde_json::to_value(&page)?;
    for key in ["data", "total_count", "limit", "offset"] {
        assert!(v.get(key).is_some(), "{key} in {v}");
    }
    let f = &v["data"][0];
    for key in [
        "id",
        "workspace_id",
        "filename",
        "media_type",
        "size_bytes",
        "sha256",
        "created_at",
    ] {
        assert!(f.get(key).is_some(), "{key} in {f}");
    }
    Ok(())
}

#[tokio::test]
async fn file_errors_have_their_statuses_and_keep_nothing() -> TestResult {
    let dir = tempfile::tempdir()?;
    let tarn = Tarn::open_with(dir.path(), Options::new().max_file_bytes(1 << 20)).await?;
    let s = fixture(&tarn).await?;
    let f = s
        .upload_file("ws", "a.txt", "text/plain", &b"a"[..])
        .await?;
    let missing = "00000000-0000-4000-8000-000000000000";
    for (what, status) in [
        (s.file("ws", missing).await.map(drop), 404),
        (s.file("ws", "../../etc/passwd").await.map(drop), 404),
        (s.file_content("ws", missing).await.map(drop), 404),
        (s.delete_file("ws", missing).await, 404),
        // A file of `ws` is not one of `other`.
        (s.file("other", &f.id).await.map(drop), 404),
        (s.file_content("other", &f.id).await.map(drop), 404),
        (s.delete_file("other", &f.id).await, 404),
        (s.files("nope", None, None).await.map(drop), 404),
        (
            s.upload_file("nope", "x", "", &b"x"[..]).await.map(drop),
            404,
        ),
        (s.upload_file("ws", "", "", &b"x"[..]).await.map(drop), 400),
        (
            s.upload_file("ws", "a/b", "", &b"x"[..]).await.map(drop),
            400,
        ),
        (
            s.upload_file("ws", "..", "", &b"x"[..]).await.map(drop),
            400,
        ),
        (
            s.upload_file("ws", "a\nb", "", &b"x"[..]).await.map(drop),
            400,
        ),
        (
            s.upload_file("ws", &"x".repeat(256), "", &b"x"[..])
                .await
                .map(drop),
            400,
        ),
        (
            s.upload_file("ws", "x", "no-slash", &b"x"[..])
                .await
                .map(drop),
            400,
        ),
        (
            s.upload_file("ws", "x", "text/pl\nain", &b"x"[..])
                .await
                .map(drop),
            400,
        ),
    ] {
        assert_eq!(what.map_err(|e| e.status()), Err(status));
    }
    // Over the limit: found while streaming, a 400 naming it, nothing kept.
    let big = bytes((1 << 20) + 1, 2);
    let e = s.upload_file("ws", "big", "", &big[..]).await.unwrap_err();
    assert_eq!(e.status(), 400, "{e}");
    assert!(e.message().contains("max_file_bytes"), "{e}");
    let exact = s.upload_file("ws", "exact", "", &big[..1 << 20]).await?;
    assert_eq!(exact.size_bytes, 1 << 20);
    // A reader that fails halfway: 400, nothing kept.
    let e = s
        .upload_file(
            "ws",
            "broken",
            "",
            Broken {
                data: bytes(300_000, 3),
                at: 0,
                hang: false,
            },
        )
        .await
        .unwrap_err();
    assert_eq!(e.status(), 400, "{e}");
    // A caller that gives up on a stalled upload: nothing kept either.
    let stalled = tokio::time::timeout(
        Duration::from_millis(200),
        s.upload_file(
            "ws",
            "stalled",
            "",
            Broken {
                // Under the limit: the upload waits for more.
                data: bytes(500_000, 4),
                at: 0,
                hang: true,
            },
        ),
    )
    .await;
    assert!(stalled.is_err(), "the upload should still be waiting");
    let want = BTreeSet::from([f.id.clone(), exact.id.clone()]);
    // The writing thread notices the dropped upload and removes its temporary file.
    for _ in 0..100 {
        if blob_names(dir.path()) == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(blob_names(dir.path()), want);
    assert_eq!(s.files("ws", None, None).await?.total_count, 2);
    tarn.close().await?;
    Ok(())
}

#[tokio::test]
async fn deletes_and_cascades_remove_the_bytes() -> TestResult {
    for sync in [SyncMode::Full, SyncMode::Process] {
        let dir = tempfile::tempdir()?;
        let options = Options::new().sync(sync).background_maintenance(false);
        let tarn = Tarn::open_with(dir.path(), options).await?;
        let s = fixture(&tarn).await?;
        let mut ids = BTreeMap::new();
        for ws in ["ws", "other"] {
            for i in 0..3 {
                let f = s
                    .upload_file(ws, &format!("{i}.bin"), "", &bytes(1000, i)[..])
                    .await?;
                ids.insert(f.id, ws);
            }
        }
        assert_eq!(blob_names(dir.path()).len(), 6);
        let first = ids.keys().next().cloned().ok_or("no file")?;
        let first_ws = ids[&first];
        s.delete_file(first_ws, &first).await?;
        assert_eq!(s.file(first_ws, &first).await.unwrap_err().status(), 404);
        assert_eq!(
            s.delete_file(first_ws, &first).await.unwrap_err().status(),
            404
        );
        s.delete_workspace("other").await?;
        // A second organization's files are untouched by deleting the first.
        s.create_organization("acme", "Acme").await?;
        let acme = s.with_org("acme");
        acme.create_workspace("ws", "WS").await?;
        let kept = acme.upload_file("ws", "kept", "", &b"kept"[..]).await?;
        let left: BTreeSet<String> = ids
            .iter()
            .filter(|(id, ws)| **ws == "ws" && **id != first)
            .map(|(id, _)| id.clone())
            .collect();
        let mut want = left.clone();
        want.insert(kept.id.clone());
        if sync == SyncMode::Full {
            // The deletes were durable when they returned: the bytes are gone.
            assert_eq!(blob_names(dir.path()), want, "{sync:?}");
        }
        s.delete_organization("test").await?;
        if sync == SyncMode::Full {
            assert_eq!(
                blob_names(dir.path()),
                BTreeSet::from([kept.id.clone()]),
                "{sync:?}"
            );
        }
        tarn.close().await?;
        // With SyncMode::Process the deletes became durable at the checkpoint of the
        // commits (a delete makes one due) or at the latest when closing.
        assert_eq!(
            blob_names(dir.path()),
            BTreeSet::from([kept.id.clone()]),
            "{sync:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_failing_disk_fails_the_upload_and_keeps_nothing() -> TestResult {
    let dir = tempfile::tempdir()?;
    let disk = Arc::new(FaultyBackend::new());
    let tarn = Tarn::open_with(dir.path(), Options::new().file_backend(disk.clone())).await?;
    let s = fixture(&tarn).await?;
    let data = bytes(2 << 20, 5);
    for fault in [
        Fault::Op(FaultOp::Create),
        Fault::Op(FaultOp::Write),
        Fault::NoSpace,
        Fault::SyncIo,
        Fault::Op(FaultOp::Rename),
        Fault::Op(FaultOp::SyncDir),
    ] {
        disk.set(fault);
        let e = s
            .upload_file("ws", "f", "", &data[..])
            .await
            .map(drop)
            .unwrap_err();
        disk.clear();
        assert_eq!(e.status(), 500, "{fault:?}: {e}");
        assert!(blob_names(dir.path()).is_empty(), "{fault:?}");
        assert_eq!(s.files("ws", None, None).await?.total_count, 0);
    }
    let f = s.upload_file("ws", "f", "", &data[..]).await?;
    assert_eq!(content(&s, "ws", &f.id).await?, data);
    Ok(())
}

#[tokio::test]
async fn uploads_racing_a_workspace_delete_leave_no_orphans() -> TestResult {
    let dir = tempfile::tempdir()?;
    let tarn = Tarn::open(dir.path()).await?;
    let s = fixture(&tarn).await?;
    let mut tasks = Vec::new();
    for i in 0..16u64 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            s.upload_file("other", &format!("{i}"), "", &bytes(200_000, i)[..])
                .await
        }));
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
    s.delete_workspace("other").await?;
    for t in tasks {
        match t.await? {
            Ok(_) => {}
            Err(e) => assert_eq!(e.status(), 404, "{e}"),
        }
    }
    // Landed before the delete (then deleted with it) or refused: no bytes either way.
    assert!(
        blob_names(dir.path()).is_empty(),
        "{:?}",
        blob_names(dir.path())
    );
    // And many uploads at once all land.
    let mut tasks = Vec::new();
    for i in 0..16u64 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let data = bytes(100_000 + i as usize, i);
            let f = s.upload_file("ws", &format!("{i}"), "", &data[..]).await?;
            Ok::<_, tarn::Error>((f, data))
        }));
    }
    for t in tasks {
        let (f, data) = t.await??;
        assert_eq!(f.sha256, sha_hex(&data));
        assert_eq!(content(&s, "ws", &f.id).await?, data);
    }
    assert_eq!(blob_names(dir.path()).len(), 16);
    Ok(())
}

/// Every record's bytes are there and match its SHA-256, and no bytes lack a record.
async fn check_consistent(
    dir: &Path,
    s: &Session,
) -> Result<BTreeSet<String>, Box<dyn std::error::Error>> {
    let list = s.files("ws", Some(1000), None).await?;
    let mut ids = BTreeSet::new();
    for f in &list.data {
        let data = content(s, "ws", &f.id).await?;
        assert_eq!(sha_hex(&data), f.sha256, "file {}", f.filename);
        assert_eq!(data.len() as u64, f.size_bytes);
        ids.insert(f.id.clone());
    }
    assert_eq!(blob_names(dir), ids, "blobs on disk vs records");
    Ok(ids)
}

/// Not a test on its own: the child process of `kill_9_during_uploads_and_deletes`.
/// Uploads files (`n`, of `n`-dependent sizes) and deletes every third one, printing
/// `put N ID` / `del ID` once each call returned (and `deleting ID` before a delete).
#[tokio::test]
#[ignore = "child process of the kill -9 test"]
async fn files_crash_child() -> TestResult {
    let Ok(dir) = std::env::var("TARN_FILES_CRASH_DIR") else {
        return Ok(());
    };
    let start: u64 = std::env::var("TARN_FILES_CRASH_START")?.parse()?;
    let tarn = Tarn::open_with(&dir, Options::new().memtable_bytes(16 << 10)).await?;
    let s = reconnect(&tarn, &std::fs::read_to_string(format!("{dir}/key"))?).await?;
    use std::io::Write;
    let mut out = std::io::stdout();
    for n in start.. {
        let data = bytes(1000 + (n as usize % 7) * 300_000, n);
        let f = s.upload_file("ws", &format!("{n}"), "", &data[..]).await?;
        writeln!(out, "put {n} {}", f.id)?;
        out.flush()?;
        if n % 3 == 2 {
            // Said first: a kill from here on may or may not find the delete landed.
            writeln!(out, "deleting {}", f.id)?;
            out.flush()?;
            s.delete_file("ws", &f.id).await?;
            writeln!(out, "del {}", f.id)?;
            out.flush()?;
        }
    }
    Ok(())
}

#[tokio::test]
async fn kill_9_during_uploads_and_deletes() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().to_string_lossy().to_string();
    {
        let tarn = Tarn::open(&path).await?;
        let (_, secret) = fixture_with_key(&tarn).await?;
        std::fs::write(format!("{path}/key"), &secret)?;
        tarn.close().await?;
    }
    let secret = std::fs::read_to_string(format!("{path}/key"))?;
    let mut rng = Rng(0xF11E5);
    let mut put: BTreeSet<String> = BTreeSet::new();
    let mut deleted: BTreeSet<String> = BTreeSet::new();
    let mut deleting: BTreeSet<String> = BTreeSet::new();
    let mut next = 0u64;
    for _round in 0..8 {
        // Kill after a few acknowledgements plus a random wait.
        let lines = run_and_kill(
            &format!("{}::files_crash_child", module_path!()),
            &[
                ("TARN_FILES_CRASH_DIR", path.clone()),
                ("TARN_FILES_CRASH_START", next.to_string()),
            ],
            2,
            Duration::from_secs(60),
            Duration::from_millis(rng.next_u64() % 200),
        )?;
        for line in &lines {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["put", n, id] => {
                    put.insert((*id).to_string());
                    next = next.max(n.parse::<u64>()? + 1);
                }
                ["del", id] => {
                    deleted.insert((*id).to_string());
                }
                ["deleting", id] => {
                    deleting.insert((*id).to_string());
                }
                _ => {}
            }
        }
        next += 1; // the statement under way may or may not have landed
        let tarn = Tarn::open(&path).await?;
        let s = reconnect(&tarn, &secret).await?;
        let ids = check_consistent(dir.path(), &s).await?;
        for id in &put {
            if deleting.contains(id) && !deleted.contains(id) {
                continue; // killed during its delete: either outcome is right
            }
            assert_eq!(
                ids.contains(id),
                !deleted.contains(id),
                "acknowledged file {id} (deleted: {})",
                deleted.contains(id)
            );
        }
        tarn.close().await?;
    }
    assert!(
        put.len() >= 8,
        "the child made too little progress: {}",
        put.len()
    );
    Ok(())
}

#[tokio::test]
async fn power_cuts_during_uploads_and_deletes() -> TestResult {
    let mut rng = Rng(0xC0FFEE);
    let base = tempfile::tempdir()?;
    let mut dir = base.path().join("db0");
    let secret = {
        let tarn = Tarn::open(&dir).await?;
        let (_, secret) = fixture_with_key(&tarn).await?;
        tarn.close().await?;
        secret
    };
    let mut acked: BTreeSet<String> = BTreeSet::new();
    let mut deleted: BTreeSet<String> = BTreeSet::new();
    for round in 0..12u64 {
        let disk = PowerCutDisk::new(&dir, rng.next_u64());
        let sync = if round % 4 == 3 {
            SyncMode::Process
        } else {
            SyncMode::Full
        };
        let options = Options::new()
            .sync(sync)
            .memtable_bytes(8 << 10)
            .file_backend(Arc::new(disk.clone()));
        let tarn = Tarn::open_with(&dir, options).await?;
        let s = reconnect(&tarn, &secret).await?;
        // (uploads acknowledged, deletes acknowledged, deletes that failed: the power
        // went during them, so they may or may not have landed).
        let done = Arc::new(parking_lot::Mutex::new((
            Vec::<String>::new(),
            Vec::<String>::new(),
            Vec::<String>::new(),
        )));
        let mut tasks = Vec::new();
        for w in 0..3u64 {
            let (s, done) = (s.clone(), done.clone());
            let seed = rng.next_u64() ^ w;
            tasks.push(tokio::spawn(async move {
                let mut rng = Rng(seed | 1);
                for i in 0.. {
                    let data = bytes(500 + (rng.next_u64() % 400_000) as usize, seed ^ i);
                    let Ok(f) = s
                        .upload_file("ws", &format!("{w}-{i}"), "", &data[..])
                        .await
                    else {
                        return;
                    };
                    done.lock().0.push(f.id.clone());
                    if rng.next_u64().is_multiple_of(3) {
                        if s.delete_file("ws", &f.id).await.is_err() {
                            done.lock().2.push(f.id);
                            return;
                        }
                        done.lock().1.push(f.id);
                    }
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(30 + rng.next_u64() % 150)).await;
        disk.cut_power();
        for t in tasks {
            let _ = t.await;
        }
        let image = base.path().join(format!("db{}", round + 1));
        disk.write_image(&image)?;
        drop(s);
        drop(tarn);
        dir = image;
        let tarn = Tarn::open(&dir).await?;
        let s = reconnect(&tarn, &secret).await?;
        let ids = check_consistent(&dir, &s).await?;
        if sync == SyncMode::Full {
            let (ups, dels, unsure) = &*done.lock();
            acked.extend(ups.iter().cloned());
            deleted.extend(dels.iter().cloned());
            // What the power cut decided for deletes under way is the truth from here.
            deleted.extend(unsure.iter().filter(|id| !ids.contains(*id)).cloned());
            for id in &acked {
                assert_eq!(
                    ids.contains(id),
                    !deleted.contains(id),
                    "round {round}: file {id}"
                );
            }
        } else {
            // Process mode promises nothing about acknowledged work after a power cut:
            // what survived is the truth from here on.
            acked = ids.clone();
            deleted.clear();
        }
        tarn.close().await?;
    }
    Ok(())
}

#[tokio::test]
async fn damaged_bytes_are_an_error_naming_the_file_never_data() -> TestResult {
    let dir = tempfile::tempdir()?;
    let data = bytes((3 << 20) + 500, 9);
    let (f, secret) = {
        let tarn = Tarn::open(dir.path()).await?;
        let (s, secret) = fixture_with_key(&tarn).await?;
        let f = s.upload_file("ws", "d.bin", "", &data[..]).await?;
        tarn.close().await?;
        (f, secret)
    };
    let blob = dir.path().join("files").join(&f.id);
    let stored = std::fs::read(&blob)?;
    // One flipped bit in the third 1 MiB block.
    let mut damaged = stored.clone();
    damaged[(2 << 20) + 77] ^= 0x10;
    std::fs::write(&blob, &damaged)?;
    let tarn = Tarn::open(dir.path()).await?;
    let s = reconnect(&tarn, &secret).await?;
    let mut c = s.file_content("ws", &f.id).await?;
    let mut got = Vec::new();
    let e = c.reader.read_to_end(&mut got).await.unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{e}");
    assert!(e.to_string().contains(&f.id), "{e}");
    // Everything before the damaged block, and nothing of it.
    assert_eq!(got, data[..2 << 20]);
    // The undamaged blocks still read (a range after the damage).
    let mut c = s.file_content("ws", &f.id).await?;
    c.reader.seek(SeekFrom::Start(3 << 20)).await?;
    let mut tail = Vec::new();
    c.reader.read_to_end(&mut tail).await?;
    assert_eq!(tail, data[3 << 20..]);
    tarn.close().await?;
    drop(tarn);
    // Cut short, or grown: the record's file is corrupt (500 naming it) at once.
    for bad in [
        &stored[..stored.len() - 1],
        &stored[..1000],
        &[stored.clone(), vec![0]].concat()[..],
    ] {
        std::fs::write(&blob, bad)?;
        let tarn = Tarn::open(dir.path()).await?;
        let s = reconnect(&tarn, &secret).await?;
        let e = s.file_content("ws", &f.id).await.map(drop).unwrap_err();
        assert_eq!(e.status(), 500, "{e}");
        assert!(e.message().contains(&f.id), "{e}");
        tarn.close().await?;
    }
    Ok(())
}

// Found by review: races with the blocking pool, and uploads given up on.

/// A runtime of `workers` threads whose blocking pool has at most `blocking` threads.
fn runtime(workers: usize, blocking: usize) -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .max_blocking_threads(blocking)
        .enable_all()
        .build()
}

/// `file_content` finds the record in a catalog snapshot, then opens the blob on a
/// blocking thread. A `delete_file` that commits in between (SyncMode::Full removes the
/// bytes at once) is an ordinary race, a 404 — not a 500 "bytes missing". The
/// interleaving is forced by running `file_content` on a runtime whose only blocking
/// thread is busy until the delete has returned.
#[test]
fn file_content_racing_a_delete_is_404_not_500() -> TestResult {
    let main = runtime(2, 512)?;
    let other = runtime(1, 1)?;
    let dir = tempfile::tempdir()?;
    let (tarn, s, id) = main.block_on(async {
        let tarn = Tarn::open(dir.path()).await?;
        let s = fixture(&tarn).await?;
        let f = s
            .upload_file("ws", "a.txt", "text/plain", &b"hello"[..])
            .await?;
        Ok::<_, Box<dyn std::error::Error>>((tarn, s, f.id))
    })?;
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let (busy_tx, busy_rx) = std::sync::mpsc::channel::<()>();
    let _blocker = other.spawn_blocking(move || {
        let _ = busy_tx.send(());
        let _ = release_rx.recv();
    });
    busy_rx.recv()?;
    let reader = {
        let (s, id) = (s.clone(), id.clone());
        other.spawn(async move { s.file_content("ws", &id).await.map(|c| c.size_bytes) })
    };
    // file_content has found the record and waits for a blocking thread to open it.
    std::thread::sleep(Duration::from_millis(300));
    main.block_on(s.delete_file("ws", &id))?;
    release_tx.send(())?;
    let res = main.block_on(reader)?;
    let err = res.expect_err("the file was deleted before its bytes were opened");
    main.block_on(tarn.close())?;
    assert_eq!(err.status(), 404, "{err}");
    Ok(())
}

/// An upload must not hold a blocking-pool thread while it waits for its reader: a
/// reader that itself needs the pool (Tarn's own `FileReader`, any `tokio::fs::File`)
/// would then never get one, and copying a file from one workspace to another would
/// deadlock. A pool of one thread makes any such hold certain to hang.
#[test]
fn copying_a_file_between_workspaces_does_not_deadlock() -> TestResult {
    let rt = runtime(2, 1)?;
    rt.block_on(async {
        let dir = tempfile::tempdir()?;
        let tarn = Tarn::open(dir.path()).await?;
        let s = fixture(&tarn).await?;
        let data = vec![7u8; 3 << 20];
        let f = s.upload_file("ws", "src.bin", "", &data[..]).await?;
        let src = s.file_content("ws", &f.id).await?;
        let copy = tokio::time::timeout(
            Duration::from_secs(20),
            s.upload_file("other", "src.bin", "", src.reader),
        )
        .await;
        let copied = copy.map_err(|_| {
            "upload_file fed by file_content's reader hung: the writer holds the only \
             blocking thread that the reader's reads need"
        })??;
        assert_eq!(copied.sha256, f.sha256);
        tarn.close().await?;
        Ok(())
    })
}

/// Stalled upload clients must not pin blocking threads: every commit runs on the same
/// pool, so enough stalled uploads would stop every statement, DDL and delete. Here
/// the pool has 4 threads and 4 uploads stall.
#[test]
fn stalled_uploads_do_not_starve_commits() -> TestResult {
    let rt = runtime(2, 4)?;
    rt.block_on(async {
        let dir = tempfile::tempdir()?;
        let tarn = Tarn::open(dir.path()).await?;
        let s = fixture(&tarn).await?;
        let mut stalled = Vec::new();
        for i in 0..4 {
            let s = s.clone();
            stalled.push(tokio::spawn(async move {
                let stalled = Broken {
                    data: vec![1; 10_000],
                    at: 0,
                    hang: true,
                };
                s.upload_file("ws", &format!("slow{i}"), "", stalled).await
            }));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let t0 = Instant::now();
        let res = tokio::time::timeout(
            Duration::from_secs(10),
            s.create_workspace("later", "Later"),
        )
        .await;
        for t in &stalled {
            t.abort();
        }
        for t in stalled {
            let _ = t.await;
        }
        let done = res.map_err(|_| {
            format!(
                "create_workspace did not commit within {:?} while 4 uploads stalled",
                t0.elapsed()
            )
        })?;
        done?;
        tarn.close().await?;
        Ok(())
    })
}

/// `upload_file`'s doc: dropping the returned future keeps nothing (unless the record
/// was already being committed). A caller that gives up (a timeout) while the
/// blob is being finished (fsync, rename — the slowest part of a small upload) leaves
/// a finished blob that no record names: on disk until the next open, and with
/// `Tarn::in_memory` in memory for the life of the process (it never sweeps).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_given_up_on_keep_nothing() -> TestResult {
    let dir = tempfile::tempdir()?;
    let tarn = Tarn::open(dir.path()).await?;
    let s = fixture(&tarn).await?;
    let data = vec![5u8; 200_000];
    let t0 = Instant::now();
    let f = s.upload_file("ws", "kept", "", &data[..]).await?;
    let typical = t0.elapsed();
    let mut rng = tarn_tests::Rng(0xD50B);
    for i in 0..200u32 {
        let wait = typical.mul_f64((rng.below(2000) as f64) / 1000.0);
        let _ =
            tokio::time::timeout(wait, s.upload_file("ws", &format!("{i}"), "", &data[..])).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let records: std::collections::BTreeSet<String> = s
        .files("ws", Some(1000), None)
        .await?
        .data
        .into_iter()
        .map(|f| f.id)
        .collect();
    let orphans: Vec<String> = std::fs::read_dir(dir.path().join("files"))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !records.contains(n))
        .collect();
    assert!(records.contains(&f.id));
    tarn.close().await?;
    assert!(
        orphans.is_empty(),
        "{} uploads given up on left blobs that no record names (typical upload {typical:?}): {orphans:?}",
        orphans.len()
    );
    Ok(())
}

/// A file upload is bound to the workspace it started in (issue 34): deleted while the
/// bytes stream (and perhaps created again under the same id, or in a new organization
/// of the same id), the upload is a 404, keeps no bytes and adds no record.
#[tokio::test]
async fn a_file_upload_lands_in_the_workspace_it_started_in_or_nowhere() -> TestResult {
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir()?;
    let tarn = Tarn::open(dir.path()).await?;
    let s = fixture(&tarn).await?;
    let data = bytes(3 << 20, 7);
    for case in tarn_tests::WORKSPACE_REPLACEMENTS {
        s.create_workspace("cw", "Doomed").await?;
        // The write returning means the upload has begun reading (the pipe holds less).
        let (mut client, reader) = tokio::io::duplex(16 << 10);
        let upload = {
            let s = s.clone();
            tokio::spawn(async move { s.upload_file("cw", "f.bin", "", reader).await })
        };
        client.write_all(&data[..200_000]).await?;
        tarn_tests::replace_workspace(&s, case).await?;
        client.write_all(&data[200_000..]).await?;
        drop(client);
        let err = upload.await?.expect_err(case);
        assert_eq!(err.status(), 404, "{case}: {err}");
        if case != "deleted" {
            assert_eq!(s.files("cw", None, None).await?.total_count, 0, "{case}");
        }
        if s.workspace("cw").await.is_ok() {
            s.delete_workspace("cw").await?;
        }
        assert!(
            blob_names(dir.path()).is_empty(),
            "{case}: {:?}",
            blob_names(dir.path())
        );
    }
    s.create_workspace("cw", "Kept").await?;
    let f = s.upload_file("cw", "f.bin", "", &data[..]).await?;
    assert_eq!(content(&s, "cw", &f.id).await?, data);
    tarn.close().await?;
    Ok(())
}

/// A table upload bound before its file arrives (`Session::bind_workspace`, the REST
/// host's form with the file part before `table_name`) lands in the bound workspace or
/// nowhere: deleted (and perhaps replaced) after binding, the upload is a 404 and makes
/// no table; while it stands, the upload makes the table.
#[tokio::test]
async fn a_bound_table_upload_lands_in_the_bound_workspace_or_nowhere() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let s = fixture(&tarn).await?;
    let csv = &b"a,b\n1,x\n"[..];
    for case in tarn_tests::WORKSPACE_REPLACEMENTS {
        s.create_workspace("cw", "Doomed").await?;
        let bound = s.bind_workspace("cw").await?;
        assert_eq!(bound.id(), "cw");
        tarn_tests::replace_workspace(&s, case).await?;
        let err = bound.upload_table("t", "t.csv", csv).await.expect_err(case);
        assert_eq!(err.status(), 404, "{case}: {err}");
        if s.workspace("cw").await.is_ok() {
            assert!(s.tables("cw").await?.is_empty(), "{case}");
            s.delete_workspace("cw").await?;
        }
    }
    s.create_workspace("cw", "Kept").await?;
    let bound = s.bind_workspace("cw").await?;
    let t = bound.upload_table("t", "t.csv", csv).await?;
    assert_eq!(t.row_count, 1);
    assert_eq!(s.table("cw", "t").await?.table_name, "t");
    assert_eq!(
        s.bind_workspace("nope")
            .await
            .expect_err("no workspace")
            .status(),
        404
    );
    Ok(())
}

/// Media types are `type/subtype` with well-formed `name=value` parameters (RFC 9110
/// §8.3.1), whoever passes them (the CLI's `--media-type`, the REST host's part
/// `Content-Type`): anything else is a 400 and stores nothing.
#[tokio::test]
async fn media_types_are_checked_with_their_parameters() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let s = fixture(&tarn).await?;
    for bad in [
        "notamediatype",
        "a/b/c",
        "/plain",
        "text/",
        "text /plain",
        "text/plain; charset",
        "text/plain; =utf-8",
        "text/plain; charset=",
        "text/plain; charset=utf 8",
        "text/plain; charset=\"utf-8",
        "text/plain; charset=\"a\"b\"",
        "text/plain; a=b=c",
        "text/plain, text/html",
        "tëxt/plain",
    ] {
        let e = s
            .upload_file("ws", "x", bad, &b"x"[..])
            .await
            .expect_err(bad);
        assert_eq!(e.status(), 400, "{bad}: {e}");
    }
    // A long one says so, and quotes only its start.
    let long = format!("text/plain; x={}", "a".repeat(1000));
    let e = s
        .upload_file("ws", "x", &long, &b"x"[..])
        .await
        .expect_err("1 KiB media type");
    assert_eq!(e.status(), 400, "{e}");
    assert!(
        e.message().contains("media type too long: 1014 bytes"),
        "{e}"
    );
    assert!(e.message().len() < 200, "{e}");
    assert_eq!(s.files("ws", None, None).await?.total_count, 0);
    for good in [
        "text/plain",
        "application/vnd.api+json",
        "text/plain; charset=utf-8",
        "text/plain ; charset=utf-8 ;",
        "text/plain;charset=\"utf-8\";format=flowed",
        "multipart/mixed; boundary=\"a b;c\\\"d\"",
    ] {
        let f = s.upload_file("ws", "x", good, &b"x"[..]).await?;
        assert_eq!(f.media_type, good);
    }
    Ok(())
}
