//! Integer arithmetic that fails on overflow, as PostgreSQL's does.
//!
//! DataFusion's `+`, `-` and `*` wrap around on integer overflow (and constant folding
//! wraps too, at planning time). This analyzer rule runs after type coercion and
//! replaces integer `+ - *` with checked functions, so `9223372036854775807 + 1` is a
//! 400 `integer out of range` instead of a wrong answer. Output names are preserved.
//!
//! ```text
//! before: Projection: t.a + Int64(1)
//! after:  Projection: tarn_checked_add(t.a, Int64(1)) AS t.a + Int64(1)
//! ```

use std::sync::Arc;

use datafusion::arrow::compute::kernels::numeric;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::error::ArrowError;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result as DfResult, ScalarValue};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::type_coercion::binary::BinaryTypeCoercer;
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

/// The analyzer rule; install after DataFusion's own (type coercion first).
#[derive(Debug, Default)]
pub struct CheckedArithmetic;

impl AnalyzerRule for CheckedArithmetic {
    fn name(&self) -> &str {
        "tarn_checked_arithmetic"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> DfResult<LogicalPlan> {
        plan.transform_up_with_subqueries(|plan| {
            let inputs = plan.inputs();
            let schema: Arc<DFSchema> = if inputs.len() == 1 {
                inputs[0].schema().clone()
            } else {
                plan.schema().clone()
            };
            let preserver = NamePreserver::new(&plan);
            plan.map_expressions(|e| {
                let saved = preserver.save(&e);
                let (e, _, changed) = rewrite(e, &schema)?;
                Ok(if changed {
                    Transformed::yes(saved.restore(e))
                } else {
                    Transformed::no(e)
                })
            })
        })
        .map(|t| t.data)
    }
}

fn is_integer(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
    )
}

/// Rewrites integer `+ - *` in `e` bottom-up, in one pass: returns the new expression,
/// its type when the pass learned it for free (arithmetic nodes: from their operands'
/// types), and whether anything changed. Types of other operands are asked of
/// DataFusion once each, so the cost is linear in the expression's size (asking for the
/// type of every `+` in a chain of a thousand would be quadratic, and was).
#[recursive::recursive]
fn rewrite(e: Expr, schema: &DFSchema) -> DfResult<(Expr, Option<DataType>, bool)> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = e else {
        let mut changed = false;
        let e = e
            .map_children(|c| {
                let (c, _, ch) = rewrite(c, schema)?;
                changed |= ch;
                Ok(Transformed::no(c))
            })?
            .data;
        return Ok((e, None, changed));
    };
    let (l, lt, lc) = rewrite(*left, schema)?;
    let (r, rt, rc) = rewrite(*right, schema)?;
    let kind = match op {
        Operator::Plus => Some(Op::Add),
        Operator::Minus => Some(Op::Sub),
        Operator::Multiply => Some(Op::Mul),
        _ => None,
    };
    let Some(kind) = kind else {
        return Ok((
            Expr::BinaryExpr(BinaryExpr::new(Box::new(l), op, Box::new(r))),
            None,
            lc || rc,
        ));
    };
    // Expressions whose type cannot be resolved here (outer references) stay as they are.
    let lt = match lt {
        Some(t) => Ok(t),
        None => l.get_type(schema),
    };
    let rt = match rt {
        Some(t) => Ok(t),
        None => r.get_type(schema),
    };
    let (Ok(lt), Ok(rt)) = (lt, rt) else {
        return Ok((
            Expr::BinaryExpr(BinaryExpr::new(Box::new(l), op, Box::new(r))),
            None,
            lc || rc,
        ));
    };
    if !is_integer(&lt) || lt != rt {
        let ty = BinaryTypeCoercer::new(&lt, &op, &rt).get_result_type().ok();
        return Ok((
            Expr::BinaryExpr(BinaryExpr::new(Box::new(l), op, Box::new(r))),
            ty,
            lc || rc,
        ));
    }
    let udf = Arc::new(ScalarUDF::new_from_impl(Checked::new(kind)));
    Ok((
        Expr::ScalarFunction(ScalarFunction::new_udf(udf, vec![l, r])),
        Some(lt),
        true,
    ))
}

#[derive(Debug, PartialEq, Eq, Hash, Clone, Copy)]
enum Op {
    Add,
    Sub,
    Mul,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Checked {
    op: Op,
    signature: Signature,
}

impl Checked {
    fn new(op: Op) -> Self {
        Checked {
            op,
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for Checked {
    fn name(&self) -> &str {
        match self.op {
            Op::Add => "tarn_checked_add",
            Op::Sub => "tarn_checked_sub",
            Op::Mul => "tarn_checked_mul",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(arg_types.first().cloned().unwrap_or(DataType::Int64))
    }

    /// Unbounded, of the result's type. The default is an interval of type Null, on
    /// which functions over this one fail to compute their ordering (`abs(a - b)` in a
    /// window's ORDER BY was refused as a plan that "does not satisfy order
    /// requirements").
    fn evaluate_bounds(
        &self,
        input: &[&datafusion::logical_expr::interval_arithmetic::Interval],
    ) -> DfResult<datafusion::logical_expr::interval_arithmetic::Interval> {
        let t = input
            .first()
            .map(|i| i.data_type())
            .unwrap_or(DataType::Int64);
        datafusion::logical_expr::interval_arithmetic::Interval::make_unbounded(&t)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let (a, b) = (&arrays[0], &arrays[1]);
        let out = match self.op {
            Op::Add => numeric::add(a, b),
            Op::Sub => numeric::sub(a, b),
            Op::Mul => numeric::mul(a, b),
        }
        .map_err(|e| match e {
            ArrowError::ArithmeticOverflow(_) => {
                DataFusionError::Execution("integer out of range".into())
            }
            other => DataFusionError::ArrowError(Box::new(other), None),
        })?;
        if scalar {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?));
        }
        Ok(ColumnarValue::Array(out))
    }
}
