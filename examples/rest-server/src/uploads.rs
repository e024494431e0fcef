//! Multipart uploads of tables and files, and stored files: their listing and their
//! content with `Range`.

use std::io::SeekFrom;
use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{Multipart, Path, Query};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::TryStreamExt;
use tokio::io::{AsyncRead, AsyncSeekExt, AsyncWriteExt};
use tokio_util::io::{ReaderStream, StreamReader};

use crate::error::{ApiError, ApiResult};
use crate::extract::{Authed, created};

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

/// A 400 unless the request's `Content-Type` is `multipart/form-data` with one
/// `boundary` parameter: the multipart parser spoke of a boundary for any other type
/// (`text/plain` too), and took the first of two boundaries.
fn check_form_type(headers: &axum::http::HeaderMap) -> ApiResult<()> {
    const WANT: &str = "expected Content-Type multipart/form-data with a boundary";
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Err(ApiError::bad(format!("{WANT}; the request has none")));
    };
    let Ok(value) = value.to_str() else {
        return Err(ApiError::bad(format!("{WANT}; the request's is not text")));
    };
    let mut parts = value.split(';');
    let essence = parts.next().unwrap_or_default().trim();
    if !essence.eq_ignore_ascii_case("multipart/form-data") {
        let shown: String = essence.chars().take(64).collect();
        return Err(ApiError::bad(format!("{WANT}, got {shown:?}")));
    }
    let boundaries = parts
        .filter(|p| {
            p.split_once('=')
                .is_some_and(|(k, _)| k.trim().eq_ignore_ascii_case("boundary"))
        })
        .count();
    match boundaries {
        1 => Ok(()),
        0 => Err(ApiError::bad(format!(
            "{WANT}; it has no boundary parameter"
        ))),
        _ => Err(ApiError::bad(format!(
            "{WANT}; it has {boundaries} boundary parameters, which one is meant is not known"
        ))),
    }
}

/// `POST /workspaces/{ws}/tables`: multipart `file`, `filename`, `table_name` → 201
/// `{name, row_count, columns}`. When `table_name` and the file's name (the `filename`
/// part, else the file part's own filename) are known when `file` comes (as browsers and
/// most clients send form fields), the file streams straight into the table; otherwise
/// it is first spooled to an anonymous temporary file. Each of the three parts may come
/// once (400 for a second: which one was meant is not known); a `filename` part after a
/// file that streamed under another name is 400 too (the name chose the format).
pub(crate) async fn upload_table(
    Authed(s): Authed,
    Path(ws): Path<String>,
    headers: axum::http::HeaderMap,
    mp: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> ApiResult<impl IntoResponse> {
    check_form_type(&headers)?;
    let mut mp = mp.map_err(multipart_rejection)?;
    let mut table_name: Option<String> = None;
    let mut filename: Option<String> = None;
    let mut spooled: Option<(tokio::fs::File, Option<String>, tarn::BoundWorkspace)> = None;
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
                            // The table is made later, in this workspace or nowhere (not
                            // in one created under the same id while the file spooled).
                            let bound = s.bind_workspace(&ws).await?;
                            spooled = Some((spool(field).await?, part_name, bound));
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
    let (file, part_name, bound) =
        spooled.ok_or_else(|| ApiError::bad("multipart field \"file\" is required"))?;
    let name = filename.or(part_name).ok_or_else(no_filename)?;
    Ok(created(bound.upload_table(&table_name, &name, file).await?))
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
pub(crate) async fn upload_file(
    Authed(s): Authed,
    Path(ws): Path<String>,
    headers: axum::http::HeaderMap,
    mp: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> ApiResult<impl IntoResponse> {
    check_form_type(&headers)?;
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
pub(crate) async fn files(
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

pub(crate) async fn file(
    Authed(s): Authed,
    Path((ws, id)): Path<(String, String)>,
) -> ApiResult<Json<tarn::FileInfo>> {
    Ok(Json(s.file(&ws, &id).await?))
}

pub(crate) async fn delete_file(
    Authed(s): Authed,
    Path((ws, id)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    s.delete_file(&ws, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET …/files/{id}/content`: the bytes, streamed, with the media type, a
/// `Content-Disposition` naming the file, and single byte ranges (`Range: bytes=a-b`,
/// `a-`, `-n`) answered with 206.
pub(crate) async fn file_content(
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
    if !unit.eq_ignore_ascii_case("bytes") {
        return Range::Ignore;
    }
    // RFC 9110's list rule (§5.6.1): empty elements are allowed, with optional white
    // space beside each comma, so `bytes=1-2,` and `bytes=, 1-2` are one range.
    let parts: Vec<&str> = spec.split(',').collect();
    let last_part = parts.len() - 1;
    let ows: &[char] = &[' ', '\t'];
    let mut elements = parts.iter().enumerate().filter_map(|(i, p)| {
        let p = if i > 0 { p.trim_start_matches(ows) } else { p };
        let p = if i < last_part {
            p.trim_end_matches(ows)
        } else {
            p
        };
        (!p.is_empty()).then_some(p)
    });
    let (Some(spec), None) = (elements.next(), elements.next()) else {
        return Range::Ignore;
    };
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
        // Empty list elements, with white space beside their commas: one range.
        assert_eq!(range("bytes=1-2,", 100), Range::Bytes(1, 2));
        assert_eq!(range("bytes=,1-2", 100), Range::Bytes(1, 2));
        assert_eq!(range("bytes=, 1-2 ,,", 100), Range::Bytes(1, 2));
        assert_eq!(range("bytes=,", 100), Range::Ignore);
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
