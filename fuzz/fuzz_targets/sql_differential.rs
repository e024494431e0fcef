//! libFuzzer entry point of the `sql_differential` target; the logic and its checks are in
//! `tarn_fuzz::differential::run_bytes`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tarn_fuzz::differential::run_bytes(data));
