//! libFuzzer entry point of the `sql_exec` target; the logic and its checks are in
//! `tarn_fuzz::sql_exec::run`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tarn_fuzz::sql_exec::run(data));
