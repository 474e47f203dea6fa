//! `[search] algorithm = "gp"` through the real binary: a sweep that finds the quadratic's
//! minimum, and a conditional space refused before anything runs; `[[search.initial]]`
//! points evaluated first, and points outside the space refused; `--warm-start` from an
//! earlier sweep, and the sweeps it refuses.

use crate::common;
use tune_testkit::pg_server;

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

#[test]
fn initial_points_are_the_first_trials_and_the_model_learns_from_them() {
    let tmp = tempfile::tempdir().unwrap();
    // The second point leaves y out: it is drawn.
    let spec = write_spec(
        tmp.path(),
        "samples = 8\nseed = 2\n[search]\nalgorithm = \"gp\"\nn_startup_trials = 3\nn_preliminary_samples = 256\nn_local_search = 3\n\n[[search.initial]]\nx = 1\ny = -2.0\n\n[[search.initial]]\nx = -0.5\n\n[resources]\ncpu_slots = 1",
        &["--y", "{y}", "--steps", "3"],
        "x = { uniform = [-3.0, 3.0] }\ny = { uniform = [-3.0, 3.0] }",
    );
    let dir = tmp.path().join("gp");
    run_ok(&mut tune_run(&spec, &dir));
    let trials = export_json(&dir);
    assert_eq!(trials.len(), 8, "the points count toward samples");
    assert_eq!(trials[0]["params"]["x"], 1.0);
    assert_eq!(trials[0]["params"]["y"], -2.0);
    assert_eq!(trials[1]["params"]["x"], -0.5);
    let y = trials[1]["params"]["y"].as_f64().unwrap();
    assert!((-3.0..3.0).contains(&y), "{y}");
    // The first point is the minimum (1/3 after 3 steps): it stays the best.
    let best = lowest_value(&trials);
    assert_eq!(best["id"], 0);
    // With 3 startup trials, trials 3.. are the model's, fitted on the points' results too:
    // a second sweep from the same seed and points decides the same.
    let again = tmp.path().join("again");
    run_ok(&mut tune_run(&spec, &again));
    let second = export_json(&again);
    for (a, b) in trials.iter().zip(&second) {
        assert_eq!(a["params"], b["params"]);
    }
}

#[test]
fn initial_points_outside_the_space_are_refused_at_their_line() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        ("x = 0.5\n\n[[search.initial]]\nx = 5.5", "space.toml:11:1: [search] `initial[2].x`: expected a number in [-3, 3), found 5.5"),
        ("xx = 0.5", "space.toml:8:1: [search] `initial[1].xx`: not a parameter of the space (did you mean `x`?)"),
        ("x = \"one\"", "[search] `initial[1].x`: expected a number in [-3, 3), found one"),
    ];
    for (point, expected) in cases {
        let spec = write_spec(
            tmp.path(),
            &format!("samples = 4\n[search]\nalgorithm = \"tpe\"\n\n[[search.initial]]\n{point}\n"),
            &[],
            "x = { uniform = [-3.0, 3.0] }",
        );
        let out = tune_run(&spec, &tmp.path().join("run")).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(stderr(&out).contains(expected), "{}", stderr(&out));
        assert!(!tmp.path().join("run").exists());
    }
    for (top, expected) in [
        ("samples = 1\n[search]\nalgorithm = \"random\"\n[[search.initial]]\nx = 0.5\n[[search.initial]]\nx = 1.5", "[search] `initial`: 2 initial points, but samples = 1"),
        ("samples = 2\n[search]\nalgorithm = \"grid\"\n[[search.initial]]\nx = 0.5", "grid search enumerates its grid and takes no initial points"),
    ] {
        let spec = write_spec(tmp.path(), top, &[], "x = { grid = [0.5, 1.5] }");
        let spec_text = std::fs::read_to_string(&spec).unwrap();
        let spec_text = if top.contains("random") {
            spec_text.replace("{ grid = [0.5, 1.5] }", "{ uniform = [-3.0, 3.0] }")
        } else {
            spec_text
        };
        std::fs::write(&spec, spec_text).unwrap();
        let out = tune_run(&spec, &tmp.path().join("run")).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(stderr(&out).contains(expected), "{}", stderr(&out));
    }
}

/// The spec of a GP sweep of the fixture's quadratic (minimum at x = 1, y = -2), in a
/// folder of its own under `tmp`.
fn quadratic_gp(tmp: &std::path::Path, top: &str, space: &str) -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = tmp.join(format!("spec-{n}"));
    std::fs::create_dir_all(&dir).unwrap();
    write_spec(
        &dir,
        &format!("{top}\n[search]\nalgorithm = \"gp\"\nn_startup_trials = 4\nn_preliminary_samples = 256\nn_local_search = 3\n[resources]\ncpu_slots = 1"),
        &["--y", "{y}", "--steps", "1"],
        space,
    )
}

#[test]
fn a_warm_started_sweep_learns_from_the_earlier_one_from_its_first_trial() {
    let tmp = tempfile::tempdir().unwrap();
    let xy = "x = { uniform = [-3.0, 3.0] }\ny = { uniform = [-3.0, 3.0] }";
    let first = tmp.path().join("first");
    run_ok(&mut tune_run(
        &quadratic_gp(tmp.path(), "samples = 12\nseed = 1", xy),
        &first,
    ));
    let second_spec = quadratic_gp(tmp.path(), "samples = 2\nseed = 9", xy);
    let cold = tmp.path().join("cold");
    run_ok(&mut tune_run(&second_spec, &cold));
    let warm_dir = tmp.path().join("warm");
    let out = run_ok(
        tune_run(&second_spec, &warm_dir)
            .arg("--warm-start")
            .arg(&first),
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("warm start from"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let (cold, warm) = (export_json(&cold), export_json(&warm_dir));
    // Cold, trial 0 is one of the 4 random startup trials; warm, the 12 earlier trials are
    // past the startup and the model places it by the minimum.
    let at = |t: &serde_json::Value| {
        (
            t["params"]["x"].as_f64().unwrap(),
            t["params"]["y"].as_f64().unwrap(),
        )
    };
    let (x, y) = at(&warm[0]);
    assert!(
        (x - 1.0).abs() < 0.5 && (y + 2.0).abs() < 0.5,
        "warm trial 0 at ({x}, {y})"
    );
    assert_ne!(at(&cold[0]), at(&warm[0]));
    // The earlier trials are kept with the sweep: a resume asks the same model.
    run_ok(
        tune()
            .arg("resume")
            .arg(&warm_dir)
            .args(["--samples", "3", "--no-tui"]),
    );
    let (x, y) = at(&export_json(&warm_dir)[2]);
    assert!(
        (x - 1.0).abs() < 0.5 && (y + 2.0).abs() < 0.5,
        "resumed trial 2 at ({x}, {y})"
    );
}

#[test]
fn a_warm_start_names_an_earlier_sweep_in_the_same_database() {
    let url = pg_server::fresh_database();
    let tmp = tempfile::tempdir().unwrap();
    let xy = "x = { uniform = [-3.0, 3.0] }\ny = { uniform = [-3.0, 3.0] }";
    let store = |cmd: &mut std::process::Command| {
        cmd.args(["--store", &url]);
    };
    let mut first = tune_run(
        &quadratic_gp(tmp.path(), "samples = 12\nseed = 1", xy),
        &tmp.path().join("first"),
    );
    store(&mut first);
    run_ok(&mut first);
    // The same space under another name: the sweep `t` is the earlier one.
    let spec = quadratic_gp(tmp.path(), "samples = 1\nseed = 9", xy);
    let text = std::fs::read_to_string(&spec).unwrap();
    std::fs::write(&spec, text.replace("name = \"t\"", "name = \"t2\"")).unwrap();
    let mut warm = tune_run(&spec, &tmp.path().join("warm"));
    store(&mut warm);
    let out = run_ok(warm.args(["--warm-start", "t"]));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("warm start from t: 12 completed trials"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = run_ok(tune().args(["export", "t2", "--store", &url]));
    let trials: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let (x, y) = (
        trials[0]["params"]["x"].as_f64().unwrap(),
        trials[0]["params"]["y"].as_f64().unwrap(),
    );
    assert!(
        (x - 1.0).abs() < 0.5 && (y + 2.0).abs() < 0.5,
        "warm trial 0 at ({x}, {y})"
    );
    // A name the database does not hold is refused before anything runs.
    let mut missing = tune_run(&spec, &tmp.path().join("missing"));
    store(&mut missing);
    let out = missing.args(["--warm-start", "nope"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("nope"), "{}", stderr(&out));
}

#[test]
fn a_warm_start_from_another_metric_space_or_algorithm_is_refused_naming_what_differs() {
    let tmp = tempfile::tempdir().unwrap();
    let xy = "x = { uniform = [-3.0, 3.0] }\ny = { uniform = [-3.0, 3.0] }";
    let first = tmp.path().join("first");
    run_ok(&mut tune_run(
        &quadratic_gp(tmp.path(), "samples = 5", xy),
        &first,
    ));
    let xz = "x = { uniform = [-3.0, 3.0] }\ny = { choice = [1, 2] }";
    let cases = [
        (
            quadratic_gp(tmp.path(), "samples = 2\nmode = \"max\"", xy),
            "it optimised `loss` (min), this sweep `loss` (max)",
        ),
        (
            quadratic_gp(tmp.path(), "samples = 2", xz),
            "`y` is a choice here and a uniform there",
        ),
        (
            quadratic_gp(
                tmp.path(),
                "samples = 2",
                &format!("{xy}\nw = {{ uniform = [0.0, 1.0] }}"),
            ),
            "the spaces differ: only in this sweep's: `w`",
        ),
    ];
    for (spec, expected) in cases {
        let out = tune_run(&spec, &tmp.path().join("run"))
            .arg("--warm-start")
            .arg(&first)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(stderr(&out).contains(expected), "{}", stderr(&out));
        assert!(!tmp.path().join("run").exists());
    }
    let random = quadratic_gp(tmp.path(), "samples = 2", xy);
    let text = std::fs::read_to_string(&random).unwrap().replace(
        "algorithm = \"gp\"\nn_startup_trials = 4\nn_preliminary_samples = 256\nn_local_search = 3",
        "algorithm = \"random\"",
    );
    std::fs::write(&random, text).unwrap();
    let out = tune_run(&random, &tmp.path().join("run"))
        .arg("--warm-start")
        .arg(&first)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("random search does not learn from earlier trials"),
        "{}",
        stderr(&out)
    );
}
