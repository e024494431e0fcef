//! Workspace files (SPEC §7): uploads streamed to a blob of the storage layer (hashed
//! and size-checked on the way, fsynced and renamed into place before the record is
//! committed), listing, records, downloads as an async reader, deletion.

use std::io::SeekFrom;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use sha2::{Digest, Sha256};
use tarn_catalog::{CatalogOp, FileRecord};
use tarn_storage::{BlobReader, BlobSource, BlobWriter, Database, Op};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncSeek, ReadBuf};

use crate::access::{Locked, Operation, check_same_workspace, workspace_identity};
use crate::{Error, ErrorKind, FileInfo, FileList, Result, Session};

/// Files listed per page when the caller gives no limit.
pub const DEFAULT_FILES_LIMIT: u32 = 100;
/// The largest page of files.
pub const MAX_FILES_LIMIT: u32 = 1000;

/// Bytes read from the caller's reader per write: with the chunk being written while
/// the next is read, memory stays at 2 MiB per upload whatever the file's size.
const CHUNK: usize = 1 << 20;

/// A file's bytes and media type, from [`Session::file_content`]. `reader` reads the
/// bytes as they were uploaded; it can seek (to serve ranges), and keeps reading
/// them even if the file is deleted meanwhile.
#[derive(Debug)]
pub struct FileContent {
    /// The file's name (as in its record), for a download's `Content-Disposition`.
    pub filename: String,
    /// The media type the file was uploaded with.
    pub media_type: String,
    /// Length of the bytes.
    pub size_bytes: u64,
    /// The bytes.
    pub reader: FileReader,
}

/// An async reader of a file's bytes ([`AsyncRead`] + [`AsyncSeek`]).
///
/// Bytes stored on disk are read in 1 MiB blocks on the blocking pool, the next block
/// while the current one is consumed, and each block is checked against its CRC-32
/// before any of it is returned: a damaged block fails the read with
/// [`std::io::ErrorKind::InvalidData`] and a message naming the file, never with data.
#[derive(Debug)]
pub struct FileReader(ReaderInner);

#[derive(Debug)]
enum ReaderInner {
    Disk(DiskReader),
    Memory(std::io::Cursor<Arc<[u8]>>),
}

type BlockRead = tokio::task::JoinHandle<std::result::Result<(u64, Vec<u8>), String>>;

#[derive(Debug)]
struct DiskReader {
    blob: Arc<BlobReader>,
    pos: u64,
    /// The block at hand (its number and bytes).
    block: Option<(u64, Vec<u8>)>,
    /// A block being read (its number, and the task).
    reading: Option<(u64, BlockRead)>,
}

impl DiskReader {
    fn start(&mut self, k: u64) {
        let blob = self.blob.clone();
        self.reading = Some((
            k,
            tokio::task::spawn_blocking(move || {
                blob.read_block(k)
                    .map(|b| (k, b))
                    .map_err(|e| e.to_string())
            }),
        ));
    }

    fn poll_read(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let block_size = tarn_storage::BLOB_BLOCK;
        loop {
            if self.pos >= self.blob.len() || buf.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            let k = self.pos / block_size;
            if let Some((have, bytes)) = &self.block
                && *have == k
            {
                let at = (self.pos - k * block_size) as usize;
                let n = buf.remaining().min(bytes.len() - at);
                buf.put_slice(&bytes[at..at + n]);
                self.pos += n as u64;
                return Poll::Ready(Ok(()));
            }
            // A read of another block (before a seek) is not waited for.
            if self.reading.as_ref().is_none_or(|(r, _)| *r != k) {
                self.start(k);
            }
            let Some((_, task)) = self.reading.as_mut() else {
                continue;
            };
            let done = std::task::ready!(Pin::new(task).poll(cx));
            self.reading = None;
            let (k, bytes) = done
                .map_err(|e| std::io::Error::other(format!("reading a file failed: {e}")))?
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
            self.block = Some((k, bytes));
            // Read ahead: the next block is on its way while this one is consumed.
            if (k + 1) * block_size < self.blob.len() {
                self.start(k + 1);
            }
        }
    }
}

impl AsyncRead for FileReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match &mut self.get_mut().0 {
            ReaderInner::Disk(d) => d.poll_read(cx, buf),
            ReaderInner::Memory(c) => Pin::new(c).poll_read(cx, buf),
        }
    }
}

impl AsyncSeek for FileReader {
    fn start_seek(self: Pin<&mut Self>, position: SeekFrom) -> std::io::Result<()> {
        match &mut self.get_mut().0 {
            ReaderInner::Disk(d) => {
                let to = match position {
                    SeekFrom::Start(n) => Some(n),
                    SeekFrom::End(delta) => d.blob.len().checked_add_signed(delta),
                    SeekFrom::Current(delta) => d.pos.checked_add_signed(delta),
                };
                d.pos = to.ok_or_else(|| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        "invalid seek to a negative or overflowing position",
                    )
                })?;
                Ok(())
            }
            ReaderInner::Memory(c) => Pin::new(c).start_seek(position),
        }
    }

    fn poll_complete(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<u64>> {
        match &mut self.get_mut().0 {
            ReaderInner::Disk(d) => Poll::Ready(Ok(d.pos)),
            ReaderInner::Memory(c) => Pin::new(c).poll_complete(cx),
        }
    }
}

/// The next chunk (up to 1 MiB; empty at the end) of an upload `read` bytes into:
/// read from the caller's reader, counted against [`crate::Options::max_file_bytes`]
/// (a 400 as soon as it is passed), and refused once the database is closed (its
/// directory may be another process's by then).
pub(crate) async fn next_chunk<R: AsyncRead + Unpin>(
    tarn: &crate::Tarn,
    reader: &mut R,
    read: &mut u64,
) -> Result<Vec<u8>> {
    let limit = tarn.inner.options.max_file_bytes;
    let mut chunk = Vec::with_capacity(CHUNK);
    reader
        .take(CHUNK as u64)
        .read_to_end(&mut chunk)
        .await
        .map_err(|e| Error::bad(format!("reading the upload failed: {e}")))?;
    *read += chunk.len() as u64;
    if *read > limit {
        return Err(Error::bad(format!(
            "file exceeds the limit of {limit} bytes (limit max_file_bytes)"
        )));
    }
    tarn.check_open()?;
    Ok(chunk)
}

pub(crate) fn join_error(e: tokio::task::JoinError) -> Error {
    // Cancelled: the runtime is shutting down and the upload never committed.
    if e.is_cancelled() {
        return Error::new(
            ErrorKind::Unavailable,
            "the server is shutting down: the upload was stopped and nothing was kept",
        );
    }
    Error::new(ErrorKind::Internal, format!("upload task failed: {e}"))
}

/// Removes a finished blob whose record was never committed (the upload failed, or
/// its future was dropped, between the blob's rename and the commit).
struct Uncommitted {
    db: Arc<Database>,
    id: Option<String>,
}

impl Drop for Uncommitted {
    fn drop(&mut self) {
        if let Some(id) = self.id.take()
            && let Err(e) = self.db.blobs().discard(&id)
        {
            tracing::warn!("uncommitted blob {id} not removed (the next open will): {e}");
        }
    }
}

fn file_info(f: &FileRecord) -> FileInfo {
    FileInfo {
        id: f.id.clone(),
        workspace_id: f.workspace_id.clone(),
        filename: f.filename.clone(),
        media_type: f.media_type.clone(),
        size_bytes: f.size_bytes,
        sha256: f.sha256.clone(),
        created_at: f.created_at.iso(),
    }
}

fn file_not_found(id: &str) -> Error {
    Error::not_found(format!("file {} does not exist", tarn_catalog::shown(id)))
}

/// A file name as uploads take it: the last component a browser or `curl` sends,
/// 1–255 bytes, no path separators, no control characters, not `.` or `..`.
fn check_filename(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 255
        && name != "."
        && name != ".."
        && !name
            .chars()
            .any(|c| c == '/' || c == '\\' || tarn_catalog::is_hidden_control(c));
    if ok {
        Ok(())
    } else {
        Err(Error::bad(format!(
            "invalid file name {}: use 1-255 bytes without '/', '\\', control or bidirectional control characters",
            tarn_catalog::shown(name)
        )))
    }
}

/// A media type as uploads take it: `type/subtype` and optional `; name=value`
/// parameters (RFC 9110 §8.3.1: tokens, the value a token or a quoted string), at most
/// 255 bytes; empty means `application/octet-stream`. The same check serves every
/// caller (the CLI's `--media-type`, the REST host's part `Content-Type` on files and on
/// table uploads), so what one refuses the others refuse too.
pub fn media_type_or_default(media_type: &str) -> Result<String> {
    let m = media_type.trim();
    if m.is_empty() {
        return Ok("application/octet-stream".into());
    }
    if m.len() > 255 {
        // Quoted only in part: the value may be as long as the header the host allows.
        let cut: String = m.chars().take(40).collect();
        return Err(Error::bad(format!(
            "media type too long: {} bytes, past the limit of 255 (starts {cut:?}…)",
            m.len()
        )));
    }
    if valid_media_type(m) {
        Ok(m.to_string())
    } else {
        Err(Error::bad(format!(
            "invalid media type {media_type:?}: expected type/subtype[; name=value]…, such as text/plain; charset=utf-8"
        )))
    }
}

/// RFC 9110's `media-type = type "/" subtype parameters`, where `parameters = *( OWS ";"
/// OWS [ parameter ] )` and `parameter = token "=" ( token / quoted-string )`.
fn valid_media_type(m: &str) -> bool {
    fn token(s: &str) -> bool {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    }
    fn quoted(s: &str) -> bool {
        let Some(inner) = s.strip_prefix('"').and_then(|s| s.strip_suffix('"')) else {
            return false;
        };
        let mut bytes = inner.bytes();
        while let Some(b) = bytes.next() {
            let ok = match b {
                // A quoted-pair: any visible character, space or tab after the backslash.
                b'\\' => bytes
                    .next()
                    .is_some_and(|c| c == b'\t' || (0x20..0x7f).contains(&c)),
                b'"' => false,
                b => b == b'\t' || (0x20..0x7f).contains(&b),
            };
            if !ok {
                return false;
            }
        }
        true
    }
    // Parameters are split at `;` outside quoted strings.
    let mut parts = Vec::new();
    let (mut start, mut in_quotes, mut escaped) = (0, false, false);
    for (i, b) in m.bytes().enumerate() {
        match b {
            _ if escaped => escaped = false,
            b'\\' if in_quotes => escaped = true,
            b'"' => in_quotes = !in_quotes,
            b';' if !in_quotes => {
                parts.push(&m[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&m[start..]);
    fn trim(s: &str) -> &str {
        s.trim_matches([' ', '\t'])
    }
    // The caller trimmed `m`; OWS may come before the first `;`.
    let essence_ok = trim(parts[0])
        .split_once('/')
        .is_some_and(|(t, s)| token(t) && token(s));
    essence_ok
        && parts[1..].iter().all(|p| {
            let p = trim(p);
            p.is_empty()
                || p.split_once('=')
                    .is_some_and(|(name, value)| token(name) && (token(value) || quoted(value)))
        })
}

impl Session {
    /// Uploads a file to workspace `ws`: the bytes are read from `reader` as a stream
    /// (memory stays at a few MiB whatever the size), hashed, and written durably
    /// before the record is committed; `media_type` empty means
    /// `application/octet-stream`. A file larger than [`crate::Options::max_file_bytes`]
    /// is a 400 (found while streaming; nothing is kept). Dropping the returned future
    /// keeps nothing either, unless the record was already being committed.
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// # let tarn = tarn::Tarn::in_memory().await?;
    /// # let user = tarn.create_user("ada@example.com", "Ada").await?;
    /// # let key = tarn.create_api_key(&user.id, "laptop").await?;
    /// # let session = tarn.connect(&key.secret).await?;
    /// # session.create_organization("acme", "Acme").await?;
    /// # let acme = session.with_org("acme");
    /// # acme.create_workspace("docs", "Docs").await?;
    /// use tokio::io::AsyncReadExt;
    /// let f = acme.upload_file("docs", "notes.txt", "text/plain", &b"hello"[..]).await?;
    /// assert_eq!(f.size_bytes, 5);
    /// let mut c = acme.file_content("docs", &f.id).await?;
    /// let mut bytes = Vec::new();
    /// c.reader.read_to_end(&mut bytes).await.expect("read");
    /// assert_eq!((c.media_type.as_str(), &bytes[..]), ("text/plain", &b"hello"[..]));
    /// assert_eq!(acme.files("docs", None, None).await?.total_count, 1);
    /// acme.delete_file("docs", &f.id).await?;
    /// # Ok::<(), tarn::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn upload_file<R>(
        &self,
        ws: &str,
        filename: &str,
        media_type: &str,
        mut reader: R,
    ) -> Result<FileInfo>
    where
        R: AsyncRead + Unpin + Send,
    {
        let access = self.authorize(Operation::UploadFile, ws)?;
        check_filename(filename)?;
        let media_type = media_type_or_default(media_type)?;
        // The file is stored in this workspace or not at all (not in one created under
        // the same id after this one is deleted, while the bytes stream).
        let bound = workspace_identity(&access.catalog, access.org(), ws)?;
        // And under the membership it started in (a member removed and added again
        // while the bytes streamed loses it).
        let membership = self.watch_membership(access.org());
        let id = uuid::Uuid::new_v4().to_string();
        let db = self.tarn.db().clone();

        // Each chunk is hashed and written on the blocking pool while the caller's
        // reader is polled for the next one: one task in flight at most (the first
        // creates the blob), and no thread held while a slow client sends nothing.
        // Dropping this future drops the task, whose output (the writer) then removes
        // what was written.
        let mut pending: tokio::task::JoinHandle<Result<(BlobWriter, Sha256)>> = {
            let (db, id) = (db.clone(), id.clone());
            tokio::task::spawn_blocking(move || Ok((db.blobs().create(&id)?, Sha256::new())))
        };
        let mut size_bytes = 0u64;
        loop {
            let chunk = next_chunk(&self.tarn, &mut reader, &mut size_bytes).await?;
            if chunk.is_empty() {
                break;
            }
            let last = chunk.len() < CHUNK;
            let (mut blob, mut hash) = pending.await.map_err(join_error)??;
            pending = tokio::task::spawn_blocking(move || {
                hash.update(&chunk);
                blob.write(&chunk)?;
                Ok((blob, hash))
            });
            if last {
                break;
            }
        }
        let (blob, hash) = pending.await.map_err(join_error)??;
        self.tarn.check_open()?;
        // The guard comes back with the finished blob: should this future be dropped
        // while the blob is being finished, tokio drops the task's output, and the
        // guard removes the blob.
        let mut uncommitted = {
            let guard = Uncommitted {
                db: db.clone(),
                id: Some(id.clone()),
            };
            tokio::task::spawn_blocking(move || blob.finish().map(|()| guard))
                .await
                .map_err(join_error)??
        };
        let sha256 = hex(&hash.finalize());

        // The workspace may have gone, or been replaced by a new one of the same id (or
        // the key been revoked) while the bytes streamed: checked again under the DDL
        // lock, where the record commits.
        let Locked { ddl, org, catalog } = self.lock_and_recheck(Operation::UploadFile, ws).await?;
        membership.check()?;
        check_same_workspace(&catalog, &org, ws, &bound)?;
        let record = FileRecord {
            id: id.clone(),
            org_id: org,
            workspace_id: ws.to_string(),
            filename: filename.to_string(),
            media_type,
            size_bytes,
            sha256,
            created_at: tarn_catalog::Timestamp::now(),
            seq: 0,
        };
        let info = file_info(&record);
        // From here the commit may land even if this future is dropped: the blob
        // must stay (an orphan, should the commit fail, goes at the next open).
        uncommitted.id = None;
        let committed = self
            .tarn
            .commit(vec![Op::Catalog(CatalogOp::PutFile(record))], vec![ddl])
            .await;
        if let Err(e) = committed {
            // A refusal (4xx) comes before the log; a failure (5xx) may come after the
            // record reached it, and the record may then replay at the next open: the
            // blob stays, and that open's sweep removes it if the record did not land.
            if e.status() < 500 {
                uncommitted.id = Some(id);
            }
            return Err(e);
        }
        Ok(info)
    }

    /// A page of workspace `ws`'s files, newest first: `limit` (default 100, at most
    /// 1000; 0 gives only the count) after skipping `offset` (default 0).
    pub async fn files(
        &self,
        ws: &str,
        limit: Option<u32>,
        offset: Option<u64>,
    ) -> Result<FileList> {
        let access = self.authorize(Operation::Files, ws)?;
        let limit = limit.unwrap_or(DEFAULT_FILES_LIMIT);
        if limit > MAX_FILES_LIMIT {
            return Err(Error::bad(format!(
                "limit {limit} exceeds the maximum of {MAX_FILES_LIMIT} files per page"
            )));
        }
        let offset = offset.unwrap_or(0);
        let (page, total) = access.catalog.files_of(
            access.org(),
            ws,
            limit as usize,
            usize::try_from(offset).unwrap_or(usize::MAX),
        );
        Ok(FileList {
            data: page.into_iter().map(file_info).collect(),
            total_count: total as u64,
            limit,
            offset,
        })
    }

    /// One file's record (404 when workspace `ws` has no file `id`).
    pub async fn file(&self, ws: &str, id: &str) -> Result<FileInfo> {
        let access = self.authorize(Operation::File, ws)?;
        access
            .catalog
            .file(access.org(), ws, id)
            .map(file_info)
            .ok_or_else(|| file_not_found(id))
    }

    /// One file's bytes, as an async reader, with its media type.
    pub async fn file_content(&self, ws: &str, id: &str) -> Result<FileContent> {
        let access = self.authorize(Operation::FileContent, ws)?;
        let record = access
            .catalog
            .file(access.org(), ws, id)
            .ok_or_else(|| file_not_found(id))?
            .clone();
        let db = self.tarn.db().clone();
        let blob_id = record.id.clone();
        let source = tokio::task::spawn_blocking(move || db.blobs().open(&blob_id))
            .await
            .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))??;
        let reader = match source {
            Some(BlobSource::File(blob)) => {
                if blob.len() != record.size_bytes {
                    return Err(Error::new(
                        ErrorKind::Internal,
                        format!(
                            "corruption detected in the bytes of file \"{id}\": {} bytes stored, {} recorded",
                            blob.len(),
                            record.size_bytes
                        ),
                    ));
                }
                ReaderInner::Disk(DiskReader {
                    blob: Arc::new(blob),
                    pos: 0,
                    block: None,
                    reading: None,
                })
            }
            Some(BlobSource::Memory(bytes)) => ReaderInner::Memory(std::io::Cursor::new(bytes)),
            // Deleted since the record was read: as if the delete came first.
            None if self.tarn.catalog().file(access.org(), ws, id).is_none() => {
                return Err(file_not_found(id));
            }
            // A committed record always has its blob (it is durable before the commit
            // and removed only after a durable delete): its absence is damage.
            None => {
                return Err(Error::new(
                    ErrorKind::Internal,
                    format!("the bytes of file \"{id}\" are missing from the database directory"),
                ));
            }
        };
        Ok(FileContent {
            filename: record.filename,
            media_type: record.media_type,
            size_bytes: record.size_bytes,
            reader: FileReader(reader),
        })
    }

    /// Deletes a file: its record at once, its bytes once the delete is durable.
    pub async fn delete_file(&self, ws: &str, id: &str) -> Result<()> {
        self.authorize(Operation::DeleteFile, ws)?;
        let Locked { ddl, catalog, org } = self.lock_and_recheck(Operation::DeleteFile, ws).await?;
        if catalog.file(&org, ws, id).is_none() {
            return Err(file_not_found(id));
        }
        self.tarn
            .commit(
                vec![Op::Catalog(CatalogOp::DeleteFile {
                    org_id: org,
                    workspace_id: ws.to_string(),
                    file_id: id.to_string(),
                })],
                vec![ddl],
            )
            .await
    }
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(2 * bytes.len());
    for b in bytes {
        s.push(HEX[usize::from(b >> 4)] as char);
        s.push(HEX[usize::from(b & 15)] as char);
    }
    s
}
