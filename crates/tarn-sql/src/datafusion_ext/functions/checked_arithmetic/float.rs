//! Float arithmetic and functions that fail where PostgreSQL's do (`tarn_float*`), and
//! text read as a float (`'1e1000'::float8`).

use super::*;

/// Float `+ - * /` that fail as PostgreSQL's do: on a zero divisor, and on a result that
/// overflows to ±Infinity (or, for `*` and `/`, underflows to zero) from finite operands.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct FloatChecked {
    pub(super) op: Op,
    pub(super) signature: Signature,
}

impl FloatChecked {
    pub(super) fn new(op: Op) -> Self {
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
pub(super) fn as_f64(a: &ArrayRef) -> Vec<f64> {
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
            Op::Rem => "tarn_float_rem",
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
        // x / 0 fails unless x is NULL or NaN (NaN / 0 is NaN in PostgreSQL); x % 0 as
        // numeric's does (Arrow answered NaN).
        if matches!(self.op, Op::Div | Op::Rem)
            && x.iter().zip(&y).any(|(x, y)| *y == 0.0 && !x.is_nan())
        {
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

/// The elements of `a` at its innermost level, when it is an array (a list, however
/// nested); `a` itself otherwise.
fn leaves(a: &ArrayRef) -> ArrayRef {
    match a.data_type() {
        DataType::List(_) => leaves(a.as_list::<i32>().values()),
        DataType::LargeList(_) => leaves(a.as_list::<i64>().values()),
        DataType::FixedSizeList(..) => leaves(a.as_fixed_size_list().values()),
        _ => a.clone(),
    }
}

/// A cast to `float4`/`float8` (or an array of them) from text or from `float8` that fails where PostgreSQL's
/// does: text for a number out of the type's range (`'1e1000'::float8`; the words
/// `Infinity`, `inf` and their signed forms stay infinite), and a float8 too large for
/// `float4`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct FloatIn {
    pub(super) to: DataType,
    pub(super) signature: Signature,
}

impl FloatIn {
    pub(super) fn new(to: DataType) -> Self {
        FloatIn {
            to,
            signature: Signature::any(1, Volatility::Immutable),
        }
    }

    /// Fails where `out` (the cast of `input`) is out of range: compared element by
    /// element, an array row by row (a row's values as the row shows them: neither
    /// the elements of rows a slice leaves out nor those under a NULL row, and a
    /// fixed-size target's NULL rows filled with NULLs, are compared).
    fn check(&self, input: &ArrayRef, out: &ArrayRef) -> DfResult<()> {
        use super::super::array_out::{elements, is_array};
        if is_array(input.data_type()) {
            for i in 0..input.len().min(out.len()) {
                if input.is_valid(i)
                    && out.is_valid(i)
                    && let (Some(a), Some(b)) = (elements(input, i), elements(out, i))
                {
                    self.check(&a, &b)?;
                }
            }
            return Ok(());
        }
        let result = as_f64(out);
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
            return Ok(());
        }
        // Text: its words tell `'Infinity'` from an overflow, its digits `'0'` from an
        // underflow.
        let source = datafusion::arrow::compute::cast(input, &DataType::Utf8)?;
        let source = source.as_string::<i32>();
        for (i, v) in result.iter().enumerate().take(source.len()) {
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
        Ok(())
    }

    pub(super) fn type_name(&self) -> &'static str {
        if base_type(&self.to) == DataType::Float32 {
            "real"
        } else {
            "double precision"
        }
    }
}

impl ScalarUDFImpl for FloatIn {
    fn name(&self) -> &str {
        if base_type(&self.to) == DataType::Float32 {
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
        // Nothing infinite or zero among the results (those under NULL or sliced-off
        // rows included): nothing to check.
        if !as_f64(&leaves(&out))
            .iter()
            .any(|v| v.is_infinite() || *v == 0.0)
        {
            return columnar(out, scalar);
        }
        self.check(input, &out)?;
        columnar(out, scalar)
    }
}

/// `tarn_round_elements(list)`: a list of floats or decimals with each element rounded
/// to a whole number, for a cast to an integer array (Arrow's cuts the fractions off;
/// PostgreSQL rounds each element as it rounds a scalar: floats ties to even, numerics
/// away from zero).
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct RoundElements {
    ties_even: bool,
    signature: Signature,
}

impl RoundElements {
    pub(super) fn new(ties_even: bool) -> Self {
        RoundElements {
            ties_even,
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for RoundElements {
    fn name(&self) -> &str {
        "tarn_round_elements"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> DfResult<DataType> {
        let field = || {
            Arc::new(datafusion::arrow::datatypes::Field::new_list_field(
                DataType::Float64,
                true,
            ))
        };
        Ok(match args.first() {
            Some(DataType::LargeList(_)) => DataType::LargeList(field()),
            Some(DataType::FixedSizeList(_, n)) => DataType::FixedSizeList(field(), *n),
            _ => DataType::List(field()),
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let out = crate::value::coerce::rounded_elements(&arrays[0], self.ties_even)
            .map_err(|e| DataFusionError::Execution(e.to_string()))?
            .unwrap_or_else(|| arrays[0].clone());
        columnar(out, scalar)
    }
}
