//! Large values made by sized calls and aggregates, held in the statements' memory
//! pool for as long as they live. A sized call checks its own batch; plan nodes that
//! run at once (the branches of a UNION ALL, the partitions of an aggregate) each
//! passed their own checks and together took 6 GB. Charged to the pool, they meet
//! the same `query_memory` as sorts, joins and aggregates' own state.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayData, ArrayRef, make_array};
use datafusion::arrow::buffer::Buffer;
use datafusion::common::Result;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool, MemoryReservation};
use datafusion::physical_plan::windows::WindowAggExec;

use super::join_rows::JoinSide;

/// Below this, a value is not worth a reservation (registering one takes a lock).
pub(crate) const SMALLEST_HELD: u64 = 1 << 20;

/// The engine's memory pool, shared by the functions that charge it. Two are equal
/// when they are the same pool (a function's identity must not change with it).
#[derive(Clone, Debug)]
pub(crate) struct SharedPool(pub(crate) Arc<dyn MemoryPool>);

impl PartialEq for SharedPool {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SharedPool {}

impl std::hash::Hash for SharedPool {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (Arc::as_ptr(&self.0) as *const () as usize).hash(state);
    }
}

impl SharedPool {
    /// A reservation of `bytes` for `what`, or the pool's "resources exhausted"
    /// error (a 400 naming `query_memory`).
    pub(crate) fn reserve(&self, what: &str, bytes: u64) -> Result<MemoryReservation> {
        let reservation = MemoryConsumer::new(what).register(&self.0);
        reservation.try_grow(usize::try_from(bytes).unwrap_or(usize::MAX))?;
        Ok(reservation)
    }

    /// A reservation for `what` grown or shrunk to `bytes`, made when first needed
    /// (at [`SMALLEST_HELD`]).
    pub(crate) fn resize(
        &self,
        held: &mut Option<MemoryReservation>,
        what: &str,
        bytes: u64,
    ) -> Result<()> {
        let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        match held {
            Some(r) => r.try_resize(bytes)?,
            None if bytes as u64 >= SMALLEST_HELD => {
                *held = Some(self.reserve(what, bytes as u64)?);
            }
            None => {}
        }
        Ok(())
    }
}

/// A buffer of `array` with the reservation that pays for it. The reservation is
/// shared by all the array's buffers and freed with the last of them.
struct Owned {
    buffer: Buffer,
    _held: Arc<parking_lot::Mutex<MemoryReservation>>,
}

/// Where the memory of every held buffer starts, and by how many owners: a batch
/// passed on unchanged (or sliced) by the next plan node is not held twice, and memory
/// held twice anyway (a call that returns its input) stays known as held until its last
/// owner goes.
/// Each with its reservation, which a sort that keeps the buffer takes over (see
/// [`release_batch`]).
static HELD: std::sync::LazyLock<parking_lot::Mutex<Holders>> =
    std::sync::LazyLock::new(Default::default);

/// Owners by buffer address, each with the reservation that holds it and the
/// statement that made the reservation (see [`HELD`]).
type Holders = std::collections::HashMap<usize, Holder>;

/// One held buffer's owners (see [`Holders`]).
struct Holder {
    owners: usize,
    reservation: std::sync::Weak<parking_lot::Mutex<MemoryReservation>>,
    /// The plan whose reservation it is (see [`HOLDER`]): a buffer can be another
    /// statement's too (a segment's cached block, read by two scans), and a sort gives
    /// back only its own plan's holds.
    statement: u64,
}

fn is_held(buffer: &Buffer) -> bool {
    HELD.lock()
        .contains_key(&(buffer.data_ptr().as_ptr() as usize))
}

impl Drop for Owned {
    fn drop(&mut self) {
        let key = self.buffer.as_ptr() as usize;
        let mut held = HELD.lock();
        if let Some(h) = held.get_mut(&key) {
            h.owners -= 1;
            if h.owners == 0 {
                held.remove(&key);
            }
        }
    }
}

impl AsRef<[u8]> for Owned {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_slice()
    }
}

thread_local! {
    /// The plan (one number per [`hold_wide_rows`]) whose node is being polled on this
    /// thread: the owner of what [`hold`] holds there. Set by each [`HoldExec`] as it
    /// polls, as `tarn_alloc`'s statement tag is, but without the allocator (a host may
    /// not install it, and its tag is then 0 for every statement).
    static HOLDER: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The number of the next plan [`hold_wide_rows`] holds.
static NEXT_HOLDER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// `array`, its memory held in `reservation` until the last of its buffers is dropped
/// (however far downstream that is). No copy: each buffer is the same memory with the
/// reservation as its owner.
pub(crate) fn hold(array: ArrayRef, reservation: MemoryReservation) -> Result<ArrayRef> {
    let held = Arc::new(parking_lot::Mutex::new(reservation));
    let owner = HOLDER.try_with(std::cell::Cell::get).unwrap_or(0);
    let data = with_owner(array.to_data(), &held, owner)?;
    Ok(make_array(data))
}

fn with_owner(
    data: ArrayData,
    held: &Arc<parking_lot::Mutex<MemoryReservation>>,
    statement: u64,
) -> Result<ArrayData> {
    let buffers = data
        .buffers()
        .iter()
        .map(|b| {
            HELD.lock()
                .entry(b.as_ptr() as usize)
                .or_insert_with(|| Holder {
                    owners: 0,
                    reservation: Arc::downgrade(held),
                    statement,
                })
                .owners += 1;
            Buffer::from(bytes::Bytes::from_owner(Owned {
                buffer: b.clone(),
                _held: held.clone(),
            }))
        })
        .collect();
    let children = data
        .child_data()
        .iter()
        .map(|c| with_owner(c.clone(), held, statement))
        .collect::<Result<Vec<_>>>()?;
    Ok(data
        .into_builder()
        .buffers(buffers)
        .child_data(children)
        .build()?)
}

/// Gives back to the pool what holds the buffers of `batch`, which the node above
/// keeps and counts itself (a sort, which spills what it keeps when its share runs
/// out: held as well, its rows counted twice and stayed in the part of the pool no
/// one can spill, and a sort of 700 MB of wide rows under 2 GiB was refused instead
/// of spilled). The buffers stay known as held, so no node below the sort holds them
/// again. Only the holds of plan `statement` (its [`HOLDER`] number) are given back.
///
/// A node below the sort that keeps the batch too (a recursive query's work table)
/// then keeps it uncounted once the sort has spilled its copy: the rows are counted
/// once while both keep them, not twice.
fn release_batch(batch: &datafusion::arrow::array::RecordBatch, statement: u64) {
    fn release(
        data: &ArrayData,
        map: &Holders,
        statement: u64,
        held: &mut Vec<Arc<parking_lot::Mutex<MemoryReservation>>>,
    ) {
        for b in data.buffers() {
            if let Some(r) = map
                .get(&(b.data_ptr().as_ptr() as usize))
                .filter(|h| h.statement == statement)
                .and_then(|h| h.reservation.upgrade())
            {
                held.push(r);
            }
        }
        for c in data.child_data() {
            release(c, map, statement, held);
        }
    }
    // A batch's size counts the whole of the buffers its columns slice, and holds are
    // made of `SMALLEST_HELD` bytes or more: a smaller batch holds none of those. (A
    // sized call's output resized below it stays held with its batch: under 1 MiB.)
    if (batch.get_array_memory_size() as u64) < SMALLEST_HELD {
        return;
    }
    // One look at the map for the whole batch (a sort's every batch comes here).
    let mut held = Vec::new();
    {
        let map = HELD.lock();
        if map.is_empty() {
            return;
        }
        for column in batch.columns() {
            release(&column.to_data(), &map, statement, &mut held);
        }
    }
    // Freed outside the map's lock (the pool takes its own).
    for r in held {
        r.lock().free();
    }
}

/// Batches below this are not held by [`HoldExec`]…
const SMALLEST_HELD_BATCH: usize = 1 << 20;
/// …nor batches of narrower rows: a batch is at most 8,192 rows, and DataFusion's
/// operators gather rows into batches of that many whatever their size. Rows of 1 MB
/// made 8 GB batches where a cross join repeated them and a filter gathered them
/// (`string_agg(DISTINCT …)` over 100 × 40 such rows passed 6 GB).
const WIDEST_UNHELD_ROW: usize = 16 << 10;

/// `plan` with the output of each of its nodes held in the pool while it lives, where
/// its rows are wide (see [`HoldExec`]), and the partitions of each window over whole
/// partitions counted (see [`PARTITION_BYTES`]). Not under EXPLAIN ANALYZE, which shows the
/// plan it runs. Its nodes stop when `life` is dropped (see [`HoldExec`]'s `life`).
pub(crate) fn hold_wide_rows(
    plan: Arc<dyn datafusion::physical_plan::ExecutionPlan>,
    statement: u64,
    life: &Arc<()>,
) -> Result<Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
    let life = Arc::downgrade(life);
    use datafusion::common::tree_node::{Transformed, TreeNode};
    if plan
        .downcast_ref::<datafusion::physical_plan::analyze::AnalyzeExec>()
        .is_some()
    {
        return Ok(plan);
    }
    let holder = NEXT_HOLDER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    plan.transform_up(|node| {
        // A window over whole partitions: its input's partitions are counted as they
        // pass (see `PartitionCount`).
        let node = match node.downcast_ref::<WindowAggExec>() {
            Some(window) => {
                let count = PartitionCount {
                    keys: window.partition_keys(),
                    bytes_each: PARTITION_BYTES * window.window_expr().len() as u64,
                };
                // Its input is held already (children are visited first): that node
                // counts.
                let input = Arc::new(HoldExec {
                    input: unheld(window.input()),
                    statement,
                    holder,
                    partitions: (!count.keys.is_empty()).then_some(count),
                    release: false,
                    join: None,
                    life: life.clone(),
                });
                datafusion::physical_plan::execution_plan::replace_children_if_necessary(
                    node.clone(),
                    vec![input],
                )?
            }
            // A sort counts the batches it keeps itself, and spills them when its share
            // of the pool runs out: what holds them upstream is given back as they
            // reach it (see `release_batch`).
            None if node
                .downcast_ref::<datafusion::physical_plan::sorts::sort::SortExec>()
                .is_some() =>
            {
                datafusion::physical_plan::execution_plan::replace_children_if_necessary(
                    node.clone(),
                    vec![Arc::new(HoldExec {
                        input: unheld(node.children()[0]),
                        statement,
                        holder,
                        partitions: None,
                        release: true,
                        join: None,
                        life: life.clone(),
                    })],
                )?
            }
            // A join: the widest row of its build side sets how many probe rows go
            // into each step (see `join_rows`).
            None if is_join(&node) && node.children().len() == 2 => {
                let every_pair = node
                    .downcast_ref::<datafusion::physical_plan::joins::NestedLoopJoinExec>()
                    .is_some()
                    || node
                        .downcast_ref::<datafusion::physical_plan::joins::CrossJoinExec>()
                        .is_some();
                let (build, probe) = super::join_rows::sides(every_pair);
                let children = node.children();
                let side = |child: &Arc<dyn datafusion::physical_plan::ExecutionPlan>,
                            join: JoinSide| {
                    Arc::new(HoldExec {
                        input: unheld(child),
                        statement,
                        holder,
                        partitions: None,
                        release: false,
                        join: Some(join),
                        life: life.clone(),
                    }) as Arc<dyn datafusion::physical_plan::ExecutionPlan>
                };
                let children = vec![side(children[0], build), side(children[1], probe)];
                datafusion::physical_plan::execution_plan::replace_children_if_necessary(
                    node.clone(),
                    children,
                )?
            }
            None => node,
        };
        Ok(Transformed::yes(Arc::new(HoldExec {
            input: node,
            statement,
            holder,
            partitions: None,
            release: false,
            join: None,
            life: life.clone(),
        })
            as Arc<dyn datafusion::physical_plan::ExecutionPlan>))
    })
    .map(|t| t.data)
}

/// Whether `node` is a join that builds on its first child and repeats its rows per
/// row of its second (see [`join_rows`](super::join_rows)): not a semi, anti or mark
/// join, which passes each row on once.
fn is_join(node: &Arc<dyn datafusion::physical_plan::ExecutionPlan>) -> bool {
    use datafusion::common::JoinType;
    use datafusion::physical_plan::joins::{CrossJoinExec, HashJoinExec, NestedLoopJoinExec};
    let repeats = |t: &JoinType| {
        matches!(
            t,
            JoinType::Inner | JoinType::Left | JoinType::Right | JoinType::Full
        )
    };
    node.downcast_ref::<CrossJoinExec>().is_some()
        || node
            .downcast_ref::<NestedLoopJoinExec>()
            .is_some_and(|j| repeats(j.join_type()))
        || node
            .downcast_ref::<HashJoinExec>()
            .is_some_and(|j| repeats(j.join_type()))
}

/// `plan` without the [`HoldExec`] above it, if it has one (children are visited first,
/// so a node's input is held already when the node is).
fn unheld(
    plan: &Arc<dyn datafusion::physical_plan::ExecutionPlan>,
) -> Arc<dyn datafusion::physical_plan::ExecutionPlan> {
    match plan.downcast_ref::<HoldExec>() {
        Some(held) => held.input.clone(),
        None => plan.clone(),
    }
}

/// What DataFusion's window over whole partitions (`WindowAggExec`) makes for each
/// partition of its input and keeps to the end, for one window expression: the value
/// as an array of its own, its slices and accumulator — small allocations no pool sees
/// (measured: 3.95 GB for ten million one-row partitions of `sum(x) OVER (PARTITION BY
/// x)`, about 400 bytes each). It computes every partition in one call, after the
/// last batch, so neither the pool nor the allocator's count could stop it midway.
const PARTITION_BYTES: u64 = 400;

/// The partitions of a window's input, counted as its batches pass and held in the
/// pool at [`PARTITION_BYTES`] each per window expression: a window of millions of
/// partitions meets `query_memory` before it computes them, not after.
#[derive(Debug, Clone)]
struct PartitionCount {
    keys: Vec<Arc<dyn datafusion::physical_plan::PhysicalExpr>>,
    bytes_each: u64,
}

impl PartitionCount {
    /// Partitions in `batch` (its input is sorted by the keys): each run of equal keys,
    /// the first counted again when it goes on from the batch before (at most one too
    /// many a batch).
    fn count(&self, batch: &datafusion::arrow::array::RecordBatch) -> Result<u64> {
        let columns = self
            .keys
            .iter()
            .map(|k| {
                Ok(datafusion::arrow::compute::SortColumn {
                    values: k.evaluate(batch)?.into_array(batch.num_rows())?,
                    options: None,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(
            datafusion::common::utils::evaluate_partition_ranges(batch.num_rows(), &columns)?.len()
                as u64,
        )
    }
}

/// Passes its input's batches on, each one of wide rows held in the statement's pool
/// (without a copy) until it is dropped: batches DataFusion's operators make and keep
/// outside any reservation (a cross join's repeated rows, a filter's or a
/// repartition's gathered batches, the rows waiting in a channel) then meet
/// `query_memory`, a 400 past it. Narrow rows pass as they are: operators that keep
/// batches (sorts, joins, aggregates) count them themselves, and wide rows are counted
/// twice there, which only makes such a sort spill sooner.
///
/// Each poll of its input counts as work of `statement` (see [`tarn_alloc`]), and a
/// statement past its backstop ends at the next batch one of its nodes passes on.
#[derive(Debug)]
pub(crate) struct HoldExec {
    input: Arc<dyn datafusion::physical_plan::ExecutionPlan>,
    statement: u64,
    /// The plan's number, which owns what it holds (see [`HOLDER`]).
    holder: u64,
    /// Under a window over whole partitions: its input's partitions, counted.
    partitions: Option<PartitionCount>,
    /// Under a sort: its input's batches are given back instead (see
    /// [`release_batch`]).
    release: bool,
    /// Under a join: the widest row of its build side measured, or its probe side cut
    /// to fit (see [`join_rows`](super::join_rows)).
    join: Option<JoinSide>,
    /// Gone when the statement has ended: work still under way in a task DataFusion
    /// spawned (which its abort reaches only when it yields, and a join over inputs
    /// that are always ready never yields) then stops at the next batch.
    life: std::sync::Weak<()>,
}

impl datafusion::physical_plan::DisplayAs for HoldExec {
    fn fmt_as(
        &self,
        _t: datafusion::physical_plan::DisplayFormatType,
        f: &mut std::fmt::Formatter,
    ) -> std::fmt::Result {
        write!(
            f,
            "{}",
            if self.release {
                "HoldExec: released"
            } else {
                "HoldExec"
            }
        )
    }
}

impl datafusion::physical_plan::ExecutionPlan for HoldExec {
    fn name(&self) -> &str {
        "HoldExec"
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(
            &Arc<dyn datafusion::physical_plan::PhysicalExpr>,
        ) -> Result<datafusion::common::tree_node::TreeNodeRecursion>,
    ) -> Result<datafusion::common::tree_node::TreeNodeRecursion> {
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    }

    fn properties(&self) -> &Arc<datafusion::physical_plan::PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn datafusion::physical_plan::ExecutionPlan>>,
    ) -> Result<Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
        match (children.pop(), children.is_empty()) {
            (Some(input), true) => Ok(Arc::new(HoldExec {
                input,
                statement: self.statement,
                holder: self.holder,
                partitions: self.partitions.clone(),
                release: self.release,
                join: self.join.clone(),
                life: self.life.clone(),
            })),
            _ => datafusion::common::internal_err!("HoldExec has one child"),
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<datafusion::execution::TaskContext>,
    ) -> Result<datafusion::execution::SendableRecordBatchStream> {
        let pool = SharedPool(context.memory_pool().clone());
        let statement = self.statement;
        let input = {
            let _entered = tarn_alloc::enter(statement);
            self.input.execute(partition, context)?
        };
        let schema = input.schema();
        Ok(Box::pin(
            datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
                schema,
                HeldStream {
                    input,
                    pool,
                    statement,
                    holder: self.holder,
                    partitions: self.partitions.clone(),
                    release: self.release,
                    partitions_held: None,
                    partitions_seen: 0,
                    join: self.join.clone(),
                    pending: None,
                    life: self.life.clone(),
                    working_since: None,
                    yielding: None,
                },
            ),
        ))
    }
}

/// The stream of a [`HoldExec`].
struct HeldStream {
    input: datafusion::execution::SendableRecordBatchStream,
    pool: SharedPool,
    statement: u64,
    holder: u64,
    partitions: Option<PartitionCount>,
    release: bool,
    /// The pool's share for the partitions counted so far (held until the window's
    /// input is dropped, with the window's work).
    partitions_held: Option<MemoryReservation>,
    partitions_seen: u64,
    join: Option<JoinSide>,
    /// On a join's probe side: the rest of a batch cut into pieces.
    pending: Option<datafusion::arrow::array::RecordBatch>,
    life: std::sync::Weak<()>,
    /// Since when the task polling this stream has worked without yielding (see
    /// [`YIELD_AFTER`]), and the yield under way.
    working_since: Option<std::time::Instant>,
    yielding: Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>,
}

/// How long a task runs plan nodes before it yields to the others. A node whose input
/// is always ready (a scan of stored rows under an aggregate's partitions) never
/// returns `Pending`, so the tasks of an aggregate over wide rows held every worker
/// thread: the statement's timeout, which waits for a thread, answered after 98 s
/// instead of 60, and the tasks went on for 10 s after their client disconnected.
/// Tokio's own yield is used (a plain wake would run the same task again at once).
const YIELD_AFTER: std::time::Duration = std::time::Duration::from_millis(20);

impl futures::Stream for HeldStream {
    type Item = Result<datafusion::arrow::array::RecordBatch>;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        let this = self.get_mut();
        // Left set after the poll (see `tarn_alloc::set_current`): the task polling
        // this stream may be one DataFusion spawned, whose work on the batch goes on.
        tarn_alloc::set_current(this.statement);
        let _ = HOLDER.try_with(|h| h.set(this.holder));
        if this.life.strong_count() == 0 {
            return Poll::Ready(Some(datafusion::common::exec_err!(
                "the statement has ended"
            )));
        }
        let now = std::time::Instant::now();
        if this.yielding.is_none()
            && this
                .working_since
                .is_some_and(|since| now.duration_since(since) >= YIELD_AFTER)
        {
            this.yielding = Some(Box::pin(tokio::task::yield_now()));
        }
        if let Some(y) = this.yielding.as_mut() {
            if y.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.yielding = None;
            this.working_since = None;
        }
        this.working_since.get_or_insert(now);
        let polled = match this.pending.take() {
            Some(rest) => Poll::Ready(Some(Ok(rest))),
            None => this.input.as_mut().poll_next(cx),
        };
        if polled.is_pending() {
            // The task yields here anyway.
            this.working_since = None;
        }
        if let Some(over) = tarn_alloc::over(this.statement) {
            return Poll::Ready(Some(Err(
                datafusion::error::DataFusionError::ResourcesExhausted(over.to_string()),
            )));
        }
        match polled {
            Poll::Ready(Some(Ok(mut b))) => {
                if let Some(side) = &this.join {
                    side.measure(&b);
                    if let Some(rows) = side.step_rows().filter(|r| *r < b.num_rows()) {
                        this.pending = Some(b.slice(rows, b.num_rows() - rows));
                        b = b.slice(0, rows);
                    }
                }
                if let Some(count) = &this.partitions {
                    let counted = count.count(&b).and_then(|n| {
                        this.partitions_seen += n;
                        this.pool.resize(
                            &mut this.partitions_held,
                            "a window's partitions",
                            this.partitions_seen.saturating_mul(count.bytes_each),
                        )
                    });
                    if let Err(e) = counted {
                        return Poll::Ready(Some(Err(e)));
                    }
                }
                if this.release {
                    release_batch(&b, this.holder);
                    return Poll::Ready(Some(Ok(b)));
                }
                Poll::Ready(Some(hold_batch(b, &this.pool)))
            }
            other => other,
        }
    }
}

/// `batch` with its columns held in `pool` when its rows are wide and they are not
/// held already.
fn hold_batch(
    batch: datafusion::arrow::array::RecordBatch,
    pool: &SharedPool,
) -> Result<datafusion::arrow::array::RecordBatch> {
    let bytes = batch.get_array_memory_size();
    if bytes < SMALLEST_HELD_BATCH || bytes / batch.num_rows().max(1) < WIDEST_UNHELD_ROW {
        return Ok(batch);
    }
    let mut columns = Vec::with_capacity(batch.num_columns());
    for column in batch.columns() {
        let size = column.get_array_memory_size();
        let data = column.to_data();
        let held = data.buffers().iter().any(is_held)
            || data
                .child_data()
                .iter()
                .any(|c| c.buffers().iter().any(is_held));
        if size < SMALLEST_HELD_BATCH || held {
            columns.push(column.clone());
        } else {
            let reservation = pool.reserve("rows of large values", size as u64)?;
            columns.push(hold(column.clone(), reservation)?);
        }
    }
    Ok(datafusion::arrow::array::RecordBatch::try_new_with_options(
        batch.schema(),
        columns,
        &datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )?)
}

/// The function a wide constant in a SELECT list is planned as (see [`WideConstants`]).
pub(crate) const WIDE_CONSTANT: &str = "engine_wide_constant";

/// A constant of at least [`SMALLEST_HELD`] bytes in a SELECT list, repeated over the
/// rows of each batch only after the copies are sized and held: DataFusion's projection
/// repeats a folded constant (a 60 MB `repeat('x', 60000000)`) into every row of a
/// batch outside any reservation, 1.8 GB a column for 30 rows (5.4 GB for three such
/// columns before the batch was held). Volatile, so the optimizer does not fold it back
/// into the constant.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct WideConstant {
    signature: datafusion::logical_expr::Signature,
    limits: crate::datafusion_ext::context::output_limits::OutputLimits,
    pool: SharedPool,
}

impl WideConstant {
    pub(crate) fn new(
        limits: crate::datafusion_ext::context::output_limits::OutputLimits,
        pool: SharedPool,
    ) -> Self {
        WideConstant {
            signature: datafusion::logical_expr::Signature::any(
                1,
                datafusion::logical_expr::Volatility::Volatile,
            ),
            limits,
            pool,
        }
    }
}

impl datafusion::logical_expr::ScalarUDFImpl for WideConstant {
    fn name(&self) -> &str {
        WIDE_CONSTANT
    }

    fn signature(&self) -> &datafusion::logical_expr::Signature {
        &self.signature
    }

    fn return_type(
        &self,
        arg_types: &[datafusion::arrow::datatypes::DataType],
    ) -> Result<datafusion::arrow::datatypes::DataType> {
        Ok(arg_types[0].clone())
    }

    fn return_field_from_args(
        &self,
        args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> Result<datafusion::arrow::datatypes::FieldRef> {
        Ok(args.arg_fields[0].clone())
    }

    fn invoke_with_args(
        &self,
        args: datafusion::logical_expr::ScalarFunctionArgs,
    ) -> Result<datafusion::logical_expr::ColumnarValue> {
        use datafusion::logical_expr::ColumnarValue;
        let rows = args.number_rows;
        let value = match &args.args[0] {
            ColumnarValue::Scalar(v) => v,
            ColumnarValue::Array(a) => return Ok(ColumnarValue::Array(a.clone())),
        };
        let bytes = (value.size() as u64).saturating_mul(rows as u64);
        self.limits
            .check_batch("a constant repeated over its rows", bytes, Some(rows))?;
        let reservation = self
            .pool
            .reserve("a constant repeated over its rows", bytes)?;
        let array = value.to_array_of_size(rows)?;
        Ok(ColumnarValue::Array(hold(array, reservation)?))
    }
}

/// The optimizer rule that plans each wide constant of a SELECT list as
/// [`WIDE_CONSTANT`] (after the constants are folded: it runs last).
#[derive(Debug)]
pub(crate) struct WideConstants;

impl datafusion::optimizer::OptimizerRule for WideConstants {
    fn name(&self) -> &str {
        "tarn_wide_constants"
    }

    fn apply_order(&self) -> Option<datafusion::optimizer::ApplyOrder> {
        Some(datafusion::optimizer::ApplyOrder::BottomUp)
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: datafusion::logical_expr::LogicalPlan,
        config: &dyn datafusion::optimizer::OptimizerConfig,
    ) -> Result<datafusion::common::tree_node::Transformed<datafusion::logical_expr::LogicalPlan>>
    {
        use datafusion::common::tree_node::Transformed;
        use datafusion::logical_expr::{Expr, LogicalPlan, Projection};
        let LogicalPlan::Projection(p) = plan else {
            return Ok(Transformed::no(plan));
        };
        // The expression under its aliases, by reference (a clone would copy the
        // constant).
        fn peeled(e: &Expr) -> &Expr {
            match e {
                Expr::Alias(a) => peeled(&a.expr),
                e => e,
            }
        }
        // A folded constant, or a text made of large text parameters alone
        // (`functions::param_text`: `$1`, `btrim($1)`; not `length($1)`, which is
        // narrow). One wrapped already is not wrapped again.
        let wide = |e: &Expr, ty: &datafusion::arrow::datatypes::DataType| match peeled(e) {
            Expr::Literal(v, _) => v.size() as u64 >= SMALLEST_HELD,
            Expr::ScalarFunction(f) if f.func.name() == WIDE_CONSTANT => false,
            e => {
                is_text(ty)
                    && crate::datafusion_ext::functions::param_text::constant_text_bytes(e)
                        .is_some_and(|n| n as u64 >= SMALLEST_HELD)
            }
        };
        let udf = config
            .function_registry()
            .and_then(|r| r.udf(WIDE_CONSTANT).ok());
        let Some(udf) = udf.filter(|_| {
            p.expr
                .iter()
                .zip(p.schema.fields())
                .any(|(e, f)| wide(e, f.data_type()))
        }) else {
            return Ok(Transformed::no(LogicalPlan::Projection(p)));
        };
        let exprs = p
            .expr
            .iter()
            .zip(p.schema.iter())
            .map(|(e, (qualifier, field))| {
                if wide(e, field.data_type()) {
                    Expr::ScalarFunction(datafusion::logical_expr::expr::ScalarFunction::new_udf(
                        udf.clone(),
                        vec![peeled(e).clone()],
                    ))
                    .alias_qualified(qualifier.cloned(), field.name())
                } else {
                    e.clone()
                }
            })
            .collect();
        Ok(Transformed::yes(LogicalPlan::Projection(
            Projection::try_new(exprs, p.input)?,
        )))
    }
}

/// Whether values of `ty` are as long as the texts they are made of (text, binary).
pub(crate) fn is_text(ty: &datafusion::arrow::datatypes::DataType) -> bool {
    use datafusion::arrow::datatypes::DataType;
    matches!(
        ty,
        DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, StringArray};
    use datafusion::execution::memory_pool::GreedyMemoryPool;

    #[test]
    fn a_held_array_keeps_its_reservation_until_its_last_buffer_goes() {
        let pool = SharedPool(Arc::new(GreedyMemoryPool::new(10 << 20)));
        let array: ArrayRef = Arc::new(StringArray::from(vec![Some("abc"), None, Some("de")]));
        let reservation = pool.reserve("test", 4 << 20).unwrap();
        let held = hold(array.clone(), reservation).unwrap();
        assert_eq!(held.as_ref(), array.as_ref());
        assert_eq!(pool.0.reserved(), 4 << 20);
        // A slice shares the buffers: still held.
        let slice = held.slice(1, 2);
        drop(held);
        assert_eq!(pool.0.reserved(), 4 << 20);
        assert_eq!(slice.len(), 2);
        drop(slice);
        assert_eq!(pool.0.reserved(), 0);
        // Past the pool: refused before anything is made.
        let err = pool.reserve("test", 11 << 20).unwrap_err().to_string();
        assert!(err.contains("Resources exhausted"), "{err}");
    }
}
