//! `tarn shell -w WS`: an interactive SQL shell (SPEC §9). Line editing and history by
//! rustyline; statements may span lines and end with `;`; backslash commands describe
//! the workspace. Ctrl-C at the prompt drops the unfinished input, Ctrl-C while a
//! statement runs cancels that statement (the future is dropped: it applies wholly or
//! not at all) and the shell goes on; Ctrl-D ends it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rustyline::DefaultEditor;
use rustyline::error::ReadlineError;
use serde_json::Value;
use tarn::{QueryResult, Session};

use crate::{format_table, split_statements};

/// Elements of a vector shown in full; longer ones are cut (`\x` rows and tables).
const VECTOR_SHOWN: usize = 6;

const HELP: &str = r"Statements end with ';' and may span lines.
  \d          tables with their row counts
  \d NAME     a table's columns, types, nullability, defaults, indexes and size,
              or a view's columns and definition
  \di         indexes of every table
  \dv         views
  \dw         workspaces
  \timing     show or hide each statement's time (shown by default)
  \x          expanded rows: one line per column (for wide rows such as vectors)
  \i FILE     run the statements in FILE
  \?          this help
  \q          quit (Ctrl-D too)
Ctrl-C cancels the running statement, or drops the input typed so far.";

/// The history file: `$HOME/.tarn_history`, else in the database directory.
pub(crate) fn default_history(data: &Path) -> PathBuf {
    match std::env::var_os("HOME") {
        Some(home) if !home.is_empty() => PathBuf::from(home).join(".tarn_history"),
        _ => data.join(".tarn_history"),
    }
}

struct Shell<'a> {
    session: &'a Session,
    ws: &'a str,
    timing: bool,
    expanded: bool,
    /// Set by the SIGINT handler while a statement runs.
    interrupted: Arc<AtomicBool>,
}

/// Runs the shell until `\q` or end of input. Exit status 0 (errors of statements are
/// shown and the shell goes on).
pub(crate) async fn run(session: &Session, ws: &str, history: &Path) -> ExitCode {
    let mut editor = match DefaultEditor::new() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("tarn: cannot start the line editor: {e}");
            return ExitCode::from(1);
        }
    };
    // While rustyline reads, the terminal is raw and Ctrl-C is a key it reports; while a
    // statement runs it is a signal, which only sets this flag (instead of ending the
    // process). Installed after the editor, which puts a SIGINT handler of its own in
    // place when it is created.
    let interrupted = Arc::new(AtomicBool::new(false));
    {
        let flag = interrupted.clone();
        if let Err(e) = ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst)) {
            eprintln!("tarn: cannot catch Ctrl-C: {e}");
        }
    }
    let _ = editor.load_history(history);
    let mut shell = Shell {
        session,
        ws,
        timing: true,
        expanded: false,
        interrupted,
    };
    println!("tarn shell, workspace \"{ws}\". Type \\? for help, \\q to quit.");
    let mut buf = String::new();
    loop {
        let prompt = if buf.trim().is_empty() {
            format!("{ws}=> ")
        } else {
            format!("{ws}-> ")
        };
        match editor.readline(&prompt) {
            Ok(line) => {
                if buf.trim().is_empty() && line.trim_start().starts_with('\\') {
                    let _ = editor.add_history_entry(line.trim());
                    if !shell.meta(line.trim()).await {
                        break;
                    }
                    continue;
                }
                buf.push_str(&line);
                buf.push('\n');
                let (stmts, rest) = split_statements(&buf, false);
                if !stmts.is_empty() {
                    let done = buf[..buf.len() - rest.len()].trim();
                    let _ = editor.add_history_entry(done);
                }
                buf = rest;
                for stmt in stmts {
                    shell.execute(&stmt).await;
                }
            }
            Err(ReadlineError::Interrupted) => buf.clear(),
            Err(ReadlineError::Eof) => break,
            Err(e) => {
                eprintln!("tarn: reading input: {e}");
                break;
            }
        }
    }
    if let Err(e) = editor.save_history(history) {
        eprintln!(
            "tarn: cannot save the history to {}: {e}",
            history.display()
        );
    }
    ExitCode::SUCCESS
}

impl Shell<'_> {
    /// Runs one statement; Ctrl-C drops it.
    async fn execute(&mut self, sql: &str) {
        self.interrupted.store(false, Ordering::SeqCst);
        let start = Instant::now();
        let query = self.session.query(self.ws, sql, &[]);
        tokio::pin!(query);
        let result = loop {
            tokio::select! {
                r = &mut query => break Some(r),
                () = tokio::time::sleep(Duration::from_millis(20)) => {
                    if self.interrupted.swap(false, Ordering::SeqCst) {
                        break None;
                    }
                }
            }
        };
        match result {
            None => println!("cancelled by Ctrl-C (a statement applies wholly or not at all)"),
            Some(Ok(r)) => self.show(&r, start.elapsed()),
            Some(Err(e)) => show_error(&e),
        }
    }

    fn show(&self, r: &QueryResult, took: Duration) {
        let time = if self.timing {
            format!(", {:.1} ms", took.as_secs_f64() * 1000.0)
        } else {
            String::new()
        };
        for n in &r.notices {
            println!("NOTICE: {n}");
        }
        match &r.rows {
            None => println!("OK, {} row(s) affected{time}", r.rows_affected),
            Some(rows) => {
                if self.expanded {
                    print!("{}", format_expanded(&r.columns, rows));
                } else {
                    let shown: Vec<Vec<Value>> = rows
                        .iter()
                        .map(|row| row.iter().map(abbreviate).collect())
                        .collect();
                    print!("{}", format_table(&r.columns, &shown));
                }
                println!(
                    "({} row{}{time})",
                    r.row_count,
                    if r.row_count == 1 { "" } else { "s" }
                );
            }
        }
    }

    /// A backslash command; `false` to quit.
    async fn meta(&mut self, line: &str) -> bool {
        let mut words = line.split_whitespace();
        let cmd = words.next().unwrap_or_default();
        let arg = words.next();
        match (cmd, arg) {
            ("\\q", _) => return false,
            ("\\?", _) => println!("{HELP}"),
            ("\\timing", _) => {
                self.timing = !self.timing;
                println!("Timing is {}.", if self.timing { "on" } else { "off" });
            }
            ("\\x", _) => {
                self.expanded = !self.expanded;
                println!(
                    "Expanded display is {}.",
                    if self.expanded { "on" } else { "off" }
                );
            }
            ("\\d", None) => match self.session.tables(self.ws).await {
                Ok(tables) => {
                    let rows: Vec<Vec<Value>> = tables
                        .iter()
                        .map(|t| vec![Value::from(t.name.as_str()), Value::from(t.row_count)])
                        .collect();
                    print_listing(&["table", "rows"], &rows, "table");
                }
                Err(e) => show_error(&e),
            },
            ("\\d", Some(name)) => self.describe(name).await,
            ("\\di", _) => self.indexes().await,
            ("\\dv", _) => match self.session.views(self.ws).await {
                Ok(views) => {
                    let rows: Vec<Vec<Value>> = views
                        .iter()
                        .map(|v| vec![Value::from(v.name.as_str()), Value::from(v.columns.len())])
                        .collect();
                    print_listing(&["view", "columns"], &rows, "view");
                }
                Err(e) => show_error(&e),
            },
            ("\\dw", _) => match self.session.workspaces().await {
                Ok(list) => {
                    let rows: Vec<Vec<Value>> = list
                        .data
                        .iter()
                        .map(|w| {
                            vec![
                                Value::from(w.id.as_str()),
                                Value::from(w.name.as_str()),
                                Value::from(w.created_at.as_str()),
                            ]
                        })
                        .collect();
                    print_listing(&["workspace", "name", "created_at"], &rows, "workspace");
                }
                Err(e) => show_error(&e),
            },
            ("\\i", Some(file)) => match read_script(file) {
                Ok(text) => {
                    let (stmts, _) = split_statements(&text, true);
                    for stmt in stmts {
                        self.execute(&stmt).await;
                    }
                }
                Err(e) => println!(
                    "ERROR: {}: {}",
                    crate::printable(file),
                    crate::printable(&crate::io_text(&e))
                ),
            },
            ("\\i", None) => println!("ERROR: \\i needs a file name"),
            _ => println!(
                "ERROR: unknown command {}; \\? lists the commands",
                crate::printable(cmd)
            ),
        }
        true
    }

    async fn describe(&self, name: &str) {
        let name = name.trim_matches('"');
        let t = match self.session.table(self.ws, name).await {
            Ok(t) => t,
            Err(e) if e.kind() == tarn::ErrorKind::NotFound => {
                return match self.session.view(self.ws, name).await {
                    Ok(v) => self.describe_view(&v),
                    Err(v) if v.kind() == tarn::ErrorKind::NotFound => show_error(&e),
                    Err(v) => show_error(&v),
                };
            }
            Err(e) => return show_error(&e),
        };
        println!(
            "Table \"{}\".\"{}\" ({} row{}, {:.2} MB)",
            self.ws,
            t.table_name,
            t.row_count,
            if t.row_count == 1 { "" } else { "s" },
            t.size_mb
        );
        let rows: Vec<Vec<Value>> = t
            .columns
            .iter()
            .map(|c| {
                vec![
                    Value::from(c.name.as_str()),
                    Value::from(c.data_type.as_str()),
                    Value::from(if c.nullable { "" } else { "not null" }),
                    Value::from(c.default.as_deref().unwrap_or_default()),
                ]
            })
            .collect();
        let columns: Vec<String> = ["column", "type", "nullable", "default"]
            .iter()
            .map(|c| c.to_string())
            .collect();
        print!("{}", format_table(&columns, &rows));
        if !t.indexes.is_empty() {
            println!("Indexes:");
            for i in &t.indexes {
                println!(
                    "    \"{}\" {} ({}){}",
                    i.name,
                    i.index_type,
                    i.column,
                    building_note(i)
                );
            }
        }
    }

    /// `\d VIEW`: its columns and the query it stands for.
    fn describe_view(&self, v: &tarn::ViewInfo) {
        println!("View \"{}\".\"{}\"", self.ws, v.name);
        let rows: Vec<Vec<Value>> = v
            .columns
            .iter()
            .map(|c| {
                vec![
                    Value::from(c.name.as_str()),
                    Value::from(c.data_type.as_str()),
                ]
            })
            .collect();
        let columns: Vec<String> = ["column", "type"].iter().map(|c| c.to_string()).collect();
        print!("{}", format_table(&columns, &rows));
        println!("View definition:");
        println!("    {}", crate::printable(&v.definition));
    }

    async fn indexes(&self) {
        let tables = match self.session.tables(self.ws).await {
            Ok(t) => t,
            Err(e) => return show_error(&e),
        };
        let mut rows = Vec::new();
        for t in &tables {
            match self.session.table(self.ws, &t.name).await {
                Ok(d) => rows.extend(d.indexes.iter().map(|i| {
                    vec![
                        Value::from(i.name.as_str()),
                        Value::from(t.name.as_str()),
                        Value::from(i.column.as_str()),
                        Value::from(i.index_type.as_str()),
                        Value::from(if i.status == "building" {
                            format!(
                                "building: {} of {} segments",
                                i.segments_indexed, i.segments
                            )
                        } else {
                            i.status.clone()
                        }),
                    ]
                })),
                Err(e) => return show_error(&e),
            }
        }
        print_listing(
            &["index", "table", "column", "type", "status"],
            &rows,
            "index",
        );
    }
}

/// ` building: 3 of 5 segments indexed; VACUUM the table to finish` for an index whose
/// build is under way or pending, else nothing.
fn building_note(i: &tarn::IndexInfo) -> String {
    if i.status == "building" {
        format!(
            " building: {} of {} segments indexed; VACUUM the table to finish",
            i.segments_indexed, i.segments
        )
    } else {
        String::new()
    }
}

fn print_listing(columns: &[&str], rows: &[Vec<Value>], noun: &str) {
    let columns: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
    print!("{}", format_table(&columns, rows));
    let plural = if noun.ends_with('x') { "es" } else { "s" };
    println!(
        "({} {noun}{})",
        rows.len(),
        if rows.len() == 1 { "" } else { plural }
    );
}

/// An error as the shell shows it: status, kind and message.
fn show_error(e: &tarn::Error) {
    let kind = serde_json::to_value(e)
        .ok()
        .and_then(|v| v["kind"].as_str().map(str::to_string))
        .unwrap_or_default();
    println!(
        "ERROR {} {kind}: {}",
        e.status(),
        crate::printable(e.message())
    );
}

/// A long array (a vector) cut to its first elements and its length.
fn abbreviate(v: &Value) -> Value {
    match v {
        Value::Array(items) if items.len() > VECTOR_SHOWN => {
            let head: Vec<String> = items[..VECTOR_SHOWN].iter().map(Value::to_string).collect();
            Value::String(format!("[{}, … ({} values)]", head.join(","), items.len()))
        }
        other => other.clone(),
    }
}

/// Rows one column per line, as psql's `\x`.
/// Most bytes `\i` reads from one file: larger scripts go through
/// `tarn sql -w WS -`, which streams them (and `\i /dev/zero` must end).
const MAX_SCRIPT_BYTES: u64 = 64 << 20;

/// The text of a `\i` file, at most [`MAX_SCRIPT_BYTES`].
fn read_script(file: &str) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(file)?
        .take(MAX_SCRIPT_BYTES + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > MAX_SCRIPT_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {MAX_SCRIPT_BYTES} bytes: run it with `tarn sql -w WS - < FILE`"
        )));
    }
    Ok(text)
}

fn format_expanded(columns: &[String], rows: &[Vec<Value>]) -> String {
    let width = columns.iter().map(|c| c.chars().count()).max().unwrap_or(0);
    let mut out = String::new();
    for (n, row) in rows.iter().enumerate() {
        out.push_str(&format!(
            "-[ RECORD {} ]{}\n",
            n + 1,
            "-".repeat(width.max(4))
        ));
        for (c, v) in columns.iter().zip(row) {
            let text = match abbreviate(v) {
                Value::Null => "NULL".to_string(),
                Value::String(s) => s,
                other => other.to_string(),
            };
            let c = crate::printable(c);
            out.push_str(&format!("{c:<width$} | {}\n", crate::printable(&text)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `\i` of an endless file ends with an error instead of reading until memory
    /// runs out.
    #[test]
    fn scripts_are_read_up_to_their_limit() {
        let e = read_script("/dev/zero").unwrap_err();
        assert!(e.to_string().contains("larger than"), "{e}");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.sql");
        std::fs::write(&path, "SELECT 1;").expect("write");
        assert_eq!(
            read_script(&path.to_string_lossy()).expect("read"),
            "SELECT 1;"
        );
    }

    #[test]
    fn long_vectors_are_cut_and_rows_expand() {
        let v = json!((0..384).map(|i| i as f64 / 4.0).collect::<Vec<_>>());
        assert_eq!(
            abbreviate(&v),
            json!("[0.0,0.25,0.5,0.75,1.0,1.25, … (384 values)]")
        );
        assert_eq!(abbreviate(&json!([1, 2])), json!([1, 2]));
        let text = format_expanded(
            &["id".to_string(), "embedding".to_string()],
            &[vec![json!(1), v]],
        );
        assert_eq!(
            text,
            "-[ RECORD 1 ]---------\nid        | 1\nembedding | [0.0,0.25,0.5,0.75,1.0,1.25, … (384 values)]\n"
        );
    }
}
