//! Integer `+`, `-`, `*`, `/`, `%` and unary `-` that fail on overflow at the operation's
//! own type (`tarn_checked_*`).

use super::*;

#[derive(Debug, PartialEq, Eq, Hash, Clone, Copy)]
pub(super) enum Op {
    Add,
    Sub,
    Mul,
    Div,
    /// `%`: planned checked for floats only (integers keep DataFusion's, whose `MIN %
    /// -1` is PostgreSQL's 0).
    Rem,
}

impl Op {
    /// Arrow's checked kernel for the operation.
    pub(super) fn apply(self, a: &ArrayRef, b: &ArrayRef) -> Result<ArrayRef, ArrowError> {
        match self {
            Op::Add => numeric::add(a, b),
            Op::Sub => numeric::sub(a, b),
            Op::Mul => numeric::mul(a, b),
            Op::Div => numeric::div(a, b),
            Op::Rem => numeric::rem(a, b),
        }
    }
}

/// `out` as the function's value: a scalar when every argument was one.
pub(super) fn columnar(out: ArrayRef, scalar: bool) -> DfResult<ColumnarValue> {
    Ok(if scalar {
        ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
    } else {
        ColumnarValue::Array(out)
    })
}

/// Checked integer `+ - *` (and `-x` as `0 - x`).
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct Checked {
    pub(super) op: Op,
    pub(super) signature: Signature,
}

impl Checked {
    pub(super) fn new(op: Op) -> Self {
        Checked {
            op,
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

/// The result field of an operation on `args`: the first argument's type (or `t`),
/// nullable when an argument is (the default would make every result nullable, which
/// changes a plan's schema under a NOT NULL column's arithmetic).
pub(super) fn result_field(
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
pub(super) fn unbounded(input: &[&Interval]) -> DfResult<Interval> {
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
            Op::Rem => "tarn_checked_rem",
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
            ArrowError::DivideByZero => DataFusionError::Execution("division by zero".into()),
            other => DataFusionError::ArrowError(Box::new(other), None),
        })?;
        columnar(out, scalar)
    }
}
