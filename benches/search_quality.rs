//! Search quality: median final simple regret over 20 seeds on the six functions of
//! `benches/peers/functions.py`, beside the peers' published table.
//!
//!     cargo bench --bench search_quality
//!     TUNE_BENCH_SEEDS=60 cargo bench --bench search_quality   # steadier medians
//!
//! Each run is sequential (one trial at a time) with the function's budget (100; Hartmann6:
//! 200), like `run_quality.py`. Regret = best value found - known minimum.
//!
//! For deciding a change to TPE, a paired A/B over the eleven development functions (the six
//! and five held out) or, with `TUNE_BENCH_VALIDATION=1`, over the validation set:
//!
//!     TUNE_BENCH_SEEDS=200 TUNE_TPE_AB='{"magic_clip_exponent":2.0}' cargo bench --bench search_quality
//!
//! (`TUNE_TPE_OPTS` sets A, the defaults otherwise; `TUNE_BENCH_DUMP=dir` keeps every regret.)
//!
//! The Gaussian-process searcher beside Optuna 5's GPSampler, run in the same bench with the
//! same seeds and budgets (`benches/peers/optuna_gp.py`; its interpreter needs optuna 5.0.0
//! and torch), and the time each takes for a suggestion with 100 and 300 trials behind it:
//!
//!     TUNE_PEER_PYTHON=venv/bin/python3 TUNE_BENCH_ONLY=gp cargo bench --bench search_quality
//!
//! (`TUNE_BENCH_ONLY=tpe` leaves the GP out, `gp-timing` runs the timing alone; without
//! `TUNE_PEER_PYTHON` the GP tables have tune's columns alone; `TUNE_BENCH_FUNCTIONS=Hartmann6`
//! picks tune's GP rows; `TUNE_BENCH_GP_HELD_OUT=1` adds tune's GP with its defaults beside
//! `GpOptions::optuna()` on the sixteen held-out and validation functions.)
//!
//! `TUNE_BENCH_ONLY=auto` gives docs/benchmarks/auto.md's tables; `TUNE_BENCH_ONLY=gp-options`
//! runs the GP with `TUNE_GP_OPTS` (JSON) at `TUNE_BENCH_BUDGET_FRACTION` of each budget (its
//! last `TUNE_GP_EXPLOIT_LAST` trials where its mean is best; `TUNE_BENCH_PER_SEED=1` prints
//! each function's regrets, sorted, to stderr), and
//! `TUNE_BENCH_ONLY=gp-noisy` the same with the values observed through noise.
//! `TUNE_BENCH_ONLY=equal-time` runs `auto` against TPE given the same wall time, and
//! `TUNE_BENCH_ONLY=slots` `auto` with `TUNE_BENCH_SLOTS` trials at once, and
//! `TUNE_BENCH_ONLY=constrained` `auto` beside TPE under constraints, and
//! `TUNE_BENCH_ONLY=auto-noisy` `auto` with its values seen through noise
//! (docs/benchmarks/auto.md).

use tune_testkit::functions;
use tune_testkit::runs;
use tune_testkit::tpe_env;

use runs::{in_parallel, median, peer_json};
use tpe_env::tpe_options;

use std::time::Instant;

use tune_search::gp::{GpOptions, GpSearch};
use tune_search::{
    AutoOptions, AutoSearch, History, Mode, Params, RandomSearch, Searcher, Space, Status,
    SweepShape, Tpe, TpeOptions, EXPLOIT_FRACTION,
};

/// Peer medians from benches/peers/README.md: optuna random, optuna TPE (5.0 default =
/// multivariate), optuna TPE independent, hyperopt TPE.
const PEERS: [(&str, [f64; 4]); 6] = [
    ("Branin", [0.38, 0.0188, 0.05, 0.268]),
    ("Hartmann6", [1.064, 0.0307, 0.11, 0.356]),
    ("Rosenbrock4D", [858.8, 24.1, 129.9, 393.0]),
    ("Ackley5D", [17.1, 6.95, 11.37, 14.01]),
    ("LogBowl_lr_wd", [0.0672, 0.00148, 0.00583, 0.0234]),
    ("MixedOptNet", [0.16, 0.15, 0.0226, 0.0664]),
];

/// SMAC3 2.4.1's BO facade (`BlackBoxFacade`), median final regret over seeds 0..19 at the
/// full budget, from `run_quality.py --methods smac-bo` (`benches/peers/results/
/// quality-smac-bo-*.md`; Hartmann6's seeds 0-5 ran first, their values in docs/benchmarks/auto.md).
const SMAC_BO: [(&str, f64); 6] = [
    ("Branin", 2.76e-8),
    ("Hartmann6", 0.0595),
    ("Rosenbrock4D", 221.1),
    ("Ackley5D", 3.372),
    ("LogBowl_lr_wd", 2.33e-10),
    ("MixedOptNet", 1.11e-9),
];

/// `auto` as `tune run` gives it a one-objective FIFO sweep of `samples` trials, with the
/// last `exploit_fraction` of them where its GP's mean is best.
fn auto_fifo(space: &Space, seed: u64, samples: u64, exploit_fraction: f64) -> AutoSearch {
    let shape = SweepShape {
        samples: Some(samples),
        ..SweepShape::default()
    };
    let options = AutoOptions {
        gp_exploit_fraction: exploit_fraction,
        ..AutoOptions::default()
    };
    AutoSearch::new(space.clone(), seed, shape, TpeOptions::default(), &options)
}

fn final_regret(searcher: &mut dyn Searcher, b: &functions::Benchmark) -> f64 {
    final_regret_within(searcher, b, b.budget)
}

/// The regret of the best of `budget` trials of `searcher` on `b`, one at a time.
fn final_regret_within(searcher: &mut dyn Searcher, b: &functions::Benchmark, budget: u64) -> f64 {
    final_regret_in_slots(searcher, b, budget, 1)
}

/// The regret of the best of `budget` trials of `searcher` on `b` with `slots` running at
/// once: each new trial is suggested while the others run, and trials end in the order they
/// started (equal durations).
fn final_regret_in_slots(
    searcher: &mut dyn Searcher,
    b: &functions::Benchmark,
    budget: u64,
    slots: u64,
) -> f64 {
    let mut h = History::new(Mode::Min);
    let mut best = f64::INFINITY;
    let mut running = std::collections::VecDeque::new();
    for id in 0..budget {
        if running.len() as u64 == slots {
            let (ended, v) = running.pop_front().expect("a running trial");
            h.report(ended, 1, v);
            h.set_status(ended, Status::Completed);
        }
        let p = searcher.suggest(id, &h).expect("a suggestion");
        let v = (b.f)(&p);
        best = best.min(v);
        h.record(id, p, Status::Running);
        running.push_back((id, v));
    }
    best - b.known_min
}

fn main() {
    // 20 seeds as in the peers' table; TUNE_BENCH_SEEDS=60 for decisions (medians of 20 are noisy).
    let full = std::env::args().any(|a| a == "--bench");
    let seeds: u64 = std::env::var("TUNE_BENCH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if full { 20 } else { 3 });
    let only = std::env::var("TUNE_BENCH_ONLY").unwrap_or_default();
    if only.is_empty() || only == "tpe" {
        tpe_tables(seeds);
    }
    let timing_trials = if full { 331 } else { 30 };
    match only.as_str() {
        "tpe" => {}
        "auto" => auto_table(seeds),
        "equal-time" => equal_time_table(seeds),
        "slots" => slots_table(seeds),
        "constrained" => constrained_table(seeds),
        "gp-options" => gp_options_trial(seeds),
        "gp-noisy" => gp_noisy_trial(seeds),
        "auto-noisy" => auto_noisy_trial(seeds),
        "gp-timing" => gp_timing(timing_trials),
        _ => gp_tables(seeds, timing_trials),
    }
}

/// `auto` (a GP on these functions) for each function's budget against TPE given the same
/// wall time: the searcher's own suggestion time plus `trial_s` per trial (a trial's duration,
/// counted rather than slept), so TPE runs as many trials as fit. The question it answers: is
/// a GP's 5-30 ms a suggestion worth paying beside trials that cost about as much?
fn equal_time_table(seeds: u64) {
    println!(
        "auto (GP) at each function's budget against TPE with the same wall time, {seeds} seeds: \
         median final regret (TPE's median trial count)"
    );
    println!();
    println!(
        "| function (budget) | trial s | auto | auto s (median) | tpe, same time | tpe trials |"
    );
    println!("|---|---|---|---|---|---|");
    for b in functions::all() {
        for trial_s in [0.0, 0.001, 0.01] {
            let runs: Vec<(f64, f64, f64, f64)> = {
                let results = std::sync::Mutex::new(Vec::new());
                in_parallel(seeds, |s| {
                    let mut auto = auto_fifo(&b.space, s, b.budget, EXPLOIT_FRACTION);
                    let (auto_regret, auto_s) =
                        timed_regret(&mut auto, &b, b.budget, trial_s, None);
                    let mut tpe = Tpe::new(b.space.clone(), s, tpe_options());
                    let (tpe_regret, tpe_trials) =
                        timed_regret(&mut tpe, &b, 20_000, trial_s, Some(auto_s));
                    results.lock().expect("results").push((
                        auto_regret,
                        auto_s,
                        tpe_regret,
                        tpe_trials,
                    ));
                    0.0
                });
                results.into_inner().expect("results")
            };
            let col = |f: fn(&(f64, f64, f64, f64)) -> f64| median(runs.iter().map(f).collect());
            println!(
                "| {} ({}) | {trial_s} | {:.3e} | {:.2} | {:.3e} | {:.0} |",
                b.name,
                b.budget,
                col(|r| r.0),
                col(|r| r.1),
                col(|r| r.2),
                col(|r| r.3),
            );
        }
    }
}

/// Runs `searcher` for `budget` trials, or until the suggestions' time plus `trial_s` a trial
/// reaches `until_s`; returns the final regret and the seconds spent (or, with `until_s`, the
/// trials run).
fn timed_regret(
    searcher: &mut dyn Searcher,
    b: &functions::Benchmark,
    budget: u64,
    trial_s: f64,
    until_s: Option<f64>,
) -> (f64, f64) {
    let mut h = History::new(Mode::Min);
    let mut best = f64::INFINITY;
    let mut spent = 0.0;
    let mut trials = 0;
    for id in 0..budget {
        if until_s.is_some_and(|u| spent >= u) {
            break;
        }
        let started = Instant::now();
        let p = searcher.suggest(id, &h).expect("a suggestion");
        spent += started.elapsed().as_secs_f64() + trial_s;
        let v = (b.f)(&p);
        best = best.min(v);
        h.record(id, p, Status::Running);
        h.report(id, 1, v);
        h.set_status(id, Status::Completed);
        trials += 1;
    }
    let second = if until_s.is_some() {
        trials as f64
    } else {
        spent
    };
    (best - b.known_min, second)
}

fn tpe_tables(seeds: u64) {
    type Make = fn(Space, u64) -> Box<dyn Searcher>;
    let methods: [(&str, Make); 3] = [
        ("tune random", |s, seed| {
            Box::new(RandomSearch::new(s, seed))
        }),
        ("tune tpe", |s, seed| {
            Box::new(Tpe::new(s, seed, tpe_options()))
        }),
        ("tune tpe independent", |s, seed| {
            Box::new(Tpe::new(
                s,
                seed,
                TpeOptions {
                    multivariate: false,
                    ..TpeOptions::default()
                },
            ))
        }),
    ];
    println!("median final regret over {seeds} seeds (lower is better); peers from benches/peers/README.md");
    println!();
    print!("| function (budget) |");
    for (name, _) in &methods {
        print!(" {name} |");
    }
    println!(" optuna random | optuna tpe | optuna tpe indep. | hyperopt tpe | best peer | tune tpe vs best |");
    println!(
        "|---|{}---|---|---|---|---|---|",
        "---|".repeat(methods.len())
    );
    let started = std::time::Instant::now();
    let mut wins = 0;
    let mut log_ratio = 0.0;
    for b in functions::all() {
        let medians: Vec<f64> = methods
            .iter()
            .map(|(_, make)| {
                median(
                    (0..seeds)
                        .map(|s| final_regret(make(b.space.clone(), s).as_mut(), &b))
                        .collect(),
                )
            })
            .collect();
        let peers = PEERS
            .iter()
            .find(|(n, _)| *n == b.name)
            .map(|(_, p)| *p)
            .expect("peer row");
        let best_peer = peers.iter().copied().fold(f64::INFINITY, f64::min);
        let tpe = medians[1];
        wins += usize::from(tpe < best_peer);
        log_ratio += (tpe / best_peer).ln();
        print!("| {} ({}) |", b.name, b.budget);
        for m in &medians {
            print!(" {m:.4} |");
        }
        for p in peers {
            print!(" {p} |");
        }
        println!(
            " {best_peer} | {:.2}x {} |",
            tpe / best_peer,
            if tpe < best_peer { "better" } else { "WORSE" }
        );
    }
    println!();
    println!(
        "geometric mean of tune tpe / best peer: {:.3}",
        (log_ratio / 6.0).exp()
    );
    println!(
        "tune tpe beats the best peer on {wins}/6 functions ({:.1} s)",
        started.elapsed().as_secs_f64()
    );
    held_out(seeds);
    if let Ok(json) = std::env::var("TUNE_TPE_AB") {
        let variant: TpeOptions = serde_json::from_str(&json).expect("TUNE_TPE_AB");
        compare(seeds, tpe_options(), variant, &json);
    }
}

/// `algorithm = "auto"` at half and at the full budget beside tune's TPE at the full budget and
/// the best peer's full-budget median (benches/peers/README.md), on the six development
/// functions: the goals are auto at half the budget at or below the best peer, and auto at the
/// full budget not behind TPE.
fn auto_table(seeds: u64) {
    println!("algorithm = \"auto\": median final regret over {seeds} seeds (lower is better)");
    println!();
    println!("| function (budget) | auto, half | auto, full | tune tpe, full | best peer, full | auto half vs best peer | auto full vs tpe full | SMAC BO, full |");
    println!("|---|---|---|---|---|---|---|---|");
    let (mut half_wins, mut full_ahead) = (0, 0);
    // (auto's half at or below SMAC's full budget, auto's full at or below)
    let mut vs_smac = (0, 0);
    let auto = |b: &functions::Benchmark, budget: u64| {
        median(in_parallel(seeds, |s| {
            let mut a = auto_fifo(&b.space, s, budget, EXPLOIT_FRACTION);
            final_regret_within(&mut a, b, budget)
        }))
    };
    for b in functions::all() {
        let half = auto(&b, b.budget / 2);
        let full = auto(&b, b.budget);
        let tpe = median(in_parallel(seeds, |s| {
            final_regret(&mut Tpe::new(b.space.clone(), s, tpe_options()), &b)
        }));
        let best_peer = PEERS
            .iter()
            .find(|(n, _)| *n == b.name)
            .map(|(_, p)| p.iter().copied().fold(f64::INFINITY, f64::min))
            .expect("peer row");
        half_wins += usize::from(half <= best_peer);
        full_ahead += usize::from(full <= tpe);
        let smac = SMAC_BO
            .iter()
            .find(|(n, _)| *n == b.name)
            .map(|(_, m)| *m)
            .expect("SMAC row");
        vs_smac.0 += usize::from(half <= smac);
        vs_smac.1 += usize::from(full <= smac);
        println!(
            "| {} ({}) | {half:.3e} | {full:.3e} | {tpe:.3e} | {best_peer} | {:.2}x | {:.2}x | {smac:.3e} |",
            b.name,
            b.budget,
            half / best_peer,
            full / tpe,
        );
    }
    println!();
    println!("auto at half the budget at or below the best peer's full budget on {half_wins}/6; auto at the full budget at or below tpe on {full_ahead}/6");
    println!(
        "SMAC's BO: auto at half the budget at or below its full budget on {}/6, auto at the full budget on {}/6",
        vs_smac.0, vs_smac.1
    );
    println!();
    println!("held-out and validation functions (no choice made on them), full budget: auto beside tune's GP and TPE with their defaults, median (mean log10 regret)");
    println!();
    println!("| function (budget) | auto | tune gp | tune tpe |");
    println!("|---|---|---|---|");
    let all: Vec<_> = functions::held_out()
        .into_iter()
        .chain(functions::validation())
        .collect();
    let (mut vs_gp, mut vs_tpe) = (0, 0);
    for b in &all {
        let auto = in_parallel(seeds, |s| {
            let mut a = auto_fifo(&b.space, s, b.budget, EXPLOIT_FRACTION);
            final_regret(&mut a, b)
        });
        let gp = gp_regrets(b, seeds, GpOptions::default());
        let tpe = in_parallel(seeds, |s| {
            final_regret(&mut Tpe::new(b.space.clone(), s, tpe_options()), b)
        });
        let logs = (mean_log10(&auto), mean_log10(&gp), mean_log10(&tpe));
        let (a, g, t) = (median(auto), median(gp), median(tpe));
        vs_gp += usize::from(a <= g);
        vs_tpe += usize::from(a <= t);
        println!(
            "| {} ({}) | {a:.3e} ({:.2}) | {g:.3e} ({:.2}) | {t:.3e} ({:.2}) |",
            b.name, b.budget, logs.0, logs.1, logs.2
        );
    }
    println!();
    println!(
        "auto at or below tune gp on {vs_gp}/{n}, at or below tune tpe on {vs_tpe}/{n}",
        n = all.len()
    );
}

/// `auto` at half of each development function's budget with `TUNE_BENCH_SLOTS` (4) trials
/// running at once, with and without its last tenth by the GP's mean (what the exploiting
/// window does when several of its trials are suggested before the first ends), and `auto`
/// beside TPE (its constant liar on) at half and the full budget with as many at once (whether
/// the slots should move `auto` from its GP).
fn slots_table(seeds: u64) {
    let slots: u64 = std::env::var("TUNE_BENCH_SLOTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    println!("{slots} trials at once, {seeds} seeds: median final regret (mean log10 regret)");
    println!();
    println!(
        "| function (budget) | auto half, exploit fraction 0 | auto half ({EXPLOIT_FRACTION}) \
         | tpe half | auto full | tpe full |"
    );
    println!("|---|---|---|---|---|---|");
    let cell = |regrets: Vec<f64>| {
        format!(
            "{:.3e} ({:.2})",
            median(regrets.clone()),
            mean_log10(&regrets)
        )
    };
    for b in functions::all() {
        let auto = |budget: u64, fraction: f64| {
            in_parallel(seeds, |s| {
                let mut a = auto_fifo(&b.space, s, budget, fraction);
                final_regret_in_slots(&mut a, &b, budget, slots)
            })
        };
        let tpe = |budget: u64| {
            in_parallel(seeds, |s| {
                let mut t = Tpe::new(b.space.clone(), s, tpe_options());
                final_regret_in_slots(&mut t, &b, budget, slots)
            })
        };
        let half = b.budget / 2;
        println!(
            "| {} ({}) | {} | {} | {} | {} | {} |",
            b.name,
            b.budget,
            cell(auto(half, 0.0)),
            cell(auto(half, EXPLOIT_FRACTION)),
            cell(tpe(half)),
            cell(auto(b.budget, EXPLOIT_FRACTION)),
            cell(tpe(b.budget)),
        );
    }
}

/// A function to minimise under constraints, each met at or below 0, with its known
/// constrained minimum.
struct Constrained {
    name: &'static str,
    space: Space,
    f: fn(&Params) -> f64,
    constraints: fn(&Params) -> Vec<f64>,
    known_min: f64,
    budget: u64,
}

fn x_at(p: &Params, i: usize) -> f64 {
    p.f64(&format!("x{i}")).expect("benchmark parameter")
}

/// Three constrained problems from the literature, none used to choose anything: Gramacy et
/// al.'s toy problem (Technometrics 2016: x0 + x1 on the unit square under two constraints,
/// one active at the minimum 0.59979, found here by SLSQP from 300 starts), Branin in
/// Gelbart et al.'s disk (UAI 2014: one of its three minima inside), and Hartmann6 under
/// BoTorch's `|x|_1 <= 3` (half of the cube infeasible, the minimum inside).
fn constrained_functions() -> Vec<Constrained> {
    let unit = |d: usize| {
        let mut b = Space::builder();
        for i in 0..d {
            b = b.uniform(format!("x{i}"), 0.0, 1.0);
        }
        b.build().expect("a space")
    };
    let development = |name: &str| {
        functions::all()
            .into_iter()
            .find(|b| b.name == name)
            .expect("a development function")
    };
    let (branin, hartmann6) = (development("Branin"), development("Hartmann6"));
    vec![
        Constrained {
            name: "Gramacy2016 toy",
            space: unit(2),
            f: |p| x_at(p, 0) + x_at(p, 1),
            constraints: |p| {
                let (a, b) = (x_at(p, 0), x_at(p, 1));
                vec![
                    1.5 - a
                        - 2.0 * b
                        - 0.5 * (2.0 * std::f64::consts::PI * (a * a - 2.0 * b)).sin(),
                    a * a + b * b - 1.5,
                ]
            },
            known_min: 0.599_788_052_010_060_6,
            budget: 50,
        },
        Constrained {
            name: "Branin in a disk",
            space: branin.space,
            f: branin.f,
            constraints: |p| vec![(x_at(p, 0) - 2.5).powi(2) + (x_at(p, 1) - 7.5).powi(2) - 50.0],
            known_min: branin.known_min,
            budget: 50,
        },
        Constrained {
            name: "Hartmann6, |x|_1 <= 3",
            space: hartmann6.space,
            f: hartmann6.f,
            constraints: |p| vec![(0..6).map(|i| x_at(p, i)).sum::<f64>() - 3.0],
            known_min: hartmann6.known_min,
            budget: 100,
        },
    ]
}

/// The regret of the best feasible of `c.budget` trials of `searcher`, one at a time
/// (infinite with none feasible).
fn feasible_regret(searcher: &mut dyn Searcher, c: &Constrained) -> f64 {
    let mut h = History::new(Mode::Min);
    let mut best = f64::INFINITY;
    for id in 0..c.budget {
        let p = searcher.suggest(id, &h).expect("a suggestion");
        let (v, constraints) = ((c.f)(&p), (c.constraints)(&p));
        if constraints.iter().all(|&g| g <= 0.0) {
            best = best.min(v);
        }
        h.record(id, p, Status::Running);
        h.report(id, 1, v);
        h.report_constraints(id, &constraints);
        h.set_status(id, Status::Completed);
    }
    best - c.known_min
}

/// `auto` (a GP with its constraint models) beside TPE (Optuna's constrained TPE) and random
/// search on [`constrained_functions`]: whether constraints should move `auto` from its GP.
fn constrained_table(seeds: u64) {
    println!(
        "constrained problems, {seeds} seeds, one trial at a time: median final regret of the \
         best feasible trial (mean log10 regret; runs with none feasible)"
    );
    println!();
    println!("| function (budget) | auto | auto, exploit fraction 0 | tpe | random |");
    println!("|---|---|---|---|---|");
    let cell = |regrets: Vec<f64>| {
        let none = regrets.iter().filter(|r| r.is_infinite()).count();
        format!(
            "{:.3e} ({:.2}; {none})",
            median(regrets.clone()),
            mean_log10(&regrets)
        )
    };
    for c in constrained_functions() {
        let auto = |fraction: f64| {
            in_parallel(seeds, |s| {
                let mut a = auto_fifo(&c.space, s, c.budget, fraction);
                feasible_regret(&mut a, &c)
            })
        };
        let tpe = in_parallel(seeds, |s| {
            feasible_regret(&mut Tpe::new(c.space.clone(), s, tpe_options()), &c)
        });
        let random = in_parallel(seeds, |s| {
            feasible_regret(&mut RandomSearch::new(c.space.clone(), s), &c)
        });
        println!(
            "| {} ({}) | {} | {} | {} | {} |",
            c.name,
            c.budget,
            cell(auto(EXPLOIT_FRACTION)),
            cell(auto(0.0)),
            cell(tpe),
            cell(random)
        );
    }
}

/// `TUNE_GP_OPTS` (JSON), the GP's defaults without it.
fn gp_options_from_env() -> GpOptions {
    std::env::var("TUNE_GP_OPTS")
        .map(|j| serde_json::from_str(&j).expect("TUNE_GP_OPTS: GpOptions as JSON"))
        .unwrap_or_default()
}

/// `TUNE_BENCH_BUDGET_FRACTION`, `default` without it.
fn budget_fraction_from_env(default: f64) -> f64 {
    std::env::var("TUNE_BENCH_BUDGET_FRACTION")
        .ok()
        .and_then(|f| f.parse().ok())
        .unwrap_or(default)
}

/// tune's GP with the options `TUNE_GP_OPTS` gives (JSON, the defaults otherwise) on
/// `TUNE_BENCH_FUNCTIONS` (any of the bench's, the six development ones otherwise) at
/// `TUNE_BENCH_BUDGET_FRACTION` of each budget (default 0.5): median, mean log10 regret and
/// how many runs came within 0.01. For trying a change to the GP on the development functions
/// before it becomes a default (and on a held-out one, after, to see where it loses).
fn gp_options_trial(seeds: u64) {
    let options = gp_options_from_env();
    let fraction = budget_fraction_from_env(0.5);
    let only = std::env::var("TUNE_BENCH_FUNCTIONS").ok();
    let exploit_last: Option<u64> = std::env::var("TUNE_GP_EXPLOIT_LAST")
        .ok()
        .and_then(|v| v.parse().ok());
    println!("| function (budget) | median | mean log10 | within 0.01 |");
    println!("|---|---|---|---|");
    let every = functions::all()
        .into_iter()
        .chain(functions::held_out())
        .chain(functions::validation());
    // The six development functions unless `TUNE_BENCH_FUNCTIONS` names others.
    for b in every.filter(|b| match &only {
        Some(o) => o.split(',').any(|n| n == b.name),
        None => functions::all().iter().any(|d| d.name == b.name),
    }) {
        let budget = ((b.budget as f64) * fraction).round() as u64;
        let regrets = in_parallel(seeds, |s| {
            let options = GpOptions {
                exploit_from: exploit_last.map(|k| budget.saturating_sub(k)),
                ..options.clone()
            };
            let mut gp = GpSearch::new(b.space.clone(), s, options).expect("a GP space");
            final_regret_within(&mut gp, &b, budget)
        });
        if std::env::var_os("TUNE_BENCH_PER_SEED").is_some() {
            let mut sorted = regrets.clone();
            sorted.sort_by(f64::total_cmp);
            eprintln!(
                "{}: {:?}",
                b.name,
                sorted.iter().map(|r| format!("{r:.3}")).collect::<Vec<_>>()
            );
        }
        let within = regrets.iter().filter(|r| **r < 0.01).count();
        let log = mean_log10(&regrets);
        println!(
            "| {} ({budget}) | {:.3e} | {log:.2} | {within}/{seeds} |",
            b.name,
            median(regrets)
        );
    }
}

/// tune's GP (`TUNE_GP_OPTS`) on the six functions observed with Gaussian noise of 1 % and
/// 10 % of each function's spread (the deviation of 1,000 random points' values), at
/// `TUNE_BENCH_BUDGET_FRACTION` of each budget: the true regret of the trial with the best
/// observed value, median and mean log10 over the seeds. The check that a change made for
/// exact objectives does not cost noisy ones.
fn gp_noisy_trial(seeds: u64) {
    let options = gp_options_from_env();
    let fraction = budget_fraction_from_env(1.0);
    println!(
        "| function (budget) | noise 1 %: median | mean log10 | noise 10 %: median | mean log10 |"
    );
    println!("|---|---|---|---|---|");
    for b in functions::all() {
        let spread = spread_of(&b);
        let budget = ((b.budget as f64) * fraction).round() as u64;
        let mut row = format!("| {} ({budget}) |", b.name);
        for level in [0.01, 0.1] {
            let regrets = in_parallel(seeds, |s| {
                let mut gp =
                    GpSearch::new(b.space.clone(), s, options.clone()).expect("a GP space");
                noisy_regret(&mut gp, &b, budget, level * spread, s)
            });
            let log = mean_log10(&regrets);
            row += &format!(" {:.3e} | {log:.2} |", median(regrets));
        }
        println!("{row}");
    }
}

/// `auto` at half of each development function's budget with its values observed through
/// noise, with and without its last tenth by the GP's mean: whether the greedy end is still
/// worth it when a trial's value is not its truth.
fn auto_noisy_trial(seeds: u64) {
    println!(
        "auto at half the budget, values seen through noise (a share of the values' spread), \
         {seeds} seeds: median true regret of the best trial seen (mean log10)"
    );
    println!();
    println!(
        "| function (budget) | noise 1 %, fraction 0 | noise 1 %, default | noise 10 %, fraction 0 | noise 10 %, default |"
    );
    println!("|---|---|---|---|---|");
    for b in functions::all() {
        let spread = spread_of(&b);
        let budget = b.budget / 2;
        let mut row = format!("| {} ({budget}) |", b.name);
        for level in [0.01, 0.1] {
            for fraction in [0.0, EXPLOIT_FRACTION] {
                let regrets = in_parallel(seeds, |s| {
                    let mut a = auto_fifo(&b.space, s, budget, fraction);
                    noisy_regret(&mut a, &b, budget, level * spread, s)
                });
                row += &format!(
                    " {:.3e} ({:.2}) |",
                    median(regrets.clone()),
                    mean_log10(&regrets)
                );
            }
        }
        println!("{row}");
    }
}

/// The standard deviation of `b`'s values over 1,000 random points: the scale of the noise.
fn spread_of(b: &functions::Benchmark) -> f64 {
    let mut random = RandomSearch::new(b.space.clone(), 12_345);
    let empty = History::new(Mode::Min);
    let values: Vec<f64> = (0..1000)
        .map(|id| (b.f)(&random.suggest(id, &empty).expect("a random point")))
        .collect();
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / values.len() as f64).sqrt()
}

/// The true regret of the trial with the best value seen, of `budget` trials of `searcher`
/// on `b` (one at a time) whose values are seen with normal noise of deviation `sd`.
fn noisy_regret(
    searcher: &mut dyn Searcher,
    b: &functions::Benchmark,
    budget: u64,
    sd: f64,
    seed: u64,
) -> f64 {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut h = History::new(Mode::Min);
    let (mut best_seen, mut best_true) = (f64::INFINITY, f64::INFINITY);
    for id in 0..budget {
        let p = searcher.suggest(id, &h).expect("a suggestion");
        let exact = (b.f)(&p);
        // Box-Muller: a standard normal from two uniforms.
        let (u, v): (f64, f64) = (rng.random::<f64>().max(1e-300), rng.random());
        let seen = exact + sd * (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos();
        if seen < best_seen {
            (best_seen, best_true) = (seen, exact);
        }
        h.record(id, p, Status::Running);
        h.report(id, 1, seen);
        h.set_status(id, Status::Completed);
    }
    best_true - b.known_min
}

/// `benches/peers/optuna_gp.py` with `args` after the folder of peer scripts it imports from.
fn optuna_gp(args: &[String]) -> Option<serde_json::Value> {
    let mut all = vec![concat!(env!("CARGO_MANIFEST_DIR"), "/benches/peers").to_string()];
    all.extend_from_slice(args);
    peer_json("optuna_gp.py", &all)
}

/// tune's GP beside Optuna's GPSampler: median final regret over `seeds` on the six functions,
/// then the time of a suggestion with 100 and 300 trials behind it (Hartmann6, one run each,
/// `timing_trials` long).
fn gp_tables(seeds: u64, timing_trials: u64) {
    println!();
    println!("Gaussian processes: median final regret over {seeds} seeds (lower is better), both measured in this run");
    println!();
    let peer = optuna_gp(&["quality".to_string(), seeds.to_string()]);
    if let Some(p) = &peer {
        println!("(optuna {}, torch {})", p["optuna"], p["torch"]);
        println!();
    }
    println!("| function (budget) | tune gp | tune gp, Optuna's model (`GpOptions::optuna()`) | optuna GPSampler | tune / optuna | mean log10 regret, tune | tune, Optuna's model | optuna |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut wins = 0;
    let only = std::env::var("TUNE_BENCH_FUNCTIONS").ok();
    let picked = functions::all().into_iter().filter(|b| {
        only.as_ref()
            .is_none_or(|o| o.split(',').any(|n| n == b.name))
    });
    for b in picked {
        let ours = gp_regrets(&b, seeds, GpOptions::default());
        let optunas_model = gp_regrets(&b, seeds, GpOptions::optuna());
        let theirs: Option<Vec<f64>> = peer.as_ref().map(|p| {
            p["regrets"][b.name]
                .as_array()
                .expect("regrets per function")
                .iter()
                .map(|v| v.as_f64().expect("a regret"))
                .collect()
        });
        let mut sorted = ours.clone();
        sorted.sort_by(f64::total_cmp);
        eprintln!(
            "{}: tune gp's regrets, sorted: {:?}",
            b.name,
            sorted
                .iter()
                .map(|r| format!("{r:.2e}"))
                .collect::<Vec<_>>()
        );
        let our_log = mean_log10(&ours);
        let optunas_model_log = mean_log10(&optunas_model);
        let optunas_model = median(optunas_model);
        let their_log = theirs
            .as_deref()
            .map_or("-".to_string(), |t| format!("{:.2}", mean_log10(t)));
        let m = median(ours);
        let (theirs_text, ratio) = match theirs.map(median) {
            Some(t) => {
                wins += usize::from(m < t);
                (format!("{t:.3e}"), format!("{:.2}x", m / t))
            }
            None => ("-".into(), "-".into()),
        };
        println!(
            "| {} ({}) | {m:.3e} | {optunas_model:.3e} | {theirs_text} | {ratio} | {our_log:.2} | {optunas_model_log:.2} | {their_log} |",
            b.name, b.budget
        );
    }
    if peer.is_some() {
        println!();
        println!("tune gp has the lower median on {wins}/6 functions");
    }
    if std::env::var_os("TUNE_BENCH_GP_HELD_OUT").is_some() {
        gp_held_out(seeds);
    }
    gp_timing(timing_trials);
}

/// The mean of log10 regret (floored at 1e-12), printed beside the median: where runs split
/// between a basin and the global minimum, the median of 20 turns on one seed.
fn mean_log10(regrets: &[f64]) -> f64 {
    regrets.iter().map(|x| x.max(1e-12).log10()).sum::<f64>() / regrets.len() as f64
}

/// tune's GP's final regret on `b` for each of `seeds`.
fn gp_regrets(b: &functions::Benchmark, seeds: u64, options: GpOptions) -> Vec<f64> {
    in_parallel(seeds, |s| {
        final_regret(
            &mut GpSearch::new(b.space.clone(), s, options.clone()).expect("a GP space"),
            b,
        )
    })
}

/// tune's GP with its defaults beside `GpOptions::optuna()` on the functions no GP choice was
/// made on (the TPE tables' held-out and validation sets): how the warping and the skipped
/// repeats carry over. tune only; `TUNE_BENCH_GP_HELD_OUT=1`.
fn gp_held_out(seeds: u64) {
    println!();
    println!("GP on the held-out and validation functions, median final regret over {seeds} seeds (mean log10 regret)");
    println!();
    println!("| function (budget) | tune gp | tune gp, Optuna's model | lower |");
    println!("|---|---|---|---|");
    let mut lower = 0;
    let all: Vec<_> = functions::held_out()
        .into_iter()
        .chain(functions::validation())
        .collect();
    for b in &all {
        let ours = gp_regrets(b, seeds, GpOptions::default());
        let optunas = gp_regrets(b, seeds, GpOptions::optuna());
        let (our_log, their_log) = (mean_log10(&ours), mean_log10(&optunas));
        let (m, t) = (median(ours), median(optunas));
        lower += usize::from(m < t);
        println!(
            "| {} ({}) | {m:.3e} ({our_log:.2}) | {t:.3e} ({their_log:.2}) | {} |",
            b.name,
            b.budget,
            if m < t { "tune gp" } else { "Optuna's model" }
        );
    }
    println!();
    println!(
        "the defaults have the lower median on {lower}/{}",
        all.len()
    );
}

/// Median seconds of the suggestions for trials `at - 5 .. at + 5`.
fn median_around(seconds: &[f64], at: usize) -> Option<f64> {
    let window = seconds.get(at.checked_sub(5)?..at + 5)?;
    Some(median(window.to_vec()))
}

/// The mean time of the suggestions from 0.9 n to 1.1 n: tune fits its kernel again when the
/// trials have grown by a tenth (`refit_growth`), so this window holds two fits and the
/// suggestions between, the cost per suggestion over a sweep.
fn mean_around(seconds: &[f64], at: usize) -> Option<f64> {
    let window = seconds.get(at - at / 10..at + at / 10)?;
    Some(window.iter().sum::<f64>() / window.len() as f64)
}

/// A statistic of the suggestion times around trial n.
type Statistic = fn(&[f64], usize) -> Option<f64>;

fn gp_timing(trials: u64) {
    let bench = functions::all()
        .into_iter()
        .find(|b| b.name == "Hartmann6")
        .expect("Hartmann6");
    let mut gp = GpSearch::new(bench.space.clone(), 0, GpOptions::default()).expect("a GP space");
    let mut history = History::new(Mode::Min);
    let mut ours = Vec::new();
    for id in 0..trials {
        let started = Instant::now();
        let p = gp.suggest(id, &history).expect("a suggestion");
        ours.push(started.elapsed().as_secs_f64());
        let v = (bench.f)(&p);
        history.record(id, p, Status::Running);
        history.report(id, 1, v);
        history.set_status(id, Status::Completed);
    }
    let theirs: Option<Vec<f64>> = optuna_gp(&[
        "timing".to_string(),
        trials.to_string(),
        bench.name.to_string(),
    ])
    .map(|p| {
        p["seconds"]
            .as_array()
            .expect("seconds")
            .iter()
            .map(|v| v.as_f64().expect("seconds"))
            .collect()
    });
    println!();
    println!("time per suggestion on Hartmann6, one thread (one run of {trials} trials each): the median of the 10 around trial n, and the mean from 0.9 n to 1.1 n");
    println!();
    println!("| trials behind it | statistic | tune gp | optuna GPSampler | optuna / tune |");
    println!("|---|---|---|---|---|");
    for at in [100, 300] {
        let statistics: [(&str, Statistic); 2] = [
            ("median of 10", median_around),
            ("mean of 0.9n..1.1n", mean_around),
        ];
        for (statistic, of) in statistics {
            let Some(o) = of(&ours, at) else {
                continue;
            };
            let t = theirs.as_ref().and_then(|t| of(t, at));
            println!(
                "| {at} | {statistic} | {:.1} ms | {} | {} |",
                o * 1e3,
                t.map_or("-".into(), |t| format!("{:.1} ms", t * 1e3)),
                t.map_or("-".into(), |t| format!("{:.1}x", t / o))
            );
        }
    }
}

/// Paired comparison of two TPE settings on all eleven functions (same seeds for both):
/// medians, how often B beats A, and the mean of ln(regret) (less noisy than a median).
fn compare(seeds: u64, a: TpeOptions, b: TpeOptions, label: &str) {
    println!();
    println!("A = defaults (or TUNE_TPE_OPTS), B = {label}, {seeds} paired seeds:");
    println!();
    println!("| function | median A | median B | B / A | B better | mean ln regret B - A |");
    println!("|---|---|---|---|---|---|");
    let (mut sum_ratio, mut sum_dln, mut n) = (0.0, 0.0, 0.0);
    // TUNE_BENCH_VALIDATION: the third set instead, kept for confirming a choice made on the
    // other two.
    let set = if std::env::var_os("TUNE_BENCH_VALIDATION").is_some() {
        functions::validation()
    } else {
        functions::all()
            .into_iter()
            .chain(functions::held_out())
            .collect()
    };
    for bench in &set {
        let regrets = |o: &TpeOptions| -> Vec<f64> {
            in_parallel(seeds, |s| {
                final_regret(&mut Tpe::new(bench.space.clone(), s, o.clone()), bench)
            })
        };
        let (ra, rb) = (regrets(&a), regrets(&b));
        if let Ok(dir) = std::env::var("TUNE_BENCH_DUMP") {
            let text = format!("{ra:?}\n{rb:?}\n");
            std::fs::write(format!("{dir}/{}.txt", bench.name), text).expect("dump");
        }
        let wins = ra.iter().zip(&rb).filter(|(x, y)| y < x).count();
        let ln = |r: &[f64]| r.iter().map(|x| x.max(1e-12).ln()).sum::<f64>() / r.len() as f64;
        let dln = ln(&rb) - ln(&ra);
        let (ma, mb) = (median(ra), median(rb));
        sum_ratio += (mb / ma).ln();
        sum_dln += dln;
        n += 1.0;
        println!(
            "| {} | {ma:.4e} | {mb:.4e} | {:.3} | {wins}/{seeds} | {dln:+.3} |",
            bench.name,
            mb / ma
        );
    }
    println!();
    println!(
        "geometric mean of median B / A: {:.3}; mean ln regret B - A: {:+.3}",
        (sum_ratio / n).exp(),
        sum_dln / n
    );
}

/// The same medians on functions outside benches/peers, for tune's TPE with its defaults and
/// with Optuna 5's settings ([`TpeOptions::optuna`]): a check that the defaults were not
/// fitted to the six above. The held-out five played no part in choosing `gamma_fraction` but
/// were among the eleven the kernel floors were chosen on; the validation set was written
/// after that choice, to confirm it.
fn held_out(seeds: u64) {
    println!();
    println!("held-out and validation functions (not in benches/peers), median final regret over {seeds} seeds:");
    println!();
    println!("| function (budget) | tune tpe | tune tpe, Optuna 5 settings | ratio |");
    println!("|---|---|---|---|");
    let optuna = TpeOptions::optuna();
    let mut log_ratio = 0.0;
    let all: Vec<_> = functions::held_out()
        .into_iter()
        .chain(functions::validation())
        .collect();
    for b in &all {
        let ours = median(
            (0..seeds)
                .map(|s| final_regret(&mut Tpe::new(b.space.clone(), s, tpe_options()), b))
                .collect(),
        );
        let theirs = median(
            (0..seeds)
                .map(|s| final_regret(&mut Tpe::new(b.space.clone(), s, optuna.clone()), b))
                .collect(),
        );
        log_ratio += (ours / theirs).ln();
        println!(
            "| {} ({}) | {ours:.4} | {theirs:.4} | {:.2}x |",
            b.name,
            b.budget,
            ours / theirs
        );
    }
    println!();
    println!(
        "geometric mean of the ratio: {:.3}",
        (log_ratio / all.len() as f64).exp()
    );
}
