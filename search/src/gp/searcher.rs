//! The Gaussian-process searcher: random trials first, then the point that maximises the log
//! expected improvement of a GP fitted to the completed trials (Optuna's GPSampler's loop).

use argmin::core::{CostFunction, Executor, Gradient, State};
use argmin::solver::linesearch::MoreThuenteLineSearch;
use argmin::solver::quasinewton::LBFGS;
use rand::Rng;
use serde::{Deserialize, Serialize};

use super::acquisition::{log_expected_improvement, log_expected_improvement_with_gradient};
use super::model::{fit, GpRegressor};
use super::space::{ConditionalSpace, UnitSpace};
use crate::{trial_rng, History, Mode, Params, RandomSearch, Searcher, Space, Status, TrialId};

/// The GP searcher's settings (Optuna 5 GPSampler's names and defaults).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GpOptions {
    /// Random trials before the model takes over.
    pub n_startup_trials: u64,
    /// Random points the acquisition is evaluated at first.
    pub n_preliminary_samples: usize,
    /// How many of the best of them are refined by L-BFGS.
    pub n_local_search: usize,
    /// The objective gives the same value for the same params: the noise stays at its floor.
    pub deterministic_objective: bool,
}

impl GpOptions {
    /// Checks the settings' ranges.
    ///
    /// ```
    /// let bad = tune_search::gp::GpOptions { n_preliminary_samples: 0, ..Default::default() };
    /// assert_eq!(bad.validate().unwrap_err().key, "n_preliminary_samples");
    /// ```
    pub fn validate(&self) -> Result<(), crate::FieldError> {
        crate::FieldError::check_at_least(
            "n_preliminary_samples",
            self.n_preliminary_samples as u64,
            1,
        )
    }
}

impl Default for GpOptions {
    fn default() -> Self {
        GpOptions {
            n_startup_trials: 10,
            n_preliminary_samples: 2048,
            n_local_search: 10,
            deterministic_objective: false,
        }
    }
}

/// The floor of the noise variance (Optuna's `DEFAULT_MINIMUM_NOISE_VAR`).
const MINIMUM_NOISE: f64 = 1e-6;
/// Added to the posterior variance in the acquisition, so that it stays finite at observed
/// points.
const STABILIZING_NOISE: f64 = 1e-12;
/// L-BFGS iterations per local search.
const LOCAL_ITERATIONS: u64 = 50;
/// Offsets the acquisition's random stream from the startup trials' (same seed and id).
const ACQUISITION_STREAM: u64 = 0x6770_5f61_6371;

/// Bayesian optimisation with a Gaussian process. A suggestion is a pure function of the
/// seed, the trial id and the history: the model is fitted afresh each time.
///
/// ```
/// use tune_search::gp::{GpOptions, GpSearch};
/// use tune_search::{History, Mode, Searcher, Space, Status};
/// let space = Space::builder().uniform("x", -2.0, 2.0).build().unwrap();
/// let options = GpOptions { n_startup_trials: 3, n_preliminary_samples: 128, ..Default::default() };
/// let mut gp = GpSearch::new(space, 0, options).unwrap();
/// let mut history = History::new(Mode::Min);
/// for id in 0..6 {
///     let p = gp.suggest(id, &history).unwrap();
///     let x = p.get("x").unwrap().as_f64().unwrap();
///     history.record(id, p, Status::Running);
///     history.report(id, 1, (x - 1.0).powi(2));
///     history.set_status(id, Status::Completed);
/// }
/// assert!(history.best().unwrap().value.unwrap() < 0.5);
/// ```
#[derive(Debug, Clone)]
pub struct GpSearch {
    unit: UnitSpace,
    random: RandomSearch,
    seed: u64,
    options: GpOptions,
}

impl GpSearch {
    /// The searcher over `space`; a conditional space is refused with a message naming its
    /// conditional parameters.
    pub fn new(space: Space, seed: u64, options: GpOptions) -> Result<GpSearch, ConditionalSpace> {
        Ok(GpSearch {
            unit: UnitSpace::new(&space)?,
            random: RandomSearch::new(space, seed),
            seed,
            options,
        })
    }

    /// The training set: completed trials' points and values oriented to maximise and
    /// standardised, then running and pending trials at the worst of them (a constant liar,
    /// so that parallel suggestions spread out).
    fn training_set(&self, history: &History) -> (Vec<Vec<f64>>, Vec<f64>, f64) {
        let sign = match history.mode() {
            Mode::Min => -1.0,
            Mode::Max => 1.0,
        };
        let mut x = Vec::new();
        let mut f = Vec::new();
        for o in history.iter().filter(|o| o.status == Status::Completed) {
            let (Some(point), Some(v)) = (self.unit.to_point(&o.params), o.value) else {
                continue;
            };
            if v.is_finite() {
                x.push(point);
                f.push(sign * v);
            }
        }
        let n = f.len() as f64;
        let mean = f.iter().sum::<f64>() / n;
        let std = (f.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
        let std = if std > 1e-12 { std } else { 1.0 };
        let mut y: Vec<f64> = f.iter().map(|v| (v - mean) / std).collect();
        let best = y.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let worst = y.iter().copied().fold(f64::INFINITY, f64::min);
        for o in history
            .iter()
            .filter(|o| matches!(o.status, Status::Running | Status::Pending))
        {
            if let Some(point) = self.unit.to_point(&o.params) {
                x.push(point);
                y.push(worst);
            }
        }
        (x, y, best)
    }

    /// The point with the highest log EI: the best of random points, refined by L-BFGS on the
    /// continuous coordinates and then, choice by choice, on the categorical ones.
    fn maximise(&self, gp: &GpRegressor, best: f64, id: TrialId, x: &[Vec<f64>]) -> Vec<f64> {
        let categorical = self.unit.categorical();
        let sizes = self.unit.choices();
        let mut rng = trial_rng(self.seed ^ ACQUISITION_STREAM, id);
        let acquisition = |p: &[f64]| {
            let (mean, var) = gp.posterior(p);
            log_expected_improvement(mean, var + STABILIZING_NOISE, best)
        };
        let mut scored: Vec<(f64, Vec<f64>)> = (0..self.options.n_preliminary_samples)
            .map(|_| {
                sizes
                    .iter()
                    .map(|&n| match n {
                        0 => rng.random::<f64>(),
                        n => rng.random_range(0..n) as f64,
                    })
                    .collect::<Vec<f64>>()
            })
            // The trials seen so far are starting points too.
            .chain(x.iter().cloned())
            .map(|p| (acquisition(&p), p))
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut best_point = scored[0].1.clone();
        let mut best_value = scored[0].0;
        for (_, start) in scored.iter().take(self.options.n_local_search.max(1)) {
            let mut point = local_search(gp, best, start, &categorical);
            // Choice by choice: each categorical coordinate at its best value, the others held.
            for (i, &n) in sizes.iter().enumerate().filter(|(_, &n)| n > 0) {
                let mut trial = point.clone();
                for c in 0..n {
                    trial[i] = c as f64;
                    if acquisition(&trial) > acquisition(&point) {
                        point[i] = c as f64;
                    }
                }
            }
            let value = acquisition(&point);
            if value > best_value {
                best_value = value;
                best_point = point;
            }
        }
        best_point
    }
}

impl Searcher for GpSearch {
    fn suggest(&mut self, id: TrialId, history: &History) -> Option<Params> {
        let completed = history
            .iter()
            .filter(|o| o.status == Status::Completed && o.value.is_some_and(f64::is_finite))
            .count() as u64;
        if completed < self.options.n_startup_trials.max(2) {
            return self.random.suggest(id, history);
        }
        let (x, y, best) = self.training_set(history);
        let gp = fit(
            &x,
            &y,
            &self.unit.categorical(),
            MINIMUM_NOISE,
            self.options.deterministic_objective,
            None,
        );
        let point = self.maximise(&gp, best, id, &x);
        Some(self.unit.to_params(&point))
    }
}

/// The acquisition as a function of a point's continuous coordinates (the others fixed),
/// negated for argmin. Coordinates are clamped to [0, 1], and the gradient of a coordinate at
/// a bound that points out of it is zeroed (a projected gradient), so that the search stays in
/// the box and stops at its walls.
struct Acquisition<'a> {
    gp: &'a GpRegressor,
    best: f64,
    base: &'a [f64],
    /// The continuous coordinates' indices.
    free: Vec<usize>,
}

impl Acquisition<'_> {
    fn point(&self, free: &[f64]) -> Vec<f64> {
        let mut p = self.base.to_vec();
        for (&i, &v) in self.free.iter().zip(free) {
            p[i] = v.clamp(0.0, 1.0);
        }
        p
    }

    fn value_and_gradient(&self, free: &[f64]) -> (f64, Vec<f64>) {
        let p = self.point(free);
        let (mean, var, dmean, dvar) = self.gp.posterior_with_gradient(&p);
        let (value, gradient) = log_expected_improvement_with_gradient(
            mean,
            var + STABILIZING_NOISE,
            &dmean,
            &dvar,
            self.best,
        );
        let projected = self
            .free
            .iter()
            .zip(free)
            .map(|(&i, &v)| {
                let g = -gradient[i];
                // Minimising: a step goes along -g.
                if (v <= 0.0 && g > 0.0) || (v >= 1.0 && g < 0.0) || !g.is_finite() {
                    0.0
                } else {
                    g
                }
            })
            .collect();
        (-value, projected)
    }
}

impl CostFunction for Acquisition<'_> {
    type Param = Vec<f64>;
    type Output = f64;
    fn cost(&self, free: &Vec<f64>) -> Result<f64, argmin::core::Error> {
        let v = self.value_and_gradient(free).0;
        Ok(if v.is_finite() { v } else { f64::INFINITY })
    }
}

impl Gradient for Acquisition<'_> {
    type Param = Vec<f64>;
    type Gradient = Vec<f64>;
    fn gradient(&self, free: &Vec<f64>) -> Result<Vec<f64>, argmin::core::Error> {
        Ok(self.value_and_gradient(free).1)
    }
}

/// `start` with its continuous coordinates moved up the acquisition by L-BFGS (argmin); the
/// start itself where the search fails or ends lower.
fn local_search(gp: &GpRegressor, best: f64, start: &[f64], categorical: &[bool]) -> Vec<f64> {
    let free: Vec<usize> = (0..start.len()).filter(|&i| !categorical[i]).collect();
    if free.is_empty() {
        return start.to_vec();
    }
    let problem = Acquisition {
        gp,
        best,
        base: start,
        free: free.clone(),
    };
    let initial: Vec<f64> = free.iter().map(|&i| start[i]).collect();
    let (start_cost, _) = problem.value_and_gradient(&initial);
    let Ok(solver) = LBFGS::new(MoreThuenteLineSearch::new(), 10).with_tolerance_grad(1e-6) else {
        return start.to_vec();
    };
    let result = Executor::new(problem, solver)
        .configure(|s| s.param(initial).max_iters(LOCAL_ITERATIONS))
        .run();
    let Ok(result) = result else {
        return start.to_vec();
    };
    let state = result.state();
    match state.get_best_param() {
        Some(found) if state.get_best_cost() <= start_cost => {
            let mut p = start.to_vec();
            for (&i, &v) in free.iter().zip(found) {
                p[i] = v.clamp(0.0, 1.0);
            }
            p
        }
        _ => start.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Branin on [-5, 10] x [0, 15], minimum 0.397887.
    fn branin(x: f64, y: f64) -> f64 {
        let pi = std::f64::consts::PI;
        let (b, c) = (5.1 / (4.0 * pi * pi), 5.0 / pi);
        (y - b * x * x + c * x - 6.0).powi(2) + 10.0 * (1.0 - 1.0 / (8.0 * pi)) * x.cos() + 10.0
    }

    fn run(searcher: &mut dyn Searcher, trials: u64) -> f64 {
        let mut history = History::new(Mode::Min);
        for id in 0..trials {
            let p = searcher.suggest(id, &history).unwrap();
            let at = |k: &str| p.get(k).and_then(|v| v.as_f64()).unwrap();
            let value = branin(at("x"), at("y"));
            history.record(id, p, Status::Running);
            history.report(id, 1, value);
            history.set_status(id, Status::Completed);
        }
        history.best().unwrap().value.unwrap() - 0.397_887
    }

    fn space() -> Space {
        Space::builder()
            .uniform("x", -5.0, 10.0)
            .uniform("y", 0.0, 15.0)
            .build()
            .unwrap()
    }

    #[test]
    fn on_branin_it_beats_random_search_at_the_same_budget() {
        let options = GpOptions {
            n_preliminary_samples: 256,
            n_local_search: 3,
            ..Default::default()
        };
        let mut gp_regrets = Vec::new();
        let mut random_regrets = Vec::new();
        for seed in 0..5 {
            let mut gp = GpSearch::new(space(), seed, options.clone()).unwrap();
            gp_regrets.push(run(&mut gp, 25));
            random_regrets.push(run(&mut RandomSearch::new(space(), seed), 25));
        }
        gp_regrets.sort_by(f64::total_cmp);
        random_regrets.sort_by(f64::total_cmp);
        eprintln!("regret at 25 trials, gp {gp_regrets:?}, random {random_regrets:?}");
        // Medians over 5 seeds: the GP gets close to the minimum, random search does not.
        assert!(gp_regrets[2] < 0.05, "{gp_regrets:?}");
        assert!(
            gp_regrets[2] * 10.0 < random_regrets[2],
            "{gp_regrets:?} {random_regrets:?}"
        );
    }

    #[test]
    fn a_suggestion_is_a_function_of_seed_id_and_history() {
        let options = GpOptions {
            n_startup_trials: 4,
            n_preliminary_samples: 64,
            n_local_search: 2,
            ..Default::default()
        };
        let mut history = History::new(Mode::Min);
        let mut first = GpSearch::new(space(), 7, options.clone()).unwrap();
        for id in 0..6 {
            let p = first.suggest(id, &history).unwrap();
            let at = |k: &str| p.get(k).and_then(|v| v.as_f64()).unwrap();
            let value = branin(at("x"), at("y"));
            history.record(id, p, Status::Running);
            history.report(id, 1, value);
            history.set_status(id, Status::Completed);
        }
        // A fresh searcher (a resumed sweep) asked the same thing answers the same.
        let mut again = GpSearch::new(space(), 7, options).unwrap();
        assert_eq!(first.suggest(6, &history), again.suggest(6, &history));
    }

    #[test]
    fn a_running_trial_is_not_proposed_again() {
        // Constant liar: with trial 6 running at the model's favourite, the next suggestion
        // goes elsewhere.
        let options = GpOptions {
            n_startup_trials: 4,
            n_preliminary_samples: 256,
            n_local_search: 3,
            ..Default::default()
        };
        let mut history = History::new(Mode::Min);
        let mut gp = GpSearch::new(space(), 3, options).unwrap();
        for id in 0..6 {
            let p = gp.suggest(id, &history).unwrap();
            let at = |k: &str| p.get(k).and_then(|v| v.as_f64()).unwrap();
            let value = branin(at("x"), at("y"));
            history.record(id, p, Status::Running);
            history.report(id, 1, value);
            history.set_status(id, Status::Completed);
        }
        let favourite = gp.suggest(6, &history).unwrap();
        history.record(6, favourite.clone(), Status::Running);
        let next = gp.suggest(7, &history).unwrap();
        assert_ne!(next, favourite);
    }

    #[test]
    fn conditional_spaces_are_refused() {
        let space = Space::builder()
            .choice("opt", ["sgd", "adam"])
            .uniform("momentum", 0.5, 0.99)
            .when("opt", "sgd")
            .build()
            .unwrap();
        let err = GpSearch::new(space, 0, GpOptions::default()).unwrap_err();
        assert_eq!(err.0, ["momentum"]);
    }
}
