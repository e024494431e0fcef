//! The transaction every statement (or batch) writes through: writer locks, private
//! table versions, catalog changes, the read view queries are planned against, unique
//! checks, and the commit that logs and publishes it all as one record.

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::catalog::TableProvider;
use datafusion::sql::sqlparser::ast::{
    ObjectName, Query, SelectItem, Statement, TableFactor, Visit, Visitor,
};
use tarn_catalog::{Catalog, CatalogOp, ColumnId, TableDef, TableId};
use tarn_storage::{BuiltVersion, Database, Op, TableStore, TableVersion};
use tokio::sync::OwnedMutexGuard;

use crate::ast::ident::{name_parts, normalize, quoted};
use crate::datafusion_ext::context::read_view::{ReadView, STATEMENT_VIEW};
use crate::error::{Error, Result};
use crate::rewrite::names::OutputNames;
use crate::statement::settings::Settings;
use crate::statement::shared::Shared;

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
    /// What the engine's statements share.
    pub shared: &'e Shared,
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
    /// The statement's large parameters, bound by number (see
    /// `functions::param_text`, `functions::param_array`).
    pub bound: Arc<crate::datafusion_ext::context::read_view::ByNumber>,
}

impl<'e> Txn<'e> {
    pub(crate) fn new(shared: &'e Shared, org: &str, ws: &str) -> Self {
        Txn {
            shared,
            org: org.to_string(),
            ws: ws.to_string(),
            catalog: shared.db.catalog(),
            catalog_dirty: false,
            tables: HashMap::new(),
            ops: Vec::new(),
            ddl_guard: None,
            now: chrono::Utc::now(),
            build_indexes: Vec::new(),
            settings: Settings::default(),
            staged: None,
            read: None,
            bound: Default::default(),
        }
    }

    /// Counts rows this transaction writes against the `query_memory` pool: they are
    /// held twice until the commit (the op for the log and the transaction's own table
    /// version, which merges small inserts into new buffers), so they count twice. A
    /// batch of 3,000 one-megabyte rows held 4 GB before the log record's limit refused
    /// it, and two such statements at once held twice that.
    pub(crate) fn charge_rows(&mut self, batch: &RecordBatch) -> Result<()> {
        let shared = self.shared;
        let staged = self
            .staged
            .get_or_insert_with(|| shared.reserve("rows a statement writes"));
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
                shared.limits.query_memory
            ))
        })
    }

    /// Counts rows read to be written again (an UPDATE's new rows, before they are
    /// staged) against the `query_memory` pool until the commit: the query that read
    /// them gives its charge back when it returns, while the rows are still held (an
    /// UPDATE of 900 one-megabyte rows held 4.4 GB under a 2 GiB pool).
    pub(crate) fn charge_read(&mut self, batches: &[RecordBatch]) -> Result<()> {
        let shared = self.shared;
        let read = self
            .read
            .get_or_insert_with(|| shared.reserve("rows a statement read to write them"));
        let bytes: usize = batches.iter().map(batch_bytes).sum();
        read.try_grow(bytes).map_err(|_| {
            Error::BadRequest(format!(
                "query memory limit (query_memory) exceeded: the rows this statement \
                 changes hold {} bytes; the statements share {} bytes: change fewer rows \
                 at a time",
                read.size() + bytes,
                shared.limits.query_memory
            ))
        })
    }

    /// Takes the DDL lock (once) and refreshes the catalog so DDL validates against the
    /// latest state.
    pub async fn lock_ddl(&mut self) {
        if self.ddl_guard.is_none() {
            self.ddl_guard = Some(self.shared.locks.ddl().await);
            if !self.catalog_dirty {
                self.catalog = self.shared.db.catalog();
            }
        }
    }

    /// Takes the writer lock of table `id` (once per transaction) and returns the
    /// table's current definition, or `None` if it was dropped meanwhile.
    pub async fn lock_table(&mut self, id: TableId) -> Result<Option<TableDef>> {
        if !self.tables.contains_key(&id) {
            let guard = self.shared.locks.table(id).await;
            if !self.catalog_dirty {
                self.catalog = self.shared.db.catalog();
            }
            let Some(store) = self.shared.db.table(id) else {
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
        let guard = self.shared.locks.table(id).await;
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
            [ws, t] => match self.catalog.table(&self.org, ws, t) {
                Some(def) => Ok(def.clone()),
                None if self.catalog.view(&self.org, ws, t).is_some() => {
                    Err(Error::BadRequest(format!(
                        "{} is a view, not a table: a view is only read (INSERT, UPDATE, \
                         DELETE and ALTER TABLE change tables; DROP VIEW drops it)",
                        quoted(&parts)
                    )))
                }
                None => Err(Error::NotFound(format!(
                    "relation {} does not exist",
                    quoted(&parts)
                ))),
            },
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
            db: self.shared.db.clone(),
            org: self.org.clone(),
            ws: self.ws.clone(),
            catalog: self.catalog.clone(),
            pinned: Arc::new(parking_lot::Mutex::new(self.shared.db.pin(&unpinned))),
            pending,
            overrides,
            now: self.now,
            ef_search: self.settings.ef_search,
            shared: Default::default(),
            desc_nulls_first_written: false,
            widest_row: Default::default(),
            bound: self.bound.clone(),
        }
    }

    /// Plans and runs `stmt` on the shared session with this transaction's view as the
    /// catalog: (schema, batches).
    pub(crate) async fn plan_and_collect(
        &self,
        stmt: Statement,
        view: ReadView,
    ) -> Result<(SchemaRef, Vec<RecordBatch>)> {
        let state = &self.shared.session;
        let mut stmt = stmt;
        crate::rewrite::names::derived_table_names(&mut stmt);
        crate::rewrite::names::alias_duplicates(&mut stmt, false);
        crate::rewrite::names::function_column_aliases(&mut stmt);
        crate::rewrite::names::mod_function(&mut stmt);
        crate::rewrite::names::set_returning_series(&mut stmt);
        crate::rewrite::names::pg_array_functions(&mut stmt);
        crate::rewrite::names::nested_ifnull(&mut stmt);
        crate::rewrite::to_char::pg_templates(&mut stmt)?;
        crate::datafusion_ext::functions::jsonb::rewrite_casts(&mut stmt);
        crate::ast::types::timestamp_casts(&mut stmt)?;
        crate::datafusion_ext::functions::numeric_input::guard_numeric_casts(&mut stmt);
        let mut view = view;
        view.desc_nulls_first_written =
            crate::datafusion_ext::plan::score_nulls_last::writes_desc_nulls_first(&stmt);
        STATEMENT_VIEW
            .scope(Arc::new(view), async move {
                // A copy for the retry below; planning consumes the statement.
                let spare = stmt.clone();
                let planned = state
                    .statement_to_plan(crate::statement::explain::planner_statement(stmt)?)
                    .await;
                let plan = match planned {
                    Err(e) if same_names(&e) => {
                        // Items DataFusion names alike though their text differs: once
                        // more, every expression under a name of its own.
                        let mut stmt = spare;
                        crate::rewrite::names::alias_duplicates(&mut stmt, true);
                        // And calls that differ only in a cast (`count(x)`,
                        // `count(x::text)`), which DataFusion names alike.
                        crate::datafusion_ext::functions::named_cast::name_casts_in_calls(
                            &mut stmt,
                        );
                        state
                            .statement_to_plan(crate::statement::explain::planner_statement(stmt)?)
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
                let (physical, ctx) = sized_for_width(physical, state.task_ctx())?;
                let batches = collect_bounded(physical, ctx).await?;
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
        mut query: Query,
        overrides: HashMap<(String, String), Arc<dyn TableProvider>>,
    ) -> Result<(Vec<String>, SchemaRef, Vec<RecordBatch>)> {
        self.expand_views(&mut query, &overrides)?;
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
        commit_built(self.shared.db.clone(), ops, built, guards).await
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
/// that; see [`crate::rewrite::names::alias_duplicates`]).
fn same_names(e: &datafusion::error::DataFusionError) -> bool {
    let m = e.to_string();
    m.contains("require unique expression names")
        || m.contains("duplicate unqualified field name")
        || m.contains("duplicate qualified field name")
}

/// Bytes a batch of the widest rows a statement reads may take: DataFusion's filters,
/// joins and repartitions gather rows into batches of `batch_size` rows before they
/// pass them on, and 8,192 rows of 1 MB texts are 8 GB held in one place, where no
/// memory check sees them until they are all there. 8 MiB, a segment block's most
/// (`tarn_storage::BLOCK_BYTES`): a sort keeps a batch of each run it merges, and at
/// 32 MiB the runs of a sort of 1 MB rows did not fit beside its input.
const BATCH_BYTES: usize = 8 << 20;

/// The statement's batch size (rows) when the widest row it reads is `widest` bytes:
/// `default` for narrow rows, fewer for wide ones, so a batch stays near
/// [`BATCH_BYTES`].
fn batch_size_for(widest: usize, default: usize) -> usize {
    (BATCH_BYTES / widest.max(1)).clamp(1, default.max(1))
}

/// `plan` and its task context `ctx` with the batch size of the widest rows the
/// statement reads (its scans' widths, in the statement's view) or carries as constants
/// (see [`batch_size_for`]).
fn sized_for_width(
    plan: Arc<dyn datafusion::physical_plan::ExecutionPlan>,
    ctx: Arc<datafusion::execution::TaskContext>,
) -> datafusion::error::Result<(
    Arc<dyn datafusion::physical_plan::ExecutionPlan>,
    Arc<datafusion::execution::TaskContext>,
)> {
    let widest = STATEMENT_VIEW
        .try_with(|v| v.widest_row.load(std::sync::atomic::Ordering::Relaxed))
        .unwrap_or(0)
        .max(widest_constants(&plan));
    let default = ctx.session_config().batch_size();
    let rows = batch_size_for(widest, default);
    if rows == default {
        return Ok((plan, ctx));
    }
    let config = ctx.session_config().clone().with_batch_size(rows);
    // `task_ctx` makes a new context each call: it is ours alone.
    let ctx = match Arc::try_unwrap(ctx) {
        Ok(ctx) => Arc::new(ctx.with_session_config(config)),
        Err(ctx) => ctx,
    };
    Ok((with_batch_rows(plan, rows)?, ctx))
}

/// The most bytes of constants one row of a projection of `plan` carries as columns (a
/// `repeat('x', 1000000)` folded into the rows of a recursive query), for the
/// statement's batch size: the scans report the widths of the rows they read.
fn widest_constants(plan: &Arc<dyn datafusion::physical_plan::ExecutionPlan>) -> usize {
    use datafusion::physical_expr::expressions::CastExpr;
    use datafusion::physical_plan::projection::ProjectionExec;
    use datafusion::physical_plan::unnest::UnnestExec;
    // `unnest` of a constant list makes rows of its elements, not of the list: a
    // parameter of a million numbers (a 7.6 MB list) had made every batch of the
    // statement one row, and `SELECT count(*) FROM unnest($1::int8[])` took 5 s.
    fn walk(node: &Arc<dyn datafusion::physical_plan::ExecutionPlan>, unnested: bool) -> usize {
        let mut widest = 0usize;
        if let Some(p) = node.downcast_ref::<ProjectionExec>() {
            // A constant that is the column (under a cast): one inside a call may
            // make a narrow value (`x = ANY(ARRAY[…])` is a boolean).
            let width = p
                .expr()
                .iter()
                .filter_map(|e| {
                    let e = e
                        .expr
                        .downcast_ref::<CastExpr>()
                        .map_or(&e.expr, |c| c.expr());
                    let width = constant_width(e, &p.input().schema())?;
                    Some(match (unnested, list_len(e)) {
                        (true, Some(n)) => width / n.max(1),
                        _ => width,
                    })
                })
                .fold(0, usize::saturating_add);
            widest = widest.max(width);
        }
        let below_unnest = node.downcast_ref::<UnnestExec>().is_some();
        for child in node.children() {
            widest = widest.max(walk(child, below_unnest));
        }
        widest
    }
    walk(plan, false)
}

/// The elements of `e` when it is a constant list (a literal, or one sized over its
/// rows): what `unnest` makes rows of.
fn list_len(e: &Arc<dyn datafusion::physical_expr::PhysicalExpr>) -> Option<usize> {
    use datafusion::arrow::array::Array;
    use datafusion::common::ScalarValue;
    use datafusion::physical_expr::expressions::Literal;
    if let Some(l) = e.downcast_ref::<Literal>() {
        return match l.value() {
            ScalarValue::List(a) if !a.is_empty() => Some(a.value(0).len()),
            ScalarValue::LargeList(a) if !a.is_empty() => Some(a.value(0).len()),
            ScalarValue::FixedSizeList(a) if !a.is_empty() => Some(a.value(0).len()),
            _ => None,
        };
    }
    wide_constant_arg(e).and_then(list_len)
}

/// The constant a `held::WIDE_CONSTANT` call repeats over its rows, when `e` is one.
fn wide_constant_arg(
    e: &Arc<dyn datafusion::physical_expr::PhysicalExpr>,
) -> Option<&Arc<dyn datafusion::physical_expr::PhysicalExpr>> {
    let f = e.downcast_ref::<datafusion::physical_expr::ScalarFunctionExpr>()?;
    match f.args() {
        [arg] if f.name() == crate::datafusion_ext::context::held::WIDE_CONSTANT => Some(arg),
        _ => None,
    }
}

/// The bytes of `e` when it is a constant: a literal, a wide one sized over its rows
/// (`held::WIDE_CONSTANT`) or an expression of large text parameters alone (`functions::param_text`).
fn constant_width(
    e: &Arc<dyn datafusion::physical_expr::PhysicalExpr>,
    schema: &datafusion::arrow::datatypes::Schema,
) -> Option<usize> {
    use datafusion::physical_expr::expressions::Literal;
    if let Some(l) = e.downcast_ref::<Literal>() {
        return Some(l.value().size());
    }
    // Text made of large text parameters alone is about as long as they are; a narrow
    // value made of them (`length($1)`) is no wider than any other.
    if e.data_type(schema)
        .is_ok_and(|t| crate::datafusion_ext::context::held::is_text(&t))
        && let Some(n) =
            crate::datafusion_ext::functions::param_text::constant_text_bytes_physical(e)
    {
        return Some(n);
    }
    constant_width(wide_constant_arg(e)?, schema)
}

/// `plan` with its filters (which fix their batch size when planned) gathering at most
/// `rows` rows; the other nodes read it from the task context.
fn with_batch_rows(
    plan: Arc<dyn datafusion::physical_plan::ExecutionPlan>,
    rows: usize,
) -> datafusion::error::Result<Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
    use datafusion::common::tree_node::{Transformed, TreeNode};
    use datafusion::physical_plan::filter::FilterExec;
    plan.transform_up(|node| {
        if let Some(f) = node.downcast_ref::<FilterExec>()
            && f.batch_size() > rows
        {
            return Ok(Transformed::yes(Arc::new(f.with_batch_size(rows)?)));
        }
        Ok(Transformed::no(node))
    })
    .map(|t| t.data)
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
    // Dropped when this returns, however it returns: what the plan's spawned tasks are
    // still doing then stops at their next batch.
    let life = Arc::new(());
    let plan = crate::datafusion_ext::context::held::hold_wide_rows(
        plan,
        tarn_alloc::current_statement(),
        &life,
    )?;
    let mut stream = datafusion::physical_plan::execute_stream(plan, ctx)?;
    let mut out = Vec::new();
    // Past the first batches, small ones (a recursive CTE's one-row batches) are
    // gathered into batches of up to 8,192 rows before they are kept: every batch kept
    // has a fixed cost (its arrays, buffers and their headers, a few hundred bytes a
    // column) that `batch_bytes` does not see and that the allocator's backstop does
    // not count (each allocation is small), so ten million one-row batches held 4 GB
    // for 160 MB of rows. Results of a few batches stay as they are.
    let mut small: Option<datafusion::arrow::compute::BatchCoalescer> = None;
    let keep = |batch: RecordBatch, bytes: usize, out: &mut Vec<RecordBatch>| {
        reservation.try_grow(bytes)?;
        out.push(batch);
        Ok::<_, datafusion::error::DataFusionError>(())
    };
    // Keeps the batches `small` has completed; with `finish`, also what it still holds.
    let drain = |small: &mut Option<datafusion::arrow::compute::BatchCoalescer>,
                 finish: bool,
                 out: &mut Vec<RecordBatch>| {
        if let Some(c) = small {
            if finish {
                c.finish_buffered_batch()?;
            }
            while let Some(done) = c.next_completed_batch() {
                let bytes = batch_bytes(&done);
                keep(done, bytes, out)?;
            }
        }
        Ok::<_, datafusion::error::DataFusionError>(())
    };
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        let bytes = batch_bytes(&batch);
        if out.len() >= KEPT_AS_THEY_ARE && bytes < SMALL_BATCH_BYTES {
            small
                .get_or_insert_with(|| {
                    datafusion::arrow::compute::BatchCoalescer::new(batch.schema(), 8192)
                })
                .push_batch(batch)?;
            drain(&mut small, false, &mut out)?;
            continue;
        }
        // In order: what was gathered goes first.
        drain(&mut small, true, &mut out)?;
        keep(batch, bytes, &mut out)?;
    }
    drain(&mut small, true, &mut out)?;
    Ok(out)
}

/// Batches of a result kept as they come before small ones are gathered together.
const KEPT_AS_THEY_ARE: usize = 64;
/// A batch smaller than this (by [`batch_bytes`]) is gathered with others once a result
/// has [`KEPT_AS_THEY_ARE`] batches.
const SMALL_BATCH_BYTES: usize = 64 << 10;

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
