//! The most bytes one call of a function that can make large output may make, per value
//! and per batch of rows: shared by the wrapped functions (`bounded.rs`) and the held
//! constants (`held.rs`). A leaf.

use datafusion::common::{Result, exec_err};

/// Most bytes one call may make: per value and per batch of rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OutputLimits {
    /// One value: a thirty-second of the statements' memory pool, within 16–256 MiB.
    /// Smaller than PostgreSQL's 1 GB because a constant value is folded into the plan,
    /// which the planner copies several times.
    pub value: u64,
    /// One batch of rows: a quarter of the pool, at least 64 MiB (a small pool still
    /// builds test vectors) and at most 1 GiB (under Arrow's 2 GiB).
    pub batch: u64,
}

impl OutputLimits {
    /// Fails when `what` would make one value of `bytes` past the per-value limit.
    pub(crate) fn check_value(&self, what: &str, bytes: u64) -> Result<()> {
        if bytes > self.value {
            return exec_err!(
                "requested length too large: {what} would make a value of {bytes} bytes, past \
                 the limit of {} bytes per value (a thirty-second of query_memory, within 16 \
                 to 256 MiB)",
                self.value
            );
        }
        Ok(())
    }

    /// Fails when `what` would make `bytes` for a batch (`rows` rows, when known) past
    /// the per-batch limit.
    pub(crate) fn check_batch(&self, what: &str, bytes: u64, rows: Option<usize>) -> Result<()> {
        if bytes > self.batch {
            let rows = rows.map_or(String::new(), |r| format!(" for {r} row(s)"));
            return exec_err!(
                "requested length too large: {what} would make {bytes} bytes{rows}, past the \
                 limit of {} bytes per batch of rows (a quarter of query_memory, within 64 \
                 MiB to 1 GiB)",
                self.batch
            );
        }
        Ok(())
    }
}

/// The limits for a pool of `query_memory` bytes.
pub fn output_limits(query_memory: usize) -> OutputLimits {
    let pool = query_memory as u64;
    OutputLimits {
        value: (pool / 32).clamp(16 << 20, 256 << 20),
        batch: (pool / 4).clamp(64 << 20, 1 << 30),
    }
}
