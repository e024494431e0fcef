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

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::{FileBackend, WriteFile};
use crate::{Error, Result};

/// The directory of blobs inside the database directory.
pub const FILES_DIR: &str = "files";

/// Suffix of a blob still being written.
const TMP_SUFFIX: &str = ".tmp";

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
    File(File),
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
    File {
        file: Box<dyn WriteFile>,
        tmp: PathBuf,
    },
    Memory(Vec<u8>),
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

    /// Creates the directory when missing (at open, once the database checked out).
    pub(crate) fn create_dir(&self) -> Result<()> {
        if let Some(dir) = &self.0.dir {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
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
                Sink::File { file, tmp }
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
                    Ok(f) => Ok(Some(BlobSource::File(f))),
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
                for id in ids {
                    check_id(id)?;
                    let path = self.path(dir, id);
                    match self.0.backend.remove(&path) {
                        Ok(()) => {}
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                        Err(e) => return Err(Error::io(&path, e)),
                    }
                }
                // The names' removal need not be durable: a blob that comes back after
                // a power cut names no record and the next open sweeps it.
                Ok(())
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
    pub(crate) fn sweep(&self, live: &HashSet<String>) -> Result<usize> {
        let Some(dir) = &self.0.dir else {
            return Ok(0);
        };
        let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
        let mut removed = 0;
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(dir, e))?;
            let name = entry.file_name();
            let keep = name.to_str().is_some_and(|n| live.contains(n));
            if !keep {
                let path = entry.path();
                if entry.file_type().map_err(|e| Error::io(&path, e))?.is_dir() {
                    // Not something Tarn writes: leave it to whoever put it there.
                    continue;
                }
                self.0
                    .backend
                    .remove(&path)
                    .map_err(|e| Error::io(&path, e))?;
                removed += 1;
            }
        }
        if removed > 0 {
            tracing::info!(removed, "removed blobs that no file record names");
        }
        Ok(removed)
    }
}

impl BlobWriter {
    /// Appends `buf`.
    pub fn write(&mut self, buf: &[u8]) -> Result<()> {
        match &mut self.sink {
            Sink::File { file, tmp } => file.write_all(buf).map_err(|e| Error::io(&*tmp, e)),
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
            Sink::File { file, tmp } => {
                file.sync_data().map_err(|e| Error::io(&*tmp, e))?;
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
        if let Sink::File { tmp, .. } = &self.sink {
            // Best effort: the next open sweeps what is left.
            let _ = self.blobs.0.backend.remove(tmp);
        }
    }
}
