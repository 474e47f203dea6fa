//! Several objectives: the hypervolume of every trial's values at the end of a run (larger is
//! better), median over 20 seeds, tune's NSGA-II and multi-objective TPE beside Optuna 5's
//! NSGAIISampler and TPESampler run in the same bench with the same budgets:
//!
//!     TUNE_PEER_PYTHON=venv/bin/python3 cargo bench --bench multi_objective
//!
//! (`benches/peers/optuna_mo.py`; its interpreter needs optuna 5.0.0. Without
//! `TUNE_PEER_PYTHON` the table has tune's columns alone. `TUNE_BENCH_SEEDS` sets the seeds.)
//! Each run is sequential, one trial at a time. The hypervolumes of both sides are computed
//! here, by `tune_search::pareto::hypervolume`, against each function's fixed reference point.

#[path = "common/mo_functions.rs"]
mod mo_functions;

use std::process::Command;

use mo_functions::MultiBenchmark;
use tune_search::pareto::hypervolume;
use tune_search::{History, Mode, Nsga2, Nsga2Options, Params, Searcher, Status, Tpe, TpeOptions};

/// Every trial's values of one sequential run.
fn run(searcher: &mut dyn Searcher, b: &MultiBenchmark) -> Vec<Vec<f64>> {
    let mut h = History::with_objectives(vec![Mode::Min; b.reference.len()]);
    let mut out = Vec::new();
    for id in 0..b.budget {
        let p = searcher.suggest(id, &h).expect("a suggestion");
        let v = (b.f)(&p);
        h.record(id, p, Status::Running);
        h.report_values(id, 1, &v);
        h.set_status(id, Status::Completed);
        out.push(v);
    }
    out
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        0.5 * (xs[n / 2 - 1] + xs[n / 2])
    }
}

/// The same seeds of `run` on two threads (the bench machine's two cores), in seed order.
fn in_parallel(seeds: u64, run: impl Fn(u64) -> f64 + Sync) -> Vec<f64> {
    std::thread::scope(|scope| {
        let odd = scope.spawn(|| (1..seeds).step_by(2).map(&run).collect::<Vec<_>>());
        let even: Vec<f64> = (0..seeds).step_by(2).map(&run).collect();
        let odd = odd.join().expect("a bench thread");
        (0..seeds as usize)
            .map(|i| if i % 2 == 0 { even[i / 2] } else { odd[i / 2] })
            .collect()
    })
}

fn optuna_mo(seeds: u64) -> Option<serde_json::Value> {
    let python = std::env::var("TUNE_PEER_PYTHON").ok()?;
    let out = Command::new(&python)
        .arg("benches/peers/optuna_mo.py")
        .arg(seeds.to_string())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .map_err(|e| eprintln!("{python}: {e}"))
        .ok()?;
    if !out.status.success() {
        eprintln!(
            "optuna_mo.py failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    serde_json::from_slice(&out.stdout)
        .map_err(|e| eprintln!("optuna_mo.py printed no JSON: {e}"))
        .ok()
}

/// The peer's params as tune's (ints stay ints, strings strings).
fn params_of(json: &serde_json::Value) -> Params {
    let mut p = Params::default();
    for (k, v) in json.as_object().expect("params") {
        let value = if let Some(i) = v.as_i64() {
            tune_search::Value::Int(i)
        } else if let Some(x) = v.as_f64() {
            tune_search::Value::Float(x)
        } else {
            tune_search::Value::Str(v.as_str().expect("a param").to_string())
        };
        p.insert(k.clone(), value);
    }
    p
}

/// Both sides optimise the same functions: tune's copy gives the peer's values at the peer's
/// params.
fn check_agreement(b: &MultiBenchmark, check: &serde_json::Value) {
    for pair in check.as_array().expect("check pairs") {
        let ours = (b.f)(&params_of(&pair[0]));
        let theirs: Vec<f64> = pair[1]
            .as_array()
            .expect("values")
            .iter()
            .map(|v| v.as_f64().expect("a value"))
            .collect();
        for (a, t) in ours.iter().zip(&theirs) {
            assert!(
                (a - t).abs() <= 1e-9 * t.abs().max(1.0),
                "{}: tune's copy gives {ours:?} where the peer's gives {theirs:?}",
                b.name
            );
        }
    }
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let seeds: u64 = std::env::var("TUNE_BENCH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if full { 20 } else { 2 });
    let peer = optuna_mo(seeds);
    println!();
    println!("Several objectives: median hypervolume of all trials over {seeds} seeds (larger is better), all measured in this run");
    if let Some(p) = &peer {
        println!("(optuna {})", p["optuna"]);
    }
    println!();
    println!("| function (budget, reference) | tune nsga2 | tune tpe | optuna NSGAII | optuna TPE | best tune / best optuna |");
    println!("|---|---|---|---|---|---|");
    let mut wins = 0;
    for b in mo_functions::all() {
        let volume = |values: &[Vec<f64>]| hypervolume(values, &b.reference);
        let nsga2 = median(in_parallel(seeds, |s| {
            volume(&run(
                &mut Nsga2::new(b.space.clone(), s, Nsga2Options::default()),
                &b,
            ))
        }));
        let tpe = median(in_parallel(seeds, |s| {
            volume(&run(
                &mut Tpe::new(b.space.clone(), s, TpeOptions::default()),
                &b,
            ))
        }));
        let theirs = peer.as_ref().map(|p| {
            check_agreement(&b, &p["check"][b.name]);
            let side = |algorithm: &str| {
                median(
                    p["runs"][b.name][algorithm]
                        .as_array()
                        .expect("runs")
                        .iter()
                        .map(|run| {
                            let values: Vec<Vec<f64>> =
                                serde_json::from_value(run.clone()).expect("values");
                            volume(&values)
                        })
                        .collect(),
                )
            };
            (side("nsga2"), side("tpe"))
        });
        let (their_nsga2, their_tpe, ratio) = match theirs {
            Some((n, t)) => {
                let ratio = nsga2.max(tpe) / n.max(t);
                wins += usize::from(ratio > 1.0);
                (format!("{n:.4}"), format!("{t:.4}"), format!("{ratio:.4}"))
            }
            None => ("-".into(), "-".into(), "-".into()),
        };
        println!(
            "| {} ({}, {:?}) | {nsga2:.4} | {tpe:.4} | {their_nsga2} | {their_tpe} | {ratio} |",
            b.name, b.budget, b.reference
        );
    }
    if peer.is_some() {
        println!();
        println!("tune's best above Optuna's best on {wins} of 4 (goal: 3)");
    }
}
