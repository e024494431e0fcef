//! `AND` and `OR` that evaluate an operation that can fail only where it decides the answer.
//!
//! PostgreSQL evaluates `a AND b` left to right and skips `b` where `a` is false (`a OR b`:
//! where `a` is true), and its planner runs cheap quals before costly ones, so
//! `WHERE d <> 0 AND 1 / d > 0.2` never divides by zero and `a < 1000 AND a * 2 > 0` never
//! overflows on the rows `a < 1000` rejects. DataFusion evaluates both sides of a boolean
//! operator over the whole batch (it skips the right side only when few rows pass the
//! left), so an operation that fails on a row the filter would drop — integer and float
//! arithmetic, which Tarn checks, division, casts of text, a scalar subquery's value —
//! failed the statement.
//!
//! This physical optimizer rule gives filters (also a join's and the top-k search's) that
//! evaluation order:
//!
//! - A filter's conjuncts are split, as PostgreSQL orders its quals by cost: those
//!   without an operation that can fail run first, in a filter of their own (so that
//!   DataFusion still sees their constants and equalities), and the others above it, on
//!   the rows that passed. A join's or a search's filter becomes `safe AND lazy(rest)`.
//! - Within a conjunct, every `AND`/`OR` with a side that can fail becomes a
//!   [`LazyBool`] in the written order (PostgreSQL does not reorder inside an
//!   expression): the second side counts only on the rows the first leaves undecided
//!   (`AND`: true or NULL; `OR`: false or NULL). It is evaluated over the whole batch
//!   first, which costs nothing extra when nothing fails, and only when that fails again
//!   over the undecided rows alone, whose error, if any, is the statement's.
//!
//! The answer is SQL's three-valued one, and the first side is evaluated once per row
//! (`random() < 0.5` stays one draw). It works on the physical plan because DataFusion's
//! logical simplifier turns a boolean `CASE` into `AND`/`OR` on each of its passes, so a
//! guard written as `CASE` in the logical plan does not survive; the same rewrite
//! restores the laziness of a user's `CASE WHEN d <> 0 THEN 1 / d > 0.2 ELSE false END`,
//! which the simplifier has made `d <> 0 AND 1 / d > 0.2`.
//!
//! Not covered (DataFusion moves the operation before this rule sees it): an operation
//! that common-subexpression elimination computes below the filter because it is
//! written twice, a one-sided part of an outer join's `ON` that is pushed into a
//! projection, and aggregate `FILTER (WHERE …)` clauses.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray};
use datafusion::arrow::buffer::BooleanBuffer;
use datafusion::arrow::compute::kernels::boolean::{and_kleene, or_kleene};
use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::cast::as_boolean_array;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::{Result, internal_err};
use datafusion::logical_expr::{ColumnarValue, Operator};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::ScalarFunctionExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, CastExpr};
use datafusion::physical_expr::utils::split_conjunction;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::joins::utils::JoinFilter;
use datafusion::physical_plan::joins::{HashJoinExec, NestedLoopJoinExec};

/// The rule; install last among the physical optimizer rules (nothing after it should
/// move or rebuild the filters it rewrote).
#[derive(Debug, Default)]
pub struct LazyFallible;

impl PhysicalOptimizerRule for LazyFallible {
    fn name(&self) -> &str {
        "tarn_lazy_fallible"
    }

    fn schema_check(&self) -> bool {
        true
    }

    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            if let Some(f) = node.downcast_ref::<FilterExec>() {
                let input = Arc::clone(f.input());
                let schema = input.schema();
                let (safe, fallible) = split(f.predicate(), &schema)?;
                let Some(fallible) = fallible else {
                    return Ok(Transformed::no(node));
                };
                let input = match safe {
                    Some(safe) => Arc::new(
                        FilterExecBuilder::new(safe, input)
                            .with_default_selectivity(f.default_selectivity())
                            .with_batch_size(f.batch_size())
                            .build()?,
                    ) as Arc<dyn ExecutionPlan>,
                    None => input,
                };
                let exec = FilterExecBuilder::from(f)
                    .with_input(input)
                    .with_predicate(fallible)
                    .build()?;
                return Ok(Transformed::yes(Arc::new(exec) as Arc<dyn ExecutionPlan>));
            }
            if let Some(j) = node.downcast_ref::<HashJoinExec>() {
                let Some(filter) = j.filter().map(guard_join_filter).transpose()?.flatten() else {
                    return Ok(Transformed::no(node));
                };
                let exec = j.builder().with_filter(Some(filter)).build()?;
                return Ok(Transformed::yes(Arc::new(exec) as Arc<dyn ExecutionPlan>));
            }
            if let Some(j) = node.downcast_ref::<NestedLoopJoinExec>() {
                let Some(filter) = j.filter().map(guard_join_filter).transpose()?.flatten() else {
                    return Ok(Transformed::no(node));
                };
                let exec = datafusion::physical_plan::joins::NestedLoopJoinExecBuilder::from(j)
                    .with_filter(Some(filter))
                    .build()?;
                return Ok(Transformed::yes(Arc::new(exec) as Arc<dyn ExecutionPlan>));
            }
            Ok(Transformed::no(node))
        })
        .data()
    }
}

fn guard_join_filter(filter: &JoinFilter) -> Result<Option<JoinFilter>> {
    Ok(guard(filter.expression(), filter.schema())?.map(|e| {
        JoinFilter::new(
            e,
            filter.column_indices().to_vec(),
            Arc::clone(filter.schema()),
        )
    }))
}

type ExprRef = Arc<dyn PhysicalExpr>;

/// A filter predicate split into its conjuncts that cannot fail (as written) and the
/// others, made lazy and chained in their written order; `(_, None)` when none can fail.
fn split(e: &Arc<dyn PhysicalExpr>, schema: &Schema) -> Result<(Option<ExprRef>, Option<ExprRef>)> {
    let (mut safe, mut failing) = (Vec::new(), Vec::new());
    for c in split_conjunction(e) {
        if fallible(c, schema) {
            failing.push(lazy(c, schema)?);
        } else {
            safe.push(Arc::clone(c));
        }
    }
    if failing.is_empty() {
        return Ok((None, None));
    }
    let safe = safe
        .into_iter()
        .reduce(|a, b| Arc::new(BinaryExpr::new(a, Operator::And, b)) as Arc<dyn PhysicalExpr>);
    let failing = failing.into_iter().reduce(|a, b| {
        Arc::new(LazyBool {
            op: LazyOp::And,
            first: a,
            second: b,
        }) as Arc<dyn PhysicalExpr>
    });
    Ok((safe, failing))
}

/// `e` evaluated with a filter's order (see the module documentation) as one expression,
/// or `None` when no part of it can fail.
pub(crate) fn guard(
    e: &Arc<dyn PhysicalExpr>,
    schema: &Schema,
) -> Result<Option<Arc<dyn PhysicalExpr>>> {
    Ok(match split(e, schema)? {
        (_, None) => None,
        (None, Some(failing)) => Some(failing),
        (Some(safe), Some(failing)) => Some(Arc::new(LazyBool {
            op: LazyOp::And,
            first: safe,
            second: failing,
        })),
    })
}

/// `e` with every `AND`/`OR` that has a side that can fail made lazy, in written order.
fn lazy(e: &Arc<dyn PhysicalExpr>, schema: &Schema) -> Result<Arc<dyn PhysicalExpr>> {
    Arc::clone(e)
        .transform_up(|node| {
            let Some(b) = node.downcast_ref::<BinaryExpr>() else {
                return Ok(Transformed::no(node));
            };
            let op = match b.op() {
                Operator::And => LazyOp::And,
                Operator::Or => LazyOp::Or,
                _ => return Ok(Transformed::no(node)),
            };
            if !fallible(b.left(), schema) && !fallible(b.right(), schema) {
                return Ok(Transformed::no(node));
            }
            Ok(Transformed::yes(Arc::new(LazyBool {
                op,
                first: Arc::clone(b.left()),
                second: Arc::clone(b.right()),
            }) as Arc<dyn PhysicalExpr>))
        })
        .data()
}

/// Functions that fail on some values (besides Tarn's checked arithmetic, which
/// `checked_arithmetic/` names `tarn_checked_*` and `tarn_float*`).
const FAILING_FUNCTIONS: &[&str] = &[
    crate::datafusion_ext::plan::decorrelate::SUBQUERY_VALUE,
    crate::datafusion_ext::functions::jsonb::TO_JSONB,
    crate::datafusion_ext::functions::uuid_cast::TO_UUID,
    "sqrt",
    "power",
    "pow",
    "to_timestamp",
    "to_timestamp_seconds",
    "to_timestamp_millis",
    "to_timestamp_micros",
    "to_timestamp_nanos",
    "to_date",
    "to_char",
    "make_date",
    "split_part",
    "repeat",
    "lpad",
    "rpad",
    "chr",
    "date_bin",
    "arrow_cast",
];

/// Whether evaluating `e` can fail on a row's values.
fn fallible(e: &Arc<dyn PhysicalExpr>, schema: &Schema) -> bool {
    // A lazy operator exists only over a side that can fail (no need to look inside).
    if e.is::<LazyBool>() {
        return true;
    }
    let here = if let Some(f) = e.downcast_ref::<ScalarFunctionExpr>() {
        let name = f.name();
        name.starts_with("tarn_checked_")
            || name.starts_with("tarn_float")
            || FAILING_FUNCTIONS.contains(&name)
    } else if let Some(b) = e.downcast_ref::<BinaryExpr>() {
        matches!(b.op(), Operator::Divide | Operator::Modulo)
    } else if let Some(c) = e.downcast_ref::<CastExpr>() {
        c.expr()
            .data_type(schema)
            .is_ok_and(|from| cast_can_fail(&from, c.cast_type()))
    } else {
        false
    };
    here || e.children().into_iter().any(|c| fallible(c, schema))
}

/// Whether a cast from `from` to `to` fails on some values: text parsed as anything
/// but text, and numbers narrowed.
fn cast_can_fail(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    let text = |t: &DataType| matches!(t, Utf8 | LargeUtf8 | Utf8View);
    let from = match from {
        Dictionary(_, v) => v.as_ref(),
        other => other,
    };
    if text(from) {
        return !text(to);
    }
    let rank = |t: &DataType| match t {
        Int8 | UInt8 => Some(1),
        Int16 | UInt16 => Some(2),
        Int32 | UInt32 => Some(3),
        Int64 | UInt64 => Some(4),
        Float16 | Float32 | Float64 | Decimal128(..) | Decimal256(..) => Some(5),
        _ => None,
    };
    match (rank(from), rank(to)) {
        (Some(f), Some(t)) => f > t || (f == 5 && t == 5 && from != to),
        _ => false,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum LazyOp {
    And,
    Or,
}

/// `first AND second` (or `OR`) that evaluates `second` only on the rows `first` leaves
/// undecided.
#[derive(Debug)]
pub(crate) struct LazyBool {
    op: LazyOp,
    first: Arc<dyn PhysicalExpr>,
    second: Arc<dyn PhysicalExpr>,
}

impl PartialEq for LazyBool {
    fn eq(&self, other: &Self) -> bool {
        self.op == other.op
            && self.first.as_ref() == other.first.as_ref()
            && self.second.as_ref() == other.second.as_ref()
    }
}

impl Eq for LazyBool {}

impl Hash for LazyBool {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.op.hash(state);
        self.first.as_ref().hash(state);
        self.second.as_ref().hash(state);
    }
}

impl fmt::Display for LazyBool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.op {
            LazyOp::And => "AND",
            LazyOp::Or => "OR",
        };
        write!(f, "({} {op} {})", self.first, self.second)
    }
}

impl PhysicalExpr for LazyBool {
    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        Ok(self.first.nullable(input_schema)? || self.second.nullable(input_schema)?)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let n = batch.num_rows();
        let first = self.first.evaluate(batch)?.into_array(n)?;
        let first = as_boolean_array(&first)?;
        // The value of `first` that decides the answer alone.
        let decisive = self.op == LazyOp::Or;
        let all_decided = first.null_count() == 0
            && if decisive {
                first.true_count() == n
            } else {
                first.false_count() == n
            };
        if all_decided {
            return Ok(ColumnarValue::Array(Arc::new(first.clone()) as ArrayRef));
        }
        // Over the whole batch first: when nothing fails, no rows are copied.
        let second = match self.second.evaluate(batch) {
            Ok(v) => v,
            Err(_) => {
                let undecided = BooleanArray::new(
                    BooleanBuffer::collect_bool(n, |i| {
                        !(first.is_valid(i) && first.value(i) == decisive)
                    }),
                    None,
                );
                // Rows outside the selection come back NULL, which the decided side
                // absorbs.
                self.second.evaluate_selection(batch, &undecided)?
            }
        };
        let second = second.into_array(n)?;
        let second = as_boolean_array(&second)?;
        let out = match self.op {
            LazyOp::And => and_kleene(first, second)?,
            LazyOp::Or => or_kleene(first, second)?,
        };
        Ok(ColumnarValue::Array(Arc::new(out)))
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.first, &self.second]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        let [first, second]: [Arc<dyn PhysicalExpr>; 2] = match children.try_into() {
            Ok(c) => c,
            Err(_) => return internal_err!("LazyBool takes two children"),
        };
        Ok(Arc::new(LazyBool {
            op: self.op,
            first,
            second,
        }))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
