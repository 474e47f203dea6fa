//! The watch target's corpus (fuzz/corpus/watch) through the dashboard's decoder, on the stable
//! toolchain: what once crashed stays fixed. (A panic fails the test.)

#[test]
fn the_watch_corpus() {
    let dir = tune_testkit::workspace_root().join("fuzz/corpus/watch");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        tune_cli::fuzzing::watch(&std::fs::read(entry.unwrap().path()).unwrap());
        n += 1;
    }
    assert!(n > 0, "no corpus in {}", dir.display());
}
