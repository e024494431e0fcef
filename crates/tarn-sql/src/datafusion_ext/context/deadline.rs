//! The statement timeout inside planning.
//!
//! `tokio::time::timeout` ends a statement between two polls of its future, and planning
//! is one poll: DataFusion's analysis and naming of an expression are synchronous and,
//! for deep expressions over large constants, grow with the square of the depth (a
//! 23 KB request planned for 73 s). So the deadline is also kept on the thread while
//! the statement's future is polled, and the planning steps that are Tarn's own — each
//! binary operator planned, each large constant typed, each of Tarn's rules — check it:
//! past it, planning stops with the statement timeout's own error.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use datafusion::common::Result as DfResult;

thread_local! {
    /// The deadline of the statement being polled on this thread, and its timeout.
    static DEADLINE: Cell<Option<(Instant, Duration)>> = const { Cell::new(None) };
}

/// The error of a statement past its timeout (the words `tokio::time::timeout`'s
/// caller gives it too).
pub(crate) fn timeout_message(timeout: Duration) -> String {
    format!(
        "canceling statement due to statement timeout ({} ms, limit query_timeout)",
        timeout.as_millis()
    )
}

/// Fails when the statement being polled on this thread is past its deadline.
pub(crate) fn check() -> DfResult<()> {
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
