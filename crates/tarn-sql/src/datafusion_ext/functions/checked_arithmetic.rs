//! Arithmetic that fails where PostgreSQL's does, instead of wrapping or returning
//! Infinity/NaN.
//!
//! DataFusion's integer `+`, `-`, `*` and unary `-` wrap around on overflow (constant
//! folding too), its float arithmetic yields ±Infinity (also for `x / 0.0`), `ln(0)` is
//! -Infinity, `'1e1000'::float8` is Infinity and `sum` over int8 wraps. This analyzer
//! rule runs after type coercion and replaces those operations with checked functions
//! whose errors are PostgreSQL's: `bigint out of range` / `integer out of range` /
//! `smallint out of range` (by the operation's type), `division by zero`, `value out of
//! range: overflow` / `underflow`, `cannot take logarithm of zero`, `"1e1000" is out of
//! range for type double precision`. Output names are preserved. `sum` is replaced in the
//! registry by [`checked_sum`].
//!
//! An integer literal is an `int4` in PostgreSQL when it fits, so `int4_col + 1` is int4
//! arithmetic there, while DataFusion types the literal `Int64` and widens the column.
//! The rule narrows such operations back (operands that are an `Int32`/`Int16` widened
//! by a cast, or an `Int64` literal that fits an `int4`), computes them checked at the
//! narrow type, and widens the result, so the plan's types do not change and
//! `2147483647 + 1` on an int4 column is `integer out of range`, as in PostgreSQL.
//!
//! ```text
//! before: Projection: CAST(t.a AS Int64) + Int64(1)
//! after:  Projection: CAST(tarn_checked_add(t.a, Int32(1)) AS Int64) AS t.a + Int64(1)
//! ```

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray};
use datafusion::arrow::compute::kernels::numeric;
use datafusion::arrow::datatypes::{DataType, Float32Type, Float64Type, Int64Type};
use datafusion::arrow::error::ArrowError;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result as DfResult, ScalarValue, exec_err};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::expr::{Cast, ScalarFunction};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::interval_arithmetic::Interval;
use datafusion::logical_expr::type_coercion::binary::BinaryTypeCoercer;
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, BinaryExpr, ColumnarValue, EmitTo, Expr,
    ExprSchemable, GroupsAccumulator, LogicalPlan, Operator, ReversedUDAF, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, SetMonotonicity, Signature, Volatility,
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
        let rewritten = plan.transform_up_with_subqueries(|plan| {
            crate::datafusion_ext::context::deadline::check()?;
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
        })?;
        if !rewritten.transformed {
            return Ok(rewritten.data);
        }
        // Schemas derived before the rewrite (type coercion copied the explicit-cast
        // marks into them; a union keeps its inputs' old nullability) are derived anew.
        rewritten
            .data
            .transform_up_with_subqueries(|p| match p {
                LogicalPlan::Union(u) => Ok(Transformed::yes(LogicalPlan::Union(
                    datafusion::logical_expr::Union::try_new_with_loose_types(u.inputs)?,
                ))),
                other => Ok(Transformed::yes(other.recompute_schema()?)),
            })
            .map(|t| t.data)
    }
}

/// Field metadata key marking a cast the statement wrote (`x::int8`), set before type
/// coercion adds casts of its own and removed by [`CheckedArithmetic`]: only coercion's
/// widenings are narrowed back (`int4_col + 1` is int4 arithmetic; `int4_col::int8 + 1`
/// is int8, as written).
const EXPLICIT_CAST: &str = "tarn.explicit_cast";

/// Marks the statement's own integer casts; install before DataFusion's type coercion.
#[derive(Debug, Default)]
pub struct MarkExplicitCasts;

impl AnalyzerRule for MarkExplicitCasts {
    fn name(&self) -> &str {
        "tarn_mark_explicit_casts"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> DfResult<LogicalPlan> {
        plan.transform_up_with_subqueries(|plan| {
            plan.map_expressions(|e| {
                e.transform_up(|e| match e {
                    Expr::Cast(Cast { expr, field })
                        if field.data_type() == &DataType::Int64
                            && !field.metadata().contains_key(EXPLICIT_CAST) =>
                    {
                        let mut metadata = field.metadata().clone();
                        metadata.insert(EXPLICIT_CAST.to_string(), String::new());
                        let marked = field.as_ref().clone().with_metadata(metadata);
                        Ok(Transformed::yes(Expr::Cast(Cast::new_from_field(
                            expr,
                            Arc::new(marked),
                        ))))
                    }
                    other => Ok(Transformed::no(other)),
                })
            })
        })
        .map(|t| t.data)
    }
}

/// Signed integers (PostgreSQL has no unsigned ones; DataFusion's, such as
/// `row_number()`'s, are left as they are).
fn is_integer(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64
    )
}

fn is_float(t: &DataType) -> bool {
    matches!(t, DataType::Float32 | DataType::Float64)
}

/// PostgreSQL's message for an integer result out of `t`'s range.
fn out_of_range(t: &DataType) -> String {
    match t {
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => "smallint out of range",
        DataType::Int64 | DataType::UInt64 => "bigint out of range",
        _ => "integer out of range",
    }
    .into()
}

/// The type (`Int16`/`Int32`) an `Int64` operand has in PostgreSQL: a narrower integer
/// widened by a cast, or a literal that fits an `int4`.
fn narrow_type(e: &Expr, schema: &DFSchema) -> Option<DataType> {
    match e {
        Expr::Cast(Cast { expr, field })
            if field.data_type() == &DataType::Int64
                && !field.metadata().contains_key(EXPLICIT_CAST) =>
        {
            match shallow_type(expr, schema, 2)? {
                t @ (DataType::Int16 | DataType::Int32) => Some(t),
                _ => None,
            }
        }
        Expr::Literal(ScalarValue::Int64(Some(v)), _) if i32::try_from(*v).is_ok() => {
            Some(DataType::Int32)
        }
        _ => None,
    }
}

/// The operand [`narrow_type`] accepted, at its narrow type (moved out, not copied: the
/// operand may be a long chain).
fn narrowed(e: Expr) -> Expr {
    match e {
        Expr::Cast(Cast { expr, .. }) => *expr,
        Expr::Literal(ScalarValue::Int64(Some(v)), _) => {
            Expr::Literal(ScalarValue::Int32(i32::try_from(v).ok()), None)
        }
        other => other,
    }
}

/// The type of `e` when it can be told without walking the expression (asking
/// DataFusion would, and a chain `1 + 1 + … + 1` would cost its length squared): a
/// literal's, a column's, a cast's, or a checked operation's from an operand that can.
fn shallow_type(e: &Expr, schema: &DFSchema, depth: usize) -> Option<DataType> {
    match e {
        Expr::Literal(v, _) => Some(v.data_type()),
        Expr::Column(_) => e.get_type(schema).ok(),
        Expr::Cast(Cast { field, .. }) => Some(field.data_type().clone()),
        Expr::ScalarFunction(f)
            if depth > 0 && f.func.name().starts_with("tarn_checked_") && f.args.len() == 2 =>
        {
            shallow_type(&f.args[1], schema, depth - 1)
                .or_else(|| shallow_type(&f.args[0], schema, depth - 1))
        }
        _ => None,
    }
}

fn widen(e: Expr, from: &DataType, to: &DataType) -> Expr {
    if from == to {
        e
    } else {
        Expr::Cast(Cast::new(Box::new(e), to.clone()))
    }
}

fn call(udf: impl ScalarUDFImpl + 'static, args: Vec<Expr>) -> Expr {
    Expr::ScalarFunction(ScalarFunction::new_udf(
        Arc::new(ScalarUDF::new_from_impl(udf)),
        args,
    ))
}

/// Rewrites the operations of `e` bottom-up, in one pass: returns the new expression,
/// its type when the pass learned it for free (arithmetic nodes: from their operands'
/// types), and whether anything changed. Types of other operands are asked of
/// DataFusion once each, so the cost is linear in the expression's size (asking for the
/// type of every `+` in a chain of a thousand would be quadratic, and was).
#[recursive::recursive]
fn rewrite(e: Expr, schema: &DFSchema) -> DfResult<(Expr, Option<DataType>, bool)> {
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => binary(*left, op, *right, schema),
        Expr::Negative(inner) => {
            let (x, t, changed) = rewrite(*inner, schema)?;
            let t = match t {
                Some(t) => Ok(t),
                None => x.get_type(schema),
            };
            match t {
                Ok(t) if is_integer(&t) => {
                    // 0 - x, checked: `-(-9223372036854775808)` is out of range.
                    let zero = Expr::Literal(ScalarValue::new_zero(&t)?, None);
                    Ok((call(Checked::new(Op::Sub), vec![zero, x]), Some(t), true))
                }
                Ok(t) => Ok((Expr::Negative(Box::new(x)), Some(t), changed)),
                Err(_) => Ok((Expr::Negative(Box::new(x)), None, changed)),
            }
        }
        // A float or numeric cast to an integer rounds, as PostgreSQL's does (float to
        // the nearest, ties to even; numeric half away from zero): Arrow's cast
        // truncates, so `3.7::int` was 3 while INSERT of 3.7 into an int column stored 4.
        Expr::Cast(Cast { expr, field })
            if is_integer(field.data_type())
                && expr.get_type(schema).is_ok_and(|t| {
                    is_float(&t) || matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..))
                }) =>
        {
            // A decimal literal (`2.5::int`) is a numeric in PostgreSQL, which rounds
            // half away from zero: 3, where float8 2.5 gives 2.
            let literal = match expr.as_ref() {
                Expr::Negative(e) => matches!(e.as_ref(), Expr::Literal(..)),
                e => matches!(e, Expr::Literal(..)),
            };
            let (x, _, _) = rewrite(*expr, schema)?;
            let mut metadata = field.metadata().clone();
            metadata.remove(EXPLICIT_CAST);
            let plain = field.as_ref().clone().with_metadata(metadata);
            let t = plain.data_type().clone();
            Ok((
                Expr::Cast(Cast::new_from_field(
                    Box::new(call(
                        SameType::new(Reshape::Round { ties_away: literal }),
                        vec![x],
                    )),
                    Arc::new(plain),
                )),
                Some(t),
                true,
            ))
        }
        // An array to text: PostgreSQL's array text, which text to array reads back.
        Expr::Cast(Cast { expr, field })
            if matches!(
                field.data_type(),
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
            ) && expr
                .get_type(schema)
                .is_ok_and(|t| super::array_out::is_array(&t)) =>
        {
            let (x, _, _) = rewrite(*expr, schema)?;
            let t = field.data_type().clone();
            Ok((
                Expr::Cast(Cast::new_from_field(
                    Box::new(call(super::array_out::ArrayOut::new(), vec![x])),
                    field,
                )),
                Some(t),
                true,
            ))
        }
        Expr::Cast(Cast { expr, field }) if is_float(field.data_type()) => {
            let data_type = field.data_type().clone();
            let (x, t, changed) = rewrite(*expr, schema)?;
            let from = match t {
                Some(t) => Some(t),
                None => x.get_type(schema).ok(),
            };
            match from {
                Some(
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Float64,
                ) if from.as_ref() != Some(&data_type) => Ok((
                    call(FloatIn::new(data_type.clone()), vec![x]),
                    Some(data_type),
                    true,
                )),
                _ => Ok((
                    Expr::Cast(Cast::new_from_field(Box::new(x), field)),
                    Some(data_type),
                    changed,
                )),
            }
        }
        Expr::Cast(Cast { expr, field }) if field.metadata().contains_key(EXPLICIT_CAST) => {
            let (x, _, _) = rewrite(*expr, schema)?;
            let mut metadata = field.metadata().clone();
            metadata.remove(EXPLICIT_CAST);
            let plain = field.as_ref().clone().with_metadata(metadata);
            let t = plain.data_type().clone();
            Ok((
                Expr::Cast(Cast::new_from_field(Box::new(x), Arc::new(plain))),
                Some(t),
                true,
            ))
        }
        // DISTINCT over floats: -0 and 0 are one value, and so is every NaN, as in
        // PostgreSQL and as GROUP BY already has it. (`count(DISTINCT x)` beside
        // another aggregate hashed the raw bits: -0.0 and 0.0 counted twice.)
        Expr::AggregateFunction(mut f)
            if f.params.distinct
                && f.params
                    .args
                    .iter()
                    .any(|a| a.get_type(schema).is_ok_and(|t| is_float(&t))) =>
        {
            let args = std::mem::take(&mut f.params.args);
            for a in args {
                let floating = a.get_type(schema).is_ok_and(|t| is_float(&t));
                let (a, _, _) = rewrite(a, schema)?;
                f.params.args.push(if floating {
                    call(SameType::new(Reshape::Canonical), vec![a])
                } else {
                    a
                });
            }
            if let Some(filter) = f.params.filter.take() {
                f.params.filter = Some(Box::new(rewrite(*filter, schema)?.0));
            }
            for key in &mut f.params.order_by {
                let e = std::mem::replace(&mut key.expr, Expr::Literal(ScalarValue::Null, None));
                key.expr = rewrite(e, schema)?.0;
            }
            Ok((Expr::AggregateFunction(f), None, true))
        }
        // `round(float8)` is PostgreSQL's `rint`: ties to even (DataFusion's goes away
        // from zero). A decimal literal stands for a numeric, whose round goes away
        // from zero, so `round(2.5)` stays 3.
        Expr::ScalarFunction(f)
            if f.func.name() == "round"
                && f.args.len() == 1
                && !matches!(f.args[0], Expr::Literal(..) | Expr::Negative(_))
                && f.args[0].get_type(schema).is_ok_and(|t| is_float(&t)) =>
        {
            let args = f
                .args
                .into_iter()
                .map(|a| Ok(rewrite(a, schema)?.0))
                .collect::<DfResult<Vec<_>>>()?;
            Ok((
                call(SameType::new(Reshape::Round { ties_away: false }), args),
                None,
                true,
            ))
        }
        Expr::ScalarFunction(f) if Guard::of(f.func.name()).is_some() => {
            let func = Arc::clone(&f.func);
            let mut args = Vec::with_capacity(f.args.len());
            for a in f.args {
                args.push(rewrite(a, schema)?.0);
            }
            match Guard::of(func.name()) {
                // `to_timestamp(seconds)`: a number of seconds, not text or a timestamp.
                Some(Guard::Seconds) => {
                    let numeric =
                        args.len() == 1 && args[0].get_type(schema).is_ok_and(|t| t.is_numeric());
                    if numeric {
                        Ok((call(SecondsToTimestamp::new(), args), None, true))
                    } else {
                        Ok((
                            Expr::ScalarFunction(ScalarFunction::new_udf(func, args)),
                            None,
                            true,
                        ))
                    }
                }
                Some(guard) => Ok((call(Guarded::new(func, guard), args), None, true)),
                None => unreachable!("matched above"),
            }
        }
        other => {
            let mut changed = false;
            let e = other
                .map_children(|c| {
                    let (c, _, ch) = rewrite(c, schema)?;
                    changed |= ch;
                    Ok(Transformed::no(c))
                })?
                .data;
            Ok((e, None, changed))
        }
    }
}

fn binary(
    left: Expr,
    op: Operator,
    right: Expr,
    schema: &DFSchema,
) -> DfResult<(Expr, Option<DataType>, bool)> {
    // Whether an operand is a cast the statement wrote (the mark goes with the rewrite).
    let written = |e: &Expr| matches!(e, Expr::Cast(Cast { field, .. }) if field.metadata().contains_key(EXPLICIT_CAST));
    let (l_written, r_written) = (written(&left), written(&right));
    let (l, lt, lc) = rewrite(left, schema)?;
    let (r, rt, rc) = rewrite(right, schema)?;
    let kind = match op {
        Operator::Plus => Some(Op::Add),
        Operator::Minus => Some(Op::Sub),
        Operator::Multiply => Some(Op::Mul),
        Operator::Divide => Some(Op::Div),
        _ => None,
    };
    let unchanged = |l: Expr, r: Expr, ty: Option<DataType>| {
        Ok((
            Expr::BinaryExpr(BinaryExpr::new(Box::new(l), op, Box::new(r))),
            ty,
            lc || rc,
        ))
    };
    let Some(kind) = kind else {
        return unchanged(l, r, None);
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
    let (Ok(mut lt), Ok(mut rt)) = (lt, rt) else {
        return unchanged(l, r, None);
    };
    // DataFusion's unsigned integers (`row_number()`, `ntile`) are bigint in
    // PostgreSQL: their arithmetic is int8's, and may go negative.
    let (mut l, mut r) = (l, r);
    let unsigned = |t: &DataType| {
        matches!(
            t,
            DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64
        )
    };
    if kind != Op::Div
        && (unsigned(&lt) || unsigned(&rt))
        && (unsigned(&lt) || lt == DataType::Int64)
        && (unsigned(&rt) || rt == DataType::Int64)
    {
        if unsigned(&lt) {
            l = Expr::Cast(Cast::new(Box::new(l), DataType::Int64));
            lt = DataType::Int64;
        }
        if unsigned(&rt) {
            r = Expr::Cast(Cast::new(Box::new(r), DataType::Int64));
            rt = DataType::Int64;
        }
    }
    if lt != rt || !(is_integer(&lt) || is_float(&lt)) {
        let ty = BinaryTypeCoercer::new(&lt, &op, &rt).get_result_type().ok();
        return unchanged(l, r, ty);
    }
    if is_float(&lt) {
        return Ok((call(FloatChecked::new(kind), vec![l, r]), Some(lt), true));
    }
    if kind == Op::Div {
        // Integer division already fails on zero; `MIN / -1` is the one overflow.
        return unchanged(l, r, Some(lt));
    }
    if lt == DataType::Int64
        && !l_written
        && !r_written
        && let (Some(nlt), Some(nrt)) = (narrow_type(&l, schema), narrow_type(&r, schema))
    {
        let (nl, nr) = (narrowed(l), narrowed(r));
        let t = if nlt == DataType::Int32 || nrt == DataType::Int32 {
            DataType::Int32
        } else {
            DataType::Int16
        };
        let checked = call(
            Checked::new(kind),
            vec![widen(nl, &nlt, &t), widen(nr, &nrt, &t)],
        );
        return Ok((widen(checked, &t, &lt), Some(lt), true));
    }
    Ok((call(Checked::new(kind), vec![l, r]), Some(lt), true))
}

#[derive(Debug, PartialEq, Eq, Hash, Clone, Copy)]
enum Op {
    Add,
    Sub,
    Mul,
    Div,
}

impl Op {
    /// Arrow's checked kernel for the operation.
    fn apply(self, a: &ArrayRef, b: &ArrayRef) -> Result<ArrayRef, ArrowError> {
        match self {
            Op::Add => numeric::add(a, b),
            Op::Sub => numeric::sub(a, b),
            Op::Mul => numeric::mul(a, b),
            Op::Div => numeric::div(a, b),
        }
    }
}

/// `out` as the function's value: a scalar when every argument was one.
fn columnar(out: ArrayRef, scalar: bool) -> DfResult<ColumnarValue> {
    Ok(if scalar {
        ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
    } else {
        ColumnarValue::Array(out)
    })
}

/// Checked integer `+ - *` (and `-x` as `0 - x`).
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

/// The result field of an operation on `args`: the first argument's type (or `t`),
/// nullable when an argument is (the default would make every result nullable, which
/// changes a plan's schema under a NOT NULL column's arithmetic).
fn result_field(
    name: &str,
    args: &datafusion::logical_expr::ReturnFieldArgs,
    t: Option<DataType>,
) -> DfResult<datafusion::arrow::datatypes::FieldRef> {
    let data_type = match t {
        Some(t) => t,
        None => args
            .arg_fields
            .first()
            .map(|f| f.data_type().clone())
            .unwrap_or(DataType::Int64),
    };
    let nullable = args.arg_fields.iter().any(|f| f.is_nullable());
    Ok(Arc::new(datafusion::arrow::datatypes::Field::new(
        name, data_type, nullable,
    )))
}

/// Unbounded, of the result's type. The default is an interval of type Null, on which
/// functions over this one fail to compute their ordering (`abs(a - b)` in a window's
/// ORDER BY was refused as a plan that "does not satisfy order requirements").
fn unbounded(input: &[&Interval]) -> DfResult<Interval> {
    let t = input
        .first()
        .map(|i| i.data_type())
        .unwrap_or(DataType::Int64);
    Interval::make_unbounded(&t)
}

impl ScalarUDFImpl for Checked {
    fn name(&self) -> &str {
        match self.op {
            Op::Add => "tarn_checked_add",
            Op::Sub => "tarn_checked_sub",
            Op::Mul => "tarn_checked_mul",
            Op::Div => "tarn_checked_div",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    /// DataFusion's name (`name(arg,…)`), after a look at the statement's deadline: a
    /// chain of operators names each of its levels over again, which for long chains
    /// over large constants took tens of seconds, past the timeout and a stop (the
    /// check at each level ends it; a name made past the deadline is never shown, as
    /// the statement fails at its next check).
    fn schema_name(&self, args: &[Expr]) -> DfResult<String> {
        use std::fmt::Write;
        crate::datafusion_ext::context::deadline::check()?;
        let mut name = format!("{}(", self.name());
        for (i, a) in args.iter().enumerate() {
            if i > 0 {
                name.push(',');
            }
            write!(name, "{}", a.schema_name())
                .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
        }
        name.push(')');
        Ok(name)
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(arg_types.first().cloned().unwrap_or(DataType::Int64))
    }

    fn return_field_from_args(
        &self,
        args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> DfResult<datafusion::arrow::datatypes::FieldRef> {
        result_field(self.name(), &args, None)
    }

    fn evaluate_bounds(&self, input: &[&Interval]) -> DfResult<Interval> {
        unbounded(input)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        if let Some(null) = null_typed(&args)? {
            return Ok(null);
        }
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let (a, b) = (&arrays[0], &arrays[1]);
        let out = self.op.apply(a, b).map_err(|e| match e {
            ArrowError::ArithmeticOverflow(_) => {
                DataFusionError::Execution(out_of_range(a.data_type()))
            }
            other => DataFusionError::ArrowError(Box::new(other), None),
        })?;
        columnar(out, scalar)
    }
}

/// Float `+ - * /` that fail as PostgreSQL's do: on a zero divisor, and on a result that
/// overflows to ±Infinity (or, for `*` and `/`, underflows to zero) from finite operands.
#[derive(Debug, PartialEq, Eq, Hash)]
struct FloatChecked {
    op: Op,
    signature: Signature,
}

impl FloatChecked {
    fn new(op: Op) -> Self {
        FloatChecked {
            op,
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

/// A NULL of the function's result type when an argument is of type `Null`: the
/// functions here are strict (NULL in, NULL out), and DataFusion's optimizer
/// evaluates predicates with `Null`-typed columns to learn whether they reject NULLs
/// (`is_restrict_null_predicate`, found by the differential fuzzer: the kernels below
/// would otherwise be handed a `Null` array where they expect numbers).
pub(crate) fn null_typed(args: &ScalarFunctionArgs) -> DfResult<Option<ColumnarValue>> {
    if args.args.iter().any(|a| a.data_type() == DataType::Null) {
        let null = ScalarValue::try_from(args.return_field.data_type())?;
        return Ok(Some(ColumnarValue::Scalar(null)));
    }
    Ok(None)
}

/// The values of a float array as f64 (NaN for NULL).
fn as_f64(a: &ArrayRef) -> Vec<f64> {
    match a.data_type() {
        DataType::Float32 => {
            let a = a.as_primitive::<Float32Type>();
            (0..a.len())
                .map(|i| {
                    if a.is_valid(i) {
                        f64::from(a.value(i))
                    } else {
                        f64::NAN
                    }
                })
                .collect()
        }
        _ => {
            let a = a.as_primitive::<Float64Type>();
            (0..a.len())
                .map(|i| if a.is_valid(i) { a.value(i) } else { f64::NAN })
                .collect()
        }
    }
}

impl ScalarUDFImpl for FloatChecked {
    fn name(&self) -> &str {
        match self.op {
            Op::Add => "tarn_float_add",
            Op::Sub => "tarn_float_sub",
            Op::Mul => "tarn_float_mul",
            Op::Div => "tarn_float_div",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(arg_types.first().cloned().unwrap_or(DataType::Float64))
    }

    fn return_field_from_args(
        &self,
        args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> DfResult<datafusion::arrow::datatypes::FieldRef> {
        result_field(self.name(), &args, None)
    }

    fn evaluate_bounds(&self, input: &[&Interval]) -> DfResult<Interval> {
        unbounded(input)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        if let Some(null) = null_typed(&args)? {
            return Ok(null);
        }
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let (a, b) = (&arrays[0], &arrays[1]);
        let (x, y) = (as_f64(a), as_f64(b));
        // x / 0 fails unless x is NULL or NaN (NaN / 0 is NaN in PostgreSQL).
        if self.op == Op::Div && x.iter().zip(&y).any(|(x, y)| *y == 0.0 && !x.is_nan()) {
            return exec_err!("division by zero");
        }
        let out = self.op.apply(a, b)?;
        // Overflow is checked in double precision only: DataFusion computes `real *
        // integer` in float4, which PostgreSQL does in float8.
        if a.data_type() != &DataType::Float64 {
            return columnar(out, scalar);
        }
        let z = as_f64(&out);
        for i in 0..z.len() {
            let (x, y, z) = (x[i], y[i], z[i]);
            if !(x.is_finite() && y.is_finite()) {
                continue;
            }
            if z.is_infinite() {
                return exec_err!("value out of range: overflow");
            }
            let underflow = match self.op {
                Op::Mul => z == 0.0 && x != 0.0 && y != 0.0,
                Op::Div => z == 0.0 && x != 0.0,
                _ => false,
            };
            if underflow {
                return exec_err!("value out of range: underflow");
            }
        }
        columnar(out, scalar)
    }
}

/// A cast to `float4`/`float8` from text or from `float8` that fails where PostgreSQL's
/// does: text for a number out of the type's range (`'1e1000'::float8`; the words
/// `Infinity`, `inf` and their signed forms stay infinite), and a float8 too large for
/// `float4`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct FloatIn {
    to: DataType,
    signature: Signature,
}

impl FloatIn {
    fn new(to: DataType) -> Self {
        FloatIn {
            to,
            signature: Signature::any(1, Volatility::Immutable),
        }
    }

    fn type_name(&self) -> &'static str {
        if self.to == DataType::Float32 {
            "real"
        } else {
            "double precision"
        }
    }
}

impl ScalarUDFImpl for FloatIn {
    fn name(&self) -> &str {
        if self.to == DataType::Float32 {
            "tarn_float4_in"
        } else {
            "tarn_float8_in"
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DfResult<DataType> {
        Ok(self.to.clone())
    }

    fn return_field_from_args(
        &self,
        args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> DfResult<datafusion::arrow::datatypes::FieldRef> {
        result_field(self.name(), &args, Some(self.to.clone()))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        if let Some(null) = null_typed(&args)? {
            return Ok(null);
        }
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let input = &arrays[0];
        let options = datafusion::arrow::compute::CastOptions {
            safe: false,
            ..Default::default()
        };
        let out = datafusion::arrow::compute::cast_with_options(input, &self.to, &options)?;
        let result = as_f64(&out);
        if !result.iter().any(|v| v.is_infinite() || *v == 0.0) {
            return columnar(out, scalar);
        }
        // A float8 made real: infinite or zero from a finite, non-zero value is out of
        // range, read off the values themselves.
        if input.data_type() == &DataType::Float64 {
            let source = as_f64(input);
            for (v, s) in result.iter().zip(&source) {
                if v.is_infinite() && s.is_finite() {
                    return exec_err!("value out of range: overflow");
                }
                if *v == 0.0 && *s != 0.0 && !s.is_nan() {
                    return exec_err!("value out of range: underflow");
                }
            }
            return columnar(out, scalar);
        }
        // Text: its words tell `'Infinity'` from an overflow, its digits `'0'` from an
        // underflow.
        let source = datafusion::arrow::compute::cast(input, &DataType::Utf8)?;
        let source = source.as_string::<i32>();
        for (i, v) in result.iter().enumerate() {
            if !(v.is_infinite() || *v == 0.0) || source.is_null(i) {
                continue;
            }
            let text = source.value(i).trim();
            let kept = if *v == 0.0 {
                !tarn_ingest::underflows(text, *v)
            } else {
                let word = text.trim_start_matches(['+', '-']).to_ascii_lowercase();
                word == "inf" || word == "infinity"
            };
            if !kept {
                return exec_err!(
                    "{} is out of range for type {}",
                    tarn_catalog::shown(text),
                    self.type_name()
                );
            }
        }
        columnar(out, scalar)
    }
}

/// Functions whose results DataFusion lets go infinite or out of range where
/// PostgreSQL's fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Guard {
    /// `ln`, `log`, `log10`, `log2`: zero and negative arguments refused (DataFusion
    /// returns -Infinity and NaN).
    Logarithm,
    /// `power` (and `^`), `exp`: a finite argument whose result overflows to ±Infinity,
    /// or underflows to zero from a non-zero base, is `value out of range` (DataFusion
    /// returns Infinity and 0).
    Power,
    /// `to_timestamp(number)`: seconds since 1970, checked (see [`SecondsToTimestamp`]).
    Seconds,
    /// `a[i]` (`array_element`): PostgreSQL's subscripts count from 1, and one outside
    /// the array is NULL; DataFusion's negative subscripts count from the end, so a
    /// computed subscript that went negative silently read another element.
    Subscript,
    /// `a[lo:hi]` (`array_slice`): bounds below 1 clamp to 1 as in PostgreSQL (an
    /// upper bound below 1 is the empty array), not counted from the end.
    Slice,
}

impl Guard {
    fn of(name: &str) -> Option<Guard> {
        match name {
            "ln" | "log" | "log10" | "log2" => Some(Guard::Logarithm),
            "power" | "pow" | "exp" => Some(Guard::Power),
            "to_timestamp" => Some(Guard::Seconds),
            "array_element" => Some(Guard::Subscript),
            "array_slice" => Some(Guard::Slice),
            _ => None,
        }
    }
}

/// A DataFusion function with PostgreSQL's refusals around it ([`Guard`]).
#[derive(Debug, PartialEq, Eq, Hash)]
struct Guarded {
    inner: Arc<ScalarUDF>,
    guard: Guard,
    name: String,
}

impl Guarded {
    fn new(inner: Arc<ScalarUDF>, guard: Guard) -> Self {
        let name = format!("tarn_checked_{}", inner.name());
        Guarded { inner, guard, name }
    }
}

/// The values of a numeric argument or result as float64 (none for a type that does
/// not cast: decimals too wide for f64 and the like, which the function decides).
fn float_values(a: &ColumnarValue) -> Vec<Option<f64>> {
    match a {
        ColumnarValue::Scalar(s) => match s.cast_to(&DataType::Float64) {
            Ok(ScalarValue::Float64(v)) => vec![v],
            _ => vec![],
        },
        ColumnarValue::Array(arr) => {
            match datafusion::arrow::compute::cast(arr, &DataType::Float64) {
                Ok(f) => f.as_primitive::<Float64Type>().iter().collect(),
                Err(_) => vec![],
            }
        }
    }
}

impl ScalarUDFImpl for Guarded {
    fn name(&self) -> &str {
        &self.name
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, args: &[DataType]) -> DfResult<DataType> {
        self.inner.return_type(args)
    }

    fn return_field_from_args(
        &self,
        args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> DfResult<datafusion::arrow::datatypes::FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn coerce_types(&self, args: &[DataType]) -> DfResult<Vec<DataType>> {
        self.inner.coerce_types(args)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        if let Some(null) = null_typed(&args)? {
            return Ok(null);
        }
        if matches!(self.guard, Guard::Subscript | Guard::Slice) {
            return self
                .inner
                .invoke_with_args(pg_subscripts(args, self.guard)?);
        }
        if self.guard == Guard::Logarithm {
            for a in &args.args {
                let values = float_values(a);
                if values.contains(&Some(0.0)) {
                    return exec_err!("cannot take logarithm of zero");
                }
                if values.iter().flatten().any(|v| *v < 0.0) {
                    return exec_err!("cannot take logarithm of a negative number");
                }
            }
            return self.inner.invoke_with_args(args);
        }
        // Power: the arguments, row by row (a scalar stands for every row), against
        // the result.
        let inputs: Vec<Vec<Option<f64>>> = args.args.iter().map(float_values).collect();
        let out = self.inner.invoke_with_args(args)?;
        let at = |values: &Vec<Option<f64>>, i: usize| {
            if values.len() == 1 {
                values[0]
            } else {
                values.get(i).copied().flatten()
            }
        };
        for (i, r) in float_values(&out).into_iter().enumerate() {
            let Some(r) = r else { continue };
            let args: Vec<f64> = inputs.iter().filter_map(|v| at(v, i)).collect();
            if args.len() != inputs.len() || args.iter().any(|a| !a.is_finite()) {
                continue;
            }
            if r.is_infinite() {
                return exec_err!("value out of range: overflow");
            }
            // exp(x) is never zero; power(b, e) is zero only for b = 0.
            if r == 0.0 && (args.len() == 1 || args[0] != 0.0) {
                return exec_err!("value out of range: underflow");
            }
        }
        Ok(out)
    }
}

/// The arguments of `array_element` / `array_slice` with PostgreSQL's subscripts made
/// into DataFusion's: a subscript below 1 is NULL; a slice's lower bound below 1 is 1,
/// and an upper bound below 1 makes the bounds `2:1`, an empty slice.
fn pg_subscripts(mut args: ScalarFunctionArgs, guard: Guard) -> DfResult<ScalarFunctionArgs> {
    use datafusion::arrow::array::Int64Array;
    let rows = args.number_rows;
    let index = |a: &ColumnarValue| -> DfResult<Int64Array> {
        let a = a.to_array(rows)?;
        let a = datafusion::arrow::compute::cast(&a, &DataType::Int64)?;
        Ok(a.as_primitive::<Int64Type>().clone())
    };
    let scalar = args
        .args
        .iter()
        .all(|a| matches!(a, ColumnarValue::Scalar(_)));
    let wrap = |a: Int64Array| -> DfResult<ColumnarValue> {
        if scalar {
            Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&a, 0)?))
        } else {
            Ok(ColumnarValue::Array(Arc::new(a)))
        }
    };
    match guard {
        Guard::Subscript if args.args.len() == 2 => {
            let i = index(&args.args[1])?;
            let i: Int64Array = i.iter().map(|v| v.filter(|v| *v >= 1)).collect();
            args.args[1] = wrap(i)?;
        }
        Guard::Slice if args.args.len() >= 3 => {
            let (lo, hi) = (index(&args.args[1])?, index(&args.args[2])?);
            let (lo, hi): (Vec<Option<i64>>, Vec<Option<i64>>) = lo
                .iter()
                .zip(hi.iter())
                .map(|(l, h)| match (l, h) {
                    (Some(_), Some(h)) if h < 1 => (Some(2), Some(1)),
                    (Some(l), h) => (Some(l.max(1)), h),
                    other => other,
                })
                .unzip();
            args.args[1] = wrap(lo.into_iter().collect())?;
            args.args[2] = wrap(hi.into_iter().collect())?;
        }
        _ => {}
    }
    Ok(args)
}

/// What [`SameType`] does to each value, keeping its type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Reshape {
    /// A float with one representation per value: -0 as 0, every NaN as one NaN.
    Canonical,
    /// A float or numeric rounded to an integral value before a cast to an integer
    /// type: floats to the nearest, ties to even (PostgreSQL's `rint`), unless
    /// `ties_away` (a float that stands for a numeric: a decimal literal); numerics half
    /// away from zero (PostgreSQL's numeric rounding).
    Round { ties_away: bool },
}

/// A function of one float or numeric argument that returns the same type ([`Reshape`]).
#[derive(Debug, PartialEq, Eq, Hash)]
struct SameType {
    signature: Signature,
    reshape: Reshape,
}

impl SameType {
    fn new(reshape: Reshape) -> Self {
        SameType {
            signature: Signature::any(1, Volatility::Immutable),
            reshape,
        }
    }
}

impl ScalarUDFImpl for SameType {
    fn name(&self) -> &str {
        match self.reshape {
            Reshape::Canonical => "tarn_canonical_float",
            Reshape::Round { .. } => "tarn_round_for_integer",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> DfResult<DataType> {
        Ok(args[0].clone())
    }

    fn return_field_from_args(
        &self,
        args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> DfResult<datafusion::arrow::datatypes::FieldRef> {
        result_field(self.name(), &args, None)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        use datafusion::arrow::array::PrimitiveArray;
        use datafusion::arrow::datatypes::{Decimal128Type, Decimal256Type, i256};
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let a = &arrays[0];
        let ties_away = match self.reshape {
            Reshape::Canonical => {
                let out: ArrayRef = match a.data_type() {
                    DataType::Float64 => Arc::new(
                        a.as_primitive::<Float64Type>()
                            .unary::<_, Float64Type>(
                                |v| if v.is_nan() { f64::NAN } else { v + 0.0 },
                            ),
                    ),
                    DataType::Float32 => Arc::new(
                        a.as_primitive::<Float32Type>()
                            .unary::<_, Float32Type>(
                                |v| if v.is_nan() { f32::NAN } else { v + 0.0 },
                            ),
                    ),
                    _ => Arc::clone(a),
                };
                return columnar(out, scalar);
            }
            Reshape::Round { ties_away } => ties_away,
        };
        let out: ArrayRef = match a.data_type() {
            DataType::Float64 => {
                let round = if ties_away {
                    f64::round
                } else {
                    f64::round_ties_even
                };
                Arc::new(
                    a.as_primitive::<Float64Type>()
                        .unary::<_, Float64Type>(round),
                )
            }
            DataType::Float32 => {
                let round = if ties_away {
                    f32::round
                } else {
                    f32::round_ties_even
                };
                Arc::new(
                    a.as_primitive::<Float32Type>()
                        .unary::<_, Float32Type>(round),
                )
            }
            DataType::Decimal128(p, s) => {
                let unit = 10i128
                    .checked_pow(u32::try_from(*s).unwrap_or(0))
                    .unwrap_or(i128::MAX);
                let rounded: PrimitiveArray<Decimal128Type> =
                    a.as_primitive::<Decimal128Type>().unary(|v| {
                        let (q, r) = (v / unit, v % unit);
                        let up = r.unsigned_abs() >= unit.unsigned_abs().div_ceil(2);
                        (q + if up { v.signum() } else { 0 }).saturating_mul(unit)
                    });
                Arc::new(rounded.with_precision_and_scale(*p, *s)?)
            }
            DataType::Decimal256(p, s) => {
                let unit = i256::from_i128(10).wrapping_pow(u32::try_from(*s).unwrap_or(0));
                let half = unit.wrapping_div(i256::from_i128(2));
                let rounded: PrimitiveArray<Decimal256Type> =
                    a.as_primitive::<Decimal256Type>().unary(|v| {
                        let (q, r) = (v.wrapping_div(unit), v.wrapping_rem(unit));
                        let up = r.wrapping_abs() >= half && unit != i256::from_i128(1);
                        let step = if v < i256::ZERO {
                            i256::MINUS_ONE
                        } else {
                            i256::ONE
                        };
                        let q = if up { q.wrapping_add(step) } else { q };
                        q.wrapping_mul(unit)
                    });
                Arc::new(rounded.with_precision_and_scale(*p, *s)?)
            }
            _ => Arc::clone(a),
        };
        columnar(out, scalar)
    }
}

/// `to_timestamp(seconds)` as PostgreSQL computes it: the seconds since 1970 to the
/// microsecond, as a `timestamp` (microseconds, the type of Tarn's timestamp columns,
/// so 2286 is as reachable as in PostgreSQL). DataFusion's made nanoseconds and clamped
/// whatever fell outside 1677–2262 to its ends, NaN to 1970 and Infinity to 2262.
/// NaN and ±Infinity are `timestamp cannot be NaN` / `timestamp out of range`, as a
/// value past about 294,000 years either side of 1970 is.
#[derive(Debug, PartialEq, Eq, Hash)]
struct SecondsToTimestamp {
    signature: Signature,
}

impl SecondsToTimestamp {
    fn new() -> Self {
        SecondsToTimestamp {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

const MICROSECONDS: DataType =
    DataType::Timestamp(datafusion::arrow::datatypes::TimeUnit::Microsecond, None);

impl ScalarUDFImpl for SecondsToTimestamp {
    fn name(&self) -> &str {
        "tarn_to_timestamp"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DfResult<DataType> {
        Ok(MICROSECONDS)
    }

    fn return_field_from_args(
        &self,
        args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> DfResult<datafusion::arrow::datatypes::FieldRef> {
        result_field(self.name(), &args, Some(MICROSECONDS))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let seconds = datafusion::arrow::compute::cast(&arrays[0], &DataType::Float64)?;
        let mut out =
            datafusion::arrow::array::TimestampMicrosecondBuilder::with_capacity(seconds.len());
        for v in seconds.as_primitive::<Float64Type>().iter() {
            match v {
                None => out.append_null(),
                Some(v) if v.is_nan() => return exec_err!("timestamp cannot be NaN"),
                Some(v) => {
                    let micros = (v * 1e6).round();
                    // i64::MAX as f64 rounds up to 2^63, which does not fit: strict.
                    if !micros.is_finite() || micros.abs() >= 9.223_372_036_854_775e18 {
                        return exec_err!(
                            "timestamp out of range: {}",
                            tarn_catalog::shown(&v.to_string())
                        );
                    }
                    out.append_value(micros as i64);
                }
            }
        }
        columnar(Arc::new(out.finish()), scalar)
    }
}

// ---------------------------------------------------------------------------------------
// sum

/// DataFusion's `sum`, except over integers: an exact sum that fails with `bigint out of
/// range` when the result does not fit (DataFusion's wraps around: the sum of two
/// 9223372036854775807 was -2). Registered under the name `sum`, so it replaces the
/// default one, in aggregates and in windows alike.
pub fn checked_sum() -> AggregateUDF {
    AggregateUDF::new_from_impl(CheckedSum {
        inner: datafusion::functions_aggregate::sum::sum_udaf(),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct CheckedSum {
    inner: Arc<AggregateUDF>,
}

impl CheckedSum {
    /// Ours for a non-DISTINCT sum of integers (summed as int8).
    fn ours(args: &AccumulatorArgs) -> bool {
        !args.is_distinct && args.return_field.data_type() == &DataType::Int64
    }
}

impl AggregateUDFImpl for CheckedSum {
    fn name(&self) -> &str {
        "sum"
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        self.inner.return_type(arg_types)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        if Self::ours(&args) {
            return Ok(Box::new(ExactSum::default()));
        }
        self.inner.accumulator(args)
    }

    /// An int8 sum's partial state is 128 bits: a partition's sum may leave int8's range
    /// where the total does not.
    fn state_fields(
        &self,
        args: StateFieldsArgs,
    ) -> DfResult<Vec<datafusion::arrow::datatypes::FieldRef>> {
        if !args.is_distinct && args.return_type() == &DataType::Int64 {
            return Ok(vec![Arc::new(datafusion::arrow::datatypes::Field::new(
                format!("{}[sum]", args.name),
                PARTIAL,
                true,
            ))]);
        }
        self.inner.state_fields(args)
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.inner.groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> DfResult<Box<dyn GroupsAccumulator>> {
        if Self::ours(&args) {
            return Ok(Box::new(CheckedGroups::default()));
        }
        self.inner.create_groups_accumulator(args)
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        if Self::ours(&args) {
            return Ok(Box::new(ExactSum::default()));
        }
        self.inner.create_sliding_accumulator(args)
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        ReversedUDAF::Identical
    }

    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        AggregateOrderSensitivity::Insensitive
    }

    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.inner.inner().set_monotonicity(data_type)
    }

    fn documentation(&self) -> Option<&datafusion::logical_expr::Documentation> {
        self.inner.documentation()
    }
}

/// An int8 sum kept in 128 bits (also when rows are taken out of a window frame), which
/// fails when read if it does not fit 64.
#[derive(Debug, Default)]
struct ExactSum {
    sum: i128,
    count: u64,
}

/// The partial state of an int8 sum.
const PARTIAL: DataType = DataType::Decimal128(38, 0);

/// Partial sums (a state array) as 128-bit values.
fn partials(state: &ArrayRef) -> DfResult<datafusion::arrow::array::Decimal128Array> {
    let a = datafusion::arrow::compute::cast(state, &PARTIAL)?;
    Ok(
        a.as_primitive::<datafusion::arrow::datatypes::Decimal128Type>()
            .clone(),
    )
}

impl ExactSum {
    fn add(&mut self, values: &ArrayRef, sign: i128) -> DfResult<()> {
        let a = values.as_primitive::<Int64Type>();
        for v in a.iter().flatten() {
            self.sum += sign * i128::from(v);
            if sign > 0 {
                self.count += 1;
            } else {
                self.count = self.count.saturating_sub(1);
            }
        }
        Ok(())
    }

    fn value(&self) -> DfResult<ScalarValue> {
        if self.count == 0 {
            return Ok(ScalarValue::Int64(None));
        }
        match i64::try_from(self.sum) {
            Ok(v) => Ok(ScalarValue::Int64(Some(v))),
            Err(_) => exec_err!("bigint out of range"),
        }
    }
}

impl Accumulator for ExactSum {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        self.add(&values[0], 1)
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        self.add(&values[0], -1)
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        for v in partials(&states[0])?.iter().flatten() {
            self.sum += v;
            self.count += 1;
        }
        Ok(())
    }

    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        let sum = (self.count > 0).then_some(self.sum);
        Ok(vec![ScalarValue::Decimal128(sum, 38, 0)])
    }

    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        self.value()
    }

    fn size(&self) -> usize {
        std::mem::size_of::<Self>()
    }
}

/// Grouped int8 sums kept in 128 bits: a running total may leave int8's range on the
/// way (`max + max - max`); only a sum read out of range fails.
#[derive(Debug, Default)]
struct CheckedGroups {
    sums: Vec<i128>,
    seen: Vec<bool>,
}

impl CheckedGroups {
    fn add(
        &mut self,
        values: &ArrayRef,
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> DfResult<()> {
        self.sums.resize(total_num_groups, 0);
        self.seen.resize(total_num_groups, false);
        let a = values.as_primitive::<Int64Type>();
        for (row, &g) in group_indices.iter().enumerate() {
            if a.is_null(row) || opt_filter.is_some_and(|f| !f.is_valid(row) || !f.value(row)) {
                continue;
            }
            // 2^64 int8 values cannot overflow 128 bits.
            self.sums[g] += i128::from(a.value(row));
            self.seen[g] = true;
        }
        Ok(())
    }

    fn emit(&mut self, emit_to: EmitTo) -> DfResult<ArrayRef> {
        let sums = emit_to.take_needed(&mut self.sums);
        let seen = emit_to.take_needed(&mut self.seen);
        let mut values = datafusion::arrow::array::Int64Builder::with_capacity(sums.len());
        for (v, s) in sums.into_iter().zip(seen) {
            if !s {
                values.append_null();
                continue;
            }
            match i64::try_from(v) {
                Ok(v) => values.append_value(v),
                Err(_) => return exec_err!("bigint out of range"),
            }
        }
        Ok(Arc::new(values.finish()))
    }
}

impl GroupsAccumulator for CheckedGroups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> DfResult<()> {
        self.add(&values[0], group_indices, opt_filter, total_num_groups)
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> DfResult<ArrayRef> {
        self.emit(emit_to)
    }

    fn state(&mut self, emit_to: EmitTo) -> DfResult<Vec<ArrayRef>> {
        let sums = emit_to.take_needed(&mut self.sums);
        let seen = emit_to.take_needed(&mut self.seen);
        let state: datafusion::arrow::array::Decimal128Array = sums
            .into_iter()
            .zip(seen)
            .map(|(v, s)| s.then_some(v))
            .collect();
        Ok(vec![Arc::new(state.with_precision_and_scale(38, 0)?)])
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> DfResult<()> {
        self.sums.resize(total_num_groups, 0);
        self.seen.resize(total_num_groups, false);
        let a = partials(&values[0])?;
        for (row, &g) in group_indices.iter().enumerate() {
            if a.is_valid(row) {
                self.sums[g] += a.value(row);
                self.seen[g] = true;
            }
        }
        Ok(())
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> DfResult<Vec<ArrayRef>> {
        // Each row its own state: the row's value, NULL where the filter drops it.
        let a = values[0].as_primitive::<Int64Type>();
        let state: datafusion::arrow::array::Decimal128Array = (0..a.len())
            .map(|i| {
                let keep = opt_filter.is_none_or(|f| f.is_valid(i) && f.value(i));
                (keep && a.is_valid(i)).then(|| i128::from(a.value(i)))
            })
            .collect();
        Ok(vec![Arc::new(state.with_precision_and_scale(38, 0)?)])
    }

    fn size(&self) -> usize {
        self.sums.capacity() * std::mem::size_of::<i128>() + self.seen.capacity()
    }
}
