//! The file backend: every write, fsync, rename and delete storage makes goes through
//! [`FileBackend`], so tests can inject a failing disk (ENOSPC, EIO on write or fsync)
//! and check that a statement fails cleanly and the database recovers once the fault
//! clears. Reads go straight to the OS (and to `mmap`).

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;

/// A file open for appending writes.
pub trait WriteFile: Send + Sync {
    /// Appends all of `buf` at the current position.
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Makes the written data durable (`fdatasync`).
    fn sync_data(&mut self) -> io::Result<()>;
    /// Cuts (or extends) the file to `len` bytes and moves the write position there.
    fn set_len(&mut self, len: u64) -> io::Result<()>;
}

/// Where storage writes files. [`StdBackend`] is the real disk; [`FaultyBackend`] wraps it
/// to inject failures.
pub trait FileBackend: Send + Sync + fmt::Debug {
    /// Creates `path` (truncating it) for writing.
    fn create(&self, path: &Path) -> io::Result<Box<dyn WriteFile>>;
    /// Opens an existing `path` for writing at its end.
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn WriteFile>>;
    /// Renames `from` to `to`, replacing `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Fsyncs directory `dir`, making names created or renamed in it durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Deletes `path`.
    fn remove(&self, path: &Path) -> io::Result<()>;
}

/// The operating system's file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct StdBackend;

struct StdFile(File);

impl WriteFile for StdFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.0.write_all(buf)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.0.set_len(len)?;
        self.0.seek(SeekFrom::Start(len)).map(|_| ())
    }
}

impl FileBackend for StdBackend {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        Ok(Box::new(StdFile(f)))
    }
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        let mut f = OpenOptions::new().write(true).open(path)?;
        f.seek(SeekFrom::End(0))?;
        Ok(Box::new(StdFile(f)))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
}

/// Which failure a [`FaultyBackend`] injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Writes fail with ENOSPC ("No space left on device"); nothing is written.
    NoSpace,
    /// Writes fail with EIO.
    WriteIo,
    /// Writes succeed, fsyncs fail with EIO (the kernel may have dropped the pages).
    SyncIo,
}

impl Fault {
    fn error(self) -> io::Error {
        match self {
            Fault::NoSpace => io::Error::from_raw_os_error(28),
            Fault::WriteIo | Fault::SyncIo => io::Error::from_raw_os_error(5),
        }
    }
}

/// A backend over the real disk that fails on demand, for fault-injection tests. While a
/// fault is set, every matching call fails; [`FaultyBackend::clear`] heals the disk.
#[derive(Debug, Clone, Default)]
pub struct FaultyBackend {
    fault: Arc<Mutex<Option<Fault>>>,
}

impl FaultyBackend {
    /// A healthy disk.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts failing with `fault`.
    pub fn set(&self, fault: Fault) {
        *self.fault.lock() = Some(fault);
    }

    /// Stops failing.
    pub fn clear(&self) {
        *self.fault.lock() = None;
    }

    fn check(&self, write: bool) -> io::Result<()> {
        match *self.fault.lock() {
            Some(f @ (Fault::NoSpace | Fault::WriteIo)) if write => Err(f.error()),
            Some(f @ Fault::SyncIo) if !write => Err(f.error()),
            _ => Ok(()),
        }
    }
}

struct FaultyFile {
    inner: Box<dyn WriteFile>,
    backend: FaultyBackend,
}

impl WriteFile for FaultyFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.backend.check(true)?;
        self.inner.write_all(buf)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        self.backend.check(false)?;
        self.inner.sync_data()
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
}

impl FileBackend for FaultyBackend {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        self.check(true)?;
        Ok(Box::new(FaultyFile {
            inner: StdBackend.create(path)?,
            backend: self.clone(),
        }))
    }
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        Ok(Box::new(FaultyFile {
            inner: StdBackend.open_append(path)?,
            backend: self.clone(),
        }))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.check(true)?;
        StdBackend.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.check(false)?;
        StdBackend.sync_dir(dir)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        StdBackend.remove(path)
    }
}
