//! Durability: sweeps killed with SIGKILL (or stopped with SIGTERM) and resumed.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use common::*;
use rand::{Rng, SeedableRng};
use serde_json::Value as Json;

const SAMPLES: u64 = 40;

fn slow_sweep(dir: &Path) -> std::path::PathBuf {
    let spec = write_spec(
        dir,
        &format!("samples = {SAMPLES}\nseed = 9\n[resources]\ncpu_slots = 3"),
        &["--y", "{y}", "--steps", "3", "--sleep", "0.02"],
        "x = { uniform = [-5.0, 5.0] }\ny = { normal = [0.0, 1.0] }",
    );
    arm_kill_switch(&spec, dir);
    spec
}

fn spawn(cmd: &mut std::process::Command) -> Child {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn sigkill_after_random_acknowledgements_then_resume_loses_nothing() {
    // The kills land at exact points, whatever the machine's load: each round, the trial whose
    // acknowledged result is the round's n-th kills tune (fixture's KILL_AT), n drawn from a
    // seeded generator. Which trial that is, and what else is running then, varies.
    let seed: u64 = rand::rng().random();
    println!("kill schedule seed: {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let tmp = tempfile::tempdir().unwrap();
    let spec = slow_sweep(tmp.path());
    let dir = tmp.path().join("runs/k");

    let mut completed: BTreeMap<u64, Json> = BTreeMap::new();
    let mut params: BTreeMap<u64, Json> = BTreeMap::new();
    const KILLS: usize = 6;
    for round in 0..KILLS {
        let due = acked_so_far(tmp.path()) + rng.random_range(1..=12);
        set_kill_switch(tmp.path(), &due.to_string());
        let child = spawn(&mut run_or_resume(&spec, &dir));
        let out = child.wait_with_output().unwrap();
        // 40 trials of 3 steps are 120 acknowledgements; six rounds use at most 72.
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&out.status),
            Some(libc::SIGKILL),
            "round {round}: tune was not killed at acknowledgement {due}: {}",
            stderr(&out)
        );
        let now = by_id(export_json(&dir));
        let acked = assert_acknowledged_results_kept(tmp.path(), &now);
        assert!(
            acked >= due,
            "round {round}: {acked} acknowledged, kill due at {due}"
        );
        for (id, t) in &now {
            // Same id, same params, whatever happened.
            let p = params.entry(*id).or_insert_with(|| t["params"].clone());
            assert_eq!(&t["params"], p, "round {round}: trial {id} changed params");
            let status = t["status"].as_str().unwrap();
            assert!(
                status == "completed" || status == "running" || status == "pending",
                "{status}"
            );
        }
        for (id, before) in &completed {
            assert_eq!(
                &now[id], before,
                "round {round}: completed trial {id} changed after a kill"
            );
        }
        for (id, t) in now {
            if t["status"] == "completed" {
                completed.insert(id, t);
            }
        }
    }

    let out = run_ok(tune().arg("resume").arg(&dir));
    assert!(String::from_utf8_lossy(&out.stdout)
        .contains(&format!("{SAMPLES}/{SAMPLES} done ({SAMPLES} completed)")));
    let last = by_id(export_json(&dir));
    assert_eq!(last.len() as u64, SAMPLES);
    assert!(assert_acknowledged_results_kept(tmp.path(), &last) >= 2 * SAMPLES as usize);
    for (id, t) in &last {
        assert_eq!(t["status"], "completed", "trial {id}");
        if let Some(p) = params.get(id) {
            assert_eq!(&t["params"], p);
        }
        // Killed runs started over, redoing stored steps without storing them again.
        let steps = steps(t);
        assert_eq!(steps, [1, 2, 3], "trial {id}");
        // The value is the last step's, recomputed from the params.
        let (x, y) = (
            t["params"]["x"].as_f64().unwrap(),
            t["params"]["y"].as_f64().unwrap(),
        );
        assert_eq!(t["value"].as_f64().unwrap(), quadratic(x, y, 3));
    }
    for (id, before) in &completed {
        assert_eq!(
            &last[id], before,
            "completed trial {id} changed by the final resume"
        );
    }
    let mut seqs: Vec<u64> = last
        .values()
        .flat_map(|t| {
            t["results"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["seq"].as_u64().unwrap())
        })
        .collect();
    let n = seqs.len();
    seqs.sort();
    seqs.dedup();
    assert_eq!(seqs.len(), n, "every result has its own seq");
}

#[test]
fn sigterm_sighup_and_sigint_stop_cleanly_and_resume_finishes() {
    for signal in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT] {
        stops_cleanly_on(signal);
    }
}

fn stops_cleanly_on(signal: libc::c_int) {
    let tmp = tempfile::tempdir().unwrap();
    let spec = slow_sweep(tmp.path());
    let dir = tmp.path().join("runs/t");
    let child = spawn(&mut tune_run(&spec, &dir));
    // Wait until some trial has completed, then ask the sweep to stop.
    let status_has_progress = || {
        std::fs::read_dir(dir.join("trials"))
            .map(|d| d.count() >= 6)
            .unwrap_or(false)
    };
    for _ in 0..1500 {
        if status_has_progress() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(status_has_progress(), "no trial started within 30 s");
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(child.id() as libc::pid_t, signal) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "signal {signal}: {}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("interrupted; continue the sweep with `tune resume"),
        "{}",
        stderr(&out)
    );
    let stopped = by_id(export_json(&dir));
    assert!((stopped.len() as u64) < SAMPLES, "stopped before the end");
    // Nothing failed: interrupted trials wait for the resume.
    assert!(stopped.values().all(|t| t["status"] != "failed"));
    run_ok(tune().arg("resume").arg(&dir));
    let done = by_id(export_json(&dir));
    assert_eq!(done.len() as u64, SAMPLES);
    assert!(done.values().all(|t| t["status"] == "completed"));
    for (id, t) in &stopped {
        if t["status"] == "completed" {
            assert_eq!(&done[id], t);
        }
    }
}

#[test]
fn a_second_ctrl_c_quits_at_once_leaving_the_sweep_resumable() {
    let tmp = tempfile::tempdir().unwrap();
    let marker = tmp.path().join("marker").display().to_string();
    // Trials that ignore SIGTERM: after one Ctrl-C tune would wait out their grace.
    let spec = write_spec(
        tmp.path(),
        "samples = 4\nseed = 2\n[resources]\ncpu_slots = 2",
        &[
            "--behaviour",
            "ignoreterm",
            "--sleep",
            "30",
            "--marker",
            &marker,
        ],
        "x = { uniform = [-1.0, 1.0] }",
    );
    let dir = tmp.path().join("runs/c");
    let mut child = spawn(&mut tune_run(&spec, &dir));
    // Both trials have started and ignore SIGTERM (a trial still starting would die of it).
    let running = || (0..2).all(|id| Path::new(&format!("{marker}.{id}.ready")).exists());
    let waited = std::time::Instant::now();
    while !running() {
        assert!(waited.elapsed().as_secs() < 120, "the trials never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    // Once tune says it is stopping, the second.
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    while !said.contains("tune: stopping;") {
        let mut line = String::new();
        assert!(
            std::io::BufRead::read_line(&mut err, &mut line).unwrap() > 0,
            "{said}"
        );
        said += &line;
    }
    // SAFETY: as above.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{said}");
    // The trials died with tune (they ignore SIGTERM, not SIGKILL).
    let waited = std::time::Instant::now();
    while !processes_with(&marker).is_empty() {
        assert!(
            waited.elapsed().as_secs() < 60,
            "{:?}",
            processes_with(&marker)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // What is stored resumes: the trials run again from the start (no report was made).
    let stored = export_json(&dir);
    assert!(
        stored.iter().all(|t| t["status"] == "running"),
        "{stored:?}"
    );
}

#[test]
fn resume_with_more_samples_extends_a_finished_sweep() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(
        tmp.path(),
        "samples = 4\nseed = 2",
        &["--steps", "1"],
        "x = { uniform = [-1.0, 1.0] }",
    );
    let dir = tmp.path().join("e");
    run_ok(&mut tune_run(&spec, &dir));
    let first = export_json(&dir);
    // Resuming a finished sweep without a new budget runs nothing.
    run_ok(tune().arg("resume").arg(&dir));
    assert_eq!(export_json(&dir), first);
    run_ok(tune().arg("resume").arg(&dir).args(["--samples", "7"]));
    let more = export_json(&dir);
    assert_eq!(more.len(), 7);
    assert_eq!(&more[..4], &first[..]);
    // Trial ids 4.. get the params a 7-sample sweep would have given them.
    let fresh = tmp.path().join("fresh");
    let spec7 = write_spec(
        tmp.path(),
        "samples = 7\nseed = 2",
        &["--steps", "1"],
        "x = { uniform = [-1.0, 1.0] }",
    );
    run_ok(&mut tune_run(&spec7, &fresh));
    let fresh = export_json(&fresh);
    for (a, b) in more.iter().zip(&fresh) {
        assert_eq!(a["params"], b["params"]);
    }
    let out = tune()
        .arg("resume")
        .arg(&dir)
        .args(["--samples", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let status = run_ok(tune().arg("status").arg(&dir));
    assert!(String::from_utf8_lossy(&status.stdout).contains("trials: 7 of 7 created"));
}

/// Each result's (step, attempt).
fn steps_and_attempts(t: &Json) -> Vec<(u64, u64)> {
    t["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["step"].as_u64().unwrap(), r["attempt"].as_u64().unwrap()))
        .collect()
}

#[test]
fn a_kill_between_a_steps_acknowledgement_and_its_checkpoint_stores_the_step_once() {
    let tmp = tempfile::tempdir().unwrap();
    // Trial 0's first run kills tune after step 3 is acknowledged, before checkpointing it:
    // the resumed run restores step 2's checkpoint and reports step 3 again.
    let spec = write_spec(
        tmp.path(),
        "samples = 2\nseed = 4\n[resources]\ncpu_slots = 1",
        &["--steps", "6", "--behaviour", "ckpt", "--kill-tune-at", "3"],
        "x = { uniform = [-2.0, 2.0] }",
    );
    let dir = tmp.path().join("run");
    killed_then_resumed(&spec, &dir);
    let trials = by_id(export_json(&dir));
    let t0 = &trials[&0];
    assert_eq!(t0["status"], "completed");
    assert_eq!(t0["attempts"], 2);
    // The acknowledged step 3 stands; the redone one is not stored again.
    assert_eq!(
        steps_and_attempts(t0),
        [(1, 1), (2, 1), (3, 1), (4, 2), (5, 2), (6, 2)]
    );
    let x = t0["params"]["x"].as_f64().unwrap();
    for r in t0["results"].as_array().unwrap() {
        let step = r["step"].as_u64().unwrap();
        assert_eq!(r["loss"].as_f64(), Some(quadratic(x, 0.0, step)));
    }
    assert_eq!(
        steps_and_attempts(&trials[&1]),
        (1..=6).map(|s| (s, 1)).collect::<Vec<_>>()
    );
}

/// A spec in `tmp` of one two-step trial, `max_failures = 1`, whose first attempt kills tune
/// after step 1 and whose next attempt fails once after its steps; with the file that marks
/// that failure.
fn killing_then_failing_once(tmp: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let once = tmp.join("failed-once");
    let spec = write_spec(
        tmp,
        "samples = 1\nseed = 4\nmax_failures = 1\n[resources]\ncpu_slots = 1",
        &[
            "--steps",
            "2",
            "--kill-tune-at",
            "1",
            "--fail-once",
            once.to_str().unwrap(),
        ],
        "x = { uniform = [-2.0, 2.0] }",
    );
    (spec, once)
}

#[test]
fn a_kill_of_tune_spends_no_retry_of_the_trial_it_interrupted() {
    let tmp = tempfile::tempdir().unwrap();
    // Trial 0's first attempt kills tune after step 1; its next attempt (the resume's) fails
    // once, after its steps; `max_failures = 1` retries that, as a sweep never killed would
    // have retried its first failure. The interrupted attempt was no failure.
    let (spec, once) = killing_then_failing_once(tmp.path());
    let dir = tmp.path().join("run");
    killed_then_resumed(&spec, &dir);
    assert!(once.exists(), "the resumed attempt did not fail");
    let t0 = &export_json(&dir)[0];
    assert_eq!(t0["status"], "completed", "{t0}");
    assert_eq!(t0["attempts"], 3, "{t0}");
}

/// A trial of a record written before format 6 (when `max_failures` counted every attempt),
/// resumed: its attempts count as that build counted them.
#[test]
fn a_trial_stored_before_format_6_counts_its_attempts_as_failures() {
    let tmp = tempfile::tempdir().unwrap();
    let (spec, _) = killing_then_failing_once(tmp.path());
    let dir = tmp.path().join("run");
    let first = tune_run(&spec, &dir).output().unwrap();
    assert!(killed(&first), "the fixture did not kill tune");
    let mut exp = tune::experiment::Experiment::open(&dir).unwrap();
    let mut meta = exp.stored.meta.clone();
    meta.format = 5;
    exp.store.put_meta(&meta).unwrap();
    exp.store.sync().unwrap();
    drop(exp);
    // Its only trial fails: the resume's exit code says so either way; the export is checked.
    tune().arg("resume").arg(&dir).output().unwrap();
    let t0 = &export_json(&dir)[0];
    assert_eq!(t0["status"], "failed", "{t0}");
    assert_eq!(t0["attempts"], 2, "{t0}");
}

#[test]
fn a_stop_decided_before_a_kill_but_not_stored_is_applied_on_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(
        tmp.path(),
        "samples = 12\nseed = 3\n[scheduler]\nkind = \"asha\"\ngrace_period = 1\nreduction_factor = 2\nmax_t = 8\n[resources]\ncpu_slots = 1",
        &["--steps", "8", "--behaviour", "ckpt"],
        "x = { uniform = [-3.0, 3.0] }",
    );
    let dir = tmp.path().join("run");
    run_ok(&mut tune_run(&spec, &dir));
    let reference = by_id(export_json(&dir));
    // The state a kill leaves between storing a result and storing the stop it drew: the
    // result is there, the trial still reads as running.
    let victim = reference
        .values()
        .rev()
        .find(|t| t["status"] == "stopped")
        .map(|t| t["id"].as_u64().unwrap())
        .expect("ASHA stopped no trial");
    {
        let mut exp = tune::experiment::Experiment::open(&dir).unwrap();
        let mut t = exp.stored.trials[victim as usize].clone();
        t.status = tune::Status::Running;
        t.finished_at = None;
        exp.store.put_trial(&t).unwrap();
        exp.store.sync().unwrap();
    }
    run_ok(tune().arg("resume").arg(&dir));
    let resumed = by_id(export_json(&dir));
    // Stopped where the scheduler stopped it, without running again.
    for (id, t) in &resumed {
        let r = &reference[id];
        assert_eq!(t["status"], r["status"], "trial {id}");
        assert_eq!(t["attempts"], r["attempts"], "trial {id}");
        assert_eq!(t["results"], r["results"], "trial {id}");
    }
}

#[test]
fn resume_with_a_higher_max_t_killed_midway_decides_as_the_higher_max_t_from_the_start() {
    let tmp = tempfile::tempdir().unwrap();
    let short = tmp.path().join("short");
    let spec = random_asha_to(&short, 9);
    let dir = short.join("run");
    run_ok(tune_run(&spec, &dir).arg("--no-tui"));
    let before = by_id(export_json(&dir));
    let at_top = (before.values())
        .filter(|t| t["status"] == "completed" && steps(t).last() == Some(&9))
        .count();
    // The extension is killed by the first trial acknowledged at step 12 (one reopened
    // trial's fourth step past its checkpoint), then resumed plainly.
    set_kill_switch(&short, "step 12");
    let out = tune_resume(&dir)
        .args(["--max-t", "27", "--no-tui"])
        .output()
        .unwrap();
    assert!(killed(&out), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "max_t raised from 9 to 27: the {at_top} trial(s) completed at step 9 are reopened"
        )),
        "{}",
        stderr(&out)
    );
    run_ok(tune_resume(&dir).arg("--no-tui"));
    let raised = export_json(&dir);

    let whole = tmp.path().join("whole");
    let spec = random_asha_to(&whole, 27);
    run_ok(tune_run(&spec, &whole.join("run")).arg("--no-tui"));
    assert_eq!(outcome(&raised), outcome(&export_json(&whole.join("run"))));
    // Trials that went on past 9 did so from their checkpoints: no step twice.
    let went_on: Vec<&Json> = (raised.iter())
        .filter(|t| steps(t).last() == Some(&27))
        .collect();
    assert!(!went_on.is_empty());
    for t in &went_on {
        assert_eq!(steps(t), (1..=27).collect::<Vec<_>>());
    }
    // A finished sweep's max_t can only go up; other schedulers say why not.
    let out = tune_resume(&dir).args(["--max-t", "20"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "[scheduler] `max_t`: a sweep's max_t can only be raised: expected above 27, found 20"
        ),
        "{}",
        stderr(&out)
    );
}

/// One band of HyperBand, R = 9, eta = 3 (brackets of 9, 5 and 3 trials: ids 0-8, 9-13,
/// 14-16) on one slot, of checkpointing command trials that would run to step 100, with the
/// kill switch armed, in `tmp`.
fn hyperband_band_to_go_on(tmp: &Path) -> std::path::PathBuf {
    let spec = write_spec(
        tmp,
        "samples = 17\nseed = 3\n[search]\nalgorithm = \"random\"\n[scheduler]\nkind = \"hyperband\"\n\
         max_t = 9\nreduction_factor = 3\n[resources]\ncpu_slots = 1",
        &["--y", "{y}", "--steps", "100", "--behaviour", "ckpt"],
        "x = { uniform = [-3.0, 3.0] }\ny = { uniform = [-3.0, 3.0] }",
    );
    arm_kill_switch(&spec, tmp);
    spec
}

#[test]
fn hyperband_with_a_higher_max_t_cuts_at_the_old_top_and_a_kill_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = hyperband_band_to_go_on(tmp.path());
    let killed_dir = tmp.path().join("killed");
    run_ok(tune_run(&spec, &killed_dir).arg("--no-tui"));
    let before = by_id(export_json(&killed_dir));
    let whole_dir = tmp.path().join("whole");
    copy_dir(&killed_dir, &whole_dir);
    run_ok(tune_resume(&whole_dir).args(["--max-t", "27", "--no-tui"]));
    set_kill_switch(tmp.path(), "step 12");
    let out = tune_resume(&killed_dir)
        .args(["--max-t", "27", "--no-tui"])
        .output()
        .unwrap();
    assert!(killed(&out), "{}", stderr(&out));
    run_ok(tune_resume(&killed_dir).arg("--no-tui"));
    let (whole, after_kill) = (export_json(&whole_dir), export_json(&killed_dir));
    assert_eq!(outcome(&after_kill), outcome(&whole));

    // Step 9, the old top, is one more rung of the same band: the trials completed there (one
    // of the first bracket, one of the second, the last bracket's three) are cut to a third
    // of each bracket's, the best of the last bracket's three alone going on to 27.
    let at_top: Vec<u64> = (before.iter())
        .filter(|(_, t)| t["status"] == "completed")
        .map(|(&id, _)| id)
        .collect();
    assert_eq!(at_top.len(), 5, "{at_top:?}");
    let whole = by_id(whole);
    let loss_at_9 = |id: u64| before[&id]["results"][8]["loss"].as_f64().unwrap();
    let best = (14..17)
        .min_by(|&a, &b| loss_at_9(a).total_cmp(&loss_at_9(b)))
        .unwrap();
    for id in at_top {
        let t = &whole[&id];
        if id == best {
            assert_eq!(t["status"], "completed");
            assert_eq!(steps(t), (1..=27).collect::<Vec<_>>());
        } else {
            assert_eq!(
                (t["status"].as_str(), steps(t).len()),
                (Some("stopped"), 9),
                "trial {id}"
            );
        }
    }
}

#[test]
fn a_trial_that_stops_at_a_fixed_step_stays_completed_when_max_t_is_raised() {
    let tmp = tempfile::tempdir().unwrap();
    // The trials train to step 9 whatever TUNE_COMPLETES_AT says; rungs at 1 and 4, then 16
    // once raised, so ASHA lets every trial completed at 9 go on.
    let spec = write_spec(
        tmp.path(),
        "samples = 8\nseed = 6\n[search]\nalgorithm = \"random\"\n[scheduler]\nkind = \"asha\"\n\
         max_t = 9\ngrace_period = 1\nreduction_factor = 4\n[resources]\ncpu_slots = 1",
        &["--y", "{y}", "--steps", "9", "--behaviour", "ckpt"],
        "x = { uniform = [-3.0, 3.0] }\ny = { uniform = [-3.0, 3.0] }",
    );
    let dir = tmp.path().join("run");
    run_ok(tune_run(&spec, &dir).arg("--no-tui"));
    let before = export_json(&dir);
    let out = run_ok(tune_resume(&dir).args(["--max-t", "27", "--no-tui"]));
    let after = by_id(export_json(&dir));
    let mut reopened = 0;
    for t in &before {
        let id = t["id"].as_u64().unwrap();
        let now = &after[&id];
        // Reopened or not, each ends as it was, with the same results.
        assert_eq!(
            (&now["status"], steps(now)),
            (&t["status"], steps(t)),
            "trial {id}"
        );
        if t["status"] == "completed" {
            reopened += 1;
            assert_eq!(now["attempts"], 2, "trial {id} ran again");
        }
    }
    assert!(reopened > 0);
    assert!(
        stderr(&out).contains(&format!(
            "the {reopened} trial(s) completed at step 9 are reopened"
        )),
        "{}",
        stderr(&out)
    );
}
