//! Functions guarded by a check of their arguments (`ln(0)`, `sqrt(-1)`, array
//! subscripts counted from 1), functions whose result keeps their argument's type, and
//! `to_timestamp` of seconds in microseconds.

use super::*;

/// Functions whose results DataFusion lets go infinite or out of range where
/// PostgreSQL's fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Guard {
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
    /// `round(x, digits)` (and `trunc`) of a float: DataFusion scales by `10^digits`, which past
    /// about 300 digits is infinite (or zero) and made `round(1.5, 400)` NaN. Rounding
    /// at a digit past a float's precision keeps the value; before its first digit it
    /// is zero, as PostgreSQL's `round` gives.
    Round,
    /// `make_date(year, month, day)`: there is no year 0 (PostgreSQL's `date field
    /// value out of range`; DataFusion made `0000-01-01`, which then exported as a date
    /// that no import reads).
    MakeDate,
    /// `array_has_all` / `array_has_any` (`@>`, `<@`, `&&`): hashed when the arrays
    /// are large (see `containment`).
    Containment {
        /// `array_has_all` rather than `array_has_any`.
        all: bool,
    },
    /// `levenshtein`: arguments of at most 255 characters, as PostgreSQL's.
    Levenshtein,
}

impl Guard {
    pub(super) fn of(name: &str) -> Option<Guard> {
        match name {
            "ln" | "log" | "log10" | "log2" => Some(Guard::Logarithm),
            "power" | "pow" | "exp" => Some(Guard::Power),
            "to_timestamp" => Some(Guard::Seconds),
            "array_element" => Some(Guard::Subscript),
            "array_slice" => Some(Guard::Slice),
            "round" | "trunc" => Some(Guard::Round),
            "make_date" => Some(Guard::MakeDate),
            "array_has_all" => Some(Guard::Containment { all: true }),
            "array_has_any" => Some(Guard::Containment { all: false }),
            "levenshtein" => Some(Guard::Levenshtein),
            _ => None,
        }
    }
}

/// A DataFusion function with PostgreSQL's refusals around it ([`Guard`]).
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct Guarded {
    pub(super) inner: Arc<ScalarUDF>,
    pub(super) guard: Guard,
    pub(super) name: String,
}

impl Guarded {
    pub(super) fn new(inner: Arc<ScalarUDF>, guard: Guard) -> Self {
        let name = format!("tarn_checked_{}", inner.name());
        Guarded { inner, guard, name }
    }
}

/// The values of a numeric argument or result as float64 (none for a type that does
/// not cast: decimals too wide for f64 and the like, which the function decides).
pub(super) fn float_values(a: &ColumnarValue) -> Vec<Option<f64>> {
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
        if self.guard == Guard::Round {
            return round_far(&self.inner, args);
        }
        if self.guard == Guard::MakeDate {
            return make_date(&self.inner, args);
        }
        if let Guard::Containment { all } = self.guard {
            return containment(&self.inner, args, all);
        }
        if self.guard == Guard::Levenshtein {
            return levenshtein(&self.inner, args);
        }
        // Power: the arguments, row by row (a scalar stands for every row), against
        // the result.
        let inputs: Vec<Vec<Option<f64>>> = args.args.iter().map(float_values).collect();
        let out = self.inner.invoke_with_args(args)?;
        for (i, r) in float_values(&out).into_iter().enumerate() {
            let Some(r) = r else { continue };
            let args: Vec<f64> = inputs.iter().filter_map(|v| row_value(v, i)).collect();
            if args.len() != inputs.len() || args.iter().any(|a| !a.is_finite()) {
                continue;
            }
            // power(-8, 1/3): PostgreSQL's float8 power refuses it (DataFusion: NaN).
            if r.is_nan() && args.len() == 2 && args[0] < 0.0 && args[1].fract() != 0.0 {
                return exec_err!(
                    "a negative number raised to a non-integer power yields a complex result"
                );
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

/// Row `i` of an argument's values from [`float_values`]: a scalar (one value) stands
/// for every row.
fn row_value(values: &[Option<f64>], i: usize) -> Option<f64> {
    if values.len() == 1 {
        values[0]
    } else {
        values.get(i).copied().flatten()
    }
}

/// `make_date(year, month, day)` with PostgreSQL's years: there is no year 0, and a
/// negative year is BC (`-1` is 1 BC, the proleptic calendar's year 0, which
/// DataFusion took `-1` for: a year off).
fn make_date(inner: &ScalarUDF, mut args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
    use datafusion::arrow::array::Int64Array;
    let Some(year) = args.args.first() else {
        return inner.invoke_with_args(args);
    };
    let years = float_values(year);
    if years.contains(&Some(0.0)) {
        return exec_err!("date field value out of range: year 0 (there is no year 0)");
    }
    if years.iter().flatten().any(|y| *y < 0.0) {
        let shift = |y: Option<i64>| y.map(|y| if y < 0 { y + 1 } else { y });
        // Shifted as int8, then given back in the argument's own type (the function
        // reads the type its signature coerced to).
        let was = args.args[0].data_type();
        args.args[0] = match &args.args[0] {
            ColumnarValue::Scalar(s) => match s.cast_to(&DataType::Int64)? {
                ScalarValue::Int64(y) => {
                    ColumnarValue::Scalar(ScalarValue::Int64(shift(y)).cast_to(&was)?)
                }
                other => ColumnarValue::Scalar(other),
            },
            ColumnarValue::Array(a) => {
                let a = datafusion::arrow::compute::cast(a, &DataType::Int64)?;
                let shifted: Int64Array = a.as_primitive::<Int64Type>().iter().map(shift).collect();
                ColumnarValue::Array(datafusion::arrow::compute::cast(&shifted, &was)?)
            }
        };
    }
    inner.invoke_with_args(args)
}

/// `round(x, digits)` with the results that scaling by `10^digits` lost (NaN or
/// infinite from a finite `x`) put right: `x` itself for digits past its precision, zero
/// for digits before its first (see [`Guard::Round`]).
fn round_far(inner: &ScalarUDF, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
    use datafusion::arrow::array::Float64Array;
    let rows = args.number_rows;
    let x = args.args.first().map(float_values).unwrap_or_default();
    let digits = args.args.get(1).map(float_values).unwrap_or_default();
    let scalar = args
        .args
        .iter()
        .all(|a| matches!(a, ColumnarValue::Scalar(_)));
    let out = inner.invoke_with_args(args)?;
    let out_type = out.data_type();
    if !is_float(&out_type) || digits.is_empty() {
        return Ok(out);
    }
    let result = out.to_array(rows)?;
    let values = float_values(&ColumnarValue::Array(result.clone()));
    if !values.iter().enumerate().any(|(i, r)| {
        r.is_some_and(|r| !r.is_finite()) && row_value(&x, i).is_some_and(f64::is_finite)
    }) {
        return Ok(out);
    }
    let fixed: Float64Array = values
        .iter()
        .enumerate()
        .map(
            |(i, r)| match (*r, row_value(&x, i), row_value(&digits, i)) {
                (Some(r), Some(x), Some(d)) if !r.is_finite() && x.is_finite() => {
                    Some(if d > 0.0 { x } else { 0.0 })
                }
                (r, ..) => r,
            },
        )
        .collect();
    let fixed = datafusion::arrow::compute::cast(&fixed, &out_type)?;
    if scalar {
        Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(
            &fixed, 0,
        )?))
    } else {
        Ok(ColumnarValue::Array(fixed))
    }
}

/// The arguments of `array_element` / `array_slice` with PostgreSQL's subscripts made
/// into DataFusion's: a subscript below 1 is NULL; a slice's lower bound below 1 is 1,
/// and an upper bound below 1 makes the bounds `2:1`, an empty slice.
pub(super) fn pg_subscripts(
    mut args: ScalarFunctionArgs,
    guard: Guard,
) -> DfResult<ScalarFunctionArgs> {
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
pub(super) enum Reshape {
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
pub(super) struct SameType {
    pub(super) signature: Signature,
    pub(super) reshape: Reshape,
}

impl SameType {
    pub(super) fn new(reshape: Reshape) -> Self {
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
pub(super) struct SecondsToTimestamp {
    pub(super) signature: Signature,
}

impl SecondsToTimestamp {
    pub(super) fn new() -> Self {
        SecondsToTimestamp {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

pub(super) const MICROSECONDS: DataType =
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
