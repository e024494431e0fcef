//! Integration tests through Tarn's public API: resources, the organization boundary,
//! parameters, result shapes, batches, durability across reopen (kill -9: `crash.rs`).

use serde_json::{Value, json};
use tarn::{ErrorKind, Options, Session, Tarn};
use tarn_tests::fixture;

type TestResult = Result<(), Box<dyn std::error::Error>>;

async fn session() -> Result<(Tarn, Session), tarn::Error> {
    let tarn = Tarn::in_memory().await?;
    let s = fixture(&tarn).await?;
    Ok((tarn, s))
}

async fn rows(s: &Session, sql: &str, params: &[Value]) -> Result<Vec<Vec<Value>>, tarn::Error> {
    Ok(s.query("ws", sql, params).await?.rows.unwrap_or_default())
}

#[tokio::test]
async fn health_and_ready_need_no_credentials() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    assert_eq!(
        serde_json::to_value(tarn.health().await?)?,
        json!({"status": "ok"})
    );
    assert_eq!(
        serde_json::to_value(tarn.ready().await?)?,
        json!({"status": "ready"})
    );
    Ok(())
}

#[tokio::test]
async fn api_keys_are_hashed_listed_and_revocable() -> TestResult {
    let tarn = Tarn::in_memory().await?;
    let user = tarn.create_user("a@example.com", "A").await?;
    assert!(!user.verified);
    let key = tarn.create_api_key(&user.id, "laptop").await?;
    assert!(key.secret.len() > 40);
    let s = tarn.connect(&key.secret).await?;
    let me = s.me().await?;
    assert!(me.verified);
    assert_eq!(me.email, "a@example.com");
    let listed = tarn.api_keys(&user.id).await?;
    assert_eq!(listed.len(), 1);
    let listed_json = serde_json::to_string(&listed)?;
    assert!(
        !listed_json.contains(&key.secret),
        "the secret is never listed"
    );
    assert_eq!(
        tarn.connect("tarn_wrong").await.unwrap_err().kind(),
        ErrorKind::Unauthorized
    );
    tarn.revoke_api_key(&key.id).await?;
    let err = tarn.connect(&key.secret).await.unwrap_err();
    assert_eq!(err.status(), 401);
    // A session made before the revocation stops working too.
    assert_eq!(s.me().await.unwrap_err().status(), 401);
    assert_eq!(
        tarn.create_user("a@example.com", "again")
            .await
            .unwrap_err()
            .status(),
        409
    );
    assert_eq!(
        tarn.create_user("nope", "x").await.unwrap_err().status(),
        400
    );
    Ok(())
}

/// Every byte the database writes, after keys were made, used and the database closed
/// (log, checkpoint and catalog included): the secret is in none of them, only its hash.
#[tokio::test]
async fn no_api_key_secret_is_written_to_disk() -> TestResult {
    let dir = tempfile::tempdir()?;
    let tarn = Tarn::open(dir.path()).await?;
    let user = tarn.create_user("disk@example.com", "D").await?;
    let keys = [
        tarn.create_api_key(&user.id, "one").await?,
        tarn.create_api_key(&user.id, "two").await?,
    ];
    for k in &keys {
        assert!(k.secret.starts_with("tarn_"), "recognisable in logs");
        tarn.connect(&k.secret).await?.me().await?;
    }
    tarn.revoke_api_key(&keys[1].id).await?;
    tarn.close().await?;
    let mut files = vec![dir.path().to_path_buf()];
    let mut read = 0;
    while let Some(p) = files.pop() {
        if p.is_dir() {
            for e in std::fs::read_dir(&p)? {
                files.push(e?.path());
            }
            continue;
        }
        let bytes = std::fs::read(&p)?;
        read += 1;
        for k in &keys {
            // The secret, and the random part of it alone.
            for needle in [k.secret.as_str(), &k.secret["tarn_".len()..]] {
                assert!(
                    !bytes.windows(needle.len()).any(|w| w == needle.as_bytes()),
                    "{} holds an API key secret",
                    p.display()
                );
            }
        }
    }
    assert!(read > 0, "the database wrote files");
    Ok(())
}

/// A transport error of a host program, judged by the same policy.
#[derive(Debug)]
struct Transport(u16, Option<std::time::Duration>);

impl tarn::Retryable for Transport {
    fn status(&self) -> u16 {
        self.0
    }
    fn retry_after(&self) -> Option<std::time::Duration> {
        self.1
    }
}

/// SPEC §1's retry policy on tokio's paused clock: 429/502/503/504 are retried after
/// 1 s, 2 s and 4 s (or the longer wait a 429 asks for); anything else, and the failure
/// after the last retry, comes back as it is; the library's own 429 plugs in.
#[tokio::test(start_paused = true)]
async fn retry_policy_backs_off_on_transient_statuses_only() -> TestResult {
    use std::time::Duration;
    use tarn::RetryPolicy;
    use tokio::time::Instant;
    let policy = RetryPolicy::new();
    let run = |script: Vec<Result<u32, Transport>>| async move {
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let t0 = Instant::now();
        let out = policy
            .run(|| {
                let i = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let r = match script.get(i) {
                    Some(Ok(v)) => Ok(*v),
                    Some(Err(Transport(s, w))) => Err(Transport(*s, *w)),
                    None => Ok(0),
                };
                async move { r }
            })
            .await;
        (out, calls.into_inner(), t0.elapsed())
    };
    // Three transient failures, then success: waits of 1 + 2 + 4 s.
    let (out, calls, waited) = run(vec![
        Err(Transport(503, None)),
        Err(Transport(502, None)),
        Err(Transport(504, None)),
        Ok(7),
    ])
    .await;
    assert_eq!(
        (out.ok(), calls, waited),
        (Some(7), 4, Duration::from_secs(7))
    );
    // Not transient: no retry, no wait.
    for status in [400, 401, 403, 404, 409, 500] {
        let (out, calls, waited) = run(vec![Err(Transport(status, None)), Ok(1)]).await;
        assert_eq!(out.err().map(|e| e.0), Some(status));
        assert_eq!((calls, waited), (1, Duration::ZERO), "{status}");
    }
    // Always rate limited: four calls, then the last 429.
    let (out, calls, waited) = run(vec![
        Err(Transport(429, None)),
        Err(Transport(429, None)),
        Err(Transport(429, None)),
        Err(Transport(429, None)),
        Ok(1),
    ])
    .await;
    assert_eq!(out.err().map(|e| e.0), Some(429));
    assert_eq!((calls, waited), (4, Duration::from_secs(7)));
    // A 429 asking for longer than the backoff gets its wait.
    let (out, _, waited) = run(vec![
        Err(Transport(429, Some(Duration::from_secs(5)))),
        Ok(2),
    ])
    .await;
    assert_eq!((out.ok(), waited), (Some(2), Duration::from_secs(5)));

    // The library's own 429 (a bucket of one call a second, which the paused clock does
    // not refill): retried, then returned with its status.
    let dir = tempfile::tempdir()?;
    let tarn = Tarn::open_with(dir.path(), Options::new().rate_limit(1.0, 1)).await?;
    let user = tarn.create_user("r@example.com", "R").await?;
    let s = tarn
        .connect(&tarn.create_api_key(&user.id, "k").await?.secret)
        .await?;
    s.me().await?;
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let err = policy
        .run(|| {
            calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            s.me()
        })
        .await
        .unwrap_err();
    assert_eq!(err.status(), 429);
    assert!(err.retry_after().is_some());
    assert_eq!(calls.into_inner(), 4);
    Ok(())
}

#[tokio::test]
async fn organizations_and_workspaces() -> TestResult {
    let (tarn, s) = session().await?;
    let orgs = s.organizations().await?;
    assert_eq!(orgs.len(), 1);
    assert_eq!(orgs[0].id, "test");
    let detail = s.organization("test").await?;
    assert_eq!(detail.member_count, 1);
    assert_eq!(detail.pending_invites_count, 0);
    assert_eq!(s.me().await?.organizations, vec!["test".to_string()]);

    // Id rules and duplicates.
    for bad in ["", "Bad", "-x", "a b", &"x".repeat(64)] {
        assert_eq!(
            s.create_organization(bad, "x").await.unwrap_err().status(),
            400,
            "{bad}"
        );
        assert_eq!(
            s.create_workspace(bad, "x").await.unwrap_err().status(),
            400,
            "{bad}"
        );
    }
    assert_eq!(
        s.create_organization("test", "x")
            .await
            .unwrap_err()
            .status(),
        409
    );
    assert_eq!(
        s.create_workspace("ws", "x").await.unwrap_err().status(),
        409
    );

    let ws = s.workspaces().await?;
    let ids: Vec<_> = ws.data.iter().map(|w| w.id.as_str()).collect();
    assert_eq!(ids, vec!["other", "ws"]);
    let w = serde_json::to_value(s.workspace("ws").await?)?;
    assert_eq!(w["workspace"]["type"], "generic");
    assert_eq!(w["workspace"]["org_id"], "test");
    assert_eq!(s.update_workspace("ws", "Renamed").await?.name, "Renamed");
    assert_eq!(s.workspace("ws").await?.workspace.name, "Renamed");
    assert_eq!(s.workspace("nope").await.unwrap_err().status(), 404);
    assert_eq!(s.update_organization("test", "T2").await?.name, "T2");

    // Org-scoped calls need an organization.
    let user = tarn.create_user("b@example.com", "B").await?;
    let key = tarn.create_api_key(&user.id, "k").await?;
    let b = tarn.connect(&key.secret).await?;
    let err = b.workspaces().await.unwrap_err();
    assert_eq!(
        (err.status(), err.message()),
        (400, "organization id required")
    );

    // Deleting a workspace drops its tables.
    s.query("other", r#"CREATE TABLE "other"."t" (a INT)"#, &[])
        .await?;
    s.delete_workspace("other").await?;
    assert_eq!(s.workspace("other").await.unwrap_err().status(), 404);
    s.create_workspace("other", "again").await?;
    assert!(s.tables("other").await?.is_empty());

    // Deleting the organization cascades.
    s.delete_organization("test").await?;
    assert!(s.organizations().await?.is_empty());
    assert_eq!(s.workspaces().await.unwrap_err().status(), 404);
    Ok(())
}

#[tokio::test]
async fn another_organization_is_invisible() -> TestResult {
    let (tarn, a) = session().await?;
    a.query(
        "ws",
        r#"CREATE TABLE "ws"."secret" (x TEXT) USING engine"#,
        &[],
    )
    .await?;
    a.query("ws", r#"INSERT INTO "ws"."secret" VALUES ('a-only')"#, &[])
        .await?;

    let user = tarn.create_user("eve@example.com", "Eve").await?;
    let key = tarn.create_api_key(&user.id, "k").await?;
    let eve = tarn.connect(&key.secret).await?;
    eve.create_organization("eve", "Eve").await?;
    let eve_org = eve.with_org("eve");
    // The same workspace id in another organization is a different schema.
    eve_org.create_workspace("ws", "Eve's").await?;

    let into_a = eve.with_org("test");
    assert_eq!(eve.organization("test").await.unwrap_err().status(), 404);
    assert_eq!(into_a.workspaces().await.unwrap_err().status(), 404);
    assert_eq!(into_a.tables("ws").await.unwrap_err().status(), 404);
    assert_eq!(
        into_a
            .query("ws", "SELECT 1", &[])
            .await
            .unwrap_err()
            .status(),
        404
    );
    assert_eq!(
        eve.delete_organization("test").await.unwrap_err().status(),
        404
    );

    let err = eve_org
        .query("ws", r#"SELECT * FROM "ws"."secret""#, &[])
        .await
        .unwrap_err();
    assert_eq!(err.status(), 404);
    assert_eq!(err.message(), r#"relation "ws"."secret" does not exist"#);
    assert_eq!(
        eve_org.table("ws", "secret").await.unwrap_err().status(),
        404
    );
    // Writes cannot cross either.
    assert_eq!(
        eve_org
            .query("ws", r#"INSERT INTO "ws"."secret" VALUES ('x')"#, &[])
            .await
            .unwrap_err()
            .status(),
        404
    );
    assert_eq!(
        rows(&a, r#"SELECT x FROM "ws"."secret""#, &[]).await?,
        vec![vec![json!("a-only")]]
    );
    Ok(())
}

#[tokio::test]
async fn parameters_map_json_values() -> TestResult {
    let (_t, s) = session().await?;
    // An integer past int8 is a float8 (it bound as an unsigned 64-bit integer).
    assert_eq!(
        rows(
            &s,
            "SELECT arrow_typeof($1), $1 > 1e19, arrow_typeof($2)",
            &[
                json!(18446744073709551615u64),
                json!(9223372036854775807i64)
            ]
        )
        .await?,
        vec![vec![json!("Float64"), json!(true), json!("Int64")]]
    );
    // An object is jsonb: `||` merges two (it joined their texts).
    assert_eq!(
        rows(
            &s,
            "SELECT $1 || $2, $1",
            &[json!({"a": 1}), json!({"b": 2})]
        )
        .await?,
        vec![vec![json!({"a": 1, "b": 2}), json!({"a": 1})]]
    );
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."p" (id SERIAL PRIMARY KEY, n INT8, f FLOAT8, t TEXT, b BOOL, metadata JSONB, e FLOAT4[]) USING engine"#,
        &[],
    )
    .await?;
    let r = s
        .query(
            "ws",
            r#"INSERT INTO "ws"."p" (n, f, t, b, metadata, e) VALUES ($1, $2, $3, $4, $5::jsonb, $6::float4[]) RETURNING id"#,
            &[json!(42), json!(2.0), json!("it's"), json!(true), json!({"k": "v", "n": [1, 2]}), json!([0.1, 0.2])],
        )
        .await?;
    assert_eq!(r.rows, Some(vec![vec![json!(1)]]));
    // JSONB as JSON text, a vector as PostgreSQL array text, NULL.
    s.query(
        "ws",
        r#"INSERT INTO "ws"."p" (n, t, metadata, e) VALUES ($1, $2, $3, $4)"#,
        &[
            Value::Null,
            json!("x"),
            json!(r#"{"k": "w"}"#),
            json!("{0.3,0.4}"),
        ],
    )
    .await?;
    let got = rows(
        &s,
        r#"SELECT n, f, t, b, metadata, e, metadata->>$1 AS k FROM "ws"."p" ORDER BY id"#,
        &[json!("k")],
    )
    .await?;
    assert_eq!(
        got,
        vec![
            vec![
                json!(42),
                json!(2.0),
                json!("it's"),
                json!(true),
                json!({"k": "v", "n": [1, 2]}),
                json!([0.1, 0.2]),
                json!("v")
            ],
            vec![
                Value::Null,
                Value::Null,
                json!("x"),
                Value::Null,
                json!({"k": "w"}),
                json!([0.3, 0.4]),
                json!("w")
            ],
        ]
    );
    let got = rows(
        &s,
        r#"SELECT id FROM "ws"."p" WHERE metadata->>'k' = $1"#,
        &[json!("w")],
    )
    .await?;
    assert_eq!(got, vec![vec![json!(2)]]);
    let err = s.query("ws", "SELECT $2", &[json!(1)]).await.unwrap_err();
    assert_eq!(
        (err.status(), err.message()),
        (400, "there is no parameter $2")
    );
    // A parameter is a value, never SQL.
    let got = rows(&s, "SELECT $1 AS v", &[json!("'); DROP TABLE p; --")]).await?;
    assert_eq!(got, vec![vec![json!("'); DROP TABLE p; --")]]);
    Ok(())
}

#[tokio::test]
async fn query_result_shape_and_encodings() -> TestResult {
    let (_t, s) = session().await?;
    let ddl = s
        .query("ws", r#"CREATE TABLE "ws"."e" (id INT, x FLOAT4, ts TIMESTAMPTZ, d DATE, n NUMERIC(6,2), bin BYTEA, j JSONB)"#, &[])
        .await?;
    let v = serde_json::to_value(&ddl)?;
    assert_eq!(v["columns"], json!([]));
    assert_eq!(v["rows"], Value::Null);
    assert_eq!(v["row_count"], 0);
    assert!(v["execution_time_ms"].is_number());

    let ins = s
        .query(
            "ws",
            r#"INSERT INTO "ws"."e" VALUES (1, 0.1, '2026-11-22T01:19:14Z', '2026-11-22', 3.5, '\x00ff', '{"a": 1}'), (2, NULL, '2026-11-22T01:19:14.123456Z', NULL, NULL, NULL, NULL)"#,
            &[],
        )
        .await?;
    assert_eq!(
        (ins.row_count, ins.rows_affected, ins.rows.is_none()),
        (0, 2, true)
    );

    let r = s
        .query("ws", r#"SELECT id, x, ts, d, n, bin, j, j->'a', count(*) OVER (), id + 1 FROM "ws"."e" ORDER BY id"#, &[])
        .await?;
    assert_eq!(
        r.columns,
        vec![
            "id", "x", "ts", "d", "n", "bin", "j", "?column?", "count", "?column?"
        ]
    );
    assert_eq!(
        r.rows,
        Some(vec![
            vec![
                json!(1),
                json!(0.1),
                json!("2026-11-22T01:19:14Z"),
                json!("2026-11-22"),
                json!("3.50"),
                json!("AP8="),
                json!({"a": 1}),
                json!(1),
                json!(2),
                json!(2)
            ],
            vec![
                json!(2),
                Value::Null,
                json!("2026-11-22T01:19:14.123456Z"),
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null,
                json!(2),
                json!(3)
            ],
        ])
    );
    assert_eq!(r.row_count, 2);

    let empty = s
        .query("ws", r#"SELECT id FROM "ws"."e" WHERE false"#, &[])
        .await?;
    assert_eq!(
        (empty.columns.clone(), empty.rows.clone()),
        (vec!["id".to_string()], Some(vec![]))
    );
    let agg = s
        .query(
            "ws",
            r#"SELECT count(*), avg(id), max(id) AS top FROM "ws"."e""#,
            &[],
        )
        .await?;
    assert_eq!(agg.columns, vec!["count", "avg", "top"]);

    let explain = s
        .query("ws", r#"EXPLAIN SELECT id FROM "ws"."e""#, &[])
        .await?;
    assert_eq!(explain.columns, vec!["plan_type", "plan"]);
    assert!(explain.row_count >= 1);
    // PostgreSQL's format option, in both spellings: JSON is PostgreSQL's plan JSON.
    for sql in [
        r#"EXPLAIN FORMAT JSON SELECT id FROM "ws"."e""#,
        r#"EXPLAIN (FORMAT JSON) SELECT id FROM "ws"."e""#,
    ] {
        let r = s.query("ws", sql, &[]).await?;
        let plan = r
            .rows
            .as_ref()
            .and_then(|rows| rows[0][1].as_str().map(str::to_string));
        let plan: serde_json::Value = serde_json::from_str(&plan.ok_or(sql)?)?;
        assert!(plan[0]["Plan"]["Node Type"].is_string(), "{sql}: {plan}");
    }
    for sql in [
        r#"EXPLAIN FORMAT TREE SELECT id FROM "ws"."e""#,
        r#"EXPLAIN (FORMAT TEXT, COSTS OFF) SELECT id FROM "ws"."e""#,
        r#"EXPLAIN (ANALYZE, BUFFERS) SELECT id FROM "ws"."e""#,
    ] {
        assert!(s.query("ws", sql, &[]).await?.row_count >= 1, "{sql}");
    }
    let e = s
        .query(
            "ws",
            r#"EXPLAIN (FORMAT YAML) SELECT id FROM "ws"."e""#,
            &[],
        )
        .await
        .unwrap_err();
    assert!(
        e.message()
            .contains("EXPLAIN format \"yaml\" is not supported"),
        "{e}"
    );
    Ok(())
}

#[tokio::test]
async fn jsonb_operators() -> TestResult {
    let (_t, s) = session().await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."j" (id INT, m JSONB) USING engine"#,
        &[],
    )
    .await?;
    s.query(
        "ws",
        r#"INSERT INTO "ws"."j" VALUES (1, '{"a": {"b": [10, 20]}, "tag": "x"}'), (2, '{"tag": "y", "n": 5}'), (3, '[1, 2, 3]')"#,
        &[],
    )
    .await?;
    let q = |sql: &'static str| {
        let s = s.clone();
        async move { rows(&s, sql, &[]).await }
    };
    assert_eq!(
        q(r#"SELECT id FROM "ws"."j" WHERE m @> '{"tag": "y"}' ORDER BY id"#).await?,
        vec![vec![json!(2)]]
    );
    assert_eq!(
        q(r#"SELECT id FROM "ws"."j" WHERE m ? 'n'"#).await?,
        vec![vec![json!(2)]]
    );
    assert_eq!(
        q(r#"SELECT m #> '{a,b}', m #>> '{a,b,1}' FROM "ws"."j" WHERE id = 1"#).await?,
        vec![vec![json!([10, 20]), json!("20")]]
    );
    assert_eq!(
        q(r#"SELECT m -> 'a' -> 'b' FROM "ws"."j" WHERE id = 1"#).await?,
        vec![vec![json!([10, 20])]]
    );
    assert_eq!(
        q(r#"SELECT jsonb_typeof(m), jsonb_typeof(m -> 'tag') FROM "ws"."j" ORDER BY id"#)
            .await?
            .into_iter()
            .map(|r| r[0].clone())
            .collect::<Vec<_>>(),
        vec![json!("object"), json!("object"), json!("array")]
    );
    assert_eq!(
        q(r#"SELECT jsonb_array_length(m) FROM "ws"."j" WHERE id = 3"#).await?,
        vec![vec![json!(3)]]
    );
    assert_eq!(
        q(r#"SELECT id FROM "ws"."j" WHERE m->>'tag' = 'x'"#).await?,
        vec![vec![json!(1)]]
    );
    Ok(())
}

#[tokio::test]
async fn batches_are_atomic() -> TestResult {
    let (_t, s) = session().await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."b" (id INT PRIMARY KEY, v TEXT) USING engine"#,
        &[],
    )
    .await?;
    let sql = r#"INSERT INTO "ws"."b" VALUES ($1, $2)"#;
    let ok = s
        .query_batch(
            "ws",
            sql,
            &[vec![json!(1), json!("a")], vec![json!(2), json!("b")]],
        )
        .await?;
    assert_eq!((ok.statements, ok.rows_affected, ok.row_count), (2, 2, 0));
    let err = s
        .query_batch(
            "ws",
            sql,
            &[
                vec![json!(3), json!("c")],
                vec![json!(4), json!("d")],
                vec![json!(3), json!("again")],
            ],
        )
        .await
        .unwrap_err();
    assert_eq!(err.status(), 409);
    assert_eq!(
        err.message(),
        "parameter set 2: duplicate key value violates unique constraint \"b_pkey\""
    );
    assert_eq!(
        rows(&s, r#"SELECT count(*) FROM "ws"."b""#, &[]).await?,
        vec![vec![json!(2)]]
    );
    let err = s
        .query_batch(
            "ws",
            sql,
            &[vec![json!(5), json!("e")], vec![json!("x"), json!("f")]],
        )
        .await
        .unwrap_err();
    assert!(err.message().starts_with("parameter set 1: "), "{err}");
    assert_eq!(s.query_batch("ws", sql, &[]).await?.statements, 0);
    // Later sets see earlier ones.
    let upd = s
        .query_batch(
            "ws",
            r#"UPDATE "ws"."b" SET v = v || $1 WHERE id = 1"#,
            &[vec![json!("1")], vec![json!("2")]],
        )
        .await?;
    assert_eq!(upd.rows_affected, 2);
    assert_eq!(
        rows(&s, r#"SELECT v FROM "ws"."b" WHERE id = 1"#, &[]).await?,
        vec![vec![json!("a12")]]
    );
    Ok(())
}

#[tokio::test]
async fn on_conflict_in_a_batch_sees_earlier_parameter_sets() -> TestResult {
    let (_t, s) = session().await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."c" (k TEXT PRIMARY KEY, hits INT) USING engine"#,
        &[],
    )
    .await?;
    let upsert = r#"INSERT INTO "ws"."c" VALUES ($1, 1) ON CONFLICT (k) DO UPDATE SET hits = c.hits + excluded.hits"#;
    // Each set is its own statement: a later set may update the row an earlier set
    // inserted or updated (within one statement that would be an error).
    let sets: Vec<Vec<Value>> = ["a", "b", "a", "a", "b", "c"]
        .iter()
        .map(|k| vec![json!(k)])
        .collect();
    let r = s.query_batch("ws", upsert, &sets).await?;
    assert_eq!((r.statements, r.rows_affected), (6, 6));
    assert_eq!(
        rows(&s, r#"SELECT k, hits FROM "ws"."c" ORDER BY k"#, &[]).await?,
        vec![
            vec![json!("a"), json!(3)],
            vec![json!("b"), json!(2)],
            vec![json!("c"), json!(1)],
        ]
    );
    let skip = r#"INSERT INTO "ws"."c" VALUES ($1, 100) ON CONFLICT DO NOTHING"#;
    let r = s
        .query_batch(
            "ws",
            skip,
            &[vec![json!("a")], vec![json!("d")], vec![json!("d")]],
        )
        .await?;
    assert_eq!(r.rows_affected, 1);
    // A failing set undoes the whole batch, updates included.
    let err = s
        .query_batch(
            "ws",
            r#"INSERT INTO "ws"."c" VALUES ($1, 1) ON CONFLICT (k) DO UPDATE SET hits = excluded.hits / 0"#,
            &[vec![json!("e")], vec![json!("a")]],
        )
        .await
        .unwrap_err();
    assert_eq!(
        (err.status(), err.message()),
        (400, "parameter set 1: division by zero")
    );
    assert_eq!(
        rows(&s, r#"SELECT k, hits FROM "ws"."c" ORDER BY k"#, &[]).await?,
        vec![
            vec![json!("a"), json!(3)],
            vec![json!("b"), json!(2)],
            vec![json!("c"), json!(1)],
            vec![json!("d"), json!(100)],
        ]
    );
    Ok(())
}

#[tokio::test]
async fn table_details_use_postgres_names() -> TestResult {
    let (_t, s) = session().await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."docs" (id SERIAL PRIMARY KEY, title TEXT NOT NULL, metadata JSONB, embedding FLOAT4[], created_at TIMESTAMPTZ DEFAULT NOW(), n NUMERIC(8,2), tags TEXT[], bag FLOAT4[][]) USING engine"#,
        &[],
    )
    .await?;
    s.query(
        "ws",
        r#"INSERT INTO "ws"."docs" (title) VALUES ('a'), ('b')"#,
        &[],
    )
    .await?;
    let d = serde_json::to_value(s.table("ws", "docs").await?)?;
    assert_eq!(d["table_name"], "docs");
    assert_eq!(d["row_count"], 2);
    assert!(d["size_mb"].as_f64().is_some_and(|m| m > 0.0));
    assert_eq!(
        d["columns"],
        json!([
            {"name": "id", "type": "int4", "nullable": false, "default": "nextval('docs_id_seq'::regclass)"},
            {"name": "title", "type": "text", "nullable": false, "default": null},
            {"name": "metadata", "type": "jsonb", "nullable": true, "default": null},
            {"name": "embedding", "type": "_float4", "nullable": true, "default": null},
            {"name": "created_at", "type": "timestamptz", "nullable": true, "default": "NOW()"},
            {"name": "n", "type": "numeric", "nullable": true, "default": null},
            {"name": "tags", "type": "_text", "nullable": true, "default": null},
            {"name": "bag", "type": "_float4", "nullable": true, "default": null},
        ])
    );
    let list = serde_json::to_value(s.tables("ws").await?)?;
    assert_eq!(list, json!([{"name": "docs", "row_count": 2}]));
    s.drop_table("ws", "docs").await?;
    assert_eq!(s.drop_table("ws", "docs").await.unwrap_err().status(), 404);
    Ok(())
}

#[tokio::test]
async fn query_arrow_returns_batches() -> TestResult {
    let (_t, s) = session().await?;
    s.query("ws", r#"CREATE TABLE "ws"."a" (x INT8)"#, &[])
        .await?;
    s.query("ws", r#"INSERT INTO "ws"."a" VALUES (1), (2), (3)"#, &[])
        .await?;
    let r = s
        .query_arrow("ws", r#"SELECT x, x * 2 FROM "ws"."a""#, &[])
        .await?;
    let batches = r.batches.unwrap_or_default();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 3);
    assert_eq!(r.schema.field(0).name(), "x");
    assert_eq!(r.schema.field(1).name(), "?column?");
    Ok(())
}

#[tokio::test]
async fn limits_are_bad_requests() -> TestResult {
    let tarn = Tarn::open_with(
        tempfile::tempdir()?.path(),
        Options::default()
            .max_sql_bytes(100)
            .max_params(2)
            .max_batch(3),
    )
    .await?;
    let s = fixture(&tarn).await?;
    // Each is a 400 whose message names the limit (the `Options` method that sets it).
    let long = format!("SELECT '{}'", "x".repeat(200));
    let err = s.query("ws", &long, &[]).await.unwrap_err();
    assert_eq!(err.status(), 400);
    assert!(err.message().contains("max_sql_bytes"), "{err}");
    let err = s
        .query("ws", "SELECT $1", &[json!(1), json!(2), json!(3)])
        .await
        .unwrap_err();
    assert_eq!(err.status(), 400);
    assert!(err.message().contains("max_params"), "{err}");
    let err = s
        .query_batch("ws", "SELECT $1", &vec![vec![json!(1)]; 4])
        .await
        .unwrap_err();
    assert_eq!(err.status(), 400);
    assert!(err.message().contains("max_batch"), "{err}");
    Ok(())
}

#[tokio::test]
async fn rate_limit_gives_429_with_retry_after() -> TestResult {
    let tarn = Tarn::open_with(
        tempfile::tempdir()?.path(),
        Options::default().rate_limit(0.5, 2),
    )
    .await?;
    let user = tarn.create_user("r@example.com", "R").await?;
    let key = tarn.create_api_key(&user.id, "k").await?;
    let s = tarn.connect(&key.secret).await?;
    s.me().await?;
    s.me().await?;
    let err = s.me().await.unwrap_err();
    assert_eq!(err.status(), 429);
    assert!(err.retry_after().is_some_and(|d| d.as_secs_f64() > 0.5));
    Ok(())
}

#[tokio::test]
async fn durable_across_reopen_and_locked_while_open() -> TestResult {
    let dir = tempfile::tempdir()?;
    let secret;
    {
        let tarn = Tarn::open(dir.path()).await?;
        let user = tarn.create_user("d@example.com", "D").await?;
        secret = tarn.create_api_key(&user.id, "k").await?.secret;
        let s = tarn.connect(&secret).await?;
        s.create_organization("o", "O").await?;
        let s = s.with_org("o");
        s.create_workspace("ws", "W").await?;
        s.query(
            "ws",
            r#"CREATE TABLE "ws"."t" (id SERIAL PRIMARY KEY, v TEXT, e FLOAT4[]) USING engine"#,
            &[],
        )
        .await?;
        s.query(
            "ws",
            r#"INSERT INTO "ws"."t" (v, e) VALUES ('a', '{1,2}'), ('b', '{3,4}')"#,
            &[],
        )
        .await?;
        s.query("ws", r#"DELETE FROM "ws"."t" WHERE v = 'a'"#, &[])
            .await?;
        s.query(
            "ws",
            r#"ALTER TABLE "ws"."t" ADD COLUMN extra INT DEFAULT 7"#,
            &[],
        )
        .await?;

        let err = Tarn::open(dir.path()).await.unwrap_err();
        assert_eq!(err.status(), 409);
        assert!(
            err.message().contains("is locked by another process"),
            "{err}"
        );
    }
    let tarn = Tarn::open(dir.path()).await?;
    let s = tarn.connect(&secret).await?.with_org("o");
    let r = s
        .query("ws", r#"SELECT id, v, e, extra FROM "ws"."t""#, &[])
        .await?;
    assert_eq!(
        r.rows,
        Some(vec![vec![
            json!(2),
            json!("b"),
            json!([3.0, 4.0]),
            json!(7)
        ]])
    );
    // The sequence and the fixed vector dimension survived too.
    let r = s
        .query(
            "ws",
            r#"INSERT INTO "ws"."t" (v, e) VALUES ('c', '{5,6}') RETURNING id"#,
            &[],
        )
        .await?;
    assert_eq!(r.rows, Some(vec![vec![json!(3)]]));
    let err = s
        .query(
            "ws",
            r#"INSERT INTO "ws"."t" (v, e) VALUES ('d', '{5,6,7}')"#,
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(err.message(), "expected 2 dimensions, not 3");
    Ok(())
}

#[tokio::test]
async fn indexes_survive_reopen_and_show_in_table_details() -> TestResult {
    let dir = tempfile::tempdir()?;
    let secret;
    {
        let tarn = Tarn::open(dir.path()).await?;
        let user = tarn.create_user("i@example.com", "I").await?;
        secret = tarn.create_api_key(&user.id, "k").await?.secret;
        let s = tarn.connect(&secret).await?;
        s.create_organization("o", "O").await?;
        let s = s.with_org("o");
        s.create_workspace("ws", "W").await?;
        for sql in [
            r#"CREATE TABLE "ws"."t" (id INT PRIMARY KEY, title TEXT, code TEXT, gone TEXT) USING engine"#,
            r#"CREATE INDEX t_title ON "ws"."t" USING engine_index (title) WITH (index_type = 'exact_text')"#,
            r#"CREATE INDEX t_code ON "ws"."t" USING engine_index (code) WITH (index_type = 'exact_text')"#,
            r#"CREATE INDEX t_gone ON "ws"."t" USING engine_index (gone) WITH (index_type = 'exact_text')"#,
            r#"DROP INDEX t_code"#,
            r#"ALTER TABLE "ws"."t" DROP COLUMN gone"#,
            r#"ALTER TABLE "ws"."t" RENAME COLUMN title TO headline"#,
        ] {
            s.query("ws", sql, &[]).await?;
        }
    }
    let tarn = Tarn::open(dir.path()).await?;
    let s = tarn.connect(&secret).await?.with_org("o");
    let d = serde_json::to_value(s.table("ws", "t").await?)?;
    assert_eq!(
        d["indexes"],
        json!([{"name": "t_title", "column": "headline", "index_type": "exact_text", "options": {},
            "status": "ready", "segments_indexed": 0, "segments": 0}])
    );
    let err = s
        .query(
            "ws",
            r#"CREATE INDEX t_title ON "ws"."t" USING engine_index (code) WITH (index_type = 'exact_text')"#,
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(
        (err.status(), err.message()),
        (409, "relation \"t_title\" already exists")
    );
    // Dropped indexes and the dropped column's index stayed dropped; ids keep counting.
    for name in ["t_code", "t_gone"] {
        let err = s
            .query("ws", &format!("DROP INDEX {name}"), &[])
            .await
            .unwrap_err();
        assert_eq!(err.status(), 404, "{err}");
    }
    s.query(
        "ws",
        r#"CREATE INDEX t_code ON "ws"."t" USING engine_index (code) WITH (index_type = 'exact_text')"#,
        &[],
    )
    .await?;
    let d = serde_json::to_value(s.table("ws", "t").await?)?;
    let names: Vec<&str> = d["indexes"]
        .as_array()
        .ok_or("indexes")?
        .iter()
        .filter_map(|i| i["name"].as_str())
        .collect();
    assert_eq!(names, ["t_title", "t_code"]);
    // Deleting the workspace takes the indexes with it.
    s.delete_workspace("ws").await?;
    s.create_workspace("ws", "W").await?;
    s.query("ws", r#"CREATE TABLE "ws"."t_title" (a INT)"#, &[])
        .await?;
    Ok(())
}

#[tokio::test]
async fn wal_damage_is_cut_at_the_tail_and_refused_in_the_middle() -> TestResult {
    let live = tempfile::tempdir()?;
    let tarn = Tarn::open(live.path()).await?;
    let user = tarn.create_user("w@example.com", "W").await?;
    let secret = tarn.create_api_key(&user.id, "k").await?.secret;
    let s = tarn.connect(&secret).await?;
    s.create_organization("o", "O").await?;
    let s = s.with_org("o");
    s.create_workspace("ws", "W").await?;
    s.query("ws", r#"CREATE TABLE "ws"."t" (v TEXT)"#, &[])
        .await?;
    for i in 0..5 {
        s.query(
            "ws",
            r#"INSERT INTO "ws"."t" VALUES ($1)"#,
            &[json!(format!("row {i}"))],
        )
        .await?;
    }
    // What the disk holds if the machine stopped now (a clean close would checkpoint
    // and leave nothing in the log).
    let dir = crash_image(live.path())?;
    let flipped = crash_image(live.path())?;
    drop(tarn);
    let wal = wal_file(dir.path())?;
    let full = std::fs::read(&wal)?;
    // A torn tail (a crash in the middle of the last write) loses only that statement.
    std::fs::write(&wal, &full[..full.len() - 3])?;
    {
        let tarn = Tarn::open(dir.path()).await?;
        let s = tarn.connect(&secret).await?.with_org("o");
        assert_eq!(
            rows(&s, r#"SELECT count(*) FROM "ws"."t""#, &[]).await?,
            vec![vec![json!(4)]]
        );
        s.query("ws", r#"INSERT INTO "ws"."t" VALUES ('after')"#, &[])
            .await?;
        let image = crash_image(dir.path())?;
        drop(tarn);
        // Garbage after the last record is cut off as well, and writing goes on.
        let wal = wal_file(image.path())?;
        let mut bytes = std::fs::read(&wal)?;
        bytes.extend_from_slice(&[0x5a; 64]);
        std::fs::write(&wal, &bytes)?;
        let tarn = Tarn::open(image.path()).await?;
        let s = tarn.connect(&secret).await?.with_org("o");
        assert_eq!(
            rows(&s, r#"SELECT count(*) FROM "ws"."t""#, &[]).await?,
            vec![vec![json!(5)]]
        );
    }
    // A flipped byte in the middle is corruption, reported with the file's name.
    let wal = wal_file(flipped.path())?;
    let mut bytes = full.clone();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&wal, &bytes)?;
    let err = Tarn::open(flipped.path()).await.unwrap_err();
    assert_eq!(err.status(), 500);
    assert!(
        err.message().contains("corruption") && err.message().contains(".wal"),
        "{err}"
    );
    Ok(())
}

/// Copies a database directory as it is on disk right now, as a crash would leave it.
fn crash_image(src: &std::path::Path) -> Result<tempfile::TempDir, Box<dyn std::error::Error>> {
    fn copy(src: &std::path::Path, dst: &std::path::Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dst)?;
        for entry in std::fs::read_dir(src)? {
            let entry = entry?;
            let to = dst.join(entry.file_name());
            if entry.file_type()?.is_dir() {
                copy(&entry.path(), &to)?;
            } else {
                std::fs::copy(entry.path(), to)?;
            }
        }
        Ok(())
    }
    let dir = tempfile::tempdir()?;
    copy(src, dir.path())?;
    Ok(dir)
}

/// The newest write-ahead log file of a database directory.
fn wal_file(db: &std::path::Path) -> Result<std::path::PathBuf, Box<dyn std::error::Error>> {
    let mut files: Vec<_> = std::fs::read_dir(db.join("wal"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    files.sort();
    files.pop().ok_or_else(|| "no WAL file".into())
}

#[tokio::test]
async fn newer_format_versions_are_refused() -> TestResult {
    let dir = tempfile::tempdir()?;
    drop(Tarn::open(dir.path()).await?);
    std::fs::write(dir.path().join("TARN_FORMAT"), "tarn database\nformat 99\n")?;
    let err = Tarn::open(dir.path()).await.unwrap_err();
    assert!(
        err.message().contains("99") && err.message().contains("version 3"),
        "{err}"
    );
    Ok(())
}

/// Malformed and hostile input of every kind is a 4xx, never a 500 or a panic, and
/// leaves the data as it was.
#[tokio::test]
async fn bad_input_is_a_client_error() -> TestResult {
    let (_t, s) = session().await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."t" (id INT PRIMARY KEY, v TEXT, e FLOAT4[2], j JSONB) USING engine"#,
        &[],
    )
    .await?;
    s.query(
        "ws",
        r#"INSERT INTO "ws"."t" VALUES (1, 'a', '{1,2}', '{}')"#,
        &[],
    )
    .await?;
    let deep = format!("SELECT {}1{}", "(".repeat(5000), ")".repeat(5000));
    let cases: Vec<String> = vec![
        "".into(),
        ";".into(),
        "   ".into(),
        "SELECT".into(),
        "SELECT * FROM".into(),
        "INSERT INTO".into(),
        "DROP".into(),
        "\0".into(),
        "SELECT '\u{fffd}\u{1F600}'::int".into(),
        r#"INSERT INTO "ws"."t" VALUES (2, 'b', '{1,2,3}', '{}')"#.into(),
        r#"INSERT INTO "ws"."t" VALUES (2, 'b', '{1,x}', '{}')"#.into(),
        r#"INSERT INTO "ws"."t" VALUES (2, 'b', '{{1,2}}', '{}')"#.into(),
        r#"INSERT INTO "ws"."t" VALUES (2, 'b', ARRAY['a', 'b'], '{}')"#.into(),
        r#"INSERT INTO "ws"."t" VALUES (2, 'b', '{1,2}', '{"unterminated')"#.into(),
        r#"INSERT INTO "ws"."t" VALUES (99999999999, 'b', NULL, NULL)"#.into(),
        r#"INSERT INTO "ws"."t" VALUES (1.5e400, 'b', NULL, NULL)"#.into(),
        r#"INSERT INTO "ws"."t" (id) SELECT 'x'"#.into(),
        r#"UPDATE "ws"."t" SET id = 'x'"#.into(),
        r#"UPDATE "ws"."t" SET e = '{1}'"#.into(),
        r#"DELETE FROM "ws"."t" WHERE nope = 1"#.into(),
        r#"SELECT e <#> ARRAY[1,2,3] FROM "ws"."t""#.into(),
        r#"SELECT v <#> 'text' FROM "ws"."t""#.into(),
        r#"SELECT j->>'a' + 1 FROM "ws"."t""#.into(),
        r#"SELECT jsonb_array_length(j) FROM "ws"."t""#.into(),
        r#"SELECT CAST('abc' AS INT)"#.into(),
        r#"SELECT 9223372036854775807 + 1"#.into(),
        r#"SELECT (id + 1) * 9223372036854775807 FROM "ws"."t" WHERE id > 0"#.into(),
        r#"SELECT (-2147483648)::int - 1::int"#.into(),
        r#"SELECT * FROM "ws"."t", "ws"."t""#.into(),
        r#"CREATE TABLE "ws"."u" (a FLOAT4[0])"#.into(),
        r#"CREATE TABLE "ws"."u" (a NUMERIC(99, 2))"#.into(),
        r#"CREATE TABLE "ws"."u" (a INT DEFAULT nosuchfunction())"#.into(),
        r#"CREATE TABLE "ws"."u" (a INT DEFAULT 'text')"#.into(),
        r#"CREATE TABLE "ws".""()"#.into(),
        r#"ALTER TABLE "ws"."t" ADD COLUMN z INT PRIMARY KEY"#.into(),
        r#"ALTER TABLE "ws"."t" ALTER COLUMN v TYPE INT"#.into(),
        r#"CREATE INDEX i ON "ws"."t" USING engine_index (e DESC) WITH (m = 0)"#.into(),
        r#"COPY "ws"."t" FROM '/etc/passwd'"#.into(),
        r#"SET datafusion.execution.batch_size = 1"#.into(),
        deep,
        format!("SELECT '{}'", "x".repeat(2 << 20)),
    ];
    for sql in &cases {
        match s.query("ws", sql, &[]).await {
            Ok(r) => panic!("{sql:.80} succeeded: {r:?}"),
            Err(e) => assert!(
                (400..500).contains(&e.status()),
                "{sql:.80} gave {} {}",
                e.status(),
                e.message()
            ),
        }
    }
    assert_eq!(
        rows(&s, r#"SELECT id, v, e, j FROM "ws"."t""#, &[]).await?,
        vec![vec![json!(1), json!("a"), json!([1.0, 2.0]), json!({})]]
    );
    Ok(())
}

#[tokio::test]
async fn query_timeout_is_a_bad_request() -> TestResult {
    let tarn = Tarn::open_with(
        tempfile::tempdir()?.path(),
        Options::default().query_timeout(std::time::Duration::from_millis(50)),
    )
    .await?;
    let s = fixture(&tarn).await?;
    let err = s
        .query(
            "ws",
            "SELECT count(*) FROM generate_series(1, 10000000000)",
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(err.status(), 400);
    assert!(err.message().contains("statement timeout"), "{err}");
    // The database is usable afterwards.
    assert_eq!(s.query("ws", "SELECT 1", &[]).await?.row_count, 1);
    Ok(())
}

#[tokio::test]
async fn insert_arrow_writes_batches_atomically() -> TestResult {
    use std::sync::Arc;
    use tarn::arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
    use tarn::arrow::datatypes::{DataType, Field, Schema};

    let (_t, s) = session().await?;
    s.query("ws", r#"CREATE TABLE "ws"."a" (id INT8 PRIMARY KEY, v TEXT NOT NULL, n INT DEFAULT 5) USING engine"#, &[]).await?;
    let batch = |ids: Vec<i64>, v: Vec<Option<&str>>| -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("v", DataType::Utf8, true),
        ]));
        let cols: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(StringArray::from(v)),
        ];
        RecordBatch::try_new(schema, cols).expect("batch")
    };
    let n = s
        .insert_arrow(
            "ws",
            "a",
            &[
                batch(vec![1, 2], vec![Some("x"), Some("y")]),
                batch(vec![3], vec![Some("z")]),
            ],
        )
        .await?;
    assert_eq!(n, 3);
    assert_eq!(
        rows(&s, r#"SELECT id, v, n FROM "ws"."a" ORDER BY id"#, &[]).await?,
        vec![
            vec![json!(1), json!("x"), json!(5)],
            vec![json!(2), json!("y"), json!(5)],
            vec![json!(3), json!("z"), json!(5)]
        ]
    );
    // A violation in the second batch leaves the first unapplied too.
    let err = s
        .insert_arrow(
            "ws",
            "a",
            &[
                batch(vec![4], vec![Some("ok")]),
                batch(vec![1], vec![Some("dup")]),
            ],
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.message(),
        "duplicate key value violates unique constraint \"a_pkey\""
    );
    let err = s
        .insert_arrow("ws", "a", &[batch(vec![5], vec![None])])
        .await
        .unwrap_err();
    assert_eq!(
        err.message(),
        "null value in column \"v\" violates not-null constraint"
    );
    assert_eq!(
        rows(&s, r#"SELECT count(*) FROM "ws"."a""#, &[]).await?,
        vec![vec![json!(3)]]
    );
    assert_eq!(
        s.insert_arrow("ws", "nope", &[])
            .await
            .unwrap_err()
            .status(),
        404
    );
    Ok(())
}

/// The uniqueness of one batch's own rows uses the same key encoding as the stored
/// rows: -0.0 and 0.0 are one key, NaN and NaN too (PostgreSQL's semantics).
#[tokio::test]
async fn a_batch_sees_equal_floats_as_one_key() -> TestResult {
    let (_tarn, s) = session().await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."f" (x FLOAT8 PRIMARY KEY) USING engine"#,
        &[],
    )
    .await?;
    let sql = r#"INSERT INTO "ws"."f" VALUES ($1::float8)"#;
    for pair in [
        [json!(0.0), json!(-0.0)],
        [json!("NaN"), json!("NaN")],
        [json!(-0.0), json!(0)],
    ] {
        let err = s
            .query_batch("ws", sql, &[vec![pair[0].clone()], vec![pair[1].clone()]])
            .await
            .unwrap_err();
        assert_eq!(err.status(), 409, "{pair:?}: {err}");
        assert!(
            err.message().starts_with("parameter set 1: duplicate key"),
            "{err}"
        );
    }
    assert_eq!(
        rows(&s, r#"SELECT count(*) FROM "ws"."f""#, &[]).await?,
        vec![vec![json!(0)]]
    );
    Ok(())
}

/// More parameters than the statement's placeholders is PostgreSQL's 400, for `query`
/// (also on the literal-insert and key-lookup fast paths) and for each set of a batch.
#[tokio::test]
async fn extra_parameters_are_refused() -> Result<(), Box<dyn std::error::Error>> {
    let tarn = Tarn::in_memory().await?;
    let s = fixture(&tarn).await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."p" (id INT8 PRIMARY KEY, v TEXT) USING engine"#,
        &[],
    )
    .await?;
    let cases: [(&str, Vec<serde_json::Value>, usize, usize); 4] = [
        ("SELECT $1, $2", vec![json!(1), json!(2), json!(3)], 3, 2),
        ("SELECT 1", vec![json!(1)], 1, 0),
        (
            r#"INSERT INTO "ws"."p" VALUES (1, 'a')"#,
            vec![json!(1)],
            1,
            0,
        ),
        (
            r#"SELECT v FROM "ws"."p" WHERE id = $1"#,
            vec![json!(1), json!(2)],
            2,
            1,
        ),
    ];
    for (sql, params, given, required) in cases {
        let e = s.query("ws", sql, &params).await.expect_err(sql);
        assert_eq!(e.status(), 400, "{sql}");
        assert_eq!(
            e.message(),
            format!(
                "bind message supplies {given} parameters, but prepared statement requires {required}"
            ),
            "{sql}"
        );
    }
    // Nothing was written by the refused INSERT.
    let r = s
        .query("ws", r#"SELECT count(*) FROM "ws"."p""#, &[])
        .await?;
    assert_eq!(r.rows, Some(vec![vec![json!(0)]]));
    let e = s
        .query_batch(
            "ws",
            r#"INSERT INTO "ws"."p" VALUES ($1, $2)"#,
            &[
                vec![json!(1), json!("a")],
                vec![json!(2), json!("b"), json!(3)],
            ],
        )
        .await
        .expect_err("extra parameter in set 1");
    assert_eq!(e.status(), 400);
    assert!(
        e.message()
            .starts_with("parameter set 1: bind message supplies 3 parameters"),
        "{}",
        e.message()
    );
    let r = s
        .query("ws", r#"SELECT count(*) FROM "ws"."p""#, &[])
        .await?;
    assert_eq!(r.rows, Some(vec![vec![json!(0)]]));
    Ok(())
}

/// Table, column and index names with control characters (NUL, a line break),
/// bidirectional controls, or nothing at all are refused, in every statement that
/// names something (file names already were), and nothing is created.
#[tokio::test]
async fn names_with_control_characters_or_empty_are_refused() -> TestResult {
    let (_tarn, s) = session().await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."ok" (id INT, e FLOAT4[]) USING engine"#,
        &[],
    )
    .await?;
    for bad in [
        "a\u{0}b",
        "a\nb",
        "a\rb",
        "evil\u{202E}gnp.exe",
        "x\u{2066}y",
        "tab\there",
        "line\u{2028}sep",
        // Bidi marks and invisible format characters (the last pass found them taken).
        "evil\u{200F}gnp.exe",
        "a\u{061C}b",
        "zero\u{200B}width",
        "\u{FEFF}bom",
        "soft\u{00AD}hyphen",
        "word\u{2060}joiner",
        // Tag characters: invisible ASCII riding in a name (the third pass found them).
        "tag\u{E0041}\u{E0042}ged",
        "\u{E007F}end",
        "vs\u{E0101}\u{E0102}",
        "\u{3164}",
    ] {
        let q = |sql: String| sql.replace("BAD", &bad.replace('"', "\"\""));
        for sql in [
            q(r#"CREATE TABLE "ws"."BAD" (id INT)"#.into()),
            q(r#"CREATE TABLE "ws"."t" ("BAD" INT)"#.into()),
            q(r#"CREATE TABLE "ws"."t" AS SELECT 1 AS "BAD""#.into()),
            q(r#"ALTER TABLE "ws"."ok" ADD COLUMN "BAD" INT"#.into()),
            q(r#"ALTER TABLE "ws"."ok" RENAME COLUMN id TO "BAD""#.into()),
            q(r#"ALTER TABLE "ws"."ok" RENAME TO "BAD""#.into()),
            q(r#"CREATE INDEX "BAD" ON "ws"."ok" USING engine_index (e)"#.into()),
            q(r#"CREATE VIEW "ws"."BAD" AS SELECT 1"#.into()),
            q(r#"CREATE VIEW "ws"."v" ("BAD") AS SELECT 1"#.into()),
            q(r#"CREATE VIEW "ws"."v" AS SELECT 1 AS "BAD""#.into()),
        ] {
            let e = s.query("ws", &sql, &[]).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::BadRequest, "{sql:?}: {e}");
            assert!(e.message().contains("not allowed"), "{sql:?}: {e}");
        }
    }
    for sql in [
        r#"CREATE TABLE "ws"."" (id INT)"#,
        r#"CREATE TABLE "ws"."t" ("" INT)"#,
        r#"ALTER TABLE "ws"."ok" RENAME TO """#,
        r#"ALTER TABLE "ws"."ok" RENAME COLUMN id TO """#,
    ] {
        let e = s.query("ws", sql, &[]).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadRequest, "{sql:?}: {e}");
    }
    let tables = s.tables("ws").await?;
    assert_eq!(tables.len(), 1, "{tables:?}");
    let t = s.table("ws", "ok").await?;
    assert_eq!(
        t.columns
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        ["id", "e"]
    );
    Ok(())
}

/// `unnest` of a record makes a column per field, named by the field (as DuckDB):
/// DataFusion named them `named_struct(Utf8("a"),Int64(1),…).a`.
#[tokio::test]
async fn unnest_of_a_record_names_its_columns_by_field() -> TestResult {
    let (_tarn, s) = session().await?;
    let r = s
        .query(
            "ws",
            "SELECT 7 AS k, unnest(named_struct('a', 1, 'b', 'x')), unnest(struct(2, 3))",
            &[],
        )
        .await?;
    assert_eq!(r.columns, vec!["k", "a", "b", "c0", "c1"]);
    assert_eq!(
        r.rows,
        Some(vec![vec![
            json!(7),
            json!(1),
            json!("x"),
            json!(2),
            json!(3)
        ]])
    );
    Ok(())
}

/// Array text is read the same from any expression as from a literal: a text column,
/// a concatenation, NULL and empty arrays, two dimensions; arrays pass through.
#[tokio::test]
async fn array_text_casts_read_text_from_any_expression() -> TestResult {
    let (_tarn, s) = session().await?;
    let r = s
        .query(
            "ws",
            "SELECT x::int[], x::text[], ('{' || x || '}')::text[][] FROM \
             (VALUES ('{1,2}'), (NULL), ('{}'), ('{3,NULL}')) v(x)",
            &[],
        )
        .await?;
    assert_eq!(
        r.rows,
        Some(vec![
            vec![json!([1, 2]), json!(["1", "2"]), json!([["1", "2"]])],
            vec![json!(null), json!(null), json!(null)],
            vec![json!([]), json!([]), json!([[]])],
            vec![json!([3, null]), json!(["3", null]), json!([["3", null]])],
        ])
    );
    let r = s
        .query(
            "ws",
            "SELECT ('{{1.5,2},' || '{3,NULL}}')::float8[][], ARRAY[1,2]::float8[], \
             (ARRAY[1,2])::text[], ('{\"a b\",c}' || '')::text[]",
            &[],
        )
        .await?;
    assert_eq!(
        r.rows,
        Some(vec![vec![
            json!([[1.5, 2.0], [3.0, null]]),
            json!([1.0, 2.0]),
            json!(["1", "2"]),
            json!(["a b", "c"])
        ]])
    );
    // A cast is named for what it casts; booleans are read from array text too;
    // unnest in FROM is a column `unnest`.
    let r = s
        .query(
            "ws",
            "SELECT x::int[], '{true,f}'::bool[] AS b, ('{t,' || 'no}')::bool[] AS c FROM \
             (VALUES ('{1,2}')) v(x)",
            &[],
        )
        .await?;
    assert_eq!(r.columns, vec!["x", "b", "c"]);
    assert_eq!(
        r.rows,
        Some(vec![vec![
            json!([1, 2]),
            json!([true, false]),
            json!([true, false])
        ]])
    );
    let r = s
        .query("ws", "SELECT * FROM unnest(ARRAY[1, 2])", &[])
        .await?;
    assert_eq!(r.columns, vec!["unnest"]);
    let e = s
        .query("ws", "SELECT x::int[] FROM (VALUES ('{1,a}')) v(x)", &[])
        .await
        .unwrap_err();
    assert_eq!(e.status(), 400, "{e}");
    assert!(e.message().contains("\"a\""), "{e}");
    Ok(())
}

/// Errors say what happened in Tarn's words, with the right status: no DataFusion
/// wrappers, type debug names or internal node names.
#[tokio::test]
async fn errors_are_in_tarns_own_words() -> TestResult {
    let (_tarn, s) = session().await?;
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."n" (id INT, e FLOAT4[], body TEXT) USING engine"#,
        &[],
    )
    .await?;
    s.query(
        "ws",
        r#"INSERT INTO "ws"."n" VALUES (1, '{1,0}', 'apple'), (2, '{0,1}', 'pear')"#,
        &[],
    )
    .await?;
    s.query(
        "ws",
        r#"CREATE INDEX ON "ws"."n" USING engine_index (body) WITH (index_type = 'bm25')"#,
        &[],
    )
    .await?;
    let internal = [
        "External error",
        "struct(",
        ".n.e",
        "coercion failed",
        "Float64(",
        "Utf8",
        "List(",
        "Int64",
        "Float32",
        "Decimal128",
        "Struct(",
        "Internal error",
        "signature",
        "FieldMetadata",
        "Literal(",
        "OuterReferenceColumn",
        "not implemented",
        "Base table",
        "While expanding",
        "retract_batch",
    ];
    for (sql, says) in [
        ("SELECT ARRAY[1,2] <#> ARRAY[1,2]", "not bigint[]"),
        ("SELECT 'a' ~ '('", "invalid regular expression"),
        (
            "SELECT 'abc' <#> 'abc'",
            "the left side must be that column",
        ),
        (
            r#"SELECT (e, e) <#> engine_hybrid_record('{1,0}', 'x') FROM "ws"."n""#,
            "column \"e\" is FLOAT4[], not a TEXT column",
        ),
        (
            r#"SELECT e <#> engine_hybrid_record('{1,0}', 'x') FROM "ws"."n""#,
            "the left side is column \"e\", not a row of two columns",
        ),
        (
            r#"SELECT (e, body, body) <#> engine_hybrid_record('{1,0}', 'x') FROM "ws"."n""#,
            "the left side is a row of 3 columns, not two",
        ),
        (
            r#"SELECT (e, upper(body)) <#> engine_hybrid_record('{1,0}', 'x') FROM "ws"."n""#,
            "not column \"e\" and an expression over the rows' columns",
        ),
        (
            r#"SELECT (e, body) <#> engine_hybrid_record(5, 'x') FROM "ws"."n""#,
            "expected a vector, got bigint",
        ),
        (
            r#"SELECT (e, body) <#> engine_hybrid_record('{1,0}', 'x', 0.5, 0.5, 5) FROM "ws"."n""#,
            "'minmax', 'softmax' or 'rrf', not 5",
        ),
        (
            r#"SELECT (e, body) <#> engine_hybrid_record('{1,0}', 'x', 1e308*10, 0.5) FROM "ws"."n""#,
            "vector weight of a hybrid search must be a number in [0, 1]",
        ),
        (
            r#"SELECT (e, body) <#> engine_hybrid_record('{1,0}', 'x', 2, 0.5) FROM "ws"."n""#,
            "between 0 and 1",
        ),
        (
            r#"EXPLAIN ANALYZE INSERT INTO "ws"."n" VALUES (9, NULL, 'x')"#,
            "EXPLAIN shows the plans of queries",
        ),
        (
            r#"EXPLAIN UPDATE "ws"."n" SET id = 1"#,
            "EXPLAIN shows the plans of queries",
        ),
        (
            r#"EXPLAIN WITH x AS (SELECT 9) INSERT INTO "ws"."n" (id) SELECT * FROM x"#,
            "EXPLAIN shows the plans of queries",
        ),
        (
            "SELECT engine_param_array('int8[][]', '[1')",
            "engine_param_array",
        ),
        // DataFusion's refusals of types, in PostgreSQL's words and type names.
        (
            r#"SELECT e + 1 FROM "ws"."n""#,
            "operator does not exist: real[] + bigint",
        ),
        (
            "SELECT 'a'::text + 1",
            "operator does not exist: text + bigint",
        ),
        (
            "SELECT 1.5::numeric(10,2) + 'x'::text",
            "operator does not exist: numeric(10,2) + text",
        ),
        (
            "SELECT named_struct('a', 1) + 1",
            "operator does not exist: record + bigint",
        ),
        (
            r#"SELECT e = 1 FROM "ws"."n""#,
            "operator does not exist: real[] = bigint",
        ),
        (
            r#"SELECT sum(e) FROM "ws"."n""#,
            "function sum(real[]) does not exist",
        ),
        ("SELECT md5(1)", "function md5(bigint) does not exist"),
        (
            r#"SELECT upper(e) FROM "ws"."n""#,
            "function upper(real[]) does not exist",
        ),
        ("SELECT abs('x'::text)", "function abs(text) does not exist"),
        (
            "SELECT * FROM generate_series('a', 3)",
            "must be an INTEGER, TIMESTAMP, DATE or NULL, got text",
        ),
        (
            "VALUES ('{}'::jsonb), ('[]'::text)",
            "VALUES rows give column 1 different types",
        ),
        (
            "SELECT * FROM generate_series(1, 'a')",
            "must be an INTEGER or NULL, got text",
        ),
        (
            "SELECT round('x'::text)",
            "function round(text) does not exist",
        ),
        (
            "SELECT 1 WHERE 1",
            "argument of WHERE must be type boolean, not type bigint",
        ),
        ("SELECT 1 LIMIT -1", "LIMIT must not be negative"),
        ("SELECT 1 OFFSET -1", "OFFSET must not be negative"),
        (
            "SELECT 1 LIMIT 'a'",
            "argument of LIMIT must be type bigint, not type text",
        ),
        (
            "SELECT 1 LIMIT 1 OFFSET 1e30",
            "argument of OFFSET must be type bigint, not type double precision",
        ),
        (
            r#"SELECT * FROM "ws"."n" WHERE e <#> '{1,0}'"#,
            "argument of WHERE must be type boolean, not type real",
        ),
        (
            r#"SELECT body <#> 5 FROM "ws"."n""#,
            "must be a constant string (a literal or a parameter), not 5",
        ),
        // Expressions are named in the statement's words, not DataFusion's rendering.
        (
            r#"SELECT body <#> upper(body) FROM "ws"."n""#,
            "must be a constant string (a literal or a parameter), not an expression over the rows' columns",
        ),
        (
            r#"SELECT body <#> random()::text FROM "ws"."n""#,
            "not an expression that is not constant",
        ),
        (
            r#"SELECT (e, body) <#> ROW(1, 2) FROM "ws"."n""#,
            "operator does not exist: record <#> record",
        ),
        (
            r#"SELECT e::float4[3] FROM "ws"."n""#,
            "cannot cast an array of 2 elements to an array of exactly 3",
        ),
        (
            r#"SELECT body @@ 'x' FROM "ws"."n""#,
            "operator does not exist: @@; text is searched with <#>",
        ),
        ("SELECT @@version", "operator does not exist: prefix @@"),
        ("SELECT U&'d\\0061t'", "Unicode escape strings (U&'…')"),
        ("SELECT N'abc'", "national character strings"),
        (
            "SELECT interval '2000000000 years'",
            "interval field value out of range: \"2000000000 years\"",
        ),
        (
            r#"CREATE TABLE "ws"."x" AS SELECT named_struct('a', 1) AS s"#,
            "cannot store a column of type record",
        ),
        (
            r#"CREATE TABLE "ws"."x" AS SELECT ARRAY[ARRAY[ARRAY['a']]] AS s"#,
            "cannot store a column of type text[][]",
        ),
        ("SELECT 12.5::numeric(2,1)", "numeric"),
        (
            "SELECT 'yesterday-ish'::timestamptz",
            "invalid input syntax for type timestamp: \"yesterday-ish\"",
        ),
        (
            "SELECT 1 = 'a'",
            "invalid input syntax for type bigint: \"a\"",
        ),
        (
            "SELECT avg(x) FROM (VALUES ('a'::text)) v(x)",
            "function avg(text) does not exist",
        ),
        // Every argument named, not the first that failed.
        ("SELECT substr(1, 'a')", "function substr(bigint, text)"),
        // A long value is quoted in part, so the message still says what is wrong.
        (
            "SELECT repeat('9', 600000)::float8",
            "(600000 bytes) is out of range for type double precision",
        ),
        (
            "SELECT repeat('x', 600000)::float8",
            "invalid input syntax for type double precision: \"xxx",
        ),
        ("SELECT 1e400::numeric", "numeric field overflow"),
        (
            "SELECT max(x) FROM (VALUES (ARRAY[[1,2]]), (ARRAY[[3,4]])) v(x)",
            "could not compare these values",
        ),
        (
            "SELECT g FROM generate_series(1, 3) t(g) WHERE row_number() OVER () > 1",
            "window functions are not allowed here",
        ),
        (
            "SELECT g FROM generate_series(1, 3) t(g) WHERE unnest(ARRAY[g]) > 0",
            "set-returning functions (unnest) are not allowed here",
        ),
        (
            "SELECT sum(lag(g, 1) OVER (ORDER BY g)) FROM generate_series(1, 3) t(g)",
            "aggregate function calls cannot contain window function calls",
        ),
        (
            "SELECT g FROM generate_series(1, 3) t(g) GROUP BY lag(g) OVER ()",
            "window functions are not allowed in GROUP BY",
        ),
        (
            "SELECT 1 OPERATOR(pg_catalog.+) 2",
            "operator does not exist: OPERATOR(pg_catalog.+)",
        ),
        ("SELECT ~5", "operator does not exist: prefix ~"),
        (
            "SELECT * FROM (VALUES (2)) a(x), LATERAL generate_series(1, a.x) g",
            "a function in FROM takes constant arguments",
        ),
        (
            r#"WITH d AS (DELETE FROM "ws"."n" RETURNING id) SELECT * FROM d"#,
            "DELETE inside WITH or a subquery is not supported",
        ),
        (
            "SELECT 1::numeric(1000, 0)",
            "and the precision, not (1000, 0)",
        ),
        (
            r#"SELECT coalesce('{"a":1}'::jsonb -> 'zz', '"d"'::jsonb)"#,
            "cast it, as (j -> 'k')::jsonb",
        ),
        (
            r#"SELECT CASE WHEN true THEN '{"a":1}'::jsonb -> 'a' ELSE '{}'::jsonb END"#,
            "cast it, as (j -> 'k')::jsonb",
        ),
        (
            "SELECT g::text COLLATE \"C\" FROM generate_series(1, 2) t(g)",
            "syntax error at or near \"COLLATE\"",
        ),
        (
            "SELECT x FROM (VALUES (1)) t(x) GROUP BY CUBE(x, x)",
            "GROUP BY CUBE names \"x\" more than once",
        ),
        (
            "SELECT x FROM (VALUES (1)) t(x) GROUP BY GROUPING SETS ((x, x), ())",
            "GROUP BY GROUPING SETS names \"x\" more than once",
        ),
        // An array of reals is checked as a real is, element by element.
        (
            "SELECT ARRAY[1e39]::float4[]",
            "value out of range: overflow",
        ),
        (
            "SELECT '{1, 1e39}'::float4[]",
            "value out of range: overflow",
        ),
        (
            "SELECT x::float4[] FROM (VALUES ('{1, 1e39}')) v(x)",
            "\"1e39\" is out of range for type real",
        ),
        (
            "SELECT ARRAY[ARRAY[1e-50]]::real[][]",
            "value out of range: underflow",
        ),
        (
            "SELECT '1'::numeric(0, 0)",
            "NUMERIC precision must be between 1 and 76",
        ),
        (
            r#"SELECT e <-> e FROM "ws"."n""#,
            "operator does not exist: <->; similarity is scored with <#>",
        ),
        ("SELECT 1 ## 2", "operator does not exist: ##"),
        // A pattern that does not compile says why, whichever function read it.
        (
            "SELECT regexp_replace('x', '(', 'y')",
            "unclosed group in \"(\"",
        ),
        ("SELECT regexp_match('x', '[')", "unclosed character class"),
        ("SELECT map_extract(1, 'a')", "expected a map, not bigint"),
        ("SELECT 'x' COLLATE \"C\"", "Collate is not supported"),
        (
            "SELECT B'102'",
            "bit-string literals (B'…') are not supported",
        ),
        (
            "SELECT repeat('9', 600000)::bool",
            "invalid input syntax for type boolean: \"999",
        ),
        (
            "SELECT repeat('9', 600000)::interval",
            "invalid input syntax for type interval: \"999",
        ),
        (
            r#"INSERT INTO "ws"."n" VALUES (1, 2, 'x')"#,
            "takes an array of numbers, not bigint",
        ),
        (
            "SELECT (SELECT 1, 2)",
            "subquery must return only one column",
        ),
        (
            r#"SELECT * FROM "ws"."n", "ws"."n""#,
            "table name \"n\" specified more than once",
        ),
        ("SELECT 100000::smallint", "smallint out of range"),
        // The column named by its table, as PostgreSQL names it (not `ws.n.body`).
        (
            r#"SELECT id, body FROM "ws"."n" GROUP BY id"#,
            "column \"n.body\" must appear in the GROUP BY clause or be used in an aggregate function",
        ),
        (
            r#"SELECT * FROM "ws"."n" GROUP BY id"#,
            "must appear in the GROUP BY clause or be used in an aggregate function",
        ),
        (
            "SELECT string_agg(x::text, ',') OVER (ORDER BY x ROWS BETWEEN 1 PRECEDING AND \
             CURRENT ROW) FROM generate_series(1, 3) x",
            "string_agg over a window frame that does not start at UNBOUNDED PRECEDING is \
             not supported",
        ),
        (
            "SELECT bool_and(x > 1) OVER (ORDER BY x ROWS BETWEEN 1 PRECEDING AND CURRENT \
             ROW) FROM generate_series(1, 3) x",
            "bool_and over a window frame",
        ),
        ("SELECT foo(1)", "function foo does not exist"),
        (
            r#"SELECT * FROM "ws"."n" ORDER BY 5"#,
            "ORDER BY position 5 is not in select list",
        ),
        ("SELECT substr('abc')", "substring needs FROM or FOR"),
        // Text that is not a literal is read as array text too (Arrow's cast took it
        // as one element: `{11}`).
        (
            "SELECT ('1'||'1')::float4[]",
            "malformed array literal: \"11\"",
        ),
        (
            "SELECT repeat('1', 2000)::float4[]",
            "malformed array literal",
        ),
        // A long malformed value is quoted as other values are: its start and length.
        (
            "SELECT ('{1,{' || repeat('x', 3000))::int8[]",
            "malformed array literal: \"{1,{xxx",
        ),
        // Types DataFusion lacks are named as PostgreSQL names an unknown type.
        ("SELECT 'x'::money", "type \"money\" is not supported"),
        (
            "SELECT * FROM generate_series(1, 10, 0)",
            "step size cannot equal zero",
        ),
        (
            "SELECT generate_series(1, 10, 0)",
            "step size cannot equal zero",
        ),
        ("SELECT CAST(1 AS xml)", "type \"xml\" is not supported"),
        (
            "SELECT CAST(1 AS DOUBLE(10))",
            "type \"double(10)\" is not supported",
        ),
        (
            "SELECT x::float8[] FROM (VALUES ('{{1},{2}}')) v(x)",
            "malformed array literal",
        ),
        (
            "SELECT now() + x * interval '1 day' FROM generate_series(1, 2) g(x)",
            "operator does not exist: bigint * interval",
        ),
        // The JSON operators' refusals name the operator written, not the function it
        // is planned as.
        (
            "SELECT 1 -> 2",
            "-> takes a JSON document (jsonb or text) on its left, not bigint",
        ),
        (
            "SELECT '{}'::jsonb -> 1.5",
            "-> takes a key (text) or an array index (integer) on its right",
        ),
        ("SELECT 1 #>> '{a}'", "->> and #>> take a JSON document"),
        (
            "SELECT json_length(1)",
            "json_length() takes a JSON document",
        ),
        (
            "SELECT interval $$1 day$$",
            "an INTERVAL literal takes a quoted string or a number",
        ),
    ] {
        let e = s.query("ws", sql, &[]).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadRequest, "{sql}: {e}");
        assert!(e.message().contains(says), "{sql}: {e}");
        for word in internal {
            assert!(!e.message().contains(word), "{sql}: {e}");
        }
        assert!(e.message().len() < 400, "{sql}: {e}");
    }
    // The scalar-subquery form of a correlated search works.
    let r = s
        .query(
            "ws",
            r#"SELECT v1.id, (SELECT max(e <#> v1.e) FROM "ws"."n") FROM "ws"."n" v1 ORDER BY 1"#,
            &[],
        )
        .await?;
    assert_eq!(
        r.rows,
        Some(vec![vec![json!(1), json!(1.0)], vec![json!(2), json!(1.0)]])
    );
    // And so does its LATERAL form: the best match per row, ORDER BY … LIMIT 1 (it had
    // been refused as a shape unnesting did not cover).
    let r = s
        .query(
            "ws",
            r#"SELECT v1.id, x.id, x.s FROM "ws"."n" v1, LATERAL (SELECT id, e <#> v1.e AS s FROM "ws"."n" WHERE id <> v1.id ORDER BY s DESC LIMIT 1) x ORDER BY 1"#,
            &[],
        )
        .await?;
    assert_eq!(
        r.rows,
        Some(vec![
            vec![json!(1), json!(2), json!(0.0)],
            vec![json!(2), json!(1), json!(0.0)]
        ])
    );
    Ok(())
}

/// Errors quote the caller's input in part: a 30 MB parameter that does not parse, or a
/// 900 KB name, came back whole in the message. Column names are 1-63 bytes, as table
/// names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_quote_large_input_in_part() -> TestResult {
    let (_tarn, s) = session().await?;
    let huge = "x".repeat(30 << 20);
    let long = "y".repeat(900_000);
    let cases: Vec<(String, Vec<serde_json::Value>)> = vec![
        ("SELECT $1::int".into(), vec![json!(huge)]),
        ("SELECT $1::date".into(), vec![json!(huge)]),
        ("SELECT $1::float4[]".into(), vec![json!(huge)]),
        (format!(r#"CREATE TABLE "ws"."t" ("{long}" INT)"#), vec![]),
        (format!(r#"CREATE TABLE "ws"."{long}" (a INT)"#), vec![]),
        (format!(r#"SELECT * FROM "ws"."{long}""#), vec![]),
    ];
    for (sql, params) in &cases {
        let e = s.query("ws", sql, params).await.unwrap_err();
        assert!(
            e.message().len() <= tarn::MAX_MESSAGE_BYTES,
            "{} bytes: {}",
            e.message().len(),
            &e.message()[..200]
        );
        assert!(matches!(e.status(), 400 | 404), "{e}");
    }
    s.query(
        "ws",
        &format!(r#"CREATE TABLE "ws"."t" ("{}" INT)"#, "c".repeat(63)),
        &[],
    )
    .await?;
    let e = s
        .query(
            "ws",
            &format!(
                r#"ALTER TABLE "ws"."t" ADD COLUMN "{}" INT"#,
                "c".repeat(64)
            ),
            &[],
        )
        .await
        .unwrap_err();
    assert!(e.message().contains("use 1-63 bytes"), "{e}");
    Ok(())
}

/// A default is checked against its column's type when it is declared: `ADD COLUMN z
/// int DEFAULT 'x'` on a table with rows was accepted, and every read of the table
/// failed after it.
#[tokio::test]
async fn defaults_are_checked_against_their_column_type() -> TestResult {
    let (_tarn, s) = session().await?;
    s.query("ws", r#"CREATE TABLE "ws"."d" (id INT)"#, &[])
        .await?;
    s.query("ws", r#"INSERT INTO "ws"."d" VALUES (1), (2)"#, &[])
        .await?;
    for sql in [
        r#"ALTER TABLE "ws"."d" ADD COLUMN z INT DEFAULT 'x'"#,
        r#"ALTER TABLE "ws"."d" ADD COLUMN z BOOLEAN DEFAULT 'maybe'"#,
        r#"ALTER TABLE "ws"."d" ADD COLUMN z INT DEFAULT 99999999999"#,
        r#"CREATE TABLE "ws"."e" (id INT DEFAULT 'x')"#,
        r#"CREATE TABLE "ws"."e" (d DATE DEFAULT 'yesterday-ish')"#,
    ] {
        let e = s.query("ws", sql, &[]).await.unwrap_err();
        assert_eq!(e.status(), 400, "{sql}: {e}");
        assert!(e.message().contains("default of column"), "{sql}: {e}");
    }
    // A default is kept in the catalog all organizations share: its text is bounded,
    // as names are (a 1 MB default per column was accepted).
    let long = "x".repeat(70_000);
    for sql in [
        format!(r#"ALTER TABLE "ws"."d" ADD COLUMN t TEXT DEFAULT '{long}'"#),
        format!(r#"CREATE TABLE "ws"."e" (t TEXT DEFAULT '{long}')"#),
    ] {
        let e = s.query("ws", &sql, &[]).await.unwrap_err();
        assert_eq!(e.status(), 400, "{e}");
        assert!(
            e.message()
                .contains(r#"the DEFAULT of column "t" is 70002 bytes of SQL, at most 65536"#),
            "{e}"
        );
    }
    let at_most = "x".repeat(65_000);
    s.query(
        "ws",
        &format!(r#"CREATE TABLE "ws"."long_default" (t TEXT DEFAULT '{at_most}')"#),
        &[],
    )
    .await?;
    // Nothing was changed; the table reads as before.
    let r = s
        .query("ws", r#"SELECT * FROM "ws"."d" ORDER BY id"#, &[])
        .await?;
    assert_eq!(r.columns, ["id"]);
    assert_eq!(r.rows, Some(vec![vec![json!(1)], vec![json!(2)]]));
    // Defaults in text that the type reads are stored in the type.
    s.query(
        "ws",
        r#"ALTER TABLE "ws"."d" ADD COLUMN z INT DEFAULT '7', ADD COLUMN f FLOAT8 DEFAULT '1.5'"#,
        &[],
    )
    .await?;
    let r = s
        .query(
            "ws",
            r#"SELECT id, z, f, z + 1 FROM "ws"."d" ORDER BY id"#,
            &[],
        )
        .await?;
    assert_eq!(
        r.rows,
        Some(vec![
            vec![json!(1), json!(7), json!(1.5), json!(8)],
            vec![json!(2), json!(7), json!(1.5), json!(8)]
        ])
    );
    s.query(
        "ws",
        r#"CREATE TABLE "ws"."e" (id INT NOT NULL DEFAULT NULL)"#,
        &[],
    )
    .await?;
    Ok(())
}

/// A call refused because the database closed (a host shutting down) is a 503 that says
/// nothing was applied, not a 500.
#[tokio::test]
async fn calls_after_close_are_503_and_apply_nothing() -> TestResult {
    let dir = tempfile::tempdir()?;
    let tarn = Tarn::open(dir.path()).await?;
    let (s, secret) = tarn_tests::fixture_with_key(&tarn).await?;
    s.query("ws", r#"CREATE TABLE "ws"."t" (id INT)"#, &[])
        .await?;
    tarn.close().await?;
    let e = s
        .query("ws", r#"INSERT INTO "ws"."t" VALUES (1)"#, &[])
        .await
        .unwrap_err();
    assert_eq!((e.kind(), e.status()), (ErrorKind::Unavailable, 503), "{e}");
    assert!(e.message().contains("nothing was applied"), "{e}");
    drop(s);
    drop(tarn);
    let tarn = Tarn::open(dir.path()).await?;
    let s = tarn_tests::reconnect(&tarn, &secret).await?;
    assert_eq!(
        rows(&s, r#"SELECT count(*) FROM "ws"."t""#, &[]).await?,
        vec![vec![json!(0)]]
    );
    Ok(())
}

/// `array_remove` / `array_replace` take every equal element, as PostgreSQL's, and
/// keep their names as columns; `generate_series` as a SELECT item returns rows named
/// `generate_series`.
#[tokio::test]
async fn array_functions_and_series_are_postgresqls() -> TestResult {
    let (_t, s) = session().await?;
    let r = s
        .query(
            "ws",
            "SELECT array_remove(ARRAY[1,2,1], 1), array_replace(ARRAY[1,2,1], 1, 9)",
            &[],
        )
        .await?;
    assert_eq!(r.columns, vec!["array_remove", "array_replace"]);
    assert_eq!(r.rows, Some(vec![vec![json!([2]), json!([9, 2, 9])]]));
    let r = s.query("ws", "SELECT generate_series(1, 3)", &[]).await?;
    assert_eq!(r.columns, vec!["generate_series"]);
    assert_eq!(r.row_count, 3);
    Ok(())
}
