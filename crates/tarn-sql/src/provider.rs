//! Tarn's tables as DataFusion sees them: catalog = organization, schema = workspace,
//! table = a scan over one snapshot of the table's chunks.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, BooleanArray, RecordBatch, new_null_array};
use datafusion::arrow::compute::filter;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{CatalogProvider, SchemaProvider, Session, TableProvider};
use datafusion::datasource::TableType;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use tarn_catalog::{Catalog, ColumnDef, TableDef, TableId};
use tarn_storage::{Database, TableVersion};

use crate::types::column_field;
use crate::values::json_to_array;

/// Name of the hidden row id column exposed to Tarn's own DML planning.
pub const ROWID_COLUMN: &str = "__tarn_rowid";

/// Where a statement's table reads come from: published snapshots, or a batch's own
/// pending versions for tables it has written.
#[derive(Clone)]
pub(crate) struct ReadView {
    pub db: Arc<Database>,
    pub org: String,
    pub catalog: Arc<Catalog>,
    pub pending: HashMap<TableId, Arc<TableVersion>>,
    /// Replacements by (workspace, table name): the DML target with row ids, or the
    /// rows a RETURNING clause reads.
    pub overrides: HashMap<(String, String), Arc<dyn TableProvider>>,
}

impl fmt::Debug for ReadView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadView").field("org", &self.org).finish()
    }
}

impl ReadView {
    pub fn version(&self, id: TableId) -> Option<Arc<TableVersion>> {
        self.pending
            .get(&id)
            .cloned()
            .or_else(|| self.db.table(id).map(|s| s.snapshot()))
    }

    pub fn provider(&self, def: &TableDef, with_rowid: bool) -> Option<Arc<EngineTable>> {
        let version = self.version(def.id)?;
        Some(Arc::new(EngineTable::new(def.clone(), version, with_rowid)))
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
pub struct EngineTable {
    def: TableDef,
    version: Arc<TableVersion>,
    schema: SchemaRef,
    with_rowid: bool,
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
        .map(|c| column_field(&c.name, &c.ty, c.nullable))
        .collect();
    if with_rowid {
        fields.push(Field::new(ROWID_COLUMN, DataType::UInt64, false));
    }
    Arc::new(Schema::new(fields))
}

impl EngineTable {
    /// A provider over `version` of the table `def`.
    pub fn new(def: TableDef, version: Arc<TableVersion>, with_rowid: bool) -> Self {
        let schema = table_schema(&def, with_rowid);
        EngineTable {
            def,
            version,
            schema,
            with_rowid,
        }
    }

    /// The rows of the snapshot, projected, in row id order, in batches of at most
    /// `batch_size` rows.
    pub fn batches(
        &self,
        projection: Option<&Vec<usize>>,
        batch_size: usize,
        limit: Option<usize>,
    ) -> DfResult<(SchemaRef, Vec<RecordBatch>)> {
        let indices: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..self.schema.fields().len()).collect(),
        };
        let schema = Arc::new(self.schema.project(&indices)?);
        let mut out = Vec::new();
        let mut produced = 0usize;
        for chunk in self.version.chunks() {
            if limit.is_some_and(|l| produced >= l) {
                break;
            }
            let n = chunk.num_rows();
            let mut columns: Vec<ArrayRef> = Vec::with_capacity(indices.len());
            for &i in &indices {
                if self.with_rowid && i == self.def.columns.len() {
                    columns.push(Arc::new(chunk.row_ids().clone()));
                    continue;
                }
                let col = &self.def.columns[i];
                let field = schema.field(columns.len());
                columns.push(match chunk.column(col.id) {
                    Some(a) => a.clone(),
                    None => missing_array(col, field.data_type(), n)?,
                });
            }
            let mut batch = RecordBatch::try_new_with_options(
                schema.clone(),
                columns,
                &datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(n)),
            )?;
            if let Some(live) = chunk.live() {
                let mask = BooleanArray::new(live.clone(), None);
                let cols = batch
                    .columns()
                    .iter()
                    .map(|c| filter(c, &mask))
                    .collect::<Result<Vec<_>, _>>()?;
                batch = RecordBatch::try_new_with_options(
                    schema.clone(),
                    cols,
                    &datafusion::arrow::array::RecordBatchOptions::new()
                        .with_row_count(Some(chunk.live_count())),
                )?;
            }
            let mut off = 0;
            while off < batch.num_rows() {
                let len = batch_size.min(batch.num_rows() - off);
                out.push(batch.slice(off, len));
                off += len;
                produced += len;
            }
        }
        Ok((schema, out))
    }
}

fn missing_array(col: &ColumnDef, ty: &DataType, n: usize) -> DfResult<ArrayRef> {
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

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let config = state.config();
        let (schema, batches) = self.batches(projection, config.batch_size(), limit)?;
        let parts = config.target_partitions().max(1);
        let mut partitions: Vec<Vec<RecordBatch>> =
            vec![Vec::new(); parts.min(batches.len()).max(1)];
        let per = batches.len().div_ceil(partitions.len()).max(1);
        // Contiguous runs keep each partition's rows in row id order.
        for (i, b) in batches.into_iter().enumerate() {
            partitions[i / per].push(b);
        }
        Ok(MemorySourceConfig::try_new_exec(&partitions, schema, None)?)
    }
}
