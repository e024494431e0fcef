//! Tarn's integration tests, through the public API only: one binary, a module per
//! area (`cargo test --test integration api::` runs one area). The kill -9 tests run
//! their children from this binary (`tarn_tests::child_test`).

/// Tarn's hosts run with the allocator that counts what each statement holds; so do
/// the tests (its backstop must not stop a statement the pool lets run).
#[global_allocator]
static ALLOCATOR: tarn::StatementAllocator = tarn::StatementAllocator;

mod api;
mod bulk;
mod cancel;
mod cascade;
mod concurrency;
mod corruption;
mod crash;
mod files;
mod hostile;
mod isolation;
mod power_loss;
mod quality;
mod search;
mod storage;
mod subquery_differential;
mod tenancy;
mod text;
mod upload;
