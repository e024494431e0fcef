//! What every handler shares: the database and the runtime statements run on.

use std::sync::Arc;

use axum::http::StatusCode;
use tarn::Tarn;

use crate::error::{ApiError, ApiResult};

#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) tarn: Tarn,
    pub(crate) statements: Option<tokio::runtime::Handle>,
    /// See [`crate::extract::PARSE_BUDGET_MIB`].
    pub(crate) parse_budget: Arc<tokio::sync::Semaphore>,
}

/// A task that is aborted when its handle is dropped (the client went away): the
/// statement's future is dropped at its next await, so it applies wholly or not at all,
/// and its stop handle ends a long planning step (one poll, which an abort does not
/// reach) at its next check.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>, tarn::StopHandle);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.1.stop();
        self.0.abort();
    }
}

impl AppState {
    /// Runs a statement on the statement runtime.
    pub(crate) async fn statement<T, F>(&self, f: F) -> ApiResult<T>
    where
        T: Send + 'static,
        F: std::future::Future<Output = tarn::Result<T>> + Send + 'static,
    {
        let Some(rt) = &self.statements else {
            return Ok(f.await?);
        };
        let (f, stop) = tarn::stoppable(f);
        let mut task = AbortOnDrop(rt.spawn(f), stop);
        match (&mut task.0).await {
            Ok(r) => Ok(r?),
            // The statement runtime shut down under it (the drain's time ran out): not a
            // bug, and the statement applied wholly or not at all.
            Err(e) if e.is_cancelled() => Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "Unavailable",
                "the server is shutting down and stopped this statement before it answered: \
                 it applied wholly or not at all"
                    .to_string(),
            )),
            Err(e) => Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Internal",
                format!("the statement's task failed: {e}"),
            )),
        }
    }
}
