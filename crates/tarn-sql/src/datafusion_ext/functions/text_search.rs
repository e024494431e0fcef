//! Text `<#>` in SQL (SPEC §5): `text_col <#> 'query'` is the BM25 score of the row's
//! text over the table's live rows, 0 for rows matching no term, NULL for NULL text.
//!
//! A BM25 score depends on the whole table (document count, average length, document
//! frequencies), not only on the row, so the planner binds each text `<#>` to the
//! statement's snapshot of its table: [`TextBinding`] holds the snapshot, the column's
//! `bm25` index and the query, and prepares the statistics once ([`TextSearch`]), for
//! whichever needs them first — the search node ranking the table, or the bound
//! function scoring the rows it is given. Both score with the same weights, so a row
//! has one score however it was found.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Float32Array};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{DFSchema, Result as DfResult, ScalarValue};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};
use parking_lot::Mutex;
use tarn_catalog::{ColumnId, IndexDef, TableId};
use tarn_search::{TextSearch, text_at};
use tarn_storage::TableVersion;

use crate::datafusion_ext::context::read_view::{ReadView, STATEMENT_VIEW};
use crate::datafusion_ext::functions::similarity::{
    FUNCTION, META_COLUMN_ID, META_TABLE_ID, search_error,
};

use crate::error::bad_request as bad;

/// A text `<#>` bound to the statement's snapshot of its table.
pub(crate) struct TextBinding {
    /// The table, as `"ws"."t"` (for EXPLAIN and messages).
    pub table_name: String,
    /// The table.
    pub table: TableId,
    /// The scored column.
    pub column: ColumnId,
    /// Its name.
    pub column_name: String,
    /// The text of rows written before the column was added with a DEFAULT (blocks
    /// that lack it), as a scan reads them; `None` for NULL.
    pub missing: Option<String>,
    /// Its `bm25` index.
    pub index: IndexDef,
    /// The snapshot every score of the statement is computed on.
    pub version: Arc<TableVersion>,
    /// The query text; `None` for NULL (every score NULL).
    pub query: Option<String>,
    prepared: Mutex<Option<Arc<TextSearch>>>,
}

impl std::fmt::Debug for TextBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextBinding")
            .field("table", &self.table_name)
            .field("column", &self.column_name)
            .field("query", &self.query)
            .finish()
    }
}

impl TextBinding {
    /// The query prepared on the snapshot (statistics gathered once, on first use).
    /// `None` when the query is NULL.
    pub fn prepared(&self) -> DfResult<Option<Arc<TextSearch>>> {
        let Some(query) = &self.query else {
            return Ok(None);
        };
        let mut slot = self.prepared.lock();
        if let Some(p) = slot.as_ref() {
            return Ok(Some(p.clone()));
        }
        let p = Arc::new(
            TextSearch::prepare(
                &self.version,
                self.column,
                self.missing.as_deref(),
                &self.index,
                query,
            )
            .map_err(search_error)?,
        );
        *slot = Some(p.clone());
        Ok(Some(p))
    }

    /// How EXPLAIN shows the query.
    pub fn describe_query(&self) -> String {
        match &self.query {
            Some(q) => {
                let short: String = q.chars().take(40).collect();
                let more = if short.len() < q.len() { "…" } else { "" };
                format!("text({short:?}{more})")
            }
            None => "text(NULL)".into(),
        }
    }
}

/// The query text of a constant right side of text `<#>`: `Some(None)` for NULL,
/// `None` when it is not a constant string.
pub(crate) fn constant_text(e: &Expr) -> Option<Option<String>> {
    match e {
        Expr::Literal(
            ScalarValue::Utf8(s) | ScalarValue::LargeUtf8(s) | ScalarValue::Utf8View(s),
            _,
        ) => Some(s.clone()),
        Expr::Literal(ScalarValue::Null, _) => Some(None),
        Expr::Cast(c) => constant_text(&c.expr),
        // A constant expression (`'hel' || 'lo'`), folded as the optimizer would fold it.
        other => match crate::datafusion_ext::functions::const_array::fold_constant(other)? {
            ScalarValue::Utf8(s) | ScalarValue::LargeUtf8(s) | ScalarValue::Utf8View(s) => Some(s),
            ScalarValue::Null => Some(None),
            _ => None,
        },
    }
}

/// What a search argument that is not a constant is, in the words of a message
/// (DataFusion's rendering of it, `ws.h.body` or `engine_text_concat(Utf8("a"), …)`,
/// means nothing to the statement's author).
pub(crate) fn not_constant(e: &Expr) -> String {
    match e {
        Expr::Column(c) => format!("column \"{}\"", c.name),
        Expr::Cast(c) => not_constant(&c.expr),
        Expr::Alias(a) => not_constant(&a.expr),
        e if !e.column_refs().is_empty() => "an expression over the rows' columns".into(),
        e => match crate::datafusion_ext::functions::const_array::fold_constant(e) {
            // A constant of another type: shown when short (`5`), else by its type.
            Some(v) => {
                let shown = v.to_string();
                if shown.chars().count() <= 40 {
                    shown
                } else {
                    format!(
                        "a constant of type {}",
                        super::similarity::pg_type(&v.data_type())
                    )
                }
            }
            None => "an expression that is not constant (a volatile function or a subquery)".into(),
        },
    }
}

/// Plans `left <#> right` for a text `left`: the bound function when `left` is a column
/// of a table in the statement, `None` to leave it to the generic function (which
/// reports what is missing).
pub(crate) fn plan(left: &Expr, right: &Expr, schema: &DFSchema) -> DfResult<Option<Expr>> {
    let Ok((_, field)) = left.to_field(schema) else {
        return Ok(None);
    };
    let meta = field.metadata();
    let (Some(table), Some(column)) = (
        meta.get(META_TABLE_ID)
            .and_then(|v| v.parse::<TableId>().ok()),
        meta.get(META_COLUMN_ID)
            .and_then(|v| v.parse::<ColumnId>().ok()),
    ) else {
        return Ok(None);
    };
    let Ok(view) = STATEMENT_VIEW.try_with(|v| v.clone()) else {
        return Ok(None);
    };
    let Some(query) = constant_text(right) else {
        let name = view
            .catalog
            .table_by_id(table)
            .and_then(|d| d.column_by_id(column).map(|c| c.name.clone()))
            .unwrap_or_default();
        return Err(bad(format!(
            "the query of <#> on text column \"{name}\" must be a constant string (a literal or a parameter), not {}",
            not_constant(right)
        )));
    };
    let binding = text_binding(&view, table, column, query)?;
    let udf = Arc::new(ScalarUDF::new_from_impl(TextSimilarity {
        binding,
        signature: Signature::any(2, Volatility::Stable),
    }));
    Ok(Some(Expr::ScalarFunction(ScalarFunction::new_udf(
        udf,
        vec![left.clone(), right.clone()],
    ))))
}

/// The text a block written before `col` was added reads as (its `missing` value).
pub(crate) fn missing_text(col: &tarn_catalog::ColumnDef) -> Option<String> {
    col.missing
        .as_ref()
        .and_then(|v| v.as_str())
        .map(str::to_string)
}

/// The text binding of `column` of `table` for `query` in this statement (one per
/// column and query: expressions that say the same share it, and its statistics).
/// 400 unless the table is `USING engine` and the column has a `bm25` index.
pub(crate) fn text_binding(
    view: &ReadView,
    table: TableId,
    column: ColumnId,
    query: Option<String>,
) -> DfResult<Arc<TextBinding>> {
    let def = view
        .catalog
        .table_by_id(table)
        .ok_or_else(|| DataFusionError::Internal("text search on a dropped table".into()))?;
    let col = def
        .column_by_id(column)
        .ok_or_else(|| DataFusionError::Internal("text search on a dropped column".into()))?;
    let name = format!("\"{}\".\"{}\"", def.workspace_id, def.name);
    if !def.engine {
        return Err(bad(format!(
            "<#> needs a table created USING engine, and {name} is not (column \"{}\")",
            col.name
        )));
    }
    let Some(index) = view
        .catalog
        .indexes_of(table)
        .into_iter()
        .find(|i| i.column == column && tarn_search::is_text_index(i))
        .cloned()
    else {
        return Err(bad(format!(
            "<#> on text ranks with BM25, which needs a bm25 index on column \"{}\": CREATE INDEX ON {name} USING engine_index ({}) WITH (index_type = 'bm25')",
            col.name, col.name
        )));
    };
    let version = view
        .version(table)
        .ok_or_else(|| DataFusionError::Internal("text search on a dropped table".into()))?;
    let key = format!("text/{table}/{column}/{query:?}");
    Ok(view.shared(key, || TextBinding {
        table_name: name,
        table,
        column,
        column_name: col.name.clone(),
        missing: missing_text(col),
        index,
        version,
        query,
        prepared: Mutex::new(None),
    }))
}

/// `engine_similarity(text_col, 'query')` bound to a snapshot (see [`TextBinding`]).
#[derive(Debug)]
pub(crate) struct TextSimilarity {
    pub binding: Arc<TextBinding>,
    signature: Signature,
}

impl PartialEq for TextSimilarity {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.binding, &other.binding)
    }
}
impl Eq for TextSimilarity {}
impl Hash for TextSimilarity {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (Arc::as_ptr(&self.binding) as *const () as usize).hash(state);
    }
}

/// The binding of a text `<#>` call, if `e` is one.
pub(crate) fn binding_of(e: &Expr) -> Option<Arc<TextBinding>> {
    let Expr::ScalarFunction(f) = e else {
        return None;
    };
    f.func
        .inner()
        .downcast_ref::<TextSimilarity>()
        .map(|t| t.binding.clone())
}

impl ScalarUDFImpl for TextSimilarity {
    fn name(&self) -> &str {
        FUNCTION
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Float32)
    }

    fn return_field_from_args(&self, _args: ReturnFieldArgs) -> DfResult<FieldRef> {
        Ok(Arc::new(Field::new(FUNCTION, DataType::Float32, true)))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let n = args.number_rows;
        let Some(left) = args.args.first() else {
            return Err(bad(format!("{FUNCTION} takes two arguments")));
        };
        let texts: ArrayRef = left.to_array(n)?;
        let Some(search) = self.binding.prepared()? else {
            return Ok(ColumnarValue::Array(Arc::new(Float32Array::new_null(n))));
        };
        let mut m = search.matcher();
        let scores: Float32Array = (0..n)
            .map(|i| search.score(&mut m, text_at(&texts, i)))
            .collect();
        Ok(ColumnarValue::Array(Arc::new(scores)))
    }
}
