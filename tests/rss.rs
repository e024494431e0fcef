//! Tests that measure the process's resident memory, in a binary of their own so that
//! no other test's allocations count as theirs; they take `tarn_tests::RSS_SERIAL` so
//! that they do not count each other's either.

/// Tarn's hosts run with the allocator that counts what each statement holds; so do
/// the tests (its backstop must not stop a statement the pool lets run).
#[global_allocator]
static ALLOCATOR: tarn::StatementAllocator = tarn::StatementAllocator;

mod memory;
mod upload_memory;
