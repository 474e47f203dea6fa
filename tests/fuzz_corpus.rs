//! Every input the fuzz targets (fuzz/) were seeded with or found, through the same decoders,
//! on the stable toolchain: what once crashed stays fixed. (A panic fails the test.) The watch
//! protocol's corpus is the binary's: `cli/tests/end_to_end/fuzz_corpus.rs`.

use std::path::Path;

fn replay(target: &str, run: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        run(&std::fs::read(&path).unwrap());
        n += 1;
    }
    assert!(n > 0, "no corpus in {}", dir.display());
}

#[test]
fn the_spec_corpus() {
    replay("spec", tune::fuzzing::spec);
}

#[test]
fn the_report_corpus() {
    replay("report", tune::fuzzing::report);
}

#[test]
fn the_records_corpus() {
    replay("records", tune::fuzzing::records);
}
