//! `sum` over integers, exact and failing past int8's range (over floats, see
//! `float_sum`).

use super::*;

/// DataFusion's `sum`, except over integers: an exact sum that fails with `bigint out of
/// range` when the result does not fit (DataFusion's wraps around: the sum of two
/// 9223372036854775807 was -2), and over floats one that fails on overflow. Registered
/// under the name `sum`, so it replaces the default one, in aggregates and in windows
/// alike. (`avg` is wrapped by the same type: its answer is never an int8, so only the
/// float check applies.)
pub fn checked_sum() -> AggregateUDF {
    AggregateUDF::new_from_impl(CheckedSum {
        inner: datafusion::functions_aggregate::sum::sum_udaf(),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct CheckedSum {
    pub(super) inner: Arc<AggregateUDF>,
}

impl CheckedSum {
    /// Ours for a non-DISTINCT sum of integers (summed as int8).
    pub(super) fn ours(args: &AccumulatorArgs) -> bool {
        !args.is_distinct && args.return_field.data_type() == &DataType::Int64
    }
}

impl AggregateUDFImpl for CheckedSum {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
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
        float_checked(&args, self.inner.accumulator(args.clone())?)
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
        float_checked_groups(&args, self.inner.create_groups_accumulator(args.clone())?)
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        if Self::ours(&args) {
            return Ok(Box::new(ExactSum::default()));
        }
        float_checked(&args, self.inner.create_sliding_accumulator(args.clone())?)
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
pub(super) struct ExactSum {
    pub(super) sum: i128,
    pub(super) count: u64,
}

/// The partial state of an int8 sum.
pub(super) const PARTIAL: DataType = DataType::Decimal128(38, 0);

/// Partial sums (a state array) as 128-bit values.
pub(super) fn partials(state: &ArrayRef) -> DfResult<datafusion::arrow::array::Decimal128Array> {
    let a = datafusion::arrow::compute::cast(state, &PARTIAL)?;
    Ok(
        a.as_primitive::<datafusion::arrow::datatypes::Decimal128Type>()
            .clone(),
    )
}

impl ExactSum {
    pub(super) fn add(&mut self, values: &ArrayRef, sign: i128) -> DfResult<()> {
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

    pub(super) fn value(&self) -> DfResult<ScalarValue> {
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
pub(super) struct CheckedGroups {
    pub(super) sums: Vec<i128>,
    pub(super) seen: Vec<bool>,
}

impl CheckedGroups {
    pub(super) fn add(
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

    pub(super) fn emit(&mut self, emit_to: EmitTo) -> DfResult<ArrayRef> {
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
