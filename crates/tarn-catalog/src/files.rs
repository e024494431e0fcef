//! Workspace files: their records, kept in chunks and shards that catalog versions
//! share (see [`WorkspaceFiles`]), and the catalog's lookups of them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{Catalog, Timestamp};

/// A workspace file (SPEC §7). Its bytes are a blob of the storage layer named `id`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileRecord {
    /// File id (a UUID chosen by Tarn; also the blob's name).
    pub id: String,
    /// Organization of the workspace.
    pub org_id: String,
    /// Workspace.
    pub workspace_id: String,
    /// The name it was uploaded under.
    pub filename: String,
    /// The media type it was uploaded with.
    pub media_type: String,
    /// Length of the bytes.
    pub size_bytes: u64,
    /// Hex SHA-256 of the bytes.
    pub sha256: String,
    /// When it was made (stored as ISO 8601 text).
    #[serde(with = "crate::time::iso_text")]
    pub created_at: Timestamp,
    /// Upload order in the database (assigned when the record is applied): files are
    /// listed newest first, and many share a `created_at` second.
    #[serde(default)]
    pub seq: u64,
}

/// Records per chunk of a workspace's file list.
const FILE_CHUNK: u64 = 1024;

/// Shards of a workspace's id → seq map.
const ID_SHARDS: usize = 256;

/// The files of one workspace. A catalog commit works on a copy of the catalog, so
/// what a commit copies must not grow with the files: the list is split into chunks
/// (by `seq`, so an upload touches the last one) and the id map into shards (by the
/// id's hash), each shared between catalog versions until a commit changes it. An
/// upload or a delete copies one chunk, one shard and the two lists of pointers.
#[derive(Debug, Clone, Default)]
pub(crate) struct WorkspaceFiles {
    /// seq / FILE_CHUNK → (seq → record).
    chunks: BTreeMap<u64, Arc<BTreeMap<u64, Arc<FileRecord>>>>,
    /// id → seq, in ID_SHARDS shards (empty until the first file).
    ids: Vec<Arc<HashMap<String, u64>>>,
    pub(crate) len: usize,
}

impl WorkspaceFiles {
    pub(crate) fn shard(id: &str) -> usize {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        (BuildHasherDefault::<DefaultHasher>::default().hash_one(id) % ID_SHARDS as u64) as usize
    }

    pub(crate) fn seq_of(&self, id: &str) -> Option<u64> {
        self.ids.get(Self::shard(id))?.get(id).copied()
    }

    pub(crate) fn get(&self, id: &str) -> Option<&Arc<FileRecord>> {
        let seq = self.seq_of(id)?;
        self.chunks.get(&(seq / FILE_CHUNK))?.get(&seq)
    }

    pub(crate) fn insert(&mut self, f: FileRecord) {
        if self.ids.is_empty() {
            self.ids = (0..ID_SHARDS).map(|_| Arc::default()).collect();
        }
        let shard = Self::shard(&f.id);
        Arc::make_mut(&mut self.ids[shard]).insert(f.id.clone(), f.seq);
        let chunk = self.chunks.entry(f.seq / FILE_CHUNK).or_default();
        if Arc::make_mut(chunk).insert(f.seq, Arc::new(f)).is_none() {
            self.len += 1;
        }
    }

    pub(crate) fn remove(&mut self, id: &str) -> Option<u64> {
        let shard = Self::shard(id);
        let seq = Arc::make_mut(self.ids.get_mut(shard)?).remove(id)?;
        let key = seq / FILE_CHUNK;
        if let Some(chunk) = self.chunks.get_mut(&key) {
            let chunk = Arc::make_mut(chunk);
            if chunk.remove(&seq).is_some() {
                self.len -= 1;
            }
            if chunk.is_empty() {
                self.chunks.remove(&key);
            }
        }
        Some(seq)
    }

    /// Newest first.
    pub(crate) fn newest_first(&self) -> impl Iterator<Item = &Arc<FileRecord>> {
        self.chunks.values().rev().flat_map(|c| c.values().rev())
    }

    pub(crate) fn ids(&self) -> impl Iterator<Item = &String> {
        self.ids.iter().flat_map(|s| s.keys())
    }
}

impl Catalog {
    /// Adds a file record as is (its `seq` already assigned).
    pub(crate) fn insert_file(&mut self, f: FileRecord) {
        self.next_file_seq = self.next_file_seq.max(f.seq + 1);
        let ws = Arc::make_mut(
            self.files
                .entry((f.org_id.clone(), f.workspace_id.clone()))
                .or_default(),
        );
        ws.insert(f);
    }

    /// A workspace file's record.
    pub fn file(&self, org_id: &str, ws_id: &str, file_id: &str) -> Option<&FileRecord> {
        let ws = self.files.get(&(org_id.to_string(), ws_id.to_string()))?;
        ws.get(file_id).map(|f| f.as_ref())
    }

    /// Up to `limit` files of a workspace, newest first, after skipping `offset`; and
    /// how many it has.
    pub fn files_of(
        &self,
        org_id: &str,
        ws_id: &str,
        limit: usize,
        offset: usize,
    ) -> (Vec<&FileRecord>, usize) {
        match self.files.get(&(org_id.to_string(), ws_id.to_string())) {
            Some(ws) => (
                ws.newest_first()
                    .skip(offset)
                    .take(limit)
                    .map(|f| f.as_ref())
                    .collect(),
                ws.len,
            ),
            None => (Vec::new(), 0),
        }
    }

    /// Every file id of the catalog (which blobs must be kept).
    pub fn file_ids(&self) -> std::collections::HashSet<String> {
        self.files.values().flat_map(|w| w.ids().cloned()).collect()
    }
}
