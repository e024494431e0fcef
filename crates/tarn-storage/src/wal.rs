//! The database-wide write-ahead log: framing, group commit and recovery.
//!
//! File layout (little-endian):
//!
//! ```text
//! header:  b"TARNWAL\0" | format version u32 | reserved u32
//! record:  payload length u32 | crc32(payload) u32 | payload
//! payload: lsn u64 | body
//! ```
//!
//! Writers append their frame to a shared buffer and wait; whichever writer finds no
//! flush in progress becomes the leader, writes everything buffered with one `write` and
//! one `fdatasync`, and wakes the others (group commit). A failed write or sync fails
//! every record of that group; the file is cut back to its last durable length and the
//! group's LSNs are never reused, so a failed statement cannot reappear after a restart.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use parking_lot::{Condvar, Mutex};

use crate::{Error, Result};

const MAGIC: &[u8; 8] = b"TARNWAL\0";
/// On-disk format version of WAL files.
pub const WAL_FORMAT_VERSION: u32 = 1;
const HEADER_LEN: u64 = 16;
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

struct WalState {
    file: File,
    buf: Vec<u8>,
    next_lsn: u64,
    durable_lsn: u64,
    durable_len: u64,
    flushing: bool,
    /// LSN ranges (inclusive) whose group failed, with the error text.
    failed: Vec<(u64, u64, String)>,
}

/// The write-ahead log of one database.
pub struct Wal {
    path: PathBuf,
    sync: SyncMode,
    state: Mutex<WalState>,
    flushed: Condvar,
}

impl Wal {
    /// Opens (or creates) the log at `path`, recovering its records. A torn or garbage
    /// tail is cut off; a corrupt record followed by valid ones is refused.
    pub fn open(path: &Path, sync: SyncMode) -> Result<(Wal, Vec<WalEntry>)> {
        let exists = path.exists();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        let (entries, good_len) = if exists && file_len(&file, path)? > 0 {
            let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
            recover(path, &bytes)?
        } else {
            let mut header = Vec::with_capacity(HEADER_LEN as usize);
            header.extend_from_slice(MAGIC);
            header.extend_from_slice(&WAL_FORMAT_VERSION.to_le_bytes());
            header.extend_from_slice(&0u32.to_le_bytes());
            file.write_all(&header).map_err(|e| Error::io(path, e))?;
            file.sync_all().map_err(|e| Error::io(path, e))?;
            sync_parent(path)?;
            (Vec::new(), HEADER_LEN)
        };
        if file_len(&file, path)? != good_len {
            file.set_len(good_len).map_err(|e| Error::io(path, e))?;
            file.sync_all().map_err(|e| Error::io(path, e))?;
        }
        file.seek(SeekFrom::Start(good_len))
            .map_err(|e| Error::io(path, e))?;
        let last = entries.last().map_or(0, |e| e.lsn);
        let wal = Wal {
            path: path.to_path_buf(),
            sync,
            state: Mutex::new(WalState {
                file,
                buf: Vec::new(),
                next_lsn: last + 1,
                durable_lsn: last,
                durable_len: good_len,
                flushing: false,
                failed: Vec::new(),
            }),
            flushed: Condvar::new(),
        };
        Ok((wal, entries))
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
            if st.durable_lsn >= lsn {
                return Ok(lsn);
            }
            if st.flushing {
                self.flushed.wait(&mut st);
                continue;
            }
            // Become the leader of this commit group.
            let buf = std::mem::take(&mut st.buf);
            let first = st.durable_lsn + 1;
            let upto = st.next_lsn - 1;
            st.flushing = true;
            let mut file = match st.file.try_clone() {
                Ok(f) => f,
                Err(e) => {
                    st.flushing = false;
                    st.failed.push((first, upto, e.to_string()));
                    self.flushed.notify_all();
                    continue;
                }
            };
            drop(st);
            let res = file.write_all(&buf).and_then(|()| match self.sync {
                SyncMode::Full => file.sync_data(),
                SyncMode::Process => Ok(()),
            });
            st = self.state.lock();
            st.flushing = false;
            match res {
                Ok(()) => {
                    st.durable_lsn = upto;
                    st.durable_len += buf.len() as u64;
                }
                Err(e) => {
                    // Never retry a failed fsync on the same data: cut the file back to
                    // what is known durable and fail the whole group.
                    let msg = format!("{}: {e}", self.path.display());
                    let durable_len = st.durable_len;
                    let _ = st.file.set_len(durable_len);
                    let _ = st.file.seek(SeekFrom::Start(durable_len));
                    st.durable_lsn = upto;
                    st.failed.push((first, upto, msg));
                }
            }
            self.flushed.notify_all();
        }
    }
}

fn file_len(file: &File, path: &Path) -> Result<u64> {
    Ok(file.metadata().map_err(|e| Error::io(path, e))?.len())
}

/// Fsyncs the directory holding `path`, so a newly created file's name is durable.
pub(crate) fn sync_parent(path: &Path) -> Result<()> {
    if let Some(dir) = path.parent() {
        let d = File::open(dir).map_err(|e| Error::io(dir, e))?;
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
fn recover(path: &Path, bytes: &[u8]) -> Result<(Vec<WalEntry>, u64)> {
    if bytes.len() < HEADER_LEN as usize {
        // A crash while creating the file: nothing was ever acknowledged in it.
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

    fn reopen(path: &Path) -> Result<Vec<Vec<u8>>> {
        let (_, entries) = Wal::open(path, SyncMode::Full)?;
        Ok(entries.into_iter().map(|e| e.body).collect())
    }

    #[test]
    fn append_and_recover() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
        let path = dir.path().join("wal");
        {
            let (wal, entries) = Wal::open(&path, SyncMode::Full)?;
            assert!(entries.is_empty());
            assert_eq!(wal.append(b"one")?, 1);
            assert_eq!(wal.append(b"two")?, 2);
        }
        assert_eq!(reopen(&path)?, vec![b"one".to_vec(), b"two".to_vec()]);
        Ok(())
    }

    #[test]
    fn torn_and_garbage_tails_are_cut() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
        let path = dir.path().join("wal");
        {
            let (wal, _) = Wal::open(&path, SyncMode::Process)?;
            wal.append(b"kept")?;
            wal.append(b"torn")?;
        }
        let full = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        for cut in 1..(4 + 8 + 8) {
            std::fs::write(&path, &full[..full.len() - cut]).map_err(|e| Error::io(&path, e))?;
            assert_eq!(reopen(&path)?, vec![b"kept".to_vec()], "cut {cut}");
        }
        let mut garbage = full.clone();
        garbage.extend_from_slice(&[0xAB; 100]);
        std::fs::write(&path, &garbage).map_err(|e| Error::io(&path, e))?;
        assert_eq!(reopen(&path)?.len(), 2);
        // The garbage was cut off: appending after it works and survives.
        {
            let (wal, _) = Wal::open(&path, SyncMode::Full)?;
            wal.append(b"three")?;
        }
        assert_eq!(reopen(&path)?.len(), 3);
        Ok(())
    }

    #[test]
    fn corrupt_middle_is_refused() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
        let path = dir.path().join("wal");
        {
            let (wal, _) = Wal::open(&path, SyncMode::Process)?;
            wal.append(b"first record")?;
            wal.append(b"second record")?;
        }
        let mut bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        bytes[HEADER_LEN as usize + 20] ^= 0x01;
        std::fs::write(&path, &bytes).map_err(|e| Error::io(&path, e))?;
        let err = reopen(&path).unwrap_err().to_string();
        assert!(err.contains("corruption detected"), "{err}");
        assert!(err.contains("wal"), "{err}");
        Ok(())
    }

    #[test]
    fn newer_version_is_refused_with_both_numbers() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
        let path = dir.path().join("wal");
        drop(Wal::open(&path, SyncMode::Full)?);
        let mut bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        bytes[8..12].copy_from_slice(&7u32.to_le_bytes());
        std::fs::write(&path, &bytes).map_err(|e| Error::io(&path, e))?;
        let err = reopen(&path).unwrap_err().to_string();
        assert!(
            err.contains("version 7") && err.contains("version 1"),
            "{err}"
        );
        Ok(())
    }

    #[test]
    fn group_commit_from_many_threads() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
        let path = dir.path().join("wal");
        {
            let (wal, _) = Wal::open(&path, SyncMode::Full)?;
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
        assert_eq!(reopen(&path)?.len(), 400);
        Ok(())
    }
}
