//! The database-wide write-ahead log: framing, group commit, rotation and recovery.
//!
//! The log is a directory of files `NNNNNNNNNN.wal` (consecutive sequence numbers), each
//! a header and then commit groups (little-endian):
//!
//! ```text
//! header:  b"TARNWAL\0" | format version u32 | flags u32 (bit 0: prev_good_lsn was
//!          fsynced) | prev_good_lsn u64 | first lsn u64 (of the file's first group)
//!          | reserved u32 | crc32(the 36 bytes before) u32
//! group:   b"GRP1" | flags u32 (bit 0: fsynced before acknowledging) | first lsn u64
//!          | last lsn u64 | body length u64 | crc32(body) u32 | crc32(the 36 bytes before) u32
//!          | body: records with consecutive LSNs, each  lsn u64 | length u32 | payload
//! ```
//!
//! Writers append their record to a shared buffer and wait; whichever writer finds no
//! flush in progress becomes the leader, writes everything buffered as one group with
//! one `write` and one `fdatasync`, and wakes the others (group commit). Only one group
//! is ever in flight, so after a crash only the last group of the log can be torn.
//!
//! Recovery accepts a group only when its header and body checksums hold and its LSNs
//! follow on exactly (a file's groups are consecutive, from the first LSN its header
//! names). At the first group that fails, it decides between a torn tail and corruption:
//! if a valid group marked fsynced lies after it, with LSNs that could follow the damage
//! (no more records than fit in the bytes between), acknowledged history is damaged in
//! the middle and the log is refused, naming the file and the offset; otherwise the
//! damage is the unacknowledged last group (a power cut can leave any subset of its pages
//! on disk), which is cut off. Groups written with [`SyncMode::Process`] are not marked
//! fsynced: that mode promises to survive a process crash, and after a power cut its log
//! is cut at the first damage, later files included.
//!
//! Across files, a header's `prev_good_lsn` is also a promise: with the fsynced flag,
//! every record up to it was durable, so recovery that finds less in the files before
//! refuses (naming the file where history ends early). The file a manifest names was
//! fsynced before the manifest was written, so damage to its header is corruption too.
//!
//! A failed write or sync fails every record of its group and is never retried on the
//! same file (the kernel may have dropped the dirty pages): the log rolls to a new file
//! whose header (fsynced at once) names the last good LSN, and recovery ignores anything
//! after that LSN in earlier files, so a failed statement does not reappear after a
//! restart. When even that roll fails, the callers are told their statements' outcome
//! is unknown (the group may survive a crash), and the next append tries the roll
//! again before anything else is acknowledged. A checkpoint rotates to a new file the
//! same way and deletes the files it has made redundant.

use std::collections::BTreeSet;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use tarn_format::{u32_at, u64_at};

use crate::backend::{FileBackend, WriteFile};
use crate::{Error, Result};

const MAGIC: &[u8; 8] = b"TARNWAL\0";
/// On-disk format version of WAL files.
pub const WAL_FORMAT_VERSION: u32 = 3;
pub(crate) const HEADER_LEN: usize = 40;
pub(crate) const GROUP_MAGIC: &[u8; 4] = b"GRP1";
pub(crate) const GROUP_HEADER: usize = 40;

// Offsets in the file header (see the module docs).
const H_VERSION: usize = 8;
const H_FLAGS: usize = 12;
const H_PREV_GOOD: usize = 16;
const H_FIRST_LSN: usize = 24;
const H_CRC: usize = 36;
// Offsets in a group header.
const G_FLAGS: usize = 4;
const G_FIRST: usize = 8;
const G_LAST: usize = 16;
const G_BODY_LEN: usize = 24;
const G_BODY_CRC: usize = 32;
const G_CRC: usize = 36;
// Offsets in a record header.
const R_LSN: usize = 0;
const R_LEN: usize = 8;
const FLAG_SYNCED: u32 = 1;
/// File header flag: `prev_good_lsn` names records that were fsynced.
const FLAG_PREV_DURABLE: u32 = 1;
const RECORD_HEADER: usize = 12;
/// Largest record payload (one commit): the log refuses bigger ones before writing.
pub const MAX_RECORD_BYTES: u64 = 1 << 30;

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
    /// The file it was read from.
    pub path: Arc<Path>,
    /// The record body.
    pub body: Vec<u8>,
}

type SharedFile = Arc<Mutex<Box<dyn WriteFile>>>;

struct WalState {
    /// The file being appended to; `None` after a failure until a new file is created.
    file: Option<SharedFile>,
    seq: u64,
    /// Records waiting for the next group.
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
    /// Groups that failed: their LSN range (inclusive), the error text, and how many of
    /// their writers have not yet been told (the entry goes when none is left).
    failed: Vec<Failed>,
    /// Files whose header no fsync has covered yet (with `SyncMode::Full`, such a file
    /// holds nothing acknowledged).
    unsynced: BTreeSet<u64>,
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

/// The WAL files in `dir`, by sequence number (none when `dir` does not exist).
fn list(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut files = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(files),
        Err(e) => return Err(Error::io(dir, e)),
    };
    for entry in entries {
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

/// A failed group, until each of its writers has read the error.
struct Failed {
    first: u64,
    last: u64,
    message: String,
    untold: u64,
}

fn file_header(prev_good_lsn: u64, durable: bool, first_lsn: u64) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEADER_LEN);
    h.extend_from_slice(MAGIC);
    h.extend_from_slice(&WAL_FORMAT_VERSION.to_le_bytes());
    let flags = if durable { FLAG_PREV_DURABLE } else { 0 };
    h.extend_from_slice(&flags.to_le_bytes());
    h.extend_from_slice(&prev_good_lsn.to_le_bytes());
    h.extend_from_slice(&first_lsn.to_le_bytes());
    h.extend_from_slice(&0u32.to_le_bytes());
    let crc = crc32fast::hash(&h);
    h.extend_from_slice(&crc.to_le_bytes());
    h
}

fn group_header(synced: bool, first: u64, last: u64, body: &[u8]) -> [u8; GROUP_HEADER] {
    let mut h = [0u8; GROUP_HEADER];
    h[0..G_FLAGS].copy_from_slice(GROUP_MAGIC);
    h[G_FLAGS..G_FIRST].copy_from_slice(&(if synced { FLAG_SYNCED } else { 0 }).to_le_bytes());
    h[G_FIRST..G_LAST].copy_from_slice(&first.to_le_bytes());
    h[G_LAST..G_BODY_LEN].copy_from_slice(&last.to_le_bytes());
    h[G_BODY_LEN..G_BODY_CRC].copy_from_slice(&(body.len() as u64).to_le_bytes());
    h[G_BODY_CRC..G_CRC].copy_from_slice(&crc32fast::hash(body).to_le_bytes());
    let crc = crc32fast::hash(&h[0..G_CRC]);
    h[G_CRC..GROUP_HEADER].copy_from_slice(&crc.to_le_bytes());
    h
}

/// A group that passed every check: its LSN range, flags and records.
struct Group {
    last: u64,
    end: usize,
    /// (lsn, payload range in the file)
    records: Vec<(u64, Range<usize>)>,
}

/// The group header at `pos`, if its magic and checksum hold: (flags, first LSN, last
/// LSN, end offset).
fn header_at(bytes: &[u8], pos: usize) -> Option<(u32, u64, u64, usize)> {
    let h = bytes.get(pos..pos.checked_add(GROUP_HEADER)?)?;
    if !h.starts_with(GROUP_MAGIC) || crc32fast::hash(&h[0..G_CRC]) != u32_at(h, G_CRC)? {
        return None;
    }
    let (flags, first, last) = (u32_at(h, G_FLAGS)?, u64_at(h, G_FIRST)?, u64_at(h, G_LAST)?);
    let end = usize::try_from(u64_at(h, G_BODY_LEN)?)
        .ok()
        .and_then(|len| (pos + GROUP_HEADER).checked_add(len))?;
    (last >= first).then_some((flags, first, last, end))
}

/// The group at `pos`, if it is whole and starts at LSN `first`: header and body
/// checksums hold and the records fill the body exactly with consecutive LSNs.
fn group_at(bytes: &[u8], pos: usize, first: u64) -> Option<Group> {
    let (_, found, last, end) = header_at(bytes, pos)?;
    if found != first {
        return None;
    }
    let start = pos + GROUP_HEADER;
    let body = bytes.get(start..end)?;
    if crc32fast::hash(body) != u32_at(bytes, pos + G_BODY_CRC)? {
        return None;
    }
    let mut records = Vec::new();
    let mut p = 0;
    let mut expect = first;
    while p < body.len() {
        let rh = body.get(p..p + RECORD_HEADER)?;
        let (lsn, len) = (u64_at(rh, R_LSN)?, u32_at(rh, R_LEN)? as usize);
        let rec_end = (p + RECORD_HEADER).checked_add(len)?;
        if lsn != expect || rec_end > body.len() {
            return None;
        }
        records.push((lsn, start + p + RECORD_HEADER..start + rec_end));
        expect = lsn.checked_add(1)?;
        p = rec_end;
    }
    if expect != last.checked_add(1)? {
        return None;
    }
    Some(Group { last, end, records })
}

/// The offset of a group header marked fsynced after damage at `from`: proof that
/// acknowledged history follows the damage. With `SyncMode::Full` only one group is in
/// flight, and it is written after the one before it was fsynced, so any later group
/// that started — even one torn by the crash, whose header alone survived — shows that
/// the damaged group had been acknowledged. With `expect` (the LSN the damaged group
/// started at), the header must also be one that could follow it: its first LSN at most
/// as far past `expect` as records fit in the bytes between (each takes 12 bytes or
/// more), so bytes that merely look like a header, inside a stored value, rarely
/// qualify. One pass, header checksums only.
fn durable_group_from(bytes: &[u8], from: usize, expect: Option<u64>) -> Option<usize> {
    let mut p = from + 1;
    while p + GROUP_HEADER <= bytes.len() {
        let at = p + bytes[p..].windows(4).position(|w| w == GROUP_MAGIC)?;
        p = at + 1;
        let Some((flags, first, _, _)) = header_at(bytes, at) else {
            continue;
        };
        let room = ((at - from) / RECORD_HEADER) as u64 + 1;
        if flags & FLAG_SYNCED != 0 && expect.is_none_or(|e| first >= e && first - e <= room) {
            return Some(at);
        }
    }
    None
}

/// What recovery made of one file.
struct FileScan {
    seq: u64,
    path: PathBuf,
    /// `None` when the header is damaged and nothing durable is in the file (it was
    /// being created when the machine stopped).
    prev_good: Option<u64>,
    /// Whether `prev_good` names fsynced records.
    prev_durable: bool,
    groups: Vec<Group>,
    bytes: Vec<u8>,
    /// Length of the whole groups at the front.
    good_len: u64,
}

fn scan_file(seq: u64, path: &Path) -> Result<FileScan> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let corrupt = |message: String| Error::Corrupt {
        path: path.to_path_buf(),
        message,
    };
    if bytes.starts_with(MAGIC)
        && let Some(version) = u32_at(&bytes, H_VERSION)
        && version != WAL_FORMAT_VERSION
    {
        return Err(Error::FormatVersion {
            path: path.to_path_buf(),
            found: version,
            supported: WAL_FORMAT_VERSION,
        });
    }
    // (prev_good_lsn, flags, first lsn) of a header whose magic and checksum hold.
    let header = bytes
        .get(..H_CRC)
        .filter(|h| h.starts_with(MAGIC) && Some(crc32fast::hash(h)) == u32_at(&bytes, H_CRC))
        .and_then(|h| {
            Some((
                u64_at(h, H_PREV_GOOD)?,
                u32_at(h, H_FLAGS)?,
                u64_at(h, H_FIRST_LSN)?,
            ))
        });
    let Some((prev_good, flags, first_lsn)) = header else {
        // A group is fsynced with its file's header: a durable group behind a damaged
        // header means the header was damaged after it was written.
        if let Some(at) = durable_group_from(&bytes, 0, None) {
            return Err(corrupt(format!(
                "damaged file header, but a commit group written after it was fsynced \
                 begins at byte {at}"
            )));
        }
        return Ok(FileScan {
            seq,
            path: path.to_path_buf(),
            prev_good: None,
            prev_durable: false,
            groups: Vec::new(),
            bytes,
            good_len: 0,
        });
    };
    let prev_durable = flags & FLAG_PREV_DURABLE != 0;
    let mut expect = first_lsn;
    let mut groups: Vec<Group> = Vec::new();
    let mut pos = HEADER_LEN;
    while pos < bytes.len() {
        match group_at(&bytes, pos, expect) {
            Some(g) => {
                pos = g.end;
                expect = g.last + 1;
                groups.push(g);
            }
            None => {
                if let Some(at) = durable_group_from(&bytes, pos, Some(expect)) {
                    return Err(corrupt(format!(
                        "damaged commit group at byte {pos} is followed by a later group \
                         at byte {at}, so it had been acknowledged"
                    )));
                }
                break;
            }
        }
    }
    Ok(FileScan {
        seq,
        path: path.to_path_buf(),
        prev_good: Some(prev_good),
        prev_durable,
        groups,
        bytes,
        good_len: pos as u64,
    })
}

/// The log as found on disk, read but not yet touched: the records to replay and what
/// opening it for appends will clean up. Nothing is changed on disk until
/// [`Recovered::open`], so a database that fails to open leaves its files as they were.
pub struct Recovered {
    dir: PathBuf,
    /// Records after the checkpoint's LSN, in order.
    pub entries: Vec<WalEntry>,
    /// Whether any file holds a whole commit group (data a checkpoint may not hold).
    pub has_groups: bool,
    /// The highest file number found (0: none). Above 1, a checkpoint has happened.
    pub max_seq: u64,
    /// Files a checkpoint made redundant.
    stale: Vec<PathBuf>,
    /// Files after a hole in a Process-mode log (the power went before the records
    /// before them reached the disk): the log ends before them.
    discard: Vec<PathBuf>,
    /// Files whose records were replayed: fsynced at open, before a new header promises
    /// they were durable.
    replayed: Vec<PathBuf>,
    /// A last file whose creation never became durable (it holds nothing).
    torn_last: Option<(u64, PathBuf)>,
    /// The file to append to: (seq, path, whole-group length, file length).
    tail: Option<(u64, PathBuf, u64, u64)>,
    last_lsn: u64,
    first_seq: u64,
}

impl Wal {
    /// Reads the log in `dir` without changing anything: the records after `after_lsn`
    /// (what the last checkpoint holds) from files numbered `first_seq` and up. With
    /// `require_first` (a manifest names `first_seq`), that file must exist.
    pub fn recover(
        dir: &Path,
        first_seq: u64,
        after_lsn: u64,
        require_first: bool,
    ) -> Result<Recovered> {
        let files = list(dir)?;
        let stale: Vec<PathBuf> = files
            .iter()
            .filter(|(s, _)| *s < first_seq)
            .map(|(_, p)| p.clone())
            .collect();
        let live: Vec<(u64, PathBuf)> =
            files.into_iter().filter(|(s, _)| *s >= first_seq).collect();
        let missing = |seq: u64| Error::Corrupt {
            path: dir.join(file_name(seq)),
            message: "write-ahead log file is missing".into(),
        };
        if require_first && live.first().is_none_or(|(s, _)| *s != first_seq) {
            return Err(missing(first_seq));
        }
        for w in live.windows(2) {
            if w[1].0 != w[0].0 + 1 {
                return Err(missing(w[0].0 + 1));
            }
        }
        let scans = live
            .iter()
            .map(|(seq, path)| scan_file(*seq, path))
            .collect::<Result<Vec<_>>>()?;
        let mut entries = Vec::new();
        let mut last_lsn = after_lsn;
        let mut has_groups = false;
        let mut torn_last = None;
        let mut tail = None;
        let mut discard: Vec<PathBuf> = Vec::new();
        for (i, scan) in scans.iter().enumerate() {
            let next = scans.get(i + 1);
            // Records after the next file's last good LSN belong to a failed group.
            let limit = next.and_then(|n| n.prev_good).unwrap_or(u64::MAX);
            has_groups |= !scan.groups.is_empty();
            let path: Arc<Path> = Arc::from(scan.path.as_path());
            for g in &scan.groups {
                for (lsn, range) in &g.records {
                    if *lsn > last_lsn && *lsn <= limit {
                        last_lsn = *lsn;
                        entries.push(WalEntry {
                            lsn: *lsn,
                            path: path.clone(),
                            body: scan.bytes[range.clone()].to_vec(),
                        });
                    }
                }
            }
            // The next file says its predecessors held every record up to its last good
            // LSN. If they hold less, history has a hole: with that promise fsynced,
            // acknowledged records were lost (refuse); without it (Process mode), the
            // power went before they reached the disk, and the log ends here.
            let hole = next
                .and_then(|n| n.prev_good.map(|p| (n, p)))
                .filter(|(_, promised)| *promised > last_lsn);
            if let Some((n, promised)) = hole {
                if n.prev_durable {
                    return Err(Error::Corrupt {
                        path: scan.path.clone(),
                        message: format!(
                            "the log ends at LSN {last_lsn} here, but {} says records up to \
                             {promised} were durable",
                            n.path.display()
                        ),
                    });
                }
                discard.extend(scans[i + 1..].iter().map(|n| n.path.clone()));
            }
            match scan.prev_good {
                Some(_) => {
                    tail = Some((
                        scan.seq,
                        scan.path.clone(),
                        scan.good_len,
                        scan.bytes.len() as u64,
                    ))
                }
                // The file a manifest names was fsynced before the manifest was
                // written: a damaged header there is not a torn creation.
                None if require_first && scan.seq == first_seq => {
                    return Err(Error::Corrupt {
                        path: scan.path.clone(),
                        message: "damaged file header".into(),
                    });
                }
                None if i + 1 == scans.len() => torn_last = Some((scan.seq, scan.path.clone())),
                None => {}
            }
            if !discard.is_empty() {
                break;
            }
        }
        let max_seq = scans.last().map_or(0, |s| s.seq);
        let replayed: Vec<PathBuf> = scans
            .iter()
            .filter(|s| s.prev_good.is_some() && !discard.contains(&s.path))
            .map(|s| s.path.clone())
            .collect();
        Ok(Recovered {
            dir: dir.to_path_buf(),
            entries,
            has_groups,
            max_seq,
            stale,
            discard,
            replayed,
            torn_last,
            tail,
            last_lsn,
            first_seq,
        })
    }
}

impl Recovered {
    /// Opens the log for appends: deletes the files the checkpoint made redundant, files
    /// after a hole, and a last file that never got a durable header; fsyncs what was
    /// replayed; cuts a torn last group off; or starts the first file (fsynced, with its
    /// directory).
    pub fn open(self, sync: SyncMode, backend: Arc<dyn FileBackend>) -> Result<Wal> {
        std::fs::create_dir_all(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        for path in self.stale.iter().chain(&self.discard) {
            backend.remove(path).map_err(|e| Error::io(path, e))?;
        }
        let mut state = WalState {
            file: None,
            seq: self.first_seq.saturating_sub(1),
            buf: Vec::new(),
            next_lsn: self.last_lsn + 1,
            resolved_lsn: self.last_lsn,
            good_lsn: self.last_lsn,
            durable_len: 0,
            dir_dirty: false,
            flushing: false,
            failed: Vec::new(),
            unsynced: BTreeSet::new(),
        };
        if let Some((seq, path)) = &self.torn_last {
            backend.remove(path).map_err(|e| Error::io(path, e))?;
            state.seq = seq - 1;
        }
        let tail = self.tail.clone().filter(|_| self.torn_last.is_none());
        // What recovery read may have come from the page cache of a process that died
        // (or from a log written without fsyncs): make it durable before a new header
        // promises it was.
        for path in &self.replayed {
            if tail.as_ref().is_some_and(|t| t.1 == *path) {
                continue;
            }
            backend
                .open_append(path)
                .and_then(|mut f| f.sync_data())
                .map_err(|e| Error::io(path, e))?;
        }
        if let Some((seq, path, good_len, len)) = &tail {
            let mut f = backend.open_append(path).map_err(|e| Error::io(path, e))?;
            if len != good_len {
                f.set_len(*good_len).map_err(|e| Error::io(path, e))?;
            }
            f.sync_data().map_err(|e| Error::io(path, e))?;
            state.file = Some(Arc::new(Mutex::new(f)));
            state.seq = *seq;
            state.durable_len = *good_len;
        } else if let Some((seq, _, _, _)) = &self.tail {
            state.seq = state.seq.max(*seq);
        }
        backend
            .sync_dir(&self.dir)
            .map_err(|e| Error::io(&self.dir, e))?;
        let wal = Wal {
            dir: self.dir,
            sync,
            backend,
            state: Mutex::new(state),
            flushed: Condvar::new(),
        };
        if wal.state.lock().file.is_none() {
            let mut st = wal.state.lock();
            wal.roll(&mut st, true)?;
        }
        Ok(wal)
    }
}

impl Wal {
    /// Starts a new file after the last good record. With `durable`, the file and the
    /// directory are fsynced before returning (otherwise the next group commit does it).
    /// On failure the current file stays (a failed rotation leaves appends where they
    /// were; after a failed group the caller drops it).
    fn roll(&self, st: &mut WalState, durable: bool) -> Result<()> {
        let seq = st.seq + 1;
        let path = self.dir.join(file_name(seq));
        let mut f = self
            .backend
            .create(&path)
            .map_err(|e| Error::io(&path, e))?;
        let header = file_header(
            st.good_lsn,
            self.sync == SyncMode::Full,
            st.resolved_lsn + 1,
        );
        let res = f.write_all(&header).and_then(|()| {
            if durable {
                f.sync_data()?;
                self.backend.sync_dir(&self.dir)
            } else {
                Ok(())
            }
        });
        if let Err(e) = res {
            let _ = self.backend.remove(&path);
            return Err(Error::io(&path, e));
        }
        st.seq = seq;
        st.file = Some(Arc::new(Mutex::new(f)));
        st.durable_len = HEADER_LEN as u64;
        st.dir_dirty = !durable;
        if !durable {
            st.unsynced.insert(seq);
        }
        Ok(())
    }

    /// Moves appends to a new file and returns `(last LSN in the old files, new file's
    /// sequence number)`. The caller guarantees no append is in flight (the database's
    /// commit gate), so the old files hold exactly the records up to that LSN. The new
    /// file is made durable by [`Wal::sync_file`] or the next group commit.
    pub fn rotate(&self) -> Result<(u64, u64)> {
        let mut st = self.state.lock();
        if st.flushing || !st.buf.is_empty() {
            return Err(Error::Internal(
                "WAL rotation with appends in flight".into(),
            ));
        }
        self.roll(&mut st, false)?;
        Ok((st.resolved_lsn, st.seq))
    }

    /// Makes the log from file `seq` on durable for a manifest to name, and returns the
    /// file it should name: `seq` itself, fsynced with the directory so it (and its
    /// header) exists after a power cut — or, with `SyncMode::Full`, a later file when
    /// no fsync ever covered `seq` (a failure rolled past it before any group was
    /// acknowledged in it, and a fresh descriptor's fsync cannot vouch for pages the
    /// kernel may have dropped).
    pub fn sync_file(&self, seq: u64) -> Result<u64> {
        let mut seq = seq;
        loop {
            let (current, file, unsynced) = {
                let st = self.state.lock();
                (st.seq, st.file.clone(), st.unsynced.contains(&seq))
            };
            let path = self.dir.join(file_name(seq));
            if seq < current && unsynced && self.sync == SyncMode::Full {
                seq += 1;
                continue;
            }
            match (seq == current, file) {
                (true, Some(file)) => file.lock().sync_data(),
                _ => self
                    .backend
                    .open_append(&path)
                    .and_then(|mut f| f.sync_data()),
            }
            .map_err(|e| Error::io(&path, e))?;
            self.backend
                .sync_dir(&self.dir)
                .map_err(|e| Error::io(&self.dir, e))?;
            if seq == current {
                self.state.lock().unsynced.remove(&seq);
            }
            return Ok(seq);
        }
    }

    /// The number of the file appends go to.
    pub fn current_seq(&self) -> u64 {
        self.state.lock().seq
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
        if body.len() as u64 > MAX_RECORD_BYTES {
            return Err(Error::TooLarge {
                what: "statement's log record".into(),
                size: body.len() as u64,
                limit: MAX_RECORD_BYTES,
            });
        }
        let mut st = self.state.lock();
        if st.file.is_none() {
            // An earlier failure left no file to append to: start one now.
            self.roll(&mut st, true)
                .map_err(|e| Error::CommitFailed(e.to_string()))?;
        }
        let lsn = st.next_lsn;
        st.next_lsn += 1;
        if st.buf.is_empty() {
            // Room for the group header, filled in by the leader: one write per group.
            st.buf.resize(GROUP_HEADER, 0);
        }
        st.buf.reserve(RECORD_HEADER + body.len());
        st.buf.extend_from_slice(&lsn.to_le_bytes());
        st.buf.extend_from_slice(&(body.len() as u32).to_le_bytes());
        st.buf.extend_from_slice(body);
        loop {
            if let Some(i) = st
                .failed
                .iter()
                .position(|f| f.first <= lsn && lsn <= f.last)
            {
                let f = &mut st.failed[i];
                let message = f.message.clone();
                f.untold -= 1;
                if f.untold == 0 {
                    st.failed.swap_remove(i);
                }
                return Err(Error::CommitFailed(message));
            }
            if st.resolved_lsn >= lsn {
                return Ok(lsn);
            }
            if st.flushing {
                self.flushed.wait(&mut st);
                continue;
            }
            // Become the leader of this commit group.
            let mut group = std::mem::take(&mut st.buf);
            let first = st.resolved_lsn + 1;
            let upto = st.next_lsn - 1;
            let dir_dirty = std::mem::take(&mut st.dir_dirty);
            let Some(file) = st.file.clone() else {
                st.failed.push(Failed {
                    first,
                    last: upto,
                    message: "write-ahead log has no open file".into(),
                    untold: upto - first + 1,
                });
                st.resolved_lsn = upto;
                self.flushed.notify_all();
                continue;
            };
            st.flushing = true;
            drop(st);
            let synced = self.sync == SyncMode::Full;
            let header = group_header(synced, first, upto, &group[GROUP_HEADER..]);
            group[..GROUP_HEADER].copy_from_slice(&header);
            let res = {
                let mut f = file.lock();
                f.write_all(&group)
                    .and_then(|()| if synced { f.sync_data() } else { Ok(()) })
            }
            .and_then(|()| match (synced, dir_dirty) {
                (true, true) => self.backend.sync_dir(&self.dir),
                _ => Ok(()),
            });
            st = self.state.lock();
            st.flushing = false;
            match res {
                Ok(()) => {
                    st.resolved_lsn = upto;
                    st.good_lsn = upto;
                    st.durable_len += group.len() as u64;
                    if synced {
                        let seq = st.seq;
                        st.unsynced.remove(&seq);
                    }
                }
                Err(e) => {
                    let mut message =
                        format!("{}: {e}", self.dir.join(file_name(st.seq)).display());
                    // Best effort: cut what this group wrote; recovery ignores it anyway
                    // once the next file names the last good LSN.
                    let durable_len = st.durable_len;
                    let _ = file.lock().set_len(durable_len);
                    st.resolved_lsn = upto;
                    // The next file's header must be durable before the failure is
                    // reported as such, or a crash could bring the failed group back.
                    if let Err(roll) = self.roll(&mut st, true) {
                        st.file = None;
                        message = format!(
                            "{message}; the log could not be fenced off after it ({roll}), so \
                             the statement may still appear after a crash"
                        );
                    }
                    st.failed.push(Failed {
                        first,
                        last: upto,
                        message,
                        untold: upto - first + 1,
                    });
                }
            }
            self.flushed.notify_all();
        }
    }
}

#[cfg(test)]
#[path = "wal_tests.rs"]
mod tests;
