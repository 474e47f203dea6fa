//! TPE's settings, validated, with the mode-dependent defaults they resolve to.

use serde::{Deserialize, Serialize};

use crate::FieldError;

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
    pub(super) fn weights_into(&self, n: usize, w: &mut Vec<f64>) {
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
