//! Tarn: an embedded data-workspace engine. Organizations, members, API keys, workspaces
//! (SQL schemas), tables and a PostgreSQL-flavoured SQL dialect with vector, BM25 and
//! hybrid search, stored durably in one local directory and linked into your program: no
//! server, no HTTP.
//!
//! # Quick start
//!
//! Open a database ([`Tarn::open`] for a directory, [`Tarn::in_memory`] for a scratch
//! one), make a user and an API key, [`connect`](Tarn::connect) with the key, and work
//! in an organization's workspace through the [`Session`]:
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use serde_json::json;
//!
//! let tarn = tarn::Tarn::in_memory().await?;
//! let user = tarn.create_user("ada@example.com", "Ada").await?;
//! let key = tarn.create_api_key(&user.id, "laptop").await?;
//! let session = tarn.connect(&key.secret).await?;
//! session.create_organization("acme", "Acme").await?;
//! let acme = session.with_org("acme");
//! acme.create_workspace("docs", "Docs").await?;
//!
//! // A table with a text column and a vector column, and three rows.
//! acme.query("docs", r#"CREATE TABLE "docs"."notes"
//!     (id SERIAL PRIMARY KEY, body TEXT, embedding FLOAT4[]) USING engine"#, &[]).await?;
//! acme.query_batch("docs", r#"INSERT INTO "docs"."notes" (body, embedding) VALUES ($1, $2)"#, &[
//!     vec![json!("red apples and green pears"), json!([1.0, 0.0, 0.0])],
//!     vec![json!("a field of green grass"), json!([0.0, 1.0, 0.0])],
//!     vec![json!("red sky at night"), json!([0.7, 0.0, 0.7])],
//! ]).await?;
//!
//! // Vector search: `<#>` is cosine similarity, higher is better.
//! let r = acme.query("docs", r#"SELECT id FROM "docs"."notes"
//!     ORDER BY embedding <#> $1 DESC LIMIT 2"#, &[json!([1.0, 0.0, 0.1])]).await?;
//! assert_eq!(r.rows, Some(vec![vec![json!(1)], vec![json!(3)]]));
//!
//! // Text search ranks with BM25 once the column has a bm25 index.
//! acme.query("docs", r#"CREATE INDEX notes_body ON "docs"."notes"
//!     USING engine_index (body) WITH (index_type = 'bm25')"#, &[]).await?;
//! let r = acme.query("docs", r#"SELECT id FROM "docs"."notes"
//!     ORDER BY body <#> 'green grass' DESC LIMIT 1"#, &[]).await?;
//! assert_eq!(r.rows, Some(vec![vec![json!(2)]]));
//! # Ok::<(), tarn::Error>(())
//! # }).unwrap();
//! ```
//!
//! # Where to go next
//!
//! - [`Session::query`] (JSON rows), [`Session::query_arrow`] and
//!   [`Session::insert_arrow`] (Arrow batches), [`Session::query_batch`] (one statement,
//!   many parameter sets, one transaction);
//! - [`Session::upload_table`] (a table from CSV/JSON) and the workspace files
//!   ([`Session::upload_file`], [`Session::files`], [`Session::file_content`]);
//! - organizations, members and API keys ([`Session::add_member`],
//!   [`Tarn::create_api_key`]) and the [`PERMISSIONS`] table of who may call what;
//! - [`Options`] for durability ([`SyncMode`]), limits and rate limits;
//! - errors: every call returns [`Error`], whose [`ErrorKind`] maps to an HTTP status
//!   ([`Error::status`]) as the hosted service's REST interface does.
//!
//! Decisions where the specification is silent are documented on the items they affect.

#![forbid(unsafe_code)]

mod access;
mod error;
mod files;
mod resources;
mod retry;
mod upload;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use tarn_catalog::{ApiKeyRecord, Catalog, CatalogOp, OrgRecord, UserRecord, WorkspaceRecord};
use tarn_sql::{Limits, SqlEngine};
use tarn_storage::{Database, FileBackend, Op, StdBackend, StorageOptions};
use tokio::sync::OwnedMutexGuard;

use access::{Access, Gates, Locked, org_not_found, revoked, ws_not_found};
pub use access::{Operation, PERMISSIONS, Permission, Scope};
/// The Arrow crate Tarn's record batches come from (`query_arrow`, `insert_arrow`).
pub use datafusion::arrow;
pub use error::{Error, ErrorKind, MAX_MESSAGE_BYTES, Result};
pub use files::{
    DEFAULT_FILES_LIMIT, FileContent, FileReader, MAX_FILES_LIMIT, media_type_or_default,
};
pub use resources::*;
pub use retry::{RetryPolicy, Retryable};
pub use tarn_catalog::Role;
/// Whether a character may not appear in names and labels (control characters, line
/// separators, bidirectional controls); also what a front end escapes before printing
/// data on a terminal.
pub use tarn_catalog::is_hidden_control;
pub use tarn_sql::StatementAllocator;
pub use tarn_sql::{StopHandle, Stoppable, stoppable};
pub use tarn_storage::{BuildProgress, SyncMode};
pub use upload::{UploadProgress, UploadedTable};

/// Storage extension points: the file backend trait, a fault-injecting backend for
/// testing how a host program copes with a failing disk, and a simulated disk that
/// loses power (only fsynced bytes are sure to survive).
pub mod storage {
    pub use tarn_storage::{
        Fault, FaultOp, FaultyBackend, FileBackend, PowerCutDisk, StdBackend, WriteFile,
    };
}

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
    sync: SyncMode,
    rate_limit: Option<(f64, u32)>,
    memtable_bytes: usize,
    background: bool,
    backend: Arc<dyn FileBackend>,
    limits: Limits,
    index_progress: Option<IndexProgress>,
    max_file_bytes: u64,
    max_organizations_per_user: usize,
}

/// A host's callback for index builds that `CREATE INDEX` waits for.
#[derive(Clone)]
struct IndexProgress(Arc<dyn Fn(BuildProgress) + Send + Sync>);

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
    /// [`storage::FaultyBackend`] that injects failures.
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

struct Bucket {
    tokens: f64,
    at: Instant,
}

struct Inner {
    engine: SqlEngine,
    options: Options,
    buckets: Mutex<HashMap<String, Bucket>>,
    /// When each key was last used, by key id: counted here, where a call costs one
    /// atomic store, and written to the catalog on close (a catalog commit per call
    /// would put a log write on every read).
    key_uses: Mutex<HashMap<String, Arc<KeyUse>>>,
    /// What makes revocations and removals take effect at once (see `access::Gates`).
    gates: Gates,
}

/// When one API key was last used (Unix seconds; 0 = not since open).
#[derive(Debug, Default)]
struct KeyUse(AtomicI64);

impl KeyUse {
    fn record(&self) {
        self.0
            .fetch_max(chrono::Utc::now().timestamp(), Ordering::Relaxed);
    }

    fn get(&self) -> Option<i64> {
        Some(self.0.load(Ordering::Relaxed)).filter(|t| *t > 0)
    }
}

/// An open database. Cheap to clone; all clones share it.
#[derive(Clone)]
pub struct Tarn {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Tarn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tarn").field("db", self.db()).finish()
    }
}

use tarn_catalog::now_iso;

/// ISO 8601 UTC of Unix seconds `t`.
fn iso_of(t: i64) -> String {
    chrono::DateTime::from_timestamp(t, 0)
        .unwrap_or_default()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// `a == b` in time that depends only on the lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    subtle::ConstantTimeEq::ct_eq(a, b).into()
}

/// Longest display name (of a user, organization or workspace) or API key label, in
/// characters.
pub const MAX_TEXT_FIELD_CHARS: usize = 256;

/// A display name or label: at most [`MAX_TEXT_FIELD_CHARS`] characters, no control
/// characters, or a 400 naming the field. Every catalog record is held in memory and
/// rewritten at each checkpoint: an unbounded name let one tenant grow the catalog
/// shared by all (five 50M-character names made every DDL take a second).
fn check_text_field(field: &str, value: &str) -> Result<()> {
    let chars = value.chars().count();
    if chars > MAX_TEXT_FIELD_CHARS {
        return Err(Error::bad(format!(
            "{field} is too long: {chars} characters, at most {MAX_TEXT_FIELD_CHARS}"
        )));
    }
    if value.chars().any(tarn_catalog::is_hidden_control) {
        return Err(Error::bad(format!(
            "{field} must not contain control, line-separator or bidirectional control \
             characters"
        )));
    }
    Ok(())
}

/// What the memory pool said when it refused a result's rows, without DataFusion's
/// wrappers ("Resources exhausted: …", the list of top consumers after it).
fn pool_refusal(e: &datafusion::error::DataFusionError) -> String {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default();
    let first = first.strip_prefix("Resources exhausted: ").unwrap_or(first);
    first
        .split(" with top memory consumers")
        .next()
        .unwrap_or(first)
        .to_string()
}

/// A valid e-mail address, trimmed and in lower case, or 400: one `@` between a
/// non-empty local part and a domain, no whitespace, control or bidirectional control
/// characters (U+202E would show the address reversed in a member list), at most 320
/// bytes. (Not RFC 5322's full grammar: enough to refuse what cannot be an address, as
/// an admin's typo would otherwise become a permanent pending user.)
fn normalize_email(email: &str) -> Result<String> {
    let email = email.trim().to_lowercase();
    let valid = email.len() <= 320
        && !email
            .chars()
            .any(|c| c.is_whitespace() || tarn_catalog::is_hidden_control(c))
        && email.split_once('@').is_some_and(|(local, domain)| {
            !local.is_empty() && !domain.is_empty() && !domain.contains('@')
        });
    if !valid {
        return Err(Error::bad(format!(
            "invalid e-mail address {}",
            tarn_catalog::shown(&email)
        )));
    }
    Ok(email)
}

/// A new, unverified user.
fn new_user(email: String, name: String) -> UserRecord {
    UserRecord {
        id: uuid::Uuid::new_v4().to_string(),
        email,
        name,
        verified: false,
        date_joined: chrono::Utc::now().timestamp(),
    }
}

/// Hex SHA-256 of an API key secret (what the catalog stores and looks keys up by).
fn hash_secret(secret: &str) -> String {
    files::hex(&Sha256::digest(secret.as_bytes()))
}

fn new_secret() -> String {
    let a = uuid::Uuid::new_v4().simple().to_string();
    let b = uuid::Uuid::new_v4().simple().to_string();
    format!("tarn_{a}{b}")
}

impl Tarn {
    /// Opens (or creates) the database in directory `path`.
    pub async fn open(path: impl AsRef<Path>) -> Result<Tarn> {
        Self::open_with(path, Options::default()).await
    }

    /// Opens (or creates) the database in `path` with `options`. A directory held by
    /// another process is 409; one written by a newer format version is refused.
    pub async fn open_with(path: impl AsRef<Path>, options: Options) -> Result<Tarn> {
        let path = path.as_ref().to_path_buf();
        let storage = StorageOptions {
            sync: options.sync,
            backend: options.backend.clone(),
            memtable_bytes: options.memtable_bytes as u64,
            background: options.background,
            index_builder: Some(Arc::new(tarn_search::SearchIndexBuilder)),
        };
        let db = tokio::task::spawn_blocking(move || Database::open(&path, storage))
            .await
            .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))??;
        Self::from_db(db, options)
    }

    /// A database without files, for tests and throwaway work.
    pub async fn in_memory() -> Result<Tarn> {
        Self::from_db(Database::in_memory(), Options::default())
    }

    /// An in-memory database with `options` (their limits and fast paths; the storage
    /// options, such as sync mode and memtable size, have no files to apply to).
    pub async fn in_memory_with(options: Options) -> Result<Tarn> {
        Self::from_db(Database::in_memory(), options)
    }

    fn from_db(db: Database, options: Options) -> Result<Tarn> {
        let mut engine = SqlEngine::new(Arc::new(db), options.limits.clone())?;
        if let Some(p) = &options.index_progress {
            engine.set_index_progress(p.0.clone());
        }
        Ok(Tarn {
            inner: Arc::new(Inner {
                engine,
                options,
                buckets: Mutex::new(HashMap::new()),
                key_uses: Mutex::new(HashMap::new()),
                gates: Gates::default(),
            }),
        })
    }

    fn db(&self) -> &Arc<Database> {
        self.inner.engine.db()
    }

    fn catalog(&self) -> Arc<Catalog> {
        self.db().catalog()
    }

    /// Commits catalog changes holding `guards` (the DDL and table locks that make them
    /// valid) until they are published: dropping the caller's future cannot release the
    /// locks early.
    async fn commit(&self, ops: Vec<Op>, guards: Vec<OwnedMutexGuard<()>>) -> Result<()> {
        Ok(self.inner.engine.commit(ops, guards).await?)
    }

    /// Starts closing, for a host that drains requests before [`Tarn::close`] (on
    /// SIGTERM, say): statements under way stop waiting for work that goes on in the
    /// background — a CREATE INDEX answers at once with its notice instead of waiting
    /// for its build until the statement timeout — so the drain is not held by them.
    /// Statements still run; builds stop at the close and are finished at the next
    /// open. `close` does this first too.
    pub fn begin_close(&self) {
        self.inner.engine.begin_close();
    }

    /// Stops the statements under way, for a host whose drain ran out: each still at
    /// its work (a long CTAS, a query) ends at its next await with a 503 `the server is
    /// shutting down: the statement was stopped before it applied anything; retry`, and
    /// one already committing finishes its commit, so nothing is half applied. Later
    /// statements are refused the same way; call [`Tarn::close`] next.
    pub fn stop_statements(&self) {
        self.inner.engine.stop_statements();
    }

    /// Closes the database: waits for commits in flight, stops background maintenance,
    /// checkpoints (so the next open replays nothing) and releases the directory lock,
    /// all on a blocking thread. Afterwards every call through any clone of this
    /// handle, or a session of it, fails with a 500 `the database is closed`.
    ///
    /// Before that it records when each API key was last used (`ApiKeyInfo::last_used_at`;
    /// best effort: a failure there does not stop the close).
    ///
    /// Dropping the last handle without closing is safe too: nothing acknowledged is
    /// lost (the write-ahead log holds it), but when that happens on a tokio runtime
    /// thread the closing checkpoint is skipped rather than block the runtime, so the
    /// next open replays the log.
    pub async fn close(&self) -> Result<()> {
        self.begin_close();
        // Uses are advisory: failing to record them must not keep the database open.
        if let Err(e) = self.record_key_uses().await {
            tracing::warn!("API key uses not recorded on close: {e}");
        }
        let db = self.db().clone();
        tokio::task::spawn_blocking(move || db.close())
            .await
            .map_err(crate::files::join_error)??;
        Ok(())
    }

    /// `{status: "ok"}`.
    pub async fn health(&self) -> Result<Status> {
        Ok(Status {
            status: "ok".into(),
        })
    }

    /// `{status: "ready"}`: recovery finishes before `open` returns.
    pub async fn ready(&self) -> Result<Status> {
        Ok(Status {
            status: "ready".into(),
        })
    }

    /// Writes the key uses counted since open to the catalog (see `Inner::key_uses`).
    async fn record_key_uses(&self) -> Result<()> {
        if self.db().is_closed() {
            return Ok(());
        }
        let unrecorded = || -> Vec<(String, i64)> {
            let catalog = self.catalog();
            self.inner
                .key_uses
                .lock()
                .iter()
                .filter_map(|(id, u)| Some((id.clone(), u.get()?)))
                .filter(|(id, at)| catalog.api_key(id).is_some_and(|k| k.last_used < Some(*at)))
                .collect()
        };
        // Nothing to record: no wait for the DDL lock (a DDL statement in flight).
        if unrecorded().is_empty() {
            return Ok(());
        }
        let ddl = self.inner.engine.locks().ddl().await;
        let uses = unrecorded();
        if uses.is_empty() {
            return Ok(());
        }
        self.commit(
            vec![Op::Catalog(CatalogOp::RecordKeyUses { uses })],
            vec![ddl],
        )
        .await
    }

    /// Creates a user (the embedded stand-in for the web console). E-mails are unique
    /// (compared in lower case). An e-mail added to an organization before its user
    /// existed ([`Session::add_member`]) already has an unverified user: this is 409 too.
    pub async fn create_user(&self, email: &str, name: &str) -> Result<User> {
        let email = normalize_email(email)?;
        check_text_field("name", name)?;
        let ddl = self.inner.engine.locks().ddl().await;
        if self.catalog().user_by_email(&email).is_some() {
            return Err(Error::conflict(format!("user \"{email}\" already exists")));
        }
        let user = new_user(email, name.to_string());
        self.commit(
            vec![Op::Catalog(CatalogOp::CreateUser(user.clone()))],
            vec![ddl],
        )
        .await?;
        Ok(self.user_view(&self.catalog(), &user))
    }

    fn user_view(&self, catalog: &Catalog, u: &UserRecord) -> User {
        User {
            id: u.id.clone(),
            email: u.email.clone(),
            name: u.name.clone(),
            verified: u.verified,
            organizations: catalog
                .orgs_of(&u.id)
                .iter()
                .map(|o| o.id.clone())
                .collect(),
            display_name: u.name.clone(),
            date_joined: u.date_joined,
        }
    }

    /// Creates an API key for a user; the secret is returned only here (only its SHA-256
    /// is stored). The user becomes verified.
    pub async fn create_api_key(&self, user_id: &str, label: &str) -> Result<NewApiKey> {
        check_text_field("label", label)?;
        let ddl = self.inner.engine.locks().ddl().await;
        let catalog = self.catalog();
        let user = catalog
            .user(user_id)
            .ok_or_else(|| Error::not_found(format!("user \"{user_id}\" does not exist")))?;
        let secret = new_secret();
        let record = ApiKeyRecord {
            id: uuid::Uuid::new_v4().to_string(),
            user_id: user_id.to_string(),
            label: label.to_string(),
            hash: hash_secret(&secret),
            created_at: now_iso(),
            revoked: false,
            last_used: None,
        };
        let mut ops = vec![Op::Catalog(CatalogOp::CreateApiKey(record.clone()))];
        if !user.verified {
            ops.push(Op::Catalog(CatalogOp::VerifyUser {
                user_id: user_id.to_string(),
            }));
        }
        self.commit(ops, vec![ddl]).await?;
        Ok(NewApiKey {
            id: record.id,
            label: record.label,
            secret,
            created_at: record.created_at,
        })
    }

    /// A user's API keys (never the secrets), with when each was last used.
    pub async fn api_keys(&self, user_id: &str) -> Result<Vec<ApiKeyInfo>> {
        let catalog = self.catalog();
        if catalog.user(user_id).is_none() {
            return Err(Error::not_found(format!(
                "user \"{user_id}\" does not exist"
            )));
        }
        let uses = self.inner.key_uses.lock();
        Ok(catalog
            .api_keys_of(user_id)
            .into_iter()
            .map(|k| ApiKeyInfo {
                id: k.id.clone(),
                label: k.label.clone(),
                created_at: k.created_at.clone(),
                last_used_at: k
                    .last_used
                    .max(uses.get(&k.id).and_then(|u| u.get()))
                    .map(iso_of),
                revoked: k.revoked,
            })
            .collect())
    }

    /// Revokes a key: it never connects again, and its open sessions are refused from
    /// their next call. Calls of the key under way finish first (this waits for them,
    /// for at most the query timeout), so nothing the key does lands after this returns.
    pub async fn revoke_api_key(&self, key_id: &str) -> Result<()> {
        let _gate = self.inner.gates.revoke_key(key_id).await;
        let ddl = self.inner.engine.locks().ddl().await;
        match self.catalog().api_key(key_id) {
            None => Err(Error::not_found(format!(
                "API key \"{key_id}\" does not exist"
            ))),
            Some(k) if k.revoked => Ok(()),
            Some(_) => {
                self.commit(
                    vec![Op::Catalog(CatalogOp::RevokeApiKey {
                        key_id: key_id.to_string(),
                    })],
                    vec![ddl],
                )
                .await
            }
        }
    }

    /// A session for the key's user; 401 for an unknown or revoked key.
    ///
    /// The secret's SHA-256 finds the key (how long that lookup takes can only tell
    /// something about the digest, which says nothing about the secret), and the stored
    /// digest is then compared with the computed one in constant time.
    pub async fn connect(&self, secret: &str) -> Result<Session> {
        self.check_open()?;
        let catalog = self.catalog();
        let hash = hash_secret(secret);
        let key = catalog
            .api_key_by_hash(&hash)
            .filter(|k| !k.revoked && constant_time_eq(k.hash.as_bytes(), hash.as_bytes()))
            .ok_or_else(revoked)?;
        let used = {
            let mut uses = self.inner.key_uses.lock();
            match uses.get(&key.id) {
                Some(u) => u.clone(),
                None => uses.entry(key.id.clone()).or_default().clone(),
            }
        };
        used.record();
        Ok(Session {
            tarn: self.clone(),
            user_id: key.user_id.clone(),
            key_id: key.id.clone(),
            org: None,
            settings: Arc::default(),
            used,
        })
    }

    fn check_open(&self) -> Result<()> {
        if self.db().is_closed() {
            return Err(tarn_storage::Error::Closed.into());
        }
        Ok(())
    }

    fn check_rate(&self, key_id: &str) -> Result<()> {
        let Some((rate, burst)) = self.inner.options.rate_limit else {
            return Ok(());
        };
        let mut buckets = self.inner.buckets.lock();
        let now = Instant::now();
        let b = buckets.entry(key_id.to_string()).or_insert(Bucket {
            tokens: burst as f64,
            at: now,
        });
        b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * rate).min(burst as f64);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            let wait = if rate > 0.0 {
                (1.0 - b.tokens) / rate
            } else {
                3600.0
            };
            Err(Error::rate_limited(Duration::from_secs_f64(wait)))
        }
    }
}

/// What a host program does on behalf of one API key (and, with [`Session::with_org`],
/// one organization).
///
/// A session is what a PostgreSQL connection is to its settings: `SET
/// engine.ef_search = n` applies to the later statements of this session, of its
/// clones and of the sessions [`Session::with_org`] makes from it (they share one set
/// of settings), until `RESET`. Another [`Tarn::connect`] starts from the defaults.
#[derive(Debug, Clone)]
pub struct Session {
    tarn: Tarn,
    user_id: String,
    key_id: String,
    org: Option<String>,
    settings: Arc<parking_lot::Mutex<tarn_sql::Settings>>,
    used: Arc<KeyUse>,
}

fn parse_role(role: &str) -> Result<Role> {
    Role::parse(role).ok_or_else(|| {
        Error::bad(format!(
            "invalid role \"{role}\": a role is \"admin\" or \"member\""
        ))
    })
}

fn member_not_found(org: &str, user_id: &str) -> Error {
    Error::not_found(format!(
        "user \"{user_id}\" is not a member of organization \"{org}\""
    ))
}

fn last_admin(org: &str) -> Error {
    Error::conflict(format!(
        "organization \"{org}\" must keep at least one admin"
    ))
}

impl Session {
    /// The same session scoped to organization `org_id` (the org header equivalent).
    /// Nothing is checked here: every call made through the new session is.
    pub fn with_org(&self, org_id: &str) -> Session {
        Session {
            org: Some(org_id.to_string()),
            ..self.clone()
        }
    }

    fn locks(&self) -> &Arc<tarn_sql::Locks> {
        self.tarn.inner.engine.locks()
    }

    /// The current user, with the organizations they belong to.
    pub async fn me(&self) -> Result<User> {
        let access = self.authorize(Operation::Me, "")?;
        let u = access
            .catalog
            .user(&self.user_id)
            .ok_or_else(|| Error::new(ErrorKind::Unauthorized, "user no longer exists"))?;
        Ok(self.tarn.user_view(&access.catalog, u))
    }

    /// Organizations the user belongs to.
    pub async fn organizations(&self) -> Result<Vec<Organization>> {
        let access = self.authorize(Operation::Organizations, "")?;
        Ok(access
            .catalog
            .orgs_of(&self.user_id)
            .into_iter()
            .map(org_view)
            .collect())
    }

    /// One organization with member and pending-invite counts.
    pub async fn organization(&self, id: &str) -> Result<OrganizationDetail> {
        let access = self.authorize(Operation::Organization, id)?;
        let org = access.catalog.org(id).ok_or_else(|| org_not_found(id))?;
        let members = access.catalog.members_of(id);
        Ok(OrganizationDetail {
            organization: org_view(org),
            member_count: members.len() as u64,
            pending_invites_count: members.iter().filter(|(u, _)| !u.verified).count() as u64,
        })
    }

    /// Creates an organization; the creator becomes its admin.
    pub async fn create_organization(&self, id: &str, name: &str) -> Result<IdName> {
        self.authorize(Operation::CreateOrganization, "")?;
        tarn_catalog::validate_id("organization", id)?;
        check_text_field("name", name)?;
        let Locked { ddl, catalog, .. } = self
            .lock_and_recheck(Operation::CreateOrganization, "")
            .await?;
        if catalog.org(id).is_some() {
            return Err(Error::conflict(format!(
                "organization \"{id}\" already exists"
            )));
        }
        let limit = self.tarn.inner.options.max_organizations_per_user;
        if catalog.orgs_created_by(&self.user_id) >= limit {
            return Err(Error::bad(format!(
                "this user has created {limit} organizations, the most one user may have \
                 (limit max_organizations_per_user); delete one first"
            )));
        }
        self.tarn
            .commit(
                vec![
                    Op::Catalog(CatalogOp::CreateOrg(OrgRecord {
                        id: id.to_string(),
                        name: name.to_string(),
                        creator: self.user_id.clone(),
                        created_at: now_iso(),
                    })),
                    put_member(id, &self.user_id, Role::Admin),
                ],
                vec![ddl],
            )
            .await?;
        Ok(IdName {
            id: id.to_string(),
            name: name.to_string(),
        })
    }

    /// Renames an organization (admin).
    pub async fn update_organization(&self, id: &str, name: &str) -> Result<IdName> {
        self.authorize(Operation::UpdateOrganization, id)?;
        check_text_field("name", name)?;
        let Locked { ddl, .. } = self
            .lock_and_recheck(Operation::UpdateOrganization, id)
            .await?;
        self.tarn
            .commit(
                vec![Op::Catalog(CatalogOp::RenameOrg {
                    org_id: id.to_string(),
                    name: name.to_string(),
                })],
                vec![ddl],
            )
            .await?;
        Ok(IdName {
            id: id.to_string(),
            name: name.to_string(),
        })
    }

    /// Deletes an organization with its members, workspaces and tables (admin).
    pub async fn delete_organization(&self, id: &str) -> Result<()> {
        self.authorize(Operation::DeleteOrganization, id)?;
        let Locked { ddl, catalog, .. } = self
            .lock_and_recheck(Operation::DeleteOrganization, id)
            .await?;
        let mut guards = vec![ddl];
        for t in catalog.all_tables().filter(|t| t.org_id == id) {
            guards.push(self.locks().table(t.id).await);
        }
        self.tarn
            .commit(
                vec![Op::Catalog(CatalogOp::DeleteOrg {
                    org_id: id.to_string(),
                })],
                guards,
            )
            .await
    }

    /// The members of organization `org`, by e-mail.
    pub async fn members(&self, org: &str) -> Result<MemberList> {
        let access = self.authorize(Operation::Members, org)?;
        let mut members: Vec<Member> = access
            .catalog
            .members_of(org)
            .into_iter()
            .map(|(u, role)| member_view(u, role))
            .collect();
        members.sort_by(|a, b| a.email.cmp(&b.email));
        Ok(MemberList {
            total_count: members.len() as u64,
            members,
        })
    }

    /// Adds the user with e-mail `email` to organization `org` as `role` (`admin` or
    /// `member`, else 400; admin only). An e-mail with no user yet creates an unverified
    /// user (a pending invite, counted in `pending_invites_count` until the user gets
    /// an API key). An existing member is 409.
    pub async fn add_member(&self, org: &str, email: &str, role: &str) -> Result<Member> {
        self.authorize(Operation::AddMember, org)?;
        let role = parse_role(role)?;
        let email = normalize_email(email)?;
        let Locked { ddl, catalog, .. } = self.lock_and_recheck(Operation::AddMember, org).await?;
        let mut ops = Vec::new();
        let user = match catalog.user_by_email(&email) {
            Some(u) => {
                if catalog.role(org, &u.id).is_some() {
                    return Err(Error::conflict(format!(
                        "user \"{email}\" is already a member of organization \"{org}\""
                    )));
                }
                u.clone()
            }
            None => {
                let u = new_user(email, String::new());
                ops.push(Op::Catalog(CatalogOp::CreateUser(u.clone())));
                u
            }
        };
        ops.push(put_member(org, &user.id, role));
        self.tarn.commit(ops, vec![ddl]).await?;
        Ok(member_view(&user, role))
    }

    /// Changes a member's role (admin only). Demoting the organization's last admin is
    /// 409; a user who is not a member is 404.
    pub async fn update_member(&self, org: &str, user_id: &str, role: &str) -> Result<MemberRole> {
        self.authorize(Operation::UpdateMember, org)?;
        let role = parse_role(role)?;
        let Locked { ddl, catalog, .. } =
            self.lock_and_recheck(Operation::UpdateMember, org).await?;
        let current = catalog
            .role(org, user_id)
            .ok_or_else(|| member_not_found(org, user_id))?;
        if current == Role::Admin
            && role != Role::Admin
            && other_admins(&catalog, org, user_id) == 0
        {
            return Err(last_admin(org));
        }
        if current != role {
            self.tarn
                .commit(vec![put_member(org, user_id, role)], vec![ddl])
                .await?;
        }
        Ok(MemberRole {
            user_id: user_id.to_string(),
            role: role.as_str().to_string(),
        })
    }

    /// Removes a member (admin only); that user's sessions lose the organization at
    /// their next call. The member's SQL calls under way finish first (this waits for
    /// them, for at most the query timeout), so nothing the member does lands after this
    /// returns. Removing the last admin is 409; a non-member is 404.
    pub async fn remove_member(&self, org: &str, user_id: &str) -> Result<()> {
        self.authorize(Operation::RemoveMember, org)?;
        // The member's calls under way finish first (see `access::Gates`); the gate is
        // taken before the DDL lock, which those calls may be waiting for.
        let _gate = self.tarn.inner.gates.remove_member(org, user_id).await;
        let Locked { ddl, catalog, .. } =
            self.lock_and_recheck(Operation::RemoveMember, org).await?;
        let current = catalog
            .role(org, user_id)
            .ok_or_else(|| member_not_found(org, user_id))?;
        if current == Role::Admin && other_admins(&catalog, org, user_id) == 0 {
            return Err(last_admin(org));
        }
        self.tarn
            .commit(
                vec![Op::Catalog(CatalogOp::RemoveMember {
                    org_id: org.to_string(),
                    user_id: user_id.to_string(),
                })],
                vec![ddl],
            )
            .await
    }

    /// Workspaces of the session's organization.
    pub async fn workspaces(&self) -> Result<WorkspaceList> {
        let access = self.authorize(Operation::Workspaces, "")?;
        Ok(WorkspaceList {
            data: access
                .catalog
                .workspaces_of(access.org())
                .into_iter()
                .map(ws_view)
                .collect(),
        })
    }

    /// One workspace.
    pub async fn workspace(&self, id: &str) -> Result<WorkspaceDetail> {
        let access = self.authorize(Operation::Workspace, id)?;
        let ws = access
            .catalog
            .workspace(access.org(), id)
            .ok_or_else(|| ws_not_found(id))?;
        Ok(WorkspaceDetail {
            workspace: ws_view(ws),
        })
    }

    /// Creates a workspace; its id is the SQL schema of its tables.
    pub async fn create_workspace(&self, id: &str, name: &str) -> Result<IdName> {
        self.authorize(Operation::CreateWorkspace, "")?;
        tarn_catalog::validate_id("workspace", id)?;
        check_text_field("name", name)?;
        let Locked { ddl, catalog, org } = self
            .lock_and_recheck(Operation::CreateWorkspace, "")
            .await?;
        if catalog.workspace(&org, id).is_some() {
            return Err(Error::conflict(format!(
                "workspace \"{id}\" already exists"
            )));
        }
        self.tarn
            .commit(
                vec![Op::Catalog(CatalogOp::CreateWorkspace(WorkspaceRecord {
                    id: id.to_string(),
                    org_id: org,
                    name: name.to_string(),
                    created_at: now_iso(),
                    uid: uuid::Uuid::new_v4().to_string(),
                }))],
                vec![ddl],
            )
            .await?;
        Ok(IdName {
            id: id.to_string(),
            name: name.to_string(),
        })
    }

    /// Renames a workspace.
    pub async fn update_workspace(&self, id: &str, name: &str) -> Result<IdName> {
        self.authorize(Operation::UpdateWorkspace, id)?;
        check_text_field("name", name)?;
        // Checked again under the DDL lock: a workspace deleted meanwhile is a 404.
        let Locked { ddl, org, .. } = self
            .lock_and_recheck(Operation::UpdateWorkspace, id)
            .await?;
        self.tarn
            .commit(
                vec![Op::Catalog(CatalogOp::RenameWorkspace {
                    org_id: org,
                    workspace_id: id.to_string(),
                    name: name.to_string(),
                })],
                vec![ddl],
            )
            .await?;
        Ok(IdName {
            id: id.to_string(),
            name: name.to_string(),
        })
    }

    /// Deletes a workspace with all its tables (admin).
    pub async fn delete_workspace(&self, id: &str) -> Result<()> {
        self.authorize(Operation::DeleteWorkspace, id)?;
        let Locked { ddl, catalog, org } = self
            .lock_and_recheck(Operation::DeleteWorkspace, id)
            .await?;
        let mut guards = vec![ddl];
        for t in catalog.tables_of(&org, id) {
            guards.push(self.locks().table(t.id).await);
        }
        self.tarn
            .commit(
                vec![Op::Catalog(CatalogOp::DeleteWorkspace {
                    org_id: org,
                    workspace_id: id.to_string(),
                })],
                guards,
            )
            .await
    }

    /// Tables of a workspace with their row counts.
    pub async fn tables(&self, ws: &str) -> Result<Vec<TableSummary>> {
        let access = self.authorize(Operation::Tables, ws)?;
        Ok(access
            .catalog
            .tables_of(access.org(), ws)
            .into_iter()
            .map(|t| TableSummary {
                name: t.name.clone(),
                row_count: self
                    .tarn
                    .db()
                    .table(t.id)
                    .map_or(0, |s| s.snapshot().row_count()),
            })
            .collect())
    }

    /// One table's columns (PostgreSQL type names), row count and size.
    pub async fn table(&self, ws: &str, table: &str) -> Result<TableDetails> {
        let access = self.authorize(Operation::Table, ws)?;
        let catalog = &access.catalog;
        let def = catalog.table(access.org(), ws, table).ok_or_else(|| {
            Error::not_found(format!("relation \"{ws}\".\"{table}\" does not exist"))
        })?;
        let snapshot = self.tarn.db().table(def.id).map(|s| s.snapshot());
        Ok(TableDetails {
            table_name: def.name.clone(),
            columns: def
                .columns
                .iter()
                .map(|c| ColumnInfo {
                    name: c.name.clone(),
                    data_type: c.ty.pg_name().to_string(),
                    nullable: c.nullable,
                    default: c.default.as_ref().map(|d| match d {
                        tarn_catalog::ColumnDefault::Sequence { name } => {
                            format!("nextval('{name}'::regclass)")
                        }
                        tarn_catalog::ColumnDefault::Expr { sql } => sql.clone(),
                    }),
                })
                .collect(),
            row_count: snapshot.as_ref().map_or(0, |s| s.row_count()),
            size_mb: snapshot.map_or(0.0, |s| s.size_bytes() as f64 / (1024.0 * 1024.0)),
            indexes: catalog
                .indexes_of(def.id)
                .into_iter()
                .map(|i| {
                    let (done, all) = self
                        .tarn
                        .db()
                        .index_coverage(def.id, i.id)
                        .unwrap_or((0, 0));
                    IndexInfo {
                        name: i.name.clone(),
                        column: def
                            .column_by_id(i.column)
                            .map(|c| c.name.clone())
                            .unwrap_or_default(),
                        index_type: i.index_type.as_str().to_string(),
                        options: i.options.clone(),
                        status: if done < all { "building" } else { "ready" }.to_string(),
                        segments_indexed: done as u64,
                        segments: all as u64,
                    }
                })
                .collect(),
        })
    }

    /// Drops a table (404 if it does not exist).
    pub async fn drop_table(&self, ws: &str, table: &str) -> Result<()> {
        let (access, _guards) = self.authorize_call(Operation::DropTable, ws).await?;
        let sql = format!(
            "DROP TABLE \"{}\".\"{}\"",
            ws.replace('"', "\"\""),
            table.replace('"', "\"\"")
        );
        self.run(access, ws, &sql, &[]).await.map(|_| ())
    }

    async fn run(
        &self,
        access: Access,
        ws: &str,
        sql: &str,
        params: &[serde_json::Value],
    ) -> Result<tarn_sql::StatementResult> {
        Ok(self
            .tarn
            .inner
            .engine
            .execute(access.org(), ws, sql, params, &self.settings)
            .await?)
    }

    /// Runs one SQL statement in workspace `ws` with positional parameters.
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// # let tarn = tarn::Tarn::in_memory().await?;
    /// # let user = tarn.create_user("ada@example.com", "Ada").await?;
    /// # let key = tarn.create_api_key(&user.id, "laptop").await?;
    /// # let session = tarn.connect(&key.secret).await?;
    /// # session.create_organization("acme", "Acme").await?;
    /// # let acme = session.with_org("acme");
    /// # acme.create_workspace("docs", "Docs").await?;
    /// use serde_json::json;
    /// acme.query("docs", r#"CREATE TABLE "docs"."t" (id INT8 PRIMARY KEY, tags TEXT[])"#, &[]).await?;
    /// let r = acme.query("docs", r#"INSERT INTO "docs"."t" VALUES ($1, $2)"#,
    ///     &[json!(7), json!(["a", "b"])]).await?;
    /// assert_eq!(r.rows_affected, 1);
    /// let r = acme.query("docs", r#"SELECT tags FROM "docs"."t" WHERE id = $1"#, &[json!(7)]).await?;
    /// assert_eq!(r.columns, ["tags"]);
    /// assert_eq!(r.rows, Some(vec![vec![json!(["a", "b"])]]));
    /// // Errors carry the HTTP status the hosted service would answer with.
    /// let e = acme.query("docs", r#"SELECT * FROM "docs"."nope""#, &[]).await.unwrap_err();
    /// assert_eq!(e.status(), 404);
    /// # Ok::<(), tarn::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn query(
        &self,
        ws: &str,
        sql: &str,
        params: &[serde_json::Value],
    ) -> Result<QueryResult> {
        let start = Instant::now();
        let (access, _guards) = self.authorize_call(Operation::Query, ws).await?;
        let out = self.run(access, ws, sql, params).await?;
        let row_count = out.row_count();
        let mut charge = Charge::default();
        let rows = match out.batches {
            None => None,
            Some(batches) => {
                // The rows stay charged to the pool the statements share while they are
                // encoded: the Arrow batches until each is encoded and let go, the JSON
                // rows as they are made (a host then serializes them).
                let engine = &self.tarn.inner.engine;
                let memory = engine.reserve("query result as JSON");
                let over = |e: datafusion::error::DataFusionError| {
                    Error::bad(format!(
                        "query memory limit (query_memory) exceeded: the result rows as JSON \
                         pass the limit of {} bytes; select fewer rows or columns (LIMIT), or \
                         read them as Arrow ({})",
                        engine.limits().query_memory,
                        pool_refusal(&e)
                    ))
                };
                memory
                    .try_grow(batches.iter().map(tarn_sql::batch_bytes).sum())
                    .map_err(over)?;
                let mut rows = Vec::new();
                let fields: Vec<_> = out.schema.fields().iter().map(|f| f.as_ref()).collect();
                for b in batches {
                    tarn_sql::encode_rows(&fields, b.columns(), &mut rows, &mut |n| {
                        memory
                            .try_grow(n)
                            .map_err(|e| tarn_sql::Error::BadRequest(over(e).message().to_string()))
                    })?;
                    memory.shrink(tarn_sql::batch_bytes(&b).min(memory.size()));
                }
                charge = Charge(Some(memory));
                Some(rows)
            }
        };
        Ok(QueryResult {
            columns: out.columns,
            rows,
            row_count,
            rows_affected: out.rows_affected,
            execution_time_ms: start.elapsed().as_secs_f64() * 1000.0,
            notices: out.notices,
            charge,
        })
    }

    /// Runs one statement and returns its rows as Arrow record batches.
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// # let tarn = tarn::Tarn::in_memory().await?;
    /// # let user = tarn.create_user("ada@example.com", "Ada").await?;
    /// # let key = tarn.create_api_key(&user.id, "laptop").await?;
    /// # let session = tarn.connect(&key.secret).await?;
    /// # session.create_organization("acme", "Acme").await?;
    /// # let acme = session.with_org("acme");
    /// # acme.create_workspace("docs", "Docs").await?;
    /// use std::sync::Arc;
    /// use tarn::arrow::array::{Int64Array, StringArray};
    /// use tarn::arrow::datatypes::{DataType, Field, Schema};
    /// use tarn::arrow::record_batch::RecordBatch;
    /// acme.query("docs", r#"CREATE TABLE "docs"."t" (id INT8, name TEXT)"#, &[]).await?;
    /// let schema = Arc::new(Schema::new(vec![
    ///     Field::new("id", DataType::Int64, false),
    ///     Field::new("name", DataType::Utf8, true),
    /// ]));
    /// let batch = RecordBatch::try_new(schema, vec![
    ///     Arc::new(Int64Array::from(vec![1, 2])),
    ///     Arc::new(StringArray::from(vec![Some("one"), None])),
    /// ]).expect("a batch");
    /// assert_eq!(acme.insert_arrow("docs", "t", &[batch]).await?, 2);
    /// let out = acme.query_arrow("docs", r#"SELECT count(name) AS n FROM "docs"."t""#, &[]).await?;
    /// let batches = out.batches.expect("rows");
    /// assert_eq!(batches[0].num_rows(), 1);
    /// # Ok::<(), tarn::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn query_arrow(
        &self,
        ws: &str,
        sql: &str,
        params: &[serde_json::Value],
    ) -> Result<ArrowResult> {
        let (access, _guards) = self.authorize_call(Operation::QueryArrow, ws).await?;
        let out = self.run(access, ws, sql, params).await?;
        let mut charge = Charge::default();
        if let Some(batches) = &out.batches {
            let engine = &self.tarn.inner.engine;
            let memory = engine.reserve("query result as Arrow");
            memory
                .try_grow(batches.iter().map(tarn_sql::batch_bytes).sum())
                .map_err(|e| {
                    Error::bad(format!(
                        "query memory limit (query_memory) exceeded: the result rows pass the \
                         limit of {} bytes with what other statements hold; select fewer rows \
                         or columns (LIMIT) ({})",
                        engine.limits().query_memory,
                        pool_refusal(&e)
                    ))
                })?;
            charge = Charge(Some(memory));
        }
        Ok(ArrowResult {
            schema: out.schema,
            batches: out.batches,
            rows_affected: out.rows_affected,
            charge,
        })
    }

    /// Appends Arrow record batches to a table in one atomic commit (the write
    /// counterpart of [`Session::query_arrow`]). Fields are matched to columns by name;
    /// missing columns take their defaults; values are validated as for INSERT.
    /// Returns the number of rows written.
    pub async fn insert_arrow(
        &self,
        ws: &str,
        table: &str,
        batches: &[datafusion::arrow::record_batch::RecordBatch],
    ) -> Result<u64> {
        let (access, _guards) = self.authorize_call(Operation::InsertArrow, ws).await?;
        Ok(self
            .tarn
            .inner
            .engine
            .insert_arrow(access.org(), ws, table, batches)
            .await?)
    }

    /// Runs one statement once per parameter set, atomically: all sets apply or none.
    /// An error names the failing set, counted from 0: `parameter set i: …`.
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// # let tarn = tarn::Tarn::in_memory().await?;
    /// # let user = tarn.create_user("ada@example.com", "Ada").await?;
    /// # let key = tarn.create_api_key(&user.id, "laptop").await?;
    /// # let session = tarn.connect(&key.secret).await?;
    /// # session.create_organization("acme", "Acme").await?;
    /// # let acme = session.with_org("acme");
    /// # acme.create_workspace("docs", "Docs").await?;
    /// use serde_json::json;
    /// acme.query("docs", r#"CREATE TABLE "docs"."t" (id INT8 PRIMARY KEY, x FLOAT8)"#, &[]).await?;
    /// let insert = r#"INSERT INTO "docs"."t" VALUES ($1, $2)"#;
    /// let sets: Vec<Vec<serde_json::Value>> = (0..1000).map(|i| vec![json!(i), json!(i as f64 / 2.0)]).collect();
    /// acme.query_batch("docs", insert, &sets).await?;
    /// // A failing set rolls back the whole batch and is named.
    /// let e = acme.query_batch("docs", insert, &[vec![json!(5000), json!(1)], vec![json!(7), json!(1)]])
    ///     .await.unwrap_err();
    /// assert!(e.message().starts_with("parameter set 1: duplicate key"), "{e}");
    /// let r = acme.query("docs", r#"SELECT count(*) FROM "docs"."t""#, &[]).await?;
    /// assert_eq!(r.rows, Some(vec![vec![json!(1000)]]));
    /// # Ok::<(), tarn::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn query_batch(
        &self,
        ws: &str,
        sql: &str,
        params_batch: &[Vec<serde_json::Value>],
    ) -> Result<BatchResult> {
        let start = Instant::now();
        let (access, _guards) = self.authorize_call(Operation::QueryBatch, ws).await?;
        let totals = self
            .tarn
            .inner
            .engine
            .execute_batch(access.org(), ws, sql, params_batch, &self.settings)
            .await?;
        Ok(BatchResult {
            statements: totals.statements,
            rows_affected: totals.rows_affected,
            row_count: totals.row_count,
            execution_time_ms: start.elapsed().as_secs_f64() * 1000.0,
            notices: totals.notices,
        })
    }
}

/// How many admins of organization `org` other than `user_id` can act: verified users
/// (a pending invite as admin may never be accepted, so it does not keep the
/// organization managed).
fn other_admins(catalog: &Catalog, org: &str, user_id: &str) -> usize {
    catalog
        .members_of(org)
        .iter()
        .filter(|(u, r)| *r == Role::Admin && u.verified && u.id != user_id)
        .count()
}

/// The catalog op that makes `user_id` a member of `org` as `role`.
fn put_member(org: &str, user_id: &str, role: Role) -> Op {
    Op::Catalog(CatalogOp::PutMember(tarn_catalog::MemberRecord {
        org_id: org.to_string(),
        user_id: user_id.to_string(),
        role,
    }))
}

fn member_view(u: &UserRecord, role: Role) -> Member {
    Member {
        user_id: u.id.clone(),
        email: u.email.clone(),
        role: role.as_str().to_string(),
    }
}

fn org_view(o: &OrgRecord) -> Organization {
    Organization {
        id: o.id.clone(),
        name: o.name.clone(),
        creator: o.creator.clone(),
        created_at: o.created_at.clone(),
    }
}

fn ws_view(w: &WorkspaceRecord) -> Workspace {
    Workspace {
        id: w.id.clone(),
        org_id: w.org_id.clone(),
        name: w.name.clone(),
        kind: "generic".into(),
        created_at: w.created_at.clone(),
    }
}
