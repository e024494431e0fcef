//! The statement router: parses one statement, binds its parameters, sends SELECT to
//! DataFusion and runs DDL and DML itself against the catalog and storage.

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::catalog::{CatalogProviderList, TableProvider};
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::context::SessionState;
use datafusion::execution::memory_pool::{FairSpillPool, TrackConsumersPool};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::SessionConfig;
use datafusion::sql::sqlparser::ast::{
    self, ObjectName, Query, SelectItem, Statement, TableFactor, Visit, Visitor,
};
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::Tokenizer;
use serde_json::Value as Json;
use tarn_catalog::{Catalog, CatalogOp, ColumnId, TableDef, TableId};
use tarn_storage::{BuiltVersion, Database, Op, TableStore, TableVersion};
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

use crate::bulk;
use crate::dialect::EngineDialect;
use crate::error::{Error, Result, bad};
use crate::ident::{name_parts, normalize, quoted};
use crate::names::OutputNames;
use crate::params::{bind, needs_binding};
use crate::provider::{CURRENT_SCHEMA, ViewCatalogList};
use crate::read_view::{ReadView, STATEMENT_VIEW};
use crate::settings::{self, Settings};
use parking_lot::Mutex;

/// Name of the DataFusion catalog Tarn registers the organization under.
pub(crate) const CATALOG_NAME: &str = "tarn";

/// Limits on one statement (SPEC §8).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Longest SQL text, in bytes.
    pub max_sql_bytes: usize,
    /// Most parameters one statement may bind.
    pub max_params: usize,
    /// Most parameter sets in one batch.
    pub max_batch: usize,
    /// Longest a statement may run.
    pub query_timeout: Duration,
    /// Memory one query may use before it spills or fails.
    pub query_memory: usize,
    /// Whether statements may take the planner-free paths that give the statement
    /// path's answer faster: key lookups, `<#>` top-k searches, batch and literal
    /// inserts. Off, every statement is planned; tests compare the two.
    pub fast_paths: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_sql_bytes: 1 << 20,
            max_params: 65_535,
            max_batch: 100_000,
            query_timeout: Duration::from_secs(60),
            query_memory: 2 << 30,
            fast_paths: true,
        }
    }
}

/// Async locks that serialize writers: one DDL lock for catalog changes and one lock
/// per table for its writers. Async so that a task waiting for a lock never blocks a
/// runtime worker that the lock holder needs.
#[derive(Debug, Default)]
pub struct Locks {
    ddl: Arc<AsyncMutex<()>>,
    tables: parking_lot::Mutex<HashMap<TableId, Arc<AsyncMutex<()>>>>,
}

impl Locks {
    /// Takes the DDL lock.
    pub async fn ddl(&self) -> OwnedMutexGuard<()> {
        self.ddl.clone().lock_owned().await
    }

    /// Takes the writer lock of table `id`.
    pub async fn table(&self, id: TableId) -> OwnedMutexGuard<()> {
        let m = self.tables.lock().entry(id).or_default().clone();
        m.lock_owned().await
    }
}

/// What one statement produced.
#[derive(Debug, Clone)]
pub struct StatementResult {
    /// Output column names (PostgreSQL's); empty without a result set.
    pub columns: Vec<String>,
    /// The result set's schema, fields named as `columns`.
    pub schema: SchemaRef,
    /// Result rows; `None` for statements without a result set.
    pub batches: Option<Vec<RecordBatch>>,
    /// Rows written.
    pub rows_affected: u64,
    /// What the caller should know though the statement succeeded (PostgreSQL's
    /// NOTICE), such as an index build that goes on in the background.
    pub notices: Vec<String>,
}

impl StatementResult {
    pub(crate) fn none(rows_affected: u64) -> Self {
        StatementResult {
            columns: vec![],
            schema: Arc::new(Schema::empty()),
            batches: None,
            rows_affected,
            notices: Vec::new(),
        }
    }

    /// Rows in the result set.
    pub fn row_count(&self) -> u64 {
        self.batches
            .as_ref()
            .map_or(0, |b| b.iter().map(|b| b.num_rows() as u64).sum())
    }
}

/// Totals of a batch.
#[derive(Debug, Clone, Default)]
pub struct BatchTotals {
    /// Parameter sets run.
    pub statements: u64,
    /// Sum of rows written.
    pub rows_affected: u64,
    /// Sum of rows returned.
    pub row_count: u64,
    /// What the caller should know though the batch succeeded (an index build that
    /// goes on in the background), as `StatementResult::notices`.
    pub notices: Vec<String>,
}

/// Runs Tarn SQL against one database.
pub struct SqlEngine {
    db: Arc<Database>,
    base: SessionState,
    locks: Arc<Locks>,
    limits: Limits,
    /// Told how index builds that statements wait for progress.
    index_progress: Option<Arc<dyn Fn(tarn_storage::BuildProgress) + Send + Sync>>,
    /// Set when the host starts closing ([`SqlEngine::begin_close`]): statements stop
    /// waiting for background work.
    closing: tokio::sync::watch::Sender<bool>,
    /// Parameterized queries parsed recently, by organization and SQL text: a host
    /// that runs one search again and again with new parameters parses it once.
    parsed: Mutex<HashMap<String, Arc<Statement>>>,
}

/// Longest SQL text the parse cache keeps (a search statement is a line or two; longer
/// texts are rarely repeated, and the cache's memory must stay small).
const CACHED_SQL_BYTES: usize = 1024;
/// Statements the parse cache holds; it starts over when full.
const CACHED_STATEMENTS: usize = 128;

impl std::fmt::Debug for SqlEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlEngine").field("db", &self.db).finish()
    }
}

impl SqlEngine {
    /// An engine over `db`.
    pub fn new(db: Arc<Database>, limits: Limits) -> Result<Self> {
        let mut config = SessionConfig::new()
            .with_default_catalog_and_schema(CATALOG_NAME, CURRENT_SCHEMA)
            .with_create_default_catalog_and_schema(false)
            .with_information_schema(false);
        let opts = config.options_mut();
        opts.sql_parser.dialect = datafusion::config::Dialect::PostgreSQL;
        opts.sql_parser.map_string_types_to_utf8view = false;
        opts.sql_parser.enable_ident_normalization = true;
        // Tarn's scans tag their fields with metadata (table and column ids, for the
        // search planner). After the optimizer folds a branch of a UNION (or a CASE
        // into its column), the logical and physical schemas below an aggregate can
        // carry different metadata for the same names and types, and DataFusion's
        // check then fails the query with an internal error (found by the differential
        // fuzzer: `SELECT x FROM a WHERE 1 < 2 UNION SELECT y FROM b`). Names, types and
        // nullability are what the aggregate depends on; metadata is not.
        opts.execution.skip_physical_aggregate_schema_check = true;
        // A fair spill pool: sorts, aggregations and joins that can spill share the
        // budget and spill to temporary files instead of failing when it runs out.
        let pool = TrackConsumersPool::new(
            FairSpillPool::new(limits.query_memory),
            std::num::NonZeroUsize::new(5).unwrap_or(std::num::NonZeroUsize::MIN),
        );
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::new(pool))
            .build_arc()?;
        let mut state = SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(runtime)
            .with_default_features()
            // Last, after constants are folded: a wide constant of a SELECT list is
            // repeated over its rows only once sized (held.rs).
            .with_optimizer_rule(Arc::new(crate::held::WideConstants))
            .with_catalog_list(Arc::new(ViewCatalogList {
                name: CATALOG_NAME.to_string(),
            }) as Arc<dyn CatalogProviderList>)
            .build();
        crate::functions::install(&mut state, limits.query_memory)?;
        Ok(SqlEngine {
            db,
            base: state,
            locks: Arc::new(Locks::default()),
            limits,
            index_progress: None,
            closing: tokio::sync::watch::Sender::new(false),
            parsed: Mutex::new(HashMap::new()),
        })
    }

    /// The database.
    pub fn db(&self) -> &Arc<Database> {
        &self.db
    }

    /// The writer locks, for the facade's own catalog changes.
    pub fn locks(&self) -> &Arc<Locks> {
        &self.locks
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// A reservation named `name` on the `query_memory` pool the statements share, for
    /// what a host holds of a result (its JSON form); released when dropped.
    pub fn reserve(&self, name: &str) -> datafusion::execution::memory_pool::MemoryReservation {
        datafusion::execution::memory_pool::MemoryConsumer::new(name)
            .register(&self.base.runtime_env().memory_pool)
    }

    /// Commits `ops` (the facade's own catalog changes) holding `guards`, the locks that
    /// make them valid, until the commit is published, even if this future is dropped.
    pub async fn commit(&self, ops: Vec<Op>, guards: Vec<OwnedMutexGuard<()>>) -> Result<()> {
        commit_detached(self.db.clone(), ops, guards).await
    }

    /// Runs one statement in workspace `ws` of organization `org`.
    pub async fn execute(
        &self,
        org: &str,
        ws: &str,
        sql: &str,
        params: &[Json],
        settings: &Mutex<Settings>,
    ) -> Result<StatementResult> {
        // Only the statement's own work counts as its memory (see `with_timeout`).
        tarn_alloc::uncounted(self.execute_statement(org, ws, sql, params, settings)).await
    }

    async fn execute_statement(
        &self,
        org: &str,
        ws: &str,
        sql: &str,
        params: &[Json],
        settings: &Mutex<Settings>,
    ) -> Result<StatementResult> {
        if self.limits.fast_paths
            && sql.len() <= self.limits.max_sql_bytes
            && let Some(lit) = bulk::scan_literal_insert(sql)
        {
            self.check_params(params)?;
            crate::params::check_param_count(params.len(), 0)?;
            let mut txn = Txn::new(self, org, ws);
            txn.settings = settings.lock().clone();
            if let Some(out) = self.with_timeout(Box::pin(txn.insert_literal(lit))).await? {
                txn.commit().await?;
                return Ok(out);
            }
        }
        let stmt = self.parse_cached(org, sql)?;
        self.check_params(params)?;
        if !params.is_empty() {
            crate::params::check_param_count(params.len(), crate::params::required_params(&stmt))?;
        }
        if settings::is_session_command(&stmt) {
            return settings::run(&stmt, &mut settings.lock());
        }
        let session = settings.lock().clone();
        if self.limits.fast_paths
            && let Some(out) = self
                .with_timeout(self.try_fast_search(org, &stmt, params, &session))
                .await?
        {
            return Ok(out);
        }
        let mut stmt = Arc::unwrap_or_clone(stmt);
        if needs_binding(sql) {
            bind(&mut stmt, params)?;
        }
        if self.limits.fast_paths
            && let Some(out) = self.try_key_lookup(org, &stmt).await?
        {
            return Ok(out);
        }
        if let Statement::Vacuum(v) = &stmt {
            return self.vacuum(org, ws, v).await;
        }
        let mut txn = Txn::new(self, org, ws);
        txn.settings = session;
        let deadline = tokio::time::Instant::now() + self.limits.query_timeout;
        // The timeout covers the work, not the commit: once logging starts the outcome
        // is decided, and reporting a timeout for a committed statement would lie.
        let mut out = self.with_timeout(Box::pin(txn.run(stmt))).await?;
        let builds = std::mem::take(&mut txn.build_indexes);
        txn.commit().await?;
        if !self.build_indexes(builds, deadline).await {
            out.notices.push(self.background_build_notice());
        }
        Ok(out)
    }

    /// The notice of a statement whose index build goes on past it.
    fn background_build_notice(&self) -> String {
        format!(
            "the index is built in the background: its build did not finish within the \
             statement timeout ({} ms, limit query_timeout); until it does, searches read \
             the segments it does not cover exactly (same results, slower), and VACUUM \
             of the table waits for it",
            self.limits.query_timeout.as_millis()
        )
    }

    /// Builds the index files the sealed segments of `tables` lack (after CREATE INDEX
    /// committed), off the async threads, waiting until `deadline` at most; whether the
    /// build finished by then. The statement has committed: a build that fails is logged
    /// and left to the background worker (and to VACUUM), never reported as the
    /// statement failing. A build not waited for — past the deadline, or because the
    /// caller went away — goes on in the background, one at a time (storage keeps one
    /// build slot), and stops when its index or table is dropped or the database closes.
    async fn build_indexes(&self, tables: Vec<TableId>, deadline: tokio::time::Instant) -> bool {
        if tables.is_empty() {
            return true;
        }
        let db = self.db.clone();
        let progress = self.index_progress.clone();
        let build = tokio::task::spawn_blocking(move || {
            for id in tables {
                match db.build_indexes(id, &|p| {
                    if let Some(f) = &progress {
                        f(p)
                    }
                }) {
                    Ok(_) => {}
                    // Closing: what is left is built at the next open or VACUUM.
                    Err(tarn_storage::Error::Closed) => return,
                    Err(e) => {
                        tracing::warn!(table = id, error = %e, "index build after CREATE INDEX failed")
                    }
                }
            }
        });
        let mut closing = self.closing.subscribe();
        tokio::select! {
            r = tokio::time::timeout_at(deadline, build) => match r {
                Ok(Ok(())) => true,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "index build task failed");
                    true
                }
                Err(_) => false,
            },
            // The host is closing: the statement answers now, with its notice; the
            // build stops at the close and is finished at the next open.
            _ = closing.wait_for(|c| *c) => false,
        }
    }

    /// The host starts closing: statements under way stop waiting for work that goes
    /// on in the background (a CREATE INDEX answers at once, with its notice), so that
    /// a drain before [`Database`]'s close is not held by them. Statements still run.
    pub fn begin_close(&self) {
        self.closing.send_replace(true);
    }

    /// Calls `f` with the progress of index builds that statements wait for (CREATE
    /// INDEX), e.g. to draw a progress bar.
    pub fn set_index_progress(
        &mut self,
        f: Arc<dyn Fn(tarn_storage::BuildProgress) + Send + Sync>,
    ) {
        self.index_progress = Some(f);
    }

    /// Appends Arrow record batches to table `table` of workspace `ws` in one atomic
    /// commit: the write counterpart of reading rows as Arrow. Columns are matched by
    /// field name; missing columns take their defaults; values are converted and
    /// validated exactly as for INSERT. Returns the number of rows written.
    pub async fn insert_arrow(
        &self,
        org: &str,
        ws: &str,
        table: &str,
        batches: &[RecordBatch],
    ) -> Result<u64> {
        let mut txn = Txn::new(self, org, ws);
        let missing = || Error::NotFound(format!("relation \"{ws}\".\"{table}\" does not exist"));
        let id = txn.catalog.table(org, ws, table).ok_or_else(missing)?.id;
        txn.lock_table(id).await?.ok_or_else(missing)?;
        let mut written = 0;
        for batch in batches {
            // Re-read: the previous batch may have fixed a vector dimension.
            let def = txn.catalog.table_by_id(id).cloned().ok_or_else(missing)?;
            let mut targets = Vec::with_capacity(batch.num_columns());
            for field in batch.schema().fields() {
                let i = def
                    .columns
                    .iter()
                    .position(|c| c.name == *field.name())
                    .ok_or_else(|| {
                        Error::BadRequest(format!(
                            "column \"{}\" of relation \"{table}\" does not exist",
                            field.name()
                        ))
                    })?;
                if targets.contains(&i) {
                    return bad(format!(
                        "column \"{}\" specified more than once",
                        field.name()
                    ));
                }
                targets.push(i);
            }
            txn.write_rows(&def, &targets, batch.columns().to_vec(), batch.num_rows())
                .await?;
            written += batch.num_rows() as u64;
        }
        txn.commit().await?;
        Ok(written)
    }

    /// Runs one statement once per parameter set, atomically.
    pub async fn execute_batch(
        &self,
        org: &str,
        ws: &str,
        sql: &str,
        params_batch: &[Vec<Json>],
        settings: &Mutex<Settings>,
    ) -> Result<BatchTotals> {
        tarn_alloc::uncounted(self.execute_batch_statement(org, ws, sql, params_batch, settings))
            .await
    }

    async fn execute_batch_statement(
        &self,
        org: &str,
        ws: &str,
        sql: &str,
        params_batch: &[Vec<Json>],
        settings: &Mutex<Settings>,
    ) -> Result<BatchTotals> {
        let stmt = self.parse_one(sql)?;
        if matches!(stmt, Statement::Vacuum(_)) {
            return bad("VACUUM cannot run inside a transaction block");
        }
        if settings::is_session_command(&stmt) {
            return bad(
                "SET, RESET and SHOW are session commands: run them with query, not in a batch",
            );
        }
        if params_batch.len() > self.limits.max_batch {
            return bad(format!(
                "a batch may have at most {} parameter sets, not {} (limit max_batch)",
                self.limits.max_batch,
                params_batch.len()
            ));
        }
        let required = crate::params::required_params(&stmt);
        for (i, params) in params_batch.iter().enumerate() {
            crate::params::check_param_count(params.len(), required)
                .map_err(|e| prefix_error(e, i))?;
        }
        if self.limits.fast_paths
            && !params_batch.is_empty()
            && let Statement::Insert(ins) = &stmt
            && bulk::batch_shape(ins)
        {
            let mut txn = Txn::new(self, org, ws);
            txn.settings = settings.lock().clone();
            let attempt = tokio::time::timeout(
                self.limits.query_timeout,
                Box::pin(txn.insert_batch(ins, params_batch)),
            )
            .await;
            match attempt {
                Err(_) => return Err(self.timeout_error()),
                Ok(Ok(Some(totals))) => {
                    txn.commit().await?;
                    return Ok(totals);
                }
                // Not a batch of literals, or a failing one: the statement path below
                // runs it (after this transaction and its locks are gone) and names
                // the set that fails.
                Ok(_) => {}
            }
        }
        let mut totals = BatchTotals::default();
        let mut txn = Txn::new(self, org, ws);
        txn.settings = settings.lock().clone();
        let fut = async {
            for (i, params) in params_batch.iter().enumerate() {
                let step = async {
                    self.check_params(params)?;
                    let mut s = stmt.clone();
                    bind(&mut s, params)?;
                    txn.run(s).await
                };
                let out = step.await.map_err(|e| prefix_error(e, i))?;
                totals.statements += 1;
                totals.rows_affected += out.rows_affected;
                totals.row_count += out.row_count();
            }
            Ok::<_, Error>(())
        };
        let deadline = tokio::time::Instant::now() + self.limits.query_timeout;
        self.with_timeout(Box::pin(fut)).await?;
        let builds = std::mem::take(&mut txn.build_indexes);
        txn.commit().await?;
        // A build past the deadline goes on in the background (see `build_indexes`).
        if !self.build_indexes(builds, deadline).await {
            totals.notices.push(self.background_build_notice());
        }
        Ok(totals)
    }

    /// `VACUUM "ws"."t"`: compacts the table now (seals its memtable, merges its
    /// segments, drops deleted rows) and checkpoints. Writers go on meanwhile.
    async fn vacuum(
        &self,
        org: &str,
        ws: &str,
        v: &ast::VacuumStatement,
    ) -> Result<StatementResult> {
        if v.full
            || v.sort_only
            || v.delete_only
            || v.reindex
            || v.recluster
            || v.boost
            || v.threshold.is_some()
        {
            return bad("VACUUM takes no options here: VACUUM \"ws\".\"table\"");
        }
        let Some(name) = &v.table_name else {
            return bad("VACUUM needs a table: VACUUM \"ws\".\"table\"");
        };
        let def = Txn::new(self, org, ws).resolve(name)?;
        let db = self.db.clone();
        let indexed = tokio::task::spawn_blocking(move || db.vacuum(def.id))
            .await
            .map_err(|e| crate::error::join_error(e, "VACUUM"))??;
        let mut out = StatementResult::none(0);
        if !indexed {
            out.notices.push(
                "the table is compacted, but the index files of its new segments were not all \
                 built (the database is closing, or a build failed): searches read those \
                 segments exactly (same results, slower) until the next open or VACUUM builds \
                 them"
                    .into(),
            );
        }
        Ok(out)
    }

    /// Runs a statement's work under the statement timeout, and turns a panic inside it
    /// into the statement's error. The work only reads and stages (a commit runs after
    /// it, in a task of its own), so a panic there applies nothing; DataFusion and Arrow
    /// panic on some inputs instead of failing (a text column passing 2 GiB in one batch
    /// of rows overflows Arrow's 32-bit offsets), and one statement's panic must not end
    /// the process that every session shares.
    ///
    /// The work is counted against the statement's memory backstop (see
    /// [`tarn_alloc`]).
    async fn with_timeout<T>(&self, fut: impl Future<Output = Result<T>>) -> Result<T> {
        use futures::FutureExt;
        let meter = tarn_alloc::Meter::start(tarn_alloc::backstop(self.limits.query_memory));
        let fut = meter.run(fut, |held, limit| {
            Error::BadRequest(format!(
                "query memory limit (query_memory) exceeded: {}",
                tarn_alloc::over_message(held, limit)
            ))
        });
        let fut = std::panic::AssertUnwindSafe(fut).catch_unwind();
        match tokio::time::timeout(self.limits.query_timeout, fut).await {
            Ok(Ok(r)) => r,
            Ok(Err(panic)) => Err(crate::error::panic_error(panic.as_ref())),
            Err(_) => Err(self.timeout_error()),
        }
    }

    fn timeout_error(&self) -> Error {
        Error::BadRequest(format!(
            "canceling statement due to statement timeout ({} ms, limit query_timeout)",
            self.limits.query_timeout.as_millis()
        ))
    }

    pub(crate) fn check_params(&self, params: &[Json]) -> Result<()> {
        let n = params.len();
        crate::params::check_json_depth(params)?;
        if n > self.limits.max_params {
            return bad(format!(
                "a statement may bind at most {} parameters, not {n} (limit max_params)",
                self.limits.max_params
            ));
        }
        Ok(())
    }

    /// [`SqlEngine::parse_one`], through the cache of recently parsed statements. Only
    /// parameterized queries are kept (DDL, writes and literal-only texts are rarely run
    /// twice as they are, and would push out the searches the cache is for), per
    /// organization (so that no timing tells one organization what another ran).
    fn parse_cached(&self, org: &str, sql: &str) -> Result<Arc<Statement>> {
        if sql.len() > CACHED_SQL_BYTES || !sql.contains('$') {
            return Ok(Arc::new(self.parse_one(sql)?));
        }
        let key = format!("{org}\n{sql}");
        if let Some(stmt) = self.parsed.lock().get(&key) {
            return Ok(stmt.clone());
        }
        // Errors are not kept: a failing text is reported afresh each time.
        let stmt = Arc::new(self.parse_one(sql)?);
        if matches!(*stmt, Statement::Query(_)) {
            let mut parsed = self.parsed.lock();
            if parsed.len() >= CACHED_STATEMENTS {
                parsed.clear();
            }
            parsed.insert(key, stmt.clone());
        }
        Ok(stmt)
    }

    /// Parses exactly one statement (a trailing `;` is fine).
    pub fn parse_one(&self, sql: &str) -> Result<Statement> {
        if sql.len() > self.limits.max_sql_bytes {
            return bad(format!(
                "SQL text of {} bytes exceeds the limit of {} bytes (max_sql_bytes)",
                sql.len(),
                self.limits.max_sql_bytes
            ));
        }
        let dialect = EngineDialect::default();
        let tokens = Tokenizer::new(&dialect, sql)
            .with_unescape(true)
            .tokenize_with_location()
            .map_err(|e| Error::BadRequest(format!("syntax error: {e}")))?;
        crate::depth::check(&tokens)?;
        let mut stmts = Parser::new(&dialect)
            .with_recursion_limit(256)
            .with_tokens_with_locations(tokens)
            .parse_statements()?;
        match stmts.len() {
            0 => bad("empty query: no statement to run"),
            1 => Ok(stmts.remove(0)),
            n => bad(format!(
                "cannot run {n} statements in one query; send them one at a time or use query_batch"
            )),
        }
    }
}

fn prefix_error(e: Error, i: usize) -> Error {
    let p = |m: String| format!("parameter set {i}: {m}");
    match e {
        Error::BadRequest(m) => Error::BadRequest(p(m)),
        Error::NotFound(m) => Error::NotFound(p(m)),
        Error::Conflict(m) => Error::Conflict(p(m)),
        Error::Internal(m) => Error::Internal(p(m)),
        other => other,
    }
}

/// A table a transaction writes: its lock and its private, pending version.
pub(crate) struct TxnTable {
    /// The table's writer lock; moves into the commit, which releases it once published.
    guard: Option<OwnedMutexGuard<()>>,
    pub store: Option<Arc<TableStore>>,
    /// The published version `version` started from (`None` for a table this
    /// transaction created).
    pub base: Option<Arc<TableVersion>>,
    pub version: TableVersion,
    pub deleted: HashSet<u64>,
    /// Keys of rows this transaction inserted, per unique constraint name.
    pub local_keys: HashMap<String, tarn_storage::KeyMap>,
}

/// One atomic unit of work: a statement, or every parameter set of a batch. Writes go to
/// private table versions and are logged and published together at commit.
pub(crate) struct Txn<'e> {
    pub engine: &'e SqlEngine,
    pub org: String,
    pub ws: String,
    pub catalog: Arc<Catalog>,
    pub catalog_dirty: bool,
    pub tables: HashMap<TableId, TxnTable>,
    pub ops: Vec<Op>,
    ddl_guard: Option<OwnedMutexGuard<()>>,
    /// The statement's instant: `now()`, `current_timestamp`, `current_date` and NOW()
    /// defaults are this one value for the whole statement (or batch), as in PostgreSQL.
    pub now: chrono::DateTime<chrono::Utc>,
    /// Tables whose new search indexes are built once the transaction commits (CREATE
    /// INDEX returns when the rows that exist are indexed).
    pub build_indexes: Vec<TableId>,
    /// The session's settings as the statement started (`SET engine.ef_search`).
    pub settings: Settings,
    /// The rows this transaction has written and not yet committed, counted against
    /// the `query_memory` pool the statements share (see [`Txn::charge_rows`]).
    staged: Option<datafusion::execution::memory_pool::MemoryReservation>,
    /// The rows an UPDATE or DELETE read to write them, counted the same way (see
    /// [`Txn::charge_read`]).
    read: Option<datafusion::execution::memory_pool::MemoryReservation>,
}

impl<'e> Txn<'e> {
    fn new(engine: &'e SqlEngine, org: &str, ws: &str) -> Self {
        Txn {
            engine,
            org: org.to_string(),
            ws: ws.to_string(),
            catalog: engine.db.catalog(),
            catalog_dirty: false,
            tables: HashMap::new(),
            ops: Vec::new(),
            ddl_guard: None,
            now: chrono::Utc::now(),
            build_indexes: Vec::new(),
            settings: Settings::default(),
            staged: None,
            read: None,
        }
    }

    /// Counts rows this transaction writes against the `query_memory` pool: they are
    /// held twice until the commit (the op for the log and the transaction's own table
    /// version, which merges small inserts into new buffers), so they count twice. A
    /// batch of 3,000 one-megabyte rows held 4 GB before the log record's limit refused
    /// it, and two such statements at once held twice that.
    pub(crate) fn charge_rows(&mut self, batch: &RecordBatch) -> Result<()> {
        let engine = self.engine;
        let staged = self
            .staged
            .get_or_insert_with(|| engine.reserve("rows a statement writes"));
        let bytes = batch_bytes(batch).saturating_mul(2);
        // Past what one log record holds, the statement fails now, not after staging
        // every row (3,000 sets of 1 MB rows held 3 GB before the commit refused them).
        let total = (staged.size() + bytes) as u64 / 2;
        if total > tarn_storage::MAX_RECORD_BYTES {
            return Err(Error::BadRequest(format!(
                "the rows this statement writes ({total} bytes) pass what one commit (one \
                 log record) holds, {} bytes: write them in smaller statements or batches",
                tarn_storage::MAX_RECORD_BYTES
            )));
        }
        staged.try_grow(bytes).map_err(|_| {
            Error::BadRequest(format!(
                "query memory limit (query_memory) exceeded: the rows this statement writes \
                 hold {} bytes, counted twice until they are committed; the statements \
                 share {} bytes: write them in smaller statements or batches",
                staged.size() / 2 + bytes / 2,
                engine.limits.query_memory
            ))
        })
    }

    /// Counts rows read to be written again (an UPDATE's new rows, before they are
    /// staged) against the `query_memory` pool until the commit: the query that read
    /// them gives its charge back when it returns, while the rows are still held (an
    /// UPDATE of 900 one-megabyte rows held 4.4 GB under a 2 GiB pool).
    pub(crate) fn charge_read(&mut self, batches: &[RecordBatch]) -> Result<()> {
        let engine = self.engine;
        let read = self
            .read
            .get_or_insert_with(|| engine.reserve("rows a statement read to write them"));
        let bytes: usize = batches.iter().map(batch_bytes).sum();
        read.try_grow(bytes).map_err(|_| {
            Error::BadRequest(format!(
                "query memory limit (query_memory) exceeded: the rows this statement \
                 changes hold {} bytes; the statements share {} bytes: change fewer rows \
                 at a time",
                read.size() + bytes,
                engine.limits.query_memory
            ))
        })
    }

    /// Takes the DDL lock (once) and refreshes the catalog so DDL validates against the
    /// latest state.
    pub async fn lock_ddl(&mut self) {
        if self.ddl_guard.is_none() {
            self.ddl_guard = Some(self.engine.locks.ddl().await);
            if !self.catalog_dirty {
                self.catalog = self.engine.db.catalog();
            }
        }
    }

    /// Takes the writer lock of table `id` (once per transaction) and returns the
    /// table's current definition, or `None` if it was dropped meanwhile.
    pub async fn lock_table(&mut self, id: TableId) -> Result<Option<TableDef>> {
        if !self.tables.contains_key(&id) {
            let guard = self.engine.locks.table(id).await;
            if !self.catalog_dirty {
                self.catalog = self.engine.db.catalog();
            }
            let Some(store) = self.engine.db.table(id) else {
                return Ok(None);
            };
            let base = store.snapshot();
            let version = TableVersion::clone(&base);
            self.tables.insert(
                id,
                TxnTable {
                    guard: Some(guard),
                    store: Some(store),
                    base: Some(base),
                    version,
                    deleted: HashSet::new(),
                    local_keys: HashMap::new(),
                },
            );
        }
        Ok(self.catalog.table_by_id(id).cloned())
    }

    /// Registers a table created by this transaction (it has no store yet).
    pub async fn add_new_table(&mut self, id: TableId) {
        let guard = self.engine.locks.table(id).await;
        self.tables.insert(
            id,
            TxnTable {
                guard: Some(guard),
                store: None,
                base: None,
                version: TableVersion::default(),
                deleted: HashSet::new(),
                local_keys: HashMap::new(),
            },
        );
    }

    /// Records a catalog change: applied to this transaction's catalog now, logged and
    /// published at commit.
    pub fn catalog_op(&mut self, op: CatalogOp) -> Result<()> {
        Arc::make_mut(&mut self.catalog)
            .apply(&op)
            .map_err(|e| match e {
                tarn_catalog::Error::AlreadyExists(m) => Error::Conflict(m),
                tarn_catalog::Error::NotFound(m) => Error::NotFound(m),
                other => Error::Internal(other.to_string()),
            })?;
        self.catalog_dirty = true;
        self.ops.push(Op::Catalog(op));
        Ok(())
    }

    /// Resolves a relation name used in workspace `self.ws`: it must be
    /// `"workspace"."table"` with both existing in this organization.
    pub fn resolve(&self, name: &ObjectName) -> Result<TableDef> {
        let parts = name_parts(name)?;
        match parts.as_slice() {
            [ws, t] => self
                .catalog
                .table(&self.org, ws, t)
                .cloned()
                .ok_or_else(|| {
                    Error::NotFound(format!("relation {} does not exist", quoted(&parts)))
                }),
            _ => Err(Error::NotFound(format!(
                "relation {} does not exist",
                quoted(&parts)
            ))),
        }
    }

    /// A read view of the database as this transaction sees it, with the published
    /// versions of `tables` pinned at one instant (tables first met during planning are
    /// pinned then, once per statement).
    pub fn view(
        &self,
        overrides: HashMap<(String, String), Arc<dyn TableProvider>>,
        tables: &[TableId],
    ) -> ReadView {
        let pending: HashMap<TableId, Arc<TableVersion>> = self
            .tables
            .iter()
            .map(|(id, t)| (*id, Arc::new(t.version.clone())))
            .collect();
        let unpinned: Vec<TableId> = tables
            .iter()
            .copied()
            .filter(|id| !pending.contains_key(id))
            .collect();
        ReadView {
            db: self.engine.db.clone(),
            org: self.org.clone(),
            ws: self.ws.clone(),
            catalog: self.catalog.clone(),
            pinned: Arc::new(parking_lot::Mutex::new(self.engine.db.pin(&unpinned))),
            pending,
            overrides,
            now: self.now,
            ef_search: self.settings.ef_search,
            shared: Default::default(),
            desc_nulls_first_written: false,
        }
    }

    /// Plans and runs `stmt` on the shared session with this transaction's view as the
    /// catalog: (schema, batches).
    async fn plan_and_collect(
        &self,
        stmt: Statement,
        view: ReadView,
    ) -> Result<(SchemaRef, Vec<RecordBatch>)> {
        let state = &self.engine.base;
        let mut stmt = stmt;
        crate::names::alias_duplicates(&mut stmt, false);
        crate::names::function_column_aliases(&mut stmt);
        crate::jsonb::rewrite_casts(&mut stmt);
        crate::types::timestamp_casts(&mut stmt);
        crate::expansion::guard_numeric_casts(&mut stmt);
        let mut view = view;
        view.desc_nulls_first_written = crate::score_order_rule::writes_desc_nulls_first(&stmt);
        STATEMENT_VIEW
            .scope(Arc::new(view), async move {
                // A copy for the retry below; planning consumes the statement.
                let spare = stmt.clone();
                let planned = state
                    .statement_to_plan(datafusion::sql::parser::Statement::Statement(Box::new(
                        stmt,
                    )))
                    .await;
                let plan = match planned {
                    Err(e) if same_names(&e) => {
                        // Items DataFusion names alike though their text differs: once
                        // more, every expression under a name of its own.
                        let mut stmt = spare;
                        crate::names::alias_duplicates(&mut stmt, true);
                        state
                            .statement_to_plan(datafusion::sql::parser::Statement::Statement(
                                Box::new(stmt),
                            ))
                            .await?
                    }
                    other => other?,
                };
                let physical = state.create_physical_plan(&plan).await?;
                // The planned names with the types as executed (the unanalyzed plan
                // can differ: a CASE's type before its branches are coerced), every
                // column nullable: a result column carries no NOT NULL in PostgreSQL,
                // and DataFusion's claims can be wrong (a scalar subquery over a NOT
                // NULL column is NULL when it finds no row).
                let executed = physical.schema();
                let fields: Vec<_> = plan
                    .schema()
                    .as_arrow()
                    .fields()
                    .iter()
                    .zip(executed.fields())
                    .map(|(f, e)| {
                        if e.data_type() == f.data_type() && f.is_nullable() {
                            Arc::clone(f)
                        } else {
                            Arc::new(
                                f.as_ref()
                                    .clone()
                                    .with_data_type(e.data_type().clone())
                                    .with_nullable(true),
                            )
                        }
                    })
                    .collect();
                let schema: SchemaRef =
                    Arc::new(datafusion::arrow::datatypes::Schema::new_with_metadata(
                        fields,
                        plan.schema().as_arrow().metadata().clone(),
                    ));
                let batches = collect_bounded(physical, state.task_ctx()).await?;
                Ok((schema, batches))
            })
            .await
    }

    /// Checks every relation a statement reads: schema-qualified and existing, or a CTE,
    /// or one of the statement's `overrides`. Returns the ids of the tables it reads.
    pub fn check_relations(
        &self,
        stmt: &Statement,
        overrides: &HashMap<(String, String), Arc<dyn TableProvider>>,
    ) -> Result<Vec<TableId>> {
        struct Check<'a, 'e> {
            txn: &'a Txn<'e>,
            overrides: &'a HashMap<(String, String), Arc<dyn TableProvider>>,
            ctes: Vec<String>,
            ids: Vec<TableId>,
            err: Option<Error>,
        }
        impl Visitor for Check<'_, '_> {
            type Break = ();
            fn pre_visit_query(&mut self, q: &Query) -> ControlFlow<()> {
                if let Some(with) = &q.with {
                    self.ctes
                        .extend(with.cte_tables.iter().map(|c| normalize(&c.alias.name)));
                }
                ControlFlow::Continue(())
            }
            fn pre_visit_table_factor(&mut self, t: &TableFactor) -> ControlFlow<()> {
                if let TableFactor::Table {
                    name, args: None, ..
                } = t
                {
                    let parts = match name_parts(name) {
                        Ok(p) => p,
                        Err(e) => {
                            self.err = Some(e);
                            return ControlFlow::Break(());
                        }
                    };
                    if parts.len() == 1 && self.ctes.contains(&parts[0]) {
                        return ControlFlow::Continue(());
                    }
                    if let [ws, t] = parts.as_slice()
                        && self.overrides.contains_key(&(ws.clone(), t.clone()))
                    {
                        return ControlFlow::Continue(());
                    }
                    match self.txn.resolve(name) {
                        Ok(def) => self.ids.push(def.id),
                        Err(e) => {
                            self.err = Some(e);
                            return ControlFlow::Break(());
                        }
                    }
                }
                ControlFlow::Continue(())
            }
        }
        let mut check = Check {
            txn: self,
            overrides,
            ctes: vec![],
            ids: vec![],
            err: None,
        };
        let _ = stmt.visit(&mut check);
        match check.err {
            Some(e) => Err(e),
            None => Ok(check.ids),
        }
    }

    /// Plans and runs a query; returns its PostgreSQL output names, schema and rows.
    /// The query is taken by value: planning consumes it, and copying a user's AST
    /// would cost a recursion as deep as its expressions (see `depth.rs`).
    pub async fn run_query(
        &self,
        query: Query,
        overrides: HashMap<(String, String), Arc<dyn TableProvider>>,
    ) -> Result<(Vec<String>, SchemaRef, Vec<RecordBatch>)> {
        let names = OutputNames::of(&query);
        let stmt = Statement::Query(Box::new(query));
        let ids = self.check_relations(&stmt, &overrides)?;
        let view = self.view(overrides, &ids);
        let (schema, batches) = self.plan_and_collect(stmt, view).await?;
        let names = names.resolve(&schema);
        let schema = renamed(&schema, &names);
        let batches = batches
            .into_iter()
            .map(|b| {
                RecordBatch::try_new_with_options(
                    schema.clone(),
                    b.columns().to_vec(),
                    &datafusion::arrow::array::RecordBatchOptions::new()
                        .with_row_count(Some(b.num_rows())),
                )
                .map_err(Error::from)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((names, schema, batches))
    }

    /// Runs one bound statement.
    pub async fn run(&mut self, stmt: Statement) -> Result<StatementResult> {
        match stmt {
            Statement::Query(q) => {
                let (columns, schema, batches) =
                    Box::pin(self.run_query(*q, HashMap::new())).await?;
                Ok(StatementResult {
                    columns,
                    schema,
                    batches: Some(batches),
                    rows_affected: 0,
                    notices: Vec::new(),
                })
            }
            // Boxed: each statement kind's future is large, and nesting them all in one
            // state machine would put hundreds of kilobytes on the caller's stack.
            Statement::Explain { .. } => Box::pin(self.run_explain(stmt)).await,
            Statement::Insert(ins) => Box::pin(self.insert(ins)).await,
            Statement::Update(upd) => Box::pin(self.update(upd)).await,
            Statement::Delete(del) => Box::pin(self.delete(del)).await,
            Statement::CreateTable(ct) => Box::pin(self.create_table(ct)).await,
            Statement::Drop {
                object_type: ast::ObjectType::Table,
                if_exists,
                names,
                ..
            } => Box::pin(self.drop_tables(&names, if_exists)).await,
            Statement::AlterTable(alter) => Box::pin(self.alter_table(alter)).await,
            Statement::StartTransaction { .. }
            | Statement::Commit { .. }
            | Statement::Rollback { .. } => {
                bad("each statement is atomic; use query_batch for several")
            }
            Statement::CreateIndex(ci) => Box::pin(self.create_index(ci)).await,
            Statement::Drop {
                object_type: ast::ObjectType::Index,
                if_exists,
                names,
                ..
            } => Box::pin(self.drop_indexes(&names, if_exists)).await,
            other => bad(format!(
                "statement not supported: {}",
                first_words(&other.to_string())
            )),
        }
    }

    async fn run_explain(&self, stmt: Statement) -> Result<StatementResult> {
        let ids = self.check_relations(&stmt, &HashMap::new())?;
        // (After the relation check: an unknown table is 404 whatever reads it.)
        // Tarn runs writes and DDL itself, not through a DataFusion plan: DataFusion's
        // EXPLAIN of them shows a plan that never runs, and its ANALYZE fails in its own
        // words ("Insert into not implemented for this table").
        // (`WITH … INSERT` parses as a query whose body is the write.)
        let writes = |q: &Query| {
            matches!(
                q.body.as_ref(),
                ast::SetExpr::Insert(_) | ast::SetExpr::Update(_) | ast::SetExpr::Delete(_)
            )
        };
        if let Statement::Explain { statement, .. } = &stmt
            && !matches!(statement.as_ref(), Statement::Query(q) if !writes(q))
        {
            return bad(format!(
                "EXPLAIN shows the plans of queries (SELECT, WITH, VALUES), not of {}: Tarn runs \
                 writes and DDL itself; EXPLAIN the SELECT a write reads from",
                first_words(&statement.to_string())
            ));
        }
        let view = self.view(HashMap::new(), &ids);
        let (schema, batches) = self.plan_and_collect(stmt, view).await?;
        Ok(StatementResult {
            columns: schema.fields().iter().map(|f| f.name().clone()).collect(),
            schema,
            batches: Some(batches),
            rows_affected: 0,
            notices: Vec::new(),
        })
    }

    /// Checks a unique constraint for new rows of table `id`: against the published rows
    /// (unless this transaction deleted them) and against rows this transaction
    /// inserted. Records the new keys.
    pub fn check_unique(
        &mut self,
        id: TableId,
        constraint: &str,
        columns: &[ColumnId],
        arrays: &[ArrayRef],
        first_row_id: u64,
    ) -> Result<()> {
        let Some(t) = self.tables.get_mut(&id) else {
            return Err(Error::Internal("unique check on an unlocked table".into()));
        };
        let violation = || {
            Error::Conflict(format!(
                "duplicate key value violates unique constraint \"{constraint}\""
            ))
        };
        let keys = tarn_storage::encode_keys(arrays)?;
        if let Some(store) = &t.store {
            let matches = store.key_matches_encoded(columns, &keys)?;
            if matches.iter().flatten().any(|r| !t.deleted.contains(r)) {
                return Err(violation());
            }
        }
        let local = t.local_keys.entry(constraint.to_string()).or_default();
        local.reserve(keys.len(), keys.total_bytes());
        for (i, key) in keys.iter().enumerate() {
            // A NULL key part never conflicts, as in PostgreSQL.
            let Some(key) = key else { continue };
            if local.get(key).iter().any(|r| !t.deleted.contains(r)) {
                return Err(violation());
            }
            local.push(key, first_row_id + i as u64);
        }
        Ok(())
    }

    /// Logs and publishes everything this transaction wrote. The locks it holds move
    /// into the commit (see [`commit_detached`]): dropping this future cannot release
    /// them before the commit is published.
    pub async fn commit(&mut self) -> Result<()> {
        let mut guards: Vec<OwnedMutexGuard<()>> = self.ddl_guard.take().into_iter().collect();
        guards.extend(self.tables.values_mut().filter_map(|t| t.guard.take()));
        let ops = coalesce(std::mem::take(&mut self.ops))?;
        // The versions this transaction built are published as they are (storage
        // checks that nothing changed the tables meanwhile) instead of being rebuilt.
        let built = self
            .tables
            .iter_mut()
            .filter_map(|(id, t)| {
                Some(BuiltVersion {
                    table: *id,
                    base: t.base.take()?,
                    version: std::mem::take(&mut t.version),
                })
            })
            .collect();
        commit_built(self.engine.db.clone(), ops, built, guards).await
    }
}

/// Commits `ops` on a blocking thread that owns `guards` (the writer locks that make the
/// ops valid) and releases them only once the commit is logged and published, or has
/// failed. A commit is not cancellable: if the caller's future is dropped (a timeout, a
/// disconnected client), the commit still completes and no other writer can take the
/// locks in between, see a snapshot without it, or reuse its row ids.
pub(crate) async fn commit_detached(
    db: Arc<Database>,
    ops: Vec<Op>,
    guards: Vec<OwnedMutexGuard<()>>,
) -> Result<()> {
    commit_built(db, ops, Vec::new(), guards).await
}

/// [`commit_detached`] with the table versions the writer built (see
/// [`Database::commit_built`]).
async fn commit_built(
    db: Arc<Database>,
    ops: Vec<Op>,
    built: Vec<BuiltVersion>,
    guards: Vec<OwnedMutexGuard<()>>,
) -> Result<()> {
    if ops.is_empty() {
        return Ok(());
    }
    // The guards come back to be released here, on the runtime, so the next writer
    // waiting for them wakes on this worker instead of being woken from another thread.
    // If this future is gone, the task's output (the guards) is dropped where the task
    // finished: still only after the commit.
    let (res, guards) = tokio::task::spawn_blocking(move || (db.commit_built(ops, built), guards))
        .await
        .map_err(|e| crate::error::join_error(e, "commit"))?;
    drop(guards);
    res?;
    Ok(())
}

fn first_words(sql: &str) -> String {
    sql.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// Renames a schema's fields (keeping types and metadata).
pub(crate) fn renamed(schema: &SchemaRef, names: &[String]) -> SchemaRef {
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .zip(names)
            .map(|(f, n)| Field::clone(f).with_name(n.clone()))
            .collect::<Vec<_>>(),
    ))
}

/// Merges a transaction's ops for the log: catalog ops in order, attached segments, then each table's
/// inserts concatenated (row ids are consecutive), then deletes, then sequences. Deletes
/// only name rows that exist by then, so moving them after the inserts is safe.
fn coalesce(ops: Vec<Op>) -> Result<Vec<Op>> {
    let mut catalog = Vec::new();
    let mut attaches = Vec::new();
    // Small inserts are concatenated, up to a few megabytes per op; a larger batch
    // is an op of its own (concatenating would copy it once more while every copy is
    // held: the statement's rows are already held twice until the commit).
    const SMALL_BYTES: usize = 256 << 10;
    const GROUP_BYTES: usize = 4 << 20;
    let mut inserts: Vec<(TableId, u64, Vec<RecordBatch>, usize)> = Vec::new();
    let mut deletes: HashMap<TableId, Vec<u64>> = HashMap::new();
    let mut sequences: HashMap<(TableId, ColumnId), i64> = HashMap::new();
    for op in ops {
        match op {
            Op::Catalog(_) => catalog.push(op),
            // Rows of a table the catalog ops create, before any other op names it.
            Op::Attach { .. } => attaches.push(op),
            Op::Insert {
                table,
                first_row_id,
                batch,
            } => {
                let bytes = batch_bytes(&batch);
                if let Some((t, first, batches, group)) = inserts.last_mut()
                    && *t == table
                    && bytes < SMALL_BYTES
                    && *group + bytes <= GROUP_BYTES
                    && batches[0].schema() == batch.schema()
                    && *first + batches.iter().map(|b| b.num_rows() as u64).sum::<u64>()
                        == first_row_id
                {
                    batches.push(batch);
                    *group += bytes;
                } else {
                    // A large batch's group takes nothing more.
                    let group = if bytes < SMALL_BYTES {
                        bytes
                    } else {
                        usize::MAX / 2
                    };
                    inserts.push((table, first_row_id, vec![batch], group));
                }
            }
            Op::Delete { table, row_ids } => {
                deletes.entry(table).or_default().extend(row_ids.iter())
            }
            Op::SetSequence {
                table,
                column,
                value,
            } => {
                let v = sequences.entry((table, column)).or_insert(value);
                *v = (*v).max(value);
            }
        }
    }
    let mut out = catalog;
    out.extend(attaches);
    for (table, first_row_id, batches, _) in inserts {
        let batch = if batches.len() == 1 {
            batches
                .into_iter()
                .next()
                .ok_or_else(|| Error::Internal("empty".into()))?
        } else {
            concat_batches(&batches[0].schema(), &batches)?
        };
        out.push(Op::Insert {
            table,
            first_row_id,
            batch,
        });
    }
    let mut deletes: Vec<_> = deletes.into_iter().collect();
    deletes.sort_by_key(|(t, _)| *t);
    for (table, ids) in deletes {
        out.push(Op::Delete {
            table,
            row_ids: ids.into(),
        });
    }
    let mut sequences: Vec<_> = sequences.into_iter().collect();
    sequences.sort();
    for ((table, column), value) in sequences {
        out.push(Op::SetSequence {
            table,
            column,
            value,
        });
    }
    Ok(out)
}

/// Select items as SQL text.
pub(crate) fn items_sql(items: &[SelectItem]) -> String {
    items
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether planning failed because two output columns got one name (PostgreSQL allows
/// that; see [`crate::names::alias_duplicates`]).
fn same_names(e: &datafusion::error::DataFusionError) -> bool {
    let m = e.to_string();
    m.contains("require unique expression names")
        || m.contains("duplicate unqualified field name")
        || m.contains("duplicate qualified field name")
}

/// Runs `plan` and gathers its rows, counting them against the query memory pool that
/// sorts, joins and aggregates draw on: a result larger than `query_memory` is the
/// limit's 400 while the process is unharmed (SPEC §8), not a process grown until the
/// kernel kills it. The rows are counted by the part of their buffers they use, so
/// slices of one large buffer are not counted once per slice.
async fn collect_bounded(
    plan: Arc<dyn datafusion::physical_plan::ExecutionPlan>,
    ctx: Arc<datafusion::execution::TaskContext>,
) -> datafusion::error::Result<Vec<RecordBatch>> {
    use datafusion::execution::memory_pool::MemoryConsumer;
    use futures::StreamExt;
    let reservation = MemoryConsumer::new("query result").register(ctx.memory_pool());
    let plan = crate::held::hold_wide_rows(plan, tarn_alloc::current_statement())?;
    let mut stream = datafusion::physical_plan::execute_stream(plan, ctx)?;
    let mut out = Vec::new();
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        reservation.try_grow(batch_bytes(&batch))?;
        out.push(batch);
    }
    Ok(out)
}

/// Bytes of the buffers `batch` uses (its slice of them): what a result's rows are
/// counted as against `query_memory`.
pub fn batch_bytes(batch: &RecordBatch) -> usize {
    batch
        .columns()
        .iter()
        .map(|c| {
            c.to_data()
                .get_slice_memory_size()
                .unwrap_or_else(|_| c.get_array_memory_size())
        })
        .sum()
}
