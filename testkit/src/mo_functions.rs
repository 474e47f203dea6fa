//! Multi-objective benchmark functions, the same as `benches/peers/optuna_mo.py` (the bench
//! checks the two agree on the peer's own trials): ZDT1 and ZDT2 (Zitzler, Deb and Thiele
//! 2000; 30 variables), DTLZ2 (Deb et al. 2002; 3 objectives, 12 variables) and NetCost, a
//! made-up network's validation loss against its latency over five mixed hyperparameters.
//! Every objective is minimised.

use std::f64::consts::PI;

use tune_search::{Params, Space};

/// A function of several objectives, its space, budget and the reference point its
/// hypervolume is measured against.
pub struct MultiBenchmark {
    pub name: &'static str,
    pub space: Space,
    pub f: fn(&Params) -> Vec<f64>,
    pub reference: Vec<f64>,
    pub budget: u64,
}

fn xs(p: &Params, n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| p.f64(&format!("x{i}")).expect("benchmark parameter"))
        .collect()
}

pub fn unit_cube(n: usize) -> Space {
    (0..n)
        .fold(Space::builder(), |b, i| {
            b.uniform(format!("x{i}"), 0.0, 1.0)
        })
        .build()
        .expect("a unit cube")
}

const ZDT_N: usize = 30;
const DTLZ_N: usize = 12;

/// g of ZDT1-3: 1 + 9 * mean of x1..x(n-1), summed left to right as the peer does.
fn zdt_g(x: &[f64]) -> f64 {
    let mut s = 0.0;
    for v in &x[1..] {
        s += v;
    }
    1.0 + 9.0 * s / (x.len() - 1) as f64
}

pub fn zdt1(p: &Params) -> Vec<f64> {
    let x = xs(p, ZDT_N);
    let g = zdt_g(&x);
    vec![x[0], g * (1.0 - (x[0] / g).sqrt())]
}

pub fn zdt2(p: &Params) -> Vec<f64> {
    let x = xs(p, ZDT_N);
    let g = zdt_g(&x);
    vec![x[0], g * (1.0 - (x[0] / g) * (x[0] / g))]
}

/// DTLZ2 with `n` variables and `m` objectives (Deb et al. 2002), summed and multiplied
/// left to right as the peer does.
pub fn dtlz(p: &Params, n: usize, m: usize) -> Vec<f64> {
    let x = xs(p, n);
    let g: f64 = x[m - 1..].iter().map(|v| (v - 0.5) * (v - 0.5)).sum();
    let angle = |i: usize| x[i] * PI / 2.0;
    (0..m)
        .map(|k| {
            let mut f = 1.0 + g;
            for i in 0..m - 1 - k {
                f *= angle(i).cos();
            }
            if k > 0 {
                f *= angle(m - 1 - k).sin();
            }
            f
        })
        .collect()
}

/// DTLZ2 as the table runs it: 12 variables, 3 objectives.
pub fn dtlz2(p: &Params) -> Vec<f64> {
    dtlz(p, DTLZ_N, 3)
}

/// Validation loss and latency (ms) of a made-up network: the loss is a bowl in log10(lr)
/// around an optimiser-dependent optimum, plus a capacity term falling with width and depth
/// and a dropout bowl; the latency grows with width x depth. Wider and deeper is better and
/// slower: the front is the trade-off between the two.
pub fn net_cost(p: &Params) -> Vec<f64> {
    let lr = p.f64("lr").expect("lr");
    let width = p.i64("width").expect("width") as f64;
    let depth = p.i64("depth").expect("depth") as f64;
    let dropout = p.f64("dropout").expect("dropout");
    let best_log_lr = match p.str("optimizer").expect("optimizer") {
        "sgd" => -1.0,
        "adam" => -3.0,
        _ => -2.5,
    };
    let d = lr.log10() - best_log_lr;
    let loss = 0.05
        + 0.1 * d * d
        + 0.5 / (1.0 + width.log2() * depth / 4.0)
        + 0.3 * (dropout - 0.3) * (dropout - 0.3);
    let latency = width * depth / 64.0 + 0.1 * depth;
    vec![loss, latency]
}

/// ZDT3 (30 variables): a front of five disconnected pieces.
pub fn zdt3(p: &Params) -> Vec<f64> {
    let x = xs(p, ZDT_N);
    let g = zdt_g(&x);
    let r = x[0] / g;
    vec![x[0], g * (1.0 - r.sqrt() - r * (10.0 * PI * x[0]).sin())]
}

const ZDT6_N: usize = 10;

/// ZDT6 (10 variables): a concave front, sparse near its good end and thinly sampled by
/// uniform x1.
pub fn zdt6(p: &Params) -> Vec<f64> {
    let x = xs(p, ZDT6_N);
    let f1 = 1.0 - (-4.0 * x[0]).exp() * (6.0 * PI * x[0]).sin().powi(6);
    let mean = x[1..].iter().sum::<f64>() / (ZDT6_N - 1) as f64;
    let g = 1.0 + 9.0 * mean.powf(0.25);
    vec![f1, g * (1.0 - (f1 / g) * (f1 / g))]
}

/// DTLZ7 (3 objectives, 12 variables): a front of four disconnected patches.
pub fn dtlz7(p: &Params) -> Vec<f64> {
    let x = xs(p, DTLZ_N);
    let g = 1.0 + 9.0 * x[2..].iter().sum::<f64>() / (DTLZ_N - 2) as f64;
    let h = 3.0
        - x[..2]
            .iter()
            .map(|f| f / (1.0 + g) * (1.0 + (3.0 * PI * f).sin()))
            .sum::<f64>();
    vec![x[0], x[1], (1.0 + g) * h]
}

/// Validation loss and training time of a made-up boosted-trees model: the loss wants
/// lr x trees near 30, deeper trees up to 8 and subsampling near 0.8; the time grows with
/// trees, depth and subsample; dart is a little better and slower, linear worse and fast.
pub fn boost_cost(p: &Params) -> Vec<f64> {
    let lr = p.f64("lr").expect("lr");
    let trees = p.i64("trees").expect("trees") as f64;
    let depth = p.i64("depth").expect("depth") as f64;
    let subsample = p.f64("subsample").expect("subsample");
    let (offset, speed) = match p.str("booster").expect("booster") {
        "dart" => (-0.01, 1.5),
        "linear" => (0.05, 0.2),
        _ => (0.0, 1.0),
    };
    let e = (lr * trees).log10() - 1.5;
    let overfit = if depth > 8.0 {
        0.01 * (depth - 8.0) * (depth - 8.0)
    } else {
        0.0
    };
    let loss = 0.1
        + offset
        + 0.05 * e * e
        + 0.2 / depth
        + overfit
        + 0.1 * (subsample - 0.8) * (subsample - 0.8);
    let time = trees * (depth / 2.0).exp2() * subsample / 100.0 * speed;
    vec![loss, time]
}

/// Functions outside the reported table, for checking that a choice made on [`all`]
/// carries over (tune only: the peer script does not run them).
pub fn held_out() -> Vec<MultiBenchmark> {
    vec![
        MultiBenchmark {
            name: "ZDT3",
            space: unit_cube(ZDT_N),
            f: zdt3,
            reference: vec![1.1, 11.0],
            budget: 300,
        },
        MultiBenchmark {
            name: "ZDT6",
            space: unit_cube(ZDT6_N),
            f: zdt6,
            reference: vec![1.1, 11.0],
            budget: 300,
        },
        MultiBenchmark {
            name: "DTLZ7",
            space: unit_cube(DTLZ_N),
            f: dtlz7,
            reference: vec![1.1, 1.1, 33.0],
            budget: 300,
        },
        MultiBenchmark {
            name: "BoostCost",
            space: Space::builder()
                .loguniform("lr", 1e-3, 1.0)
                .int("trees", 10, 2000)
                .log()
                .int("depth", 2, 12)
                .uniform("subsample", 0.3, 1.0)
                .choice("booster", ["gbtree", "dart", "linear"])
                .build()
                .expect("the BoostCost space"),
            f: boost_cost,
            reference: vec![1.2, 2000.0],
            budget: 200,
        },
    ]
}

pub fn all() -> Vec<MultiBenchmark> {
    vec![
        MultiBenchmark {
            name: "ZDT1",
            space: unit_cube(ZDT_N),
            f: zdt1,
            reference: vec![1.1, 11.0],
            budget: 300,
        },
        MultiBenchmark {
            name: "ZDT2",
            space: unit_cube(ZDT_N),
            f: zdt2,
            reference: vec![1.1, 11.0],
            budget: 300,
        },
        MultiBenchmark {
            name: "DTLZ2",
            space: unit_cube(DTLZ_N),
            f: dtlz2,
            reference: vec![3.85, 3.85, 3.85],
            budget: 300,
        },
        MultiBenchmark {
            name: "NetCost",
            space: Space::builder()
                .loguniform("lr", 1e-5, 1.0)
                .int("width", 8, 1024)
                .log()
                .int("depth", 1, 8)
                .uniform("dropout", 0.0, 0.8)
                .choice("optimizer", ["sgd", "adam", "rmsprop"])
                .build()
                .expect("the NetCost space"),
            f: net_cost,
            reference: vec![2.5, 130.0],
            budget: 200,
        },
    ]
}
