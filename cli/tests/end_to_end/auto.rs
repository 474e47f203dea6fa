//! `[search] algorithm = "auto"` through the real binary: what it chose, with its reason, in the
//! sweep's log, `tune status` and the export; and a sweep killed mid-way and resumed deciding
//! as the one run in one go.

use crate::common;

use common::*;

/// A spec of `samples` one-step trials of the fixture over `space`, with `auto`, one slot.
fn auto_spec(dir: &std::path::Path, samples: u64, space: &str) -> std::path::PathBuf {
    write_spec(
        dir,
        &format!("samples = {samples}\nseed = 9\n[search]\nalgorithm = \"auto\"\n[resources]\ncpu_slots = 1"),
        &["--y", "{y}", "--steps", "1"],
        space,
    )
}

#[test]
fn auto_says_what_it_chose_and_why_in_the_log_status_and_export() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = auto_spec(
        tmp.path(),
        12,
        "x = { uniform = [-3.0, 3.0] }\ny = { uniform = [-3.0, 3.0] }",
    );
    let dir = tmp.path().join("numeric");
    let out = run_ok(&mut tune_run(&spec, &dir));
    let log = stderr(&out);
    assert!(
        log.contains("search: gp from trial 0 on (one objective over 2 numeric and 0 categorical parameters (Matérn 3/2), fewer than 250 trials completed)"),
        "{log}"
    );
    let status = run_ok(tune().arg("status").arg(&dir));
    let status = String::from_utf8_lossy(&status.stdout);
    // The last tenth of the 12 trials (trial 11) goes where the GP's mean is best.
    assert!(
        status.contains("search: auto: trials 0-10 by gp (one objective over 2 numeric"),
        "{status}"
    );
    assert!(
        status.contains("trial 11 by gp (one objective over 2 numeric and 0 categorical parameters (Matérn 3/2), fewer than 250 trials completed; the last 1 of 12 trials go where its mean is best)"),
        "{status}"
    );
    assert!(
        log.contains("search: gp from trial 11 on (one objective over 2 numeric and 0 categorical parameters (Matérn 3/2), fewer than 250 trials completed; the last 1 of 12 trials go where its mean is best)"),
        "{log}"
    );
    for t in export_json(&dir) {
        assert_eq!(t["suggested_by"]["algorithm"], "gp", "{t}");
    }

    let spec = auto_spec(
        tmp.path(),
        5,
        "x = { uniform = [-3.0, 3.0] }\nk = { choice = [\"a\", \"b\"] }\ny = { uniform = [-3.0, 3.0] }\nm = { uniform = [0.0, 1.0], when = { k = \"a\" } }",
    );
    let dir = tmp.path().join("conditional");
    let out = run_ok(&mut tune_run(&spec, &dir));
    let log = stderr(&out);
    assert!(
        log.contains("search: tpe from trial 0 on (a conditional space (m))"),
        "{log}"
    );
    for t in export_json(&dir) {
        assert_eq!(t["suggested_by"]["algorithm"], "tpe", "{t}");
        assert_eq!(
            t["suggested_by"]["reason"], "a conditional space (m)",
            "{t}"
        );
    }
}

#[test]
fn an_auto_sweep_killed_mid_way_resumes_to_the_uninterrupted_sweeps_params() {
    let tmp = tempfile::tempdir().unwrap();
    let space = "x = { uniform = [-3.0, 3.0] }\ny = { uniform = [-3.0, 3.0] }";
    let spec = auto_spec(tmp.path(), 14, space);
    let whole = tmp.path().join("whole");
    run_ok(&mut tune_run(&spec, &whole));
    let killed = tmp.path().join("killed");
    // Killed after the 12th round's acknowledgements: past the GP's 10 random trials.
    let out = tune_run(&spec, &killed)
        .env("TUNE_FAILPOINTS", "ack.after=kill@12")
        .output()
        .unwrap();
    assert!(common::killed(&out), "{}", stderr(&out));
    let before = export_json(&killed).len();
    assert!(before < 14, "{before} trials before the resume");
    let out = run_ok(tune().arg("resume").arg(&killed));
    assert!(
        stderr(&out).contains("search: gp from trial"),
        "{}",
        stderr(&out)
    );
    let params = |dir: &std::path::Path| -> Vec<serde_json::Value> {
        export_json(dir)
            .iter()
            .map(|t| t["params"].clone())
            .collect()
    };
    assert_eq!(params(&killed), params(&whole));
}
