//! Search overhead: wall ms per TPE suggestion with 100, 1,000, 5,000 and 10,000 completed
//! trials (5-D continuous, objective = sum of the parameters), beside the peers'
//! `run_overhead.py` windows from benches/peers/README.md.
//!
//!     cargo bench --bench search_overhead
//!
//! The history is grown sequentially, as in a one-worker sweep, so the searcher's caches are in
//! the state a real sweep leaves them in; each window times the suggestion plus recording its
//! result, 100 trials per window (like the peers' [0,100), [900,1000), [4900,5000) windows).

use std::time::Instant;

use tune_search::{History, Mode, Params, RandomSearch, Searcher, Space, Status, Tpe, TpeOptions};

/// Optuna 5 TPE and Hyperopt TPE, ms per trial at the windows ending at 100, 1000, 5000.
const OPTUNA_TPE: [f64; 3] = [1.64, 10.76, 60.29];
const HYPEROPT_TPE: [f64; 3] = [4.30, 12.47, 71.80];
const OPTUNA_RANDOM: [f64; 3] = [0.17, 0.15, 0.15];

fn objective(p: &Params) -> f64 {
    p.iter().filter_map(|(_, v)| v.as_f64()).sum()
}

/// (mean, median) ms per trial in each window [end - 100, end). The median is shown too
/// because a shared machine adds spikes the mean keeps.
fn windows(searcher: &mut dyn Searcher, ends: &[u64]) -> Vec<(f64, f64)> {
    let mut h = History::new(Mode::Min);
    let mut out = Vec::new();
    let mut id = 0;
    for &end in ends {
        let mut times = Vec::new();
        while id < end {
            let start = Instant::now();
            let p = searcher.suggest(id, &h).expect("suggestion");
            let v = objective(&p);
            h.record(id, p, Status::Running);
            h.report(id, 1, v);
            h.set_status(id, Status::Completed);
            if id >= end - 100 {
                times.push(1000.0 * start.elapsed().as_secs_f64());
            }
            id += 1;
        }
        let mean = times.iter().sum::<f64>() / times.len() as f64;
        times.sort_by(f64::total_cmp);
        out.push((mean, times[times.len() / 2]));
    }
    out
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let ends: Vec<u64> = if full {
        vec![100, 1_000, 5_000, 10_000]
    } else {
        vec![100, 1_000]
    };
    let space = (0..5)
        .fold(Space::builder(), |b, i| {
            b.uniform(format!("x{i}"), 0.0, 1.0)
        })
        .build()
        .expect("space");
    println!("ms per trial (suggest + record), 5-D continuous, sequential; peers from benches/peers/README.md");
    println!();
    let tpe = windows(
        &mut Tpe::new(space.clone(), 0, TpeOptions::default()),
        &ends,
    );
    let random = windows(&mut RandomSearch::new(space, 0), &ends);
    println!("| window | tune tpe mean (median) | optuna tpe | hyperopt tpe | tune tpe vs optuna | tune random | optuna random |");
    println!("|---|---|---|---|---|---|---|");
    for (i, end) in ends.iter().enumerate() {
        let peer = |row: &[f64; 3]| match end {
            100 => Some(row[0]),
            1_000 => Some(row[1]),
            5_000 => Some(row[2]),
            _ => None,
        };
        let show = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.2}"));
        let ratio =
            peer(&OPTUNA_TPE).map_or("-".to_string(), |o| format!("{:.0}x faster", o / tpe[i].0));
        println!(
            "| {}-{} | {:.3} ({:.3}) | {} | {} | {} | {:.4} | {} |",
            end - 100,
            end,
            tpe[i].0,
            tpe[i].1,
            show(peer(&OPTUNA_TPE)),
            show(peer(&HYPEROPT_TPE)),
            ratio,
            random[i].0,
            show(peer(&OPTUNA_RANDOM)),
        );
    }
    // No peer numbers for this one: a check that int and choice dimensions stay as cheap.
    let mixed: Space = toml::from_str(
        "a = { uniform = [0.0, 1.0] }\nb = { loguniform = [1e-5, 1.0] }\n\
         c = { uniform = [0.0, 1.0] }\nn = { int = [1, 64] }\n\
         act = { choice = [\"relu\", \"tanh\", \"gelu\", \"silu\"] }",
    )
    .expect("space");
    let tpe = windows(&mut Tpe::new(mixed, 0, TpeOptions::default()), &ends);
    println!();
    println!("mixed 5-D space (3 float, 1 int, 1 choice of 4), ms per trial, mean (median):");
    println!();
    println!("| window | tune tpe |");
    println!("|---|---|");
    for (i, end) in ends.iter().enumerate() {
        println!(
            "| {}-{} | {:.3} ({:.3}) |",
            end - 100,
            end,
            tpe[i].0,
            tpe[i].1
        );
    }
}
