#![no_main]
//! See tune::fuzzing::watch.
libfuzzer_sys::fuzz_target!(|data: &[u8]| tune::fuzzing::watch(data));
