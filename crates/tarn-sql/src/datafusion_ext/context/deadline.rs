//! The statement timeout inside planning.
//!
//! `tokio::time::timeout` ends a statement between two polls of its future, and planning
//! is one poll: DataFusion's analysis and naming of an expression are synchronous and,
//! for deep expressions over large constants, grow with the square of the depth (a
//! 23 KB request planned for 73 s). So the deadline is also kept on the thread while
//! the statement's future is polled, and the planning steps that are Tarn's own — each
//! binary operator planned, each large constant typed, each of Tarn's rules — check it:
//! past it, planning stops with the statement timeout's own error.
//!
//! The same checks stop a statement whose caller gave up: a host that runs a statement
//! as a task of its own and aborts it when its client disconnects reaches the task only
//! between two polls, so it also raises the statement's [`StopHandle`], which the
//! checks read.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use datafusion::common::Result as DfResult;

thread_local! {
    /// The deadline of the statement being polled on this thread, and its timeout.
    static DEADLINE: Cell<Option<(Instant, Duration)>> = const { Cell::new(None) };
    /// The stop flag of the statement being polled on this thread, if its caller has one.
    static STOP: RefCell<Option<Arc<AtomicBool>>> = const { RefCell::new(None) };
}

/// The error of a statement whose caller stopped it (PostgreSQL's words for a
/// cancelled query).
pub(crate) const STOPPED_MESSAGE: &str = "canceling statement due to user request";

/// The error of a statement past its timeout (the words `tokio::time::timeout`'s
/// caller gives it too).
pub(crate) fn timeout_message(timeout: Duration) -> String {
    format!(
        "canceling statement due to statement timeout ({} ms, limit query_timeout)",
        timeout.as_millis()
    )
}

/// Whether the caller of the statement being polled on this thread stopped it.
pub(crate) fn stopped() -> bool {
    STOP.try_with(|s| {
        s.borrow()
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Relaxed))
    })
    .unwrap_or(false)
        || call_stop_raised()
}

/// Fails when the statement being polled on this thread is past its deadline, or its
/// caller stopped it.
pub(crate) fn check() -> DfResult<()> {
    if stopped() {
        return Err(crate::error::bad_request(STOPPED_MESSAGE.to_string()));
    }
    match DEADLINE.try_with(Cell::get).ok().flatten() {
        Some((at, timeout)) if Instant::now() >= at => {
            Err(crate::error::bad_request(timeout_message(timeout)))
        }
        _ => Ok(()),
    }
}

/// A statement's future with its deadline on the thread for the length of each poll.
pub(crate) struct WithDeadline<F> {
    fut: Pin<Box<F>>,
    at: Instant,
    timeout: Duration,
}

/// `fut`, whose planning steps see the deadline `timeout` from now (see [`check`]).
pub(crate) fn with_deadline<F: Future>(fut: F, timeout: Duration) -> WithDeadline<F> {
    WithDeadline {
        fut: Box::pin(fut),
        at: Instant::now() + timeout,
        timeout,
    }
}

impl<F: Future> Future for WithDeadline<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let _restore = Restore(
            DEADLINE
                .try_with(|d| d.replace(Some((this.at, this.timeout))))
                .ok()
                .flatten(),
        );
        this.fut.as_mut().poll(cx)
    }
}

/// Puts back the deadline a poll found, also when the poll panics (the statement's
/// panic is caught above it, and the thread goes on with other work).
struct Restore(Option<(Instant, Duration)>);

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = DEADLINE.try_with(|d| d.set(self.0));
    }
}

/// Stops the planning of a statement started with [`stoppable`]: the host calls
/// [`StopHandle::stop`] when the statement's caller is gone (say its client
/// disconnected), and the planning ends at its next check of the deadline (each binary
/// operator planned, each large constant typed, each of Tarn's rules) with `canceling
/// statement due to user request`, applying nothing. Planning a large statement is one
/// poll, which dropping the future does not reach; past planning, the host drops (or
/// aborts) the future too, which ends it at its next await. Cloning gives another
/// handle to the same statement.
#[derive(Clone, Debug, Default)]
pub struct StopHandle(Arc<AtomicBool>);

impl StopHandle {
    /// Asks the statement to stop. Idempotent.
    pub fn stop(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether [`StopHandle::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// A statement's future that its [`StopHandle`] can stop (see [`stoppable`]).
#[must_use = "a future does nothing unless polled"]
pub struct Stoppable<F> {
    fut: Pin<Box<F>>,
    flag: Arc<AtomicBool>,
}

/// Wraps `fut` (a call of Tarn's SQL layer, e.g. a query) so that the returned
/// [`StopHandle`] stops it between and within its polls.
pub fn stoppable<F: Future>(fut: F) -> (Stoppable<F>, StopHandle) {
    let flag = Arc::new(AtomicBool::new(false));
    (
        Stoppable {
            fut: Box::pin(fut),
            flag: flag.clone(),
        },
        StopHandle(flag),
    )
}

impl<F: Future> Future for Stoppable<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let _restore = RestoreStop(
            STOP.try_with(|s| s.replace(Some(this.flag.clone())))
                .ok()
                .flatten(),
        );
        this.fut.as_mut().poll(cx)
    }
}

/// Puts back the stop flag a poll found (as [`Restore`] does the deadline).
struct RestoreStop(Option<Arc<AtomicBool>>);

impl Drop for RestoreStop {
    fn drop(&mut self) {
        let previous = self.0.take();
        let _ = STOP.try_with(|s| *s.borrow_mut() = previous);
    }
}

/// A logical optimizer rule of DataFusion's (or Tarn's) that checks the deadline (see
/// [`check`]) before each node it rewrites: past it, or once the statement is stopped,
/// planning ends there instead of running the rest of the optimizer's passes (a stop
/// in the middle of a 27 s plan had let 4–13 s more of it run).
#[derive(Debug)]
pub(crate) struct CheckedRule(
    pub(crate) Arc<dyn datafusion::optimizer::OptimizerRule + Send + Sync>,
);

impl datafusion::optimizer::OptimizerRule for CheckedRule {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn apply_order(&self) -> Option<datafusion::optimizer::ApplyOrder> {
        self.0.apply_order()
    }

    fn rewrite(
        &self,
        plan: datafusion::logical_expr::LogicalPlan,
        config: &dyn datafusion::optimizer::OptimizerConfig,
    ) -> DfResult<datafusion::common::tree_node::Transformed<datafusion::logical_expr::LogicalPlan>>
    {
        check()?;
        self.0.rewrite(plan, config)
    }
}

/// An analyzer rule that checks the deadline before it runs (see [`CheckedRule`]).
#[derive(Debug)]
pub(crate) struct CheckedAnalyzer(
    pub(crate) Arc<dyn datafusion::optimizer::AnalyzerRule + Send + Sync>,
);

impl datafusion::optimizer::AnalyzerRule for CheckedAnalyzer {
    fn analyze(
        &self,
        plan: datafusion::logical_expr::LogicalPlan,
        config: &datafusion::config::ConfigOptions,
    ) -> DfResult<datafusion::logical_expr::LogicalPlan> {
        check()?;
        self.0.analyze(plan, config)
    }

    fn name(&self) -> &str {
        self.0.name()
    }
}

/// A physical optimizer rule that checks the deadline before it runs (see
/// [`CheckedRule`]).
#[derive(Debug)]
pub(crate) struct CheckedPhysical(
    pub(crate) Arc<dyn datafusion::physical_optimizer::PhysicalOptimizerRule + Send + Sync>,
);

impl datafusion::physical_optimizer::PhysicalOptimizerRule for CheckedPhysical {
    fn optimize(
        &self,
        plan: Arc<dyn datafusion::physical_plan::ExecutionPlan>,
        config: &datafusion::config::ConfigOptions,
    ) -> DfResult<Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
        check()?;
        self.0.optimize(plan, config)
    }

    fn optimize_with_context(
        &self,
        plan: Arc<dyn datafusion::physical_plan::ExecutionPlan>,
        context: &dyn datafusion::physical_optimizer::PhysicalOptimizerContext,
    ) -> DfResult<Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
        check()?;
        self.0.optimize_with_context(plan, context)
    }

    fn name(&self) -> &str {
        self.0.name()
    }

    fn schema_check(&self) -> bool {
        self.0.schema_check()
    }
}

/// Signals, held by whoever may withdraw a caller's access (say the gate of an API key
/// that is being revoked), that stop the statements of the calls they were given to:
/// raised, a statement still doing its work ends at its next await or planning check
/// with an error and applies nothing, and a statement waiting for its index build
/// stops waiting. A commit already under way completes (so the caller that raised the
/// signal, waiting for the calls to end, sees their effects come first). The host runs
/// each call with [`CallStop::scope`]; the statements of the call read it from there.
#[derive(Clone, Debug, Default)]
pub struct CallStop(Vec<tokio::sync::watch::Receiver<bool>>);

tokio::task_local! {
    /// The stop signals of the call whose future is being polled.
    static CALL_STOP: CallStop;
}

impl CallStop {
    /// Stops the call when any of `signals` becomes `true`.
    pub fn new(signals: Vec<tokio::sync::watch::Receiver<bool>>) -> Self {
        CallStop(signals)
    }

    /// Whether a signal is raised.
    pub fn is_raised(&self) -> bool {
        self.0.iter().any(|r| *r.borrow())
    }

    /// Runs `fut` (a call of the SQL layer) with these signals.
    pub async fn scope<F: Future>(self, fut: F) -> F::Output {
        CALL_STOP.scope(self, fut).await
    }
}

/// Resolves once a stop signal of the call being polled is raised; never, if it has
/// none.
pub(crate) async fn call_stopped() {
    let Ok(mut signals) = CALL_STOP.try_with(|s| s.0.clone()) else {
        return std::future::pending().await;
    };
    if signals.is_empty() {
        return std::future::pending().await;
    }
    let waits = signals.iter_mut().map(|r| {
        Box::pin(async move {
            // A signal whose sender is gone is never raised.
            if r.wait_for(|v| *v).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    });
    futures::future::select_all(waits).await;
}

/// The error of a statement whose caller's access is being withdrawn, or whose caller
/// stopped it.
pub(crate) fn stopped_error() -> crate::error::Error {
    crate::error::Error::BadRequest(STOPPED_MESSAGE.into())
}

/// Runs `fut` until it ends or a stop signal of the call is raised (see [`CallStop`]);
/// then `fut` is dropped at its await and the statement answers [`stopped_error`]. For
/// work that applies nothing before it ends.
pub(crate) async fn unless_call_stopped<F: Future>(fut: F) -> crate::error::Result<F::Output> {
    tokio::select! {
        r = fut => Ok(r),
        () = call_stopped() => Err(stopped_error()),
    }
}

/// Whether a stop signal of the call being polled on this thread is raised.
fn call_stop_raised() -> bool {
    CALL_STOP.try_with(CallStop::is_raised).unwrap_or(false)
}
