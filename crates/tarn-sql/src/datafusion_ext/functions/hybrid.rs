//! Hybrid `<#>` in SQL (SPEC §5):
//! `(vec_col, text_col) <#> engine_hybrid_record(vector, 'text' [, w_vector, w_text
//! [, 'minmax' | 'softmax' | 'rrf']])` is the fused score;
//! `… <#> engine_hybrid_scores(…)` (same arguments) is the struct `{vector, text,
//! fused}`, each arm's exact score and the fused one.
//!
//! `engine_hybrid_record` and `engine_hybrid_scores` are placeholders the planner
//! replaces: with both columns known, `<#>` becomes a function bound to the statement's
//! snapshot ([`HybridBinding`]: the text arm's [`TextBinding`], the vector column, the
//! weights and the fusion). Each arm is normalized over the candidates: under the
//! search node (`ORDER BY … DESC LIMIT k`), the union of each arm's best rows among
//! those passing WHERE; elsewhere, every live row of the table. The node records the
//! normalization it used in the binding, and every hybrid expression of the statement
//! with the same arguments shares the binding, so the scores a query shows are the
//! ones it ranked by.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, Float32Array, StructArray};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Fields};
use datafusion::common::{DFSchema, Result as DfResult, ScalarValue};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};
use parking_lot::Mutex;
use tarn_catalog::{ColumnId, IndexDef};
use tarn_search::{ArmScores, Fuser, Fusion, HybridWeights, QueryValue};

use crate::datafusion_ext::context::read_view::STATEMENT_VIEW;
use crate::datafusion_ext::functions::similarity::{
    FUNCTION, Kind, META_COLUMN_ID, META_TABLE_ID, planned_query, search_error,
};
use crate::datafusion_ext::functions::text_search::{TextBinding, constant_text, text_binding};

/// The placeholder of the fused score.
pub const RECORD: &str = "engine_hybrid_record";
/// The placeholder of the arms' scores and the fused one.
pub const SCORES: &str = "engine_hybrid_scores";

use crate::error::bad_request as bad;

/// What a hybrid `<#>` yields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Output {
    /// The fused score (`engine_hybrid_record`).
    Fused,
    /// `{vector, text, fused}` (`engine_hybrid_scores`).
    Scores,
}

/// A hybrid `<#>` bound to the statement's snapshot of its table.
pub(crate) struct HybridBinding {
    /// The text arm.
    pub text: Arc<TextBinding>,
    /// The vector column.
    pub vector_column: ColumnId,
    /// Its name.
    pub vector_name: String,
    /// The vector column's field (what query checks read).
    pub vector_field: FieldRef,
    /// Its vector index, if any.
    pub vector_index: Option<IndexDef>,
    /// Arm weights.
    pub weights: HybridWeights,
    /// Normalization.
    pub fusion: Fusion,
    /// The normalization the search node ranked by, once it ran; otherwise the one over
    /// every live row, once computed.
    fuser: Mutex<Option<Arc<Fuser>>>,
}

impl std::fmt::Debug for HybridBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HybridBinding")
            .field("text", &self.text)
            .field("vector", &self.vector_name)
            .field("fusion", &self.fusion)
            .finish()
    }
}

impl HybridBinding {
    /// Records the normalization the search node ranked by.
    pub fn set_fuser(&self, f: Fuser) {
        *self.fuser.lock() = Some(Arc::new(f));
    }

    /// The normalization in force: the search node's, or (computed once) the one over
    /// every live row.
    fn fuser(&self, query: Option<&QueryValue>) -> DfResult<Arc<Fuser>> {
        let mut slot = self.fuser.lock();
        if let Some(f) = slot.as_ref() {
            return Ok(f.clone());
        }
        // A NULL arm query makes that arm NULL for every row; the other is still
        // normalized over every live row.
        let text = self.text.prepared()?;
        let req = tarn_search::HybridRequest {
            vector_column: self.vector_column,
            vector: query,
            vector_index: None,
            text: text.as_deref(),
            weights: self.weights,
            fusion: self.fusion,
            k: usize::MAX,
            filter: None,
        };
        let f = tarn_search::hybrid_top_k(&self.text.version, &req)
            .map_err(search_error)?
            .1;
        let f = Arc::new(f);
        *slot = Some(f.clone());
        Ok(f)
    }

    /// How EXPLAIN shows the query.
    pub fn describe(&self, vector: &str) -> String {
        format!(
            "hybrid({vector}, {}, {}/{} {})",
            self.text.describe_query(),
            self.weights.vector,
            self.weights.text,
            self.fusion.name()
        )
    }
}

/// A value as a message shows it: at most 40 characters of its text, without
/// DataFusion's type wrapper.
fn short_value(v: &ScalarValue) -> String {
    let text = v.to_string();
    match text.char_indices().nth(40) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}

/// A constant number argument.
fn number(e: &Expr, what: &str) -> DfResult<f64> {
    let v = match e {
        Expr::Literal(v, _) => v.clone(),
        Expr::Cast(c) => return number(&c.expr, what),
        Expr::Negative(inner) => return number(inner, what).map(|x| -x),
        _ => {
            return Err(bad(format!(
                "the {what} of a hybrid search must be a number in [0, 1] written as a constant, not an expression"
            )));
        }
    };
    let f = v
        .cast_to(&DataType::Float64)
        .ok()
        .and_then(|s| match s {
            ScalarValue::Float64(Some(x)) => Some(x),
            _ => None,
        })
        .ok_or_else(|| {
            bad(format!(
                "the {what} of a hybrid search must be a number in [0, 1], not {}",
                short_value(&v)
            ))
        })?;
    Ok(f)
}

/// Plans `left <#> engine_hybrid_record(args…)` (or `…_scores`).
pub(crate) fn plan(left: &Expr, right: &ScalarFunction, schema: &DFSchema) -> DfResult<Expr> {
    let output = if right.func.name() == SCORES {
        Output::Scores
    } else {
        Output::Fused
    };
    let usage = format!(
        "hybrid search is (vector_column, text_column) <#> {}(vector, 'text' [, w_vector, w_text [, 'minmax' | 'softmax' | 'rrf']])",
        right.func.name()
    );
    // `ROW(v, t)` is the pair under an alias.
    let mut pair = left;
    while let Expr::Alias(a) = pair {
        pair = &a.expr;
    }
    let (vcol, tcol) = match pair {
        Expr::ScalarFunction(f) if f.func.name() == "struct" && f.args.len() == 2 => {
            (&f.args[0], &f.args[1])
        }
        // What the left side is, in the statement's words (not DataFusion's rendering).
        Expr::ScalarFunction(f) if f.func.name() == "struct" => {
            return Err(bad(format!(
                "{usage}: the left side is a row of {} columns, not two",
                f.args.len()
            )));
        }
        other => {
            return Err(bad(format!(
                "{usage}: the left side is {}, not a row of two columns",
                super::text_search::not_constant(other)
            )));
        }
    };
    let args = &right.args;
    if !(2..=5).contains(&args.len()) || args.len() == 3 {
        return Err(bad(usage));
    }
    let weights = if args.len() >= 4 {
        HybridWeights::new(
            number(&args[2], "vector weight")?,
            number(&args[3], "text weight")?,
        )
        .map_err(bad)?
    } else {
        HybridWeights::default()
    };
    let fusion = match args.get(4) {
        None => Fusion::default(),
        Some(e) => match constant_text(e) {
            Some(Some(name)) => Fusion::from_name(&name).ok_or_else(|| {
                bad(format!(
                    "unknown fusion \"{name}\" (use 'minmax', 'softmax' or 'rrf')"
                ))
            })?,
            _ => {
                return Err(bad(format!(
                    "the fusion of a hybrid search is 'minmax', 'softmax' or 'rrf', not {}",
                    super::text_search::not_constant(e)
                )));
            }
        },
    };
    let (_, vfield) = vcol.to_field(schema)?;
    let (_, tfield) = tcol.to_field(schema)?;
    let ids = |f: &Field| {
        let m = f.metadata();
        Some((
            m.get(META_TABLE_ID)?.parse::<u64>().ok()?,
            m.get(META_COLUMN_ID)?.parse::<ColumnId>().ok()?,
        ))
    };
    let (Some((vt, vc)), Some((tt, tc))) = (ids(&vfield), ids(&tfield)) else {
        return Err(bad(format!(
            "{usage}: both sides must be columns of one table created USING engine, not {} and {}",
            super::text_search::not_constant(vcol),
            super::text_search::not_constant(tcol)
        )));
    };
    if vt != tt {
        return Err(bad(format!(
            "a hybrid search scores two columns of one table, not {} and {}",
            super::text_search::not_constant(vcol),
            super::text_search::not_constant(tcol)
        )));
    }
    let view = STATEMENT_VIEW
        .try_with(|v| v.clone())
        .map_err(|_| DataFusionError::Internal("hybrid search outside a statement".into()))?;
    let table = view
        .catalog
        .table_by_id(vt)
        .ok_or_else(|| DataFusionError::Internal("hybrid search on a dropped table".into()))?;
    let vdef = table
        .column_by_id(vc)
        .ok_or_else(|| DataFusionError::Internal("hybrid search on a dropped column".into()))?;
    if !matches!(vdef.ty, tarn_catalog::SqlType::Vector { .. }) {
        return Err(bad(format!(
            "{usage}: column \"{}\" is not a FLOAT4[] vector column",
            vdef.name
        )));
    }
    // The text arm is a TEXT column (else the BM25 message would ask for a bm25 index on
    // a vector column).
    if let Some(tdef) = table.column_by_id(tc)
        && !matches!(
            tdef.ty,
            tarn_catalog::SqlType::Text | tarn_catalog::SqlType::Varchar(_)
        )
    {
        return Err(bad(format!(
            "{usage}: column \"{}\" is {}, not a TEXT column",
            tdef.name,
            tdef.ty.sql_name()
        )));
    }
    let Some(query_text) = constant_text(&args[1]) else {
        return Err(bad(format!(
            "the text of a hybrid search must be a constant string, not {}",
            super::text_search::not_constant(&args[1])
        )));
    };
    let text = text_binding(&view, vt, tc, query_text)?;
    let vector_index = view
        .catalog
        .indexes_of(vt)
        .into_iter()
        .find(|i| i.column == vc && tarn_search::is_vector_index(i))
        .cloned();
    let key = format!(
        "hybrid/{vt}/{vc}/{tc}/{:?}/{}/{}/{}/{}",
        text.query,
        weights.vector,
        weights.text,
        fusion.name(),
        args[0]
    );
    let binding = view.shared(key, || HybridBinding {
        text: text.clone(),
        vector_column: vc,
        vector_name: vdef.name.clone(),
        vector_field: vfield.clone(),
        vector_index,
        weights,
        fusion,
        fuser: Mutex::new(None),
    });
    // A constant: one query for the whole statement (a column would score every row
    // against whichever row's vector came first).
    if !args[0].column_refs().is_empty() {
        return Err(bad(format!(
            "the vector of a hybrid search must be a constant (a literal, array text or a parameter), not {}",
            super::text_search::not_constant(&args[0])
        )));
    }
    // The vector may be PostgreSQL array text, as on the right of a vector `<#>`.
    let vector_arg = crate::datafusion_ext::functions::similarity::query_literal(
        args[0].clone(),
        Some(Kind::Vector),
    )?;
    let udf = Arc::new(ScalarUDF::new_from_impl(HybridSimilarity {
        binding,
        output,
        signature: Signature::any(3, Volatility::Stable),
    }));
    Ok(Expr::ScalarFunction(ScalarFunction::new_udf(
        udf,
        vec![vcol.clone(), tcol.clone(), vector_arg],
    )))
}

/// The bound hybrid `<#>`: `(vector column, text column, vector query)`.
#[derive(Debug)]
pub(crate) struct HybridSimilarity {
    pub binding: Arc<HybridBinding>,
    pub output: Output,
    signature: Signature,
}

impl PartialEq for HybridSimilarity {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.binding, &other.binding) && self.output == other.output
    }
}
impl Eq for HybridSimilarity {}
impl Hash for HybridSimilarity {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (Arc::as_ptr(&self.binding) as *const () as usize).hash(state);
        self.output.hash(state);
    }
}

/// The binding of a fused-score hybrid `<#>` call, if `e` is one.
pub(crate) fn binding_of(e: &Expr) -> Option<Arc<HybridBinding>> {
    let Expr::ScalarFunction(f) = e else {
        return None;
    };
    f.func
        .inner()
        .downcast_ref::<HybridSimilarity>()
        .filter(|h| h.output == Output::Fused)
        .map(|h| h.binding.clone())
}

fn scores_type() -> DataType {
    DataType::Struct(Fields::from(vec![
        Field::new("vector", DataType::Float32, true),
        Field::new("text", DataType::Float32, true),
        Field::new("fused", DataType::Float32, true),
    ]))
}

impl ScalarUDFImpl for HybridSimilarity {
    fn name(&self) -> &str {
        match self.output {
            Output::Fused => FUNCTION,
            Output::Scores => SCORES,
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(match self.output {
            Output::Fused => DataType::Float32,
            Output::Scores => scores_type(),
        })
    }

    fn return_field_from_args(&self, _args: ReturnFieldArgs) -> DfResult<FieldRef> {
        Ok(Arc::new(Field::new(
            self.name(),
            self.return_type(&[])?,
            true,
        )))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let n = args.number_rows;
        let [vectors, texts, query] = args.args.as_slice() else {
            return Err(bad(format!("{FUNCTION} takes three arguments")));
        };
        let vectors: ArrayRef = vectors.to_array(n)?;
        let texts: ArrayRef = texts.to_array(n)?;
        let q = match query {
            ColumnarValue::Scalar(s) => s.clone(),
            ColumnarValue::Array(a) if a.is_empty() => ScalarValue::Null,
            ColumnarValue::Array(a) => ScalarValue::try_from_array(a, 0)?,
        };
        let b = &self.binding;
        let query = planned_query(&b.vector_field, &q)?;
        let fuser = b.fuser(query.as_ref())?;
        let text = b.text.prepared()?;
        let mut v: Vec<Option<f32>> = vec![None; n];
        if let Some(q) = &query {
            tarn_search::score_rows(&vectors, q, 0..n, |i, s| v[i] = s).map_err(search_error)?;
        }
        let mut arms = Vec::with_capacity(n);
        let mut m = text.as_ref().map(|t| t.matcher());
        for (i, vs) in v.into_iter().enumerate() {
            let t = match (&text, m.as_mut()) {
                (Some(ts), Some(m)) => ts.score(m, tarn_search::text_at(&texts, i)),
                _ => None,
            };
            arms.push(ArmScores {
                vector: vs,
                text: t,
            });
        }
        let fused: Float32Array = arms.iter().map(|a| fuser.fuse(*a)).collect();
        Ok(ColumnarValue::Array(match self.output {
            Output::Fused => Arc::new(fused),
            Output::Scores => {
                let vector: Float32Array = arms.iter().map(|a| a.vector).collect();
                let text: Float32Array = arms.iter().map(|a| a.text).collect();
                let DataType::Struct(fields) = scores_type() else {
                    return Err(DataFusionError::Internal("scores type".into()));
                };
                Arc::new(StructArray::try_new(
                    fields,
                    vec![Arc::new(vector), Arc::new(text), Arc::new(fused)],
                    None,
                )?)
            }
        }))
    }
}

/// `engine_hybrid_record(…)` / `engine_hybrid_scores(…)` as written: only meaningful on
/// the right of `(vector_column, text_column) <#>`, where the planner replaces them.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Placeholder {
    name: &'static str,
    signature: Signature,
}

impl ScalarUDFImpl for Placeholder {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Null)
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        Err(bad(format!(
            "{}(…) is the right side of (vector_column, text_column) <#> {}(vector, 'text' [, w_vector, w_text [, fusion]])",
            self.name, self.name
        )))
    }
}

/// The two placeholders, to register.
pub(crate) fn placeholders() -> Vec<ScalarUDF> {
    [RECORD, SCORES]
        .into_iter()
        .map(|name| {
            ScalarUDF::new_from_impl(Placeholder {
                name,
                signature: Signature::variadic_any(Volatility::Immutable),
            })
        })
        .collect()
}
