//! Shared setup for Tarn's criterion benchmarks.

use tarn::{Session, Tarn};

/// A user, organization `bench` and workspace `ws`; the session scoped to `bench`.
pub async fn fixture(tarn: &Tarn) -> tarn::Result<Session> {
    let user = tarn.create_user("bench@example.com", "Bench").await?;
    let key = tarn.create_api_key(&user.id, "bench").await?;
    let s = tarn.connect(&key.secret).await?;
    s.create_organization("bench", "Bench").await?;
    let s = s.with_org("bench");
    s.create_workspace("ws", "Bench").await?;
    Ok(s)
}
