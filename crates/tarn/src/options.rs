//! [`Options`]: how a database is opened (durability, limits, rate limits, hooks).

use std::sync::Arc;
use std::time::Duration;

use tarn_sql::Limits;
use tarn_storage::{FileBackend, StdBackend};

use crate::{BuildProgress, SyncMode};

/// Options for opening a database (SPEC §8 limits and more). Builder style.
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// # let dir = tempfile::tempdir().expect("tempdir");
/// use std::time::Duration;
/// use tarn::{Options, SyncMode, Tarn};
/// let options = Options::new()
///     .sync(SyncMode::Full)                      // fsync every commit (the default)
///     .query_timeout(Duration::from_secs(10))    // a longer statement is cancelled (400)
///     .max_file_bytes(1 << 30)                   // uploads above 1 GiB are refused
///     .rate_limit(100.0, 200);                   // per API key: 100 requests/s, bursts of 200
/// let tarn = Tarn::open_with(dir.path(), options).await?;
/// tarn.close().await?;
/// # Ok::<(), tarn::Error>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct Options {
    pub(crate) sync: SyncMode,
    pub(crate) rate_limit: Option<(f64, u32)>,
    pub(crate) memtable_bytes: usize,
    pub(crate) background: bool,
    pub(crate) backend: Arc<dyn FileBackend>,
    pub(crate) limits: Limits,
    pub(crate) index_progress: Option<IndexProgress>,
    pub(crate) max_file_bytes: u64,
    pub(crate) max_organizations_per_user: usize,
}

/// A host's callback for index builds that `CREATE INDEX` waits for.
#[derive(Clone)]
pub(crate) struct IndexProgress(pub(crate) Arc<dyn Fn(BuildProgress) + Send + Sync>);

impl std::fmt::Debug for IndexProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IndexProgress")
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            sync: SyncMode::Full,
            rate_limit: None,
            memtable_bytes: tarn_storage::DEFAULT_MEMTABLE_BYTES as usize,
            background: true,
            backend: Arc::new(StdBackend),
            limits: Limits::default(),
            index_progress: None,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            max_organizations_per_user: DEFAULT_MAX_ORGANIZATIONS_PER_USER,
        }
    }
}

impl Options {
    /// The defaults (same as `Options::default()`).
    pub fn new() -> Self {
        Self::default()
    }

    /// When a write counts as durable: `Full` (fsync, the default) or `Process`.
    #[must_use]
    pub fn sync(mut self, mode: SyncMode) -> Self {
        self.sync = mode;
        self
    }

    /// A token bucket per API key: `requests_per_second` refill, `burst` capacity.
    #[must_use]
    pub fn rate_limit(mut self, requests_per_second: f64, burst: u32) -> Self {
        self.rate_limit = Some((requests_per_second, burst));
        self
    }

    /// Memory for rows not yet sealed into segment files, all tables together (default
    /// 64 MiB). Past it, a background checkpoint writes them to segment files read
    /// through `mmap`, so the heap stays bounded however large tables grow.
    #[must_use]
    pub fn memtable_bytes(mut self, bytes: usize) -> Self {
        self.memtable_bytes = bytes;
        self
    }

    /// Whether checkpoints and compaction run on a background thread (default on).
    /// Off, they happen only on close, on `VACUUM` and when the memtable is full at the
    /// next write's end.
    #[must_use]
    pub fn background_maintenance(mut self, on: bool) -> Self {
        self.background = on;
        self
    }

    /// Calls `f` as `CREATE INDEX` builds the index of the rows that exist (segments
    /// done of all, rows done of the current one), e.g. to draw a progress bar.
    #[must_use]
    pub fn on_index_progress(mut self, f: impl Fn(BuildProgress) + Send + Sync + 'static) -> Self {
        self.index_progress = Some(IndexProgress(Arc::new(f)));
        self
    }

    /// Where files are written: the real disk (default) or a wrapper such as
    /// [`storage::FaultyBackend`](crate::storage::FaultyBackend) that injects failures.
    #[must_use]
    pub fn file_backend(mut self, backend: Arc<dyn FileBackend>) -> Self {
        self.backend = backend;
        self
    }

    /// Longest a statement may run (default 60 s).
    #[must_use]
    pub fn query_timeout(mut self, timeout: Duration) -> Self {
        self.limits.query_timeout = timeout;
        self
    }

    /// Memory one query may use (default 2 GiB).
    #[must_use]
    pub fn query_memory(mut self, bytes: usize) -> Self {
        self.limits.query_memory = bytes;
        self
    }

    /// Longest SQL text (default 1 MiB).
    #[must_use]
    pub fn max_sql_bytes(mut self, bytes: usize) -> Self {
        self.limits.max_sql_bytes = bytes;
        self
    }

    /// Most parameters per statement (default 65 535).
    #[must_use]
    pub fn max_params(mut self, n: usize) -> Self {
        self.limits.max_params = n;
        self
    }

    /// Most parameter sets per batch (default 100 000).
    #[must_use]
    pub fn max_batch(mut self, n: usize) -> Self {
        self.limits.max_batch = n;
        self
    }

    /// Whether statements may take Tarn's planner-free fast paths (default on): key
    /// lookups, `<#>` top-k searches, `query_batch` inserts bound into one write and
    /// literal multi-row INSERTs read without the SQL parser. They give the same rows
    /// and errors as the planned path; off is for comparing the two.
    #[must_use]
    pub fn fast_paths(mut self, on: bool) -> Self {
        self.limits.fast_paths = on;
        self
    }

    /// Largest workspace file (`upload_file`), in bytes (default 10 GiB, SPEC §8).
    /// Checked while the bytes stream in: a larger upload is a 400 and keeps nothing.
    #[must_use]
    pub fn max_file_bytes(mut self, bytes: u64) -> Self {
        self.max_file_bytes = bytes;
        self
    }

    /// Most organizations one user may have created and not deleted (default 1,000,
    /// SPEC §8). Users are made by the host, organizations by any user: without a bound
    /// one user could fill the catalog every organization shares (25,000 of them slowed
    /// every other tenant's DDL from 1 ms to 40–70 ms).
    #[must_use]
    pub fn max_organizations_per_user(mut self, n: usize) -> Self {
        self.max_organizations_per_user = n;
        self
    }
}

/// The default of [`Options::max_file_bytes`] (SPEC §8): 10 GiB.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 10 << 30;

/// The default of [`Options::max_organizations_per_user`] (SPEC §8).
pub const DEFAULT_MAX_ORGANIZATIONS_PER_USER: usize = 1000;
