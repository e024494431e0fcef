//! The search node: a table scan that returns only the `k` best rows for a `<#>` query
//! (and the rows passing the query's filters), ranked in SPEC §5's order — score
//! descending, NULL last, row id ascending. `search_rule.rs` puts it in place of
//! `Sort(<#> DESC) → Filter → TableScan`; `tarn-search` does the work.
//!
//! Logical [`SearchNode`] (a leaf, for `EXPLAIN` and the optimizer) becomes the
//! physical [`SearchExec`] through [`SearchPlanner`].

use std::any::Any;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{BooleanArray, RecordBatch};
use datafusion::arrow::buffer::BooleanBuffer;
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DFSchema, DFSchemaRef, Result as DfResult, TableReference};
use datafusion::error::DataFusionError;
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{
    Expr, LogicalPlan, TableSource, UserDefinedLogicalNode, UserDefinedLogicalNodeCore,
};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use datafusion::physical_planner::{DefaultPhysicalPlanner, ExtensionPlanner, PhysicalPlanner};
use tarn_search::{IndexUse, QueryValue, RowFilter, SearchRequest};
use tarn_storage::Chunk;

use crate::datafusion_ext::functions::hybrid::HybridBinding;
use crate::datafusion_ext::functions::similarity::search_error;
use crate::datafusion_ext::functions::text_search::TextBinding;
use crate::datafusion_ext::provider::EngineTable;

/// What the node ranks by.
#[derive(Clone, Debug)]
pub enum NodeQuery {
    /// A vector or bag `<#>` query value.
    Vector(QueryValue),
    /// A text `<#>` (BM25), bound to the statement's snapshot.
    Text(Arc<TextBinding>),
    /// A hybrid `<#>`, bound to the statement's snapshot, with its vector arm's query.
    Hybrid {
        /// The binding (text arm, weights, fusion).
        binding: Arc<HybridBinding>,
        /// The vector arm's query (`None`: NULL, that arm is NULL for every row).
        vector: Option<QueryValue>,
    },
}

/// The logical search node: reads table `table` like a `TableScan` with `projection`,
/// but yields only the `k` best rows for `column <#> query` among those passing
/// `filters`, best first.
#[derive(Clone)]
pub struct SearchNode {
    /// The table as the scan named it.
    pub table: TableReference,
    /// The table's source (an [`EngineTable`]).
    pub source: Arc<dyn TableSource>,
    /// Columns of the table read, as in `TableScan::projection`.
    pub projection: Option<Vec<usize>>,
    /// The output schema (the scan's projected schema).
    pub schema: DFSchemaRef,
    /// Predicates over the table's columns (qualified by `table`).
    pub filters: Vec<Expr>,
    /// The scored column.
    pub column: String,
    /// The query.
    pub query: NodeQuery,
    /// Rows wanted (`None`: all of them, ranked).
    pub k: Option<usize>,
    /// The column's index, if any: (id, name, ef_search).
    pub index: Option<(tarn_catalog::IndexId, String, usize)>,
}

impl fmt::Debug for SearchNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        UserDefinedLogicalNodeCore::fmt_for_explain(self, f)
    }
}

impl SearchNode {
    #[allow(clippy::type_complexity)]
    fn key(
        &self,
    ) -> (
        String,
        Option<&Vec<usize>>,
        &Vec<Expr>,
        &str,
        Option<usize>,
        &Option<(tarn_catalog::IndexId, String, usize)>,
    ) {
        (
            self.table.to_string(),
            self.projection.as_ref(),
            &self.filters,
            &self.column,
            self.k,
            &self.index,
        )
    }

    fn query_bits(&self) -> Vec<u32> {
        match &self.query {
            NodeQuery::Vector(QueryValue::Vector(v)) => v.iter().map(|x| x.to_bits()).collect(),
            NodeQuery::Vector(QueryValue::Bag { values, dim }) => std::iter::once(*dim as u32)
                .chain(values.iter().map(|x| x.to_bits()))
                .collect(),
            // A binding is one statement's: the same binding is the same query.
            NodeQuery::Text(b) => {
                let p = Arc::as_ptr(b) as *const () as usize as u64;
                vec![u32::MAX, (p >> 32) as u32, p as u32]
            }
            NodeQuery::Hybrid { binding, vector } => {
                let p = Arc::as_ptr(binding) as *const () as usize as u64;
                let mut bits = vec![u32::MAX - 1, (p >> 32) as u32, p as u32];
                if let Some(QueryValue::Vector(v)) = vector {
                    bits.extend(v.iter().map(|x| x.to_bits()));
                }
                bits
            }
        }
    }
}

impl PartialEq for SearchNode {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key() && self.query_bits() == other.query_bits()
    }
}
impl Eq for SearchNode {}
impl Hash for SearchNode {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state);
        self.query_bits().hash(state);
    }
}
impl PartialOrd for SearchNode {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        (self == other).then_some(Ordering::Equal)
    }
}

/// How EXPLAIN names the index path: `index=<name> ef_search=<n>`, or exact.
fn describe_index(
    q: &NodeQuery,
    index: &Option<(tarn_catalog::IndexId, String, usize)>,
    k: Option<usize>,
) -> String {
    // The vector index's part: its search width for `want` rows.
    let vector = |want: Option<usize>| match (index, want) {
        (Some((_, name, ef)), Some(w)) => format!("{name} ef_search={}", (*ef).max(w)),
        (Some((_, name, _)), None) => format!("{name} unused without LIMIT (exact)"),
        (None, _) => "none (exact)".into(),
    };
    match q {
        NodeQuery::Text(b) => format!("index={} (bm25)", b.index.name),
        NodeQuery::Hybrid { binding, .. } => {
            let n = k.map(tarn_search::arm_candidates);
            let candidates = n.map_or("all rows".to_string(), |n| format!("top {n} of each arm"));
            format!(
                "index={} + {} (bm25) fusion={} weights={}/{} candidates={candidates}",
                vector(n),
                binding.text.index.name,
                binding.fusion.name(),
                binding.weights.vector,
                binding.weights.text
            )
        }
        NodeQuery::Vector(_) => format!("index={}", vector(k)),
    }
}

/// The line EXPLAIN shows for the node, logical or physical.
fn describe(
    table: &str,
    column: &str,
    q: &NodeQuery,
    k: Option<usize>,
    index: &Option<(tarn_catalog::IndexId, String, usize)>,
) -> String {
    format!(
        "{table} {column} <#> {} k={} {}",
        describe_query(q),
        k.map_or("all".to_string(), |k| k.to_string()),
        describe_index(q, index, k)
    )
}

fn describe_query(q: &NodeQuery) -> String {
    match q {
        NodeQuery::Vector(QueryValue::Vector(v)) => format!("vector({})", v.len()),
        NodeQuery::Vector(QueryValue::Bag { values, dim }) => {
            format!("bag({}×{dim})", values.len() / (*dim).max(1))
        }
        NodeQuery::Text(b) => b.describe_query(),
        NodeQuery::Hybrid { binding, vector } => binding.describe(&match vector {
            Some(v) => describe_query(&NodeQuery::Vector(v.clone())),
            None => "NULL".into(),
        }),
    }
}

impl UserDefinedLogicalNodeCore for SearchNode {
    fn name(&self) -> &str {
        "TarnSearch"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        Vec::new()
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    /// None: the filters are resolved against the table, not against an input, and
    /// later rules must not rewrite them against a schema the node does not have.
    fn expressions(&self) -> Vec<Expr> {
        Vec::new()
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "TarnSearch: {}",
            describe(
                &self.table.to_string(),
                &self.column,
                &self.query,
                self.k,
                &self.index
            )
        )?;
        if !self.filters.is_empty() {
            let f_str: Vec<String> = self.filters.iter().map(|e| e.to_string()).collect();
            write!(f, " filter=[{}]", f_str.join(", "))?;
        }
        Ok(())
    }

    fn with_exprs_and_inputs(&self, exprs: Vec<Expr>, inputs: Vec<LogicalPlan>) -> DfResult<Self> {
        if !inputs.is_empty() || !exprs.is_empty() {
            return Err(DataFusionError::Internal(
                "TarnSearch has no inputs and no expressions".into(),
            ));
        }
        Ok(self.clone())
    }
}

/// The query planner that knows the search node.
#[derive(Debug)]
pub(crate) struct TarnQueryPlanner;

#[async_trait]
impl QueryPlanner for TarnQueryPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session_state: &dyn Session,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        DefaultPhysicalPlanner::with_extension_planners(vec![Arc::new(SearchPlanner)])
            .create_physical_plan(logical_plan, session_state)
            .await
    }
}

/// Plans [`SearchNode`] as [`SearchExec`].
#[derive(Debug)]
struct SearchPlanner;

#[async_trait]
impl ExtensionPlanner for SearchPlanner {
    async fn plan_extension(
        &self,
        _planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        _logical_inputs: &[&LogicalPlan],
        _physical_inputs: &[Arc<dyn ExecutionPlan>],
        session_state: &dyn Session,
        _planning_ctx: &PhysicalPlanningContext,
    ) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
        let Some(node) = node.as_any().downcast_ref::<SearchNode>() else {
            return Ok(None);
        };
        let provider = datafusion::datasource::source_as_provider(&node.source)?;
        let any: &dyn Any = provider.as_ref();
        let Some(table) = any.downcast_ref::<EngineTable>() else {
            return Err(DataFusionError::Internal(
                "TarnSearch over a table that is not Tarn's".into(),
            ));
        };
        let table = Arc::new(table.clone());
        let full = table.table_schema();
        let df_schema = DFSchema::try_from_qualified_schema(node.table.clone(), &full)?;
        let filter = match conjunction(node.filters.clone()) {
            Some(e) => {
                let e = session_state.create_physical_expr(e, &df_schema)?;
                // Lazy AND/OR where a side can fail, as in every other filter (lazy_fallible.rs).
                Some(
                    crate::datafusion_ext::plan::lazy_fallible::guard(&e, df_schema.as_arrow())?
                        .unwrap_or(e),
                )
            }
            None => None,
        };
        let column = table.column_id(&node.column).ok_or_else(|| {
            DataFusionError::Plan(format!("column \"{}\" does not exist", node.column))
        })?;
        let schema: SchemaRef = Arc::new(node.schema.as_arrow().clone());
        Ok(Some(Arc::new(SearchExec {
            table,
            projection: node.projection.clone(),
            properties: properties_for(&schema),
            schema,
            filter,
            column,
            query: node.query.clone(),
            k: node.k,
            table_name: node.table.to_string(),
            column_name: node.column.clone(),
            index: node.index.clone(),
            metrics: ExecutionPlanMetricsSet::new(),
        })))
    }
}

/// The physical search: one partition, the ranked rows in one batch.
#[derive(Debug, Clone)]
pub struct SearchExec {
    table: Arc<EngineTable>,
    projection: Option<Vec<usize>>,
    schema: SchemaRef,
    filter: Option<Arc<dyn PhysicalExpr>>,
    column: tarn_catalog::ColumnId,
    query: NodeQuery,
    k: Option<usize>,
    table_name: String,
    column_name: String,
    index: Option<(tarn_catalog::IndexId, String, usize)>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

/// One partition, emitted whole when the search is done.
fn properties_for(schema: &SchemaRef) -> Arc<PlanProperties> {
    Arc::new(PlanProperties::new(
        EquivalenceProperties::new(schema.clone()),
        Partitioning::UnknownPartitioning(1),
        EmissionType::Final,
        Boundedness::Bounded,
    ))
}

impl SearchExec {
    /// Runs the search: the ranked rows, projected.
    fn run(&self) -> DfResult<RecordBatch> {
        let filter = self.filter.as_ref().map(|f| BlockFilter {
            table: &self.table,
            expr: f.clone(),
        });
        let k = self.k.unwrap_or(usize::MAX);
        let filter = filter.as_ref().map(|f| f as &dyn RowFilter);
        let ranked = match &self.query {
            NodeQuery::Vector(query) => {
                let req = SearchRequest {
                    column: self.column,
                    query,
                    k,
                    filter,
                    index: self.index.as_ref().map(|(id, _, ef)| IndexUse {
                        id: *id,
                        ef_search: *ef,
                    }),
                };
                let (ranked, stats) = tarn_search::top_k_with_stats(self.table.version(), &req)
                    .map_err(search_error)?;
                for (name, n) in [
                    ("graph_segments", stats.graph_segments),
                    ("exact_segments", stats.exact_segments),
                    ("small_filtered_sets", stats.small_sets),
                    ("graph_fallbacks", stats.fallbacks),
                ] {
                    MetricBuilder::new(&self.metrics)
                        .global_counter(name)
                        .add(n);
                }
                ranked
            }
            NodeQuery::Text(b) => match b.prepared()? {
                Some(search) => search.top_k(&b.version, k, filter).map_err(search_error)?,
                // A NULL query scores every row NULL: the first k rows by row id.
                None => tarn_search::unscored_top_k(&b.version, k, filter).map_err(search_error)?,
            },
            NodeQuery::Hybrid { binding, vector } => {
                let text = binding.text.prepared()?;
                let req = tarn_search::HybridRequest {
                    vector_column: binding.vector_column,
                    vector: vector.as_ref(),
                    vector_index: self.index.as_ref().map(|(id, _, ef)| IndexUse {
                        id: *id,
                        ef_search: (*ef).max(tarn_search::arm_candidates(k.min(1 << 20))),
                    }),
                    text: text.as_deref(),
                    weights: binding.weights,
                    fusion: binding.fusion,
                    k,
                    filter,
                };
                let (ranked, fuser) =
                    tarn_search::hybrid_top_k(&binding.text.version, &req).map_err(search_error)?;
                // The scores shown above the node are normalized as it ranked.
                binding.set_fuser(fuser);
                ranked.into_iter().map(|(s, _)| s).collect()
            }
        };
        let ids: Vec<u64> = ranked.iter().map(|s| s.id).collect();
        let batches = self
            .table
            .rows_in_order(&ids, self.projection.as_deref(), self.schema.clone())
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        Ok(concat_batches(&self.schema, &batches)?)
    }
}

/// A physical predicate evaluated on whole blocks of the table.
struct BlockFilter<'a> {
    table: &'a EngineTable,
    expr: Arc<dyn PhysicalExpr>,
}

impl RowFilter for BlockFilter<'_> {
    fn block_mask(
        &self,
        chunk: &Chunk,
        live: Option<&BooleanBuffer>,
    ) -> tarn_search::Result<Option<BooleanBuffer>> {
        let run = || -> DfResult<Option<BooleanBuffer>> {
            let all = self.table.full_batch(chunk)?;
            // Only live rows are evaluated; the mask is scattered back to positions.
            let batch = match live {
                Some(m) => datafusion::arrow::compute::filter_record_batch(
                    &all,
                    &BooleanArray::new(m.clone(), None),
                )?,
                None => all.clone(),
            };
            let out = self.expr.evaluate(&batch)?.into_array(batch.num_rows())?;
            let Some(b) = out.as_any().downcast_ref::<BooleanArray>() else {
                return Err(DataFusionError::Plan(format!(
                    "WHERE must be boolean, not {}",
                    out.data_type()
                )));
            };
            // NULL counts as false.
            let mask = match datafusion::arrow::array::Array::nulls(b) {
                Some(n) => b.values() & n.inner(),
                None => b.values().clone(),
            };
            let Some(live) = live else {
                return Ok(Some(mask));
            };
            let mut full = vec![false; all.num_rows()];
            for (dst, pass) in live.set_indices().zip(mask.iter()) {
                full[dst] = pass;
            }
            Ok(Some(BooleanBuffer::from(full)))
        };
        run().map_err(|e| tarn_search::Error::Filter(Box::new(e)))
    }
}

impl DisplayAs for SearchExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "SearchExec: {}",
            describe(
                &self.table_name,
                &self.column_name,
                &self.query,
                self.k,
                &self.index
            )
        )?;
        if let Some(p) = &self.filter {
            write!(f, " filter={p}")?;
        }
        // An index whose files do not cover every sealed segment yet (a build under
        // way or cut short): those segments are read exactly.
        let ids = self
            .index
            .iter()
            .map(|(id, name, _)| (*id, name.clone()))
            .chain(match &self.query {
                NodeQuery::Text(b) => Some((b.index.id, b.index.name.clone())),
                NodeQuery::Hybrid { binding, .. } => {
                    Some((binding.text.index.id, binding.text.index.name.clone()))
                }
                NodeQuery::Vector(_) => None,
            });
        for (id, name) in ids {
            let sealed: Vec<_> = self
                .table
                .version()
                .segments()
                .iter()
                .filter(|s| !s.segment().in_memory())
                .map(|s| s.segment().index(id).is_some())
                .collect();
            let done = sealed.iter().filter(|d| **d).count();
            if done < sealed.len() {
                write!(
                    f,
                    " ({name} building: {done} of {} segments indexed, the others read exactly)",
                    sealed.len()
                )?;
            }
        }
        Ok(())
    }
}

impl ExecutionPlan for SearchExec {
    fn name(&self) -> &str {
        "SearchExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        match &self.filter {
            Some(p) => f(p),
            None => Ok(TreeNodeRecursion::Continue),
        }
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if children.is_empty() {
            Ok(self)
        } else {
            Err(DataFusionError::Internal(
                "SearchExec has no children".into(),
            ))
        }
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "SearchExec has one partition, not {partition}"
            )));
        }
        // A clone shares the metrics EXPLAIN ANALYZE reads.
        let this = self.clone();
        // The search reads and scores blocks: off the async threads.
        let stream = futures::stream::once(async move {
            tokio::task::spawn_blocking(move || this.run())
                .await
                .map_err(|e| DataFusionError::ExecutionJoin(Box::new(e)))?
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            stream,
        )))
    }
}
