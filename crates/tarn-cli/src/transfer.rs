//! `tarn import`, `tarn export` and `tarn files`: tables from files, query results to
//! files, and a workspace's stored files.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;
use tarn::{ErrorKind, Session, UploadProgress};

use crate::{format_table, report};

/// What an export writes, chosen by the file's extension or `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ExportFormat {
    /// Comma-separated values with a header row.
    Csv,
    /// One JSON object per row.
    Ndjson,
    /// The Arrow IPC file format (what `pyarrow.ipc.open_file` and DuckDB read).
    Arrow,
}

impl ExportFormat {
    /// The format a file name implies, if its extension is one of the known ones.
    fn from_path(path: &Path) -> Option<Self> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "csv" => Some(Self::Csv),
            "ndjson" | "jsonl" | "json" => Some(Self::Ndjson),
            "arrow" | "arrows" | "ipc" | "feather" => Some(Self::Arrow),
            _ => None,
        }
    }
}

/// A usage error: said on standard error, exit status 2.
fn usage(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("tarn: {}", crate::printable(&msg.to_string()));
    ExitCode::from(2)
}

/// A failure outside the engine (a local file): exit status 1.
fn failed(msg: impl std::fmt::Display, json: bool) -> ExitCode {
    report(
        &tarn::Error::new(ErrorKind::BadRequest, msg.to_string()),
        json,
    )
}

/// `tarn import -w WS TABLE FILE`: a new table from a CSV, JSON or NDJSON file.
pub(crate) async fn import(
    session: &Session,
    ws: &str,
    table: &str,
    file: &Path,
    json: bool,
) -> ExitCode {
    let reader = match tokio::fs::File::open(file).await {
        Ok(f) => f,
        Err(e) => return failed(format!("{}: {}", file.display(), crate::io_text(&e)), json),
    };
    let size = reader.metadata().await.map(|m| m.len()).unwrap_or(0);
    let filename = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // A bar on a terminal only: piped or redirected, standard error stays clean.
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = ProgressBar::new(size);
        bar.set_style(
            ProgressStyle::with_template(
                "{bar:30} {bytes}/{total_bytes} {binary_bytes_per_sec} {msg} ETA {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.enable_steady_tick(Duration::from_millis(200));
        bar
    });
    let progress = {
        let bar = bar.clone();
        move |p: UploadProgress| {
            if let Some(bar) = &bar {
                bar.set_position(p.bytes);
                let secs = bar.elapsed().as_secs_f64().max(1e-3);
                bar.set_message(format!(
                    "{} rows ({:.0} rows/s)",
                    p.rows,
                    p.rows as f64 / secs
                ));
            }
        }
    };
    let res = session
        .upload_table_with_progress(ws, table, &filename, reader, progress)
        .await;
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    match res {
        Ok(t) if json => {
            println!("{}", serde_json::to_string(&t).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Ok(t) => {
            println!(
                "imported {} row{} into \"{ws}\".\"{}\" ({})",
                t.row_count,
                if t.row_count == 1 { "" } else { "s" },
                t.name,
                t.columns.join(", ")
            );
            ExitCode::SUCCESS
        }
        Err(e) => report(&e, json),
    }
}

/// `tarn export -w WS "SELECT …" FILE`: a query's rows to CSV, NDJSON or Arrow IPC.
/// `FILE` `-` is standard output (then `--format` is needed).
pub(crate) async fn export(
    session: &Session,
    ws: &str,
    sql: &str,
    file: &Path,
    format: Option<ExportFormat>,
) -> ExitCode {
    let to_stdout = file == Path::new("-");
    let Some(format) = format.or_else(|| ExportFormat::from_path(file)) else {
        return usage(format!(
            "{}: cannot tell the format from the name; use .csv, .ndjson, .jsonl or .arrow, \
             or --format",
            file.display()
        ));
    };
    // Only a query is exported, and that is known before anything runs: a write run
    // first would be applied behind the refusal (PostgreSQL's COPY takes a query too).
    if tarn::returns_rows_only(sql) == Some(false) {
        return usage(
            "export takes one query (SELECT, VALUES, TABLE or WITH … SELECT); the \
             statement was not run",
        );
    }
    // The result is read as Arrow (charged to `query_memory`) and written a batch at a
    // time, each batch let go once written: as JSON rows and one buffer of the whole
    // file, 500 MB of rows had taken 3.25 GB and 700 MB was refused.
    let mut result = match session.query_arrow(ws, sql, &[]).await {
        Ok(r) => r,
        Err(e) => return report(&e, false),
    };
    let schema = result.schema.clone();
    let Some(batches) = result.batches.take() else {
        return usage("the statement returns no rows to export");
    };
    let tmp = {
        let mut t = file.as_os_str().to_owned();
        t.push(".tarn-partial");
        PathBuf::from(t)
    };
    // Ctrl-C or SIGTERM while the file is written: the temporary file goes (spec §9: a
    // failed export leaves none), and the process ends as the signal would have ended
    // it (the signal's default had left hundreds of MB behind).
    #[cfg(unix)]
    let watcher = (!to_stdout).then(|| {
        let tmp = tmp.clone();
        tokio::spawn(async move {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut int), Ok(mut term)) = (
                signal(SignalKind::interrupt()),
                signal(SignalKind::terminate()),
            ) else {
                return;
            };
            let code = tokio::select! {
                _ = int.recv() => 130,
                _ = term.recv() => 143,
            };
            let _ = std::fs::remove_file(&tmp);
            eprintln!("tarn: the export was stopped by a signal; no file was written");
            std::process::exit(code);
        })
    });
    let written = (|| -> Result<u64, String> {
        let io = |e: std::io::Error| format!("{}: {}", file.display(), crate::io_text(&e));
        let sink: Box<dyn Write> = if to_stdout {
            Box::new(std::io::stdout().lock())
        } else {
            Box::new(std::fs::File::create(&tmp).map_err(io)?)
        };
        let mut sink = std::io::BufWriter::with_capacity(1 << 20, sink);
        let mut rows = 0u64;
        match format {
            ExportFormat::Arrow => {
                let mut w = datafusion::arrow::ipc::writer::FileWriter::try_new(&mut sink, &schema)
                    .map_err(|e| format!("writing Arrow IPC: {e}"))?;
                for b in batches {
                    w.write(&b).map_err(|e| format!("writing Arrow IPC: {e}"))?;
                    rows += b.num_rows() as u64;
                }
                w.finish().map_err(|e| format!("writing Arrow IPC: {e}"))?;
            }
            ExportFormat::Csv | ExportFormat::Ndjson => {
                let columns: Vec<String> =
                    schema.fields().iter().map(|f| f.name().clone()).collect();
                let mut out = Vec::new();
                if format == ExportFormat::Csv {
                    write_csv_header(&mut out, &columns);
                }
                // jsonb columns go to CSV as their JSON text, as stored: the JSON string
                // `"s"` keeps its quotes and JSON `null` is `null`, not NULL's empty field.
                let jsonb: Vec<usize> = schema
                    .fields()
                    .iter()
                    .enumerate()
                    .filter(|(_, f)| tarn::is_json_field(f))
                    .map(|(i, _)| i)
                    .collect();
                for b in batches {
                    let mut json = tarn::json_rows(&schema, &b).map_err(|e| e.to_string())?;
                    if format == ExportFormat::Csv {
                        jsonb_as_stored(&mut json, &b, &jsonb);
                    }
                    drop(b);
                    if format == ExportFormat::Csv {
                        write_csv(&mut out, &json);
                    } else {
                        write_ndjson(&mut out, &columns, &json);
                    }
                    rows += json.len() as u64;
                    sink.write_all(&out).map_err(io)?;
                    out.clear();
                }
                sink.write_all(&out).map_err(io)?;
            }
        }
        let sink = sink.into_inner().map_err(|e| io(e.into_error()))?;
        drop(sink);
        if !to_stdout {
            std::fs::File::open(&tmp)
                .and_then(|f| f.sync_all())
                .and_then(|()| std::fs::rename(&tmp, file))
                .map_err(io)?;
        } else {
            std::io::stdout().flush().map_err(io)?;
        }
        Ok(rows)
    })();
    #[cfg(unix)]
    if let Some(w) = watcher {
        w.abort();
    }
    drop(result);
    let rows = match written {
        Ok(rows) => rows,
        Err(e) => {
            if !to_stdout {
                let _ = std::fs::remove_file(&tmp);
            }
            return failed(e, false);
        }
    };
    if !to_stdout {
        eprintln!(
            "exported {rows} row{} to {}",
            if rows == 1 { "" } else { "s" },
            file.display()
        );
    }
    ExitCode::SUCCESS
}

/// The cells of the `jsonb` columns of `rows` replaced by their stored JSON text
/// (a JSON value would lose a string's quotes, and JSON `null` would read as NULL).
fn jsonb_as_stored(
    rows: &mut [Vec<Value>],
    batch: &tarn::arrow::record_batch::RecordBatch,
    jsonb: &[usize],
) {
    use tarn::arrow::array::{Array, AsArray};
    for &c in jsonb {
        let Some(text) = batch.column(c).as_string_opt::<i32>() else {
            continue;
        };
        for (r, row) in rows.iter_mut().enumerate() {
            if text.is_valid(r) {
                row[c] = Value::String(text.value(r).to_string());
            }
        }
    }
}

/// A cell as CSV text: NULL is the empty field, text is itself, anything else (numbers,
/// booleans, vectors, jsonb) its JSON text — what `tarn import` reads back.
fn csv_cell(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// A CSV field, quoted when it holds a comma, a quote or a line end, or is an empty
/// string (so that it differs from NULL's empty field).
fn push_csv_field(out: &mut Vec<u8>, field: Option<&str>) {
    let Some(s) = field else { return };
    if s.is_empty() || s.contains([',', '"', '\n', '\r']) {
        out.push(b'"');
        out.extend_from_slice(s.replace('"', "\"\"").as_bytes());
        out.push(b'"');
    } else {
        out.extend_from_slice(s.as_bytes());
    }
}

/// The CSV header row: the column names.
fn write_csv_header(out: &mut Vec<u8>, columns: &[String]) {
    for (i, c) in columns.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        push_csv_field(out, Some(c));
    }
    out.push(b'\n');
}

fn write_csv(out: &mut Vec<u8>, rows: &[Vec<Value>]) {
    for row in rows {
        for (i, v) in row.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            push_csv_field(out, csv_cell(v).as_deref());
        }
        out.push(b'\n');
    }
}

/// One object per row, keys in column order (a JSON map would sort them).
fn write_ndjson(out: &mut Vec<u8>, columns: &[String], rows: &[Vec<Value>]) {
    for row in rows {
        out.push(b'{');
        for (i, (c, v)) in columns.iter().zip(row).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(Value::from(c.as_str()).to_string().as_bytes());
            out.push(b':');
            out.extend_from_slice(v.to_string().as_bytes());
        }
        out.extend_from_slice(b"}\n");
    }
}

/// What `tarn files` does.
#[derive(clap::Subcommand)]
pub(crate) enum FilesAction {
    /// List the workspace's files, newest first.
    #[command(after_help = "Example:\n  tarn files -w docs ls --limit 20")]
    Ls {
        /// Files per page (at most 1000).
        #[arg(long)]
        limit: Option<u32>,
        /// Files to skip.
        #[arg(long)]
        offset: Option<u64>,
    },
    /// Store a file in the workspace.
    #[command(after_help = "Example:\n  tarn files -w docs put report.pdf")]
    Put {
        /// The file to store.
        path: PathBuf,
        /// The name to store it under (default: the file's own name).
        #[arg(long)]
        name: Option<String>,
        /// Its media type (default: from the extension, else application/octet-stream).
        #[arg(long = "media-type")]
        media_type: Option<String>,
    },
    /// Write a stored file's bytes to OUT (`-`: standard output; default: its stored
    /// name in the current directory, never overwriting).
    #[command(after_help = "Example:\n  tarn files -w docs get 0b9f…c2 report.pdf")]
    Get {
        /// The file's id.
        id: String,
        /// Where to write it.
        out: Option<PathBuf>,
    },
    /// Delete a stored file.
    #[command(after_help = "Example:\n  tarn files -w docs rm 0b9f…c2")]
    Rm {
        /// The file's id.
        id: String,
    },
}

/// A media type from a file name's extension (the common ones; others are bytes).
fn media_type_of(name: &str) -> &'static str {
    let ext = Path::new(name)
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    match ext.as_str() {
        "csv" => "text/csv",
        "json" => "application/json",
        "ndjson" | "jsonl" => "application/x-ndjson",
        "txt" | "text" | "log" => "text/plain",
        "md" => "text/markdown",
        "html" | "htm" => "text/html",
        "pdf" => "application/pdf",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "svg" => "image/svg+xml",
        "parquet" => "application/vnd.apache.parquet",
        "arrow" | "arrows" | "feather" => "application/vnd.apache.arrow.file",
        "zip" => "application/zip",
        "gz" => "application/gzip",
        _ => "application/octet-stream",
    }
}

/// `tarn files -w WS …`.
pub(crate) async fn files(
    session: &Session,
    ws: &str,
    action: FilesAction,
    json: bool,
) -> ExitCode {
    match action {
        FilesAction::Ls { limit, offset } => match session.files(ws, limit, offset).await {
            Ok(list) if json => {
                println!("{}", serde_json::to_string(&list).unwrap_or_default());
                ExitCode::SUCCESS
            }
            Ok(list) => {
                let columns: Vec<String> =
                    ["id", "filename", "media_type", "size_bytes", "created_at"]
                        .iter()
                        .map(|c| c.to_string())
                        .collect();
                let rows: Vec<Vec<Value>> = list
                    .data
                    .iter()
                    .map(|f| {
                        vec![
                            Value::from(f.id.as_str()),
                            Value::from(f.filename.as_str()),
                            Value::from(f.media_type.as_str()),
                            Value::from(f.size_bytes),
                            Value::from(f.created_at.as_str()),
                        ]
                    })
                    .collect();
                print!("{}", format_table(&columns, &rows));
                println!(
                    "({} of {} file{}, from {})",
                    list.data.len(),
                    list.total_count,
                    if list.total_count == 1 { "" } else { "s" },
                    list.offset
                );
                ExitCode::SUCCESS
            }
            Err(e) => report(&e, json),
        },
        FilesAction::Put {
            path,
            name,
            media_type,
        } => {
            let reader = match tokio::fs::File::open(&path).await {
                Ok(f) => f,
                Err(e) => {
                    return failed(format!("{}: {}", path.display(), crate::io_text(&e)), json);
                }
            };
            let name = name.unwrap_or_else(|| {
                path.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            });
            let media_type = media_type.unwrap_or_else(|| media_type_of(&name).to_string());
            match session.upload_file(ws, &name, &media_type, reader).await {
                Ok(f) if json => {
                    println!("{}", serde_json::to_string(&f).unwrap_or_default());
                    ExitCode::SUCCESS
                }
                Ok(f) => {
                    println!(
                        "stored {} ({} bytes, {}) as {}\nsha256 {}",
                        f.filename, f.size_bytes, f.media_type, f.id, f.sha256
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => report(&e, json),
            }
        }
        FilesAction::Get { id, out } => {
            let info = match session.file(ws, &id).await {
                Ok(f) => f,
                Err(e) => return report(&e, json),
            };
            let mut content = match session.file_content(ws, &id).await {
                Ok(c) => c,
                Err(e) => return report(&e, json),
            };
            let res = match out.as_deref() {
                Some(p) if p == Path::new("-") => copy_to_stdout(&mut content.reader).await,
                target => {
                    let path = target.map_or_else(
                        || PathBuf::from(stored_name(&info.filename)),
                        Path::to_path_buf,
                    );
                    copy_to_new_file(&mut content.reader, &path, target.is_some()).await
                }
            };
            match res {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => failed(format!("writing file {id}: {}", crate::io_text(&e)), json),
            }
        }
        FilesAction::Rm { id } => match session.delete_file(ws, &id).await {
            Ok(_) if json => {
                println!("{}", serde_json::json!({ "deleted": id }));
                ExitCode::SUCCESS
            }
            Ok(_) => {
                println!("deleted {id}");
                ExitCode::SUCCESS
            }
            Err(e) => report(&e, json),
        },
    }
}

/// Copies `reader` to standard output in 1 MiB blocks.
async fn copy_to_stdout(reader: &mut (impl tokio::io::AsyncRead + Unpin)) -> std::io::Result<()> {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; 1 << 20];
    let mut stdout = std::io::stdout().lock();
    loop {
        let n = reader.read(&mut buf).await?;
        if n == 0 {
            return stdout.flush();
        }
        stdout.write_all(&buf[..n])?;
    }
}

/// The last component of a stored file name (a name is never a path out of the
/// current directory).
fn stored_name(filename: &str) -> String {
    let base = filename.rsplit(['/', '\\']).next().unwrap_or_default();
    match base {
        "" | "." | ".." => "file".to_string(),
        b => b.to_string(),
    }
}

/// Copies `reader` into `path` through a temporary name; `replace`: whether an existing
/// file may be replaced (only when the user named it).
async fn copy_to_new_file(
    reader: &mut (impl tokio::io::AsyncRead + Unpin),
    path: &Path,
    replace: bool,
) -> std::io::Result<()> {
    if !replace && tokio::fs::try_exists(path).await? {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("{} exists; name the output to replace it", path.display()),
        ));
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tarn-partial");
    let tmp = PathBuf::from(tmp);
    let res = async {
        let mut f = tokio::fs::File::create(&tmp).await?;
        tokio::io::copy(reader, &mut f).await?;
        f.sync_all().await?;
        tokio::fs::rename(&tmp, path).await
    }
    .await;
    if res.is_err() {
        let _ = tokio::fs::remove_file(&tmp).await;
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_what_needs_it() {
        let mut out = Vec::new();
        let columns = vec!["id".to_string(), "a,b".to_string()];
        let rows = vec![
            vec![Value::from(1), Value::from("plain")],
            vec![Value::from(2), Value::from("say \"hi\", then\nleave")],
            vec![Value::from(3), Value::Null],
            vec![Value::from(4), Value::from("")],
            vec![Value::from(5), serde_json::json!([0.5, 1.0])],
        ];
        write_csv_header(&mut out, &columns);
        write_csv(&mut out, &rows);
        assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            "id,\"a,b\"\n1,plain\n2,\"say \"\"hi\"\", then\nleave\"\n3,\n4,\"\"\n5,\"[0.5,1.0]\"\n"
        );
    }

    #[test]
    fn ndjson_keeps_column_order() {
        let mut out = Vec::new();
        let columns = vec!["z".to_string(), "a".to_string()];
        write_ndjson(&mut out, &columns, &[vec![Value::from(1), Value::Null]]);
        assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            "{\"z\":1,\"a\":null}\n"
        );
    }

    #[test]
    fn names_and_types() {
        assert_eq!(
            ExportFormat::from_path(Path::new("x.CSV")),
            Some(ExportFormat::Csv)
        );
        assert_eq!(
            ExportFormat::from_path(Path::new("x.jsonl")),
            Some(ExportFormat::Ndjson)
        );
        assert_eq!(
            ExportFormat::from_path(Path::new("x.arrow")),
            Some(ExportFormat::Arrow)
        );
        assert_eq!(ExportFormat::from_path(Path::new("x.txt")), None);
        assert_eq!(media_type_of("a.PDF"), "application/pdf");
        assert_eq!(media_type_of("a"), "application/octet-stream");
        assert_eq!(stored_name("../../etc/passwd"), "passwd");
        assert_eq!(stored_name(".."), "file");
    }
}
