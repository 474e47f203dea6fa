//! Early stopping on the synthetic learning curves of `benches/peers/curves.py`: median regret
//! of the incumbent at equal epoch budgets over 10 seeds, beside the peers' published rows.
//!
//!     cargo bench --bench early_stopping
//!
//! Trials run one at a time, as in `run_asha.py`; then the same with 8 simulated workers.
//! Then LCBench (YAHPO Gym's surrogate, `benches/peers/lcbench/`), scored as
//! `run_lcbench.py` scores it, on a clock that runs each epoch for the seconds the surrogate
//! predicts. `TUNE_BENCH_PARTS=curves` or `=lcbench` runs one part. `TUNE_LCBENCH_TASKS`
//! picks the tasks: `heldout` (the 28 not developed on), `all`, or a comma-separated list;
//! `TUNE_LCBENCH_METHODS` (`|`-separated parts of names, or `=` and a whole name) and `TUNE_BENCH_WORKERS` (`1,8`)
//! narrow the run; `TUNE_BENCH_ASHA=grace,eta` changes the ASHA rows' settings.

use tune_testkit::curves;
use tune_testkit::held_out_curves;
use tune_testkit::lcbench;
use tune_testkit::simulator;
use tune_testkit::tpe_env;

use tpe_env::tpe_options;
use tune_schedulers::{
    Asha, AshaConfig, AshaPromotion, Fifo, HyperBand, HyperBandConfig, MedianConfig,
    MedianStopping, Mode, Scheduler,
};
use tune_search::{RandomSearch, Searcher, Space, Tpe, TpeOptions};

const CHECKPOINTS: [u64; 5] = [243, 405, 810, 1620, 2430];

const PEERS: [(&str, [Option<f64>; 5]); 6] = [
    (
        "random, full budget",
        [
            Some(0.0580),
            Some(0.0395),
            Some(0.0297),
            Some(0.0200),
            Some(0.0175),
        ],
    ),
    (
        "TPE, full budget",
        [
            Some(0.0580),
            Some(0.0395),
            Some(0.0297),
            Some(0.0109),
            Some(0.0055),
        ],
    ),
    (
        "optuna random + SuccessiveHalving",
        [
            Some(0.0666),
            Some(0.0524),
            Some(0.0304),
            Some(0.0301),
            Some(0.0242),
        ],
    ),
    (
        "optuna TPE + Hyperband",
        [
            Some(0.0700),
            Some(0.0351),
            Some(0.0215),
            Some(0.0092),
            Some(0.0071),
        ],
    ),
    (
        "optuna random + Median",
        [
            Some(0.0580),
            Some(0.0395),
            Some(0.0274),
            Some(0.0191),
            Some(0.0165),
        ],
    ),
    (
        "Ray Tune ASHA (max_t 81, grace 1, rf 3)",
        [
            Some(0.0420),
            Some(0.0280),
            Some(0.0235),
            Some(0.0135),
            Some(0.0135),
        ],
    ),
];

type MakeSearcher = fn(u64) -> Box<dyn Searcher>;
type MakeScheduler = fn(u64) -> Box<dyn Scheduler>;

/// `TUNE_BENCH_WORKERS` (`1,8` by default): the simulated worker counts of both parts.
fn bench_workers() -> Vec<usize> {
    std::env::var("TUNE_BENCH_WORKERS")
        .ok()
        .map(|v| v.split(',').filter_map(|w| w.parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 8])
}

/// `TUNE_BENCH_ASHA=grace,eta` for experiments; else `default`.
fn asha_grace_and_eta(default: (u64, u64)) -> (u64, u64) {
    std::env::var("TUNE_BENCH_ASHA")
        .ok()
        .and_then(|v| {
            let (g, r) = v.split_once(',')?;
            Some((g.parse().ok()?, r.parse().ok()?))
        })
        .unwrap_or(default)
}

/// The number in the environment variable `name` (to try other settings), else `default`.
fn env_number<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// ASHA as `run_asha.py` runs Ray's: max_t 81, grace period 1, reduction factor 3.
fn asha_config() -> AshaConfig {
    let (grace_period, reduction_factor) = asha_grace_and_eta((1, 3));
    AshaConfig {
        max_t: 81,
        grace_period: Some(grace_period),
        reduction_factor,
        ..AshaConfig::default()
    }
}

fn asha(seed: u64) -> Box<dyn Scheduler> {
    Box::new(Asha::new(asha_config(), Mode::Min, seed))
}

fn asha_promotion(seed: u64) -> Box<dyn Scheduler> {
    Box::new(AshaPromotion::new(asha_config(), Mode::Min, seed))
}

/// Asynchronous HyperBand (Li et al. 2018): the promotion variant over HyperBand's 5 brackets.
fn async_hyperband(seed: u64) -> Box<dyn Scheduler> {
    let config = AshaConfig {
        max_t: 81,
        grace_period: Some(1),
        reduction_factor: 3,
        brackets: 5,
        ..AshaConfig::default()
    };
    Box::new(AshaPromotion::new(config, Mode::Min, seed))
}

/// Asynchronous HyperBand with ASHA's stopping rule (Ray Tune's `AsyncHyperBandScheduler`;
/// the structure of Optuna's `HyperbandPruner`): 5 brackets from grace period 1.
fn async_hyperband_stopping(seed: u64) -> Box<dyn Scheduler> {
    let config = AshaConfig {
        brackets: 5,
        ..asha_config()
    };
    Box::new(Asha::new(config, Mode::Min, seed))
}

fn hyperband(_seed: u64) -> Box<dyn Scheduler> {
    Box::new(HyperBand::new(
        HyperBandConfig {
            max_t: 81,
            grace_period: env_number("TUNE_BENCH_HB_GRACE", 1),
            ..HyperBandConfig::default()
        },
        Mode::Min,
    ))
}

/// What `tune` gives TPE under median stopping (`ExperimentSpec::tpe_options`).
fn scheduler_tpe_options() -> TpeOptions {
    tpe_options().under_scheduler()
}

/// What `tune` gives TPE under ASHA (`ExperimentSpec::tpe_options`).
fn rung_tpe_options() -> TpeOptions {
    tpe_options().under_rungs()
}

/// What `tune` gives TPE under HyperBand (`ExperimentSpec::tpe_options`).
fn hyperband_tpe_options() -> TpeOptions {
    tpe_options().under_hyperband()
}

/// Median over seeds; `None` (no incumbent yet) counts as +inf, as in the peers' table.
fn median(values: Vec<Option<f64>>) -> Option<f64> {
    let mut v: Vec<f64> = values
        .into_iter()
        .map(|x| x.unwrap_or(f64::INFINITY))
        .collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let m = if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    };
    m.is_finite().then_some(m)
}

/// Runs `run` for seeds 0..seeds and takes, at each of its `points` checkpoints, the median.
fn medians_over_seeds(
    seeds: u64,
    points: usize,
    run: impl Fn(u64) -> Vec<Option<f64>>,
) -> Vec<Option<f64>> {
    let runs: Vec<Vec<Option<f64>>> = (0..seeds).map(run).collect();
    (0..points)
        .map(|i| median(runs.iter().map(|r| r[i]).collect()))
        .collect()
}

fn show(x: Option<f64>) -> String {
    x.map_or("-".to_string(), |v| format!("{v:.4}"))
}

fn main() {
    // 10 seeds as in the peers' table; TUNE_BENCH_SEEDS for steadier medians.
    let seeds = env_number(
        "TUNE_BENCH_SEEDS",
        if std::env::args().any(|a| a == "--bench") {
            10
        } else {
            2
        },
    );
    let part = std::env::var("TUNE_BENCH_PARTS").unwrap_or_default();
    if part.is_empty() || part.contains("curves") {
        curves_tables(seeds);
    }
    if part.is_empty() || part.contains("curves") || part.contains("curve-defaults") {
        defaults_on_curves(seeds);
    }
    if part.is_empty() || part.contains("lcbench") {
        lcbench_tables(seeds);
    }
}

/// The defaults (`kind` and `max_t = 81` alone) on `curves.py` and the held-out curve
/// families: what `auto` gives them now (a GP fitted at a rung) beside what it gave before
/// store format 9 (TPE), one worker, at 810 / 1,620 / 2,430 epochs. None of these was used to
/// choose the rule (LCBench's development tasks were).
fn defaults_on_curves(seeds: u64) {
    let spec = |kind: &str, seed: u64, gp_under_rungs: bool| {
        let text = format!(
            "name = \"curves\"\nmetric = \"loss\"\nsamples = 10000\nseed = {seed}\n\n\
             [search]\nalgorithm = \"auto\"\ngp_under_rungs = {gp_under_rungs}\n\n\
             [scheduler]\nkind = \"{kind}\"\nmax_t = 81\n\n[space]\nx = {{ uniform = [0.0, 1.0] }}\n"
        );
        let mut spec = tune::ExperimentSpec::from_toml(&text, std::path::Path::new("curves.toml"))
            .expect("the defaults' spec");
        spec.space = curves::space();
        spec
    };
    let families: Vec<(&str, simulator::Curves)> =
        std::iter::once(("curves.py", simulator::shared_curves()))
            .chain(held_out_curves::all())
            .collect();
    println!();
    println!("the defaults on curves.py and the held-out curve families, median regret over {seeds} seeds, 1 worker, at 810 / 1620 / 2430 epochs:");
    println!();
    println!("| curves | kind | auto: GP at a rung | auto before format 9: TPE |");
    println!("|---|---|---|---|");
    for (family, curves) in &families {
        for kind in ["asha", "hyperband"] {
            let row = |gp_under_rungs: bool| {
                medians_over_seeds(seeds, 3, |seed| {
                    let spec = spec(kind, seed, gp_under_rungs);
                    simulator::simulate(
                        curves,
                        spec.make_searcher().expect("the searcher").as_mut(),
                        spec.make_scheduler().as_mut(),
                        1,
                        2430,
                        &CHECKPOINTS[2..],
                    )
                })
                .iter()
                .map(|x| show(*x))
                .collect::<Vec<_>>()
                .join(" / ")
            };
            println!("| {family} | {kind} | {} | {} |", row(true), row(false));
        }
    }
}

fn curves_tables(seeds: u64) {
    let methods: [(&str, MakeSearcher, MakeScheduler); 11] = [
        (
            "tune random, full budget",
            |s| Box::new(RandomSearch::new(curves::space(), s)),
            |_| Box::new(Fifo),
        ),
        (
            "tune TPE, full budget",
            |s| Box::new(Tpe::new(curves::space(), s, tpe_options())),
            |_| Box::new(Fifo),
        ),
        (
            "tune random + median",
            |s| Box::new(RandomSearch::new(curves::space(), s)),
            |_| Box::new(MedianStopping::new(MedianConfig::default(), Mode::Min)),
        ),
        (
            "tune TPE + median",
            |s| Box::new(Tpe::new(curves::space(), s, scheduler_tpe_options())),
            |_| Box::new(MedianStopping::new(MedianConfig::default(), Mode::Min)),
        ),
        (
            "tune random + ASHA",
            |s| Box::new(RandomSearch::new(curves::space(), s)),
            asha,
        ),
        (
            "tune TPE + ASHA",
            |s| Box::new(Tpe::new(curves::space(), s, rung_tpe_options())),
            asha,
        ),
        (
            "tune random + ASHA (promotion)",
            |s| Box::new(RandomSearch::new(curves::space(), s)),
            asha_promotion,
        ),
        (
            "tune random + async HyperBand (promotion, 5 brackets)",
            |s| Box::new(RandomSearch::new(curves::space(), s)),
            async_hyperband,
        ),
        (
            "tune random + HyperBand",
            |s| Box::new(RandomSearch::new(curves::space(), s)),
            hyperband,
        ),
        (
            "tune TPE + HyperBand",
            |s| Box::new(Tpe::new(curves::space(), s, hyperband_tpe_options())),
            hyperband,
        ),
        (
            "tune TPE + async HyperBand (ASHA stopping, 5 brackets)",
            |s| Box::new(Tpe::new(curves::space(), s, rung_tpe_options())),
            async_hyperband_stopping,
        ),
    ];
    let shared = simulator::shared_curves();
    for workers in bench_workers() {
        println!("median regret over {seeds} seeds, {workers} worker(s); peers from benches/peers/README.md (1 worker)");
        println!();
        println!("| method | 243 ep | 405 ep | 810 ep | 1620 ep | 2430 ep |");
        println!("|---|---|---|---|---|---|");
        for (name, searcher, scheduler) in &methods {
            let cells: Vec<String> = medians_over_seeds(seeds, CHECKPOINTS.len(), |seed| {
                simulator::simulate(
                    &shared,
                    searcher(seed).as_mut(),
                    scheduler(seed).as_mut(),
                    workers,
                    2430,
                    &CHECKPOINTS,
                )
            })
            .into_iter()
            .map(show)
            .collect();
            println!("| {name} | {} |", cells.join(" | "));
        }
        if workers == 1 {
            for (name, row) in PEERS {
                let cells: Vec<String> = row.iter().map(|x| show(*x)).collect();
                println!("| {name} | {} |", cells.join(" | "));
            }
        }
        println!();
    }
    held_out(seeds);
    held_out_brackets(seeds);
}

/// TPE with `opts` under `scheduler` on held-out `curves`, one worker: the median regret
/// over `seeds` at 810, 1,620 and 2,430 epochs.
fn held_out_medians(
    curves: &simulator::Curves,
    scheduler: MakeScheduler,
    opts: &TpeOptions,
    seeds: u64,
) -> Vec<Option<f64>> {
    medians_over_seeds(seeds, 3, |seed| {
        let mut tpe = Tpe::new(curves::space(), seed, opts.clone());
        simulator::simulate(
            curves,
            &mut tpe,
            scheduler(seed).as_mut(),
            1,
            2430,
            &CHECKPOINTS[2..],
        )
    })
}

/// TPE under ASHA with one bracket and with HyperBand's five (asynchronous HyperBand, the
/// stopping rule) on the held-out curve families.
fn held_out_brackets(seeds: u64) {
    let schedulers: [(&str, MakeScheduler); 3] = [
        ("ASHA, 1 bracket", asha),
        ("ASHA, 5 brackets", async_hyperband_stopping),
        ("HyperBand", hyperband),
    ];
    println!();
    println!("held-out curve families, TPE, median regret over {seeds} seeds, 1 worker, at 810 / 1620 / 2430 epochs:");
    println!();
    println!("| curves | {} |", schedulers.map(|(n, _)| n).join(" | "));
    println!("|---|---|---|---|");
    for (family, curves) in held_out_curves::all() {
        let cells: Vec<String> = schedulers
            .iter()
            .map(|(_, scheduler)| {
                held_out_medians(&curves, *scheduler, &rung_tpe_options(), seeds)
                    .iter()
                    .map(|x| show(*x))
                    .collect::<Vec<_>>()
                    .join(" / ")
            })
            .collect();
        println!("| {family} | {} |", cells.join(" | "));
    }
}

/// TPE under ASHA and HyperBand on curve families outside `curves.py`: with what `tune`
/// gives it there (shallow stopped trials left out) and with Optuna's treatment (all
/// modelled, `stopped_min_depth = 0`), a check that the choice was not fitted to `curves.py`.
fn held_out(seeds: u64) {
    let keep_all = TpeOptions {
        stopped_min_depth: Some(0.0),
        ..scheduler_tpe_options()
    };
    let schedulers: [(&str, MakeScheduler); 2] = [("ASHA", asha), ("HyperBand", hyperband)];
    println!("held-out curve families (not in benches/peers), median regret over {seeds} seeds, 1 worker, at 810 / 1620 / 2430 epochs:");
    println!();
    println!("| curves | TPE + | tune | all stopped trials modelled (Optuna) |");
    println!("|---|---|---|---|");
    let mut log_ratio = (0.0, 0);
    for (family, curves) in held_out_curves::all() {
        for (name, scheduler) in &schedulers {
            let row = |opts: &TpeOptions| held_out_medians(&curves, *scheduler, opts, seeds);
            let (ours, theirs) = (row(&rung_tpe_options()), row(&keep_all));
            if let (Some(a), Some(b)) = (ours[2], theirs[2]) {
                log_ratio.0 += (a.max(1e-6) / b.max(1e-6)).ln();
                log_ratio.1 += 1;
            }
            let cells =
                |r: &[Option<f64>]| r.iter().map(|x| show(*x)).collect::<Vec<_>>().join(" / ");
            println!(
                "| {family} | {name} | {} | {} |",
                cells(&ours),
                cells(&theirs)
            );
        }
    }
    println!();
    println!(
        "geometric mean of the 2430-epoch ratio (tune / Optuna's treatment): {:.3}",
        (log_ratio.0 / f64::from(log_ratio.1.max(1))).exp()
    );
}

/// `run_lcbench.py`'s checkpoints: 10, 20 and 40 full trainings' worth of epochs.
const LCBENCH_EPOCHS: [u64; 3] = [520, 1040, 2080];

/// The peers one trial at a time: mean over the six development tasks of the median
/// normalised regret over 10 seeds (Optuna 5.0.0 from `benches/peers/README.md`, section 4).
const LCBENCH_PEERS: [(&str, [f64; 3]); 12] = [
    // The multi-fidelity anchors (`benches/peers/run_lcbench_mf.py`: SMAC3 2.4.1, DEHB 0.1.2,
    // Syne Tune 0.16; a promotion pays only its new epochs).
    ("SMAC-HB (SMAC3 MultiFidelityFacade)", [0.238, 0.132, 0.063]),
    ("SMAC3 HyperbandFacade (random)", [0.223, 0.180, 0.148]),
    ("DEHB", [0.249, 0.213, 0.195]),
    ("Syne Tune ASHA", [0.321, 0.285, 0.250]),
    ("Syne Tune BOHB", [0.325, 0.293, 0.259]),
    ("random, full budget", [0.380, 0.259, 0.181]),
    ("TPE, full budget", [0.380, 0.160, 0.095]),
    (
        "optuna random + SuccessiveHalving (min 1, eta 3)",
        [0.299, 0.257, 0.224],
    ),
    ("optuna TPE + SuccessiveHalving", [0.409, 0.380, 0.357]),
    (
        "optuna TPE + Hyperband (min 1, max 52, eta 3)",
        [0.263, 0.169, 0.143],
    ),
    ("optuna random + Median", [0.310, 0.274, 0.258]),
    ("optuna TPE + Median", [0.309, 0.265, 0.226]),
];

type LcSearcher = fn(Space, u64) -> Box<dyn Searcher>;
type LcScheduler = fn(u64) -> Box<dyn Scheduler>;

fn lc_random(space: Space, seed: u64) -> Box<dyn Searcher> {
    Box::new(RandomSearch::new(space, seed))
}

fn lc_tpe(space: Space, seed: u64) -> Box<dyn Searcher> {
    Box::new(Tpe::new(space, seed, tpe_options()))
}

fn lc_tpe_median(space: Space, seed: u64) -> Box<dyn Searcher> {
    Box::new(Tpe::new(space, seed, scheduler_tpe_options()))
}

fn lc_tpe_rungs(space: Space, seed: u64) -> Box<dyn Searcher> {
    Box::new(Tpe::new(space, seed, rung_tpe_options()))
}

fn lc_tpe_hyperband(space: Space, seed: u64) -> Box<dyn Searcher> {
    Box::new(Tpe::new(space, seed, hyperband_tpe_options()))
}

/// TPE under HyperBand ranking every trial by its last report (Optuna's model).
fn lc_tpe_last(space: Space, seed: u64) -> Box<dyn Searcher> {
    let opts = TpeOptions {
        fidelity: Some(tune_search::Fidelity::Last),
        ..hyperband_tpe_options()
    };
    Box::new(Tpe::new(space, seed, opts))
}

/// TPE fitted at the highest rung with enough results (BOHB's model).
fn lc_tpe_rung(space: Space, seed: u64) -> Box<dyn Searcher> {
    let opts = TpeOptions {
        fidelity: Some(tune_search::Fidelity::Rung),
        ..rung_tpe_options()
    };
    Box::new(Tpe::new(space, seed, opts))
}

/// ASHA as Optuna's SuccessiveHalvingPruner in `run_lcbench.py`: min resource 1, eta 3.
fn lc_asha_config() -> AshaConfig {
    let (grace_period, reduction_factor) = asha_grace_and_eta((1, 3));
    AshaConfig {
        max_t: lcbench::MAX_EPOCH,
        grace_period: Some(grace_period),
        reduction_factor,
        ..AshaConfig::default()
    }
}

fn lc_asha(seed: u64) -> Box<dyn Scheduler> {
    Box::new(Asha::new(lc_asha_config(), Mode::Max, seed))
}

fn lc_asha_promotion(seed: u64) -> Box<dyn Scheduler> {
    Box::new(AshaPromotion::new(lc_asha_config(), Mode::Max, seed))
}

/// The grace period that did best on the development tasks (1, 3 and 9 tried, with
/// reduction factors 2 and 3): 3 epochs, where one misleads.
fn lc_asha_grace_3() -> AshaConfig {
    AshaConfig {
        grace_period: Some(3),
        ..lc_asha_config()
    }
}

fn lc_asha_3(seed: u64) -> Box<dyn Scheduler> {
    Box::new(Asha::new(lc_asha_grace_3(), Mode::Max, seed))
}

fn lc_asha_promotion_3(seed: u64) -> Box<dyn Scheduler> {
    Box::new(AshaPromotion::new(lc_asha_grace_3(), Mode::Max, seed))
}

/// Asynchronous HyperBand: the promotion variant over the 4 brackets that 52 epochs allow
/// with rungs at 1, 3, 9 and 27.
fn lc_async_hyperband(seed: u64) -> Box<dyn Scheduler> {
    Box::new(AshaPromotion::new(
        lc_async_hyperband_config(),
        Mode::Max,
        seed,
    ))
}

fn lc_async_hyperband_config() -> AshaConfig {
    AshaConfig {
        brackets: env_number("TUNE_BENCH_BRACKETS", 4),
        ..lc_asha_config()
    }
}

fn lc_async_hyperband_stopping(seed: u64) -> Box<dyn Scheduler> {
    Box::new(Asha::new(lc_async_hyperband_config(), Mode::Max, seed))
}

/// HyperBand over 52 epochs, eta 3, with this grace period (`TUNE_BENCH_HB_GRACE` for
/// the default rows).
fn lc_hyperband_with(grace_period: u64) -> Box<dyn Scheduler> {
    Box::new(HyperBand::new(
        HyperBandConfig {
            max_t: lcbench::MAX_EPOCH,
            grace_period,
            ..HyperBandConfig::default()
        },
        Mode::Max,
    ))
}

fn lc_hyperband(_seed: u64) -> Box<dyn Scheduler> {
    lc_hyperband_with(env_number("TUNE_BENCH_HB_GRACE", 1))
}

/// HyperBand without the bracket whose first cut comes at 2 epochs (BOHB's min_budget 3):
/// brackets of 9, 5 and 3 trials from 6, 18 and 52 epochs.
fn lc_hyperband_3(_seed: u64) -> Box<dyn Scheduler> {
    lc_hyperband_with(3)
}

/// What a user gets with no `[search]` and `[scheduler] kind = KIND`, `max_t = 52` alone: the
/// spec's own defaults, built as `tune run` builds them, over the LCBench space.
fn default_spec(kind: &str, seed: u64) -> tune::ExperimentSpec {
    let text = format!(
        "name = \"lcbench\"\nmetric = \"val_accuracy\"\nmode = \"max\"\nsamples = 10000\n\
         seed = {seed}\n\n[scheduler]\nkind = \"{kind}\"\nmax_t = {}\n\n\
         [space]\nx = {{ uniform = [0.0, 1.0] }}\n",
        lcbench::MAX_EPOCH
    );
    let mut spec = tune::ExperimentSpec::from_toml(&text, std::path::Path::new("lcbench.toml"))
        .expect("the defaults' spec");
    spec.space = lcbench::space();
    spec
}

fn lc_default_search_asha(_space: Space, seed: u64) -> Box<dyn Searcher> {
    default_spec("asha", seed)
        .make_searcher()
        .expect("the default searcher")
}

/// The defaults as `auto` chose under a scheduler before store format 9: TPE.
fn tpe_default_searcher(kind: &str, seed: u64) -> Box<dyn Searcher> {
    let mut spec = default_spec(kind, seed);
    spec.search.algorithm = tune::SearchSpec::Auto(tune::AutoOptions {
        gp_under_rungs: false,
        ..tune::AutoOptions::default()
    });
    spec.make_searcher().expect("the default searcher")
}

fn lc_tpe_default_search_asha(_space: Space, seed: u64) -> Box<dyn Searcher> {
    tpe_default_searcher("asha", seed)
}

fn lc_tpe_default_search_hyperband(_space: Space, seed: u64) -> Box<dyn Searcher> {
    tpe_default_searcher("hyperband", seed)
}

fn lc_default_asha(seed: u64) -> Box<dyn Scheduler> {
    default_spec("asha", seed).make_scheduler()
}

fn lc_default_search_hyperband(_space: Space, seed: u64) -> Box<dyn Searcher> {
    default_spec("hyperband", seed)
        .make_searcher()
        .expect("the default searcher")
}

fn lc_default_hyperband(seed: u64) -> Box<dyn Scheduler> {
    default_spec("hyperband", seed).make_scheduler()
}

fn lc_median(_seed: u64) -> Box<dyn Scheduler> {
    Box::new(MedianStopping::new(MedianConfig::default(), Mode::Max))
}

fn lc_fifo(_seed: u64) -> Box<dyn Scheduler> {
    Box::new(Fifo)
}

const LC_METHODS: [(&str, LcSearcher, LcScheduler); 24] = [
    (
        "tune defaults: [scheduler] kind = \"asha\", max_t = 52",
        lc_default_search_asha,
        lc_default_asha,
    ),
    (
        "tune defaults: [scheduler] kind = \"hyperband\", max_t = 52",
        lc_default_search_hyperband,
        lc_default_hyperband,
    ),
    (
        "tune defaults before store format 9 (auto -> TPE), kind = \"asha\"",
        lc_tpe_default_search_asha,
        lc_default_asha,
    ),
    (
        "tune defaults before store format 9 (auto -> TPE), kind = \"hyperband\"",
        lc_tpe_default_search_hyperband,
        lc_default_hyperband,
    ),
    ("tune random, full budget", lc_random, lc_fifo),
    ("tune TPE, full budget", lc_tpe, lc_fifo),
    ("tune random + median", lc_random, lc_median),
    ("tune TPE + median", lc_tpe_median, lc_median),
    ("tune random + ASHA", lc_random, lc_asha),
    ("tune TPE + ASHA", lc_tpe_rungs, lc_asha),
    (
        "tune random + ASHA (promotion)",
        lc_random,
        lc_asha_promotion,
    ),
    (
        "tune TPE + ASHA (promotion)",
        lc_tpe_rungs,
        lc_asha_promotion,
    ),
    (
        "tune TPE + async HyperBand (promotion, 4 brackets)",
        lc_tpe_rungs,
        lc_async_hyperband,
    ),
    ("tune random + HyperBand", lc_random, lc_hyperband),
    (
        "tune TPE + HyperBand (BOHB: rung model)",
        lc_tpe_hyperband,
        lc_hyperband,
    ),
    (
        "tune TPE + HyperBand (BOHB), grace period 3",
        lc_tpe_hyperband,
        lc_hyperband_3,
    ),
    (
        "tune TPE (last-report model) + HyperBand",
        lc_tpe_last,
        lc_hyperband,
    ),
    ("tune TPE (rung model) + ASHA", lc_tpe_rung, lc_asha),
    (
        "tune TPE (rung model) + ASHA (promotion)",
        lc_tpe_rung,
        lc_asha_promotion,
    ),
    (
        "tune TPE (rung model) + async HyperBand",
        lc_tpe_rung,
        lc_async_hyperband,
    ),
    (
        "tune TPE (rung model) + async HyperBand (stopping)",
        lc_tpe_rung,
        lc_async_hyperband_stopping,
    ),
    ("tune TPE + ASHA (grace 3)", lc_tpe_rungs, lc_asha_3),
    (
        "tune TPE (rung model) + ASHA (grace 3)",
        lc_tpe_rung,
        lc_asha_3,
    ),
    (
        "tune TPE (rung model) + ASHA (promotion, grace 3)",
        lc_tpe_rung,
        lc_asha_promotion_3,
    ),
];

/// Mean over tasks of the median over seeds; `None` (no incumbent) counts as +inf.
fn mean_of_medians(per_task: &[Vec<Vec<Option<f64>>>], point: usize) -> Option<f64> {
    let medians: Vec<Option<f64>> = per_task
        .iter()
        .map(|seeds| median(seeds.iter().map(|r| r[point]).collect()))
        .collect();
    medians
        .iter()
        .copied()
        .sum::<Option<f64>>()
        .map(|s| s / medians.len() as f64)
}

/// The peers with 8 trials at once on the bench's simulated clock: Optuna's samplers and
/// pruners (`benches/peers/lcbench_parallel.py --workers-sim 8`, Optuna 5.0.0, 10 seeds; with
/// `--workers-sim 1` it gives the table above exactly), and SMAC3 and DEHB.
const LCBENCH_PEERS_8_WORKERS: [(&str, [f64; 3]); 11] = [
    // `benches/peers/lcbench_mf_parallel.py --workers-sim 8` (SMAC3 2.4.1, DEHB 0.1.2,
    // 10 seeds; a promotion pays only its new epochs).
    (
        "SMAC-HB (SMAC3 MultiFidelityFacade), 8 at once",
        [1.079, 0.244, 0.081],
    ),
    (
        "SMAC3 HyperbandFacade (random), 8 at once",
        [0.902, 0.239, 0.163],
    ),
    ("DEHB, 8 at once", [0.392, 0.255, 0.198]),
    ("optuna random, full budget", [0.433, 0.301, 0.212]),
    ("optuna TPE, full budget", [0.433, 0.265, 0.134]),
    ("optuna random + SuccessiveHalving", [0.386, 0.305, 0.242]),
    ("optuna TPE + SuccessiveHalving", [0.445, 0.401, 0.383]),
    ("optuna TPE + Hyperband", [0.452, 0.292, 0.252]),
    (
        "optuna TPE (constant liar) + Hyperband",
        [0.443, 0.293, 0.269],
    ),
    ("optuna random + Median", [0.423, 0.281, 0.247]),
    ("optuna TPE + Median", [0.423, 0.288, 0.253]),
];

fn lcbench_tables(seeds: u64) {
    let surrogate = match lcbench::Surrogate::load() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("LCBench skipped: {e}");
            return;
        }
    };
    let references = lcbench::references();
    let chosen = std::env::var("TUNE_LCBENCH_TASKS").unwrap_or_default();
    let tasks: Vec<&str> = match chosen.as_str() {
        "all" => surrogate.tasks().iter().map(String::as_str).collect(),
        "heldout" => surrogate
            .tasks()
            .iter()
            .map(String::as_str)
            .filter(|t| !lcbench::DEV_TASKS.contains(t))
            .collect(),
        "" => lcbench::DEV_TASKS.to_vec(),
        list => list.split(',').collect(),
    };
    let lc_tasks: Vec<lcbench::Task> = tasks
        .iter()
        .map(|&task| lcbench::Task {
            surrogate: &surrogate,
            task,
            reference: references[task],
        })
        .collect();
    let full_seconds: Vec<f64> = lc_tasks
        .iter()
        .map(lcbench::Task::full_training_seconds)
        .collect();
    let methods: Vec<_> = match std::env::var("TUNE_LCBENCH_METHODS") {
        Ok(filter) => LC_METHODS
            .into_iter()
            .filter(|(name, ..)| {
                (filter.split('|')).any(|f| {
                    f.strip_prefix('=')
                        .map_or(name.contains(f), |exact| *name == exact)
                })
            })
            .collect(),
        Err(_) => LC_METHODS.to_vec(),
    };
    for workers in bench_workers() {
        println!(
            "LCBench, tasks {}: mean over tasks of the median normalised regret over {seeds} seeds, {workers} worker(s); \
             wall clock in full trainings (the task's median 52-epoch time) / workers; peers {}",
            tasks.join(", "),
            if workers == 8 {
                "from benches/peers/lcbench_parallel.py (8 trials at once)"
            } else {
                "from benches/peers/README.md (1 worker)"
            }
        );
        println!();
        println!("| method | 520 ep | 1040 ep | 2080 ep | 10 trainings | 20 | 40 |");
        println!("|---|---|---|---|---|---|---|");
        for (name, searcher, scheduler) in &methods {
            let jobs: Vec<(usize, u64)> = (0..lc_tasks.len())
                .flat_map(|t| (0..seeds).map(move |s| (t, s)))
                .collect();
            let run = |&(t, seed): &(usize, u64)| {
                let seconds: Vec<f64> = [10.0, 20.0, 40.0]
                    .iter()
                    .map(|c| c * full_seconds[t] / workers as f64)
                    .collect();
                let timeline = simulator::simulate_timed(
                    &lc_tasks[t],
                    Mode::Max,
                    searcher(lcbench::space(), seed).as_mut(),
                    scheduler(seed).as_mut(),
                    workers,
                    LCBENCH_EPOCHS[2],
                    &LCBENCH_EPOCHS,
                    &seconds,
                );
                [timeline.at_epochs, timeline.at_seconds].concat()
            };
            let results: Vec<Vec<Option<f64>>> = std::thread::scope(|scope| {
                let odd =
                    scope.spawn(|| jobs.iter().skip(1).step_by(2).map(run).collect::<Vec<_>>());
                let even: Vec<_> = jobs.iter().step_by(2).map(run).collect();
                let odd = odd.join().expect("a bench thread");
                (0..jobs.len())
                    .map(|i| {
                        if i % 2 == 0 {
                            even[i / 2].clone()
                        } else {
                            odd[i / 2].clone()
                        }
                    })
                    .collect()
            });
            let per_task: Vec<Vec<Vec<Option<f64>>>> =
                results.chunks(seeds as usize).map(<[_]>::to_vec).collect();
            let cells: Vec<String> = (0..6)
                .map(|i| mean_of_medians(&per_task, i).map_or("-".into(), |v| format!("{v:.3}")))
                .collect();
            println!("| {name} | {} |", cells.join(" | "));
        }
        let peers: &[(&str, [f64; 3])] = match workers {
            1 => &LCBENCH_PEERS,
            8 => &LCBENCH_PEERS_8_WORKERS,
            _ => &[],
        };
        if tasks == lcbench::DEV_TASKS {
            for (name, row) in peers {
                println!(
                    "| {name} | {:.3} | {:.3} | {:.3} | | | |",
                    row[0], row[1], row[2]
                );
            }
        }
        println!();
    }
}
