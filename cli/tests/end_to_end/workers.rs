//! `tune worker`: a coordinator and worker processes sharing one PostgreSQL database (the test
//! server of testkit/src/pg_server.rs), killed and restarted for real.

use crate::common;
use tune_testkit::pg_server;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// `tune run SPEC --store URL --slots 0 --no-tui`: the coordinator alone.
pub(crate) fn coordinator(spec: &Path, url: &str, dir: &Path) -> Command {
    let mut cmd = tune();
    cmd.arg("run")
        .arg(spec)
        .args(["--store", url, "--slots", "0", "--no-tui", "--dir"])
        .arg(dir);
    cmd
}

/// `tune worker URL --experiment t --slots N --lease L --dir DIR`.
pub(crate) fn worker(url: &str, slots: usize, lease: &str, dir: &Path) -> Command {
    let mut cmd = tune();
    cmd.args(["worker", url, "--experiment", "t", "--lease", lease])
        .args(["--slots", &slots.to_string(), "--dir"])
        .arg(dir)
        .env_remove("TUNE_FAILPOINTS");
    cmd
}

pub(crate) fn spawn(mut cmd: Command) -> Proc {
    Proc(Some(
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ))
}

/// A process this test started: killed if the test ends (a failed assertion) before
/// [`finish`] waited for it, so that a failure leaves no coordinator or worker running.
pub(crate) struct Proc(Option<Child>);

impl std::ops::Deref for Proc {
    type Target = Child;
    fn deref(&self) -> &Child {
        self.0.as_ref().expect("a running process")
    }
}

impl std::ops::DerefMut for Proc {
    fn deref_mut(&mut self) -> &mut Child {
        self.0.as_mut().expect("a running process")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Waits for `child`; a process still running after 10 minutes is a hang: killed and failed.
pub(crate) fn finish(mut proc: Proc, what: &str) -> Output {
    let mut child = proc.0.take().expect("a running process");
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

/// [`finish`], and the process must have exited 0 (else its stderr is the failure).
pub(crate) fn finish_ok(proc: Proc, what: &str) -> Output {
    let out = finish(proc, what);
    assert!(out.status.success(), "{what}: {}", stderr(&out));
    out
}

/// Waits until the coordinator has created experiment `t` (workers started before it exit:
/// the experiment they name does not exist).
pub(crate) fn wait_for_experiment(url: &str, coordinator: &mut Child) {
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

/// Waits until a worker serving every sweep has registered (having met the sweeps there are).
pub(crate) fn wait_for_shared_worker(url: &str) {
    let mut db = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while db
        .query_opt("SELECT 1 FROM tune_workers WHERE experiment IS NULL", &[])
        .unwrap()
        .is_none()
    {
        assert!(
            Instant::now() < deadline,
            "the shared worker never registered"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(crate) fn export_in(url: &str) -> Vec<serde_json::Value> {
    let out = run_ok(tune().args(["export", "t", "--store", url, "--format", "json"]));
    match serde_json::from_slice(&out.stdout).unwrap() {
        serde_json::Value::Array(v) => v,
        other => panic!("export is not an array: {other}"),
    }
}

/// How many attempts a worker says it ran ("tune worker: ran N attempts").
pub(crate) fn attempts_ran(out: &Output) -> u64 {
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
    let workers: Vec<Proc> = (0..8)
        .map(|i| spawn(worker(&url, 1, "15", &tmp.path().join(format!("w{i}")))))
        .collect();
    finish_ok(coord, "the coordinator");
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
pub(crate) fn five_step_trials(tmp: &Path, extra: &[&str]) -> std::path::PathBuf {
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
    // Worker A claims trial 0 and is killed; its lease (3 s: a live worker would have to stall
    // for over 2 s to lose one) decides how soon the others take it. B and C start after.
    let a = spawn(worker(&url, 1, "3", &tmp.path().join("a")));
    let mut db = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    wait_until(
        &mut db,
        "SELECT EXISTS (SELECT 1 FROM tune_attempts WHERE trial = 0 AND state <> 'offered')",
        "A claimed trial 0",
    );
    let mut workers = vec![a];
    workers.extend((0..2).map(|i| spawn(worker(&url, 1, "15", &tmp.path().join(format!("w{i}"))))));
    finish_ok(coord, "the coordinator");
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

/// Starts worker A (lease 3 s: a live worker would have to stall for over 2 s to lose one) and
/// waits until it claimed trial 0, then `others` workers of lease `others_lease`; all of one
/// slot.
fn a_first_then_others(url: &str, tmp: &Path, others: usize, others_lease: &str) -> Vec<Proc> {
    let a = spawn(worker(url, 1, "3", &tmp.join("a")));
    let mut db = postgres::Client::connect(url, postgres::NoTls).unwrap();
    wait_until(
        &mut db,
        "SELECT EXISTS (SELECT 1 FROM tune_attempts WHERE trial = 0 AND state <> 'offered')",
        "A claimed trial 0",
    );
    let mut workers = vec![a];
    workers.extend(
        (0..others).map(|i| spawn(worker(url, 1, others_lease, &tmp.join(format!("w{i}"))))),
    );
    workers
}

#[test]
fn a_lost_machine_is_not_a_failed_trial_its_trial_runs_again_without_max_failures() {
    let tmp = tempfile::tempdir().unwrap();
    let url = pg_server::fresh_database();
    // 60 trials on three workers, no `max_failures`: trial 0's first attempt SIGKILLs its
    // worker (A) after step 2's decision.
    let spec = write_spec(
        tmp.path(),
        "samples = 60\nseed = 1",
        &["--steps", "3", "--behaviour", "ckpt", "--kill-tune-at", "2"],
        "x = { uniform = [-3.0, 3.0] }",
    );
    let mut coord = spawn(coordinator(&spec, &url, &tmp.path().join("c")));
    wait_for_experiment(&url, &mut coord);
    let workers = a_first_then_others(&url, tmp.path(), 2, "15");
    let log = stderr(&finish_ok(coord, "the coordinator"));
    let outs: Vec<Output> = workers.into_iter().map(|w| finish(w, "a worker")).collect();
    assert_eq!(outs.iter().filter(|o| killed(o)).count(), 1);
    let trials = by_id(export_in(&url));
    assert_eq!(trials.len(), 60);
    for t in trials.values() {
        assert_eq!(t["status"], "completed", "{t}");
        assert_eq!(steps(t), [1, 2, 3], "{t}");
    }
    let first = &trials[&0];
    assert_eq!(first["attempts"], 2, "{first}");
    assert_eq!(first["lost_attempts"], 1, "{first}");
    assert!(
        log.contains("trial 0: its machine was lost: worker ")
            && log.contains("running it again (1 of max_lost_attempts = 3)"),
        "{log}"
    );
    assert!(
        trials
            .values()
            .all(|t| t.get("lost_attempts").is_none() || t["id"] == 0),
        "only trial 0 lost its machine"
    );
}

#[test]
fn a_trial_that_loses_its_machine_each_time_fails_after_max_lost_attempts() {
    let tmp = tempfile::tempdir().unwrap();
    let url = pg_server::fresh_database();
    // Every attempt of trial 0 SIGKILLs its worker after step 1's decision: A's, then that of
    // whichever of B and C takes it next; the other finishes the sweep.
    let spec = write_spec(
        tmp.path(),
        "samples = 3\nseed = 1\nmax_failures = 5\nmax_lost_attempts = 1",
        &[
            "--steps",
            "2",
            "--kill-tune-at",
            "1",
            "--kill-every-attempt",
        ],
        "x = { uniform = [-3.0, 3.0] }",
    );
    let mut coord = spawn(coordinator(&spec, &url, &tmp.path().join("c")));
    wait_for_experiment(&url, &mut coord);
    let workers = a_first_then_others(&url, tmp.path(), 2, "3");
    let log = stderr(&finish(coord, "the coordinator"));
    let outs: Vec<Output> = workers.into_iter().map(|w| finish(w, "a worker")).collect();
    assert_eq!(outs.iter().filter(|o| killed(o)).count(), 2);
    let trials = by_id(export_in(&url));
    let first = &trials[&0];
    // `max_failures = 5` would have retried a failure: a lost machine is counted apart.
    assert_eq!(first["status"], "failed", "{first}");
    assert_eq!(first["attempts"], 2, "{first}");
    assert_eq!(first["lost_attempts"], 2, "{first}");
    let error = first["error"].as_str().unwrap();
    assert!(
        error.starts_with("its machine was lost: worker ")
            && error.ends_with("(2 lost attempts, more than max_lost_attempts = 1)"),
        "{error}"
    );
    assert!(
        log.contains("trial 0: its machine was lost: worker ")
            && log.contains("failed after 2 lost attempts (max_lost_attempts = 1)"),
        "{log}"
    );
    for id in [1, 2] {
        assert_eq!(trials[&id]["status"], "completed", "{}", trials[&id]);
    }
}

#[test]
fn a_killed_coordinator_is_resumed_elsewhere_while_workers_keep_their_trials() {
    let tmp = tempfile::tempdir().unwrap();
    let url = pg_server::fresh_database();
    let spec = five_step_trials(tmp.path(), &[]);
    // SIGKILL at the 7th acknowledgement: trials are running, none has finished.
    let mut coord = Proc(Some(
        coordinator(&spec, &url, &tmp.path().join("c"))
            .env("TUNE_FAILPOINTS", "ack.after=kill@7")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    wait_for_experiment(&url, &mut coord);
    let workers: Vec<Proc> = (0..2)
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
    // `tune status` lists the workers, what they run, and where each running trial runs.
    wait_until(
        &mut db,
        "SELECT count(*) = 2 FROM tune_workers",
        "both workers registered",
    );
    let out = run_ok(tune().args(["status", "t", "--store", &url]));
    let status = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        status
            .matches(" 3 trials at once, serving t, last heartbeat ")
            .count(),
        2,
        "{status}"
    );
    for id in &running {
        let row = status
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{id} ")))
            .unwrap_or_else(|| panic!("trial {id} in {status}"));
        assert!(row.contains("  @") && row.contains("/cpu:"), "{row}");
    }
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
        finish_ok(w, "a worker");
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
fn status_watch_and_export_name_the_worker_of_each_trial_and_result() {
    let tmp = tempfile::tempdir().unwrap();
    let url = pg_server::fresh_database();
    // Both trials wait after step 1's decision until the test has looked.
    let hold = tmp.path().join("go");
    let spec = write_spec(
        tmp.path(),
        "samples = 2\nseed = 1",
        &["--steps", "2", "--hold", hold.to_str().unwrap()],
        "x = { uniform = [-3.0, 3.0] }",
    );
    let mut coord = spawn(coordinator(&spec, &url, &tmp.path().join("c")));
    wait_for_experiment(&url, &mut coord);
    // This machine has no GPU: the worker publishes the one the test gives it, as it would
    // its NVML sample.
    let gpu = r#"[{"index":0,"name":"NVIDIA H200","busy_percent":87,"memory_used_bytes":3221225472,"memory_total_bytes":150323855360}]"#;
    let mut cmd = worker(&url, 2, "15", &tmp.path().join("w"));
    cmd.env("TUNE_TEST_GPU_USE", gpu);
    let w = spawn(cmd);
    let mut db = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    wait_until(
        &mut db,
        "SELECT count(*) = 2 FROM tune_reports WHERE heard IS NOT NULL",
        "both trials decided at step 1",
    );
    let gpu_line = "gpu 0 NVIDIA H200 · 87% busy · 3.0 / 140.0 GiB";
    let id: String = db
        .query_one("SELECT id FROM tune_workers", &[])
        .unwrap()
        .get(0);

    let out = run_ok(tune().args(["status", "t", "--store", &url]));
    let status = String::from_utf8_lossy(&out.stdout);
    assert!(status.contains("running now"), "{status}");
    assert!(status.contains("coordinator: "), "{status}");
    assert!(
        status.contains(&format!(
            "  {id} 2 trials at once, serving t, last heartbeat "
        )) && status.contains(&format!("running trials: 0, 1\n    {gpu_line}\n")),
        "{status}"
    );
    // Not a terminal: one frame of the dashboard, read from the database.
    let out = run_ok(tune().args(["watch", "t", "--store", &url]));
    let frame = String::from_utf8_lossy(&out.stdout);
    assert!(frame.contains(&format!("{id} · 2/2 busy")), "{frame}");
    // (The panel may wrap the line's end.)
    assert!(frame.contains("  gpu 0 NVIDIA H200 · 87% busy"), "{frame}");
    assert!(
        frame.lines().next().unwrap().ends_with("· running"),
        "{frame}"
    );
    assert!(!frame.contains("sweep interrupted"), "{frame}");
    let header = frame
        .lines()
        .find(|l| l.contains(" status ") && l.contains(" params"))
        .unwrap_or_else(|| panic!("no table header in {frame}"));
    assert!(header.contains(" worker "), "{header}");
    let rows = frame
        .lines()
        .filter(|l| l.contains(" running ") && l.contains(&id))
        .count();
    assert_eq!(rows, 2, "{frame}");

    std::fs::write(&hold, "").unwrap();
    finish_ok(coord, "the coordinator");
    finish_ok(w, "the worker");
    let trials = export_in(&url);
    assert_eq!(trials.len(), 2);
    for t in &trials {
        assert_eq!(t["worker"], id.as_str(), "{t}");
        let results = t["results"].as_array().unwrap();
        assert_eq!(results.len(), 2, "{t}");
        assert!(results.iter().all(|r| r["worker"] == id.as_str()), "{t}");
    }
    // Finished: no coordinator holds it.
    let out = run_ok(tune().args(["status", "t", "--store", &url]));
    let status = String::from_utf8_lossy(&out.stdout);
    assert!(!status.contains("coordinator: "), "{status}");
}

#[test]
fn a_worker_started_before_its_coordinator_waits_for_the_experiment() {
    let tmp = tempfile::tempdir().unwrap();
    let url = pg_server::fresh_database();
    let spec = write_spec(
        tmp.path(),
        "samples = 3\nseed = 1",
        &["--steps", "2"],
        "x = { uniform = [-3.0, 3.0] }",
    );
    let mut cmd = worker(&url, 2, "15", &tmp.path().join("w"));
    cmd.args(["--wait", "300"]);
    let w = spawn(cmd);
    // The worker is connected (and waiting) before the experiment exists.
    let mut db = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    wait_until(
        &mut db,
        "SELECT count(*) > 0 FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
        "the worker connected",
    );
    let exists: bool = db
        .query_one("SELECT to_regclass('tune_experiments') IS NOT NULL", &[])
        .unwrap()
        .get(0);
    if exists {
        let made: i64 = db
            .query_one(
                "SELECT count(*) FROM tune_experiments WHERE meta IS NOT NULL",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(made, 0);
    }
    let coord = spawn(coordinator(&spec, &url, &tmp.path().join("c")));
    finish_ok(coord, "the coordinator");
    let out = finish_ok(w, "the worker");
    assert_eq!(attempts_ran(&out), 3);
}

#[test]
fn a_coordinator_that_loses_its_database_ends_resumable_and_its_workers_trial_is_adopted() {
    let tmp = tempfile::tempdir().unwrap();
    let url = pg_server::fresh_database();
    let proxy = Proxy::new(&url);
    let hold = tmp.path().join("go");
    let spec = write_spec(
        tmp.path(),
        "samples = 1\nseed = 1",
        &["--steps", "2", "--hold", hold.to_str().unwrap()],
        "x = { uniform = [-3.0, 3.0] }",
    );
    // The coordinator reaches the database through the proxy; the worker directly.
    let mut coord = spawn(coordinator(&spec, &proxy.url, &tmp.path().join("c")));
    wait_for_experiment(&url, &mut coord);
    let w = spawn(worker(&url, 1, "15", &tmp.path().join("w")));
    let mut db = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    wait_until(
        &mut db,
        "SELECT count(*) = 1 FROM tune_reports WHERE heard IS NOT NULL",
        "the trial decided at step 1",
    );
    // Nothing more happens in the sweep until the hold is lifted: only the coordinator's own
    // look at the database can tell it is gone.
    proxy.sever();
    let out = finish(coord, "the coordinator");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the database has not answered")
            && stderr(&out).contains("tune resume t --store URL"),
        "{}",
        stderr(&out)
    );
    // Resumed directly: the worker's attempt is adopted and finishes once the hold is lifted.
    let mut resume = tune();
    resume
        .args([
            "resume", "t", "--store", &url, "--slots", "0", "--no-tui", "--dir",
        ])
        .arg(tmp.path().join("c2"));
    let resumed = spawn(resume);
    // Before or after the new coordinator has started: step 2's report waits for it either way.
    std::fs::write(&hold, "").unwrap();
    finish_ok(resumed, "the resumed coordinator");
    finish_ok(w, "the worker");
    let trials = export_in(&url);
    assert_eq!(trials[0]["status"], "completed", "{}", trials[0]);
    assert_eq!(trials[0]["attempts"], 1, "{}", trials[0]);
    assert_eq!(steps(&trials[0]), [1, 2]);
}

/// `url` with its login replaced by `login` (`user:password`, or as it was with `None`) and
/// its database by `database`.
fn url_with(url: &str, login: Option<&str>, database: Option<&str>) -> String {
    let config: postgres::Config = url.parse().unwrap();
    let host = match &config.get_hosts()[0] {
        postgres::config::Host::Tcp(h) => h.clone(),
        postgres::config::Host::Unix(p) => p.display().to_string(),
    };
    let login = login.map(String::from).unwrap_or_else(|| {
        let user = config.get_user().unwrap_or("postgres");
        match config.get_password() {
            Some(p) => format!("{user}:{}", String::from_utf8_lossy(p)),
            None => user.to_string(),
        }
    });
    format!(
        "postgres://{login}@{host}:{}/{}",
        config.get_ports().first().copied().unwrap_or(5432),
        database.unwrap_or_else(|| config.get_dbname().unwrap_or("postgres"))
    )
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
    let out = worker(&url, 1, "15", tmp.path())
        .args(["--wait", "nan"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--wait"), "{}", stderr(&out));
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
    // Credentials the server refuses, and a database it does not have: the URL is at fault.
    let stranger = url_with(&url, Some("tune_nobody:wrong"), None);
    let out = worker(&stranger, 1, "15", tmp.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the server refused access") && !stderr(&out).contains("wrong"),
        "{}",
        stderr(&out)
    );
    let missing = url_with(&url, None, Some("tune_no_such_database"));
    let out = tune()
        .args(["status", "t", "--store", &missing])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the server refused access")
            && stderr(&out).contains("tune_no_such_database"),
        "{}",
        stderr(&out)
    );
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

/// A TCP proxy on loopback in front of the database, which a test can pause: bytes are held,
/// not forwarded (a network that stalls), until it resumes.
struct Proxy {
    url: String,
    paused: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Set by `sever`: connections are closed, new ones refused.
    severed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    streams: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl Proxy {
    fn new(url: &str) -> Proxy {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let scheme_end = url.find("://").unwrap() + 3;
        let authority_end = url[scheme_end..].find('/').unwrap() + scheme_end;
        let authority = &url[scheme_end..authority_end];
        let (user, host) = authority.rsplit_once('@').unwrap_or(("", authority));
        let target = if host.contains(':') {
            host.to_string()
        } else {
            format!("{host}:5432")
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let paused = Arc::new(AtomicBool::new(false));
        let flag = paused.clone();
        let severed = Arc::new(AtomicBool::new(false));
        let streams = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (cut, held) = (severed.clone(), streams.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if cut.load(Ordering::SeqCst) {
                    continue; // dropped: closed at once
                }
                let Ok(server) = std::net::TcpStream::connect(&target) else {
                    continue;
                };
                held.lock()
                    .unwrap()
                    .extend([client.try_clone().unwrap(), server.try_clone().unwrap()]);
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let flag = flag.clone();
                    std::thread::spawn(move || {
                        use std::io::{Read, Write};
                        let mut buf = [0u8; 16384];
                        while let Ok(n) = from.read(&mut buf) {
                            if n == 0 {
                                break;
                            }
                            while flag.load(Ordering::SeqCst) {
                                std::thread::sleep(Duration::from_millis(5));
                            }
                            if to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        let at = if user.is_empty() {
            format!("127.0.0.1:{port}")
        } else {
            format!("{user}@127.0.0.1:{port}")
        };
        Proxy {
            url: format!("{}{at}{}", &url[..scheme_end], &url[authority_end..]),
            paused,
            severed,
            streams,
        }
    }

    /// The database is gone for whoever goes through the proxy: every connection is closed
    /// and new ones are refused.
    fn sever(&self) {
        self.severed
            .store(true, std::sync::atomic::Ordering::SeqCst);
        for s in self.streams.lock().unwrap().drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    fn pause(&self, on: bool) {
        self.paused.store(on, std::sync::atomic::Ordering::SeqCst);
    }

    /// Connections made through the proxy so far (each holds its two ends until severed).
    fn connections(&self) -> usize {
        self.streams.lock().unwrap().len() / 2
    }
}

#[test]
fn each_command_reading_a_sweep_in_the_database_opens_one_connection() {
    let tmp = tempfile::tempdir().unwrap();
    let url = pg_server::fresh_database();
    let spec = write_spec(
        tmp.path(),
        "samples = 3\nseed = 1",
        &["--steps", "1"],
        "x = { uniform = [-3.0, 3.0] }",
    );
    run_ok(
        tune()
            .arg("run")
            .arg(&spec)
            .args(["--store", &url, "--no-tui", "--dir"])
            .arg(tmp.path().join("c")),
    );
    let proxy = Proxy::new(&url);
    for command in [
        &["status"][..],
        &["export", "--format", "json"],
        &["check"],
        &["watch"],
        &["plot", "--out"],
    ] {
        let before = proxy.connections();
        let mut cmd = tune();
        cmd.arg(command[0]).args(["t", "--store", &proxy.url]);
        cmd.args(&command[1..]);
        if command[0] == "plot" {
            cmd.arg(tmp.path().join("report.html"));
        }
        run_ok(&mut cmd);
        // Two TCP connections make one: tune asks the server whether it answers at all
        // (pg_store's answers_within) before it connects.
        assert_eq!(proxy.connections() - before, 2, "tune {command:?}");
    }
}

/// Polls `query` (one boolean) until it is true.
fn wait_until(db: &mut postgres::Client, query: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !db.query_one(query, &[]).unwrap().get::<_, bool>(0) {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_worker_cut_off_past_its_lease_has_its_late_writes_refused_and_its_trial_runs_elsewhere() {
    let tmp = tempfile::tempdir().unwrap();
    let url = pg_server::fresh_database();
    let proxy = Proxy::new(&url);
    let spec = write_spec(
        tmp.path(),
        "samples = 1\nmax_failures = 1",
        &["--steps", "6", "--sleep", "0.3", "--behaviour", "ckpt"],
        "x = { uniform = [-3.0, 3.0] }",
    );
    let mut coord = spawn(coordinator(&spec, &url, &tmp.path().join("c")));
    wait_for_experiment(&url, &mut coord);
    let acks = tmp.path().join("acks.log");
    // Worker A reaches the database through the proxy; its trial logs each acknowledged step.
    let a = spawn({
        // A lease of 3 s: a live worker would have to stall for over 2 s to lose one.
        let mut cmd = worker(&proxy.url, 1, "3", &tmp.path().join("a"));
        cmd.env("ACK_LOG", &acks);
        cmd
    });
    let mut db = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    // After step 2 is acknowledged, A's network stalls (its next report is held in the proxy).
    let deadline = Instant::now() + Duration::from_secs(120);
    while acked_so_far(tmp.path()) < 2 {
        assert!(Instant::now() < deadline, "trial 0 never reached step 2");
        std::thread::sleep(Duration::from_millis(5));
    }
    proxy.pause(true);
    wait_until(
        &mut db,
        "SELECT EXISTS (SELECT 1 FROM tune_attempts WHERE trial = 0 AND attempt = 1 AND state = 'lost')",
        "the coordinator saw A's lease run out",
    );
    // Worker B takes the retry; once it runs, A's stalled writes reach the database: refused.
    let b = spawn(worker(&url, 1, "15", &tmp.path().join("b")));
    wait_until(
        &mut db,
        "SELECT EXISTS (SELECT 1 FROM tune_attempts WHERE trial = 0 AND attempt = 2 AND state <> 'offered')",
        "B claimed the retry",
    );
    proxy.pause(false);
    finish_ok(coord, "the coordinator");
    let (a, b) = (finish(a, "worker A"), finish(b, "worker B"));
    assert!(a.status.success(), "{}", stderr(&a));
    assert!(b.status.success(), "{}", stderr(&b));
    assert!(
        stderr(&a).contains("stopping trial 0 (attempt 1)"),
        "{}",
        stderr(&a)
    );
    assert!(
        stderr(&a).contains("(1 lost: their leases ran out)"),
        "{}",
        stderr(&a)
    );
    let trials = export_in(&url);
    let t = &trials[0];
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(t["attempts"], 2, "{t}");
    // A's steps (at least the two acknowledged before the stall; a third if it was sent before
    // the proxy paused), then B's: each step stored once, in order.
    assert_eq!(steps(t), [1, 2, 3, 4, 5, 6], "{t}");
    let attempts: Vec<u64> = t["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["attempt"].as_u64().unwrap())
        .collect();
    let from_a = attempts.iter().filter(|&&a| a == 1).count();
    assert!(from_a >= 2, "{t}");
    assert!(attempts[from_a..].iter().all(|&a| a == 2), "{t}");
    // Nothing A sent after its lease ran out got in: every report the database took from A is
    // a stored result.
    let taken: i64 = db
        .query_one(
            "SELECT count(*) FROM tune_reports WHERE trial = 0 AND attempt = 1",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(taken as usize, from_a, "a late report of A was taken");
}

/// Runs the sweep of `spec` with a coordinator alone and `workers` workers of `slots` slots,
/// each with a folder of its own, the spec's `[store] checkpoints` naming `shared` (as a
/// shared file system would be): paused trials resume, and exploits copy checkpoints, on any
/// worker. Returns the export.
fn sweep_on_workers(
    spec: &Path,
    shared: &Path,
    workers: usize,
    slots: usize,
) -> Vec<serde_json::Value> {
    share_trial_folders(spec, shared);
    let url = pg_server::fresh_database();
    let own = spec.parent().unwrap();
    let mut coord = spawn(coordinator(spec, &url, &own.join("coordinator")));
    wait_for_experiment(&url, &mut coord);
    let count = workers;
    let workers: Vec<Proc> = (0..count)
        .map(|i| spawn(worker(&url, slots, "15", &own.join(format!("worker-{i}")))))
        .collect();
    finish_ok(coord, "the coordinator");
    let mut ran = 0;
    for w in workers {
        let out = finish_ok(w, "a worker");
        ran += attempts_ran(&out);
    }
    // The trial folders are in the shared folder, none in the workers' own.
    assert!(shared.join("t").join("trials").is_dir());
    assert!((0..count).all(|i| !own.join(format!("worker-{i}")).join("t").exists()));
    let trials = export_in(&url);
    let attempts: u64 = trials.iter().map(|t| t["attempts"].as_u64().unwrap()).sum();
    assert_eq!(ran, attempts, "every attempt ran on a worker, once");
    trials
}

#[test]
fn asha_across_workers_decides_as_the_algorithm() {
    let tmp = tempfile::tempdir().unwrap();
    let trials = sweep_on_workers(
        &asha_spec(tmp.path(), &[], 1),
        &tmp.path().join("runs"),
        3,
        1,
    );
    assert_asha_sweep(&trials);
}

#[test]
fn hyperband_across_workers_matches_the_papers_band_resuming_paused_trials_anywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = hyperband_band_81(tmp.path(), 1, 1);
    let trials = sweep_on_workers(&spec, &tmp.path().join("runs"), 2, 2);
    assert_eq!(trials.len(), 143);
    // Li et al. 2017, Table 1 (R = 81, eta = 3); every step stored once, in order.
    assert_eq!(hyperband_table(&trials), ([54, 41, 24, 14], 10));
    let resumed = trials
        .iter()
        .filter(|t| t["attempts"].as_u64().unwrap() > 1)
        .count();
    assert!(resumed >= 26, "{resumed} trials resumed");
}

#[test]
fn pbt_across_workers_copies_checkpoints_between_them() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = pbt_population(tmp.path(), "0.02");
    let shared = tmp.path().join("runs");
    let trials = sweep_on_workers(&spec, &shared, 2, 4);
    assert_pbt_trials_consistent(&spec, &shared.join("t"), &trials, 8);
    let exploits: usize = trials
        .iter()
        .map(|t| t["lineage"].as_array().map_or(0, Vec::len))
        .sum();
    assert!(exploits >= 4, "{exploits} exploits");
}

#[test]
fn one_worker_without_an_experiment_serves_every_sweep_in_the_database_until_stopped() {
    let tmp = tempfile::tempdir().unwrap();
    let url = pg_server::fresh_database();
    let mut coordinators = Vec::new();
    for name in ["t", "u"] {
        let folder = tmp.path().join(name);
        std::fs::create_dir_all(&folder).unwrap();
        let spec = five_step_trials(&folder, &[]);
        let text = std::fs::read_to_string(&spec)
            .unwrap()
            .replace("name = \"t\"", &format!("name = \"{name}\""));
        std::fs::write(&spec, text).unwrap();
        let mut coord = spawn(coordinator(&spec, &url, &folder.join("c")));
        if name == "t" {
            wait_for_experiment(&url, &mut coord);
        }
        coordinators.push(coord);
    }
    let mut serving = tune();
    serving
        .args(["worker", &url, "--slots", "2", "--lease", "15", "--dir"])
        .arg(tmp.path().join("w"));
    let serving = spawn(serving);
    for c in coordinators {
        finish_ok(c, "a coordinator");
    }
    // Both sweeps are done; the worker serves on until told to stop, then exits cleanly.
    // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
    unsafe { libc::kill(serving.id() as i32, libc::SIGTERM) };
    let out = finish_ok(serving, "the worker");
    assert_eq!(attempts_ran(&out), 12);
    for name in ["t", "u"] {
        let out = run_ok(tune().args(["export", name, "--store", &url, "--format", "json"]));
        let trials: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(trials.len(), 6);
        assert!(trials.iter().all(|t| t["status"] == "completed"));
        assert!(tmp.path().join("w").join(name).join("trials").is_dir());
    }
}

/// A worker serving one sweep fuses its built-in trials as a local slot does: its one slot
/// holds the sweep's `fuse = 4` trials, trained as one model, and each trial is still exactly
/// the trial trained alone (the same sweep run here unfused, bit for bit).
#[test]
fn a_worker_fuses_the_built_in_trials_of_its_sweep_each_as_if_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let url = pg_server::fresh_database();
    let spec = wine_sweep(&tmp.path().join("fused"), 4, "");
    let mut coord = spawn(coordinator(&spec, &url, &tmp.path().join("c")));
    wait_for_experiment(&url, &mut coord);
    // The pack holds its first epoch until all four trials of the worker's one slot have
    // joined it, so that the next epoch trains them together whatever the machine's load.
    let go = tmp.path().join("go");
    let log = tmp.path().join("worker.err");
    let mut cmd = worker(&url, 1, "15", &tmp.path().join("w"));
    cmd.env("TUNE_PACK_TRACE", "1")
        .env(
            "TUNE_FAILPOINTS",
            format!("pack.epoch=wait-{}", go.display()),
        )
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let w = Proc(Some(cmd.spawn().unwrap()));
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let said = std::fs::read_to_string(&log).unwrap_or_default();
        if said.matches("a trial joined").count() >= 4 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "four trials never joined: {said}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::write(&go, "").unwrap();
    let out = finish_ok(coord, "the coordinator");
    // The coordinator runs no trial itself (`--slots 0`), so it packs none.
    assert!(
        !stderr(&out).contains("trials per slot"),
        "{}",
        stderr(&out)
    );
    let out = finish(w, "the worker");
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("tune worker: up to 4 trials per slot train as one fused model"),
        "{said}"
    );
    let fused = by_id(export_in(&url));
    assert_eq!(fused.len(), 8);
    let mut largest = 0.0f64;
    for t in fused.values() {
        assert_eq!(t["status"], "completed", "{t}");
        assert_eq!(steps(t), [1, 2, 3], "{t}");
        for r in t["results"].as_array().unwrap() {
            let k = r["trials_in_pack"].as_f64().unwrap();
            assert!((1.0..=4.0).contains(&k), "{t}");
            largest = largest.max(k);
        }
    }
    assert_eq!(
        largest, 4.0,
        "no epoch trained all four trials of the slot together"
    );
    // The same sweep on this machine, each trial alone: the same params (random search is a
    // function of seed and id) and the same epochs, to the bit.
    assert_each_as_the_sweep_alone(&fused, &tmp.path().join("alone"));
}

/// The spec of 8 mlp trials on wine, 3 epochs each, with `fuse`, and `extra` top-level
/// settings, in the folder `dir`.
fn wine_sweep(dir: &Path, fuse: u32, extra: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let spec = dir.join("space.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"t\"\nmetric = \"val_loss\"\nmode = \"min\"\nsamples = 8\nseed = 3\n{extra}\n\
             [resources]\ncpu_slots = 1\nfuse = {fuse}\n[objective]\nbuiltin = \"mlp\"\n\
             dataset = \"wine\"\nbatch_size = 16\nwidth = 12\nepochs = 3\n[space]\n\
             lr = {{ loguniform = [1e-3, 1e-1] }}\ndropout = {{ uniform = [0.0, 0.3] }}\n\
             optimizer = {{ choice = [\"sgd\", \"adamw\"] }}\n"
        ),
    )
    .unwrap();
    spec
}

/// Runs [`wine_sweep`] here, unfused, in `dir`, and checks that each of `trials` (its
/// export elsewhere) has the same params and every epoch the same, to the bit: random search
/// suggests by seed and id, and a fused trial trains as it does alone.
fn assert_each_as_the_sweep_alone(trials: &BTreeMap<u64, serde_json::Value>, dir: &Path) {
    let run = dir.join("run");
    run_ok(&mut tune_run(&wine_sweep(dir, 1, ""), &run));
    let alone = by_id(export_json(&run));
    assert_eq!(alone.len(), trials.len());
    for (id, t) in trials {
        let a = &alone[id];
        assert_eq!(t["params"], a["params"], "trial {id}");
        let (rf, ra) = (
            t["results"].as_array().unwrap(),
            a["results"].as_array().unwrap(),
        );
        assert_eq!(rf.len(), ra.len(), "trial {id}");
        for (f, a) in rf.iter().zip(ra) {
            for key in ["step", "val_loss", "val_accuracy", "train_loss", "lr"] {
                assert_eq!(f[key], a[key], "trial {id}, {key}: {f} against {a}");
            }
        }
    }
}

/// A worker killed in the middle of a pack loses all its trials to another worker, which
/// trains them on (in a pack of its own, from the sweep's shared checkpoints): every epoch
/// is stored once and is the trial's trained alone.
#[test]
fn a_fused_worker_killed_mid_pack_loses_its_trials_to_another_and_each_trains_as_if_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let url = pg_server::fresh_database();
    let shared = tmp.path().join("shared");
    let spec = wine_sweep(
        &tmp.path().join("fused"),
        4,
        &format!(
            "max_failures = 1\n[store]\ncheckpoints = {:?}",
            shared.display().to_string()
        ),
    );
    let mut coord = spawn(coordinator(&spec, &url, &tmp.path().join("c")));
    wait_for_experiment(&url, &mut coord);
    // Worker A dies (SIGKILL) as its pack is about to train its third epoch; its lease (3 s)
    // decides how soon B takes its trials. B starts once A holds some.
    let mut a = worker(&url, 1, "3", &tmp.path().join("a"));
    a.env("TUNE_FAILPOINTS", "pack.epoch=kill@3");
    let a = spawn(a);
    let mut db = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    wait_until(
        &mut db,
        "SELECT EXISTS (SELECT 1 FROM tune_attempts WHERE state <> 'offered')",
        "A claimed a trial",
    );
    let b = spawn(worker(&url, 1, "15", &tmp.path().join("b")));
    finish_ok(coord, "the coordinator");
    let (a, b) = (finish(a, "worker A"), finish(b, "worker B"));
    assert!(killed(&a), "{}", stderr(&a));
    assert!(b.status.success(), "{}", stderr(&b));
    let trials = by_id(export_in(&url));
    assert_eq!(trials.len(), 8);
    let mut retried = 0;
    for t in trials.values() {
        assert_eq!(t["status"], "completed", "{t}");
        assert_eq!(steps(t), [1, 2, 3], "{t}");
        retried += usize::from(t["attempts"].as_u64().unwrap() > 1);
    }
    assert!(retried >= 1, "no trial of the killed worker ran again");
    assert_each_as_the_sweep_alone(&trials, &tmp.path().join("alone"));
}

/// A worker serving every sweep keeps one trial per slot, whatever a sweep's `fuse` (its slots
/// are shared by sweeps that may differ), and says so.
#[test]
fn a_worker_serving_every_sweep_trains_each_trial_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let url = pg_server::fresh_database();
    let spec = tmp.path().join("space.toml");
    std::fs::write(
        &spec,
        "name = \"t\"\nmetric = \"val_loss\"\nmode = \"min\"\nsamples = 3\nseed = 3\n\
         [resources]\nfuse = 4\n[objective]\nbuiltin = \"mlp\"\ndataset = \"wine\"\n\
         batch_size = 16\nwidth = 12\nepochs = 2\n[space]\nlr = { loguniform = [1e-3, 1e-1] }\n",
    )
    .unwrap();
    let mut coord = spawn(coordinator(&spec, &url, &tmp.path().join("c")));
    wait_for_experiment(&url, &mut coord);
    let mut serving = tune();
    serving
        .args(["worker", &url, "--slots", "1", "--lease", "15", "--dir"])
        .arg(tmp.path().join("w"));
    let serving = spawn(serving);
    finish_ok(coord, "the coordinator");
    // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
    unsafe { libc::kill(serving.id() as i32, libc::SIGTERM) };
    let out = finish_ok(serving, "the worker");
    assert!(
        stderr(&out).contains("trials of \"t\" train alone here, one per slot"),
        "{}",
        stderr(&out)
    );
    let trials = export_in(&url);
    assert_eq!(trials.len(), 3);
    for t in &trials {
        assert_eq!(t["status"], "completed", "{t}");
        // Trained alone: no pack to report.
        assert!(
            t["results"]
                .as_array()
                .unwrap()
                .iter()
                .all(|r| r.get("trials_in_pack").is_none()),
            "{t}"
        );
    }
}

/// A coordinator that runs no trial (`--slots 0`) makes no data (its trace says when data is
/// made): its workers make their own. A CSV it still reads, so that a missing file is one
/// clear error there rather than one in every trial.
#[test]
fn a_coordinator_without_slots_leaves_making_the_data_to_its_workers() {
    let tmp = tempfile::tempdir().unwrap();
    let url = pg_server::fresh_database();
    let spec = wine_sweep(tmp.path(), 1, "");
    let mut coord = coordinator(&spec, &url, &tmp.path().join("c"));
    coord.env("TUNE_PACK_TRACE", "1");
    let mut coord = spawn(coord);
    wait_for_experiment(&url, &mut coord);
    let mut w = worker(&url, 1, "15", &tmp.path().join("w"));
    w.env("TUNE_PACK_TRACE", "1");
    let w = spawn(w);
    let coordinated = finish_ok(coord, "the coordinator");
    let worked = finish_ok(w, "the worker");
    assert!(
        stderr(&worked).contains("data `wine` made in"),
        "{}",
        stderr(&worked)
    );
    assert!(
        !stderr(&coordinated).contains("data `"),
        "{}",
        stderr(&coordinated)
    );
    let trials = export_in(&url);
    assert_eq!(trials.len(), 8);
    for t in &trials {
        assert_eq!(t["status"], "completed", "{t}");
        assert_eq!(t["results"].as_array().unwrap().len(), 3, "{t}");
    }
    // A CSV that is not there.
    let missing = tmp.path().join("missing.toml");
    let text = std::fs::read_to_string(&spec)
        .unwrap()
        .replace("name = \"t\"", "name = \"m\"")
        .replace("dataset = \"wine\"", "csv = \"wine.csv\"");
    std::fs::write(&missing, text).unwrap();
    let out = coordinator(&missing, &url, &tmp.path().join("m"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("wine.csv: cannot read the file"),
        "{}",
        stderr(&out)
    );
}

/// A worker gives each of its slots its share of the cores for its built-in trainables
/// (`RAYON_NUM_THREADS`), which a command objective's process does not inherit: it sees the
/// variable as the worker's user left it.
#[test]
fn a_workers_command_trials_see_rayon_num_threads_as_the_user_left_it() {
    for user in [None, Some("5")] {
        let tmp = tempfile::tempdir().unwrap();
        let url = pg_server::fresh_database();
        let spec = tmp.path().join("space.toml");
        std::fs::write(
            &spec,
            "name = \"t\"\nmetric = \"threads\"\nsamples = 1\n[objective]\n\
             command = [\"sh\", \"-c\", \"echo threads: $((RAYON_NUM_THREADS + 0))\"]\n\
             [space]\nx = { uniform = [0.0, 1.0] }\n",
        )
        .unwrap();
        let mut coord = spawn(coordinator(&spec, &url, &tmp.path().join("c")));
        wait_for_experiment(&url, &mut coord);
        let mut w = worker(&url, 2, "15", &tmp.path().join("w"));
        match user {
            Some(n) => w.env("RAYON_NUM_THREADS", n),
            None => w.env_remove("RAYON_NUM_THREADS"),
        };
        let w = spawn(w);
        finish_ok(coord, "the coordinator");
        finish_ok(w, "the worker");
        let trials = export_in(&url);
        let seen = &trials[0]["results"][0]["threads"];
        assert_eq!(
            seen,
            &serde_json::json!(user.map_or(0.0, |n| n.parse::<f64>().unwrap())),
            "{}",
            trials[0]
        );
    }
}

/// The HyperBand band of [`hyperband_band`] (R = 9, 17 checkpointing trials) kept in PostgreSQL,
/// its trial folders shared, run by one coordinator after another, each killed at the failure
/// points `rounds` names in turn (one `TUNE_FAILPOINTS` a coordinator; the last rounds run to
/// the end), while one worker with one slot serves it throughout. Returns the export, how
/// many coordinators were killed and the database's URL.
fn band_with_coordinators_killed(
    tmp: &Path,
    rounds: &[&str],
) -> (Vec<serde_json::Value>, usize, String) {
    let spec = hyperband_band(tmp);
    share_trial_folders(&spec, &tmp.join("shared"));
    let url = pg_server::fresh_database();
    let mut kills = 0;
    let mut worker_proc = None;
    for (round, failpoints) in rounds.iter().chain(std::iter::repeat(&"")).enumerate() {
        assert!(round < 40, "no end after {round} coordinators");
        let mut coord = coordinator_round(&spec, &url, tmp, round, failpoints);
        if worker_proc.is_none() {
            wait_for_experiment(&url, &mut coord);
            worker_proc = Some(spawn(worker(&url, 1, "15", &tmp.join("w"))));
        }
        let out = finish(coord, "a coordinator");
        if killed(&out) {
            kills += 1;
            continue;
        }
        assert!(out.status.success(), "{failpoints}: {}", stderr(&out));
        break;
    }
    finish_ok(worker_proc.expect("a worker"), "the worker");
    (export_in(&url), kills, url)
}

/// The `round`-th coordinator of a sweep of `spec` at `url` without slots, with
/// `TUNE_FAILPOINTS` set to `failpoints`: `tune run` first, then `tune resume` from a folder
/// of its own under `tmp` (a machine taking over).
fn coordinator_round(spec: &Path, url: &str, tmp: &Path, round: usize, failpoints: &str) -> Proc {
    let mut cmd = if round == 0 {
        coordinator(spec, url, &tmp.join("c"))
    } else {
        let mut cmd = tune();
        cmd.args([
            "resume", "t", "--store", url, "--slots", "0", "--no-tui", "--dir",
        ])
        .arg(tmp.join(format!("c{round}")));
        cmd
    };
    Proc(Some(
        cmd.env("TUNE_FAILPOINTS", failpoints)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ))
}

/// Adds `[store] checkpoints = SHARED` to `spec`: every machine's trial folders in one place.
fn share_trial_folders(spec: &Path, shared: &Path) {
    let mut text = std::fs::read_to_string(spec).unwrap();
    text += &format!(
        "\n[store]\ncheckpoints = {:?}\n",
        shared.display().to_string()
    );
    std::fs::write(spec, text).unwrap();
}

/// `tune status t --store URL`'s stdout, whatever its exit: what a failing test prints.
fn status_in(url: &str) -> String {
    let out = tune()
        .args(["status", "t", "--store", url])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `tune check t --store URL`: its exit code and stdout.
fn check_in(url: &str) -> (Option<i32>, String) {
    let out = tune()
        .args(["check", "t", "--store", url])
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The lost step of a coordinator restarted over PostgreSQL: killed right after offering a
/// paused trial's promotion, the next coordinator took the replayed pause as undelivered,
/// answered the adopted attempt's next report with `stop` without storing it, the trial
/// checkpointed that step, and its next attempt went on after it. Here every point of a
/// restart is hit (the promotion's offer, decisions synced but not yet written for workers,
/// adoption, acknowledgements): every step is stored once, in order, and the band decides as
/// the uninterrupted one.
#[test]
fn coordinators_killed_at_each_point_of_a_restart_lose_no_step_and_decide_as_uninterrupted() {
    let expected = uninterrupted_band();
    let tmp = tempfile::tempdir().unwrap();
    let rounds = [
        "bridge.offer.resumed=kill",
        "adopt.after=kill",
        "bridge.offer.resumed=kill@2",
        "bridge.heard.before=kill@3",
        "adopt.after=kill",
        "ack.after=kill@4",
        "bridge.heard.before=kill@9",
        "bridge.offer.resumed=kill@3",
        "store.sync.after=kill@5",
    ];
    let (trials, kills, url) = band_with_coordinators_killed(tmp.path(), &rounds);
    for t in &trials {
        let steps = steps(t);
        let dense: Vec<u64> = (1..=steps.len() as u64).collect();
        assert_eq!(steps, dense, "trial {}: {t}", t["id"]);
    }
    assert_eq!(outcome(&trials), expected);
    assert!(kills >= 6, "only {kills} coordinators were killed");
    let (code, text) = check_in(&url);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("17 trials") && text.contains("every report answered with a decision stored"),
        "{text}"
    );
    // The report's damage, as its database showed it: a report answered `stop` whose result
    // was never stored, and the trial gone on past it (here at a step before its first).
    let mut db = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    db.execute(
        "INSERT INTO tune_reports (experiment, trial, attempt, token, step, metrics, heard)
         SELECT id, 0, 1, 0, 0, '{}', 'stop' FROM tune_experiments WHERE name = 't'",
        &[],
    )
    .unwrap();
    let (code, text) = check_in(&url);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.starts_with(
            "trial 0: its report at step 0 (attempt 1) heard `stop` but no result is stored for \
             it, and the trial went on past it\n"
        ),
        "{text}"
    );
}

/// Fails the chaos run that has not ended: kills what still runs and prints each process's
/// output with `tune status`, so that a run stuck under load says where it was.
fn chaos_run_did_not_end(
    url: &str,
    round: usize,
    coord: Option<Proc>,
    workers: &mut [Option<Proc>],
) -> ! {
    let mut report = format!("the chaos run did not end (coordinator round {round})\n");
    let live = coord
        .map(|c| ("the coordinator".to_string(), c))
        .into_iter()
        .chain(
            workers
                .iter_mut()
                .enumerate()
                .filter_map(|(i, w)| Some((format!("worker {i}"), w.take()?))),
        );
    for (what, mut proc) in live {
        proc.kill().ok();
        let out = finish(proc, &what);
        report += &format!(
            "--- {what}:\n{}{}\n",
            String::from_utf8_lossy(&out.stdout),
            stderr(&out)
        );
    }
    panic!("{report}--- status:\n{}", status_in(url));
}

/// The chaos run of the lost-step report, seeded and bounded: HyperBand's band (R = 81, eta =
/// 3, 143 checkpointing trials) kept in PostgreSQL, a coordinator without slots and three
/// workers of one slot each sharing the trial folders, `max_failures = 100`. The coordinator
/// is killed 12 times, each time at a failure point and count drawn from the seed (its
/// acknowledgements, its store's sync, a promotion's offer, decisions not yet written for the
/// workers, its adoption of running attempts) and resumed elsewhere; workers are killed 6 times
/// by their own trials, right after the acknowledgement the seed picked (the fixture's kill
/// switch), and started again. Every crash is at an exact event; only the interleaving varies,
/// and nothing asserted depends on it. `TUNE_TEST_CHAOS_SEED` runs another seed.
///
/// A failure prints the failing round's output and `tune status`; a run that has not ended
/// after 15 minutes (35-120 s is usual with both cores busy) prints every live process's
/// output with them. Two runs of one build (2026-12-01, a target folder shared with another
/// checkout) ended early ("no trial completed"); one loaded suite run (2026-12-06, seed 57)
/// passed the deadline, before it printed anything; 20 loaded runs since (seeds 1-20 and 57,
/// two at a time beside two `yes`) and two loaded suite runs passed.
#[test]
fn a_band_on_three_workers_survives_seeded_kills_of_its_coordinator_and_workers() {
    use rand::{Rng, SeedableRng};
    let seed: u64 = std::env::var("TUNE_TEST_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(57);
    eprintln!("chaos seed {seed} (TUNE_TEST_CHAOS_SEED=N runs another)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let tmp = tempfile::tempdir().unwrap();
    let tmp = tmp.path();
    let spec = hyperband_band_81(tmp, 1, 1);
    arm_kill_switch(&spec, tmp);
    let text = std::fs::read_to_string(&spec).unwrap().replacen(
        "samples = 143",
        "samples = 143\nmax_failures = 100",
        1,
    );
    std::fs::write(&spec, text).unwrap();
    share_trial_folders(&spec, &tmp.join("shared"));
    let points: [(&str, u32); 5] = [
        ("ack.after", 60),
        ("store.sync.after", 60),
        ("bridge.heard.before", 60),
        ("bridge.offer.resumed", 8),
        ("adopt.after", 1),
    ];
    let mut plan: Vec<String> = (0..12)
        .map(|_| {
            let (point, most) = points[rng.random_range(0..points.len())];
            format!("{point}=kill@{}", rng.random_range(1..=most))
        })
        .collect();
    plan.reverse();
    // The band acknowledges about 1,000 steps; the workers' kills come within its first 700.
    let mut dues: Vec<usize> = (0..6).map(|_| rng.random_range(20..700)).collect();
    dues.sort_unstable();
    dues.dedup();
    for due in &dues {
        set_kill_switch(tmp, &due.to_string());
    }
    eprintln!("coordinator kills (last first): {plan:?}; worker kills at acks {dues:?}");

    let url = pg_server::fresh_database();
    let start_coordinator =
        |round: usize, failpoints: &str| coordinator_round(&spec, &url, tmp, round, failpoints);
    // A killed worker's attempt is taken back when its lease (3 s) runs out.
    let start_worker = |i: usize| spawn(worker(&url, 1, "3", &tmp.join(format!("w{i}"))));
    let mut round = 0;
    let mut coord = Some(start_coordinator(round, &plan.pop().unwrap_or_default()));
    wait_for_experiment(&url, coord.as_mut().unwrap());
    let mut workers: Vec<Option<Proc>> = (0..3).map(|i| Some(start_worker(i))).collect();
    let (mut coordinator_kills, mut worker_kills) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(900);
    while coord.is_some() || workers.iter().any(Option::is_some) {
        if Instant::now() >= deadline {
            chaos_run_did_not_end(&url, round, coord.take(), &mut workers);
        }
        if let Some(c) = coord.as_mut() {
            if c.try_wait().unwrap().is_some() {
                let out = finish(coord.take().unwrap(), "a coordinator");
                if killed(&out) {
                    coordinator_kills += 1;
                    round += 1;
                    coord = Some(start_coordinator(round, &plan.pop().unwrap_or_default()));
                } else if !out.status.success() {
                    panic!(
                        "round {round}: {}{}\nstatus:\n{}",
                        String::from_utf8_lossy(&out.stdout),
                        stderr(&out),
                        status_in(&url)
                    );
                }
            }
        }
        for (i, w) in workers.iter_mut().enumerate() {
            if w.as_mut().is_some_and(|p| p.try_wait().unwrap().is_some()) {
                let out = finish(w.take().unwrap(), "a worker");
                if killed(&out) {
                    worker_kills += 1;
                    *w = Some(start_worker(i));
                } else {
                    assert!(out.status.success(), "worker {i}: {}", stderr(&out));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let trials = export_in(&url);
    assert_eq!(trials.len(), 143);
    for t in &trials {
        let steps = steps(t);
        let dense: Vec<u64> = (1..=steps.len() as u64).collect();
        assert_eq!(steps, dense, "trial {}: {t}", t["id"]);
    }
    // Li et al. 2017, Table 1 (R = 81, eta = 3), as the uninterrupted band decides it.
    assert_eq!(hyperband_table(&trials), ([54, 41, 24, 14], 10));
    let kept = assert_acknowledged_results_kept(tmp, &by_id(trials));
    eprintln!(
        "{coordinator_kills} coordinator and {worker_kills} worker kills, {kept} acknowledged \
         results kept"
    );
    assert!(
        coordinator_kills >= 10,
        "{coordinator_kills} coordinator kills"
    );
    assert_eq!(worker_kills, dues.len());
    let (code, text) = check_in(&url);
    assert_eq!(code, Some(0), "{text}");
}
