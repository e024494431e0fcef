//! Power loss (docs/style.md "Tests"): the machine stops, and of what was written since
//! the last fsync only some pages survive. Each round opens the database on a
//! [`PowerCutDisk`], runs writers (inserts, updates, deletes) while VACUUM and the
//! background worker checkpoint and compact with a tiny memtable, cuts the power at a
//! random moment, and boots the surviving image: it must open, hold every acknowledged
//! statement, and show every other statement wholly or not at all. The next round
//! continues from that image.
//!
//! Every third round the disk fails for a while before the power goes (failed commit
//! groups and rolled logs, checkpoints failing halfway), and every other round's
//! recovery is left without a closing checkpoint, so the next round begins by replaying
//! what that recovery left.
//!
//! `power_cut_rounds` runs 20 rounds (16 with `SyncMode::Full`, 4 with `Process`, which
//! promises to survive a process crash only: there, only "opens and nothing torn" is
//! checked); `power_cut_many_rounds` (ignored: `cargo test --test integration -- --ignored power_cut_many_rounds`)
//! runs 500.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::json;
use tarn::storage::{Fault, FaultOp, PowerCutDisk};
use tarn::{Options, Session, SyncMode, Tarn};
use tarn_tests::{Rng, fixture_with_key, reconnect};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// What one round did. Statement `n` inserts rows `(n, 0..10)` with `ver = 0`; updates
/// add 1 to `ver` of all ten rows of a statement; deletes remove them.
#[derive(Default)]
struct Round {
    inserts_done: BTreeSet<u64>,
    inserts_tried: BTreeSet<u64>,
    deletes_done: BTreeSet<u64>,
    deletes_tried: BTreeSet<u64>,
    /// (acknowledged, attempted) updates per statement.
    updates: BTreeMap<u64, (u64, u64)>,
    /// Statements the writers may target.
    live: Vec<u64>,
}

const ROWS: u64 = 10;

/// Set while a round's disk fails before the power cut.
static FAULT_WINDOW: AtomicBool = AtomicBool::new(false);
/// Statements that failed in those windows, over all rounds: the faults must be felt.
static FAILED_ON_FAULTY_DISK: AtomicU64 = AtomicU64::new(0);

/// A statement may fail only while the disk fails or after the power is cut (`cut`
/// covers both); its outcome is then unknown, so it counts as tried, not done.
fn failed(cut: &AtomicBool, e: &tarn::Error) {
    assert!(
        cut.load(Ordering::SeqCst),
        "a statement failed on a healthy disk: {e}"
    );
    assert_eq!(e.status(), 500, "{e}");
    if FAULT_WINDOW.load(Ordering::SeqCst) {
        FAILED_ON_FAULTY_DISK.fetch_add(1, Ordering::Relaxed);
    }
}

async fn write(
    s: Session,
    seed: u64,
    next: Arc<AtomicU64>,
    round: Arc<Mutex<Round>>,
    cut: Arc<AtomicBool>,
    dead: Arc<AtomicBool>,
) {
    let mut rng = Rng(seed | 1);
    while !dead.load(Ordering::SeqCst) {
        let pick = {
            let r = round.lock();
            (!r.live.is_empty()).then(|| r.live[(rng.next_u64() % r.live.len() as u64) as usize])
        };
        match (rng.next_u64() % 5, pick) {
            (0, Some(m)) => {
                round.lock().deletes_tried.insert(m);
                let res = s
                    .query("ws", r#"DELETE FROM "ws"."k" WHERE stmt = $1"#, &[json!(m)])
                    .await;
                if let Err(e) = res {
                    failed(&cut, &e);
                    continue;
                }
                let mut r = round.lock();
                r.deletes_done.insert(m);
                r.live.retain(|x| *x != m);
            }
            (1, Some(m)) => {
                round.lock().updates.entry(m).or_default().1 += 1;
                let res = s
                    .query(
                        "ws",
                        r#"UPDATE "ws"."k" SET ver = ver + 1 WHERE stmt = $1"#,
                        &[json!(m)],
                    )
                    .await;
                if let Err(e) = res {
                    failed(&cut, &e);
                    continue;
                }
                round.lock().updates.entry(m).or_default().0 += 1;
            }
            _ => {
                let n = next.fetch_add(1, Ordering::Relaxed);
                round.lock().inserts_tried.insert(n);
                let values: Vec<String> = (0..ROWS)
                    .map(|i| {
                        format!(
                            "({n}, {i}, 0, 'row {i} of statement {n}, padded to make it wider')"
                        )
                    })
                    .collect();
                let sql = format!(r#"INSERT INTO "ws"."k" VALUES {}"#, values.join(", "));
                if let Err(e) = s.query("ws", &sql, &[]).await {
                    failed(&cut, &e);
                    continue;
                }
                let mut r = round.lock();
                r.inserts_done.insert(n);
                r.live.push(n);
            }
        }
    }
}

/// One round on `dir`; returns the surviving image.
async fn round(
    dir: &Path,
    secret: &str,
    known: &mut BTreeMap<u64, u64>,
    next: &Arc<AtomicU64>,
    rng: &mut Rng,
    sync: SyncMode,
    n: u64,
) -> Result<tempfile::TempDir, Box<dyn std::error::Error>> {
    let disk = PowerCutDisk::new(dir, rng.next_u64());
    let options = Options::new()
        .sync(sync)
        .memtable_bytes(8 << 10)
        .file_backend(Arc::new(disk.clone()));
    let tarn = Tarn::open_with(dir, options).await?;
    let s = reconnect(&tarn, secret).await?;
    let state = Arc::new(Mutex::new(Round {
        live: known.keys().copied().collect(),
        ..Round::default()
    }));
    // `cut`: failures allowed (a failing disk, then the power cut); `dead`: stop.
    let cut = Arc::new(AtomicBool::new(false));
    let dead = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for w in 0..3 {
        tasks.push(tokio::spawn(write(
            s.clone(),
            rng.next_u64() ^ w,
            next.clone(),
            state.clone(),
            cut.clone(),
            dead.clone(),
        )));
    }
    let vacuum = {
        let (s, cut, dead) = (s.clone(), cut.clone(), dead.clone());
        tokio::spawn(async move {
            while !dead.load(Ordering::SeqCst) {
                if let Err(e) = s.query("ws", r#"VACUUM "ws"."k""#, &[]).await {
                    failed(&cut, &e);
                }
                tokio::time::sleep(Duration::from_millis(15)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(20 + rng.next_u64() % 150)).await;
    // Every third round the disk fails for a while first: commit groups fail and the
    // log rolls, checkpoints fail halfway, and the power cut then meets that state.
    if n % 3 == 1 {
        const FAULTS: [Fault; 5] = [
            Fault::SyncIo,
            Fault::NoSpace,
            Fault::Op(FaultOp::Rename),
            Fault::Op(FaultOp::Create),
            Fault::Op(FaultOp::SyncDir),
        ];
        cut.store(true, Ordering::SeqCst);
        FAULT_WINDOW.store(true, Ordering::SeqCst);
        disk.set_fault(Some(FAULTS[(rng.next_u64() % 5) as usize]));
        tokio::time::sleep(Duration::from_millis(10 + rng.next_u64() % 50)).await;
        disk.set_fault(None);
        FAULT_WINDOW.store(false, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(rng.next_u64() % 100)).await;
    }
    cut.store(true, Ordering::SeqCst);
    disk.cut_power();
    dead.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await?;
    }
    vacuum.await?;
    drop(s);
    drop(tarn);
    let image = tempfile::tempdir()?;
    disk.write_image(image.path())?;

    // Boot the machine.
    let tarn = Tarn::open(image.path())
        .await
        .map_err(|e| format!("round {n}: the surviving image does not open: {e}"))?;
    let s = reconnect(&tarn, secret).await?;
    let rows = s
        .query(
            "ws",
            r#"SELECT stmt, count(*), min(ver), max(ver) FROM "ws"."k" GROUP BY stmt"#,
            &[],
        )
        .await?
        .rows
        .unwrap_or_default();
    let mut found = BTreeMap::new();
    for r in &rows {
        let (stmt, count) = (r[0].as_u64().unwrap_or(0), r[1].as_u64().unwrap_or(0));
        let (lo, hi) = (r[2].as_u64().unwrap_or(0), r[3].as_u64().unwrap_or(0));
        assert_eq!(
            count, ROWS,
            "round {n}: statement {stmt} is torn ({count} rows)"
        );
        assert_eq!(lo, hi, "round {n}: an update of statement {stmt} is torn");
        found.insert(stmt, lo);
    }
    let r = std::mem::take(&mut *state.lock());
    for (stmt, ver) in &found {
        assert!(
            known.contains_key(stmt) || r.inserts_tried.contains(stmt),
            "round {n}: statement {stmt} was never written"
        );
        if sync == SyncMode::Process {
            continue;
        }
        assert!(
            !r.deletes_done.contains(stmt),
            "round {n}: acknowledged delete of {stmt} undone"
        );
        let base = known.get(stmt).copied().unwrap_or(0);
        let (done, tried) = r.updates.get(stmt).copied().unwrap_or_default();
        assert!(
            base + done <= *ver && *ver <= base + tried,
            "round {n}: statement {stmt} has version {ver}, expected {}..={}",
            base + done,
            base + tried
        );
    }
    if sync == SyncMode::Full {
        for stmt in known.keys().chain(r.inserts_done.iter()) {
            assert!(
                found.contains_key(stmt) || r.deletes_tried.contains(stmt),
                "round {n}: acknowledged statement {stmt} lost"
            );
        }
    }
    // The key index agrees with the scan.
    if let Some(stmt) = found.keys().next_back() {
        let r = s
            .query(
                "ws",
                r#"SELECT ver FROM "ws"."k" WHERE stmt = $1 AND i = 7"#,
                &[json!(stmt)],
            )
            .await?;
        assert_eq!(r.rows, Some(vec![vec![json!(found[stmt])]]), "round {n}");
    }
    *known = found;
    if n.is_multiple_of(2) {
        tarn.close().await?;
    } else {
        // Left without a closing checkpoint: the next round starts by replaying the
        // log this recovery left (a cut tail, a new file).
        drop(s);
        drop(tarn);
    }
    Ok(image)
}

async fn run_rounds(rounds: u64) -> TestResult {
    let first = tempfile::tempdir()?;
    let secret = {
        let tarn = Tarn::open(first.path()).await?;
        let (s, secret) = fixture_with_key(&tarn).await?;
        s.query(
            "ws",
            r#"CREATE TABLE "ws"."k" (stmt INT8, i INT, ver INT8, v TEXT, PRIMARY KEY (stmt, i)) USING engine"#,
            &[],
        )
        .await?;
        tarn.close().await?;
        secret
    };
    let mut rng = Rng(0xDEAD_BEEF_CAFE_F00D);
    let mut known = BTreeMap::new();
    let next = Arc::new(AtomicU64::new(0));
    let mut dir: PathBuf = first.path().to_path_buf();
    let mut keep = Vec::new();
    for n in 0..rounds {
        let sync = if n % 5 == 4 {
            SyncMode::Process
        } else {
            SyncMode::Full
        };
        let image = round(&dir, &secret, &mut known, &next, &mut rng, sync, n).await?;
        dir = image.path().to_path_buf();
        keep.push(image);
        // Only the current image is needed.
        if keep.len() > 1 {
            keep.remove(0);
        }
    }
    assert!(
        FAILED_ON_FAULTY_DISK.load(Ordering::Relaxed) > 0,
        "no statement failed on the failing disks: the faults were not exercised"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_cut_rounds() -> TestResult {
    run_rounds(20).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: 500 rounds"]
async fn power_cut_many_rounds() -> TestResult {
    run_rounds(500).await
}
