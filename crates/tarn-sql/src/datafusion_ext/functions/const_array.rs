//! Large constant arrays planned as one value with a short name.
//!
//! DataFusion names every expression after its whole text, and asks for the type of a
//! function call by building its field, name included: each operator above an
//! `ARRAY[…]` of 4,096 numbers formats those 4,096 numbers again, and the analyzer asks
//! at every level. `cardinality($1) + cardinality($1) + …` (140 terms, one 4,096-float
//! parameter) planned for 73 s. An `ARRAY[…]` of constants with more than [`SMALLEST`]
//! elements is therefore made once, where it is planned, into an
//! `engine_const_array()` call that carries the value and is named by its length and a
//! hash of its elements; the optimizer's simplifier folds it back into the literal
//! `make_array` would have given, so every rule after it sees what it saw before.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::tree_node::TreeNode;
use datafusion::common::{DFSchema, Result as DfResult, ScalarValue};
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult};
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::analyzer::type_coercion::TypeCoercionRewriter;
use datafusion::optimizer::simplify_expressions::ExprSimplifier;

use crate::datafusion_ext::context::deadline;

/// The function's name.
pub(crate) const FUNCTION: &str = "engine_const_array";

/// Arrays of this many elements or fewer are planned as DataFusion plans them
/// (`make_array`): their names stay as they were, and naming them costs little.
const SMALLEST: usize = 64;

/// A constant array, made at planning: see the module docs.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ConstArray {
    value: ScalarValue,
    /// What the expression is called: `ARRAY[n elements #hash]`.
    name: String,
    signature: Signature,
}

impl ScalarUDFImpl for ConstArray {
    fn name(&self) -> &str {
        FUNCTION
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn display_name(&self, _args: &[Expr]) -> DfResult<String> {
        Ok(self.name.clone())
    }

    fn schema_name(&self, _args: &[Expr]) -> DfResult<String> {
        Ok(self.name.clone())
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(self.value.data_type())
    }

    fn return_field_from_args(
        &self,
        _args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> DfResult<Arc<Field>> {
        // Asked at every level above the array while the plan is analyzed: where a
        // deep expression's planning meets the statement timeout.
        deadline::check()?;
        Ok(Arc::new(Field::new(
            FUNCTION,
            self.value.data_type(),
            self.value.is_null(),
        )))
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        Ok(ColumnarValue::Scalar(self.value.clone()))
    }

    fn simplify(&self, _args: Vec<Expr>, _info: &SimplifyContext) -> DfResult<ExprSimplifyResult> {
        Ok(ExprSimplifyResult::Simplified(Expr::Literal(
            self.value.clone(),
            None,
        )))
    }
}

/// Whether `e` is made of constants only (so its array folds to one value).
fn constant(e: &Expr) -> bool {
    match e {
        Expr::Literal(..) => true,
        Expr::Cast(c) => constant(&c.expr),
        Expr::TryCast(c) => constant(&c.expr),
        Expr::Negative(inner) => constant(inner),
        Expr::ScalarFunction(f) => {
            f.func.name() == FUNCTION
                || (f.func.name() == "make_array" && f.args.iter().all(constant))
        }
        _ => false,
    }
}

/// The array `make_array(items)` folds to, as the analyzer and the simplifier would make
/// it; `None` when it does not fold (left to DataFusion as it was).
fn fold(items: &[Expr]) -> Option<ScalarValue> {
    fold_constant(&datafusion::functions_nested::expr_fn::make_array(
        items.to_vec(),
    ))
}

/// The value `e` folds to when it is a constant expression (no column, no subquery, no
/// volatile function), typed and simplified as the analyzer and the optimizer would;
/// `None` otherwise.
pub(crate) fn fold_constant(e: &Expr) -> Option<ScalarValue> {
    if !e.column_refs().is_empty() || e.is_volatile() {
        return None;
    }
    let mut subquery = false;
    let _ = e.apply(|x| {
        subquery |= matches!(
            x,
            Expr::ScalarSubquery(_)
                | Expr::Exists(_)
                | Expr::InSubquery(_)
                | Expr::OuterReferenceColumn(..)
        );
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    });
    // Not folded where the simplifier's copies would multiply (see `plan::expansion`):
    // this runs while the statement is translated, before that rule can refuse it.
    if subquery
        || crate::datafusion_ext::plan::expansion::multiplies(
            crate::datafusion_ext::plan::expansion::weigh(e, &[]),
        )
    {
        return None;
    }
    let schema = DFSchema::empty();
    let coerced = e
        .clone()
        .rewrite(&mut TypeCoercionRewriter::new(&schema))
        .ok()?
        .data;
    match ExprSimplifier::new(SimplifyContext::default()).simplify(coerced) {
        Ok(Expr::Literal(v, _)) => Some(v),
        _ => None,
    }
}

/// Plans an `ARRAY[…]` of more than [`SMALLEST`] constants as one value (see the module
/// docs); placed before DataFusion's own array planner.
#[derive(Debug)]
pub(crate) struct ConstArrayPlanner;

impl ExprPlanner for ConstArrayPlanner {
    fn plan_array_literal(
        &self,
        exprs: Vec<Expr>,
        _schema: &DFSchema,
    ) -> DfResult<PlannerResult<Vec<Expr>>> {
        deadline::check()?;
        if exprs.len() <= SMALLEST || !exprs.iter().all(constant) {
            return Ok(PlannerResult::Original(exprs));
        }
        let Some(value) = fold(&exprs) else {
            return Ok(PlannerResult::Original(exprs));
        };
        let mut h = DefaultHasher::new();
        value.hash(&mut h);
        let name = format!("ARRAY[{} elements #{:08x}]", exprs.len(), h.finish() as u32);
        let udf = ScalarUDF::new_from_impl(ConstArray {
            value,
            name,
            signature: Signature::nullary(Volatility::Immutable),
        });
        Ok(PlannerResult::Planned(Expr::ScalarFunction(
            datafusion::logical_expr::expr::ScalarFunction::new_udf(Arc::new(udf), vec![]),
        )))
    }
}
