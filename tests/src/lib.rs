//! Helpers shared by Tarn's integration tests: a fresh database with a user, an
//! organization and workspaces, reached only through the public API.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::thread::JoinHandle;

use tarn::arrow::array::{Float64Array, Int64Array, RecordBatch, StringArray};
use tarn::arrow::datatypes::{DataType, Field, Schema};
use tarn::{Session, Tarn};

/// A database with user `test@example.com`, organization `test` and workspaces `ws`
/// and `other`, and the session scoped to `test`.
pub async fn fixture(tarn: &Tarn) -> tarn::Result<Session> {
    Ok(fixture_with_key(tarn).await?.0)
}

/// [`fixture`], also returning the API key's secret (to reconnect after a reopen).
pub async fn fixture_with_key(tarn: &Tarn) -> tarn::Result<(Session, String)> {
    let user = tarn.create_user("test@example.com", "Test").await?;
    let key = tarn.create_api_key(&user.id, "tests").await?;
    let s = tarn.connect(&key.secret).await?;
    s.create_organization("test", "Test").await?;
    let s = s.with_org("test");
    s.create_workspace("ws", "Workspace").await?;
    s.create_workspace("other", "Other").await?;
    Ok((s, key.secret))
}

/// A session of organization `test` for an existing key (after a reopen).
pub async fn reconnect(tarn: &Tarn, secret: &str) -> tarn::Result<Session> {
    Ok(tarn.connect(secret).await?.with_org("test"))
}

/// Rows `ids` of (id INT8, body TEXT, x FLOAT8) with `body(id)` and `x = id % 1000 / scale`.
pub fn id_body_x_batch(
    ids: std::ops::Range<i64>,
    body: impl Fn(i64) -> String,
    scale: f64,
) -> Result<RecordBatch, tarn::arrow::error::ArrowError> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("body", DataType::Utf8, true),
        Field::new("x", DataType::Float64, true),
    ]));
    let ids: Vec<i64> = ids.collect();
    let bodies: Vec<String> = ids.iter().map(|i| body(*i)).collect();
    let x: Vec<f64> = ids.iter().map(|i| (*i % 1000) as f64 / scale).collect();
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(StringArray::from(bodies)),
            Arc::new(Float64Array::from(x)),
        ],
    )
}

/// Held by each test that measures the process's resident memory (the `rss` binary),
/// so that they run one at a time.
pub static RSS_SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// This test binary again, as a child process that runs only the ignored test `name`
/// (the child of a kill -9 test) with its standard error discarded; the caller adds
/// the environment and standard output. `name` is the test's path as
/// `format!("{}::name", module_path!())` gives it: the binary's crate name, which
/// libtest leaves out of test names, is dropped.
pub fn child_test(name: &str) -> std::io::Result<Command> {
    let name = name.split_once("::").map_or(name, |(_, path)| path);
    let mut command = Command::new(std::env::current_exe()?);
    command
        .args([
            "--ignored",
            "--exact",
            name,
            "--nocapture",
            "--test-threads=1",
        ])
        .stderr(Stdio::null());
    Ok(command)
}

/// The lines a child (spawned with piped standard output) prints, as they come, from
/// a thread that ends with the child's output; the test harness's `test name ... `
/// before the first line is left out.
pub fn child_lines(child: &mut Child) -> std::io::Result<(Receiver<String>, JoinHandle<()>)> {
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| std::io::Error::other("the child's output is not piped"))?;
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let line = match line.rsplit_once("... ") {
                Some((_, l)) => l.to_string(),
                None => line,
            };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Ok((rx, reader))
}

/// A small deterministic generator (xorshift64*) for the randomized tests: fixed seeds,
/// repeatable runs.
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number below `n` (0 for 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64().checked_rem(n).unwrap_or(0)
    }
}

/// How a JSON result value is written in `.slt` files: NULL, text as is, `(empty)` for
/// the empty string, anything else as JSON.
pub fn slt_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => "NULL".into(),
        serde_json::Value::String(s) if s.is_empty() => "(empty)".into(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// BM25 scores as tantivy itself gives them: one tantivy index of `texts` (id, text),
/// analyzed by tantivy's own tokenizer `tokenizer` (`en_stem`, `default`, `whitespace`
/// or `raw`), queried through tantivy's query parser. Texts that match nothing are
/// absent.
pub fn tantivy_scores(
    texts: &[(i64, &str)],
    tokenizer: &str,
    query: &str,
) -> std::collections::HashMap<i64, f32> {
    use tantivy::schema::{FAST, IndexRecordOption, Schema, TextFieldIndexing, TextOptions};
    let mut b = Schema::builder();
    let field = b.add_text_field(
        "text",
        TextOptions::default().set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer(tokenizer)
                .set_index_option(IndexRecordOption::WithFreqsAndPositions),
        ),
    );
    let id = b.add_i64_field("id", FAST);
    let index = tantivy::Index::create_in_ram(b.build());
    let mut w: tantivy::IndexWriter = index
        .writer_with_num_threads(1, 50_000_000)
        .expect("tantivy writer");
    for (i, t) in texts {
        let mut d = tantivy::TantivyDocument::new();
        d.add_text(field, t);
        d.add_i64(id, *i);
        w.add_document(d).expect("tantivy add");
    }
    w.commit().expect("tantivy commit");
    let searcher = index.reader().expect("tantivy reader").searcher();
    let parser = tantivy::query::QueryParser::for_index(&index, vec![field]);
    let q = parser.parse_query(query).expect("tantivy parses the query");
    let top = searcher
        .search(
            &q,
            &tantivy::collector::TopDocs::with_limit(texts.len().max(1)).order_by_score(),
        )
        .expect("tantivy search");
    let mut out = std::collections::HashMap::new();
    for (score, addr) in top {
        let seg = searcher.segment_reader(addr.segment_ord);
        let col = seg.fast_fields().i64("id").expect("id column");
        out.insert(col.first(addr.doc_id).expect("id"), score);
    }
    out
}

/// The texts of the CISI collection shipped in `data/cisi` (1460 abstracts).
pub fn cisi_texts() -> Vec<String> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../data/cisi/corpus.jsonl"
    ))
    .expect("data/cisi/corpus.jsonl");
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("corpus line");
            v["text"].as_str().unwrap_or_default().to_string()
        })
        .collect()
}

/// Anonymous resident memory of this process in bytes (Linux), if known: the memory
/// tests' measure (pages of mapped segment files don't count).
pub fn rss_anon() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("RssAnon:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Runs the ignored test `name` of this binary (named as for [`child_test`]) as a child
/// with `envs`, lets it print
/// `lines` lines (or waits up to `wait` for them), waits `pause` more, kills it
/// (SIGKILL) and returns every line it printed: what a kill -9 test learns of the
/// work the child acknowledged.
pub fn run_and_kill(
    name: &str,
    envs: &[(&str, String)],
    lines: usize,
    wait: std::time::Duration,
    pause: std::time::Duration,
) -> std::io::Result<Vec<String>> {
    let mut command = child_test(name)?;
    for (k, v) in envs {
        command.env(k, v);
    }
    let mut child = command.stdout(Stdio::piped()).spawn()?;
    let (rx, reader) = child_lines(&mut child)?;
    let mut out = Vec::new();
    while out.len() < lines {
        match rx.recv_timeout(wait) {
            Ok(line) => out.push(line),
            Err(_) => break,
        }
    }
    std::thread::sleep(pause);
    child.kill()?;
    child.wait()?;
    out.extend(rx.iter());
    let _ = reader.join();
    Ok(out)
}

/// The ways workspace `cw` of organization `test` (made by [`fixture`]) goes while an
/// upload into it streams: deleted, deleted and made again, or its organization deleted
/// and made again with the same workspaces.
pub const WORKSPACE_REPLACEMENTS: [&str; 3] = ["recreated", "deleted", "org recreated"];

/// Does what `case` of [`WORKSPACE_REPLACEMENTS`] says to workspace `cw`.
pub async fn replace_workspace(s: &Session, case: &str) -> tarn::Result<()> {
    match case {
        "recreated" => {
            s.delete_workspace("cw").await?;
            s.create_workspace("cw", "New").await?;
        }
        "deleted" => s.delete_workspace("cw").await?,
        _ => {
            s.delete_organization("test").await?;
            s.create_organization("test", "Again").await?;
            s.create_workspace("ws", "Workspace").await?;
            s.create_workspace("other", "Other").await?;
            s.create_workspace("cw", "New").await?;
        }
    }
    Ok(())
}
