//! Entry points for the fuzz targets (`fuzz/`, `crates/tarn-fuzz`): the decoders behind
//! the checksums, and "resealing" of damaged files.
//!
//! Every byte Tarn reads from disk is checksummed before it is parsed, so random damage
//! stops at the first checksum and never reaches a decoder. To test the decoders
//! themselves — what happens when the checksum holds but the content is hostile (a
//! crafted file, or a bug that wrote garbage and checksummed it) — the fuzz targets
//! damage a file and then recompute its checksums with the functions here, so that the
//! damage gets past the checks and into the parsers. Not part of the stable API.

use datafusion::arrow::ipc::reader::read_footer_length;
use datafusion::arrow::ipc::root_as_footer;

use crate::segment_format::{Section, Trailer};
use crate::{Error, Result};

/// Whether this thread is inside a third-party decoder that Tarn runs under
/// `catch_unwind` (a panic there is reported as corruption, not a bug).
pub fn in_untrusted_decoder() -> bool {
    crate::untrusted::in_decoder()
}

/// Decodes one WAL record body (the payload inside a commit group).
pub fn decode_record(body: &[u8]) -> Result<Vec<crate::Op>> {
    crate::record::decode(body, Error::Internal)
}

/// Parses a segment's key section and looks up each of its keys and `probe`; returns
/// how many row ids were found.
pub fn probe_key_section(bytes: &[u8], probe: &[u8]) -> Result<usize> {
    let section = crate::keys::KeySection::parse(bytes)?;
    let mut found = section.lookup(probe).len();
    let keys: Vec<&[u8]> = section.keys().take(64).collect();
    for k in keys {
        found += section.lookup(k).len();
    }
    Ok(found)
}

/// Recomputes the checksums of a WAL file: its header's, then each commit group's
/// header and body checksums, following the groups' lengths as written. Stops at the
/// first position that does not start a group (so damage there stays damage).
pub fn reseal_wal(bytes: &mut [u8]) {
    use crate::wal::{GROUP_HEADER, GROUP_MAGIC, HEADER_LEN};
    if bytes.len() < HEADER_LEN {
        return;
    }
    let crc = crc32fast::hash(&bytes[0..36]);
    bytes[36..40].copy_from_slice(&crc.to_le_bytes());
    let mut pos = HEADER_LEN;
    while pos + GROUP_HEADER <= bytes.len() && &bytes[pos..pos + 4] == GROUP_MAGIC {
        let len = u64::from_le_bytes(bytes[pos + 24..pos + 32].try_into().unwrap_or([0; 8]));
        let Some(end) = usize::try_from(len)
            .ok()
            .and_then(|l| (pos + GROUP_HEADER).checked_add(l))
            .filter(|&e| e <= bytes.len())
        else {
            break;
        };
        let body = crc32fast::hash(&bytes[pos + GROUP_HEADER..end]);
        bytes[pos + 32..pos + 36].copy_from_slice(&body.to_le_bytes());
        let head = crc32fast::hash(&bytes[pos..pos + 36]);
        bytes[pos + 36..pos + 40].copy_from_slice(&head.to_le_bytes());
        pos = end;
    }
}

/// Recomputes a manifest's body checksum over the body its length field names (when
/// that range lies inside the file).
pub fn reseal_manifest(bytes: &mut [u8]) {
    if bytes.len() < 20 {
        return;
    }
    let len = u32::from_le_bytes(bytes[12..16].try_into().unwrap_or([0; 4])) as usize;
    if let Some(body) = bytes.get(20..20usize.saturating_add(len)) {
        let crc = crc32fast::hash(body);
        bytes[16..20].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Recomputes a segment file's checksums: when its trailer still parses, those of the
/// IPC head and footer, every block (located through the IPC footer), the statistics
/// and the key sections, written back into a new trailer; then the trailer's own in the
/// tail. Returns the resealed file (the trailer's length may change).
pub fn reseal_segment(bytes: &[u8]) -> Vec<u8> {
    use crate::segment_format::TAIL_LEN;
    if bytes.len() < TAIL_LEN {
        return bytes.to_vec();
    }
    let tail_at = bytes.len() - TAIL_LEN;
    let trailer_len = u32::from_le_bytes(bytes[tail_at..tail_at + 4].try_into().unwrap_or([0; 4]));
    let Some(trailer_start) = tail_at.checked_sub(trailer_len as usize) else {
        return bytes.to_vec();
    };
    let mut trailer_bytes = bytes[trailer_start..tail_at].to_vec();
    if let Ok(mut trailer) = serde_json::from_slice::<Trailer>(&trailer_bytes) {
        let crc_of = |s: &Section| -> Option<u32> {
            let start = usize::try_from(s.offset).ok()?;
            let end = start.checked_add(usize::try_from(s.len).ok()?)?;
            bytes
                .get(start..end.min(trailer_start))
                .map(crc32fast::hash)
        };
        for s in [&mut trailer.ipc_head, &mut trailer.ipc_footer]
            .into_iter()
            .chain(trailer.stats.as_mut())
            .chain(trailer.keys.iter_mut().map(|(_, s)| s))
        {
            if let Some(crc) = crc_of(s) {
                s.crc = crc;
            }
        }
        if let Some(crcs) = block_crcs(bytes, trailer.ipc_len) {
            for (meta, crc) in trailer.blocks.iter_mut().zip(crcs) {
                meta.crc = crc;
            }
        }
        if let Ok(json) = serde_json::to_vec(&trailer) {
            trailer_bytes = json;
        }
    }
    let mut out = Vec::with_capacity(trailer_start + trailer_bytes.len() + TAIL_LEN);
    out.extend_from_slice(&bytes[..trailer_start]);
    out.extend_from_slice(&trailer_bytes);
    out.extend_from_slice(&(trailer_bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&trailer_bytes).to_le_bytes());
    out.extend_from_slice(&bytes[tail_at + 8..]);
    out
}

/// The checksums of the IPC blocks the footer lists, when the footer parses.
fn block_crcs(bytes: &[u8], ipc_len: u64) -> Option<Vec<u32>> {
    let ipc = bytes.get(..usize::try_from(ipc_len).ok()?)?;
    let n = ipc.len();
    // Located as `Segment::open` does: the footer's length, then the footer.
    let footer_len = read_footer_length(ipc.get(n.checked_sub(10)?..)?.try_into().ok()?).ok()?;
    let footer_start = (n - 10).checked_sub(footer_len)?;
    let footer = root_as_footer(&ipc[footer_start..n - 10]).ok()?;
    let blocks = footer.recordBatches()?;
    Some(
        blocks
            .iter()
            .map(|b| {
                let start = usize::try_from(b.offset()).unwrap_or(usize::MAX);
                let len = usize::try_from(b.metaDataLength())
                    .unwrap_or(0)
                    .saturating_add(usize::try_from(b.bodyLength()).unwrap_or(0));
                start
                    .checked_add(len)
                    .and_then(|end| bytes.get(start..end))
                    .map_or(0, crc32fast::hash)
            })
            .collect(),
    )
}
