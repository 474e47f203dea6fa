//! Trial folders kept in the database (`[store] checkpoints = "database"`): `tune worker`s
//! with folders of their own and none shared resume paused trials from their checkpoints, and
//! PBT's exploits get their source's checkpoint, whichever worker runs them. The fixture's
//! checkpoint names the trial that wrote it (`--report-writer`), and each report says whose
//! checkpoint its run went on from (`restored_from`).

use crate::common;
use crate::workers::{
    attempts_ran, coordinator, export_in, finish, finish_ok, five_step_trials, spawn,
    wait_for_experiment, worker, Proc,
};

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use tune_testkit::pg_server;

/// `[objective] env` gets `ACK_LOG` (what was acknowledged, for the retrained-step count), and
/// the sweep keeps its trial folders in the database.
fn in_database(spec: &Path, tmp: &Path) {
    let text = std::fs::read_to_string(spec).unwrap().replace(
        "\n[space]",
        &format!(
            "env = {{ ACK_LOG = {:?} }}\n\n[space]",
            tmp.join("acks.log").display().to_string()
        ),
    ) + "\n[store]\ncheckpoints = \"database\"\n";
    std::fs::write(spec, text).unwrap();
}

/// Each (trial, step) acknowledged more than once: a step some run of the trial trained again.
fn retrained_steps(tmp: &Path) -> BTreeMap<(u64, u64), usize> {
    let log = std::fs::read_to_string(tmp.join("acks.log")).unwrap();
    let mut seen: BTreeMap<(u64, u64), usize> = BTreeMap::new();
    for line in log.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        *seen
            .entry((f[0].parse().unwrap(), f[2].parse().unwrap()))
            .or_default() += 1;
    }
    seen.retain(|_, n| *n > 1);
    seen
}

fn lost_attempts(t: &serde_json::Value) -> u64 {
    t["lost_attempts"].as_u64().unwrap_or(0)
}

/// Li et al.'s HyperBand band (R = 81, eta = 3: 143 trials) on three workers with folders of
/// their own, the first SIGKILLed twice by its trials (at the 150th and 400th acknowledged
/// result) and started again on its folder: every paused trial goes on from its own checkpoint
/// on whichever worker resumes it, and no step is trained again but those a killed attempt had
/// trained after its last checkpoint reached the database (one per attempt at most: the
/// worker keeps a trial's folder at each report).
#[test]
fn a_hyperband_band_on_three_workers_without_a_shared_folder_resumes_every_paused_trial_from_its_checkpoint(
) {
    let tmp = tempfile::tempdir().unwrap();
    let tmp = tmp.path();
    let spec = write_spec(
        tmp,
        "samples = 143\nseed = 1\n[scheduler]\nkind = \"hyperband\"\nmax_t = 81\nreduction_factor = 3",
        &[
            "--y",
            "{y}",
            "--steps",
            "81",
            "--behaviour",
            "ckpt",
            "--report-writer",
        ],
        "x = { uniform = [-3.0, 3.0] }\ny = { uniform = [-3.0, 3.0] }",
    );
    in_database(&spec, tmp);
    for due in ["150", "400"] {
        set_kill_switch(tmp, due);
    }
    let url = pg_server::fresh_database();
    let mut coord = spawn(coordinator(&spec, &url, &tmp.join("coordinator")));
    wait_for_experiment(&url, &mut coord);
    // Only the first worker's trials see the kill switches: it is the one killed. A lease of
    // 3 s gives its attempts to the others soon after.
    let start_worker = |i: usize| {
        let mut w = worker(&url, 2, "3", &tmp.join(format!("w{i}")));
        if i == 0 {
            w.env("KILL_AT", tmp.join("kill-switch"));
        }
        spawn(w)
    };
    let mut workers: Vec<Option<Proc>> = (0..3).map(|i| Some(start_worker(i))).collect();
    let mut coord = Some(coord);
    let (mut kills, mut ran) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(900);
    while coord.is_some() || workers.iter().any(Option::is_some) {
        assert!(Instant::now() < deadline, "the band did not end");
        if coord
            .as_mut()
            .is_some_and(|c| c.try_wait().unwrap().is_some())
        {
            finish_ok(coord.take().unwrap(), "the coordinator");
        }
        for (i, w) in workers.iter_mut().enumerate() {
            if w.as_mut().is_some_and(|p| p.try_wait().unwrap().is_some()) {
                let out = finish(w.take().unwrap(), "a worker");
                if killed(&out) {
                    kills += 1;
                    *w = Some(start_worker(i));
                } else {
                    assert!(out.status.success(), "worker {i}: {}", stderr(&out));
                    ran += attempts_ran(&out);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(kills, 2, "the first worker was not killed twice");
    let trials = export_in(&url);
    assert_eq!(trials.len(), 143);
    // Li et al. 2017, Table 1 (R = 81, eta = 3); every step stored once, in order, each value
    // the objective's.
    assert_eq!(hyperband_table(&trials), ([54, 41, 24, 14], 10));
    // Every run went on from its own trial's checkpoint (or none).
    for t in &trials {
        for r in t["results"].as_array().unwrap() {
            assert_eq!(
                r["restored_from"].as_f64(),
                t["id"].as_f64(),
                "trial {}: {r}",
                t["id"]
            );
        }
    }
    let paused_and_resumed = trials
        .iter()
        .filter(|t| t["attempts"].as_u64().unwrap() > 1 + lost_attempts(t))
        .count();
    assert!(
        paused_and_resumed >= 26,
        "{paused_and_resumed} trials resumed"
    );
    let retrained = retrained_steps(tmp);
    let lost: u64 = trials.iter().map(lost_attempts).sum();
    let by_id = by_id(trials.clone());
    for (trial, step) in retrained.keys() {
        assert!(
            lost_attempts(&by_id[trial]) > 0,
            "trial {trial} trained step {step} again with no attempt lost"
        );
    }
    let again: usize = retrained.values().map(|n| n - 1).sum();
    assert!(
        again as u64 <= lost,
        "{again} steps trained again for {lost} lost attempts: {retrained:?}"
    );
    assert!(lost >= 2, "{lost} attempts lost to two kills");
    assert_acknowledged_results_kept(tmp, &by_id);
    eprintln!(
        "{kills} kills, {lost} attempts lost, {again} steps trained again, {paused_and_resumed} \
         trials paused and resumed, {ran} attempts on the workers that were not killed"
    );
    // No folder was shared: each worker's trial folders are its own.
    assert!(!tmp.join("coordinator").join("trials").exists());
    for i in 0..3 {
        assert!(tmp.join(format!("w{i}")).join("t").join("trials").is_dir());
    }
}

/// PBT on two workers with folders of their own: each exploit's run goes on from its source's
/// checkpoint (copied in the database), never from its own or from nothing.
#[test]
fn pbt_exploits_on_workers_without_a_shared_folder_go_on_from_their_sources_checkpoints() {
    let tmp = tempfile::tempdir().unwrap();
    let tmp = tmp.path();
    let spec = write_spec(
        tmp,
        "samples = 8\nseed = 8\n[scheduler]\nkind = \"pbt\"\nperturbation_interval = 3",
        &[
            "--y",
            "{y}",
            "--steps",
            "30",
            "--behaviour",
            "ckpt",
            "--sleep",
            "0.02",
            "--report-writer",
        ],
        "x = { uniform = [-3.0, 3.0] }\ny = { choice = [-2.0, -1.0, 0.0, 1.0, 2.0] }",
    );
    in_database(&spec, tmp);
    let url = pg_server::fresh_database();
    let mut coord = spawn(coordinator(&spec, &url, &tmp.join("coordinator")));
    wait_for_experiment(&url, &mut coord);
    let workers: Vec<Proc> = (0..2)
        .map(|i| spawn(worker(&url, 4, "15", &tmp.join(format!("w{i}")))))
        .collect();
    let out = finish_ok(coord, "the coordinator");
    assert!(
        !stderr(&out).contains("without `[store] checkpoints`"),
        "{}",
        stderr(&out)
    );
    for w in workers {
        finish_ok(w, "a worker");
    }
    let trials = export_in(&url);
    assert_eq!(trials.len(), 8);
    let restored_from = |t: &serde_json::Value, attempt: u64| -> Vec<u64> {
        let mut seen: Vec<u64> = (t["results"].as_array().unwrap().iter())
            .filter(|r| attempt == 0 || r["attempt"].as_u64() == Some(attempt))
            .map(|r| r["restored_from"].as_f64().unwrap() as u64)
            .collect();
        seen.dedup();
        seen
    };
    let (mut exploits, mut copied) = (0, 0);
    for t in &trials {
        assert_eq!(t["status"], "completed", "{t}");
        let id = t["id"].as_u64().unwrap();
        let lineage = t["lineage"].as_array().cloned().unwrap_or_default();
        // Each exploit is the next attempt (PBT pauses a trial only to exploit).
        if t["attempts"].as_u64().unwrap() != 1 + lineage.len() as u64 {
            continue;
        }
        for (k, l) in lineage.iter().enumerate() {
            let from = l["from"].as_u64().unwrap();
            let source = &trials[from as usize];
            let attempt = k as u64 + 2;
            let first_step = (t["results"].as_array().unwrap().iter())
                .find(|r| r["attempt"].as_u64() == Some(attempt))
                .map(|r| r["step"].as_u64().unwrap());
            // The source's checkpoint as it was at the copy: written by the source, or the
            // one the source's run went on from, before the source wrote its own.
            let mut theirs = restored_from(source, 0);
            theirs.push(from);
            let got = restored_from(t, attempt);
            // A source whose first checkpoint was not yet stored (it writes one after each
            // acknowledged report, and the worker keeps it at the next) hands over nothing:
            // the attempt starts afresh at step 1, as the fixture does with an empty folder.
            if got == [id] && first_step == Some(1) {
                exploits += 1;
                continue;
            }
            for got in got {
                assert!(
                    theirs.contains(&got),
                    "trial {id} attempt {attempt}: went on from trial {got}'s checkpoint, not \
                     its source {from}'s (which held {theirs:?})"
                );
            }
            exploits += 1;
            copied += 1;
        }
    }
    assert!(exploits >= 4, "{exploits} exploits");
    assert!(
        copied >= 1,
        "no exploit went on from its source's checkpoint"
    );
    // No folder was shared: the workers' trial folders are their own.
    assert!(!tmp.join("coordinator").join("trials").exists());
}

/// `checkpoints = "database"` needs the sweep in PostgreSQL and its trials on workers: said,
/// exit 2, before anything runs.
#[test]
fn database_checkpoints_without_a_database_or_with_local_slots_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = five_step_trials(tmp.path(), &[]);
    in_database(&spec, tmp.path());
    let out = tune()
        .arg("run")
        .arg(&spec)
        .args(["--no-tui", "--dir"])
        .arg(tmp.path().join("runs"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--store postgres://"),
        "{}",
        stderr(&out)
    );
    let url = pg_server::fresh_database();
    let out = tune()
        .arg("run")
        .arg(&spec)
        .args(["--store", &url, "--no-tui", "--dir"])
        .arg(tmp.path().join("runs"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--slots 0"), "{}", stderr(&out));
}

/// A trial whose folder grows past `max_checkpoint_mb` fails, saying so; what it reported
/// before is kept.
#[test]
fn a_trial_whose_folder_grows_past_the_cap_fails_saying_so() {
    let tmp = tempfile::tempdir().unwrap();
    // Its folder holds 1 MiB after step 1 (at the cap: kept) and 2 MiB after step 2. (No
    // braces: they would be the command's placeholders.)
    let script = "import json, os, sys\n\
                  for step in (1, 2, 3):\n    \
                  print(json.dumps(dict(step=step, loss=1.0 / step)), flush=True)\n    \
                  if sys.stdin.readline().strip() != 'continue':\n        break\n    \
                  path = os.path.join(os.environ['TUNE_CHECKPOINT_DIR'], 'w.bin')\n    \
                  open(path, 'wb').write(bytes(step << 20))\n";
    let spec = tmp.path().join("space.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"t\"\nmetric = \"loss\"\nsamples = 1\n\n[objective]\ncommand = [\"python3\", \
             \"-c\", {script:?}]\n\n[space]\nx = {{ uniform = [0.0, 1.0] }}\n\n[store]\n\
             checkpoints = \"database\"\nmax_checkpoint_mb = 1\n"
        ),
    )
    .unwrap();
    let url = pg_server::fresh_database();
    let mut coord = spawn(coordinator(&spec, &url, &tmp.path().join("c")));
    wait_for_experiment(&url, &mut coord);
    let w = spawn(worker(&url, 1, "15", &tmp.path().join("w")));
    finish(coord, "the coordinator");
    finish_ok(w, "the worker");
    let trials = export_in(&url);
    let t = &trials[0];
    assert_eq!(t["status"], "failed", "{t}");
    assert!(
        t["error"]
            .as_str()
            .is_some_and(|e| e.contains("over [store] max_checkpoint_mb (1 MiB)")),
        "{t}"
    );
    assert_eq!(steps(t), [1, 2, 3], "{t}");
}
