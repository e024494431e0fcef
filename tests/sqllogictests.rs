//! Runs every `.slt` file under `tests/slt` against a fresh in-memory Tarn, through the
//! public API (`Session::query` in workspace `ws`). Errors are matched against
//! `<status> <Kind>: <message>`, so files pin the status as well as the message.

use std::path::PathBuf;

use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType, Runner};
use tarn::{Options, Session, SyncMode, Tarn};
use tarn_tests::{fixture, slt_text};

#[derive(Debug)]
struct SltError(tarn::Error);

impl std::fmt::Display for SltError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {:?}: {}", self.0.status(), self.0.kind(), self.0)
    }
}

impl std::error::Error for SltError {}

struct TarnDb {
    session: Session,
}

#[async_trait::async_trait]
impl AsyncDB for TarnDb {
    type Error = SltError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SltError> {
        // A statement followed by a `-- params` line and one JSON array per line runs
        // as `query_batch`, and reads as one row: statements, rows_affected, row_count.
        if let Some((stmt, sets)) = sql.split_once("\n-- params\n") {
            let sets: Vec<Vec<serde_json::Value>> = sets
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| serde_json::from_str(l).expect("a parameter set is a JSON array"))
                .collect();
            let r = self
                .session
                .query_batch("ws", stmt, &sets)
                .await
                .map_err(SltError)?;
            return Ok(DBOutput::Rows {
                types: vec![DefaultColumnType::Integer; 3],
                rows: vec![vec![
                    r.statements.to_string(),
                    r.rows_affected.to_string(),
                    r.row_count.to_string(),
                ]],
            });
        }
        let r = self.session.query("ws", sql, &[]).await.map_err(SltError)?;
        match r.rows {
            None => Ok(DBOutput::StatementComplete(r.rows_affected)),
            Some(rows) => Ok(DBOutput::Rows {
                types: vec![DefaultColumnType::Any; r.columns.len()],
                rows: rows
                    .iter()
                    .map(|row| row.iter().map(slt_text).collect())
                    .collect(),
            }),
        }
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "tarn"
    }

    async fn sleep(dur: std::time::Duration) {
        tokio::time::sleep(dur).await
    }
}

#[tokio::main]
async fn main() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("slt");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let filter = args.iter().find(|a| !a.starts_with('-')).cloned();
    let exact = args.iter().any(|a| a == "--exact");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/slt exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().to_string());
            filter.as_ref().is_none_or(|f| {
                if exact {
                    name.as_deref() == Some(f.as_str())
                } else {
                    p.to_string_lossy().contains(f.as_str())
                }
            })
        })
        .collect();
    files.sort();
    // The libtest listing protocol, so `cargo nextest` can run each file as a test.
    if args.iter().any(|a| a == "--list") {
        if !args.iter().any(|a| a == "--ignored") {
            for f in &files {
                if let Some(name) = f.file_name() {
                    println!("{}: test", name.to_string_lossy());
                }
            }
        }
        return;
    }
    let (mut passed, mut failed) = (0, 0);
    for file in &files {
        // Every file runs three times: in memory; in memory with the fast paths off
        // (every statement and parameter set planned); and on disk with a memtable so
        // small that each statement is sealed into segment files and compacted. Results
        // and errors must not depend on the path a statement takes or where rows live.
        for mode in ["memory", "planned", "segments"] {
            let dir = tempfile::tempdir().expect("temp dir");
            let tarn = match mode {
                "memory" => Tarn::in_memory().await.expect("in-memory database"),
                "planned" => Tarn::in_memory_with(Options::new().fast_paths(false))
                    .await
                    .expect("in-memory database"),
                _ => Tarn::open_with(
                    dir.path(),
                    Options::new()
                        .sync(SyncMode::Process)
                        .memtable_bytes(1)
                        .background_maintenance(false),
                )
                .await
                .expect("database on disk"),
            };
            let session = fixture(&tarn).await.expect("fixture");
            let mut runner = Runner::new(move || {
                let session = session.clone();
                async move { Ok::<_, SltError>(TarnDb { session }) }
            });
            match runner.run_file_async(file).await {
                Ok(()) => {
                    passed += 1;
                    println!("ok    {} ({mode})", file.display());
                }
                Err(e) => {
                    failed += 1;
                    println!("FAIL  {} ({mode})\n{e}\n", file.display());
                }
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed > 0 || files.is_empty() {
        std::process::exit(1);
    }
}
