//! The file backend: every file storage creates, writes, fsyncs, truncates, renames or
//! deletes goes through [`FileBackend`], so tests can put a failing disk or a machine
//! that loses power under a database. Reads go straight to the OS (and to `mmap`).
//!
//! - [`StdBackend`] is the real disk.
//! - [`FaultyBackend`] fails chosen operations (ENOSPC, EIO) until it is healed.
//! - [`PowerCutDisk`] keeps a model of the page cache: what was fsynced is durable, the
//!   rest is not. [`PowerCutDisk::cut_power`] freezes the disk at that instant (every
//!   later call fails) and picks what survives: every fsynced byte, plus a random prefix
//!   or a random subset of the pages written since, and a random prefix of the directory
//!   changes (create, rename, remove) made since each directory's last fsync.
//!   [`PowerCutDisk::write_image`] writes that surviving state to a directory, which a
//!   test then opens as the disk the machine boots with.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
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

/// Where storage writes files. [`StdBackend`] is the real disk; [`FaultyBackend`] and
/// [`PowerCutDisk`] wrap it for tests.
pub trait FileBackend: Send + Sync + fmt::Debug {
    /// Creates `path` (truncating it) for writing.
    fn create(&self, path: &Path) -> io::Result<Box<dyn WriteFile>>;
    /// Opens an existing `path` for writing at its end.
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn WriteFile>>;
    /// Renames `from` to `to`, replacing `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Fsyncs directory `dir`, making names created, renamed or removed in it durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Deletes `path`.
    fn remove(&self, path: &Path) -> io::Result<()>;
}

/// Writes `bytes` to `path` atomically: a temporary file, fsynced, renamed over `path`,
/// and the directory fsynced, so a crash leaves the old file or the new one.
pub(crate) fn write_atomic(backend: &dyn FileBackend, path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let write = || -> io::Result<()> {
        let mut f = backend.create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_data()
    };
    if let Err(e) = write() {
        let _ = backend.remove(&tmp);
        return Err(e);
    }
    backend.rename(&tmp, path)?;
    match path.parent() {
        Some(dir) => backend.sync_dir(dir),
        None => Ok(()),
    }
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

/// One kind of backend call, for [`Fault::Op`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultOp {
    /// [`FileBackend::create`].
    Create,
    /// [`FileBackend::open_append`].
    Open,
    /// [`WriteFile::write_all`].
    Write,
    /// [`WriteFile::sync_data`].
    Sync,
    /// [`WriteFile::set_len`].
    SetLen,
    /// [`FileBackend::rename`].
    Rename,
    /// [`FileBackend::sync_dir`].
    SyncDir,
    /// [`FileBackend::remove`].
    Remove,
}

impl FaultOp {
    /// Every kind of call.
    pub const ALL: [FaultOp; 8] = [
        FaultOp::Create,
        FaultOp::Open,
        FaultOp::Write,
        FaultOp::Sync,
        FaultOp::SetLen,
        FaultOp::Rename,
        FaultOp::SyncDir,
        FaultOp::Remove,
    ];
}

/// Which failure a [`FaultyBackend`] injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Calls that allocate space (create, write, rename) fail with ENOSPC ("No space
    /// left on device"); nothing is written.
    NoSpace,
    /// Creates and writes fail with EIO.
    WriteIo,
    /// Writes succeed; file and directory fsyncs fail with EIO (the kernel may have
    /// dropped the pages).
    SyncIo,
    /// Every call of one kind fails with EIO.
    Op(FaultOp),
}

impl Fault {
    fn applies(self, op: FaultOp) -> Option<io::Error> {
        let hit = match self {
            Fault::NoSpace => matches!(op, FaultOp::Create | FaultOp::Write | FaultOp::Rename),
            Fault::WriteIo => matches!(op, FaultOp::Create | FaultOp::Write),
            Fault::SyncIo => matches!(op, FaultOp::Sync | FaultOp::SyncDir),
            Fault::Op(o) => o == op,
        };
        hit.then(|| match self {
            Fault::NoSpace => io::Error::from_raw_os_error(28),
            _ => io::Error::from_raw_os_error(5),
        })
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

    fn check(&self, op: FaultOp) -> io::Result<()> {
        match self.fault.lock().and_then(|f| f.applies(op)) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

struct FaultyFile {
    inner: Box<dyn WriteFile>,
    backend: FaultyBackend,
}

impl WriteFile for FaultyFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.backend.check(FaultOp::Write)?;
        self.inner.write_all(buf)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        self.backend.check(FaultOp::Sync)?;
        self.inner.sync_data()
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.backend.check(FaultOp::SetLen)?;
        self.inner.set_len(len)
    }
}

impl FileBackend for FaultyBackend {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        self.check(FaultOp::Create)?;
        Ok(Box::new(FaultyFile {
            inner: StdBackend.create(path)?,
            backend: self.clone(),
        }))
    }
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        self.check(FaultOp::Open)?;
        Ok(Box::new(FaultyFile {
            inner: StdBackend.open_append(path)?,
            backend: self.clone(),
        }))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.check(FaultOp::Rename)?;
        StdBackend.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.check(FaultOp::SyncDir)?;
        StdBackend.sync_dir(dir)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.check(FaultOp::Remove)?;
        StdBackend.remove(path)
    }
}

/// Page size of the simulated page cache: unsynced data survives a power cut, or not, a
/// page at a time.
const PAGE: usize = 4096;

/// What a [`PowerCutDisk`] knows of one file (an inode: renames move names, not files).
#[derive(Debug, Default, Clone)]
struct SimFile {
    /// The contents as of the last fsync.
    durable: Vec<u8>,
    /// The contents now (what the real file holds).
    current: Vec<u8>,
}

/// A directory change not yet made durable by a directory fsync.
#[derive(Debug, Clone)]
enum NameOp {
    Link(PathBuf, usize),
    Unlink(PathBuf),
}

#[derive(Debug, Default)]
struct SimState {
    files: Vec<SimFile>,
    /// Names now, and as of each directory's last fsync.
    current: BTreeMap<PathBuf, usize>,
    durable: BTreeMap<PathBuf, usize>,
    /// Directory changes since each directory's last fsync, in order.
    pending: BTreeMap<PathBuf, Vec<NameOp>>,
    /// Set by `cut_power`: the surviving names and contents.
    image: Option<BTreeMap<PathBuf, Vec<u8>>>,
    /// A failing disk before the power goes (see [`PowerCutDisk::set_fault`]).
    fault: Option<Fault>,
    rng: u64,
}

impl SimState {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }

    /// Fails `op` when the power is cut or a fault applies to it.
    fn check(&self, op: FaultOp) -> io::Result<()> {
        if self.image.is_some() {
            return Err(io::Error::from_raw_os_error(5));
        }
        match self.fault.and_then(|f| f.applies(op)) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn file_of(&mut self, path: &Path) -> io::Result<usize> {
        if let Some(&id) = self.current.get(path) {
            return Ok(id);
        }
        // A file from before the disk was watched: durable as it is.
        let bytes = std::fs::read(path)?;
        let id = self.files.len();
        self.files.push(SimFile {
            durable: bytes.clone(),
            current: bytes,
        });
        self.current.insert(path.to_path_buf(), id);
        self.durable.insert(path.to_path_buf(), id);
        Ok(id)
    }

    fn name_op(&mut self, op: NameOp) {
        let path = match &op {
            NameOp::Link(p, _) | NameOp::Unlink(p) => p,
        };
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        match &op {
            NameOp::Link(p, id) => {
                self.current.insert(p.clone(), *id);
            }
            NameOp::Unlink(p) => {
                self.current.remove(p);
            }
        }
        self.pending.entry(dir).or_default().push(op);
    }

    /// One surviving version of a file: its durable bytes plus some of the pages written
    /// since (a random prefix of them, or a random subset), at the durable length or the
    /// current one; lost pages inside the file read as zeros.
    fn survivor(&mut self, id: usize) -> Vec<u8> {
        let f = self.files[id].clone();
        if f.durable == f.current {
            return f.current;
        }
        let len = if self.below(2) == 0 {
            f.durable.len()
        } else {
            f.current.len()
        };
        let mut out = vec![0u8; len];
        let keep = f.durable.len().min(len);
        out[..keep].copy_from_slice(&f.durable[..keep]);
        let dirty: Vec<usize> = (0..len.div_ceil(PAGE))
            .filter(|&p| {
                let (a, b) = (p * PAGE, ((p + 1) * PAGE).min(len));
                f.current.get(a..b) != f.durable.get(a..b)
            })
            .collect();
        let prefix = self.below(2) == 0;
        let cut = self.below(dirty.len() as u64 + 1) as usize;
        for (i, &p) in dirty.iter().enumerate() {
            let survives = if prefix { i < cut } else { self.below(2) == 0 };
            if survives {
                let (a, b) = (p * PAGE, ((p + 1) * PAGE).min(len));
                if let Some(src) = f.current.get(a..b.min(f.current.len())) {
                    out[a..a + src.len()].copy_from_slice(src);
                }
            }
        }
        out
    }
}

/// A simulated disk for power-loss tests (see the module docs). Clones share the disk.
#[derive(Debug, Clone)]
pub struct PowerCutDisk {
    root: PathBuf,
    state: Arc<Mutex<SimState>>,
}

impl PowerCutDisk {
    /// Watches the files under `root` (the files already there count as durable). `seed`
    /// makes the choice of surviving pages repeatable.
    pub fn new(root: impl Into<PathBuf>, seed: u64) -> Self {
        PowerCutDisk {
            root: root.into(),
            state: Arc::new(Mutex::new(SimState {
                rng: seed | 1,
                ..SimState::default()
            })),
        }
    }

    /// Makes calls fail as a [`FaultyBackend`] would, until `None` (a disk that fails
    /// before the power goes, so recovery meets rolled logs and failed checkpoints).
    pub fn set_fault(&self, fault: Option<Fault>) {
        self.state.lock().fault = fault;
    }

    /// Cuts the power now: every later call fails with EIO, and what survives is fixed.
    pub fn cut_power(&self) {
        let mut st = self.state.lock();
        if st.image.is_some() {
            return;
        }
        // Directory changes since the last directory fsync survive as a prefix (a
        // journaling file system keeps them in order).
        let mut names = st.durable.clone();
        let pending: Vec<Vec<NameOp>> = st.pending.values().cloned().collect();
        for ops in pending {
            let n = st.below(ops.len() as u64 + 1) as usize;
            for op in ops.into_iter().take(n) {
                match op {
                    NameOp::Link(p, id) => {
                        names.insert(p, id);
                    }
                    NameOp::Unlink(p) => {
                        names.remove(&p);
                    }
                }
            }
        }
        let mut cache: HashMap<usize, Vec<u8>> = HashMap::new();
        let mut image = BTreeMap::new();
        for (path, id) in names {
            let bytes = match cache.get(&id) {
                Some(b) => b.clone(),
                None => {
                    let b = st.survivor(id);
                    cache.insert(id, b.clone());
                    b
                }
            };
            image.insert(path, bytes);
        }
        st.image = Some(image);
    }

    /// Writes what survived the power cut into `dest` (which should be empty): the
    /// directories under the watched root, the files this disk saw as they survived, and
    /// files it never saw as they are. Cuts the power first if that has not happened.
    pub fn write_image(&self, dest: &Path) -> io::Result<()> {
        self.cut_power();
        let st = self.state.lock();
        let image = st.image.clone().unwrap_or_default();
        let seen: BTreeSet<&PathBuf> = st.current.keys().chain(st.durable.keys()).collect();
        let mut stack = vec![self.root.clone()];
        while let Some(dir) = stack.pop() {
            let rel = dir.strip_prefix(&self.root).unwrap_or(Path::new(""));
            std::fs::create_dir_all(dest.join(rel))?;
            for entry in std::fs::read_dir(&dir)? {
                let path = entry?.path();
                if path.is_dir() {
                    stack.push(path);
                } else if !seen.contains(&path) && !image.contains_key(&path) {
                    let rel = path.strip_prefix(&self.root).unwrap_or(&path);
                    std::fs::copy(&path, dest.join(rel))?;
                }
            }
        }
        for (path, bytes) in &image {
            let Ok(rel) = path.strip_prefix(&self.root) else {
                continue;
            };
            if let Some(parent) = dest.join(rel).parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(dest.join(rel), bytes)?;
        }
        Ok(())
    }
}

struct SimWriter {
    disk: PowerCutDisk,
    id: usize,
    file: StdFile,
}

impl WriteFile for SimWriter {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        let mut st = self.disk.state.lock();
        st.check(FaultOp::Write)?;
        self.file.write_all(buf)?;
        st.files[self.id].current.extend_from_slice(buf);
        Ok(())
    }
    fn sync_data(&mut self) -> io::Result<()> {
        let mut st = self.disk.state.lock();
        st.check(FaultOp::Sync)?;
        self.file.sync_data()?;
        let f = &mut st.files[self.id];
        f.durable = f.current.clone();
        Ok(())
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        let mut st = self.disk.state.lock();
        st.check(FaultOp::SetLen)?;
        self.file.set_len(len)?;
        st.files[self.id].current.resize(len as usize, 0);
        Ok(())
    }
}

impl FileBackend for PowerCutDisk {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        let mut st = self.state.lock();
        st.check(FaultOp::Create)?;
        let existing = if path.exists() {
            Some(st.file_of(path)?)
        } else {
            None
        };
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        let id = match existing {
            // Truncating an existing file keeps its inode; the truncation is not durable
            // until the file is fsynced.
            Some(id) => {
                st.files[id].current.clear();
                id
            }
            None => {
                let id = st.files.len();
                st.files.push(SimFile::default());
                st.name_op(NameOp::Link(path.to_path_buf(), id));
                id
            }
        };
        Ok(Box::new(SimWriter {
            disk: self.clone(),
            id,
            file: StdFile(file),
        }))
    }
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn WriteFile>> {
        let mut st = self.state.lock();
        st.check(FaultOp::Open)?;
        let id = st.file_of(path)?;
        drop(st);
        Ok(Box::new(SimWriter {
            disk: self.clone(),
            id,
            file: StdFile(reopen_end(path)?),
        }))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.state.lock();
        st.check(FaultOp::Rename)?;
        let id = st.file_of(from)?;
        if to.exists() {
            st.file_of(to)?;
        }
        std::fs::rename(from, to)?;
        st.name_op(NameOp::Unlink(from.to_path_buf()));
        st.name_op(NameOp::Link(to.to_path_buf(), id));
        Ok(())
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.state.lock();
        st.check(FaultOp::SyncDir)?;
        StdBackend.sync_dir(dir)?;
        if let Some(ops) = st.pending.remove(dir) {
            for op in ops {
                match op {
                    NameOp::Link(p, id) => {
                        st.durable.insert(p, id);
                    }
                    NameOp::Unlink(p) => {
                        st.durable.remove(&p);
                    }
                }
            }
        }
        Ok(())
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut st = self.state.lock();
        st.check(FaultOp::Remove)?;
        st.file_of(path)?;
        std::fs::remove_file(path)?;
        st.name_op(NameOp::Unlink(path.to_path_buf()));
        Ok(())
    }
}

fn reopen_end(path: &Path) -> io::Result<File> {
    let mut f = OpenOptions::new().write(true).open(path)?;
    f.seek(SeekFrom::End(0))?;
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(p: &Path) -> Option<Vec<u8>> {
        std::fs::read(p).ok()
    }

    #[test]
    fn fsynced_bytes_and_names_survive_a_power_cut_and_the_rest_may_not() -> io::Result<()> {
        let mut lost_tail = false;
        let mut lost_name = false;
        for seed in 0..64u64 {
            let root = tempfile::tempdir()?;
            let disk = PowerCutDisk::new(root.path(), seed);
            let synced = root.path().join("synced");
            let mut f = disk.create(&synced)?;
            f.write_all(&[1u8; 10_000])?;
            f.sync_data()?;
            disk.sync_dir(root.path())?;
            f.write_all(&[2u8; 10_000])?;
            let unsynced_name = root.path().join("new");
            let mut g = disk.create(&unsynced_name)?;
            g.write_all(b"data")?;
            g.sync_data()?;
            disk.cut_power();
            // The disk is dead from now on.
            assert!(f.write_all(b"x").is_err());
            assert!(disk.create(&root.path().join("late")).is_err());
            let image = tempfile::tempdir()?;
            disk.write_image(image.path())?;
            let bytes = read(&image.path().join("synced")).unwrap_or_default();
            assert!(bytes.len() >= 10_000, "seed {seed}: fsynced bytes lost");
            assert!(bytes[..10_000].iter().all(|&b| b == 1));
            // Whatever survived of the unsynced pages is either the data or zeros.
            assert!(bytes[10_000..].iter().all(|&b| b == 2 || b == 0));
            lost_tail |= bytes.len() < 20_000 || bytes[10_000..].contains(&0);
            lost_name |= read(&image.path().join("new")).is_none();
        }
        assert!(lost_tail && lost_name, "the simulation never lost anything");
        Ok(())
    }

    #[test]
    fn a_rename_is_durable_only_after_the_directory_fsync() -> io::Result<()> {
        let mut kept_old = false;
        for seed in 0..32u64 {
            let root = tempfile::tempdir()?;
            let target = root.path().join("MANIFEST");
            std::fs::write(&target, b"old")?;
            let disk = PowerCutDisk::new(root.path(), seed);
            let tmp = root.path().join("MANIFEST.tmp");
            let mut f = disk.create(&tmp)?;
            f.write_all(b"new")?;
            f.sync_data()?;
            disk.rename(&tmp, &target)?;
            let synced = seed % 2 == 0;
            if synced {
                disk.sync_dir(root.path())?;
            }
            let image = tempfile::tempdir()?;
            disk.write_image(image.path())?;
            let got = read(&image.path().join("MANIFEST"));
            if synced {
                assert_eq!(got.as_deref(), Some(&b"new"[..]));
            } else {
                assert!(
                    matches!(got.as_deref(), Some(b"new") | Some(b"old")),
                    "{got:?}"
                );
                kept_old |= got.as_deref() == Some(b"old");
            }
        }
        assert!(kept_old);
        Ok(())
    }

    #[test]
    fn faults_hit_each_kind_of_call() -> io::Result<()> {
        let root = tempfile::tempdir()?;
        let disk = FaultyBackend::new();
        let path = root.path().join("f");
        for op in FaultOp::ALL {
            disk.set(Fault::Op(op));
            let res: io::Result<()> = (|| {
                let mut f = disk.create(&path)?;
                f.write_all(b"abc")?;
                f.sync_data()?;
                f.set_len(1)?;
                drop(disk.open_append(&path)?);
                disk.rename(&path, &root.path().join("g"))?;
                disk.sync_dir(root.path())?;
                disk.remove(&root.path().join("g"))
            })();
            assert!(res.is_err(), "{op:?}");
            disk.clear();
            let _ = std::fs::remove_file(&path);
            let _ = std::fs::remove_file(root.path().join("g"));
        }
        Ok(())
    }
}
