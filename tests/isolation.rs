//! SQL isolation between organizations (issue 10, must 6; SPEC §1 "Permissions", §2,
//! §4.1): a statement sees only the workspaces of its session's organization. Another
//! organization's table is `relation "…" does not exist` (404) wherever a statement can
//! name a relation: FROM, JOIN, LATERAL, derived tables, scalar/IN/EXISTS subqueries, a
//! subquery in a VALUES list, CTEs, set operations, `<#>` (text, vector and hybrid, a
//! query vector taken from a subquery), the key-lookup and search fast paths,
//! parameterized statements (the parse cache), `INSERT … SELECT`, `INSERT … VALUES`
//! with a subquery, RETURNING, ON CONFLICT, `UPDATE … FROM`, `DELETE … USING`, CTAS,
//! and EXPLAIN (plain, ANALYZE, VERBOSE, of DML and of CTAS), in
//! `query`, `query_batch` and `query_arrow` alike. DataFusion's catalog listings
//! (`information_schema`, `SHOW TABLES`/`COLUMNS`/…, `DESCRIBE`, table functions) are
//! off: every organization gets the same 4xx, which names nothing.
//!
//! Two organizations of two users (two API keys):
//! - `org-a` (Alice): workspace `ws` with table `mine`;
//! - `org-b` (Bob): workspace `ws` (the same id as A's) and workspace `other` (an id A
//!   does not have), each with a table `secret` whose rows carry [`MARKER`] and whose
//!   column `b_only_col` and index `b_hidden_idx` only B knows; `other.b_hidden_table`;
//!   and `ws.mine`, the same name as A's table, with B's own rows.
//!
//! Every statement is run by A (against A's `ws`) and by B with the same text. B's
//! success proves the form is valid SQL that reaches B's table, so isolation, not a
//! syntax error, is what stops A. A's answer (rows, error message and its Debug form,
//! EXPLAIN text) is searched for anything of B's that A did not write itself, and after
//! each of A's attempts every table of both organizations (rows, columns, indexes) is
//! as it was. Names that no organization resolves (three-part names, `"$ws"`, quoted
//! upper case, unqualified) give A and B the same answer.

use serde_json::{Value, json};
use tarn::{QueryResult, Session, Tarn};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// In every row of B's `secret` tables.
const MARKER: &str = "B-ONLY-MARKER";

/// Things of B's that nothing A is told may contain, unless A's statement wrote them.
const B_ONLY: &[&str] = &[
    MARKER,
    "b_only_col",
    "b_hidden_idx",
    "b_hidden_table",
    "org-b",
    "bob@example.com",
    "Bob",
];

/// How A may write B's table `secret` in workspace `ws` (an id A has too) and in
/// workspace `other` (an id A does not have): quoted, unquoted, in another case. In
/// B's session each names B's table; the second item is the relation in A's 404.
const TARGETS: &[(&str, &str)] = &[
    (r#""other"."secret""#, r#""other"."secret""#),
    ("other.secret", r#""other"."secret""#),
    ("OTHER.Secret", r#""other"."secret""#),
    (r#""ws"."secret""#, r#""ws"."secret""#),
    ("ws.secret", r#""ws"."secret""#),
    ("Ws.SECRET", r#""ws"."secret""#),
];

/// Names that resolve in no organization: the catalog-qualified forms (the DataFusion
/// catalog is named `tarn`), the session's internal default schema `$ws`, quoted upper
/// case and unqualified names.
const UNRESOLVED: &[&str] = &[
    r#""tarn"."other"."secret""#,
    r#""tarn"."ws"."secret""#,
    "tarn.ws.secret",
    r#""x"."tarn"."ws"."secret""#,
    r#""$ws"."secret""#,
    r#""OTHER"."secret""#,
    r#""WS"."SECRET""#,
    "secret",
];

/// What B's run of a statement must give.
#[derive(Debug, Clone, Copy)]
enum B {
    /// Success.
    Ok,
    /// Success, with this text (B's data or names) in the result rows.
    Shows(&'static str),
    /// Success, writing this many rows.
    Writes(u64),
    /// This status (a form DataFusion plans but cannot run, in any organization).
    Fails(u16),
}

/// A statement form: `{t}` is the table, `{k}` a number unique to each run.
struct Form {
    sql: &'static str,
    b: B,
    /// A's status: 404, or 400 where Tarn wraps the relation error (column defaults).
    a_status: u16,
}

const fn form(sql: &'static str, b: B) -> Form {
    Form {
        sql,
        b,
        a_status: 404,
    }
}

/// Statements that read B's table.
const READS: &[Form] = &[
    form("SELECT * FROM {t}", B::Shows(MARKER)),
    form(
        "SELECT id, body FROM {t} WHERE id > 0 ORDER BY id",
        B::Shows(MARKER),
    ),
    // The key fast path, then the same through a parameter (the parse cache).
    form("SELECT body FROM {t} WHERE id = 1", B::Shows(MARKER)),
    form("SELECT body FROM {t} WHERE id = $1", B::Shows(MARKER)),
    form(
        "SELECT count(*) AS n, max(body) AS top FROM {t}",
        B::Shows(MARKER),
    ),
    form(
        r#"SELECT m.id, s.body FROM "ws"."mine" m JOIN {t} s ON s.id = m.id"#,
        B::Shows(MARKER),
    ),
    form(
        r#"SELECT m.id, s.body FROM "ws"."mine" AS m LEFT JOIN {t} AS s ON s.id = m.id"#,
        B::Shows(MARKER),
    ),
    form(
        r#"SELECT s.body FROM {t} s RIGHT JOIN "ws"."mine" m ON s.id = m.id"#,
        B::Shows(MARKER),
    ),
    form(
        r#"SELECT s.body FROM "ws"."mine" m, {t} s"#,
        B::Shows(MARKER),
    ),
    form(
        r#"SELECT s.body FROM "ws"."mine" m CROSS JOIN {t} s"#,
        B::Shows(MARKER),
    ),
    form(
        r#"SELECT l.body FROM "ws"."mine" m, LATERAL (SELECT body FROM {t} s WHERE s.id = m.id) l"#,
        B::Shows(MARKER),
    ),
    form(
        "SELECT * FROM (SELECT body FROM {t}) AS sub",
        B::Shows(MARKER),
    ),
    form(
        "SELECT (SELECT body FROM {t} ORDER BY id LIMIT 1) AS first",
        B::Shows(MARKER),
    ),
    form(
        r#"SELECT id FROM "ws"."mine" WHERE id IN (SELECT id FROM {t})"#,
        B::Ok,
    ),
    form(
        r#"SELECT id FROM "ws"."mine" m WHERE EXISTS (SELECT 1 FROM {t} s WHERE s.id = m.id)"#,
        B::Ok,
    ),
    form(
        r#"SELECT id FROM "ws"."mine" WHERE id > (SELECT min(id) FROM {t})"#,
        B::Ok,
    ),
    // A scalar subquery in a VALUES list (run as a projection: `values_subquery.rs`).
    form(
        "SELECT * FROM (VALUES (0, (SELECT body FROM {t} ORDER BY id LIMIT 1))) AS v(n, b)",
        B::Shows(MARKER),
    ),
    form(
        "WITH c AS (SELECT body FROM {t}) SELECT * FROM c",
        B::Shows(MARKER),
    ),
    // A CTE named like the table does not stand for a qualified name.
    form(
        "WITH secret AS (SELECT 'from a cte' AS body) SELECT s.body FROM {t} s",
        B::Shows(MARKER),
    ),
    form(
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < (SELECT count(*) FROM {t})) SELECT n FROM r",
        B::Ok,
    ),
    form(
        r#"SELECT body FROM "ws"."mine" UNION ALL SELECT body FROM {t}"#,
        B::Shows(MARKER),
    ),
    form(
        r#"SELECT body FROM {t} EXCEPT SELECT body FROM "ws"."mine""#,
        B::Shows(MARKER),
    ),
    // `<#>`: the search fast path, the search node, row by row, vector, hybrid.
    form(
        "SELECT body FROM {t} ORDER BY body <#> 'one' DESC LIMIT 3",
        B::Shows(MARKER),
    ),
    form(
        "SELECT body, body <#> 'one' AS s FROM {t} WHERE body LIKE '%o%' ORDER BY s DESC LIMIT 3",
        B::Shows(MARKER),
    ),
    form("SELECT id, body <#> 'one' AS s FROM {t}", B::Ok),
    form(
        "SELECT id, body FROM {t} ORDER BY e <#> '{1,0,0}' DESC LIMIT 2",
        B::Shows(MARKER),
    ),
    form(
        "SELECT id, body FROM {t} ORDER BY (e, body) <#> engine_hybrid_record('{1,0,0}', 'one') DESC LIMIT 2",
        B::Shows(MARKER),
    ),
    form(
        r#"SELECT id FROM "ws"."mine" ORDER BY e <#> (SELECT e FROM {t} ORDER BY id LIMIT 1) DESC LIMIT 2"#,
        B::Ok,
    ),
    form(
        r#"SELECT id FROM "ws"."mine" ORDER BY (e, body) <#> engine_hybrid_record((SELECT e FROM {t} ORDER BY id LIMIT 1), 'one') DESC LIMIT 2"#,
        B::Ok,
    ),
    // EXPLAIN would name B's columns and indexes.
    form("EXPLAIN SELECT * FROM {t}", B::Shows("b_only_col")),
    form("EXPLAIN ANALYZE SELECT * FROM {t}", B::Shows("b_only_col")),
    form("EXPLAIN VERBOSE SELECT * FROM {t}", B::Shows("b_only_col")),
    form(
        "EXPLAIN SELECT body FROM {t} ORDER BY body <#> 'one' DESC LIMIT 3",
        B::Shows("b_hidden_idx"),
    ),
    form(
        "EXPLAIN ANALYZE SELECT body FROM {t} ORDER BY body <#> 'one' DESC LIMIT 3",
        B::Shows("b_hidden_idx"),
    ),
    form(
        r#"EXPLAIN SELECT m.id FROM "ws"."mine" m WHERE m.id IN (SELECT id FROM {t})"#,
        B::Ok,
    ),
    form(
        r#"EXPLAIN INSERT INTO "ws"."mine" (id, body) SELECT id + 100, body FROM {t}"#,
        B::Fails(400),
    ),
    form(
        r#"EXPLAIN UPDATE "ws"."mine" SET body = (SELECT body FROM {t} ORDER BY id LIMIT 1)"#,
        B::Fails(400),
    ),
    form(
        r#"EXPLAIN DELETE FROM "ws"."mine" WHERE id IN (SELECT id FROM {t})"#,
        B::Fails(400),
    ),
    form(
        r#"EXPLAIN CREATE TABLE "ws"."never_{k}" AS SELECT * FROM {t}"#,
        B::Fails(400),
    ),
    // EXPLAIN takes queries only (Tarn runs writes and DDL itself): 400 for the owner,
    // 404 for another organization.
    form(
        r#"EXPLAIN ANALYZE INSERT INTO "ws"."mine" (id, body) SELECT id + 100, body FROM {t}"#,
        B::Fails(400),
    ),
    form(
        r#"EXPLAIN ANALYZE DELETE FROM "ws"."mine" WHERE id IN (SELECT id FROM {t})"#,
        B::Fails(400),
    ),
];

/// Statements that write A's own table (or create one) from B's table.
const WRITES: &[Form] = &[
    form(
        r#"INSERT INTO "ws"."mine" (id, body) SELECT id + {k}, body FROM {t}"#,
        B::Writes(2),
    ),
    form(
        r#"INSERT INTO "ws"."mine" (id, body) SELECT id + {k}, body FROM {t} RETURNING body"#,
        B::Shows(MARKER),
    ),
    form(
        r#"INSERT INTO "ws"."mine" (id, body) SELECT {k}, (SELECT body FROM {t} ORDER BY id LIMIT 1)"#,
        B::Writes(1),
    ),
    form(
        r#"INSERT INTO "ws"."mine" (id, body) VALUES ({k}, (SELECT body FROM {t} ORDER BY id LIMIT 1))"#,
        B::Writes(1),
    ),
    form(
        r#"INSERT INTO "ws"."mine" (id, body) VALUES ({k}, 'v') RETURNING (SELECT body FROM {t} ORDER BY id LIMIT 1)"#,
        B::Shows(MARKER),
    ),
    form(
        r#"INSERT INTO "ws"."mine" (id, body) VALUES (1, 'c') ON CONFLICT (id) DO UPDATE SET body = (SELECT body FROM {t} ORDER BY id LIMIT 1)"#,
        B::Writes(1),
    ),
    form(
        r#"INSERT INTO "ws"."mine" (id, body) SELECT id, body FROM {t} ON CONFLICT (id) DO NOTHING"#,
        B::Writes(0),
    ),
    form(
        r#"UPDATE "ws"."mine" AS m SET body = s.body FROM {t} AS s WHERE s.id = m.id"#,
        B::Writes(2),
    ),
    form(
        r#"UPDATE "ws"."mine" AS m SET body = s.body FROM {t} AS s WHERE s.id = m.id RETURNING m.id, m.body"#,
        B::Shows(MARKER),
    ),
    form(
        r#"UPDATE "ws"."mine" SET body = (SELECT body FROM {t} ORDER BY id LIMIT 1) WHERE id = 1"#,
        B::Writes(1),
    ),
    form(
        r#"UPDATE "ws"."mine" SET body = 'u' WHERE id IN (SELECT id FROM {t})"#,
        B::Writes(2),
    ),
    form(
        r#"UPDATE "ws"."mine" SET body = 'u' WHERE id = 1 RETURNING (SELECT body FROM {t} ORDER BY id LIMIT 1)"#,
        B::Shows(MARKER),
    ),
    form(
        r#"DELETE FROM "ws"."mine" AS m USING {t} AS s WHERE m.id > 1000 AND m.id % 1000 = s.id"#,
        B::Ok,
    ),
    form(
        r#"DELETE FROM "ws"."mine" WHERE id > 1000 AND id % 1000 IN (SELECT id FROM {t})"#,
        B::Ok,
    ),
    form(
        r#"DELETE FROM "ws"."mine" AS m WHERE m.id > 1000 AND EXISTS (SELECT 1 FROM {t} s WHERE s.id = m.id % 1000)"#,
        B::Ok,
    ),
    form(
        r#"DELETE FROM "ws"."mine" WHERE id = {k} RETURNING (SELECT body FROM {t} ORDER BY id LIMIT 1)"#,
        B::Ok,
    ),
    form(
        r#"CREATE TABLE "ws"."copy_{k}" AS SELECT * FROM {t}"#,
        B::Writes(2),
    ),
    form(
        r#"CREATE TABLE IF NOT EXISTS "ws"."copy_{k}" AS SELECT id, body FROM {t} WHERE id > 0"#,
        B::Writes(2),
    ),
    // A view's query resolves in the organization that creates it, as any statement's.
    form(r#"CREATE VIEW "ws"."view_{k}" AS SELECT * FROM {t}"#, B::Ok),
    form(
        r#"CREATE OR REPLACE VIEW "ws"."view_or_{k}" AS SELECT id, body FROM {t} WHERE id > 0"#,
        B::Ok,
    ),
    // (A column default reads no relation: a subquery in one is refused, PostgreSQL's
    // rule, before anything is resolved.)
];

/// Statements that would change B's table itself: A's must be 404 and change nothing
/// (B's own runs are not needed to show these forms work: B created the tables so).
const WRITES_TO_B: &[&str] = &[
    "INSERT INTO {t} (id, body) VALUES (99, 'from a')",
    r#"INSERT INTO {t} (id, body) SELECT id + 10, body FROM "ws"."mine""#,
    "INSERT INTO {t} (id, body) VALUES (1, 'from a') ON CONFLICT (id) DO UPDATE SET body = 'from a'",
    "UPDATE {t} SET body = 'from a'",
    "UPDATE {t} SET body = 'from a' WHERE id = 1",
    "UPDATE {t} SET body = 'from a' WHERE id = 1 RETURNING *",
    "DELETE FROM {t}",
    "DELETE FROM {t} WHERE id = 1",
    "DELETE FROM {t} WHERE id = 1 RETURNING *",
    "ALTER TABLE {t} ADD COLUMN a_col INT4",
    "ALTER TABLE {t} DROP COLUMN body",
    "ALTER TABLE {t} RENAME COLUMN body TO a_body",
    "ALTER TABLE {t} RENAME TO a_table",
    "CREATE INDEX a_idx ON {t} USING engine_index (e)",
    "DROP TABLE {t}",
    "VACUUM {t}",
];

/// Catalog listings and other statements that no organization may run (or that run the
/// same everywhere): A's answer must equal B's and name nothing of B's.
const LISTINGS: &[&str] = &[
    "SELECT * FROM information_schema.tables",
    "SELECT table_schema, table_name FROM information_schema.tables WHERE table_schema = 'other'",
    "SELECT * FROM information_schema.columns",
    "SELECT * FROM information_schema.schemata",
    "SELECT * FROM information_schema.views",
    "SELECT * FROM information_schema.df_settings",
    "SELECT * FROM information_schema.routines",
    "SELECT * FROM information_schema.parameters",
    r#"SELECT * FROM "tarn"."information_schema"."tables""#,
    "EXPLAIN SELECT * FROM information_schema.tables",
    "SELECT * FROM pg_catalog.pg_tables",
    "SELECT * FROM pg_catalog.pg_class",
    "SELECT * FROM pg_catalog.pg_namespace",
    "SELECT * FROM pg_tables",
    "SHOW TABLES",
    "SHOW TABLES FROM other",
    "SHOW TABLES IN ws",
    "SHOW FULL TABLES",
    "SHOW COLUMNS FROM other.secret",
    "SHOW COLUMNS FROM ws.secret",
    "SHOW COLUMNS FROM secret",
    "SHOW CREATE TABLE other.secret",
    "SHOW SCHEMAS",
    "SHOW DATABASES",
    "SHOW FUNCTIONS",
    "SHOW ALL",
    "SHOW search_path",
    "EXPLAIN SHOW TABLES",
    "DESCRIBE other.secret",
    r#"DESCRIBE "ws"."secret""#,
    "DESC other.secret",
    "TABLE other.secret",
    "TRUNCATE other.secret",
    "COPY other.secret TO STDOUT",
    "COPY (SELECT * FROM ws.secret) TO STDOUT",
    // Table functions: DataFusion's are `generate_series` and `range`; none lists
    // catalogs or tables, and a relation called like a function is no relation.
    "SELECT * FROM generate_series(1, 3)",
    "SELECT * FROM range(3)",
    "SELECT * FROM other.secret()",
    r#"SELECT * FROM "ws"."secret"(1)"#,
    "SELECT * FROM information_schema_tables()",
    "SELECT * FROM tables()",
    "SELECT * FROM show_tables()",
    "SELECT current_schema()",
    "SELECT current_database()",
    "SELECT current_catalog",
];

/// Alice's organization, Bob's and their sessions.
struct World {
    _tarn: Tarn,
    a: Session,
    b: Session,
}

async fn world() -> Result<World, tarn::Error> {
    let tarn = Tarn::in_memory().await?;
    let alice = tarn.create_user("alice@example.com", "Alice").await?;
    let key = tarn.create_api_key(&alice.id, "a").await?;
    let a = tarn.connect(&key.secret).await?;
    a.create_organization("org-a", "A").await?;
    let a = a.with_org("org-a");
    a.create_workspace("ws", "A's").await?;

    let bob = tarn.create_user("bob@example.com", "Bob").await?;
    let key = tarn.create_api_key(&bob.id, "b").await?;
    let b = tarn.connect(&key.secret).await?;
    b.create_organization("org-b", "Bob's").await?;
    let b = b.with_org("org-b");
    b.create_workspace("ws", "Bob's").await?;
    b.create_workspace("other", "Bob's other").await?;

    for (s, one, two) in [
        (&a, "alpha one", "alpha two"),
        (&b, "B-ONLY-MARKER mine one", "B-ONLY-MARKER mine two"),
    ] {
        s.query(
            "ws",
            r#"CREATE TABLE "ws"."mine" (id INT8 PRIMARY KEY, body TEXT, e FLOAT4[3]) USING engine"#,
            &[],
        )
        .await?;
        s.query(
            "ws",
            r#"CREATE INDEX mine_body ON "ws"."mine" USING engine_index (body) WITH (index_type = 'bm25')"#,
            &[],
        )
        .await?;
        s.query(
            "ws",
            r#"INSERT INTO "ws"."mine" (id, body, e) VALUES (1, $1, '{1,0,0}'), (2, $2, '{0,1,0}')"#,
            &[json!(one), json!(two)],
        )
        .await?;
    }
    for w in ["ws", "other"] {
        b.query(
            "ws",
            &format!(
                r#"CREATE TABLE "{w}"."secret" (id INT8 PRIMARY KEY, body TEXT, e FLOAT4[3], b_only_col TEXT) USING engine"#
            ),
            &[],
        )
        .await?;
        b.query(
            "ws",
            &format!(
                r#"CREATE INDEX b_hidden_idx ON "{w}"."secret" USING engine_index (body) WITH (index_type = 'bm25')"#
            ),
            &[],
        )
        .await?;
        b.query(
            "ws",
            &format!(
                r#"INSERT INTO "{w}"."secret" VALUES (1, '{MARKER} one', '{{1,0,0}}', '{MARKER} {w} c1'), (2, '{MARKER} two', '{{0,1,0}}', '{MARKER} {w} c2')"#
            ),
            &[],
        )
        .await?;
    }
    b.query(
        "other",
        r#"CREATE TABLE "other"."b_hidden_table" (x TEXT)"#,
        &[],
    )
    .await?;
    b.query(
        "other",
        &format!(r#"INSERT INTO "other"."b_hidden_table" VALUES ('{MARKER} hidden')"#),
        &[],
    )
    .await?;
    Ok(World { _tarn: tarn, a, b })
}

/// Every table of both organizations: details (columns, indexes, row count) and rows.
async fn snapshot(w: &World) -> Result<Value, tarn::Error> {
    let mut out = serde_json::Map::new();
    for (who, s, ws) in [("a", &w.a, "ws"), ("b", &w.b, "ws"), ("b", &w.b, "other")] {
        for t in s.tables(ws).await? {
            let details = s.table(ws, &t.name).await?;
            let rows = s
                .query(
                    ws,
                    &format!(r#"SELECT * FROM "{ws}"."{}" ORDER BY 1"#, t.name),
                    &[],
                )
                .await?
                .rows;
            out.insert(
                format!("{who}/{ws}/{}", t.name),
                json!({
                    "columns": details.columns.iter().map(|c| c.name.clone()).collect::<Vec<_>>(),
                    "indexes": details.indexes.len(),
                    "row_count": details.row_count,
                    "rows": rows,
                }),
            );
        }
    }
    Ok(Value::Object(out))
}

/// `form` with `{t}` = `target` and `{k}` = `k`.
fn expand(form: &str, target: &str, k: u64) -> String {
    form.replace("{t}", target).replace("{k}", &k.to_string())
}

/// The parameters a statement binds.
fn params_of(sql: &str) -> Vec<Value> {
    if sql.contains("$1") {
        vec![json!(1)]
    } else {
        vec![]
    }
}

/// A result as text, to compare answers and to search them.
fn outcome(r: &Result<QueryResult, tarn::Error>) -> String {
    match r {
        Ok(q) => format!(
            "ok columns={:?} rows={} affected={}",
            q.columns,
            serde_json::to_string(&q.rows).unwrap_or_default(),
            q.rows_affected
        ),
        Err(e) => format!("{} {} / {e} / {e:?}", e.status(), e.message()),
    }
}

/// Checks that A's answer to `sql` holds nothing of B's that `sql` did not name.
fn hides_b(sql: &str, r: &Result<QueryResult, tarn::Error>) -> TestResult {
    let text = outcome(r);
    for s in B_ONLY {
        if !sql.contains(s) && text.contains(s) {
            return Err(format!("A was told {s:?} by {sql}: {text}").into());
        }
    }
    Ok(())
}

/// Checks A's answer: `status` with the message `relation … does not exist` (exactly,
/// for a 404), and nothing of B's.
fn refused(
    sql: &str,
    r: &Result<QueryResult, tarn::Error>,
    status: u16,
    relation: &str,
) -> TestResult {
    hides_b(sql, r)?;
    let want = format!("relation {relation} does not exist");
    match r {
        Err(e)
            if e.status() == status
                && (e.message() == want || (status != 404 && e.message().ends_with(&want))) =>
        {
            Ok(())
        }
        other => Err(format!(
            "A: {sql}: expected {status} `{want}`, got {}",
            outcome(other)
        )
        .into()),
    }
}

/// Checks B's answer against `want`.
fn b_answer(sql: &str, r: &Result<QueryResult, tarn::Error>, want: B) -> TestResult {
    let fail = || Err(format!("B: {sql}: expected {want:?}, got {}", outcome(r)).into());
    match (want, r) {
        (B::Fails(status), Err(e)) if e.status() == status => Ok(()),
        (B::Ok, Ok(_)) => Ok(()),
        (B::Shows(s), Ok(q)) if serde_json::to_string(&q.rows)?.contains(s) => Ok(()),
        (B::Writes(n), Ok(q)) if q.rows_affected == n => Ok(()),
        _ => fail(),
    }
}

/// Runs `sql` in both organizations: the answers must be the same 4xx (or the same
/// rows, for statements that read nothing of either), and A's must hide B.
async fn same_answer(w: &World, sql: &str) -> TestResult {
    let params = params_of(sql);
    let ra = w.a.query("ws", sql, &params).await;
    hides_b(sql, &ra)?;
    let rb = w.b.query("ws", sql, &params).await;
    assert_eq!(outcome(&ra), outcome(&rb), "{sql}");
    if let Err(e) = &ra {
        assert!((400..500).contains(&e.status()), "{sql}: {}", outcome(&ra));
    }
    Ok(())
}

#[tokio::test]
async fn reads_of_another_organization_are_not_found() -> TestResult {
    let w = world().await?;
    let before = snapshot(&w).await?;
    let mut k = 0;
    for f in READS {
        for (target, relation) in TARGETS {
            k += 1000;
            let sql = expand(f.sql, target, k);
            let params = params_of(&sql);
            // B first: B's parameterized statements are then in the parse cache, which
            // must keep them per organization.
            let rb = w.b.query("ws", &sql, &params).await;
            b_answer(&sql, &rb, f.b)?;
            let ra = w.a.query("ws", &sql, &params).await;
            refused(&sql, &ra, f.a_status, relation)?;
        }
        for target in UNRESOLVED {
            k += 1000;
            same_answer(&w, &expand(f.sql, target, k)).await?;
        }
    }
    assert_eq!(snapshot(&w).await?, before, "reads changed nothing");
    Ok(())
}

#[tokio::test]
async fn writes_from_another_organization_are_not_found_and_change_nothing() -> TestResult {
    let w = world().await?;
    let mut k = 0;
    for f in WRITES {
        for (target, relation) in TARGETS {
            k += 1000;
            let sql = expand(f.sql, target, k);
            let before = snapshot(&w).await?;
            let ra = w.a.query("ws", &sql, &[]).await;
            refused(&sql, &ra, f.a_status, relation)?;
            assert_eq!(snapshot(&w).await?, before, "A's {sql} changed something");
            let rb = w.b.query("ws", &sql, &[]).await;
            b_answer(&sql, &rb, f.b)?;
        }
        for target in UNRESOLVED {
            k += 1000;
            let before = snapshot(&w).await?;
            same_answer(&w, &expand(f.sql, target, k)).await?;
            assert_eq!(snapshot(&w).await?, before);
        }
    }
    // A's table holds A's rows only, and A has made no table.
    assert_eq!(
        w.a.query("ws", r#"SELECT id, body FROM "ws"."mine" ORDER BY id"#, &[])
            .await?
            .rows,
        Some(vec![
            vec![json!(1), json!("alpha one")],
            vec![json!(2), json!("alpha two")]
        ])
    );
    let names: Vec<String> =
        w.a.tables("ws")
            .await?
            .into_iter()
            .map(|t| t.name)
            .collect();
    assert_eq!(names, vec!["mine".to_string()]);
    Ok(())
}

#[tokio::test]
async fn another_organizations_tables_cannot_be_changed() -> TestResult {
    let w = world().await?;
    let before = snapshot(&w).await?;
    for (target, relation) in TARGETS {
        for f in WRITES_TO_B {
            let sql = expand(f, target, 0);
            let ra = w.a.query("ws", &sql, &[]).await;
            refused(&sql, &ra, 404, relation)?;
            // Batches go through the same checks.
            let batch = w.a.query_batch("ws", &sql, &[vec![]]).await;
            match batch {
                Err(e) if e.status() == 404 => {
                    assert_eq!(
                        e.message(),
                        format!("parameter set 0: relation {relation} does not exist"),
                        "{sql}"
                    );
                }
                // Statements a batch does not take (VACUUM) are refused before any
                // relation is looked at.
                Err(e) if e.status() == 400 && sql.starts_with("VACUUM") => {}
                other => return Err(format!("batch {sql}: {other:?}").into()),
            }
        }
        // IF EXISTS: nothing to drop in A's organization, and B's table stays.
        let sql = format!("DROP TABLE IF EXISTS {target}");
        let ra = w.a.query("ws", &sql, &[]).await;
        hides_b(&sql, &ra)?;
        assert_eq!(ra?.rows_affected, 0);
        assert_eq!(snapshot(&w).await?, before, "{target}");
    }
    // B's index, by every name A might give it.
    for sql in [
        "DROP INDEX b_hidden_idx",
        r#"DROP INDEX "ws"."b_hidden_idx""#,
        r#"DROP INDEX "other"."b_hidden_idx""#,
        "DROP INDEX other.b_hidden_idx",
    ] {
        let ra = w.a.query("ws", sql, &[]).await;
        hides_b(sql, &ra)?;
        assert_eq!(
            ra.as_ref().map_err(|e| e.status()).err(),
            Some(404),
            "{sql}"
        );
    }
    for sql in [
        "DROP INDEX IF EXISTS b_hidden_idx",
        r#"DROP INDEX IF EXISTS "other"."b_hidden_idx""#,
    ] {
        let ra = w.a.query("ws", sql, &[]).await;
        hides_b(sql, &ra)?;
    }
    // A table in B's workspace `other`, which A does not have.
    let sql = r#"CREATE TABLE "other"."from_a" (x INT4)"#;
    let ra = w.a.query("ws", sql, &[]).await;
    hides_b(sql, &ra)?;
    assert_eq!(
        ra.as_ref().map_err(|e| e.status()).err(),
        Some(404),
        "{sql}"
    );
    assert_eq!(snapshot(&w).await?, before);
    Ok(())
}

#[tokio::test]
async fn catalog_listings_are_off_in_every_organization() -> TestResult {
    let w = world().await?;
    let before = snapshot(&w).await?;
    for sql in LISTINGS {
        same_answer(&w, sql).await?;
    }
    // The table functions do run, and the same everywhere.
    let r =
        w.a.query("ws", "SELECT * FROM generate_series(1, 3)", &[])
            .await?;
    assert_eq!(
        r.rows,
        Some(vec![vec![json!(1)], vec![json!(2)], vec![json!(3)]])
    );
    // What B may list through the API names only B's; A's listing names only A's.
    let b_tables: Vec<String> =
        w.b.tables("other")
            .await?
            .into_iter()
            .map(|t| t.name)
            .collect();
    assert_eq!(b_tables, vec!["b_hidden_table", "secret"]);
    let a_workspaces = serde_json::to_string(&w.a.workspaces().await?)?;
    assert!(!a_workspaces.contains("other"), "{a_workspaces}");
    for r in [
        w.a.tables("other").await.map(|_| ()),
        w.a.table("other", "secret").await.map(|_| ()),
        w.a.table("ws", "secret").await.map(|_| ()),
        w.a.query("other", "SELECT 1", &[]).await.map(|_| ()),
        w.a.query("other", "SELECT * FROM other.secret", &[])
            .await
            .map(|_| ()),
    ] {
        let e = r.err().ok_or("A reached B's workspace")?;
        assert_eq!(e.status(), 404, "{e:?}");
        hides_b("other secret", &Err(e))?;
    }
    assert_eq!(snapshot(&w).await?, before);
    Ok(())
}

#[tokio::test]
async fn the_same_names_in_two_organizations_are_two_tables() -> TestResult {
    let w = world().await?;
    // Both organizations have `ws`.`mine`: each sees its own, whatever the form.
    for sql in [
        r#"SELECT * FROM "ws"."mine""#,
        "SELECT * FROM ws.mine WHERE id = 1",
        "SELECT * FROM ws.mine WHERE id = $1",
        "SELECT body FROM ws.mine ORDER BY body <#> 'one' DESC LIMIT 5",
        "SELECT id, body FROM ws.mine ORDER BY e <#> '{1,0,0}' DESC LIMIT 5",
        "SELECT (SELECT max(body) FROM ws.mine) AS m",
        "WITH c AS (SELECT * FROM ws.mine) SELECT * FROM c",
        "EXPLAIN ANALYZE SELECT * FROM ws.mine",
    ] {
        let params = params_of(sql);
        let rb = w.b.query("ws", sql, &params).await;
        let ra = w.a.query("ws", sql, &params).await;
        hides_b(sql, &ra)?;
        let a_rows = serde_json::to_string(&ra?.rows)?;
        if !sql.starts_with("EXPLAIN") {
            assert!(
                a_rows.contains("alpha") || a_rows.contains('1'),
                "{sql}: {a_rows}"
            );
            assert!(serde_json::to_string(&rb?.rows)?.contains(MARKER), "{sql}");
        }
    }
    let before = snapshot(&w).await?;
    // A's names never collide with B's: no 409 tells A that B has `ws`.`secret` or an
    // index `b_hidden_idx`, and what A creates and drops under those names is A's.
    let sql = r#"DROP TABLE IF EXISTS "ws"."secret""#;
    assert_eq!(w.a.query("ws", sql, &[]).await?.rows_affected, 0);
    assert_eq!(snapshot(&w).await?, before);
    w.a.query(
        "ws",
        r#"CREATE TABLE IF NOT EXISTS "ws"."secret" (id INT8 PRIMARY KEY, body TEXT) USING engine"#,
        &[],
    )
    .await?;
    w.a.query(
        "ws",
        r#"INSERT INTO "ws"."secret" VALUES (1, 'a secret')"#,
        &[],
    )
    .await?;
    assert_eq!(
        w.a.query("ws", r#"SELECT * FROM "ws"."secret""#, &[])
            .await?
            .rows,
        Some(vec![vec![json!(1), json!("a secret")]])
    );
    w.a.query(
        "ws",
        r#"CREATE INDEX b_hidden_idx ON "ws"."secret" USING engine_index (body) WITH (index_type = 'bm25')"#,
        &[],
    )
    .await?;
    let plan =
        w.a.query(
            "ws",
            r#"EXPLAIN SELECT body FROM "ws"."secret" ORDER BY body <#> 'one' DESC LIMIT 3"#,
            &[],
        )
        .await?;
    assert!(!serde_json::to_string(&plan.rows)?.contains("b_only_col"));
    // A's `ws`.`secret` has A's columns, not B's.
    let err =
        w.a.query("ws", r#"SELECT b_only_col FROM "ws"."secret""#, &[])
            .await
            .err()
            .ok_or("A's table has B's column")?;
    assert!(err.message().contains("b_only_col"), "{err:?}");
    assert!(!err.message().contains(MARKER), "{err:?}");
    w.a.query("ws", "DROP INDEX b_hidden_idx", &[]).await?;
    w.a.query("ws", r#"DROP TABLE "ws"."secret""#, &[]).await?;
    // B's table and index are untouched by all of it.
    assert_eq!(snapshot(&w).await?, before);
    let b_plan =
        w.b.query(
            "ws",
            r#"EXPLAIN SELECT body FROM "ws"."secret" ORDER BY body <#> 'one' DESC LIMIT 3"#,
            &[],
        )
        .await?;
    assert!(serde_json::to_string(&b_plan.rows)?.contains("b_hidden_idx"));
    // A view of A's, made before B had a table of the name it reads (or of its own
    // name), reads A's table only: before B's exist, beside them, and once A's table is
    // gone (then the view is gone with it, never pointed at B's).
    w.a.query(
        "ws",
        r#"CREATE TABLE "ws"."late" (id INT8, body TEXT) USING engine"#,
        &[],
    )
    .await?;
    w.a.query(
        "ws",
        r#"INSERT INTO "ws"."late" VALUES (7, 'alpha late')"#,
        &[],
    )
    .await?;
    w.a.query(
        "ws",
        r#"CREATE VIEW "ws"."late_v" AS SELECT body FROM "ws"."late""#,
        &[],
    )
    .await?;
    for sql in [
        r#"CREATE TABLE "ws"."late" (id INT8, body TEXT) USING engine"#,
        r#"CREATE TABLE "ws"."late_v" (body TEXT) USING engine"#,
    ] {
        w.b.query("ws", sql, &[]).await?;
    }
    for t in ["late", "late_v"] {
        let sql = format!(r#"INSERT INTO "ws"."{t}" (body) VALUES ('{MARKER}')"#);
        w.b.query("ws", &sql, &[]).await?;
    }
    let sql = r#"SELECT body FROM "ws"."late_v""#;
    let ra = w.a.query("ws", sql, &[]).await;
    hides_b(sql, &ra)?;
    assert_eq!(ra?.rows, Some(vec![vec![json!("alpha late")]]));
    let rb = w.b.query("ws", sql, &[]).await?;
    assert_eq!(rb.rows, Some(vec![vec![json!(MARKER)]]));
    w.a.query("ws", r#"DROP TABLE "ws"."late" CASCADE"#, &[])
        .await?;
    let ra = w.a.query("ws", sql, &[]).await;
    hides_b(sql, &ra)?;
    assert_eq!(ra.err().map(|e| e.status()), Some(404));
    assert_eq!(
        w.b.query("ws", sql, &[]).await?.rows,
        Some(vec![vec![json!(MARKER)]])
    );
    Ok(())
}

#[tokio::test]
async fn arrow_and_batches_see_the_same_boundary() -> TestResult {
    let w = world().await?;
    let before = snapshot(&w).await?;
    for (target, relation) in TARGETS {
        let sql = format!("SELECT * FROM {target}");
        let e =
            w.a.query_arrow("ws", &sql, &[])
                .await
                .err()
                .ok_or("query_arrow read B's table")?;
        assert_eq!(
            (e.status(), e.message()),
            (404, format!("relation {relation} does not exist").as_str())
        );
        let sql =
            format!(r#"INSERT INTO "ws"."mine" (id, body) SELECT id + $1, body FROM {target}"#);
        let e =
            w.a.query_batch("ws", &sql, &[vec![json!(100)], vec![json!(200)]])
                .await
                .err()
                .ok_or("a batch read B's table")?;
        assert_eq!(
            (e.status(), e.message()),
            (
                404,
                format!("parameter set 0: relation {relation} does not exist").as_str()
            )
        );
        assert_eq!(snapshot(&w).await?, before);
    }
    // The same batch is fine in B's organization.
    let r =
        w.b.query_batch(
            "ws",
            r#"INSERT INTO "ws"."mine" (id, body) SELECT id + $1, body FROM "other"."secret""#,
            &[vec![json!(100)], vec![json!(200)]],
        )
        .await?;
    assert_eq!((r.statements, r.rows_affected), (2, 4));
    Ok(())
}
