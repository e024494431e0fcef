//! Tables from uploaded CSV and JSON files (SPEC §6): inference of every type, the
//! shapes files come in (BOM, CRLF, quoted newlines, delimiters, arrays and NDJSON,
//! header only, wide files), malformed rows refused with their line and nothing
//! created, 409, the size limit, progress, uploads given up on, reopen, and crashes
//! (kill -9 and power cuts) at any point: a table with all its rows or no table.

use std::collections::BTreeMap;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use serde_json::{Value, json};
use tarn::storage::{Fault, FaultOp, FaultyBackend, PowerCutDisk};
use tarn::{ErrorKind, Options, Session, SyncMode, Tarn};
use tarn_tests::{Rng, fixture, fixture_with_key, reconnect, run_and_kill};
use tokio::io::{AsyncRead, ReadBuf};

type TestResult = Result<(), Box<dyn std::error::Error>>;

async fn rows(s: &Session, sql: &str) -> tarn::Result<Vec<Vec<Value>>> {
    Ok(s.query("ws", sql, &[]).await?.rows.unwrap_or_default())
}

/// (name, type, nullable) of each column of table `t`.
async fn columns(s: &Session, t: &str) -> tarn::Result<Vec<(String, String, bool)>> {
    Ok(s.table("ws", t)
        .await?
        .columns
        .into_iter()
        .map(|c| (c.name, c.data_type, c.nullable))
        .collect())
}

fn col(name: &str, ty: &str, nullable: bool) -> (String, String, bool) {
    (name.to_string(), ty.to_string(), nullable)
}

/// The segment files in the database directory.
fn segment_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("segments"))
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".seg"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

const TYPES_CSV: &str = "\
id,price,ok,day,at,meta,embedding,name,maybe
1,1.5,true,2024-01-02,2024-01-02T03:04:05Z,\"{\"\"a\"\": 1}\",\"[1, 2, 3]\",alpha,
2,2,FALSE,2024-02-29,2024-02-29 10:00:00+02:00,\"{\"\"b\"\": [1, 2]}\",\"[0.5, 0, -1]\",beta,x
3,-0.25,true,1999-12-31,1999-12-31 23:59,\"{}\",\"[4,5,6]\",\"gamma, \"\"quoted\"\"\",
";

#[tokio::test]
async fn csv_infers_every_type() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let s = fixture(&tarn).await?;
    let up = s
        .upload_table("ws", "types", "types.csv", TYPES_CSV.as_bytes())
        .await?;
    assert_eq!(up.name, "types");
    assert_eq!(up.row_count, 3);
    assert_eq!(
        up.columns,
        [
            "id",
            "price",
            "ok",
            "day",
            "at",
            "meta",
            "embedding",
            "name",
            "maybe"
        ]
    );
    assert_eq!(
        columns(&s, "types").await?,
        vec![
            col("id", "int8", false),
            col("price", "float8", false),
            col("ok", "bool", false),
            col("day", "date", false),
            col("at", "timestamptz", false),
            col("meta", "jsonb", false),
            col("embedding", "_float4", false),
            col("name", "text", false),
            col("maybe", "text", true),
        ]
    );
    let got = rows(
        &s,
        r#"SELECT id, price, ok, day, at, meta, embedding, name, maybe FROM "ws"."types" ORDER BY id"#,
    )
    .await?;
    assert_eq!(
        got[1],
        vec![
            json!(2),
            json!(2.0),
            json!(false),
            json!("2024-02-29"),
            json!("2024-02-29T08:00:00Z"),
            json!({"b": [1, 2]}),
            json!([0.5, 0.0, -1.0]),
            json!("beta"),
            json!("x"),
        ]
    );
    assert_eq!(got[2][7], json!("gamma, \"quoted\""));
    assert_eq!(got[0][8], Value::Null);
    // The uploaded table is an engine table like any other: search, indexes, writes.
    let top = rows(
        &s,
        r#"SELECT id FROM "ws"."types" ORDER BY embedding <#> ARRAY[4,5,6] DESC LIMIT 1"#,
    )
    .await?;
    assert_eq!(top, vec![vec![json!(3)]]);
    s.query(
        "ws",
        r#"CREATE INDEX ON "ws"."types" USING engine_index (embedding)"#,
        &[],
    )
    .await?;
    s.query(
        "ws",
        r#"INSERT INTO "ws"."types" VALUES (4, 0, true, '2024-01-01', now(), '{}', ARRAY[1,1,1], 'delta', NULL)"#,
        &[],
    )
    .await?;
    let err = s
        .query(
            "ws",
            r#"INSERT INTO "ws"."types" (id, embedding) VALUES (5, ARRAY[1,1])"#,
            &[],
        )
        .await
        .expect_err("the uploaded vectors fixed the dimension");
    assert_eq!(err.status(), 400, "{err:?}");
    // Columns without a NULL in the file are NOT NULL (SPEC §6).
    let err = s
        .query("ws", r#"INSERT INTO "ws"."types" (id) VALUES (6)"#, &[])
        .await
        .expect_err("price is NOT NULL");
    assert!(err.message().contains("not-null"), "{err:?}");
    let n = rows(&s, r#"SELECT count(*) FROM "ws"."types""#).await?;
    assert_eq!(n, vec![vec![json!(4)]]);
    Ok(())
}

#[tokio::test]
async fn json_arrays_and_ndjson_infer_the_same_columns() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let s = fixture(&tarn).await?;
    let records = [
        json!({"id": 1, "score": 0.5, "tags": {"k": "v"}, "vec": [1, 2], "when": "2024-05-06", "flag": true, "note": "n1"}),
        json!({"id": 2, "score": 3, "tags": [1, "x"], "vec": [3.5, 4], "when": "2024-05-07T08:09:10Z", "flag": null}),
        json!({"note": 42, "id": 3, "score": -1e3, "tags": "s", "vec": [0, 1], "when": "2024-05-08"}),
    ];
    let array = serde_json::to_string_pretty(&records)?;
    let ndjson: String = records.iter().map(|r| format!("{r}\n")).collect();
    let expected = vec![
        col("id", "int8", false),
        col("score", "float8", false),
        col("tags", "jsonb", false),
        col("vec", "_float4", false),
        col("when", "timestamptz", false),
        col("flag", "bool", true),
        // Missing from a row: nullable.
        col("note", "text", true),
    ];
    for (name, file, body) in [
        ("a", "rows.json", array.clone()),
        ("b", "rows.ndjson", ndjson.clone()),
        // No extension: sniffed from the content.
        ("c", "rows", array),
        ("d", "export.data", ndjson),
    ] {
        let up = s.upload_table("ws", name, file, body.as_bytes()).await?;
        assert_eq!(up.row_count, 3, "{file}");
        // Serde's own key order (sorted) must not leak: keys keep the file's order.
        let mut cols = columns(&s, name).await?;
        cols.sort();
        let mut want = expected.clone();
        want.sort();
        assert_eq!(cols, want, "{file}");
        let got = rows(
            &s,
            &format!(r#"SELECT tags, vec, "when", note FROM "ws"."{name}" ORDER BY id"#),
        )
        .await?;
        assert_eq!(got[0][0], json!({"k": "v"}));
        assert_eq!(got[1][0], json!([1, "x"]));
        assert_eq!(got[2][0], json!("s"));
        assert_eq!(got[1][1], json!([3.5, 4.0]));
        assert_eq!(got[0][2], json!("2024-05-06T00:00:00Z"));
        assert_eq!(
            got[2][3],
            json!("42"),
            "a number in a text column keeps its text"
        );
    }
    Ok(())
}

#[tokio::test]
async fn file_shapes_are_read_as_expected() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let s = fixture(&tarn).await?;
    // BOM, CRLF, a quoted line break, semicolons, blank lines.
    let body = "\u{feff}a;b\r\n1;\"two\r\nlines\"\r\n\r\n3;x\r\n";
    let up = s
        .upload_table("ws", "crlf", "x.csv", body.as_bytes())
        .await?;
    assert_eq!(up.columns, ["a", "b"]);
    let got = rows(&s, r#"SELECT a, b FROM "ws"."crlf" ORDER BY a"#).await?;
    assert_eq!(
        got,
        vec![
            vec![json!(1), json!("two\r\nlines")],
            vec![json!(3), json!("x")]
        ]
    );
    // Tabs, pipes; empty and repeated header names; no final line break.
    let up = s
        .upload_table("ws", "tabs", "x.tsv", "k\t\tk\n1\t2\t3".as_bytes())
        .await?;
    assert_eq!(up.columns, ["k", "column_2", "k_1"]);
    let up = s
        .upload_table("ws", "pipes", "x.txt", "p|q\n1|2\n".as_bytes())
        .await?;
    assert_eq!(up.columns, ["p", "q"]);
    // A generated name never repeats a name the header has.
    let up = s
        .upload_table("ws", "names", "x.csv", ",column,column\n1,2,3\n".as_bytes())
        .await?;
    assert_eq!(up.columns, ["column_1", "column", "column_2"]);
    // JSON keys are named as headers are; rows still match by the key as written.
    let long = "k".repeat(80);
    let body = format!("[{{\"\": 1, \"{long}\": 2}}, {{\"{long}\": 3}}]");
    let up = s
        .upload_table("ws", "keys", "k.json", body.as_bytes())
        .await?;
    assert_eq!(up.columns, ["column_1".to_string(), "k".repeat(63)]);
    assert_eq!(up.row_count, 2);
    // A header given whole keeps its name; headers cut to it take suffixes (the cut
    // ones had taken it first, leaving the whole one's values under a suffixed name).
    let x = "x".repeat(63);
    let body = format!("{x}1,{x}2,{x}\n1,2,3\n");
    let up = s
        .upload_table("ws", "cut", "c.csv", body.as_bytes())
        .await?;
    let x61 = "x".repeat(61);
    assert_eq!(
        up.columns,
        [format!("{x61}_1"), format!("{x61}_2"), x.clone()]
    );
    let r = s
        .query("ws", &format!(r#"SELECT "{x}" FROM "ws"."cut""#), &[])
        .await?;
    assert_eq!(r.rows, Some(vec![vec![json!(3)]]));
    // Vectors of different lengths in CSV are text (`{1,2}` is not JSON).
    s.upload_table(
        "ws",
        "ragged",
        "x.csv",
        "v\n\"{1,2}\"\n\"{1,2,3}\"\n".as_bytes(),
    )
    .await?;
    assert_eq!(columns(&s, "ragged").await?, vec![col("v", "text", false)]);
    // A line of 10 million delimiters is refused at the field limit, not buffered.
    let commas = "a,b\n".to_string() + &",".repeat(10_000_000) + "\n";
    let err = s
        .upload_table("ws", "commas", "x.csv", commas.as_bytes())
        .await
        .expect_err("too many fields");
    assert!(
        err.message().contains("line 2: more than 1600 fields"),
        "{err:?}"
    );
    // Header only: text columns, no rows.
    let up = s
        .upload_table("ws", "empty", "x.csv", "a,b\n".as_bytes())
        .await?;
    assert_eq!(up.row_count, 0);
    assert_eq!(
        columns(&s, "empty").await?,
        vec![col("a", "text", false), col("b", "text", false)]
    );
    // Mixed values widen: int + float → float8, date + timestamp → timestamptz,
    // anything else mixed → text; leading zeros stay text.
    let body = "n,m,d,z\n1,1,2024-01-01,007\n2.5,x,2024-01-01 10:00,010\n";
    s.upload_table("ws", "mixed", "m.csv", body.as_bytes())
        .await?;
    assert_eq!(
        columns(&s, "mixed").await?,
        vec![
            col("n", "float8", false),
            col("m", "text", false),
            col("d", "timestamptz", false),
            col("z", "text", false),
        ]
    );
    // 1600 columns (PostgreSQL's limit) is fine; 10,000 is a 400 naming the limit.
    for (n, ok) in [(1600usize, true), (10_000, false)] {
        let header: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
        let row: Vec<String> = (0..n).map(|i| i.to_string()).collect();
        let body = format!(
            "{}\n{}\n{}\n",
            header.join(","),
            row.join(","),
            row.join(",")
        );
        let res = s
            .upload_table("ws", &format!("wide{n}"), "w.csv", body.as_bytes())
            .await;
        if ok {
            let up = res?;
            assert_eq!((up.columns.len(), up.row_count), (n, 2));
            let got = rows(&s, &format!(r#"SELECT sum(c1599) FROM "ws"."wide{n}""#)).await?;
            assert_eq!(got, vec![vec![json!(3198)]]);
        } else {
            let err = res.expect_err("too wide");
            assert_eq!(err.status(), 400);
            assert!(err.message().contains("at most 1600"), "{err:?}");
        }
    }
    // Empty files are refused.
    for (file, body) in [
        ("e.csv", ""),
        ("e.json", "  \n"),
        ("e.json", "[]"),
        ("e", ""),
    ] {
        let err = s
            .upload_table("ws", "nothing", file, body.as_bytes())
            .await
            .expect_err("empty");
        assert_eq!(err.status(), 400, "{file}: {err:?}");
    }
    Ok(())
}

#[tokio::test]
async fn a_bad_row_is_a_400_naming_its_line_and_nothing_is_created() -> TestResult {
    let dir = tempfile::tempdir()?;
    let tarn = Tarn::open(dir.path()).await?;
    let s = fixture(&tarn).await?;
    // Rows past the sample that contradict it: far enough in to have staged segment
    // files already (which must go).
    let mut big = String::from("id,x,body\n");
    for i in 0..300_000 {
        big.push_str(&format!("{i},{}.5,row number {i}\n", i % 100));
    }
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "late int",
            format!("{big}oops,1.5,z\n"),
            "line 300002, column \"id\": \"oops\" is not an integer",
        ),
        (
            "fields",
            format!("{big}1,2\n"),
            "line 300002: 2 fields, but the header has 3",
        ),
        (
            "quote",
            format!("a,b\n1,\"never closed\n{}", "x,y\n".repeat(10)),
            "line 2: unterminated CSV quoted field",
        ),
        (
            "late quote",
            format!("{big}1,2,\"never closed\n{}", "x,y,z\n".repeat(10)),
            "line 300002: unterminated CSV quoted field",
        ),
    ];
    for (what, body, needle) in cases {
        let res = s
            .upload_table("ws", "bad", "bad.csv", body.as_bytes())
            .await;
        let err = res.expect_err(what);
        assert_eq!(err.status(), 400, "{what}: {err:?}");
        assert!(err.message().contains(needle), "{what}: {}", err.message());
        assert!(s.table("ws", "bad").await.is_err(), "{what}: table created");
        // The refused upload removed its staged files itself (no checkpoint or open
        // has run to sweep them).
        assert_eq!(segment_files(dir.path()), Vec::<String>::new(), "{what}");
    }
    // Invalid UTF-8 in a value.
    let mut body = b"a,b\n1,ok\n2,".to_vec();
    body.extend_from_slice(&[0xff, 0xfe, b'\n']);
    let err = s
        .upload_table("ws", "bad", "bad.csv", &body[..])
        .await
        .expect_err("utf-8");
    assert!(
        err.message()
            .contains("line 3, column \"b\": not valid UTF-8"),
        "{err:?}"
    );
    // JSON: a key no sampled row had, bad syntax (on its own line), not an object.
    let mut json_rows: Vec<String> = (0..20_000)
        .map(|i| format!("{{\"id\": {i}, \"v\": [1, 2]}}"))
        .collect();
    json_rows.push("{\"id\": 1, \"extra\": 2}".into());
    let err = s
        .upload_table("ws", "bad", "x.ndjson", json_rows.join("\n").as_bytes())
        .await
        .expect_err("new key");
    assert!(
        err.message().starts_with("line 20001: key \"extra\""),
        "{err:?}"
    );
    json_rows.pop();
    json_rows.push("{\"id\": 7, \"v\": [1, 2, 3]}".into());
    let err = s
        .upload_table("ws", "bad", "x.ndjson", json_rows.join("\n").as_bytes())
        .await
        .expect_err("dimension");
    assert!(
        err.message().contains("line 20001, column \"v\"")
            && err.message().contains("3 dimensions, not 2"),
        "{err:?}"
    );
    let err = s
        .upload_table(
            "ws",
            "bad",
            "x.json",
            "[{\"a\": 1},\n{\"a\":\n tru}]".as_bytes(),
        )
        .await
        .expect_err("syntax");
    assert!(err.message().starts_with("line 3: invalid JSON"), "{err:?}");
    // Line numbers after rows that span lines and strings long enough for the framer's
    // vector search, and a row that is not UTF-8.
    let long = "a string longer than twenty-four bytes, with } ] { and \\\" inside";
    let lead =
        format!("{{\"id\": 1,\n \"s\": \"{long}\"}}\n{{\"id\": 2, \"s\":\n\n \"{long}\"}}\n");
    let err = s
        .upload_table(
            "ws",
            "bad",
            "x.ndjson",
            format!("{lead}{{\"id\": 3, \"s\": \"x\"}}\n{{\"id\": 4, \"s\": tru}}\n").as_bytes(),
        )
        .await
        .expect_err("syntax after multi-line rows");
    assert!(err.message().starts_with("line 7: invalid JSON"), "{err:?}");
    let mut body = format!("{lead}{{\"id\": 3, \"s\": \"").into_bytes();
    body.extend_from_slice(&[0xff, 0xfe]);
    body.extend_from_slice(b"\"}\n");
    let err = s
        .upload_table("ws", "bad", "x.ndjson", &body[..])
        .await
        .expect_err("utf-8 in a JSON row");
    assert_eq!(err.status(), 400);
    assert!(err.message().starts_with("line 6: invalid JSON"), "{err:?}");
    let err = s
        .upload_table("ws", "bad", "x.json", "[{\"a\": 1}, 2]".as_bytes())
        .await
        .expect_err("not an object");
    assert!(err.message().contains("a JSON object"), "{err:?}");
    assert!(s.table("ws", "bad").await.is_err());
    // Nothing of the refused uploads is left once a checkpoint has run.
    tarn.close().await?;
    assert_eq!(segment_files(dir.path()), Vec::<String>::new());
    Ok(())
}

/// A table stores dates and timestamps of years 1 to 9999 (SPEC §6): a value a query
/// computed past them is a 400 on INSERT, UPDATE and CREATE TABLE … AS, and an upload's
/// timestamp whose offset carries it past them leaves its column text. Stored, such
/// values had exported as `+10000-01-01` or `-0004-01-01`, which imported back as text.
#[tokio::test]
async fn dates_outside_years_1_to_9999_are_not_stored() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let s = fixture(&tarn).await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."d" (a DATE, b TIMESTAMP, c TIMESTAMPTZ) USING engine"#,
        &[],
    )
    .await?;
    for sql in [
        r#"INSERT INTO "ws"."d" (a) VALUES (make_date(-5, 1, 1))"#,
        r#"INSERT INTO "ws"."d" (a) VALUES (date '9999-12-31' + 1)"#,
        r#"INSERT INTO "ws"."d" (b) VALUES (timestamp '9999-12-31 23:00:00' + interval '2 hours')"#,
        r#"INSERT INTO "ws"."d" (c) VALUES (timestamptz '0001-01-01 00:00:00Z' - interval '1 second')"#,
    ] {
        let e = s.query("ws", sql, &[]).await.expect_err(sql);
        assert_eq!(e.status(), 400, "{sql}: {e}");
        assert!(e.message().contains("out of range"), "{sql}: {e}");
    }
    s.query(
        "ws",
        r#"INSERT INTO "ws"."d" VALUES ('0001-01-01', '9999-12-31 23:59:59.999999', '0001-01-01 00:00:00Z')"#,
        &[],
    )
    .await?;
    let e = s
        .query("ws", r#"UPDATE "ws"."d" SET a = a - 1"#, &[])
        .await
        .expect_err("update past year 1");
    assert_eq!(e.status(), 400, "{e}");
    let e = s
        .query(
            "ws",
            r#"CREATE TABLE "ws"."d2" USING engine AS SELECT b + interval '1 day' AS b FROM "ws"."d""#,
            &[],
        )
        .await
        .expect_err("CTAS past year 9999");
    assert_eq!(e.status(), 400, "{e}");
    assert_eq!(
        rows(&s, r#"SELECT count(*) FROM "ws"."d""#).await?,
        vec![vec![json!(1)]]
    );
    // Queries still compute past them.
    assert_eq!(
        rows(&s, "SELECT date '9999-12-31' + 1 > date '9999-12-31'").await?,
        vec![vec![json!(true)]]
    );
    // An upload's timestamp in year 0 once in UTC: the column is text, the value as written.
    let body = r#"[{"t":"0001-01-01T00:00:00+01:00"},{"t":"2020-01-01T00:00:00Z"}]"#;
    s.upload_table("ws", "u", "u.json", body.as_bytes()).await?;
    assert_eq!(columns(&s, "u").await?, vec![col("t", "text", false)]);
    // After the inference sample: a 400 that says why.
    let mut csv: String = "t\n".into();
    csv.extend((0..10_000).map(|_| "2020-01-01T00:00:00Z\n"));
    csv.push_str("0001-01-01T00:00:00+01:00\n");
    let e = s
        .upload_table("ws", "late", "late.csv", csv.as_bytes())
        .await
        .expect_err("a timestamp in year 0 after the sample");
    assert_eq!(e.status(), 400, "{e}");
    assert!(e.message().contains("outside years 1 to 9999"), "{e}");
    Ok(())
}

/// A vector element too small for a float4 that is not zero would be stored as 0: an
/// upload's array holding one is no vector (jsonb, its numbers as written)
/// in the rows types are inferred from, and a 400 after them, as INSERT refuses it.
#[tokio::test]
async fn vector_elements_too_small_for_float4_are_not_stored_as_zero() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let s = fixture(&tarn).await?;
    s.upload_table(
        "ws",
        "c",
        "c.csv",
        "id,e\n1,\"[1e-50,1]\"\n2,\"[1,2]\"\n".as_bytes(),
    )
    .await?;
    assert_eq!(columns(&s, "c").await?[1].1, "jsonb");
    assert_eq!(
        rows(
            &s,
            r#"SELECT (e ->> 0)::float8 = 1e-50 FROM "ws"."c" WHERE id = 1"#
        )
        .await?,
        vec![vec![json!(true)]]
    );
    s.upload_table(
        "ws",
        "j",
        "j.json",
        r#"[{"e":[1e-50,1]},{"e":[1,2]}]"#.as_bytes(),
    )
    .await?;
    assert_eq!(columns(&s, "j").await?[0].1, "jsonb");
    let mut csv: String = "e\n".into();
    csv.extend((0..10_000).map(|_| "\"[1,2]\"\n"));
    csv.push_str("\"[1e-50,1]\"\n");
    let e = s
        .upload_table("ws", "late", "late.csv", csv.as_bytes())
        .await
        .expect_err("a tiny element after the sample");
    assert_eq!(e.status(), 400, "{e}");
    assert!(e.message().contains("1e-45"), "{e}");
    Ok(())
}

/// (id, a) rows of table `t`, in id order.
async fn id_and_a(s: &Session, t: &str) -> tarn::Result<Vec<Vec<Value>>> {
    rows(s, &format!(r#"SELECT id, a FROM "ws"."{t}" ORDER BY id"#)).await
}

/// Integers beyond int8 keep their exact digits as text, from JSON as from CSV (SPEC
/// §6): in the sample they make the column text; after it, one in an int8 or float8
/// column is a 400 naming its line and showing its digits, never a rounded float.
#[tokio::test]
async fn integers_beyond_int8_stay_text_with_their_digits_in_json_as_in_csv() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let s = fixture(&tarn).await?;
    let cases: [(&str, &[&str], &str); 9] = [
        // A decimal with more digits than a float8 keeps is text too; one it keeps
        // (however long its text) is a float.
        (
            "long_decimal",
            &["1.5", "3.14159265358979323846", "2"],
            "text",
        ),
        ("kept_decimal", &["0.30000000000000004", "1.5"], "float8"),
        ("big", &["99999999999999999999", "1"], "text"),
        // An integer a float8 would round (past 2^53) beside floats keeps its digits as
        // text; beside integers it is int8.
        ("wide_float", &["1.5", "9007199254740993", "2"], "text"),
        ("wide_int", &["9007199254740993", "1"], "int8"),
        (
            "negative",
            &["-99999999999999999999", "-9223372036854775809", "2"],
            "text",
        ),
        // Past i64 but within u64: still beyond int8.
        (
            "unsigned",
            &["18446744073709551615", "9223372036854775808"],
            "text",
        ),
        (
            "decimals",
            &["1.5", "123456789012345678901234567890", "-2"],
            "text",
        ),
        // The ends of int8 are int8.
        (
            "edges",
            &["9223372036854775807", "-9223372036854775808"],
            "int8",
        ),
    ];
    for (name, values, ty) in cases {
        let csv: String = std::iter::once("id,a\n".to_string())
            .chain(values.iter().enumerate().map(|(i, v)| format!("{i},{v}\n")))
            .collect();
        let ndjson: String = values
            .iter()
            .enumerate()
            .map(|(i, v)| format!("{{\"id\": {i}, \"a\": {v}}}\n"))
            .collect();
        let array = format!(
            "[{}]",
            values
                .iter()
                .enumerate()
                .map(|(i, v)| format!("{{\"id\":{i},\"a\":{v}}}"))
                .collect::<Vec<_>>()
                .join(",")
        );
        let expected: Vec<Vec<Value>> = values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let a = if ty == "text" {
                    json!(v)
                } else {
                    serde_json::from_str(v).unwrap_or(Value::Null)
                };
                vec![json!(i), a]
            })
            .collect();
        for (file, body) in [("c.csv", csv), ("n.ndjson", ndjson), ("a.json", array)] {
            let table = format!("{name}_{}", &file[..1]);
            s.upload_table("ws", &table, file, body.as_bytes()).await?;
            assert_eq!(
                columns(&s, &table).await?,
                vec![col("id", "int8", false), col("a", ty, false)],
                "{name} {file}"
            );
            assert_eq!(id_and_a(&s, &table).await?, expected, "{name} {file}");
        }
    }
    // After the sample (10,000 rows): never a silent float.
    let lead: String = (0..10_000)
        .map(|i| format!("{{\"id\": {i}, \"n\": {i}, \"f\": 0.5, \"t\": \"x\"}}\n"))
        .collect();
    for (last, needle) in [
        (
            r#"{"id": 1, "n": 99999999999999999999, "f": 0.5, "t": "x"}"#,
            "line 10001, column \"n\": \"99999999999999999999\" is out of range for int8",
        ),
        (
            r#"{"id": 1, "n": -9223372036854775809, "f": 0.5, "t": "x"}"#,
            "line 10001, column \"n\": \"-9223372036854775809\" is out of range for int8",
        ),
        (
            r#"{"id": 1, "n": 1, "f": 1.00000000000000000001, "t": "x"}"#,
            "line 10001, column \"f\": \"1.00000000000000000001\" has more digits than a float8",
        ),
        (
            r#"{"id": 1, "n": 1, "f": 99999999999999999999, "t": "x"}"#,
            "line 10001, column \"f\": \"99999999999999999999\" is an integer beyond int8",
        ),
        (
            r#"{"id": 1, "n": 1, "f": 18446744073709551615, "t": "x"}"#,
            "line 10001, column \"f\": \"18446744073709551615\" is an integer beyond int8",
        ),
    ] {
        let err = s
            .upload_table(
                "ws",
                "late",
                "x.ndjson",
                format!("{lead}{last}\n").as_bytes(),
            )
            .await
            .expect_err(last);
        assert_eq!(err.status(), 400, "{err:?}");
        assert!(err.message().contains(needle), "{last}: {}", err.message());
        assert!(s.table("ws", "late").await.is_err());
    }
    // Nor a rounded one: an integer past 2^53 in a float8 column.
    let err = s
        .upload_table(
            "ws",
            "late",
            "x.ndjson",
            format!(
                "{lead}{}\n",
                r#"{"id": 1, "n": 1, "f": 9007199254740993, "t": "x"}"#
            )
            .as_bytes(),
        )
        .await
        .expect_err("rounded");
    assert!(
        err.message()
            .contains("\"9007199254740993\" is an integer a float8 column would round"),
        "{}",
        err.message()
    );
    // A number too small for a float8 (it would be 0) keeps its text in CSV.
    s.upload_table("ws", "tiny", "t.csv", &b"a,b\n1,1e-400\n2,2.5\n"[..])
        .await?;
    assert_eq!(
        rows(&s, r#"SELECT b FROM "ws"."tiny" ORDER BY a"#).await?,
        vec![vec![json!("1e-400")], vec![json!("2.5")]]
    );
    // A text column takes it with its digits; a float8 column takes decimals and
    // exponents as floats.
    let body = format!(
        "{lead}{}\n{}\n",
        r#"{"id": 10000, "n": 1, "f": 1e20, "t": 99999999999999999999}"#,
        r#"{"id": 10001, "n": 1, "f": 100000000000000000000.0, "t": -1e3}"#
    );
    s.upload_table("ws", "late_text", "x.ndjson", body.as_bytes())
        .await?;
    let got = rows(
        &s,
        r#"SELECT f, t FROM "ws"."late_text" WHERE id >= 10000 ORDER BY id"#,
    )
    .await?;
    assert_eq!(
        got,
        vec![
            vec![json!(1e20), json!("99999999999999999999")],
            vec![json!(1e20), json!("-1000.0")]
        ]
    );
    // CSV after the sample: the same 400s (and leading zeros are not a float either).
    let lead: String = std::iter::once("id,n,f\n".to_string())
        .chain((0..10_000).map(|i| format!("{i},{i},0.5\n")))
        .collect();
    for (last, needle) in [
        (
            "1,99999999999999999999,0.5",
            "line 10002, column \"n\": \"99999999999999999999\" is out of range for int8",
        ),
        (
            "1,1,99999999999999999999",
            "line 10002, column \"f\": \"99999999999999999999\" is an integer beyond int8",
        ),
        (
            "1,1,-99999999999999999999",
            "line 10002, column \"f\": \"-99999999999999999999\" is an integer beyond int8",
        ),
        (
            "1,1,007",
            "line 10002, column \"f\": \"007\" is not a number",
        ),
        (
            "1,1,2.71828182845904523536",
            "line 10002, column \"f\": \"2.71828182845904523536\" has more digits than a float8",
        ),
    ] {
        let err = s
            .upload_table("ws", "late", "x.csv", format!("{lead}{last}\n").as_bytes())
            .await
            .expect_err(last);
        assert_eq!(err.status(), 400, "{err:?}");
        assert!(err.message().contains(needle), "{last}: {}", err.message());
        assert!(s.table("ws", "late").await.is_err());
    }
    Ok(())
}

/// A quoted field still open at the end of the file is a 400 naming the line the quote
/// opens on (PostgreSQL's COPY: "unterminated CSV quoted field"); nothing is created.
#[tokio::test]
async fn an_unterminated_quote_is_a_400_naming_the_line_it_opens_on() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let s = fixture(&tarn).await?;
    for (body, line) in [
        ("a,b\n1,\"abc\n2,def\n", 2),
        ("a,b\n1,x\n2,\"abc", 3),
        // The record starts on line 2; its second quoted field opens on line 3.
        ("a,b,c\n1,\"x\ny\",\"open\nmore\n", 3),
        // A doubled quote inside is not the closing one.
        ("a,b\n1,\"ab\"\"\n", 2),
        ("a,b\r\n1,x\r\n\r\n2,\"abc\r\nx,y\r\n", 4),
    ] {
        for file in ["u.csv", "u"] {
            let err = s
                .upload_table("ws", "u", file, body.as_bytes())
                .await
                .expect_err(body);
            assert_eq!(err.status(), 400, "{body:?}: {err:?}");
            assert!(
                err.message()
                    .contains(&format!("line {line}: unterminated CSV quoted field")),
                "{body:?}: {}",
                err.message()
            );
            assert!(s.table("ws", "u").await.is_err(), "{body:?}: created");
        }
    }
    // A quote after a closing quote and data: csv-core would read on as unquoted data
    // and merge records (`3,"x"` closing the quote opened on line 2); refused, naming
    // the line.
    for (body, line) in [
        ("a,b\n1,\"abc\n2,def\n3,\"x\"\n4,y\n", 4),
        ("a,b\n1,\"ab\"c\"\n2,x\n", 2),
    ] {
        let err = s
            .upload_table("ws", "u", "u.csv", body.as_bytes())
            .await
            .expect_err(body);
        assert_eq!(err.status(), 400, "{body:?}: {err:?}");
        assert!(
            err.message().contains(&format!(
                "line {line}: a quote after the closing quote of a quoted field and data"
            )),
            "{body:?}: {}",
            err.message()
        );
        assert!(s.table("ws", "u").await.is_err(), "{body:?}: created");
    }
    // Closed quotes at the end of the file (with or without a line end) are fine.
    for body in [
        "a,b\n1,\"abc\"",
        "a,b\n1,\"a\"\"bc\"\"\"\n",
        "a,b\n1,\"\"\n",
    ] {
        let up = s
            .upload_table("ws", "closed", "c.csv", body.as_bytes())
            .await?;
        assert_eq!(up.row_count, 1, "{body:?}");
        s.query("ws", r#"DROP TABLE "ws"."closed""#, &[]).await?;
    }
    Ok(())
}

/// CSV as PostgreSQL's COPY reads it: an unquoted empty field is NULL, a quoted one
/// (`""`) the empty string — which is text: in the sample it makes the column text,
/// after it a non-text column refuses it (SPEC §6).
#[tokio::test]
async fn a_quoted_empty_csv_field_is_the_empty_string() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let s = fixture(&tarn).await?;
    let body = "id,t,n,\"\"\n1,\"\",5,a\n2,,,\"\"\n3,x,\"\",\n";
    let up = s.upload_table("ws", "e", "e.csv", body.as_bytes()).await?;
    assert_eq!(up.columns, ["id", "t", "n", "column_4"]);
    assert_eq!(
        columns(&s, "e").await?,
        vec![
            col("id", "int8", false),
            col("t", "text", true),
            col("n", "text", true),
            col("column_4", "text", true),
        ]
    );
    assert_eq!(
        rows(&s, r#"SELECT * FROM "ws"."e" ORDER BY id"#).await?,
        vec![
            vec![json!(1), json!(""), json!("5"), json!("a")],
            vec![json!(2), Value::Null, Value::Null, json!("")],
            vec![json!(3), json!("x"), json!(""), Value::Null],
        ]
    );
    let n = rows(&s, r#"SELECT count(*) FROM "ws"."e" WHERE t = ''"#).await?;
    assert_eq!(n, vec![vec![json!(1)]]);
    // Across chunk boundaries: a long record with quoted empty fields in a file of
    // several 1 MiB chunks.
    let mut big = String::from("id,t,u\n");
    for i in 0..300_000 {
        big.push_str(&format!("{i},\"\",\n{},,\"\"\n", i + 1_000_000));
    }
    s.upload_table("ws", "chunks", "c.csv", big.as_bytes())
        .await?;
    let got = rows(
        &s,
        r#"SELECT count(*) FILTER (WHERE t = ''), count(*) FILTER (WHERE t IS NULL),
                  count(*) FILTER (WHERE u = ''), count(*) FILTER (WHERE u IS NULL)
           FROM "ws"."chunks""#,
    )
    .await?;
    assert_eq!(
        got,
        vec![vec![
            json!(300_000),
            json!(300_000),
            json!(300_000),
            json!(300_000)
        ]]
    );
    // After the sample, an int8 column refuses `""` (as COPY does); NULL is fine.
    let lead: String = std::iter::once("id,n\n".to_string())
        .chain((0..10_000).map(|i| format!("{i},{i}\n")))
        .collect();
    s.upload_table("ws", "nulls", "x.csv", format!("{lead}1,\n").as_bytes())
        .await?;
    let err = s
        .upload_table("ws", "late", "x.csv", format!("{lead}1,\"\"\n").as_bytes())
        .await
        .expect_err("quoted empty in an int8 column");
    assert!(
        err.message()
            .contains("line 10002, column \"n\": \"\" (an empty string) is not an integer"),
        "{err:?}"
    );
    assert!(s.table("ws", "late").await.is_err());
    Ok(())
}

/// One rule for arrays of numbers of different lengths in CSV and JSON: jsonb, as are
/// columns mixing such arrays with other JSON arrays and objects (SPEC §6).
#[tokio::test]
async fn ragged_vectors_are_jsonb_in_csv_as_in_json() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let s = fixture(&tarn).await?;
    let ragged = [json!([1, 2]), json!([1.5, 2, 3]), json!([-1])];
    let mixed = [json!([1, 2]), json!({"a": 1}), json!([]), json!([1, "x"])];
    for (name, values) in [("ragged", &ragged[..]), ("mixed", &mixed[..])] {
        let csv: String = std::iter::once("id,v\n".to_string())
            .chain(
                values
                    .iter()
                    .enumerate()
                    .map(|(i, v)| format!("{i},\"{}\"\n", v.to_string().replace('"', "\"\""))),
            )
            .collect();
        let json = Value::from(
            values
                .iter()
                .enumerate()
                .map(|(i, v)| json!({"id": i, "v": v}))
                .collect::<Vec<_>>(),
        )
        .to_string();
        for (file, body) in [("v.csv", csv), ("v.json", json)] {
            let table = format!("{name}_{}", &file[2..]);
            s.upload_table("ws", &table, file, body.as_bytes()).await?;
            assert_eq!(
                columns(&s, &table).await?,
                vec![col("id", "int8", false), col("v", "jsonb", false)],
                "{name} {file}"
            );
            let got = rows(&s, &format!(r#"SELECT v FROM "ws"."{table}" ORDER BY id"#)).await?;
            let want: Vec<Vec<Value>> = values.iter().map(|v| vec![v.clone()]).collect();
            assert_eq!(got, want, "{name} {file}");
        }
    }
    Ok(())
}

#[tokio::test]
async fn conflicts_limits_and_progress() -> TestResult {
    let dir = tempfile::tempdir()?;
    let tarn = Tarn::open_with(dir.path(), Options::new().max_file_bytes(1 << 20)).await?;
    let s = fixture(&tarn).await?;
    s.upload_table("ws", "t", "t.csv", "a\n1\n".as_bytes())
        .await?;
    let err = s
        .upload_table("ws", "t", "t.csv", "a\n1\n".as_bytes())
        .await
        .expect_err("exists");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    let err = s
        .upload_table("nope", "t2", "t.csv", "a\n1\n".as_bytes())
        .await
        .expect_err("no workspace");
    assert_eq!(err.status(), 404);
    let err = s
        .upload_table("ws", "", "t.csv", "a\n1\n".as_bytes())
        .await
        .expect_err("no name");
    assert_eq!(err.status(), 400);
    let big = "a\n".to_string() + &"123456789\n".repeat(200_000);
    let err = s
        .upload_table("ws", "big", "b.csv", big.as_bytes())
        .await
        .expect_err("too big");
    assert!(err.message().contains("max_file_bytes"), "{err:?}");
    // Progress: bytes and rows only grow, and end at the file's.
    let body = "a,b\n".to_string() + &"1,xyz\n".repeat(150_000);
    let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let log = seen.clone();
    let up = s
        .upload_table_with_progress("ws", "p", "p.csv", body.as_bytes(), move |p| {
            log.lock().push((p.bytes, p.rows))
        })
        .await?;
    let seen = seen.lock().clone();
    assert!(seen.len() >= 2, "{seen:?}");
    assert!(
        seen.windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1)
    );
    assert_eq!(seen.last(), Some(&(body.len() as u64, 150_000)));
    assert_eq!(up.row_count, 150_000);
    Ok(())
}

/// A reader that gives `data` and then never ends (a client that stalls).
struct Stalls {
    data: Vec<u8>,
    at: usize,
}

impl AsyncRead for Stalls {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.at < self.data.len() {
            let n = (self.data.len() - self.at).min(buf.remaining());
            let at = self.at;
            buf.put_slice(&self.data[at..at + n]);
            self.at += n;
            return Poll::Ready(Ok(()));
        }
        Poll::Pending
    }
}

fn numbers_csv(from: u64, to: u64) -> String {
    let mut out = String::from("id,half,label\n");
    for i in from..to {
        out.push_str(&format!("{i},{}.5,label {i}\n", i / 2));
    }
    out
}

#[tokio::test]
async fn uploads_given_up_on_leave_nothing_and_tables_survive_reopen() -> TestResult {
    let base = tempfile::tempdir()?;
    let dir = base.path().join("db");
    let image = base.path().join("image");
    let disk = PowerCutDisk::new(&dir, 7);
    let secret = {
        let options = Options::new()
            .memtable_bytes(64 << 10)
            .file_backend(Arc::new(disk.clone()));
        let tarn = Tarn::open_with(&dir, options).await?;
        let (s, secret) = fixture_with_key(&tarn).await?;
        // Given up on mid-stream, after segment files were staged.
        let stalled = Stalls {
            data: numbers_csv(0, 2_500_000).into_bytes(),
            at: 0,
        };
        let res = tokio::time::timeout(
            Duration::from_secs(3),
            s.upload_table("ws", "gone", "g.csv", stalled),
        )
        .await;
        assert!(res.is_err(), "the stalled upload finished?");
        assert!(s.table("ws", "gone").await.is_err());
        // Meanwhile and after: SQL tables get ids of their own.
        s.query(
            "ws",
            r#"CREATE TABLE "ws"."sql" (x INT8) USING engine"#,
            &[],
        )
        .await?;
        let up = s
            .upload_table("ws", "kept", "k.csv", numbers_csv(0, 1_200_000).as_bytes())
            .await?;
        assert_eq!(up.row_count, 1_200_000);
        s.query("ws", r#"INSERT INTO "ws"."sql" VALUES (1)"#, &[])
            .await?;
        // The power goes: the next open replays the upload's commit from the log.
        disk.cut_power();
        disk.write_image(&image)?;
        drop(s);
        drop(tarn);
        secret
    };
    for round in 0..2 {
        let tarn = Tarn::open(&image).await?;
        let s = reconnect(&tarn, &secret).await?;
        let got = rows(
            &s,
            r#"SELECT count(*), sum(id), max(half) FROM "ws"."kept""#,
        )
        .await?;
        // Round 1 sees round 0's delete of ids 0..10.
        let gone: u64 = if round == 0 { 0 } else { 10 };
        assert_eq!(
            got,
            vec![vec![
                json!(1_200_000 - gone),
                json!(1_200_000u64 * 1_199_999 / 2 - gone * (gone.max(1) - 1) / 2),
                json!(599_999.5)
            ]],
            "round {round}"
        );
        assert!(s.table("ws", "gone").await.is_err());
        assert_eq!(
            rows(&s, r#"SELECT x FROM "ws"."sql""#).await?,
            vec![vec![json!(1)]]
        );
        // The uploaded table takes writes like any other.
        s.query(
            "ws",
            &format!(r#"DELETE FROM "ws"."kept" WHERE id < {}"#, 10 + round),
            &[],
        )
        .await?;
        tarn.close().await?;
    }
    // Only the kept table's files were left (the stalled upload's went at open).
    let tarn = Tarn::open(&image).await?;
    let s = reconnect(&tarn, &secret).await?;
    let n = rows(&s, r#"SELECT count(*) FROM "ws"."kept""#).await?;
    assert_eq!(n, vec![vec![json!(1_200_000 - 11)]]);
    s.query("ws", r#"DROP TABLE "ws"."kept""#, &[]).await?;
    s.query("ws", r#"DROP TABLE "ws"."sql""#, &[]).await?;
    tarn.close().await?;
    assert_eq!(segment_files(&image), Vec::<String>::new());
    Ok(())
}

#[tokio::test]
#[ignore = "the child of kill_9_during_uploads"]
async fn upload_crash_child() -> TestResult {
    let Ok(dir) = std::env::var("TARN_UPLOAD_CRASH_DIR") else {
        return Ok(());
    };
    let start: u64 = std::env::var("TARN_UPLOAD_CRASH_START")?.parse()?;
    let tarn = Tarn::open_with(&dir, Options::new().memtable_bytes(64 << 10)).await?;
    let s = reconnect(&tarn, &std::fs::read_to_string(format!("{dir}/key"))?).await?;
    use std::io::Write;
    let mut out = std::io::stdout();
    for n in start.. {
        // Now and then more rows than one staged segment file holds (1 Mi rows).
        let rows = if n % 4 == 3 {
            1_100_000 + n
        } else {
            1 + (n * 150_001) % 400_000
        };
        writeln!(out, "start {n} {rows}")?;
        out.flush()?;
        let up = s
            .upload_table(
                "ws",
                &format!("t{n}"),
                "t.csv",
                numbers_csv(0, rows).as_bytes(),
            )
            .await?;
        writeln!(out, "done {n} {}", up.row_count)?;
        out.flush()?;
        if n % 3 == 1 {
            s.query("ws", &format!(r#"DROP TABLE "ws"."t{}""#, n - 1), &[])
                .await?;
            writeln!(out, "dropped {}", n - 1)?;
            out.flush()?;
        }
    }
    Ok(())
}

/// Each table `t{n}` either does not exist or holds exactly its `rows` rows (`0..rows`).
async fn check_tables(s: &Session, expected: &BTreeMap<u64, u64>) -> tarn::Result<Vec<u64>> {
    let mut present = Vec::new();
    for t in s.tables("ws").await? {
        let Some(n) = t.name.strip_prefix('t').and_then(|n| n.parse::<u64>().ok()) else {
            continue;
        };
        let got = rows(s, &format!(r#"SELECT count(*), sum(id) FROM "ws"."t{n}""#)).await?;
        let want = expected.get(&n).copied();
        if let Some(r) = want {
            assert_eq!(
                got,
                vec![vec![json!(r), json!(r * (r - 1) / 2)]],
                "table t{n}"
            );
        }
        present.push(n);
    }
    Ok(present)
}

#[tokio::test]
async fn kill_9_during_uploads() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().to_string_lossy().to_string();
    {
        let tarn = Tarn::open(&path).await?;
        let (_, secret) = fixture_with_key(&tarn).await?;
        std::fs::write(format!("{path}/key"), &secret)?;
        tarn.close().await?;
    }
    let secret = std::fs::read_to_string(format!("{path}/key"))?;
    let mut rng = Rng(0x0B10AD);
    let mut sizes: BTreeMap<u64, u64> = BTreeMap::new();
    let mut done: BTreeMap<u64, bool> = BTreeMap::new();
    let mut dropped: Vec<u64> = Vec::new();
    let mut next = 0u64;
    // Six rounds at least; more while too few uploads finished before their kill (a
    // loaded machine: the kill comes at a random moment after the child's third line).
    let mut round = 0;
    while round < 6 || (done.len() < 4 && round < 30) {
        round += 1;
        let lines = run_and_kill(
            &format!("{}::upload_crash_child", module_path!()),
            &[
                ("TARN_UPLOAD_CRASH_DIR", path.clone()),
                ("TARN_UPLOAD_CRASH_START", next.to_string()),
            ],
            3,
            Duration::from_secs(120),
            Duration::from_millis(rng.next_u64() % 400),
        )?;
        for line in &lines {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["start", n, rows] => {
                    let n: u64 = n.parse()?;
                    sizes.insert(n, rows.parse()?);
                    next = next.max(n + 1);
                }
                ["done", n, _] => {
                    done.insert(n.parse()?, true);
                }
                ["dropped", n] => dropped.push(n.parse()?),
                _ => {}
            }
        }
        let tarn = Tarn::open(&path).await?;
        let s = reconnect(&tarn, &secret).await?;
        let present = check_tables(&s, &sizes).await?;
        for (n, _) in done.iter() {
            // t{n} (n a multiple of 3) is dropped once t{n+1} is done: from then on its
            // drop may have landed.
            let maybe_dropped = dropped.contains(n) || (n % 3 == 0 && done.contains_key(&(n + 1)));
            if !maybe_dropped {
                assert!(present.contains(n), "acknowledged upload t{n} is missing");
            }
        }
        tarn.close().await?;
        // Every segment file belongs to a table that exists.
        let tarn = Tarn::open(&path).await?;
        let s = reconnect(&tarn, &secret).await?;
        let present = check_tables(&s, &sizes).await?;
        tarn.close().await?;
        // After the closing checkpoint every segment file is a present table's (each
        // has rows, so each has one or more files): none is left of the uploads the
        // kills interrupted, or of dropped tables.
        let owners: std::collections::BTreeSet<String> = segment_files(dir.path())
            .iter()
            .filter_map(|f| f.split('-').next().map(str::to_string))
            .collect();
        assert_eq!(owners.len(), present.len(), "{owners:?} vs {present:?}");
    }
    assert!(
        done.len() >= 4,
        "the child made too little progress: {done:?}"
    );
    Ok(())
}

#[tokio::test]
async fn power_cuts_during_uploads() -> TestResult {
    let mut rng = Rng(0xCAFE);
    let base = tempfile::tempdir()?;
    let mut dir = base.path().join("db0");
    let secret = {
        let tarn = Tarn::open(&dir).await?;
        let (_, secret) = fixture_with_key(&tarn).await?;
        tarn.close().await?;
        secret
    };
    let mut sizes: BTreeMap<u64, u64> = BTreeMap::new();
    let mut acked: Vec<u64> = Vec::new();
    let mut n = 0u64;
    for round in 0..8u64 {
        let disk = PowerCutDisk::new(&dir, rng.next_u64());
        let sync = if round % 4 == 3 {
            SyncMode::Process
        } else {
            SyncMode::Full
        };
        let options = Options::new()
            .sync(sync)
            .memtable_bytes(64 << 10)
            .file_backend(Arc::new(disk.clone()));
        let tarn = Tarn::open_with(&dir, options).await?;
        let s = reconnect(&tarn, &secret).await?;
        let done = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for _ in 0..2 {
            let rows = 1 + rng.next_u64() % 120_000;
            let (s, done, id) = (s.clone(), done.clone(), n);
            sizes.insert(id, rows);
            n += 1;
            tasks.push(tokio::spawn(async move {
                let body = numbers_csv(0, rows);
                if s.upload_table("ws", &format!("t{id}"), "t.csv", body.as_bytes())
                    .await
                    .is_ok()
                {
                    done.lock().push(id);
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(20 + rng.next_u64() % 300)).await;
        disk.cut_power();
        for t in tasks {
            let _ = t.await;
        }
        let image = base.path().join(format!("db{}", round + 1));
        disk.write_image(&image)?;
        drop(s);
        drop(tarn);
        dir = image;
        let tarn = Tarn::open(&dir).await?;
        let s = reconnect(&tarn, &secret).await?;
        let present = check_tables(&s, &sizes).await?;
        if sync == SyncMode::Full {
            acked.extend(done.lock().iter().copied());
            for id in &acked {
                assert!(
                    present.contains(id),
                    "round {round}: acknowledged t{id} missing"
                );
            }
        } else {
            acked = present.clone();
        }
        tarn.close().await?;
    }
    Ok(())
}

/// An upload and the DROP of its table both in the log (the checkpoint after the drop
/// failed), then two crashes in a row: the first open replays both and must keep the
/// uploaded files, because the second open replays the upload's record again.
#[tokio::test]
async fn files_of_a_dropped_upload_stay_until_a_checkpoint_covers_its_record() -> TestResult {
    let dir = tempfile::tempdir()?;
    let disk = FaultyBackend::new();
    let secret = {
        let options = Options::new()
            .background_maintenance(false)
            .file_backend(Arc::new(disk.clone()));
        let tarn = Tarn::open_with(dir.path(), options).await?;
        let (s, secret) = fixture_with_key(&tarn).await?;
        s.upload_table("ws", "t", "t.csv", numbers_csv(0, 50_000).as_bytes())
            .await?;
        s.upload_table("ws", "kept", "k.csv", numbers_csv(0, 1000).as_bytes())
            .await?;
        // No manifest can be written from here: the drop stays in the log only.
        disk.set(Fault::Op(FaultOp::Rename));
        s.query("ws", r#"DROP TABLE "ws"."t""#, &[]).await?;
        // Dropped on the runtime without close: no checkpoint, as after kill -9.
        drop(s);
        drop(tarn);
        secret
    };
    for round in 0..3 {
        let tarn =
            Tarn::open_with(dir.path(), Options::new().background_maintenance(false)).await?;
        let s = reconnect(&tarn, &secret).await?;
        assert!(s.table("ws", "t").await.is_err(), "round {round}");
        let n = rows(&s, r#"SELECT count(*) FROM "ws"."kept""#).await?;
        assert_eq!(n, vec![vec![json!(1000)]], "round {round}");
        drop(s);
        if round < 2 {
            drop(tarn); // another crash before any checkpoint
        } else {
            tarn.close().await?;
        }
    }
    // Once a checkpoint covers the records, the dropped table's files are gone.
    assert_eq!(
        segment_files(dir.path()).len(),
        1,
        "{:?}",
        segment_files(dir.path())
    );
    Ok(())
}

/// An upload is bound to the workspace it started in (issue 34): when that workspace is
/// deleted while the file streams, the upload is a 404 and creates nothing, also when a
/// new workspace of the same id (or of a new organization of the same id) exists by the
/// time it commits; staged rows go with it.
#[tokio::test]
async fn an_upload_lands_in_the_workspace_it_started_in_or_nowhere() -> TestResult {
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir()?;
    let tarn = Tarn::open(dir.path()).await?;
    let s = fixture(&tarn).await?;
    let body = numbers_csv(0, 50_000).into_bytes();
    for case in tarn_tests::WORKSPACE_REPLACEMENTS {
        s.create_workspace("cw", "Doomed").await?;
        // A client that sends part of the file, then waits: the pipe's buffer is smaller
        // than the part, so the write returning means the upload has begun reading.
        let (mut client, reader) = tokio::io::duplex(16 << 10);
        let upload = {
            let s = s.clone();
            tokio::spawn(async move { s.upload_table("cw", "t", "t.csv", reader).await })
        };
        client.write_all(&body[..200_000]).await?;
        tarn_tests::replace_workspace(&s, case).await?;
        client.write_all(&body[200_000..]).await?;
        drop(client);
        let err = upload.await?.expect_err(case);
        assert_eq!(err.status(), 404, "{case}: {err}");
        if case != "deleted" {
            assert!(s.table("cw", "t").await.is_err(), "{case}");
            assert!(s.tables("cw").await?.is_empty(), "{case}");
        }
        if s.workspace("cw").await.is_ok() {
            s.delete_workspace("cw").await?;
        }
    }
    // The workspace it started in still there: the upload lands.
    s.create_workspace("cw", "Kept").await?;
    let up = s.upload_table("cw", "t", "t.csv", &body[..]).await?;
    assert_eq!(up.row_count, 50_000);
    s.delete_workspace("cw").await?;
    tarn.close().await?;
    // Nothing staged by the refused uploads is left behind.
    assert_eq!(segment_files(dir.path()), Vec::<String>::new());
    Ok(())
}

/// Column names from a file's header or keys are refused, as in CREATE TABLE, when they
/// hold control characters (a quoted CSV header can hold a line break, a JSON key a
/// NUL) or bidirectional controls; nothing is created.
#[tokio::test]
async fn header_names_with_control_characters_are_refused() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let s = fixture(&tarn).await?;
    for (file, body) in [
        ("a.csv", "id,\"two\nlines\"\n1,2\n".to_string()),
        ("b.csv", "id,\"x\u{202E}y\"\n1,2\n".to_string()),
        ("c.json", r#"[{"id": 1, "a\u0000b": 2}]"#.to_string()),
        ("d.csv", "id,\"two\nlines\"\n".to_string()),
    ] {
        let e = s
            .upload_table("ws", "t", file, body.as_bytes())
            .await
            .unwrap_err();
        assert_eq!(e.status(), 400, "{file}: {e}");
        assert!(e.message().contains("not allowed"), "{file}: {e}");
        assert!(s.tables("ws").await?.is_empty(), "{file}");
    }
    Ok(())
}

/// `-0` in JSON and NDJSON is an integer's 0, as in CSV (SPEC §6): `serde_json` reads it
/// as the float -0.0, which had made an all-integer column float8 holding -0.0. A
/// decimal (`-0.0`) stays a float.
#[tokio::test]
async fn minus_zero_in_json_is_an_integer_as_in_csv() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let s = fixture(&tarn).await?;
    for (table, file, body) in [
        ("nd", "z.ndjson", "{\"x\":-0}\n{\"x\":5}\n"),
        ("js", "z.json", "[{\"x\":-0},{\"x\":7}]"),
        ("alone", "a.json", "[{\"x\":-0}]"),
        ("csv", "z.csv", "x\n-0\n5\n"),
    ] {
        s.upload_table("ws", table, file, body.as_bytes()).await?;
        assert_eq!(
            columns(&s, table).await?,
            vec![col("x", "int8", false)],
            "{file}"
        );
        let r = s
            .query(
                "ws",
                &format!(r#"SELECT x FROM "ws"."{table}" ORDER BY x"#),
                &[],
            )
            .await?;
        assert_eq!(
            r.rows.as_ref().map(|r| r[0][0].clone()),
            Some(json!(0)),
            "{file}"
        );
    }
    s.upload_table(
        "ws",
        "dec",
        "d.json",
        b"[{\"x\":-0.0},{\"x\":7}]".as_slice(),
    )
    .await?;
    assert_eq!(columns(&s, "dec").await?, vec![col("x", "float8", false)]);
    Ok(())
}
