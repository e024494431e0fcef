//! The database-wide write-ahead log: framing, group commit, rotation and recovery.
//!
//! The log is a directory of files `NNNNNNNNNN.wal` (a sequence number), each:
//!
//! ```text
//! header:  b"TARNWAL\0" | format version u32 | reserved u32 | prev_good_lsn u64 | reserved u64
//! record:  payload length u32 | crc32(payload) u32 | payload
//! payload: lsn u64 | body
//! ```
//!
//! Writers append their frame to a shared buffer and wait; whichever writer finds no
//! flush in progress becomes the leader, writes everything buffered with one `write` and
//! one `fdatasync`, and wakes the others (group commit). A failed write or sync fails
//! every record of that group and is never retried on the same file (the kernel may have
//! dropped the dirty pages): the log rolls to a new file whose header names the last good
//! LSN, and recovery ignores anything after that LSN in earlier files, so a failed
//! statement can never reappear after a restart. A checkpoint rotates to a new file the
//! same way and deletes the files it has made redundant.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::backend::{FileBackend, WriteFile};
use crate::{Error, Result};

const MAGIC: &[u8; 8] = b"TARNWAL\0";
/// On-disk format version of WAL files.
pub const WAL_FORMAT_VERSION: u32 = 2;
const HEADER_LEN: u64 = 32;
const FRAME_HEADER: usize = 8;
/// Upper bound on one record; anything larger in a length field is garbage.
const MAX_RECORD: u32 = 1 << 30;

/// How far a commit goes before the writing call returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// `fdatasync` before returning: survives a machine crash.
    #[default]
    Full,
    /// Written to the OS only: survives a process crash (kill -9), not a power loss.
    Process,
}

/// One recovered record.
#[derive(Debug)]
pub struct WalEntry {
    /// Log sequence number (strictly increasing, gaps allowed).
    pub lsn: u64,
    /// The record body.
    pub body: Vec<u8>,
}

type SharedFile = Arc<Mutex<Box<dyn WriteFile>>>;

struct WalState {
    /// The file being appended to; `None` after a failure until a new file is created.
    file: Option<SharedFile>,
    seq: u64,
    buf: Vec<u8>,
    next_lsn: u64,
    /// Every LSN up to this one is resolved (durable or failed).
    resolved_lsn: u64,
    /// The last LSN known durable.
    good_lsn: u64,
    durable_len: u64,
    /// A file was created since the directory was last fsynced.
    dir_dirty: bool,
    flushing: bool,
    /// LSN ranges (inclusive) whose group failed, with the error text.
    failed: Vec<(u64, u64, String)>,
}

/// The write-ahead log of one database.
pub struct Wal {
    dir: PathBuf,
    sync: SyncMode,
    backend: Arc<dyn FileBackend>,
    state: Mutex<WalState>,
    flushed: Condvar,
}

fn file_name(seq: u64) -> String {
    format!("{seq:010}.wal")
}

/// The WAL files in `dir`, by sequence number.
fn list(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        let Some(seq) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".wal"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        files.push((seq, entry.path()));
    }
    files.sort();
    Ok(files)
}

fn header(prev_good_lsn: u64) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEADER_LEN as usize);
    h.extend_from_slice(MAGIC);
    h.extend_from_slice(&WAL_FORMAT_VERSION.to_le_bytes());
    h.extend_from_slice(&0u32.to_le_bytes());
    h.extend_from_slice(&prev_good_lsn.to_le_bytes());
    h.extend_from_slice(&0u64.to_le_bytes());
    h
}

impl Wal {
    /// Opens (or creates) the log in directory `dir`, recovering the records after
    /// `after_lsn` (what the last checkpoint already holds) from files numbered `first_seq`
    /// and up. A torn or garbage tail is cut off; a corrupt record followed by valid ones
    /// is refused.
    pub fn open(
        dir: &Path,
        sync: SyncMode,
        backend: Arc<dyn FileBackend>,
        first_seq: u64,
        after_lsn: u64,
    ) -> Result<(Wal, Vec<WalEntry>)> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let mut files = list(dir)?;
        // Files a checkpoint made redundant (a crash came before their deletion).
        for (_, path) in files.iter().filter(|(s, _)| *s < first_seq) {
            backend.remove(path).map_err(|e| Error::io(path, e))?;
        }
        files.retain(|(s, _)| *s >= first_seq);
        // A last file shorter than its header was being created when the process died:
        // nothing in it was ever acknowledged.
        if let Some((_, path)) = files.last() {
            let len = std::fs::metadata(path)
                .map_err(|e| Error::io(path, e))?
                .len();
            if len < HEADER_LEN {
                backend.remove(path).map_err(|e| Error::io(path, e))?;
                files.pop();
            }
        }
        let mut contents = Vec::with_capacity(files.len());
        for (seq, path) in &files {
            let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
            let prev_good = check_header(path, &bytes)?;
            contents.push((*seq, path.clone(), bytes, prev_good));
        }
        let mut entries = Vec::new();
        let mut last_lsn = after_lsn;
        let mut tail = None;
        for i in 0..contents.len() {
            let limit = contents.get(i + 1).map_or(u64::MAX, |c| c.3);
            let (seq, path, bytes, _) = &contents[i];
            let (recovered, good_len) = recover(path, bytes)?;
            for e in recovered {
                if e.lsn > last_lsn && e.lsn <= limit {
                    last_lsn = e.lsn;
                    entries.push(e);
                }
            }
            tail = Some((*seq, path.clone(), good_len, bytes.len() as u64));
        }
        let mut state = WalState {
            file: None,
            seq: 0,
            buf: Vec::new(),
            next_lsn: last_lsn + 1,
            resolved_lsn: last_lsn,
            good_lsn: last_lsn,
            durable_len: 0,
            dir_dirty: false,
            flushing: false,
            failed: Vec::new(),
        };
        let wal_files_exist = tail.is_some();
        match tail {
            Some((seq, path, good_len, len)) => {
                let mut f = backend
                    .open_append(&path)
                    .map_err(|e| Error::io(&path, e))?;
                if len != good_len {
                    f.set_len(good_len).map_err(|e| Error::io(&path, e))?;
                    f.sync_data().map_err(|e| Error::io(&path, e))?;
                }
                state.file = Some(Arc::new(Mutex::new(f)));
                state.seq = seq;
                state.durable_len = good_len;
            }
            None => state.seq = first_seq.saturating_sub(1),
        }
        let wal = Wal {
            dir: dir.to_path_buf(),
            sync,
            backend,
            state: Mutex::new(state),
            flushed: Condvar::new(),
        };
        if !wal_files_exist {
            let mut st = wal.state.lock();
            wal.roll(&mut st)?;
            drop(st);
            wal.backend.sync_dir(dir).map_err(|e| Error::io(dir, e))?;
            wal.state.lock().dir_dirty = false;
        }
        Ok((wal, entries))
    }

    /// Starts a new file after the last good record. Its header is written but not yet
    /// fsynced: the next group commit syncs it (and the directory) before acknowledging.
    fn roll(&self, st: &mut WalState) -> Result<()> {
        st.file = None;
        let seq = st.seq + 1;
        let path = self.dir.join(file_name(seq));
        let mut f = self
            .backend
            .create(&path)
            .map_err(|e| Error::io(&path, e))?;
        let h = header(st.good_lsn);
        if let Err(e) = f.write_all(&h) {
            let _ = self.backend.remove(&path);
            return Err(Error::io(&path, e));
        }
        st.seq = seq;
        st.file = Some(Arc::new(Mutex::new(f)));
        st.durable_len = HEADER_LEN;
        st.dir_dirty = true;
        Ok(())
    }

    /// Moves appends to a new file and returns `(last LSN in the old files, new file's
    /// sequence number)`. The caller guarantees no append is in flight (the database's
    /// commit gate), so the old files hold exactly the records up to that LSN.
    pub fn rotate(&self) -> Result<(u64, u64)> {
        let mut st = self.state.lock();
        if st.flushing || !st.buf.is_empty() {
            return Err(Error::Internal(
                "WAL rotation with appends in flight".into(),
            ));
        }
        self.roll(&mut st)?;
        Ok((st.resolved_lsn, st.seq))
    }

    /// Deletes the files numbered below `seq` (a checkpoint holds their records).
    pub fn remove_before(&self, seq: u64) -> Result<()> {
        for (s, path) in list(&self.dir)? {
            if s < seq {
                self.backend
                    .remove(&path)
                    .map_err(|e| Error::io(&path, e))?;
            }
        }
        Ok(())
    }

    /// Bytes in the current file.
    pub fn current_len(&self) -> u64 {
        let st = self.state.lock();
        st.durable_len + st.buf.len() as u64
    }

    /// Appends one record and returns its LSN once it is durable (per the sync mode).
    pub fn append(&self, body: &[u8]) -> Result<u64> {
        let payload_len = 8 + body.len();
        if payload_len as u64 >= MAX_RECORD as u64 {
            return Err(Error::CommitFailed(format!(
                "record of {payload_len} bytes exceeds the log's limit of {MAX_RECORD} bytes"
            )));
        }
        let mut st = self.state.lock();
        if st.file.is_none() {
            // An earlier failure left no file to append to: start one now.
            self.roll(&mut st)
                .map_err(|e| Error::CommitFailed(e.to_string()))?;
        }
        let lsn = st.next_lsn;
        st.next_lsn += 1;
        let mut crc = crc32fast::Hasher::new();
        crc.update(&lsn.to_le_bytes());
        crc.update(body);
        let crc = crc.finalize();
        st.buf.reserve(FRAME_HEADER + payload_len);
        st.buf
            .extend_from_slice(&(payload_len as u32).to_le_bytes());
        st.buf.extend_from_slice(&crc.to_le_bytes());
        st.buf.extend_from_slice(&lsn.to_le_bytes());
        st.buf.extend_from_slice(body);
        loop {
            if let Some((_, _, msg)) = st.failed.iter().find(|(a, b, _)| *a <= lsn && lsn <= *b) {
                return Err(Error::CommitFailed(msg.clone()));
            }
            if st.resolved_lsn >= lsn {
                return Ok(lsn);
            }
            if st.flushing {
                self.flushed.wait(&mut st);
                continue;
            }
            // Become the leader of this commit group.
            let buf = std::mem::take(&mut st.buf);
            let first = st.resolved_lsn + 1;
            let upto = st.next_lsn - 1;
            let dir_dirty = std::mem::take(&mut st.dir_dirty);
            let Some(file) = st.file.clone() else {
                st.failed
                    .push((first, upto, "write-ahead log has no open file".into()));
                st.resolved_lsn = upto;
                self.flushed.notify_all();
                continue;
            };
            st.flushing = true;
            drop(st);
            let res = {
                let mut f = file.lock();
                f.write_all(&buf).and_then(|()| match self.sync {
                    SyncMode::Full => f.sync_data(),
                    SyncMode::Process => Ok(()),
                })
            }
            .and_then(|()| match (self.sync, dir_dirty) {
                (SyncMode::Full, true) => self.backend.sync_dir(&self.dir),
                _ => Ok(()),
            });
            st = self.state.lock();
            st.flushing = false;
            match res {
                Ok(()) => {
                    st.resolved_lsn = upto;
                    st.good_lsn = upto;
                    st.durable_len += buf.len() as u64;
                }
                Err(e) => {
                    let msg = format!("{}: {e}", self.dir.join(file_name(st.seq)).display());
                    // Best effort: cut what this group wrote; recovery ignores it anyway
                    // once the next file names the last good LSN.
                    let durable_len = st.durable_len;
                    let _ = file.lock().set_len(durable_len);
                    st.resolved_lsn = upto;
                    st.failed.push((first, upto, msg));
                    if self.roll(&mut st).is_err() {
                        st.file = None;
                    }
                    // Directory state is unknown after a failure: sync it next time.
                    st.dir_dirty = true;
                }
            }
            self.flushed.notify_all();
        }
    }
}

fn check_header(path: &Path, bytes: &[u8]) -> Result<u64> {
    if bytes.len() < HEADER_LEN as usize {
        return Err(Error::Corrupt {
            path: path.to_path_buf(),
            message: "file shorter than its header".into(),
        });
    }
    if &bytes[0..8] != MAGIC {
        return Err(Error::Corrupt {
            path: path.to_path_buf(),
            message: "not a Tarn write-ahead log (bad magic)".into(),
        });
    }
    let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if version != WAL_FORMAT_VERSION {
        return Err(Error::FormatVersion {
            path: path.to_path_buf(),
            found: version,
            supported: WAL_FORMAT_VERSION,
        });
    }
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&bytes[16..24]);
    Ok(u64::from_le_bytes(raw))
}

/// Fsyncs the directory holding `path`, so a newly created file's name is durable.
pub(crate) fn sync_parent(path: &Path) -> Result<()> {
    if let Some(dir) = path.parent() {
        let d = std::fs::File::open(dir).map_err(|e| Error::io(dir, e))?;
        d.sync_all().map_err(|e| Error::io(dir, e))?;
    }
    Ok(())
}

/// Parses a frame at `pos`: `Some((lsn, payload range end))` when length and checksum hold.
fn frame_at(bytes: &[u8], pos: usize) -> Option<(u64, usize)> {
    let header = bytes.get(pos..pos + FRAME_HEADER)?;
    let len = u32::from_le_bytes(header[0..4].try_into().ok()?);
    let crc = u32::from_le_bytes(header[4..8].try_into().ok()?);
    if !(8..MAX_RECORD).contains(&len) {
        return None;
    }
    let start = pos + FRAME_HEADER;
    let payload = bytes.get(start..start + len as usize)?;
    if crc32fast::hash(payload) != crc {
        return None;
    }
    let lsn = u64::from_le_bytes(payload[0..8].try_into().ok()?);
    Some((lsn, start + len as usize))
}

/// Reads every valid record; returns them and the length of the valid prefix.
/// `bytes` is a whole file whose header the caller has checked.
fn recover(path: &Path, bytes: &[u8]) -> Result<(Vec<WalEntry>, u64)> {
    let mut entries = Vec::new();
    let mut pos = HEADER_LEN as usize;
    let mut last_lsn = 0u64;
    while pos < bytes.len() {
        match frame_at(bytes, pos) {
            Some((lsn, end)) if lsn > last_lsn => {
                entries.push(WalEntry {
                    lsn,
                    body: bytes[pos + FRAME_HEADER + 8..end].to_vec(),
                });
                last_lsn = lsn;
                pos = end;
            }
            _ => {
                // Torn tail or corrupt middle? A valid later record means the damage is
                // in the middle, where acknowledged data would be lost: refuse.
                if let Some(later) = find_later_record(bytes, pos + 1, last_lsn) {
                    return Err(Error::Corrupt {
                        path: path.to_path_buf(),
                        message: format!(
                            "damaged record at byte {pos} is followed by a valid record at byte {later}"
                        ),
                    });
                }
                break;
            }
        }
    }
    Ok((entries, pos as u64))
}

fn find_later_record(bytes: &[u8], from: usize, last_lsn: u64) -> Option<usize> {
    (from..bytes.len().saturating_sub(FRAME_HEADER + 8)).find(|&p| {
        // Cheap pre-check on the LSN before paying for a checksum.
        let lsn_at = p + FRAME_HEADER;
        let Some(raw) = bytes.get(lsn_at..lsn_at + 8) else {
            return false;
        };
        let lsn = u64::from_le_bytes(raw.try_into().unwrap_or_default());
        lsn > last_lsn && lsn - last_lsn < 1 << 32 && frame_at(bytes, p).is_some()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Fault, FaultyBackend, StdBackend};

    fn open(dir: &Path, sync: SyncMode) -> Result<(Wal, Vec<WalEntry>)> {
        Wal::open(dir, sync, Arc::new(StdBackend), 1, 0)
    }

    fn reopen(dir: &Path) -> Result<Vec<Vec<u8>>> {
        let (_, entries) = open(dir, SyncMode::Full)?;
        Ok(entries.into_iter().map(|e| e.body).collect())
    }

    fn first_file(dir: &Path) -> PathBuf {
        dir.join(file_name(1))
    }

    #[test]
    fn append_and_recover() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
        {
            let (wal, entries) = open(dir.path(), SyncMode::Full)?;
            assert!(entries.is_empty());
            assert_eq!(wal.append(b"one")?, 1);
            assert_eq!(wal.append(b"two")?, 2);
        }
        assert_eq!(reopen(dir.path())?, vec![b"one".to_vec(), b"two".to_vec()]);
        Ok(())
    }

    #[test]
    fn torn_and_garbage_tails_are_cut() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
        let path = first_file(dir.path());
        {
            let (wal, _) = open(dir.path(), SyncMode::Process)?;
            wal.append(b"kept")?;
            wal.append(b"torn")?;
        }
        let full = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        for cut in 1..(4 + 8 + 8) {
            std::fs::write(&path, &full[..full.len() - cut]).map_err(|e| Error::io(&path, e))?;
            assert_eq!(reopen(dir.path())?, vec![b"kept".to_vec()], "cut {cut}");
        }
        let mut garbage = full.clone();
        garbage.extend_from_slice(&[0xAB; 100]);
        std::fs::write(&path, &garbage).map_err(|e| Error::io(&path, e))?;
        assert_eq!(reopen(dir.path())?.len(), 2);
        // The garbage was cut off: appending after it works and survives.
        {
            let (wal, _) = open(dir.path(), SyncMode::Full)?;
            wal.append(b"three")?;
        }
        assert_eq!(reopen(dir.path())?.len(), 3);
        Ok(())
    }

    #[test]
    fn corrupt_middle_is_refused() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
        let path = first_file(dir.path());
        {
            let (wal, _) = open(dir.path(), SyncMode::Process)?;
            wal.append(b"first record")?;
            wal.append(b"second record")?;
        }
        let mut bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        bytes[HEADER_LEN as usize + 20] ^= 0x01;
        std::fs::write(&path, &bytes).map_err(|e| Error::io(&path, e))?;
        let err = reopen(dir.path()).unwrap_err().to_string();
        assert!(err.contains("corruption detected"), "{err}");
        assert!(err.contains("0000000001.wal"), "{err}");
        Ok(())
    }

    #[test]
    fn newer_version_is_refused_with_both_numbers() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
        let path = first_file(dir.path());
        drop(open(dir.path(), SyncMode::Full)?);
        let mut bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        bytes[8..12].copy_from_slice(&7u32.to_le_bytes());
        std::fs::write(&path, &bytes).map_err(|e| Error::io(&path, e))?;
        let err = reopen(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("version 7") && err.contains(&format!("version {WAL_FORMAT_VERSION}")),
            "{err}"
        );
        Ok(())
    }

    #[test]
    fn group_commit_from_many_threads() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
        {
            let (wal, _) = open(dir.path(), SyncMode::Full)?;
            std::thread::scope(|s| {
                for t in 0..8u8 {
                    let wal = &wal;
                    s.spawn(move || {
                        for i in 0..50u8 {
                            assert!(wal.append(&[t, i]).is_ok());
                        }
                    });
                }
            });
        }
        assert_eq!(reopen(dir.path())?.len(), 400);
        Ok(())
    }

    #[test]
    fn rotation_and_cut() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
        let (cut, seq) = {
            let (wal, _) = open(dir.path(), SyncMode::Full)?;
            wal.append(b"a")?;
            wal.append(b"b")?;
            let (cut, seq) = wal.rotate()?;
            wal.append(b"c")?;
            (cut, seq)
        };
        assert_eq!((cut, seq), (2, 2));
        assert_eq!(reopen(dir.path())?.len(), 3);
        // What a checkpoint at `cut` leaves to replay.
        let (wal, entries) = Wal::open(dir.path(), SyncMode::Full, Arc::new(StdBackend), seq, cut)?;
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].body, b"c");
        assert!(!first_file(dir.path()).exists());
        wal.append(b"d")?;
        drop(wal);
        let (_, entries) = Wal::open(dir.path(), SyncMode::Full, Arc::new(StdBackend), seq, cut)?;
        assert_eq!(
            entries.iter().map(|e| e.lsn).collect::<Vec<_>>(),
            vec![3, 4]
        );
        Ok(())
    }

    #[test]
    fn failed_sync_fails_the_group_and_the_log_recovers() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
        let disk = FaultyBackend::new();
        {
            let (wal, _) = Wal::open(dir.path(), SyncMode::Full, Arc::new(disk.clone()), 1, 0)?;
            wal.append(b"good")?;
            for fault in [Fault::SyncIo, Fault::NoSpace, Fault::WriteIo] {
                disk.set(fault);
                let err = wal.append(b"failed").unwrap_err();
                assert!(matches!(err, Error::CommitFailed(_)), "{err}");
                // Still failing: still an error, never a panic or a hang.
                assert!(wal.append(b"failed too").is_err());
                disk.clear();
                wal.append(b"after")?;
            }
        }
        let bodies = reopen(dir.path())?;
        assert_eq!(
            bodies,
            vec![
                b"good".to_vec(),
                b"after".to_vec(),
                b"after".to_vec(),
                b"after".to_vec()
            ]
        );
        Ok(())
    }

    #[test]
    fn records_after_the_last_good_lsn_of_a_rolled_file_are_ignored() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
        {
            let (wal, _) = open(dir.path(), SyncMode::Full)?;
            wal.append(b"good")?;
            wal.append(b"failed")?;
        }
        // As if record 2's group failed but its bytes reached the old file anyway: the
        // next file says the last good LSN was 1.
        std::fs::write(dir.path().join(file_name(2)), header(1))
            .map_err(|e| Error::io("wal", e))?;
        assert_eq!(reopen(dir.path())?, vec![b"good".to_vec()]);
        Ok(())
    }
}
