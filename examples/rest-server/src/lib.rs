//! The hosted data-workspace service's REST interface, served from a Tarn directory.
//!
//! Tarn is a library with no HTTP in it; this crate is an example host program that puts
//! the service's transport in front of it, using nothing but `tarn`'s public API. Every
//! endpoint of the service reference is one [`tarn::Session`] call: the same paths and
//! methods, the same JSON bodies (the library's resource structs serialize to them),
//! multipart uploads, `Authorization: Bearer <key>` and `X-Service-Org-Id` headers, and
//! the same statuses. Errors are `{"error": {"status", "kind", "message"}}`.
//!
//! What HTTP adds, and how it is decided here:
//! - **Request bodies are bounded**: JSON bodies by [`Config::max_body_bytes`], uploads by
//!   [`Config::max_upload_bytes`] (and by the database's own `max_file_bytes`); past the
//!   bound the answer is 413 and nothing is kept. Uploads are streamed into Tarn as they
//!   arrive, so memory does not grow with the file.
//! - **Cancellation is safe**: when a client disconnects, the server drops the handler's
//!   future, and every Tarn call applies wholly or not at all when dropped; what was
//!   acknowledged (a response sent) is durable.
//! - **`Host` is checked** as RFC 9112 asks: missing from an HTTP/1.1 request, or given
//!   twice, is a 400.
//! - **Shutdown is graceful** (see `main.rs`): the listener closes, requests under way
//!   finish and are answered, then the database is closed (checkpointed).

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use tarn::Tarn;

mod error;
mod extract;
mod handlers;
mod state;
mod uploads;

pub use error::ApiError;
use error::{json_errors, no_route, wrong_method};
use extract::PARSE_BUDGET_MIB;
use handlers::*;
use state::AppState;
use uploads::{delete_file, file, file_content, files, upload_file, upload_table};

/// Limits of the HTTP layer.
#[derive(Debug, Clone)]
pub struct Config {
    /// Largest JSON request body (a query, a batch): 413 beyond it.
    pub max_body_bytes: usize,
    /// Largest multipart upload body (tables and files): 413 beyond it.
    pub max_upload_bytes: u64,
    /// The runtime SQL statements run on. A statement can keep a worker thread busy
    /// for long stretches (DataFusion does a whole batch of a join in one poll), so the
    /// server keeps its own runtime for HTTP: `/health`, new connections and shutdown
    /// stay responsive whatever the statements do. `None`: the server's runtime.
    pub statements: Option<tokio::runtime::Handle>,
}

impl Default for Config {
    /// 64 MiB for JSON bodies (a batch of 100,000 parameter sets of a few fields fits;
    /// parsed parameters take up to about 40 times their text), 10 GiB for uploads
    /// (SPEC §8's file limit).
    fn default() -> Self {
        Config {
            max_body_bytes: 64 << 20,
            max_upload_bytes: 10 << 30,
            statements: None,
        }
    }
}

/// The service's routes over `tarn`.
pub fn router(tarn: Tarn, config: Config) -> Router {
    let upload_limit =
        DefaultBodyLimit::max(usize::try_from(config.max_upload_bytes).unwrap_or(usize::MAX));
    Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/me", get(me))
        .route(
            "/organizations",
            get(organizations).post(create_organization),
        )
        .route(
            "/organizations/{org_id}",
            get(organization)
                .patch(update_organization)
                .delete(delete_organization),
        )
        .route(
            "/organizations/{org_id}/members",
            get(members).post(add_member),
        )
        .route(
            "/organizations/{org_id}/members/{user_id}",
            axum::routing::patch(update_member).delete(remove_member),
        )
        .route("/workspaces", get(workspaces).post(create_workspace))
        .route(
            "/workspaces/{ws}",
            get(workspace)
                .patch(update_workspace)
                .delete(delete_workspace),
        )
        .route(
            "/workspaces/{ws}/tables",
            get(tables).post(upload_table).layer(upload_limit),
        )
        .route(
            "/workspaces/{ws}/tables/{table}",
            get(table).delete(drop_table),
        )
        // `query` is a path of its own; a table named "query" keeps GET and DELETE.
        .route(
            "/workspaces/{ws}/tables/query",
            post(query)
                .get(table_named_query)
                .delete(drop_table_named_query),
        )
        .route("/workspaces/{ws}/tables/query/batch", post(query_batch))
        .route(
            "/workspaces/{ws}/files",
            get(files).post(upload_file).layer(upload_limit),
        )
        .route("/workspaces/{ws}/files/{id}", get(file).delete(delete_file))
        .route("/workspaces/{ws}/files/{id}/content", get(file_content))
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        .layer(axum::middleware::from_fn(json_errors))
        .layer(axum::middleware::from_fn(extract::one_host))
        .with_state(AppState {
            tarn,
            statements: config.statements,
            parse_budget: Arc::new(tokio::sync::Semaphore::new(PARSE_BUDGET_MIB as usize)),
        })
}
