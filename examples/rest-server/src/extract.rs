//! The extractors: the caller's session from its key and organization header, and JSON
//! bodies held to a shared parse budget.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::{StatusCode, header, request::Parts};
use serde::de::DeserializeOwned;
use tarn::Session;

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// The caller's session: `Authorization: Bearer <key>` (401 when missing or unknown),
/// scoped to `X-Service-Org-Id` when that header is given.
pub(crate) struct Authed(pub(crate) Session);

/// The organization header.
pub(crate) const ORG_HEADER: &str = "x-service-org-id";

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
pub(crate) const PARSE_BUDGET_MIB: u32 = 2048;

/// What a body of `len` bytes holding `containers` arrays and objects is counted as
/// against [`PARSE_BUDGET_MIB`]: 48 times its size (measured: a 62 MB array of numbers
/// peaked at 3 GB) and [`CONTAINER_BYTES`] for each array or object, at least 1 MiB, at
/// most the whole budget (a body that large runs alone).
pub(crate) fn parse_estimate_mib(len: usize, containers: usize) -> u32 {
    let bytes = (len as u64)
        .saturating_mul(48)
        .saturating_add((containers as u64).saturating_mul(CONTAINER_BYTES));
    u32::try_from(bytes.div_ceil(1 << 20))
        .unwrap_or(u32::MAX)
        .clamp(1, PARSE_BUDGET_MIB)
}

/// What one array or object of a parameter costs once parsed and bound: a JSON value,
/// its vector, and the statement's expression for it (measured: 5,000,000 `[0]` in a
/// 20 MB body peaked at 2 GB, 100 times the body).
pub(crate) const CONTAINER_BYTES: u64 = 400;

/// The most arrays and objects one body may hold: together they would take half the
/// parse budget (a body of millions of tiny nested arrays had taken a host to 5.8 GB).
pub(crate) const MAX_CONTAINERS: usize =
    ((PARSE_BUDGET_MIB as u64) << 19) as usize / CONTAINER_BYTES as usize;

/// The arrays and objects a JSON body opens: its `[` and `{` outside strings (a text
/// parameter full of brackets, such as array text `{{1},{2}}` or JSON text for a
/// `jsonb` cast, is one string, not millions of containers). In a body that is not
/// JSON the count is whatever it is; the parse refuses the body anyway.
pub(crate) fn containers(body: &[u8]) -> usize {
    let (mut n, mut in_string, mut escaped) = (0, false, false);
    for &b in body {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b'[' | b'{' => n += 1,
                _ => {}
            }
        }
    }
    n
}

/// A JSON body, read whatever its content type says: 413 past the body limit, 400 for
/// anything that is not the expected object. The second field holds the body's share of
/// [`PARSE_BUDGET_MIB`] until the handler returns.
pub(crate) struct JsonBody<T>(pub(crate) T, pub(crate) tokio::sync::OwnedSemaphorePermit);

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> ApiResult<Self> {
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|e| ApiError::of_status(e.status(), e.body_text()))?;
        let nested = containers(&bytes);
        if nested > MAX_CONTAINERS {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "PayloadTooLarge",
                format!(
                    "the JSON body holds {nested} arrays and objects, more than the \
                     {MAX_CONTAINERS} one body may (each costs hundreds of bytes once \
                     parsed); send vectors flat or in several requests"
                ),
            ));
        }
        let held = state
            .parse_budget
            .clone()
            .acquire_many_owned(parse_estimate_mib(bytes.len(), nested))
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

pub(crate) fn created<T: serde::Serialize>(value: T) -> (StatusCode, Json<T>) {
    (StatusCode::CREATED, Json(value))
}

/// RFC 9112 §3.2: an HTTP/1.1 request without a `Host` header, and any request with more
/// than one, is a 400 before anything else is looked at (HTTP/1.0 may leave it out; an
/// HTTP/2 request names its authority in the request line instead).
pub(crate) async fn one_host(
    req: Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let hosts = req.headers().get_all(header::HOST).iter().count();
    if hosts > 1 {
        return ApiError::bad("more than one Host header").into_response();
    }
    if hosts == 0 && req.version() == axum::http::Version::HTTP_11 {
        return ApiError::bad("an HTTP/1.1 request needs a Host header").into_response();
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Small bodies take a sliver of the parse budget; one of ~45 MB or more takes all
    /// of it and runs alone.
    #[test]
    fn bodies_are_counted_against_the_parse_budget_by_size() {
        assert_eq!(parse_estimate_mib(0, 0), 1);
        assert_eq!(parse_estimate_mib(1000, 1), 1);
        assert_eq!(parse_estimate_mib(1 << 20, 0), 48);
        assert_eq!(parse_estimate_mib(45 << 20, 1), PARSE_BUDGET_MIB);
        assert_eq!(parse_estimate_mib(64 << 20, 1), PARSE_BUDGET_MIB);
        assert_eq!(parse_estimate_mib(usize::MAX, 0), PARSE_BUDGET_MIB);
        // Nested arrays cost far more than their text.
        assert_eq!(parse_estimate_mib(4 << 20, 1_000_000), 192 + 382);
        assert_eq!(MAX_CONTAINERS, 2_684_354);
        // Brackets in strings are text (escaped quotes and backslashes kept apart).
        assert_eq!(containers(br#"{"params":[[1],[2],"[\"{\\"],"q":"{{"}"#), 4);
        assert_eq!(
            containers(format!(r#"["{}"]"#, "[".repeat(1000)).as_bytes()),
            1
        );
    }
}
