//! Retrying a call that failed for a reason that may pass (SPEC §1, rate limiting):
//! 429 from the library's rate limit, and 502/503/504, which never come from the
//! library itself but from the transports host programs put in front of it.

use std::future::Future;
use std::time::Duration;

/// An error a [`RetryPolicy`] can judge: its HTTP-style status and, for a rate limit,
/// how long to wait. Implemented for [`crate::Error`]; a host program implements it for
/// its own transport errors to use the same policy around remote calls.
pub trait Retryable {
    /// The HTTP-style status.
    fn status(&self) -> u16;
    /// How long the server asked to wait, if it said.
    fn retry_after(&self) -> Option<Duration> {
        None
    }
}

impl Retryable for crate::Error {
    fn status(&self) -> u16 {
        crate::Error::status(self)
    }

    fn retry_after(&self) -> Option<Duration> {
        crate::Error::retry_after(self)
    }
}

/// Exponential backoff: after a failure with status 429, 502, 503 or 504 the call is
/// made again after 1 s, then 2 s, then 4 s (3 retries, 4 calls at most), or after the
/// wait the error asks for when that is longer. Any other error, or the last
/// failure, is returned as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first call.
    pub retries: u32,
    /// The wait before the first retry; each next one doubles it.
    pub initial: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            retries: 3,
            initial: Duration::from_secs(1),
        }
    }
}

impl RetryPolicy {
    /// The policy of SPEC §1: 3 retries after 1 s, 2 s and 4 s.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether an error of `status` may pass on its own.
    pub fn retries_status(status: u16) -> bool {
        matches!(status, 429 | 502 | 503 | 504)
    }

    /// The wait before retry `n` (0 for the first) after `err`.
    pub fn delay<E: Retryable>(&self, n: u32, err: &E) -> Duration {
        let backoff = self
            .initial
            .saturating_mul(1u32.checked_shl(n).unwrap_or(u32::MAX));
        err.retry_after()
            .map_or(backoff, |asked| asked.max(backoff))
    }

    /// Calls `call` until it succeeds, fails with an error not worth retrying, or the
    /// retries are spent; waits with tokio's clock in between.
    pub async fn run<T, E, F, Fut>(&self, mut call: F) -> Result<T, E>
    where
        E: Retryable,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let mut n = 0;
        loop {
            match call().await {
                Err(e) if n < self.retries && Self::retries_status(e.status()) => {
                    tokio::time::sleep(self.delay(n, &e)).await;
                    n += 1;
                }
                done => return done,
            }
        }
    }
}
