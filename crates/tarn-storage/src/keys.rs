//! Key encoding for the key indexes (PRIMARY KEY, UNIQUE, `exact_text`) and the on-disk
//! key section of a segment.
//!
//! A key is the byte string of its column values, each encoded so that equal SQL values
//! give equal bytes: integers of every width as i64, floats as f64 (with -0.0 = 0.0),
//! both big-endian with the sign flipped so byte order is numeric order (a segment's
//! first and last key then bound the ids it holds, and lookups outside skip it);
//! strings and binaries length-prefixed. The encoding is Tarn's own (Arrow's row format
//! is not promised stable across releases) and is part of the segment format.
//!
//! Key section (little-endian), sorted by (key, row id):
//!
//! ```text
//! count u64 | offsets u64 * (count + 1) | row ids u64 * count | key bytes
//! ```

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::datatypes::{
    DataType, Date32Type, Date64Type, Decimal128Type, Float32Type, Float64Type, Int8Type,
    Int16Type, Int32Type, Int64Type, TimeUnit, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};

use crate::{Error, Result};

/// An i64 as bytes whose order is the numbers' order.
fn order_i64(v: i64) -> [u8; 8] {
    ((v as u64) ^ (1 << 63)).to_be_bytes()
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// Encodes row `i` of one column into `out`. `false` when the value is NULL.
fn encode_value(a: &dyn Array, i: usize, out: &mut Vec<u8>) -> Result<bool> {
    if a.is_null(i) {
        return Ok(false);
    }
    macro_rules! int {
        ($t:ty) => {
            out.extend_from_slice(&order_i64(a.as_primitive::<$t>().value(i) as i64))
        };
    }
    match a.data_type() {
        DataType::Int8 => int!(Int8Type),
        DataType::Int16 => int!(Int16Type),
        DataType::Int32 => int!(Int32Type),
        DataType::Int64 => int!(Int64Type),
        DataType::UInt8 => int!(UInt8Type),
        DataType::UInt16 => int!(UInt16Type),
        DataType::UInt32 => int!(UInt32Type),
        DataType::UInt64 => int!(UInt64Type),
        DataType::Date32 => int!(Date32Type),
        DataType::Date64 => int!(Date64Type),
        DataType::Timestamp(TimeUnit::Second, _) => int!(TimestampSecondType),
        DataType::Timestamp(TimeUnit::Millisecond, _) => int!(TimestampMillisecondType),
        DataType::Timestamp(TimeUnit::Microsecond, _) => int!(TimestampMicrosecondType),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => int!(TimestampNanosecondType),
        DataType::Float32 | DataType::Float64 => {
            let v = match a.data_type() {
                DataType::Float32 => a.as_primitive::<Float32Type>().value(i) as f64,
                _ => a.as_primitive::<Float64Type>().value(i),
            };
            // -0.0 = 0.0 in SQL; NaN is one value.
            let v = if v == 0.0 { 0.0 } else { v };
            let bits = if v.is_nan() {
                f64::NAN.to_bits()
            } else {
                v.to_bits()
            };
            // Order-preserving: flip all bits of negatives, the sign bit of positives.
            let bits = if bits >> 63 == 1 {
                !bits
            } else {
                bits | 1 << 63
            };
            out.extend_from_slice(&bits.to_be_bytes());
        }
        DataType::Decimal128(_, _) => {
            let v = a.as_primitive::<Decimal128Type>().value(i) as u128 ^ (1 << 127);
            out.extend_from_slice(&v.to_be_bytes())
        }
        DataType::Boolean => out.push(a.as_boolean().value(i) as u8),
        DataType::Utf8 => put_bytes(out, a.as_string::<i32>().value(i).as_bytes()),
        DataType::LargeUtf8 => put_bytes(out, a.as_string::<i64>().value(i).as_bytes()),
        DataType::Utf8View => put_bytes(out, a.as_string_view().value(i).as_bytes()),
        DataType::Binary => put_bytes(out, a.as_binary::<i32>().value(i)),
        DataType::LargeBinary => put_bytes(out, a.as_binary::<i64>().value(i)),
        DataType::BinaryView => put_bytes(out, a.as_binary_view().value(i)),
        _ => {
            // Other types (arrays, …) key by their canonical text.
            let f = ArrayFormatter::try_new(a, &FormatOptions::default())?;
            put_bytes(out, f.value(i).to_string().as_bytes());
        }
    }
    Ok(true)
}

/// Appends the key of row `i` of `arrays` (one array per key column) to `out`. `false`,
/// with `out` as it was, when a key part is NULL (NULLs never conflict, as in
/// PostgreSQL).
fn encode_row(arrays: &[ArrayRef], i: usize, out: &mut Vec<u8>) -> Result<bool> {
    let start = out.len();
    for a in arrays {
        if !encode_value(a.as_ref(), i, out)? {
            out.truncate(start);
            return Ok(false);
        }
    }
    Ok(true)
}

/// The keys of a batch of rows in one buffer (see [`encode_keys`]).
#[derive(Debug, Default)]
pub struct EncodedKeys {
    bytes: Vec<u8>,
    /// Row `i`'s key is `bytes[offsets[i]..offsets[i + 1]]`.
    offsets: Vec<usize>,
    /// Rows with a NULL key part (no key).
    null: Vec<bool>,
}

impl EncodedKeys {
    /// Rows.
    pub fn len(&self) -> usize {
        self.null.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.null.is_empty()
    }

    /// The key of row `i`; `None` when a key part is NULL (or there is no row `i`).
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        (!*self.null.get(i)?).then(|| &self.bytes[self.offsets[i]..self.offsets[i + 1]])
    }

    /// Every row's key, in order.
    pub fn iter(&self) -> impl Iterator<Item = Option<&[u8]>> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// Bytes of all keys.
    pub fn total_bytes(&self) -> usize {
        self.bytes.len()
    }
}

/// The keys of every row of `arrays` (one array per key column), in one buffer (no
/// allocation per row); rows with a NULL key part have none.
pub fn encode_keys(arrays: &[ArrayRef]) -> Result<EncodedKeys> {
    let n = arrays.first().map_or(0, |a| a.len());
    let mut out = EncodedKeys {
        bytes: Vec::with_capacity(n * 9),
        offsets: Vec::with_capacity(n + 1),
        null: Vec::with_capacity(n),
    };
    out.offsets.push(0);
    for i in 0..n {
        out.null.push(!encode_row(arrays, i, &mut out.bytes)?);
        out.offsets.push(out.bytes.len());
    }
    Ok(out)
}

/// Collects `(key, row id)` pairs in one byte arena (no allocation per key, so building
/// the section of a million-row segment stays a few compact buffers) and writes them as
/// a sorted key section.
#[derive(Debug, Default)]
pub struct KeyBuilder {
    arena: Vec<u8>,
    /// (offset in arena, length, row id)
    entries: Vec<(usize, u32, u64)>,
}

impl KeyBuilder {
    /// Adds the keys of `arrays` (one per key column) for rows `row_ids`; rows with a
    /// NULL key part are skipped.
    pub fn add(&mut self, arrays: &[ArrayRef], row_ids: &[u64]) -> Result<()> {
        for (i, &row) in row_ids.iter().enumerate() {
            let start = self.arena.len();
            if encode_row(arrays, i, &mut self.arena)? {
                self.entries
                    .push((start, (self.arena.len() - start) as u32, row));
            }
        }
        Ok(())
    }

    /// Adds one encoded key.
    #[cfg(test)]
    pub fn push(&mut self, key: &[u8], row: u64) {
        let start = self.arena.len();
        self.arena.extend_from_slice(key);
        self.entries.push((start, key.len() as u32, row));
    }

    /// The sorted key section.
    pub fn finish(mut self) -> Vec<u8> {
        let arena = &self.arena;
        let key = |e: &(usize, u32, u64)| &arena[e.0..e.0 + e.1 as usize];
        self.entries
            .sort_unstable_by(|a, b| key(a).cmp(key(b)).then(a.2.cmp(&b.2)));
        let n = self.entries.len();
        let mut out = Vec::with_capacity(16 + n * 16 + arena.len());
        out.extend_from_slice(&(n as u64).to_le_bytes());
        let mut off = 0u64;
        out.extend_from_slice(&off.to_le_bytes());
        for e in &self.entries {
            off += e.1 as u64;
            out.extend_from_slice(&off.to_le_bytes());
        }
        for e in &self.entries {
            out.extend_from_slice(&e.2.to_le_bytes());
        }
        for e in &self.entries {
            out.extend_from_slice(key(e));
        }
        out
    }
}

/// Builds a key section from `(key, row id)` pairs.
#[cfg(test)]
pub fn build_section(entries: Vec<(Vec<u8>, u64)>) -> Vec<u8> {
    let mut b = KeyBuilder::default();
    for (k, r) in &entries {
        b.push(k, *r);
    }
    b.finish()
}

/// A read-only view of a key section.
#[derive(Debug, Clone, Copy)]
pub struct KeySection<'a> {
    bytes: &'a [u8],
    count: usize,
}

/// The word at `pos` of a section [`KeySection::parse`] checked (every offset it reads
/// lies within; one past the bytes would read as 0, never panic).
fn u64_at(b: &[u8], pos: usize) -> u64 {
    tarn_format::u64_at(b, pos).unwrap_or(0)
}

impl<'a> KeySection<'a> {
    /// Checks the section's structure (its checksum was verified by the caller).
    pub fn parse(bytes: &'a [u8]) -> Result<Self> {
        let bad = || Error::Internal("malformed key section".into());
        if bytes.len() < 16 {
            return Err(bad());
        }
        let count = usize::try_from(u64_at(bytes, 0)).map_err(|_| bad())?;
        let fixed = count
            .checked_mul(16)
            .and_then(|x| x.checked_add(16))
            .ok_or_else(bad)?;
        if fixed > bytes.len() {
            return Err(bad());
        }
        let total = u64_at(bytes, 8 + count * 8) as usize;
        if fixed.checked_add(total) != Some(bytes.len()) {
            return Err(bad());
        }
        Ok(KeySection { bytes, count })
    }

    fn key(&self, i: usize) -> &'a [u8] {
        let base = 16 + self.count * 16;
        let a = u64_at(self.bytes, 8 + i * 8) as usize;
        let b = u64_at(self.bytes, 8 + (i + 1) * 8) as usize;
        self.bytes.get(base + a..base + b).unwrap_or(&[])
    }

    fn row_id(&self, i: usize) -> u64 {
        u64_at(self.bytes, 8 + (self.count + 1) * 8 + i * 8)
    }

    /// Row ids stored under `key`, ascending.
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the section is empty.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Every entry's key, in order.
    pub fn keys(&self) -> impl Iterator<Item = &'a [u8]> + '_ {
        (0..self.count).map(|i| self.key(i))
    }

    pub fn lookup(&self, key: &[u8]) -> Vec<u64> {
        if self.count == 0 || key < self.key(0) || key > self.key(self.count - 1) {
            return Vec::new();
        }
        let (mut lo, mut hi) = (0, self.count);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.key(mid) < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let mut out = Vec::new();
        while lo < self.count && self.key(lo) == key {
            out.push(self.row_id(lo));
            lo += 1;
        }
        out
    }
}

/// A Bloom filter over the keys of a key section: a probe for a key the segment does
/// not hold (the usual case of a uniqueness check) usually ends here, without the binary
/// search over the section (a dozen or more cache misses in a large segment). Built in
/// memory when a segment's section is first probed; ~10 bits and 6 probes per key, so
/// about 1 % of absent keys get through.
#[derive(Debug)]
pub struct KeyFilter {
    bits: Vec<u64>,
    mask: u64,
    hasher: hashbrown::DefaultHashBuilder,
}

const FILTER_PROBES: u64 = 6;

impl KeyFilter {
    /// A filter of `section`'s keys.
    pub fn new(section: &KeySection<'_>) -> Self {
        let nbits = (section.len().max(1) * 10).next_power_of_two().max(64);
        let mut f = KeyFilter {
            bits: vec![0; nbits / 64],
            mask: nbits as u64 - 1,
            hasher: Default::default(),
        };
        for k in section.keys() {
            let (h1, h2) = f.hashes(k);
            for i in 0..FILTER_PROBES {
                let bit = h1.wrapping_add(i.wrapping_mul(h2)) & f.mask;
                f.bits[(bit / 64) as usize] |= 1 << (bit % 64);
            }
        }
        f
    }

    fn hashes(&self, key: &[u8]) -> (u64, u64) {
        use std::hash::BuildHasher;
        let h = self.hasher.hash_one(key);
        // Double hashing from the two halves; an odd step visits distinct bits.
        (h, h.rotate_left(32) | 1)
    }

    /// `false` when `key` is certainly not in the section.
    pub fn may_contain(&self, key: &[u8]) -> bool {
        let (h1, h2) = self.hashes(key);
        (0..FILTER_PROBES).all(|i| {
            let bit = h1.wrapping_add(i.wrapping_mul(h2)) & self.mask;
            self.bits[(bit / 64) as usize] & (1 << (bit % 64)) != 0
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int32Array, Int64Array, StringArray};

    use super::*;

    #[test]
    fn equal_values_of_different_widths_encode_equal() -> Result<()> {
        let a: ArrayRef = Arc::new(Int32Array::from(vec![Some(7), None]));
        let b: ArrayRef = Arc::new(Int64Array::from(vec![7, 8]));
        let ka = encode_keys(&[a])?;
        let kb = encode_keys(&[b])?;
        assert_eq!(ka.get(0), kb.get(0));
        assert_eq!(ka.get(1), None);
        Ok(())
    }

    #[test]
    fn numbers_encode_in_order() -> Result<()> {
        let ints: ArrayRef = Arc::new(Int64Array::from(vec![
            i64::MIN,
            -5,
            -1,
            0,
            1,
            255,
            256,
            i64::MAX,
        ]));
        let k: Vec<_> = encode_keys(&[ints])?
            .iter()
            .map(|k| k.map(<[u8]>::to_vec))
            .collect();
        assert!(k.windows(2).all(|w| w[0] < w[1]), "{k:?}");
        let floats: ArrayRef = Arc::new(datafusion::arrow::array::Float64Array::from(vec![
            f64::NEG_INFINITY,
            -2.5,
            -0.0,
            0.5,
            3.0,
            f64::INFINITY,
        ]));
        let k: Vec<_> = encode_keys(&[floats])?
            .iter()
            .map(|k| k.map(<[u8]>::to_vec))
            .collect();
        assert!(k.windows(2).all(|w| w[0] < w[1]), "{k:?}");
        Ok(())
    }

    #[test]
    fn composite_keys_do_not_run_together() -> Result<()> {
        let a: ArrayRef = Arc::new(StringArray::from(vec!["ab", "a"]));
        let b: ArrayRef = Arc::new(StringArray::from(vec!["c", "bc"]));
        let k = encode_keys(&[a, b])?;
        assert_ne!(k.get(0), k.get(1));
        Ok(())
    }

    #[test]
    fn section_lookup_finds_every_row() -> Result<()> {
        let entries: Vec<(Vec<u8>, u64)> = (0..1000u64)
            .map(|i| (format!("k{}", i % 300).into_bytes(), i))
            .collect();
        let bytes = build_section(entries);
        let s = KeySection::parse(&bytes)?;
        assert_eq!(s.lookup(b"k5"), vec![5, 305, 605, 905]);
        assert_eq!(s.lookup(b"k299"), vec![299, 599, 899]);
        assert!(s.lookup(b"nope").is_empty());
        assert!(KeySection::parse(&bytes[..bytes.len() - 1]).is_err());
        let empty = build_section(Vec::new());
        assert!(KeySection::parse(&empty)?.lookup(b"x").is_empty());
        Ok(())
    }

    #[test]
    fn filter_keeps_every_key_and_drops_most_others() -> Result<()> {
        let mut b = KeyBuilder::default();
        let ids: Vec<u64> = (0..20_000).collect();
        let keys: ArrayRef = Arc::new(Int64Array::from_iter_values((0..20_000).map(|i| i * 2)));
        b.add(&[keys], &ids)?;
        let bytes = b.finish();
        let section = KeySection::parse(&bytes)?;
        let f = KeyFilter::new(&section);
        let enc = |v: i64| -> Result<Vec<u8>> {
            let k = encode_keys(&[Arc::new(Int64Array::from(vec![v])) as ArrayRef])?;
            Ok(k.get(0).expect("a key").to_vec())
        };
        let mut passed = 0;
        for i in 0..20_000i64 {
            assert!(f.may_contain(&enc(i * 2)?));
            passed += f.may_contain(&enc(i * 2 + 1)?) as usize;
        }
        assert!(
            passed < 600,
            "{passed} of 20000 absent keys passed the filter"
        );
        Ok(())
    }
}
