//! Tests of the write-ahead log (`wal.rs`): framing, recovery of torn and damaged logs,
//! rolls after failed writes.

use super::*;
use crate::backend::{Fault, FaultyBackend, StdBackend};

fn open_at(dir: &Path, sync: SyncMode, first: u64, after: u64) -> Result<(Wal, Vec<WalEntry>)> {
    let mut r = Wal::recover(dir, first, after, false)?;
    let entries = std::mem::take(&mut r.entries);
    Ok((r.open(sync, Arc::new(StdBackend))?, entries))
}

fn open(dir: &Path, sync: SyncMode) -> Result<(Wal, Vec<WalEntry>)> {
    open_at(dir, sync, 1, 0)
}

fn reopen(dir: &Path) -> Result<Vec<Vec<u8>>> {
    let (_, entries) = open(dir, SyncMode::Full)?;
    Ok(entries.into_iter().map(|e| e.body).collect())
}

fn first_file(dir: &Path) -> PathBuf {
    dir.join(file_name(1))
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::io(path, e))
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|e| Error::io(path, e))
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
fn a_torn_last_group_is_cut_whatever_survived_of_it() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
    let path = first_file(dir.path());
    {
        let (wal, _) = open(dir.path(), SyncMode::Full)?;
        wal.append(b"kept")?;
        wal.append(&[7u8; 300])?;
    }
    let full = read(&path)?;
    let last_group = HEADER_LEN + GROUP_HEADER + RECORD_HEADER + 4;
    // Any cut inside the last group, and any byte of it damaged or zeroed.
    for cut in last_group..full.len() {
        write(&path, &full[..cut])?;
        assert_eq!(reopen(dir.path())?, vec![b"kept".to_vec()], "cut at {cut}");
    }
    for at in last_group..full.len() {
        let mut bad = full.clone();
        bad[at] ^= 0x40;
        write(&path, &bad)?;
        assert_eq!(reopen(dir.path())?, vec![b"kept".to_vec()], "flip at {at}");
    }
    let mut zeroed = full.clone();
    zeroed[last_group..].fill(0);
    write(&path, &zeroed)?;
    assert_eq!(reopen(dir.path())?.len(), 1);
    let mut garbage = full.clone();
    garbage.extend_from_slice(&[0xAB; 100]);
    write(&path, &garbage)?;
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
fn damage_before_a_durable_group_is_refused_naming_file_and_offset() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
    let path = first_file(dir.path());
    {
        let (wal, _) = open(dir.path(), SyncMode::Full)?;
        wal.append(b"first record")?;
        wal.append(b"second record")?;
    }
    let good = read(&path)?;
    let second = HEADER_LEN + GROUP_HEADER + RECORD_HEADER + 12;
    for at in HEADER_LEN..second {
        let mut bad = good.clone();
        bad[at] ^= 0x01;
        write(&path, &bad)?;
        let err = reopen(dir.path()).unwrap_err().to_string();
        assert!(err.contains("corruption detected"), "{at}: {err}");
        assert!(err.contains("0000000001.wal"), "{err}");
        assert!(err.contains(&format!("byte {HEADER_LEN}")), "{err}");
        // Refusing changed nothing.
        assert_eq!(read(&path)?, bad);
    }
    // The header is checksummed too: damage there with a durable group after it.
    for at in 0..HEADER_LEN {
        let mut bad = good.clone();
        bad[at] ^= 0x01;
        write(&path, &bad)?;
        assert!(reopen(dir.path()).is_err(), "header byte {at}");
    }
    Ok(())
}

#[test]
fn process_mode_groups_are_cut_at_the_first_damage() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
    let path = first_file(dir.path());
    {
        let (wal, _) = open(dir.path(), SyncMode::Process)?;
        wal.append(b"first record")?;
        wal.append(b"second record")?;
    }
    let mut bad = read(&path)?;
    bad[HEADER_LEN + GROUP_HEADER + 2] ^= 0x01;
    write(&path, &bad)?;
    // Unsynced groups after the damage prove nothing durable was lost.
    assert!(reopen(dir.path())?.is_empty());
    Ok(())
}

#[test]
fn newer_version_is_refused_with_both_numbers() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
    let path = first_file(dir.path());
    drop(open(dir.path(), SyncMode::Full)?);
    let mut bytes = read(&path)?;
    bytes[8..12].copy_from_slice(&7u32.to_le_bytes());
    write(&path, &bytes)?;
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
        assert_eq!(wal.sync_file(seq)?, seq);
        wal.append(b"c")?;
        (cut, seq)
    };
    assert_eq!((cut, seq), (2, 2));
    assert_eq!(reopen(dir.path())?.len(), 3);
    // What a checkpoint at `cut` leaves to replay.
    let (wal, entries) = open_at(dir.path(), SyncMode::Full, seq, cut)?;
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].body, b"c");
    assert!(!first_file(dir.path()).exists());
    wal.append(b"d")?;
    drop(wal);
    let (_, entries) = open_at(dir.path(), SyncMode::Full, seq, cut)?;
    assert_eq!(
        entries.iter().map(|e| e.lsn).collect::<Vec<_>>(),
        vec![3, 4]
    );
    // The file a manifest names must exist; a gap in the numbering is damage.
    std::fs::remove_file(dir.path().join(file_name(seq))).map_err(|e| Error::io("wal", e))?;
    assert!(Wal::recover(dir.path(), seq, cut, true).is_err());
    Ok(())
}

#[test]
fn failed_sync_fails_the_group_and_the_log_recovers() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
    let disk = FaultyBackend::new();
    {
        let r = Wal::recover(dir.path(), 1, 0, false)?;
        let wal = r.open(SyncMode::Full, Arc::new(disk.clone()))?;
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
    write(&dir.path().join(file_name(2)), &file_header(1, false, 3))?;
    assert_eq!(reopen(dir.path())?, vec![b"good".to_vec()]);
    Ok(())
}

#[test]
fn a_last_file_whose_header_never_became_durable_holds_nothing() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
    {
        let (wal, _) = open(dir.path(), SyncMode::Full)?;
        wal.append(b"kept")?;
    }
    // A second file whose creation reached the disk but not its header.
    let second = dir.path().join(file_name(2));
    write(&second, &[0u8; HEADER_LEN])?;
    let r = Wal::recover(dir.path(), 1, 0, true)?;
    // Reading changed nothing…
    assert!(second.exists());
    assert_eq!(r.entries.len(), 1);
    // …opening removes it and appends after the good records.
    let wal = r.open(SyncMode::Full, Arc::new(StdBackend))?;
    wal.append(b"next")?;
    drop(wal);
    assert_eq!(
        reopen(dir.path())?,
        vec![b"kept".to_vec(), b"next".to_vec()]
    );
    Ok(())
}
