//! A real network's faults between the machines of a sweep in PostgreSQL: a worker behind
//! 100 ms of latency and 5 % packet loss, a worker partitioned for longer than its lease and
//! then healed, a coordinator partitioned from the database mid-sweep, and the database
//! restarted mid-sweep. A machine behind a fault is a process in a network namespace of its
//! own (testkit/src/netns.rs: drops made by nftables in the kernel, latency by a relay), the
//! database a private server of the test's own (testkit's `RestartableServer`). Each checks that nothing acknowledged is
//! lost, nothing is stored twice and the decisions are those of one machine given the same
//! results, and prints how long the sweep took to recover (docs/durability.md has them).
//! Root only (CI runs as root).

use crate::common;
use crate::workers::{attempts_ran, coordinator, export_in, finish, finish_ok, spawn, worker};
use tune_testkit::netns::{DelayRelay, Netns};
use tune_testkit::pg_server::RestartableServer;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

/// The ASHA sweep of [`asha_spec`] (24 trials of up to 9 steps), each step taking `sleep`
/// seconds, its trials logging each acknowledged result to `tmp/acks.log`.
fn asha_sweep(tmp: &Path, sleep: &str) -> std::path::PathBuf {
    let spec = asha_spec(tmp, &["--sleep", sleep], 1);
    let text = std::fs::read_to_string(&spec).unwrap().replace(
        "\n[space]",
        &format!(
            "env = {{ ACK_LOG = {:?} }}\n\n[space]",
            tmp.join("acks.log").display().to_string()
        ),
    );
    std::fs::write(&spec, text).unwrap();
    spec
}

/// The sweep kept every acknowledged result, each step once and in order, and ASHA decided as
/// it does on one machine given the results in the order the coordinator took them.
fn assert_sweep_whole(tmp: &Path, url: &str) -> Vec<serde_json::Value> {
    let trials = export_in(url);
    assert_sweep_decided_as_one_machine(&trials);
    let kept = assert_acknowledged_results_kept(tmp, &by_id(trials.clone()));
    assert!(kept > 0, "no result acknowledged");
    trials
}

fn assert_sweep_decided_as_one_machine(trials: &[serde_json::Value]) {
    for t in trials {
        let s = steps(t);
        assert_eq!(s, (1..=s.len() as u64).collect::<Vec<_>>(), "{t}");
    }
    assert_asha_sweep(trials);
}

/// Waits until `ready` holds, polling; `what` names it in the failure.
fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(300);
    while !ready() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn count(db: &mut postgres::Client, sql: &str) -> i64 {
    db.query_one(sql, &[]).unwrap().get(0)
}

#[test]
fn the_database_restarted_mid_sweep_loses_nothing_and_the_sweep_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let server = RestartableServer::start(&[]);
    let url = server.url("127.0.0.1");
    let spec = asha_sweep(tmp.path(), "0.05");
    let coord = spawn(coordinator(&spec, &url, &tmp.path().join("c")));
    let workers: Vec<_> = (0..2)
        .map(|i| {
            let mut w = worker(&url, 2, "15", &tmp.path().join(format!("w{i}")));
            w.args(["--wait", "300"]);
            spawn(w)
        })
        .collect();
    wait_for("20 results acknowledged", || acked_so_far(tmp.path()) >= 20);
    let start = Instant::now();
    server.restart();
    let restarted = start.elapsed();
    // The first decision on a report made after the restart.
    let mut db = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let last = count(&mut db, "SELECT coalesce(max(id), 0) FROM tune_reports");
    wait_for("a report decided after the restart", || {
        count(
            &mut db,
            &format!("SELECT count(*) FROM tune_reports WHERE id > {last} AND heard IS NOT NULL"),
        ) > 0
    });
    let recovered = start.elapsed();
    eprintln!(
        "database restart: pg_ctl restart -m fast took {:.2} s; the first report after it was \
         decided {:.2} s after the restart began",
        restarted.as_secs_f64(),
        recovered.as_secs_f64()
    );
    finish_ok(coord, "the coordinator");
    let ran: u64 = workers
        .into_iter()
        .map(|w| attempts_ran(&finish_ok(w, "a worker")))
        .sum();
    let trials = assert_sweep_whole(tmp.path(), &url);
    let attempts: u64 = trials.iter().map(|t| t["attempts"].as_u64().unwrap()).sum();
    assert_eq!(ran, attempts, "every attempt ran on a worker, once");
    // A restart well within the lease costs no attempt: the workers' reports waited.
    let lost: u64 = trials
        .iter()
        .map(|t| t["lost_attempts"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(lost, 0, "an attempt was lost to the restart");
}

#[test]
fn a_worker_behind_100_ms_and_5_percent_loss_runs_its_share_and_nothing_is_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let slow = Netns::new();
    let server = RestartableServer::start(&[]);
    let spec = asha_sweep(tmp.path(), "0.02");
    let coord = spawn(coordinator(
        &spec,
        &server.url("127.0.0.1"),
        &tmp.path().join("c"),
    ));
    // 100 ms more per round trip (50 ms each way, through a relay), and 5 % of the packets
    // either way dropped by the kernel.
    let relay = DelayRelay::start(slow.host_addr, server.loopback(), Duration::from_millis(50));
    slow.lose(5);
    let started = Instant::now();
    let far = {
        let url = format!("postgres://tune@{}/postgres", relay.addr);
        let mut w = worker(&url, 1, "15", &tmp.path().join("far"));
        w.args(["--wait", "300"]);
        spawn(slow.wrap(&w))
    };
    // The near worker starts once the far one runs a trial: its first connection through the
    // relay and the loss can take longer than the whole sweep, which the near one would
    // otherwise run alone.
    let far_trials = tmp.path().join("far/t/trials");
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::fs::read_dir(&far_trials).map_or(true, |mut d| d.next().is_none()) {
        assert!(
            Instant::now() < deadline,
            "the worker behind the faults started no trial in 120 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let near = {
        let mut w = worker(&server.url("127.0.0.1"), 1, "15", &tmp.path().join("near"));
        w.args(["--wait", "300"]);
        spawn(w)
    };
    finish_ok(coord, "the coordinator");
    let far = attempts_ran(&finish_ok(far, "the worker behind the faults"));
    let near = attempts_ran(&finish_ok(near, "the worker on loopback"));
    eprintln!(
        "100 ms more per round trip + 5 % loss: the sweep took {:.1} s; the far worker ran {far} attempts, the near \
         one {near}",
        started.elapsed().as_secs_f64()
    );
    assert!(far >= 1, "the worker behind the faults ran nothing");
    let trials = assert_sweep_whole(tmp.path(), &server.url("127.0.0.1"));
    let lost: u64 = trials
        .iter()
        .map(|t| t["lost_attempts"].as_u64().unwrap_or(0))
        .sum();
    // Latency and loss within the lease cost time, not attempts.
    assert_eq!(lost, 0, "an attempt was lost to latency alone");
}

#[test]
fn a_worker_partitioned_past_its_lease_then_healed_has_its_trial_run_elsewhere_once() {
    let tmp = tempfile::tempdir().unwrap();
    let cut = Netns::new();
    let server = RestartableServer::start(&[cut.host_addr]);
    let url = server.url("127.0.0.1");
    let spec = write_spec(
        tmp.path(),
        "samples = 1\nmax_failures = 0",
        &["--steps", "6", "--sleep", "0.3", "--behaviour", "ckpt"],
        "x = { uniform = [-3.0, 3.0] }",
    );
    let coord = spawn(coordinator(&spec, &url, &tmp.path().join("c")));
    let acks = tmp.path().join("acks.log");
    let a = {
        // A lease of 3 s: the partition below lasts longer.
        let mut w = worker(&server.url(cut.host_addr), 1, "3", &tmp.path().join("a"));
        w.args(["--wait", "300"]).env("ACK_LOG", &acks);
        spawn(cut.wrap(&w))
    };
    let mut db = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    wait_for("trial 0 acknowledged at step 2", || {
        acked_so_far(tmp.path()) >= 2
    });
    cut.partition();
    let start = Instant::now();
    wait_for("the coordinator saw A's lease run out", || {
        count(
            &mut db,
            "SELECT count(*) FROM tune_attempts WHERE trial = 0 AND attempt = 1 AND state = 'lost'",
        ) == 1
    });
    let lost_after = start.elapsed();
    let b = spawn(worker(&url, 1, "15", &tmp.path().join("b")));
    wait_for("B claimed the retry", || {
        count(
            &mut db,
            "SELECT count(*) FROM tune_attempts WHERE trial = 0 AND attempt = 2 AND state <> 'offered'",
        ) == 1
    });
    let moved_after = start.elapsed();
    cut.heal();
    eprintln!(
        "worker partitioned past its 3 s lease: its attempt lost after {:.2} s, the retry \
         running on another worker after {:.2} s",
        lost_after.as_secs_f64(),
        moved_after.as_secs_f64()
    );
    finish_ok(coord, "the coordinator");
    let b = finish(b, "worker B");
    assert!(b.status.success(), "{}", stderr(&b));
    let a = finish(a, "worker A");
    // A's trial was taken from it: it stopped it, whether it heard so from the database
    // after the heal or gave up on the database within its lease.
    assert!(stderr(&a).contains("trial 0 (attempt 1)"), "{}", stderr(&a));
    let trials = export_in(&url);
    let t = &trials[0];
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(t["attempts"], 2, "{t}");
    assert_eq!(steps(t), [1, 2, 3, 4, 5, 6], "{t}");
    let from_a = t["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["attempt"] == 1)
        .count();
    assert!(from_a >= 2, "{t}");
    let taken = count(
        &mut db,
        "SELECT count(*) FROM tune_reports WHERE trial = 0 AND attempt = 1",
    );
    assert_eq!(taken as usize, from_a, "a late report of A was taken");
    assert_acknowledged_results_kept(tmp.path(), &by_id(trials));
}

#[test]
fn a_coordinator_partitioned_from_the_database_ends_resumable_and_the_resumed_sweep_decides_as_one()
{
    let tmp = tempfile::tempdir().unwrap();
    let cut = Netns::new();
    let server = RestartableServer::start(&[cut.host_addr]);
    let url = server.url("127.0.0.1");
    let spec = asha_sweep(tmp.path(), "0.05");
    let coord = spawn(cut.wrap(&coordinator(
        &spec,
        &server.url(cut.host_addr),
        &tmp.path().join("c"),
    )));
    let w = {
        let mut w = worker(&url, 2, "15", &tmp.path().join("w"));
        w.args(["--wait", "300"]);
        spawn(w)
    };
    wait_for("20 results acknowledged", || acked_so_far(tmp.path()) >= 20);
    cut.partition();
    let start = Instant::now();
    let out = finish(coord, "the partitioned coordinator");
    let ended_after = start.elapsed();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("tune resume t --store URL"),
        "{}",
        stderr(&out)
    );
    cut.heal();
    let resumed_at = Instant::now();
    let before = acked_so_far(tmp.path());
    let mut resume = tune();
    resume
        .args([
            "resume", "t", "--store", &url, "--slots", "0", "--no-tui", "--dir",
        ])
        .arg(tmp.path().join("c2"));
    let mut resumed = spawn(resume);
    // Or the resumed coordinator ended: finish_ok below says why.
    wait_for("a result acknowledged by the resumed coordinator", || {
        resumed.try_wait().unwrap().is_some() || acked_so_far(tmp.path()) > before
    });
    eprintln!(
        "coordinator partitioned: it ended (exit 1, resumable) {:.2} s into the partition; \
         resumed elsewhere, the first result was acknowledged {:.2} s after the resume began",
        ended_after.as_secs_f64(),
        resumed_at.elapsed().as_secs_f64()
    );
    finish_ok(resumed, "the resumed coordinator");
    finish_ok(w, "the worker");
    assert_sweep_whole(tmp.path(), &url);
}
