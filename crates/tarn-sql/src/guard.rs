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
//! This physical optimizer rule replaces, in every filter (also a join's and the top-k
//! search's), each `AND`/`OR` with a side that can fail by a [`LazyBool`]: the side that
//! cannot fail is evaluated first, once, and the other only on the rows it leaves
//! undecided (`AND`: true or NULL; `OR`: false or NULL). The answer is SQL's three-valued
//! one in every context, not only in filters, and a volatile side (`random() < 0.5`) is
//! evaluated once per row. It works on the physical plan because DataFusion's logical
//! simplifier turns a boolean `CASE` back into `AND`/`OR`, so a guard written as `CASE`
//! in the logical plan does not survive the optimizer's later passes; the same rewrite
//! also restores the laziness of a user's `CASE WHEN d <> 0 THEN 1 / d > 0.2 ELSE false
//! END` after the simplifier has made it `d <> 0 AND 1 / d > 0.2`.

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
                let schema = f.input().schema();
                let Some(predicate) = guard(f.predicate(), &schema)? else {
                    return Ok(Transformed::no(node));
                };
                let exec = FilterExecBuilder::from(f)
                    .with_predicate(predicate)
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

/// `e` with every `AND`/`OR` that has a side that can fail made lazy, or `None` when it
/// has none.
pub(crate) fn guard(
    e: &Arc<dyn PhysicalExpr>,
    schema: &Schema,
) -> Result<Option<Arc<dyn PhysicalExpr>>> {
    let out = Arc::clone(e).transform_up(|node| {
        let Some(b) = node.downcast_ref::<BinaryExpr>() else {
            return Ok(Transformed::no(node));
        };
        let op = match b.op() {
            Operator::And => LazyOp::And,
            Operator::Or => LazyOp::Or,
            _ => return Ok(Transformed::no(node)),
        };
        let (l, r) = (b.left(), b.right());
        let (lf, rf) = (fallible(l, schema), fallible(r, schema));
        let (first, second) = match (lf, rf) {
            (false, false) => return Ok(Transformed::no(node)),
            // The side that cannot fail decides first.
            (true, false) => (r, l),
            _ => (l, r),
        };
        Ok(Transformed::yes(Arc::new(LazyBool {
            op,
            first: Arc::clone(first),
            second: Arc::clone(second),
        }) as Arc<dyn PhysicalExpr>))
    })?;
    Ok(out.transformed.then_some(out.data))
}

/// Whether evaluating `e` can fail on a row's values.
fn fallible(e: &Arc<dyn PhysicalExpr>, schema: &Schema) -> bool {
    let here = if let Some(f) = e.downcast_ref::<ScalarFunctionExpr>() {
        let name = f.name();
        name.starts_with("tarn_checked_")
            || name.starts_with("tarn_float")
            || name == crate::decorrelate::SUBQUERY_VALUE
    } else if let Some(b) = e.downcast_ref::<BinaryExpr>() {
        matches!(b.op(), Operator::Divide | Operator::Modulo)
    } else if let Some(c) = e.downcast_ref::<CastExpr>() {
        // Text to anything else parses (`s::int` fails on 'abc').
        matches!(
            c.expr().data_type(schema),
            Ok(DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
        ) && !matches!(
            c.cast_type(),
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
        )
    } else {
        false
    };
    here || e.children().into_iter().any(|c| fallible(c, schema))
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
        let undecided = BooleanArray::new(
            BooleanBuffer::collect_bool(n, |i| !(first.is_valid(i) && first.value(i) == decisive)),
            None,
        );
        let pending = undecided.true_count();
        if pending == 0 {
            return Ok(ColumnarValue::Array(Arc::new(first.clone()) as ArrayRef));
        }
        let second = if pending == n {
            self.second.evaluate(batch)?
        } else {
            // Rows outside the selection come back NULL, which the decided side absorbs.
            self.second.evaluate_selection(batch, &undecided)?
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
