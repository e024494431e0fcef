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
//! - **Shutdown is graceful** (see `main.rs`): the listener closes, requests under way
//!   finish and are answered, then the database is closed (checkpointed).

use std::io::SeekFrom;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{
    DefaultBodyLimit, FromRequest, FromRequestParts, Multipart, Path, Query, Request, State,
};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header, request::Parts};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::TryStreamExt;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tarn::{Session, Tarn};
use tokio::io::{AsyncRead, AsyncSeekExt, AsyncWriteExt};
use tokio_util::io::{ReaderStream, StreamReader};

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

#[derive(Clone)]
struct AppState {
    tarn: Tarn,
    statements: Option<tokio::runtime::Handle>,
    /// See [`PARSE_BUDGET_MIB`].
    parse_budget: Arc<tokio::sync::Semaphore>,
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
    async fn statement<T, F>(&self, f: F) -> ApiResult<T>
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
        .with_state(AppState {
            tarn,
            statements: config.statements,
            parse_budget: Arc::new(tokio::sync::Semaphore::new(PARSE_BUDGET_MIB as usize)),
        })
}

// ---------------------------------------------------------------------------------------
// Errors

/// An error answer: `{"error": {"status", "kind", "message"}}` with that status (and
/// `Retry-After` for 429).
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    kind: String,
    message: String,
    retry_after: Option<Duration>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            kind: kind.to_string(),
            // Cut as the library cuts its own messages (`tarn::MAX_MESSAGE_BYTES`): a
            // 60 KB path id or header must not come back whole.
            message: tarn::Error::new(tarn::ErrorKind::Internal, message)
                .message()
                .to_owned(),
            retry_after: None,
        }
    }

    fn bad(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "BadRequest", message)
    }

    fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "Unauthorized", message)
    }

    /// An error of the HTTP layer (a body, a header, a path) with the status axum gave
    /// it, and the kind that status has.
    fn of_status(status: StatusCode, message: impl Into<String>) -> Self {
        let kind = match status {
            StatusCode::UNAUTHORIZED => "Unauthorized",
            StatusCode::FORBIDDEN => "Forbidden",
            StatusCode::NOT_FOUND => "NotFound",
            StatusCode::METHOD_NOT_ALLOWED => "MethodNotAllowed",
            StatusCode::CONFLICT => "Conflict",
            StatusCode::PAYLOAD_TOO_LARGE => "PayloadTooLarge",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "UnsupportedMediaType",
            StatusCode::TOO_MANY_REQUESTS => "TooManyRequests",
            s if s.is_server_error() => "Internal",
            _ => "BadRequest",
        };
        Self::new(status, kind, message)
    }
}

impl From<tarn::Error> for ApiError {
    fn from(e: tarn::Error) -> Self {
        let kind = match serde_json::to_value(e.kind()) {
            Ok(Value::String(s)) => s,
            _ => format!("{:?}", e.kind()),
        };
        ApiError {
            status: StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            kind,
            message: e.message().to_string(),
            retry_after: e.retry_after(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "error": {"status": self.status.as_u16(), "kind": self.kind, "message": self.message}
        });
        let mut response = (self.status, Json(body)).into_response();
        if let Some(wait) = self.retry_after {
            // Whole seconds, rounded up: a client that waits this long is let in.
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
        }
        if self.status == StatusCode::PAYLOAD_TOO_LARGE {
            // The rest of the body was not read: the connection cannot carry another
            // request, and a client that reused it would see it cut (`Connection: close`
            // tells it not to).
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// Gives every error answer the JSON error body: the rejections of axum's own extractors
/// (a path segment that is not UTF-8, say) come as plain text.
async fn json_errors(req: Request, next: axum::middleware::Next) -> Response {
    let response = next.run(req).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let bytes = axum::body::to_bytes(response.into_body(), 64 << 10)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes).trim().to_string();
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        text
    };
    ApiError::of_status(status, message).into_response()
}

async fn no_route(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!("no endpoint {method} {}", uri.path()),
    )
}

async fn wrong_method(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        format!("{} does not take {method}", uri.path()),
    )
}

// ---------------------------------------------------------------------------------------
// Extractors

/// The caller's session: `Authorization: Bearer <key>` (401 when missing or unknown),
/// scoped to `X-Service-Org-Id` when that header is given.
struct Authed(Session);

/// The organization header.
const ORG_HEADER: &str = "x-service-org-id";

impl FromRequestParts<AppState> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> ApiResult<Self> {
        // Neither header is a list: two of either would leave whose key, or which
        // organization, to whichever the server happened to read.
        if parts.headers.get_all(header::AUTHORIZATION).iter().count() > 1 {
            return Err(ApiError::unauthorized("more than one Authorization header"));
        }
        if parts.headers.get_all(ORG_HEADER).iter().count() > 1 {
            return Err(ApiError::bad("more than one X-Service-Org-Id header"));
        }
        let auth = parts
            .headers
            .get(header::AUTHORIZATION)
            .ok_or_else(|| ApiError::unauthorized("missing Authorization: Bearer header"))?;
        let token = auth
            .to_str()
            .ok()
            .and_then(|v| {
                let (scheme, token) = v.trim().split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            })
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                ApiError::unauthorized("the Authorization header is not \"Bearer <API key>\"")
            })?;
        let session = state.tarn.connect(token).await?;
        Ok(Authed(match parts.headers.get(ORG_HEADER) {
            None => session,
            Some(v) => {
                let org = v
                    .to_str()
                    .map_err(|_| ApiError::bad("the X-Service-Org-Id header is not text"))?
                    .trim();
                if org.is_empty() {
                    session
                } else {
                    session.with_org(org)
                }
            }
        }))
    }
}

/// Memory the JSON bodies being handled at once may take once parsed, in MiB. A body
/// parses into far more than its bytes (a JSON array of numbers: 2 bytes an element
/// written, 32 as a `serde_json::Value`, then the statement's own copies), so a few
/// 60 MB bodies at once took the host past 6 GB; each request holds its estimate of
/// this budget until it has answered, and waits for it when others hold it.
const PARSE_BUDGET_MIB: u32 = 2048;

/// What a body of `len` bytes is counted as against [`PARSE_BUDGET_MIB`]: 48 times its
/// size (measured: a 62 MB array of numbers peaked at 3 GB), at least 1 MiB, at most
/// the whole budget (a body that large runs alone).
fn parse_estimate_mib(len: usize) -> u32 {
    let mib = (len as u64).saturating_mul(48).div_ceil(1 << 20);
    u32::try_from(mib)
        .unwrap_or(u32::MAX)
        .clamp(1, PARSE_BUDGET_MIB)
}

/// A JSON body, read whatever its content type says: 413 past the body limit, 400 for
/// anything that is not the expected object. The second field holds the body's share of
/// [`PARSE_BUDGET_MIB`] until the handler returns.
struct JsonBody<T>(T, tokio::sync::OwnedSemaphorePermit);

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> ApiResult<Self> {
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|e| ApiError::of_status(e.status(), e.body_text()))?;
        let held = state
            .parse_budget
            .clone()
            .acquire_many_owned(parse_estimate_mib(bytes.len()))
            .await
            .map_err(|_| {
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Unavailable",
                    "the server is shutting down",
                )
            })?;
        let parsed = serde_json::from_slice(&bytes);
        drop(bytes);
        parsed.map(|body| JsonBody(body, held)).map_err(|e| {
            // serde_json's parser takes at most 127 levels, counting the body's own
            // object and its `params` array: say so, with the limit a parameter meets.
            if e.to_string().starts_with("recursion limit exceeded") {
                ApiError::bad(format!(
                    "invalid JSON body: nested deeper than 127 levels (a parameter inside \
                     `params` may nest 125): {e}"
                ))
            } else {
                ApiError::bad(format!("invalid JSON body: {e}"))
            }
        })
    }
}

fn created<T: serde::Serialize>(value: T) -> (StatusCode, Json<T>) {
    (StatusCode::CREATED, Json(value))
}

// ---------------------------------------------------------------------------------------
// Health, user, organizations, members

async fn health(State(s): State<AppState>) -> ApiResult<Json<tarn::Status>> {
    Ok(Json(s.tarn.health().await?))
}

async fn ready(State(s): State<AppState>) -> ApiResult<Json<tarn::Status>> {
    Ok(Json(s.tarn.ready().await?))
}

async fn me(Authed(s): Authed) -> ApiResult<Json<tarn::User>> {
    Ok(Json(s.me().await?))
}

async fn organizations(Authed(s): Authed) -> ApiResult<Json<Vec<tarn::Organization>>> {
    Ok(Json(s.organizations().await?))
}

#[derive(Deserialize)]
struct IdNameRequest {
    id: String,
    name: String,
}

#[derive(Deserialize)]
struct NameRequest {
    name: Option<String>,
}

async fn create_organization(
    Authed(s): Authed,
    JsonBody(r, _held): JsonBody<IdNameRequest>,
) -> ApiResult<impl IntoResponse> {
    Ok(created(s.create_organization(&r.id, &r.name).await?))
}

async fn organization(
    Authed(s): Authed,
    Path(org): Path<String>,
) -> ApiResult<Json<tarn::OrganizationDetail>> {
    Ok(Json(s.organization(&org).await?))
}

/// `name` is optional here (the reference): without it the organization keeps its name
/// (renamed to itself, so the role is checked as for a rename) and `{id, name}` is
/// returned.
async fn update_organization(
    Authed(s): Authed,
    Path(org): Path<String>,
    JsonBody(r, _held): JsonBody<NameRequest>,
) -> ApiResult<Json<tarn::IdName>> {
    let name = match r.name {
        Some(name) => name,
        None => s.organization(&org).await?.organization.name,
    };
    Ok(Json(s.update_organization(&org, &name).await?))
}

async fn delete_organization(Authed(s): Authed, Path(org): Path<String>) -> ApiResult<StatusCode> {
    s.delete_organization(&org).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn members(Authed(s): Authed, Path(org): Path<String>) -> ApiResult<Json<tarn::MemberList>> {
    Ok(Json(s.members(&org).await?))
}

#[derive(Deserialize)]
struct AddMemberRequest {
    email: String,
    role: String,
}

#[derive(Deserialize)]
struct RoleRequest {
    role: String,
}

async fn add_member(
    Authed(s): Authed,
    Path(org): Path<String>,
    JsonBody(r, _held): JsonBody<AddMemberRequest>,
) -> ApiResult<impl IntoResponse> {
    Ok(created(s.add_member(&org, &r.email, &r.role).await?))
}

async fn update_member(
    Authed(s): Authed,
    Path((org, user)): Path<(String, String)>,
    JsonBody(r, _held): JsonBody<RoleRequest>,
) -> ApiResult<Json<tarn::MemberRole>> {
    Ok(Json(s.update_member(&org, &user, &r.role).await?))
}

async fn remove_member(
    Authed(s): Authed,
    Path((org, user)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    s.remove_member(&org, &user).await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---------------------------------------------------------------------------------------
// Workspaces and tables

async fn workspaces(Authed(s): Authed) -> ApiResult<Json<tarn::WorkspaceList>> {
    Ok(Json(s.workspaces().await?))
}

async fn workspace(
    Authed(s): Authed,
    Path(ws): Path<String>,
) -> ApiResult<Json<tarn::WorkspaceDetail>> {
    Ok(Json(s.workspace(&ws).await?))
}

async fn create_workspace(
    Authed(s): Authed,
    JsonBody(r, _held): JsonBody<IdNameRequest>,
) -> ApiResult<impl IntoResponse> {
    Ok(created(s.create_workspace(&r.id, &r.name).await?))
}

/// `name` is required (SPEC §1).
async fn update_workspace(
    Authed(s): Authed,
    Path(ws): Path<String>,
    JsonBody(r, _held): JsonBody<NameRequest>,
) -> ApiResult<Json<tarn::IdName>> {
    let name = r
        .name
        .ok_or_else(|| ApiError::bad("field \"name\" is required"))?;
    Ok(Json(s.update_workspace(&ws, &name).await?))
}

async fn delete_workspace(Authed(s): Authed, Path(ws): Path<String>) -> ApiResult<StatusCode> {
    s.delete_workspace(&ws).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn tables(
    Authed(s): Authed,
    Path(ws): Path<String>,
) -> ApiResult<Json<Vec<tarn::TableSummary>>> {
    Ok(Json(s.tables(&ws).await?))
}

async fn table(
    Authed(s): Authed,
    Path((ws, table)): Path<(String, String)>,
) -> ApiResult<Json<tarn::TableDetails>> {
    Ok(Json(s.table(&ws, &table).await?))
}

async fn table_named_query(
    Authed(s): Authed,
    Path(ws): Path<String>,
) -> ApiResult<Json<tarn::TableDetails>> {
    Ok(Json(s.table(&ws, "query").await?))
}

async fn drop_table(
    Authed(s): Authed,
    Path((ws, table)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    s.drop_table(&ws, &table).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn drop_table_named_query(
    Authed(s): Authed,
    Path(ws): Path<String>,
) -> ApiResult<StatusCode> {
    s.drop_table(&ws, "query").await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---------------------------------------------------------------------------------------
// SQL

#[derive(Deserialize)]
struct QueryRequest {
    query: String,
    #[serde(default)]
    params: Option<Vec<Value>>,
}

#[derive(Deserialize)]
struct BatchRequest {
    query: String,
    params_batch: Vec<Vec<Value>>,
}

async fn query(
    State(st): State<AppState>,
    Authed(s): Authed,
    Path(ws): Path<String>,
    JsonBody(r, _held): JsonBody<QueryRequest>,
) -> ApiResult<Response> {
    let params = r.params.unwrap_or_default();
    let run = async move { s.query(&ws, &r.query, &params).await };
    // The body stays charged to query_memory until it is written to the client.
    let body = st.statement(run).await?.into_json()?;
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}

async fn query_batch(
    State(st): State<AppState>,
    Authed(s): Authed,
    Path(ws): Path<String>,
    JsonBody(r, _held): JsonBody<BatchRequest>,
) -> ApiResult<Json<tarn::BatchResult>> {
    let run = async move { s.query_batch(&ws, &r.query, &r.params_batch).await };
    Ok(Json(st.statement(run).await?))
}

// ---------------------------------------------------------------------------------------
// Uploads

/// A multipart part as an [`AsyncRead`] for Tarn. A failure of the request body (the
/// client went away, the body limit was crossed) is remembered in `failed`, so the
/// answer carries the HTTP layer's status instead of the upload's read error.
fn part_reader<'a>(
    field: axum::extract::multipart::Field<'a>,
    failed: Arc<BodyFailure>,
) -> impl AsyncRead + Unpin + Send + 'a {
    StreamReader::new(field.map_err(move |e| {
        let err = std::io::Error::other(e.body_text());
        failed.set(ApiError::of_status(e.status(), e.body_text()));
        err
    }))
}

/// The first failure of a request body during an upload (a one-shot cell).
#[derive(Default)]
struct BodyFailure(std::sync::Mutex<Option<ApiError>>);

impl BodyFailure {
    fn set(&self, e: ApiError) {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        s.get_or_insert(e);
    }

    fn take(&self) -> Option<ApiError> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

fn multipart_error(e: axum::extract::multipart::MultipartError) -> ApiError {
    ApiError::of_status(e.status(), e.body_text())
}

fn multipart_rejection(e: axum::extract::multipart::MultipartRejection) -> ApiError {
    ApiError::of_status(e.status(), e.body_text())
}

/// `POST /workspaces/{ws}/tables`: multipart `file`, `filename`, `table_name` → 201
/// `{name, row_count, columns}`. When `table_name` and the file's name (the `filename`
/// part, else the file part's own filename) are known when `file` comes (as browsers and
/// most clients send form fields), the file streams straight into the table; otherwise
/// it is first spooled to an anonymous temporary file. Each of the three parts may come
/// once (400 for a second: which one was meant is not known); a `filename` part after a
/// file that streamed under another name is 400 too (the name chose the format).
async fn upload_table(
    Authed(s): Authed,
    Path(ws): Path<String>,
    mp: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> ApiResult<impl IntoResponse> {
    let mut mp = mp.map_err(multipart_rejection)?;
    let mut table_name: Option<String> = None;
    let mut filename: Option<String> = None;
    let mut spooled: Option<(tokio::fs::File, Option<String>)> = None;
    // The table made from a streamed file, and the name the file was read under.
    let mut uploaded: Option<(tarn::UploadedTable, String)> = None;
    let read = async {
        while let Some(field) = mp.next_field().await.map_err(multipart_error)? {
            match field.name() {
                Some("table_name") => {
                    once(&table_name, "table_name")?;
                    table_name = Some(small_text(field).await?);
                }
                Some("filename") => {
                    once(&filename, "filename")?;
                    let name = small_text(field).await?;
                    if let Some((_, used)) = &uploaded
                        && *used != name
                    {
                        return Err(ApiError::bad(format!(
                            "multipart field \"filename\" ({name:?}) comes after the file part, which was already read as {used:?}: send \"filename\" before \"file\""
                        )));
                    }
                    filename = Some(name);
                }
                Some("file") => {
                    if uploaded.is_some() || spooled.is_some() {
                        return Err(twice("file"));
                    }
                    // The format comes from the file's name, but a media type that is
                    // not one is refused here as on the files endpoint.
                    tarn::media_type_or_default(&part_media_type(&field)?)?;
                    let part_name = field.file_name().map(str::to_string);
                    match (&table_name, filename.clone().or(part_name.clone())) {
                        (Some(t), Some(name)) => {
                            let failed = Arc::new(BodyFailure::default());
                            let reader = part_reader(field, failed.clone());
                            let result = s.upload_table(&ws, t, &name, reader).await;
                            let done = result.map_err(|e| failed.take().unwrap_or(e.into()))?;
                            uploaded = Some((done, name));
                        }
                        _ => {
                            // Spooling costs disk: only for a caller who may upload here.
                            s.workspace(&ws).await?;
                            spooled = Some((spool(field).await?, part_name));
                        }
                    }
                }
                _ => drain(field).await?,
            }
        }
        Ok::<(), ApiError>(())
    }
    .await;
    if let Err(e) = read {
        // The rest of the body failed after the table was made (cut short, past the
        // limit, a part given twice): the request failed, so the table goes too.
        if let Some((done, _)) = &uploaded {
            let _ = s.drop_table(&ws, &done.name).await;
        }
        return Err(e);
    }
    if let Some((done, _)) = uploaded {
        return Ok(created(done));
    }
    let table_name =
        table_name.ok_or_else(|| ApiError::bad("multipart field \"table_name\" is required"))?;
    let (file, part_name) =
        spooled.ok_or_else(|| ApiError::bad("multipart field \"file\" is required"))?;
    let name = filename.or(part_name).ok_or_else(no_filename)?;
    Ok(created(
        s.upload_table(&ws, &table_name, &name, file).await?,
    ))
}

/// A part's `Content-Type` as sent (empty when there is none), for the check every
/// media type gets ([`tarn::media_type_or_default`], which `upload_file` makes itself).
/// The header itself, not the parser's reading, which drops a media type it cannot
/// parse: bytes the client labelled otherwise would be stored as octet-stream.
fn part_media_type(field: &axum::extract::multipart::Field<'_>) -> ApiResult<String> {
    let Some(v) = field.headers().get(header::CONTENT_TYPE) else {
        return Ok(String::new());
    };
    let v = v
        .to_str()
        .map_err(|_| ApiError::bad("the file part's Content-Type is not ASCII text"))?;
    // Sent, but blank: a label that names no media type is refused as a malformed one
    // is, not taken for "none" (which would store the bytes as octet-stream).
    if v.trim().is_empty() {
        return Err(ApiError::bad(
            "the file part's Content-Type is empty: send a media type (type/subtype) or \
             no Content-Type header",
        ));
    }
    Ok(v.to_string())
}

/// 400 unless a part that may come once (`name`) has not come yet (`seen`).
fn once<T>(seen: &Option<T>, name: &str) -> ApiResult<()> {
    match seen {
        Some(_) => Err(twice(name)),
        None => Ok(()),
    }
}

fn twice(name: &str) -> ApiError {
    ApiError::bad(format!(
        "multipart field \"{name}\" is given more than once"
    ))
}

/// Reads and ignores a part (parts of other names).
async fn drain(mut field: axum::extract::multipart::Field<'_>) -> ApiResult<()> {
    while field.chunk().await.map_err(multipart_error)?.is_some() {}
    Ok(())
}

/// The longest text field (`table_name`, `filename`) read into memory.
const MAX_TEXT_FIELD: usize = 4096;

/// A short text part, read up to [`MAX_TEXT_FIELD`] bytes (400 beyond: a name is never
/// that long, and the upload limit alone would let one fill memory).
async fn small_text(mut field: axum::extract::multipart::Field<'_>) -> ApiResult<String> {
    let name = field.name().unwrap_or_default().to_string();
    let mut bytes = Vec::new();
    while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
        if bytes.len() + chunk.len() > MAX_TEXT_FIELD {
            return Err(ApiError::bad(format!(
                "multipart field \"{name}\" is longer than {MAX_TEXT_FIELD} bytes"
            )));
        }
        bytes.extend_from_slice(&chunk);
    }
    String::from_utf8(bytes)
        .map_err(|_| ApiError::bad(format!("multipart field \"{name}\" is not UTF-8")))
}

fn no_filename() -> ApiError {
    ApiError::bad("multipart field \"filename\" is required (or a filename on the \"file\" part)")
}

/// Copies a part to an anonymous temporary file (gone when closed) and rewinds it.
async fn spool(field: axum::extract::multipart::Field<'_>) -> ApiResult<tokio::fs::File> {
    let internal = |e: std::io::Error| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Internal",
            format!("cannot spool the upload: {e}"),
        )
    };
    let mut file = tokio::fs::File::from_std(tempfile::tempfile().map_err(internal)?);
    let mut field = field;
    while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
        file.write_all(&chunk).await.map_err(internal)?;
    }
    file.flush().await.map_err(internal)?;
    file.seek(SeekFrom::Start(0)).await.map_err(internal)?;
    Ok(file)
}

/// `POST /workspaces/{ws}/files`: the `file` part (its filename and media type) → 201
/// with the file record. The part's own filename names the file; a `filename` part
/// before it stands in when the part has none. `file` and `filename` may come once
/// each (400 for a second). The part's `Content-Type` is checked as `upload_file`
/// checks every media type: one that is not `type/subtype[; name=value]…` is a 400,
/// not stored as `application/octet-stream`.
async fn upload_file(
    Authed(s): Authed,
    Path(ws): Path<String>,
    mp: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> ApiResult<impl IntoResponse> {
    let mut mp = mp.map_err(multipart_rejection)?;
    let mut filename: Option<String> = None;
    let mut stored: Option<tarn::FileInfo> = None;
    let read = async {
        while let Some(field) = mp.next_field().await.map_err(multipart_error)? {
            match field.name() {
                Some("filename") => {
                    once(&filename, "filename")?;
                    let name = small_text(field).await?;
                    if let Some(info) = &stored
                        && info.filename != name
                    {
                        return Err(ApiError::bad(format!(
                            "multipart field \"filename\" ({name:?}) comes after the file part, which was already stored as {:?}: send \"filename\" before \"file\"",
                            info.filename
                        )));
                    }
                    filename = Some(name);
                }
                Some("file") => {
                    once(&stored, "file")?;
                    let name = field
                        .file_name()
                        .map(str::to_string)
                        .or_else(|| filename.clone())
                        .ok_or_else(no_filename)?;
                    let media_type = part_media_type(&field)?;
                    let failed = Arc::new(BodyFailure::default());
                    let reader = part_reader(field, failed.clone());
                    let result = s.upload_file(&ws, &name, &media_type, reader).await;
                    stored = Some(result.map_err(|e| failed.take().unwrap_or(e.into()))?);
                }
                _ => drain(field).await?,
            }
        }
        Ok::<(), ApiError>(())
    }
    .await;
    if let Err(e) = read {
        // As for tables: a request that failed keeps no file.
        if let Some(info) = &stored {
            let _ = s.delete_file(&ws, &info.id).await;
        }
        return Err(e);
    }
    let info = stored.ok_or_else(|| ApiError::bad("multipart field \"file\" is required"))?;
    Ok(created(info))
}

// ---------------------------------------------------------------------------------------
// Files

/// `GET /workspaces/{ws}/files?limit=&offset=`. Each parameter may be given once: a
/// second `limit` is a 400, not silently the one that wins.
async fn files(
    Authed(s): Authed,
    Path(ws): Path<String>,
    Query(q): Query<Vec<(String, String)>>,
) -> ApiResult<Json<tarn::FileList>> {
    fn int<T: std::str::FromStr>(q: &[(String, String)], k: &str) -> ApiResult<Option<T>> {
        let mut given = q.iter().filter(|(name, _)| name == k).map(|(_, v)| v);
        let Some(v) = given.next() else {
            return Ok(None);
        };
        if given.next().is_some() {
            return Err(ApiError::bad(format!(
                "query parameter \"{k}\" is given more than once"
            )));
        }
        v.parse().map(Some).map_err(|_| {
            ApiError::bad(format!(
                "query parameter \"{k}\" must be a non-negative integer, not \"{v}\""
            ))
        })
    }
    let limit = int::<u32>(&q, "limit")?;
    let offset = int::<u64>(&q, "offset")?;
    Ok(Json(s.files(&ws, limit, offset).await?))
}

async fn file(
    Authed(s): Authed,
    Path((ws, id)): Path<(String, String)>,
) -> ApiResult<Json<tarn::FileInfo>> {
    Ok(Json(s.file(&ws, &id).await?))
}

async fn delete_file(
    Authed(s): Authed,
    Path((ws, id)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    s.delete_file(&ws, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET …/files/{id}/content`: the bytes, streamed, with the media type, a
/// `Content-Disposition` naming the file, and single byte ranges (`Range: bytes=a-b`,
/// `a-`, `-n`) answered with 206.
async fn file_content(
    Authed(s): Authed,
    Path((ws, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let mut content = s.file_content(&ws, &id).await?;
    let size = content.size_bytes;
    let mut ranges = headers.get_all(header::RANGE).iter();
    let range = match (ranges.next(), ranges.next()) {
        // Range is not a list field: two of them are not one valid specifier. And
        // without validators (ETag, Last-Modified) no `If-Range` can match, and RFC 9110
        // §13.1.5 then requires the Range to be ignored.
        (Some(_), Some(_)) => Range::Ignore,
        _ if headers.contains_key(header::IF_RANGE) => Range::Ignore,
        (Some(v), None) => parse_range(v, size),
        (None, _) => Range::Ignore,
    };
    let range = match range {
        Range::Ignore => None,
        Range::Unsatisfiable => {
            let mut r = ApiError::new(
                StatusCode::RANGE_NOT_SATISFIABLE,
                "RangeNotSatisfiable",
                format!("the file has {size} bytes"),
            )
            .into_response();
            r.headers_mut().insert(
                header::CONTENT_RANGE,
                header_value(&format!("bytes */{size}")),
            );
            return Ok(r);
        }
        Range::Bytes(a, b) => Some((a, b)),
    };
    let media_type = header_value(&content.media_type);
    let mut builder = Response::builder()
        .header(header::CONTENT_TYPE, media_type)
        .header(header::ACCEPT_RANGES, "bytes")
        .header(
            header::CONTENT_DISPOSITION,
            content_disposition(&content.filename),
        );
    let body = match range {
        None => {
            builder = builder
                .status(StatusCode::OK)
                .header(header::CONTENT_LENGTH, size);
            Body::from_stream(ReaderStream::new(content.reader))
        }
        Some((a, b)) => {
            content.reader.seek(SeekFrom::Start(a)).await.map_err(|e| {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "Internal", e.to_string())
            })?;
            builder = builder
                .status(StatusCode::PARTIAL_CONTENT)
                .header(header::CONTENT_LENGTH, b - a + 1)
                .header(header::CONTENT_RANGE, format!("bytes {a}-{b}/{size}"));
            Body::from_stream(ReaderStream::new(tokio::io::AsyncReadExt::take(
                content.reader,
                b - a + 1,
            )))
        }
    };
    builder
        .body(body)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "Internal", e.to_string()))
}

/// A `Range` header against a file of `size` bytes.
#[derive(Debug, PartialEq)]
enum Range {
    /// Not a single valid byte range (several ranges, another unit, a specifier that
    /// breaks RFC 9110's grammar, `first > last`): send it all, as RFC 9110 §14.2 has a
    /// server do with a Range it does not take.
    Ignore,
    /// Valid but outside the file (a first byte at or past its end, `-0`): 416.
    Unsatisfiable,
    /// First and last byte, inclusive.
    Bytes(u64, u64),
}

/// One `bytes=first-[last]` or `bytes=-suffix` (RFC 9110 §14.1.2): the unit is
/// case-insensitive, the positions are digits only (no sign, no spaces), and a range
/// whose last byte comes before its first is invalid, hence ignored (§14.1.1), unlike
/// one that starts past the end, which is valid and unsatisfiable (416).
fn parse_range(v: &HeaderValue, size: u64) -> Range {
    let Some((unit, spec)) = v.to_str().ok().and_then(|s| s.split_once('=')) else {
        return Range::Ignore;
    };
    if !unit.eq_ignore_ascii_case("bytes") || spec.contains(',') {
        return Range::Ignore;
    }
    let Some((a, b)) = spec.split_once('-') else {
        return Range::Ignore;
    };
    // A position too large for u64 is still a valid one: past the end of any file.
    let pos = |s: &str| {
        (!s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()))
            .then(|| s.parse::<u64>().unwrap_or(u64::MAX))
    };
    if a.is_empty() {
        // `-n`: the last n bytes; of an empty file, the whole (empty) file.
        return match pos(b) {
            None => Range::Ignore,
            Some(0) => Range::Unsatisfiable,
            Some(_) if size == 0 => Range::Ignore,
            Some(n) => Range::Bytes(size.saturating_sub(n), size - 1),
        };
    }
    let Some(first) = pos(a) else {
        return Range::Ignore;
    };
    let last = if b.is_empty() {
        u64::MAX
    } else {
        match pos(b) {
            Some(last) if last >= first => last,
            _ => return Range::Ignore,
        }
    };
    if first >= size {
        Range::Unsatisfiable
    } else {
        Range::Bytes(first, last.min(size - 1))
    }
}

fn header_value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s)
        .unwrap_or_else(|_| HeaderValue::from_static("application/octet-stream"))
}

/// `attachment; filename="…"` for plain ASCII names, else RFC 5987's `filename*=UTF-8''…`.
fn content_disposition(name: &str) -> HeaderValue {
    let plain = name
        .bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\');
    let value = if plain {
        format!("attachment; filename=\"{name}\"")
    } else {
        let mut enc = String::new();
        for b in name.bytes() {
            if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
                enc.push(b as char);
            } else {
                enc.push_str(&format!("%{b:02X}"));
            }
        }
        format!("attachment; filename*=UTF-8''{enc}")
    };
    HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static("attachment"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(s: &str, size: u64) -> Range {
        parse_range(&HeaderValue::from_str(s).expect("header"), size)
    }

    /// Small bodies take a sliver of the parse budget; one of ~45 MB or more takes all
    /// of it and runs alone.
    #[test]
    fn bodies_are_counted_against_the_parse_budget_by_size() {
        assert_eq!(parse_estimate_mib(0), 1);
        assert_eq!(parse_estimate_mib(1000), 1);
        assert_eq!(parse_estimate_mib(1 << 20), 48);
        assert_eq!(parse_estimate_mib(45 << 20), PARSE_BUDGET_MIB);
        assert_eq!(parse_estimate_mib(64 << 20), PARSE_BUDGET_MIB);
        assert_eq!(parse_estimate_mib(usize::MAX), PARSE_BUDGET_MIB);
    }

    #[test]
    fn ranges_follow_rfc_9110() {
        assert_eq!(range("bytes=0-9", 100), Range::Bytes(0, 9));
        assert_eq!(range("Bytes=0-9", 100), Range::Bytes(0, 9));
        assert_eq!(range("bytes=90-200", 100), Range::Bytes(90, 99));
        assert_eq!(range("bytes=90-", 100), Range::Bytes(90, 99));
        assert_eq!(range("bytes=-10", 100), Range::Bytes(90, 99));
        assert_eq!(range("bytes=-1000", 100), Range::Bytes(0, 99));
        assert_eq!(
            range("bytes=0-99999999999999999999999", 100),
            Range::Bytes(0, 99)
        );
        assert_eq!(range("bytes=100-", 100), Range::Unsatisfiable);
        assert_eq!(range("bytes=100-200", 100), Range::Unsatisfiable);
        assert_eq!(
            range("bytes=99999999999999999999999-", 100),
            Range::Unsatisfiable
        );
        assert_eq!(range("bytes=-0", 100), Range::Unsatisfiable);
        assert_eq!(range("bytes=0-0", 0), Range::Unsatisfiable);
        // Invalid: ignored (the whole file), never 416.
        assert_eq!(range("bytes=5-4", 100), Range::Ignore);
        assert_eq!(range("bytes=500-400", 100), Range::Ignore);
        assert_eq!(range("bytes=-5", 0), Range::Ignore);
        for bad in [
            "bytes=0-1,5-6",
            "items=0-1",
            "bytes=x-1",
            "bytes=+1-5",
            "bytes=1-+5",
            "bytes= 1-5",
            "bytes=1 -5",
            "bytes=-",
            "bytes=--5",
            "bytes=1-2-3",
            "bytes 1-5",
            "bytes=-1e3",
        ] {
            assert_eq!(range(bad, 100), Range::Ignore, "{bad}");
        }
    }

    #[test]
    fn content_disposition_quotes_or_encodes() {
        assert_eq!(
            content_disposition("a b.txt"),
            "attachment; filename=\"a b.txt\""
        );
        assert_eq!(
            content_disposition("été \"x\".txt"),
            "attachment; filename*=UTF-8''%C3%A9t%C3%A9%20%22x%22.txt"
        );
    }
}
