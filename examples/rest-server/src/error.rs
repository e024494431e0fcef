//! Error answers: `{"error": {"status", "kind", "message"}}`, from Tarn's errors
//! and from the HTTP layer's own.

use std::time::Duration;

use axum::Json;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

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
    pub(crate) fn new(status: StatusCode, kind: &str, message: impl Into<String>) -> Self {
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

    pub(crate) fn bad(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "BadRequest", message)
    }

    pub(crate) fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "Unauthorized", message)
    }

    /// An error of the HTTP layer (a body, a header, a path) with the status axum gave
    /// it, and the kind that status has.
    pub(crate) fn of_status(status: StatusCode, message: impl Into<String>) -> Self {
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

pub(crate) type ApiResult<T> = Result<T, ApiError>;

/// Gives every error answer the JSON error body: the rejections of axum's own extractors
/// (a path segment that is not UTF-8, say) come as plain text.
pub(crate) async fn json_errors(req: Request, next: axum::middleware::Next) -> Response {
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
    } else if let Some(param) = text
        .strip_prefix("Invalid URL: Invalid UTF-8 in `")
        .and_then(|r| r.strip_suffix('`'))
    {
        // axum's words for a path segment such as `%FF`, with its route's name for it.
        let what = match param {
            "ws" => "workspace id",
            "org_id" => "organization id",
            "user_id" => "user id",
            "table" => "table name",
            "id" => "file id",
            other => other,
        };
        format!("the {what} in the path is not UTF-8 once its %-escapes are decoded")
    } else {
        text
    };
    ApiError::of_status(status, message).into_response()
}

pub(crate) async fn no_route(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!("no endpoint {method} {}", uri.path()),
    )
}

pub(crate) async fn wrong_method(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        format!("{} does not take {method}", uri.path()),
    )
}
