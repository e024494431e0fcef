//! What every statement of one engine shares: the database, the DataFusion session with
//! Tarn's functions and rules installed, the writer locks and the limits. Transactions
//! and the fast paths take this, not the engine, so that the router stands above them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use datafusion::execution::context::SessionState;
use serde_json::Value as Json;
use tarn_catalog::TableId;
use tarn_storage::Database;
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

use crate::error::{Result, bad};

/// Limits on one statement (SPEC §8).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Longest SQL text, in bytes.
    pub max_sql_bytes: usize,
    /// Most parameters one statement may bind.
    pub max_params: usize,
    /// Most parameter sets in one batch.
    pub max_batch: usize,
    /// Longest a statement may run.
    pub query_timeout: Duration,
    /// Memory one query may use before it spills or fails.
    pub query_memory: usize,
    /// Whether statements may take the planner-free paths that give the statement
    /// path's answer faster: key lookups, `<#>` top-k searches, batch and literal
    /// inserts. Off, every statement is planned; tests compare the two.
    pub fast_paths: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_sql_bytes: 1 << 20,
            max_params: 65_535,
            max_batch: 100_000,
            query_timeout: Duration::from_secs(60),
            query_memory: 2 << 30,
            fast_paths: true,
        }
    }
}

/// Async locks that serialize writers: one DDL lock for catalog changes and one lock
/// per table for its writers. Async so that a task waiting for a lock never blocks a
/// runtime worker that the lock holder needs.
#[derive(Debug, Default)]
pub struct Locks {
    ddl: Arc<AsyncMutex<()>>,
    tables: parking_lot::Mutex<HashMap<TableId, Arc<AsyncMutex<()>>>>,
}

impl Locks {
    /// Takes the DDL lock.
    pub async fn ddl(&self) -> OwnedMutexGuard<()> {
        self.ddl.clone().lock_owned().await
    }

    /// Takes the writer lock of table `id`.
    pub async fn table(&self, id: TableId) -> OwnedMutexGuard<()> {
        let m = self.tables.lock().entry(id).or_default().clone();
        m.lock_owned().await
    }
}

/// The parts of a [`crate::SqlEngine`] its statements work with.
pub(crate) struct Shared {
    /// The database.
    pub(crate) db: Arc<Database>,
    /// The DataFusion session every query is planned on.
    pub(crate) session: SessionState,
    /// The writer locks.
    pub(crate) locks: Arc<Locks>,
    /// The limits in force.
    pub(crate) limits: Limits,
}

impl Shared {
    /// A reservation named `name` on the `query_memory` pool the statements share.
    pub(crate) fn reserve(
        &self,
        name: &str,
    ) -> datafusion::execution::memory_pool::MemoryReservation {
        datafusion::execution::memory_pool::MemoryConsumer::new(name)
            .register(&self.session.runtime_env().memory_pool)
    }

    /// Checks a statement's parameters against the limits: how many, how deeply nested.
    pub(crate) fn check_params(&self, params: &[Json]) -> Result<()> {
        let n = params.len();
        crate::datafusion_ext::functions::param_array::check_json_depth(params)?;
        if n > self.limits.max_params {
            return bad(format!(
                "a statement may bind at most {} parameters, not {n} (limit max_params)",
                self.limits.max_params
            ));
        }
        Ok(())
    }
}
