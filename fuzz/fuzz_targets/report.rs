#![no_main]
//! See tune::fuzzing::report.
libfuzzer_sys::fuzz_target!(|data: &[u8]| tune::fuzzing::report(data));
