//! `tune worker`: a coordinator and worker processes sharing one PostgreSQL database (the test
//! server of tests/common/pg_server.rs), killed and restarted for real.

mod common;
#[path = "common/pg_server.rs"]
mod pg_server;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// `tune run SPEC --store URL --slots 0 --no-tui`: the coordinator alone.
fn coordinator(spec: &Path, url: &str, dir: &Path) -> Command {
    let mut cmd = tune();
    cmd.arg("run")
        .arg(spec)
        .args(["--store", url, "--slots", "0", "--no-tui", "--dir"])
        .arg(dir);
    cmd
}

/// `tune worker URL --experiment t --slots N --lease L --dir DIR`.
fn worker(url: &str, slots: usize, lease: &str, dir: &Path) -> Command {
    let mut cmd = tune();
    cmd.args(["worker", url, "--experiment", "t", "--lease", lease])
        .args(["--slots", &slots.to_string(), "--dir"])
        .arg(dir)
        .env_remove("TUNE_FAILPOINTS");
    cmd
}

fn spawn(mut cmd: Command) -> Child {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for `child`; a process still running after 10 minutes is a hang: killed and failed.
fn finish(mut child: Child, what: &str) -> Output {
    let deadline = Instant::now() + Duration::from_secs(600);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().ok();
            let out = child.wait_with_output().unwrap();
            panic!("{what} hung: {}", stderr(&out));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Waits until the coordinator has created experiment `t` (workers started before it exit:
/// the experiment they name does not exist).
fn wait_for_experiment(url: &str, coordinator: &mut Child) {
    let mut db = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let created = db
            .query_opt(
                "SELECT 1 FROM tune_experiments WHERE name = 't' AND meta IS NOT NULL",
                &[],
            )
            .is_ok_and(|r| r.is_some());
        if created {
            return;
        }
        if let Some(status) = coordinator.try_wait().unwrap() {
            panic!("the coordinator ended ({status}) before creating the experiment");
        }
        assert!(
            Instant::now() < deadline,
            "the coordinator never created the experiment"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn export_in(url: &str) -> Vec<serde_json::Value> {
    let out = run_ok(tune().args(["export", "t", "--store", url, "--format", "json"]));
    match serde_json::from_slice(&out.stdout).unwrap() {
        serde_json::Value::Array(v) => v,
        other => panic!("export is not an array: {other}"),
    }
}

/// How many attempts a worker says it ran ("tune worker: ran N attempts").
fn attempts_ran(out: &Output) -> u64 {
    let text = stderr(out);
    text.lines()
        .find_map(|l| l.strip_prefix("tune worker: ran "))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no summary in: {text}"))
}

#[test]
fn eight_workers_race_for_1000_one_step_trials_and_each_runs_exactly_once() {
    let tmp = tempfile::tempdir().unwrap();
    let url = pg_server::fresh_database();
    let log = tmp.path().join("ran.log");
    // One report, then a line per run in the log (appends of a short line are atomic).
    let spec = tmp.path().join("space.toml");
    // `{{` is a literal brace in a command's arguments; `{x}` the parameter.
    let command = r#"echo '{{"loss": {x}}}'; echo $TUNE_TRIAL_ID $TUNE_ATTEMPT >> LOG"#
        .replace("LOG", &log.display().to_string());
    let text = format!(
        "name = \"t\"\nmetric = \"loss\"\nsamples = 1000\n\n[objective]\ncommand = [\"sh\", \"-c\", \
         {command:?}]\n\n[space]\nx = {{ uniform = [0.0, 1.0] }}\n"
    );
    std::fs::write(&spec, text).unwrap();
    let mut coord = spawn(coordinator(&spec, &url, &tmp.path().join("c")));
    wait_for_experiment(&url, &mut coord);
    let workers: Vec<Child> = (0..8)
        .map(|i| spawn(worker(&url, 1, "15", &tmp.path().join(format!("w{i}")))))
        .collect();
    let out = finish(coord, "the coordinator");
    assert!(out.status.success(), "{}", stderr(&out));
    let mut ran = 0;
    for (i, w) in workers.into_iter().enumerate() {
        let out = finish(w, "a worker");
        assert!(out.status.success(), "worker {i}: {}", stderr(&out));
        ran += attempts_ran(&out);
    }
    assert_eq!(ran, 1000);
    let mut runs: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for line in std::fs::read_to_string(&log).unwrap().lines() {
        let (id, attempt) = line.split_once(' ').unwrap();
        runs.entry(id.parse().unwrap())
            .or_default()
            .push(attempt.into());
    }
    assert_eq!(runs.len(), 1000);
    assert!(runs.values().all(|a| a == &["1"]), "a trial ran twice");
    let trials = export_in(&url);
    assert_eq!(trials.len(), 1000);
    for t in &trials {
        assert_eq!(t["status"], "completed", "{t}");
        assert_eq!(steps(t), [1], "{t}");
        assert_eq!(t["attempts"], 1, "{t}");
        assert_eq!(t["value"], t["params"]["x"], "{t}");
        assert!(t["worker"].as_str().is_some_and(|w| w.contains(':')), "{t}");
    }
}

/// Six checkpointing trials of five steps, retried once after a failure.
fn five_step_trials(tmp: &Path, extra: &[&str]) -> std::path::PathBuf {
    let mut args = vec!["--steps", "5", "--sleep", "0.05", "--behaviour", "ckpt"];
    args.extend_from_slice(extra);
    write_spec(
        tmp,
        "samples = 6\nseed = 1\nmax_failures = 1",
        &args,
        "x = { uniform = [-3.0, 3.0] }",
    )
}

#[test]
fn a_worker_killed_mid_trial_loses_it_to_another_worker_and_nothing_is_stored_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let url = pg_server::fresh_database();
    // Trial 0's first attempt SIGKILLs its worker after step 2's decision.
    let spec = five_step_trials(tmp.path(), &["--kill-tune-at", "2"]);
    let mut coord = spawn(coordinator(&spec, &url, &tmp.path().join("c")));
    wait_for_experiment(&url, &mut coord);
    let workers: Vec<Child> = (0..3)
        .map(|i| spawn(worker(&url, 1, "1", &tmp.path().join(format!("w{i}")))))
        .collect();
    let out = finish(coord, "the coordinator");
    assert!(out.status.success(), "{}", stderr(&out));
    let outs: Vec<Output> = workers.into_iter().map(|w| finish(w, "a worker")).collect();
    assert_eq!(outs.iter().filter(|o| killed(o)).count(), 1);
    assert!(outs
        .iter()
        .filter(|o| !killed(o))
        .all(|o| o.status.success()));
    let trials = by_id(export_in(&url));
    assert_eq!(trials.len(), 6);
    for t in trials.values() {
        assert_eq!(t["status"], "completed", "{t}");
        // Dense and stored once: the retry's redone steps 1 and 2 were not taken again.
        assert_eq!(steps(t), [1, 2, 3, 4, 5], "{t}");
    }
    let first = &trials[&0];
    assert_eq!(first["attempts"], 2, "{first}");
    let attempts: Vec<u64> = first["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["attempt"].as_u64().unwrap())
        .collect();
    assert_eq!(attempts, [1, 1, 2, 2, 2]);
}

#[test]
fn a_killed_coordinator_is_resumed_elsewhere_while_workers_keep_their_trials() {
    let tmp = tempfile::tempdir().unwrap();
    let url = pg_server::fresh_database();
    let spec = five_step_trials(tmp.path(), &[]);
    // SIGKILL at the 7th acknowledgement: trials are running, none has finished.
    let mut coord = coordinator(&spec, &url, &tmp.path().join("c"))
        .env("TUNE_FAILPOINTS", "ack.after=kill@7")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_experiment(&url, &mut coord);
    let workers: Vec<Child> = (0..2)
        .map(|i| spawn(worker(&url, 3, "15", &tmp.path().join(format!("w{i}")))))
        .collect();
    let out = finish(coord, "the coordinator");
    assert!(killed(&out), "{}", stderr(&out));
    let mut db = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let running: Vec<i64> = db
        .query(
            "SELECT trial FROM tune_attempts WHERE state = 'running' ORDER BY trial",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(!running.is_empty());
    // Another process takes over, on another folder: the workers' trials go on as they are.
    let out = run_ok(
        tune()
            .args([
                "resume", "t", "--store", &url, "--slots", "0", "--no-tui", "--dir",
            ])
            .arg(tmp.path().join("elsewhere")),
    );
    assert!(out.status.success());
    for w in workers {
        let out = finish(w, "a worker");
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let trials = by_id(export_in(&url));
    assert_eq!(trials.len(), 6);
    for t in trials.values() {
        assert_eq!(t["status"], "completed", "{t}");
        assert_eq!(steps(t), [1, 2, 3, 4, 5], "{t}");
    }
    for id in running {
        let t = &trials[&(id as u64)];
        assert_eq!(t["attempts"], 1, "trial {id} was running at the kill: {t}");
    }
}

#[test]
fn bad_worker_input_is_a_clear_error_and_exit_code() {
    let tmp = tempfile::tempdir().unwrap();
    let url = pg_server::fresh_database();
    let out = worker(&url, 1, "15", tmp.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("holds no experiment named \"t\""),
        "{}",
        stderr(&out)
    );
    let out = worker(&url, 1, "0", tmp.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--lease"), "{}", stderr(&out));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nowhere = format!("postgres://tune:secret@127.0.0.1:{port}/tune");
    let out = worker(&nowhere, 1, "15", tmp.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("127.0.0.1:{port}")),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("secret"), "{}", stderr(&out));
    // No database, no remote slots: 0 local slots would run nothing.
    let spec = five_step_trials(tmp.path(), &[]);
    let out = tune()
        .arg("run")
        .arg(&spec)
        .args(["--slots", "0", "--no-tui", "--dir"])
        .arg(tmp.path().join("d"))
        .env_remove("TUNE_STORE")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--store"), "{}", stderr(&out));
    assert!(!tmp.path().join("d").exists());
}
