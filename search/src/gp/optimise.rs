//! The acquisition and its maximisation: log EI (with the constraints' log probabilities)
//! at a point, and Optuna's mixed local search: L-BFGS in length-scale units on the
//! continuous coordinates, a discrete search on the others.

use argmin::core::{CostFunction, Gradient};

use super::acquisition::{
    log_expected_improvement, log_expected_improvement_with_gradient, log_probability_above,
};
use super::model::GpRegressor;
use super::{lbfgs_minimise, LastAnswer};

/// Added to the posterior variance in the acquisition, so that it stays finite at observed
/// points.
pub(super) const STABILIZING_NOISE: f64 = 1e-12;
/// ln(1/2): a constraint's process predicts it met where the log probability is above.
const LN_HALF: f64 = -std::f64::consts::LN_2;
/// L-BFGS iterations per continuous step, and its tolerance on the gradient (Optuna's
/// `max_iters` and `pgtol = sqrt(1e-4)`).
pub(super) const LOCAL_ITERATIONS: u64 = 200;
pub(super) const GRADIENT_TOLERANCE: f64 = 1e-2;
/// Rounds of continuous and discrete steps at most, per local search (Optuna's `max_iter`).
pub(super) const LOCAL_ROUNDS: usize = 100;
/// A discrete coordinate with at most this many values is searched value by value.
pub(super) const EXHAUSTIVE_SEARCH_VALUES: usize = 16;

/// Optuna's local search (`local_search_mixed`): L-BFGS on the continuous coordinates, then
/// each discrete one searched with the others held, in turn until a whole round changes no
/// discrete coordinate after the continuous step (or [`LOCAL_ROUNDS`] rounds).
pub(super) fn local_search(
    acquisition: &Acquisition,
    mut point: Vec<f64>,
    mut value: f64,
    grids: &[Option<Vec<f64>>],
    categorical: &[bool],
) -> (Vec<f64>, f64) {
    #[derive(PartialEq)]
    enum Changed {
        Continuous,
        Discrete(usize),
    }
    let mut last = Changed::Continuous;
    for _ in 0..LOCAL_ROUNDS {
        if let Some((p, v)) = gradient_ascent(acquisition, &point, value, grids) {
            (point, value) = (p, v);
            last = Changed::Continuous;
        }
        for (i, grid) in grids.iter().enumerate() {
            let Some(grid) = grid else { continue };
            if last == Changed::Discrete(i) {
                return (point, value);
            }
            let exhaustive = categorical[i] || grid.len() <= EXHAUSTIVE_SEARCH_VALUES;
            if let Some((x, v)) = discrete_search(acquisition, &point, value, i, grid, exhaustive) {
                point[i] = x;
                value = v;
                last = Changed::Discrete(i);
            }
        }
        if last == Changed::Continuous {
            break;
        }
    }
    (point, value)
}

/// The best value of coordinate `i` (the others held) if it beats `value`: every value where
/// `exhaustive` (choices, and at most 16 values), else a golden-section search along the
/// values from the current one (where Optuna uses Brent's method on the same bracket).
pub(super) fn discrete_search(
    acquisition: &Acquisition,
    point: &[f64],
    value: f64,
    i: usize,
    grid: &[f64],
    exhaustive: bool,
) -> Option<(f64, f64)> {
    let mut probe = point.to_vec();
    let mut at = |x: f64| {
        probe[i] = x;
        acquisition.value(&probe)
    };
    let (x, v) = if exhaustive {
        grid.iter()
            .filter(|&&x| x != point[i])
            .map(|&x| (x, at(x)))
            .max_by(|a, b| a.1.total_cmp(&b.1))?
    } else {
        let current = nearest(grid, point[i]);
        let k = golden_section(|k| at(grid[k]), grid.len(), current, value);
        (grid[k], at(grid[k]))
    };
    (v > value && x != point[i]).then_some((x, v))
}

/// The index in `grid` (ascending, two values or more) nearest `x`; the higher on a tie, as
/// Optuna's `find_nearest_index`.
pub(super) fn nearest(grid: &[f64], x: f64) -> usize {
    let i = grid.partition_point(|&g| g < x).clamp(1, grid.len() - 1);
    if (x - grid[i - 1]).abs() < (grid[i] - x).abs() {
        i - 1
    } else {
        i
    }
}

/// A local maximum of `f` over indices `0..n`, by golden-section search from the bracket
/// (before the first, `current`, after the last), where `f(current) = value` and the ends
/// count as minus infinity.
pub(super) fn golden_section(
    mut f: impl FnMut(usize) -> f64,
    n: usize,
    current: usize,
    value: f64,
) -> usize {
    const SHRINK: f64 = 0.381_966_011_250_105_1; // 2 - the golden ratio
    let mut cache = std::collections::HashMap::from([(current, value)]);
    let mut eval = |k: usize| *cache.entry(k).or_insert_with(|| f(k));
    let (mut low, mut mid, mut high) = (-1.0f64, current as f64, n as f64);
    let mut mid_value = value;
    while high - low > 2.0 {
        let x = if mid - low > high - mid {
            mid - SHRINK * (mid - low)
        } else {
            mid + SHRINK * (high - mid)
        };
        let k = (x.round() as usize).min(n - 1);
        if k as f64 == mid {
            // Rounded onto the middle: the bracket is as narrow as the grid allows here.
            break;
        }
        let v = eval(k);
        let x = k as f64;
        if v > mid_value {
            if x < mid {
                high = mid;
            } else {
                low = mid;
            }
            (mid, mid_value) = (x, v);
        } else if x < mid {
            low = x;
        } else {
            high = x;
        }
    }
    mid as usize
}

/// Log EI at a point, from the fitted process and the best feasible value so far, plus the
/// log probability of meeting each constraint (Optuna's LogCEI).
pub(super) struct Acquisition<'a> {
    pub(super) gp: &'a GpRegressor,
    /// `None` when no trial is feasible yet: the EI term is left out.
    pub(super) best: Option<f64>,
    /// Each constraint's process and threshold.
    pub(super) constraints: &'a [(GpRegressor, f64)],
    /// 1/sqrt of the inverse squared length scales: the continuous search moves in units of
    /// them (Optuna's preconditioning), so that every coordinate is as steep as the others.
    pub(super) lengthscales: Vec<f64>,
    /// The process's mean in place of log EI ([`super::GpOptions::exploit_from`]).
    pub(super) exploit: bool,
}

impl<'a> Acquisition<'a> {
    pub(super) fn new(
        gp: &'a GpRegressor,
        best: Option<f64>,
        constraints: &'a [(GpRegressor, f64)],
    ) -> Acquisition<'a> {
        let lengthscales = gp
            .params()
            .inverse_squared_lengthscales
            .iter()
            .map(|l| 1.0 / l.sqrt())
            .collect();
        Acquisition {
            gp,
            best,
            constraints,
            lengthscales,
            exploit: false,
        }
    }

    /// Whether the acquisition is the mean (there is an incumbent to exploit).
    fn exploiting(&self) -> bool {
        self.exploit && self.best.is_some()
    }

    /// A constraint's term at a point where its process has posterior `mean` and `var` (with
    /// their gradients, or none for the value alone): the log probability that it is met,
    /// with log EI (Optuna's LogCEI). Exploiting, nothing where the process predicts it met (a
    /// probability of at least one half) and the shortfall elsewhere, so that the mean's best
    /// among the points predicted feasible wins: on the bound where the constraint is active
    /// at the minimum, where the full log probability would hold the point inside it.
    fn constraint_term(
        &self,
        (mean, var): (f64, f64),
        dmean: &[f64],
        dvar: &[f64],
        threshold: f64,
    ) -> (f64, Vec<f64>) {
        let (value, gradient) =
            log_probability_above(mean, var + STABILIZING_NOISE, dmean, dvar, threshold);
        if !self.exploiting() {
            (value, gradient)
        } else if value >= LN_HALF {
            (0.0, vec![0.0; gradient.len()])
        } else {
            (value - LN_HALF, gradient)
        }
    }

    /// The improvement term at a point with posterior `mean` and `var`: log EI over `best`,
    /// or the mean itself when exploiting.
    fn improvement(&self, mean: f64, var: f64, best: f64) -> f64 {
        if self.exploit {
            mean
        } else {
            log_expected_improvement(mean, var + STABILIZING_NOISE, best)
        }
    }

    /// [`Acquisition::value`] at each of `points` (the same values, with the posteriors
    /// worked in blocks).
    pub(super) fn values(&self, points: &[Vec<f64>]) -> Vec<f64> {
        let improvements: Vec<f64> = match self.best {
            Some(best) => self
                .gp
                .posteriors(points)
                .into_iter()
                .map(|(mean, var)| self.improvement(mean, var, best))
                .collect(),
            None => vec![0.0; points.len()],
        };
        // Summed as `value` sums them (from -0.0, as f64's `Sum` starts).
        let mut feasibilities = vec![-0.0; points.len()];
        for (gp, threshold) in self.constraints {
            for (sum, posterior) in feasibilities.iter_mut().zip(gp.posteriors(points)) {
                *sum += self.constraint_term(posterior, &[], &[], *threshold).0;
            }
        }
        improvements
            .into_iter()
            .zip(feasibilities)
            .map(|(improvement, feasibility)| improvement + feasibility)
            .collect()
    }

    pub(super) fn value(&self, point: &[f64]) -> f64 {
        let improvement = self.best.map_or(0.0, |best| {
            let (mean, var) = self.gp.posterior(point);
            self.improvement(mean, var, best)
        });
        let feasibility: f64 = self
            .constraints
            .iter()
            .map(|(gp, threshold)| {
                self.constraint_term(gp.posterior(point), &[], &[], *threshold)
                    .0
            })
            .sum();
        improvement + feasibility
    }

    /// [`Acquisition::value`] and its gradient.
    pub(super) fn value_and_gradient(&self, point: &[f64]) -> (f64, Vec<f64>) {
        let (mut value, mut gradient) = match self.best {
            Some(_) if self.exploit => {
                let (mean, _, dmean, _) = self.gp.posterior_with_gradient(point);
                (mean, dmean)
            }
            Some(best) => {
                let (mean, var, dmean, dvar) = self.gp.posterior_with_gradient(point);
                log_expected_improvement_with_gradient(
                    mean,
                    var + STABILIZING_NOISE,
                    &dmean,
                    &dvar,
                    best,
                )
            }
            None => (0.0, vec![0.0; point.len()]),
        };
        for (gp, threshold) in self.constraints {
            let (mean, var, dmean, dvar) = gp.posterior_with_gradient(point);
            let (v, g) = self.constraint_term((mean, var), &dmean, &dvar, *threshold);
            value += v;
            for (total, g) in gradient.iter_mut().zip(g) {
                *total += g;
            }
        }
        (value, gradient)
    }
}

/// The acquisition as a function of a point's continuous coordinates divided by their length
/// scales (the others fixed), negated for argmin. Coordinates are clamped to [0, 1], and the
/// gradient of a coordinate at a bound that points out of it is zeroed (a projected gradient),
/// so that the search stays in the box and stops at its walls.
#[derive(Clone, Copy)]
pub(super) struct Continuous<'a> {
    acquisition: &'a Acquisition<'a>,
    base: &'a [f64],
    /// The continuous coordinates' indices.
    free: &'a [usize],
    last: &'a LastAnswer<(f64, Vec<f64>)>,
}

impl Continuous<'_> {
    fn point(&self, scaled: &[f64]) -> Vec<f64> {
        let mut p = self.base.to_vec();
        for (&i, &z) in self.free.iter().zip(scaled) {
            p[i] = (z * self.acquisition.lengthscales[i]).clamp(0.0, 1.0);
        }
        p
    }

    pub(super) fn value_and_gradient(&self, scaled: &[f64]) -> (f64, Vec<f64>) {
        self.last.at(scaled, || self.compute(scaled))
    }

    fn compute(&self, scaled: &[f64]) -> (f64, Vec<f64>) {
        let p = self.point(scaled);
        let (value, gradient) = self.acquisition.value_and_gradient(&p);
        let projected = self
            .free
            .iter()
            .map(|&i| {
                let g = -gradient[i] * self.acquisition.lengthscales[i];
                // Minimising: a step goes along -g.
                if (p[i] <= 0.0 && g > 0.0) || (p[i] >= 1.0 && g < 0.0) || !g.is_finite() {
                    0.0
                } else {
                    g
                }
            })
            .collect();
        (-value, projected)
    }
}

impl CostFunction for Continuous<'_> {
    type Param = Vec<f64>;
    type Output = f64;
    fn cost(&self, scaled: &Vec<f64>) -> Result<f64, argmin::core::Error> {
        let v = self.value_and_gradient(scaled).0;
        Ok(if v.is_finite() { v } else { f64::INFINITY })
    }
}

impl Gradient for Continuous<'_> {
    type Param = Vec<f64>;
    type Gradient = Vec<f64>;
    fn gradient(&self, scaled: &Vec<f64>) -> Result<Vec<f64>, argmin::core::Error> {
        Ok(self.value_and_gradient(scaled).1)
    }
}

/// `start` with its continuous coordinates moved up the acquisition by L-BFGS (argmin), if
/// that ends higher than `value`.
pub(super) fn gradient_ascent(
    acquisition: &Acquisition,
    start: &[f64],
    value: f64,
    grids: &[Option<Vec<f64>>],
) -> Option<(Vec<f64>, f64)> {
    let free: Vec<usize> = (0..start.len()).filter(|&i| grids[i].is_none()).collect();
    if free.is_empty() {
        return None;
    }
    let initial: Vec<f64> = free
        .iter()
        .map(|&i| start[i] / acquisition.lengthscales[i])
        .collect();
    let last = LastAnswer::default();
    let problem = Continuous {
        acquisition,
        base: start,
        free: &free,
        last: &last,
    };
    let (found, cost) = lbfgs_minimise(problem, initial, GRADIENT_TOLERANCE, LOCAL_ITERATIONS)?;
    let found_value = -cost;
    (found_value > value).then(|| (problem.point(&found), found_value))
}
