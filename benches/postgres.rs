//! A sweep kept in PostgreSQL: trials/s of a trivial closure (the overhead bench's objective),
//! and whether the cost per trial grows with what the database already holds, beside Optuna's
//! RDBStorage on the same server.
//!
//!     cargo bench --bench postgres                  # a private server (as the tests start)
//!     TUNE_BENCH_DATABASE_URL=postgres://... cargo bench --bench postgres
//!     TUNE_PEER_PYTHON=venv/bin/python cargo bench --bench postgres
//!                                                   # + Optuna 5 RDBStorage (psycopg2)
//!
//! Every sweep is read back from the database and checked before its rate is printed.
//! One coordinator, no `tune worker` yet: this is the store's cost, not a distributed sweep.

use tune_testkit::trivial;

use tune_testkit::pg_server;

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use trivial::{is_sum_of_params, report_sum, space};
use tune::experiment::{Experiment, StoreLocation};
use tune::{Algorithm, Mode, Tuner};

/// When the first and the last trial of a sweep ran (the rate excludes loading at start).
type Span = Arc<Mutex<Option<(Instant, Instant)>>>;

/// A closure sweep of `n` trials in experiment `name` at `url` (resumed to `n` if it exists);
/// trials/s between its first and last trial.
fn sweep(url: &str, name: &str, n: u64, slots: usize, resume: bool) -> f64 {
    let tmp = tempfile::tempdir().expect("tempdir");
    let at = StoreLocation::Postgres(url.to_string());
    let span: Span = Arc::default();
    let seen = span.clone();
    let objective = move |ctx: &mut tune::TrialContext| -> Result<(), tune::BoxError> {
        report_sum(ctx)?;
        let now = Instant::now();
        let mut s = seen.lock().unwrap();
        *s = Some(s.map_or((now, now), |(first, _)| (first, now)));
        Ok(())
    };
    let before = if resume {
        Experiment::read_postgres(url, name)
            .expect("the experiment")
            .trials
            .len() as u64
    } else {
        0
    };
    let tuner = if resume {
        Tuner::resume_in(at, name)
            .dir(tmp.path().join(name))
            .samples(n)
            .cpu_slots(slots)
    } else {
        Tuner::new(space())
            .algorithm(Algorithm::Random)
            .name(name)
            .metric("loss", Mode::Min)
            .samples(n)
            .cpu_slots(slots)
            .dir(tmp.path().join(name))
            .store(at)
    };
    tuner.fit(objective).expect("sweep");
    let stored = Experiment::read_postgres(url, name).expect("read back");
    assert_eq!(stored.trials.len() as u64, n, "every trial stored");
    assert!(stored.trials.iter().all(is_sum_of_params));
    let (first, last) = span.lock().unwrap().expect("trials ran");
    (n - before - 1) as f64 / (last - first).as_secs_f64()
}

/// Optuna 5's random sampler on RDBStorage (PostgreSQL through psycopg2), `n` trials of the
/// same objective, one process: trials/s.
fn optuna(python: &str, url: &str, n: u64) -> Option<f64> {
    let sa_url = url.replacen("postgres://", "postgresql+psycopg2://", 1);
    let script = format!(
        r#"
import time, optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
storage = optuna.storages.RDBStorage({sa_url:?})
study = optuna.create_study(study_name="peer", storage=storage,
                            sampler=optuna.samplers.RandomSampler(seed=0))
def objective(trial):
    return sum(trial.suggest_float(f"x{{i}}", 0.0, 1.0) for i in range(5))
start = time.perf_counter()
study.optimize(objective, n_trials={n})
print({n} / (time.perf_counter() - start))
"#
    );
    let out = Command::new(python).args(["-c", &script]).output().ok()?;
    if !out.status.success() {
        eprintln!(
            "optuna peer failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

fn main() {
    let url =
        std::env::var("TUNE_BENCH_DATABASE_URL").unwrap_or_else(|_| pg_server::fresh_database());
    let n_fresh = 5_000;
    let mut rows: Vec<(String, f64)> = Vec::new();
    for slots in [1, 8] {
        let rate = sweep(&url, &format!("fresh-{slots}"), n_fresh, slots, false);
        rows.push((
            format!("tune closure, {slots} slot(s), {n_fresh} trials, empty experiment"),
            rate,
        ));
    }
    // 100,000 trials first, then 1,000 more by a resume: the cost per trial after.
    let big = 100_000;
    let filled = sweep(&url, "filled", big, 8, false);
    rows.push((
        format!("tune closure, 8 slots, the first {big} trials"),
        filled,
    ));
    let load = Instant::now();
    let _ = Experiment::read_postgres(&url, "filled").expect("read");
    let load_s = load.elapsed().as_secs_f64();
    let after = sweep(&url, "filled", big + 1_000, 8, true);
    rows.push((
        format!("tune closure, 8 slots, 1,000 trials after {big} are stored"),
        after,
    ));
    let peer = std::env::var("TUNE_PEER_PYTHON")
        .ok()
        .and_then(|py| optuna(&py, &url, 1_000));

    println!();
    println!("| method | trials/s | vs Optuna RDBStorage (PostgreSQL, same server, same run) |");
    println!("|---|---|---|");
    for (name, rate) in &rows {
        let ratio = peer.map_or("-".into(), |p| format!("{:.1}x", rate / p));
        println!("| {name} | {rate:.0} | {ratio} |");
    }
    match peer {
        Some(p) => {
            println!("| optuna 5 random, RDBStorage, 1,000 trials, 1 process | {p:.1} | 1.0x |")
        }
        None => println!(
            "| optuna 5 (set TUNE_PEER_PYTHON to a python with optuna 5 and psycopg2) | - | |"
        ),
    }
    println!();
    println!("reading {big} trials back (what a resume does first): {load_s:.1} s");
}
