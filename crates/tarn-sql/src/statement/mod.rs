//! Tarn's own statement executor: the transaction every statement writes through
//! (`txn`), what statements share (`shared`), the dispatch of a bound statement to its
//! kind (`dispatch`), the planner's form of EXPLAIN (`explain`), DDL (`ddl`,
//! `index_ddl`, `views`), DML (`dml` for INSERT, `update_delete`, `on_conflict`), session
//! settings and results. Plans only the read side of a write, through DataFusion.

pub(crate) mod ddl;
pub(crate) mod dispatch;
pub(crate) mod dml;
pub(crate) mod explain;
pub(crate) mod index_ddl;
pub(crate) mod on_conflict;
pub(crate) mod result;
pub(crate) mod settings;
pub(crate) mod shared;
pub(crate) mod txn;
pub(crate) mod update_delete;
pub(crate) mod views;
