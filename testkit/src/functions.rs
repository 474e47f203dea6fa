//! The six benchmark functions of `benches/peers/functions.py`, bit-exact with it (the
//! reference values in tests/functions.rs were printed by the Python file).
//!
//! Every function is minimised; the operations follow the Python order so rounding matches
//! (numpy sums arrays under 8 elements left to right).

use std::f64::consts::{E, PI};

use tune_search::{Params, Space};

/// A benchmark function with its space, known minimum and evaluation budget.
pub struct Benchmark {
    pub name: &'static str,
    pub space: Space,
    pub f: fn(&Params) -> f64,
    pub known_min: f64,
    pub budget: u64,
}

fn x(p: &Params, i: usize) -> f64 {
    p.f64(&format!("x{i}")).expect("benchmark parameter")
}

pub fn branin(p: &Params) -> f64 {
    let (x0, x1) = (x(p, 0), x(p, 1));
    let (a, b, c, r, s, t) = (
        1.0,
        5.1 / (4.0 * (PI * PI)),
        5.0 / PI,
        6.0,
        10.0,
        1.0 / (8.0 * PI),
    );
    let inner = x1 - b * (x0 * x0) + c * x0 - r;
    a * (inner * inner) + s * (1.0 - t) * x0.cos() + s
}

const H6_ALPHA: [f64; 4] = [1.0, 1.2, 3.0, 3.2];
const H6_A: [[f64; 6]; 4] = [
    [10.0, 3.0, 17.0, 3.5, 1.7, 8.0],
    [0.05, 10.0, 17.0, 0.1, 8.0, 14.0],
    [3.0, 3.5, 1.7, 10.0, 17.0, 8.0],
    [17.0, 8.0, 0.05, 10.0, 0.1, 14.0],
];
const H6_P: [[f64; 6]; 4] = [
    [1312.0, 1696.0, 5569.0, 124.0, 8283.0, 5886.0],
    [2329.0, 4135.0, 8307.0, 3736.0, 1004.0, 9991.0],
    [2348.0, 1451.0, 3522.0, 2883.0, 3047.0, 6650.0],
    [4047.0, 8828.0, 8732.0, 5743.0, 1091.0, 381.0],
];

pub fn hartmann6(p: &Params) -> f64 {
    hartmann(p, &H6_A, &H6_P)
}

/// The Hartmann family in `D` dimensions: `-sum_i alpha_i exp(-sum_j A_ij (x_j - 1e-4 P_ij)^2)`.
fn hartmann<const D: usize>(p: &Params, a: &[[f64; D]; 4], pp: &[[f64; D]; 4]) -> f64 {
    let mut total = 0.0;
    for i in 0..4 {
        let mut inner = 0.0;
        for j in 0..D {
            // numpy: 1e-4 * P, then (x - P)**2, then A * that.
            let d = x(p, j) - 1e-4 * pp[i][j];
            inner += a[i][j] * (d * d);
        }
        total += H6_ALPHA[i] * (-inner).exp();
    }
    -total
}

pub fn rosenbrock4(p: &Params) -> f64 {
    let v: Vec<f64> = (0..4).map(|i| x(p, i)).collect();
    let mut total = 0.0;
    for i in 0..3 {
        let a = v[i + 1] - v[i] * v[i];
        let b = 1.0 - v[i];
        total += 100.0 * (a * a) + b * b;
    }
    total
}

pub fn ackley5(p: &Params) -> f64 {
    let v: Vec<f64> = (0..5).map(|i| x(p, i)).collect();
    let (a, b, c) = (20.0, 0.2, 2.0 * PI);
    let mean_sq = v.iter().fold(0.0, |s, x| s + x * x) / 5.0;
    let mean_cos = v.iter().fold(0.0, |s, x| s + (c * x).cos()) / 5.0;
    -a * (-b * mean_sq.sqrt()).exp() - mean_cos.exp() + a + E
}

pub fn log_bowl(p: &Params) -> f64 {
    let lr = p.f64("lr").expect("lr").log10() + 3.0;
    let wd = p.f64("wd").expect("wd").log10() + 4.0;
    lr * lr + wd * wd
}

pub fn mixed_opt_net(p: &Params) -> f64 {
    let (off, lr_opt, layers_opt, units_opt) = match p.str("optimizer").expect("optimizer") {
        "sgd" => (0.30, -1.0, 2, 6.0),
        "adam" => (0.00, -3.0, 4, 8.0),
        _ => (0.15, -2.5, 6, 7.0),
    };
    let lr = p.f64("lr").expect("lr").log10() - lr_opt;
    let layers = (p.i64("layers").expect("layers") - layers_opt) as f64;
    let units = (p.i64("units").expect("units") as f64).log2() - units_opt;
    off + lr * lr + 0.05 * (layers * layers) + 0.1 * (units * units)
}

fn space(toml: &str) -> Space {
    toml::from_str(toml).expect("benchmark space")
}

fn boxed(dim: usize, low: f64, high: f64) -> Space {
    (0..dim)
        .fold(Space::builder(), |b, i| {
            b.uniform(format!("x{i}"), low, high)
        })
        .build()
        .expect("benchmark space")
}

/// The six functions, in the order of the peers' table.
pub fn all() -> Vec<Benchmark> {
    vec![
        Benchmark {
            name: "Branin",
            space: space("x0 = { uniform = [-5.0, 10.0] }\nx1 = { uniform = [0.0, 15.0] }"),
            f: branin,
            known_min: 5.0 / (4.0 * PI),
            budget: 100,
        },
        Benchmark {
            name: "Hartmann6",
            space: boxed(6, 0.0, 1.0),
            f: hartmann6,
            known_min: -3.322368011415515,
            budget: 200,
        },
        Benchmark {
            name: "Rosenbrock4D",
            space: boxed(4, -5.0, 10.0),
            f: rosenbrock4,
            known_min: 0.0,
            budget: 100,
        },
        Benchmark {
            name: "Ackley5D",
            space: boxed(5, -32.768, 32.768),
            f: ackley5,
            known_min: 0.0,
            budget: 100,
        },
        Benchmark {
            name: "LogBowl_lr_wd",
            space: space("lr = { loguniform = [1e-6, 1.0] }\nwd = { loguniform = [1e-8, 1e-1] }"),
            f: log_bowl,
            known_min: 0.0,
            budget: 100,
        },
        Benchmark {
            name: "MixedOptNet",
            space: space(
                "optimizer = { choice = [\"sgd\", \"adam\", \"rmsprop\"] }\n\
                 lr = { loguniform = [1e-5, 1.0] }\n\
                 layers = { int = [1, 8] }\n\
                 units = { int = [16, 1024], log = true }",
            ),
            f: mixed_opt_net,
            known_min: 0.0,
            budget: 100,
        },
    ]
}

/// Functions outside `benches/peers`, to check that a change to TPE's defaults is not tuned to
/// the six above: none of them was looked at while choosing those defaults.
#[allow(dead_code)]
pub fn held_out() -> Vec<Benchmark> {
    vec![
        Benchmark {
            name: "SixHumpCamel",
            space: space("x0 = { uniform = [-3.0, 3.0] }\nx1 = { uniform = [-2.0, 2.0] }"),
            f: |p| {
                let (a, b) = (x(p, 0), x(p, 1));
                (4.0 - 2.1 * a * a + a.powi(4) / 3.0) * a * a + a * b + (-4.0 + 4.0 * b * b) * b * b
            },
            known_min: -1.031_628_453_489_877,
            budget: 100,
        },
        Benchmark {
            name: "StyblinskiTang4D",
            space: boxed(4, -5.0, 5.0),
            f: |p| {
                (0..4)
                    .map(|i| {
                        let v = x(p, i);
                        0.5 * (v.powi(4) - 16.0 * v * v + 5.0 * v)
                    })
                    .sum()
            },
            known_min: -39.166_165_703_771_42 * 4.0,
            budget: 100,
        },
        Benchmark {
            name: "Levy4D",
            space: boxed(4, -10.0, 10.0),
            f: |p| {
                let w: Vec<f64> = (0..4).map(|i| 1.0 + (x(p, i) - 1.0) / 4.0).collect();
                let sin2 = |v: f64| v.sin() * v.sin();
                let mid: f64 = w[..3]
                    .iter()
                    .map(|&wi| (wi - 1.0).powi(2) * (1.0 + 10.0 * sin2(PI * wi + 1.0)))
                    .sum();
                sin2(PI * w[0]) + mid + (w[3] - 1.0).powi(2) * (1.0 + sin2(2.0 * PI * w[3]))
            },
            known_min: 0.0,
            budget: 100,
        },
        Benchmark {
            name: "Rastrigin3D",
            space: boxed(3, -5.12, 5.12),
            f: |p| {
                (0..3)
                    .map(|i| {
                        let v = x(p, i);
                        v * v - 10.0 * (2.0 * PI * v).cos() + 10.0
                    })
                    .sum()
            },
            known_min: 0.0,
            budget: 150,
        },
        Benchmark {
            name: "MixedTrainer",
            space: space(
                "act = { choice = [\"relu\", \"tanh\", \"sigmoid\"] }\n\
                 lr = { loguniform = [1e-5, 1.0] }\n\
                 units = { int = [8, 512], log = true }\n\
                 momentum = { uniform = [0.0, 1.0] }",
            ),
            f: |p| {
                let off = match p.str("act").expect("act") {
                    "relu" => 0.0,
                    "tanh" => 0.3,
                    _ => 0.8,
                };
                let lr = p.f64("lr").expect("lr").log10() + 2.5;
                let units = (p.i64("units").expect("units") as f64).log2() - 7.0;
                let m = p.f64("momentum").expect("momentum") - 0.9;
                off + lr * lr + 0.25 * units * units + 10.0 * m * m
            },
            known_min: 0.0,
            budget: 100,
        },
    ]
}

/// A third set, added after the defaults' parameters were chosen on `all()` and `held_out()`,
/// and run once per candidate setting to confirm the choice (see `benches/search_quality.rs`).
/// Standard test functions (minima from the literature, or from a local optimisation where
/// rounding moves them) and two hyperparameter-like ones with int, stepped and choice domains.
pub fn validation() -> Vec<Benchmark> {
    vec![
        Benchmark {
            name: "GoldsteinPrice",
            space: boxed(2, -2.0, 2.0),
            f: |p| {
                let (a, b) = (x(p, 0), x(p, 1));
                let s = a + b + 1.0;
                let t = 2.0 * a - 3.0 * b;
                (1.0 + s
                    * s
                    * (19.0 - 14.0 * a + 3.0 * a * a - 14.0 * b + 6.0 * a * b + 3.0 * b * b))
                    * (30.0
                        + t * t
                            * (18.0 - 32.0 * a + 12.0 * a * a + 48.0 * b - 36.0 * a * b
                                + 27.0 * b * b))
            },
            known_min: 3.0,
            budget: 100,
        },
        Benchmark {
            name: "Beale",
            space: boxed(2, -4.5, 4.5),
            f: |p| {
                let (a, b) = (x(p, 0), x(p, 1));
                (1.5 - a + a * b).powi(2)
                    + (2.25 - a + a * b * b).powi(2)
                    + (2.625 - a + a * b.powi(3)).powi(2)
            },
            known_min: 0.0,
            budget: 100,
        },
        Benchmark {
            name: "Hartmann3",
            space: boxed(3, 0.0, 1.0),
            f: hartmann3,
            known_min: -3.862_779_787_332_663,
            budget: 100,
        },
        Benchmark {
            name: "Zakharov4D",
            space: boxed(4, -5.0, 10.0),
            f: |p| {
                let sq: f64 = (0..4).map(|i| x(p, i).powi(2)).sum();
                let lin: f64 = (0..4).map(|i| 0.5 * (i + 1) as f64 * x(p, i)).sum();
                sq + lin.powi(2) + lin.powi(4)
            },
            known_min: 0.0,
            budget: 100,
        },
        Benchmark {
            name: "DixonPrice4D",
            space: boxed(4, -10.0, 10.0),
            f: |p| {
                (x(p, 0) - 1.0).powi(2)
                    + (1..4)
                        .map(|i| (i + 1) as f64 * (2.0 * x(p, i).powi(2) - x(p, i - 1)).powi(2))
                        .sum::<f64>()
            },
            known_min: 0.0,
            budget: 100,
        },
        Benchmark {
            name: "Powell4D",
            space: boxed(4, -4.0, 5.0),
            f: |p| {
                let (a, b, c, d) = (x(p, 0), x(p, 1), x(p, 2), x(p, 3));
                (a + 10.0 * b).powi(2)
                    + 5.0 * (c - d).powi(2)
                    + (b - 2.0 * c).powi(4)
                    + 10.0 * (a - d).powi(4)
            },
            known_min: 0.0,
            budget: 100,
        },
        Benchmark {
            name: "Trid4D",
            space: boxed(4, -16.0, 16.0),
            f: |p| {
                (0..4).map(|i| (x(p, i) - 1.0).powi(2)).sum::<f64>()
                    - (1..4).map(|i| x(p, i) * x(p, i - 1)).sum::<f64>()
            },
            known_min: -16.0,
            budget: 100,
        },
        Benchmark {
            name: "Shekel4D",
            space: boxed(4, 0.0, 10.0),
            f: shekel10,
            known_min: -10.536_443_153_483_53,
            budget: 200,
        },
        Benchmark {
            name: "Griewank5D",
            space: boxed(5, -10.0, 10.0),
            f: |p| {
                let sum: f64 = (0..5).map(|i| x(p, i).powi(2) / 4000.0).sum();
                let prod: f64 = (0..5)
                    .map(|i| (x(p, i) / ((i + 1) as f64).sqrt()).cos())
                    .product();
                sum - prod + 1.0
            },
            known_min: 0.0,
            budget: 100,
        },
        Benchmark {
            name: "SteppedTrainer",
            space: space(
                "lr = { loguniform = [1e-4, 1.0] }\n\
                 batch = { int = [16, 256], step = 16 }\n\
                 depth = { int = [1, 12] }\n\
                 dropout = { quniform = [0.0, 0.5, 0.05] }",
            ),
            f: |p| {
                let lr = p.f64("lr").expect("lr").log10() + 2.0;
                let batch = (p.i64("batch").expect("batch") - 64) as f64 / 64.0;
                let depth = (p.i64("depth").expect("depth") - 7) as f64;
                let dropout = p.f64("dropout").expect("dropout") - 0.2;
                lr * lr + batch * batch + 0.1 * depth * depth + 10.0 * dropout * dropout
            },
            known_min: 0.0,
            budget: 100,
        },
        Benchmark {
            name: "ChoiceNet",
            space: space(
                "opt = { choice = [\"sgd\", \"adam\", \"adamw\", \"lion\"] }\n\
                 norm = { choice = [\"none\", \"batch\", \"layer\"] }\n\
                 wd = { loguniform = [1e-6, 1e-1] }\n\
                 warmup = { uniform = [0.0, 0.3] }",
            ),
            f: |p| {
                let (opt, wd_best) = match p.str("opt").expect("opt") {
                    "sgd" => (0.25, -4.0),
                    "adam" => (0.1, -5.0),
                    "adamw" => (0.0, -2.0),
                    _ => (0.05, -3.0),
                };
                let norm = match p.str("norm").expect("norm") {
                    "none" => 0.3,
                    "batch" => 0.02,
                    _ => 0.0,
                };
                let wd = p.f64("wd").expect("wd").log10() - wd_best;
                let warmup = p.f64("warmup").expect("warmup") - 0.1;
                opt + norm + 0.1 * wd * wd + 5.0 * warmup * warmup
            },
            known_min: 0.0,
            budget: 100,
        },
    ]
}

/// Hartmann3 shares Hartmann6's alpha.
fn hartmann3(p: &Params) -> f64 {
    const A: [[f64; 3]; 4] = [
        [3.0, 10.0, 30.0],
        [0.1, 10.0, 35.0],
        [3.0, 10.0, 30.0],
        [0.1, 10.0, 35.0],
    ];
    const P: [[f64; 3]; 4] = [
        [3689.0, 1170.0, 2673.0],
        [4699.0, 4387.0, 7470.0],
        [1091.0, 8732.0, 5547.0],
        [381.0, 5743.0, 8828.0],
    ];
    hartmann(p, &A, &P)
}

fn shekel10(p: &Params) -> f64 {
    const C: [[f64; 10]; 4] = [
        [4.0, 1.0, 8.0, 6.0, 3.0, 2.0, 5.0, 8.0, 6.0, 7.0],
        [4.0, 1.0, 8.0, 6.0, 7.0, 9.0, 3.0, 1.0, 2.0, 3.6],
        [4.0, 1.0, 8.0, 6.0, 3.0, 2.0, 5.0, 8.0, 6.0, 7.0],
        [4.0, 1.0, 8.0, 6.0, 7.0, 9.0, 3.0, 1.0, 2.0, 3.6],
    ];
    const BETA: [f64; 10] = [0.1, 0.2, 0.2, 0.4, 0.4, 0.6, 0.3, 0.7, 0.5, 0.5];
    -(0..10)
        .map(|i| {
            let d: f64 = (0..4).map(|j| (x(p, j) - C[j][i]).powi(2)).sum();
            1.0 / (d + BETA[i])
        })
        .sum::<f64>()
}
