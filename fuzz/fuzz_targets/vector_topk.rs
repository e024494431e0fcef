//! libFuzzer entry point of the `vector_topk` target; the logic and its checks are in
//! `tarn_fuzz::vector_topk::run_bytes`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tarn_fuzz::vector_topk::run_bytes(data));
