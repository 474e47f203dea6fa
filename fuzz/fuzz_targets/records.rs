#![no_main]
//! See tune::fuzzing::records.
libfuzzer_sys::fuzz_target!(|data: &[u8]| tune::fuzzing::records(data));
