//! `x = ANY(array)` (and `x <> ALL(array)`) over a large constant array, such as a
//! parameter of a million ids.
//!
//! DataFusion plans `x = ANY(a)` as `array_has(a, x)`, and its simplifier turns a
//! constant `a` into `x IN (e1, e2, …)`: one expression per element, which every later
//! planning step walks, hashes and copies (a million elements took 15 s to plan in a
//! debug build); left as `array_has`, its execution copies the whole array once per
//! row. This rule gives each `array_has` call over a constant array its own function,
//! which keeps an array of more than [`LARGE`] elements whole through planning and
//! evaluates it with DataFusion's `IN` set, built once for the statement. Smaller
//! arrays are simplified as before.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result as DfResult, ScalarValue};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    ColumnarValue, Expr, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{Column, InListExpr};
use parking_lot::Mutex;

/// Elements above which a constant array stays whole (below, `IN (…)` of its
/// elements plans quickly and lets the optimizer reason about each one).
pub(crate) const LARGE: usize = 4096;

/// The analyzer rule: each `array_has` over a constant array gets an [`AnyOfLarge`].
#[derive(Debug)]
pub(crate) struct LargeAny;

impl AnalyzerRule for LargeAny {
    fn name(&self) -> &str {
        "tarn_large_any"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> DfResult<LogicalPlan> {
        plan.transform_up_with_subqueries(|plan| {
            plan.map_expressions(|e| {
                e.transform_up(|e| match e {
                    Expr::ScalarFunction(f)
                        if f.func.name() == "array_has"
                            && f.args.first().is_some_and(|a| a.column_refs().is_empty())
                            && f.func.inner().downcast_ref::<AnyOfLarge>().is_none() =>
                    {
                        let udf = ScalarUDF::new_from_impl(AnyOfLarge {
                            inner: f.func.clone(),
                            set: Mutex::new(None),
                        });
                        Ok(Transformed::yes(Expr::ScalarFunction(
                            ScalarFunction::new_udf(Arc::new(udf), f.args),
                        )))
                    }
                    other => Ok(Transformed::no(other)),
                })
            })
        })
        .map(|t| t.data)
    }
}

/// `array_has(constant array, x)` for one call site: the array's `IN` set, once built.
#[derive(Debug)]
pub(crate) struct AnyOfLarge {
    inner: Arc<ScalarUDF>,
    /// The array the set was built from (kept, so that its address names it) and the
    /// set over a one-column batch of the needle.
    set: Mutex<Option<(ScalarValue, Arc<InListExpr>)>>,
}

impl PartialEq for AnyOfLarge {
    fn eq(&self, other: &Self) -> bool {
        self.inner == other.inner
    }
}

impl Eq for AnyOfLarge {}

impl std::hash::Hash for AnyOfLarge {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.inner.hash(state);
    }
}

/// Whether two list values are the same array: the literal of one call site is handed
/// out again for each batch, so its address says so without comparing its elements.
fn same_array(a: &ScalarValue, b: &ScalarValue) -> bool {
    match (a, b) {
        (ScalarValue::List(x), ScalarValue::List(y)) => Arc::ptr_eq(x, y) || x == y,
        (ScalarValue::LargeList(x), ScalarValue::LargeList(y)) => Arc::ptr_eq(x, y) || x == y,
        _ => a == b,
    }
}

/// The elements of a one-row list literal.
fn elements(v: &ScalarValue) -> Option<ArrayRef> {
    match v {
        ScalarValue::List(l) if l.len() == 1 && l.is_valid(0) => Some(l.value(0)),
        ScalarValue::LargeList(l) if l.len() == 1 && l.is_valid(0) => Some(l.value(0)),
        _ => None,
    }
}

impl AnyOfLarge {
    /// `needle IN (haystack's elements)`, with the set built on the first call.
    fn evaluate(&self, haystack: &ScalarValue, needle: &ArrayRef) -> DfResult<Option<ArrayRef>> {
        let Some(values) = elements(haystack) else {
            return Ok(None);
        };
        let needle = if needle.data_type() == values.data_type() {
            needle.clone()
        } else {
            match datafusion::arrow::compute::cast(needle, values.data_type()) {
                Ok(n) => n,
                Err(_) => return Ok(None),
            }
        };
        let schema = Arc::new(Schema::new(vec![Field::new(
            "needle",
            values.data_type().clone(),
            true,
        )]));
        let set = {
            let mut cached = self.set.lock();
            match cached.as_ref() {
                Some((v, set)) if same_array(v, haystack) => set.clone(),
                _ => {
                    // A type the IN set does not take: the shared function answers.
                    let Ok(set) = InListExpr::try_new_from_array(
                        Arc::new(Column::new("needle", 0)),
                        values,
                        false,
                        &schema,
                    ) else {
                        return Ok(None);
                    };
                    let set = Arc::new(set);
                    *cached = Some((haystack.clone(), set.clone()));
                    set
                }
            }
        };
        let batch = RecordBatch::try_new(schema, vec![needle])?;
        Ok(Some(set.evaluate(&batch)?.into_array(batch.num_rows())?))
    }
}

impl ScalarUDFImpl for AnyOfLarge {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, args: &[DataType]) -> DfResult<DataType> {
        self.inner.return_type(args)
    }

    fn coerce_types(&self, args: &[DataType]) -> DfResult<Vec<DataType>> {
        self.inner.coerce_types(args)
    }

    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> DfResult<ExprSimplifyResult> {
        if let Some(Expr::Literal(v, _)) = args.first()
            && elements(v).is_some_and(|e| e.len() > LARGE)
        {
            return Ok(ExprSimplifyResult::Original(args));
        }
        match self.inner.simplify(args, info)? {
            // Left as it was: keep this function (its set), not the shared one.
            ExprSimplifyResult::Original(args) => Ok(ExprSimplifyResult::Original(args)),
            simplified => Ok(simplified),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        match args.args.as_slice() {
            [
                ColumnarValue::Scalar(haystack),
                ColumnarValue::Array(needle),
            ] => {
                if let Some(out) = self.evaluate(haystack, needle)? {
                    return Ok(ColumnarValue::Array(out));
                }
            }
            // A constant needle (folded while planning): the same IN set, so that a
            // NULL among the elements answers NULL as in PostgreSQL (DataFusion's
            // `array_has` answered false).
            [
                ColumnarValue::Scalar(haystack),
                ColumnarValue::Scalar(needle),
            ] => {
                let one = needle.to_array_of_size(1)?;
                if let Some(out) = self.evaluate(haystack, &one)? {
                    return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?));
                }
            }
            _ => {}
        }
        self.inner.invoke_with_args(args)
    }
}
