//! Third-party decoders run on stored bytes.
//!
//! Every stored byte passes a checksum before it is decoded, so damage never reaches a
//! decoder; but bytes that were written hostile, or garbage that a bug checksummed, do.
//! Arrow's IPC reader trusts the lengths in its messages and panics on some hostile
//! ones (found by the `decoders` fuzz target: a list node claiming 10^19 entries), so
//! Tarn runs it under `catch_unwind` and reports a panic as corruption of the file,
//! like any other damage.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};

thread_local! {
    /// How many untrusted decoders this thread is inside.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Runs decoder `f`; its error, or a panic inside it, becomes `Err(message)`.
pub(crate) fn decode<T>(
    f: impl FnOnce() -> std::result::Result<T, String>,
) -> std::result::Result<T, String> {
    DEPTH.with(|d| d.set(d.get() + 1));
    let out = catch_unwind(AssertUnwindSafe(f));
    DEPTH.with(|d| d.set(d.get() - 1));
    out.unwrap_or_else(|payload| {
        let message = panic_message(payload.as_ref()).unwrap_or("a panic");
        Err(format!("the decoder failed: {message}"))
    })
}

/// The message a panic carries, when it is text.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> Option<&str> {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
}

/// Whether this thread is inside an untrusted decoder (for panic hooks: the fuzz
/// targets count every other panic as a bug).
pub fn in_decoder() -> bool {
    DEPTH.with(|d| d.get() > 0)
}
