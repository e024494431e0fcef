//! Index files of sealed segments as readers see them: their names in the directory
//! (`T-S.I.idx`), and the mapped file with what a reader made of it. A leaf: segments
//! hold their index files, and the build (`index_build.rs`) writes them.

use std::any::Any;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::buffer::Buffer;
use parking_lot::Mutex;
use tarn_catalog::IndexId;

use crate::{Error, Result};

/// One index file of a sealed segment.
pub struct IndexFile {
    index: IndexId,
    path: PathBuf,
    /// The file, mapped when it is attached: a reader that holds the segment can
    /// always load it, even after cleanup removed its name.
    bytes: bytes::Bytes,
    /// What a reader made of the file (e.g. a graph over the mapped bytes), kept for
    /// the segment's lifetime.
    loaded: Mutex<Option<Arc<dyn Any + Send + Sync>>>,
}

impl std::fmt::Debug for IndexFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexFile")
            .field("index", &self.index)
            .field("path", &self.path)
            .finish()
    }
}

impl IndexFile {
    /// Maps `path`, the file of index `index`.
    pub(crate) fn open(index: IndexId, path: PathBuf) -> Result<Self> {
        let bytes = crate::mmap::map(&path).map_err(|e| Error::io(&path, e))?;
        Ok(IndexFile {
            index,
            path,
            bytes,
            loaded: Mutex::new(None),
        })
    }

    /// The index it belongs to.
    pub fn index_id(&self) -> IndexId {
        self.index
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The loaded form of the file: made once by `load` from the mapped bytes, then
    /// shared. A failure (damage) is returned every time, naming the file.
    pub fn loaded<T: Any + Send + Sync>(
        &self,
        load: impl FnOnce(Buffer) -> std::result::Result<T, String>,
    ) -> Result<Arc<T>> {
        let mut slot = self.loaded.lock();
        if let Some(v) = slot.as_ref() {
            return v
                .clone()
                .downcast::<T>()
                .map_err(|_| Error::Internal("index file loaded as another type".into()));
        }
        let value = load(Buffer::from(self.bytes.clone())).map_err(|message| Error::Corrupt {
            path: self.path.clone(),
            message,
        })?;
        let value = Arc::new(value);
        *slot = Some(value.clone() as Arc<dyn Any + Send + Sync>);
        Ok(value)
    }

    /// Whether the file has been loaded.
    pub fn is_loaded(&self) -> bool {
        self.loaded.lock().is_some()
    }
}
