//! The logic of Tarn's fuzz targets, shared by the libFuzzer targets in `fuzz/` (nightly,
//! `cargo fuzz run TARGET`) and by this crate's tests, which replay every committed
//! corpus input on stable as ordinary `cargo test` tests.
//!
//! | target | input | checks |
//! |---|---|---|
//! | [`sql_exec`] | SQL text and JSON parameters | no panic; errors only 400/404/409; the database reopens with the same rows, and compacts |
//! | [`differential`] | a structured program (`arbitrary`) of CREATE/INSERT/UPDATE/DELETE/SELECT | Tarn and SQLite agree statement by statement, row for row |
//! | [`decoders`] | damaged WAL, manifest, segment and index files (checksums recomputed), record bodies, key sections, CSV/JSON uploads | an error or data, never a panic |
//! | [`vector_topk`] | random vectors, deletes, filters, index or not | top-k agrees with brute force |
//!
//! Every function here panics when it finds a bug (that is how libFuzzer and the replay
//! tests notice) and returns normally otherwise.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Once, OnceLock};

pub mod decoders;
pub mod differential;
pub mod sql_exec;
pub mod vector_topk;

/// Set by the panic hook when anything panics outside the third-party decoders that
/// Tarn runs under `catch_unwind`: a panic inside a task that Tarn turned into an
/// error is still a bug.
static PANICKED: AtomicBool = AtomicBool::new(false);

/// Runs one input of a target: installs the panic hook (once), and fails when a panic
/// happened somewhere during the input even if it was caught and became an error.
pub(crate) fn watched(run: impl FnOnce()) {
    // One input at a time per process: the panic flag, the scratch directories and the
    // targets' databases (workspace `ws`) are shared (the replay tests run on several
    // threads).
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            // Arrow's IPC reader may panic on hostile stored bytes; Tarn catches that
            // and reports the file as corrupt, which is the expected outcome.
            if tarn_storage::fuzzing::in_untrusted_decoder() {
                return;
            }
            PANICKED.store(true, Ordering::SeqCst);
            previous(info);
        }));
    });
    PANICKED.store(false, Ordering::SeqCst);
    run();
    assert!(
        !PANICKED.swap(false, Ordering::SeqCst),
        "a panic inside Tarn was caught and turned into an error (see the panic above)"
    );
}

/// A user, an API key, organization `org` and a session scoped to it, in `tarn`:
/// (the key's secret, the session).
pub(crate) async fn signed_in(tarn: &tarn::Tarn, org: &str) -> (String, tarn::Session) {
    let user = tarn
        .create_user(&format!("{org}@example.com"), org)
        .await
        .expect("a user");
    let key = tarn.create_api_key(&user.id, org).await.expect("a key");
    let s = tarn.connect(&key.secret).await.expect("connect");
    s.create_organization(org, org)
        .await
        .expect("an organization");
    (key.secret, s.with_org(org))
}

/// A result's rows as JSON text, sorted (rows compared as a multiset).
pub(crate) fn sorted_rows(rows: Option<Vec<Vec<serde_json::Value>>>) -> Vec<String> {
    let mut out: Vec<String> = rows
        .unwrap_or_default()
        .into_iter()
        .map(|row| serde_json::Value::Array(row).to_string())
        .collect();
    out.sort();
    out
}

/// The runtime every target runs its async calls on (one per process).
pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

/// A directory for this process's databases: in `/dev/shm` when there is one (inputs
/// open and close databases thousands of times), else the temporary directory.
pub(crate) fn scratch_root() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        // Statics are never dropped, so a process's directory outlives it: remove
        // those of processes that are gone.
        if let Ok(entries) = std::fs::read_dir(&base) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(pid) = name
                    .strip_prefix("tarn-fuzz-")
                    .and_then(|r| r.split('-').next())
                    && pid.parse::<u32>().is_ok()
                    && !Path::new("/proc").join(pid).exists()
                {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        tempfile::Builder::new()
            .prefix(&format!("tarn-fuzz-{}-", std::process::id()))
            .tempdir_in(&base)
            .or_else(|_| tempfile::tempdir())
            .expect("a scratch directory")
    })
    .path()
}

/// A fresh, empty directory under [`scratch_root`] named `name` (removed first if a
/// previous input left it).
pub(crate) fn fresh_dir(name: &str) -> PathBuf {
    let dir = scratch_root().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// Copies directory `from` into `to` (recursively).
pub(crate) fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create a directory");
    for entry in std::fs::read_dir(from).expect("read a directory") {
        let entry = entry.expect("a directory entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("a file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy a file");
        }
    }
}

/// The corpus inputs of `target` committed under `fuzz/corpus/TARGET/`, sorted by name.
pub fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return out;
    };
    for entry in entries.flatten() {
        if entry.path().is_file() {
            let bytes = std::fs::read(entry.path()).expect("read a corpus file");
            out.push((entry.file_name().to_string_lossy().into_owned(), bytes));
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod replay {
    //! Every committed corpus input, replayed on stable: a crash the fuzzers found
    //! stays fixed.

    /// The message of a panic's payload.
    fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
        tarn_storage::panic_message(payload)
            .unwrap_or_default()
            .to_string()
    }

    /// Runs one input on a thread of its own, so that a hang (a statement that never
    /// yields to the runtime's timer) fails the test after two minutes instead of
    /// stalling `cargo test`.
    fn with_watchdog(name: &str, bytes: Vec<u8>, run: fn(&[u8])) -> std::thread::Result<()> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(std::panic::catch_unwind(|| run(&bytes)));
        });
        match rx.recv_timeout(std::time::Duration::from_secs(120)) {
            Ok(result) => result,
            Err(_) => panic!("input {name} still running after 120 s: a hang"),
        }
    }

    fn replay(target: &str, run: fn(&[u8])) {
        let inputs = super::corpus(target);
        assert!(
            !inputs.is_empty(),
            "no corpus for {target} under fuzz/corpus/{target}"
        );
        for (name, bytes) in &inputs {
            if let Err(e) = with_watchdog(name, bytes.clone(), run) {
                let msg = panic_message(e.as_ref());
                panic!("fuzz/corpus/{target}/{name} fails: {msg}");
            }
        }
    }

    #[test]
    fn sql_exec_corpus() {
        replay("sql_exec", super::sql_exec::run);
    }

    #[test]
    fn sql_differential_corpus() {
        replay("sql_differential", super::differential::run_bytes);
    }

    #[test]
    fn decoders_corpus() {
        replay("decoders", super::decoders::run_bytes);
    }

    #[test]
    fn vector_topk_corpus() {
        replay("vector_topk", super::vector_topk::run_bytes);
    }

    /// Seeded random inputs for each structured target, so stable builds without
    /// cargo-fuzz still explore beyond the corpus: `TARN_FUZZ_SOAK=N` inputs per target
    /// (default 100), from seed `TARN_FUZZ_SEED` (default 1), for the targets in
    /// `TARN_FUZZ_TARGETS` (comma-separated; default all).
    #[test]
    fn random_inputs() {
        let n: u64 = std::env::var("TARN_FUZZ_SOAK")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(100);
        let seed: u64 = std::env::var("TARN_FUZZ_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1);
        type Target = (&'static str, fn(&[u8]));
        let targets: [Target; 3] = [
            ("sql_differential", super::differential::run_bytes),
            ("vector_topk", super::vector_topk::run_bytes),
            ("decoders", super::decoders::run_bytes),
        ];
        let only = std::env::var("TARN_FUZZ_TARGETS").unwrap_or_default();
        for (name, run) in targets {
            if !only.is_empty() && !only.split(',').any(|t| t == name) {
                continue;
            }
            for i in 0..n {
                let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i;
                let mut next = || {
                    state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
                    let mut z = state;
                    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                    z ^ (z >> 31)
                };
                let len = 32 + (next() % 2048) as usize;
                let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                if let Err(e) = with_watchdog("random", bytes.clone(), run) {
                    let msg = panic_message(e.as_ref());
                    let path = std::env::temp_dir().join(format!("tarn-fuzz-{name}-{seed}-{i}"));
                    let _ = std::fs::write(&path, &bytes);
                    panic!(
                        "{name}: random input {i} of seed {seed} (saved to {}) fails: {msg}",
                        path.display()
                    );
                }
            }
        }
    }
}
