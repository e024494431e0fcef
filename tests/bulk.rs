//! Bulk writes (SPEC §4.10): the fast paths of `query_batch` INSERTs and literal
//! multi-row INSERTs must give exactly the statement path's rows and errors. A property
//! test runs random batches, some of them failing (duplicate keys, NULLs in NOT NULL
//! columns, values of the wrong type), against two databases, one with the fast paths
//! off, and compares every outcome and the tables' contents.

use proptest::prelude::*;
use serde_json::{Value, json};
use tarn::{Options, Session, Tarn};
use tarn_tests::fixture;

const CREATE: &str = r#"CREATE TABLE "ws"."t" (id INT8 PRIMARY KEY, body TEXT NOT NULL, x FLOAT8, flag BOOL DEFAULT true, n SERIAL, tags TEXT[]) USING engine"#;
const SELECT: &str = r#"SELECT id, body, x, flag, n, tags FROM "ws"."t" ORDER BY id"#;

/// A value for any column: mostly ones that fit, some that do not.
fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => (-5i64..40).prop_map(|i| json!(i)),
        1 => Just(json!(i64::MAX)),
        1 => Just(json!(u64::MAX)),
        2 => prop::num::f64::NORMAL.prop_map(|f| json!(f)),
        1 => (-100i32..100).prop_map(|i| json!(f64::from(i) / 4.0)),
        2 => "[a-z' \\\\]{0,6}".prop_map(|s| json!(s)),
        1 => prop_oneof![Just("12"), Just("-3.5"), Just("1e3"), Just("t"), Just("false"), Just("{a,b}")]
            .prop_map(|s| json!(s)),
        1 => any::<bool>().prop_map(|b| json!(b)),
        2 => Just(Value::Null),
        1 => prop::collection::vec("[a-z]{0,3}", 0..3).prop_map(|v| json!(v)),
        1 => Just(json!({"k": 1})),
    ]
}

/// A row for (id, body, x, flag, tags): well-typed but for one cell in 40 or so, with ids
/// from a small range so that keys collide now and then.
fn row() -> impl Strategy<Value = Vec<Value>> {
    let id = prop_oneof![40 => (0i64..30).prop_map(|i| json!(i)), 1 => value()];
    let body = prop_oneof![40 => "[a-z' ]{0,8}".prop_map(|s| json!(s)), 1 => value()];
    let x =
        prop_oneof![40 => (-1000i32..1000).prop_map(|i| json!(f64::from(i) / 8.0)), 1 => value()];
    let flag = prop_oneof![40 => any::<bool>().prop_map(|b| json!(b)), 1 => value()];
    let tags = prop_oneof![
        40 => prop::collection::vec("[a-z]{1,3}", 0..3).prop_map(|v| json!(v)),
        1 => value()
    ];
    (id, body, x, flag, tags).prop_map(|(a, b, c, d, e)| vec![a, b, c, d, e])
}

/// A cell of a literal INSERT for `v`, or DEFAULT.
fn sql_literal(v: &Value, default: bool) -> String {
    if default {
        return "DEFAULT".into();
    }
    match v {
        Value::Null => "NULL".into(),
        Value::Bool(b) => b.to_string().to_uppercase(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("'{}'", s.replace('\'', "''")),
        other => format!("'{}'", other.to_string().replace('\'', "''")),
    }
}

/// The outcome of a call, comparable across the two databases.
fn outcome<T: std::fmt::Debug>(r: tarn::Result<T>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(e) => format!("{} {:?}: {e}", e.status(), e.kind()),
    }
}

async fn open(fast: bool) -> (Tarn, Session) {
    let tarn = Tarn::in_memory_with(Options::new().fast_paths(fast))
        .await
        .expect("database");
    let s = fixture(&tarn).await.expect("fixture");
    s.query("ws", CREATE, &[]).await.expect("create");
    (tarn, s)
}

async fn contents(s: &Session) -> Vec<Vec<Value>> {
    s.query("ws", SELECT, &[])
        .await
        .expect("select")
        .rows
        .unwrap_or_default()
}

/// One step: a batch (`columns` picks the INSERT's column list) or a literal INSERT.
#[derive(Debug, Clone)]
enum Step {
    Batch(Vec<Vec<Value>>, bool),
    Literal(Vec<Vec<Value>>, Vec<bool>),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (prop::collection::vec(row(), 1..8), any::<bool>()).prop_map(|(r, c)| Step::Batch(r, c)),
        (
            prop::collection::vec(row(), 1..8),
            prop::collection::vec(prop::bool::weighted(0.1), 5)
        )
            .prop_map(|(r, d)| Step::Literal(r, d)),
    ]
}

async fn run(s: &Session, step: &Step) -> String {
    match step {
        Step::Batch(rows, all_columns) => {
            let sql = if *all_columns {
                // Every column; the serial is a constant DEFAULT cell.
                r#"INSERT INTO "ws"."t" VALUES ($1, $2, $3, $4, DEFAULT, $5)"#
            } else {
                r#"INSERT INTO "ws"."t" (tags, id, body, x) VALUES ($5, $1, $2, $3)"#
            };
            outcome(
                s.query_batch("ws", sql, rows)
                    .await
                    .map(|r| (r.statements, r.rows_affected, r.row_count)),
            )
        }
        Step::Literal(rows, defaults) => {
            let cells: Vec<String> = rows
                .iter()
                .map(|r| {
                    let c: Vec<String> = r
                        .iter()
                        .zip(defaults)
                        .enumerate()
                        // A JSON array is not a literal the scanner reads: it goes
                        // through the parser as array text.
                        .map(|(i, (v, d))| match v {
                            Value::Array(_) if i == 4 => format!(
                                "'{{{}}}'",
                                v.as_array()
                                    .into_iter()
                                    .flatten()
                                    .map(|x| x.as_str().unwrap_or("x").to_string())
                                    .collect::<Vec<_>>()
                                    .join(",")
                            ),
                            _ => sql_literal(v, *d),
                        })
                        .collect();
                    format!("({})", c.join(", "))
                })
                .collect();
            let sql = format!(
                r#"INSERT INTO "ws"."t" (id, body, x, flag, tags) VALUES {}"#,
                cells.join(", ")
            );
            outcome(s.query("ws", &sql, &[]).await.map(|r| r.rows_affected))
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn fast_paths_match_the_statement_path(steps in prop::collection::vec(step(), 1..6)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let (_f, fast) = open(true).await;
            let (_p, planned) = open(false).await;
            for (i, step) in steps.iter().enumerate() {
                let a = run(&fast, step).await;
                let b = run(&planned, step).await;
                prop_assert_eq!(&a, &b, "step {} outcome: {:?}", i, step);
                prop_assert_eq!(contents(&fast).await, contents(&planned).await, "step {}", i);
            }
            Ok(())
        })?;
    }
}

/// A NULL array parameter beside a scalar one in a batch stays NULL on the fast path as
/// on the statement path (the fast path stored `[null]`: Arrow casts each value of a
/// non-list column, NULL included, to a one-element list). Found by the property test
/// above.
#[tokio::test]
async fn a_null_array_parameter_beside_a_scalar_stays_null() {
    let sql = r#"INSERT INTO "ws"."t" (tags, id, body, x) VALUES ($5, $1, $2, $3)"#;
    let sets = vec![
        vec![json!(0), json!(""), json!(0.0), json!(false), json!(0)],
        vec![json!(1), json!(""), json!(0.0), json!(false), Value::Null],
    ];
    for fast in [true, false] {
        let (_t, s) = open(fast).await;
        s.query_batch("ws", sql, &sets).await.expect("batch");
        let tags: Vec<Value> = contents(&s)
            .await
            .into_iter()
            .map(|r| r[5].clone())
            .collect();
        assert_eq!(tags, vec![json!(["0"]), Value::Null], "fast paths {fast}");
    }
}

/// A batch large enough that the fast path's single write is what runs, with a failing
/// set at the end: the error names that set and nothing is written.
#[tokio::test]
async fn a_large_batch_fails_at_its_last_set_and_writes_nothing() {
    let (_t, s) = open(true).await;
    let mut sets: Vec<Vec<Value>> = (0..20_000)
        .map(|i| vec![json!(i), json!(format!("row {i}")), json!(i as f64 / 2.0)])
        .collect();
    let sql = r#"INSERT INTO "ws"."t" (id, body, x) VALUES ($1, $2, $3)"#;
    let ok = s.query_batch("ws", sql, &sets[..10_000]).await.unwrap();
    assert_eq!((ok.statements, ok.rows_affected), (10_000, 10_000));
    sets.drain(..10_000);
    sets.push(vec![json!(5), json!("dup"), json!(0)]);
    let err = s.query_batch("ws", sql, &sets).await.unwrap_err();
    assert_eq!(err.status(), 409);
    assert_eq!(
        err.to_string(),
        "parameter set 10000: duplicate key value violates unique constraint \"t_pkey\""
    );
    let n = s
        .query("ws", r#"SELECT count(*), max(n) FROM "ws"."t""#, &[])
        .await
        .unwrap();
    assert_eq!(n.rows.unwrap()[0], vec![json!(10_000), json!(10_000)]);
}
