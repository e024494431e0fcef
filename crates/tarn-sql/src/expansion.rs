//! Functions whose output can be far larger than their input (`repeat`, `lpad`, `rpad`,
//! `array_repeat`, `range`, scalar `generate_series`, and `concat`, `concat_ws` and
//! `||`, whose chains multiply), wrapped so that their output is
//! sized before it is made. DataFusion's versions allocate whatever is asked: one
//! `repeat('x', 1000000)` per row of a 5,000-row batch asks for 5 GB, outside any
//! statement's memory reservation, and passes 2 GiB of text in one batch (Arrow's
//! 32-bit offsets) with a panic. Here a call whose output for one batch of rows would
//! pass [`output_limits`] fails first, as PostgreSQL refuses a value over 1 GB
//! ("requested length too large").

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::datatypes::{DataType, FieldRef, Int64Type};
use datafusion::common::{Result, exec_err};
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, Expr, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature,
};

/// Most bytes one call may make: per value and per batch of rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OutputLimits {
    /// One value: a thirty-second of the statements' memory pool, within 16–256 MiB.
    /// Smaller than PostgreSQL's 1 GB because a constant value is folded into the plan,
    /// which the planner copies several times.
    pub value: u64,
    /// One batch of rows: a quarter of the pool, at least 64 MiB (a small pool still
    /// builds test vectors) and at most 1 GiB (under Arrow's 2 GiB).
    pub batch: u64,
}

/// The limits for a pool of `query_memory` bytes.
pub fn output_limits(query_memory: usize) -> OutputLimits {
    let pool = query_memory as u64;
    OutputLimits {
        value: (pool / 32).clamp(16 << 20, 256 << 20),
        batch: (pool / 4).clamp(64 << 20, 1 << 30),
    }
}

/// The functions wrapped, and how each one's output is sized.
const WRAPPED: [(&str, Kind); 8] = [
    ("concat", Kind::Concat),
    ("concat_ws", Kind::ConcatWs),
    ("repeat", Kind::Repeat),
    ("lpad", Kind::Pad),
    ("rpad", Kind::Pad),
    ("array_repeat", Kind::ArrayRepeat),
    ("range", Kind::Range),
    ("generate_series", Kind::Range),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    /// `concat(a, b, …)`: the text of its arguments (NULLs count nothing).
    Concat,
    /// `concat_ws(sep, a, b, …)`: the arguments and a separator between each two.
    ConcatWs,
    /// `repeat(text, n)`: the text's bytes times n.
    Repeat,
    /// `lpad/rpad(text, n [, fill])`: n characters (counted as bytes: ASCII).
    Pad,
    /// `array_repeat(value, n)`: n elements (counted at 8 bytes).
    ArrayRepeat,
    /// `range/generate_series(start, stop [, step])` over integers: the elements
    /// (8 bytes each).
    Range,
}

/// The wrapped versions of the functions `get` finds, ready to register over them.
pub fn wrapped(
    get: impl Fn(&str) -> Option<Arc<ScalarUDF>>,
    limits: OutputLimits,
) -> Vec<ScalarUDF> {
    WRAPPED
        .iter()
        .filter_map(|(name, kind)| {
            let inner = get(name)?;
            Some(ScalarUDF::new_from_impl(Bounded {
                inner,
                kind: *kind,
                limits,
            }))
        })
        .collect()
}

/// A DataFusion function with its output sized first.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Bounded {
    inner: Arc<ScalarUDF>,
    kind: Kind,
    limits: OutputLimits,
}

/// Row `i` of an argument as an int8, if it is one (NULL and other types: `None`).
fn ints(arg: &ColumnarValue, rows: usize) -> Option<ArrayRef> {
    let array = arg.to_array(rows).ok()?;
    let array = datafusion::arrow::compute::cast(&array, &DataType::Int64).ok()?;
    Some(array)
}

fn at(a: &ArrayRef, i: usize) -> i64 {
    if a.is_null(i) {
        0
    } else {
        a.as_primitive::<Int64Type>().value(i)
    }
}

impl Bounded {
    /// What this call would produce for the batch, in bytes (an estimate from above
    /// for text, elements × 8 for arrays).
    fn output_bytes(&self, args: &ScalarFunctionArgs) -> (u64, u64) {
        let rows = args.number_rows;
        let a = &args.args;
        let mut total: u64 = 0;
        let mut largest: u64 = 0;
        let mut add = |bytes: u64| {
            total = total.saturating_add(bytes);
            largest = largest.max(bytes);
        };
        match self.kind {
            Kind::Concat | Kind::ConcatWs => {
                // Arguments that are not text are short when written (numbers, dates).
                let lengths: Vec<Vec<Option<u64>>> = a
                    .iter()
                    .map(|x| match x.data_type() {
                        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                            text_lengths(x, rows).unwrap_or_default()
                        }
                        _ => vec![Some(32); rows],
                    })
                    .collect();
                let (sep, parts) = match self.kind {
                    Kind::ConcatWs => match lengths.split_first() {
                        Some((sep, parts)) => (Some(sep), parts),
                        None => return (0, 0),
                    },
                    _ => (None, lengths.as_slice()),
                };
                for i in 0..rows {
                    let present: Vec<u64> = parts
                        .iter()
                        .filter_map(|p| p.get(i).copied().flatten())
                        .collect();
                    let sep = sep.and_then(|s| s.get(i).copied().flatten()).unwrap_or(0);
                    let gaps = present.len().saturating_sub(1) as u64;
                    add(present.iter().sum::<u64>() + sep.saturating_mul(gaps));
                }
            }
            Kind::Repeat => {
                let (Some(Ok(len)), Some(n)) = (
                    a.first().map(|x| text_lengths(x, rows)),
                    a.get(1).and_then(|x| ints(x, rows)),
                ) else {
                    return (0, 0);
                };
                for (i, each) in len.iter().enumerate() {
                    add(each.unwrap_or(0).saturating_mul(at(&n, i).max(0) as u64));
                }
            }
            Kind::Pad | Kind::ArrayRepeat => {
                let Some(n) = a.get(1).and_then(|x| ints(x, rows)) else {
                    return (0, 0);
                };
                let each = if self.kind == Kind::Pad { 1 } else { 8 };
                for i in 0..rows {
                    add((at(&n, i).max(0) as u64).saturating_mul(each));
                }
            }
            Kind::Range => {
                // `range(stop)`, `range(start, stop)`, `range(start, stop, step)`.
                let int_args: Vec<ArrayRef> = match a
                    .iter()
                    .map(|x| match x.data_type() {
                        t if t.is_integer() => ints(x, rows),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()
                {
                    Some(v) if !v.is_empty() => v,
                    _ => return (0, 0),
                };
                for i in 0..rows {
                    let (start, stop, step) = match int_args.as_slice() {
                        [stop] => (0, at(stop, i), 1),
                        [start, stop] => (at(start, i), at(stop, i), 1),
                        [start, stop, step, ..] => (at(start, i), at(stop, i), at(step, i)),
                        [] => return (0, 0),
                    };
                    let span = (i128::from(stop) - i128::from(start)).unsigned_abs();
                    let step = i128::from(step).unsigned_abs().max(1);
                    let elements = u64::try_from(span / step + 1).unwrap_or(u64::MAX);
                    add(elements.saturating_mul(8));
                }
            }
        }
        (total, largest)
    }
}

impl ScalarUDFImpl for Bounded {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        self.inner.simplify(args, info)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let (bytes, largest) = self.output_bytes(&args);
        if largest > self.limits.value {
            return exec_err!(
                "requested length too large: {} would make a value of {largest} bytes, past \
                 the limit of {} bytes per value (a thirty-second of query_memory, within \
                 16 to 256 MiB)",
                self.inner.name(),
                self.limits.value
            );
        }
        if bytes > self.limits.batch {
            return exec_err!(
                "requested length too large: {} would make {bytes} bytes for {} row(s), past \
                 the limit of {} bytes per batch of rows (a quarter of query_memory, within \
                 64 MiB to 1 GiB)",
                self.inner.name(),
                args.number_rows,
                self.limits.batch
            );
        }
        self.inner.invoke_with_args(args)
    }
}

/// `text || text`, sized before it is made (see the module docs): DataFusion's
/// operator builds each intermediate result outside any reservation and panics past
/// 2 GiB of text in a batch (`s||s||s||s||s` over 500 rows of 1 MB took 5 GB, then a
/// panic). Planned in place of the operator when both sides are text
/// ([`ConcatPlanner`]); NULL when either side is, as the operator.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct TextConcat {
    signature: Signature,
    limits: OutputLimits,
}

/// The function's name (in EXPLAIN).
pub(crate) const TEXT_CONCAT: &str = "engine_text_concat";

impl TextConcat {
    pub(crate) fn new(limits: OutputLimits) -> Self {
        TextConcat {
            signature: Signature::uniform(
                2,
                vec![DataType::Utf8],
                datafusion::logical_expr::Volatility::Immutable,
            ),
            limits,
        }
    }
}

/// The byte length of each row of a text (or binary) argument (`None`: NULL; `None`
/// for every row of an argument of another type), without making a constant into an
/// array (a 1 MB constant over 8,192 rows would be 8 GB).
fn text_lengths(arg: &ColumnarValue, rows: usize) -> Result<Vec<Option<u64>>> {
    use datafusion::common::ScalarValue as S;
    Ok(match arg {
        ColumnarValue::Scalar(s) => {
            let len = match s {
                S::Utf8(v) | S::LargeUtf8(v) | S::Utf8View(v) => v.as_ref().map(|s| s.len()),
                S::Binary(v) | S::LargeBinary(v) | S::BinaryView(v) => v.as_ref().map(Vec::len),
                _ => None,
            };
            vec![len.map(|l| l as u64); rows]
        }
        ColumnarValue::Array(a) => {
            let Ok(lengths) = datafusion::arrow::compute::kernels::length::length(a) else {
                return Ok(vec![None; a.len()]);
            };
            let lengths = datafusion::arrow::compute::cast(&lengths, &DataType::Int64)?;
            let lengths = lengths.as_primitive::<Int64Type>();
            (0..lengths.len())
                .map(|i| (!lengths.is_null(i)).then(|| lengths.value(i).max(0) as u64))
                .collect()
        }
    })
}

impl ScalarUDFImpl for TextConcat {
    fn name(&self) -> &str {
        TEXT_CONCAT
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let [left, right] = args.args.as_slice() else {
            return exec_err!("{TEXT_CONCAT} takes two arguments");
        };
        let (l, r) = (text_lengths(left, rows)?, text_lengths(right, rows)?);
        let (mut total, mut largest) = (0u64, 0u64);
        for (a, b) in l.iter().zip(&r) {
            if let (Some(a), Some(b)) = (a, b) {
                total = total.saturating_add(a + b);
                largest = largest.max(a + b);
            }
        }
        if largest > self.limits.value {
            return exec_err!(
                "requested length too large: || would make a value of {largest} bytes, past \
                 the limit of {} bytes per value (a thirty-second of query_memory, within \
                 16 to 256 MiB)",
                self.limits.value
            );
        }
        if total > self.limits.batch {
            return exec_err!(
                "requested length too large: || would make {total} bytes for {rows} row(s), \
                 past the limit of {} bytes per batch of rows (a quarter of query_memory, \
                 within 64 MiB to 1 GiB)",
                self.limits.batch
            );
        }
        if let (ColumnarValue::Scalar(a), ColumnarValue::Scalar(b)) = (left, right) {
            let joined = match (a, b) {
                (
                    datafusion::common::ScalarValue::Utf8(Some(a)),
                    datafusion::common::ScalarValue::Utf8(Some(b)),
                ) => Some(format!("{a}{b}")),
                _ => None,
            };
            return Ok(ColumnarValue::Scalar(
                datafusion::common::ScalarValue::Utf8(joined),
            ));
        }
        let (a, b) = (left.to_array(rows)?, right.to_array(rows)?);
        let joined = datafusion::arrow::compute::kernels::concat_elements::concat_elements_utf8(
            a.as_string::<i32>(),
            b.as_string::<i32>(),
        )?;
        Ok(ColumnarValue::Array(Arc::new(joined)))
    }
}

/// Plans `text || text` as [`TextConcat`]; other `||` (arrays, jsonb, mixed types)
/// as DataFusion does.
#[derive(Debug)]
pub(crate) struct ConcatPlanner {
    udf: Arc<ScalarUDF>,
}

impl ConcatPlanner {
    pub(crate) fn new(limits: OutputLimits) -> Self {
        ConcatPlanner {
            udf: Arc::new(ScalarUDF::new_from_impl(TextConcat::new(limits))),
        }
    }
}

impl datafusion::logical_expr::planner::ExprPlanner for ConcatPlanner {
    fn plan_binary_op(
        &self,
        expr: datafusion::logical_expr::planner::RawBinaryExpr,
        schema: &datafusion::common::DFSchema,
    ) -> Result<
        datafusion::logical_expr::planner::PlannerResult<
            datafusion::logical_expr::planner::RawBinaryExpr,
        >,
    > {
        use datafusion::logical_expr::ExprSchemable;
        use datafusion::logical_expr::planner::PlannerResult;
        use datafusion::sql::sqlparser::ast::BinaryOperator;
        let text = |e: &Expr| {
            matches!(
                e.get_type(schema),
                Ok(DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
            ) && !e
                .to_field(schema)
                .is_ok_and(|(_, f)| crate::types::is_json_field(&f))
        };
        if expr.op == BinaryOperator::StringConcat && text(&expr.left) && text(&expr.right) {
            return Ok(PlannerResult::Planned(Expr::ScalarFunction(
                datafusion::logical_expr::expr::ScalarFunction::new_udf(
                    self.udf.clone(),
                    vec![expr.left, expr.right],
                ),
            )));
        }
        Ok(PlannerResult::Original(expr))
    }
}

/// Most characters of text read as a number (`'…'::numeric`, text into a numeric
/// column). Arrow parses numeric text through num-bigint's recursive parser: 600,000
/// digits overflowed a statement thread's stack and aborted the process. A numeric
/// holds 38 digits here; PostgreSQL's own limit is 131,072 before the point.
pub const MAX_NUMERIC_TEXT: u64 = 1000;

/// Refuses text in `arg` (of `rows` rows) longer than [`MAX_NUMERIC_TEXT`], before it
/// is read as a number; values of other types pass.
pub(crate) fn check_numeric_text(arg: &ColumnarValue, rows: usize) -> crate::error::Result<()> {
    if !matches!(
        arg.data_type(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    ) {
        return Ok(());
    }
    let lengths = text_lengths(arg, rows).map_err(|e| crate::Error::Internal(e.to_string()))?;
    match lengths
        .into_iter()
        .flatten()
        .find(|l| *l > MAX_NUMERIC_TEXT)
    {
        Some(len) => Err(crate::Error::BadRequest(format!(
            "invalid input syntax for type numeric: a value of {len} characters (numeric \
             text is at most {MAX_NUMERIC_TEXT} characters)"
        ))),
        None => Ok(()),
    }
}

/// `engine_numeric_input(x)`: `x` unchanged, after checking that text read as a number
/// is at most [`MAX_NUMERIC_TEXT`] characters. Wrapped around the operand of every
/// cast to numeric ([`guard_numeric_casts`]).
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct NumericInput {
    signature: Signature,
}

/// The function's name.
pub(crate) const NUMERIC_INPUT: &str = "engine_numeric_input";

impl NumericInput {
    pub(crate) fn new() -> Self {
        NumericInput {
            signature: Signature::any(1, datafusion::logical_expr::Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for NumericInput {
    fn name(&self) -> &str {
        NUMERIC_INPUT
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(arg_types.first().cloned().unwrap_or(DataType::Null))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let Some(arg) = args.args.into_iter().next() else {
            return exec_err!("{NUMERIC_INPUT} takes one argument");
        };
        check_numeric_text(&arg, args.number_rows)
            .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
        Ok(arg)
    }
}

/// Wraps the operand of every cast to numeric in `engine_numeric_input` (see
/// [`MAX_NUMERIC_TEXT`]); the cast itself, and so the output name, stays as written.
pub(crate) fn guard_numeric_casts(stmt: &mut datafusion::sql::sqlparser::ast::Statement) {
    use datafusion::sql::sqlparser::ast;
    let _ = ast::visit_expressions_mut(stmt, |e| {
        if let ast::Expr::Cast {
            expr, data_type, ..
        } = e
            && matches!(
                data_type,
                ast::DataType::Numeric(_) | ast::DataType::Decimal(_) | ast::DataType::Dec(_)
            )
        {
            let inner = std::mem::replace(expr.as_mut(), ast::Expr::value(ast::Value::Null));
            **expr = crate::param_array::call(NUMERIC_INPUT, vec![inner]);
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}
