//! The `tarn` command: try Tarn from a shell, load files into tables, export query
//! results and manage a workspace's files. It acts as a local superuser: it creates
//! (once) a local admin user, an API key kept in `DIR/cli.key` (mode 0600) and the
//! organization `local`, and creates the workspace given by `-w` when it is missing.

#![forbid(unsafe_code)]

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use serde_json::Value;
use tarn::{ErrorKind, Options, QueryResult, Session, Tarn};

mod demo;
mod shell;
mod transfer;

const LOCAL_ORG: &str = "local";
const LOCAL_EMAIL: &str = "local@localhost";

#[derive(Parser)]
#[command(
    name = "tarn",
    version,
    about = "Tarn: an embedded data-workspace engine"
)]
struct Cli {
    /// Database directory (created if missing).
    #[arg(long, global = true, default_value = "./tarn-data")]
    data: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run SQL: one statement, or `-` to read `;`-terminated statements from stdin.
    #[command(after_help = "Examples:\n  \
        tarn sql -w ws 'SELECT 1'\n  \
        tarn sql -w ws -p 42 'SELECT * FROM \"ws\".\"t\" WHERE id = $1'\n  \
        tarn sql -w ws - < script.sql")]
    Sql {
        /// Workspace (created if missing).
        #[arg(short = 'w', long = "workspace")]
        workspace: String,
        /// Print results as JSON lines.
        #[arg(long)]
        json: bool,
        /// A parameter as one JSON value (repeat for $1, $2, …).
        #[arg(short = 'p', long = "param")]
        params: Vec<String>,
        /// The statement, or `-` for standard input.
        sql: String,
    },
    /// List tables and views of a workspace, or show one.
    #[command(after_help = "Examples:\n  tarn tables -w ws\n  tarn tables -w ws docs --json")]
    Tables {
        /// Workspace.
        #[arg(short = 'w', long = "workspace")]
        workspace: String,
        /// A table to describe.
        table: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Create a table from a CSV, JSON (an array of objects) or NDJSON file, with the
    /// column types inferred; a progress bar shows on a terminal.
    #[command(after_help = "Example:\n  tarn import -w ws papers papers.csv")]
    Import {
        /// Workspace (created if missing).
        #[arg(short = 'w', long = "workspace")]
        workspace: String,
        /// The new table's name.
        table: String,
        /// The file (its extension, else its content, tells the format).
        file: PathBuf,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write a query's rows to a file: CSV, NDJSON or Arrow IPC, by the file's extension
    /// (.csv, .ndjson/.jsonl, .arrow) or --format; `-` writes to standard output.
    #[command(after_help = "Examples:\n  \
        tarn export -w ws 'SELECT * FROM \"ws\".\"papers\"' papers.csv\n  \
        tarn export -w ws --format ndjson 'SELECT id, title FROM \"ws\".\"papers\"' -")]
    Export {
        /// Workspace.
        #[arg(short = 'w', long = "workspace")]
        workspace: String,
        /// The query.
        sql: String,
        /// The output file, or `-` for standard output.
        file: PathBuf,
        /// The format, when the file name does not tell it.
        #[arg(long, value_enum)]
        format: Option<transfer::ExportFormat>,
    },
    /// A workspace's stored files: list, store, fetch, delete.
    #[command(after_help = "Examples:\n  \
        tarn files -w docs put report.pdf\n  \
        tarn files -w docs ls\n  \
        tarn files -w docs get ID report-copy.pdf\n  \
        tarn files -w docs rm ID")]
    Files {
        /// Workspace (created if missing).
        #[arg(short = 'w', long = "workspace")]
        workspace: String,
        /// Print results as JSON.
        #[arg(long, global = true)]
        json: bool,
        #[command(subcommand)]
        action: transfer::FilesAction,
    },
    /// An interactive SQL shell: multi-line statements ended by `;`, history, `\d`,
    /// `\d NAME`, `\di`, `\dv`, `\dw`, `\timing`, `\x`, `\i FILE` (`\?` lists them); Ctrl-C
    /// cancels the running statement, Ctrl-D quits.
    #[command(after_help = "Example:\n  tarn --data ./tarn-data shell -w ws")]
    Shell {
        /// Workspace (created if missing).
        #[arg(short = 'w', long = "workspace")]
        workspace: String,
        /// History file (default: ~/.tarn_history).
        #[arg(long)]
        history: Option<PathBuf>,
    },
    /// Load the CISI abstracts into workspace `demo`, index them and run each kind of
    /// search (BM25, vector, hybrid, filtered). A second run reuses the data.
    #[command(after_help = "Example:\n  tarn --data /tmp/tarn-demo demo")]
    Demo,
}

/// Counts what each statement holds, so that the `query_memory` limit also holds for
/// memory DataFusion does not report to its pool (see `tarn::StatementAllocator`).
#[global_allocator]
static ALLOCATOR: tarn::StatementAllocator = tarn::StatementAllocator;

/// `value` (a JSON object) with `"kind": kind` added.
fn with_kind(value: impl serde::Serialize, kind: &str) -> Value {
    let mut v = serde_json::to_value(value).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut v {
        map.insert("kind".into(), Value::from(kind));
    }
    v
}

/// `tarn tables -w ws`: the workspace's tables, then its views, each with its kind.
async fn relations(session: &tarn::Session, ws: &str) -> tarn::Result<Value> {
    let mut out: Vec<Value> = session
        .tables(ws)
        .await?
        .into_iter()
        .map(|t| with_kind(t, "table"))
        .collect();
    out.extend(
        session
            .views(ws)
            .await?
            .into_iter()
            .map(|v| with_kind(serde_json::json!({ "name": v.name }), "view")),
    );
    Ok(Value::Array(out))
}

/// `tarn tables -w ws NAME`: the table of that name, else the view.
async fn relation(session: &tarn::Session, ws: &str, name: &str) -> tarn::Result<Value> {
    match session.table(ws, name).await {
        Ok(t) => Ok(with_kind(t, "table")),
        // Neither a table nor a view: the table's 404; any other error of the view's
        // lookup (a rate limit, a revoked key) is its own.
        Err(e) if e.kind() == tarn::ErrorKind::NotFound => match session.view(ws, name).await {
            Ok(v) => Ok(with_kind(v, "view")),
            Err(v) if v.kind() == tarn::ErrorKind::NotFound => Err(e),
            Err(v) => Err(v),
        },
        Err(e) => Err(e),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A panic inside a statement fails only that statement, which reports it as an
    // error; Rust's own message on standard error before Tarn's would say it twice, in
    // words meant for Tarn's developers. So the message is kept, not printed, and said
    // only if the panic ends the program (it was not a statement's). With
    // RUST_BACKTRACE set, every panic is printed as usual.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::env::var_os("RUST_BACKTRACE").is_some() {
            default_hook(info);
        } else if let Ok(mut last) = LAST_PANIC.lock() {
            *last = Some(info.to_string());
        }
    }));
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tarn: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runtime.block_on(run(cli)))) {
        Ok(code) => code,
        Err(_) => {
            let what = LAST_PANIC.lock().ok().and_then(|mut l| l.take());
            eprintln!(
                "tarn: internal error (a bug; please report it): {}",
                what.unwrap_or_else(|| "a panic".into())
            );
            ExitCode::from(101)
        }
    }
}

/// The last panic's message and place, for the one that ends the program.
static LAST_PANIC: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

async fn run(cli: Cli) -> ExitCode {
    // `--json` holds from the first error on: a database that cannot be opened (locked,
    // corrupt, of a newer format) or a stale `cli.key` is one `{"error": …}` line too.
    let json = match &cli.command {
        Command::Sql { json, .. }
        | Command::Tables { json, .. }
        | Command::Import { json, .. }
        | Command::Files { json, .. } => *json,
        _ => false,
    };
    let options = Options::new().on_index_progress(demo::index_progress);
    let tarn = match Tarn::open_with(&cli.data, options).await {
        Ok(t) => t,
        Err(e) => return report(&e, json),
    };
    let code = command(&tarn, cli, json).await;
    // Closed here, not dropped: a drop on the runtime's thread skips the closing
    // checkpoint, so every run after a write left its rows in the log, and the next
    // open replayed them all into memory (2 GB of rows written by four runs made every
    // later open take 3.9 GB and seconds).
    // A failed close loses nothing (every commit is in the log, replayed at the next
    // open), so it does not turn the command's outcome into a failure.
    if let Err(e) = tarn.close().await {
        eprintln!("tarn: closing the database: {e} (the log keeps every commit)");
    }
    code
}

/// Runs the command of `cli` on the open database `tarn`.
async fn command(tarn: &Tarn, cli: Cli, json: bool) -> ExitCode {
    let session = match local_session(tarn, &cli.data).await {
        Ok(s) => s,
        Err(e) => return report(&e, json),
    };
    match cli.command {
        Command::Sql {
            workspace,
            json,
            params,
            sql,
        } => {
            if let Err(e) = ensure_workspace(&session, &workspace).await {
                return report(&e, json);
            }
            if sql == "-" {
                if !params.is_empty() {
                    eprintln!("tarn: -p cannot be used with statements from standard input");
                    return ExitCode::from(2);
                }
                run_stdin(&session, &workspace, json).await
            } else {
                let mut values = Vec::with_capacity(params.len());
                for p in &params {
                    match serde_json::from_str::<Value>(p) {
                        Ok(v) => values.push(v),
                        Err(e) => {
                            eprintln!("tarn: -p {}: not a JSON value: {e}", printable(p));
                            return ExitCode::from(2);
                        }
                    }
                }
                match session.query(&workspace, &sql, &values).await {
                    Ok(r) => {
                        print_result(&r, json);
                        ExitCode::SUCCESS
                    }
                    Err(e) => report(&e, json),
                }
            }
        }
        Command::Tables {
            workspace,
            table,
            json,
        } => {
            if let Err(e) = ensure_workspace(&session, &workspace).await {
                return report(&e, json);
            }
            let out = match &table {
                None => relations(&session, &workspace).await,
                Some(t) => relation(&session, &workspace, t).await,
            };
            match out {
                Ok(v) if json => {
                    println!("{v}");
                    ExitCode::SUCCESS
                }
                Ok(v) => {
                    println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
                    ExitCode::SUCCESS
                }
                Err(e) => report(&e, json),
            }
        }
        Command::Import {
            workspace,
            table,
            file,
            json,
        } => {
            if let Err(e) = ensure_workspace(&session, &workspace).await {
                return report(&e, json);
            }
            transfer::import(&session, &workspace, &table, &file, json).await
        }
        Command::Export {
            workspace,
            sql,
            file,
            format,
        } => transfer::export(&session, &workspace, &sql, &file, format).await,
        Command::Files {
            workspace,
            json,
            action,
        } => {
            if let Err(e) = ensure_workspace(&session, &workspace).await {
                return report(&e, json);
            }
            transfer::files(&session, &workspace, action, json).await
        }
        Command::Shell { workspace, history } => {
            if let Err(e) = ensure_workspace(&session, &workspace).await {
                return report(&e, false);
            }
            let history = history.unwrap_or_else(|| shell::default_history(&cli.data));
            shell::run(&session, &workspace, &history).await
        }
        Command::Demo => match demo::run(&session, &cli.data).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => report(&e, false),
        },
    }
}

pub(crate) fn report(e: &tarn::Error, json: bool) -> ExitCode {
    if json {
        println!("{}", serde_json::json!({ "error": e }));
    } else {
        // Messages quote names and values from the statement: escaped as data cells are.
        eprintln!("ERROR ({}): {}", e.status(), printable(&e.to_string()));
    }
    ExitCode::from(1)
}

/// The local superuser's session: reuses the key in `DIR/cli.key` or creates user, key
/// and organization `local` once.
async fn local_session(tarn: &Tarn, dir: &Path) -> tarn::Result<Session> {
    let key_path = dir.join("cli.key");
    if let Ok(secret) = std::fs::read_to_string(&key_path)
        && let Ok(s) = tarn.connect(secret.trim()).await
    {
        return ensure_org(s).await;
    }
    let user = match tarn.create_user(LOCAL_EMAIL, "local").await {
        Ok(u) => u.id,
        Err(e) if e.kind() == ErrorKind::Conflict => {
            return Err(tarn::Error::new(
                ErrorKind::Unauthorized,
                format!(
                    "the CLI key {} is missing or revoked; the local user exists already",
                    key_path.display()
                ),
            ));
        }
        Err(e) => return Err(e),
    };
    let key = tarn.create_api_key(&user, "tarn cli").await?;
    write_private(&key_path, &key.secret).map_err(|e| {
        tarn::Error::new(
            ErrorKind::Internal,
            format!("cannot write {}: {}", key_path.display(), io_text(&e)),
        )
    })?;
    let s = tarn.connect(&key.secret).await?;
    ensure_org(s).await
}

fn write_private(path: &Path, secret: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(secret.as_bytes())?;
    f.sync_all()
}

async fn ensure_org(s: Session) -> tarn::Result<Session> {
    match s.create_organization(LOCAL_ORG, "Local").await {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::Conflict => {}
        Err(e) => return Err(e),
    }
    Ok(s.with_org(LOCAL_ORG))
}

pub(crate) async fn ensure_workspace(s: &Session, ws: &str) -> tarn::Result<()> {
    match s.create_workspace(ws, ws).await {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::Conflict => Ok(()),
        Err(e) => Err(e),
    }
}

/// Splits complete `;`-terminated statements off the front of `buf`: a `;` inside a
/// string, quoted name, dollar-quoted string or comment is not a terminator. Returns
/// the statements and the unfinished rest; at end of input the rest is a statement
/// too. It only finds where quotes and comments end (the engine reads the statements):
/// sqlparser's tokenizer, used here before, failed on a bad escape (`E'\u0000'`) as it
/// does on an unterminated string, so one such statement swallowed all after it.
pub(crate) fn split_statements(buf: &str, at_eof: bool) -> (Vec<String>, String) {
    let mut out = Vec::new();
    let mut start = 0;
    let mut scan = Scan {
        bytes: buf.as_bytes(),
        at: 0,
    };
    while let Some(end) = scan.next_terminator() {
        let stmt = buf[start..end].trim();
        if !stmt.is_empty() && !is_only_comments(stmt) {
            out.push(stmt.to_string());
        }
        start = end + 1;
    }
    let rest = &buf[start.min(buf.len())..];
    if at_eof {
        if !rest.trim().is_empty() && !is_only_comments(rest) {
            out.push(rest.trim().to_string());
        }
        (out, String::new())
    } else {
        (out, rest.to_string())
    }
}

/// A scan of SQL text for its `;` terminators (see [`split_statements`]).
struct Scan<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Scan<'_> {
    /// The byte offset of the next `;` outside quotes and comments, or `None` at the
    /// end of the text (also inside an unterminated quote or comment).
    fn next_terminator(&mut self) -> Option<usize> {
        let b = self.bytes;
        while self.at < b.len() {
            let c = b[self.at];
            let next = b.get(self.at + 1).copied();
            match c {
                b';' => {
                    self.at += 1;
                    return Some(self.at - 1);
                }
                b'\'' => {
                    // `E'…'` takes backslash escapes; `'…'` doubles its quotes.
                    let escapes = self.at > 0
                        && matches!(b[self.at - 1], b'e' | b'E')
                        && (self.at < 2 || !is_word(b[self.at - 2]));
                    self.at = self.quoted(self.at + 1, b'\'', escapes)?;
                }
                b'"' => self.at = self.quoted(self.at + 1, b'"', false)?,
                b'-' if next == Some(b'-') => {
                    let end = b[self.at..].iter().position(|&x| x == b'\n')?;
                    self.at += end + 1;
                }
                b'/' if next == Some(b'*') => self.at = self.block_comment(self.at + 2)?,
                b'$' if self.at == 0 || !is_word(b[self.at - 1]) => {
                    match self.dollar_tag(self.at) {
                        Some(tag) => {
                            let body = self.at + tag.len();
                            let end = find(&b[body..], tag)?;
                            self.at = body + end + tag.len();
                        }
                        None => self.at += 1,
                    }
                }
                c if is_word(c) => {
                    // A whole word: a `$` inside one (`a$b`) starts no quote.
                    while self.at < b.len() && (is_word(b[self.at]) || b[self.at] == b'$') {
                        self.at += 1;
                    }
                }
                _ => self.at += 1,
            }
        }
        None
    }

    /// Where a quoted run that began before `from` ends (after its closing quote).
    fn quoted(&self, mut from: usize, quote: u8, escapes: bool) -> Option<usize> {
        let b = self.bytes;
        while from < b.len() {
            match b[from] {
                b'\\' if escapes => from += 2,
                c if c == quote => {
                    if b.get(from + 1) == Some(&quote) {
                        from += 2;
                    } else {
                        return Some(from + 1);
                    }
                }
                _ => from += 1,
            }
        }
        None
    }

    /// Where a `/* … */` comment (which nests) whose body starts at `from` ends.
    fn block_comment(&self, mut from: usize) -> Option<usize> {
        let b = self.bytes;
        let mut depth = 1;
        while from + 1 < b.len() {
            match (b[from], b[from + 1]) {
                (b'/', b'*') => {
                    depth += 1;
                    from += 2;
                }
                (b'*', b'/') => {
                    depth -= 1;
                    from += 2;
                    if depth == 0 {
                        return Some(from);
                    }
                }
                _ => from += 1,
            }
        }
        None
    }

    /// The `$tag$` that starts at `at`, if one does (`$1` is a parameter).
    fn dollar_tag(&self, at: usize) -> Option<&[u8]> {
        let b = self.bytes;
        let mut end = at + 1;
        if b.get(end).is_some_and(u8::is_ascii_digit) {
            return None;
        }
        while end < b.len() && is_word(b[end]) {
            end += 1;
        }
        (b.get(end) == Some(&b'$')).then(|| &b[at..=end])
    }
}

/// A byte of a name: letters, digits, `_` and anything not ASCII.
fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80
}

/// Where `needle` first occurs in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn is_only_comments(s: &str) -> bool {
    Tokenizer::new(&PostgreSqlDialect {}, s)
        .tokenize()
        .map(|t| t.iter().all(|t| matches!(t, Token::Whitespace(_))))
        .unwrap_or(false)
}

async fn run_stdin(session: &Session, ws: &str, json: bool) -> ExitCode {
    let stdin = std::io::stdin();
    let mut buf = String::new();
    let mut failed = false;
    let mut lines = stdin.lock().lines();
    loop {
        let (line, eof) = match lines.next() {
            Some(Ok(l)) => (Some(l), false),
            Some(Err(e)) => {
                let message = if e.kind() == std::io::ErrorKind::InvalidData {
                    "standard input is not valid UTF-8".to_string()
                } else {
                    format!("reading standard input: {}", io_text(&e))
                };
                let kind = if e.kind() == std::io::ErrorKind::InvalidData {
                    ErrorKind::BadRequest
                } else {
                    ErrorKind::Internal
                };
                return report(&tarn::Error::new(kind, message), json);
            }
            None => (None, true),
        };
        if let Some(l) = line {
            buf.push_str(&l);
            buf.push('\n');
        }
        let (stmts, rest) = split_statements(&buf, eof);
        buf = rest;
        for stmt in stmts {
            match session.query(ws, &stmt, &[]).await {
                Ok(r) => print_result(&r, json),
                Err(e) => {
                    failed = true;
                    report(&e, json);
                }
            }
            let _ = std::io::stdout().flush();
        }
        if eof {
            break;
        }
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn print_result(r: &QueryResult, json: bool) {
    if json {
        // Written as it is encoded: a large result is not held a second time as text.
        use std::io::Write as _;
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        if serde_json::to_writer(&mut out, r).is_ok() {
            let _ = writeln!(out);
        }
        let _ = out.flush();
        return;
    }
    // As psql shows a server's notices: on standard error, before the result.
    for n in &r.notices {
        eprintln!("NOTICE: {}", printable(n));
    }
    match &r.rows {
        None => println!(
            "OK, {} row(s) affected ({:.1} ms)",
            r.rows_affected, r.execution_time_ms
        ),
        Some(rows) => {
            print!("{}", format_table(&r.columns, rows));
            println!(
                "({} row{}, {:.1} ms)",
                r.row_count,
                if r.row_count == 1 { "" } else { "s" },
                r.execution_time_ms
            );
        }
    }
}

pub(crate) fn cell_text(v: &Value) -> String {
    match v {
        Value::Null => "NULL".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `s` safe to print on a terminal: a line break becomes a space, and other control
/// characters, line separators and bidirectional controls become escapes such as
/// `\x1B` or `\u{202E}` (data someone else wrote must not reach the terminal as
/// escape sequences that recolor, retitle or reorder it).
/// An I/O error's words without the OS's error number (`No such file or directory`,
/// not `… (os error 2)`): the number says nothing the words do not.
pub(crate) fn io_text(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.rfind(" (os error ") {
        Some(at) if text.ends_with(')') => text[..at].to_string(),
        _ => text,
    }
}

pub(crate) fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' => out.push(' '),
            c if (c as u32) < 0x80 && c.is_control() => {
                out.push_str(&format!("\\x{:02X}", c as u32));
            }
            c if tarn::is_hidden_control(c) => out.push_str(&format!("\\u{{{:04X}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// A plain text table, cells cut at 60 characters.
pub(crate) fn format_table(columns: &[String], rows: &[Vec<Value>]) -> String {
    let cut = |s: String| {
        if s.chars().count() > 60 {
            format!("{}…", s.chars().take(59).collect::<String>())
        } else {
            s
        }
    };
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|v| cut(printable(&cell_text(v)))).collect())
        .collect();
    // Output names can be anything a query wrote (`AS "…"`): escaped as the cells are.
    let columns: Vec<String> = columns.iter().map(|c| printable(c)).collect();
    let mut widths: Vec<usize> = columns.iter().map(|c| c.chars().count()).collect();
    for row in &cells {
        for (i, c) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let line = |vals: &[String]| {
        vals.iter()
            .zip(&widths)
            .map(|(v, w)| format!(" {v:<w$} "))
            .collect::<Vec<_>>()
            .join("|")
    };
    let mut out = String::new();
    out.push_str(&line(&columns));
    out.push('\n');
    out.push_str(
        &widths
            .iter()
            .map(|w| "-".repeat(w + 2))
            .collect::<Vec<_>>()
            .join("+"),
    );
    out.push('\n');
    for row in &cells {
        out.push_str(&line(row));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_on_semicolons_outside_strings() {
        let (stmts, rest) = split_statements("SELECT 'a;b'; SELECT 2;\nSELECT", false);
        assert_eq!(stmts, vec!["SELECT 'a;b'", "SELECT 2"]);
        assert_eq!(rest.trim(), "SELECT");
        let (stmts, _) = split_statements("SELECT 3", true);
        assert_eq!(stmts, vec!["SELECT 3"]);
        let (stmts, rest) = split_statements("SELECT 'unterminated;", false);
        assert!(stmts.is_empty());
        assert_eq!(rest, "SELECT 'unterminated;");
        let (stmts, _) = split_statements("SELECT 'é;ü'\n; SELECT 'ß';", false);
        assert_eq!(stmts, vec!["SELECT 'é;ü'", "SELECT 'ß'"]);
        let (stmts, _) = split_statements("-- only a comment\n", true);
        assert!(stmts.is_empty());
        // A statement the engine will refuse ends where its `;` is, and the rest run.
        let (stmts, rest) = split_statements(
            "SELECT E'\\u0000';\nSELECT E'a\\';b';\nSELECT $$x;$$ || $t$;$t$, $1, \"a;\"\"\" /* ; /* ; */ */ -- ;\n;\nSELECT 2",
            false,
        );
        assert_eq!(
            stmts,
            vec![
                "SELECT E'\\u0000'",
                "SELECT E'a\\';b'",
                "SELECT $$x;$$ || $t$;$t$, $1, \"a;\"\"\" /* ; /* ; */ */ -- ;"
            ]
        );
        assert_eq!(rest.trim(), "SELECT 2");
    }
}
