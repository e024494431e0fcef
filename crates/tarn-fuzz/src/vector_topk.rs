//! `vector_topk`: random vectors, deletes and filters; Tarn's top-k against brute force.
//!
//! Input (`arbitrary`): a dimension (1–8), up to 300 rows of small integer components
//! (scaled by 1/16, so zero vectors, duplicates and exact ties are common), a category
//! per row, NULL vectors, deletes, an optional HNSW index (with its `m` and
//! `ef_search`), where the table is compacted (before and/or after the deletes, so
//! that the index covers sealed segments and the rest is searched exactly), and up to
//! eight queries, each with its k and an optional filter on the category.
//!
//! Checks, for every query (SPEC §5):
//! - exactly `min(k, matching rows)` rows, distinct, each live and matching the filter;
//! - each row's score is its cosine similarity (float4 precision; NULL for a NULL or
//!   zero vector), scores non-increasing with NULLs last, ties by row id ascending;
//! - without an index, the scores rank for rank equal brute force's top-k;
//! - with an index (m >= 8, ef_search >= 64), the input's mean recall (by score: rows
//!   scoring at least the true k-th best) is at least 0.8.

use arbitrary::{Arbitrary, Unstructured};
use serde_json::{Value, json};
use tarn::{Options, Session, Tarn};

/// The most rows an input inserts.
const MAX_ROWS: usize = 300;

/// One input.
#[derive(Debug)]
pub struct Input {
    dim: u8,
    rows: Vec<Row>,
    deletes: Vec<u16>,
    index: Option<Index>,
    /// Compact after this many rows (an index then covers that segment).
    vacuum_after: Option<u16>,
    /// Compact again after the deletes.
    vacuum_end: bool,
    queries: Vec<Query>,
}

#[derive(Arbitrary, Debug)]
struct Row {
    v: [i8; 8],
    cat: u8,
    null: bool,
}

#[derive(Arbitrary, Debug)]
struct Index {
    m: u8,
    ef_search: u8,
}

#[derive(Arbitrary, Debug)]
struct Query {
    v: [i8; 8],
    k: u8,
    filter: Option<Filter>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Filter {
    Below(u8),
    Equal(u8),
    Mod3,
}

impl Filter {
    fn sql(self) -> String {
        match self {
            Filter::Below(n) => format!("cat < {}", n % 16),
            Filter::Equal(n) => format!("cat = {}", n % 16),
            Filter::Mod3 => "cat % 3 = 0".to_string(),
        }
    }

    fn matches(self, cat: i64) -> bool {
        match self {
            Filter::Below(n) => cat < i64::from(n % 16),
            Filter::Equal(n) => cat == i64::from(n % 16),
            Filter::Mod3 => cat % 3 == 0,
        }
    }
}

impl Input {
    /// An input from the fuzzer's bytes. Counts are drawn first and explicitly (a
    /// derived `Vec` takes its length from the input's last bytes and stays short),
    /// so a few kilobytes make a few hundred rows.
    pub fn generate(u: &mut Unstructured<'_>) -> arbitrary::Result<Input> {
        let dim = u.arbitrary()?;
        let n = u.int_in_range(1..=MAX_ROWS)?;
        let n_deletes = u.int_in_range(0..=n / 2)?;
        let n_queries = u.int_in_range(1..=8)?;
        let index = u.arbitrary()?;
        let vacuum_after = u.arbitrary()?;
        let vacuum_end = u.arbitrary()?;
        let mut queries = Vec::with_capacity(n_queries);
        for _ in 0..n_queries {
            queries.push(u.arbitrary()?);
        }
        let mut deletes = Vec::with_capacity(n_deletes);
        for _ in 0..n_deletes {
            deletes.push(u.arbitrary()?);
        }
        let mut rows = Vec::with_capacity(n);
        for _ in 0..n {
            rows.push(u.arbitrary()?);
        }
        Ok(Input {
            dim,
            rows,
            deletes,
            index,
            vacuum_after,
            vacuum_end,
            queries,
        })
    }
}

/// Runs raw fuzzer bytes as an [`Input`].
pub fn run_bytes(data: &[u8]) {
    if let Ok(input) = Input::generate(&mut Unstructured::new(data)) {
        crate::watched(|| run(&input));
    }
}

fn vector(v: &[i8; 8], dim: usize) -> Vec<f32> {
    v[..dim].iter().map(|&x| f32::from(x) / 16.0).collect()
}

/// Cosine similarity in f64; `None` when either side is zero.
fn cosine(a: &[f32], b: &[f32]) -> Option<f64> {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    (na > 0.0 && nb > 0.0).then(|| dot / (na * nb))
}

/// Runs one input; panics on a disagreement.
pub fn run(input: &Input) {
    let dim = usize::from(input.dim % 8) + 1;
    let rows = &input.rows[..input.rows.len().min(MAX_ROWS)];
    if std::env::var_os("TARN_FUZZ_VERBOSE").is_some() {
        eprintln!(
            "vector_topk: dim {dim}, {} rows, {} deletes, index {:?}, vacuum {:?}/{}, {} queries",
            rows.len(),
            input.deletes.len(),
            input.index,
            input.vacuum_after,
            input.vacuum_end,
            input.queries.len()
        );
    }
    if rows.is_empty() || input.queries.is_empty() {
        return;
    }
    crate::runtime().block_on(async {
        let s = session().await;
        // A fresh workspace (a failed input may have left the last one).
        let _ = s.delete_workspace("ws").await;
        s.create_workspace("ws", "W").await.expect("workspace");
        q(s, r#"CREATE TABLE "ws"."v" (id INT8 PRIMARY KEY, cat INT4, e FLOAT4[]) USING engine"#, &[]).await;
        if let Some(ix) = &input.index {
            let sql = format!(
                r#"CREATE INDEX v_e ON "ws"."v" USING engine_index (e DESC) WITH (index_type = 'hnsw', m = {}, ef_search = {})"#,
                ix.m % 15 + 2,
                u32::from(ix.ef_search) + 1
            );
            q(s, &sql, &[]).await;
        }
        let split = input.vacuum_after.map_or(rows.len(), |n| usize::from(n) % (rows.len() + 1));
        let insert = r#"INSERT INTO "ws"."v" VALUES ($1, $2, $3::float4[])"#;
        let params: Vec<Vec<Value>> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let e = if r.null { Value::Null } else { json!(vector(&r.v, dim)) };
                vec![json!(i), json!(r.cat % 16), e]
            })
            .collect();
        if split > 0 {
            s.query_batch("ws", insert, &params[..split]).await.expect("insert");
            if input.vacuum_after.is_some() {
                q(s, r#"VACUUM "ws"."v""#, &[]).await;
            }
        }
        if split < rows.len() {
            s.query_batch("ws", insert, &params[split..]).await.expect("insert");
        }
        let mut live = vec![true; rows.len()];
        for d in &input.deletes {
            let id = usize::from(*d) % rows.len();
            live[id] = false;
            q(s, r#"DELETE FROM "ws"."v" WHERE id = $1"#, &[json!(id)]).await;
        }
        if input.vacuum_end {
            q(s, r#"VACUUM "ws"."v""#, &[]).await;
        }
        let mut recall = Vec::new();
        for query in input.queries.iter().take(8) {
            recall.push(check_query(s, query, dim, rows, &live, input.index.is_none()).await);
        }
        // SPEC §5 promises recall@10 >= 0.95 at the default settings; a small input's
        // few queries are noisy, so with a reasonable graph (m >= 8, ef_search >= 64) the
        // input's mean must reach 0.8.
        if let Some(ix) = &input.index
            && ix.m % 15 + 2 >= 8
            && u32::from(ix.ef_search) + 1 >= 64
        {
            let mean = recall.iter().sum::<f64>() / recall.len() as f64;
            assert!(mean >= 0.8, "mean recall {mean:.3} over {} queries: {recall:?}", recall.len());
        }
    });
}

/// One on-disk database per process; each input gets a fresh workspace.
async fn session() -> &'static Session {
    static S: tokio::sync::OnceCell<(Tarn, Session)> = tokio::sync::OnceCell::const_new();
    let (_, s) = S
        .get_or_init(|| async {
            let dir = crate::fresh_dir("vector_topk");
            let tarn = Tarn::open_with(&dir, Options::new().background_maintenance(false))
                .await
                .expect("open");
            let (_, s) = crate::signed_in(&tarn, "f").await;
            (tarn, s)
        })
        .await;
    s
}

async fn q(s: &Session, sql: &str, params: &[Value]) -> tarn::QueryResult {
    s.query("ws", sql, params)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

async fn check_query(
    s: &Session,
    query: &Query,
    dim: usize,
    rows: &[Row],
    live: &[bool],
    exact: bool,
) -> f64 {
    let k = usize::from(query.k % 40) + 1;
    let qv = vector(&query.v, dim);
    let filter = query.filter;
    let sql = format!(
        r#"SELECT id, e <#> $1::float4[] AS score FROM "ws"."v" {} ORDER BY score DESC LIMIT {k}"#,
        filter.map_or(String::new(), |f| format!("WHERE {}", f.sql()))
    );
    let r = q(s, &sql, &[json!(qv)]).await;
    let got: Vec<(usize, Option<f64>)> = r
        .rows
        .unwrap_or_default()
        .iter()
        .map(|row| {
            let id = row[0].as_u64().unwrap_or_else(|| panic!("id {:?}", row[0])) as usize;
            (id, row[1].as_f64())
        })
        .collect();
    // Brute force: every live matching row with its exact score.
    let truth = |i: usize| -> Option<f64> {
        if rows[i].null {
            None
        } else {
            cosine(&vector(&rows[i].v, dim), &qv)
        }
    };
    let mut expected: Vec<(usize, Option<f64>)> = (0..rows.len())
        .filter(|&i| live[i] && filter.is_none_or(|f| f.matches(i64::from(rows[i].cat % 16))))
        .map(|i| (i, truth(i)))
        .collect();
    let ctx = || format!("{sql} with q = {qv:?}: got {got:?}");
    assert_eq!(got.len(), expected.len().min(k), "row count: {}", ctx());
    let mut seen = std::collections::HashSet::new();
    for &(id, score) in &got {
        assert!(
            id < rows.len() && live[id],
            "row {id} is deleted or unknown: {}",
            ctx()
        );
        assert!(seen.insert(id), "row {id} twice: {}", ctx());
        assert!(
            filter.is_none_or(|f| f.matches(i64::from(rows[id].cat % 16))),
            "row {id} fails the filter: {}",
            ctx()
        );
        match (score, truth(id)) {
            (None, None) => {}
            (Some(a), Some(b)) => assert!(
                (a - b).abs() <= 1e-4,
                "row {id} scored {a}, not {b}: {}",
                ctx()
            ),
            (a, b) => panic!("row {id} scored {a:?}, not {b:?}: {}", ctx()),
        }
    }
    for w in got.windows(2) {
        let ((id0, s0), (id1, s1)) = (w[0], w[1]);
        let ordered = match (s0, s1) {
            (Some(a), Some(b)) => a > b || (a == b && id0 < id1),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => id0 < id1,
        };
        assert!(ordered, "rows {id0} and {id1} out of order: {}", ctx());
    }
    expected.sort_by(|a, b| match (a.1, b.1) {
        (Some(x), Some(y)) => y.total_cmp(&x).then(a.0.cmp(&b.0)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.0.cmp(&b.0),
    });
    if exact {
        // Scores rank for rank (ids may differ only between near-equal scores).
        for (rank, (g, e)) in got.iter().zip(&expected).enumerate() {
            let same = match (g.1, e.1) {
                (Some(a), Some(b)) => (a - b).abs() <= 1e-4,
                (None, None) => true,
                _ => false,
            };
            assert!(same, "rank {rank}: got {g:?}, brute force {e:?}: {}", ctx());
        }
    }
    // Recall by score (ties make ids ambiguous): the share of returned rows that score
    // at least the k-th best score.
    match expected.get(got.len().wrapping_sub(1)).map(|e| e.1) {
        None | Some(None) => 1.0,
        Some(Some(kth)) => {
            let hits = got
                .iter()
                .filter(|(_, score)| score.is_some_and(|x| x >= kth - 1e-4))
                .count();
            hits as f64 / got.len() as f64
        }
    }
}
