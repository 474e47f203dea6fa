//! Trials on several machines (`[resources] nodes_per_trial`): each attempt run by as many
//! `tune worker`s at once, one gang, on loopback. The workers are real processes: one is
//! SIGKILLed by its own trial mid-attempt.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value as Json;

use crate::common::*;
use crate::distributed_trials::{
    assert_each_attempt_met, assert_nothing_left, rank_records, ranks_spec,
};
use crate::workers::{coordinator, finish, finish_ok, spawn, wait_for_experiment, Proc};

/// A ranks.py sweep named `t` whose trials span `nodes` machines, one process each.
pub(crate) fn gang_spec(
    tmp: &Path,
    top: &str,
    nodes: u32,
    argv: &[&str],
    env: &str,
) -> std::path::PathBuf {
    let spec = ranks_spec(
        tmp,
        top,
        &format!("processes_per_node = 1\nnodes_per_trial = {nodes}"),
        "kind = \"fifo\"",
        argv,
    );
    let text = std::fs::read_to_string(&spec)
        .unwrap()
        .replace("name = \"ranks\"", "name = \"t\"")
        .replace(
            "\n[resources]",
            &format!("env = {{ {env} }}\n\n[resources]"),
        );
    std::fs::write(&spec, text).unwrap();
    spec
}

/// `tune worker` serving `t` on one slot, its trials' rendezvous on loopback. `lease`: 15 s
/// where no worker is lost (a busy machine never delays a heartbeat that long), shorter where
/// the test waits for a lost one.
fn gang_worker(url: &str, dir: &Path, lease: &str) -> Proc {
    let mut cmd = crate::workers::worker(url, 1, lease, dir);
    cmd.args(["--address", "127.0.0.1"]);
    spawn(cmd)
}

/// Gang places of `t` in the database now: (trial, attempt, node, worker, state).
fn gang_rows(url: &str) -> Vec<(i64, i32, i32, String, String)> {
    let mut db = postgres::Client::connect(url, postgres::NoTls).unwrap();
    db.query(
        "SELECT m.trial, m.attempt, m.node_rank, m.worker, m.state FROM tune_gang_members m
         JOIN tune_experiments e ON e.id = m.experiment WHERE e.name = 't'
         ORDER BY 1, 2, 3",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
    .collect()
}

/// Waits until `n` live workers serve `t`.
fn wait_for_workers(url: &str, n: i64) {
    let mut db = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while db
        .query_one(
            "SELECT count(*) FROM tune_workers w JOIN tune_experiments e ON e.id = w.experiment
             WHERE e.name = 't'",
            &[],
        )
        .unwrap()
        .get::<_, i64>(0)
        < n
    {
        assert!(Instant::now() < deadline, "{n} workers never registered");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every trial completed with rank 0's reports of steps 1..=steps (the others' look-alike
/// line never one), and its device names both machines of its gang.
fn assert_completed_by_gangs(trials: &[Json], steps: u64) {
    for t in trials {
        assert_eq!(t["status"], "completed", "{t}");
        let reported: Vec<u64> = (t["results"].as_array().unwrap().iter())
            .map(|r| r["step"].as_u64().unwrap())
            .collect();
        assert_eq!(reported, (1..=steps).collect::<Vec<_>>(), "{t}");
        // Node 0's worker and slot, then node 1's worker.
        let device = t["device"].as_str().unwrap();
        let nodes: Vec<&str> = tune::remote::gang_slots(device).collect();
        assert_eq!(nodes.len(), 2, "{t}");
        assert!(nodes[0].contains("/cpu:"), "{t}");
        assert!(nodes[1].ends_with("/node 1"), "{t}");
        assert_ne!(
            tune::remote::split_remote_slot(nodes[0]).map(|n| n.0),
            tune::remote::split_remote_slot(nodes[1]).map(|n| n.0),
            "{t}"
        );
    }
}

/// The two nodes of each attempt ran under two different workers (their parents) and met on
/// node 0's published endpoint.
fn assert_two_workers_per_attempt(records: &[Json]) {
    assert_each_attempt_met(records, 2);
    for pair in records.chunks(2) {
        let nodes: Vec<_> = pair.iter().map(|r| r["node_rank"].as_u64()).collect();
        assert_eq!(nodes, [Some(0), Some(1)], "{pair:?}");
        assert_ne!(pair[0]["ppid"], pair[1]["ppid"], "{pair:?}");
        assert!(pair.iter().all(|r| r["master"] == "127.0.0.1"), "{pair:?}");
    }
}

/// Two workers run every trial as one gang of two: node ranks 0 and 1 meet at the endpoint
/// node 0 published, only node 0's reports are heard, and a rank failing on node 1 fails the
/// attempt on node 0 too; the retry completes.
#[test]
fn two_workers_run_each_trial_as_one_gang_and_a_failing_node_fails_the_attempt() {
    let tmp = tempfile::tempdir().unwrap();
    let url = tune_testkit::pg_server::fresh_database();
    let spec = gang_spec(
        tmp.path(),
        "samples = 3\nmax_failures = 1",
        2,
        &["4", "1", "2"],
        "",
    );
    let mut coord = spawn(coordinator(&spec, &url, &tmp.path().join("c")));
    wait_for_experiment(&url, &mut coord);
    let a = gang_worker(&url, &tmp.path().join("a"), "15");
    let b = gang_worker(&url, &tmp.path().join("b"), "15");
    let out = finish_ok(coord, "the coordinator");
    assert!(
        stderr(&out).contains("trial 1: attempt 1 failed (node 1 of the trial (worker"),
        "{}",
        stderr(&out)
    );
    let (a, b) = (finish_ok(a, "worker a"), finish_ok(b, "worker b"));
    // Each attempt ran on both: 4 attempts, 8 places.
    assert_eq!(
        crate::workers::attempts_ran(&a) + crate::workers::attempts_ran(&b),
        8,
        "{}\n{}",
        stderr(&a),
        stderr(&b)
    );
    let trials = crate::workers::export_in(&url);
    assert_eq!(trials.len(), 3);
    assert_completed_by_gangs(&trials, 4);
    assert_eq!(trials[1]["attempts"], 2, "{}", trials[1]);
    let records = rank_records(tmp.path());
    assert_eq!(records.len(), 2 * 4, "{records:?}");
    assert_two_workers_per_attempt(&records);
    let places = gang_rows(&url);
    assert_eq!(places.len(), 8, "{places:?}");
    assert!(
        places
            .iter()
            .all(|p| p.4 == "ended" || (p.0, p.1, p.2, p.4.as_str()) == (1, 1, 1, "failed")),
        "{places:?}"
    );
    assert!(!tmp.path().join("records/collision").exists());
    assert_nothing_left(tmp.path());
}

/// A gang's node 1 loses its worker (its own trial SIGKILLs it): node 0 sees that node's
/// lease run out and ends the attempt as lost; a new worker joins and the retry completes,
/// every report stored once.
#[test]
fn a_gang_member_whose_worker_is_killed_ends_the_attempt_on_the_other_and_the_retry_completes() {
    let (_, coordinator_said) = node_1_loses_its_worker("kill-parent");
    assert!(
        coordinator_said.contains("stopped renewing its lease"),
        "{coordinator_said}"
    );
}

/// A gang's node 1 has its worker stopped (its own trial sends it SIGTERM) while node 0 hangs
/// in a collective: the node ends interrupted, node 0 ends the attempt so, the stopped worker
/// exits cleanly, and the trial runs again on a new worker.
#[test]
fn a_gang_member_whose_worker_is_stopped_interrupts_the_attempt_and_the_trial_runs_again() {
    let (stopped, _) = node_1_loses_its_worker("term-parent");
    assert!(stopped.contains("tune worker: ran 1 attempt"), "{stopped}");
}

/// Trial 0's first attempt has its node 1 end its own worker (`FAIL_BY`: ranks.py's
/// `kill-parent` or `term-parent`) after step 2, node 0 hanging there; a new worker joins,
/// and both trials complete on gangs. What the ended worker and the coordinator said.
fn node_1_loses_its_worker(by: &str) -> (String, String) {
    let tmp = tempfile::tempdir().unwrap();
    let url = tune_testkit::pg_server::fresh_database();
    let spec = gang_spec(
        tmp.path(),
        "samples = 2",
        2,
        &["4", "0", "2"],
        &format!("FAIL_BY = \"{by}\""),
    );
    let mut coord = spawn(coordinator(&spec, &url, &tmp.path().join("c")));
    wait_for_experiment(&url, &mut coord);
    let mut workers = vec![
        gang_worker(&url, &tmp.path().join("a"), "5"),
        gang_worker(&url, &tmp.path().join("b"), "5"),
    ];
    // Whichever worker runs node 1 of trial 0's first attempt is ended by it.
    let deadline = Instant::now() + Duration::from_secs(300);
    let ended = loop {
        if let Some(i) = (0..2).find(|&i| workers[i].try_wait().unwrap().is_some()) {
            break i;
        }
        assert!(Instant::now() < deadline, "no worker was ended");
        std::thread::sleep(Duration::from_millis(20));
    };
    let ended = finish(workers.remove(ended), "the ended worker");
    let signal = std::os::unix::process::ExitStatusExt::signal(&ended.status);
    match by {
        "kill-parent" => assert_eq!(signal, Some(9), "{}", stderr(&ended)),
        _ => assert!(ended.status.success(), "{}", stderr(&ended)),
    }
    let c = gang_worker(&url, &tmp.path().join("c-worker"), "5");
    let out = finish_ok(coord, "the coordinator");
    finish_ok(workers.remove(0), "the surviving worker");
    finish_ok(c, "the new worker");
    let trials = crate::workers::export_in(&url);
    assert_eq!(trials.len(), 2);
    assert_completed_by_gangs(&trials, 4);
    assert_eq!(trials[0]["attempts"], 2, "{}", trials[0]);
    let records = rank_records(tmp.path());
    assert_eq!(records.len(), 2 * 3, "{records:?}");
    assert_two_workers_per_attempt(&records);
    assert_nothing_left(tmp.path());
    (stderr(&ended), stderr(&out))
}

/// Gangs never deadlock on workers: with one worker for 2-node trials nothing is placed and
/// nothing is held (no gang place exists); with three, one gang runs at a time and the third
/// worker waits without holding a part of any; every trial completes.
#[test]
fn gangs_wanting_more_workers_than_are_free_hold_nothing_and_never_deadlock() {
    let tmp = tempfile::tempdir().unwrap();
    let url = tune_testkit::pg_server::fresh_database();
    let spec = gang_spec(tmp.path(), "samples = 5", 2, &["3"], "");
    // A coordinator with slots of its own cannot run a gang: refused, the key named.
    let out = tune_run(&spec, &tmp.path().join("own-slots"))
        .args(["--store", &url, "--no-tui"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "[resources] nodes_per_trial = 2: trials run on `tune worker`s only, not on this \
             coordinator's own slots: run it with --slots 0"
        ),
        "{}",
        stderr(&out)
    );
    let mut coord = spawn(coordinator(&spec, &url, &tmp.path().join("c")));
    wait_for_experiment(&url, &mut coord);
    // A worker serving every sweep leaves gangs to workers started for the sweep.
    let mut shared = tune();
    shared
        .args(["worker", &url, "--slots", "1", "--lease", "15", "--dir"])
        .arg(tmp.path().join("shared"));
    let shared = spawn(shared);
    crate::workers::wait_for_shared_worker(&url);
    let first = gang_worker(&url, &tmp.path().join("w0"), "15");
    wait_for_workers(&url, 1);
    // The lone worker looks for a gang every 0.2 s: in 2 s it forms none.
    for _ in 0..20 {
        assert_eq!(gang_rows(&url), Vec::new());
        std::thread::sleep(Duration::from_millis(100));
    }
    let others = [
        gang_worker(&url, &tmp.path().join("w1"), "15"),
        gang_worker(&url, &tmp.path().join("w2"), "15"),
    ];
    finish_ok(coord, "the coordinator");
    let mut ran = crate::workers::attempts_ran(&finish_ok(first, "worker 0"));
    for (i, w) in others.into_iter().enumerate() {
        ran += crate::workers::attempts_ran(&finish_ok(w, &format!("worker {}", i + 1)));
    }
    assert_eq!(ran, 10);
    // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
    unsafe { libc::kill(shared.id() as i32, libc::SIGTERM) };
    let shared = finish_ok(shared, "the worker serving every sweep");
    assert!(
        stderr(&shared).contains("trials of \"t\" take 2 machines each"),
        "{}",
        stderr(&shared)
    );
    assert_eq!(crate::workers::attempts_ran(&shared), 0);
    let trials = crate::workers::export_in(&url);
    assert_eq!(trials.len(), 5);
    assert_completed_by_gangs(&trials, 3);
    assert_two_workers_per_attempt(&rank_records(tmp.path()));
    assert_nothing_left(tmp.path());
}

/// A real PyTorch DDP training (gloo, CPU) on gangs of two workers, two ranks each (a world
/// of 4), TPE + ASHA: every rank of an attempt meets in one world at node 0's endpoint, only
/// rank 0's losses are reports, and ASHA's stops end both machines' ranks (ddp.py broadcasts
/// the decision), leaving nothing.
#[test]
fn a_pytorch_ddp_sweep_runs_each_trial_on_two_workers_of_two_ranks_under_tpe_and_asha() {
    ddp_gangs(false);
}

/// The same with `torchrun` on each machine as the launcher (the docs' command line: node
/// rank and endpoint from tune, static rendezvous); node 1's rank 2 prints its report-like
/// line on its torchrun's stdout, which its worker does not hear.
#[test]
fn a_pytorch_ddp_sweep_launched_by_torchrun_on_two_workers_runs_each_trial_as_one_world() {
    ddp_gangs(true);
}

fn ddp_gangs(torchrun: bool) {
    use crate::distributed_trials::{assert_torch, ddp_objective};
    assert_torch();
    let tmp = tempfile::tempdir().unwrap();
    let url = tune_testkit::pg_server::fresh_database();
    let records_dir = tmp.path().join("records");
    let objective = ddp_objective(&records_dir, &["6"], torchrun);
    let text = format!(
        "name = \"t\"\nmetric = \"val_loss\"\nsamples = 4\nseed = 5\n\n\
         [search]\nalgorithm = \"tpe\"\n\n\
         [scheduler]\nkind = \"asha\"\nmax_t = 6\ngrace_period = 2\nreduction_factor = 2\n\n\
         [resources]\nprocesses_per_node = 2\nnodes_per_trial = 2\n\n\
         {objective}\n[space]\nlr = {{ loguniform = [0.001, 0.3] }}\n"
    );
    let spec = tmp.path().join("space.toml");
    std::fs::write(&spec, text).unwrap();
    let mut coord = spawn(coordinator(&spec, &url, &tmp.path().join("c")));
    wait_for_experiment(&url, &mut coord);
    let workers: Vec<Proc> = ["a", "b"]
        .iter()
        .map(|name| {
            let mut cmd = crate::workers::worker(&url, 2, "15", &tmp.path().join(name));
            cmd.args(["--address", "127.0.0.1"]);
            spawn(cmd)
        })
        .collect();
    finish_ok(coord, "the coordinator");
    let mut said = String::new();
    for w in workers {
        let out = finish_ok(w, "a worker");
        assert!(!stderr(&out).contains("lost"), "{}", stderr(&out));
        said += &stderr(&out);
    }
    if torchrun {
        assert!(
            said.contains("node 1: its reports are ignored: a trial on several machines is heard from node 0 only"),
            "{said}"
        );
    }
    let status = run_ok(tune().args(["status", "t", "--store", &url]));
    let started_by = if torchrun { "its command" } else { "tune" };
    assert!(
        String::from_utf8_lossy(&status.stdout).contains(&format!(
            "each trial: 2 processes per machine (started by {started_by}), 2 CPU slots on \
             each of 2 machines"
        )),
        "{}",
        String::from_utf8_lossy(&status.stdout)
    );
    let trials = crate::workers::export_in(&url);
    assert_eq!(trials.len(), 4);
    for t in &trials {
        assert!(
            t["status"] == "completed" || t["status"] == "stopped",
            "{t}"
        );
        assert_eq!(t["attempts"], 1, "{t}");
        // Rank 0's validation losses alone: the other ranks' -1.0 is never a report.
        for r in t["results"].as_array().unwrap() {
            assert!(r["val_loss"].as_f64().unwrap() > 0.0, "{t}");
        }
    }
    let records = rank_records(tmp.path());
    assert_eq!(records.len(), 4 * 4, "{records:?}");
    assert_each_attempt_met(&records, 4);
    for world in records.chunks(4) {
        let nodes: Vec<_> = world.iter().map(|r| r["node_rank"].as_u64()).collect();
        assert_eq!(nodes, [Some(0), Some(0), Some(1), Some(1)], "{world:?}");
        assert_eq!(world[0]["ppid"], world[1]["ppid"], "{world:?}");
        assert_eq!(world[2]["ppid"], world[3]["ppid"], "{world:?}");
        assert_ne!(world[0]["ppid"], world[2]["ppid"], "{world:?}");
    }
    assert_nothing_left(tmp.path());
}
