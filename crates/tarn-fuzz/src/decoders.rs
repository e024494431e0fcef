//! `decoders`: any bytes where Tarn decodes stored or uploaded data give an error or
//! data, never a panic or a hang.
//!
//! Input (`arbitrary`), one of:
//! - a WAL record body, decoded directly;
//! - a key section and a probe key, parsed and looked up;
//! - an upload (file name, bytes, chunk sizes): CSV/JSON sniffing, type inference and
//!   decoding, fed in chunks the input chooses (chunk boundaries are where streaming
//!   parsers break);
//! - damage to one file of a real database (the `sql_exec` template: a WAL with
//!   commits, a manifest, segments with key sections and statistics, HNSW, MaxSim and
//!   BM25 index files): byte edits, insertions, removals, truncation. With `reseal`,
//!   the file's checksums are recomputed afterwards, so the damage gets past them and
//!   into the decoders (Arrow IPC, JSON trailers, key sections, record bodies, index
//!   formats). The database is then opened, every table read, every index searched
//!   and every table compacted; any of these may fail (with any status: the damage
//!   is real), none may panic.

use std::path::{Path, PathBuf};
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use tarn::{Options, Tarn};

/// One input.
#[derive(Arbitrary, Debug)]
pub enum Input {
    /// A WAL record body.
    Record(Vec<u8>),
    /// A key section and a key to look up.
    Keys {
        /// The section.
        section: Vec<u8>,
        /// The probe.
        probe: Vec<u8>,
    },
    /// An uploaded file.
    Upload {
        /// Which name it is uploaded under (the extension fixes the format).
        name: UploadName,
        /// The file.
        bytes: Vec<u8>,
        /// Sizes of the chunks it arrives in.
        chunks: Vec<u8>,
    },
    /// Damage to one file of a database.
    File {
        /// Which kind of file.
        kind: FileKind,
        /// Which of the files of that kind.
        nth: u8,
        /// The damage.
        edits: Vec<Edit>,
        /// Whether the checksums are recomputed afterwards.
        reseal: bool,
    },
}

/// The name an upload is given.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum UploadName {
    /// `data.csv`
    Csv,
    /// `data.tsv`
    Tsv,
    /// `data.json`
    Json,
    /// `data.ndjson`
    Ndjson,
    /// `data` (sniffed)
    Unknown,
}

/// The kinds of files of a database.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// `*.wal`
    Wal,
    /// `MANIFEST`
    Manifest,
    /// Segment files.
    Segment,
    /// `*.idx` index files.
    Index,
    /// Any file.
    Other,
}

/// One change to a file.
#[derive(Arbitrary, Debug)]
pub struct Edit {
    at: u32,
    op: EditOp,
}

#[derive(Arbitrary, Debug)]
enum EditOp {
    Xor(u8),
    Overwrite(Vec<u8>),
    Insert(Vec<u8>),
    Remove(u16),
    Truncate,
    SetU32(u32),
    SetU64(u64),
}

/// Runs raw fuzzer bytes as an [`Input`].
pub fn run_bytes(data: &[u8]) {
    if let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) {
        crate::watched(|| run(&input));
    }
}

/// Runs one input; panics on a bug.
pub fn run(input: &Input) {
    match input {
        Input::Record(body) => {
            let _ = tarn_storage::fuzzing::decode_record(body);
        }
        Input::Keys { section, probe } => {
            let _ = tarn_storage::fuzzing::probe_key_section(section, probe);
        }
        Input::Upload {
            name,
            bytes,
            chunks,
        } => upload(*name, bytes, chunks),
        Input::File {
            kind,
            nth,
            edits,
            reseal,
        } => damaged_file(*kind, *nth, edits, *reseal),
    }
}

fn upload(name: UploadName, bytes: &[u8], chunks: &[u8]) {
    let name = match name {
        UploadName::Csv => "data.csv",
        UploadName::Tsv => "data.tsv",
        UploadName::Json => "data.json",
        UploadName::Ndjson => "data.ndjson",
        UploadName::Unknown => "data",
    };
    // Small limits, so that inputs of a few hundred bytes reach every boundary:
    // inference after the sample, batches filling up, rows too long.
    let limits = tarn_ingest::Limits {
        sample_rows: 20,
        sample_bytes: 128,
        max_sample_bytes: 1024,
        max_columns: 32,
        max_row_bytes: 512,
        max_json_row_bytes: 512,
        batch_rows: 8,
        batch_cells: 64,
        batch_bytes: 1024,
    };
    let mut ingest = tarn_ingest::Ingest::new(name, limits);
    let mut out = Vec::new();
    let mut rest = bytes;
    let mut sizes = chunks
        .iter()
        .map(|&c| usize::from(c) + 1)
        .chain(std::iter::repeat(64));
    while !rest.is_empty() {
        let n = sizes.next().unwrap_or(64).min(rest.len());
        let (chunk, tail) = rest.split_at(n);
        rest = tail;
        if ingest.push(chunk, &mut out).is_err() {
            return;
        }
        check_batches(&out);
        out.clear();
    }
    if let Ok(columns) = ingest.finish(&mut out) {
        check_batches(&out);
        for b in &out {
            assert!(
                b.num_columns() == columns.len(),
                "a batch of {} columns for {} columns",
                b.num_columns(),
                columns.len()
            );
        }
    }
}

/// Batches must be whole: every column as long as the batch.
fn check_batches(batches: &[tarn::arrow::record_batch::RecordBatch]) {
    for b in batches {
        for c in b.columns() {
            assert_eq!(c.len(), b.num_rows(), "a column shorter than its batch");
        }
    }
}

/// Every file under `dir` (recursively), sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn kind_of(path: &Path) -> FileKind {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name.ends_with(".wal") {
        FileKind::Wal
    } else if name == "MANIFEST" {
        FileKind::Manifest
    } else if name.ends_with(".idx") {
        FileKind::Index
    } else if name.ends_with(".seg") {
        FileKind::Segment
    } else {
        FileKind::Other
    }
}

fn apply(bytes: &mut Vec<u8>, edits: &[Edit]) {
    for edit in edits.iter().take(16) {
        let at = if bytes.is_empty() {
            0
        } else {
            edit.at as usize % bytes.len()
        };
        match &edit.op {
            EditOp::Xor(x) => {
                if let Some(b) = bytes.get_mut(at) {
                    *b ^= x | 1;
                }
            }
            EditOp::Overwrite(new) => {
                for (i, b) in new.iter().enumerate() {
                    if let Some(slot) = bytes.get_mut(at + i) {
                        *slot = *b;
                    }
                }
            }
            EditOp::Insert(new) => {
                let tail = bytes.split_off(at);
                bytes.extend_from_slice(new);
                bytes.extend_from_slice(&tail);
            }
            EditOp::Remove(n) => {
                let end = (at + usize::from(*n)).min(bytes.len());
                bytes.drain(at..end);
            }
            EditOp::Truncate => bytes.truncate(at),
            EditOp::SetU32(v) => {
                if let Some(s) = bytes.get_mut(at..at + 4) {
                    s.copy_from_slice(&v.to_le_bytes());
                }
            }
            EditOp::SetU64(v) => {
                if let Some(s) = bytes.get_mut(at..at + 8) {
                    s.copy_from_slice(&v.to_le_bytes());
                }
            }
        }
    }
}

/// Recomputes the checksums of an index file: an HNSW graph's (body and footer, the
/// footer being the last 64 bytes, magic `TARNHNSW`) or a text index's (the last four
/// bytes, after magic `TARNTXT1`). The formats are in `tarn-vector/src/graph.rs` and
/// `tarn-text/src/index.rs`.
fn reseal_index(bytes: &mut [u8]) {
    let len = bytes.len();
    if len >= 64 && &bytes[len - 64..len - 56] == b"TARNHNSW" {
        let body = crc32fast::hash(&bytes[..len - 64]);
        bytes[len - 64 + 40..len - 64 + 44].copy_from_slice(&body.to_le_bytes());
        let footer = crc32fast::hash(&bytes[len - 64..len - 4]);
        bytes[len - 4..].copy_from_slice(&footer.to_le_bytes());
    } else if len >= 12 && bytes.starts_with(b"TARNTXT1") {
        let crc = crc32fast::hash(&bytes[..len - 4]);
        bytes[len - 4..].copy_from_slice(&crc.to_le_bytes());
    }
}

/// The probes' answers (sorted rows as JSON text and rows affected), or their errors.
async fn probe(s: &tarn::Session) -> Vec<Result<String, String>> {
    let mut out = Vec::new();
    for sql in crate::sql_exec::PROBES {
        out.push(match s.query("ws", sql, &[]).await {
            Ok(r) => {
                let rows = crate::sorted_rows(r.rows);
                Ok(format!("{} affected; {}", r.rows_affected, rows.join("\n")))
            }
            Err(e) => Err(e.to_string()),
        });
    }
    out
}

/// The probes' answers on an undamaged copy of the template.
fn expected() -> &'static [Result<String, String>] {
    static E: std::sync::OnceLock<Vec<Result<String, String>>> = std::sync::OnceLock::new();
    E.get_or_init(|| {
        let dir = crate::fresh_dir("decoders_expected");
        crate::copy_dir(crate::sql_exec::template_dir(), &dir);
        crate::runtime().block_on(async {
            let tarn = Tarn::open_with(&dir, Options::new().background_maintenance(false))
                .await
                .expect("open the template");
            let s = tarn
                .connect(crate::sql_exec::template_secret())
                .await
                .expect("connect");
            let answers = probe(&s.with_org("fuzz")).await;
            let _ = tarn.close().await;
            answers
        })
    })
}

fn damaged_file(kind: FileKind, nth: u8, edits: &[Edit], reseal: bool) {
    let template = crate::sql_exec::template_dir();
    let want_all = expected();
    let dir = crate::fresh_dir("decoders");
    crate::copy_dir(template, &dir);
    let all = files(&dir);
    let candidates: Vec<&PathBuf> = all
        .iter()
        .filter(|p| kind == FileKind::Other || kind_of(p) == kind)
        .collect();
    if candidates.is_empty() {
        return;
    }
    let path = candidates[usize::from(nth) % candidates.len()];
    let mut bytes = std::fs::read(path).expect("read a template file");
    apply(&mut bytes, edits);
    if reseal {
        match kind_of(path) {
            FileKind::Wal => tarn_storage::fuzzing::reseal_wal(&mut bytes),
            FileKind::Manifest => tarn_storage::fuzzing::reseal_manifest(&mut bytes),
            FileKind::Segment => bytes = tarn_storage::fuzzing::reseal_segment(&bytes),
            FileKind::Index => reseal_index(&mut bytes),
            FileKind::Other => {}
        }
    }
    std::fs::write(path, &bytes).expect("write the damaged file");
    crate::runtime().block_on(async {
        let work = async {
            let opts = Options::new()
                .background_maintenance(false)
                .query_timeout(Duration::from_secs(2));
            let verbose = std::env::var_os("TARN_FUZZ_VERBOSE").is_some();
            let tarn = match Tarn::open_with(&dir, opts).await {
                Ok(t) => t,
                Err(e) => {
                    if verbose {
                        eprintln!(
                            "decoders: {} ({} bytes): open: {e}",
                            path.display(),
                            bytes.len()
                        );
                    }
                    return;
                }
            };
            if let Ok(s) = tarn.connect(crate::sql_exec::template_secret()).await {
                let answers = probe(&s.with_org("fuzz")).await;
                if verbose {
                    for e in answers.iter().filter_map(|a| a.as_ref().err()) {
                        eprintln!("decoders: {}: {e}", path.display());
                    }
                }
                // Damage the checksums still cover must never come back as data: each
                // probe fails or answers as on the undamaged database. (Not for the
                // log: damage to its last commit group is a torn write, which recovery
                // cuts off, so that commit is rightly gone.)
                if !reseal && !matches!(kind_of(path), FileKind::Wal | FileKind::Other) {
                    for ((sql, got), want) in crate::sql_exec::PROBES.iter().zip(&answers).zip(want_all) {
                        if let (Ok(got), Ok(want)) = (got, want) {
                            assert_eq!(
                                got, want,
                                "{} damaged without its checksums recomputed, yet {sql} answered differently",
                                path.display()
                            );
                        }
                    }
                }
            }
            let _ = tarn.close().await;
        };
        if tokio::time::timeout(Duration::from_secs(60), work)
            .await
            .is_err()
        {
            panic!("opening and reading a damaged database took over 60 s");
        }
    });
}
