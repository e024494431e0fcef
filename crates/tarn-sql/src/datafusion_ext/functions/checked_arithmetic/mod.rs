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
//! range for type double precision`. Output names are preserved. `sum` and `avg` are
//! replaced in the registry by [`checked_sum`] and [`checked_avg`].
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
use datafusion::common::utils::base_type;
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

mod containment;
mod float;
mod float_sum;
mod guarded;
mod integer;
mod sum;

use super::interval_key::is_interval;
use containment::*;
use float::*;
pub use float_sum::checked_avg;
use float_sum::*;
use guarded::*;
use integer::*;
pub use sum::checked_sum;

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
            let schema = crate::datafusion_ext::plan::input_schema(&plan);
            let preserver = NamePreserver::new(&plan);
            // ORDER BY an interval orders by PostgreSQL's key too (see `binary`).
            let sort = matches!(plan, LogicalPlan::Sort(_));
            plan.map_expressions(|e| {
                let saved = preserver.save(&e);
                let (mut e, _, mut changed) = rewrite(e, &schema)?;
                if sort && e.get_type(&schema).is_ok_and(|t| is_interval(&t)) {
                    e = interval_key(e);
                    changed = true;
                }
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
        crate::datafusion_ext::plan::rederive_schemas(rewritten.data)
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

/// Whether PostgreSQL has no cast from `from` to `to` where Arrow has one that makes a
/// number of a boolean or a temporal value (or a temporal value of a number).
fn no_pg_cast(from: &DataType, to: &DataType) -> bool {
    let numeric = |t: &DataType| {
        is_integer(t)
            || is_float(t)
            || matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..))
    };
    let temporal = |t: &DataType| {
        matches!(
            t,
            DataType::Date32
                | DataType::Date64
                | DataType::Timestamp(..)
                | DataType::Time32(_)
                | DataType::Time64(_)
        )
    };
    match from {
        DataType::Boolean => numeric(to) && *to != DataType::Int32,
        f if temporal(f) => numeric(to),
        f if numeric(f) => temporal(to),
        _ => false,
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

/// The int4 (or int2) value of `e`, when `e` is one or is one widened by a cast.
fn narrow_int(e: &Expr, schema: &DFSchema) -> Option<Expr> {
    let narrow = |t: &DataType| matches!(t, DataType::Int8 | DataType::Int16 | DataType::Int32);
    if e.get_type(schema).is_ok_and(|t| narrow(&t)) {
        return Some(e.clone());
    }
    // An integer literal that fits is an int4 in PostgreSQL (`to_hex(-1)` too).
    let fits = |e: &Expr| matches!(e, Expr::Literal(ScalarValue::Int64(Some(v)), _) if i32::try_from(*v).is_ok());
    match e {
        Expr::Cast(Cast { expr, field })
            if field.data_type() == &DataType::Int64
                && expr.get_type(schema).is_ok_and(|t| narrow(&t)) =>
        {
            Some(expr.as_ref().clone())
        }
        e if fits(e) => Some(e.clone()),
        Expr::Negative(x) if fits(x) => Some(e.clone()),
        _ => None,
    }
}

/// `e` (an interval) as the number PostgreSQL orders intervals by.
pub(crate) fn interval_key(e: Expr) -> Expr {
    let month_day_nano =
        DataType::Interval(datafusion::arrow::datatypes::IntervalUnit::MonthDayNano);
    call(
        super::interval_key::IntervalKey::new(),
        vec![Expr::Cast(Cast::new(Box::new(e), month_day_nano))],
    )
}

/// A cast to `field` of `expr` rewritten and passed through `through` first (a
/// function that writes or reshapes the value as PostgreSQL's cast would).
fn cast_through(
    expr: Expr,
    field: datafusion::arrow::datatypes::FieldRef,
    schema: &DFSchema,
    through: impl FnOnce(Expr) -> Expr,
) -> DfResult<(Expr, Option<DataType>, bool)> {
    let (x, _, _) = rewrite(expr, schema)?;
    let t = field.data_type().clone();
    Ok((
        Expr::Cast(Cast::new_from_field(Box::new(through(x)), field)),
        Some(t),
        true,
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
        // Casts PostgreSQL does not have, which Arrow's cast makes numbers of: a boolean
        // has a cast to int4 only (Arrow made `ARRAY[true,false]::float4[]` the vector
        // {1,0}, which `<#>` scored); a date, time or timestamp has none to or from a
        // number (`now()::date::int` was the day count). Arrays by element.
        Expr::Cast(Cast { expr, field })
            if expr
                .get_type(schema)
                .is_ok_and(|from| no_pg_cast(&base_type(&from), &base_type(field.data_type()))) =>
        {
            let from = expr.get_type(schema)?;
            datafusion::common::plan_err!(
                "cannot cast type {} to {}",
                crate::error::pg_type_names(&from.to_string()),
                crate::error::pg_type_names(&field.data_type().to_string())
            )
        }
        // An array of arrays cast to an array of one level fewer (`ARRAY[['a','b']]::text[]`):
        // Arrow cast each inner array to its display text (`[a, b]`, NULL and '' alike);
        // Tarn's array types have one level, as the numbers' casts already refused.
        // … and a value cast to an array of more levels than it has (`5::float4[]`):
        // Arrow wrapped it (`{5}`), PostgreSQL has no such cast. Text is array text,
        // parsed by the cast, and NULL casts to anything.
        Expr::Cast(Cast { expr, field })
            if expr.get_type(schema).is_ok_and(|from| {
                let to = crate::ast::types::list_depth(field.data_type());
                let depth = crate::ast::types::list_depth(&from);
                to >= 1
                    && (depth > to
                        || (depth < to
                            && !matches!(
                                base_type(&from),
                                DataType::Utf8
                                    | DataType::LargeUtf8
                                    | DataType::Utf8View
                                    | DataType::Null
                            )))
            }) =>
        {
            let from = expr.get_type(schema)?;
            datafusion::common::plan_err!(
                "cannot cast type {} to {}",
                crate::error::pg_type_names(&from.to_string()),
                crate::error::pg_type_names(&field.data_type().to_string())
            )
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
            cast_through(*expr, field, schema, |x| {
                call(super::array_out::ArrayOut::new(), vec![x])
            })
        }
        // A float or numeric array cast to an integer array rounds each element.
        Expr::Cast(Cast { expr, field })
            if super::array_out::is_array(field.data_type())
                && is_integer(&base_type(field.data_type()))
                && expr
                    .get_type(schema)
                    .is_ok_and(|t| crate::value::coerce::fractional_list(&t)) =>
        {
            let from = expr.get_type(schema)?;
            let ties_even = is_float(&base_type(&from));
            cast_through(*expr, field, schema, |x| {
                call(RoundElements::new(ties_even), vec![x])
            })
        }
        // Text to bytea: PostgreSQL's input forms (`\x4142` is two bytes); Arrow's cast
        // took the text's own bytes.
        Expr::Cast(Cast { expr, field })
            if matches!(
                field.data_type(),
                DataType::Binary | DataType::LargeBinary | DataType::BinaryView
            ) && expr.get_type(schema).is_ok_and(|t| {
                matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
            }) =>
        {
            cast_through(*expr, field, schema, |x| {
                call(
                    super::bytea_in::ByteaIn::new(),
                    vec![Expr::Cast(Cast::new(Box::new(x), DataType::Utf8))],
                )
            })
        }
        // A bytea to text: PostgreSQL's hex form (`\x0102`); Arrow's cast read the
        // bytes as UTF-8 and failed on any other.
        Expr::Cast(Cast { expr, field })
            if matches!(
                field.data_type(),
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
            ) && expr.get_type(schema).is_ok_and(|t| {
                matches!(
                    t,
                    DataType::Binary | DataType::LargeBinary | DataType::BinaryView
                )
            }) =>
        {
            cast_through(*expr, field, schema, |x| {
                let hex = Expr::ScalarFunction(ScalarFunction::new_udf(
                    datafusion::functions::encoding::encode(),
                    vec![
                        Expr::Cast(Cast::new(Box::new(x), DataType::Binary)),
                        Expr::Literal(ScalarValue::Utf8(Some("hex".into())), None),
                    ],
                ));
                Expr::BinaryExpr(BinaryExpr::new(
                    Box::new(Expr::Literal(ScalarValue::Utf8(Some("\\x".into())), None)),
                    Operator::StringConcat,
                    Box::new(hex),
                ))
            })
        }
        // A float to text: PostgreSQL's float text (`1`, `1e+20`, `Infinity`).
        Expr::Cast(Cast { expr, field })
            if matches!(
                field.data_type(),
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
            ) && expr.get_type(schema).is_ok_and(|t| is_float(&t)) =>
        {
            cast_through(*expr, field, schema, |x| {
                call(super::float_out::FloatOut::new(), vec![x])
            })
        }
        // A float (or an array of float4) cast from float8 or text, arrays by element.
        Expr::Cast(Cast { expr, field })
            if is_float(field.data_type())
                || (super::array_out::is_array(field.data_type())
                    && base_type(field.data_type()) == DataType::Float32) =>
        {
            let data_type = field.data_type().clone();
            let (x, t, changed) = rewrite(*expr, schema)?;
            let from = match t {
                Some(t) => Some(t),
                None => x.get_type(schema).ok(),
            };
            let checked = from.as_ref().is_some_and(|from| {
                matches!(
                    base_type(from),
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Float64
                ) && from != &data_type
                    && super::array_out::is_array(from) == super::array_out::is_array(&data_type)
            });
            if checked {
                Ok((
                    call(FloatIn::new(data_type.clone()), vec![x]),
                    Some(data_type),
                    true,
                ))
            } else {
                Ok((
                    Expr::Cast(Cast::new_from_field(Box::new(x), field)),
                    Some(data_type),
                    changed,
                ))
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
                && !matches!(&f.args[0], Expr::Literal(..))
                && !matches!(&f.args[0], Expr::Negative(x) if matches!(x.as_ref(), Expr::Literal(..)))
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
        // `array_length` of an empty array is NULL in PostgreSQL (an empty array has no
        // dimensions; a non-empty one has no dimension of length 0); DataFusion's was 0.
        Expr::ScalarFunction(f) if f.func.name() == "array_length" => {
            let mut f = f;
            f.args = f
                .args
                .into_iter()
                .map(|a| Ok(rewrite(a, schema)?.0))
                .collect::<DfResult<Vec<_>>>()?;
            let length = Expr::ScalarFunction(f);
            let zero = match length.get_type(schema) {
                Ok(t) => ScalarValue::new_zero(&t)?,
                Err(_) => return Ok((length, None, true)),
            };
            Ok((
                datafusion::functions::core::expr_fn::nullif(length, Expr::Literal(zero, None)),
                None,
                true,
            ))
        }
        // `to_hex` of an int4 (or smaller) writes its 32 bits, as PostgreSQL's `to_hex(int4)`
        // (`to_hex(-1)` is `ffffffff`); DataFusion's widened it to 64 first.
        Expr::ScalarFunction(f)
            if f.func.name() == "to_hex"
                && f.args.len() == 1
                && narrow_int(&f.args[0], schema).is_some() =>
        {
            let mut f = f;
            let arg = f.args.remove(0);
            let inner = narrow_int(&arg, schema).unwrap_or(arg);
            let (inner, _, _) = rewrite(inner, schema)?;
            let bits = Expr::BinaryExpr(BinaryExpr::new(
                Box::new(Expr::Cast(Cast::new(Box::new(inner), DataType::Int64))),
                Operator::BitwiseAnd,
                Box::new(Expr::Literal(ScalarValue::Int64(Some(0xffff_ffff)), None)),
            ));
            f.args = vec![bits];
            Ok((Expr::ScalarFunction(f), None, true))
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
        Operator::Modulo => Some(Op::Rem),
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
        // Intervals compare as PostgreSQL's do: a month is 30 days and a day 24 hours
        // (`functions::interval_key`).
        if matches!(
            op,
            Operator::Eq
                | Operator::NotEq
                | Operator::Lt
                | Operator::LtEq
                | Operator::Gt
                | Operator::GtEq
                | Operator::IsDistinctFrom
                | Operator::IsNotDistinctFrom
        ) && l.get_type(schema).is_ok_and(|t| is_interval(&t))
            && r.get_type(schema).is_ok_and(|t| is_interval(&t))
        {
            return Ok((
                Expr::BinaryExpr(BinaryExpr::new(
                    Box::new(interval_key(l)),
                    op,
                    Box::new(interval_key(r)),
                )),
                Some(DataType::Boolean),
                true,
            ));
        }
        // An int4 shifted is an int4 in PostgreSQL (`1 << 100` is 16: the count is taken
        // modulo 32), where the widened int8 shift gave 2^36.
        if matches!(op, Operator::BitwiseShiftLeft | Operator::BitwiseShiftRight)
            && !l_written
            && !r_written
            && l.get_type(schema).is_ok_and(|t| t == DataType::Int64)
            && let (Some(nlt), Some(nrt)) = (narrow_type(&l, schema), narrow_type(&r, schema))
        {
            let t = DataType::Int32;
            let shifted = Expr::BinaryExpr(BinaryExpr::new(
                Box::new(widen(narrowed(l), &nlt, &t)),
                op,
                Box::new(widen(narrowed(r), &nrt, &t)),
            ));
            return Ok((
                widen(shifted, &t, &DataType::Int64),
                Some(DataType::Int64),
                true,
            ));
        }
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
    if kind == Op::Rem && !(lt == rt && is_float(&lt)) {
        let ty = BinaryTypeCoercer::new(&lt, &op, &rt).get_result_type().ok();
        return unchanged(l, r, ty);
    }
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
    // Division too: `MIN / -1` is its one overflow, which an int4 division widened to
    // int8 by coercion answered as 2147483648.
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
