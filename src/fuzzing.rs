//! What the fuzz targets (`fuzz/`) and their corpus test (`tests/fuzz_corpus.rs`) drive:
//! each decoder of outside input the library owns (the watch protocol's is `tune_cli::fuzzing`), from bytes, as tune itself calls it. None may panic, hang or
//! allocate without bound, whatever the bytes.

use std::path::Path;

use crate::objective::command::ReportParser;
use crate::spec::ExperimentSpec;

/// A spec file: TOML, then the spec, its validation, and the searcher and scheduler it makes
/// (with a first suggestion).
pub fn spec(bytes: &[u8]) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    if let Ok(spec) = ExperimentSpec::from_toml(text, Path::new("fuzz.toml")) {
        if let Ok(mut searcher) = spec.make_searcher() {
            let _ = searcher.suggest(0, &tune_search::History::new(spec.mode));
        }
        let _ = spec.make_scheduler().describe();
    }
}

/// A trial's stdout, line by line, through the report parser.
pub fn report(bytes: &[u8]) {
    let mut parser = ReportParser::new("loss");
    for line in bytes.split(|&b| b == b'\n') {
        let _ = parser.feed(&String::from_utf8_lossy(line));
    }
}

/// A stored record, as each kind the store decodes, and the store's note.
pub fn records(bytes: &[u8]) {
    crate::store::decode_any(bytes);
}
