//! Correlated subqueries against a reference: a seeded generator writes a few hundred
//! queries with correlated subqueries of every shape (scalar, EXISTS, IN, nested two
//! levels), correlation predicates of every kind (equalities, inequalities, expressions
//! of outer columns, several outer columns, OR) and every place (SELECT list, WHERE,
//! CASE branches, HAVING, ORDER BY, aggregate arguments), runs each on Tarn and on
//! SQLite over the same small tables with NULLs and duplicates, and compares the rows.
//!
//! Rules that keep the two engines comparable: integers only (SQLite has no int4 and
//! divides differently); booleans compared as 0/1; rows compared as sorted multisets
//! unless the query orders them totally; scalar subqueries are aggregated or `LIMIT 1`
//! under a total order with NULLS LAST spelled out (SQLite returns the first of several
//! rows where PostgreSQL fails, and sorts NULLs first by default).

use serde_json::Value;

/// Deterministic generator (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

const OUTER: &[&str] = &["t1.a", "t1.b", "t1.c", "t1.e"];
const INNER: &[&str] = &["s.x", "s.y", "s.z"];
const OPS: &[&str] = &["=", "<", ">", "<=", ">=", "<>"];

/// One atom of a correlation predicate between `s` (the inner t2) and `t1`.
fn atom(r: &mut Rng) -> String {
    let i = r.pick(INNER);
    let o = r.pick(OUTER);
    let op = r.pick(OPS);
    match r.below(6) {
        0 | 1 => format!("{i} {op} {o}"),
        2 => format!("{i} {op} {o} + {}", r.below(5)),
        3 => format!("{i} + {o} {op} {}", r.below(40)),
        4 => format!("{i} {op} {}", r.below(30)),
        _ => format!("{i} {op} {o} - {}", r.pick(OUTER)),
    }
}

/// A correlation predicate: one or two atoms joined by AND or OR.
fn predicate(r: &mut Rng) -> String {
    let first = atom(r);
    if r.chance(40) {
        let joiner = if r.chance(70) { "AND" } else { "OR" };
        format!("({first} {joiner} {})", atom(r))
    } else {
        first
    }
}

/// A second-level subquery inside the first, using both `s` and the outermost `t1`.
fn nested(r: &mut Rng) -> String {
    let op = r.pick(&["<", ">", "=", "<>"]);
    let o = r.pick(OUTER);
    if r.chance(50) {
        format!("EXISTS (SELECT 1 FROM {{t1}} u WHERE u.a = s.x AND u.b {op} {o})")
    } else {
        format!("s.y {op} (SELECT max(u.c) FROM {{t1}} u WHERE u.a = s.x OR u.e > {o})")
    }
}

/// The WHERE clause of a subquery over `{t2} s`.
fn inner_where(r: &mut Rng) -> String {
    let mut p = predicate(r);
    if r.chance(15) {
        p = format!("{p} AND {}", nested(r));
    }
    p
}

/// A scalar subquery (aggregated, or ordered totally under LIMIT 1).
fn scalar(r: &mut Rng) -> String {
    let w = inner_where(r);
    match r.below(9) {
        0 => format!("(SELECT count(*) FROM {{t2}} s WHERE {w})"),
        1 => format!("(SELECT count(s.y) FROM {{t2}} s WHERE {w})"),
        2 => format!("(SELECT sum(s.y) FROM {{t2}} s WHERE {w})"),
        3 => format!("(SELECT min(s.x) FROM {{t2}} s WHERE {w})"),
        4 => format!("(SELECT max(s.z) FROM {{t2}} s WHERE {w})"),
        5 => format!("(SELECT count(*) + 1 FROM {{t2}} s WHERE {w})"),
        6 => format!("(SELECT coalesce(max(s.y), -1) FROM {{t2}} s WHERE {w})"),
        7 => format!(
            "(SELECT s.y FROM {{t2}} s WHERE {w} ORDER BY s.y NULLS LAST, s.x NULLS LAST, s.z NULLS LAST LIMIT 1)"
        ),
        _ => format!(
            "(SELECT count(*) FROM {{t2}} s WHERE {w} GROUP BY s.x ORDER BY 1 DESC LIMIT 1)"
        ),
    }
}

/// A boolean subquery expression.
fn boolean(r: &mut Rng) -> String {
    let w = inner_where(r);
    match r.below(6) {
        0 => format!("EXISTS (SELECT 1 FROM {{t2}} s WHERE {w})"),
        1 => format!("NOT EXISTS (SELECT 1 FROM {{t2}} s WHERE {w})"),
        2 => format!("{} IN (SELECT s.y FROM {{t2}} s WHERE {w})", r.pick(OUTER)),
        3 => format!(
            "{} NOT IN (SELECT s.x FROM {{t2}} s WHERE {w})",
            r.pick(OUTER)
        ),
        4 => format!("{} > {}", r.pick(OUTER), scalar(r)),
        _ => format!("{} = {}", scalar(r), r.pick(&["0", "1", "2", "t1.a"])),
    }
}

/// A query and whether its ORDER BY fixes the row order.
fn query(r: &mut Rng) -> (String, bool) {
    match r.below(10) {
        0 | 1 => (format!("SELECT t1.d, {} FROM {{t1}} t1", scalar(r)), false),
        2 | 3 => (
            format!("SELECT t1.d FROM {{t1}} t1 WHERE {}", boolean(r)),
            false,
        ),
        4 => (
            format!(
                "SELECT t1.d FROM {{t1}} t1 WHERE {} {} t1.{} > 3",
                boolean(r),
                r.pick(&["OR", "AND"]),
                r.pick(&["a", "b", "e"])
            ),
            false,
        ),
        5 => (
            format!(
                "SELECT t1.d, CASE WHEN t1.a > 2 THEN {} ELSE -1 END FROM {{t1}} t1",
                scalar(r)
            ),
            false,
        ),
        6 => (
            format!(
                "SELECT t1.d, CASE WHEN {} THEN 1 ELSE 0 END FROM {{t1}} t1",
                boolean(r)
            ),
            false,
        ),
        7 => {
            // HAVING: correlated on the group column only.
            let op = r.pick(&["<", ">", "=", "<>", "<=", ">="]);
            let agg = r.pick(&["count(*)", "max(s.y)", "min(s.z)"]);
            (
                format!(
                    "SELECT t1.a, count(*) FROM {{t1}} t1 GROUP BY t1.a HAVING count(*) <= (SELECT {agg} FROM {{t2}} s WHERE s.x {op} t1.a)"
                ),
                false,
            )
        }
        8 => (
            format!(
                "SELECT t1.d FROM {{t1}} t1 ORDER BY {} NULLS LAST, t1.d",
                scalar(r)
            ),
            true,
        ),
        _ => {
            let agg = r.pick(&["sum", "max", "count"]);
            if r.chance(50) {
                (format!("SELECT {agg}({}) FROM {{t1}} t1", scalar(r)), false)
            } else {
                (
                    format!(
                        "SELECT t1.a, {agg}({}) FROM {{t1}} t1 GROUP BY t1.a",
                        scalar(r)
                    ),
                    false,
                )
            }
        }
    }
}

const T1: &[[Option<i64>; 5]] = &[
    [Some(1), Some(10), Some(100), Some(1), Some(5)],
    [Some(2), Some(20), Some(200), Some(2), None],
    [Some(2), Some(25), None, Some(3), Some(7)],
    [Some(3), None, Some(300), Some(4), Some(3)],
    [Some(4), Some(40), Some(400), Some(5), Some(4)],
    [Some(5), Some(50), Some(500), Some(6), Some(9)],
    [None, Some(60), Some(600), Some(7), Some(1)],
    [None, None, None, Some(8), None],
    [Some(6), Some(10), Some(100), Some(9), Some(6)],
    [Some(8), Some(80), Some(800), Some(10), Some(2)],
    [Some(2), Some(20), Some(250), Some(11), Some(0)],
];

const T2: &[[Option<i64>; 3]] = &[
    [Some(1), Some(10), Some(3)],
    [Some(1), Some(11), Some(4)],
    [Some(2), Some(20), Some(5)],
    [Some(2), Some(20), Some(5)],
    [Some(3), None, Some(7)],
    [None, Some(30), Some(1)],
    [Some(4), Some(40), None],
    [Some(8), Some(80), Some(2)],
    [None, None, None],
    [Some(9), Some(5), Some(6)],
    [Some(5), Some(25), Some(0)],
];

fn values<const N: usize>(rows: &[[Option<i64>; N]]) -> String {
    rows.iter()
        .map(|r| {
            let cells: Vec<String> = r
                .iter()
                .map(|c| c.map_or("NULL".to_string(), |v| v.to_string()))
                .collect();
            format!("({})", cells.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

type Rows = Vec<Vec<Option<i64>>>;

fn tarn_rows(rows: Vec<Vec<Value>>) -> Result<Rows, String> {
    rows.into_iter()
        .map(|row| {
            row.into_iter()
                .map(|v| match v {
                    Value::Null => Ok(None),
                    Value::Bool(b) => Ok(Some(i64::from(b))),
                    Value::Number(n) => n
                        .as_i64()
                        .map(Some)
                        .ok_or_else(|| format!("not an integer: {n}")),
                    other => Err(format!("unexpected value {other}")),
                })
                .collect()
        })
        .collect()
}

fn sqlite_rows(db: &rusqlite::Connection, sql: &str) -> rusqlite::Result<Rows> {
    let mut stmt = db.prepare(sql)?;
    let n = stmt.column_count();
    let rows = stmt.query_map([], |row| {
        (0..n)
            .map(|i| row.get::<_, Option<i64>>(i))
            .collect::<rusqlite::Result<Vec<_>>>()
    })?;
    rows.collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn correlated_subqueries_agree_with_sqlite() {
    let tarn = tarn::Tarn::in_memory().await.expect("database");
    let s = tarn_tests::fixture(&tarn).await.expect("fixture");
    let db = rusqlite::Connection::open_in_memory().expect("sqlite");
    let ddl = [
        ("t1", "a INT4, b INT4, c INT4, d INT4, e INT4", values(T1)),
        ("t2", "x INT4, y INT4, z INT4", values(T2)),
    ];
    for (name, cols, rows) in &ddl {
        s.query(
            "ws",
            &format!(r#"CREATE TABLE "ws"."{name}" ({cols}) USING engine"#),
            &[],
        )
        .await
        .expect("create");
        s.query(
            "ws",
            &format!(r#"INSERT INTO "ws"."{name}" VALUES {rows}"#),
            &[],
        )
        .await
        .expect("insert");
        db.execute_batch(&format!(
            "CREATE TABLE {name} ({}); INSERT INTO {name} VALUES {rows};",
            cols.replace("INT4", "INTEGER")
        ))
        .expect("sqlite tables");
    }

    let cases: usize = std::env::var("TARN_DIFFERENTIAL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let seed = std::env::var("TARN_DIFFERENTIAL_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5EED_2026);
    let mut r = Rng(seed);
    let mut failures = Vec::new();
    let mut compared = 0;
    for _ in 0..cases {
        let (sql, ordered) = query(&mut r);
        let lite = sql.replace("{t1}", "t1").replace("{t2}", "t2");
        let ours = sql
            .replace("{t1}", r#""ws"."t1""#)
            .replace("{t2}", r#""ws"."t2""#);
        let Ok(mut expected) = sqlite_rows(&db, &lite) else {
            continue;
        };
        let got = match s.query("ws", &ours, &[]).await {
            Ok(res) => tarn_rows(res.rows.unwrap_or_default()),
            Err(e) => Err(format!("{} {:?}: {e}", e.status(), e.kind())),
        };
        compared += 1;
        match got {
            Ok(mut got) => {
                if !ordered {
                    got.sort();
                    expected.sort();
                }
                if got != expected {
                    failures.push(format!("{ours}\n  tarn:   {got:?}\n  sqlite: {expected:?}"));
                }
            }
            Err(e) => failures.push(format!("{ours}\n  tarn failed: {e}")),
        }
    }
    assert!(
        compared >= cases * 9 / 10,
        "only {compared} of {cases} ran on SQLite"
    );
    assert!(
        failures.is_empty(),
        "{} of {compared} queries differ from SQLite:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The common shapes plan as joins: `EXPLAIN` shows no subquery expression and no outer
/// reference left for a per-row loop, in the logical or the physical plan.
#[tokio::test]
async fn explain_shows_joins_not_loops() {
    let tarn = tarn::Tarn::in_memory().await.expect("database");
    let s = tarn_tests::fixture(&tarn).await.expect("fixture");
    for t in ["t1", "t2"] {
        s.query(
            "ws",
            &format!(r#"CREATE TABLE "ws"."{t}" (a INT4, b INT4, c INT4) USING engine"#),
            &[],
        )
        .await
        .expect("create");
    }
    let shapes = [
        r#"SELECT (SELECT count(*) FROM "ws"."t2" x WHERE x.b < t1.b), a FROM "ws"."t1" t1"#,
        r#"SELECT a FROM "ws"."t1" t1 WHERE b > (SELECT avg(x.b) FROM "ws"."t2" x WHERE x.c = t1.c)"#,
        r#"SELECT a FROM "ws"."t1" t1 WHERE EXISTS (SELECT 1 FROM "ws"."t2" x WHERE x.a = t1.a AND x.b > t1.b)"#,
        r#"SELECT a, b NOT IN (SELECT x.b FROM "ws"."t2" x WHERE x.c <> t1.c) FROM "ws"."t1" t1"#,
        r#"SELECT a FROM "ws"."t1" t1 WHERE b > ALL (SELECT x.b FROM "ws"."t2" x WHERE x.a < t1.a)"#,
        r#"SELECT a, (SELECT x.b FROM "ws"."t2" x WHERE x.c > t1.c ORDER BY x.c LIMIT 1) FROM "ws"."t1" t1"#,
        r#"SELECT a, (SELECT count(*) FROM "ws"."t2" x WHERE x.a = t1.a AND EXISTS (SELECT 1 FROM "ws"."t1" y WHERE y.b = x.b AND y.c < t1.c)) FROM "ws"."t1" t1"#,
    ];
    for sql in shapes {
        let r = s
            .query("ws", &format!("EXPLAIN {sql}"), &[])
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let text: String = r
            .rows
            .unwrap_or_default()
            .iter()
            .flatten()
            .filter_map(|v| v.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        assert!(text.contains("Join"), "{sql}\n{text}");
        for loop_sign in [
            "Subquery:",
            "<subquery>",
            "OuterReferenceColumn",
            "outer_ref(",
        ] {
            assert!(!text.contains(loop_sign), "{sql}: {loop_sign} in\n{text}");
        }
    }
}
