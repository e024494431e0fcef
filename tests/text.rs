//! Text `<#>` (BM25) through the public API (SPEC §5): scores equal tantivy's own over
//! the table's live rows — in the memtable, through segment indexes, after deletes,
//! updates, VACUUM and reopen — as a plain expression and as a ranked top-k; rows are
//! searchable when their statement returns; bad requests are 400s; hostile query text
//! never fails; EXPLAIN names the index.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Value, json};
use tarn::{ErrorKind, Options, Session, SyncMode, Tarn};
use tarn_tests::{cisi_texts, fixture, fixture_with_key, reconnect, tantivy_scores};

type TestResult = Result<(), Box<dyn std::error::Error>>;

async fn rows(s: &Session, sql: &str, params: &[Value]) -> Result<Vec<Vec<Value>>, tarn::Error> {
    Ok(s.query("ws", sql, params).await?.rows.unwrap_or_default())
}

fn manual() -> Options {
    Options::new()
        .sync(SyncMode::Process)
        .memtable_bytes(1 << 20)
        .background_maintenance(false)
}

fn quote(t: &str) -> String {
    format!("'{}'", t.replace('\'', "''"))
}

async fn create(s: &Session, tokenizer: &str) -> TestResult {
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."t" (id INT PRIMARY KEY, body TEXT, cat INT) USING engine"#,
        &[],
    )
    .await?;
    s.query(
        "ws",
        &format!(
            r#"CREATE INDEX t_body ON "ws"."t" USING engine_index (body) WITH (index_type = 'bm25', tokenizer = '{tokenizer}')"#
        ),
        &[],
    )
    .await?;
    Ok(())
}

async fn insert(
    s: &Session,
    model: &mut BTreeMap<i64, String>,
    docs: &[(i64, String)],
) -> TestResult {
    for chunk in docs.chunks(100) {
        let values: Vec<String> = chunk
            .iter()
            .map(|(i, t)| format!("({i}, {}, {})", quote(t), i % 10))
            .collect();
        s.query(
            "ws",
            &format!(r#"INSERT INTO "ws"."t" VALUES {}"#, values.join(",")),
            &[],
        )
        .await?;
        for (i, t) in chunk {
            model.insert(*i, t.clone());
        }
    }
    Ok(())
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-5 * a.abs().max(1.0)
}

const QUERIES: &[&str] = &[
    "information retrieval",
    "\"information retrieval\" systems",
    "+library -computer",
    "automatic indexing classification",
    "nonexistentword",
];

/// Checks that `body <#> q` of every row of the table equals `want` (tantivy's scores;
/// 0 for rows it leaves out); returns the number of rows.
async fn every_score(
    s: &Session,
    want: &HashMap<i64, f32>,
    q: &str,
    what: &str,
) -> Result<usize, Box<dyn std::error::Error>> {
    let all = rows(s, r#"SELECT id, body <#> $1 FROM "ws"."t""#, &[json!(q)]).await?;
    for r in &all {
        let id = r[0].as_i64().ok_or("id")?;
        let got = r[1].as_f64().ok_or("score")?;
        let w = want.get(&id).copied().unwrap_or(0.0) as f64;
        assert!(close(w, got), "{what}: row {id}: tantivy {w}, tarn {got}");
    }
    Ok(all.len())
}

/// Checks every query's scores against tantivy's over `model` (the live rows), as a
/// plain expression over every row and as a ranked top-10.
async fn check(s: &Session, model: &BTreeMap<i64, String>, what: &str) -> TestResult {
    let texts: Vec<(i64, &str)> = model.iter().map(|(i, t)| (*i, t.as_str())).collect();
    for q in QUERIES {
        let want = tantivy_scores(&texts, "en_stem", q);
        let all = every_score(s, &want, q, &format!("{what} {q}")).await?;
        assert_eq!(all, model.len(), "{what} {q}");
        let top = rows(
            s,
            r#"SELECT id, body <#> $1 AS s FROM "ws"."t" ORDER BY s DESC LIMIT 10"#,
            &[json!(q)],
        )
        .await?;
        assert_eq!(top.len(), 10.min(model.len()), "{what} {q}");
        // The fast path (the statements above) and the planned search node (the same
        // with a WHERE the fast path leaves to the planner) return the same rows.
        let planned = rows(
            s,
            r#"SELECT id, body <#> $1 AS s FROM "ws"."t" WHERE true ORDER BY s DESC LIMIT 10"#,
            &[json!(q)],
        )
        .await?;
        assert_eq!(top, planned, "{what} {q}: fast path vs planner");
        let fast = rows(
            s,
            r#"SELECT id, body <#> $1 AS s FROM "ws"."t" WHERE cat = 3 ORDER BY s DESC LIMIT 5"#,
            &[json!(q)],
        )
        .await?;
        let planned = rows(
            s,
            r#"SELECT id, body <#> $1 AS s FROM "ws"."t" WHERE cat + 0 = 3 ORDER BY s DESC LIMIT 5"#,
            &[json!(q)],
        )
        .await?;
        assert_eq!(fast, planned, "{what} {q}: filtered fast path vs planner");
        let mut best: Vec<f64> = model
            .keys()
            .map(|id| want.get(id).copied().unwrap_or(0.0) as f64)
            .collect();
        best.sort_by(|a, b| b.total_cmp(a));
        for (r, w) in top.iter().zip(&best) {
            let id = r[0].as_i64().ok_or("id")?;
            let got = r[1].as_f64().ok_or("score")?;
            assert!(
                close(*w, got),
                "{what} {q}: rank of row {id}: want {w}, got {got}"
            );
            let own = want.get(&id).copied().unwrap_or(0.0) as f64;
            assert!(
                close(own, got),
                "{what} {q}: row {id}: tantivy {own}, tarn {got}"
            );
        }
    }
    Ok(())
}

#[tokio::test]
async fn scores_equal_tantivys_over_live_rows_across_segments_and_reopen() -> TestResult {
    let corpus = cisi_texts();
    let dir = tempfile::tempdir()?;
    let tarn = Tarn::open_with(dir.path(), manual()).await?;
    let (s, key) = fixture_with_key(&tarn).await?;
    create(&s, "en_stem").await?;
    let mut model = BTreeMap::new();
    let docs: Vec<(i64, String)> = (0..400).map(|i| (i, corpus[i as usize].clone())).collect();
    insert(&s, &mut model, &docs).await?;
    check(&s, &model, "memtable").await?;

    s.query("ws", r#"VACUUM "ws"."t""#, &[]).await?;
    check(&s, &model, "indexed segment").await?;

    let docs: Vec<(i64, String)> = (400..700)
        .map(|i| (i, corpus[i as usize].clone()))
        .collect();
    insert(&s, &mut model, &docs).await?;
    s.query("ws", r#"DELETE FROM "ws"."t" WHERE id % 7 = 3"#, &[])
        .await?;
    model.retain(|id, _| id % 7 != 3);
    s.query(
        "ws",
        r#"UPDATE "ws"."t" SET body = 'library computer library' WHERE id % 11 = 5"#,
        &[],
    )
    .await?;
    for (id, t) in model.iter_mut() {
        if id % 11 == 5 {
            *t = "library computer library".into();
        }
    }
    check(
        &s,
        &model,
        "index with deletes and updates, and the memtable",
    )
    .await?;

    tarn.close().await?;
    let tarn = Tarn::open_with(dir.path(), manual()).await?;
    let s = reconnect(&tarn, &key).await?;
    check(&s, &model, "reopened: a segment without its index").await?;
    s.query("ws", r#"VACUUM "ws"."t""#, &[]).await?;
    check(&s, &model, "after VACUUM").await?;
    let files = std::fs::read_dir(dir.path().join("segments"))?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".idx"))
        .count();
    assert!(files >= 1, "the text index is a file");
    s.query("ws", r#"DROP INDEX "ws"."t_body""#, &[]).await?;
    s.query("ws", r#"VACUUM "ws"."t""#, &[]).await?;
    let files = std::fs::read_dir(dir.path().join("segments"))?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".idx"))
        .count();
    assert_eq!(files, 0, "DROP INDEX removes its files");
    let err = s
        .query("ws", r#"SELECT body <#> 'x' FROM "ws"."t""#, &[])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadRequest);
    Ok(())
}

#[tokio::test]
async fn other_tokenizers_score_as_tantivys() -> TestResult {
    let corpus = cisi_texts();
    for tok in ["default", "whitespace"] {
        let tarn = Tarn::in_memory().await?;
        let s = fixture(&tarn).await?;
        create(&s, tok).await?;
        let mut model = BTreeMap::new();
        let docs: Vec<(i64, String)> = (0..150).map(|i| (i, corpus[i as usize].clone())).collect();
        insert(&s, &mut model, &docs).await?;
        let texts: Vec<(i64, &str)> = model.iter().map(|(i, t)| (*i, t.as_str())).collect();
        for q in ["Information retrieval", "\"of the\" library"] {
            let want = tantivy_scores(&texts, tok, q);
            every_score(&s, &want, q, &format!("{tok} {q}")).await?;
        }
    }
    Ok(())
}

#[tokio::test]
async fn rows_are_found_when_their_statement_returns_and_old_text_never_again() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let s = fixture(&tarn).await?;
    create(&s, "en_stem").await?;
    let top = r#"SELECT id FROM "ws"."t" ORDER BY body <#> $1 DESC LIMIT 3"#;
    s.query("ws", r#"INSERT INTO "ws"."t" VALUES (1, 'the quick brown fox', 1), (2, 'lazy dogs sleep', 2), (3, NULL, 3)"#, &[])
        .await?;
    let ids = |r: Vec<Vec<Value>>| r.iter().filter_map(|r| r[0].as_i64()).collect::<Vec<_>>();
    // Matches first, then rows matching nothing (0) by row id, then NULL text.
    assert_eq!(ids(rows(&s, top, &[json!("fox")]).await?), vec![1, 2, 3]);
    assert_eq!(ids(rows(&s, top, &[json!("dog")]).await?), vec![2, 1, 3]);
    s.query(
        "ws",
        r#"UPDATE "ws"."t" SET body = 'cats only' WHERE id = 1"#,
        &[],
    )
    .await?;
    let r = rows(
        &s,
        r#"SELECT id, body <#> 'fox' FROM "ws"."t" ORDER BY id"#,
        &[],
    )
    .await?;
    assert_eq!(r[0][1], json!(0.0), "the old text never matches again");
    assert_eq!(r[2][1], Value::Null, "NULL text scores NULL");
    s.query("ws", r#"DELETE FROM "ws"."t" WHERE id = 2"#, &[])
        .await?;
    assert_eq!(ids(rows(&s, top, &[json!("dog")]).await?), vec![1, 3]);
    // Filters: exactly min(k, matching rows).
    let r = rows(
        &s,
        r#"SELECT id FROM "ws"."t" WHERE cat = 3 ORDER BY body <#> 'cat' DESC LIMIT 5"#,
        &[],
    )
    .await?;
    assert_eq!(ids(r), vec![3]);
    Ok(())
}

#[tokio::test]
async fn bad_requests_are_400_and_hostile_text_is_words() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let s = fixture(&tarn).await?;
    create(&s, "en_stem").await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."plain" (id INT, body TEXT)"#,
        &[],
    )
    .await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."u" (id INT, body TEXT) USING engine"#,
        &[],
    )
    .await?;
    s.query(
        "ws",
        r#"INSERT INTO "ws"."t" VALUES (1, 'information retrieval systems', 1)"#,
        &[],
    )
    .await?;
    let bad = |sql: &'static str, msg: &'static str| {
        let s = s.clone();
        async move {
            let err = s.query("ws", sql, &[]).await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::BadRequest, "{sql}: {err}");
            assert!(err.to_string().contains(msg), "{sql}: {err}");
        }
    };
    bad(
        r#"SELECT body <#> 'x' FROM "ws"."u""#,
        r#"CREATE INDEX ON "ws"."u" USING engine_index (body) WITH (index_type = 'bm25')"#,
    )
    .await;
    bad(
        r#"CREATE INDEX ON "ws"."t" USING engine_index (id) WITH (index_type = 'bm25')"#,
        "needs a text or varchar column",
    )
    .await;
    bad(
        r#"CREATE INDEX ON "ws"."plain" USING engine_index (body) WITH (index_type = 'bm25')"#,
        "USING engine",
    )
    .await;
    bad(
        r#"CREATE INDEX ON "ws"."u" USING engine_index (body) WITH (index_type = 'bm25', tokenizer = 'klingon')"#,
        "tokenizer",
    )
    .await;
    bad(
        r#"SELECT body <#> body FROM "ws"."t""#,
        "must be a constant string",
    )
    .await;
    let hostile = [
        "\"unbalanced quote",
        "information OR (retrieval AND",
        "title:information retriev*",
        "🦀 information 🦀",
        "+ - \" ++ --",
        "",
    ];
    for q in hostile {
        let r = rows(
            &s,
            r#"SELECT id, body <#> $1 FROM "ws"."t" ORDER BY 2 DESC LIMIT 5"#,
            &[json!(q)],
        )
        .await?;
        assert_eq!(r.len(), 1, "{q}");
    }
    let big = "information ".repeat(10_000);
    let r = rows(&s, r#"SELECT body <#> $1 FROM "ws"."t""#, &[json!(big)]).await?;
    assert!(r[0][0].as_f64().is_some_and(|x| x > 0.0), "{r:?}");
    let r = rows(&s, r#"SELECT body <#> NULL FROM "ws"."t""#, &[]).await?;
    assert_eq!(r[0][0], Value::Null);
    // A constant expression is a constant query, as in PostgreSQL.
    let folded = rows(
        &s,
        r#"SELECT body <#> ('retr' || 'ieval') FROM "ws"."t""#,
        &[],
    )
    .await?;
    let plain = rows(&s, r#"SELECT body <#> 'retrieval' FROM "ws"."t""#, &[]).await?;
    assert_eq!(folded, plain);
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for q in ["information", "\"retrieval systems\"", "-information"] {
        let r = rows(
            &s,
            r#"SELECT count(*) FROM "ws"."t" WHERE body <#> $1 > 0"#,
            &[json!(q)],
        )
        .await?;
        counts.insert(q, r[0][0].as_i64().unwrap_or(-1) as usize);
    }
    assert_eq!(counts["information"], 1);
    assert_eq!(counts["\"retrieval systems\""], 1);
    assert_eq!(counts["-information"], 0);
    Ok(())
}

#[tokio::test]
async fn explain_names_the_bm25_index() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let s = fixture(&tarn).await?;
    create(&s, "en_stem").await?;
    let r = rows(
        &s,
        r#"EXPLAIN SELECT id FROM "ws"."t" WHERE cat = 1 ORDER BY body <#> 'library' DESC LIMIT 5"#,
        &[],
    )
    .await?;
    let plan = format!("{r:?}");
    assert!(plan.contains("TarnSearch"), "{plan}");
    assert!(plan.contains("index=t_body (bm25)"), "{plan}");
    Ok(())
}

/// `CREATE INDEX … bm25` over rows already sealed in segments builds their index files
/// before it returns, reporting progress to the host's callback (as HNSW's does), so
/// the first search goes through the postings rather than tokenizing every row.
#[tokio::test]
async fn create_index_builds_the_bm25_files_of_existing_rows_with_progress() -> TestResult {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let dir = tempfile::tempdir()?;
    let rows_seen = Arc::new(AtomicUsize::new(0));
    let seen = rows_seen.clone();
    let options = manual().on_index_progress(move |p| {
        seen.fetch_max(p.rows_done, Ordering::Relaxed);
    });
    let tarn = Tarn::open_with(dir.path(), options).await?;
    let s = fixture(&tarn).await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."t" (id INT PRIMARY KEY, body TEXT, cat INT) USING engine"#,
        &[],
    )
    .await?;
    let corpus = cisi_texts();
    let docs: Vec<(i64, String)> = (0..300).map(|i| (i, corpus[i as usize].clone())).collect();
    insert(&s, &mut BTreeMap::new(), &docs).await?;
    s.query("ws", r#"VACUUM "ws"."t""#, &[]).await?;
    let idx_files = || -> std::io::Result<usize> {
        Ok(std::fs::read_dir(dir.path().join("segments"))?
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(".idx"))
            .count())
    };
    assert_eq!(idx_files()?, 0);
    s.query(
        "ws",
        r#"CREATE INDEX t_body ON "ws"."t" USING engine_index (body) WITH (index_type = 'bm25')"#,
        &[],
    )
    .await?;
    assert_eq!(idx_files()?, 1, "built when CREATE INDEX returns");
    assert_eq!(
        rows_seen.load(Ordering::Relaxed),
        300,
        "progress reached every row"
    );
    tarn.close().await?;
    Ok(())
}

#[tokio::test]
#[ignore = "child process of kill_9_between_writes_and_text_index_builds"]
async fn text_writer_child() -> TestResult {
    let Ok(dir) = std::env::var("TARN_TEXT_DIR") else {
        return Ok(());
    };
    let start: i64 = std::env::var("TARN_TEXT_START")?.parse()?;
    let tarn = Tarn::open_with(&dir, manual()).await?;
    let s = reconnect(&tarn, &std::fs::read_to_string(format!("{dir}/key"))?).await?;
    for i in start.. {
        s.query(
            "ws",
            &format!(
                r#"INSERT INTO "ws"."t" VALUES ({i}, 'row tok{i} information', {})"#,
                i % 10
            ),
            &[],
        )
        .await?;
        println!("inserted {i}");
        if i % 25 == 0 {
            s.query(
                "ws",
                &format!(r#"DELETE FROM "ws"."t" WHERE id = {}"#, i - 7),
                &[],
            )
            .await?;
            println!("deleted {}", i - 7);
            s.query("ws", r#"VACUUM "ws"."t""#, &[]).await?;
        }
    }
    Ok(())
}

#[tokio::test]
async fn kill_9_between_writes_and_text_index_builds() -> TestResult {
    use std::io::Read;
    use std::process::Stdio;
    let dir = tempfile::tempdir()?;
    let path = dir.path().to_string_lossy().to_string();
    let secret = {
        let tarn = Tarn::open_with(&path, manual()).await?;
        let (s, secret) = fixture_with_key(&tarn).await?;
        std::fs::write(format!("{path}/key"), &secret)?;
        create(&s, "en_stem").await?;
        tarn.close().await?;
        secret
    };
    let mut model: BTreeMap<i64, String> = BTreeMap::new();
    let mut next = 0i64;
    let mut rng = tarn_tests::Rng(5);
    for round in 0..5 {
        let mut child = tarn_tests::child_test(&format!("{}::text_writer_child", module_path!()))?
            .env("TARN_TEXT_DIR", &path)
            .env("TARN_TEXT_START", next.to_string())
            .stdout(Stdio::piped())
            .spawn()?;
        std::thread::sleep(std::time::Duration::from_millis(300 + rng.below(1500)));
        child.kill()?;
        child.wait()?;
        let mut out = String::new();
        child
            .stdout
            .take()
            .ok_or("stdout")?
            .read_to_string(&mut out)?;
        let mut last_attempt = next;
        for line in out.lines() {
            // The test harness may print its own words before the first line.
            if let Some((_, i)) = line.rsplit_once("inserted ") {
                let i: i64 = i.parse()?;
                model.insert(i, format!("row tok{i} information"));
                last_attempt = i + 1;
            } else if let Some((_, i)) = line.rsplit_once("deleted ") {
                model.remove(&i.parse::<i64>()?);
            }
        }

        let tarn = Tarn::open_with(&path, manual()).await?;
        let s = reconnect(&tarn, &secret).await?;
        // The statement in flight when the child died may or may not have committed.
        let stored: Vec<i64> = rows(&s, r#"SELECT id FROM "ws"."t" ORDER BY id"#, &[])
            .await?
            .iter()
            .filter_map(|r| r[0].as_i64())
            .collect();
        for i in &stored {
            if !model.contains_key(i) && *i >= last_attempt - 1 {
                model.insert(*i, format!("row tok{i} information"));
            }
        }
        let deleted_in_flight: Vec<i64> = model
            .keys()
            .copied()
            .filter(|i| !stored.contains(i))
            .collect();
        for i in deleted_in_flight {
            assert!(
                model.contains_key(&(i + 7)) && (i + 7) % 25 == 0,
                "round {round}: row {i} was lost"
            );
            model.remove(&i);
        }
        assert_eq!(
            stored,
            model.keys().copied().collect::<Vec<_>>(),
            "round {round}"
        );
        next = stored
            .last()
            .map_or(last_attempt, |l| l + 1)
            .max(last_attempt);
        // Each row is found by its own token exactly once, and scores are tantivy's.
        for i in model.keys().rev().take(5) {
            let r = rows(
                &s,
                r#"SELECT id FROM "ws"."t" WHERE body <#> $1 > 0"#,
                &[json!(format!("tok{i}"))],
            )
            .await?;
            assert_eq!(r, vec![vec![json!(i)]], "round {round}");
        }
        check(&s, &model, &format!("round {round}")).await?;
        tarn.close().await?;
    }
    Ok(())
}

/// Table `"ws"."h" (id, e FLOAT4[2], body TEXT, cat)` with a bm25 index on `body` and
/// four rows (plus the `VALUES` items in `more`, each starting with a comma).
async fn hybrid_table(tarn: &Tarn, more: &str) -> Result<Session, Box<dyn std::error::Error>> {
    let s = fixture(tarn).await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."h" (id INT PRIMARY KEY, e FLOAT4[2], body TEXT, cat INT) USING engine"#,
        &[],
    )
    .await?;
    s.query(
        "ws",
        r#"CREATE INDEX h_body ON "ws"."h" USING engine_index (body) WITH (index_type = 'bm25')"#,
        &[],
    )
    .await?;
    s.query(
        "ws",
        &format!(
            r#"INSERT INTO "ws"."h" VALUES
               (1, '{{1,0}}', 'cats and dogs', 1),
               (2, '{{0,1}}', 'library science library', 2),
               (3, '{{0.7,0.7}}', 'library cats', 1),
               (4, NULL, 'nothing here', 2){more}"#
        ),
        &[],
    )
    .await?;
    Ok(s)
}

#[tokio::test]
async fn hybrid_fuses_both_arms_and_shows_why() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let s = hybrid_table(&tarn, "").await?;
    let q = r#"SELECT id, (e, body) <#> engine_hybrid_record('{1,0}', 'library') AS f,
                      (e, body) <#> engine_hybrid_scores('{1,0}', 'library') AS s
               FROM "ws"."h" ORDER BY (e, body) <#> engine_hybrid_record('{1,0}', 'library') DESC LIMIT 4"#;
    let r = rows(&s, q, &[]).await?;
    assert_eq!(r.len(), 4, "{r:?}");
    // Row 3 is good on both arms; fused scores descend and equal the struct's.
    assert_eq!(r[0][0], json!(3), "{r:?}");
    let mut last = f64::INFINITY;
    for row in &r {
        let f = row[1].as_f64().unwrap_or(-1.0);
        assert!(f <= last, "{r:?}");
        last = f;
        assert_eq!(row[2]["fused"], row[1], "{r:?}");
    }
    // Weights: all on the vector arm ranks by cosine.
    let r = rows(
        &s,
        r#"SELECT id FROM "ws"."h" ORDER BY (e, body) <#> engine_hybrid_record('{1,0}', 'library', 1, 0) DESC LIMIT 1"#,
        &[],
    )
    .await?;
    assert_eq!(r, vec![vec![json!(1)]]);
    // Each fusion runs, with filters and without LIMIT.
    for fusion in ["minmax", "softmax", "rrf"] {
        let r = rows(
            &s,
            &format!(
                r#"SELECT id FROM "ws"."h" WHERE cat = 1 ORDER BY (e, body) <#> engine_hybrid_record('{{1,0}}', 'library', 0.5, 0.5, '{fusion}') DESC LIMIT 5"#
            ),
            &[],
        )
        .await?;
        assert_eq!(r.len(), 2, "{fusion}: {r:?}");
        let r = rows(
            &s,
            &format!(
                r#"SELECT id, (e, body) <#> engine_hybrid_record('{{1,0}}', 'library', 0.5, 0.5, '{fusion}') FROM "ws"."h""#
            ),
            &[],
        )
        .await?;
        assert_eq!(r.len(), 4, "{fusion}: {r:?}");
    }
    let r = rows(
        &s,
        r#"EXPLAIN SELECT id FROM "ws"."h" ORDER BY (e, body) <#> engine_hybrid_record('{1,0}', 'library') DESC LIMIT 3"#,
        &[],
    )
    .await?;
    let plan = format!("{r:?}");
    assert!(
        plan.contains("h_body (bm25)") && plan.contains("fusion=minmax"),
        "{plan}"
    );
    for (sql, msg) in [
        (
            r#"SELECT (e, body) <#> engine_hybrid_record('{1,0}', 'x', 1.5, 0.5) FROM "ws"."h""#,
            "between 0 and 1",
        ),
        (
            r#"SELECT (e, body) <#> engine_hybrid_record('{1,0}', 'x', 0.5, 0.5, 'max') FROM "ws"."h""#,
            "unknown fusion",
        ),
        (
            r#"SELECT (e, body) <#> engine_hybrid_record('{1,0,0}', 'x') FROM "ws"."h""#,
            "dimensions",
        ),
        (
            r#"SELECT engine_hybrid_record('{1,0}', 'x') FROM "ws"."h""#,
            "right side",
        ),
        (
            r#"SELECT (e, body) <#> engine_hybrid_scores(e, 'library') FROM "ws"."h""#,
            "must be a constant (a literal, array text or a parameter), not column \"e\"",
        ),
        (
            r#"SELECT (e, body) <#> engine_hybrid_record('{1,0}', body) FROM "ws"."h""#,
            "the text of a hybrid search must be a constant string, not column \"body\"",
        ),
    ] {
        let err = s.query("ws", sql, &[]).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::BadRequest, "{sql}: {err}");
        assert!(err.to_string().contains(msg), "{sql}: {err}");
    }
    Ok(())
}

/// Review findings on hybrid search: a NULL arm leaves the other ranking; without
/// LIMIT the normalization is over every live row whatever WHERE says, so ORDER BY
/// does not change a row's fused score.
#[tokio::test]
async fn hybrid_null_arms_and_unlimited_order_by() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let s = hybrid_table(
        &tarn,
        ", (5, '{0.2,0.9}', 'library', 1), (6, '{-1,0}', NULL, 1)",
    )
    .await?;
    // NULL text: the vector arm alone ranks (min-max over the rows: 1, 3, 5, 2, 6),
    // rows with no vector last; the same through the search node and as an expression.
    let ranked = rows(
        &s,
        r#"SELECT id, (e, body) <#> engine_hybrid_record('{1,0}', NULL) AS f FROM "ws"."h" ORDER BY f DESC LIMIT 6"#,
        &[],
    )
    .await?;
    let ids: Vec<&Value> = ranked.iter().map(|r| &r[0]).collect();
    assert_eq!(
        ids,
        [
            &json!(1),
            &json!(3),
            &json!(5),
            &json!(2),
            &json!(6),
            &json!(4)
        ],
        "{ranked:?}"
    );
    assert_eq!(ranked[0][1], json!(0.5), "weight 0.5 times 1: {ranked:?}");
    assert_eq!(ranked[5][1], Value::Null, "{ranked:?}");
    let plain = rows(
        &s,
        r#"SELECT id, (e, body) <#> engine_hybrid_scores('{1,0}', NULL) AS s FROM "ws"."h" ORDER BY id"#,
        &[],
    )
    .await?;
    assert_eq!(plain[0][1]["fused"], json!(0.5), "{plain:?}");
    assert_eq!(plain[0][1]["text"], Value::Null, "{plain:?}");
    // NULL vector: the text arm alone.
    let ranked = rows(
        &s,
        r#"SELECT id FROM "ws"."h" ORDER BY (e, body) <#> engine_hybrid_record(NULL, 'library') DESC LIMIT 3"#,
        &[],
    )
    .await?;
    let ids: Vec<i64> = ranked.iter().filter_map(|r| r[0].as_i64()).collect();
    assert_eq!(ids.len(), 3);
    assert!(ids.iter().all(|i| [2, 3, 5].contains(i)), "{ranked:?}");

    // Without LIMIT: WHERE picks rows but does not change their scores.
    let plain = rows(
        &s,
        r#"SELECT id, (e, body) <#> engine_hybrid_record('{1,0}', 'library') FROM "ws"."h" WHERE cat = 2 ORDER BY id"#,
        &[],
    )
    .await?;
    let mut sorted = rows(
        &s,
        r#"SELECT id, (e, body) <#> engine_hybrid_record('{1,0}', 'library') AS f FROM "ws"."h" WHERE cat = 2 ORDER BY f DESC"#,
        &[],
    )
    .await?;
    sorted.sort_by_key(|r| r[0].as_i64());
    assert_eq!(plain, sorted);
    let all = rows(
        &s,
        r#"SELECT id, (e, body) <#> engine_hybrid_record('{1,0}', 'library') FROM "ws"."h" ORDER BY id"#,
        &[],
    )
    .await?;
    assert_eq!(plain[0], all[1], "row 2 scores as over the whole table");

    // The fast path (no WHERE, or integer comparisons) and the planned search node
    // (WHERE true) rank the same rows with the same fused scores, in every fusion.
    for args in ["", ", 0.7, 0.3", ", 0.5, 0.5, 'softmax'", ", 1, 0, 'RRF'"] {
        for (fast_where, planned_where) in
            [("", "WHERE true"), ("WHERE cat = 1", "WHERE cat + 0 = 1")]
        {
            let sql = |w: &str| {
                format!(
                    r#"SELECT id, (e, body) <#> engine_hybrid_record($1, $2{args}) AS f FROM "ws"."h" {w} ORDER BY f DESC LIMIT 4"#
                )
            };
            let params = [json!([1.0, 0.0]), json!("library cats")];
            let fast = rows(&s, &sql(fast_where), &params).await?;
            let planned = rows(&s, &sql(planned_where), &params).await?;
            assert_eq!(fast, planned, "{args} {fast_where}");
            assert!(!fast.is_empty());
        }
    }
    Ok(())
}

/// Rows written before a text column was added with a DEFAULT read as that text, in
/// scores and statistics, whether in memory, in segments or indexed.
#[tokio::test]
async fn added_text_column_default_is_searched_as_its_text() -> TestResult {
    let dir = tempfile::tempdir()?;
    let tarn = Tarn::open_with(dir.path(), manual()).await?;
    let s = fixture(&tarn).await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."t" (id INT PRIMARY KEY, cat INT) USING engine"#,
        &[],
    )
    .await?;
    s.query("ws", r#"INSERT INTO "ws"."t" VALUES (1, 1), (2, 2)"#, &[])
        .await?;
    s.query("ws", r#"VACUUM "ws"."t""#, &[]).await?;
    s.query("ws", r#"INSERT INTO "ws"."t" VALUES (5, 5)"#, &[])
        .await?;
    s.query(
        "ws",
        r#"ALTER TABLE "ws"."t" ADD COLUMN body TEXT DEFAULT 'hello world'"#,
        &[],
    )
    .await?;
    s.query(
        "ws",
        r#"INSERT INTO "ws"."t" VALUES (3, 3, 'hello there'), (4, 4, 'other stuff')"#,
        &[],
    )
    .await?;
    s.query(
        "ws",
        r#"CREATE INDEX t_body ON "ws"."t" USING engine_index (body) WITH (index_type = 'bm25')"#,
        &[],
    )
    .await?;
    let texts: BTreeMap<i64, String> = [
        (1, "hello world"),
        (2, "hello world"),
        (3, "hello there"),
        (4, "other stuff"),
        (5, "hello world"),
    ]
    .into_iter()
    .map(|(i, t)| (i, t.to_string()))
    .collect();
    for stage in ["segment and memtable", "all indexed"] {
        let plain = rows(
            &s,
            r#"SELECT id, body <#> 'hello' FROM "ws"."t" ORDER BY id"#,
            &[],
        )
        .await?;
        let docs: Vec<(i64, &str)> = texts.iter().map(|(i, t)| (*i, t.as_str())).collect();
        let want = tantivy_scores(&docs, "en_stem", "hello");
        for row in &plain {
            let got = row[1].as_f64().unwrap_or(-1.0);
            let id = row[0].as_i64().unwrap_or(-1);
            let w = want.get(&id).copied().unwrap_or(0.0) as f64;
            assert!(close(got, w), "{stage}: {plain:?} vs {want:?}");
        }
        let top = rows(
            &s,
            r#"SELECT id FROM "ws"."t" ORDER BY body <#> 'hello' DESC LIMIT 5"#,
            &[],
        )
        .await?;
        assert_eq!(top.last(), Some(&vec![json!(4)]), "{stage}: {top:?}");
        s.query("ws", r#"VACUUM "ws"."t""#, &[]).await?;
    }
    Ok(())
}

/// The fused top-k SPEC §5 defines, computed here from every row's arm scores
/// (`engine_hybrid_scores` without LIMIT): candidates = each arm's best
/// max(4k, 100) rows passing the filter (ties by id), min-max per arm over them,
/// 0.5 + 0.5 weights; the best `k` by fused score (ties by id).
/// A row's id and its two arm scores.
type Arms = (i64, Option<f64>, Option<f64>);

fn model_hybrid(arms: &[Arms], k: usize) -> Vec<(i64, f64)> {
    let n = (4 * k).max(100);
    let best = |score: &dyn Fn(&Arms) -> Option<f64>| {
        let mut v: Vec<(i64, f64)> = arms
            .iter()
            .filter_map(|a| score(a).map(|s| (a.0, s)))
            .collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        v.truncate(n);
        v.into_iter().map(|(id, _)| id)
    };
    let mut ids: std::collections::BTreeSet<i64> = best(&|a| a.1).collect();
    ids.extend(best(&|a| a.2.filter(|t| *t > 0.0)));
    let cands: Vec<&Arms> = arms.iter().filter(|a| ids.contains(&a.0)).collect();
    let norm = |arm: &dyn Fn(&Arms) -> Option<f64>| {
        let vals: Vec<f64> = cands.iter().filter_map(|a| arm(a)).collect();
        let min = vals.iter().copied().fold(f64::INFINITY, f64::min);
        let max = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        move |s: Option<f64>| match s {
            Some(s) if max > min => (s - min) / (max - min),
            _ => 0.0,
        }
    };
    let (nv, nt) = (norm(&|a| a.1), norm(&|a| a.2));
    let mut fused: Vec<(i64, f64)> = cands
        .iter()
        .map(|a| (a.0, 0.5 * nv(a.1) + 0.5 * nt(a.2)))
        .collect();
    fused.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    fused.truncate(k);
    fused
}

/// Hybrid top-k over a table large enough for every path of the search — the arms on
/// two threads, long queries scored in one dense pass whose scores also serve the
/// vector arm's candidates, short ones pruned — over indexed segments, the memtable
/// and deletes: the rows and fused scores
/// equal the model of SPEC §5 computed from each row's arm scores, with and without
/// a filter, on the fast path and through the search node.
#[tokio::test]
async fn hybrid_top_k_equals_the_model_on_every_path() -> TestResult {
    let dir = tempfile::tempdir()?;
    let tarn = Tarn::open_with(dir.path(), manual()).await?;
    let (s, key) = fixture_with_key(&tarn).await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."m" (id INT PRIMARY KEY, e FLOAT4[4], body TEXT, cat INT) USING engine"#,
        &[],
    )
    .await?;
    let words = [
        "library",
        "science",
        "catalog",
        "index",
        "search",
        "retrieval",
        "book",
        "journal",
        "citation",
        "reader",
        "archive",
        "query",
        "document",
        "user",
        "system",
        "data",
        "network",
        "language",
        "study",
        "public",
        "school",
        "research",
        "paper",
        "method",
    ];
    let mut rng = tarn_tests::Rng(0x5eed_4b1d);
    let mut next_id = 0i64;
    let mut add = |rng: &mut tarn_tests::Rng, n: usize| -> Vec<Vec<Value>> {
        (0..n)
            .map(|_| {
                next_id += 1;
                let len = 3 + rng.below(10) as usize;
                let body: Vec<&str> = (0..len)
                    .map(|_| words[rng.below(words.len() as u64) as usize])
                    .collect();
                let e: Vec<f64> = (0..4)
                    .map(|_| (rng.below(2001) as f64 - 1000.0) / 1000.0)
                    .collect();
                vec![
                    json!(next_id),
                    json!(e),
                    json!(body.join(" ")),
                    json!(rng.below(3)),
                ]
            })
            .collect()
    };
    let insert = r#"INSERT INTO "ws"."m" VALUES ($1, $2::float4[], $3, $4)"#;
    // Two segments (VACUUM seals the first; a reopen seals the rows the log replays),
    // then CREATE INDEX builds a text index file for each; a third segment sealed by a
    // reopen has none (its texts are analyzed on the spot), and the last rows stay in
    // the memtable. Deletes in all four.
    s.query_batch("ws", insert, &add(&mut rng, 600)).await?;
    s.query("ws", r#"VACUUM "ws"."m""#, &[]).await?;
    s.query_batch("ws", insert, &add(&mut rng, 500)).await?;
    tarn.close().await?;
    let tarn = Tarn::open_with(dir.path(), manual()).await?;
    let s = reconnect(&tarn, &key).await?;
    s.query(
        "ws",
        r#"CREATE INDEX m_body ON "ws"."m" USING engine_index (body) WITH (index_type = 'bm25')"#,
        &[],
    )
    .await?;
    let text_files = || -> std::io::Result<usize> {
        Ok(std::fs::read_dir(dir.path().join("segments"))?
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(".idx"))
            .count())
    };
    assert_eq!(text_files()?, 2, "two indexed segments");
    s.query_batch("ws", insert, &add(&mut rng, 300)).await?;
    tarn.close().await?;
    let tarn = Tarn::open_with(dir.path(), manual()).await?;
    let s = reconnect(&tarn, &key).await?;
    assert_eq!(text_files()?, 2, "a third segment, without its index file");
    s.query_batch("ws", insert, &add(&mut rng, 300)).await?;
    s.query("ws", r#"DELETE FROM "ws"."m" WHERE id % 7 = 3"#, &[])
        .await?;
    let q = [0.3, -0.2, 0.9, 0.1];
    for text in [
        // 20 distinct words: one dense pass.
        "library science catalog index search retrieval book journal citation reader archive query document user system data network language study public",
        // 17 and 16 words: either side of the switch from a dense pass to pruning.
        "library science catalog index search retrieval book journal citation reader archive query document user system data network",
        "library science catalog index search retrieval book journal citation reader archive query document user system data",
        // 2 words: pruned postings.
        "network language",
    ] {
        for (fast_where, planned_where, passes) in [
            ("", "WHERE true", None),
            ("WHERE cat = 1", "WHERE cat + 0 = 1", Some(1)),
        ] {
            let all = rows(
                &s,
                r#"SELECT id, cat, (e, body) <#> engine_hybrid_scores($1, $2) FROM "ws"."m""#,
                &[json!(q), json!(text)],
            )
            .await?;
            let arms: Vec<Arms> = all
                .iter()
                .filter(|r| passes.is_none_or(|c| r[1].as_i64() == Some(c)))
                .map(|r| {
                    (
                        r[0].as_i64().unwrap_or(-1),
                        r[2]["vector"].as_f64(),
                        r[2]["text"].as_f64(),
                    )
                })
                .collect();
            // k = 10 (100 candidates an arm) and k = 60 (240: deep enough that rows
            // only one arm brought are returned, with the other arm's exact score).
            for k in [10, 60] {
                let want = model_hybrid(&arms, k);
                for w in [fast_where, planned_where] {
                    let got = rows(
                        &s,
                        &format!(
                            r#"SELECT id, (e, body) <#> engine_hybrid_record($1, $2) AS f FROM "ws"."m" {w} ORDER BY f DESC LIMIT {k}"#
                        ),
                        &[json!(q), json!(text)],
                    )
                    .await?;
                    let what = format!("{text} {w} k={k}: {got:?} vs {want:?}");
                    assert_eq!(got.len(), want.len(), "{what}");
                    for (g, m) in got.iter().zip(&want) {
                        let f = g[1].as_f64().unwrap_or(f64::NAN);
                        assert!((f - m.1).abs() < 1e-5, "{what}");
                        // Equal fused scores may come in either order only when the
                        // model's scores tie too.
                        if g[0].as_i64() != Some(m.0) {
                            let theirs = want.iter().find(|x| Some(x.0) == g[0].as_i64());
                            assert!(theirs.is_some_and(|t| (t.1 - m.1).abs() < 1e-6), "{what}");
                        }
                    }
                }
            }
        }
    }
    Ok(())
}
