//! `sql_exec`: arbitrary SQL text and parameters against a small fixed database.
//!
//! Input: UTF-8 (lossy) text of up to eight statements separated by NUL bytes; a
//! statement may end with a `\x01` byte followed by its parameters as a JSON array
//! (text that is not a JSON array is passed as one string parameter). Each input runs
//! on a fresh on-disk copy of a template database holding a plain table with a column
//! of every type and an engine table with an index of every kind (`hnsw`, `maxsim`,
//! `bm25`, `exact_text`), part of it compacted into segments, part still in the log.
//!
//! Checks:
//! - no panic, anywhere (libFuzzer aborts on one; the replay tests catch it);
//! - every statement ends within its statement timeout (2 s) plus a margin: a statement
//!   still running 20 s later is a hang;
//! - errors are only the kinds bad SQL may produce (SPEC §2): 400, 404, 409 — never a
//!   500, which means a bug or an I/O failure;
//! - afterwards, the database closes, reopens with exactly the rows it had (every
//!   table of every workspace), and still reads the same after `VACUUM` compacts each
//!   table.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;
use tarn::{ErrorKind, Options, Session, Tarn};

/// How long a statement may run before Tarn cancels it.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long past the statement timeout a call may take before it counts as a hang.
const HANG: Duration = Duration::from_secs(20);
/// Tables bigger than this are compared by their row count alone.
const SNAPSHOT_ROWS: u64 = 20_000;

/// The template database: its directory and the API key's secret.
struct Template {
    dir: PathBuf,
    secret: String,
}

/// The statements that build the template (after the user, organization and
/// workspace exist).
const SCHEMA: &[&str] = &[
    r#"CREATE TABLE "ws"."t" (id INT8 PRIMARY KEY, a INT2, b INT4, c FLOAT4, d FLOAT8,
        e NUMERIC(10,2), f BOOLEAN, g TEXT, h VARCHAR(20) UNIQUE, u UUID, j JSONB, dt DATE,
        ts TIMESTAMP, tz TIMESTAMPTZ, bin BYTEA, ta TEXT[], ia INT4[], la INT8[],
        s SERIAL, z INT4 NOT NULL DEFAULT 7)"#,
    r#"CREATE TABLE "ws"."docs" (id BIGSERIAL PRIMARY KEY, body TEXT, title TEXT,
        v FLOAT4[3], bag FLOAT4[][], cat INT4, meta JSONB) USING engine"#,
    r#"CREATE INDEX docs_v ON "ws"."docs" USING engine_index (v DESC) WITH (index_type = 'hnsw', m = 8)"#,
    r#"CREATE INDEX docs_bag ON "ws"."docs" USING engine_index (bag DESC) WITH (index_type = 'maxsim')"#,
    r#"CREATE INDEX docs_body ON "ws"."docs" USING engine_index (body DESC) WITH (index_type = 'bm25')"#,
    r#"CREATE INDEX docs_title ON "ws"."docs" USING engine_index (title) WITH (index_type = 'exact_text')"#,
];

const WORDS: &[&str] = &[
    "library",
    "index",
    "retrieval",
    "search",
    "vector",
    "document",
    "query",
    "ranking",
    "catalog",
    "information",
    "science",
    "citation",
];

/// One row of `t` (`i` from 0): every type, NULLs on a pattern.
fn t_row(i: i64) -> String {
    let null = |k: i64| i % 7 == k;
    let or_null = |k: i64, v: String| if null(k) { "NULL".to_string() } else { v };
    format!(
        "({i}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {})",
        or_null(0, format!("{}", (i * 37) % 300 - 150)),
        or_null(1, format!("{}", i * 1_000_003 % 2_000_000_000)),
        or_null(2, format!("{}", i as f64 * 0.5 - 3.0)),
        or_null(3, format!("{:e}", (i as f64 - 10.0) * 1.25e3)),
        or_null(4, format!("{}.{:02}", i * 3 - 40, i % 100)),
        or_null(5, if i % 2 == 0 { "true" } else { "false" }.to_string()),
        or_null(6, format!("'{} {}'", WORDS[i as usize % WORDS.len()], i)),
        or_null(0, format!("'h{i}'")),
        or_null(1, format!("'00000000-0000-4000-8000-{:012}'", i)),
        or_null(
            2,
            format!(
                r#"'{{"k": {i}, "tag": "{}", "a": [1, "x", null]}}'"#,
                WORDS[i as usize % 5]
            )
        ),
        or_null(3, format!("DATE '2024-01-{:02}'", i % 28 + 1)),
        or_null(4, format!("TIMESTAMP '2024-03-04 05:06:{:02}'", i % 60)),
        or_null(5, format!("TIMESTAMPTZ '2024-03-04 05:06:07+0{}'", i % 9)),
        or_null(6, format!("'\\x{:02x}ff00'", i)),
        or_null(0, format!("ARRAY['a{i}', 'b']")),
        or_null(1, format!("ARRAY[{i}, 2, 3]")),
        or_null(2, format!("ARRAY[{}, -1]", i * 1_000_000_007)),
    )
}

/// One row of `docs`.
fn docs_row(i: i64) -> String {
    let w = |k: i64| WORDS[((i * 7 + k * 3) as usize) % WORDS.len()];
    let f = |k: i64| ((i * 31 + k * 17) % 19) as f64 / 9.0 - 1.0;
    let v = if i % 9 == 4 {
        "NULL".to_string()
    } else {
        format!("ARRAY[{}, {}, {}]", f(0), f(1), f(2) + 0.05)
    };
    format!(
        "('{} {} {} of {}', 't{}', {v}, ARRAY[ARRAY[{}, {}, 1], ARRAY[0.5, {}, {}]], {}, '{{\"n\": {i}}}')",
        w(0),
        w(1),
        w(2),
        w(3),
        i % 6,
        f(3),
        f(4),
        f(5),
        f(6),
        i % 10,
    )
}

fn template() -> &'static Template {
    static T: OnceLock<Template> = OnceLock::new();
    T.get_or_init(|| {
        let dir = crate::fresh_dir("sql_exec_template");
        let secret = crate::runtime().block_on(async {
            let tarn = Tarn::open_with(&dir, options()).await.expect("open the template");
            let (secret, s) = crate::signed_in(&tarn, "fuzz").await;
            s.create_workspace("ws", "Workspace").await.expect("a workspace");
            s.create_workspace("other", "Other").await.expect("a workspace");
            let insert = |rows: std::ops::Range<i64>| {
                let t: Vec<String> = rows.clone().map(t_row).collect();
                let d: Vec<String> = rows.map(docs_row).collect();
                [
                    format!(
                        r#"INSERT INTO "ws"."t" (id, a, b, c, d, e, f, g, h, u, j, dt, ts, tz, bin, ta, ia, la) VALUES {}"#,
                        t.join(", ")
                    ),
                    format!(
                        r#"INSERT INTO "ws"."docs" (body, title, v, bag, cat, meta) VALUES {}"#,
                        d.join(", ")
                    ),
                ]
            };
            // Part of the rows compacted into segments (with index files), part only in
            // the log, with deletes and updates on top.
            let statements = SCHEMA
                .iter()
                .map(|sql| sql.to_string())
                .chain(insert(0..40))
                .chain([r#"VACUUM "ws"."t""#.into(), r#"VACUUM "ws"."docs""#.into()])
                .chain(insert(40..48))
                .chain([
                    r#"DELETE FROM "ws"."docs" WHERE id % 11 = 3"#.into(),
                    r#"UPDATE "ws"."t" SET g = g || '!' WHERE id % 5 = 1"#.into(),
                    r#"CREATE TABLE "other"."o" (k TEXT PRIMARY KEY, n INT8)"#.into(),
                    r#"INSERT INTO "other"."o" VALUES ('a', 1), ('b', NULL), ('c', 3)"#.into(),
                ]);
            for sql in statements {
                s.query("ws", &sql, &[])
                    .await
                    .unwrap_or_else(|e| panic!("template: {sql}: {e}"));
            }
            drop(s);
            tarn.close().await.expect("close the template");
            secret
        });
        Template { dir, secret }
    })
}

/// The template database's directory (built on first use).
pub(crate) fn template_dir() -> &'static Path {
    &template().dir
}

/// The template database's API key.
pub(crate) fn template_secret() -> &'static str {
    &template().secret
}

/// Statements that read every table of the template and use every index (the
/// `decoders` target runs them on damaged copies).
pub(crate) const PROBES: &[&str] = &[
    r#"SELECT * FROM "ws"."t""#,
    r#"SELECT * FROM "ws"."t" WHERE id = 5"#,
    r#"SELECT * FROM "ws"."t" WHERE h = 'h7'"#,
    r#"SELECT count(*), sum(b), min(g), max(ts) FROM "ws"."t" WHERE a > 0"#,
    r#"SELECT * FROM "ws"."docs""#,
    r#"SELECT id, v <#> ARRAY[1, 0, 0] AS s FROM "ws"."docs" ORDER BY s DESC LIMIT 5"#,
    r#"SELECT id, v <#> ARRAY[0, 1, 0] AS s FROM "ws"."docs" WHERE cat < 3 ORDER BY s DESC LIMIT 5"#,
    r#"SELECT id, bag <#> ARRAY[ARRAY[1, 0, 0]] AS s FROM "ws"."docs" ORDER BY s DESC LIMIT 5"#,
    r#"SELECT id, body <#> 'library search' AS s FROM "ws"."docs" ORDER BY s DESC LIMIT 5"#,
    r#"SELECT id, (v, body) <#> engine_hybrid_record(ARRAY[1, 1, 0], 'vector index') AS s FROM "ws"."docs" ORDER BY s DESC LIMIT 5"#,
    r#"SELECT * FROM "ws"."docs" WHERE title = 't3'"#,
    r#"SELECT * FROM "other"."o""#,
    r#"INSERT INTO "ws"."t" (id, g) VALUES (1000, 'x')"#,
    r#"VACUUM "ws"."t""#,
    r#"VACUUM "ws"."docs""#,
];

fn options() -> Options {
    Options::new()
        .query_timeout(STATEMENT_TIMEOUT)
        .query_memory(256 << 20)
        .background_maintenance(false)
}

/// The statements of an input: (SQL, parameters).
pub fn parse_input(data: &[u8]) -> Vec<(String, Vec<Value>)> {
    let text = String::from_utf8_lossy(data);
    text.split('\0')
        .take(8)
        .map(|part| match part.split_once('\u{1}') {
            None => (part.to_string(), Vec::new()),
            Some((sql, params)) => {
                let params = match serde_json::from_str::<Value>(params) {
                    Ok(Value::Array(v)) => v,
                    _ => vec![Value::String(params.to_string())],
                };
                (sql.to_string(), params)
            }
        })
        .collect()
}

/// Runs one input (see the module docs); panics on a bug.
pub fn run(data: &[u8]) {
    if data.len() > 64 << 10 {
        return;
    }
    let statements = parse_input(data);
    let template = template();
    let dir = crate::fresh_dir("sql_exec");
    crate::copy_dir(&template.dir, &dir);
    crate::watched(|| crate::runtime().block_on(check(&dir, &template.secret, &statements)));
}

async fn open(dir: &Path, secret: &str) -> (Tarn, Session) {
    let tarn = Tarn::open_with(dir, options())
        .await
        .unwrap_or_else(|e| panic!("the database does not open: {e} ({:?})", e.kind()));
    let s = tarn
        .connect(secret)
        .await
        .unwrap_or_else(|e| panic!("connect after open: {e}"))
        .with_org("fuzz");
    (tarn, s)
}

async fn check(dir: &Path, secret: &str, statements: &[(String, Vec<Value>)]) {
    let (tarn, s) = open(dir, secret).await;
    let verbose = std::env::var_os("TARN_FUZZ_VERBOSE").is_some();
    for (sql, params) in statements {
        let call = s.query("ws", sql, params);
        let outcome = tokio::time::timeout(STATEMENT_TIMEOUT + HANG, call).await;
        if verbose {
            match &outcome {
                Ok(Ok(r)) => eprintln!(
                    "{sql:?}: {} rows, {} affected",
                    r.row_count, r.rows_affected
                ),
                Ok(Err(e)) => eprintln!("{sql:?}: {} {e}", e.status()),
                Err(_) => {}
            }
        }
        match outcome {
            Err(_) => panic!("statement still running after {HANG:?} past its timeout: {sql:?}"),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => match e.kind() {
                ErrorKind::BadRequest | ErrorKind::NotFound | ErrorKind::Conflict => {}
                kind => panic!(
                    "statement {sql:?} with {params:?} failed with {kind:?} ({}): {e}",
                    e.status()
                ),
            },
        }
    }
    let before = snapshot(&s).await;
    drop(s);
    tarn.close().await.unwrap_or_else(|e| panic!("close: {e}"));
    drop(tarn);
    let (tarn, s) = open(dir, secret).await;
    let after = snapshot(&s).await;
    assert_same(&before, &after, "after a reopen");
    for (ws, table) in before.keys() {
        let sql = format!("VACUUM {}.{}", ident(ws), ident(table));
        if let Err(e) = s.query(ws, &sql, &[]).await
            && e.kind() == ErrorKind::Internal
        {
            panic!("{sql} failed: {e}");
        }
    }
    let compacted = snapshot(&s).await;
    assert_same(&before, &compacted, "after VACUUM");
    drop(s);
    tarn.close().await.unwrap_or_else(|e| panic!("close: {e}"));
}

/// A quoted identifier.
fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Every table of every workspace: its rows as sorted JSON text (or its count alone
/// when large).
async fn snapshot(s: &Session) -> BTreeMap<(String, String), Vec<String>> {
    let mut out = BTreeMap::new();
    let workspaces = s
        .workspaces()
        .await
        .unwrap_or_else(|e| panic!("list workspaces: {e}"));
    for ws in workspaces.data {
        let tables = s
            .tables(&ws.id)
            .await
            .unwrap_or_else(|e| panic!("list tables of {}: {e}", ws.id));
        for t in tables {
            let name = format!("{}.{}", ident(&ws.id), ident(&t.name));
            let rows = if t.row_count > SNAPSHOT_ROWS {
                let sql = format!("SELECT count(*) FROM {name}");
                let r = s
                    .query(&ws.id, &sql, &[])
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
                vec![format!("{:?}", r.rows)]
            } else {
                let sql = format!("SELECT * FROM {name}");
                let r = s
                    .query(&ws.id, &sql, &[])
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
                crate::sorted_rows(r.rows)
            };
            out.insert((ws.id.clone(), t.name), rows);
        }
    }
    out
}

fn assert_same(
    before: &BTreeMap<(String, String), Vec<String>>,
    after: &BTreeMap<(String, String), Vec<String>>,
    when: &str,
) {
    let tables =
        |m: &BTreeMap<(String, String), Vec<String>>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(tables(before), tables(after), "tables differ {when}");
    for (k, rows) in before {
        let other = &after[k];
        if rows != other {
            let missing: Vec<_> = rows.iter().filter(|r| !other.contains(r)).take(3).collect();
            let extra: Vec<_> = other.iter().filter(|r| !rows.contains(r)).take(3).collect();
            panic!(
                "table {k:?} differs {when}: {} rows before, {} after; missing {missing:?}, extra {extra:?}",
                rows.len(),
                other.len()
            );
        }
    }
}
