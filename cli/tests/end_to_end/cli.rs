//! The `tune` binary end to end: command objectives, exports, bad input, failures.

use crate::common;

use common::*;
use serde_json::Value as Json;

#[test]
fn command_sweep_exports_values_equal_to_the_objective() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(
        tmp.path(),
        "samples = 12\nseed = 5\n[resources]\ncpu_slots = 3",
        &["--y", "{y}", "--steps", "3"],
        "x = { uniform = [-5.0, 5.0] }\ny = { loguniform = [0.01, 10.0] }",
    );
    let dir = tmp.path().join("runs/quad");
    let out = run_ok(&mut tune_run(&spec, &dir));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("12/12 done (12 completed)"), "{stdout}");

    let trials = export_json(&dir);
    assert_eq!(trials.len(), 12);
    let mut seqs = Vec::new();
    for (i, t) in trials.iter().enumerate() {
        assert_eq!(t["id"], i as u64);
        assert_eq!(t["status"], "completed");
        let (x, y) = (
            t["params"]["x"].as_f64().unwrap(),
            t["params"]["y"].as_f64().unwrap(),
        );
        assert!((-5.0..5.0).contains(&x) && (0.01..=10.0).contains(&y));
        let results = t["results"].as_array().unwrap();
        assert_eq!(results.len(), 3);
        for (k, r) in results.iter().enumerate() {
            let step = k as u64 + 1;
            assert_eq!(r["step"], step);
            // Bit-exact: the value came through argv, Python and stdout unchanged.
            assert_eq!(r["loss"].as_f64().unwrap(), quadratic(x, y, step));
            assert_eq!(r["x_seen"].as_f64().unwrap(), x);
            seqs.push(r["seq"].as_u64().unwrap());
        }
        assert_eq!(t["value"].as_f64().unwrap(), quadratic(x, y, 3));
        assert!(t["started_at"].as_str().unwrap().ends_with('Z'));
        assert!(t["finished_at"].as_str().unwrap() >= t["started_at"].as_str().unwrap());
        assert!(t["error"].is_null());
    }
    seqs.sort();
    assert_eq!(
        seqs,
        (0..36).collect::<Vec<u64>>(),
        "seq numbers every result once"
    );

    // The best line and `status` agree with the export.
    let best = lowest_value(&trials);
    assert!(
        stdout.contains(&format!("best trial {}:", best["id"])),
        "{stdout}"
    );
    let status = run_ok(tune().arg("status").arg(&dir));
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains("12 completed, 0 stopped, 0 failed, 0 unfinished"),
        "{status}"
    );
    assert!(
        status.contains(&format!("best: trial {} with loss", best["id"])),
        "{status}"
    );
    // Params as people read them (6 significant digits); the export keeps every digit.
    for t in &trials {
        let (x, y) = (
            t["params"]["x"].as_f64().unwrap(),
            t["params"]["y"].as_f64().unwrap(),
        );
        let shown = format!(
            "x={} y={}",
            tune::value_digits(x, 6),
            tune::value_digits(y, 6)
        );
        let row = status
            .lines()
            .find(|l| l.split_whitespace().next() == Some(&t["id"].to_string()))
            .unwrap_or_else(|| panic!("no row for trial {} in\n{status}", t["id"]));
        assert!(row.ends_with(&shown), "{row} (want {shown})");
        assert_ne!(
            x.to_string(),
            tune::value_digits(x, 6),
            "x has more than 6 digits"
        );
    }

    // CSV: a header and one row per trial, params as columns.
    let csv = run_ok(tune().arg("export").arg(&dir).args(["--format", "csv"]));
    let csv = String::from_utf8_lossy(&csv.stdout);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 13);
    assert_eq!(
        lines[0],
        "id,status,value,last_step,attempts,started_at,finished_at,error,params.x,params.y"
    );
    let row: Vec<&str> = lines[1].split(',').collect();
    assert_eq!(
        row[2].parse::<f64>().unwrap(),
        trials[0]["value"].as_f64().unwrap()
    );
    assert_eq!(
        row[8].parse::<f64>().unwrap(),
        trials[0]["params"]["x"].as_f64().unwrap()
    );
}

#[test]
fn same_seed_gives_the_same_params_and_plain_reports_work() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(
        tmp.path(),
        "samples = 4\nseed = 11",
        &["--behaviour", "plain", "--steps", "2"],
        "x = { quniform = [-2.0, 2.0, 0.5] }\nn = { int = [1, 100], log = true }\nopt = { choice = [\"sgd\", \"adam\"] }",
    );
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    run_ok(&mut tune_run(&spec, &a));
    run_ok(&mut tune_run(&spec, &b));
    let (ta, tb) = (export_json(&a), export_json(&b));
    for (x, y) in ta.iter().zip(&tb) {
        assert_eq!(x["params"], y["params"]);
        assert_eq!(x["value"], y["value"]);
        let n = x["params"]["n"].as_i64().unwrap();
        assert!((1..=100).contains(&n));
        let xv = x["params"]["x"].as_f64().unwrap();
        assert_eq!((xv * 2.0).fract(), 0.0, "quantized to 0.5: {xv}");
        // `acc: ..` on its own line joined the following `loss: ..` report.
        let r = &x["results"][1];
        assert_eq!(r["acc"].as_f64().unwrap(), 0.5);
        assert_eq!(r["loss"].as_f64().unwrap(), quadratic(xv, 0.0, 2));
    }
    // A different seed gives different params.
    let c = tmp.path().join("c");
    run_ok(tune_run(&spec, &c).args(["--seed", "12"]));
    assert_ne!(export_json(&c)[0]["params"], ta[0]["params"]);
}

#[test]
fn grid_search_repeats_every_point_samples_times() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(
        tmp.path(),
        "samples = 2\n[search]\nalgorithm = \"grid\"\n[resources]\ncpu_slots = 2",
        &["--y", "{y}", "--steps", "1"],
        "x = { grid = [-1.0, 0.0, 1.0] }\ny = { uniform = [0.0, 1.0] }",
    );
    let dir = tmp.path().join("g");
    run_ok(&mut tune_run(&spec, &dir));
    let trials = export_json(&dir);
    assert_eq!(trials.len(), 6);
    let mut xs: Vec<f64> = trials
        .iter()
        .map(|t| t["params"]["x"].as_f64().unwrap())
        .collect();
    xs.sort_by(f64::total_cmp);
    assert_eq!(xs, vec![-1.0, -1.0, 0.0, 0.0, 1.0, 1.0]);
}

/// Runs `tune run` on a spec and expects exit 2 with every fragment in stderr.
fn expect_input_error(top: &str, extra: &[&str], space: &str, fragments: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(tmp.path(), top, extra, space);
    let dir = tmp.path().join("runs/x");
    let out = tune_run(&spec, &dir).output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for f in fragments {
        assert!(err.contains(f), "missing {f:?} in:\n{err}");
    }
    assert!(!err.contains("panicked"), "{err}");
    assert!(!dir.exists(), "bad input must not create the experiment");
}

const X: &str = "x = { uniform = [-1.0, 1.0] }";

#[test]
fn bad_input_is_explained_with_exit_2() {
    expect_input_error(
        "samples = 2\nsampels = 3",
        &[],
        X,
        &[
            "space.toml:4:1",
            "unknown field `sampels`",
            "did you mean `samples`?",
        ],
    );
    expect_input_error(
        "samples = 2\nmode = \"maximum\"",
        &[],
        X,
        &["unknown variant `maximum`", "expected `min` or `max`"],
    );
    expect_input_error(
        "samples = \"2",
        &[],
        X,
        &["space.toml:3:13", "invalid basic string"],
    );
    expect_input_error(
        "samples = 2",
        &[],
        "x = { uniform = [1.0, -1.0] }",
        &[
            "space.toml:",
            "expected low < high, found low = 1 and high = -1",
        ],
    );
    expect_input_error(
        "samples = 2",
        &[],
        "x = { loguniform = [0.0, 1.0] }",
        &["log-scaled bounds must be positive, found low = 0"],
    );
    expect_input_error(
        "samples = 2",
        &[],
        "x = { int = [1, 4], log = true }\nz = { int = [-3, 4], log = true }",
        &["found low = -3"],
    );
    expect_input_error(
        "samples = 2",
        &[],
        "x = { choice = [] }",
        &["choice: expected at least one value, found an empty list"],
    );
    expect_input_error(
        "samples = 2",
        &[],
        "x = { choice = [1.0] }\nm = { uniform = [0.0, 1.0], when = { optimiser = \"sgd\" } }",
        &["parameter `m`: `when` names `optimiser`, which is not a parameter"],
    );
    expect_input_error(
        "samples = 2",
        &[],
        "o = { choice = [\"sgd\", \"adam\"] }\nx = { uniform = [0.0, 1.0], when = { o = \"rmsprop\" } }",
        &["`when` expects `o` to be \"rmsprop\"", "can only be one of [\"sgd\", \"adam\"]"],
    );
    expect_input_error(
        "samples = 2",
        &["--y", "{why}"],
        X,
        &["placeholder `{why}`", "names no parameter"],
    );
    expect_input_error(
        "samples = 2\n[search]\nalgorithm = \"grid\"",
        &[],
        X,
        &["grid search needs at least one parameter with a `grid` domain"],
    );
}

#[test]
fn missing_program_and_folders_that_are_not_experiments_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(tmp.path(), "samples = 2", &[], X);
    let text = std::fs::read_to_string(&spec)
        .unwrap()
        .replace("\"python3\"", "\"no-such-program-xyz\"");
    std::fs::write(&spec, text).unwrap();
    let out = tune_run(&spec, &tmp.path().join("r")).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("`no-such-program-xyz` was not found on PATH"),
        "{}",
        stderr(&out)
    );

    for verb in ["resume", "status", "export"] {
        let out = tune().arg(verb).arg(tmp.path()).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{verb}");
        assert!(
            stderr(&out).contains("not a tune experiment (it has no tune.db database)"),
            "{}",
            stderr(&out)
        );
    }
    let out = tune().args(["status", "/no/such/folder"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no such folder"));
    let out = tune()
        .args(["run", "/no/such/space.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("/no/such/space.toml: cannot read the file"));
}

#[test]
fn run_into_an_existing_experiment_refuses_with_a_hint() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(tmp.path(), "samples = 1", &["--steps", "1"], X);
    let dir = tmp.path().join("e");
    run_ok(&mut tune_run(&spec, &dir));
    let before = export_json(&dir);
    let out = tune_run(&spec, &dir).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("already holds an experiment; continue it with `tune resume"),
        "{}",
        stderr(&out)
    );
    assert_eq!(export_json(&dir), before, "the refused run changed nothing");
}

#[test]
#[cfg(target_os = "linux")]
fn a_run_clears_what_a_killed_creation_of_its_experiment_left() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(tmp.path(), "samples = 1", &["--steps", "1"], X);
    // A `run` killed mid-creation leaves its staging folder, named after its (now dead) pid.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let stale = tmp.path().join(format!(".e.creating-{}", gone.id()));
    std::fs::create_dir_all(stale.join("db")).unwrap();
    // One whose process is alive (this test's) may still be creating: it stays.
    let live = tmp
        .path()
        .join(format!(".e.creating-{}", std::process::id()));
    std::fs::create_dir(&live).unwrap();
    let unrelated = tmp.path().join(".other.creating-1");
    std::fs::create_dir(&unrelated).unwrap();
    run_ok(&mut tune_run(&spec, &tmp.path().join("e")));
    assert!(!stale.exists(), "the dead run's staging folder is removed");
    assert!(live.exists() && unrelated.exists());
    assert_eq!(export_json(&tmp.path().join("e")).len(), 1);
}

fn statuses(trials: &[Json]) -> Vec<(f64, String, Json)> {
    trials
        .iter()
        .map(|t| {
            (
                t["params"]["x"].as_f64().unwrap(),
                t["status"].as_str().unwrap().to_string(),
                t["error"].clone(),
            )
        })
        .collect()
}

#[test]
fn bad_metrics_and_crashes_fail_only_their_trials() {
    for (behaviour, reason) in [
        ("nan", "`loss` was NaN at step 1"),
        ("missing", "the report at step 1 has no `loss` (it had: accuracy)"),
        ("crash", "exited with code 3; stderr ends with:\nabout to fail\nTraceback: ValueError: x must be negative"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let spec = write_spec(tmp.path(), "samples = 10\nseed = 1", &["--behaviour", behaviour], "x = { uniform = [-1.0, 1.0] }");
        let dir = tmp.path().join("f");
        // Some trials completed, so the sweep succeeds overall.
        let out = run_ok(&mut tune_run(&spec, &dir));
        assert!(String::from_utf8_lossy(&out.stdout).contains("trial(s) failed"));
        let trials = export_json(&dir);
        assert_eq!(trials.len(), 10, "{behaviour}: the sweep went on");
        for (x, status, error) in statuses(&trials) {
            if x > 0.0 {
                assert_eq!(status, "failed", "{behaviour} x={x}");
                assert_eq!(error.as_str().unwrap(), reason, "{behaviour}");
            } else {
                assert_eq!(status, "completed", "{behaviour} x={x}");
                assert!(error.is_null());
            }
        }
    }
}

#[test]
fn a_sweep_where_every_trial_fails_exits_1() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(tmp.path(), "samples = 3", &["--behaviour", "silent"], X);
    let dir = tmp.path().join("s");
    let out = tune_run(&spec, &dir).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("no trial completed"));
    for t in export_json(&dir) {
        assert_eq!(t["status"], "failed");
        assert_eq!(t["error"], "the objective ended without reporting `loss`");
    }
}

#[test]
fn failed_attempts_are_retried_up_to_max_failures() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(
        tmp.path(),
        "samples = 3\nmax_failures = 1",
        &["--behaviour", "flaky", "--steps", "1"],
        X,
    );
    let dir = tmp.path().join("m");
    run_ok(&mut tune_run(&spec, &dir));
    for t in export_json(&dir) {
        assert_eq!(t["status"], "completed");
        assert_eq!(t["attempts"], 2);
        assert_eq!(t["results"][0]["attempt"], 2);
    }
    // Without retries the same objective fails every trial.
    let spec = write_spec(
        tmp.path(),
        "samples = 2",
        &["--behaviour", "flaky", "--steps", "1"],
        X,
    );
    let dir = tmp.path().join("n");
    let out = tune_run(&spec, &dir).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    for t in export_json(&dir) {
        assert_eq!(t["attempts"], 1);
        assert!(t["error"]
            .as_str()
            .unwrap()
            .contains("first attempt always fails"));
    }
}

#[test]
fn trials_past_their_timeout_are_killed_and_failed() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(
        tmp.path(),
        "samples = 2\n[resources]\ncpu_slots = 2",
        &["--behaviour", "hang"],
        X,
    );
    let text = std::fs::read_to_string(&spec)
        .unwrap()
        .replace("[space]", "timeout_s = 1.0\n\n[space]");
    std::fs::write(&spec, text).unwrap();
    let dir = tmp.path().join("t");
    let out = tune_run(&spec, &dir).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    for t in export_json(&dir) {
        assert_eq!(t["status"], "failed");
        assert_eq!(t["error"], "timed out after 1 s");
    }
}

#[test]
fn int_ranges_as_wide_as_i64_allows_run_under_random_and_tpe() {
    // `high - low` overflowed i64 here, and `tune run` panicked (issue 21, finding 3).
    let tmp = tempfile::tempdir().unwrap();
    for algorithm in ["random", "tpe"] {
        let spec = write_spec(
            tmp.path(),
            &format!("samples = 14\n[search]\nalgorithm = \"{algorithm}\""),
            &["--y", "{y}"],
            "x = { uniform = [-5.0, 5.0] }\ny = { int = [-5000000000000000000, 5000000000000000000] }",
        );
        let dir = tmp.path().join(algorithm);
        run_ok(&mut tune_run(&spec, &dir));
        let trials = export_json(&dir);
        assert_eq!(trials.len(), 14);
        for t in trials {
            assert_eq!(t["status"], "completed", "{t}");
            let y = t["params"]["y"].as_i64().unwrap();
            assert!((-5_000_000_000_000_000_000..=5_000_000_000_000_000_000).contains(&y));
        }
    }
    let spec = write_spec(
        tmp.path(),
        "samples = 1",
        &[],
        "x = { uniform = [-1.7e308, 1.7e308] }",
    );
    let out = tune_run(&spec, &tmp.path().join("never")).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("is too wide"), "{}", stderr(&out));
}

#[test]
fn a_report_that_cannot_be_read_fails_its_trial_instead_of_hanging() {
    // No timeout_s: before, the report was taken as a log line and the trial waited forever
    // for a decision.
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(tmp.path(), "samples = 1", &["--behaviour", "overflow"], X);
    let dir = tmp.path().join("o");
    let out = tune_run(&spec, &dir).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let trials = export_json(&dir);
    assert_eq!(trials[0]["status"], "failed");
    let error = trials[0]["error"].as_str().unwrap();
    assert!(
        error.starts_with("a report could not be read (number out of range")
            && error.ends_with(r#": {"step": 1, "loss": 1e400}"#),
        "{error}"
    );
}

#[test]
fn tpe_through_the_cli_with_every_domain_and_concurrent_slots() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(
        tmp.path(),
        "samples = 36\nseed = 3\n[search]\nalgorithm = \"tpe\"\nn_startup_trials = 6\n[resources]\ncpu_slots = 3",
        &["--y", "{y}", "--steps", "1"],
        r#"x = { uniform = [-5.0, 5.0] }
y = { normal = [-2.0, 1.0] }
lr = { loguniform = [1e-5, 1e-1] }
units = { int = [16, 1024], log = true }
layers = { int = [1, 8] }
even = { int = [2, 10], step = 2 }
drop = { quniform = [0.0, 0.5, 0.1] }
batch = { qloguniform = [8, 512, 8] }
opt = { choice = ["sgd", "adam"] }
momentum = { uniform = [0.5, 0.99], when = { opt = "sgd" } }
flag = { choice = [true, false] }"#,
    );
    let dir = tmp.path().join("tpe");
    run_ok(&mut tune_run(&spec, &dir));
    let (parsed, _) = tune::ExperimentSpec::read(&spec).unwrap();
    let trials = export_json(&dir);
    assert_eq!(trials.len(), 36);
    for t in &trials {
        assert_eq!(t["status"], "completed");
        let params: tune::Params = serde_json::from_value(t["params"].clone()).unwrap();
        for p in parsed.space.params() {
            match params.get(&p.name) {
                Some(v) => assert!(p.domain.contains(v), "{} = {v:?}", p.name),
                None => assert_eq!(p.name, "momentum"),
            }
        }
        assert_eq!(
            params.contains("momentum"),
            params.str("opt").unwrap() == "sgd"
        );
    }
    // The model phase finds better points than the random start (x near 1, y near -2).
    let value = |t: &Json| t["value"].as_f64().unwrap();
    let start = trials[..6].iter().map(value).fold(f64::INFINITY, f64::min);
    let later = trials[6..].iter().map(value).fold(f64::INFINITY, f64::min);
    assert!(later < start, "{later} vs {start}");
}

#[test]
fn status_and_export_of_a_running_sweep_come_from_its_coordinator() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(
        tmp.path(),
        "samples = 4\nseed = 2\n[resources]\ncpu_slots = 1",
        &["--steps", "200", "--sleep", "0.05"],
        "x = { uniform = [-2.0, 2.0] }",
    );
    let dir = tmp.path().join("live");
    let mut sweep = tune_run(&spec, &dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The sweep holds the store: `export` and `status` ask the sweep instead.
    let mut trials: Vec<Json> = Vec::new();
    for _ in 0..300 {
        let export = tune()
            .arg("export")
            .arg(&dir)
            .args(["--format", "json"])
            .output()
            .unwrap();
        if export.status.success() {
            trials = serde_json::from_slice(&export.stdout).unwrap();
            if trials
                .first()
                .is_some_and(|t| t["results"].as_array().unwrap().len() >= 2)
            {
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let status = tune().arg("status").arg(&dir).output().unwrap();
    let still_running = sweep.try_wait().unwrap().is_none();
    sweep.kill().unwrap();
    sweep.wait().unwrap();
    assert!(
        still_running,
        "the sweep ended before the checks: they prove nothing"
    );
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success(), "{}", stderr(&status));
    assert!(
        text.contains("running now") && text.contains(" of 4 created"),
        "{text}"
    );
    assert_eq!(trials[0]["status"], "running", "{trials:?}");
    let results = trials[0]["results"].as_array().unwrap();
    assert!(results.len() >= 2, "{trials:?}");
    let x = trials[0]["params"]["x"].as_f64().unwrap();
    for r in results {
        let step = r["step"].as_u64().unwrap();
        assert_eq!(r["loss"].as_f64(), Some(quadratic(x, 0.0, step)));
    }
}

#[test]
fn of_two_runs_creating_one_experiment_at_once_the_second_refuses_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(tmp.path(), "samples = 2", &[], X);
    let dir = tmp.path().join("runs/both");
    let go = tmp.path().join("go");
    // The first is held just before it moves its new experiment into place...
    let first = tune_run(&spec, &dir)
        .env(
            "TUNE_FAILPOINTS",
            format!("create.before-rename=wait-{}", go.display()),
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let parent = dir.parent().unwrap();
    let staged = || {
        std::fs::read_dir(parent).is_ok_and(|mut entries| {
            entries.any(|e| {
                e.is_ok_and(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with(".both.creating-")
                })
            })
        })
    };
    let waited = std::time::Instant::now();
    while !staged() {
        assert!(
            waited.elapsed().as_secs() < 120,
            "the first run never staged its experiment"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // ...while the second makes it and runs the sweep.
    run_ok(&mut tune_run(&spec, &dir));
    std::fs::write(&go, "").unwrap();
    let out = first.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with(&format!(
            "error: {} already holds an experiment",
            dir.display()
        )),
        "{}",
        stderr(&out)
    );
    assert!(!staged(), "the first run left its staging folder");
    assert_eq!(export_json(&dir).len(), 2);
}

#[test]
fn check_finds_a_step_lost_between_attempts_and_passes_a_clean_sweep() {
    let tmp = tempfile::tempdir().unwrap();
    let clean = write_spec(
        tmp.path(),
        "samples = 3\nseed = 1",
        &["--steps", "4"],
        "x = { uniform = [-1.0, 1.0] }",
    );
    let dir = tmp.path().join("clean");
    run_ok(&mut tune_run(&clean, &dir));
    let out = run_ok(tune().arg("check").arg(&dir));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(": 3 trials, 12 results: every step stored once and in order, none lost between attempts"),
        "{text}"
    );

    let case = tmp.path().join("skip");
    std::fs::create_dir_all(&case).unwrap();
    let lossy = write_spec(
        &case,
        "samples = 1\nseed = 1\nmax_failures = 1",
        &["--behaviour", "skipstep"],
        "x = { uniform = [-1.0, 1.0] }",
    );
    let dir = case.join("x");
    run_ok(&mut tune_run(&lossy, &dir));
    let out = tune().arg("check").arg(&dir).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "trial 0: no step between 1 (attempt 1) and 3 (attempt 2), where its steps come every 1: \
         a step was lost between attempts"
    );
    assert!(lines[1].ends_with(": 1 trials, 3 results: 1 problems in 1 trials: results were lost (docs/durability.md says what tune keeps)"), "{text}");
}
