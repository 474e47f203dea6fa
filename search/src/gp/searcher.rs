//! The Gaussian-process searcher: random trials first, then the point that maximises the log
//! expected improvement of a GP fitted to the completed trials (Optuna's GPSampler's loop).

use rand::Rng;
use serde::{Deserialize, Serialize};

use super::model::{GpRegressor, Matern};
use super::optimise::{local_search, Acquisition};
use super::refit::{Fitter, KernelMemo};
use super::space::{ConditionalSpace, UnitSpace};
use super::warp::{mean_and_deviation, standardised, yeo_johnson_standardised};
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
    /// The kernel's parameters are fitted again once the completed trials have grown by this
    /// fraction since the last fit (with 0.1: at every trial up to 20, then at 22, 24, .., 94,
    /// 103, 113, .., 284, 312, ..); in between, the last fit's parameters serve every trial.
    /// 0 fits at every suggestion, as Optuna does.
    pub refit_growth: f64,
    /// The values go through a Yeo-Johnson power transform fitted to them before they are
    /// standardised (HEBO's output warping), which spreads out those near the best; Optuna
    /// standardises them only.
    pub power_transform: bool,
    /// A completed or running trial's point is not suggested again while the acquisition
    /// search finds another (Optuna suggests it again where its log EI is highest).
    pub avoid_repeats: bool,
    /// The floor of the objective's noise variance, on the standardised values: 1e-12 by
    /// default, SMAC3's order (its GP's white-noise bound is e^-25); Optuna's is 1e-6, which
    /// the constraints' processes keep. A noisy objective's fitted noise lies far above
    /// either; an exact one's sits on the floor, and the process cannot tell apart values
    /// closer than its square root: with 1e-6 the GP stalled on Branin at a regret of about
    /// 3e-6 (docs/benchmarks/gp.md).
    pub minimum_noise: f64,
    /// Under a scheduler that stops or pauses trials at rungs (ASHA, HyperBand): the process
    /// is fitted to the values at the highest step where at least `n_startup_trials` trials
    /// reported ([`History::rung_step`]), as BOHB fits its model at the largest budget with
    /// enough observations (Falkner et al. 2018) and SMAC3's multi-fidelity facade its random
    /// forest; a trial still running below that step is believed at the process's mean there.
    /// Off, only completed trials are modelled (with ASHA, those trained to `max_t`).
    pub rung_model: bool,
    /// Trials from this id on are suggested where the process's mean is best (pure
    /// exploitation, no exploration term), among the points the constraints' processes
    /// predict feasible: `auto` sets it to spend a sweep's last trials
    /// refining its incumbent ([`crate::AutoOptions::gp_exploit_fraction`]). Not a spec key:
    /// an id is the sweep's budget's, not the model's.
    #[serde(skip)]
    pub exploit_from: Option<u64>,
    /// The Matérn kernel's smoothness, of the objective's process and the constraints':
    /// `"matern52"` (Optuna's) or `"matern32"` (HEBO's; `auto`'s, [`crate::AutoOptions::gp_kernel`]).
    pub kernel: Matern,
}

impl GpOptions {
    /// The noise floor of Optuna's GPSampler (`DEFAULT_MINIMUM_NOISE_VAR`), and of tune's GP
    /// before store format 8.
    pub const OPTUNA_MINIMUM_NOISE: f64 = 1e-6;

    /// Optuna 5 GPSampler's model and acquisition search: values standardised only, a noise
    /// floor of 1e-6, and a point suggested again where its log EI is highest; the kernel
    /// still refitted as `refit_growth` says.
    ///
    /// ```
    /// let optuna = tune_search::gp::GpOptions::optuna();
    /// assert!(!optuna.power_transform && !optuna.avoid_repeats);
    /// ```
    pub fn optuna() -> GpOptions {
        GpOptions {
            power_transform: false,
            avoid_repeats: false,
            minimum_noise: GpOptions::OPTUNA_MINIMUM_NOISE,
            ..GpOptions::default()
        }
    }

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
        )?;
        crate::FieldError::check_within("refit_growth", self.refit_growth, 0.0, 10.0)?;
        if self.minimum_noise > 0.0 && self.minimum_noise <= 1.0 {
            Ok(())
        } else {
            Err(crate::FieldError::new(
                "minimum_noise",
                format!("expected a number in (0, 1], found {}", self.minimum_noise),
            ))
        }
    }
}

impl Default for GpOptions {
    fn default() -> Self {
        GpOptions {
            n_startup_trials: 10,
            n_preliminary_samples: 2048,
            n_local_search: 10,
            deterministic_objective: false,
            refit_growth: 0.1,
            power_transform: true,
            avoid_repeats: true,
            minimum_noise: 1e-12,
            rung_model: false,
            exploit_from: None,
            kernel: Matern::FiveHalves,
        }
    }
}

/// Points closer than this in every unit coordinate count as the same trial.
const DUPLICATE: f64 = 1e-6;
/// Offsets the acquisition's random stream from the startup trials' (same seed and id).
const ACQUISITION_STREAM: u64 = 0x6770_5f61_6371;

/// Bayesian optimisation with a Gaussian process. A suggestion is a pure function of the
/// seed, the trial id and the history: the kernel is fitted on a prefix of the completed trials
/// that the history names (see [`GpOptions::refit_growth`]), kept between suggestions only to
/// save fitting the same prefix again.
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
    objective_fit: KernelMemo,
    constraint_fits: Vec<KernelMemo>,
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
            objective_fit: KernelMemo::default(),
            constraint_fits: Vec::new(),
        })
    }

    /// How many trials are drawn at random before the model (at least 2: a process needs two
    /// points); under [`GpOptions::rung_model`], also how many must have reported at a rung for
    /// the model to be fitted there.
    ///
    /// ```
    /// use tune_search::gp::{GpOptions, GpSearch};
    /// let space = tune_search::Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
    /// let options = GpOptions { n_startup_trials: 0, ..Default::default() };
    /// assert_eq!(GpSearch::new(space, 0, options).unwrap().startup_trials(), 2);
    /// ```
    pub fn startup_trials(&self) -> usize {
        self.options.n_startup_trials.max(2) as usize
    }

    /// Sets [`GpOptions::exploit_from`]: trials from this id on go where the mean is best.
    pub(crate) fn set_exploit_from(&mut self, from: Option<u64>) {
        self.options.exploit_from = from;
    }

    /// [`GpOptions::exploit_from`].
    pub(crate) fn exploit_from(&self) -> Option<u64> {
        self.options.exploit_from
    }

    /// Sets [`GpOptions::kernel`] (the fits remembered with another kernel are not reused).
    pub(crate) fn set_kernel(&mut self, kernel: Matern) {
        self.options.kernel = kernel;
    }

    /// [`GpOptions::kernel`].
    #[cfg(test)]
    pub(crate) fn kernel(&self) -> Matern {
        self.options.kernel
    }

    /// The completed trials' points, values (oriented to maximise and standardised) and
    /// constraint values. A trial whose constraints are not all known is left out.
    fn training_set(&self, history: &History) -> TrainingSet {
        let sign = match history.mode() {
            Mode::Min => -1.0,
            Mode::Max => 1.0,
        };
        let completed = || history.iter().filter(|o| o.status == Status::Completed);
        let k = completed().map(|o| o.constraints.len()).max().unwrap_or(0);
        let mut set = TrainingSet {
            constraints: vec![Vec::new(); k],
            ..TrainingSet::default()
        };
        for o in completed() {
            let (Some(point), Some(v)) = (self.unit.to_point(&o.params), o.value) else {
                continue;
            };
            if !v.is_finite()
                || o.constraints.len() != k
                || o.constraints.iter().any(|c| !c.is_finite())
            {
                continue;
            }
            set.x.push(point);
            set.values.push(sign * v);
            set.feasible.push(o.feasible());
            for (column, &c) in set.constraints.iter_mut().zip(&o.constraints) {
                column.push(c);
            }
        }
        set.y = (self.objective_scale())(&set.values);
        set
    }

    /// How the objective's values are put on the process's scale.
    fn objective_scale(&self) -> fn(&[f64]) -> Vec<f64> {
        if self.options.power_transform {
            yeo_johnson_standardised
        } else {
            standardised
        }
    }

    /// The process for the objective: the kernel fitted on the scheduled prefix
    /// ([`KernelMemo`]), conditioned on every completed trial.
    fn objective_model(&mut self, set: &TrainingSet) -> GpRegressor {
        let categorical = self.unit.categorical();
        self.objective_fit.model(
            &self.fitter(&categorical),
            (&set.x, &set.values, &set.y),
            self.options.refit_growth,
            self.objective_scale(),
        )
    }

    /// How this searcher's kernels are fitted.
    fn fitter<'a>(&self, categorical: &'a [bool]) -> Fitter<'a> {
        Fitter {
            categorical,
            minimum_noise: self.options.minimum_noise,
            deterministic: self.options.deterministic_objective,
            kernel: self.options.kernel,
        }
    }

    /// One process per constraint, fitted to its values with the sign flipped (so that "met"
    /// is "at least the threshold") and standardised, with the threshold that 0 becomes
    /// (Optuna's `_get_constraints_acqf_args`).
    fn constraint_models(&mut self, set: &TrainingSet) -> Vec<(GpRegressor, f64)> {
        let categorical = self.unit.categorical();
        // Constraints keep Optuna's floor: with an exact one, a model sure of the bound sent
        // the search far into the infeasible side once the best feasible point was found (the
        // test `under_a_constraint_it_closes_in_on_the_bound_from_the_feasible_side`).
        let fitter = Fitter {
            minimum_noise: GpOptions::OPTUNA_MINIMUM_NOISE,
            ..self.fitter(&categorical)
        };
        self.constraint_fits
            .resize_with(set.constraints.len(), KernelMemo::default);
        set.constraints
            .iter()
            .zip(&mut self.constraint_fits)
            .map(|(column, memo)| {
                let flipped: Vec<f64> = column.iter().map(|c| -c).collect();
                let (y, threshold) = standardised_constraint(&flipped);
                let model = memo.model(
                    &fitter,
                    (&set.x, &flipped, &y),
                    self.options.refit_growth,
                    |f| standardised_constraint(f).0,
                );
                (model, threshold)
            })
            .collect()
    }

    /// The point with the highest acquisition, as Optuna's `optimize_acqf_mixed` finds it:
    /// the best of scrambled Sobol points, plus others drawn with probability proportional to
    /// their EI and the best (feasible) trial so far, each refined by a local search.
    ///
    /// Unlike Optuna, a point in `taken` (a completed or running trial's, with
    /// [`GpOptions::avoid_repeats`]) is passed over for the best refined point elsewhere, or
    /// else the best preliminary sample elsewhere: the process's noise keeps the incumbent's
    /// EI above zero, and on Hartmann6 four of the ten runs that ended in a poor basin had
    /// spent 21 to 71 of their 200 trials evaluating it again.
    fn maximise(
        &self,
        acquisition: &Acquisition,
        id: TrialId,
        warm_start: Option<&[f64]>,
        taken: &[Vec<f64>],
    ) -> Vec<f64> {
        let mut rng = trial_rng(self.seed ^ ACQUISITION_STREAM, id);
        let samples = self
            .unit
            .sample(self.options.n_preliminary_samples, &mut rng);
        let values = acquisition.values(&samples);
        let first = (0..values.len())
            .max_by(|&a, &b| values[a].total_cmp(&values[b]))
            .expect("at least one preliminary sample");
        let mut starts = vec![(samples[first].clone(), values[first])];
        // Roulette: the rest of the starts with probability exp(log EI - the best's log EI),
        // without replacement; fewer where few samples have any chance.
        let mut weights: Vec<f64> = values
            .iter()
            .map(|v| (v - values[first]).exp())
            .map(|w| if w.is_finite() { w } else { 0.0 })
            .collect();
        weights[first] = 0.0;
        let draws = self.options.n_local_search.saturating_sub(2);
        for _ in 0..draws {
            let total: f64 = weights.iter().sum();
            if total <= 0.0 {
                break;
            }
            let mut r = rng.random::<f64>() * total;
            let Some(i) = weights.iter().position(|&w| {
                r -= w;
                w > 0.0 && r <= 0.0
            }) else {
                break;
            };
            weights[i] = 0.0;
            starts.push((samples[i].clone(), values[i]));
        }
        if let Some(warm_start) = warm_start {
            starts.push((warm_start.to_vec(), acquisition.value(warm_start)));
        }
        let grids = self.unit.grids();
        let categorical = self.unit.categorical();
        let is_taken = |p: &[f64]| {
            taken
                .iter()
                .any(|t| t.iter().zip(p).all(|(a, b)| (a - b).abs() <= DUPLICATE))
        };
        let mut found: Option<(Vec<f64>, f64)> = None;
        for (point, value) in starts {
            let (point, value) = local_search(acquisition, point, value, &grids, &categorical);
            if found.as_ref().is_none_or(|f| value > f.1) && !is_taken(&point) {
                found = Some((point, value));
            }
        }
        if let Some((point, _)) = found {
            return point;
        }
        // The first of the highest untaken samples (none untaken: the best, taken or not).
        let untaken = (0..samples.len()).filter(|&i| !is_taken(&samples[i])).fold(
            None,
            |best: Option<usize>, i| match best {
                Some(b) if !values[i].total_cmp(&values[b]).is_gt() => Some(b),
                _ => Some(i),
            },
        );
        samples[untaken.unwrap_or(first)].clone()
    }
}

impl Searcher for GpSearch {
    fn suggest(&mut self, id: TrialId, history: &History) -> Option<Params> {
        if self.options.rung_model {
            if let Some(step) = history.rung_step(self.startup_trials()) {
                return self.suggest_from(id, &history.at_step(step));
            }
        }
        self.suggest_from(id, history)
    }
}

impl GpSearch {
    /// The suggestion from the completed trials of `history`.
    fn suggest_from(&mut self, id: TrialId, history: &History) -> Option<Params> {
        let completed = history
            .iter()
            .filter(|o| o.status == Status::Completed && o.value.is_some_and(f64::is_finite))
            .count() as u64;
        if completed < self.startup_trials() as u64 {
            return self.random.suggest(id, history);
        }
        let set = self.training_set(history);
        if set.y.len() < 2 {
            return self.random.suggest(id, history);
        }
        let fitted = self.objective_model(&set);
        let constraints = self.constraint_models(&set);
        // The incumbent is the best feasible trial; with none, the acquisition is the
        // probability of meeting the constraints alone (Optuna's LogCEI).
        let best_index = (0..set.y.len())
            .filter(|&i| set.feasible[i])
            .max_by(|&a, &b| set.y[a].total_cmp(&set.y[b]));
        let (best, warm_start) = match best_index {
            Some(i) => (Some(set.y[i]), Some(set.x[i].clone())),
            None => (None, None),
        };
        let running: Vec<Vec<f64>> = history
            .iter()
            .filter(|o| matches!(o.status, Status::Running | Status::Pending))
            .filter_map(|o| self.unit.to_point(&o.params))
            .collect();
        let taken: Vec<Vec<f64>> = if self.options.avoid_repeats {
            set.x.iter().chain(&running).cloned().collect()
        } else {
            Vec::new()
        };
        let gp = self.believing_running_trials(fitted, set.x, set.y, running);
        let mut acquisition = Acquisition::new(&gp, best, &constraints);
        acquisition.exploit = self.options.exploit_from.is_some_and(|from| id >= from);
        let point = self.maximise(&acquisition, id, warm_start.as_deref(), &taken);
        Some(self.unit.to_params(&point))
    }

    /// The fitted process also conditioned on running and pending trials at its own mean
    /// there (the Kriging believer, as Optuna does): their neighbourhoods lose their
    /// uncertainty, so parallel suggestions spread out, and the fit is not swayed by them.
    fn believing_running_trials(
        &self,
        fitted: GpRegressor,
        mut x: Vec<Vec<f64>>,
        mut y: Vec<f64>,
        running: Vec<Vec<f64>>,
    ) -> GpRegressor {
        if running.is_empty() {
            return fitted;
        }
        for point in running {
            y.push(fitted.posterior(&point).0);
            x.push(point);
        }
        // Fitted parameters keep the matrix positive definite with jitter as a last resort;
        // where even that fails, the trials are left out rather than the suggestion.
        GpRegressor::new(x, y, self.unit.categorical(), fitted.params().clone()).unwrap_or(fitted)
    }
}

/// What [`GpSearch::training_set`] collects.
#[derive(Debug, Default)]
struct TrainingSet {
    x: Vec<Vec<f64>>,
    /// The objective's values, oriented to maximise.
    values: Vec<f64>,
    /// `values` standardised.
    y: Vec<f64>,
    /// Per constraint, each trial's value (met at or below 0).
    constraints: Vec<Vec<f64>>,
    feasible: Vec<bool>,
}

/// A constraint's (flipped) values standardised, and the threshold that 0 becomes (the
/// deviation floored at 1e-12, as Optuna does).
fn standardised_constraint(flipped: &[f64]) -> (Vec<f64>, f64) {
    let (mean, std) = mean_and_deviation(flipped);
    let std = std.max(1e-12);
    (
        flipped.iter().map(|v| (v - mean) / std).collect(),
        -mean / std,
    )
}

#[cfg(test)]
mod tests {
    use super::super::optimise::*;
    use super::*;
    use crate::gp::fit;

    /// Trial `id` ran with `params` and ended with `value`.
    fn complete(history: &mut History, id: TrialId, params: Params, value: f64) {
        history.record(id, params, Status::Running);
        history.report(id, 1, value);
        history.set_status(id, Status::Completed);
    }

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
            complete(&mut history, id, p, value);
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

    /// Trial `id` of a halving on Branin: `steps` reports, the last one Branin's value, each
    /// earlier one 5 worse, then stopped.
    fn stopped_at(history: &mut History, id: TrialId, params: Params, steps: u64) {
        let at = |k: &str| params.get(k).and_then(|v| v.as_f64()).unwrap();
        let value = branin(at("x"), at("y"));
        history.record(id, params, Status::Running);
        for step in 1..=steps {
            history.report(id, step, value + 5.0 * (steps - step) as f64);
        }
        history.set_status(id, Status::Stopped);
    }

    #[test]
    fn with_the_rung_model_it_is_fitted_at_the_highest_step_its_startup_count_reached() {
        let options = GpOptions {
            n_preliminary_samples: 128,
            n_local_search: 2,
            ..Default::default()
        };
        let rungs = GpOptions {
            rung_model: true,
            ..options.clone()
        };
        let mut random = RandomSearch::new(space(), 4);
        for (deep, step) in [(12, 3), (9, 1)] {
            let mut h = History::new(Mode::Min);
            for id in 0..30 {
                let p = random.suggest(id, &h).unwrap();
                stopped_at(&mut h, id, p, if id < deep { 3 } else { 1 });
            }
            assert_eq!(h.rung_step(10), Some(step));
            let mut at_rung = GpSearch::new(space(), 4, rungs.clone()).unwrap();
            let mut plain = GpSearch::new(space(), 4, options.clone()).unwrap();
            assert_eq!(at_rung.suggest(30, &h), plain.suggest(30, &h.at_step(step)));
            // Without it no trial completed: the suggestion is the random start's.
            assert_eq!(
                plain.suggest(30, &h),
                RandomSearch::new(space(), 4).suggest(30, &h)
            );
        }
    }

    #[test]
    fn with_the_rung_model_it_closes_in_on_branin_when_every_trial_is_stopped() {
        let options = GpOptions {
            n_preliminary_samples: 256,
            n_local_search: 3,
            rung_model: true,
            ..Default::default()
        };
        let mut regrets = Vec::new();
        for seed in 0..3 {
            let mut gp = GpSearch::new(space(), seed, options.clone()).unwrap();
            let mut h = History::new(Mode::Min);
            for id in 0..25 {
                let p = gp.suggest(id, &h).unwrap();
                stopped_at(&mut h, id, p, 1);
            }
            let best = h
                .iter()
                .filter_map(|t| t.value_at(1))
                .fold(f64::MAX, f64::min);
            regrets.push(best - 0.397_887);
        }
        regrets.sort_by(f64::total_cmp);
        // As the GP on completed trials does (`on_branin_it_beats_random_search_...`).
        assert!(regrets[1] < 0.05, "{regrets:?}");
    }

    #[test]
    fn under_a_constraint_it_closes_in_on_the_bound_from_the_feasible_side() {
        // Minimise x on [0, 1] with x >= 0.6 (constraint value 0.6 - x): the best feasible
        // point is the bound, where random search at the same budget lands ~0.02 above it.
        let space = Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
        let options = GpOptions {
            n_startup_trials: 5,
            n_preliminary_samples: 256,
            ..Default::default()
        };
        let mut gp = GpSearch::new(space, 3, options).unwrap();
        let mut history = History::new(Mode::Min);
        for id in 0..20 {
            let p = gp.suggest(id, &history).unwrap();
            let x = p.f64("x").unwrap();
            history.record(id, p, Status::Running);
            history.report(id, 1, x);
            history.report_constraints(id, &[0.6 - x]);
            history.set_status(id, Status::Completed);
        }
        let best = history.best().unwrap().value.unwrap();
        assert!((0.6..0.61).contains(&best), "best feasible x {best}");
        // The model's trials stay near the bound: few far inside the infeasible side.
        let far_out = (5..20)
            .filter(|&id| history.get(id).unwrap().params.f64("x").unwrap() < 0.5)
            .count();
        assert!(far_out <= 2, "{far_out} of 15 below 0.5");
    }

    #[test]
    fn the_constraint_term_has_the_gradient_of_its_value() {
        let space = Space::builder()
            .uniform("x", 0.0, 1.0)
            .uniform("y", 0.0, 1.0)
            .build()
            .unwrap();
        let mut gp = GpSearch::new(space, 0, GpOptions::default()).unwrap();
        let mut history = History::new(Mode::Min);
        for id in 0..12u64 {
            let (x, y) = ((id as f64 * 0.37).fract(), (id as f64 * 0.61).fract());
            let mut p = Params::default();
            p.insert("x", crate::Value::Float(x));
            p.insert("y", crate::Value::Float(y));
            history.record(id, p, Status::Running);
            history.report(id, 1, (x - 0.3).powi(2) + y);
            history.report_constraints(id, &[x + y - 1.0, 0.2 - y]);
            history.set_status(id, Status::Completed);
        }
        let set = gp.training_set(&history);
        assert!(set.feasible.iter().any(|f| *f) && set.feasible.iter().any(|f| !*f));
        let model = fit(
            &set.x,
            &set.y,
            &[false; 2],
            Matern::FiveHalves,
            GpOptions::OPTUNA_MINIMUM_NOISE,
            false,
            None,
        );
        let constraints = gp.constraint_models(&set);
        assert_eq!(constraints.len(), 2);
        // Exploiting (`exploit_from`), the improvement term is the process's mean.
        for (best, exploit) in [(Some(0.5), false), (None, false), (Some(0.5), true)] {
            let mut acquisition = Acquisition::new(&model, best, &constraints);
            acquisition.exploit = exploit;
            let at = [0.42, 0.33];
            let (value, gradient) = acquisition.value_and_gradient(&at);
            assert!((value - acquisition.value(&at)).abs() < 1e-12);
            // The preliminary samples' values, worked in blocks, are each point's to the bit.
            let points: Vec<Vec<f64>> = (0..11)
                .map(|i| vec![(i as f64 * 0.29).fract(), (i as f64 * 0.83).fract()])
                .collect();
            for (point, batched) in points.iter().zip(acquisition.values(&points)) {
                assert_eq!(batched.to_bits(), acquisition.value(point).to_bits());
            }
            for d in 0..2 {
                let h = 1e-6;
                let (mut up, mut down) = (at, at);
                up[d] += h;
                down[d] -= h;
                let numeric = (acquisition.value(&up) - acquisition.value(&down)) / (2.0 * h);
                assert!(
                    (numeric - gradient[d]).abs() < 1e-4 * numeric.abs().max(1.0),
                    "best {best:?}, exploit {exploit}, d {d}: {numeric} vs {}",
                    gradient[d]
                );
            }
        }
        let mut mean_only = Acquisition::new(&model, Some(0.5), &[]);
        mean_only.exploit = true;
        for at in [[0.42, 0.33], [0.1, 0.9]] {
            assert_eq!(mean_only.value(&at), model.posterior(&at).0);
            assert_eq!(mean_only.values(&[at.to_vec()])[0], model.posterior(&at).0);
        }
    }

    #[test]
    fn exploiting_under_an_active_constraint_it_goes_to_the_predicted_bound() {
        // Minimise x over [0, 1] where x >= 0.3 (0.3 - x <= 0): the minimum is on the bound.
        // The mean alone is best at 0, and with the full log probability of feasibility the
        // point stays inside (0.30084); the mean among the points predicted feasible is best
        // on the predicted bound (0.29998).
        let space = Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
        let options = GpOptions {
            exploit_from: Some(10),
            ..Default::default()
        };
        let mut gp = GpSearch::new(space, 0, options).unwrap();
        let mut history = History::new(Mode::Min);
        for id in 0..10u64 {
            let x = 0.05 + 0.1 * id as f64;
            let mut p = Params::default();
            p.insert("x", crate::Value::Float(x));
            history.record(id, p, Status::Running);
            history.report(id, 1, x);
            history.report_constraints(id, &[0.3 - x]);
            history.set_status(id, Status::Completed);
        }
        let x = gp.suggest(10, &history).unwrap().f64("x").unwrap();
        assert!((x - 0.3).abs() < 3e-4, "{x}");
    }

    #[test]
    fn the_acquisition_search_reaches_what_optunas_reaches() {
        // testdata/optuna_acquisition.py: 30 Hartmann6 points each, and the log EI Optuna
        // 5.0.0's optimize_acqf_mixed ends at (the same from 5 random streams).
        let cases: Vec<serde_json::Value> =
            serde_json::from_str(include_str!("testdata/optuna_acquisition.json")).unwrap();
        let mut builder = Space::builder();
        for i in 0..6 {
            builder = builder.uniform(format!("x{i}"), 0.0, 1.0);
        }
        let space = builder.build().unwrap();
        for (i, case) in cases.iter().enumerate() {
            let x: Vec<Vec<f64>> = serde_json::from_value(case["x"].clone()).unwrap();
            let f: Vec<f64> = serde_json::from_value(case["f"].clone()).unwrap();
            let mut history = History::new(Mode::Min);
            for (id, (point, value)) in x.iter().zip(&f).enumerate() {
                let mut params = Params::default();
                for (d, v) in point.iter().enumerate() {
                    params.insert(format!("x{d}"), crate::Value::Float(*v));
                }
                complete(&mut history, id as u64, params, *value);
            }
            let gp = GpSearch::new(space.clone(), 0, GpOptions::optuna()).unwrap();
            let set = gp.training_set(&history);
            let model = fit(
                &set.x,
                &set.y,
                &[false; 6],
                Matern::FiveHalves,
                GpOptions::OPTUNA_MINIMUM_NOISE,
                false,
                None,
            );
            let best = set.y.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let acquisition = Acquisition::new(&model, Some(best), &[]);
            let expected = case["log_ei"].as_f64().unwrap();
            for stream in 0..3 {
                let mut gp = GpSearch::new(space.clone(), stream, GpOptions::optuna()).unwrap();
                let p = gp.suggest(30, &history).unwrap();
                let point = gp.unit.to_point(&p).unwrap();
                let reached = acquisition.value(&point);
                // The fits differ in their last digits, and so do the log EIs.
                assert!(
                    (reached - expected).abs() < 2e-3,
                    "case {i}, stream {stream}: {reached} vs Optuna's {expected}"
                );
            }
        }
    }

    /// Runs `trials` suggestions on Branin and asks a fresh searcher (a resumed sweep) each
    /// one from `fresh_from` on: it must answer what the running searcher answered.
    fn fresh_searchers_suggest_the_same(seed: u64, trials: u64, fresh_from: u64) {
        let options = GpOptions {
            n_startup_trials: 4,
            n_preliminary_samples: 64,
            n_local_search: 2,
            ..Default::default()
        };
        let mut history = History::new(Mode::Min);
        let mut first = GpSearch::new(space(), seed, options.clone()).unwrap();
        for id in 0..trials {
            let p = first.suggest(id, &history).unwrap();
            if id >= fresh_from {
                let mut fresh = GpSearch::new(space(), seed, options.clone()).unwrap();
                assert_eq!(fresh.suggest(id, &history), Some(p.clone()), "trial {id}");
            }
            let at = |k: &str| p.get(k).and_then(|v| v.as_f64()).unwrap();
            let value = branin(at("x"), at("y"));
            complete(&mut history, id, p, value);
        }
    }

    #[test]
    fn a_suggestion_is_a_function_of_seed_id_and_history() {
        fresh_searchers_suggest_the_same(7, 7, 6);
    }

    #[test]
    fn past_the_fits_at_every_size_a_fresh_searcher_still_suggests_the_same() {
        // From 21 completed trials the kernel is fitted on 20 and the process extended by the
        // newer trials (`GpRegressor::extended`); a fresh searcher factors them all at once.
        fresh_searchers_suggest_the_same(3, 26, 21);
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
            complete(&mut history, id, p, value);
        }
        let favourite = gp.suggest(6, &history).unwrap();
        history.record(6, favourite.clone(), Status::Running);
        let next = gp.suggest(7, &history).unwrap();
        assert_ne!(next, favourite);
    }

    #[test]
    fn a_completed_trial_is_not_suggested_again_while_the_space_has_others() {
        // Over 12 integers with the minimum at 3, the process is sure of the incumbent's value
        // but for its noise, and log EI peaks at it again once its neighbours are known; a
        // second evaluation there teaches nothing. Every suggestion is a new value until all
        // 12 are taken.
        let space = Space::builder().int("k", 0, 11).build().unwrap();
        let options = GpOptions {
            n_startup_trials: 2,
            n_preliminary_samples: 256,
            ..Default::default()
        };
        for seed in 0..3 {
            let mut gp = GpSearch::new(space.clone(), seed, options.clone()).unwrap();
            let mut history = History::new(Mode::Min);
            let mut seen = Vec::new();
            for id in 0..12 {
                let p = gp.suggest(id, &history).unwrap();
                let k = p.get("k").and_then(|v| v.as_i64()).unwrap();
                assert!(!seen.contains(&k), "seed {seed}: {k} again after {seen:?}");
                seen.push(k);
                complete(&mut history, id, p, ((k - 3) * (k - 3)) as f64);
            }
        }
    }

    #[test]
    fn golden_section_finds_the_peak_of_a_unimodal_row_in_few_evaluations() {
        for (n, peak, current) in [(1000, 737, 10), (1000, 0, 500), (17, 16, 3), (40, 20, 20)] {
            let mut calls = 0;
            let f = |k: usize| {
                calls += 1;
                -((k as f64 - peak as f64).abs())
            };
            let value = -((current as f64 - peak as f64).abs());
            assert_eq!(golden_section(f, n, current, value), peak, "n {n}");
            // log(1000) / log(golden ratio) is 14.4: a few more for the rounding to indices.
            assert!(calls <= 20, "{calls} evaluations for n {n}");
        }
    }

    #[test]
    fn nearest_picks_the_closer_value_and_the_higher_one_on_a_tie() {
        let grid = [0.25, 0.5, 0.75];
        assert_eq!(nearest(&grid, -1.0), 0);
        assert_eq!(nearest(&grid, 0.37), 0);
        assert_eq!(nearest(&grid, 0.375), 1);
        assert_eq!(nearest(&grid, 0.5), 1);
        assert_eq!(nearest(&grid, 0.9), 2);
    }

    #[test]
    fn suggestions_of_a_mixed_space_keep_to_its_values_and_find_its_minimum() {
        // MixedOptNet's shape: a choice, a log float and two ints (one log, wide enough for
        // the golden-section search), minimum 0 at adam, 1e-3, 4 layers, 256 units.
        let space = Space::builder()
            .choice("opt", ["sgd", "adam", "rmsprop"])
            .loguniform("lr", 1e-5, 1.0)
            .int("layers", 1, 8)
            .int("units", 16, 1024)
            .log()
            .build()
            .unwrap();
        let f = |p: &Params| {
            let off = match p.get("opt").and_then(|v| v.as_str()) {
                Some("adam") => 0.0,
                _ => 0.3,
            };
            let lr = p.f64("lr").unwrap().log10() + 3.0;
            let layers = p.get("layers").and_then(|v| v.as_i64()).unwrap() as f64 - 4.0;
            let units = (p.get("units").and_then(|v| v.as_i64()).unwrap() as f64).log2() - 8.0;
            off + lr * lr + 0.05 * layers * layers + 0.1 * units * units
        };
        let mut gp = GpSearch::new(space.clone(), 1, GpOptions::default()).unwrap();
        let mut history = History::new(Mode::Min);
        for id in 0..40 {
            let p = gp.suggest(id, &history).unwrap();
            for param in space.params() {
                assert!(param.domain.contains(p.get(&param.name).unwrap()), "{p:?}");
            }
            let value = f(&p);
            complete(&mut history, id, p, value);
        }
        let best = history.best().unwrap();
        assert_eq!(
            best.params.get("opt").and_then(|v| v.as_str()),
            Some("adam")
        );
        assert!(best.value.unwrap() < 0.1, "{:?}", best);
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
