//! `sum` and `avg` of floats fail on overflow, as PostgreSQL's do, instead of answering
//! ±Infinity.

use super::*;

/// DataFusion's `avg`, whose float sums fail on overflow (see [`FloatOverflow`]),
/// wrapped as `sum` is ([`super::sum::CheckedSum`] leaves what is not an int8 sum to
/// the function it wraps). Registered under the name `avg`, so it replaces the default
/// one.
pub fn checked_avg() -> AggregateUDF {
    AggregateUDF::new_from_impl(super::sum::CheckedSum {
        inner: datafusion::functions_aggregate::average::avg_udaf(),
    })
}

/// Whether an aggregate answers a float (so its sums can overflow).
fn float_result(args: &AccumulatorArgs) -> bool {
    matches!(
        args.return_field.data_type(),
        DataType::Float64 | DataType::Float32
    )
}

/// `inner`, checked for overflow when its answer is a float.
pub(super) fn float_checked(
    args: &AccumulatorArgs,
    inner: Box<dyn Accumulator>,
) -> DfResult<Box<dyn Accumulator>> {
    if !float_result(args) {
        return Ok(inner);
    }
    Ok(Box::new(FloatOverflow {
        inner,
        infinite_input: false,
    }))
}

/// `inner`, checked for overflow when its answer is a float.
pub(super) fn float_checked_groups(
    args: &AccumulatorArgs,
    inner: Box<dyn GroupsAccumulator>,
) -> DfResult<Box<dyn GroupsAccumulator>> {
    if !float_result(args) {
        return Ok(inner);
    }
    Ok(Box::new(FloatOverflow {
        inner,
        infinite_input: false,
    }))
}

/// Whether any valid value of a float array is ±Infinity.
fn any_infinite(a: &ArrayRef) -> bool {
    match a.data_type() {
        DataType::Float64 => a
            .as_primitive::<Float64Type>()
            .iter()
            .flatten()
            .any(f64::is_infinite),
        DataType::Float32 => a
            .as_primitive::<Float32Type>()
            .iter()
            .flatten()
            .any(f32::is_infinite),
        _ => false,
    }
}

fn scalar_infinite(v: &ScalarValue) -> bool {
    match v {
        ScalarValue::Float64(Some(f)) => f.is_infinite(),
        ScalarValue::Float32(Some(f)) => f.is_infinite(),
        _ => false,
    }
}

/// A float sum (or an average's) that fails with PostgreSQL's `value out of range:
/// overflow` when it becomes ±Infinity from finite values (DataFusion's answers
/// Infinity). An infinite input makes an infinite answer right, so the inputs are
/// watched: once one is infinite (or a partial state is, which only an infinite input
/// can make, since a partial that overflowed failed where it was made), an infinite
/// answer passes. Grouped, that is watched per accumulator, not per group: a group that
/// overflows beside a group given Infinity answers Infinity.
struct FloatOverflow<A: ?Sized> {
    inner: Box<A>,
    infinite_input: bool,
}

impl<A: ?Sized> FloatOverflow<A> {
    fn watch(&mut self, arrays: &[ArrayRef]) {
        if !self.infinite_input {
            self.infinite_input = arrays.iter().any(any_infinite);
        }
    }

    fn check_arrays(&self, arrays: &[ArrayRef]) -> DfResult<()> {
        if !self.infinite_input && arrays.iter().any(any_infinite) {
            return exec_err!("value out of range: overflow");
        }
        Ok(())
    }

    fn check_scalars(&self, values: &[ScalarValue]) -> DfResult<()> {
        if !self.infinite_input && values.iter().any(scalar_infinite) {
            return exec_err!("value out of range: overflow");
        }
        Ok(())
    }
}

impl<A: ?Sized> std::fmt::Debug for FloatOverflow<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FloatOverflow")
            .field("infinite_input", &self.infinite_input)
            .finish()
    }
}

impl Accumulator for FloatOverflow<dyn Accumulator> {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        self.watch(values);
        self.inner.update_batch(values)
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        self.inner.retract_batch(values)
    }

    fn supports_retract_batch(&self) -> bool {
        self.inner.supports_retract_batch()
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        self.watch(states);
        self.inner.merge_batch(states)
    }

    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        let state = self.inner.state()?;
        self.check_scalars(&state)?;
        Ok(state)
    }

    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        let value = self.inner.evaluate()?;
        self.check_scalars(std::slice::from_ref(&value))?;
        Ok(value)
    }

    fn size(&self) -> usize {
        self.inner.size() + std::mem::size_of::<Self>()
    }
}

impl GroupsAccumulator for FloatOverflow<dyn GroupsAccumulator> {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> DfResult<()> {
        self.watch(values);
        self.inner
            .update_batch(values, group_indices, opt_filter, total_num_groups)
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> DfResult<ArrayRef> {
        let value = self.inner.evaluate(emit_to)?;
        self.check_arrays(std::slice::from_ref(&value))?;
        Ok(value)
    }

    fn state(&mut self, emit_to: EmitTo) -> DfResult<Vec<ArrayRef>> {
        let state = self.inner.state(emit_to)?;
        self.check_arrays(&state)?;
        Ok(state)
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> DfResult<()> {
        self.watch(values);
        self.inner
            .merge_batch(values, group_indices, total_num_groups)
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> DfResult<Vec<ArrayRef>> {
        self.inner.convert_to_state(values, opt_filter)
    }

    fn size(&self) -> usize {
        self.inner.size() + std::mem::size_of::<Self>()
    }
}
