//! The one place storage maps files into memory (the only `unsafe` in Tarn).

#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::path::Path;

/// Maps the whole of `path` read-only and returns it as shared bytes that keep the
/// mapping alive: arrays decoded from slices of it point straight into the page cache
/// (zero copy, and not anonymous memory).
pub fn map(path: &Path) -> io::Result<bytes::Bytes> {
    let file = File::open(path)?;
    // SAFETY: a mapped file must not change underneath the mapping. Segment files are
    // written completely, fsynced and renamed into place before they are mapped, and Tarn
    // never writes, truncates or reuses them afterwards (they are only deleted, which
    // keeps existing mappings valid). The database directory is locked against other
    // Tarn processes. Every block is checksummed before its bytes are used as data.
    let mmap = unsafe { memmap2::Mmap::map(&file)? };
    Ok(bytes::Bytes::from_owner(mmap))
}
