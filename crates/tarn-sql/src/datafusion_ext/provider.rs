//! Tarn's tables as DataFusion sees them: catalog = organization, schema = workspace,
//! table = a scan over one snapshot of the table's chunks.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use std::collections::HashSet;

use async_trait::async_trait;
use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions, UInt64Array, new_null_array,
};
use datafusion::arrow::compute::{cast, filter, take};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{
    CatalogProvider, CatalogProviderList, SchemaProvider, Session, TableProvider,
};
use datafusion::common::pruning::PruningStatistics;
use datafusion::common::{Column, DFSchema, ScalarValue};
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{Expr, Operator, TableProviderFilterPushDown};
use datafusion::physical_optimizer::pruning::PruningPredicateBuilder;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use tarn_catalog::{ColumnDef, TableDef};
use tarn_storage::{Chunk, KeySpec, SegmentRef, TableStore, TableVersion, key_specs};

use crate::ast::types::column_field;
use crate::datafusion_ext::context::read_view::{ReadView, STATEMENT_VIEW};
use crate::value::from_json::json_to_array;

/// Name of the hidden row id column exposed to Tarn's own DML planning.
pub const ROWID_COLUMN: &str = "__tarn_rowid";

impl ReadView {
    /// The table provider of `def` as this statement reads it (with the hidden row id
    /// column for DML when `with_rowid`).
    pub fn provider(&self, def: &TableDef, with_rowid: bool) -> Option<Arc<EngineTable>> {
        let version = self.version(def.id)?;
        let store = (!self.pending.contains_key(&def.id))
            .then(|| self.db.table(def.id))
            .flatten();
        Some(Arc::new(
            EngineTable::new(def.clone(), version, with_rowid)
                .with_store(store, key_specs(&self.catalog, def.id))
                .with_indexes(
                    self.catalog
                        .indexes_of(def.id)
                        .into_iter()
                        .cloned()
                        .collect(),
                )
                .with_ef_search(self.ef_search),
        ))
    }
}

/// Schema name that stands for the statement's own workspace (the session default, so
/// unqualified names resolve there); `$` never appears in workspace ids.
pub(crate) const CURRENT_SCHEMA: &str = "$ws";

/// The catalog list of the shared session: catalog `name` is the organization of the
/// statement being planned on this task (see [`STATEMENT_VIEW`]).
#[derive(Debug)]
pub(crate) struct ViewCatalogList {
    pub name: String,
}

impl CatalogProviderList for ViewCatalogList {
    fn register_catalog(
        &self,
        _name: String,
        _catalog: Arc<dyn CatalogProvider>,
    ) -> Option<Arc<dyn CatalogProvider>> {
        None
    }

    fn catalog_names(&self) -> Vec<String> {
        vec![self.name.clone()]
    }

    fn catalog(&self, name: &str) -> Option<Arc<dyn CatalogProvider>> {
        if name != self.name {
            return None;
        }
        STATEMENT_VIEW
            .try_with(|v| Arc::new(OrgCatalog(v.clone())) as Arc<dyn CatalogProvider>)
            .ok()
    }
}

/// The organization's workspaces as DataFusion schemas.
#[derive(Debug)]
pub(crate) struct OrgCatalog(pub Arc<ReadView>);

impl CatalogProvider for OrgCatalog {
    fn schema_names(&self) -> Vec<String> {
        self.0
            .catalog
            .workspaces_of(&self.0.org)
            .iter()
            .map(|w| w.id.clone())
            .collect()
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        let name = if name == CURRENT_SCHEMA {
            self.0.ws.as_str()
        } else {
            name
        };
        self.0.catalog.workspace(&self.0.org, name)?;
        Some(Arc::new(WorkspaceSchema {
            view: self.0.clone(),
            ws: name.to_string(),
        }))
    }
}

#[derive(Debug)]
struct WorkspaceSchema {
    view: Arc<ReadView>,
    ws: String,
}

#[async_trait]
impl SchemaProvider for WorkspaceSchema {
    fn table_names(&self) -> Vec<String> {
        self.view
            .catalog
            .tables_of(&self.view.org, &self.ws)
            .iter()
            .map(|t| t.name.clone())
            .collect()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        if let Some(p) = self
            .view
            .overrides
            .get(&(self.ws.clone(), name.to_string()))
        {
            return Ok(Some(p.clone()));
        }
        let Some(def) = self.view.catalog.table(&self.view.org, &self.ws, name) else {
            return Ok(None);
        };
        Ok(self
            .view
            .provider(def, false)
            .map(|p| p as Arc<dyn TableProvider>))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.view
            .catalog
            .table(&self.view.org, &self.ws, name)
            .is_some()
    }
}

/// A scan over one snapshot of an engine table.
#[derive(Clone)]
pub struct EngineTable {
    def: TableDef,
    version: Arc<TableVersion>,
    schema: SchemaRef,
    /// The table's store, for key lookups (`None`: always scan).
    store: Option<Arc<TableStore>>,
    /// The table's key indexes.
    keys: Vec<KeySpec>,
    /// When set, the scan reads only these row ids (those live in the snapshot).
    rows: Option<Vec<u64>>,
    /// The table's `engine_index` indexes (for the search node).
    indexes: Vec<tarn_catalog::IndexDef>,
    /// The session's HNSW search width, overriding each index's own.
    ef_search: Option<usize>,
}

impl fmt::Debug for EngineTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EngineTable")
            .field("table", &self.def.name)
            .finish()
    }
}

/// The schema SQL sees for a table.
pub fn table_schema(def: &TableDef, with_rowid: bool) -> SchemaRef {
    let mut fields: Vec<Field> = def
        .columns
        .iter()
        .map(|c| {
            let f = column_field(&c.name, &c.ty, c.nullable);
            let meta = crate::datafusion_ext::functions::similarity::column_metadata(def, c);
            if meta.is_empty() {
                f
            } else {
                f.with_metadata(meta)
            }
        })
        .collect();
    if with_rowid {
        fields.push(Field::new(ROWID_COLUMN, DataType::UInt64, false));
    }
    Arc::new(Schema::new(fields))
}

/// What a scan partition reads, in order.
#[derive(Debug, Clone)]
enum Unit {
    /// Block `block` of segment `segment` of the snapshot.
    Block { segment: usize, block: usize },
    /// Rows found through a key index: (chunk, positions).
    Rows(Arc<Chunk>, Vec<usize>),
}

/// How to turn stored chunks into the scan's output rows.
#[derive(Debug)]
struct Projector {
    def: TableDef,
    version: Arc<TableVersion>,
    /// Output columns: index into `def.columns`, or `None` for the row id.
    columns: Vec<Option<usize>>,
    schema: SchemaRef,
}

impl Projector {
    fn project(
        &self,
        chunk: &Chunk,
        mask: Option<BooleanArray>,
        take_positions: Option<&[usize]>,
    ) -> DfResult<RecordBatch> {
        let n = chunk.num_rows();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.columns.len());
        for (out_i, c) in self.columns.iter().enumerate() {
            let array: ArrayRef = match c {
                None => Arc::new(chunk.row_ids().clone()),
                Some(i) => {
                    let col = &self.def.columns[*i];
                    match chunk.column(col.id) {
                        Some(a) => a.clone(),
                        None => missing_array(col, self.schema.field(out_i).data_type(), n)?,
                    }
                }
            };
            columns.push(array);
        }
        let (columns, rows) = if let Some(positions) = take_positions {
            let idx = UInt64Array::from_iter_values(positions.iter().map(|&p| p as u64));
            let cols = columns
                .iter()
                .map(|c| take(c, &idx, None))
                .collect::<Result<Vec<_>, _>>()?;
            (cols, positions.len())
        } else if let Some(mask) = mask {
            let rows = mask.true_count();
            let cols = columns
                .iter()
                .map(|c| filter(c, &mask))
                .collect::<Result<Vec<_>, _>>()?;
            (cols, rows)
        } else {
            (columns, n)
        };
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        )?)
    }
}

/// One partition of a scan: reads its units lazily, block by block, so a table larger
/// than memory streams through the mapped files.
#[derive(Debug)]
struct ScanPartition {
    projector: Arc<Projector>,
    units: Vec<Unit>,
    batch_size: usize,
    limit: Option<usize>,
}

struct ScanIter {
    projector: Arc<Projector>,
    units: std::vec::IntoIter<Unit>,
    current: Option<(RecordBatch, usize)>,
    batch_size: usize,
    remaining: usize,
}

impl Iterator for ScanIter {
    type Item = DfResult<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.remaining == 0 {
                return None;
            }
            if let Some((batch, off)) = &mut self.current {
                if *off < batch.num_rows() {
                    let len = self
                        .batch_size
                        .min(batch.num_rows() - *off)
                        .min(self.remaining);
                    let out = batch.slice(*off, len);
                    *off += len;
                    self.remaining -= len;
                    return Some(Ok(out));
                }
                self.current = None;
            }
            let unit = self.units.next()?;
            let p = &self.projector;
            let batch = match unit {
                Unit::Block { segment, block } => {
                    let s = &p.version.segments()[segment];
                    s.segment()
                        .block(block)
                        .map_err(|e| DataFusionError::External(Box::new(e)))
                        .and_then(|chunk| {
                            let mask = s.block_mask(block).map(|m| BooleanArray::new(m, None));
                            p.project(&chunk, mask, None)
                        })
                }
                Unit::Rows(chunk, positions) => p.project(&chunk, None, Some(&positions)),
            };
            match batch {
                Ok(b) => self.current = Some((b, 0)),
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

impl PartitionStream for ScanPartition {
    fn schema(&self) -> &SchemaRef {
        &self.projector.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let iter = ScanIter {
            projector: self.projector.clone(),
            units: self.units.clone().into_iter(),
            current: None,
            batch_size: self.batch_size.max(1),
            remaining: self.limit.unwrap_or(usize::MAX),
        };
        Box::pin(RecordBatchStreamAdapter::new(
            self.projector.schema.clone(),
            futures::stream::iter(iter),
        ))
    }
}

/// Min/max of each sealed segment, as DataFusion's pruning sees them.
struct SegmentStats<'a> {
    def: &'a TableDef,
    segments: Vec<&'a SegmentRef>,
}

impl SegmentStats<'_> {
    fn values(&self, column: &Column, max: bool) -> Option<ArrayRef> {
        let col = self.def.columns.iter().find(|c| c.name == column.name)?;
        let mut typed_null = None;
        let mut values = Vec::with_capacity(self.segments.len());
        for s in &self.segments {
            match s.segment().stats().get(&col.id) {
                Some((lo, hi)) => {
                    let v = if max { hi } else { lo };
                    if typed_null.is_none() {
                        typed_null = ScalarValue::try_from(v.data_type()).ok();
                    }
                    values.push(Some(v.clone()));
                }
                None => values.push(None),
            }
        }
        let null = typed_null?;
        ScalarValue::iter_to_array(
            values
                .into_iter()
                .map(|v| v.unwrap_or_else(|| null.clone())),
        )
        .ok()
    }
}

impl PruningStatistics for SegmentStats<'_> {
    fn min_values(&self, column: &Column) -> Option<ArrayRef> {
        self.values(column, false)
    }
    fn max_values(&self, column: &Column) -> Option<ArrayRef> {
        self.values(column, true)
    }
    fn num_containers(&self) -> usize {
        self.segments.len()
    }
    fn null_counts(&self, _column: &Column) -> Option<ArrayRef> {
        None
    }
    fn row_counts(&self) -> Option<ArrayRef> {
        None
    }
    fn contained(&self, _column: &Column, _values: &HashSet<ScalarValue>) -> Option<BooleanArray> {
        None
    }
}

/// The live rows `row_ids` of `version`, projected to `columns` (indexes into
/// `def.columns`, `None` for the row id) with output `schema`.
pub(crate) fn key_rows(
    def: &TableDef,
    version: &Arc<TableVersion>,
    row_ids: &[u64],
    columns: Vec<Option<usize>>,
    schema: SchemaRef,
) -> crate::Result<Vec<RecordBatch>> {
    let projector = Projector {
        def: def.clone(),
        version: version.clone(),
        columns,
        schema,
    };
    let mut out = Vec::new();
    for (chunk, positions) in version.rows(row_ids)? {
        out.push(projector.project(&chunk, None, Some(&positions))?);
    }
    Ok(out)
}

/// `column = literal` conjuncts of `filters`, by column name.
fn equalities(filters: &[Expr]) -> HashMap<String, ScalarValue> {
    let mut out = HashMap::new();
    for f in filters {
        if let Expr::BinaryExpr(b) = f
            && b.op == Operator::Eq
        {
            let pair = match (b.left.as_ref(), b.right.as_ref()) {
                (Expr::Column(c), Expr::Literal(v, _)) | (Expr::Literal(v, _), Expr::Column(c)) => {
                    Some((c.name.clone(), v.clone()))
                }
                _ => None,
            };
            if let Some((name, v)) = pair
                && !v.is_null()
            {
                out.insert(name, v);
            }
        }
    }
    out
}

impl EngineTable {
    /// The table's definition.
    pub(crate) fn def(&self) -> &TableDef {
        &self.def
    }

    /// The snapshot read.
    pub(crate) fn version(&self) -> &Arc<TableVersion> {
        &self.version
    }

    /// Whether the scan is restricted to given rows (see [`EngineTable::with_rows`]).
    pub(crate) fn restricted(&self) -> bool {
        self.rows.is_some()
    }

    /// The schema SQL sees, every column.
    pub(crate) fn table_schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// The id of the column named `name`.
    pub(crate) fn column_id(&self, name: &str) -> Option<tarn_catalog::ColumnId> {
        self.def.column(name).map(|c| c.id)
    }

    fn projector(&self, indices: &[usize], schema: SchemaRef) -> Projector {
        Projector {
            def: self.def.clone(),
            version: self.version.clone(),
            columns: indices
                .iter()
                .map(|&i| (i < self.def.columns.len()).then_some(i))
                .collect(),
            schema,
        }
    }

    /// All rows of `chunk` (deleted or not) with every column of [`Self::table_schema`],
    /// for evaluating predicates block by block.
    pub(crate) fn full_batch(&self, chunk: &Chunk) -> DfResult<RecordBatch> {
        let all: Vec<usize> = (0..self.schema.fields().len()).collect();
        self.projector(&all, self.schema.clone())
            .project(chunk, None, None)
    }

    /// The live rows `row_ids`, in that order, projected to `projection` (as a scan's)
    /// with output `schema`.
    pub(crate) fn rows_in_order(
        &self,
        row_ids: &[u64],
        projection: Option<&[usize]>,
        schema: SchemaRef,
    ) -> crate::Result<Vec<RecordBatch>> {
        let all: Vec<usize>;
        let indices = match projection {
            Some(p) => p,
            None => {
                all = (0..self.schema.fields().len()).collect();
                &all
            }
        };
        let projector = self.projector(indices, schema);
        let mut out = Vec::new();
        for (chunk, positions) in self.version.rows(row_ids)? {
            out.push(projector.project(&chunk, None, Some(&positions))?);
        }
        Ok(out)
    }

    /// A provider over `version` of the table `def`.
    pub fn new(def: TableDef, version: Arc<TableVersion>, with_rowid: bool) -> Self {
        let schema = table_schema(&def, with_rowid);
        EngineTable {
            def,
            version,
            schema,
            store: None,
            keys: Vec::new(),
            rows: None,
            indexes: Vec::new(),
            ef_search: None,
        }
    }

    /// Lets the scan answer key equalities through the table's key indexes (only while
    /// `version` is the store's published version).
    pub fn with_store(mut self, store: Option<Arc<TableStore>>, keys: Vec<KeySpec>) -> Self {
        self.store = store;
        self.keys = keys;
        self
    }

    /// The table's search indexes, for the search node.
    pub fn with_indexes(mut self, indexes: Vec<tarn_catalog::IndexDef>) -> Self {
        self.indexes = indexes;
        self
    }

    /// Searches with HNSW search width `ef` instead of each index's own (the
    /// session's `SET engine.ef_search`).
    pub fn with_ef_search(mut self, ef: Option<usize>) -> Self {
        self.ef_search = ef;
        self
    }

    /// The search width for `index`: the session's, or the index's own.
    pub(crate) fn ef_search(&self, index: &tarn_catalog::IndexDef) -> usize {
        tarn_search::ef_search(index, self.ef_search)
    }

    /// The vector index (`hnsw` or `maxsim`) on column `name`, if any.
    pub(crate) fn vector_index(&self, name: &str) -> Option<&tarn_catalog::IndexDef> {
        let id = self.def.column(name)?.id;
        self.indexes
            .iter()
            .find(|i| i.column == id && tarn_search::is_vector_index(i))
    }

    /// Restricts the scan to `row_ids` (in the snapshot), for reads of rows already found
    /// through a key index.
    pub fn with_rows(mut self, mut row_ids: Vec<u64>) -> Self {
        row_ids.sort_unstable();
        row_ids.dedup();
        self.rows = Some(row_ids);
        self
    }

    /// Rows matching `col = literal` filters on a whole key, through the key index:
    /// `None` when no key applies or the snapshot is not the published one. Damage met
    /// in the index is an error, not a reason to scan.
    async fn key_units(&self, filters: &[Expr]) -> DfResult<Option<Vec<Unit>>> {
        let Some(store) = self.store.as_ref() else {
            return Ok(None);
        };
        let Some((columns, arrays)) = self.key_probe(filters) else {
            return Ok(None);
        };
        let external = |e: crate::Error| DataFusionError::External(Box::new(e));
        ready_keys(store, &columns).await.map_err(external)?;
        let (version, found) = store
            .key_lookup(&columns, &arrays)
            .map_err(|e| external(e.into()))?;
        if !version.same_as(&self.version) {
            return Ok(None);
        }
        let ids = found.into_iter().next().unwrap_or_default();
        let rows = version.rows(&ids).map_err(|e| external(e.into()))?;
        Ok(Some(
            rows.into_iter().map(|(c, p)| Unit::Rows(c, p)).collect(),
        ))
    }

    /// The key whose every column `filters` fix to a literal, with those literals as
    /// arrays of the columns' types.
    fn key_probe(&self, filters: &[Expr]) -> Option<(Vec<tarn_catalog::ColumnId>, Vec<ArrayRef>)> {
        let eq = equalities(filters);
        if eq.is_empty() {
            return None;
        }
        for spec in &self.keys {
            let mut arrays = Vec::with_capacity(spec.columns.len());
            for id in &spec.columns {
                let col = self.def.columns.iter().find(|c| c.id == *id)?;
                let Some(v) = eq.get(&col.name) else {
                    arrays.clear();
                    break;
                };
                let ty = self
                    .schema
                    .field_with_name(&col.name)
                    .ok()?
                    .data_type()
                    .clone();
                let a = v.to_array().ok()?;
                arrays.push(cast(&a, &ty).ok()?);
            }
            if arrays.is_empty() || arrays.iter().any(|a| a.null_count() > 0) {
                continue;
            }
            return Some((spec.columns.clone(), arrays));
        }
        None
    }

    /// Which segments may hold rows passing `filters` (min/max pruning; in-memory
    /// segments are always read).
    fn keep_segments(&self, state: &dyn Session, filters: &[Expr]) -> Vec<bool> {
        let segments = self.version.segments();
        let all = vec![true; segments.len()];
        let Some(expr) = conjunction(filters.to_vec()) else {
            return all;
        };
        let sealed: Vec<usize> = (0..segments.len())
            .filter(|&i| !segments[i].segment().stats().is_empty())
            .collect();
        if sealed.is_empty() {
            return all;
        }
        let Ok(df_schema) = DFSchema::try_from(self.schema.as_ref().clone()) else {
            return all;
        };
        let Ok(physical) = state.create_physical_expr(expr, &df_schema) else {
            return all;
        };
        let Some(predicate) = PruningPredicateBuilder::new()
            .with_file_schema(self.schema.clone())
            .build(physical)
        else {
            return all;
        };
        let stats = SegmentStats {
            def: &self.def,
            segments: sealed.iter().map(|&i| &segments[i]).collect(),
        };
        let Ok(keep) = predicate.prune(&stats) else {
            return all;
        };
        let mut out = all;
        for (i, k) in sealed.into_iter().zip(keep) {
            out[i] = k;
        }
        out
    }
}

pub(crate) fn missing_array(col: &ColumnDef, ty: &DataType, n: usize) -> DfResult<ArrayRef> {
    match &col.missing {
        None => Ok(new_null_array(ty, n)),
        Some(v) => json_to_array(v, col, n).map_err(|e| DataFusionError::External(Box::new(e))),
    }
}

#[async_trait]
impl TableProvider for EngineTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        // Filters prune segments and pick key lookups; DataFusion still applies them.
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let config = state.config();
        let indices: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..self.schema.fields().len()).collect(),
        };
        let schema = Arc::new(self.schema.project(&indices)?);
        let projector = Arc::new(self.projector(&indices, schema.clone()));
        let chosen = match &self.rows {
            Some(ids) => Some(
                self.version
                    .rows(ids)
                    .map_err(|e| DataFusionError::External(Box::new(e)))?
                    .into_iter()
                    .map(|(c, p)| Unit::Rows(c, p))
                    .collect(),
            ),
            None => self.key_units(filters).await?,
        };
        // The bytes and rows read, for the statement's batch size (see
        // `txn::batch_size_for`): an average, so that one wide row among millions of
        // narrow ones does not make every batch small.
        let (mut bytes, mut rows) = (0usize, 0usize);
        let (units, weights): (Vec<Unit>, Vec<usize>) = match chosen {
            Some(units) => {
                let w = units
                    .iter()
                    .map(|u| match u {
                        Unit::Rows(c, p) => {
                            bytes = bytes.saturating_add(tarn_storage::used_bytes(c.batch()));
                            rows += c.num_rows();
                            p.len()
                        }
                        Unit::Block { .. } => 0,
                    })
                    .collect();
                (units, w)
            }
            None => {
                let keep = self.keep_segments(state, filters);
                let mut units = Vec::new();
                let mut weights = Vec::new();
                let mut planned = 0usize;
                for (si, s) in self.version.segments().iter().enumerate() {
                    if !keep[si] {
                        continue;
                    }
                    for (bi, b) in s.segment().blocks().iter().enumerate() {
                        if limit.is_some_and(|l| planned >= l) {
                            break;
                        }
                        units.push(Unit::Block {
                            segment: si,
                            block: bi,
                        });
                        bytes = bytes.saturating_add(b.bytes());
                        rows += b.rows;
                        weights.push(b.rows);
                        planned += b.rows;
                    }
                }
                (units, weights)
            }
        };
        let _ = STATEMENT_VIEW.try_with(|v| {
            v.widest_row
                .fetch_max(bytes / rows.max(1), std::sync::atomic::Ordering::Relaxed)
        });
        // Contiguous runs of about equal rows keep each partition in row id order.
        let parts = config.target_partitions().max(1).min(units.len()).max(1);
        let total: usize = weights.iter().sum();
        let per = total.div_ceil(parts).max(1);
        let mut partitions: Vec<Vec<Unit>> = vec![Vec::new(); parts];
        let mut acc = 0usize;
        for (u, w) in units.into_iter().zip(weights) {
            let p = (acc / per).min(parts - 1);
            partitions[p].push(u);
            acc += w;
        }
        let streams: Vec<Arc<dyn PartitionStream>> = partitions
            .into_iter()
            .map(|units| {
                Arc::new(ScanPartition {
                    projector: projector.clone(),
                    units,
                    batch_size: config.batch_size(),
                    limit,
                }) as Arc<dyn PartitionStream>
            })
            .collect();
        Ok(Arc::new(StreamingTableExec::try_new(
            schema,
            streams,
            None,
            Vec::new(),
            false,
            limit,
        )?))
    }
}

/// Makes key lookups over `columns` of `store` a matter of probes before they run on an
/// async thread: building a missing memtable key map or segment key section reads whole
/// segments, so that happens on a blocking thread.
pub(crate) async fn ready_keys(
    store: &Arc<TableStore>,
    columns: &[tarn_catalog::ColumnId],
) -> crate::error::Result<()> {
    if store.keys_ready(columns) {
        return Ok(());
    }
    let (store, columns) = (store.clone(), columns.to_vec());
    tokio::task::spawn_blocking(move || store.prepare_keys(&columns))
        .await
        .map_err(|e| crate::error::join_error(e, "key index"))??;
    Ok(())
}
