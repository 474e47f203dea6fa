//! The Parzen estimator: a weighted mixture with one kernel per observation plus a prior
//! kernel, over the internal coordinates of a group of parameters.
//!
//! Numeric dimensions use normal kernels truncated to the domain; categorical ones use
//! Optuna's categorical kernel (the observed choice gets the extra mass). In multivariate mode a
//! component is a product over all dimensions, so samples keep the correlations between
//! parameters that good observations share.

use rand::Rng;

use super::eval::Table;
use super::numerics::{log_mass, truncnorm_std, LN_SQRT_2PI};

/// A numeric dimension of the internal space: coordinates in [low, high] (log for log
/// domains, widened by half a step for discrete ones); `range` scales the bandwidth; the prior
/// kernel is N(prior_mu, prior_sigma).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct NumericDim {
    pub low: f64,
    pub high: f64,
    pub range: f64,
    pub prior_mu: f64,
    pub prior_sigma: f64,
    /// The spacing of a linear discrete domain's values (int, quniform); 0 otherwise.
    pub step: f64,
}

/// One dimension of the internal space.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum DimSpec {
    Numeric(NumericDim),
    /// Choice indices 0..n.
    Categorical {
        n: usize,
    },
}

/// Kernel widths follow Optuna 5 in every mode: per dimension, the larger distance from an
/// observation to its sorted neighbours (the bounds close the ends), clipped by the magic clip
/// to [range * max(min_bandwidth_factor, (kernels + 1)^-magic_clip_exponent), range] (Optuna:
/// factor 0.01, exponent 1) and, on stepped dimensions, to at least
/// `discrete_min_bandwidth` steps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct EstimatorOptions {
    pub prior_weight: f64,
    pub magic_clip: bool,
    pub consider_endpoints: bool,
    pub min_bandwidth_factor: f64,
    pub magic_clip_exponent: f64,
    pub discrete_min_bandwidth: f64,
}

#[derive(Debug, Clone)]
enum Kernel {
    Numeric {
        low: f64,
        high: f64,
        mus: Vec<f64>,
        sigmas: Vec<f64>,
    },
    Categorical {
        n: usize,
        /// The observed choices (the prior's component follows them).
        observed: Vec<f64>,
        /// [`categorical_rows`].
        rows: Vec<f64>,
    },
}

/// A mixture density over a group of dimensions: kernels kept for sampling, and the same
/// mixture laid out for scoring.
#[derive(Debug, Clone)]
pub(crate) struct Parzen {
    cumulative: Vec<f64>,
    kernels: Vec<Kernel>,
    table: Table,
}

impl Parzen {
    /// `obs[d][k]` is dimension `d` of observation `k`; `weights[k]` its (unnormalised) weight.
    /// This is the good side's estimator, which is both sampled and scored.
    pub(crate) fn new(
        specs: &[DimSpec],
        obs: &[Vec<f64>],
        weights: &[f64],
        opts: EstimatorOptions,
    ) -> Parzen {
        let kernels: Vec<Kernel> = specs
            .iter()
            .zip(obs)
            .map(|(spec, values)| kernel(spec, values, opts))
            .collect();
        let total: f64 = weights.iter().sum::<f64>() + opts.prior_weight;
        let mut acc = 0.0;
        let cumulative = weights
            .iter()
            .chain([&opts.prior_weight])
            .map(|x| {
                acc += x / total;
                acc
            })
            .collect();
        let mut table = Table::default();
        table.reset(weights, opts.prior_weight);
        for (d, kernel) in kernels.iter().enumerate() {
            match kernel {
                Kernel::Numeric {
                    low,
                    high,
                    mus,
                    sigmas,
                } => push_numeric(&mut table, d, *low, *high, mus, sigmas, None),
                Kernel::Categorical { n, observed, rows } => {
                    table.push_categorical(d, *n, |k| categorical_row(observed, *n, k), rows)
                }
            }
        }
        Parzen {
            cumulative,
            kernels,
            table,
        }
    }

    /// The bad side's estimator, which is only ever scored: its table is built into `table`,
    /// reusing its buffers and `bufs` (a suggestion late in a sweep builds megabytes, and fresh
    /// allocations of that size cost page faults every time). With `memo`, observation `k` is
    /// trial `ids[k]` and dimension `d` is parameter `params[d]`, and kernel normalisers are
    /// looked up instead of recomputed; `orders[d]` lists the observations by their value
    /// along dimension `d`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn scoring_table(
        table: &mut Table,
        bufs: &mut (Vec<f64>, Vec<f64>),
        specs: &[DimSpec],
        obs: &[Vec<f64>],
        weights: &[f64],
        opts: EstimatorOptions,
        mut memo: Option<(&mut NormMemo, &[u64], &[usize])>,
        orders: &[Vec<usize>],
    ) {
        table.reset(weights, opts.prior_weight);
        for (d, ((spec, values), order)) in specs.iter().zip(obs).zip(orders).enumerate() {
            match *spec {
                DimSpec::Numeric(dim) => {
                    let (mus, sigmas) = bufs;
                    numeric_kernel(&dim, values, Some(order), opts, mus, sigmas);
                    push_numeric(table, d, dim.low, dim.high, mus, sigmas, memo.as_mut());
                }
                DimSpec::Categorical { n } => {
                    // Thousands of components, n + 1 distinct rows: looked up, not built.
                    let rows = categorical_rows(n, values.len(), opts.prior_weight);
                    table.push_categorical(d, n, |k| categorical_row(values, n, k), &rows);
                }
            }
        }
    }

    /// Draws one point into `out` (one value per dimension).
    pub(crate) fn sample<R: Rng + ?Sized>(&self, rng: &mut R, out: &mut [f64]) {
        let u: f64 = rng.random();
        let k = self
            .cumulative
            .partition_point(|&c| c <= u)
            .min(self.cumulative.len() - 1);
        for (kernel, slot) in self.kernels.iter().zip(out.iter_mut()) {
            *slot = match kernel {
                Kernel::Numeric {
                    low,
                    high,
                    mus,
                    sigmas,
                    ..
                } => {
                    let (m, s) = (mus[k], sigmas[k]);
                    let z = truncnorm_std((low - m) / s, (high - m) / s, rng.random());
                    (m + s * z).clamp(*low, *high)
                }
                Kernel::Categorical { n, observed, rows } => {
                    let row = &rows[categorical_row(observed, *n, k) * n..][..*n];
                    let mut u: f64 = rng.random();
                    let mut pick = n - 1;
                    for (c, lp) in row.iter().enumerate() {
                        u -= lp.exp();
                        if u < 0.0 {
                            pick = c;
                            break;
                        }
                    }
                    pick as f64
                }
            };
        }
    }

    /// ln density at `x`; `terms` is a buffer reused between calls to avoid allocation.
    pub(crate) fn log_pdf(&self, x: &[f64], terms: &mut Vec<f32>) -> f64 {
        self.table.log_pdf(x, terms)
    }
}

/// One dimension's kernels: one per observation, then the prior's.
fn kernel(spec: &DimSpec, values: &[f64], opts: EstimatorOptions) -> Kernel {
    let n = values.len();
    match *spec {
        DimSpec::Numeric(dim) => {
            let (mut mus, mut sigmas) = (Vec::new(), Vec::new());
            numeric_kernel(&dim, values, None, opts, &mut mus, &mut sigmas);
            Kernel::Numeric {
                low: dim.low,
                high: dim.high,
                mus,
                sigmas,
            }
        }
        DimSpec::Categorical { n: choices } => Kernel::Categorical {
            n: choices,
            observed: values.to_vec(),
            rows: categorical_rows(choices, n, opts.prior_weight),
        },
    }
}

/// Optuna's categorical kernel over `choices` choices for `observations` observations plus
/// the prior: every component's row starts at `prior_weight / components`, the observed
/// choice gets +1, rows are normalised, the prior's row stays uniform. Components that
/// observed the same choice share a row, so this is the `choices + 1` distinct rows of ln
/// probabilities, row-major: row `c` (observed choice `c`) then row `choices` (the prior's).
fn categorical_rows(choices: usize, observations: usize, prior_weight: f64) -> Vec<f64> {
    let base = prior_weight / (observations + 1) as f64;
    let mut rows = Vec::with_capacity((choices + 1) * choices);
    for observed in (0..choices).map(Some).chain([None]) {
        let row_total = base * choices as f64 + f64::from(u8::from(observed.is_some()));
        for c in 0..choices {
            let p = base + f64::from(u8::from(observed == Some(c)));
            rows.push((p / row_total).ln());
        }
    }
    rows
}

/// The row of [`categorical_rows`] that component `k` uses: its observation's choice, or the
/// prior's row past the observations.
fn categorical_row(observed: &[f64], choices: usize, k: usize) -> usize {
    observed.get(k).map_or(choices, |&v| v as usize)
}

/// A numeric dimension's kernel means and widths into `mus` and `sigmas` (the observations',
/// then the prior's).
fn numeric_kernel(
    dim: &NumericDim,
    values: &[f64],
    order: Option<&[usize]>,
    opts: EstimatorOptions,
    mus: &mut Vec<f64>,
    sigmas: &mut Vec<f64>,
) {
    let NumericDim {
        low,
        high,
        range,
        prior_mu,
        prior_sigma,
        step,
    } = *dim;
    let n = values.len();
    let min_sigma = if opts.magic_clip {
        range
            / (1.0 + n as f64 + 1.0)
                .powf(opts.magic_clip_exponent)
                .min(1.0 / opts.min_bandwidth_factor)
    } else {
        f64::EPSILON * range
    }
    .max(opts.discrete_min_bandwidth * step);
    neighbour_sigmas(values, order, low, high, opts.consider_endpoints, sigmas);
    for s in sigmas.iter_mut() {
        *s = s.clamp(min_sigma, range);
    }
    sigmas.push(prior_sigma);
    mus.clear();
    mus.extend_from_slice(values);
    mus.push(prior_mu);
}

/// Adds a numeric dimension to `table`, with each component's normaliser
/// -ln(sigma) - ln(sqrt(2 pi)) - ln(mass of the kernel inside [low, high]).
fn push_numeric(
    table: &mut Table,
    d: usize,
    low: f64,
    high: f64,
    mus: &[f64],
    sigmas: &[f64],
    mut memo: Option<&mut (&mut NormMemo, &[u64], &[usize])>,
) {
    let observations = mus.len() - 1;
    let log_norm = |k: usize| {
        let (m, s) = (mus[k], sigmas[k]);
        let compute = || -s.ln() - LN_SQRT_2PI - log_mass((low - m) / s, (high - m) / s);
        match memo.as_mut() {
            Some((memo, ids, params)) if k < observations => {
                memo.get(ids[k], params[d], s, compute)
            }
            _ => compute(),
        }
    };
    table.push_numeric(d, low, high - low, mus, sigmas, log_norm);
}

/// Kernel normalisers by (trial, parameter), valid for the width they were computed with.
///
/// A kernel's mean (the trial's value) and its domain never change, and neighbour-gap widths
/// rarely do, so most normalisers (two erfc each) are reused from one suggestion to the next.
/// A hit returns exactly what recomputation would, so suggestions stay a pure function of
/// (seed, id, history).
#[derive(Debug, Clone, Default)]
pub(crate) struct NormMemo {
    stride: usize,
    /// (sigma, log_norm) at `trial * stride + param`; NaN sigma = empty.
    entries: Vec<(f64, f64)>,
}

impl NormMemo {
    pub(crate) fn new(params: usize) -> NormMemo {
        NormMemo {
            stride: params,
            entries: Vec::new(),
        }
    }

    fn get(&mut self, trial: u64, param: usize, sigma: f64, compute: impl FnOnce() -> f64) -> f64 {
        let i = trial as usize * self.stride + param;
        if self.entries.len() <= i {
            self.entries.resize(i + 1, (f64::NAN, 0.0));
        }
        let (s, v) = self.entries[i];
        if s.to_bits() == sigma.to_bits() {
            return v;
        }
        let v = compute();
        self.entries[i] = (sigma, v);
        v
    }
}

/// For each observation, the larger gap to its sorted neighbours, the bounds closing the ends;
/// without `consider_endpoints` the outermost observations use their inner gap only. `order`
/// (indices by value, then index) is computed here unless the caller already has it.
fn neighbour_sigmas(
    values: &[f64],
    order: Option<&[usize]>,
    low: f64,
    high: f64,
    consider_endpoints: bool,
    sigmas: &mut Vec<f64>,
) {
    let computed;
    let order = match order {
        Some(o) => o,
        None => {
            let mut o: Vec<usize> = (0..values.len()).collect();
            o.sort_unstable_by(|&i, &j| values[i].total_cmp(&values[j]).then(i.cmp(&j)));
            computed = o;
            &computed
        }
    };
    let m = order.len();
    sigmas.clear();
    sigmas.resize(m, 0.0);
    // The value at sorted position r, with the bounds at -1 and m.
    let at = |r: isize| -> f64 {
        if r < 0 {
            low
        } else if r as usize >= m {
            high
        } else {
            values[order[r as usize]]
        }
    };
    for (r, &i) in order.iter().enumerate() {
        let r = r as isize;
        let (left, right) = (at(r) - at(r - 1), at(r + 1) - at(r));
        sigmas[i] = if consider_endpoints || m < 2 {
            left.max(right)
        } else if r == 0 {
            right
        } else if r as usize == m - 1 {
            left
        } else {
            left.max(right)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::super::numerics::ndtr;
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    const UNIT: DimSpec = DimSpec::Numeric(NumericDim {
        low: 0.0,
        high: 1.0,
        range: 1.0,
        prior_mu: 0.5,
        prior_sigma: 1.0,
        step: 0.0,
    });

    const OPTS: EstimatorOptions = EstimatorOptions {
        prior_weight: 1.0,
        magic_clip: true,
        consider_endpoints: false,
        min_bandwidth_factor: 0.01,
        magic_clip_exponent: 1.0,
        discrete_min_bandwidth: 0.0,
    };

    /// Integrates exp(log_pdf) over [0, 1] with the midpoint rule.
    fn mass(p: &Parzen) -> f64 {
        let n = 20_000;
        let mut scratch = Vec::new();
        (0..n)
            .map(|i| {
                p.log_pdf(&[(i as f64 + 0.5) / n as f64], &mut scratch)
                    .exp()
            })
            .sum::<f64>()
            / n as f64
    }

    fn phi(z: f64) -> f64 {
        (-0.5 * z * z).exp() / (2.0 * std::f64::consts::PI).sqrt()
    }

    #[test]
    fn truncated_mixture_integrates_to_one() {
        for obs in [vec![0.02, 0.3, 0.31, 0.97], vec![0.5], vec![]] {
            let w = vec![1.0; obs.len()];
            let p = Parzen::new(&[UNIT], std::slice::from_ref(&obs), &w, OPTS);
            assert!((mass(&p) - 1.0).abs() < 1e-6, "{obs:?}: {}", mass(&p));
        }
    }

    #[test]
    fn hand_checked_single_kernel_density() {
        // One observation at 0.25 in [0, 1]: sigma = max(0.25 - 0, 1 - 0.25) = 0.75 (inside the
        // clip [1/3, 1]), weight 1/2; the prior N(0.5, 1), weight 1/2; both truncated to [0, 1].
        let p = Parzen::new(&[UNIT], &[vec![0.25]], &[1.0], OPTS);
        let (x, s) = (0.4, 0.75);
        let k1 = phi((x - 0.25) / s) / s / (ndtr(0.75 / s) - ndtr(-0.25 / s));
        let k2 = phi(x - 0.5) / (ndtr(0.5) - ndtr(-0.5));
        let expected = 0.5 * k1 + 0.5 * k2;
        let got = p.log_pdf(&[x], &mut Vec::new()).exp();
        // Scoring runs in f32 lanes: ~1e-6 relative.
        assert!((got / expected - 1.0).abs() < 2e-6, "{got} vs {expected}");
    }

    #[test]
    fn widths_are_neighbour_gaps() {
        // Sorted: [0 (low), 0.1, 0.2, 0.6, 0.9, 1 (high)].
        let mut s = Vec::new();
        neighbour_sigmas(&[0.9, 0.1, 0.6, 0.2], None, 0.0, 1.0, false, &mut s);
        // 0.1: first -> gap to next (0.1); 0.2: max(0.1, 0.4); 0.6: max(0.4, 0.3); 0.9: last -> 0.3.
        let expect = [0.3, 0.1, 0.4, 0.4];
        assert!(
            s.iter().zip(expect).all(|(a, b)| (a - b).abs() < 1e-12),
            "{s:?}"
        );
        // With endpoints the outer ones see the bounds too: 0.9 -> max(0.3, 0.1).
        let mut e = Vec::new();
        neighbour_sigmas(&[0.9, 0.1, 0.6, 0.2], None, 0.0, 1.0, true, &mut e);
        assert!(
            (e[1] - 0.1).abs() < 1e-12 && (e[0] - 0.3).abs() < 1e-12,
            "{e:?}"
        );
    }

    #[test]
    fn magic_clip_bounds_the_widths() {
        // Ten identical observations: gaps are 0, clipped up to range / min(100, 1 + 11).
        let p = Parzen::new(&[UNIT], &[vec![0.5; 10]], &[1.0; 10], OPTS);
        let Kernel::Numeric { sigmas, .. } = &p.kernels[0] else {
            unreachable!()
        };
        assert!(
            sigmas[..10].iter().all(|&s| (s - 1.0 / 12.0).abs() < 1e-12),
            "{sigmas:?}"
        );
        assert_eq!(sigmas[10], 1.0);
    }

    #[test]
    fn narrow_floors_follow_the_exponent_and_the_step() {
        let widths = |spec: &DimSpec, n: usize, opts: EstimatorOptions| {
            let p = Parzen::new(
                std::slice::from_ref(spec),
                &[vec![0.5; n]],
                &vec![1.0; n],
                opts,
            );
            let Kernel::Numeric { sigmas, .. } = &p.kernels[0] else {
                unreachable!()
            };
            sigmas[0]
        };
        let narrow = EstimatorOptions {
            min_bandwidth_factor: 0.03,
            magic_clip_exponent: 1.5,
            discrete_min_bandwidth: 1.0,
            ..OPTS
        };
        // (n + 2)^-1.5 while above 0.03: n = 2 -> 1/8; n = 7 -> 1/27; from n = 8 (10^-1.5 =
        // 0.0316) to n = 9 it crosses, then 0.03 for good.
        assert!((widths(&UNIT, 2, narrow) - 0.125).abs() < 1e-12);
        assert!((widths(&UNIT, 7, narrow) - 1.0 / 27.0).abs() < 1e-12);
        assert!((widths(&UNIT, 8, narrow) - 10f64.powf(-1.5)).abs() < 1e-12);
        assert!((widths(&UNIT, 9, narrow) - 0.03).abs() < 1e-12);
        assert!((widths(&UNIT, 25, narrow) - 0.03).abs() < 1e-12);
        // Optuna's: 1 / (n + 2) down to 0.01.
        assert!((widths(&UNIT, 7, OPTS) - 1.0 / 9.0).abs() < 1e-12);
        assert!((widths(&UNIT, 200, OPTS) - 0.01).abs() < 1e-12);
        // An int domain 1..=8 (internal [0.5, 8.5], step 1): 0.03 * 8 = 0.24 would leave the
        // neighbours of a value almost no mass; the step floor keeps them a quarter each.
        let ints = DimSpec::Numeric(NumericDim {
            low: 0.5,
            high: 8.5,
            range: 8.0,
            prior_mu: 4.5,
            prior_sigma: 8.0,
            step: 1.0,
        });
        assert!((widths(&ints, 25, narrow) - 1.0).abs() < 1e-12);
        let no_step = EstimatorOptions {
            discrete_min_bandwidth: 0.0,
            ..narrow
        };
        assert!((widths(&ints, 25, no_step) - 0.24).abs() < 1e-12);
    }

    #[test]
    fn categorical_kernel_matches_optuna() {
        // Two observations (choices 0 and 2) of 3 choices, prior weight 1 => 3 kernels, base 1/3.
        let p = Parzen::new(
            &[DimSpec::Categorical { n: 3 }],
            &[vec![0.0, 2.0]],
            &[1.0, 1.0],
            OPTS,
        );
        let mut scratch = Vec::new();
        // P(c) = 1/3 * [row0(c) + row1(c) + prior(c)], row0 = [4/3, 1/3, 1/3] / 2,
        // row1 = [1/3, 1/3, 4/3] / 2, prior = 1/3 each.
        let expect = [
            (4.0 / 6.0 + 1.0 / 6.0 + 1.0 / 3.0) / 3.0,
            (1.0 / 6.0 + 1.0 / 6.0 + 1.0 / 3.0) / 3.0,
        ];
        assert!((p.log_pdf(&[0.0], &mut scratch).exp() / expect[0] - 1.0).abs() < 2e-6);
        assert!((p.log_pdf(&[1.0], &mut scratch).exp() / expect[1] - 1.0).abs() < 2e-6);
        let total: f64 = (0..3)
            .map(|c| p.log_pdf(&[c as f64], &mut scratch).exp())
            .sum();
        assert!((total - 1.0).abs() < 2e-6);
    }

    #[test]
    fn samples_follow_the_product_mixture() {
        let p = Parzen::new(
            &[UNIT, DimSpec::Categorical { n: 2 }],
            &[vec![0.1, 0.15], vec![1.0, 1.0]],
            &[10.0, 10.0],
            OPTS,
        );
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut out = [0.0; 2];
        let (mut near, mut ones) = (0, 0);
        let n = 20_000;
        for _ in 0..n {
            p.sample(&mut rng, &mut out);
            assert!((0.0..=1.0).contains(&out[0]));
            near += usize::from(out[0] < 0.5);
            ones += usize::from(out[1] == 1.0);
        }
        // Two components (weight 10/21 each) at 0.1 and 0.15 with width = their gap 0.05,
        // clipped up to 1 / min(100, 1 + 3) = 0.25; both pick choice 1 with p = (1 + 1/3) / (1 + 2/3).
        // The prior N(0.5, 1), weight 1/21, is symmetric about 0.5 and uniform over the choices.
        let s = 0.25;
        let below =
            |m: f64| (ndtr((0.5 - m) / s) - ndtr(-m / s)) / (ndtr((1.0 - m) / s) - ndtr(-m / s));
        let p_near = 10.0 / 21.0 * (below(0.1) + below(0.15)) + 1.0 / 21.0 * 0.5;
        assert!(
            (near as f64 / n as f64 - p_near).abs() < 0.01,
            "{near} vs {p_near}"
        );
        let p_one = 20.0 / 21.0 * 0.8 + 1.0 / 21.0 * 0.5;
        assert!(
            (ones as f64 / n as f64 - p_one).abs() < 0.01,
            "{ones} vs {p_one}"
        );
    }
}
