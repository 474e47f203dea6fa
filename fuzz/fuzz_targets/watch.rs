#![no_main]
//! See tune_cli::fuzzing::watch.
libfuzzer_sys::fuzz_target!(|data: &[u8]| tune_cli::fuzzing::watch(data));
