//! `sql_differential`: generated programs of CREATE/INSERT/UPDATE/DELETE/SELECT run on
//! Tarn and on SQLite (bundled, through rusqlite), compared statement by statement.
//!
//! The fuzzer's bytes drive a typed generator ([`arbitrary::Unstructured`]), so every
//! statement is well-typed SQL of the subset both engines define the same way:
//!
//! - **Types.** Tables have 1–4 columns of `INT8`/`INTEGER`, `FLOAT8`/`REAL` and `TEXT`,
//!   optionally an integer `PRIMARY KEY` first. Booleans exist only as predicates.
//! - **Values.** Integers in [-1000, 1000]; floats are multiples of 1/4 in [-100, 100]
//!   (exact in binary, so sums are exact in both engines); text is up to three
//!   lowercase letters of `abc` (SQLite's `LIKE` ignores ASCII case; no `upper`).
//! - **Expressions.** `+ - *` (products at most three deep, so int8 never overflows:
//!   SQLite would turn an overflow into a float where Tarn fails), `/` and `%` only by
//!   a non-zero literal (SQLite answers NULL for division by zero, PostgreSQL and Tarn
//!   fail), `abs`, `length`, `lower`, `substr`, `||`, `coalesce`, `nullif`, `CASE`,
//!   comparisons, `AND`/`OR`/`NOT`, `IS [NOT] NULL`, `BETWEEN`, `IN (list)`, `LIKE`,
//!   `IN (SELECT …)`, `EXISTS`, scalar subqueries of an aggregate. Float literals are
//!   `CAST(x AS FLOAT8)` on Tarn (PostgreSQL reads `1.5` as numeric). Nothing is cast
//!   to text (the engines format floats differently). `UPDATE` never changes a key
//!   (SQLite checks uniqueness row by row, PostgreSQL and Tarn per statement).
//! - **Queries.** Projections with `DISTINCT`, `WHERE`, `GROUP BY` with `count`,
//!   `sum`, `min`, `max`, `avg` and `HAVING`, inner and left joins on an equality,
//!   `UNION [ALL]`, `EXCEPT`, `INTERSECT`, and `ORDER BY` every output column with
//!   `NULLS FIRST|LAST` spelled out (the engines' defaults differ) with `LIMIT`/`OFFSET`.
//!
//! - **Compaction.** `VACUUM` on Tarn (`VACUUM` on SQLite too, where it changes nothing)
//!   seals a table into segments, so answers are compared across the memtable, segments,
//!   statistics and deletion bitmaps.
//!
//! **Comparison.** A statement must succeed on both engines or fail on both (Tarn's
//! failure must then be a 400/404/409; a 500 is always a bug). Writes must report the
//! same number of rows. Query results are compared as multisets of rows, or as
//! sequences when the query orders every output column. Values are normalized: NULL;
//! numbers (Tarn's booleans as 0/1, integers and floats alike) equal within a relative
//! 1e-9 (SQLite's `sum` compensates rounding, DataFusion's does not), sorted by 9
//! significant digits with -0 as 0; text as it is. A program stops once a numeric
//! column holds a value beyond 10^6: past that, SQLite turns an int8 overflow into a
//! float and a float overflow into infinity where Tarn fails, as PostgreSQL does.

use arbitrary::Unstructured;
use rusqlite::types::ValueRef;
use serde_json::Value;
use tarn::{ErrorKind, Session, Tarn};

mod ast;
mod generate;

use ast::*;
pub use generate::Program;

/// Runs raw fuzzer bytes as a program.
pub fn run_bytes(data: &[u8]) {
    let mut u = Unstructured::new(data);
    if let Ok(p) = Program::generate(&mut u) {
        crate::watched(|| run(&p));
    }
}

/// A value as compared: Tarn's booleans count as 0/1 numbers, integers and floats alike.
#[derive(Debug, Clone)]
enum Val {
    Null,
    Num(f64),
    Text(String),
    Other(String),
}

impl Val {
    fn from_json(v: &Value) -> Val {
        match v {
            Value::Null => Val::Null,
            Value::Bool(b) => Val::Num(if *b { 1.0 } else { 0.0 }),
            Value::Number(n) => Val::Num(n.as_f64().unwrap_or(f64::NAN)),
            Value::String(s) => Val::Text(s.clone()),
            other => Val::Other(other.to_string()),
        }
    }

    fn from_sqlite(v: ValueRef<'_>) -> Val {
        match v {
            ValueRef::Null => Val::Null,
            ValueRef::Integer(i) => Val::Num(i as f64),
            ValueRef::Real(f) => Val::Num(f),
            ValueRef::Text(t) => Val::Text(String::from_utf8_lossy(t).into_owned()),
            ValueRef::Blob(b) => Val::Other(format!("{b:?}")),
        }
    }

    /// The sort key of multiset comparison: numbers to 9 significant digits, -0 as 0.
    fn key(&self) -> String {
        match self {
            Val::Null => "N".into(),
            Val::Num(f) => format!("#{:.8e}", if *f == 0.0 { 0.0 } else { *f }),
            Val::Text(s) => format!("'{s}"),
            Val::Other(s) => format!("?{s}"),
        }
    }

    /// Equality: numbers within a relative 1e-9 (the engines sum floats in different
    /// orders, and SQLite's `sum` compensates its rounding).
    fn same(&self, other: &Val) -> bool {
        match (self, other) {
            (Val::Null, Val::Null) => true,
            (Val::Num(a), Val::Num(b)) => {
                a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
            }
            (Val::Text(a), Val::Text(b)) | (Val::Other(a), Val::Other(b)) => a == b,
            _ => false,
        }
    }
}

/// What one engine made of a statement.
#[derive(Debug)]
#[allow(dead_code)] // the error text is shown in disagreement reports (Debug)
enum Outcome {
    Rows(Vec<Vec<Val>>),
    Changed(u64),
    Failed(String),
}

fn sqlite_run(conn: &rusqlite::Connection, sql: &str, query: bool) -> Outcome {
    if !query {
        return match conn.execute(sql, []) {
            Ok(n) => Outcome::Changed(n as u64),
            Err(e) => Outcome::Failed(e.to_string()),
        };
    }
    let mut stmt = match conn.prepare(sql) {
        Ok(s) => s,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let n = stmt.column_count();
    let rows = stmt.query_map([], |row| {
        (0..n)
            .map(|i| row.get_ref(i).map(Val::from_sqlite))
            .collect::<rusqlite::Result<Vec<Val>>>()
    });
    match rows.and_then(|r| r.collect::<rusqlite::Result<Vec<_>>>()) {
        Ok(rows) => Outcome::Rows(rows),
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

async fn tarn_run(s: &Session, sql: &str, query: bool) -> Outcome {
    match s.query("ws", sql, &[]).await {
        Ok(r) if query => Outcome::Rows(
            r.rows
                .unwrap_or_default()
                .iter()
                .map(|row| row.iter().map(Val::from_json).collect())
                .collect(),
        ),
        Ok(r) => Outcome::Changed(r.rows_affected),
        Err(e) => {
            assert!(
                matches!(
                    e.kind(),
                    ErrorKind::BadRequest | ErrorKind::NotFound | ErrorKind::Conflict
                ),
                "Tarn failed with {} on {sql}: {e}",
                e.status()
            );
            Outcome::Failed(e.to_string())
        }
    }
}

/// Runs a program on both engines; panics at the first disagreement, printing the
/// program up to it for both engines.
pub fn run(p: &Program) {
    let conn = rusqlite::Connection::open_in_memory().expect("SQLite in memory");
    crate::runtime().block_on(async {
        let s = session().await;
        // A fresh workspace (a failed input may have left the last one).
        let _ = s.delete_workspace("ws").await;
        s.create_workspace("ws", "W").await.expect("workspace");
        for (i, stmt) in p.stmts.iter().enumerate() {
            let query = matches!(stmt, Stmt::Select(_));
            let (ts, ls) = (stmt.sql(Dialect::Tarn), stmt.sql(Dialect::Sqlite));
            if matches!(stmt, Stmt::Vacuum(_)) {
                if let Err(e) = s.query("ws", &ts, &[]).await {
                    panic!("{ts} failed: {e}");
                }
                continue;
            }
            let mut t = tarn_run(s, &ts, query).await;
            let mut l = sqlite_run(&conn, &ls, query);
            let ordered = matches!(stmt, Stmt::Select(q) if q.ordered());
            if !ordered {
                for o in [&mut t, &mut l] {
                    if let Outcome::Rows(rows) = o {
                        rows.sort_by_cached_key(|r| r.iter().map(Val::key).collect::<Vec<_>>());
                    }
                }
            }
            if std::env::var_os("TARN_FUZZ_VERBOSE").is_some() {
                eprintln!("{ts}\n  tarn: {t:?}\n  sqlite: {l:?}");
            }
            let agree = match (&t, &l) {
                (Outcome::Failed(_), Outcome::Failed(_)) => true,
                (Outcome::Changed(a), Outcome::Changed(b)) => a == b,
                (Outcome::Rows(a), Outcome::Rows(b)) => {
                    a.len() == b.len()
                        && a.iter().zip(b).all(|(x, y)| {
                            x.len() == y.len() && x.iter().zip(y).all(|(u, v)| u.same(v))
                        })
                }
                _ => false,
            };
            if !agree {
                let history: Vec<String> = p.stmts[..=i]
                    .iter()
                    .map(|s| format!("  {};\n  -- sqlite: {};", s.sql(Dialect::Tarn), s.sql(Dialect::Sqlite)))
                    .collect();
                panic!(
                    "Tarn and SQLite disagree on statement {i}:\n{ts}\nTarn:   {t:?}\nSQLite: {l:?}\nprogram:\n{}",
                    history.join("\n")
                );
            }
            if !query && too_big(&conn, &p.stmts) {
                // Values grew past what the generator's bounds assume (UPDATEs can
                // double a column each time): SQLite would turn an int8 overflow into a
                // float and float overflow into infinity where Tarn fails.
                break;
            }
        }
    });
}

/// Whether a numeric column of the program's tables holds a value beyond 10^6 (in
/// magnitude), past which products of two expressions could overflow int8.
fn too_big(conn: &rusqlite::Connection, stmts: &[Stmt]) -> bool {
    stmts.iter().any(|s| match s {
        Stmt::Create(t) => t.cols.iter().enumerate().any(|(i, ty)| {
            *ty != Ty::Text
                && conn
                    .query_row(&format!("SELECT max(abs(c{i})) FROM {}", t.name), [], |r| {
                        r.get::<_, Option<f64>>(0)
                    })
                    .ok()
                    .flatten()
                    .is_some_and(|m| m > 1e6)
        }),
        _ => false,
    })
}

/// One in-memory database per process (creating a user, key and organization for each
/// input cost more than most programs).
async fn session() -> &'static Session {
    static S: tokio::sync::OnceCell<(Tarn, Session)> = tokio::sync::OnceCell::const_new();
    let (_, s) = S
        .get_or_init(|| async {
            let tarn = Tarn::in_memory().await.expect("Tarn in memory");
            let (_, s) = crate::signed_in(&tarn, "d").await;
            (tarn, s)
        })
        .await;
    s
}
