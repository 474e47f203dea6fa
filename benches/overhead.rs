//! Orchestration overhead with a trivial objective, beside the peers of `benches/peers`.
//!
//!     cargo bench --bench overhead                  # tune only; peer numbers as published
//!     TUNE_PEER_PYTHON=peers-venv/bin/python cargo bench --bench overhead
//!                                                   # also runs Optuna's storage loop now
//!
//! The objective is the peers' one: the sum of five uniform [0, 1] parameters, reported once.
//! (a) a Rust closure with the sled store durable: every result is synced to disk before the
//!     trial is acknowledged (group commit: one sync per coordinator round);
//! (b) a command objective, `echo loss: {x0}`: one child process per trial.
//! Each run's store is reopened afterwards and every trial checked, so nothing is counted that
//! was not kept.
//!
//!     TUNE_MLFLOW_PYTHON=venv/bin/python cargo bench --bench overhead
//!                                                   # also (c): the closure sweep logging to a
//!                                                   # private `mlflow server` of that Python
//!
//! (c) runs the closure sweep with and without `[tracking] mlflow`: the sweep's own rate (to
//!     its last trial's end), and the rate until MLflow holds every trial (`fit` returns then).
//! (d) what the search costs beside a trial that costs nothing: the closure sweep on one slot
//!     with `random`, `tpe` and the default `auto` (a GP for its first 250 trials), in seconds
//!     per sweep of 250 and 1,000 trials.

use tune_testkit::mlflow_server;
use tune_testkit::trivial;

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use trivial::{is_sum_of_params, report_sum, space};
use tune::{Algorithm, Event, ExperimentSpec, Mode, Observer, Status, Summary, Tuner};

const PEER_JOURNAL_RANDOM: f64 = 217.7;
const PEER_SQLITE_RANDOM: f64 = 44.5;
const PEER_RAY_DEFAULT: f64 = 0.63;

/// Checks the stored experiment: `n` completed trials, each value the sum of its params.
fn verify(dir: &Path, n: u64) {
    let exp = tune::experiment::Experiment::open(dir).expect("reopen");
    let trials = &exp.stored.trials;
    assert_eq!(trials.len() as u64, n, "every trial stored");
    for t in trials {
        assert!(is_sum_of_params(t), "trial {}: {t:?}", t.id);
    }
}

fn closure_run(root: &Path, n: u64, slots: usize) -> f64 {
    let dir = root.join(format!("closure-{slots}"));
    let start = Instant::now();
    Tuner::new(space())
        .algorithm(Algorithm::Random)
        .metric("loss", Mode::Min)
        .samples(n)
        .cpu_slots(slots)
        .dir(&dir)
        .fit(report_sum)
        .expect("closure sweep");
    let rate = n as f64 / start.elapsed().as_secs_f64();
    verify(&dir, n);
    rate
}

/// CPU seconds (user + system) this process has used: the coordinator, the trials and the
/// logger's thread, not the MLflow server's processes.
fn own_cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// Notes when the sweep's last trial ended, and this process's CPU time then.
struct LastEnd(Arc<Mutex<Option<(Instant, f64)>>>);

impl Observer for LastEnd {
    fn on_event(&mut self, event: &Event<'_>, _summary: &Summary) {
        if let Event::Finished(_) = event {
            *self.0.lock().unwrap() = Some((Instant::now(), own_cpu_seconds()));
        }
    }
}

/// One closure sweep of (c).
struct MlflowRun {
    /// Trials/s to the last trial's end.
    rate: f64,
    /// Trials/s until `fit` returns (MLflow has every trial).
    drained: f64,
    /// This process's CPU per trial to the last trial's end, in microseconds.
    own_cpu_us: f64,
    /// The MLflow server's, over the same span.
    server_cpu_us: f64,
}

/// The closure sweep, logging to MLflow at `server` if given.
fn closure_mlflow_run(
    root: &Path,
    n: u64,
    server: Option<&mlflow_server::MlflowServer>,
    round: usize,
) -> MlflowRun {
    let url = server.map(|s| s.url.as_str());
    let dir = root.join(format!("closure-mlflow-{}-{round}", url.is_some()));
    let last = Arc::new(Mutex::new(None));
    let mut tuner = Tuner::new(space())
        .algorithm(Algorithm::Random)
        .name(format!("ovh-{}-{round}", url.is_some()))
        .metric("loss", Mode::Min)
        .samples(n)
        .cpu_slots(1)
        .dir(&dir)
        .observer(LastEnd(last.clone()));
    if let Some(url) = url {
        tuner = tuner.mlflow(url, Some("overhead"));
    }
    let server_cpu = || server.map_or(0.0, |s| s.cpu_seconds());
    let (server_before, own_before) = (server_cpu(), own_cpu_seconds());
    let start = Instant::now();
    tuner.fit(report_sum).expect("closure sweep");
    let all = start.elapsed().as_secs_f64();
    let (end, own_end) = last.lock().unwrap().expect("trials ended");
    // The server's CPU is read after `fit`: over the sweep and the drain, an upper bound of
    // what it took during the sweep.
    let server_after = server_cpu();
    verify(&dir, n);
    let per_trial_us = |s: f64| s / n as f64 * 1e6;
    MlflowRun {
        rate: n as f64 / (end - start).as_secs_f64(),
        drained: n as f64 / all,
        own_cpu_us: per_trial_us(own_end - own_before),
        server_cpu_us: per_trial_us(server_after - server_before),
    }
}

fn command_run(root: &Path, n: u64, slots: usize) -> f64 {
    let dir = root.join(format!("command-{slots}"));
    let text = format!(
        "name = \"ovh\"\nmetric = \"loss\"\nsamples = {n}\n[search]\nalgorithm = \"random\"\n[resources]\ncpu_slots = {slots}\n\
         [objective]\ncommand = [\"echo\", \"loss: {{x0}}\"]\n[space]\n{}",
        (0..5)
            .map(|i| format!("x{i} = {{ uniform = [0.0, 1.0] }}\n"))
            .collect::<String>()
    );
    let spec = ExperimentSpec::from_toml(&text, Path::new("bench.toml")).expect("spec");
    let start = Instant::now();
    let result = Tuner::from_spec(spec)
        .dir(&dir)
        .fit_spec()
        .expect("command sweep");
    let rate = n as f64 / start.elapsed().as_secs_f64();
    assert!(result
        .trials()
        .expect("the sweep's trials")
        .iter()
        .all(|t| t.status == Status::Completed));
    rate
}

/// Runs Optuna's storage measurement from `benches/peers/run_overhead.py` now, on this
/// machine, in a scratch copy (the script writes next to itself).
fn peer_storage(python: &str, root: &Path, storage: &str) -> Option<f64> {
    let bench = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peers");
    let scratch = root.join("peers");
    std::fs::create_dir_all(&scratch).ok()?;
    for f in ["run_overhead.py", "adapters.py", "functions.py"] {
        std::fs::copy(bench.join(f), scratch.join(f)).ok()?;
    }
    let out = scratch.join(format!("{storage}.json"));
    let status = Command::new(python)
        .arg(scratch.join("run_overhead.py"))
        .args([
            "--single",
            "storage",
            storage,
            "random",
            "1000",
            "90",
            "--single-out",
        ])
        .arg(&out)
        .status()
        .ok()?;
    if !status.success() {
        eprintln!("peer run {storage} failed: {status}");
        return None;
    }
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).ok()?).ok()?;
    json["trials_per_s"].as_f64()
}

fn max_rss_mib() -> f64 {
    // SAFETY: rusage is plain integers, for which all-zero is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct we own.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    usage.ru_maxrss as f64 / 1024.0
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` does not: run a smoke-sized pass then.
    let full = std::env::args().any(|a| a == "--bench");
    let (n_closure, n_command) = if full { (20_000, 500) } else { (500, 20) };
    let root = tempfile::tempdir().expect("scratch dir");

    println!("tune overhead: trivial objective (sum of 5 uniform params), random search, sled store durable");
    println!(
        "cores: {}",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let mut rows: Vec<(String, f64)> = Vec::new();
    for slots in [1, 2, 4, 8, 16] {
        let rate = closure_run(root.path(), n_closure, slots);
        rows.push((
            format!("tune closure, {slots} slot(s), {n_closure} trials"),
            rate,
        ));
    }
    let rss = max_rss_mib();
    for slots in [2, 8] {
        let rate = command_run(root.path(), n_command, slots);
        rows.push((
            format!("tune command (echo), {slots} slots, {n_command} trials"),
            rate,
        ));
    }

    let python = std::env::var("TUNE_PEER_PYTHON").ok();
    let measured = python.as_deref().and_then(|py| {
        let journal = peer_storage(py, root.path(), "journalfile")?;
        let sqlite = peer_storage(py, root.path(), "sqlite")?;
        Some((journal, sqlite))
    });
    let (journal, sqlite, source) = match measured {
        Some((j, s)) => (j, s, "measured now, same machine"),
        None => (
            PEER_JOURNAL_RANDOM,
            PEER_SQLITE_RANDOM,
            "published in benches/peers/README.md",
        ),
    };

    println!();
    println!("| method | trials/s | vs Optuna journal | vs Optuna SQLite | vs Ray Tune |");
    println!("|---|---|---|---|---|");
    for (name, rate) in &rows {
        println!(
            "| {name} | {rate:.1} | {:.1}x | {:.1}x | {:.0}x |",
            rate / journal,
            rate / sqlite,
            rate / PEER_RAY_DEFAULT
        );
    }
    println!(
        "| optuna 5 random, JournalFileBackend, 1000 trials ({source}) | {journal:.1} | 1.0x | | |"
    );
    println!("| optuna 5 random, SQLite, 1000 trials ({source}) | {sqlite:.1} | | 1.0x | |");
    println!("| ray tune 2.60 defaults, 200 trials (published) | {PEER_RAY_DEFAULT} | | | 1x |");
    println!();
    println!("peak RSS after the closure runs: {rss:.1} MiB");

    search_cost_table(root.path(), if full { &[250, 1_000] } else { &[20] });

    if let Ok(python) = std::env::var("TUNE_MLFLOW_PYTHON") {
        mlflow_table(
            root.path(),
            Path::new(&python),
            if full { 2_000 } else { 50 },
        );
    }
}

/// (d): seconds per closure sweep of `n` trials on one slot, by search algorithm.
fn search_cost_table(root: &Path, sizes: &[u64]) {
    let algorithms = [Algorithm::Random, Algorithm::Tpe, Algorithm::Auto];
    println!();
    println!("| closure sweep, 1 slot, no-op objective | random s | tpe s | auto s | auto / tpe |");
    println!("|---|---|---|---|---|");
    for &n in sizes {
        let secs: Vec<f64> = (algorithms.iter())
            .map(|&algorithm| {
                let dir = root.join(format!("cost-{}-{n}", algorithm.as_str()));
                let start = Instant::now();
                Tuner::new(space())
                    .algorithm(algorithm)
                    .metric("loss", Mode::Min)
                    .samples(n)
                    .cpu_slots(1)
                    .dir(&dir)
                    .fit(report_sum)
                    .expect("closure sweep");
                let secs = start.elapsed().as_secs_f64();
                verify(&dir, n);
                secs
            })
            .collect();
        println!(
            "| {n} trials | {:.2} | {:.2} | {:.2} | {:.1}x |",
            secs[0],
            secs[1],
            secs[2],
            secs[2] / secs[1]
        );
    }
}

/// (c): the closure sweep on one slot with MLflow logging off and on, alternating over
/// `TUNE_MLFLOW_ROUNDS` rounds (default 5) so that warm-up and drift fall on both sides, and a
/// check that MLflow got every trial of each logged sweep.
fn mlflow_table(root: &Path, python: &Path, n: u64) {
    let rounds: usize = std::env::var("TUNE_MLFLOW_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    let server = mlflow_server::MlflowServer::start(python);
    let client =
        tune::tracking::mlflow::MlflowClient::new(&server.url, std::time::Duration::from_secs(60))
            .expect("an http URL");
    let experiment = || {
        client
            .experiment_id("overhead")
            .expect("the MLflow experiment")
    };
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        off.push(closure_mlflow_run(root, n, None, round));
        on.push(closure_mlflow_run(root, n, Some(&server), round));
        let runs = client
            .search_runs(
                &experiment(),
                &format!(
                    "tags.`tune.role` = 'trial' AND tags.`tune.sweep_id` LIKE 'ovh-true-{round}-%'"
                ),
            )
            .expect("searching MLflow");
        assert_eq!(runs.len() as u64, n, "MLflow holds every trial once");
    }
    let median = |runs: &[MlflowRun], of: fn(&MlflowRun) -> f64| {
        let mut v: Vec<f64> = runs.iter().map(of).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let rates = |runs: &[MlflowRun]| {
        runs.iter()
            .map(|r| format!("{:.0}", r.rate))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!();
    println!(
        "MLflow logging (mlflow server, SQLite, on this machine), closure sweep, 1 slot, {n} \
         trials, {rounds} rounds alternating off and on (medians; CPU per trial to the last \
         trial's end; each round's rate last):"
    );
    println!(
        "| logging | trials/s to the last trial's end | vs off | trials/s until MLflow has all \
         | tune's CPU/trial | MLflow server's CPU/trial | rounds (trials/s) |"
    );
    println!("|---|---|---|---|---|---|---|");
    let (off_rate, on_rate) = (median(&off, |r| r.rate), median(&on, |r| r.rate));
    println!(
        "| off | {off_rate:.1} | 1.00x | | {:.0} us | | {} |",
        median(&off, |r| r.own_cpu_us),
        rates(&off)
    );
    println!(
        "| on | {on_rate:.1} | {:.2}x | {:.1} | {:.0} us | {:.0} us (with the drain) | {} |",
        on_rate / off_rate,
        median(&on, |r| r.drained),
        median(&on, |r| r.own_cpu_us),
        median(&on, |r| r.server_cpu_us),
        rates(&on)
    );
}
