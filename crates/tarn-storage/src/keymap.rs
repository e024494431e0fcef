//! An in-memory map from encoded keys to row ids, for the memtable's key index and a
//! transaction's own inserted keys.
//!
//! Keys live in one byte arena and the table holds `(offset, length, rows)`: inserting a
//! million keys makes a few large allocations instead of a million small ones (whose
//! frees dominated bulk inserts), and hashing uses foldhash rather than SipHash (keys
//! are not attacker-chosen in a way that matters here: a host's own rows in its own
//! process).

use hashbrown::{DefaultHashBuilder, HashTable};
use std::hash::BuildHasher;

/// The row ids of one key: almost always one.
#[derive(Debug, Clone)]
enum Rows {
    One(u64),
    Many(Vec<u64>),
}

#[derive(Debug, Clone)]
struct Entry {
    /// The key's hash, kept so that growing the table re-hashes nothing and a probe
    /// compares bytes only on a full hash match.
    hash: u64,
    offset: usize,
    len: u32,
    rows: Rows,
}

/// Encoded key → row ids. Row ids of a key keep their insertion order.
#[derive(Debug, Clone, Default)]
pub struct KeyMap {
    arena: Vec<u8>,
    table: HashTable<Entry>,
    hasher: DefaultHashBuilder,
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
        self.arena.reserve(bytes);
        self.table.reserve(n, |e| e.hash);
    }

    /// The row ids of `key` (empty if absent).
    pub fn get(&self, key: &[u8]) -> &[u64] {
        let hash = self.hasher.hash_one(key);
        match self.table.find(hash, |e| {
            e.hash == hash && &self.arena[e.offset..e.offset + e.len as usize] == key
        }) {
            None => &[],
            Some(Entry {
                rows: Rows::One(r), ..
            }) => std::slice::from_ref(r),
            Some(Entry {
                rows: Rows::Many(v),
                ..
            }) => v,
        }
    }

    /// Adds row `row` under `key`.
    pub fn push(&mut self, key: &[u8], row: u64) {
        let hash = self.hasher.hash_one(key);
        let arena = &mut self.arena;
        match self.table.entry(
            hash,
            |e| e.hash == hash && &arena[e.offset..e.offset + e.len as usize] == key,
            |e| e.hash,
        ) {
            hashbrown::hash_table::Entry::Occupied(mut o) => {
                let rows = &mut o.get_mut().rows;
                match rows {
                    Rows::One(r) => *rows = Rows::Many(vec![*r, row]),
                    Rows::Many(v) => v.push(row),
                }
            }
            hashbrown::hash_table::Entry::Vacant(v) => {
                let offset = arena.len();
                arena.extend_from_slice(key);
                v.insert(Entry {
                    hash,
                    offset,
                    len: key.len() as u32,
                    rows: Rows::One(row),
                });
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
    }
}
