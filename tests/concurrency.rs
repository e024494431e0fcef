//! Many sessions at once, model-checked (SPEC §3): sessions run mixed INSERT, UPDATE,
//! DELETE, INSERT … ON CONFLICT, CREATE/DROP TABLE and SELECT on shared and separate
//! tables. The final state must equal the acknowledged statements applied one at a time
//! in commit order, and every SELECT must see one consistent snapshot:
//!
//! - `acct`: transfers between accounts. Each keeps the sum, so every read of the sum,
//!   alone or twice in one statement, must give the total; the final balances are the
//!   initial ones plus every acknowledged transfer (additions commute, so their order
//!   does not matter).
//! - `kv`: upserts whose RETURNING `version` reveals their commit order per key; the
//!   final row of each key is its last upsert's, and each version was handed out once.
//! - `log`: inserts from every session into a SERIAL key; ids are unique and gapless.
//! - `s{i}`: each session's own table, written, read back against a local model,
//!   dropped and created again.
//!
//! Then the database is closed, reopened, and checked again.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Value, json};
use tarn::{Options, Session, Tarn};
use tarn_tests::{Rng, fixture_with_key, reconnect};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const SESSIONS: u64 = 8;
const OPS: usize = 80;
const ACCOUNTS: i64 = 20;
const BALANCE: i64 = 1_000;
const KEYS: i64 = 10;

/// What the sessions did, acknowledged.
#[derive(Default)]
struct Acks {
    /// Net change of each account.
    acct: BTreeMap<i64, i64>,
    /// Per key: (version, value) of every upsert.
    kv: BTreeMap<i64, Vec<(i64, i64)>>,
    /// Ids the log inserts got.
    log: Vec<i64>,
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(i64::MIN)
}

async fn rows(s: &Session, sql: &str, params: &[Value]) -> tarn::Result<Vec<Vec<Value>>> {
    Ok(s.query("ws", sql, params).await?.rows.unwrap_or_default())
}

/// One session's run. Its own table's model is checked as it goes.
async fn session(s: Session, id: u64, acks: Arc<Mutex<Acks>>) -> tarn::Result<BTreeMap<i64, i64>> {
    let mut rng = Rng(0x5EED ^ (id + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let own = format!(r#""ws"."s{id}""#);
    let mut model: BTreeMap<i64, i64> = BTreeMap::new();
    let mut next_key = 0i64;
    for _ in 0..OPS {
        match rng.below(10) {
            0 | 1 => {
                let (a, b) = (
                    rng.below(ACCOUNTS as u64) as i64,
                    rng.below(ACCOUNTS as u64) as i64,
                );
                if a == b {
                    continue;
                }
                let amount = 1 + rng.below(50) as i64;
                let r = s
                    .query(
                        "ws",
                        r#"UPDATE "ws"."acct" SET bal = bal + CASE WHEN id = $1 THEN -$3 ELSE $3 END WHERE id IN ($1, $2)"#,
                        &[json!(a), json!(b), json!(amount)],
                    )
                    .await?;
                assert_eq!(r.rows_affected, 2);
                let mut acks = acks.lock();
                *acks.acct.entry(a).or_default() -= amount;
                *acks.acct.entry(b).or_default() += amount;
            }
            2 => {
                // One snapshot per statement: the sum holds, also read twice.
                let r = rows(
                    &s,
                    r#"SELECT (SELECT sum(bal) FROM "ws"."acct") AS total, (SELECT sum(bal) FROM "ws"."acct") - (SELECT sum(bal) FROM "ws"."acct" AS x) AS drift, count(*) FROM "ws"."acct""#,
                    &[],
                )
                .await?;
                assert_eq!(
                    r,
                    vec![vec![json!(ACCOUNTS * BALANCE), json!(0), json!(ACCOUNTS)]],
                    "an inconsistent snapshot"
                );
            }
            3 | 4 => {
                let k = rng.below(KEYS as u64) as i64;
                let v = rng.below(1_000_000) as i64;
                let r = rows(
                    &s,
                    r#"INSERT INTO "ws"."kv" VALUES ($1, $2, 1) ON CONFLICT (k) DO UPDATE SET v = excluded.v, version = "kv".version + 1 RETURNING version"#,
                    &[json!(k), json!(v)],
                )
                .await?;
                acks.lock()
                    .kv
                    .entry(k)
                    .or_default()
                    .push((int(&r[0][0]), v));
            }
            5 => {
                let r = rows(
                    &s,
                    r#"INSERT INTO "ws"."log" (session) VALUES ($1) RETURNING id"#,
                    &[json!(id)],
                )
                .await?;
                acks.lock().log.push(int(&r[0][0]));
            }
            6 | 7 => {
                let k = next_key;
                next_key += 1;
                let v = rng.below(1000) as i64;
                s.query(
                    "ws",
                    &format!("INSERT INTO {own} VALUES ($1, $2)"),
                    &[json!(k), json!(v)],
                )
                .await?;
                model.insert(k, v);
            }
            8 => {
                if let Some((&k, _)) = model
                    .iter()
                    .nth(rng.below(model.len().max(1) as u64) as usize)
                {
                    if rng.below(2) == 0 {
                        s.query(
                            "ws",
                            &format!("UPDATE {own} SET v = v + 1 WHERE k = $1"),
                            &[json!(k)],
                        )
                        .await?;
                        *model.entry(k).or_default() += 1;
                    } else {
                        s.query(
                            "ws",
                            &format!("DELETE FROM {own} WHERE k = $1"),
                            &[json!(k)],
                        )
                        .await?;
                        model.remove(&k);
                    }
                }
            }
            _ => {
                if rng.below(4) == 0 {
                    s.query("ws", &format!("DROP TABLE {own}"), &[]).await?;
                    s.query(
                        "ws",
                        &format!("CREATE TABLE {own} (k INT8 PRIMARY KEY, v INT8) USING engine"),
                        &[],
                    )
                    .await?;
                    model.clear();
                }
                // Read-your-writes on the own table.
                let got = rows(&s, &format!("SELECT k, v FROM {own} ORDER BY k"), &[]).await?;
                let want: Vec<Vec<Value>> = model
                    .iter()
                    .map(|(k, v)| vec![json!(k), json!(v)])
                    .collect();
                assert_eq!(got, want, "session {id}: its own table diverged");
            }
        }
    }
    Ok(model)
}

async fn check(s: &Session, acks: &Acks, models: &[BTreeMap<i64, i64>]) -> TestResult {
    let acct = rows(s, r#"SELECT id, bal FROM "ws"."acct" ORDER BY id"#, &[]).await?;
    let want: Vec<Vec<Value>> = (0..ACCOUNTS)
        .map(|a| {
            vec![
                json!(a),
                json!(BALANCE + acks.acct.get(&a).copied().unwrap_or(0)),
            ]
        })
        .collect();
    assert_eq!(acct, want, "balances are not the transfers applied");
    let kv = rows(s, r#"SELECT k, v, version FROM "ws"."kv" ORDER BY k"#, &[]).await?;
    let mut want = Vec::new();
    for (k, ups) in &acks.kv {
        let mut versions: Vec<i64> = ups.iter().map(|u| u.0).collect();
        versions.sort_unstable();
        assert_eq!(
            versions,
            (1..=ups.len() as i64).collect::<Vec<_>>(),
            "key {k}: versions"
        );
        let last = ups.iter().max_by_key(|u| u.0).map(|u| u.1).unwrap_or(-1);
        want.push(vec![json!(k), json!(last), json!(ups.len())]);
    }
    assert_eq!(kv, want, "upserts not applied in commit order");
    let log = rows(s, r#"SELECT id FROM "ws"."log" ORDER BY id"#, &[]).await?;
    let mut ids = acks.log.clone();
    ids.sort_unstable();
    assert_eq!(
        ids,
        (1..=ids.len() as i64).collect::<Vec<_>>(),
        "serial ids"
    );
    assert_eq!(log, ids.iter().map(|i| vec![json!(i)]).collect::<Vec<_>>());
    for (i, model) in models.iter().enumerate() {
        let got = rows(
            s,
            &format!(r#"SELECT k, v FROM "ws"."s{i}" ORDER BY k"#),
            &[],
        )
        .await?;
        let want: Vec<Vec<Value>> = model
            .iter()
            .map(|(k, v)| vec![json!(k), json!(v)])
            .collect();
        assert_eq!(got, want, "table s{i}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_sessions_equal_their_acknowledged_statements_in_commit_order() -> TestResult {
    let dir = tempfile::tempdir()?;
    // A small memtable: checkpoints and compaction run under the sessions.
    let options = || Options::new().memtable_bytes(16 << 10);
    let tarn = Tarn::open_with(dir.path(), options()).await?;
    let (s, secret) = fixture_with_key(&tarn).await?;
    for sql in [
        r#"CREATE TABLE "ws"."acct" (id INT PRIMARY KEY, bal INT8) USING engine"#,
        r#"CREATE TABLE "ws"."kv" (k INT PRIMARY KEY, v INT8, version INT8) USING engine"#,
        r#"CREATE TABLE "ws"."log" (id SERIAL PRIMARY KEY, session INT8) USING engine"#,
    ] {
        s.query("ws", sql, &[]).await?;
    }
    let accounts: Vec<String> = (0..ACCOUNTS).map(|a| format!("({a}, {BALANCE})")).collect();
    s.query(
        "ws",
        &format!(r#"INSERT INTO "ws"."acct" VALUES {}"#, accounts.join(", ")),
        &[],
    )
    .await?;
    for i in 0..SESSIONS {
        s.query(
            "ws",
            &format!(r#"CREATE TABLE "ws"."s{i}" (k INT8 PRIMARY KEY, v INT8) USING engine"#),
            &[],
        )
        .await?;
    }
    let acks = Arc::new(Mutex::new(Acks::default()));
    let tasks: Vec<_> = (0..SESSIONS)
        .map(|i| tokio::spawn(session(s.clone(), i, acks.clone())))
        .collect();
    let mut models = Vec::new();
    for t in tasks {
        models.push(t.await??);
    }
    let acks = std::mem::take(&mut *acks.lock());
    check(&s, &acks, &models).await?;
    tarn.close().await?;
    let tarn = Tarn::open_with(dir.path(), options()).await?;
    let s = reconnect(&tarn, &secret).await?;
    check(&s, &acks, &models).await?;
    tarn.close().await?;
    Ok(())
}
