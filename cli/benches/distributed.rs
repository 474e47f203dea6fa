//! One sweep, many worker processes, one PostgreSQL: trials/s with 1, 4 and 8 `tune worker`
//! processes (a trivial command objective, and a trivial closure through the Rust API's
//! [`tune::remote::Worker`]), beside Optuna 5 RDBStorage with the same number of worker
//! processes on the same server; and the report -> decision round trip as a trial sees it.
//!
//!     cargo bench -p tune-cli --bench distributed               # a private server (as the tests start)
//!     TUNE_BENCH_DATABASE_URL=postgres://... cargo bench -p tune-cli --bench distributed
//!     TUNE_PEER_PYTHON=venv/bin/python cargo bench -p tune-cli --bench distributed
//!                                                   # + Optuna 5 (optuna, psycopg2)
//!     TUNE_BENCH_PART=growth cargo bench -p tune-cli --bench distributed
//!                                                   # only the cost per trial as tables grow
//!     TUNE_BENCH_PART=checkpoints cargo bench -p tune-cli --bench distributed
//!                                                   # only checkpoints: database vs a folder
//!
//! The coordinator is `tune run SPEC --store URL --slots 0` (it runs no trial itself). Every
//! sweep is read back and checked before its rate is printed; a rate is trials between the
//! first trial's start and the last one's end, as stored.

use tune_testkit::trivial;

use tune_testkit::pg_server;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use trivial::{is_sum_of_params, report_sum};
use tune::experiment::Experiment;

/// Set in a worker process this bench starts: `URL NAME`.
const WORKER_ENV: &str = "TUNE_BENCH_WORKER";

/// The trivial command: reports `x0` once.
const COMMAND: &str = r#"["sh", "-c", "echo '{{\"loss\": {x0}}}'"]"#;

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Command,
    Closure,
}

/// A closure worker (this bench run again): runs trials until the sweep is finished, then
/// prints how long each report took to be decided, in microseconds.
fn closure_worker(spec: &str) {
    let (url, name) = spec.split_once(' ').expect("URL NAME");
    let waits = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = waits.clone();
    tune::remote::Worker::new(url)
        .experiment(name)
        .slots(1)
        .run(move |ctx| {
            let asked = Instant::now();
            let result = report_sum(ctx);
            seen.lock()
                .unwrap()
                .push(asked.elapsed().as_micros() as u64);
            result
        })
        .expect("worker");
    let waits = waits.lock().unwrap();
    let line: Vec<String> = waits.iter().map(u64::to_string).collect();
    println!("{}", line.join(" "));
}

fn tune_bin() -> &'static str {
    env!("CARGO_BIN_EXE_tune")
}

/// Runs a sweep of `n` trials with `workers` worker processes, with `filler` ended attempts
/// and decided reports of other trials put in the experiment's protocol tables before the
/// workers start; trials/s, and the report -> decision waits of closure workers.
fn sweep(url: &str, kind: Kind, workers: usize, n: u64, filler: u64) -> (f64, Vec<u64>) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let name = format!(
        "{}-{workers}-{n}-{filler}",
        if kind == Kind::Command {
            "command"
        } else {
            "closure"
        }
    );
    let spec = tmp.path().join("space.toml");
    let space: String = (0..5)
        .map(|i| format!("x{i} = {{ uniform = [0.0, 1.0] }}\n"))
        .collect();
    std::fs::write(
        &spec,
        format!(
            "name = \"{name}\"\nmetric = \"loss\"\nsamples = {n}\n\n[search]\nalgorithm = \"random\"\n\n[objective]\ncommand = {COMMAND}\n\n[space]\n{space}"
        ),
    )
    .expect("spec");
    let mut coordinator = start_coordinator(url, &spec, &name, &tmp.path().join("c"));
    if filler > 0 {
        fill(url, &name, filler);
    }
    let started: Vec<Child> = (0..workers)
        .map(|i| {
            let mut cmd = match kind {
                Kind::Command => {
                    let mut cmd = Command::new(tune_bin());
                    cmd.args(["worker", url, "--experiment", &name, "--slots", "1"])
                        .arg("--dir")
                        .arg(tmp.path().join(format!("w{i}")));
                    cmd
                }
                Kind::Closure => {
                    let mut cmd = Command::new(std::env::current_exe().expect("this bench"));
                    cmd.env(WORKER_ENV, format!("{url} {name}"));
                    cmd
                }
            };
            cmd.stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("worker")
        })
        .collect();
    assert!(coordinator.wait().expect("coordinator").success());
    let mut waits = Vec::new();
    for w in started {
        let out = w.wait_with_output().expect("worker");
        assert!(out.status.success(), "a worker failed");
        if kind == Kind::Closure {
            waits.extend(
                String::from_utf8_lossy(&out.stdout)
                    .split_whitespace()
                    .map(|w| w.parse::<u64>().expect("a wait")),
            );
        }
    }
    let stored = Experiment::read_postgres(url, &name).expect("read back");
    assert_eq!(stored.trials.len() as u64, n, "every trial stored");
    for t in &stored.trials {
        match kind {
            Kind::Closure => assert!(is_sum_of_params(t), "trial {}", t.id),
            Kind::Command => assert_eq!(t.value("loss"), t.params.f64("x0").ok(), "trial {}", t.id),
        }
        assert_eq!(t.attempts, 1, "trial {} ran once", t.id);
    }
    ((n - 1) as f64 / stored_seconds(&stored.trials), waits)
}

/// `tune run SPEC --store URL --slots 0` into `dir`, once it has created experiment `name`.
fn start_coordinator(url: &str, spec: &Path, name: &str, dir: &Path) -> Child {
    let mut coordinator = Command::new(tune_bin())
        .arg("run")
        .arg(spec)
        .args(["--store", url, "--slots", "0", "--no-tui", "--dir"])
        .arg(dir)
        .stdout(Stdio::null())
        .spawn()
        .expect("coordinator");
    wait_for_experiment(url, name, &mut coordinator);
    coordinator
}

/// Seconds from the first trial's start to the last one's end, as stored.
fn stored_seconds(trials: &[tune::Trial]) -> f64 {
    let first = trials
        .iter()
        .filter_map(|t| t.started_at)
        .min()
        .expect("started");
    let last = trials
        .iter()
        .filter_map(|t| t.finished_at)
        .max()
        .expect("finished");
    (last - first) as f64 / 1000.0
}

/// Puts `count` ended attempts, each with one decided report, of trials the sweep never
/// creates (ids from 10^9) in experiment `name`: what a long sweep leaves in the tables that
/// workers and the coordinator's bridge read for every trial. The statistics are left as
/// autovacuum keeps them, as in a real sweep.
fn fill(url: &str, name: &str, count: u64) {
    let mut db = postgres::Client::connect(url, postgres::NoTls).expect("connect");
    let count = count as i64;
    db.execute(
        "INSERT INTO tune_attempts (experiment, trial, attempt, job, state, worker, device,
                                    token, outcome)
         SELECT e.id, 1000000000 + g, 1, '{}', 'ended', 'filler:1', 'cpu:0',
                nextval('tune_tokens'), 'returned'
         FROM tune_experiments e, generate_series(1, $2::bigint) g WHERE e.name = $1",
        &[&name, &count],
    )
    .expect("filler attempts");
    db.execute(
        "INSERT INTO tune_reports (experiment, trial, attempt, token, step, metrics, heard)
         SELECT a.experiment, a.trial, 1, a.token, 1, '{\"loss\":\"1\"}', 'continue'
         FROM tune_attempts a JOIN tune_experiments e ON e.id = a.experiment
         WHERE e.name = $1 AND a.trial >= 1000000000",
        &[&name],
    )
    .expect("filler reports");
}

fn wait_for_experiment(url: &str, name: &str, coordinator: &mut Child) {
    let started = Instant::now();
    while Experiment::read_postgres(url, name).is_err() {
        assert!(
            coordinator.try_wait().expect("wait").is_none(),
            "the coordinator ended"
        );
        assert!(started.elapsed().as_secs() < 60, "no experiment after 60 s");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Optuna 5's random sampler on RDBStorage, `workers` processes sharing one study, `n` trials
/// in all: trials/s from the first process's start to the last one's end (each measured after
/// its imports).
fn optuna(python: &Path, url: &str, kind: Kind, workers: usize, n: u64) -> Option<f64> {
    let sa_url = url.replacen("postgres://", "postgresql+psycopg2://", 1);
    let study = format!(
        "peer-{}-{workers}",
        if kind == Kind::Command {
            "command"
        } else {
            "closure"
        }
    );
    let create =
        format!("import optuna\noptuna.create_study(study_name={study:?}, storage={sa_url:?})\n");
    let made = Command::new(python).args(["-c", &create]).output().ok()?;
    if !made.status.success() {
        eprintln!(
            "optuna peer failed: {}",
            String::from_utf8_lossy(&made.stderr)
        );
        return None;
    }
    let command = kind == Kind::Command;
    let script = format!(
        r#"
import json, subprocess, time, optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
study = optuna.load_study(study_name={study:?}, storage={sa_url:?},
                          sampler=optuna.samplers.RandomSampler())
def objective(trial):
    xs = [trial.suggest_float(f"x{{i}}", 0.0, 1.0) for i in range(5)]
    if {command}:
        out = subprocess.run(["sh", "-c", "echo '{{\"loss\": %r}}'" % xs[0]],
                             capture_output=True, text=True).stdout
        return json.loads(out)["loss"]
    return sum(xs)
start = time.time()
study.optimize(objective, n_trials={per})
print(start, time.time())
"#,
        command = if command { "True" } else { "False" },
        per = n / workers as u64,
    );
    let procs: Vec<Child> = (0..workers)
        .filter_map(|_| {
            Command::new(python)
                .args(["-c", &script])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .ok()
        })
        .collect();
    let (mut first, mut last) = (f64::MAX, 0.0f64);
    for p in procs {
        let out = p.wait_with_output().ok()?;
        if !out.status.success() {
            eprintln!(
                "optuna peer failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            return None;
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let mut times = text.split_whitespace().map(|t| t.parse::<f64>().ok());
        first = first.min(times.next()??);
        last = last.max(times.next()??);
    }
    Some((n / workers as u64 * workers as u64) as f64 / (last - first))
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

fn main() {
    if let Ok(spec) = std::env::var(WORKER_ENV) {
        return closure_worker(&spec);
    }
    let url =
        std::env::var("TUNE_BENCH_DATABASE_URL").unwrap_or_else(|_| pg_server::fresh_database());
    let python = std::env::var("TUNE_PEER_PYTHON")
        .ok()
        .map(std::path::PathBuf::from);
    // `TUNE_BENCH_PART=growth` (or `checkpoints`) runs only that table.
    let part = std::env::var("TUNE_BENCH_PART").unwrap_or_default();
    let (n, n_peer) = (2_000, 500);
    if part.is_empty() {
        main_table(&url, python.as_deref(), n, n_peer);
    }
    if part.is_empty() || part == "growth" {
        growth(&url);
    }
    if part.is_empty() || part == "checkpoints" {
        checkpoint_table(&url);
    }
}

/// A trial that checkpoints `MiB` of random bytes (incompressible, as weights are) when told to
/// pause, and goes on from its checkpoint: argv `MiB x`.
const CHECKPOINTING: &str = r#"
import json, os, sys
size, x = int(sys.argv[1]) << 20, float(sys.argv[2])
first, restore = 1, os.environ.get("TUNE_RESTORE_DIR")
if restore and os.path.exists(os.path.join(restore, "state")):
    with open(os.path.join(restore, "state")) as f:
        first = int(f.read()) + 1
    assert os.path.getsize(os.path.join(restore, "weights")) == size
for step in range(first, 28):
    print(json.dumps(dict(step=step, loss=x + 1.0 / step)), flush=True)
    decision = sys.stdin.readline().strip()
    if decision == "pause":
        out = os.environ["TUNE_CHECKPOINT_DIR"]
        with open(os.path.join(out, "weights.tmp"), "wb") as f:
            f.write(os.urandom(size))
        os.replace(os.path.join(out, "weights.tmp"), os.path.join(out, "weights"))
        with open(os.path.join(out, "state"), "w") as f:
            f.write(str(step))
    if decision != "continue":
        break
"#;

/// HyperBand (max_t 27, eta 3) on 4 command workers of one slot, each paused trial
/// checkpointing 1 or 16 MiB: trials/s with `[store] checkpoints` a folder (on this machine's
/// disk: the best a shared file system does) and `"database"`, and the database's checkpoint
/// traffic (written + read, from the workers' summaries) per second of the sweep.
fn checkpoint_table(url: &str) {
    println!();
    println!("| HyperBand max_t 27, 4 workers, each pause checkpoints | checkpoints | trials/s | database / folder | MB/s of checkpoints through the database |");
    println!("|---|---|---|---|---|");
    for mib in [1, 16] {
        let mut folder_rate = None;
        for place in ["folder", "database"] {
            let (rate, mb, seconds) = checkpoint_sweep(url, mib, place);
            let ratio = match folder_rate {
                Some(f) => format!("{:.2}x", rate / f),
                None => "-".into(),
            };
            folder_rate.get_or_insert(rate);
            let traffic = match place {
                "database" => format!("{:.1} ({mb:.0} MB in {seconds:.1} s)", mb / seconds),
                _ => "-".into(),
            };
            println!("| {mib} MiB | {place} | {rate:.1} | {ratio} | {traffic} |");
        }
    }
}

/// One sweep of [`checkpoint_table`]: trials/s, MB of checkpoints through the database, and
/// the sweep's seconds.
fn checkpoint_sweep(url: &str, mib: u64, place: &str) -> (f64, f64, f64) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let name = format!("ckpt-{mib}-{place}");
    let script = tmp.path().join("trial.py");
    std::fs::write(&script, CHECKPOINTING).expect("script");
    let checkpoints = match place {
        "database" => "\"database\"".to_string(),
        _ => format!("{:?}", tmp.path().join("shared").display().to_string()),
    };
    let spec = tmp.path().join("space.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"{name}\"\nmetric = \"loss\"\nsamples = 60\nseed = 1\n\n[search]\nalgorithm = \"random\"\n\n\
             [scheduler]\nkind = \"hyperband\"\nmax_t = 27\nreduction_factor = 3\n\n\
             [objective]\ncommand = [\"python3\", {:?}, \"{mib}\", \"{{x}}\"]\n\n\
             [space]\nx = {{ uniform = [0.0, 1.0] }}\n\n[store]\ncheckpoints = {checkpoints}\n",
            script.display().to_string()
        ),
    )
    .expect("spec");
    let started = Instant::now();
    let mut coordinator = start_coordinator(url, &spec, &name, &tmp.path().join("c"));
    let workers: Vec<Child> = (0..4)
        .map(|i| {
            Command::new(tune_bin())
                .args([
                    "worker",
                    url,
                    "--experiment",
                    &name,
                    "--slots",
                    "1",
                    "--dir",
                ])
                .arg(tmp.path().join(format!("w{i}")))
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("worker")
        })
        .collect();
    assert!(coordinator.wait().expect("coordinator").success());
    let mut mb = 0.0;
    for w in workers {
        let out = w.wait_with_output().expect("worker");
        assert!(out.status.success(), "a worker failed");
        // "tune worker: wrote N trial folders (X MB) to the database, read M (Y MB)"
        for line in String::from_utf8_lossy(&out.stderr).lines() {
            if let Some(rest) = line.strip_prefix("tune worker: wrote ") {
                mb += rest
                    .split('(')
                    .skip(1)
                    .filter_map(|p| p.split(' ').next()?.parse::<f64>().ok())
                    .sum::<f64>();
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let stored = Experiment::read_postgres(url, &name).expect("read back");
    let mut resumed = 0;
    for t in &stored.trials {
        // Every step once, in order: a paused trial went on from its checkpoint.
        let steps: Vec<u64> = t.results.iter().map(|r| r.step).collect();
        assert_eq!(
            steps,
            (1..=steps.len() as u64).collect::<Vec<_>>(),
            "trial {}",
            t.id
        );
        resumed += usize::from(t.attempts > 1);
    }
    assert!(resumed > 0, "no trial was paused and resumed");
    let rate = stored.trials.len() as f64 / stored_seconds(&stored.trials);
    (rate, mb, seconds)
}

/// trials/s with 1, 4 and 8 workers beside Optuna's, and the report -> decision round trip.
fn main_table(url: &str, python: Option<&Path>, n: u64, n_peer: u64) {
    println!("| objective | workers | tune trials/s | Optuna 5 RDBStorage trials/s | ratio | tune report -> decision p50 / p99 |");
    println!("|---|---|---|---|---|---|");
    for kind in [Kind::Command, Kind::Closure] {
        for workers in [1, 4, 8] {
            let (rate, mut waits) = sweep(url, kind, workers, n, 0);
            let peer = python.and_then(|py| optuna(py, url, kind, workers, n_peer));
            waits.sort_unstable();
            let latency = if waits.is_empty() {
                "-".to_string()
            } else {
                format!(
                    "{:.2} ms / {:.2} ms",
                    percentile(&waits, 0.5),
                    percentile(&waits, 0.99)
                )
            };
            println!(
                "| {} | {workers} | {rate:.0} | {} | {} | {latency} |",
                if kind == Kind::Command {
                    "command (sh)"
                } else {
                    "closure"
                },
                peer.map_or("-".into(), |p| format!("{p:.1}")),
                peer.map_or("-".into(), |p| format!("{:.1}x", rate / p)),
            );
        }
    }
}

/// Cost per trial as the protocol tables grow: 1,000 trials on 8 closure workers, in an empty
/// experiment and in one whose tables already hold 100,000 attempts and reports.
fn growth(url: &str) {
    println!();
    println!("| closure, 8 workers, 1,000 trials | tune trials/s | report -> decision p50 / p99 |");
    println!("|---|---|---|");
    for filler in [0, 100_000] {
        let (rate, mut waits) = sweep(url, Kind::Closure, 8, 1_000, filler);
        waits.sort_unstable();
        println!(
            "| after {filler} attempts stored | {rate:.0} | {:.2} ms / {:.2} ms |",
            percentile(&waits, 0.5),
            percentile(&waits, 0.99)
        );
    }
}
