//! `[search] algorithm = "gp"` through the real binary: a sweep that finds the quadratic's
//! minimum, and a conditional space refused before anything runs.

mod common;

use common::*;

#[test]
fn a_gp_sweep_finds_the_minimum_of_the_fixtures_quadratic() {
    let tmp = tempfile::tempdir().unwrap();
    // loss = (x - 1)^2 + (y + 2)^2 + 1/step: at least 1/3 after 3 steps, at (1, -2).
    let spec = write_spec(
        tmp.path(),
        "samples = 20\nseed = 5\n[search]\nalgorithm = \"gp\"\nn_startup_trials = 6\nn_preliminary_samples = 256\nn_local_search = 3\n[resources]\ncpu_slots = 1",
        &["--y", "{y}", "--steps", "3"],
        "x = { uniform = [-3.0, 3.0] }\ny = { uniform = [-3.0, 3.0] }",
    );
    let dir = tmp.path().join("gp");
    run_ok(&mut tune_run(&spec, &dir));
    let trials = export_json(&dir);
    assert_eq!(trials.len(), 20);
    assert!(trials.iter().all(|t| t["status"] == "completed"));
    let best = trials
        .iter()
        .map(|t| t["value"].as_f64().unwrap())
        .fold(f64::INFINITY, f64::min);
    // Random search's 20 trials on this space rarely come within 0.1 of the minimum.
    assert!(best - 1.0 / 3.0 < 0.1, "best {best}");
    // The trials after the random start (ids 6..) are the model's: better on the whole.
    let mean = |ts: &[serde_json::Value]| {
        ts.iter().map(|t| t["value"].as_f64().unwrap()).sum::<f64>() / ts.len() as f64
    };
    assert!(mean(&trials[6..]) < mean(&trials[..6]));
}

#[test]
fn a_conditional_space_is_refused_with_the_parameter_named() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(
        tmp.path(),
        "samples = 4\n[search]\nalgorithm = \"gp\"",
        &[],
        "x = { uniform = [-3.0, 3.0] }\nk = { choice = [\"a\", \"b\"] }\nm = { uniform = [0.0, 1.0], when = { k = \"a\" } }",
    );
    let out = tune_run(&spec, &tmp.path().join("run")).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("`m` has a `when` condition"), "{err}");
    assert!(err.contains("algorithm = \"tpe\""), "{err}");
    assert!(!tmp.path().join("run").exists());
}
