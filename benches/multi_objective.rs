//! Several objectives: the hypervolume of every trial's values at the end of a run (larger is
//! better), median over 20 seeds, tune's NSGA-II and multi-objective TPE beside Optuna 5's
//! NSGAIISampler and TPESampler run in the same bench with the same budgets:
//!
//!     TUNE_PEER_PYTHON=venv/bin/python3 cargo bench --bench multi_objective
//!
//! (`benches/peers/optuna_mo.py`; its interpreter needs optuna 5.0.0. Without
//! `TUNE_PEER_PYTHON` the table has tune's columns alone. `TUNE_BENCH_SEEDS` sets the seeds,
//! `TUNE_BENCH_FUNCTIONS=ZDT2,DTLZ2` picks functions, `TUNE_TPE_OPTS` TPE's options.)
//! Each run is sequential, one trial at a time. The hypervolumes of both sides are computed
//! here, by `tune_search::pareto::hypervolume`, against each function's fixed reference point.
//! A second table, tune's alone, repeats the TPE columns on held-out functions
//! (`mo_functions::held_out`), with the good trials weighed equally (Optuna 5's MOTPE) beside
//! tune's hypervolume shares, so that the choice is checked away from the reported table.
//! A third gives TPE's time per suggestion with 2, 3 and 4 objectives (tune's alone).

use tune_testkit::mo_functions;
use tune_testkit::runs;
use tune_testkit::tpe_env;

use mo_functions::MultiBenchmark;
use runs::{in_parallel, median, peer_json};
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

/// The functions `only` names (comma-separated), or all of them.
fn picked(functions: Vec<MultiBenchmark>, only: Option<&str>) -> Vec<MultiBenchmark> {
    functions
        .into_iter()
        .filter(|b| only.is_none_or(|o| o.split(',').any(|n| n == b.name)))
        .collect()
}

/// Median hypervolume over `seeds` of NSGA-II's runs on `b`.
fn nsga2_volume(b: &MultiBenchmark, seeds: u64) -> f64 {
    median(in_parallel(seeds, |s| {
        let values = run(
            &mut Nsga2::new(b.space.clone(), s, Nsga2Options::default()),
            b,
        );
        hypervolume(&values, &b.reference)
    }))
}

/// Median hypervolume over `seeds` of TPE's runs on `b` with `opts`.
fn tpe_volume(b: &MultiBenchmark, seeds: u64, opts: &TpeOptions) -> f64 {
    median(in_parallel(seeds, |s| {
        let values = run(&mut Tpe::new(b.space.clone(), s, opts.clone()), b);
        hypervolume(&values, &b.reference)
    }))
}

/// The TPE options with the good trials weighed equally, as Optuna 5 weighs them.
fn equal_weights(opts: &TpeOptions) -> TpeOptions {
    TpeOptions {
        hypervolume_weights: false,
        ..opts.clone()
    }
}

/// Mean seconds of TPE's last 20 suggestions in a sequential run of `n` trials on a
/// 6-variable DTLZ2 with `m` objectives.
fn seconds_per_suggestion(m: usize, n: u64, opts: &TpeOptions) -> f64 {
    let space = mo_functions::unit_cube(6);
    let mut h = History::with_objectives(vec![Mode::Min; m]);
    let mut tpe = Tpe::new(space, 0, opts.clone());
    let mut late = 0.0;
    for id in 0..n {
        let start = std::time::Instant::now();
        let p = tpe.suggest(id, &h).expect("a suggestion");
        if id + 20 >= n {
            late += start.elapsed().as_secs_f64();
        }
        let v = mo_functions::dtlz(&p, 6, m);
        h.record(id, p, Status::Running);
        h.report_values(id, 1, &v);
        h.set_status(id, Status::Completed);
    }
    late / 20.0
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
    let only = std::env::var("TUNE_BENCH_FUNCTIONS").ok();
    let functions = picked(mo_functions::all(), only.as_deref());
    let names: Vec<&str> = functions.iter().map(|b| b.name).collect();
    let mut args = vec![seeds.to_string()];
    args.extend(names.iter().map(|n| n.to_string()));
    let peer = peer_json("optuna_mo.py", &args);
    println!();
    println!("Several objectives: median hypervolume of all trials over {seeds} seeds (larger is better), all measured in this run");
    if let Some(p) = &peer {
        println!("(optuna {})", p["optuna"]);
    }
    println!();
    println!("| function (budget, reference) | tune nsga2 | tune tpe | tune tpe, equal weights | optuna NSGAII | optuna TPE | best tune / best optuna |");
    println!("|---|---|---|---|---|---|---|");
    let opts = tpe_env::tpe_options();
    let mut wins = 0;
    for b in functions {
        let volume = |values: &[Vec<f64>]| hypervolume(values, &b.reference);
        let nsga2 = nsga2_volume(&b, seeds);
        let tpe = tpe_volume(&b, seeds, &opts);
        let tpe_equal = tpe_volume(&b, seeds, &equal_weights(&opts));
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
            "| {} ({}, {:?}) | {nsga2:.4} | {tpe:.4} | {tpe_equal:.4} | {their_nsga2} | {their_tpe} | {ratio} |",
            b.name, b.budget, b.reference
        );
    }
    let held_out = picked(mo_functions::held_out(), only.as_deref());
    if !held_out.is_empty() {
        println!();
        println!("Held out (tune only): the same columns on functions no choice was made on");
        println!();
        println!(
            "| function (budget, reference) | tune nsga2 | tune tpe | tune tpe, equal weights |"
        );
        println!("|---|---|---|---|");
    }
    for b in &held_out {
        println!(
            "| {} ({}, {:?}) | {:.4} | {:.4} | {:.4} |",
            b.name,
            b.budget,
            b.reference,
            nsga2_volume(b, seeds),
            tpe_volume(b, seeds, &opts),
            tpe_volume(b, seeds, &equal_weights(&opts))
        );
    }
    if peer.is_some() {
        println!();
        println!(
            "tune's best above Optuna's best on {wins} of {} (goal: 3 of 4)",
            names.len()
        );
    }
    if only.is_none() {
        println!();
        println!("TPE's time per suggestion (mean of the last 20 of a sequential run, one thread), 6-variable DTLZ2");
        println!();
        println!("| objectives | trials | hypervolume weights | equal weights |");
        println!("|---|---|---|---|");
        for (m, n) in [(2, 400), (3, 400), (4, 400), (3, 1000)] {
            println!(
                "| {m} | {n} | {:.1} ms | {:.1} ms |",
                seconds_per_suggestion(m, n, &opts) * 1e3,
                seconds_per_suggestion(m, n, &equal_weights(&opts)) * 1e3
            );
        }
    }
}
