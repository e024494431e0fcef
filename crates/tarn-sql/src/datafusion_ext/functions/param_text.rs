//! Large text parameters, bound once per statement instead of once per reference.
//!
//! A text parameter binds as a text literal (SPEC §4.6), and DataFusion copies a
//! literal wherever it copies the expression that holds it: the planner's rules, the
//! names it gives expressions (`length(Utf8("…"))` holds the whole text) and the
//! constants it folds. For a 60 MB text that came to about 650 MB per reference, none of
//! it counted anywhere; ten references took a host past 6 GB. So a text parameter whose
//! copies would weigh [`BIG_TEXT`] or more (its length times its references) binds as
//! `engine_param_text(n)`, which names it by number: the simplifier replaces the call
//! with a function holding the statement's one copy of the text (shared, never copied
//! by the planner), read from the statement's view, and each batch that evaluates it
//! makes its value once, as a literal's evaluation does.
//!
//! Both functions are volatile, so that the constant folder does not turn them back
//! into a literal; a filter on such a parameter is then not pushed into a scan, which
//! only a statement with a text this large pays for.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result as DfResult, ScalarValue};
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use crate::datafusion_ext::context::read_view::STATEMENT_VIEW;

/// The function's name.
pub(crate) const FUNCTION: &str = "engine_param_text";

/// Bytes of copies (a text's length times its references) from which a text parameter
/// binds by number: below it, a literal costs the planner less than a call.
pub(crate) const BIG_TEXT: usize = 64 << 10;

/// `engine_param_text(n)`: as the statement binds it (`value` `None`, before it is
/// simplified), or simplified, holding the text itself, shared by every copy of the
/// expression. Two are equal when they hold the same text (the same allocation: a
/// comparison or hash must not read 60 MB).
#[derive(Debug)]
pub(crate) struct ParamText {
    signature: Signature,
    value: Option<Arc<str>>,
}

impl PartialEq for ParamText {
    fn eq(&self, other: &Self) -> bool {
        match (&self.value, &other.value) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (a, b) => a.is_none() && b.is_none(),
        }
    }
}

impl Eq for ParamText {}

impl std::hash::Hash for ParamText {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.value
            .as_ref()
            .map(|v| Arc::as_ptr(v) as *const u8 as usize)
            .hash(state);
    }
}

impl ParamText {
    pub(crate) fn new() -> Self {
        ParamText {
            signature: Signature::exact(vec![DataType::Int64], Volatility::Volatile),
            value: None,
        }
    }
}

/// The parameter number of `engine_param_text(n)`'s arguments.
fn number(args: &[Expr]) -> Option<usize> {
    match args {
        [Expr::Literal(ScalarValue::Int64(Some(n)), _)] => usize::try_from(*n).ok(),
        _ => None,
    }
}

impl ScalarUDFImpl for ParamText {
    fn name(&self) -> &str {
        FUNCTION
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        match &self.value {
            // Each reference makes its copy (87 ms for 60 MB): a statement of many
            // references looks at its deadline and its caller before each, so that
            // 1,600 of them stop at the timeout or a disconnect, not after 140 s.
            Some(v) => {
                crate::datafusion_ext::context::deadline::check()?;
                Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(
                    v.to_string(),
                ))))
            }
            // Every plan is simplified before it runs, and a call a statement writes
            // itself is refused when it is parsed (`ast/unsupported.rs`): a call that
            // still comes here names no parameter the statement binds.
            None => Err(crate::error::bad_request(format!(
                "{FUNCTION}(n) stands for the statement's large text parameter $n; \
                 this statement binds no such parameter"
            ))),
        }
    }

    fn simplify(&self, args: Vec<Expr>, _info: &SimplifyContext) -> DfResult<ExprSimplifyResult> {
        if self.value.is_some() {
            return Ok(ExprSimplifyResult::Original(args));
        }
        let Some(n) = number(&args) else {
            return Ok(ExprSimplifyResult::Original(args));
        };
        let value = STATEMENT_VIEW
            .try_with(|v| v.bound.texts.get(n.wrapping_sub(1)).cloned().flatten())
            .ok()
            .flatten();
        let Some(value) = value else {
            return Ok(ExprSimplifyResult::Original(args));
        };
        Ok(ExprSimplifyResult::Simplified(Expr::ScalarFunction(
            datafusion::logical_expr::expr::ScalarFunction::new_udf(
                Arc::new(ScalarUDF::new_from_impl(ParamText {
                    signature: self.signature.clone(),
                    value: Some(value),
                })),
                args,
            ),
        )))
    }
}

/// The bytes of the text `udf` holds, when it is a bound text parameter.
pub(crate) fn bound_len(udf: &ScalarUDF) -> Option<usize> {
    udf.inner()
        .downcast_ref::<ParamText>()
        .and_then(|p| p.value.as_ref())
        .map(|v| v.len())
}

/// The bytes of the bound text parameters in `e` when `e` reads nothing else that
/// varies by row (no column, subquery, aggregate or window): such an expression (a
/// `btrim($1)`) is a constant the size of its texts, which the folder no longer makes a
/// literal, so the rules that size wide constants must see through it.
pub(crate) fn constant_text_bytes(e: &Expr) -> Option<usize> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    let mut bytes = 0usize;
    let mut constant = true;
    let _ = e.apply(|e| {
        match e {
            Expr::ScalarFunction(f) => {
                if let Some(n) = bound_len(&f.func) {
                    bytes = bytes.saturating_add(n);
                }
            }
            Expr::Literal(..)
            | Expr::Alias(_)
            | Expr::BinaryExpr(_)
            | Expr::Cast(_)
            | Expr::TryCast(_)
            | Expr::Not(_)
            | Expr::Negative(_)
            | Expr::Like(_)
            | Expr::SimilarTo(_)
            | Expr::IsNull(_)
            | Expr::IsNotNull(_)
            | Expr::Case(_)
            | Expr::Between(_)
            | Expr::InList(_) => {}
            _ => {
                constant = false;
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    (constant && bytes > 0).then_some(bytes)
}

/// [`constant_text_bytes`] for a planned expression.
pub(crate) fn constant_text_bytes_physical(
    e: &Arc<dyn datafusion::physical_expr::PhysicalExpr>,
) -> Option<usize> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::physical_expr::ScalarFunctionExpr;
    use datafusion::physical_expr::expressions::Column;
    let mut bytes = 0usize;
    let mut constant = true;
    let _ = e.apply(|e| {
        // Leaves are literals (the parameter's call keeps its number as one); a
        // column, or a call of no arguments (`random()`), varies by row.
        if e.downcast_ref::<Column>().is_some() || e.children().is_empty() && !is_literal(e) {
            constant = false;
            return Ok(TreeNodeRecursion::Stop);
        }
        if let Some(n) = e
            .downcast_ref::<ScalarFunctionExpr>()
            .and_then(|f| bound_len(f.fun()))
        {
            bytes = bytes.saturating_add(n);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    (constant && bytes > 0).then_some(bytes)
}

fn is_literal(e: &Arc<dyn datafusion::physical_expr::PhysicalExpr>) -> bool {
    e.downcast_ref::<datafusion::physical_expr::expressions::Literal>()
        .is_some()
}
