//! The `tarn` binary end to end: modes, JSON output, errors and exit statuses (SPEC §9).

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

fn tarn(dir: &std::path::Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tarn"))
        .arg("--data")
        .arg(dir)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tarn");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write stdin");
    }
    child.wait_with_output().expect("tarn runs")
}

fn json_lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[test]
fn one_statement_with_params() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = tarn(
        dir.path(),
        &[
            "sql",
            "-w",
            "ws",
            "--json",
            r#"CREATE TABLE "ws"."t" (id INT, v TEXT, e FLOAT4[]) USING engine"#,
        ],
        None,
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(json_lines(&out)[0]["rows"], Value::Null);
    let out = tarn(
        dir.path(),
        &[
            "sql",
            "-w",
            "ws",
            "--json",
            r#"INSERT INTO "ws"."t" VALUES ($1, $2, $3) RETURNING *"#,
            "-p",
            "42",
            "-p",
            r#""text""#,
            "-p",
            "[0.1, 0.2]",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0));
    let r = &json_lines(&out)[0];
    assert_eq!(r["rows"], json!([[42, "text", [0.1, 0.2]]]));
    assert_eq!(r["columns"], json!(["id", "v", "e"]));

    // The key file is private to its owner.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.path().join("cli.key"))
        .expect("cli.key")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // A failing statement: the error line and exit status 1.
    let out = tarn(
        dir.path(),
        &["sql", "-w", "ws", "--json", r#"SELECT * FROM "ws"."nope""#],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        json_lines(&out)[0],
        json!({"error": {"status": 404, "kind": "NotFound", "message": "relation \"ws\".\"nope\" does not exist"}})
    );
    // Usage errors exit with 2.
    assert_eq!(
        tarn(
            dir.path(),
            &["sql", "-w", "ws", "SELECT 1", "-p", "not json"],
            None
        )
        .status
        .code(),
        Some(2)
    );
    assert_eq!(
        tarn(dir.path(), &["frobnicate"], None).status.code(),
        Some(2)
    );

    // Plain output is a table.
    let out = tarn(
        dir.path(),
        &["sql", "-w", "ws", r#"SELECT id, v FROM "ws"."t""#],
        None,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("id") && text.contains("42") && text.contains("(1 row"),
        "{text}"
    );
}

#[test]
fn statements_from_stdin_go_on_after_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = "CREATE TABLE \"ws\".\"s\" (v TEXT) USING engine;\nINSERT INTO \"ws\".\"s\" VALUES ('a;b'),\n  ('c');\nSELECT * FROM nope;\nSELECT count(*) FROM \"ws\".\"s\"";
    let out = tarn(dir.path(), &["sql", "-w", "ws", "--json", "-"], Some(input));
    assert_eq!(out.status.code(), Some(1), "one statement failed");
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert_eq!(lines[1]["rows_affected"], 2);
    assert_eq!(lines[2]["error"]["status"], 404);
    assert_eq!(lines[3]["rows"], json!([[2]]));

    let out = tarn(
        dir.path(),
        &["sql", "-w", "ws", "--json", "-"],
        Some("SELECT 1;\n"),
    );
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn tables_lists_and_describes() {
    let dir = tempfile::tempdir().expect("tempdir");
    tarn(
        dir.path(),
        &[
            "sql",
            "-w",
            "ws",
            r#"CREATE TABLE "ws"."docs" (id SERIAL PRIMARY KEY, body TEXT)"#,
        ],
        None,
    );
    tarn(
        dir.path(),
        &[
            "sql",
            "-w",
            "ws",
            r#"INSERT INTO "ws"."docs" (body) VALUES ('x')"#,
        ],
        None,
    );
    let out = tarn(dir.path(), &["tables", "-w", "ws", "--json"], None);
    assert_eq!(
        json_lines(&out)[0],
        json!([{"name": "docs", "row_count": 1}])
    );
    let out = tarn(dir.path(), &["tables", "-w", "ws", "docs", "--json"], None);
    let d = &json_lines(&out)[0];
    assert_eq!(d["table_name"], "docs");
    assert_eq!(
        d["columns"][0]["default"],
        "nextval('docs_id_seq'::regclass)"
    );
    let out = tarn(dir.path(), &["tables", "-w", "ws", "nope", "--json"], None);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json_lines(&out)[0]["error"]["status"], 404);
}

/// The demo loads CISI, builds both indexes and shows each kind of search; a second
/// run reuses the data (and its answers do not change); the data is then open to
/// `tarn sql`, with the indexes in place.
#[test]
fn demo_searches_every_way_and_reuses_its_data() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = tarn(dir.path(), &["demo"], None);
    let text = String::from_utf8_lossy(&first.stdout).to_string();
    assert!(
        first.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&first.stderr)
    );
    for expected in [
        "loaded 1460 CISI abstracts",
        "HNSW index ready",
        "BM25 index ready",
        "body <#> 'retrieval of",
        "embedding <#> (SELECT embedding",
        "engine_hybrid_scores($1::float4[], $2)",
        "WHERE body ILIKE '%catalog%'",
        "index=docs_embedding",
        "docs_body (bm25) fusion=rrf",
        "sql -w demo",
    ] {
        assert!(
            text.contains(expected),
            "{expected:?} missing from:\n{text}"
        );
    }
    // Every search printed five rows, with their time.
    assert_eq!(text.matches("(5 rows, ").count(), 4, "{text}");
    // The top BM25 hit for "retrieval of \"scientific information\" -medical".
    assert!(
        text.contains("\n 1191 | Basis of Scientific Information"),
        "{text}"
    );

    let second = tarn(dir.path(), &["demo"], None);
    let again = String::from_utf8_lossy(&second.stdout).to_string();
    assert!(second.status.success(), "{again}");
    assert!(again.contains("already loaded"), "{again}");
    assert!(!again.contains("loaded 1460"), "{again}");
    // The same rows and scores (only the timings differ).
    let tables = |t: &str| {
        t.lines()
            .filter(|l| l.starts_with(' ') && l.contains(" | "))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(tables(&text), tables(&again));

    let out = tarn(
        dir.path(),
        &[
            "sql",
            "-w",
            "demo",
            "--json",
            r#"SELECT id FROM "demo"."docs" ORDER BY body <#> 'information science' DESC LIMIT 3"#,
        ],
        None,
    );
    assert_eq!(json_lines(&out)[0]["row_count"], 3);
    let indexes = std::fs::read_dir(dir.path().join("segments"))
        .expect("segments")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".idx"))
        .count();
    assert_eq!(indexes, 2, "an HNSW and a BM25 file for the one segment");
}
