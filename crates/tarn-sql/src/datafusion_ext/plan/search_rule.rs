//! The top-k rule: `ORDER BY <#> … DESC [LIMIT k]` over one engine table becomes a
//! search node that ranks the rows itself (SPEC §5: `DESC NULLS LAST`, then row id),
//! for vectors, bags and text (BM25, bound to the statement's snapshot by the planner).
//!
//! Before (after DataFusion's own rules; the limit pushed into the sort):
//!
//! ```text
//! Limit: skip=0, fetch=10
//!   Sort: score DESC NULLS FIRST, fetch=10
//!     Projection: t.id, engine_similarity(t.e, [..]) AS score
//!       Filter: t.cat = Utf8("a")
//!         TableScan: t projection=[id, e, cat], partial_filters=[t.cat = Utf8("a")]
//! ```
//!
//! After:
//!
//! ```text
//! Limit: skip=0, fetch=10
//!   Projection: t.id, engine_similarity(t.e, [..]) AS score
//!     TarnSearch: t e <#> vector(384) k=10 filter=[t.cat = Utf8("a")]
//! ```
//!
//! The sort key is followed down through projections and subquery aliases to the
//! scan, and every filter on the way moves into the node (resolved to the table's
//! columns), so the node never returns fewer rows than `min(k, matching rows)`. Any
//! other shape (joins, aggregates, a second sort key, ascending order, a query that
//! is not a constant) is left to DataFusion's exact plan.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, Result as DfResult};
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::{
    Expr, Extension, LogicalPlan, Projection, Sort, SubqueryAlias, TableScan,
};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

use crate::datafusion_ext::functions::{hybrid, similarity, text_search};
use crate::datafusion_ext::plan::search_exec::{NodeQuery, SearchNode};
use crate::datafusion_ext::provider::EngineTable;

/// Replaces `Sort(<#> DESC)` over a filtered scan with a [`SearchNode`].
#[derive(Debug, Default)]
pub struct SearchRule;

impl OptimizerRule for SearchRule {
    fn name(&self) -> &str {
        "tarn_search"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::TopDown)
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> DfResult<Transformed<LogicalPlan>> {
        let LogicalPlan::Sort(sort) = &plan else {
            return Ok(Transformed::no(plan));
        };
        match search_plan(sort)? {
            Some(new) => Ok(Transformed::yes(new)),
            None => Ok(Transformed::no(plan)),
        }
    }
}

/// Replaces the columns of `e` by the expressions `map` gives them.
fn substitute(e: Expr, map: &HashMap<Column, Expr>) -> DfResult<Expr> {
    e.transform(|e| {
        if let Expr::Column(c) = &e
            && let Some(r) = map.get(c)
        {
            return Ok(Transformed::new(r.clone(), true, TreeNodeRecursion::Jump));
        }
        Ok(Transformed::no(e))
    })
    .map(|t| t.data)
}

/// The sort key and the filters met so far, in terms of the node below `map`'s.
fn substitute_all(
    key: Expr,
    filters: Vec<Expr>,
    map: &HashMap<Column, Expr>,
) -> DfResult<(Expr, Vec<Expr>)> {
    let filters = filters
        .into_iter()
        .map(|f| substitute(f, map))
        .collect::<DfResult<_>>()?;
    Ok((substitute(key, map)?, filters))
}

/// Whether `e` can be evaluated block by block by the search node: no subqueries, no
/// aggregates or windows, nothing volatile — unless `in_row_order`: a NULL query, whose
/// node walks the rows by row id and evaluates the filter once for each row it reaches
/// until it has k, just as a filter under a sort would (so `WHERE random() < 0.5 ORDER
/// BY e <#> NULL DESC LIMIT k` keeps its rows in row id order, SPEC §5). A ranked search
/// evaluates its filter on the candidates it visits, so a volatile one stays with
/// DataFusion's plan there.
fn evaluable(e: &Expr, in_row_order: bool) -> bool {
    let mut ok = true;
    let _ = e.apply(|e| {
        match e {
            Expr::ScalarSubquery(_)
            | Expr::Exists(_)
            | Expr::InSubquery(_)
            | Expr::AggregateFunction(_)
            | Expr::WindowFunction(_)
            | Expr::OuterReferenceColumn(..)
            | Expr::Placeholder(_)
            | Expr::GroupingSet(_) => ok = false,
            // A large text parameter is volatile only so that it is not folded into a
            // literal (`functions::param_text`): it is the statement's constant.
            Expr::ScalarFunction(f)
                if !in_row_order
                    && f.func.signature().volatility
                        == datafusion::logical_expr::Volatility::Volatile
                    && f.func.name() != crate::datafusion_ext::functions::param_text::FUNCTION =>
            {
                ok = false
            }
            _ => {}
        }
        Ok(if ok {
            TreeNodeRecursion::Continue
        } else {
            TreeNodeRecursion::Stop
        })
    });
    ok
}

/// The plan with the search node, or `None` when the shape does not fit.
fn search_plan(sort: &Sort) -> DfResult<Option<LogicalPlan>> {
    let [first] = sort.expr.as_slice() else {
        return Ok(None);
    };
    // NULLS FIRST is left only where the statement wrote it (score_nulls_last.rs); the
    // node always ranks NULLs last.
    if first.asc || first.nulls_first {
        return Ok(None);
    }
    let mut key = first.expr.clone();
    let mut filters: Vec<Expr> = Vec::new();
    // Nodes kept above the search node, top first.
    let mut path: Vec<&LogicalPlan> = Vec::new();
    let mut node = sort.input.as_ref();
    let scan: &TableScan = loop {
        match node {
            LogicalPlan::Projection(p) => {
                let map: HashMap<Column, Expr> = p
                    .schema
                    .columns()
                    .into_iter()
                    .zip(p.expr.iter().map(|e| e.clone().unalias()))
                    .collect();
                (key, filters) = substitute_all(key, filters, &map)?;
                path.push(node);
                node = p.input.as_ref();
            }
            LogicalPlan::SubqueryAlias(a) => {
                let map: HashMap<Column, Expr> = a
                    .schema
                    .columns()
                    .into_iter()
                    .zip(a.input.schema().columns().into_iter().map(Expr::Column))
                    .collect();
                (key, filters) = substitute_all(key, filters, &map)?;
                path.push(node);
                node = a.input.as_ref();
            }
            LogicalPlan::Filter(f) => {
                filters.push(f.predicate.clone());
                node = f.input.as_ref();
            }
            LogicalPlan::TableScan(scan) => break scan,
            _ => return Ok(None),
        }
    };
    if scan.fetch.is_some() {
        return Ok(None);
    }
    let Ok(provider) = source_as_provider(&scan.source) else {
        return Ok(None);
    };
    let any: &dyn std::any::Any = provider.as_ref();
    let Some(table) = any.downcast_ref::<EngineTable>() else {
        return Ok(None);
    };
    if table.restricted() || !table.def().engine {
        return Ok(None);
    }
    // The key: engine_similarity(<column of this table>, <constant>).
    let Expr::ScalarFunction(f) = key.clone().unalias() else {
        return Ok(None);
    };
    if f.func.name() != similarity::FUNCTION {
        return Ok(None);
    }
    let schema = table.table_schema();
    let Some(Expr::Column(col)) = f.args.first() else {
        return Ok(None);
    };
    let Ok(field) = schema.field_with_name(&col.name) else {
        return Ok(None);
    };
    if col.relation.as_ref().is_some_and(|r| r != &scan.table_name) {
        return Ok(None);
    }
    let call = Expr::ScalarFunction(f.clone());
    if let Some(h) = hybrid::binding_of(&call) {
        // Hybrid: (vector column, text column, vector query) of this table.
        let [Expr::Column(v), Expr::Column(t), Expr::Literal(q, _)] = f.args.as_slice() else {
            return Ok(None);
        };
        let own_col = |c: &Column| c.relation.as_ref().is_none_or(|r| r == &scan.table_name);
        if h.text.table != table.def().id
            || !own_col(v)
            || !own_col(t)
            || table.column_id(&v.name) != Some(h.vector_column)
            || table.column_id(&t.name) != Some(h.text.column)
        {
            return Ok(None);
        }
        // A NULL vector or text makes that arm NULL for every row; the other still ranks.
        let vector = similarity::planned_query(&h.vector_field, q)?;
        let index = h
            .vector_index
            .as_ref()
            .map(|i| (i.id, i.name.clone(), table.ef_search(i)));
        return finish(
            sort,
            scan,
            table,
            path,
            filters,
            v.name.clone(),
            NodeQuery::Hybrid { binding: h, vector },
            index,
            false,
        );
    }
    let (query, index, unscored) = match text_search::binding_of(&call) {
        // Text: bound to this table's snapshot at planning; a NULL query scores every
        // row NULL, and the node returns them by row id.
        Some(b) => {
            if b.table != table.def().id || table.column_id(&col.name) != Some(b.column) {
                return Ok(None);
            }
            let index = Some((b.index.id, b.index.name.clone(), 0));
            let unscored = b.query.is_none();
            (NodeQuery::Text(b), index, unscored)
        }
        None => {
            let [_, Expr::Literal(q, _)] = f.args.as_slice() else {
                return Ok(None);
            };
            // A NULL query scores every row NULL: the node still returns them by row id.
            let planned = match similarity::planned_query(field, q)? {
                None if q.is_null() => similarity::null_query(field),
                other => other,
            };
            let Some(query) = planned else {
                return Ok(None);
            };
            let index = table
                .vector_index(&col.name)
                .map(|i| (i.id, i.name.clone(), table.ef_search(i)));
            (NodeQuery::Vector(query), index, q.is_null())
        }
    };
    finish(
        sort,
        scan,
        table,
        path,
        filters,
        col.name.clone(),
        query,
        index,
        unscored,
    )
}

/// The plan with the search node in place of `scan` (`filters` moved into it) and the
/// kept nodes of `path` rebuilt over it; `None` when a filter cannot move (`unscored`:
/// the query is NULL, see [`evaluable`]).
#[allow(clippy::too_many_arguments)]
fn finish(
    sort: &Sort,
    scan: &TableScan,
    table: &EngineTable,
    path: Vec<&LogicalPlan>,
    mut filters: Vec<Expr>,
    column: String,
    query: NodeQuery,
    index: Option<(tarn_catalog::IndexId, String, usize)>,
    unscored: bool,
) -> DfResult<Option<LogicalPlan>> {
    let schema = table.table_schema();
    for f in &scan.filters {
        if !filters.contains(f) {
            filters.push(f.clone());
        }
    }
    let own = |c: &Column| {
        c.relation.as_ref().is_none_or(|r| r == &scan.table_name)
            && schema.field_with_name(&c.name).is_ok()
    };
    if !filters
        .iter()
        .all(|f| evaluable(f, unscored) && f.column_refs().into_iter().all(own))
    {
        return Ok(None);
    }
    let search = LogicalPlan::Extension(Extension {
        node: Arc::new(SearchNode {
            table: scan.table_name.clone(),
            source: scan.source.clone(),
            projection: scan.projection.clone(),
            schema: scan.projected_schema.clone(),
            filters,
            column,
            query,
            k: sort.fetch,
            index,
        }),
    });
    // Rebuild the kept nodes over the search node, bottom up.
    let mut plan = search;
    for kept in path.into_iter().rev() {
        plan = match kept {
            LogicalPlan::Projection(p) => LogicalPlan::Projection(Projection::try_new_with_schema(
                p.expr.clone(),
                Arc::new(plan),
                p.schema.clone(),
            )?),
            LogicalPlan::SubqueryAlias(a) => {
                LogicalPlan::SubqueryAlias(SubqueryAlias::try_new(Arc::new(plan), a.alias.clone())?)
            }
            _ => return Ok(None),
        };
    }
    Ok(Some(plan))
}
