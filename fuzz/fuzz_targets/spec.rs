#![no_main]
//! See tune::fuzzing::spec.
libfuzzer_sys::fuzz_target!(|data: &[u8]| tune::fuzzing::spec(data));
