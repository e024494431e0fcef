//! The `tarn` binary end to end: modes, JSON output, errors and exit statuses (SPEC §9).

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

fn tarn(dir: &std::path::Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tarn"))
        .env_remove("RUST_BACKTRACE")
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
fn each_run_closes_the_database_so_the_next_replays_nothing() {
    // The rows a run writes are sealed into a segment when it ends: a run that left
    // them in the log made every later open replay them into memory (2 GB written by
    // four runs, 3.9 GB at each open).
    let dir = tempfile::tempdir().expect("tempdir");
    let out = tarn(
        dir.path(),
        &[
            "sql",
            "-w",
            "ws",
            "CREATE TABLE ws.t AS SELECT g, repeat('x', 1000) AS s FROM generate_series(1, 2000) g",
        ],
        None,
    );
    assert_code(&out, 0, "create");
    let sizes = |sub: &str| -> Vec<u64> {
        std::fs::read_dir(dir.path().join(sub))
            .expect("read dir")
            .map(|e| e.expect("entry").metadata().expect("metadata").len())
            .collect()
    };
    assert!(
        sizes("wal").iter().all(|&len| len < 4096),
        "the log still holds the rows: {:?}",
        sizes("wal")
    );
    assert!(
        sizes("segments").iter().sum::<u64>() > 0,
        "no segment was written"
    );
    let out = tarn(
        dir.path(),
        &["sql", "-w", "ws", "SELECT count(*) FROM ws.t"],
        None,
    );
    assert_code(&out, 0, "count");
    assert!(stdout_text(&out).contains("2000"));
}

/// A panic inside a statement is its error, said once.
#[test]
fn a_statement_that_panics_inside_reports_one_error_line() {
    // A 60 MB constant over 40 rows (Arrow panicked past 2 GiB of text in one batch;
    // the constant is now sized first): the statement fails with a 400, and no panic
    // message is printed before it.
    let dir = tempfile::tempdir().expect("tempdir");
    // The second statement's work runs on the CLI's own thread.
    for sql in [
        "SELECT length(s) FROM (SELECT repeat('x', 60000000) s FROM generate_series(1, 40)) t",
        "SELECT g, repeat('x', 60000000) FROM generate_series(1, 40) g",
    ] {
        let out = tarn(dir.path(), &["sql", "-w", "ws", sql], None);
        assert_code(&out, 1, sql);
        let text = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(
            text.starts_with("ERROR (400): ") && text.lines().count() == 1,
            "{sql}: {text}"
        );
    }
}

/// Data printed as a table cannot drive the terminal: escape sequences, BEL and
/// bidirectional controls in values are shown as escapes.
#[test]
fn tables_print_control_characters_as_escapes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = tarn(
        dir.path(),
        &[
            "sql",
            "-w",
            "ws",
            "SELECT chr(27) || '[31mRED' || chr(7) AS \"x\u{1b}[2J\", 'c' || chr(8238) || 'd' AS z",
        ],
        None,
    );
    assert_code(&out, 0, "select");
    let text = stdout_text(&out);
    assert!(!text.contains(['\u{1b}', '\u{7}', '\u{202e}']), "{text:?}");
    assert!(text.contains("\\x1B[31mRED\\x07"), "{text}");
    assert!(text.contains("c\\u{202E}d"), "{text}");
    assert!(text.contains("x\\x1B[2J"), "{text}");
    // Error messages quote names from the statement: escaped the same way.
    let out = tarn(
        dir.path(),
        &[
            "sql",
            "-w",
            "ws",
            "SELECT * FROM \"ws\".\"t\u{1b}]0;pwned\u{7}\u{202e}\"",
        ],
        None,
    );
    assert_code(&out, 1, "missing table");
    let text = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!text.contains(['\u{1b}', '\u{7}', '\u{202e}']), "{text:?}");
    assert!(text.contains("t\\x1B]0;pwned\\x07\\u{202E}"), "{text}");
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
    tarn(
        dir.path(),
        &[
            "sql",
            "-w",
            "ws",
            r#"CREATE VIEW "ws"."bodies" AS SELECT body FROM "ws"."docs""#,
        ],
        None,
    );
    let out = tarn(dir.path(), &["tables", "-w", "ws", "--json"], None);
    assert_eq!(
        json_lines(&out)[0],
        json!([
            {"name": "docs", "row_count": 1, "kind": "table"},
            {"name": "bodies", "kind": "view"}
        ])
    );
    let out = tarn(
        dir.path(),
        &["tables", "-w", "ws", "bodies", "--json"],
        None,
    );
    let v = &json_lines(&out)[0];
    assert_eq!(v["kind"], "view");
    assert_eq!(
        v["columns"],
        json!([{"name": "body", "type": "text", "nullable": true, "default": null}])
    );
    assert!(
        v["definition"]
            .as_str()
            .unwrap_or_default()
            .contains("\"docs\""),
        "{v}"
    );
    let out = tarn(dir.path(), &["tables", "-w", "ws", "docs", "--json"], None);
    let d = &json_lines(&out)[0];
    assert_eq!(d["kind"], "table");
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

fn stdout_text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn assert_code(out: &Output, code: i32, what: &str) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{what}: stdout {} stderr {}",
        stdout_text(out),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `import` makes a table from CSV and NDJSON (no progress bar when piped); `export`
/// writes CSV, NDJSON and Arrow IPC that read back as the same rows; usage errors exit
/// 2 and failed statements 1.
#[test]
fn import_and_export_round_trip() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let csv = dir.path().join("papers.csv");
    std::fs::write(
        &csv,
        "id,title,score,e\n1,plain,0.5,\"[1,0]\"\n2,\"with, comma and \"\"quotes\"\"\",,\"[0,1]\"\n3,\"two\nlines\",2.25,\"[0.5,0.5]\"\n",
    )
    .expect("write csv");
    let out = tarn(
        &data,
        &[
            "import",
            "-w",
            "ws",
            "papers",
            csv.to_str().expect("path"),
            "--json",
        ],
        None,
    );
    assert_code(&out, 0, "import");
    assert_eq!(
        json_lines(&out)[0],
        json!({"name": "papers", "row_count": 3,
               "columns": ["id", "title", "score", "e"]})
    );
    assert!(out.stderr.is_empty(), "no bar when piped: {:?}", out.stderr);
    let all = r#"SELECT * FROM "ws"."papers" ORDER BY id"#;
    let original =
        json_lines(&tarn(&data, &["sql", "-w", "ws", "--json", all], None))[0]["rows"].clone();
    assert_eq!(
        original[1],
        json!([2, "with, comma and \"quotes\"", null, [0.0, 1.0]])
    );

    // CSV out and back in: the same rows.
    let exported = dir.path().join("out.csv");
    let out = tarn(
        &data,
        &["export", "-w", "ws", all, exported.to_str().expect("path")],
        None,
    );
    assert_code(&out, 0, "export csv");
    assert!(String::from_utf8_lossy(&out.stderr).contains("exported 3 rows"));
    let text = std::fs::read_to_string(&exported).expect("csv written");
    assert!(
        text.starts_with("id,title,score,e\n1,plain,0.5,\"[1.0,0.0]\"\n"),
        "{text}"
    );
    let out = tarn(
        &data,
        &[
            "import",
            "-w",
            "ws",
            "again",
            exported.to_str().expect("path"),
        ],
        None,
    );
    assert_code(&out, 0, "import the export");
    assert!(stdout_text(&out).starts_with("imported 3 rows into \"ws\".\"again\""));
    let again = r#"SELECT * FROM "ws"."again" ORDER BY id"#;
    assert_eq!(
        json_lines(&tarn(&data, &["sql", "-w", "ws", "--json", again], None))[0]["rows"],
        original
    );

    // NDJSON to standard output, keys in column order; and back in from a file.
    let out = tarn(
        &data,
        &["export", "-w", "ws", "--format", "ndjson", all, "-"],
        None,
    );
    assert_code(&out, 0, "export ndjson");
    let text = stdout_text(&out);
    assert!(
        text.starts_with("{\"id\":1,\"title\":\"plain\",\"score\":0.5,\"e\":[1.0,0.0]}\n"),
        "{text}"
    );
    let nd = dir.path().join("out.ndjson");
    std::fs::write(&nd, &text).expect("write ndjson");
    let out = tarn(
        &data,
        &["import", "-w", "ws", "nd", nd.to_str().expect("path")],
        None,
    );
    assert_code(&out, 0, "import ndjson");
    let nd_all = r#"SELECT * FROM "ws"."nd" ORDER BY id"#;
    assert_eq!(
        json_lines(&tarn(&data, &["sql", "-w", "ws", "--json", nd_all], None))[0]["rows"],
        original
    );

    // Arrow IPC: the file format's magic at both ends.
    let arrow = dir.path().join("out.arrow");
    let out = tarn(
        &data,
        &["export", "-w", "ws", all, arrow.to_str().expect("path")],
        None,
    );
    assert_code(&out, 0, "export arrow");
    let bytes = std::fs::read(&arrow).expect("arrow written");
    assert!(bytes.starts_with(b"ARROW1") && bytes.ends_with(b"ARROW1"));

    // Failures: 1 for a failed statement or an existing table, 2 for usage.
    let bad = dir.path().join("bad.csv");
    let out = tarn(
        &data,
        &[
            "export",
            "-w",
            "ws",
            "SELECT * FROM nope",
            bad.to_str().expect("path"),
        ],
        None,
    );
    assert_code(&out, 1, "export of a failing query");
    assert!(!bad.exists(), "no file for a failed export");
    assert!(String::from_utf8_lossy(&out.stderr).contains("ERROR (404)"));
    let out = tarn(&data, &["export", "-w", "ws", all, "out.txt"], None);
    assert_code(&out, 2, "unknown extension");
    let out = tarn(
        &data,
        &[
            "import",
            "-w",
            "ws",
            "papers",
            csv.to_str().expect("path"),
            "--json",
        ],
        None,
    );
    assert_code(&out, 1, "existing table");
    assert_eq!(json_lines(&out)[0]["error"]["status"], 409);
    let out = tarn(
        &data,
        &["import", "-w", "ws", "x", "/nonexistent/file.csv"],
        None,
    );
    assert_code(&out, 1, "missing file");
    let out = tarn(&data, &["import", "-w", "ws"], None);
    assert_code(&out, 2, "missing arguments");
    for cmd in ["sql", "tables", "import", "export", "files", "demo"] {
        let out = tarn(&data, &[cmd, "--help"], None);
        assert_code(&out, 0, cmd);
        assert!(
            stdout_text(&out).contains("Example"),
            "{cmd} --help has an example"
        );
    }
}

/// Every type an export writes comes back from its CSV and from its NDJSON as the same
/// rows with the same column types (SPEC §9): NULL and the empty string stay apart, text
/// keeps its commas, quotes and line ends, jsonb and vectors their values.
#[test]
fn every_exported_type_imports_back_the_same() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    for sql in [
        r#"CREATE TABLE "ws"."every" (id INT8, n INT8, f FLOAT8, b BOOL, t TEXT, d DATE,
           ts TIMESTAMPTZ, j JSONB, v FLOAT4[]) USING engine"#,
        r#"INSERT INTO "ws"."every" VALUES
           (1, 9223372036854775807, 1.5, true, 'plain', '2024-02-29',
            '2024-01-02 03:04:05.123456+00', '{"a": 1, "b": [1, "x"]}', ARRAY[0.1, -2.5, 3]),
           (2, -9223372036854775808, -0.25, false, '', '1999-12-31',
            '1970-01-01T00:00:00Z', '[1, "x", null]', ARRAY[1e-7, 0, 1]),
           (3, 0, 1e20, NULL, 'with, comma and "quotes"', NULL,
            '2024-06-30 23:59:59.5+02', '{"nested": {"k": null}, "s": "a,\"b\"\nc"}', NULL),
           (4, NULL, 3.0, true, 'two
lines' || chr(13) || chr(10) || 'and a CR' || chr(13), '2024-01-01', NULL, NULL,
            ARRAY[4, 5, 6]),
           (5, -7, NULL, false, ' padded, ', '2000-01-01', '2000-01-01 00:00:00+00', '{}',
            ARRAY[0.5, 0.25, 0.125]),
           (6, 42, -0.0, true, NULL, '2024-01-03', '2024-01-03 00:00:00Z', '{"x": ""}',
            ARRAY[1, 1, 1])"#,
    ] {
        let out = tarn(&data, &["sql", "-w", "ws", sql], None);
        assert_code(&out, 0, sql);
    }
    let rows = |t: &str| {
        let sql = format!(r#"SELECT * FROM "ws"."{t}" ORDER BY id"#);
        json_lines(&tarn(&data, &["sql", "-w", "ws", "--json", &sql], None))[0]["rows"].clone()
    };
    let types = |t: &str| {
        let d = &json_lines(&tarn(&data, &["tables", "-w", "ws", t, "--json"], None))[0];
        d["columns"]
            .as_array()
            .map(|c| c.iter().map(|c| c["type"].clone()).collect::<Vec<_>>())
            .unwrap_or_default()
    };
    let original = rows("every");
    assert_eq!(original[1][4], json!(""));
    assert_eq!(original[5][4], Value::Null);
    let want_types = types("every");
    assert_eq!(
        want_types,
        [
            "int8",
            "int8",
            "float8",
            "bool",
            "text",
            "date",
            "timestamptz",
            "jsonb",
            "_float4"
        ]
    );
    for ext in ["csv", "ndjson"] {
        let file = dir.path().join(format!("every.{ext}"));
        let path = file.to_str().expect("path");
        let out = tarn(
            &data,
            &["export", "-w", "ws", r#"SELECT * FROM "ws"."every""#, path],
            None,
        );
        assert_code(&out, 0, "export");
        let table = format!("from_{ext}");
        let out = tarn(&data, &["import", "-w", "ws", &table, path], None);
        assert_code(&out, 0, "import");
        assert_eq!(rows(&table), original, "{ext}");
        assert_eq!(types(&table), want_types, "{ext}");
    }
}

/// A one-column export writes a NULL as an empty line, and the import reads it back as
/// a NULL row, as PostgreSQL's `COPY … CSV` does (it had skipped the empty lines, so
/// 4 exported rows came back as 2); files of several columns still skip empty lines.
#[test]
fn a_one_column_export_keeps_its_null_rows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    for sql in [
        r#"CREATE TABLE "ws"."one" (id INT8, t TEXT) USING engine"#,
        r#"INSERT INTO "ws"."one" VALUES (1, NULL), (2, 'x'), (3, NULL), (4, NULL), (5, ''), (6, NULL)"#,
    ] {
        assert_code(&tarn(&data, &["sql", "-w", "ws", sql], None), 0, sql);
    }
    let rows = |sql: &str| {
        json_lines(&tarn(&data, &["sql", "-w", "ws", "--json", sql], None))[0]["rows"].clone()
    };
    let original = rows(r#"SELECT t FROM "ws"."one" ORDER BY id"#);
    for (i, crlf) in [false, true].into_iter().enumerate() {
        let file = dir.path().join(format!("one{i}.csv"));
        let path = file.to_str().expect("path");
        let out = tarn(
            &data,
            &[
                "export",
                "-w",
                "ws",
                r#"SELECT t FROM "ws"."one" ORDER BY id"#,
                path,
            ],
            None,
        );
        assert_code(&out, 0, "export");
        let text = std::fs::read_to_string(&file).expect("read");
        assert_eq!(text, "t\n\nx\n\n\n\"\"\n\n");
        if crlf {
            std::fs::write(&file, text.replace('\n', "\r\n")).expect("write");
        }
        let table = format!("back{i}");
        assert_code(
            &tarn(&data, &["import", "-w", "ws", &table, path], None),
            0,
            "import",
        );
        assert_eq!(
            rows(&format!(r#"SELECT t FROM "ws"."{table}""#)),
            original,
            "crlf: {crlf}"
        );
    }
    let file = dir.path().join("two.csv");
    std::fs::write(&file, "a,b\n1,2\n\n3,4\n\n").expect("write");
    let path = file.to_str().expect("path");
    assert_code(
        &tarn(&data, &["import", "-w", "ws", "two", path], None),
        0,
        "import",
    );
    assert_eq!(
        rows(r#"SELECT a, b FROM "ws"."two""#),
        json!([[1, 2], [3, 4]])
    );
}

/// A jsonb column's JSON strings and JSON `null` go to CSV as their JSON text (`"s"`,
/// `null`), not as bare text and NULL's empty field, and read back as jsonb beside
/// objects and arrays: `null` stays apart from NULL, and `"s"` a string.
#[test]
fn jsonb_scalars_survive_a_csv_round_trip() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    for sql in [
        r#"CREATE TABLE "ws"."j" (id INT8, doc JSONB) USING engine"#,
        r#"INSERT INTO "ws"."j" VALUES (1, '"str"'), (2, 'null'), (3, NULL),
           (4, '{"a": [1, null]}'), (5, '""'), (6, '"with, comma"'), (7, '[]')"#,
    ] {
        assert_code(&tarn(&data, &["sql", "-w", "ws", sql], None), 0, sql);
    }
    let file = dir.path().join("j.csv");
    let path = file.to_str().expect("path");
    let out = tarn(
        &data,
        &["export", "-w", "ws", r#"SELECT * FROM "ws"."j""#, path],
        None,
    );
    assert_code(&out, 0, "export");
    let text = std::fs::read_to_string(&file).expect("read");
    assert!(text.contains("1,\"\"\"str\"\"\"\n"), "{text}");
    assert!(text.contains("2,null\n") && text.contains("3,\n"), "{text}");
    assert_code(
        &tarn(&data, &["import", "-w", "ws", "back", path], None),
        0,
        "import",
    );
    let seen = |t: &str| {
        let sql = format!(
            r#"SELECT id, doc, doc IS NULL, jsonb_typeof(doc) FROM "ws"."{t}" ORDER BY id"#
        );
        json_lines(&tarn(&data, &["sql", "-w", "ws", "--json", &sql], None))[0]["rows"].clone()
    };
    assert_eq!(seen("back"), seen("j"));
    assert_eq!(seen("back")[1], json!([2, null, false, "null"]));
    let d = &json_lines(&tarn(
        &data,
        &["tables", "-w", "ws", "back", "--json"],
        None,
    ))[0];
    assert_eq!(d["columns"][1]["type"], "jsonb");
}

/// `files put|ls|get|rm`: the bytes come back as stored, `get` never overwrites a file
/// it was not told to, and a deleted file is a 404.
#[test]
fn files_put_list_get_remove() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let src = dir.path().join("report.pdf");
    let body: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&src, &body).expect("write");
    let out = tarn(
        &data,
        &[
            "files",
            "-w",
            "docs",
            "put",
            src.to_str().expect("path"),
            "--json",
        ],
        None,
    );
    assert_code(&out, 0, "put");
    let rec = json_lines(&out)[0].clone();
    assert_eq!(rec["filename"], "report.pdf");
    assert_eq!(rec["media_type"], "application/pdf");
    assert_eq!(rec["size_bytes"], body.len());
    let id = rec["id"].as_str().expect("id").to_string();

    let out = tarn(&data, &["files", "-w", "docs", "ls", "--json"], None);
    assert_code(&out, 0, "ls");
    assert_eq!(json_lines(&out)[0]["total_count"], 1);
    let out = tarn(&data, &["files", "-w", "docs", "ls"], None);
    assert!(
        stdout_text(&out).contains("report.pdf")
            && stdout_text(&out).contains("(1 of 1 file, from 0)")
    );

    let copy = dir.path().join("copy.pdf");
    let out = tarn(
        &data,
        &[
            "files",
            "-w",
            "docs",
            "get",
            &id,
            copy.to_str().expect("path"),
        ],
        None,
    );
    assert_code(&out, 0, "get to a file");
    assert_eq!(std::fs::read(&copy).expect("copied"), body);
    let out = tarn(&data, &["files", "-w", "docs", "get", &id, "-"], None);
    assert_code(&out, 0, "get to stdout");
    assert_eq!(out.stdout, body);
    // Without a name: the stored name in the current directory, never replaced.
    let cwd = tempfile::tempdir().expect("cwd");
    let get_here = || {
        Command::new(env!("CARGO_BIN_EXE_tarn"))
            .current_dir(cwd.path())
            .arg("--data")
            .arg(&data)
            .args(["files", "-w", "docs", "get", &id])
            .output()
            .expect("tarn runs")
    };
    assert_code(&get_here(), 0, "get by stored name");
    assert_eq!(
        std::fs::read(cwd.path().join("report.pdf")).expect("there"),
        body
    );
    assert_code(&get_here(), 1, "get onto an existing file");

    let out = tarn(&data, &["files", "-w", "docs", "rm", &id], None);
    assert_code(&out, 0, "rm");
    let out = tarn(
        &data,
        &["files", "-w", "docs", "get", &id, "-", "--json"],
        None,
    );
    assert_code(&out, 1, "get after rm");
    assert_eq!(json_lines(&out)[0]["error"]["status"], 404);
    let out = tarn(&data, &["files", "-w", "docs", "put", "/nonexistent"], None);
    assert_code(&out, 1, "put of a missing file");
    let out = tarn(&data, &["files", "-w", "docs", "frob"], None);
    assert_code(&out, 2, "unknown action");
}

/// `tarn shell` in a real pseudo-terminal: multi-line statements, the backslash
/// commands, errors that do not end it, Ctrl-C cancelling a running statement and
/// dropping unfinished input, `\i`, Ctrl-D, and the history file.
#[test]
fn shell_in_a_terminal() -> Result<(), rexpect::error::Error> {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let history = dir.path().join("history");
    let script = dir.path().join("script.sql");
    std::fs::write(
        &script,
        "INSERT INTO \"ws\".\"t\" VALUES (2, NULL);\nSELECT count(*) AS n FROM \"ws\".\"t\";\n",
    )
    .expect("script");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tarn"));
    cmd.arg("--data")
        .arg(&data)
        .args(["shell", "-w", "ws", "--history"])
        .arg(&history);
    let mut p = rexpect::session::spawn_command(cmd, Some(60_000))?;
    p.exp_string("Type \\? for help")?;
    p.exp_string("ws=> ")?;
    // A statement over two lines: the second prompt says it continues.
    p.send_line("CREATE TABLE \"ws\".\"t\" (id INT8 PRIMARY KEY,")?;
    p.exp_string("ws-> ")?;
    p.send_line("e FLOAT4[]) USING engine;")?;
    p.exp_string("OK, 0 row(s) affected")?;
    p.send_line("INSERT INTO \"ws\".\"t\" VALUES (1, '{1,2,3,4,5,6,7,8,9,10}');")?;
    p.exp_string("OK, 1 row(s) affected")?;
    // Long vectors are cut, in the table and in expanded rows.
    p.send_line("SELECT * FROM \"ws\".\"t\";")?;
    // (rexpect reads the output byte by byte as Latin-1: match the ASCII around "…".)
    p.exp_string("[1.0,2.0,3.0,4.0,5.0,6.0, ")?;
    p.exp_string(" (10 values)]")?;
    p.exp_string("(1 row, ")?;
    p.send_line("\\x")?;
    p.exp_string("Expanded display is on.")?;
    p.send_line("SELECT id, e FROM \"ws\".\"t\";")?;
    p.exp_string("-[ RECORD 1 ]")?;
    p.exp_string("e  | [1.0,2.0,3.0,4.0,5.0,6.0, ")?;
    p.exp_string(" (10 values)]")?;
    p.send_line("\\x")?;
    p.exp_string("Expanded display is off.")?;
    p.send_line("\\timing")?;
    p.exp_string("Timing is off.")?;
    // The catalog commands.
    p.send_line("\\d")?;
    p.exp_string("(1 table)")?;
    p.send_line("\\d t")?;
    p.exp_string("Table \"ws\".\"t\" (1 row")?;
    p.exp_string("not null")?;
    p.send_line("\\dw")?;
    p.exp_string("(1 workspace)")?;
    p.send_line("\\di")?;
    p.exp_string("(0 indexes)")?;
    p.send_line("CREATE VIEW \"ws\".\"ids\" AS SELECT id FROM \"ws\".\"t\";")?;
    p.exp_string("OK, 0 row(s) affected")?;
    p.send_line("\\dv")?;
    p.exp_string("ids")?;
    p.exp_string("(1 view)")?;
    p.send_line("\\d ids")?;
    p.exp_string("View \"ws\".\"ids\"")?;
    p.exp_string("int8")?;
    p.exp_string("View definition:")?;
    p.send_line("\\?")?;
    p.exp_string("\\d NAME")?;
    p.send_line("\\nope")?;
    p.exp_string("unknown command \\nope")?;
    // An error shows status, kind and message, and the shell goes on.
    p.send_line("SELECT * FROM nope;")?;
    p.exp_string("ERROR 404 NotFound:")?;
    // Ctrl-C while a long statement runs cancels it, and only it.
    p.send_line("SELECT count(*) FROM generate_series(1, 100000000000) AS a;")?;
    std::thread::sleep(std::time::Duration::from_millis(1500));
    p.send_control('c')?;
    p.exp_string("cancelled")?;
    // Each line is sent once the prompt is back, as a person types: input that arrives
    // while the shell switches the terminal's mode may be dropped.
    p.exp_string("ws=> ")?;
    // Ctrl-C at the prompt drops unfinished input.
    p.send_line("SELECT 'never")?;
    p.exp_string("ws-> ")?;
    p.send_control('c')?;
    p.exp_string("ws=> ")?;
    p.send_line("SELECT 41 + 1 AS answer;")?;
    p.exp_string("42")?;
    p.exp_string("(1 row)")?;
    p.send_line(&format!("\\i {}", script.display()))?;
    p.exp_string("OK, 1 row(s) affected")?;
    p.exp_string("(1 row)")?;
    // Ctrl-D ends the shell; the history is saved.
    p.send_control('d')?;
    p.exp_eof()?;
    let saved = std::fs::read_to_string(&history).expect("history saved");
    assert!(saved.contains("SELECT 41 + 1 AS answer;"), "{saved}");
    assert!(saved.contains("\\timing"), "{saved}");
    Ok(())
}

/// `--json` holds for errors before any statement runs: a locked or corrupt database, a
/// stale `cli.key`, standard input that is not UTF-8. Each is one `{"error": …}` line on
/// standard output and exit status 1.
#[test]
fn json_errors_at_open_and_for_bad_input() {
    let error_of = |out: &Output, status: u64, kind: &str| {
        assert_code(out, 1, kind);
        let lines = json_lines(out);
        assert_eq!(lines.len(), 1, "{}", stdout_text(out));
        let e = &lines[0]["error"];
        assert_eq!(e["status"], status, "{e}");
        assert_eq!(e["kind"], kind, "{e}");
        e["message"].as_str().unwrap_or_default().to_string()
    };

    // Locked: another process (this one) has the directory open.
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let held = rt
        .block_on(tarn::Tarn::open(dir.path()))
        .expect("open in the test");
    let out = tarn(dir.path(), &["sql", "-w", "ws", "--json", "SELECT 1"], None);
    assert!(error_of(&out, 409, "Conflict").contains("locked"));
    rt.block_on(held.close()).expect("close");

    // Stale key: the local user exists, the key file does not match it.
    let out = tarn(dir.path(), &["sql", "-w", "ws", "--json", "SELECT 1"], None);
    assert_code(&out, 0, "first use");
    std::fs::write(dir.path().join("cli.key"), "tarn_not_a_key").expect("write key");
    let out = tarn(dir.path(), &["sql", "-w", "ws", "--json", "SELECT 1"], None);
    assert!(error_of(&out, 401, "Unauthorized").contains("cli.key"));

    // Not UTF-8 on standard input: the statements before it ran, then one error.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tarn"))
        .arg("--data")
        .arg(dir.path())
        .args(["sql", "-w", "ws", "--json", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tarn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"SELECT 1;\nSELECT '\xff';\n")
        .expect("write stdin");
    let out = child.wait_with_output().expect("wait");
    assert_code(&out, 1, "invalid UTF-8");
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 2, "{}", stdout_text(&out));
    assert_eq!(lines[0]["rows"][0][0], 1);
    assert_eq!(lines[1]["error"]["status"], 400);
    assert!(
        lines[1]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("UTF-8"))
    );

    // Corrupt: the manifest overwritten.
    let out = tarn(dir.path(), &["sql", "-w", "ws", "--json", "SELECT 1"], None);
    assert_code(&out, 0, "before the damage");
    let manifest = std::fs::read_dir(dir.path())
        .expect("read dir")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("MANIFEST"))
        })
        .expect("a manifest");
    std::fs::write(&manifest, b"not a manifest").expect("damage");
    let out = tarn(dir.path(), &["tables", "-w", "ws", "--json"], None);
    error_of(&out, 500, "Internal");
}

/// Files that cannot be opened are named with the system's words and no error number,
/// and a `--data` path that is a file is a 400 saying so (it had been a 500 "File
/// exists (os error 17)").
#[test]
fn missing_files_and_a_file_as_data_directory_are_said_plainly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let missing = dir.path().join("missing.csv");
    let missing = missing.to_str().expect("utf-8 path");
    let outside = dir.path().join("no/such/dir/out.csv");
    let outside = outside.to_str().expect("utf-8 path");
    for args in [
        vec!["import", "-w", "w", "t", missing],
        vec!["files", "-w", "w", "put", missing],
        vec!["export", "-w", "w", "SELECT 1", outside],
    ] {
        let out = tarn(&data, &args, None);
        assert_code(&out, 1, &args.join(" "));
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            said.contains("No such file or directory"),
            "{args:?}: {said}"
        );
        assert!(!said.contains("os error"), "{args:?}: {said}");
    }
    let file = dir.path().join("plain");
    std::fs::write(&file, "x").expect("write");
    let out = tarn(&file, &["sql", "-w", "w", "SELECT 1"], None);
    assert_code(&out, 1, "--data at a file");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("(400)") && said.contains("it is a file, not a directory"),
        "{said}"
    );
    assert_eq!(std::fs::read(&file).expect("read"), b"x");
}

/// An export takes a query and says so before it runs anything: an INSERT had been
/// applied, and then refused as returning no rows (exit 2 after the data changed).
#[test]
fn export_refuses_a_write_before_running_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let out = tarn(
        &data,
        &["sql", "-w", "w", r#"CREATE TABLE "w"."z" (x INT8)"#],
        None,
    );
    assert_code(&out, 0, "create");
    let file = dir.path().join("x.csv");
    let file = file.to_str().expect("utf-8 path");
    for sql in [
        r#"INSERT INTO "w"."z" VALUES (1)"#,
        r#"INSERT INTO "w"."z" VALUES (1) RETURNING x"#,
        r#"UPDATE "w"."z" SET x = 2"#,
        r#"DELETE FROM "w"."z""#,
        r#"DROP TABLE "w"."z""#,
        // Read as the engine reads it (adjacent string constants joined), not refused
        // as unparsable and then run.
        "INSERT INTO \"w\".\"z\" SELECT length('a'\n'b')",
    ] {
        let out = tarn(&data, &["export", "-w", "w", sql, file], None);
        assert_code(&out, 2, sql);
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("was not run"), "{sql}: {said}");
    }
    let out = tarn(
        &data,
        &[
            "sql",
            "-w",
            "w",
            "--json",
            r#"SELECT count(*) FROM "w"."z""#,
        ],
        None,
    );
    assert_eq!(json_lines(&out)[0]["rows"], json!([[0]]));
    // Queries of every form export.
    for sql in [
        r#"SELECT * FROM "w"."z""#,
        "VALUES (1), (2)",
        r#"WITH q AS (SELECT 1 AS a) SELECT a FROM q"#,
    ] {
        let out = tarn(&data, &["export", "-w", "w", sql, file], None);
        assert_code(&out, 0, sql);
    }
}

/// An export stopped by Ctrl-C or SIGTERM while it writes leaves no file behind (spec
/// §9), and ends as the signal would (130, 143); the signal's default action had left
/// the partial file, hundreds of MB of it.
#[cfg(unix)]
#[test]
fn an_export_stopped_by_a_signal_leaves_no_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let out = tarn(&data, &["sql", "-w", "w", "SELECT 1"], None);
    assert_code(&out, 0, "workspace");
    for (signal, code) in [("-INT", 130), ("-TERM", 143)] {
        let file = dir.path().join("big.csv");
        let partial = dir.path().join("big.csv.tarn-partial");
        let mut child = Command::new(env!("CARGO_BIN_EXE_tarn"))
            .arg("--data")
            .arg(&data)
            .args([
                "export",
                "-w",
                "w",
                "SELECT g, repeat('x', 100) AS pad FROM generate_series(1, 3000000) g",
            ])
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tarn");
        // Once the file is being written (the query first reads its rows).
        let start = std::time::Instant::now();
        while !partial.exists() {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(120),
                "the export never began writing"
            );
            assert!(
                child.try_wait().expect("wait").is_none(),
                "the export ended early"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let killed = Command::new("kill")
            .arg(signal)
            .arg(child.id().to_string())
            .status()
            .expect("kill");
        assert!(killed.success());
        let out = child.wait_with_output().expect("tarn ends");
        let said = String::from_utf8_lossy(&out.stderr);
        // The export may have finished first on a fast machine: then the file is whole.
        if file.exists() {
            assert!(!partial.exists(), "{signal}");
            std::fs::remove_file(&file).expect("remove");
            continue;
        }
        assert_eq!(out.status.code(), Some(code), "{signal}: {said}");
        assert!(said.contains("stopped by a signal"), "{signal}: {said}");
        assert!(!partial.exists(), "{signal}: the partial file is left");
    }
}
