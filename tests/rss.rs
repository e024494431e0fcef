//! Tests that measure the process's resident memory, in a binary of their own so that
//! no other test's allocations count as theirs; they take `tarn_tests::RSS_SERIAL` so
//! that they do not count each other's either.

mod memory;
mod upload_memory;
