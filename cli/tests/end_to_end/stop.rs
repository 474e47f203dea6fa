//! `[stop]`: sweeps that end before their budget (failures in a row, a target, no improvement,
//! a time budget), and resume after them. One slot wherever the count of trials is checked, so
//! that no other trial is running when the condition is met.

use crate::common;

use std::process::Output;

use common::*;
use serde_json::Value as Json;

const X: &str = "x = { uniform = [0.0, 3.0] }";

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn statuses(trials: &[Json]) -> Vec<&str> {
    trials
        .iter()
        .map(|t| t["status"].as_str().unwrap())
        .collect()
}

#[test]
fn trials_failing_in_a_row_stop_the_sweep_with_the_last_error() {
    let tmp = tempfile::tempdir().unwrap();
    // Every trial fails (x > 0 crashes), and the budget would never end.
    let spec = write_spec(
        tmp.path(),
        "samples = 1000000000000\n[resources]\ncpu_slots = 1",
        &["--behaviour", "crash"],
        X,
    );
    let dir = tmp.path().join("failing");
    let out = tune_run(&spec, &dir).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    let message = err.lines().find(|l| l.starts_with("error: ")).unwrap();
    assert!(
        message.starts_with(
            "error: 10 trials failed in a row ([stop] max_failed_trials); the last, trial 9: exited with code 3"
        ),
        "{err}"
    );
    assert!(err.contains("ValueError: x must be negative"), "{err}");
    assert!(
        err.contains(&format!("`tune resume {}` goes on", dir.display())),
        "{err}"
    );
    assert_eq!(statuses(&export_json(&dir)), ["failed"; 10]);
    // A resume counts anew: ten more.
    let out = tune().arg("resume").arg(&dir).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(statuses(&export_json(&dir)), ["failed"; 20]);
}

#[test]
fn fail_fast_stops_at_the_first_failure_and_zero_never_stops() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(
        tmp.path(),
        "samples = 1000\n[stop]\nmax_failed_trials = 1\n[resources]\ncpu_slots = 1",
        &["--behaviour", "crash"],
        X,
    );
    let dir = tmp.path().join("fast");
    let out = tune_run(&spec, &dir).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("1 trials failed in a row"),
        "{}",
        stderr(&out)
    );
    assert_eq!(statuses(&export_json(&dir)), ["failed"]);

    let spec = write_spec(
        tmp.path(),
        "samples = 14\n[stop]\nmax_failed_trials = 0\n[resources]\ncpu_slots = 1",
        &["--behaviour", "crash"],
        X,
    );
    let dir = tmp.path().join("never");
    let out = tune_run(&spec, &dir).output().unwrap();
    // Exit 1 as any sweep without a completed trial, after the whole budget.
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("14 trial(s) failed"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn a_reached_target_stops_the_sweep_and_no_stop_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    // loss = (x - 1)^2 + 1 at one step (y = -2): the target 1.05 needs |x - 1| < 0.224.
    let spec = write_spec(
        tmp.path(),
        "samples = 40\nseed = 4\n[stop]\ntarget = 1.05\n[resources]\ncpu_slots = 1",
        &["--y", "-2", "--steps", "1"],
        X,
    );
    let dir = tmp.path().join("target");
    let out = run_ok(&mut tune_run(&spec, &dir));
    let trials = export_json(&dir);
    let first_hit = trials
        .iter()
        .position(|t| t["value"].as_f64().unwrap() <= 1.05)
        .unwrap();
    assert_eq!(
        trials.len(),
        first_hit + 1,
        "no trial after the one that hit"
    );
    let value = trials[first_hit]["value"].as_f64().unwrap();
    assert!(
        stdout(&out).contains(&format!(
            "stopped early: trial {first_hit} reached the target with {value} ([stop] target); `tune resume {} --no-stop` goes on",
            dir.display()
        )),
        "{}",
        stdout(&out)
    );
    // Resumed, the target is met at once: nothing runs.
    let out = run_ok(tune().arg("resume").arg(&dir));
    assert!(
        stdout(&out).contains("stopped early: trial"),
        "{}",
        stdout(&out)
    );
    assert_eq!(export_json(&dir).len(), first_hit + 1);
    // Past the target: the rest of the budget.
    run_ok(tune().arg("resume").arg(&dir).arg("--no-stop"));
    assert_eq!(export_json(&dir).len(), 40);
}

#[test]
fn trials_without_improvement_stop_the_sweep_where_hyperopt_would() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(
        tmp.path(),
        "samples = 100\nseed = 2\n[stop]\nno_improvement_trials = 4\n[resources]\ncpu_slots = 1",
        &["--y", "-2", "--steps", "1"],
        X,
    );
    let dir = tmp.path().join("plateau");
    let out = run_ok(&mut tune_run(&spec, &dir));
    let values: Vec<f64> = export_json(&dir)
        .iter()
        .map(|t| t["value"].as_f64().unwrap())
        .collect();
    // Where the sweep should have stopped: the first run of 4 trials not beating the best.
    let (mut best, mut since, mut expected) = (f64::INFINITY, 0, None);
    for (i, &v) in values.iter().enumerate() {
        if v < best {
            (best, since) = (v, 0);
        } else {
            since += 1;
        }
        if since == 4 {
            expected = Some(i + 1);
            break;
        }
    }
    assert_eq!(Some(values.len()), expected, "{values:?}");
    assert!(
        stdout(&out).contains("4 trials in a row did not beat trial"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn a_spent_time_budget_leaves_the_sweep_resumable() {
    let tmp = tempfile::tempdir().unwrap();
    // Each trial sleeps 1.5 s in all: none can end inside the 1 s budget, however fast the
    // machine, so the budget always ends the run first.
    let spec = write_spec(
        tmp.path(),
        "samples = 4\n[stop]\ntime_budget_s = 1.0\n[resources]\ncpu_slots = 2",
        &["--steps", "3", "--sleep", "0.5"],
        X,
    );
    let dir = tmp.path().join("budget");
    for mut run in [tune_run(&spec, &dir), tune_resume(&dir)] {
        let out = run_ok(&mut run);
        assert!(
            stdout(&out).contains(&format!(
                "stopped early: the time budget of 1 s is spent ([stop] time_budget_s); `tune resume {}` goes on",
                dir.display()
            )),
            "{}",
            stdout(&out)
        );
        // Trials cut short are left for resume, as after Ctrl-C (and a resume gets a budget of
        // its own).
        assert_eq!(statuses(&export_json(&dir)), ["running", "running"]);
    }
    run_ok(tune().arg("resume").arg(&dir).arg("--no-stop"));
    let done = export_json(&dir);
    assert_eq!(statuses(&done), ["completed"; 4]);
    for t in &done {
        assert_eq!(steps(t), [1, 2, 3]);
    }
}

#[test]
fn bad_stop_settings_are_explained_with_exit_2() {
    for (stop, expected) in [
        (
            "time_budget_s = -1.0",
            "[stop] `time_budget_s`: expected a number of seconds above 0 and at most 1e9 (31 years), found -1",
        ),
        (
            "no_improvement_trials = 0",
            "[stop] `no_improvement_trials`: expected at least 1 trial, found 0",
        ),
        ("targt = 1.0", "did you mean `target`?"),
        ("max_failed_trials = -1", "invalid value: integer `-1`"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let spec = write_spec(tmp.path(), &format!("samples = 2\n[stop]\n{stop}"), &[], X);
        let out = tune_run(&spec, &tmp.path().join("x")).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{stop}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("space.toml:"),
            "{stop}: {}",
            stderr(&out)
        );
        assert!(stderr(&out).contains(expected), "{stop}: {}", stderr(&out));
    }
}

#[test]
fn the_rust_api_stops_on_a_target_and_errs_on_failures() {
    use tune::{Mode, Space, StopConditions, StopReason, TuneError, Tuner};
    let tmp = tempfile::tempdir().unwrap();
    let space = || Space::builder().uniform("x", -5.0, 5.0).build().unwrap();
    let result = Tuner::new(space())
        .metric("loss", Mode::Min)
        .samples(1000)
        .seed(3)
        .cpu_slots(1)
        .dir(tmp.path().join("target"))
        .stop_when(StopConditions {
            target: Some(0.25),
            ..StopConditions::default()
        })
        .fit(|ctx| {
            let x = ctx.params().f64("x")?;
            ctx.report(1, [("loss", x * x)])?;
            Ok(())
        })
        .unwrap();
    let trials = result.trials().unwrap();
    let last = trials.last().unwrap();
    assert!(last.value("loss").unwrap() <= 0.25);
    assert!(trials[..trials.len() - 1]
        .iter()
        .all(|t| t.value("loss").unwrap() > 0.25));
    assert!(
        matches!(result.stopped(), Some(StopReason::TargetReached { trial, .. }) if *trial == last.id)
    );

    let failing = Tuner::new(space())
        .samples(1000)
        .cpu_slots(1)
        .dir(tmp.path().join("failing"))
        .stop_when(StopConditions {
            max_failed_trials: 3,
            ..StopConditions::default()
        })
        .fit(|_ctx| Err("no GPU here".into()));
    match failing {
        Err(TuneError::Failing { reason, .. }) => {
            assert!(
                reason
                    .to_string()
                    .ends_with("the last, trial 2: no GPU here"),
                "{reason}"
            )
        }
        other => panic!("{other:?}"),
    }
}
