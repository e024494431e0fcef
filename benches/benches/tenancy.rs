//! The cost of tenancy on every call (issue 10): key verification and the permission
//! check, in a catalog of 1000 users and 200 organizations of 5 members each.
//!
//! - `auth/connect`: `Tarn::connect` — SHA-256 of the secret, the key lookup, the
//!   constant-time comparison and the use counter. Target < 2 µs.
//! - `auth/check{,_rate_limited}`: `Session::workspace` — every check a data call makes
//!   (key not revoked, rate limit when on, membership, role, workspace) plus building a
//!   small struct. Target < 2 µs.
//! - `auth/query_point_lookup`: a primary-key lookup through `query`, checks included.
//!   Target < 50 µs.
//!
//! Run: `cargo bench -p tarn-benches --bench tenancy`.

// criterion's macros generate undocumented public functions.
#![allow(missing_docs)]

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use tarn::{Options, Session, Tarn};
use tarn_benches::{CREATE_T, POINT_LOOKUP};

type Setup = (tempfile::TempDir, Tarn, Session, String);

/// A database with 1000 users in 200 organizations; the session and secret of one of
/// them (a member, not an admin, of its organization), which has workspace `ws` with
/// 10,000 rows in `"ws"."t"`.
async fn setup(options: Options) -> Result<Setup, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let tarn = Tarn::open_with(dir.path(), options).await?;
    let mut chosen = None;
    for o in 0..200 {
        let admin = tarn
            .create_user(&format!("admin{o}@example.com"), "A")
            .await?;
        let key = tarn.create_api_key(&admin.id, "k").await?;
        let s = tarn.connect(&key.secret).await?;
        let org = format!("org{o}");
        s.create_organization(&org, "O").await?;
        let s = s.with_org(&org);
        s.create_workspace("ws", "W").await?;
        for m in 0..4 {
            let email = format!("m{o}-{m}@example.com");
            let u = s.add_member(&org, &email, "member").await?;
            let k = tarn.create_api_key(&u.user_id, "k").await?;
            if o == 100 && m == 2 {
                chosen = Some((org.clone(), k.secret, s.clone()));
            }
        }
    }
    let (org, secret, admin) = chosen.ok_or("no member chosen")?;
    admin.query("ws", CREATE_T, &[]).await?;
    let ids: Vec<Vec<serde_json::Value>> = (0..10_000).map(|i| vec![json!(i)]).collect();
    admin
        .query_batch(
            "ws",
            r#"INSERT INTO "ws"."t" (id, body, x) VALUES ($1, 'body', 0.5)"#,
            &ids,
        )
        .await?;
    let s = tarn.connect(&secret).await?.with_org(&org);
    Ok((dir, tarn, s, secret))
}

fn auth(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (_dir, tarn, s, secret) = rt.block_on(setup(Options::new())).expect("setup");
    let mut g = c.benchmark_group("auth");
    g.bench_function("connect", |b| {
        b.to_async(&rt)
            .iter(|| async { tarn.connect(&secret).await.expect("connect") })
    });
    g.bench_function("check", |b| {
        b.to_async(&rt)
            .iter(|| async { s.workspace("ws").await.expect("workspace") })
    });
    let mut i = 0i64;
    g.bench_function("query_point_lookup", |b| {
        b.to_async(&rt).iter(|| {
            i = (i + 7919) % 10_000;
            let s = s.clone();
            async move {
                s.query("ws", POINT_LOOKUP, &[json!(i)])
                    .await
                    .expect("query")
            }
        })
    });
    let (_dir2, _tarn, limited, _) = rt
        .block_on(setup(Options::new().rate_limit(1e12, 1_000_000)))
        .expect("setup");
    g.bench_function("check_rate_limited", |b| {
        b.to_async(&rt)
            .iter(|| async { limited.workspace("ws").await.expect("workspace") })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(50);
    targets = auth
}
criterion_main!(benches);
