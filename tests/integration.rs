//! Tarn's integration tests, through the public API only: one binary, a module per
//! area (`cargo test --test integration api::` runs one area). The kill -9 tests run
//! their children from this binary (`tarn_tests::child_test`).

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
