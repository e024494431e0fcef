//! The statement's view of the database: which table versions it reads, its workspace,
//! instant and session settings, and what its expressions share. A leaf: the catalog
//! provider, the search functions and the rules that read the statement's view take it
//! from here (the provider's own methods on it are in `provider.rs`).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use datafusion::catalog::TableProvider;
use tarn_catalog::{Catalog, TableId};
use tarn_storage::{Database, TableVersion};

/// Where a statement's table reads come from: published snapshots, or a batch's own
/// pending versions for tables it has written.
#[derive(Clone)]
pub(crate) struct ReadView {
    pub db: Arc<Database>,
    pub org: String,
    /// The statement's workspace (what unqualified names resolve in).
    pub ws: String,
    pub catalog: Arc<Catalog>,
    pub pending: HashMap<TableId, Arc<TableVersion>>,
    /// Published versions this statement reads, pinned at its start (or when first
    /// met): every reference to a table in one statement sees the same rows.
    pub pinned: Arc<parking_lot::Mutex<HashMap<TableId, Arc<TableVersion>>>>,
    /// Replacements by (workspace, table name): the DML target with row ids, or the
    /// rows a RETURNING clause reads.
    pub overrides: HashMap<(String, String), Arc<dyn TableProvider>>,
    /// The statement's instant (see `clock.rs`).
    pub now: chrono::DateTime<chrono::Utc>,
    /// The session's `engine.ef_search`, if it set one.
    pub ef_search: Option<usize>,
    /// What the statement's expressions bind and share (text and hybrid `<#>`), by key.
    pub shared: Arc<parking_lot::Mutex<HashMap<String, Arc<dyn std::any::Any + Send + Sync>>>>,
    /// Whether the statement writes `DESC NULLS FIRST` (see `score_nulls_last.rs`).
    pub desc_nulls_first_written: bool,
    /// The widest average row, in bytes, of the scans of the statement (their blocks'
    /// bytes over their rows), for the statement's batch size.
    pub widest_row: Arc<std::sync::atomic::AtomicUsize>,
    /// The statement's large parameters, each held once.
    pub bound: Arc<ByNumber>,
}

/// What a statement binds by number instead of as literals, held once and read from
/// its view, by parameter number less one: large texts (see `functions::param_text`)
/// and large arrays, made Arrow lists when bound (see `functions::param_array`).
#[derive(Debug, Default)]
pub struct ByNumber {
    /// Large text parameters.
    pub texts: Vec<Option<Arc<str>>>,
    /// Large array parameters, as one-row list values.
    pub arrays: Vec<Option<datafusion::common::ScalarValue>>,
}

impl fmt::Debug for ReadView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadView").field("org", &self.org).finish()
    }
}

impl ReadView {
    /// The statement's value under `key`, made by `make` the first time.
    pub fn shared<T: std::any::Any + Send + Sync>(
        &self,
        key: String,
        make: impl FnOnce() -> T,
    ) -> Arc<T> {
        let mut map = self.shared.lock();
        if let Some(v) = map.get(&key)
            && let Ok(t) = v.clone().downcast::<T>()
        {
            return t;
        }
        let t = Arc::new(make());
        map.insert(key, t.clone() as Arc<dyn std::any::Any + Send + Sync>);
        t
    }

    pub(crate) fn version(&self, id: TableId) -> Option<Arc<TableVersion>> {
        if let Some(v) = self.pending.get(&id) {
            return Some(v.clone());
        }
        let mut pinned = self.pinned.lock();
        if let Some(v) = pinned.get(&id) {
            return Some(v.clone());
        }
        let v = self.db.table(id)?.snapshot();
        pinned.insert(id, v.clone());
        Some(v)
    }
}

tokio::task_local! {
    /// The view of the statement being planned on this task. One shared DataFusion
    /// session serves every statement: its catalog list resolves through this, so no
    /// per-statement session (hundreds of function registrations) is built.
    pub(crate) static STATEMENT_VIEW: Arc<ReadView>;
}
