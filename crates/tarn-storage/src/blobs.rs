//! The bytes of workspace files (SPEC §7): one file per blob in `files/`, named by the
//! file's id (a UUID Tarn chose), or a map in memory for an in-memory database. The
//! catalog holds the records; this module only keeps the bytes, and the order of the
//! two is what makes them agree after a crash:
//!
//! - an upload writes `files/<id>.tmp`, fsyncs it, renames it to `files/<id>` and fsyncs
//!   the directory **before** the record is committed, so a committed record always has
//!   its blob (also across a power cut);
//! - a delete commits first and removes the blob once the commit is durable (see
//!   `Inner::remove_blobs`), so a record never outlives its bytes either;
//! - whatever a crash leaves behind (a `.tmp`, or a renamed blob whose record never
//!   committed) names no record: [`Blobs::sweep`] removes it when the database opens,
//!   before any upload can start.
//!
//! A blob file is the bytes, then a trailer: the CRC-32 of each 1 MiB block of the
//! bytes, the bytes' length, the CRC-32 of those two, and a magic number. A reader
//! ([`BlobReader`]) checks the trailer when it opens and each block before it hands out
//! any of its bytes, so damage on disk is an error naming the file, never data (SPEC
//! §3), and any range can be read (and checked) without reading the rest.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::{FileBackend, WriteFile};
use crate::{Error, Result};

/// The directory of blobs inside the database directory.
pub const FILES_DIR: &str = "files";

/// Suffix of a blob still being written.
const TMP_SUFFIX: &str = ".tmp";

/// Bytes per checksummed block.
pub const BLOB_BLOCK: u64 = 1 << 20;

/// The last bytes of a blob file.
const MAGIC: &[u8; 8] = b"TARNBLB1";

/// Length (u64), CRC of the block table and length (u32), magic.
///
/// ```text
/// bytes | crc32 of each 1 MiB block u32 … | footer: length u64 (F_LEN)
///       | crc32(block crcs, length) u32 (F_CRC) | b"TARNBLB1" (F_MAGIC)
/// ```
const FOOTER: u64 = 8 + 4 + 8;
const F_LEN: usize = 0;
const F_CRC: usize = 8;
const F_MAGIC: usize = 12;

/// Where blobs live. Cheap to clone; clones share the blobs.
#[derive(Clone)]
pub struct Blobs(Arc<Shared>);

struct Shared {
    dir: Option<PathBuf>,
    backend: Arc<dyn FileBackend>,
    /// The blobs of an in-memory database.
    memory: Mutex<HashMap<String, Arc<[u8]>>>,
}

impl std::fmt::Debug for Blobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blobs").field("dir", &self.0.dir).finish()
    }
}

/// A blob's bytes, to read: a file opened before any delete (on Unix it stays
/// readable after one), or the bytes of an in-memory blob.
#[derive(Debug)]
pub enum BlobSource {
    /// The blob's file.
    File(BlobReader),
    /// An in-memory blob.
    Memory(Arc<[u8]>),
}

/// A blob being written. Nothing is visible under the blob's name until
/// [`BlobWriter::finish`]; dropping the writer before that removes what was written.
pub struct BlobWriter {
    blobs: Blobs,
    id: String,
    sink: Sink,
    done: bool,
}

enum Sink {
    File(FileSink),
    Memory(Vec<u8>),
}

/// A blob file being written, with the checksums of its blocks.
struct FileSink {
    file: Box<dyn WriteFile>,
    tmp: PathBuf,
    /// Bytes written so far.
    len: u64,
    /// The CRC of the block being written, and those of the blocks before it.
    crc: crc32fast::Hasher,
    crcs: Vec<u32>,
}

impl FileSink {
    fn write(&mut self, buf: &[u8]) -> Result<()> {
        self.file
            .write_all(buf)
            .map_err(|e| Error::io(&self.tmp, e))?;
        let mut rest = buf;
        while !rest.is_empty() {
            let room = (BLOB_BLOCK - self.len % BLOB_BLOCK) as usize;
            let (now, later) = rest.split_at(room.min(rest.len()));
            self.crc.update(now);
            self.len += now.len() as u64;
            if self.len.is_multiple_of(BLOB_BLOCK) {
                self.crcs.push(std::mem::take(&mut self.crc).finalize());
            }
            rest = later;
        }
        Ok(())
    }

    /// Appends the trailer (the last block's CRC first) and fsyncs.
    fn seal(&mut self) -> Result<()> {
        if !self.len.is_multiple_of(BLOB_BLOCK) {
            self.crcs.push(std::mem::take(&mut self.crc).finalize());
        }
        let mut trailer = Vec::with_capacity(self.crcs.len() * 4 + FOOTER as usize);
        for c in &self.crcs {
            trailer.extend_from_slice(&c.to_le_bytes());
        }
        trailer.extend_from_slice(&self.len.to_le_bytes());
        let table_crc = crc32fast::hash(&trailer);
        trailer.extend_from_slice(&table_crc.to_le_bytes());
        trailer.extend_from_slice(MAGIC);
        self.file
            .write_all(&trailer)
            .map_err(|e| Error::io(&self.tmp, e))?;
        self.file.sync_data().map_err(|e| Error::io(&self.tmp, e))
    }
}

/// A blob file opened for reading, its trailer checked.
#[derive(Debug)]
pub struct BlobReader {
    file: File,
    path: PathBuf,
    len: u64,
    crcs: Vec<u32>,
}

impl BlobReader {
    fn open(file: File, path: PathBuf) -> Result<BlobReader> {
        let corrupt = |message: String| Error::Corrupt {
            path: path.clone(),
            message,
        };
        let size = file.metadata().map_err(|e| Error::io(&path, e))?.len();
        if size < FOOTER {
            return Err(corrupt(format!("blob of {size} bytes has no trailer")));
        }
        let mut footer = [0u8; FOOTER as usize];
        file.read_exact_at(&mut footer, size - FOOTER)
            .map_err(|e| Error::io(&path, e))?;
        let (Some(len), Some(stored_crc), true) = (
            tarn_format::u64_at(&footer, F_LEN),
            tarn_format::u32_at(&footer, F_CRC),
            &footer[F_MAGIC..] == MAGIC,
        ) else {
            return Err(corrupt("blob trailer has no magic number".into()));
        };
        let blocks = len.div_ceil(BLOB_BLOCK);
        if len.checked_add(blocks * 4 + FOOTER) != Some(size) {
            return Err(corrupt(format!(
                "blob of {size} bytes does not hold {len} bytes and their checksums"
            )));
        }
        let mut table = vec![0u8; (blocks * 4) as usize];
        file.read_exact_at(&mut table, len)
            .map_err(|e| Error::io(&path, e))?;
        let mut h = crc32fast::Hasher::new();
        h.update(&table);
        h.update(&footer[F_LEN..F_CRC]);
        if h.finalize() != stored_crc {
            return Err(corrupt(
                "blob checksum table does not match its checksum".into(),
            ));
        }
        let crcs = table
            .chunks_exact(4)
            .filter_map(|c| tarn_format::u32_at(c, 0))
            .collect();
        Ok(BlobReader {
            file,
            path,
            len,
            crcs,
        })
    }

    /// Length of the bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the blob is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Block `k` of the bytes (each [`BLOB_BLOCK`] long but the last), checked against
    /// its CRC: damage is an error naming the file.
    pub fn read_block(&self, k: u64) -> Result<Vec<u8>> {
        let Some(&want) = self.crcs.get(k as usize) else {
            return Ok(Vec::new());
        };
        let start = k * BLOB_BLOCK;
        let mut buf = vec![0u8; (self.len - start).min(BLOB_BLOCK) as usize];
        self.file
            .read_exact_at(&mut buf, start)
            .map_err(|e| Error::io(&self.path, e))?;
        if crc32fast::hash(&buf) != want {
            return Err(Error::Corrupt {
                path: self.path.clone(),
                message: format!("block {k} (bytes {start}..) does not match its checksum"),
            });
        }
        Ok(buf)
    }
}

/// A blob id is used as a file name: only what `Uuid` prints may be one (this also
/// keeps `..` and separators out of paths).
fn check_id(id: &str) -> Result<()> {
    let ok =
        !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(Error::Internal(format!("invalid blob id {id:?}")))
    }
}

impl Blobs {
    /// Blobs in `db_dir/files`, or in memory when `db_dir` is `None`.
    pub(crate) fn new(db_dir: Option<&Path>, backend: Arc<dyn FileBackend>) -> Blobs {
        Blobs(Arc::new(Shared {
            dir: db_dir.map(|d| d.join(FILES_DIR)),
            backend,
            memory: Mutex::new(HashMap::new()),
        }))
    }

    /// Creates the directory when missing (at open, once the database checked out),
    /// durably: a record must never outlive the directory its bytes are in.
    pub(crate) fn create_dir(&self, backend: &dyn FileBackend, db_dir: &Path) -> Result<()> {
        if let Some(dir) = &self.0.dir
            && !dir.is_dir()
        {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
            backend.sync_dir(db_dir).map_err(|e| Error::io(db_dir, e))?;
        }
        Ok(())
    }

    /// Removes a blob no committed record names: one an upload finished but did not
    /// commit (it failed, or its caller went away).
    pub fn discard(&self, id: &str) -> Result<()> {
        self.remove(&[id.to_string()])
    }

    fn path(&self, dir: &Path, id: &str) -> PathBuf {
        dir.join(id)
    }

    /// Starts writing blob `id`.
    pub fn create(&self, id: &str) -> Result<BlobWriter> {
        check_id(id)?;
        let sink = match &self.0.dir {
            Some(dir) => {
                let tmp = dir.join(format!("{id}{TMP_SUFFIX}"));
                let file = self
                    .0
                    .backend
                    .create(&tmp)
                    .map_err(|e| Error::io(&tmp, e))?;
                Sink::File(FileSink {
                    file,
                    tmp,
                    len: 0,
                    crc: crc32fast::Hasher::new(),
                    crcs: Vec::new(),
                })
            }
            None => Sink::Memory(Vec::new()),
        };
        Ok(BlobWriter {
            blobs: self.clone(),
            id: id.to_string(),
            sink,
            done: false,
        })
    }

    /// Opens blob `id` for reading; `None` when there is no such blob.
    pub fn open(&self, id: &str) -> Result<Option<BlobSource>> {
        check_id(id)?;
        match &self.0.dir {
            Some(dir) => {
                let path = self.path(dir, id);
                match File::open(&path) {
                    Ok(f) => Ok(Some(BlobSource::File(BlobReader::open(f, path)?))),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(Error::io(&path, e)),
                }
            }
            None => Ok(self
                .0
                .memory
                .lock()
                .get(id)
                .cloned()
                .map(BlobSource::Memory)),
        }
    }

    /// Removes blobs (those already gone are skipped). The caller made sure no
    /// committed record names them any more.
    pub(crate) fn remove(&self, ids: &[String]) -> Result<()> {
        match &self.0.dir {
            Some(dir) => {
                // Each is tried (one failure does not keep the others); the first
                // failure is reported, and what is left goes at the next open.
                let mut first = None;
                for id in ids {
                    check_id(id)?;
                    let path = self.path(dir, id);
                    match self.0.backend.remove(&path) {
                        Ok(()) => {}
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                        Err(e) => {
                            first.get_or_insert(Error::io(&path, e));
                        }
                    }
                }
                // The names' removal need not be durable: a blob that comes back after
                // a power cut names no record and the next open sweeps it.
                first.map_or(Ok(()), Err)
            }
            None => {
                let mut memory = self.0.memory.lock();
                for id in ids {
                    memory.remove(id);
                }
                Ok(())
            }
        }
    }

    /// Removes every blob that `live` does not name, and every unfinished one: what a
    /// crash left behind. Only called when the database opens, before any upload.
    /// Best effort: what cannot be listed or removed is logged and tried again at the
    /// next open (leftover bytes never keep a database shut). Returns how many went.
    pub(crate) fn sweep(&self, live: &HashSet<String>) -> usize {
        let Some(dir) = &self.0.dir else {
            return 0;
        };
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) => {
                tracing::warn!("blobs not swept: listing {} failed: {e}", dir.display());
                return 0;
            }
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name();
            if name.to_str().is_some_and(|n| live.contains(n)) {
                continue;
            }
            // Not something Tarn writes: leave it to whoever put it there.
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let path = entry.path();
            match self.0.backend.remove(&path) {
                Ok(()) => removed += 1,
                Err(e) => tracing::warn!("{} not removed: {e}", path.display()),
            }
        }
        if removed > 0 {
            tracing::info!(removed, "removed blobs that no file record names");
        }
        removed
    }
}

impl BlobWriter {
    /// Appends `buf`.
    pub fn write(&mut self, buf: &[u8]) -> Result<()> {
        match &mut self.sink {
            Sink::File(f) => f.write(buf),
            Sink::Memory(v) => {
                v.extend_from_slice(buf);
                Ok(())
            }
        }
    }

    /// Makes the blob durable under its name: fsync, rename, directory fsync. After
    /// this the blob exists whatever happens; until its record commits, only the next
    /// open's sweep would remove it.
    pub fn finish(mut self) -> Result<()> {
        let blobs = self.blobs.clone();
        match &mut self.sink {
            Sink::File(f) => {
                f.seal()?;
                let tmp = &f.tmp;
                let dir = blobs.0.dir.as_deref().unwrap_or(Path::new("."));
                let path = blobs.path(dir, &self.id);
                blobs
                    .0
                    .backend
                    .rename(tmp, &path)
                    .map_err(|e| Error::io(&path, e))?;
                self.done = true;
                if let Err(e) = blobs.0.backend.sync_dir(dir) {
                    // Not known durable: no record may name it. Best effort; the next
                    // open sweeps it otherwise.
                    let _ = blobs.0.backend.remove(&path);
                    return Err(Error::io(dir, e));
                }
            }
            Sink::Memory(v) => {
                let bytes: Arc<[u8]> = std::mem::take(v).into();
                blobs.0.memory.lock().insert(self.id.clone(), bytes);
                self.done = true;
            }
        }
        Ok(())
    }
}

impl Drop for BlobWriter {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Sink::File(FileSink { tmp, .. }) = &self.sink {
            // Best effort: the next open sweeps what is left.
            let _ = self.blobs.0.backend.remove(tmp);
        }
    }
}
