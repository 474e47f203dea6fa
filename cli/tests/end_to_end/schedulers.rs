//! Early-stopping schedulers through the real binary: ASHA and median stopping decide as the
//! algorithms say, decisions reach the trials, and a killed sweep resumes with the same ones.

use crate::common;

use std::collections::BTreeMap;

use common::*;
use rand::{Rng, SeedableRng};
use serde_json::Value as Json;

#[test]
fn asha_decisions_are_the_algorithms_and_reach_the_trials() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("asha");
    run_ok(&mut tune_run(&asha_spec(tmp.path(), &[], 3), &dir));
    let trials = export_json(&dir);
    assert_asha_sweep(&trials);
}

#[test]
fn a_trial_deaf_to_its_decisions_is_ended_and_its_later_reports_discarded() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("deaf");
    run_ok(&mut tune_run(
        &asha_spec(tmp.path(), &["--behaviour", "deaf"], 2),
        &dir,
    ));
    let trials = export_json(&dir);
    // The trials print all nine steps at once; what came after a stop was not stored.
    let (stopped, _) = assert_asha_applied(&trials);
    assert!(stopped >= 8, "{stopped}");
}

#[test]
fn median_stopping_through_the_cli() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(
        tmp.path(),
        "samples = 16\nseed = 2\n[scheduler]\nkind = \"median\"\ngrace_period = 2\nmin_samples_required = 3\n[resources]\ncpu_slots = 1",
        &["--y", "{y}", "--steps", "6"],
        "x = { uniform = [-3.0, 3.0] }\ny = { uniform = [-3.0, 3.0] }",
    );
    let dir = tmp.path().join("median");
    run_ok(&mut tune_run(&spec, &dir));
    let trials = export_json(&dir);
    let stopped: Vec<&Json> = trials.iter().filter(|t| t["status"] == "stopped").collect();
    assert!(stopped.len() >= 4, "{} stopped", stopped.len());
    for t in &stopped {
        let n = t["results"].as_array().unwrap().len();
        assert!(
            (2..6).contains(&n),
            "stopped after the grace period, before the end: {n}"
        );
    }
    // The first trials (fewer than 3 peers at their steps) all ran to the end.
    assert!(trials[..3].iter().all(|t| t["status"] == "completed"));
}

#[test]
fn bad_scheduler_settings_are_explained() {
    let tmp = tempfile::tempdir().unwrap();
    for (table, expected) in [
        (
            "kind = \"asha\"\nreduction_factor = 1",
            "[scheduler] `reduction_factor`: expected at least 2, found 1",
        ),
        (
            "kind = \"median\"\nmax_t = 9",
            "space.toml:6:1: unknown field `max_t`, expected `grace_period` or `min_samples_required`",
        ),
        (
            "kind = \"asha\"\nmax_t = 9\ngrace_period = 10",
            "expected 1 <= grace_period <= max_t (9), found 10",
        ),
        (
            "kind = \"pbt\"\nquantile_fraction = 0.7",
            "[scheduler] `quantile_fraction`: expected a number in (0, 0.5], found 0.7",
        ),
        (
            "kind = \"asha\"\nperturbation_interval = 3",
            "space.toml:6:1: unknown field `perturbation_interval`, expected one of `max_t`, `grace_period`,",
        ),
        ("kind = \"ashaa\"", "did you mean `asha`?"),
    ] {
        let spec = write_spec(
            tmp.path(),
            &format!("samples = 1\n[scheduler]\n{table}"),
            &[],
            "x = { uniform = [0.0, 1.0] }",
        );
        let out = tune_run(&spec, &tmp.path().join("never")).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{table}");
        assert!(stderr(&out).contains(expected), "{table}: {}", stderr(&out));
    }
}

#[test]
fn asha_killed_and_resumed_ends_as_the_uninterrupted_sweep() {
    let tmp = tempfile::tempdir().unwrap();
    // One slot: results arrive in the same order in both runs.
    let spec = asha_spec(tmp.path(), &["--sleep", "0.01"], 1);
    let whole = tmp.path().join("whole");
    run_ok(&mut tune_run(&spec, &whole));
    let reference = export_json(&whole);

    let dir = tmp.path().join("killed");
    arm_kill_switch(&spec, tmp.path());
    run_with_kills_at(&spec, &dir, tmp.path(), &[4, 9, 6]);
    run_ok(tune().arg("resume").arg(&dir));
    let resumed = export_json(&dir);
    assert_eq!(resumed.len(), reference.len());
    for (a, b) in resumed.iter().zip(&reference) {
        assert_eq!(a["params"], b["params"], "trial {}", a["id"]);
        assert_eq!(a["status"], b["status"], "trial {}", a["id"]);
        assert_eq!(a["value"], b["value"], "trial {}", a["id"]);
    }
    assert_asha_applied(&reference);
}

/// How many of the trials stopped at each of HyperBand's rungs 1, 3, 9 and 27, and how many
/// completed at 81 (R = 81, eta = 3), checking each trial's steps are 1..=n, each stored once,
/// with the objective's value.
#[test]
fn hyperband_through_the_binary_matches_the_papers_band() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = hyperband_band_81(tmp.path(), 1, 4);
    let dir = tmp.path().join("hb");
    run_ok(&mut tune_run(&spec, &dir));
    let trials = export_json(&dir);
    assert_eq!(trials.len(), 143);
    // Li et al. 2017, Table 1 (R = 81, eta = 3): trials stopped at each rung, and completed.
    assert_eq!(hyperband_table(&trials), ([54, 41, 24, 14], 10));
    // A trial pauses only at milestones below its last step (the trial that completes a rung
    // is promoted at once, so timing decides which ones pause); of the 27 promoted from the
    // first bracket's first rung, at least 26 had to be resumed.
    let mut resumes = 0;
    for t in &trials {
        let last = *steps(t).last().unwrap();
        let pauses_possible = [1, 3, 9, 27].iter().filter(|&&m| m < last).count() as u64;
        let attempts = t["attempts"].as_u64().unwrap();
        assert!(
            attempts <= 1 + pauses_possible,
            "trial {}: {attempts} attempts",
            t["id"]
        );
        resumes += attempts - 1;
    }
    assert!(resumes >= 26, "{resumes} resumes");
}

#[test]
fn hyperband_killed_fifty_times_decides_as_the_uninterrupted_band() {
    // 50 kills with SIGKILL, each by the trial whose acknowledged result is the round's n-th
    // (n from 1 to 40, seeded): which trials run then, and where they are, varies. Decisions
    // are stored before they are heard and replayed in order on resume, so the band ends with
    // the paper's table, as uninterrupted.
    let tmp = tempfile::tempdir().unwrap();
    let spec = hyperband_band_81(tmp.path(), 6, 3);
    arm_kill_switch(&spec, tmp.path());
    let dir = tmp.path().join("hb-killed");
    let mut rng = rand::rngs::StdRng::seed_from_u64(21);
    let gaps: Vec<usize> = (0..50).map(|_| rng.random_range(1..=40)).collect();
    run_with_kills_at(&spec, &dir, tmp.path(), &gaps);
    run_ok(tune().arg("resume").arg(&dir));
    let trials = export_json(&dir);
    assert_eq!(trials.len(), 143);
    assert_acknowledged_results_kept(tmp.path(), &by_id(trials.clone()));
    assert_eq!(hyperband_table(&trials), ([54, 41, 24, 14], 10));
}

#[test]
fn pbt_exploits_copy_checkpoints_and_params_and_record_lineage() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(
        tmp.path(),
        "samples = 8\nseed = 3\n[scheduler]\nkind = \"pbt\"\nperturbation_interval = 4\n[resources]\ncpu_slots = 8",
        &["--y", "{y}", "--steps", "24", "--behaviour", "ckpt", "--sleep", "0.01"],
        "x = { uniform = [-3.0, 3.0] }\ny = { choice = [-2.0, -1.0, 0.0, 1.0, 2.0] }",
    );
    let dir = tmp.path().join("pbt");
    run_ok(&mut tune_run(&spec, &dir));
    let (parsed, _) = tune::ExperimentSpec::read(&spec).unwrap();
    let trials = export_json(&dir);
    let mut exploits = 0;
    for t in &trials {
        assert_eq!(t["status"], "completed", "trial {}", t["id"]);
        let results = t["results"].as_array().unwrap();
        let steps: Vec<u64> = results
            .iter()
            .map(|r| r["step"].as_u64().unwrap())
            .collect();
        // Within a run, steps are contiguous. A run after an exploit continues from the
        // source's latest checkpoint, which may be behind or ahead (as in Ray Tune).
        for w in results.windows(2) {
            if w[0]["attempt"] == w[1]["attempt"] {
                assert_eq!(
                    w[1]["step"].as_u64().unwrap(),
                    w[0]["step"].as_u64().unwrap() + 1,
                    "trial {}: {steps:?}",
                    t["id"]
                );
            }
        }
        let lineage = t["lineage"].as_array().cloned().unwrap_or_default();
        for entry in &lineage {
            let from = entry["from"].as_u64().unwrap();
            assert_ne!(
                from,
                t["id"].as_u64().unwrap(),
                "a trial exploits another one"
            );
        }
        if *steps.last().unwrap() < 24 {
            // Only when the checkpoint it took over was already final (from a source at step
            // 24, possibly through a chain of exploits): its last run had nothing left to do.
            assert!(!lineage.is_empty(), "trial {}: {steps:?}", t["id"]);
            let state =
                std::fs::read_to_string(dir.join("trials").join(t["id"].to_string()).join("state"))
                    .unwrap();
            assert_eq!(state.trim(), "24", "trial {}: {steps:?}", t["id"]);
        }
        if let Some(last) = lineage.last() {
            assert_eq!(t["parent"], last["from"]);
            exploits += lineage.len();
        }
        // Explored params stay in the space.
        let params: tune::Params = serde_json::from_value(t["params"].clone()).unwrap();
        for p in parsed.space.params() {
            assert!(
                p.domain.contains(params.get(&p.name).unwrap()),
                "{}: {:?}",
                p.name,
                params.get(&p.name)
            );
        }
        // Run i (attempt i) ran with the params the i-th exploit replaced, the last run with the
        // current ones: every reported value is the objective of the params it ran with.
        for r in results {
            let attempt = r["attempt"].as_u64().unwrap() as usize;
            let ran_with = lineage
                .get(attempt - 1)
                .map_or(&t["params"], |l| &l["previous"]);
            let (x, y) = (
                ran_with["x"].as_f64().unwrap(),
                ran_with["y"].as_f64().unwrap(),
            );
            assert_eq!(
                r["loss"].as_f64().unwrap(),
                quadratic(x, y, r["step"].as_u64().unwrap()),
                "trial {} {r}",
                t["id"]
            );
        }
    }
    assert!(exploits >= 4, "{exploits} exploits");
}

#[test]
fn pbt_killed_and_resumed_keeps_every_trial_consistent() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = pbt_population(tmp.path(), "0.02");
    let dir = tmp.path().join("pbt-killed");
    arm_kill_switch(&spec, tmp.path());
    // Killed at steps, not at counts of results: an exploit jumps a trial to its source's step,
    // so how many results the population reports before it ends varies with timing (under load,
    // one that ran ahead was copied by the rest and the sweep ended after 64 results), but some
    // trial must report each step up to 30 for the sweep to end.
    run_with_kills_at_steps(&spec, &dir, tmp.path(), &[8, 16, 24]);
    run_ok(tune().arg("resume").arg(&dir));
    assert_pbt_consistent(&spec, &dir, 8);
}

#[test]
fn asha_promotion_variant_pauses_at_rungs_and_promotes_the_best() {
    let tmp = tempfile::tempdir().unwrap();
    // One slot: a promotion is decided right before the promoted trial's next result, so the
    // rung as it stood then can be read off the export.
    let spec = write_spec(
        tmp.path(),
        "samples = 20\nseed = 2\n[scheduler]\nkind = \"asha\"\nvariant = \"promotion\"\nmax_t = 9\ngrace_period = 1\nreduction_factor = 3\n[resources]\ncpu_slots = 1",
        &["--y", "{y}", "--steps", "9", "--behaviour", "ckpt"],
        "x = { uniform = [-3.0, 3.0] }\ny = { uniform = [-3.0, 3.0] }",
    );
    let dir = tmp.path().join("promo");
    run_ok(&mut tune_run(&spec, &dir));
    let trials = export_json(&dir);
    assert_eq!(trials.len(), 20);
    // (seq, loss) of every result at each rung, and where each trial went past it.
    let mut rung_results: BTreeMap<u64, Vec<(u64, f64, u64)>> = BTreeMap::new();
    let mut promotions: Vec<(u64, u64, u64)> = Vec::new(); // (rung, trial, seq of first result past it)
    let mut completed = 0;
    for t in &trials {
        let id = t["id"].as_u64().unwrap();
        let results = t["results"].as_array().unwrap();
        let steps: Vec<u64> = results
            .iter()
            .map(|r| r["step"].as_u64().unwrap())
            .collect();
        assert_eq!(
            steps,
            (1..=steps.len() as u64).collect::<Vec<_>>(),
            "trial {id}: resumed from its checkpoints"
        );
        let last = *steps.last().unwrap();
        match t["status"].as_str().unwrap() {
            "completed" => {
                assert_eq!(last, 9);
                completed += 1;
            }
            "stopped" => assert!(
                last == 1 || last == 3,
                "paused at a rung and never promoted: {last}"
            ),
            other => panic!("trial {id} is {other}"),
        }
        for rung in [1, 3] {
            for r in results {
                let (step, seq, loss) = (
                    r["step"].as_u64().unwrap(),
                    r["seq"].as_u64().unwrap(),
                    r["loss"].as_f64().unwrap(),
                );
                if step == rung {
                    rung_results.entry(rung).or_default().push((seq, loss, id));
                }
                if step == rung + 1 {
                    promotions.push((rung, id, seq));
                }
            }
        }
    }
    assert!(completed >= 1 && !promotions.is_empty());
    for (rung, id, seq) in promotions {
        // The rung as it stood when the trial was promoted: it was in the best third.
        let mut before: Vec<(f64, u64)> = rung_results[&rung]
            .iter()
            .filter(|(s, _, _)| *s < seq)
            .map(|(_, l, t)| (*l, *t))
            .collect();
        before.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let top: Vec<u64> = before[..before.len() / 3].iter().map(|(_, t)| *t).collect();
        assert!(
            top.contains(&id),
            "trial {id} promoted from rung {rung} outside the best third of {before:?}"
        );
    }
}

#[test]
fn paused_trials_without_checkpoints_redo_their_steps_and_end_as_with_them() {
    // A paused trial that saves no checkpoint starts over when resumed: the steps it redoes
    // are already stored and decided, so the sweep ends as one whose trials restore.
    let tmp = tempfile::tempdir().unwrap();
    let run = |behaviour: &str| {
        let sub = tmp.path().join(behaviour);
        std::fs::create_dir_all(&sub).unwrap();
        let spec = write_spec(
            &sub,
            "samples = 20\nseed = 2\n[scheduler]\nkind = \"asha\"\nvariant = \"promotion\"\nmax_t = 9\ngrace_period = 1\nreduction_factor = 3\n[resources]\ncpu_slots = 1",
            &["--y", "{y}", "--steps", "9", "--behaviour", behaviour],
            "x = { uniform = [-3.0, 3.0] }\ny = { uniform = [-3.0, 3.0] }",
        );
        let dir = sub.join("run");
        run_ok(&mut tune_run(&spec, &dir));
        export_json(&dir)
    };
    let restoring = run("ckpt");
    let restarting = run("ok");
    let promoted = restarting
        .iter()
        .filter(|t| t["attempts"].as_u64().unwrap() > 1)
        .count();
    assert!(promoted >= 2, "only {promoted} trials were resumed");
    for (a, b) in restarting.iter().zip(&restoring) {
        assert_eq!(a["status"], b["status"], "trial {}", a["id"]);
        assert_eq!(a["attempts"], b["attempts"], "trial {}", a["id"]);
        assert_eq!(a["results"], b["results"], "trial {}", a["id"]);
    }
}

#[test]
fn asynchronous_hyperband_runs_brackets_of_the_promotion_variant() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(
        tmp.path(),
        "samples = 30\nseed = 3\n[scheduler]\nkind = \"asha\"\nvariant = \"promotion\"\nbrackets = 2\nmax_t = 9\ngrace_period = 1\nreduction_factor = 3\n[resources]\ncpu_slots = 2",
        &["--y", "{y}", "--steps", "9", "--behaviour", "ckpt"],
        "x = { uniform = [-3.0, 3.0] }\ny = { uniform = [-3.0, 3.0] }",
    );
    let dir = tmp.path().join("ahb");
    run_ok(&mut tune_run(&spec, &dir));
    let trials = export_json(&dir);
    assert_eq!(trials.len(), 30);
    let mut last_steps = BTreeMap::new();
    for t in &trials {
        let steps = steps(t);
        assert_eq!(steps, (1..=steps.len() as u64).collect::<Vec<_>>());
        let status = t["status"].as_str().unwrap().to_string();
        *last_steps.entry((status, steps.len())).or_insert(0) += 1;
    }
    // Bracket 0 pauses at 1 and 3, bracket 1 first at 3: trials stopped at both, and some
    // promoted to the end.
    assert!(
        last_steps.contains_key(&("stopped".to_string(), 1)),
        "{last_steps:?}"
    );
    assert!(
        last_steps.contains_key(&("stopped".to_string(), 3)),
        "{last_steps:?}"
    );
    assert!(
        last_steps.contains_key(&("completed".to_string(), 9)),
        "{last_steps:?}"
    );
    // What the dashboard shows of the scheduler, rebuilt from the store.
    let exp = tune::experiment::Experiment::open(&dir).unwrap();
    let text = tune::scheduler_status(&exp.stored).join("\n");
    for line in [
        "bracket 0 rung t=1:",
        "bracket 0 rung t=3:",
        "bracket 1 rung t=3:",
    ] {
        assert!(text.contains(line), "no `{line}` in:\n{text}");
    }
    assert!(!text.contains("bracket 1 rung t=1:"), "{text}");
}

/// A command objective learns the step at which the scheduler completes it
/// (`TUNE_COMPLETES_AT`, ASHA's `max_t`), to save that step's checkpoint before reporting it;
/// under a scheduler that completes no trial early the variable is not set.
#[test]
fn a_command_objective_is_told_the_step_its_scheduler_completes_it_at() {
    let tmp = tempfile::tempdir().unwrap();
    // `{{` and `}}` are literal braces in a command's arguments.
    let command = r#"echo "{{\"loss\": ${{TUNE_COMPLETES_AT:--1}}}}""#;
    for (scheduler, want) in [
        (
            "[scheduler]\nkind = \"asha\"\nmax_t = 7\ngrace_period = 1\n",
            7.0,
        ),
        ("", -1.0),
    ] {
        let dir = tmp.path().join(if want > 0.0 { "asha" } else { "fifo" });
        std::fs::create_dir_all(&dir).unwrap();
        let spec = dir.join("space.toml");
        std::fs::write(
            &spec,
            format!(
                "name = \"t\"\nmetric = \"loss\"\nsamples = 1\n{scheduler}[objective]\n\
                 command = [\"sh\", \"-c\", {command:?}]\n[space]\nx = {{ uniform = [0.0, 1.0] }}\n"
            ),
        )
        .unwrap();
        let run = dir.join("run");
        run_ok(&mut tune_run(&spec, &run));
        let trials = export_json(&run);
        assert_eq!(trials[0]["value"], want, "{}", trials[0]);
    }
}
