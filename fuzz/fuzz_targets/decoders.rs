//! libFuzzer entry point of the `decoders` target; the logic and its checks are in
//! `tarn_fuzz::decoders::run_bytes`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tarn_fuzz::decoders::run_bytes(data));
