//! Tree-structured Parzen Estimator (Bergstra et al. 2011), as Optuna 5 runs it.
//!
//! The policy lives here: which trials are "good" (the best `gamma(n)`), how they are
//! weighted, how the space is cut into groups, how candidates are chosen. The mixture itself is
//! in `estimator.rs`, the numerics in `numerics.rs`, the coordinate transforms in `coords.rs`.

pub(crate) mod coords;
pub(crate) mod estimator;
mod eval;
mod index;
mod multi;
mod numerics;

use std::cmp::Ordering;

use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::{trial_rng, Condition, FieldError, History, Params, Searcher, Space, Status, TrialId};
use coords::{dim_spec, from_internal, to_internal, TrialCoords};
use estimator::{DimSpec, EstimatorOptions, NormMemo, Parzen};
use eval::Table;
use index::TrialIndex;

/// TPE settings; the defaults are Optuna 5's (multivariate, with a constant liar on top)
/// except two, each measured on `benches/search_quality`:
///
/// - `gamma_fraction` 0.15 instead of 0.1: a larger good set lowered the median regret on all
///   six functions of `benches/peers` and on five held-out ones;
/// - narrower kernel floors in multivariate mode ([`TpeOptions::kernel_floors`]).
///
/// [`TpeOptions::optuna`] gives Optuna 5's settings exactly.
///
/// ```
/// let o = tune_search::TpeOptions::default();
/// assert_eq!((o.n_startup_trials, o.n_ei_candidates), (10, 24));
/// assert_eq!(o.gamma(100), 15);
/// assert_eq!(o.gamma(1000), 25);
/// assert_eq!(tune_search::TpeOptions::optuna().gamma(100), 10);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TpeOptions {
    /// Random trials before the model is used: until this many trials have ended with a value
    /// (see [`TpeOptions::startup_counts_unmodelled`]).
    pub n_startup_trials: usize,
    /// Candidates drawn from the good-trial density; the best ratio l/g wins.
    pub n_ei_candidates: usize,
    /// The good set is the best `min(ceil(gamma_fraction * n), gamma_max)` trials.
    pub gamma_fraction: f64,
    pub gamma_max: usize,
    /// With several objectives the good set is `ceil(multi_objective_gamma_fraction * n)`
    /// trials, uncapped (Optuna 5's MOTPE: 0.1). Kept apart from `gamma_fraction`, whose 0.15
    /// suits one objective and gave a lower hypervolume with several
    /// (docs/benchmarks/multi-objective.md).
    pub multi_objective_gamma_fraction: f64,
    /// With several objectives, each good trial weighs its share of the good set's
    /// hypervolume (MOTPE's weights, Ozaki et al. 2022, as Optuna 3 and 4 had them); `false`
    /// weighs them all the same, as Optuna 5 does. The shares gave the higher hypervolume
    /// (docs/benchmarks/multi-objective.md).
    pub hypervolume_weights: bool,
    /// Trials beyond the newest `linear_forgetting` get weights ramping down with age.
    pub linear_forgetting: usize,
    pub prior_weight: f64,
    pub consider_magic_clip: bool,
    pub consider_endpoints: bool,
    /// One joint density over the parameters of a group (Optuna 5's default); otherwise one
    /// density per parameter.
    pub multivariate: bool,
    /// Conditional parameters are modelled in groups that are active together.
    pub group: bool,
    /// Running, pending and paused trials count as bad, so parallel workers do not all
    /// propose the same point. `None`: not set, which is on, except under
    /// [`Fidelity::Rung`] ([`TpeOptions::constant_liar`]).
    pub constant_liar: Option<bool>,
    /// Stopped trials that did not reach this fraction of the deepest step any finished trial
    /// reached are left out of the model. 0 (the default) keeps them all, as Optuna does;
    /// [`TpeOptions::RUNG_STOPPED_MIN_DEPTH`] suits schedulers that cut most trials at their
    /// first rungs (ASHA, HyperBand), and `tune` uses it with them unless told otherwise.
    /// `None`: not set, which is 0 ([`TpeOptions::stopped_min_depth`]).
    pub stopped_min_depth: Option<f64>,
    /// `n_startup_trials` counts every trial that ended with a value, completed or stopped,
    /// whether the model reads it or not, as Optuna does. `false` counts only the modelled
    /// ones (the builds before store format 5): under ASHA and HyperBand, where
    /// `stopped_min_depth` and `fidelity = "rung"` leave most of the history out, that keeps
    /// TPE sampling at random for a long time (docs/benchmarks/early-stopping.md).
    pub startup_counts_unmodelled: bool,
    /// Which results of trials cut short by a scheduler the model reads. `None`: not set,
    /// which is [`Fidelity::Last`] ([`TpeOptions::fidelity`]).
    pub fidelity: Option<Fidelity>,
    /// The magic clip's floor on a kernel's width, as a fraction of the dimension's range:
    /// `max(min_bandwidth_factor, (kernels + 1)^-magic_clip_exponent)`. `None` takes the
    /// mode's default ([`TpeOptions::kernel_floors`]).
    pub min_bandwidth_factor: Option<f64>,
    /// The exponent in that floor. `None` takes the mode's default.
    pub magic_clip_exponent: Option<f64>,
    /// On int and stepped (`quniform`) dimensions, kernels are at least this many steps wide,
    /// so that the neighbouring values keep a real chance. `None` takes the mode's default.
    pub discrete_min_bandwidth: Option<f64>,
}

/// Which results a TPE model reads when a scheduler (ASHA, HyperBand, median stopping) ends
/// or pauses trials at different steps.
///
/// ```
/// let o: tune_search::TpeOptions = serde_json::from_str(r#"{"fidelity": "rung"}"#).unwrap();
/// assert_eq!(o.fidelity(), tune_search::Fidelity::Rung);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fidelity {
    /// Every trial at its last report, the deepest first, then by value (Optuna's TPE under a
    /// pruner); see also [`TpeOptions::stopped_min_depth`].
    Last,
    /// BOHB's (Falkner et al. 2018): only the values reported at one step, the highest that
    /// at least `dimensions + 2` trials reached (running and paused ones included), so that
    /// every modelled trial is compared at the same budget. Below that at every step, as
    /// [`Fidelity::Last`].
    Rung,
}

/// Optuna's magic clip, as `TpeOptions::kernel_floors` returns it: the floor is
/// `max(0.01, 1 / (kernels + 1))` of the range, and none by steps.
const OPTUNA_FLOORS: (f64, f64, f64) = (0.01, 1.0, 0.0);

impl Default for TpeOptions {
    fn default() -> Self {
        TpeOptions {
            n_startup_trials: 10,
            n_ei_candidates: 24,
            gamma_fraction: 0.15,
            gamma_max: 25,
            multi_objective_gamma_fraction: 0.1,
            hypervolume_weights: true,
            linear_forgetting: 25,
            prior_weight: 1.0,
            consider_magic_clip: true,
            consider_endpoints: false,
            multivariate: true,
            group: true,
            constant_liar: None,
            startup_counts_unmodelled: true,
            stopped_min_depth: None,
            fidelity: None,
            min_bandwidth_factor: None,
            magic_clip_exponent: None,
            discrete_min_bandwidth: None,
        }
    }
}

impl TpeOptions {
    /// `stopped_min_depth` under ASHA and HyperBand: trials cut before a tenth of the deepest
    /// step are left out. They are most of the history there (two thirds stop at the first
    /// rung), their early values say little about where they would have ended, and counting
    /// them as bad steers TPE away from slow starters, which the rungs then never see. On
    /// `benches/early_stopping` (50 seeds, 2,430 epochs) this took TPE + ASHA from 0.035 to
    /// 0.012 median regret and TPE + HyperBand from 0.034 to 0.008, and it won on three
    /// held-out curve families too; with median stopping it did not help, so 0 stays the default.
    ///
    /// ```
    /// let o = tune_search::TpeOptions { stopped_min_depth: Some(tune_search::TpeOptions::RUNG_STOPPED_MIN_DEPTH), ..Default::default() };
    /// assert_eq!(o.stopped_min_depth(), 0.1);
    /// ```
    pub const RUNG_STOPPED_MIN_DEPTH: f64 = 0.1;

    /// The [`Fidelity`] in effect: as set, else [`Fidelity::Last`].
    pub fn fidelity(&self) -> Fidelity {
        self.fidelity.unwrap_or(Fidelity::Last)
    }

    /// Whether the constant liar is in effect: as set, else on, except under
    /// [`Fidelity::Rung`], which models none of the trials still running to its rung, as BOHB
    /// (Falkner et al. 2018) does. There the liar marked bad the trials that had passed the
    /// lower rungs, the promising ones: on LCBench's development tasks with 8 simulated
    /// workers (`benches/early_stopping`, 30 seeds, 520 / 1,040 / 2,080 epochs) leaving it
    /// off took TPE + HyperBand from - / 0.198 / 0.109 to - / 0.185 / 0.091 and TPE (rung
    /// model) + ASHA, grace period 3, from 0.327 / 0.170 / 0.099 to 0.315 / 0.148 / 0.090;
    /// with one worker it made no difference.
    ///
    /// ```
    /// use tune_search::{Fidelity, TpeOptions};
    /// assert!(TpeOptions::default().constant_liar());
    /// assert!(!TpeOptions::default().under_hyperband().constant_liar());
    /// let set = TpeOptions { constant_liar: Some(true), ..Default::default() };
    /// assert!(set.under_hyperband().constant_liar());
    /// ```
    pub fn constant_liar(&self) -> bool {
        self.constant_liar
            .unwrap_or(self.fidelity() != Fidelity::Rung)
    }

    /// The `stopped_min_depth` in effect: as set, else 0 (every stopped trial is modelled).
    pub fn stopped_min_depth(&self) -> f64 {
        self.stopped_min_depth.unwrap_or(0.0)
    }

    /// Checks every option's range.
    ///
    /// ```
    /// let bad = tune_search::TpeOptions { gamma_fraction: 1.5, ..Default::default() };
    /// let e = bad.validate().unwrap_err();
    /// assert_eq!(e.key, "gamma_fraction");
    /// assert_eq!(e.message, "expected a number in (0, 1], found 1.5");
    /// ```
    pub fn validate(&self) -> Result<(), FieldError> {
        for (key, fraction) in [
            ("gamma_fraction", self.gamma_fraction),
            (
                "multi_objective_gamma_fraction",
                self.multi_objective_gamma_fraction,
            ),
        ] {
            if !(fraction > 0.0 && fraction <= 1.0) {
                return Err(FieldError::new(
                    key,
                    format!("expected a number in (0, 1], found {fraction}"),
                ));
            }
        }
        FieldError::check_at_least("gamma_max", self.gamma_max as u64, 1)?;
        FieldError::check_at_least("n_ei_candidates", self.n_ei_candidates as u64, 1)?;
        if !(self.prior_weight > 0.0 && self.prior_weight.is_finite()) {
            return Err(FieldError::new(
                "prior_weight",
                format!("expected a positive number, found {}", self.prior_weight),
            ));
        }
        let (min_bandwidth_factor, magic_clip_exponent, discrete_min_bandwidth) =
            self.kernel_floors();
        FieldError::check_within("stopped_min_depth", self.stopped_min_depth(), 0.0, 1.0)?;
        FieldError::check_within("min_bandwidth_factor", min_bandwidth_factor, 0.0, 1.0)?;
        for (key, value) in [
            ("magic_clip_exponent", magic_clip_exponent),
            ("discrete_min_bandwidth", discrete_min_bandwidth),
        ] {
            if !(value >= 0.0 && value.is_finite()) {
                return Err(FieldError::new(
                    key,
                    format!("expected a number >= 0, found {value}"),
                ));
            }
        }
        Ok(())
    }

    /// The kernel width floors in effect: `(min_bandwidth_factor, magic_clip_exponent,
    /// discrete_min_bandwidth)`, each as set or else the mode's default.
    ///
    /// Multivariate (the default mode): `(0.03, 1.5, 1.0)`, after Watanabe 2023 ("Tree-structured
    /// Parzen estimator: understanding its algorithm components"), which found Optuna's floor,
    /// `max(0.01, 1 / (kernels + 1))`, too wide for the few good observations TPE has early
    /// on, and recommended a 0.03 floor and one step on discrete dimensions. The good set holds
    /// 2 to 25 trials, so Optuna's floor is 4 % to 33 % of the range; ours reaches 3 % by 8.
    /// On `benches/search_quality` (200 seeds, against Optuna's floors) the median regret fell
    /// on 10 of the 11 development functions (Rastrigin: 1.03x) and on 10 of the 11 of a
    /// validation set written after the choice was made (Shekel: level). The cost: where two
    /// choices of a categorical are nearly tied, more runs settle on the slightly worse one
    /// (ChoiceNet: 32 % of runs against 20 %); the median still fell there.
    ///
    /// Independent: Optuna's `(0.01, 1.0, 0)`. Narrow floors made independent TPE worse on 7
    /// of 11 (each dimension then converges on its own, too early), and so did the step floor.
    ///
    /// ```
    /// let o = tune_search::TpeOptions::default();
    /// assert_eq!(o.kernel_floors(), (0.03, 1.5, 1.0));
    /// let independent = tune_search::TpeOptions { multivariate: false, ..o };
    /// assert_eq!(independent.kernel_floors(), (0.01, 1.0, 0.0));
    /// let set = tune_search::TpeOptions { magic_clip_exponent: Some(2.0), ..Default::default() };
    /// assert_eq!(set.kernel_floors(), (0.03, 2.0, 1.0));
    /// ```
    pub fn kernel_floors(&self) -> (f64, f64, f64) {
        let (factor, exponent, steps) = if self.multivariate {
            (0.03, 1.5, 1.0)
        } else {
            OPTUNA_FLOORS
        };
        (
            self.min_bandwidth_factor.unwrap_or(factor),
            self.magic_clip_exponent.unwrap_or(exponent),
            self.discrete_min_bandwidth.unwrap_or(steps),
        )
    }

    /// The options for a sweep with an early-stopping scheduler: kernel floors left unset
    /// become Optuna's. The narrow multivariate floors were chosen and validated where every
    /// trial runs to the end; under a scheduler TPE learns mostly from values cut short, and
    /// there they did not pay on `benches/early_stopping` (50 seeds, 2,430 epochs): worse under
    /// HyperBand on `curves.py` and two of three held-out families (0.0079 -> 0.0120 on
    /// `curves.py`), mixed under ASHA and median stopping.
    ///
    /// ```
    /// let o = tune_search::TpeOptions::default().under_scheduler();
    /// assert_eq!(o.kernel_floors(), (0.01, 1.0, 0.0));
    /// let set = tune_search::TpeOptions { min_bandwidth_factor: Some(0.05), ..Default::default() };
    /// assert_eq!(set.under_scheduler().kernel_floors(), (0.05, 1.0, 0.0));
    /// ```
    pub fn under_scheduler(self) -> TpeOptions {
        let optuna = TpeOptions::optuna();
        TpeOptions {
            min_bandwidth_factor: self.min_bandwidth_factor.or(optuna.min_bandwidth_factor),
            magic_clip_exponent: self.magic_clip_exponent.or(optuna.magic_clip_exponent),
            discrete_min_bandwidth: self
                .discrete_min_bandwidth
                .or(optuna.discrete_min_bandwidth),
            ..self
        }
    }

    /// The options for a sweep with a rung scheduler (ASHA, HyperBand):
    /// [`TpeOptions::under_scheduler`], and `stopped_min_depth`, unless set,
    /// [`TpeOptions::RUNG_STOPPED_MIN_DEPTH`].
    ///
    /// ```
    /// let o = tune_search::TpeOptions::default().under_rungs();
    /// assert_eq!((o.stopped_min_depth(), o.kernel_floors()), (0.1, (0.01, 1.0, 0.0)));
    /// let set = tune_search::TpeOptions { stopped_min_depth: Some(0.0), ..Default::default() };
    /// assert_eq!(set.under_rungs().stopped_min_depth(), 0.0);
    /// ```
    pub fn under_rungs(self) -> TpeOptions {
        let mut o = self.under_scheduler();
        o.stopped_min_depth
            .get_or_insert(TpeOptions::RUNG_STOPPED_MIN_DEPTH);
        o
    }

    /// The options under synchronous HyperBand: [`TpeOptions::under_rungs`], and `fidelity`,
    /// unless set, [`Fidelity::Rung`]: HyperBand's brackets plus this model are BOHB
    /// (Falkner et al. 2018). On LCBench's six development tasks (`benches/early_stopping`,
    /// 10 seeds, one worker) it took TPE + HyperBand from 0.244 / 0.183 / 0.143 mean
    /// normalised regret at 520 / 1,040 / 2,080 epochs to 0.181 / 0.132 / 0.074. Under ASHA
    /// (grace period 1) it did worse there and on `curves.py`, so ASHA keeps
    /// [`Fidelity::Last`].
    ///
    /// ```
    /// use tune_search::{Fidelity, TpeOptions};
    /// assert_eq!(TpeOptions::default().under_hyperband().fidelity(), Fidelity::Rung);
    /// assert_eq!(TpeOptions::default().under_rungs().fidelity(), Fidelity::Last);
    /// ```
    pub fn under_hyperband(self) -> TpeOptions {
        let mut o = self.under_rungs();
        o.fidelity.get_or_insert(Fidelity::Rung);
        o
    }

    /// Optuna 5's `TPESampler` settings: `gamma_fraction` 0.1, its kernel floors in every
    /// mode and, with several objectives, equal weights for the good trials (everything else
    /// is already the same, except that Optuna 5 samples several objectives' parameters
    /// independently: add `multivariate: false` for that).
    ///
    /// ```
    /// let o = tune_search::TpeOptions::optuna();
    /// assert_eq!((o.gamma(100), o.kernel_floors()), (10, (0.01, 1.0, 0.0)));
    /// ```
    pub fn optuna() -> TpeOptions {
        let (factor, exponent, steps) = OPTUNA_FLOORS;
        TpeOptions {
            gamma_fraction: 0.1,
            hypervolume_weights: false,
            min_bandwidth_factor: Some(factor),
            magic_clip_exponent: Some(exponent),
            discrete_min_bandwidth: Some(steps),
            ..TpeOptions::default()
        }
    }

    /// gamma(n) = min(ceil(fraction * n), max).
    pub fn gamma(&self, n: usize) -> usize {
        ((self.gamma_fraction * n as f64).ceil() as usize).min(self.gamma_max)
    }

    /// Optuna's weights for `n` trials in id order: 1 for the newest `linear_forgetting`, a
    /// linear ramp from 1/n up to 1 for the older ones.
    pub fn weights(&self, n: usize) -> Vec<f64> {
        let mut w = Vec::new();
        self.weights_into(n, &mut w);
        w
    }

    /// [`TpeOptions::weights`] into a reused buffer.
    fn weights_into(&self, n: usize, w: &mut Vec<f64>) {
        w.clear();
        let flat = self.linear_forgetting;
        if n < flat {
            w.resize(n, 1.0);
            return;
        }
        let ramp = n - flat;
        w.extend((0..ramp).map(|i| {
            if ramp == 1 {
                1.0 / n as f64
            } else {
                1.0 / n as f64 + (1.0 - 1.0 / n as f64) * i as f64 / (ramp - 1) as f64
            }
        }));
        w.extend(std::iter::repeat_n(1.0, flat));
    }
}

/// A suggestion's buffers, reused: late in a sweep they are megabytes, and allocating them
/// afresh each time cost more in page faults than the arithmetic done in them.
#[derive(Debug, Clone, Default)]
struct Workspace {
    /// Per trial id: among the best `gamma(n)`?
    good: Vec<bool>,
    /// Per trial id: kernel index on the bad side in the current group (u32::MAX: none).
    kernel_of: Vec<u32>,
    below_ids: Vec<TrialId>,
    above_ids: Vec<TrialId>,
    /// Per group dimension: the bad observations' internal coordinates.
    above_cols: Vec<Vec<f64>>,
    /// Per group dimension: bad kernel indices in the order of their values.
    orders: Vec<Vec<usize>>,
    weights: Vec<f64>,
    kernel_bufs: (Vec<f64>, Vec<f64>),
    /// The bad side's scoring table.
    bad: Table,
    /// Per-component terms of a density evaluation.
    terms: Vec<f32>,
    /// How the good trials weigh; per trial id where it is [`GoodWeights::PerTrial`].
    good_weights: GoodWeights,
}

/// How the good side's kernels weigh.
#[derive(Debug, Clone, Default)]
enum GoodWeights {
    /// One objective: Optuna's linear forgetting ([`TpeOptions::weights`]).
    #[default]
    ByAge,
    /// Several objectives, Optuna 5's MOTPE: all the same.
    Equal,
    /// Several objectives, [`TpeOptions::hypervolume_weights`]: per trial id.
    PerTrial(Vec<f64>),
}

/// Parameters sampled together: same activation condition.
#[derive(Debug, Clone)]
struct Group {
    /// Indices into the space's parameters.
    params: Vec<usize>,
    specs: Vec<DimSpec>,
    when: Vec<Condition>,
    /// Whether other parameters with the same `when` may join.
    shared: bool,
}

/// The TPE searcher.
///
/// ```
/// use tune_search::{History, Mode, Params, Searcher, Space, Status, Tpe, TpeOptions, Value};
/// let space = Space::builder().uniform("x", -5.0, 5.0).build().unwrap();
/// let mut tpe = Tpe::new(space, 0, TpeOptions::default());
/// let mut h = History::new(Mode::Min);
/// for id in 0..30 {
///     let p = tpe.suggest(id, &h).unwrap();
///     let x = p.f64("x").unwrap();
///     h.record(id, p, Status::Running);
///     h.report(id, 1, (x - 1.0) * (x - 1.0));
///     h.set_status(id, Status::Completed);
/// }
/// let best = h.best().unwrap().params.f64("x").unwrap();
/// assert!((best - 1.0).abs() < 0.5);
/// ```
#[derive(Debug, Clone)]
pub struct Tpe {
    space: Space,
    seed: u64,
    opts: TpeOptions,
    groups: Vec<Group>,
    /// Internal coordinates of each trial's params (NaN where inactive), by trial id.
    coords: TrialCoords,
    /// Normalisers of the bad-trial kernels (the many), reused between suggestions.
    norms: NormMemo,
    /// Rankings and per-parameter orders, kept current between suggestions.
    index: TrialIndex,
    /// Buffers of a suggestion, kept for the next one.
    work: Workspace,
}

impl Tpe {
    pub fn new(space: Space, seed: u64, opts: TpeOptions) -> Tpe {
        let groups = make_groups(&space, &opts);
        Tpe {
            norms: NormMemo::new(space.len()),
            coords: TrialCoords::new(space.len()),
            space,
            seed,
            opts,
            groups,
            index: TrialIndex::default(),
            work: Workspace::default(),
        }
    }

    /// Records the internal coordinates of trial `id` (once: a trial's params never change).
    fn record_coords(&mut self, id: TrialId, params: &Params) {
        let space = &self.space;
        self.coords.ensure(id, |row| {
            for (x, p) in row.iter_mut().zip(space.params()) {
                *x = params
                    .get(&p.name)
                    .and_then(|v| to_internal(&p.domain, v))
                    .unwrap_or(f64::NAN);
            }
        });
    }
}

fn make_groups(space: &Space, opts: &TpeOptions) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for (i, p) in space.params().iter().enumerate() {
        // Multivariate: unconditional parameters share one group; with `group`, so do
        // parameters with the same `when`. Everything else is modelled on its own.
        let shared = opts.multivariate && (opts.group || p.when.is_empty());
        match groups
            .iter_mut()
            .find(|g| shared && g.shared && g.when == p.when)
        {
            Some(g) => {
                g.params.push(i);
                g.specs.push(dim_spec(&p.domain));
            }
            None => groups.push(Group {
                params: vec![i],
                specs: vec![dim_spec(&p.domain)],
                when: p.when.clone(),
                shared,
            }),
        }
    }
    // Parents before children: a group is sampled once its conditions can be checked.
    let position = |g: &Group| {
        g.when
            .iter()
            .filter_map(|c| space.params().iter().position(|p| p.name == c.param))
            .max()
            .map_or(0, |i| i + 1)
    };
    groups.sort_by_key(|g| position(g));
    groups
}

/// The highest step at which a trial stopped, completed or paused and at least `n_min`
/// trials (not failed) reported: the budget a [`Fidelity::Rung`] model is fitted at.
fn rung_step(history: &History, n_min: usize) -> Option<u64> {
    let mut steps: Vec<u64> = history
        .iter()
        .filter(|t| {
            matches!(
                t.status,
                Status::Completed | Status::Stopped | Status::Paused
            )
        })
        .filter_map(|t| t.last_step)
        .collect();
    steps.sort_unstable();
    steps.dedup();
    steps.into_iter().rev().find(|&s| {
        history
            .iter()
            .filter(|t| t.status != Status::Failed && t.value_at(s).is_some())
            .count()
            >= n_min
    })
}

impl Searcher for Tpe {
    fn suggest(&mut self, id: TrialId, history: &History) -> Option<Params> {
        let mut rng = trial_rng(self.seed, id);
        for t in history.iter() {
            self.record_coords(t.id, &t.params);
        }
        let at_step = match self.opts.fidelity() {
            Fidelity::Rung => rung_step(history, self.space.len() + 2),
            Fidelity::Last => None,
        };
        self.index.sync(
            history,
            &self.coords,
            self.space.len(),
            self.opts.constant_liar(),
            self.opts.stopped_min_depth(),
            at_step,
        );
        let finished = self.index.finished();
        let ended = if self.opts.startup_counts_unmodelled {
            self.index.ended()
        } else {
            finished
        };
        if ended < self.opts.n_startup_trials {
            return Some(self.space.sample(&mut rng));
        }
        // Like Optuna, gamma counts finished trials only; liars only join the bad side.
        if history.objectives().len() > 1 {
            multi::below_into(
                history,
                self.opts.multi_objective_gamma_fraction,
                &mut self.work.good,
            );
        } else {
            self.index
                .below_into(self.opts.gamma(finished), &mut self.work.good);
        }
        self.work.good_weights = if history.objectives().len() == 1 {
            GoodWeights::ByAge
        } else if self.opts.hypervolume_weights {
            let mut w = match std::mem::take(&mut self.work.good_weights) {
                GoodWeights::PerTrial(w) => w,
                _ => Vec::new(),
            };
            multi::hypervolume_weights_into(history, &self.work.good, &mut w);
            GoodWeights::PerTrial(w)
        } else {
            GoodWeights::Equal
        };
        let mut params = Params::default();
        self.work.kernel_of.clear();
        self.work.kernel_of.resize(self.index.len(), u32::MAX);
        for g in 0..self.groups.len() {
            let first = &self.space.params()[self.groups[g].params[0]];
            if !self.space.is_active(first, &params) {
                continue;
            }
            self.partition(g);
            let l = self.fit(g);
            let chosen = self.choose(g, &l, &mut rng)?;
            for (&p, &x) in self.groups[g].params.iter().zip(&chosen) {
                let param = &self.space.params()[p];
                params.insert(param.name.clone(), from_internal(&param.domain, x));
            }
        }
        Some(params)
    }
}

impl Tpe {
    /// The estimators' options: the kernel floors in force and the prior.
    fn estimator_options(&self) -> EstimatorOptions {
        let (min_bandwidth_factor, magic_clip_exponent, discrete_min_bandwidth) =
            self.opts.kernel_floors();
        EstimatorOptions {
            prior_weight: self.opts.prior_weight,
            magic_clip: self.opts.consider_magic_clip,
            consider_endpoints: self.opts.consider_endpoints,
            min_bandwidth_factor,
            magic_clip_exponent,
            discrete_min_bandwidth,
        }
    }

    /// Splits the modelled trials in which every parameter of group `g` was active into the
    /// good side (`work.below_ids`) and the bad one (`work.above_ids`), in id order; a bad
    /// trial's kernel index goes in `work.kernel_of`.
    fn partition(&mut self, g: usize) {
        let (group, work) = (&self.groups[g], &mut self.work);
        work.below_ids.clear();
        work.above_ids.clear();
        for i in 0..self.index.len().min(self.coords.len()) {
            let Some(c) = self.coords.get(i as TrialId) else {
                continue;
            };
            if !self.index.modelled(i as TrialId) || group.params.iter().any(|&p| c[p].is_nan()) {
                continue;
            }
            if work.good[i] {
                work.below_ids.push(i as TrialId);
            } else {
                work.kernel_of[i] = work.above_ids.len() as u32;
                work.above_ids.push(i as TrialId);
            }
        }
    }

    /// Fits group `g`'s densities on the sides [`Tpe::partition`] made: returns l (good) and
    /// leaves g (bad) as the scoring table `work.bad`.
    fn fit(&mut self, g: usize) -> Parzen {
        let est_opts = self.estimator_options();
        let (group, work, coords) = (&self.groups[g], &mut self.work, &self.coords);
        let column = |p: usize, ids: &[TrialId], out: &mut Vec<f64>| {
            out.clear();
            out.extend(
                ids.iter()
                    .map(|&i| coords.get(i).map_or(f64::NAN, |c| c[p])),
            );
        };
        let dims = group.params.len();
        work.above_cols.resize_with(dims, Vec::new);
        work.orders.resize_with(dims, Vec::new);
        for (d, &p) in group.params.iter().enumerate() {
            column(p, &work.above_ids, &mut work.above_cols[d]);
            // The bad kernels' order along this dimension, read off the index (no sorting).
            let kernel_of = &work.kernel_of;
            let order = &mut work.orders[d];
            order.clear();
            order.extend(self.index.sorted(p).filter_map(|i| {
                kernel_of
                    .get(i as usize)
                    .filter(|&&k| k != u32::MAX)
                    .map(|&k| k as usize)
            }));
        }
        for &i in &work.above_ids {
            work.kernel_of[i as usize] = u32::MAX;
        }
        let below_cols: Vec<Vec<f64>> = group
            .params
            .iter()
            .map(|&p| {
                let mut out = Vec::new();
                column(p, &work.below_ids, &mut out);
                out
            })
            .collect();
        let good_weights = match &work.good_weights {
            GoodWeights::ByAge => self.opts.weights(work.below_ids.len()),
            GoodWeights::Equal => vec![1.0; work.below_ids.len()],
            GoodWeights::PerTrial(w) => work.below_ids.iter().map(|&i| w[i as usize]).collect(),
        };
        let l = Parzen::new(&group.specs, &below_cols, &good_weights, est_opts);
        let memo = Some((
            &mut self.norms,
            work.above_ids.as_slice(),
            group.params.as_slice(),
        ));
        self.opts
            .weights_into(work.above_ids.len(), &mut work.weights);
        Parzen::scoring_table(
            &mut work.bad,
            &mut work.kernel_bufs,
            &group.specs,
            &work.above_cols[..dims],
            &work.weights,
            est_opts,
            memo,
            &work.orders[..dims],
        );
        l
    }

    /// Of `n_ei_candidates` drawn from `l`, the one with the highest l/g (the first of equals),
    /// in internal coordinates.
    fn choose(&mut self, g: usize, l: &Parzen, rng: &mut ChaCha8Rng) -> Option<Vec<f64>> {
        let group = &self.groups[g];
        let (bad, terms) = (&self.work.bad, &mut self.work.terms);
        let mut candidate = vec![0.0; group.params.len()];
        let mut best: Option<(f64, Vec<f64>)> = None;
        for _ in 0..self.opts.n_ei_candidates.max(1) {
            l.sample(rng, &mut candidate);
            // Score the value the candidate stands for (the centre of its bin).
            for (x, &p) in candidate.iter_mut().zip(&group.params) {
                let domain = &self.space.params()[p].domain;
                *x = to_internal(domain, &from_internal(domain, *x)).unwrap_or(*x);
            }
            let score = l.log_pdf(&candidate, terms) - bad.log_pdf(&candidate, terms);
            if best
                .as_ref()
                .is_none_or(|(b, _)| score.partial_cmp(b) == Some(Ordering::Greater))
            {
                best = Some((score, candidate.clone()));
            }
        }
        best.map(|(_, chosen)| chosen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Mode, Status};

    fn run(
        space: &Space,
        opts: TpeOptions,
        seed: u64,
        n: u64,
        f: impl Fn(&Params) -> f64,
    ) -> History {
        let mut tpe = Tpe::new(space.clone(), seed, opts);
        let mut h = History::new(Mode::Min);
        for id in 0..n {
            let p = tpe.suggest(id, &h).unwrap();
            let v = f(&p);
            h.record(id, p, Status::Running);
            h.report(id, 1, v);
            h.set_status(id, Status::Completed);
        }
        h
    }

    #[test]
    fn the_rung_is_the_highest_step_enough_trials_reached() {
        let mut h = History::new(crate::Mode::Min);
        // Ten trials to step 1, four of them to 3, two to 9 (one paused there).
        for id in 0..10u64 {
            h.record(id, Params::default(), Status::Running);
            let last = match id {
                0 => 9,
                1 => 9,
                2 | 3 => 3,
                _ => 1,
            };
            for step in 1..=last {
                h.report(id, step, 0.5);
            }
            h.set_status(
                id,
                if id == 1 {
                    Status::Paused
                } else {
                    Status::Stopped
                },
            );
        }
        assert_eq!(rung_step(&h, 2), Some(9));
        assert_eq!(rung_step(&h, 3), Some(3));
        assert_eq!(rung_step(&h, 5), Some(1));
        assert_eq!(rung_step(&h, 11), None);
        // A running trial's steps are not rungs, but it counts where it reported.
        h.record(10, Params::default(), Status::Running);
        h.report(10, 1, 0.5);
        h.report(10, 2, 0.5);
        assert_eq!(rung_step(&h, 11), Some(1));
        assert_eq!(rung_step(&h, 2), Some(9));
    }

    #[test]
    fn gamma_and_weights_tables() {
        let o = TpeOptions::default();
        let ns = [0, 1, 9, 10, 11, 100, 166, 167, 250, 10_000];
        let gammas: Vec<usize> = ns.iter().map(|&n| o.gamma(n)).collect();
        // ceil(0.15 n): 1.35 -> 2, 1.5 -> 2, 24.9 -> 25, 25.05 -> 26 capped at 25.
        assert_eq!(gammas, vec![0, 1, 2, 2, 2, 15, 25, 25, 25, 25]);
        // Optuna 5's gamma_fraction = 0.1.
        let optuna = TpeOptions {
            gamma_fraction: 0.1,
            ..TpeOptions::default()
        };
        let gammas: Vec<usize> = [0, 1, 9, 10, 11, 100, 249, 250, 251, 10_000]
            .iter()
            .map(|&n| optuna.gamma(n))
            .collect();
        assert_eq!(gammas, vec![0, 1, 1, 1, 2, 10, 25, 25, 25, 25]);
        assert_eq!(o.weights(3), vec![1.0; 3]);
        assert_eq!(o.weights(25), vec![1.0; 25]);
        // numpy.linspace(1/30, 1, 5) then 25 ones.
        let w = o.weights(30);
        let expect = [
            1.0 / 30.0,
            0.275,
            0.5166666666666667,
            0.7583333333333333,
            1.0,
        ];
        for (a, b) in w[..5].iter().zip(expect) {
            assert!((a - b).abs() < 1e-12, "{w:?}");
        }
        assert!(w[5..].iter().all(|&x| x == 1.0));
    }

    #[test]
    fn identical_seed_and_history_give_identical_suggestions() {
        let space = Space::builder()
            .uniform("x", 0.0, 1.0)
            .int("n", 1, 64)
            .log()
            .choice("c", ["a", "b"])
            .build()
            .unwrap();
        let f = |p: &Params| p.f64("x").unwrap() + p.i64("n").unwrap() as f64 / 64.0;
        let h = run(&space, TpeOptions::default(), 3, 25, f);
        let mut a = Tpe::new(space.clone(), 3, TpeOptions::default());
        let mut b = Tpe::new(space.clone(), 3, TpeOptions::default());
        // `b` has seen other histories first: caches must not change its answer.
        let _ = b.suggest(5, &History::new(Mode::Min));
        assert_eq!(a.suggest(25, &h), b.suggest(25, &h));
        assert_ne!(a.suggest(25, &h), a.suggest(26, &h));
        let mut c = Tpe::new(space, 4, TpeOptions::default());
        assert_ne!(a.suggest(25, &h), c.suggest(25, &h));
    }

    #[test]
    fn incremental_caches_agree_with_a_fresh_searcher() {
        let space = Space::builder()
            .uniform("x", 0.0, 1.0)
            .int("n", 1, 16)
            .choice("c", ["a", "b", "c"])
            .uniform("m", 0.0, 1.0)
            .when("c", "a")
            .build()
            .unwrap();
        // Also with the stopped trials left out of the model (their step 2 is below 0.6 x 4).
        let shallow_out = TpeOptions {
            stopped_min_depth: Some(0.6),
            ..TpeOptions::default()
        };
        for opts in [TpeOptions::default(), shallow_out] {
            let mut warm = Tpe::new(space.clone(), 5, opts.clone());
            let mut h = History::new(Mode::Min);
            for id in 0..80u64 {
                let p = warm.suggest(id, &h).unwrap();
                let fresh = Tpe::new(space.clone(), 5, opts.clone())
                    .suggest(id, &h)
                    .unwrap();
                assert_eq!(p, fresh, "trial {id}");
                let v = p.f64("x").unwrap() + p.i64("n").unwrap() as f64 / 16.0;
                h.record(id, p, Status::Running);
                // A mix of fates: most complete, some stop early, some fail, some stay running.
                match id % 7 {
                    3 => {
                        h.report(id, 2, v);
                        h.set_status(id, Status::Stopped);
                    }
                    5 => h.set_status(id, Status::Failed),
                    6 if id > 60 => {}
                    _ => {
                        h.report(id, 4, v);
                        h.set_status(id, Status::Completed);
                    }
                }
                // An earlier running trial finishes later.
                if id % 7 == 0 && id >= 63 {
                    h.report(id - 1, 4, 0.5);
                    h.set_status(id - 1, Status::Completed);
                }
            }
        }
    }

    #[test]
    fn startup_trials_are_random_draws() {
        let space = Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
        let mut tpe = Tpe::new(space.clone(), 9, TpeOptions::default());
        let mut random = crate::RandomSearch::new(space, 9);
        let h = History::new(Mode::Min);
        assert_eq!(tpe.suggest(0, &h), random.suggest(0, &h));
    }

    #[test]
    fn the_startup_counts_trials_the_model_leaves_out() {
        // As under ASHA: ten trials stopped at step 1, two completed at step 9. With a 0.5
        // `stopped_min_depth` only the two completed ones are modelled, but twelve have
        // ended, so the startup (ten) is over, as Optuna counts it.
        let space = Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
        let mut h = History::new(Mode::Min);
        for id in 0..12u64 {
            let x = id as f64 / 12.0;
            let mut p = Params::default();
            p.insert("x", x.into());
            h.record(id, p, Status::Running);
            let last = if id < 10 { 1 } else { 9 };
            h.report(id, last, x);
            h.set_status(
                id,
                if id < 10 {
                    Status::Stopped
                } else {
                    Status::Completed
                },
            );
        }
        let random = crate::RandomSearch::new(space.clone(), 9).suggest(12, &h);
        let opts = TpeOptions {
            stopped_min_depth: Some(0.5),
            ..TpeOptions::default()
        };
        let mut counted = Tpe::new(space.clone(), 9, opts.clone());
        assert_ne!(counted.suggest(12, &h), random);
        let modelled_only = TpeOptions {
            startup_counts_unmodelled: false,
            ..opts
        };
        let mut before = Tpe::new(space, 9, modelled_only);
        assert_eq!(before.suggest(12, &h), random);
    }

    #[test]
    fn conditional_parameters_only_when_active() {
        let space = Space::builder()
            .choice("opt", ["sgd", "adam"])
            .uniform("momentum", 0.0, 1.0)
            .when("opt", "sgd")
            .uniform("beta", 0.0, 1.0)
            .when("opt", "adam")
            .uniform("x", -1.0, 1.0)
            .build()
            .unwrap();
        for opts in [
            TpeOptions::default(),
            TpeOptions {
                group: false,
                ..TpeOptions::default()
            },
            TpeOptions {
                multivariate: false,
                ..TpeOptions::default()
            },
        ] {
            let h = run(&space, opts, 1, 60, |p| {
                let x = p.f64("x").unwrap();
                match p.str("opt").unwrap() {
                    "sgd" => x * x + (p.f64("momentum").unwrap() - 0.9).powi(2),
                    _ => 1.0 + x * x + p.f64("beta").unwrap(),
                }
            });
            for t in h.iter() {
                let sgd = t.params.str("opt").unwrap() == "sgd";
                assert_eq!(t.params.contains("momentum"), sgd);
                assert_eq!(t.params.contains("beta"), !sgd);
            }
            // The model learns that sgd is better.
            let late_sgd = h
                .iter()
                .skip(30)
                .filter(|t| t.params.str("opt").unwrap() == "sgd")
                .count();
            assert!(late_sgd > 20, "{late_sgd}");
        }
    }

    #[test]
    fn every_domain_stays_in_bounds_and_improves_on_random() {
        let space: Space = toml_space(
            r#"
            a = { uniform = [-5.0, 10.0] }
            b = { loguniform = [1e-5, 1e-1] }
            c = { int = [16, 1024], log = true }
            d = { int = [1, 8] }
            e = { quniform = [0.0, 1.0, 0.1] }
            f = { qloguniform = [1, 1000, 10] }
            g = { normal = [0.0, 2.0] }
            h = { choice = ["x", "y", "z"] }
            "#,
        );
        let f = |p: &Params| {
            (p.f64("a").unwrap() - 2.0).powi(2)
                + (p.f64("b").unwrap().log10() + 3.0).powi(2)
                + ((p.i64("c").unwrap() as f64).log2() - 8.0).powi(2)
                + (p.i64("d").unwrap() - 3).pow(2) as f64
                + (p.f64("e").unwrap() - 0.7).powi(2)
                + (p.f64("f").unwrap() / 100.0 - 1.0).powi(2)
                + (p.f64("g").unwrap() - 1.0).powi(2)
                + if p.str("h").unwrap() == "y" { 0.0 } else { 1.0 }
        };
        let best = |h: &History| h.best().unwrap().value.unwrap();
        let mut tpe_wins = 0;
        for seed in 0..5 {
            let h = run(&space, TpeOptions::default(), seed, 120, f);
            for t in h.iter() {
                for p in space.params() {
                    assert!(
                        p.domain.contains(t.params.get(&p.name).unwrap()),
                        "{}: {:?}",
                        p.name,
                        t.params.get(&p.name)
                    );
                }
            }
            let startup_only = TpeOptions {
                n_startup_trials: 1000,
                ..TpeOptions::default()
            };
            let r = run(&space, startup_only, seed, 120, f);
            tpe_wins += usize::from(best(&h) < best(&r));
        }
        assert!(tpe_wins >= 4, "TPE beat random on {tpe_wins}/5 seeds");
    }

    #[test]
    fn constant_liar_spreads_parallel_suggestions() {
        let space = Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
        let mut h = run(&space, TpeOptions::default(), 2, 20, |p| {
            (p.f64("x").unwrap() - 0.3).abs()
        });
        let mut tpe = Tpe::new(space, 2, TpeOptions::default());
        // Four workers ask in turn while the others' trials still run.
        let mut xs = Vec::new();
        for id in 20..24 {
            let p = tpe.suggest(id, &h).unwrap();
            xs.push(p.f64("x").unwrap());
            h.record(id, p, Status::Running);
        }
        xs.sort_by(f64::total_cmp);
        assert!(xs.windows(2).all(|w| w[1] - w[0] > 1e-9), "{xs:?}");
    }

    #[test]
    fn under_the_rung_model_running_trials_are_not_liars_unless_asked() {
        let space = Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
        let mut h = run(&space, TpeOptions::default(), 4, 20, |p| {
            (p.f64("x").unwrap() - 0.3).abs()
        });
        let rung = TpeOptions {
            fidelity: Some(Fidelity::Rung),
            ..TpeOptions::default()
        };
        let suggest = |opts: &TpeOptions, h: &History| {
            Tpe::new(space.clone(), 4, opts.clone())
                .suggest(21, h)
                .unwrap()
        };
        // Trial 20 runs, not reported yet, at the very point trial 21 would be given.
        let first = suggest(&rung, &h);
        let without = h.clone();
        h.record(20, first.clone(), Status::Running);
        assert_eq!(suggest(&rung, &h), first);
        let lying = TpeOptions {
            constant_liar: Some(true),
            ..rung
        };
        // With the liar asked for, it is bad there, and trial 21 goes elsewhere.
        assert_eq!(suggest(&lying, &without), first);
        assert_ne!(suggest(&lying, &h), first);
    }

    fn toml_space(text: &str) -> Space {
        toml::from_str(text).unwrap()
    }
}
