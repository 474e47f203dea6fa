//! Parameter importances by PED-ANOVA (Watanabe, Bansal and Hutter, "PED-ANOVA: Efficiently
//! Quantifying Hyperparameter Importance in Arbitrary Subspaces", IJCAI 2023), computed as
//! Optuna 5's `PedAnovaImportanceEvaluator` computes them with its defaults (what
//! optuna-dashboard shows), so that the two agree on the same sweep (a test compares them).
//!
//! For each parameter: how differently its values are spread among the top 10 % of completed
//! trials than among all of them, measured as the Pearson divergence between two Parzen
//! estimators on a grid of at most 50 points (Scott's bandwidth). Conditional parameters are
//! weighed by how often they are active (Conditional PED-ANOVA, KDD 2026).

use tune_search::{Mode, Space, Status, Value};

use tune::export::OptunaDistribution;
use tune::Trial;

/// gamma' of the paper: the importance of reaching the top 10 %.
const TARGET_QUANTILE: f64 = 0.1;
/// Grid points a numeric domain is discretised into (at most).
const GRID_STEPS: usize = 50;
/// Weight of the uniform prior kernel of each Parzen estimator.
const PRIOR_WEIGHT: f64 = 1.0;
/// A parameter's regime (active, or inactive) with fewer trials is left out.
const MIN_TRIALS_IN_REGIME: usize = 2;
/// Added to every density, as Optuna does, so that the ratio stays finite.
const DENSITY_FLOOR: f64 = 1e-12;

/// Each parameter of `space` that some completed trial has, with its importance; they sum
/// to 1 (equal shares where no parameter makes a difference, as Optuna normalises), most
/// important first. Only completed trials with a finite `metric` count; empty with fewer
/// than two.
///
/// ```
/// use tune::{Params, Space, Status, Trial, TrialResult, Value};
/// let space = Space::builder().uniform("x", 0.0, 1.0).uniform("y", 0.0, 1.0).build().unwrap();
/// let trials: Vec<Trial> = (0..40u64)
///     .map(|i| {
///         let (x, y) = ((i % 10) as f64 / 10.0, (i * 7 % 40) as f64 / 40.0);
///         let mut t = Trial::new(i, Params::default());
///         t.params.insert("x", Value::Float(x));
///         t.params.insert("y", Value::Float(y));
///         t.status = Status::Completed;
///         t.results.push(TrialResult {
///             step: 1, seq: i, attempt: 1,
///             metrics: [("loss".to_string(), x + y / 100.0)].into(),
///         });
///         t
///     })
///     .collect();
/// let importances = tune_cli::plot::param_importances(&trials, &space, "loss", tune::Mode::Min);
/// assert_eq!(importances[0].0, "x");
/// assert!(importances[0].1 > 0.9);
/// ```
pub fn param_importances(
    trials: &[Trial],
    space: &Space,
    metric: &str,
    mode: Mode,
) -> Vec<(String, f64)> {
    let sign = match mode {
        Mode::Min => 1.0,
        Mode::Max => -1.0,
    };
    // Region (gamma = 1): every completed trial; losses oriented so that lower is better.
    let region: Vec<(&Trial, f64)> = trials
        .iter()
        .filter(|t| t.status == Status::Completed)
        .filter_map(|t| Some((t, sign * t.value(metric)?)))
        .filter(|(_, loss)| loss.is_finite())
        .collect();
    let names: Vec<&str> = space
        .params()
        .iter()
        .map(|p| p.name.as_str())
        .filter(|n| region.iter().any(|(t, _)| t.params.get(n).is_some()))
        .collect();
    if region.len() <= 1 || names.is_empty() {
        return Vec::new();
    }
    let top = top_quantile(&region, TARGET_QUANTILE);
    let quantile = top.len() as f64 / region.len() as f64;
    let mut importances: Vec<(String, f64)> = space
        .params()
        .iter()
        .filter(|p| names.contains(&p.name.as_str()))
        .map(|p| {
            let dist = OptunaDistribution::of(&p.domain, &p.name, trials);
            // Inactive trials form a regime of their own, with no distribution to compare.
            let active: Vec<&Trial> = region
                .iter()
                .map(|(t, _)| *t)
                .filter(|t| t.params.get(&p.name).is_some())
                .collect();
            let top_active: Vec<&Trial> = active
                .iter()
                .copied()
                .filter(|t| top.iter().any(|u| u.id == t.id))
                .collect();
            let divergence =
                if active.len() < MIN_TRIALS_IN_REGIME || top_active.is_empty() || single(&dist) {
                    0.0
                } else {
                    let alpha = top_active.len() as f64 / top.len() as f64;
                    let beta = active.len() as f64 / region.len() as f64;
                    alpha * alpha / beta * pearson_divergence(&p.name, &dist, &top_active, &active)
                };
            (p.name.clone(), divergence * quantile * quantile)
        })
        .collect();
    let sum: f64 = importances.iter().map(|(_, v)| v).sum();
    let n = importances.len() as f64;
    for (_, v) in &mut importances {
        *v = if sum > 0.0 { *v / sum } else { 1.0 / n };
    }
    importances.sort_by(|a, b| b.1.total_cmp(&a.1));
    importances
}

/// The trials whose loss is at most the `quantile`'s (the inverted-CDF quantile: ties kept).
fn top_quantile<'a>(region: &[(&'a Trial, f64)], quantile: f64) -> Vec<&'a Trial> {
    let mut losses: Vec<f64> = region.iter().map(|(_, l)| *l).collect();
    losses.sort_by(f64::total_cmp);
    let cutoff = losses[((quantile * losses.len() as f64).ceil() as usize).max(1) - 1];
    region
        .iter()
        .filter(|(_, l)| *l <= cutoff)
        .map(|(t, _)| *t)
        .collect()
}

/// Whether the distribution holds one value only (Optuna's `single()`).
fn single(dist: &OptunaDistribution) -> bool {
    match dist {
        OptunaDistribution::Float {
            low, high, step, ..
        } => low == high || step.is_some_and(|q| high - low < q),
        OptunaDistribution::Int {
            low,
            high,
            log,
            step,
        } => low == high || (!log && high - low < *step),
        OptunaDistribution::Categorical(choices) => choices.len() <= 1,
    }
}

/// Sum over the grid of p_all * (p_top / p_all - 1)^2.
fn pearson_divergence(
    name: &str,
    dist: &OptunaDistribution,
    top: &[&Trial],
    all: &[&Trial],
) -> f64 {
    let top = parzen_on_grid(&grid_counts(name, dist, top), dist);
    let all = parzen_on_grid(&grid_counts(name, dist, all), dist);
    top.iter()
        .zip(&all)
        .map(|(t, a)| {
            let (t, a) = (t + DENSITY_FLOOR, a + DENSITY_FLOOR);
            a * (t / a - 1.0).powi(2)
        })
        .sum()
}

/// How many of `trials` fall on each grid point: a categorical's choices, or a numeric
/// range (in log space where it is log-scaled) cut into at most [`GRID_STEPS`] points.
fn grid_counts(name: &str, dist: &OptunaDistribution, trials: &[&Trial]) -> Vec<u64> {
    let values = trials.iter().filter_map(|t| t.params.get(name));
    let (indices, size): (Vec<usize>, usize) = match dist {
        OptunaDistribution::Categorical(choices) => (
            values
                .map(|v| choices.iter().position(|c| c == v).unwrap_or(0))
                .collect(),
            choices.len(),
        ),
        numeric => {
            let (low, high, log, steps) = match *numeric {
                OptunaDistribution::Int {
                    low,
                    high,
                    log: true,
                    ..
                } => {
                    let log2_size = ((high - low + 1) as f64).log2().ceil() as usize + 1;
                    (low as f64, high as f64, true, log2_size.min(GRID_STEPS))
                }
                OptunaDistribution::Int {
                    low, high, step, ..
                } => {
                    let n = ((high - low) as f64 / step as f64).round() as usize + 1;
                    (low as f64, high as f64, false, n.min(GRID_STEPS))
                }
                OptunaDistribution::Float {
                    low,
                    high,
                    log,
                    step: Some(q),
                } => {
                    let n = ((high - low) / q).round() as usize + 1;
                    (low, high, log, n.min(GRID_STEPS))
                }
                OptunaDistribution::Float {
                    low,
                    high,
                    log,
                    step: None,
                } => (low, high, log, GRID_STEPS),
                OptunaDistribution::Categorical(_) => unreachable!("matched above"),
            };
            let scale = |x: f64| if log { x.ln() } else { x };
            let (low, high) = (scale(low), scale(high));
            let width = (high - low) / (steps.max(2) - 1) as f64;
            let index = |x: f64| {
                // Ties at a midpoint go to the lower point, as Optuna's do.
                let i = ((scale(x) - low) / width - 0.5).ceil();
                i.clamp(0.0, (steps - 1) as f64) as usize
            };
            (values.filter_map(Value::as_f64).map(index).collect(), steps)
        }
    };
    let mut counts = vec![0u64; size];
    for i in indices {
        counts[i] += 1;
    }
    counts
}

/// The density on each grid point of a Parzen estimator over the counted grid points: one
/// kernel per occupied point weighted by its count, plus a flat prior kernel
/// (Optuna's `ScottParzenEstimator`).
fn parzen_on_grid(counts: &[u64], dist: &OptunaDistribution) -> Vec<f64> {
    let observed: Vec<(usize, f64)> = counts
        .iter()
        .enumerate()
        .filter(|(_, &c)| c > 0)
        .map(|(i, &c)| (i, c as f64))
        .collect();
    let total: f64 = observed.iter().map(|(_, c)| c).sum::<f64>() + PRIOR_WEIGHT;
    let size = counts.len();
    let kernels = observed.len() + 1;
    if let OptunaDistribution::Categorical(_) = dist {
        // Each kernel puts PRIOR_WEIGHT / kernels on every choice and 1 more on its own.
        let flat = PRIOR_WEIGHT / kernels as f64;
        let row = flat * size as f64;
        return (0..size)
            .map(|x| {
                let at_observed: f64 = observed
                    .iter()
                    .map(|&(i, c)| c * (flat + if i == x { 1.0 } else { 0.0 }) / (row + 1.0))
                    .sum();
                (at_observed + PRIOR_WEIGHT * flat / row) / total
            })
            .collect();
    }
    let sigma = scott_bandwidth(&observed);
    let high = (size - 1) as f64;
    let prior = ((high / 2.0), high + 1.0);
    (0..size)
        .map(|x| {
            let x = x as f64;
            let kernel = |mu: f64, sigma: f64| {
                let mass = |a: f64, b: f64| gauss_mass((a - mu) / sigma, (b - mu) / sigma);
                mass(x - 0.5, x + 0.5) / mass(-0.5, high + 0.5)
            };
            let at_observed: f64 = observed
                .iter()
                .map(|&(i, c)| c * kernel(i as f64, sigma))
                .sum();
            (at_observed + PRIOR_WEIGHT * kernel(prior.0, prior.1)) / total
        })
        .collect()
}

/// Scott's rule on weighted grid points, floored so that 90 % of a kernel's mass stays within
/// half a grid step.
fn scott_bandwidth(observed: &[(usize, f64)]) -> f64 {
    let n: f64 = observed.iter().map(|(_, c)| c).sum();
    let mean = observed.iter().map(|&(i, c)| i as f64 * c).sum::<f64>() / n;
    let variance = observed
        .iter()
        .map(|&(i, c)| (i as f64 - mean).powi(2) * c)
        .sum::<f64>()
        / (n - 1.0).max(1.0);
    let cumulative: Vec<f64> = observed
        .iter()
        .scan(0.0, |acc, (_, c)| {
            *acc += c;
            Some(*acc)
        })
        .collect();
    // numpy's searchsorted, left for the first quartile and right for the third.
    let q1 = cumulative
        .iter()
        .position(|&w| w >= (n / 4.0).floor())
        .unwrap_or(observed.len() - 1);
    let q3 = cumulative
        .iter()
        .position(|&w| w > (n * 3.0 / 4.0).floor())
        .unwrap_or(observed.len())
        .min(observed.len() - 1);
    let iqr = (observed[q3].0 as f64) - (observed[q1].0 as f64);
    let sigma = 1.059 * (iqr / 1.34).min(variance.sqrt()) * n.powf(-0.2);
    sigma.max(0.5 / 1.64)
}

/// P(a < Z < b) for a standard normal Z, accurate in both tails.
fn gauss_mass(a: f64, b: f64) -> f64 {
    use statrs::function::erf::erfc;
    let cdf = |x: f64| 0.5 * erfc(-x / std::f64::consts::SQRT_2);
    if a >= 0.0 {
        // Upper tail: 1 - cdf would cancel.
        cdf(-a) - cdf(-b)
    } else {
        cdf(b) - cdf(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scott_bandwidth_worked_by_hand() {
        // Points 0, 2, 4 once each: mean 2, variance (4 + 0 + 4) / 2 = 4, sigma 2; n // 4 = 0
        // so q1 is the first point, (3n) // 4 = 2 so q3 is the first cumulative count above 2:
        // the third point; iqr 4, 4 / 1.34 = 2.985 > 2: sigma = 1.059 * 2 * 3^-0.2.
        let sigma = scott_bandwidth(&[(0, 1.0), (2, 1.0), (4, 1.0)]);
        assert!(
            (sigma - 1.059 * 2.0 * 3f64.powf(-0.2)).abs() < 1e-12,
            "{sigma}"
        );
        // One point: no spread, the floor.
        assert_eq!(scott_bandwidth(&[(3, 5.0)]), 0.5 / 1.64);
    }

    #[test]
    fn a_parzen_estimator_on_a_grid_is_a_distribution() {
        let float = OptunaDistribution::Float {
            low: 0.0,
            high: 1.0,
            log: false,
            step: None,
        };
        let numeric = parzen_on_grid(&[0, 3, 0, 0, 1, 0, 0, 0, 0, 2], &float);
        assert!((numeric.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!(numeric[1] > numeric[7]);
        let choice = OptunaDistribution::Categorical(vec![Value::Int(1), Value::Int(2)]);
        let categorical = parzen_on_grid(&[3, 1], &choice);
        assert!((categorical.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        // Kernels 3 (choice 0) and 1 (choice 1) and the prior, weights 3 : 1 : 1 out of 5;
        // each puts 1/3 on every choice and 1 more on its own, out of 5/3.
        let own = (1.0 / 3.0 + 1.0) / (5.0 / 3.0);
        let other = (1.0 / 3.0) / (5.0 / 3.0);
        let expected = (3.0 * own + other + 0.5) / 5.0;
        assert!((categorical[0] - expected).abs() < 1e-12);
    }

    #[test]
    fn grid_points_split_ties_low_and_log_ints_get_log2_points() {
        let t = |x: f64| {
            let mut t = Trial::new(0, Default::default());
            t.params.insert("x", Value::Float(x));
            t
        };
        let trials = [t(0.0), t(0.5), t(1.0), t(0.51)];
        let refs: Vec<&Trial> = trials.iter().collect();
        let float = OptunaDistribution::Float {
            low: 0.0,
            high: 1.0,
            log: false,
            step: Some(0.5),
        };
        // Three points 0, 0.5, 1; 0.51 is nearest to 0.5.
        assert_eq!(grid_counts("x", &float, &refs), vec![1, 2, 1]);
        let log_int = OptunaDistribution::Int {
            low: 1,
            high: 1024,
            log: true,
            step: 1,
        };
        // ceil(log2(1024)) + 1 = 11 points.
        assert_eq!(grid_counts("x", &log_int, &[]).len(), 11);
    }

    #[test]
    fn the_mass_of_a_far_tail_does_not_cancel_to_zero() {
        let m = gauss_mass(8.0, 9.0);
        assert!(m > 6e-16 && m < 7e-16, "{m}");
        let central = gauss_mass(-1.0, 1.0);
        assert!(
            (central - 0.682_689_492_137_085_9).abs() < 1e-9,
            "{central}"
        );
    }
}
