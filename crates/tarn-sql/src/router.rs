//! The statement router: parses one statement, binds its parameters, sends SELECT to
//! DataFusion and runs DDL and DML itself against the catalog and storage.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::sql::sqlparser::ast::{self, Statement};
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::Tokenizer;
use serde_json::Value as Json;
use tarn_catalog::TableId;
use tarn_storage::{Database, Op};
use tokio::sync::OwnedMutexGuard;

use crate::ast::dialect::EngineDialect;
use crate::datafusion_ext::context::deadline;
use crate::error::{Error, Result, bad};
use crate::fast_path::insert;
use crate::rewrite::params::needs_binding;
use crate::statement::settings::{self, Settings};
use parking_lot::Mutex;

use crate::statement::result::{BatchTotals, StatementResult};
use crate::statement::shared::{Limits, Locks, Shared};
use crate::statement::txn::{Txn, commit_detached};

/// Runs Tarn SQL against one database.
pub struct SqlEngine {
    /// The database, session, locks and limits its statements share.
    shared: Shared,
    /// Told how index builds that statements wait for progress.
    index_progress: Option<Arc<dyn Fn(tarn_storage::BuildProgress) + Send + Sync>>,
    /// Set when the host starts closing ([`SqlEngine::begin_close`]): statements stop
    /// waiting for background work.
    closing: tokio::sync::watch::Sender<bool>,
    /// Set when the host stops the statements under way ([`SqlEngine::stop_statements`]).
    stopping: tokio::sync::watch::Sender<bool>,
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
        f.debug_struct("SqlEngine")
            .field("db", &self.shared.db)
            .finish()
    }
}

impl SqlEngine {
    /// An engine over `db`.
    pub fn new(db: Arc<Database>, limits: Limits) -> Result<Self> {
        let state = crate::datafusion_ext::session::new_session(limits.query_memory)?;
        Ok(SqlEngine {
            shared: Shared {
                db,
                session: state,
                locks: Arc::new(Locks::default()),
                limits,
            },
            index_progress: None,
            closing: tokio::sync::watch::Sender::new(false),
            stopping: tokio::sync::watch::Sender::new(false),
            parsed: Mutex::new(HashMap::new()),
        })
    }

    /// The database.
    pub fn db(&self) -> &Arc<Database> {
        &self.shared.db
    }

    /// The writer locks, for the facade's own catalog changes.
    pub fn locks(&self) -> &Arc<Locks> {
        &self.shared.locks
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.shared.limits
    }

    /// A reservation named `name` on the `query_memory` pool the statements share, for
    /// what a host holds of a result (its JSON form); released when dropped.
    pub fn reserve(&self, name: &str) -> datafusion::execution::memory_pool::MemoryReservation {
        self.shared.reserve(name)
    }

    /// Commits `ops` (the facade's own catalog changes) holding `guards`, the locks that
    /// make them valid, until the commit is published, even if this future is dropped.
    pub async fn commit(&self, ops: Vec<Op>, guards: Vec<OwnedMutexGuard<()>>) -> Result<()> {
        commit_detached(self.shared.db.clone(), ops, guards).await
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
        if self.shared.limits.fast_paths
            && sql.len() <= self.shared.limits.max_sql_bytes
            && let Some(lit) = insert::scan_literal_insert(sql)
        {
            self.shared.check_params(params)?;
            crate::rewrite::params::check_param_count(params.len(), 0)?;
            let mut txn = Txn::new(&self.shared, org, ws);
            txn.settings = settings.lock().clone();
            if let Some(out) = self.with_timeout(Box::pin(txn.insert_literal(lit))).await? {
                txn.commit().await?;
                return Ok(out);
            }
        }
        let stmt = self.parse_cached(org, sql)?;
        self.shared.check_params(params)?;
        if !params.is_empty() {
            crate::rewrite::params::check_param_count(
                params.len(),
                crate::rewrite::params::required_params(&stmt),
            )?;
        }
        if settings::is_session_command(&stmt) {
            return settings::run(&stmt, &mut settings.lock());
        }
        let session = settings.lock().clone();
        if self.shared.limits.fast_paths
            && let Some(out) = self
                .with_timeout(self.shared.try_fast_search(org, &stmt, params, &session))
                .await?
        {
            return Ok(out);
        }
        let mut stmt = Arc::unwrap_or_clone(stmt);
        let mut bound = Default::default();
        if needs_binding(sql) {
            let by_number = binds_texts_by_number(&stmt)
                && crate::rewrite::params::may_bind_big_texts(
                    crate::rewrite::params::references(sql),
                    params,
                );
            let arrays_by_number = binds_arrays_by_number(&stmt);
            bound =
                crate::rewrite::params::bind_texts(&mut stmt, params, by_number, arrays_by_number)?;
        }
        if self.shared.limits.fast_paths
            && let Some(out) = self.shared.try_key_lookup(org, &stmt).await?
        {
            return Ok(out);
        }
        if let Statement::Vacuum(v) = &stmt {
            return self.vacuum(org, ws, v).await;
        }
        let mut txn = Txn::new(&self.shared, org, ws);
        txn.settings = session;
        txn.bound = Arc::new(bound);
        let deadline = tokio::time::Instant::now() + self.shared.limits.query_timeout;
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

    /// The notice of a statement whose index build goes on past it: past the statement
    /// timeout, or stopped by the host's shutdown (which the timeout had been blamed for).
    fn background_build_notice(&self) -> String {
        if *self.closing.borrow() {
            return "the index build was stopped by the shutdown: it is finished when the \
                    database next opens (or by VACUUM of the table); until then, searches \
                    read the segments it does not cover exactly (same results, slower)"
                .into();
        }
        format!(
            "the index is built in the background: its build did not finish within the \
             statement timeout ({} ms, limit query_timeout); until it does, searches read \
             the segments it does not cover exactly (same results, slower), and VACUUM \
             of the table waits for it",
            self.shared.limits.query_timeout.as_millis()
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
        let db = self.shared.db.clone();
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
            // The caller's access is being withdrawn: the statement has committed, and
            // answers now; the build goes on in the background.
            () = deadline::call_stopped() => false,
        }
    }

    /// The host starts closing: statements under way stop waiting for work that goes
    /// on in the background (a CREATE INDEX answers at once, with its notice), so that
    /// a drain before [`Database`]'s close is not held by them. Statements still run.
    pub fn begin_close(&self) {
        self.closing.send_replace(true);
    }

    /// The host stops the statements under way, past the drain it gave them: each one
    /// still doing its work (planning, reading, building the rows it writes) ends at
    /// its next await with a 503 saying nothing was applied; one already committing
    /// finishes its commit. Statements that start afterwards are refused the same way.
    /// Also ends waits for background work, as [`SqlEngine::begin_close`] does.
    pub fn stop_statements(&self) {
        self.closing.send_replace(true);
        self.stopping.send_replace(true);
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
        let mut txn = Txn::new(&self.shared, org, ws);
        let missing = || Error::NotFound(format!("relation \"{ws}\".\"{table}\" does not exist"));
        // The work (waiting for the table's writer, staging the rows) stops when the
        // caller's access is withdrawn; the commit does not.
        let work = async {
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
            Ok::<_, Error>(written)
        };
        let written = deadline::unless_call_stopped(work).await??;
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
        if params_batch.len() > self.shared.limits.max_batch {
            return bad(format!(
                "a batch may have at most {} parameter sets, not {} (limit max_batch)",
                self.shared.limits.max_batch,
                params_batch.len()
            ));
        }
        let required = crate::rewrite::params::required_params(&stmt);
        for (i, params) in params_batch.iter().enumerate() {
            crate::rewrite::params::check_param_count(params.len(), required)
                .map_err(|e| prefix_error(e, i))?;
        }
        if self.shared.limits.fast_paths
            && !params_batch.is_empty()
            && let Statement::Insert(ins) = &stmt
            && insert::batch_shape(ins)
        {
            let mut txn = Txn::new(&self.shared, org, ws);
            txn.settings = settings.lock().clone();
            let attempt = deadline::unless_call_stopped(tokio::time::timeout(
                self.shared.limits.query_timeout,
                Box::pin(txn.insert_batch(ins, params_batch)),
            ))
            .await?;
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
        let mut txn = Txn::new(&self.shared, org, ws);
        txn.settings = settings.lock().clone();
        // Large texts bind by number, as in `execute_statement` (a 60 MB text bound as a
        // literal was copied through every planning step: 4.8 s and 870 MB).
        let by_number = binds_texts_by_number(&stmt);
        let references = crate::rewrite::params::references(sql);
        let fut = async {
            for (i, params) in params_batch.iter().enumerate() {
                let step = async {
                    self.shared.check_params(params)?;
                    let mut s = stmt.clone();
                    let by_number =
                        by_number && crate::rewrite::params::may_bind_big_texts(references, params);
                    let arrays_by_number = binds_arrays_by_number(&s);
                    let bound = crate::rewrite::params::bind_texts(
                        &mut s,
                        params,
                        by_number,
                        arrays_by_number,
                    )?;
                    txn.bound = Arc::new(bound);
                    txn.run(s).await
                };
                let out = step.await.map_err(|e| prefix_error(e, i))?;
                totals.statements += 1;
                totals.rows_affected += out.rows_affected;
                totals.row_count += out.row_count();
            }
            Ok::<_, Error>(())
        };
        let deadline = tokio::time::Instant::now() + self.shared.limits.query_timeout;
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
        let def = Txn::new(&self.shared, org, ws).resolve(name)?;
        let db = self.shared.db.clone();
        let work = tokio::task::spawn_blocking(move || db.vacuum(def.id));
        // When the caller's access is being withdrawn, the compaction (which changes no
        // row) goes on in the background, and the statement answers now.
        let indexed = deadline::unless_call_stopped(work)
            .await?
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
        let meter = tarn_alloc::Meter::start(tarn_alloc::backstop(self.shared.limits.query_memory));
        let fut = meter.run(fut, |over| {
            Error::BadRequest(format!(
                "query memory limit (query_memory) exceeded: {over}"
            ))
        });
        // The deadline inside planning, which is one long poll (see `context::deadline`).
        let fut = deadline::with_deadline(fut, self.shared.limits.query_timeout);
        let fut = std::panic::AssertUnwindSafe(fut).catch_unwind();
        let mut stopping = self.stopping.subscribe();
        let started = std::time::Instant::now();
        tokio::select! {
            r = tokio::time::timeout(self.shared.limits.query_timeout, fut) => match r {
                // A check past the deadline (or after a stop) ends DataFusion's work
                // wherever it is, and DataFusion may report that as its own fault (a
                // name made of the check's error failing a schema comparison): then it
                // is the timeout, or the stop.
                Ok(Ok(Err(Error::Internal(_)))) if deadline::stopped() => {
                    Err(deadline::stopped_error())
                }
                Ok(Ok(Err(Error::Internal(_))))
                    if started.elapsed() >= self.shared.limits.query_timeout =>
                {
                    Err(self.timeout_error())
                }
                Ok(Ok(r)) => r,
                Ok(Err(panic)) => Err(crate::error::panic_error(panic.as_ref())),
                Err(_) => Err(self.timeout_error()),
            },
            // The work ends at its next await. What this covers is work, not commits
            // (callers commit after it), so nothing of the statement was applied.
            _ = stopping.wait_for(|s| *s) => Err(Error::Unavailable(
                "the server is shutting down: the statement was stopped before it \
                 applied anything; retry"
                    .into(),
            )),
            // The caller's access is being withdrawn (see `CallStop`); the host words it.
            () = deadline::call_stopped() => Err(deadline::stopped_error()),
        }
    }

    fn timeout_error(&self) -> Error {
        Error::BadRequest(deadline::timeout_message(self.shared.limits.query_timeout))
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
        if sql.len() > self.shared.limits.max_sql_bytes {
            return bad(format!(
                "SQL text of {} bytes exceeds the limit of {} bytes (max_sql_bytes)",
                sql.len(),
                self.shared.limits.max_sql_bytes
            ));
        }
        let mut stmts = parse_statements(sql)?;
        match stmts.len() {
            0 => bad("empty query: no statement to run"),
            1 => {
                let mut stmt = stmts.remove(0);
                if crate::ast::pg_forms::may_hold(sql) {
                    crate::ast::pg_forms::rewrite(&mut stmt)?;
                }
                crate::ast::depth::check_widths(&stmt)?;
                crate::ast::unsupported::check(&stmt)?;
                Ok(stmt)
            }
            n => bad(format!(
                "cannot run {n} statements in one query; send them one at a time or use query_batch"
            )),
        }
    }
}

/// The statements of `sql` as the engine reads them: its dialect, the nesting check on
/// the tokens, adjacent string constants joined, the parser's depth limit.
fn parse_statements(sql: &str) -> Result<Vec<Statement>> {
    let dialect = EngineDialect::default();
    let tokens = Tokenizer::new(&dialect, sql)
        .with_unescape(true)
        .tokenize_with_location()
        .map_err(|e| Error::BadRequest(format!("syntax error: {e}")))?;
    crate::ast::depth::check(&tokens)?;
    let tokens = crate::ast::strings::join_continued(tokens)?;
    Ok(Parser::new(&dialect)
        .with_recursion_limit(256)
        .with_tokens_with_locations(tokens)
        .parse_statements()?)
}

/// Whether `sql` is one statement that only reads and returns rows — a query (SELECT,
/// VALUES, TABLE, WITH … SELECT) with no INSERT, UPDATE, DELETE or MERGE inside — as
/// `COPY (query) TO` takes; `None` when it does not parse (running it reports why). An
/// export checks it before it runs anything: a write run only to find it returns no
/// rows would be applied behind the refusal.
pub fn returns_rows_only(sql: &str) -> Option<bool> {
    use datafusion::sql::sqlparser::ast::{Visit, Visitor};
    let stmts = parse_statements(sql).ok()?;
    let [stmt @ Statement::Query(_)] = stmts.as_slice() else {
        return Some(false);
    };
    struct Writes(usize);
    impl Visitor for Writes {
        type Break = ();
        fn pre_visit_statement(&mut self, _: &Statement) -> std::ops::ControlFlow<()> {
            self.0 += 1;
            if self.0 > 1 {
                return std::ops::ControlFlow::Break(());
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    Some(stmt.visit(&mut Writes(0)).is_continue())
}

/// Whether large text parameters of `stmt` bind by number: where DataFusion plans the
/// whole statement and nothing of it is stored (see `functions::param_text`).
/// Whether `stmt`'s large array parameters bind by number (see
/// `functions::param_array`): queries, whose every expression DataFusion plans with the
/// statement's view; a write's values may be read before that.
fn binds_arrays_by_number(stmt: &Statement) -> bool {
    matches!(stmt, Statement::Query(_) | Statement::Explain { .. })
}

fn binds_texts_by_number(stmt: &Statement) -> bool {
    matches!(
        stmt,
        Statement::Query(_)
            | Statement::Insert(_)
            | Statement::Update(_)
            | Statement::Delete(_)
            | Statement::Explain { .. }
    )
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
