//! The framing Tarn's files share, and the little-endian reads every decoder of them
//! makes.
//!
//! Every file Tarn writes is little-endian, begins or ends with an 8-byte magic
//! number, carries a format version where it can change, and is covered by CRC-32
//! (IEEE, `crc32fast`) checksums. The byte layouts, with their offsets, are documented
//! beside the code that writes each kind (and named there as constants):
//!
//! | file | magic | framing | documented in |
//! |---|---|---|---|
//! | WAL file `NNNNNNNNNN.wal` | `TARNWAL\0` at 0 | 40-byte header (version, flags, LSNs, CRC of the 36 bytes before it), then groups of a 40-byte header (`GRP1`) and a CRC-checked body | `tarn-storage/src/wal.rs` |
//! | manifest `MANIFEST` | `TARNMAN\0` at 0 | 20-byte header (version, body length, CRC-32 of the body), then the JSON body | `tarn-storage/src/manifest.rs` |
//! | segment (`segments/`) | `TARNSEG\0` at the end | an Arrow IPC file, key sections, a JSON trailer (sections' offsets, lengths and CRCs), then a 20-byte tail: trailer length, trailer CRC, format version, magic | `tarn-storage/src/segment.rs` |
//! | blob (`files/`) | `TARNBLB1` at the end | blocks, a table of block CRCs, then length u64, CRC u32 of table and length, magic | `tarn-storage/src/blobs.rs` |
//! | text index | `TARNTXT1` at 0 | version, tokenizer, counts, lengths, tantivy files; CRC-32 of everything before it in the last 4 bytes | `tarn-text/src/index.rs` |
//! | vector graph | `TARNHNSW` in its 64-byte footer | body, then a fixed footer (magic, version, counts, body length, CRCs) | `tarn-vector/src/graph.rs` |
//!
//! What this crate gives them: [`Cursor`], a reader of consecutive fields that fails
//! (with `None`) on truncation instead of panicking; [`u16_at`], [`u32_at`] and
//! [`u64_at`] for fields at fixed offsets; and [`split_crc_trailer`] for the files that
//! end in the CRC-32 of everything before it. The decoders read hostile bytes: nothing
//! here panics or allocates by what the bytes claim.

/// Length of a CRC-32 field.
pub const CRC_LEN: usize = 4;

/// The `N` bytes at `offset`, if `bytes` holds them.
fn array_at<const N: usize>(bytes: &[u8], offset: usize) -> Option<[u8; N]> {
    bytes
        .get(offset..offset.checked_add(N)?)
        .and_then(|b| b.try_into().ok())
}

/// The little-endian `u16` at `offset`, if `bytes` holds it.
pub fn u16_at(bytes: &[u8], offset: usize) -> Option<u16> {
    array_at(bytes, offset).map(u16::from_le_bytes)
}

/// The little-endian `u32` at `offset`, if `bytes` holds it.
pub fn u32_at(bytes: &[u8], offset: usize) -> Option<u32> {
    array_at(bytes, offset).map(u32::from_le_bytes)
}

/// The little-endian `u64` at `offset`, if `bytes` holds it.
pub fn u64_at(bytes: &[u8], offset: usize) -> Option<u64> {
    array_at(bytes, offset).map(u64::from_le_bytes)
}

/// `bytes` without its last four, if those are the CRC-32 of the rest; `None` when the
/// file is too short or the checksum does not hold.
pub fn split_crc_trailer(bytes: &[u8]) -> Option<&[u8]> {
    let body_len = bytes.len().checked_sub(CRC_LEN)?;
    let (body, crc) = bytes.split_at(body_len);
    (crc32fast::hash(body) == u32_at(crc, 0)?).then_some(body)
}

/// `body` followed by its CRC-32 (what [`split_crc_trailer`] reads).
pub fn push_crc_trailer(body: &mut Vec<u8>) {
    let crc = crc32fast::hash(body);
    body.extend_from_slice(&crc.to_le_bytes());
}

/// Consecutive little-endian fields of a byte string, read in order; each read is
/// `None` once the bytes run out (the reader stays where it was).
#[derive(Debug, Clone)]
pub struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Cursor { bytes, at: 0 }
    }

    /// The offset of the next read.
    pub fn position(&self) -> usize {
        self.at
    }

    /// The bytes not read yet.
    pub fn rest(&self) -> &'a [u8] {
        &self.bytes[self.at..]
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }

    /// The next byte.
    pub fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    /// The next little-endian `u16`.
    pub fn u16(&mut self) -> Option<u16> {
        let v = u16_at(self.bytes, self.at)?;
        self.at += 2;
        Some(v)
    }

    /// The next little-endian `u32`.
    pub fn u32(&mut self) -> Option<u32> {
        let v = u32_at(self.bytes, self.at)?;
        self.at += 4;
        Some(v)
    }

    /// The next little-endian `u64`.
    pub fn u64(&mut self) -> Option<u64> {
        let v = u64_at(self.bytes, self.at)?;
        self.at += 8;
        Some(v)
    }

    /// Whether the next bytes are `magic` (read past them if so).
    pub fn magic(&mut self, magic: &[u8]) -> bool {
        let at = self.at;
        match self.take(magic.len()) {
            Some(b) if b == magic => true,
            _ => {
                self.at = at;
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_stop_at_the_end_without_panicking() {
        let bytes = [1u8, 0, 2, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 9];
        let mut c = Cursor::new(&bytes);
        assert_eq!(c.u16(), Some(1));
        assert_eq!(c.u32(), Some(2));
        assert_eq!(c.u64(), Some(3));
        assert_eq!(c.u32(), None);
        assert_eq!(c.position(), 14);
        assert_eq!(c.u8(), Some(9));
        assert_eq!(c.u8(), None);
        assert_eq!(c.take(usize::MAX), None);
        assert_eq!(u64_at(&bytes, usize::MAX - 2), None);
        assert_eq!(u32_at(&bytes, 11), Some(0x0900_0000));
        assert_eq!(u32_at(&bytes, 12), None);
    }

    #[test]
    fn a_crc_trailer_covers_every_byte_before_it() {
        let mut file = b"TARNTEST body".to_vec();
        push_crc_trailer(&mut file);
        assert_eq!(split_crc_trailer(&file), Some(&b"TARNTEST body"[..]));
        file[3] ^= 1;
        assert_eq!(split_crc_trailer(&file), None);
        assert_eq!(split_crc_trailer(&[1, 2, 3]), None);
        let mut c = Cursor::new(b"TARNTEST");
        assert!(!c.magic(b"TARNX"));
        assert!(c.magic(b"TARN"));
        assert_eq!(c.rest(), b"TEST");
    }
}
