//! An in-memory map from encoded keys to row ids, for the memtable's key index and a
//! transaction's own inserted keys.
//!
//! Keys live in one byte arena (each after its length) and the table holds 24-byte
//! `(hash, offset, row)` entries: inserting a million keys makes a few large allocations
//! instead of a million small ones (whose frees dominated bulk inserts), and hashing uses foldhash rather than SipHash (keys
//! are not attacker-chosen in a way that matters here: a host's own rows in its own
//! process).

use hashbrown::{DefaultHashBuilder, HashTable};
use std::hash::BuildHasher;

/// A row id with this bit set is an index into [`KeyMap::many`] instead (row ids are
/// counters far below it).
const MANY: u64 = 1 << 63;

/// One key: 24 bytes, so that growing a table of a million keys moves little memory.
#[derive(Debug, Clone)]
struct Entry {
    /// The key's hash, kept so that growing the table re-hashes nothing and a probe
    /// compares bytes only on a full hash match.
    hash: u64,
    /// Where the key starts in the arena: a `u32` length, then the bytes.
    offset: usize,
    /// The key's only row, or `MANY | i` for the rows in `many[i]`.
    row: u64,
}

/// Encoded key → row ids. Row ids of a key keep their insertion order.
#[derive(Debug, Clone, Default)]
pub struct KeyMap {
    arena: Vec<u8>,
    table: HashTable<Entry>,
    /// Row ids of keys with more than one row (rare: only non-unique indexes).
    many: Vec<Vec<u64>>,
    hasher: DefaultHashBuilder,
}

/// The key stored at `offset`.
fn key_at(arena: &[u8], offset: usize) -> &[u8] {
    let len = u32::from_le_bytes(arena[offset..offset + 4].try_into().expect("4 bytes"));
    &arena[offset + 4..offset + 4 + len as usize]
}

impl KeyMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of distinct keys.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Room for `n` more keys of `bytes` bytes in all.
    pub fn reserve(&mut self, n: usize, bytes: usize) {
        self.arena.reserve(bytes + 4 * n);
        self.table.reserve(n, |e| e.hash);
    }

    /// The row ids of `key` (empty if absent).
    pub fn get(&self, key: &[u8]) -> &[u64] {
        let hash = self.hasher.hash_one(key);
        match self.table.find(hash, |e| {
            e.hash == hash && key_at(&self.arena, e.offset) == key
        }) {
            None => &[],
            Some(e) if e.row & MANY != 0 => &self.many[(e.row & !MANY) as usize],
            Some(e) => std::slice::from_ref(&e.row),
        }
    }

    /// Adds row `row` under `key`.
    pub fn push(&mut self, key: &[u8], row: u64) {
        let hash = self.hasher.hash_one(key);
        let arena = &mut self.arena;
        match self.table.entry(
            hash,
            |e| e.hash == hash && key_at(arena, e.offset) == key,
            |e| e.hash,
        ) {
            hashbrown::hash_table::Entry::Occupied(mut o) => {
                let e = o.get_mut();
                if e.row & MANY != 0 {
                    self.many[(e.row & !MANY) as usize].push(row);
                } else {
                    self.many.push(vec![e.row, row]);
                    e.row = MANY | (self.many.len() - 1) as u64;
                }
            }
            hashbrown::hash_table::Entry::Vacant(v) => {
                let offset = arena.len();
                let len = u32::try_from(key.len()).expect("keys are far below 4 GiB");
                arena.extend_from_slice(&len.to_le_bytes());
                arena.extend_from_slice(key);
                // A row id with the flag bit (never made by Tarn, but a log record could
                // carry one) goes to the side list like a second row would.
                let row = if row & MANY == 0 {
                    row
                } else {
                    self.many.push(vec![row]);
                    MANY | (self.many.len() - 1) as u64
                };
                v.insert(Entry { hash, offset, row });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_to_their_rows_in_order() {
        let mut m = KeyMap::new();
        for i in 0..10_000u64 {
            m.push(&(i % 5000).to_be_bytes(), i);
        }
        m.push(b"", 7);
        assert_eq!(m.len(), 5001);
        assert_eq!(m.get(&3u64.to_be_bytes()), &[3, 5003]);
        assert_eq!(m.get(b""), &[7]);
        assert!(m.get(&6000u64.to_be_bytes()).is_empty());
        assert!(m.get(&[0, 0, 0]).is_empty());
        m.push(&3u64.to_be_bytes(), 20_000);
        assert_eq!(m.get(&3u64.to_be_bytes()), &[3, 5003, 20_000]);
        assert_eq!(m.get(&4u64.to_be_bytes()), &[4, 5004]);
        m.push(b"huge", u64::MAX);
        m.push(b"huge", 1);
        assert_eq!(m.get(b"huge"), &[u64::MAX, 1]);
        m.push(b"huge2", MANY | 5);
        assert_eq!(m.get(b"huge2"), &[MANY | 5]);
        assert_eq!(
            std::mem::size_of::<Entry>(),
            16 + std::mem::size_of::<usize>()
        );
    }
}
