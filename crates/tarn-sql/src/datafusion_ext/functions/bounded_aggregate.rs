//! `string_agg` and `array_agg` wrapped so that the values they make are sized as they
//! grow (see `bounded.rs` for the scalar functions): each value to the per-value limit,
//! what one accumulator hands out to the per-batch limit, and what they hold charged to
//! the statements' pool.

use std::sync::Arc;

use crate::datafusion_ext::context::output_limits::OutputLimits;
use crate::value::sizes::array_row_bytes;
use datafusion::arrow::array::{Array, ArrayRef};
use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::Result;
use datafusion::logical_expr::function::AccumulatorArgs;
use datafusion::logical_expr::{Documentation, Signature};

/// `string_agg` and `array_agg`, each value they make held to the per-value limit and
/// the values one accumulator hands out (a window's rows) to the per-batch limit:
/// grouped over large text they took 4.7 GB, and over a running window frame, whose
/// every row is the whole frame so far, 4.2 GB (values of 80 MB). What they hold
/// between batches is DataFusion's to count against the pool, as before.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct BoundedAggregate {
    inner: Arc<datafusion::logical_expr::AggregateUDF>,
    limits: OutputLimits,
    /// What the accumulators hold is charged here too: DataFusion counts their state
    /// but not the copy each value is made into when it is handed out, nor the text
    /// a string grows into; and the partitions and stages of one aggregate, each
    /// within the limits, held 6 GB together.
    pool: crate::datafusion_ext::context::held::SharedPool,
}

/// The aggregates wrapped. `count` only for `count(DISTINCT x)` of a list or record
/// (see [`CompactDistinctCount`]); its other forms are DataFusion's, untouched.
const AGGREGATES: [&str; 3] = ["string_agg", "array_agg", "count"];

/// The wrapped versions of the aggregates `get` finds, ready to register over them.
pub(crate) fn bounded_aggregates(
    get: impl Fn(&str) -> Option<Arc<datafusion::logical_expr::AggregateUDF>>,
    limits: OutputLimits,
    pool: &crate::datafusion_ext::context::held::SharedPool,
) -> Vec<datafusion::logical_expr::AggregateUDF> {
    AGGREGATES
        .iter()
        .filter_map(|name| {
            let inner = get(name)?;
            Some(datafusion::logical_expr::AggregateUDF::new_from_impl(
                BoundedAggregate {
                    inner,
                    limits,
                    pool: pool.clone(),
                },
            ))
        })
        .collect()
}

impl BoundedAggregate {
    fn is_count(&self) -> bool {
        self.inner.name() == "count"
    }

    fn wrap(&self, inner: datafusion::logical_expr::AggregateUDF) -> Arc<Self> {
        Arc::new(BoundedAggregate {
            inner: Arc::new(inner),
            limits: self.limits,
            pool: self.pool.clone(),
        })
    }

    fn sized(
        &self,
        inner: Result<Box<dyn datafusion::logical_expr::Accumulator>>,
        args: &AccumulatorArgs,
    ) -> Result<Box<dyn datafusion::logical_expr::Accumulator>> {
        Ok(Box::new(SizedAccumulator {
            inner: inner?,
            name: self.inner.name().to_string(),
            limits: self.limits,
            handed_out: 0,
            pool: self.pool.clone(),
            held: None,
            whole_partition: whole_partition(args.name),
            rows: 0,
        }))
    }
}

/// Whether values of `t` are lists or records (whose DISTINCT count keeps each value as
/// a [`ScalarValue`] holding an Arrow array).
fn nested(t: &DataType) -> bool {
    matches!(
        t,
        DataType::List(_)
            | DataType::LargeList(_)
            | DataType::FixedSizeList(..)
            | DataType::Struct(_)
            | DataType::Map(..)
    )
}

/// `count(DISTINCT x)` of lists or records, each distinct value kept as a copy of its
/// own. DataFusion's keeps each as a one-row slice of its input batch and counts every
/// slice as the whole batch's buffers: 40,000 rows of `count(DISTINCT ARRAY[g])` were
/// counted as gigabytes and refused (`query_memory`) though they held a few megabytes.
#[derive(Debug)]
struct CompactDistinctCount {
    values: std::collections::HashSet<datafusion::common::ScalarValue>,
    /// The bytes the values hold, kept as they are added.
    bytes: usize,
    data_type: DataType,
}

impl CompactDistinctCount {
    fn new(data_type: DataType) -> Self {
        CompactDistinctCount {
            values: Default::default(),
            bytes: 0,
            data_type,
        }
    }
}

impl datafusion::logical_expr::Accumulator for CompactDistinctCount {
    fn state(&mut self) -> Result<Vec<datafusion::common::ScalarValue>> {
        let scalars: Vec<_> = self.values.iter().cloned().collect();
        let list = datafusion::common::ScalarValue::new_list_nullable(&scalars, &self.data_type);
        Ok(vec![datafusion::common::ScalarValue::List(list)])
    }

    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let Some(array) = values.first() else {
            return Ok(());
        };
        for i in 0..array.len() {
            if array.is_null(i) {
                continue;
            }
            let value = datafusion::common::ScalarValue::try_from_array(array, i)?.compacted();
            let size = value.size();
            if self.values.insert(value) {
                self.bytes = self.bytes.saturating_add(size);
            }
        }
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        use datafusion::arrow::array::AsArray;
        let Some(lists) = states.first() else {
            return Ok(());
        };
        for list in lists.as_list::<i32>().iter().flatten() {
            self.update_batch(&[list])?;
        }
        Ok(())
    }

    fn evaluate(&mut self) -> Result<datafusion::common::ScalarValue> {
        Ok(datafusion::common::ScalarValue::Int64(Some(
            self.values.len() as i64,
        )))
    }

    fn size(&self) -> usize {
        size_of_val(self)
            + self.values.capacity() * size_of::<datafusion::common::ScalarValue>()
            + self.bytes
    }
}

mod aggregate_impl {
    use super::*;
    use datafusion::common::ScalarValue;
    use datafusion::logical_expr::expr::{AggregateFunctionParams, WindowFunctionParams};
    use datafusion::logical_expr::function::StateFieldsArgs;
    use datafusion::logical_expr::utils::AggregateOrderSensitivity;
    use datafusion::logical_expr::{
        Accumulator, AggregateUDFImpl, GroupsAccumulator, ReversedUDAF, SetMonotonicity,
    };

    impl AggregateUDFImpl for BoundedAggregate {
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

        fn return_field(&self, arg_fields: &[FieldRef]) -> Result<FieldRef> {
            self.inner.return_field(arg_fields)
        }

        fn accumulator(&self, acc_args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
            if self.is_count() {
                return match acc_args.expr_fields {
                    [f] if acc_args.is_distinct && nested(f.data_type()) => {
                        Ok(Box::new(CompactDistinctCount::new(f.data_type().clone())))
                    }
                    _ => self.inner.accumulator(acc_args),
                };
            }
            self.sized(self.inner.accumulator(acc_args.clone()), &acc_args)
        }

        fn create_sliding_accumulator(
            &self,
            args: AccumulatorArgs,
        ) -> Result<Box<dyn Accumulator>> {
            if self.is_count() {
                return self.inner.create_sliding_accumulator(args);
            }
            self.sized(self.inner.create_sliding_accumulator(args.clone()), &args)
        }

        fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
            self.inner.groups_accumulator_supported(args)
        }

        fn value_from_stats(
            &self,
            args: &datafusion::logical_expr::StatisticsArgs,
        ) -> Option<ScalarValue> {
            self.inner.value_from_stats(args)
        }

        fn simplify(
            &self,
        ) -> Option<datafusion::logical_expr::function::AggregateFunctionSimplification> {
            self.inner.simplify()
        }

        fn create_groups_accumulator(
            &self,
            args: AccumulatorArgs,
        ) -> Result<Box<dyn GroupsAccumulator>> {
            if self.is_count() {
                return self.inner.create_groups_accumulator(args);
            }
            Ok(Box::new(SizedGroups {
                inner: self.inner.create_groups_accumulator(args)?,
                name: self.inner.name().to_string(),
                limits: self.limits,
                held: Vec::new(),
                total: 0,
                pool: self.pool.clone(),
                reservation: None,
            }))
        }

        fn schema_name(&self, params: &AggregateFunctionParams) -> Result<String> {
            self.inner.schema_name(params)
        }

        fn human_display(&self, params: &AggregateFunctionParams) -> Result<String> {
            self.inner.human_display(params)
        }

        fn window_function_schema_name(&self, params: &WindowFunctionParams) -> Result<String> {
            self.inner.window_function_schema_name(params)
        }

        fn display_name(&self, params: &AggregateFunctionParams) -> Result<String> {
            self.inner.display_name(params)
        }

        fn window_function_display_name(&self, params: &WindowFunctionParams) -> Result<String> {
            self.inner.window_function_display_name(params)
        }

        fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
            self.inner.state_fields(args)
        }

        fn with_beneficial_ordering(
            self: Arc<Self>,
            beneficial_ordering: bool,
        ) -> Result<Option<Arc<dyn AggregateUDFImpl>>> {
            Ok(self
                .inner
                .as_ref()
                .clone()
                .with_beneficial_ordering(beneficial_ordering)?
                .map(|u| self.wrap(u) as Arc<dyn AggregateUDFImpl>))
        }

        fn order_sensitivity(&self) -> AggregateOrderSensitivity {
            self.inner.order_sensitivity()
        }

        fn reverse_expr(&self) -> ReversedUDAF {
            match self.inner.reverse_udf() {
                ReversedUDAF::Reversed(u) => ReversedUDAF::Reversed(Arc::new(
                    datafusion::logical_expr::AggregateUDF::new_from_shared_impl(
                        self.wrap(u.as_ref().clone()),
                    ),
                )),
                other => other,
            }
        }

        fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
            self.inner.coerce_types(arg_types)
        }

        fn is_nullable(&self) -> bool {
            self.inner.is_nullable()
        }

        fn is_descending(&self) -> Option<bool> {
            self.inner.is_descending()
        }

        fn default_value(&self, data_type: &DataType) -> Result<ScalarValue> {
            self.inner.default_value(data_type)
        }

        fn supports_null_handling_clause(&self) -> bool {
            self.inner.supports_null_handling_clause()
        }

        fn supports_within_group_clause(&self) -> bool {
            self.inner.supports_within_group_clause()
        }

        fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
            self.inner.inner().set_monotonicity(data_type)
        }

        fn documentation(&self) -> Option<&Documentation> {
            self.inner.documentation()
        }
    }
}

/// An accumulator whose value is held to the per-value limit as it grows, and whose
/// values handed out (one per row of a window) to the per-batch limit.
#[derive(Debug)]
struct SizedAccumulator {
    inner: Box<dyn datafusion::logical_expr::Accumulator>,
    name: String,
    limits: OutputLimits,
    handed_out: u64,
    pool: crate::datafusion_ext::context::held::SharedPool,
    /// The value's size, held in the pool once it is large.
    held: Option<datafusion::execution::memory_pool::MemoryReservation>,
    /// A window aggregate whose frame is the whole partition: DataFusion feeds it the
    /// partition's rows once and repeats its one value on every one of them
    /// (`to_array_of_size`), so the value times those rows is what it hands out.
    whole_partition: bool,
    /// Rows fed since the last value was handed out.
    rows: u64,
}

/// Whether an aggregate named `name` (DataFusion names a window aggregate after its
/// window, frame included) is a window over whole partitions.
fn whole_partition(name: &str) -> bool {
    name.contains("UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING")
}

impl SizedAccumulator {
    fn check_value(&mut self) -> Result<()> {
        let size = self.inner.size() as u64;
        self.limits.check_value(&self.name, size)?;
        self.pool.resize(&mut self.held, &self.name, size)
    }
}

impl datafusion::logical_expr::Accumulator for SizedAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.rows = self
            .rows
            .saturating_add(values.first().map_or(0, |v| v.len()) as u64);
        self.inner.update_batch(values)?;
        self.check_value()
    }

    fn evaluate(&mut self) -> Result<datafusion::common::ScalarValue> {
        let value = self.inner.evaluate()?;
        // Over a whole partition the one value is repeated on each of its rows (a
        // 480 KB array over 60,000 rows was one allocation of 28.8 GB, which aborted
        // the process).
        let copies = if self.whole_partition {
            std::mem::take(&mut self.rows).max(1)
        } else {
            1
        };
        self.handed_out = self
            .handed_out
            .saturating_add((value.size() as u64).saturating_mul(copies));
        let what = format!("{}'s values", self.name);
        self.limits.check_batch(
            &what,
            self.handed_out,
            (copies > 1).then_some(copies as usize),
        )?;
        Ok(value)
    }

    fn size(&self) -> usize {
        self.inner.size() + std::mem::size_of::<Self>()
    }

    fn state(&mut self) -> Result<Vec<datafusion::common::ScalarValue>> {
        self.inner.state()
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.inner.merge_batch(states)?;
        self.check_value()
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.inner.retract_batch(values)
    }

    fn supports_retract_batch(&self) -> bool {
        self.inner.supports_retract_batch()
    }
}

/// A grouped accumulator whose every group's value is held to the per-value limit: the
/// bytes each group has taken in are counted beside it.
struct SizedGroups {
    inner: Box<dyn datafusion::logical_expr::GroupsAccumulator>,
    name: String,
    limits: OutputLimits,
    /// Bytes taken in per group, by group index.
    held: Vec<u64>,
    /// All that the groups have taken in, held to the per-batch limit (40 groups each
    /// under the per-value limit took 5 GB) and charged to the pool. Not lowered when
    /// groups are handed out: what a partial aggregate emits early lives on downstream
    /// (DataFusion's repartition spills it and reads it back outside the pool: 3.2 GB
    /// for 1 GB of text), so it is counted until the aggregate is done.
    total: u64,
    pool: crate::datafusion_ext::context::held::SharedPool,
    reservation: Option<datafusion::execution::memory_pool::MemoryReservation>,
}

impl SizedGroups {
    fn count(&mut self, values: &ArrayRef, groups: &[usize], total: usize) -> Result<()> {
        if self.held.len() < total {
            self.held.resize(total, 0);
        }
        let bytes = array_row_bytes(values);
        for (g, b) in groups.iter().zip(bytes) {
            let held = &mut self.held[*g];
            *held = held.saturating_add(b);
            self.limits.check_value(&self.name, *held)?;
            self.total = self.total.saturating_add(b);
        }
        let what = format!("{} over all its groups", self.name);
        self.limits.check_batch(&what, self.total, None)?;
        self.pool.resize(&mut self.reservation, &what, self.total)
    }

    fn emitted(&mut self, emit_to: datafusion::logical_expr::EmitTo) {
        match emit_to {
            datafusion::logical_expr::EmitTo::All => self.held.clear(),
            datafusion::logical_expr::EmitTo::First(n) => {
                self.held.drain(..n.min(self.held.len()));
            }
        }
    }
}

impl std::fmt::Debug for SizedGroups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SizedGroups")
            .field("name", &self.name)
            .finish()
    }
}

impl datafusion::logical_expr::GroupsAccumulator for SizedGroups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&datafusion::arrow::array::BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        if let Some(v) = values.first() {
            self.count(v, group_indices, total_num_groups)?;
        }
        self.inner
            .update_batch(values, group_indices, opt_filter, total_num_groups)
    }

    fn evaluate(&mut self, emit_to: datafusion::logical_expr::EmitTo) -> Result<ArrayRef> {
        self.emitted(emit_to);
        self.inner.evaluate(emit_to)
    }

    fn state(&mut self, emit_to: datafusion::logical_expr::EmitTo) -> Result<Vec<ArrayRef>> {
        self.emitted(emit_to);
        self.inner.state(emit_to)
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        if let Some(v) = values.first() {
            self.count(v, group_indices, total_num_groups)?;
        }
        self.inner
            .merge_batch(values, group_indices, total_num_groups)
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&datafusion::arrow::array::BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        self.inner.convert_to_state(values, opt_filter)
    }

    /// What the groups took in, as counted on the way in, not the inner accumulator's
    /// own figure: DataFusion asks after every batch, and `array_agg`'s walks every
    /// slice it keeps (grouped over 10,000 groups it took 9 s, 20,000 took 33 s).
    fn size(&self) -> usize {
        usize::try_from(self.total)
            .unwrap_or(usize::MAX)
            .saturating_add(self.held.capacity() * 8)
            .saturating_add(std::mem::size_of::<Self>())
    }
}
