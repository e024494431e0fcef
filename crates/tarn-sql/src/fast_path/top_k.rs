//! The search fast path: `SELECT cols, e <#> q [AS s] FROM "ws"."t" ORDER BY s DESC
//! LIMIT k [OFFSET n]` answered straight from `tarn-search`, without DataFusion's
//! planner. A vector search at default width, or a BM25 search of a small table, takes a
//! few hundred microseconds; the planner's floor (about 200 µs a statement, more for a
//! query vector of hundreds of literals) would otherwise double it.
//!
//! Only statements whose answer is certain to equal the planned search node's take this
//! path: one engine table; no WHERE, or a conjunction of `integer column op integer`
//! (evaluated block by block as the search's row filter); plain column projections and
//! `<#>` scores of a FLOAT4 vector column with a constant query, or of a text column with
//! a `bm25` index with a constant string; one descending sort key
//! that is such a score (or its alias); a literal LIMIT. It runs before parameters are
//! bound: the query may be `$n` (a JSON array or array text), read straight from the
//! parameter. The query is checked by the same function the planner uses; when that
//! check fails the statement goes through the planner, which reports the error.
//! Everything else returns `None` and goes through the planner too.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, Float32Array, Int64Array, ListArray};
use datafusion::arrow::buffer::{BooleanBuffer, OffsetBuffer};
use datafusion::arrow::compute::{cast, kernels::cmp};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::common::ScalarValue;
use datafusion::sql::sqlparser::ast::{
    self, BinaryOperator, Expr, LimitClause, OrderByKind, SelectItem, Statement, Value,
};
use serde_json::Value as Json;
use tarn_catalog::{IndexDef, SqlType, TableDef};
use tarn_search::{Fusion, HybridWeights, IndexUse, QueryValue, SearchRequest};
use tarn_storage::TableVersion;

use crate::Result;
use crate::ast::ident::normalize;
use crate::ast::key_predicate::{
    column_resolver, plain_wildcard, signed_value, single_table_select, target,
};
use crate::datafusion_ext::functions::similarity::{OPERATOR, planned_query, search_error};
use crate::datafusion_ext::provider::{key_rows, missing_array, table_schema};
use crate::rewrite::names::expr_name;
use crate::statement::result::StatementResult;
use crate::statement::settings::Settings;
use crate::statement::shared::Shared;

/// Rows a fast search may return; larger LIMITs go through the planner (which bounds
/// them by the rows that exist).
const MAX_FAST_K: u64 = 10_000;

/// Searches that read at most this many vector values run on the calling (async)
/// thread: about a millisecond of work, what DataFusion's own operators do between
/// awaits. A hop to the blocking pool and back costs two thread wake-ups, which on a
/// small virtual machine can be several times the search itself.
const INLINE_VALUES: usize = 4 << 20;

/// Vector values a top-k over `version` reads, roughly: every live row of segments
/// searched exactly, and for a graph `ef · 2m` neighbours (m = 16).
fn search_cost(version: &TableVersion, index: Option<IndexUse>, dim: usize) -> usize {
    version
        .segments()
        .iter()
        .map(|s| {
            let graph =
                index.filter(|u| !s.segment().in_memory() && s.segment().index(u.id).is_some());
            match graph {
                Some(u) => u.ef_search.saturating_mul(32),
                None => s.live_count(),
            }
        })
        .fold(0usize, |a, rows| a.saturating_add(rows.saturating_mul(dim)))
}

/// Texts a search may analyze on the spot (rows of the memtable and of segments
/// whose index is not built yet) and still run on the calling thread.
const INLINE_TEXTS: usize = 2_000;

/// What ranks the rows.
enum Ranker {
    /// Vector similarity, through the column's graph if it has one.
    Vector {
        query: QueryValue,
        index: Option<IndexUse>,
    },
    /// BM25 through the column's `bm25` index.
    Text {
        index: tarn_catalog::IndexDef,
        text: String,
        missing: Option<String>,
    },
    /// Hybrid: the vector arm as [`Ranker::Vector`], the text arm as [`Ranker::Text`]
    /// over `text_column`.
    Hybrid {
        query: QueryValue,
        index: Option<IndexUse>,
        text_column: tarn_catalog::ColumnId,
        text_index: tarn_catalog::IndexDef,
        text: String,
        missing: Option<String>,
        weights: HybridWeights,
        fusion: Fusion,
    },
}

/// The text of a text `<#>` query: a string literal, or a `$n` parameter holding a
/// JSON string; `None` for anything else (NULL included), which the planner answers.
fn query_text(e: &Expr, params: &[Json]) -> Option<String> {
    match e {
        Expr::Nested(inner) => query_text(inner, params),
        Expr::Value(v) if matches!(v.value, Value::Placeholder(_)) => {
            param(e, params)?.as_str().map(str::to_string)
        }
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(t) => Some(t.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// One output column: a stored column, or the score.
enum Output {
    Column(usize),
    Score,
}

/// `col <#> q` of this table: the column's index in `def.columns` and the query.
struct Score<'a> {
    column: usize,
    /// The text column of a hybrid `(column, text_column) <#> …`.
    text_column: Option<usize>,
    query: &'a Expr,
}

impl PartialEq for Score<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.column == other.column
            && self.text_column == other.text_column
            && self.query == other.query
    }
}

fn score_of<'a>(e: &'a Expr, column: &dyn Fn(&Expr) -> Option<usize>) -> Option<Score<'a>> {
    match e {
        Expr::Nested(inner) => score_of(inner, column),
        Expr::BinaryOp {
            left,
            op: BinaryOperator::Custom(op),
            right,
        } if op == OPERATOR => match left.as_ref() {
            Expr::Tuple(pair) => match pair.as_slice() {
                [v, t] => Some(Score {
                    column: column(v)?,
                    text_column: Some(column(t)?),
                    query: right,
                }),
                _ => None,
            },
            _ => Some(Score {
                column: column(left)?,
                text_column: None,
                query: right,
            }),
        },
        _ => None,
    }
}

/// The arguments of `engine_hybrid_record(vector, 'text' [, w_vector, w_text [,
/// fusion]])` when each is one the planner would accept as is: the vector (as
/// [`query_literal`] reads it), the text, the weights and the fusion. `None` for
/// anything else (`engine_hybrid_scores`, NULLs, weights out of range: the planner's).
fn hybrid_args(e: &Expr, params: &[Json]) -> Option<(ScalarValue, String, HybridWeights, Fusion)> {
    let Expr::Function(f) = e else {
        return None;
    };
    if !f
        .name
        .to_string()
        .eq_ignore_ascii_case(crate::datafusion_ext::functions::hybrid::RECORD)
        || f.filter.is_some()
        || f.over.is_some()
        || !f.within_group.is_empty()
        || !matches!(f.parameters, ast::FunctionArguments::None)
    {
        return None;
    }
    let ast::FunctionArguments::List(list) = &f.args else {
        return None;
    };
    if list.duplicate_treatment.is_some() || !list.clauses.is_empty() {
        return None;
    }
    let args: Vec<&Expr> = list
        .args
        .iter()
        .map(|a| match a {
            ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => Some(e),
            _ => None,
        })
        .collect::<Option<_>>()?;
    if !(2..=5).contains(&args.len()) || args.len() == 3 {
        return None;
    }
    let vector = query_literal(args[0], params)?;
    let text = query_text(args[1], params)?;
    let weight = |e: &Expr| match signed_value(e)? {
        (false, Value::Number(n, _)) => n.parse::<f64>().ok(),
        _ => None,
    };
    let weights = match args.get(2..4) {
        Some([v, t]) => HybridWeights::new(weight(v)?, weight(t)?).ok()?,
        _ => HybridWeights::default(),
    };
    let fusion = match args.get(4) {
        None => Fusion::default(),
        Some(Expr::Value(v)) => match &v.value {
            Value::SingleQuotedString(name) => Fusion::from_name(name)?,
            _ => return None,
        },
        Some(_) => return None,
    };
    Some((vector, text, weights, fusion))
}

/// The value bound to `e` when it is a `$n` parameter.
fn param<'a>(e: &Expr, params: &'a [Json]) -> Option<&'a Json> {
    let Expr::Value(v) = e else {
        return None;
    };
    let Value::Placeholder(p) = &v.value else {
        return None;
    };
    let n: usize = p.strip_prefix('$')?.parse().ok()?;
    params.get(n.checked_sub(1)?)
}

/// A literal count (LIMIT or OFFSET).
fn count(e: &Expr) -> Option<u64> {
    match signed_value(e)? {
        (false, Value::Number(n, _)) => n.parse().ok(),
        _ => None,
    }
}

/// The query vector as the planner reads it: PostgreSQL array text (`'{…}'`, typed or
/// not) or `ARRAY[numbers]` (what a JSON-array parameter binds to), optionally cast to
/// `float4[]`/`real[]`. Numbers are read as float64 and rounded to float32, as the
/// planner's cast does.
fn query_literal(e: &Expr, params: &[Json]) -> Option<ScalarValue> {
    let items: Vec<f64> = match e {
        Expr::Nested(inner) => return query_literal(inner, params),
        Expr::Cast {
            expr,
            data_type: ast::DataType::Array(ast::ArrayElemTypeDef::SquareBracket(inner, None)),
            format: None,
            ..
        } if matches!(inner.as_ref(), ast::DataType::Float4 | ast::DataType::Real) => {
            return query_literal(expr, params);
        }
        // `$n`: the parameter itself, not the expression binding would make of it (a
        // vector of hundreds of numbers costs far more to bind than to search).
        Expr::Value(v) if matches!(v.value, Value::Placeholder(_)) => match param(e, params)? {
            Json::Array(items) => items
                .iter()
                .map(|v| v.as_f64().and_then(exact_f64))
                .collect::<Option<_>>()?,
            Json::String(text) => array_text_numbers(text)?,
            _ => return None,
        },
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(text) => array_text_numbers(text)?,
            _ => return None,
        },
        Expr::Array(a) => a
            .elem
            .iter()
            .map(|e| match signed_value(e)? {
                (neg, Value::Number(n, _)) => {
                    let x = exact_f64(n.parse().ok()?)?;
                    Some(if neg { -x } else { x })
                }
                _ => None,
            })
            .collect::<Option<_>>()?,
        _ => return None,
    };
    // Built as one array (what `ScalarValue::new_list` would make, without a
    // `ScalarValue` per element).
    let values = Float32Array::from_iter_values(items.into_iter().map(|x| x as f32));
    Some(ScalarValue::List(Arc::new(ListArray::new(
        Arc::new(Field::new_list_field(DataType::Float32, true)),
        OffsetBuffer::from_lengths([values.len()]),
        Arc::new(values),
        None,
    ))))
}

/// `x` when float64 holds it exactly as an integer would be: the planner casts an
/// integer straight to float32, and through float64 one beyond 2^53 would round twice
/// (such queries go through the planner).
fn exact_f64(x: f64) -> Option<f64> {
    (x.abs() <= (1u64 << 53) as f64).then_some(x)
}

/// The numbers of one-dimensional PostgreSQL array text; `None` for anything else
/// (NULL elements, nesting, integers beyond 2^53: the planner reports or reads those).
fn array_text_numbers(text: &str) -> Option<Vec<f64>> {
    use crate::ast::array_text::{ArrayText, parse_array_text};
    let ArrayText::List(items) = parse_array_text(text).ok()? else {
        return None;
    };
    items
        .iter()
        .map(|i| match i {
            ArrayText::Item(Some(s)) => s.trim().parse::<f64>().ok().and_then(exact_f64),
            _ => None,
        })
        .collect()
}

/// A comparison of the fast path's WHERE: `integer column op integer`.
struct Cond {
    /// Index in `def.columns`.
    column: usize,
    op: BinaryOperator,
    value: i64,
}

/// The WHERE `e` as a conjunction of [`Cond`]s, or `None` for anything else (which the
/// planner answers): `AND` of `col op n` where `col` is an INT2/INT4/INT8 column, `op`
/// one of `= <> < <= > >=` and `n` an integer literal or a `$n` JSON integer within the
/// column type's range (so that no cast or overflow rule of the planner's can differ).
fn conditions(
    e: &Expr,
    column: &dyn Fn(&Expr) -> Option<usize>,
    def: &TableDef,
    params: &[Json],
    out: &mut Vec<Cond>,
) -> Option<()> {
    match e {
        Expr::Nested(inner) => conditions(inner, column, def, params, out),
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            conditions(left, column, def, params, out)?;
            conditions(right, column, def, params, out)
        }
        Expr::BinaryOp { left, op, right } => {
            if !matches!(
                op,
                BinaryOperator::Eq
                    | BinaryOperator::NotEq
                    | BinaryOperator::Lt
                    | BinaryOperator::LtEq
                    | BinaryOperator::Gt
                    | BinaryOperator::GtEq
            ) {
                return None;
            }
            let c = column(left)?;
            let range = match def.columns[c].ty {
                SqlType::Int2 => i16::MIN as i64..=i16::MAX as i64,
                SqlType::Int4 => i32::MIN as i64..=i32::MAX as i64,
                SqlType::Int8 => i64::MIN..=i64::MAX,
                _ => return None,
            };
            let value = integer(right, params)?;
            range.contains(&value).then(|| {
                out.push(Cond {
                    column: c,
                    op: op.clone(),
                    value,
                })
            })
        }
        _ => None,
    }
}

/// An integer literal (no fraction or exponent), or a `$n` parameter holding a JSON
/// integer.
fn integer(e: &Expr, params: &[Json]) -> Option<i64> {
    if let Expr::Value(v) = e
        && matches!(v.value, Value::Placeholder(_))
    {
        return param(e, params)?.as_i64();
    }
    match signed_value(e)? {
        (neg, Value::Number(n, _)) => {
            let x: i64 = n.parse().ok()?;
            if neg { x.checked_neg() } else { Some(x) }
        }
        _ => None,
    }
}

/// The fast path's WHERE, evaluated a block at a time as the planned filter would:
/// a NULL (or a column added after the block was written and read as its default)
/// compares as the planner reads it, and NULL never passes.
struct Conds {
    def: TableDef,
    schema: SchemaRef,
    conds: Vec<Cond>,
}

impl tarn_search::RowFilter for Conds {
    fn block_mask(
        &self,
        chunk: &tarn_storage::Chunk,
        live: Option<&BooleanBuffer>,
    ) -> tarn_search::Result<Option<BooleanBuffer>> {
        let n = chunk.num_rows();
        let internal = |e: &dyn std::fmt::Display| tarn_search::Error::Internal(e.to_string());
        // Arrow's comparison kernels, a condition at a time; NULL never passes.
        let mut pass: Option<BooleanBuffer> = live.cloned();
        for c in &self.conds {
            let col = &self.def.columns[c.column];
            let array = match chunk.column(col.id) {
                Some(a) => a.clone(),
                None => missing_array(col, self.schema.field(c.column).data_type(), n)
                    .map_err(|e| internal(&e))?,
            };
            let array = cast(&array, &DataType::Int64).map_err(|e| internal(&e))?;
            let value = Int64Array::new_scalar(c.value);
            let cmp = match c.op {
                BinaryOperator::Eq => cmp::eq(&array, &value),
                BinaryOperator::NotEq => cmp::neq(&array, &value),
                BinaryOperator::Lt => cmp::lt(&array, &value),
                BinaryOperator::LtEq => cmp::lt_eq(&array, &value),
                BinaryOperator::Gt => cmp::gt(&array, &value),
                _ => cmp::gt_eq(&array, &value),
            }
            .map_err(|e| internal(&e))?;
            let bits = match cmp.nulls() {
                Some(valid) => cmp.values() & valid.inner(),
                None => cmp.values().clone(),
            };
            pass = Some(match pass {
                Some(p) => &p & &bits,
                None => bits,
            });
        }
        Ok(pass)
    }
}

/// The top-k of a fast search, before projection.
struct Plan<'a> {
    def: &'a TableDef,
    outputs: Vec<(Output, String)>,
    score: Score<'a>,
    /// The WHERE, if any.
    conds: Vec<Cond>,
    limit: u64,
    offset: u64,
}

/// The shape of a fast search (see the module docs) of `q`, whose SELECT `sel` reads
/// `def` (as [`single_table_select`] found), or `None`.
fn plan<'a>(
    q: &'a ast::Query,
    sel: &'a ast::Select,
    def: &'a TableDef,
    qualifier: &str,
    params: &[Json],
) -> Option<Plan<'a>> {
    let column = column_resolver(def, qualifier);
    let mut conds = Vec::new();
    if let Some(w) = &sel.selection {
        conditions(w, &column, def, params, &mut conds)?;
    }
    let mut outputs: Vec<(Output, String)> = Vec::new();
    let mut scores: Vec<(Score<'a>, Option<String>)> = Vec::new();
    for item in &sel.projection {
        match item {
            SelectItem::Wildcard(opts) if plain_wildcard(opts) => {
                outputs.extend(
                    def.columns
                        .iter()
                        .enumerate()
                        .map(|(i, c)| (Output::Column(i), c.name.clone())),
                );
            }
            SelectItem::UnnamedExpr(e) => match (column(e), score_of(e, &column)) {
                (Some(i), _) => outputs.push((Output::Column(i), expr_name(e))),
                (None, Some(s)) => {
                    outputs.push((Output::Score, expr_name(e)));
                    scores.push((s, None));
                }
                _ => return None,
            },
            SelectItem::ExprWithAlias { expr, alias } => {
                match (column(expr), score_of(expr, &column)) {
                    (Some(i), _) => outputs.push((Output::Column(i), alias.value.clone())),
                    (None, Some(s)) => {
                        outputs.push((Output::Score, alias.value.clone()));
                        scores.push((s, Some(normalize(alias))));
                    }
                    _ => return None,
                }
            }
            _ => return None,
        }
    }
    // Names the planner would refuse (the same name twice, or a score named like one
    // of the table's columns: "ambiguous") are its to report.
    let mut names: Vec<String> = outputs.iter().map(|(_, n)| n.to_lowercase()).collect();
    let scored_names: Vec<&String> = outputs
        .iter()
        .filter(|(o, _)| matches!(o, Output::Score))
        .map(|(_, n)| n)
        .collect();
    if scored_names
        .iter()
        .any(|n| def.columns.iter().any(|c| c.name.eq_ignore_ascii_case(n)))
    {
        return None;
    }
    names.sort();
    if names.windows(2).any(|w| w[0] == w[1]) {
        return None;
    }
    // One sort key, descending, NULLs last (or unsaid: SPEC §5 makes it last).
    let order = q.order_by.as_ref()?;
    if order.interpolate.is_some() {
        return None;
    }
    let OrderByKind::Expressions(keys) = &order.kind else {
        return None;
    };
    let [key] = keys.as_slice() else {
        return None;
    };
    if key.options.asc != Some(false)
        || key.options.nulls_first == Some(true)
        || key.with_fill.is_some()
    {
        return None;
    }
    let score = match &key.expr {
        // An output alias (not also a column's name, which would be ambiguous).
        Expr::Identifier(id) if column(&key.expr).is_none() => {
            let name = normalize(id);
            let (s, _) = scores
                .iter()
                .find(|(_, a)| a.as_deref() == Some(name.as_str()))?;
            Score {
                column: s.column,
                text_column: s.text_column,
                query: s.query,
            }
        }
        e => score_of(e, &column)?,
    };
    // Every score in the SELECT list must be the sorted one (its values are the
    // search's scores).
    if scores.iter().any(|(s, _)| *s != score) {
        return None;
    }
    let (limit, offset) = match q.limit_clause.as_ref()? {
        LimitClause::LimitOffset {
            limit: Some(limit),
            offset,
            limit_by,
        } if limit_by.is_empty() => (
            count(limit)?,
            match offset {
                Some(o) => count(&o.value)?,
                None => 0,
            },
        ),
        _ => return None,
    };
    if limit.checked_add(offset)? > MAX_FAST_K || outputs.is_empty() {
        return None;
    }
    Some(Plan {
        def,
        outputs,
        score,
        conds,
        limit,
        offset,
    })
}

impl Shared {
    /// Answers `stmt` through `tarn-search` if it is a plain top-k search (see the
    /// module docs).
    pub(crate) async fn try_fast_search(
        &self,
        org: &str,
        stmt: &Statement,
        params: &[Json],
        settings: &Settings,
    ) -> Result<Option<StatementResult>> {
        let Statement::Query(q) = stmt else {
            return Ok(None);
        };
        if q.order_by.is_none() || q.limit_clause.is_none() {
            return Ok(None);
        }
        let Some((sel, name, alias)) = single_table_select(q) else {
            return Ok(None);
        };
        let catalog = self.db.catalog();
        let Some((def, qualifier)) = target(&catalog, org, name, alias) else {
            return Ok(None);
        };
        if !def.engine {
            return Ok(None);
        }
        let Some(mut plan) = plan(q, sel, def, &qualifier, params) else {
            return Ok(None);
        };
        let col = &def.columns[plan.score.column];
        let Some(store) = self.db.table(def.id) else {
            return Ok(None);
        };
        let version = store.snapshot();
        let k = (plan.limit + plan.offset) as usize;
        let schema = table_schema(def, false);
        let stored_rows: usize = version
            .segments()
            .iter()
            .map(|s| s.segment().num_rows())
            .sum();
        let text_index = catalog
            .indexes_of(def.id)
            .into_iter()
            .find(|i| i.column == col.id && tarn_search::is_text_index(i))
            .cloned();
        let vector_index = |settings_k: usize| {
            catalog
                .indexes_of(def.id)
                .into_iter()
                .find(|i| i.column == col.id && tarn_search::is_vector_index(i))
                .map(|i| IndexUse {
                    id: i.id,
                    ef_search: tarn_search::ef_search(i, settings.ef_search).max(settings_k),
                })
        };
        let ranker = if let Some(tc) = plan.score.text_column {
            // Hybrid: a FLOAT4 vector column, a text column with a bm25 index, and
            // arguments the planner would take as they are.
            let tdef = &def.columns[tc];
            let Some(text_index) = catalog
                .indexes_of(def.id)
                .into_iter()
                .find(|i| i.column == tdef.id && tarn_search::is_text_index(i))
                .cloned()
            else {
                return Ok(None);
            };
            if !matches!(col.ty, SqlType::Vector { .. }) || tc == plan.score.column {
                return Ok(None);
            }
            let Some((literal, text, weights, fusion)) = hybrid_args(plan.score.query, params)
            else {
                return Ok(None);
            };
            let field = schema.field(plan.score.column);
            let Ok(Some(query @ QueryValue::Vector(_))) = planned_query(field, &literal) else {
                return Ok(None);
            };
            Ranker::Hybrid {
                query,
                index: vector_index(tarn_search::arm_candidates(k.min(1 << 20))),
                text_column: tdef.id,
                text_index,
                text,
                missing: crate::datafusion_ext::functions::text_search::missing_text(tdef),
                weights,
                fusion,
            }
        } else if let Some(index) = text_index {
            // Text: a constant string (a NULL query, or anything else, is the
            // planner's).
            let Some(text) = query_text(plan.score.query, params) else {
                return Ok(None);
            };
            Ranker::Text {
                index,
                text,
                missing: crate::datafusion_ext::functions::text_search::missing_text(col),
            }
        } else {
            // FLOAT4 vectors only: other arrays get the planner's error (with its hint).
            if !matches!(col.ty, SqlType::Vector { .. }) {
                return Ok(None);
            }
            let field = schema.field(plan.score.column);
            let Some(literal) = query_literal(plan.score.query, params) else {
                return Ok(None);
            };
            // A query the planner would refuse (wrong dimension, …) is its to report.
            let Ok(Some(query @ QueryValue::Vector(_))) = planned_query(field, &literal) else {
                return Ok(None);
            };
            Ranker::Vector {
                query,
                index: vector_index(0),
            }
        };
        // A filter reads every stored block (checksumming and decoding it the first
        // time, vectors included) and can widen a graph walk far past `ef`: filtered
        // searches run inline only over tables small enough to scan whole. A text
        // search runs inline when few rows must be analyzed on the spot; a hybrid one
        // when both its arms would.
        let loose_texts = |index: &IndexDef| -> usize {
            version
                .segments()
                .iter()
                .filter(|s| s.segment().in_memory() || s.segment().index(index.id).is_none())
                .map(|s| s.live_count())
                .sum()
        };
        let text_inline = |index: &IndexDef| {
            loose_texts(index) <= INLINE_TEXTS
                && (plan.conds.is_empty() || stored_rows <= INLINE_TEXTS * 100)
        };
        let vector_inline = |index: Option<IndexUse>, dim: usize| {
            if plan.conds.is_empty() {
                search_cost(&version, index, dim) <= INLINE_VALUES
            } else {
                stored_rows.saturating_mul(dim + plan.conds.len()) <= INLINE_VALUES
            }
        };
        let inline = match &ranker {
            Ranker::Vector { query, index } => vector_inline(*index, query.dim()),
            Ranker::Hybrid {
                query,
                index,
                text_index,
                ..
            } => {
                // Besides its arms, a hybrid search scores every match of a long query
                // and reads the candidates' stored rows: inline only over a table
                // small enough to scan whole.
                vector_inline(*index, query.dim())
                    && text_inline(text_index)
                    && stored_rows.saturating_mul(query.dim() + 1) <= INLINE_VALUES
            }
            Ranker::Text { index, .. } => text_inline(index),
        };
        let (column, searched) = (col.id, version.clone());
        let filter = (!plan.conds.is_empty()).then(|| Conds {
            def: def.clone(),
            schema: schema.clone(),
            conds: std::mem::take(&mut plan.conds),
        });
        let search = move || {
            let filter = filter.as_ref().map(|f| f as &dyn tarn_search::RowFilter);
            match &ranker {
                Ranker::Vector { query, index } => {
                    let req = SearchRequest {
                        column,
                        query,
                        k,
                        filter,
                        index: *index,
                    };
                    tarn_search::top_k(&searched, &req)
                }
                Ranker::Text {
                    index,
                    text,
                    missing,
                } => tarn_search::TextSearch::prepare(
                    &searched,
                    column,
                    missing.as_deref(),
                    index,
                    text,
                )
                .and_then(|t| t.top_k(&searched, k, filter)),
                Ranker::Hybrid {
                    query,
                    index,
                    text_column,
                    text_index,
                    text,
                    missing,
                    weights,
                    fusion,
                } => tarn_search::TextSearch::prepare(
                    &searched,
                    *text_column,
                    missing.as_deref(),
                    text_index,
                    text,
                )
                .and_then(|t| {
                    let req = tarn_search::HybridRequest {
                        vector_column: column,
                        vector: Some(query),
                        vector_index: *index,
                        text: Some(&t),
                        weights: *weights,
                        fusion: *fusion,
                        k,
                        filter,
                    };
                    tarn_search::hybrid_top_k(&searched, &req)
                        .map(|(ranked, _)| ranked.into_iter().map(|(s, _)| s).collect())
                }),
            }
            .map_err(search_error)
        };
        let ranked = if inline {
            search()?
        } else {
            // Off the async threads, as the planned search node runs.
            tokio::task::spawn_blocking(search)
                .await
                .map_err(|e| crate::error::join_error(e, "search"))??
        };
        let ranked = &ranked[(plan.offset as usize).min(ranked.len())..];
        let ids: Vec<u64> = ranked.iter().map(|s| s.id).collect();

        // The stored columns, in ranked order; then the score column where it goes.
        let stored: Vec<usize> = plan
            .outputs
            .iter()
            .filter_map(|(o, _)| match o {
                Output::Column(i) => Some(*i),
                Output::Score => None,
            })
            .collect();
        let fields: Vec<Field> = plan
            .outputs
            .iter()
            .map(|(o, name)| match o {
                Output::Column(i) => schema.field(*i).clone().with_name(name),
                Output::Score => Field::new(name, DataType::Float32, true),
            })
            .collect();
        let out_schema = Arc::new(Schema::new(fields));
        let stored_schema = Arc::new(Schema::new(
            out_schema
                .fields()
                .iter()
                .zip(&plan.outputs)
                .filter(|(_, (o, _))| matches!(o, Output::Column(_)))
                .map(|(f, _)| f.as_ref().clone())
                .collect::<Vec<_>>(),
        ));
        let parts = key_rows(
            plan.def,
            &version,
            &ids,
            stored.iter().map(|&i| Some(i)).collect(),
            stored_schema.clone(),
        )?;
        // The rows count against query_memory here too (`LIMIT` far past k over a large
        // table returns every row): past it, the limit's 400 before they are copied again.
        let bytes: usize = parts.iter().map(crate::statement::txn::batch_bytes).sum();
        if bytes > self.limits.query_memory {
            return Err(crate::Error::BadRequest(format!(
                "query memory limit (query_memory) exceeded: the result rows take {bytes} bytes, \
                 the limit is {}",
                self.limits.query_memory
            )));
        }
        let stored_batch = datafusion::arrow::compute::concat_batches(&stored_schema, &parts)?;
        let scores: ArrayRef = Arc::new(Float32Array::from(
            ranked.iter().map(|s| s.score).collect::<Vec<_>>(),
        ));
        let mut next = 0;
        let columns: Vec<ArrayRef> = plan
            .outputs
            .iter()
            .map(|(o, _)| match o {
                Output::Column(_) => {
                    next += 1;
                    stored_batch.column(next - 1).clone()
                }
                Output::Score => scores.clone(),
            })
            .collect();
        let batch = RecordBatch::try_new_with_options(
            out_schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(ids.len())),
        )?;
        Ok(Some(StatementResult {
            columns: plan.outputs.into_iter().map(|(_, n)| n).collect(),
            schema: out_schema,
            batches: Some(vec![batch]),
            rows_affected: 0,
            notices: Vec::new(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ast::dialect::EngineDialect;
    use datafusion::sql::sqlparser::parser::Parser;
    use tarn_catalog::ColumnDef;

    fn def() -> TableDef {
        let col = |id, name: &str, ty| ColumnDef::plain(id, name, ty);
        TableDef {
            id: 1,
            org_id: "o".into(),
            workspace_id: "ws".into(),
            name: "t".into(),
            engine: true,
            columns: vec![
                col(1, "a", SqlType::Int2),
                col(2, "b", SqlType::Int8),
                col(3, "t", SqlType::Text),
            ],
            next_column_id: 4,
            unique_constraints: Vec::new(),
            created_at: tarn_catalog::Timestamp::default(),
        }
    }

    /// Which WHEREs the fast path reads itself (the rest go to the planner).
    #[test]
    fn only_integer_comparisons_in_range_are_read() {
        let def = def();
        let column = column_resolver(&def, "t");
        let params = [Json::from(7), Json::from(1.5), Json::from("3")];
        let read = |w: &str| {
            let sql = format!("SELECT 1 WHERE {w}");
            let stmt = Parser::parse_sql(&EngineDialect::default(), &sql)
                .unwrap()
                .remove(0);
            let Statement::Query(q) = stmt else { panic!() };
            let ast::SetExpr::Select(sel) = q.body.as_ref() else {
                panic!()
            };
            let mut out = Vec::new();
            conditions(
                sel.selection.as_ref().unwrap(),
                &column,
                &def,
                &params,
                &mut out,
            )
            .map(|_| out.iter().map(|c| (c.column, c.value)).collect::<Vec<_>>())
        };
        assert_eq!(read("a < 10"), Some(vec![(0, 10)]));
        assert_eq!(
            read("(a >= -32768 AND b <> $1) AND b = -9223372036854775807"),
            Some(vec![(0, -32768), (1, 7), (1, -9223372036854775807)])
        );
        for refused in [
            "a < 32768",
            "a < 1.5",
            "a < $2",
            "a < $3",
            "a < $4",
            "10 > a",
            "a < 1 OR b < 2",
            "NOT a < 1",
            "t = 'x'",
            "a IS NULL",
            "a < NULL",
            "a + 1 < 2",
            "b < 9223372036854775808",
            "true",
        ] {
            assert_eq!(read(refused), None, "{refused}");
        }
    }
}
