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
mod keys;
mod options;
mod organizations;
mod query;
mod tables;
mod workspaces;

pub use options::{DEFAULT_MAX_FILE_BYTES, DEFAULT_MAX_ORGANIZATIONS_PER_USER, Options};
mod error;
mod files;
mod resources;
mod retry;
mod upload;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use tarn_catalog::{Catalog, UserRecord};
use tarn_sql::SqlEngine;
use tarn_storage::{Database, Op, StorageOptions};
use tokio::sync::OwnedMutexGuard;

use access::Gates;
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
/// Whether a result column holds jsonb (its values are JSON text): what an export writes
/// as stored rather than as a JSON value.
pub use tarn_sql::is_json_field;
pub use tarn_sql::returns_rows_only;
pub use tarn_sql::{StopHandle, Stoppable, stoppable};
pub use tarn_storage::{BuildProgress, SyncMode};
pub use upload::{BoundWorkspace, UploadProgress, UploadedTable};

/// Storage extension points: the file backend trait, a fault-injecting backend for
/// testing how a host program copes with a failing disk, and a simulated disk that
/// loses power (only fsynced bytes are sure to survive).
pub mod storage {
    pub use tarn_storage::{
        Fault, FaultOp, FaultyBackend, FileBackend, PowerCutDisk, StdBackend, WriteFile,
    };
}

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

/// The display name of an organization or workspace: required, so not empty or only
/// white space (a list of blank entries cannot be told apart), and bounded as
/// [`check_text_field`] says.
fn check_display_name(value: &str) -> Result<()> {
    if value.trim().is_empty() {
        return Err(Error::bad("name must not be empty"));
    }
    check_text_field("name", value)
}

/// A valid e-mail address, trimmed of spaces and in lower case, or 400: one `@` between a
/// non-empty local part and a domain, no whitespace, control or bidirectional control
/// characters (U+202E would show the address reversed in a member list), at most 320
/// bytes. (Not RFC 5322's full grammar: enough to refuse what cannot be an address, as
/// an admin's typo would otherwise become a permanent pending user.)
fn normalize_email(email: &str) -> Result<String> {
    // Only spaces are trimmed: a line break, tab or other white space around an
    // address is refused as it is inside one (it was trimmed silently).
    let email = email.trim_matches(' ').to_lowercase();
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
        date_joined: tarn_catalog::Timestamp::now(),
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
    /// another process is 409; one written by a newer format version is refused; a path
    /// that is a file is 400.
    pub async fn open_with(path: impl AsRef<Path>, options: Options) -> Result<Tarn> {
        let path = path.as_ref().to_path_buf();
        // The caller's path, not a failing disk: a 400 that says what it is.
        if tokio::fs::metadata(&path).await.is_ok_and(|m| !m.is_dir()) {
            return Err(Error::bad(format!(
                "cannot open database \"{}\": it is a file, not a directory",
                path.display()
            )));
        }
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
}
