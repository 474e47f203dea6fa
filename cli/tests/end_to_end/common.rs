//! Helpers shared by the integration tests: the real `tune` binary, spec files, exports.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value as Json;
use tune_schedulers::{Asha, AshaConfig, Decision, Mode, Scheduler};
pub use tune_testkit::python::*;

pub fn tune() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tune"))
}

/// `tune run SPEC --dir DIR`.
pub fn tune_run(spec: &Path, dir: &Path) -> Command {
    let mut cmd = tune();
    cmd.arg("run").arg(spec).arg("--dir").arg(dir);
    cmd
}

/// Arms the fixture's kill switches in `spec`: trials log each acknowledged result to
/// `tmp/acks.log`, and the switch that [`set_kill_switch`] sets in `tmp/kill-switch` has the
/// trial whose acknowledgement makes the log as long as its number (or, where it holds
/// `step N`, the first acknowledged at step N or later) kill tune with SIGKILL (see
/// cli/tests/fixtures/objective.py).
pub fn arm_kill_switch(spec: &Path, tmp: &Path) {
    let text = std::fs::read_to_string(spec).unwrap().replace(
        "\n[space]",
        &format!(
            "env = {{ ACK_LOG = {:?}, KILL_AT = {:?} }}\n\n[space]",
            tmp.join("acks.log").display().to_string(),
            tmp.join("kill-switch").display().to_string()
        ),
    );
    std::fs::write(spec, text).unwrap();
}

/// Sets a kill switch for the next run (`due`: a number of acknowledged results, or `step N`)
/// under a name no earlier switch had, and returns its path. A trial of the run before,
/// whose tune is dead, can still finish the rename it was blocked in (its SIGKILL acts on its
/// way back from the kernel): under load such a rename, meant for that run's switch, was seen
/// to claim the next run's when both had the same name.
pub fn set_kill_switch(tmp: &Path, due: &str) -> PathBuf {
    let switches = tmp.join("kill-switch");
    std::fs::create_dir_all(&switches).unwrap();
    // Each switch stays (claimed ones as .done): the count names the next.
    let n = std::fs::read_dir(&switches)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("round-"))
        .count();
    let path = switches.join(format!("round-{n:04}"));
    // Written whole, then put in place: a trial never reads half a switch.
    let staged = tmp.join("kill-switch.staged");
    std::fs::write(&staged, due).unwrap();
    std::fs::rename(&staged, &path).unwrap();
    path
}

/// Whether the switch at `path` is still armed, or who claimed it (and the switches before).
fn kill_switch_state(path: &Path) -> String {
    if path.exists() {
        return "still armed".into();
    }
    let claims = path.with_file_name("claims");
    format!(
        "claimed; claims so far:\n{}",
        std::fs::read_to_string(claims).unwrap_or_default()
    )
}

/// Lines in the fixture's ACK_LOG: results acknowledged so far.
pub fn acked_so_far(tmp: &Path) -> usize {
    std::fs::read_to_string(tmp.join("acks.log")).map_or(0, |log| log.lines().count())
}

/// `tune resume DIR`.
pub fn tune_resume(dir: &Path) -> Command {
    let mut cmd = tune();
    cmd.arg("resume").arg(dir);
    cmd
}

/// `tune run` (or `tune resume` once the experiment exists) in `dir`.
pub fn run_or_resume(spec: &Path, dir: &Path) -> Command {
    if dir.join("tune.db").exists() {
        tune_resume(dir)
    } else {
        tune_run(spec, dir)
    }
}

/// Whether the process ended by SIGKILL.
pub fn killed(out: &Output) -> bool {
    std::os::unix::process::ExitStatusExt::signal(&out.status) == Some(libc::SIGKILL)
}

/// Copies a folder tree (an experiment, to damage the copy).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Cuts `file` to `len` bytes.
pub fn truncate(file: &Path, len: u64) {
    let f = std::fs::OpenOptions::new().write(true).open(file).unwrap();
    f.set_len(len).unwrap();
}

/// Runs the sweep of `spec` (its kill switch armed in `tmp`) once per entry of `gaps`, each
/// run killed with SIGKILL by the trial acknowledged `gap` results after the run starts; fails
/// unless every run was killed. The sweep is left unfinished, for a last `tune resume`.
///
/// Only for sweeps whose work does not depend on timing (one slot, or decisions replayed in
/// order): elsewhere a run may end before it acknowledges `gap` more results.
pub fn run_with_kills_at(spec: &Path, dir: &Path, tmp: &Path, gaps: &[usize]) {
    for (round, &gap) in gaps.iter().enumerate() {
        let due = acked_so_far(tmp) + gap;
        run_until_killed(spec, dir, tmp, round, &due.to_string());
    }
}

/// As [`run_with_kills_at`], each run killed by the first trial acknowledged at a step of at
/// least `steps[round]`. For sweeps whose total work depends on timing (asynchronous PBT: an
/// exploit jumps a trial ahead, so how many results a sweep acknowledges varies) but that must
/// report each step up to their last to finish.
pub fn run_with_kills_at_steps(spec: &Path, dir: &Path, tmp: &Path, steps: &[u64]) {
    for (round, &step) in steps.iter().enumerate() {
        run_until_killed(spec, dir, tmp, round, &format!("step {step}"));
    }
}

/// One run of the sweep with a kill switch set to `due` ([`set_kill_switch`]); fails unless
/// the run was killed.
fn run_until_killed(spec: &Path, dir: &Path, tmp: &Path, round: usize, due: &str) {
    let switch = set_kill_switch(tmp, due);
    let out = run_or_resume(spec, dir).output().unwrap();
    // How it ended otherwise, and how far the acknowledgements got, for a failure to say.
    assert!(
        killed(&out),
        "round {round}: tune was not killed at acknowledgement {due} ({}, {} acknowledged, \
         kill switch {}):\n{}\n{}",
        out.status,
        acked_so_far(tmp),
        kill_switch_state(&switch),
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
}

/// Every result a trial saw acknowledged (fixture's ACK_LOG) is in the store, as reported;
/// returns how many were.
pub fn assert_acknowledged_results_kept(tmp: &Path, trials: &BTreeMap<u64, Json>) -> usize {
    let log = std::fs::read_to_string(tmp.join("acks.log")).unwrap_or_default();
    let mut n = 0;
    for line in log.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let (id, attempt, step, loss): (u64, u64, u64, f64) = (
            f[0].parse().unwrap(),
            f[1].parse().unwrap(),
            f[2].parse().unwrap(),
            f[3].parse().unwrap(),
        );
        // A step a restarted attempt redid keeps the first attempt's result (the same value:
        // the objective is deterministic).
        let kept = trials.get(&id).is_some_and(|t| {
            t["results"].as_array().unwrap().iter().any(|r| {
                r["attempt"].as_u64() <= Some(attempt)
                    && r["step"] == step
                    && r["loss"].as_f64() == Some(loss)
            })
        });
        assert!(kept, "acknowledged result lost: {line}");
        n += 1;
    }
    n
}

/// Every trial, by id, as exported.
pub fn by_id(trials: Vec<Json>) -> BTreeMap<u64, Json> {
    let mut out = BTreeMap::new();
    for t in trials {
        let id = t["id"].as_u64().unwrap();
        assert!(out.insert(id, t).is_none(), "duplicate id {id}");
    }
    assert!(
        out.keys().copied().eq(0..out.len() as u64),
        "ids are dense: {:?}",
        out.keys()
    );
    out
}

/// A PBT population of 8 checkpointing trials of 30 steps (`sleep` seconds each), all at
/// once, exploiting every 3 steps: what [`assert_pbt_consistent`] checks.
pub fn pbt_population(tmp: &Path, sleep: &str) -> PathBuf {
    write_spec(
        tmp,
        "samples = 8\nseed = 8\n[scheduler]\nkind = \"pbt\"\nperturbation_interval = 3\n[resources]\ncpu_slots = 8",
        &["--y", "{y}", "--steps", "30", "--behaviour", "ckpt", "--sleep", sleep],
        "x = { uniform = [-3.0, 3.0] }\ny = { choice = [-2.0, -1.0, 0.0, 1.0, 2.0] }",
    )
}

/// A PBT sweep of `samples` trials of cli/tests/fixtures/objective.py (params x and y), resumed
/// to its end: every trial completed, every value it reported computed from params it had (its
/// own or an exploit's), its params inside the space, and no exploit left half-applied.
pub fn assert_pbt_consistent(spec: &Path, dir: &Path, samples: u64) {
    assert_pbt_trials_consistent(spec, dir, &export_json(dir), samples);
}

/// [`assert_pbt_consistent`] on `trials` (exported from wherever they are kept), whose
/// checkpoint folders are under `dir`.
pub fn assert_pbt_trials_consistent(spec: &Path, dir: &Path, trials: &[Json], samples: u64) {
    let (parsed, _) = tune::ExperimentSpec::read(spec).unwrap();
    assert_eq!(trials.len() as u64, samples);
    for t in trials {
        assert_eq!(t["status"], "completed", "trial {}", t["id"]);
        let lineage = t["lineage"].as_array().cloned().unwrap_or_default();
        // Every params set the trial ever had, and every value it reported came from one of them.
        let mut had: Vec<&Json> = lineage.iter().map(|l| &l["previous"]).collect();
        had.push(&t["params"]);
        for l in &lineage {
            assert!(l["from"].as_u64().unwrap() < samples);
        }
        for r in t["results"].as_array().unwrap() {
            let step = r["step"].as_u64().unwrap();
            let matches = had.iter().any(|p| {
                r["loss"].as_f64()
                    == Some(quadratic(
                        p["x"].as_f64().unwrap(),
                        p["y"].as_f64().unwrap(),
                        step,
                    ))
            });
            assert!(matches, "trial {}: {r} from none of {had:?}", t["id"]);
        }
        let params: tune::Params = serde_json::from_value(t["params"].clone()).unwrap();
        for p in parsed.space.params() {
            assert!(p.domain.contains(params.get(&p.name).unwrap()));
        }
    }
    // Nothing was left half-applied: no staged checkpoint remains.
    let staged: Vec<_> = std::fs::read_dir(dir.join("trials"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".exploit"))
        .collect();
    assert!(staged.is_empty(), "{staged:?}");
}

/// Processes whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(marker) {
                found.push(format!(
                    "{}: {cmdline}",
                    entry.file_name().to_string_lossy()
                ));
            }
        }
    }
    found
}

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A spec file running cli/tests/fixtures/objective.py with extra argv `extra`, and a `[space]`
/// of `space` (TOML lines); `top` is added to the top-level keys.
pub fn write_spec(dir: &Path, top: &str, extra: &[&str], space: &str) -> PathBuf {
    let objective = fixture("objective.py");
    let mut argv = vec![
        "python3".to_string(),
        objective.display().to_string(),
        "--x".into(),
        "{x}".into(),
    ];
    argv.extend(extra.iter().map(|s| s.to_string()));
    let argv: Vec<String> = argv.iter().map(|a| format!("{a:?}")).collect();
    let text = format!(
        "name = \"t\"\nmetric = \"loss\"\n{top}\n\n[objective]\ncommand = [{}]\n\n[space]\n{space}\n",
        argv.join(", ")
    );
    let path = dir.join("space.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs `spec` into `dir` until its fixture kills tune (`--kill-tune-at`), then resumes the
/// sweep to its end.
pub fn killed_then_resumed(spec: &Path, dir: &Path) {
    let killed = tune_run(spec, dir).output().unwrap();
    assert!(!killed.status.success(), "the fixture did not kill tune");
    run_ok(tune().arg("resume").arg(dir));
}

/// Asserts that some trial ended in each of `statuses`.
pub fn assert_some_trial_in_each(trials: &[Json], statuses: &[&str]) {
    let ended: Vec<&str> = trials
        .iter()
        .map(|t| t["status"].as_str().unwrap())
        .collect();
    for s in statuses {
        assert!(ended.contains(s), "no {s} trial in {ended:?}");
    }
}

pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{:?} failed: {}\nstdout: {}\nstderr: {}",
        cmd,
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn export_json(dir: &Path) -> Vec<Json> {
    let out = run_ok(tune().arg("export").arg(dir).args(["--format", "json"]));
    match serde_json::from_slice(&out.stdout).unwrap() {
        Json::Array(v) => v,
        other => panic!("export is not an array: {other}"),
    }
}

/// The objective of cli/tests/fixtures/objective.py, computed the same way.
pub fn quadratic(x: f64, y: f64, step: u64) -> f64 {
    (x - 1.0) * (x - 1.0) + (y + 2.0) * (y + 2.0) + 1.0 / step as f64
}

/// Waits until the running sweep in `dir` has stored `n` results (a trial holds after them).
pub fn wait_for_results(dir: &Path, n: usize) {
    loop {
        let out = tune().arg("export").arg(dir).output().unwrap();
        if out.status.success() {
            let trials: Vec<Json> = serde_json::from_slice(&out.stdout).unwrap_or_default();
            let results: usize = trials
                .iter()
                .map(|t| t["results"].as_array().map_or(0, Vec::len))
                .sum();
            if results >= n {
                return;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The trial with the lowest `value` of `trials` (each must have one).
pub fn lowest_value<'a>(trials: impl IntoIterator<Item = &'a Json>) -> &'a Json {
    trials
        .into_iter()
        .min_by(|a, b| {
            a["value"]
                .as_f64()
                .unwrap()
                .total_cmp(&b["value"].as_f64().unwrap())
        })
        .expect("a trial")
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A trial's exported steps, in the order its results were stored.
pub fn steps(t: &Json) -> Vec<u64> {
    t["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["step"].as_u64().unwrap())
        .collect()
}

/// One trial as decided: its params, status and (step, loss) results.
pub type Decided = (Json, Json, Vec<(u64, f64)>);

/// What a sweep decided, trial by trial (from an export).
pub fn outcome(trials: &[Json]) -> Vec<Decided> {
    trials
        .iter()
        .map(|t| {
            let results = t["results"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| (r["step"].as_u64().unwrap(), r["loss"].as_f64().unwrap()))
                .collect();
            (t["params"].clone(), t["status"].clone(), results)
        })
        .collect()
}

/// One band of HyperBand, R = 9, eta = 3 (17 trials), on one slot, of checkpointing command
/// trials with the kill switch armed: the same results in the same order on every run.
pub fn hyperband_band(tmp: &Path) -> PathBuf {
    let spec = write_spec(
        tmp,
        "samples = 17\nseed = 3\n[scheduler]\nkind = \"hyperband\"\nmax_t = 9\nreduction_factor = 3\n[resources]\ncpu_slots = 1",
        &["--y", "{y}", "--steps", "9", "--behaviour", "ckpt"],
        "x = { uniform = [-3.0, 3.0] }\ny = { uniform = [-3.0, 3.0] }",
    );
    arm_kill_switch(&spec, tmp);
    spec
}

/// What [`hyperband_band`] decides uninterrupted, run in a folder of its own (its trials log
/// their acknowledgements there, apart from the run under test).
pub fn uninterrupted_band() -> Vec<Decided> {
    let reference = tempfile::tempdir().unwrap();
    let whole = reference.path().join("whole");
    run_ok(&mut tune_run(&hyperband_band(reference.path()), &whole));
    outcome(&export_json(&whole))
}

/// Runs `command()` (a run, then resumes) with SIGKILL armed at the n-th time the process
/// reaches failure point `point`, n cycling through 1, 3, 17, 7, 29 (so that each round gets
/// further), until a round runs to the end; returns how many rounds were killed.
pub fn kill_at_point_until_done(point: &str, mut command: impl FnMut() -> Command) -> usize {
    let (mut kills, mut rounds) = (0, 0);
    for n in [1, 3, 17, 7, 29].into_iter().cycle() {
        rounds += 1;
        assert!(rounds < 200, "{point}: no end after {rounds} rounds");
        let out = command()
            .env("TUNE_FAILPOINTS", format!("{point}=kill@{n}"))
            .stdout(std::process::Stdio::null())
            .output()
            .unwrap();
        if killed(&out) {
            kills += 1;
            continue;
        }
        assert!(out.status.success(), "{point}: {}", stderr(&out));
        break;
    }
    kills
}

pub const ASHA: &str =
    "[scheduler]\nkind = \"asha\"\nmax_t = 9\ngrace_period = 1\nreduction_factor = 3";

pub fn asha_spec(dir: &Path, extra: &[&str], slots: usize) -> std::path::PathBuf {
    let mut argv = vec!["--y", "{y}", "--steps", "9"];
    argv.extend_from_slice(extra);
    write_spec(
        dir,
        &format!("samples = 24\nseed = 4\n{ASHA}\n[resources]\ncpu_slots = {slots}"),
        &argv,
        "x = { uniform = [-3.0, 3.0] }\ny = { uniform = [-3.0, 3.0] }",
    )
}

/// Replays the exported results, in the order the coordinator received them, through a fresh
/// ASHA; returns the decision for each (trial, step).
pub fn replay_asha(trials: &[Json]) -> BTreeMap<(u64, u64), Decision> {
    let mut results: Vec<(u64, u64, u64, f64)> = trials
        .iter()
        .flat_map(|t| {
            let id = t["id"].as_u64().unwrap();
            t["results"].as_array().unwrap().iter().map(move |r| {
                (
                    r["seq"].as_u64().unwrap(),
                    id,
                    r["step"].as_u64().unwrap(),
                    r["loss"].as_f64().unwrap(),
                )
            })
        })
        .collect();
    results.sort_by_key(|r| r.0);
    let config = AshaConfig {
        max_t: 9,
        grace_period: Some(1),
        reduction_factor: 3,
        ..AshaConfig::default()
    };
    let mut asha = Asha::new(config, Mode::Min, 4);
    let mut decisions = BTreeMap::new();
    for (_, id, step, loss) in results {
        let d = asha.on_result(id, step, loss);
        if d != Decision::Continue {
            asha.on_complete(id, Some((step, loss)));
        }
        decisions.insert((id, step), d);
    }
    decisions
}

/// The 24 trials of an [`asha_spec`] sweep ended as the algorithm decides, with rungs that cut
/// (at least 8 stopped) and at least one trial run to the end.
pub fn assert_asha_sweep(trials: &[Json]) {
    assert_eq!(trials.len(), 24);
    let (stopped, completed) = assert_asha_applied(trials);
    assert!(
        stopped >= 8 && completed >= 1,
        "{stopped} stopped, {completed} completed"
    );
}

/// Every trial ended as the replayed ASHA says, and reported nothing after its decision.
pub fn assert_asha_applied(trials: &[Json]) -> (usize, usize) {
    let decisions = replay_asha(trials);
    let (mut stopped, mut completed) = (0, 0);
    for t in trials {
        let id = t["id"].as_u64().unwrap();
        let steps = steps(t);
        let last = *steps.last().unwrap();
        let ending = decisions[&(id, last)].clone();
        // Every earlier result was a "continue".
        for s in &steps[..steps.len() - 1] {
            assert_eq!(
                decisions[&(id, *s)],
                Decision::Continue,
                "trial {id} step {s}"
            );
        }
        match t["status"].as_str().unwrap() {
            "stopped" => {
                assert_eq!(ending, Decision::Stop, "trial {id}");
                assert!([1, 3].contains(&last), "stopped at a rung, not {last}");
                stopped += 1;
            }
            "completed" => {
                assert_eq!((ending, last), (Decision::Complete, 9), "trial {id}");
                completed += 1;
            }
            other => panic!("trial {id} is {other}"),
        }
    }
    (stopped, completed)
}

pub fn hyperband_table(trials: &[Json]) -> ([usize; 4], usize) {
    let mut ended: BTreeMap<(String, u64), usize> = BTreeMap::new();
    for t in trials {
        let steps = steps(t);
        // Resumed from checkpoints, and killed runs restarted from theirs: every step stored
        // exactly once, in order.
        assert_eq!(
            steps,
            (1..=steps.len() as u64).collect::<Vec<_>>(),
            "trial {}",
            t["id"]
        );
        let (x, y) = (
            t["params"]["x"].as_f64().unwrap(),
            t["params"]["y"].as_f64().unwrap(),
        );
        for r in t["results"].as_array().unwrap() {
            let step = r["step"].as_u64().unwrap();
            assert_eq!(
                r["loss"].as_f64(),
                Some(quadratic(x, y, step)),
                "trial {}",
                t["id"]
            );
        }
        *ended
            .entry((
                t["status"].as_str().unwrap().to_string(),
                *steps.last().unwrap(),
            ))
            .or_default() += 1;
    }
    let count =
        |status: &str, step: u64| ended.get(&(status.to_string(), step)).copied().unwrap_or(0);
    let stopped = [1, 3, 9, 27].map(|step| count("stopped", step));
    let completed = count("completed", 81);
    assert_eq!(
        stopped.iter().sum::<usize>() + completed,
        trials.len(),
        "every trial ended at a rung: {ended:?}"
    );
    (stopped, completed)
}

/// One band of HyperBand, R = 81, eta = 3 (143 trials), of checkpointing command trials.
pub fn hyperband_band_81(tmp: &Path, seed: u64, slots: usize) -> std::path::PathBuf {
    write_spec(
        tmp,
        &format!("samples = 143\nseed = {seed}\n[scheduler]\nkind = \"hyperband\"\nmax_t = 81\nreduction_factor = 3\n[resources]\ncpu_slots = {slots}"),
        &["--y", "{y}", "--steps", "81", "--behaviour", "ckpt"],
        "x = { uniform = [-3.0, 3.0] }\ny = { uniform = [-3.0, 3.0] }",
    )
}

/// Random search + ASHA (rungs 1, 3, 9 under max_t 27) over checkpointing command trials on
/// one slot, with the kill switch armed, in `tmp`.
pub fn random_asha_to(tmp: &Path, max_t: u64) -> std::path::PathBuf {
    std::fs::create_dir_all(tmp).unwrap();
    let spec = write_spec(
        tmp,
        &format!(
            "samples = 20\nseed = 6\n[search]\nalgorithm = \"random\"\n[scheduler]\nkind = \"asha\"\n\
             max_t = {max_t}\ngrace_period = 1\nreduction_factor = 3\n[resources]\ncpu_slots = 1"
        ),
        &["--y", "{y}", "--steps", "100", "--behaviour", "ckpt"],
        "x = { uniform = [-3.0, 3.0] }\ny = { uniform = [-3.0, 3.0] }",
    );
    arm_kill_switch(&spec, tmp);
    spec
}
