//! `algorithm = "auto"`: each suggestion handed to the searcher that suits the sweep, chosen
//! from what is known of it before it runs (its space, objectives, early stopping) and from its
//! history (how many trials have completed), so the choice is as pure as the suggestion.
//!
//! The rules, in order, and the numbers behind them (docs/guide/search.md says the same):
//! 1. Several objectives: TPE (its hypervolume-weighted MOTPE beat NSGA-II on ZDT1, ZDT2, DTLZ2
//!    and NetCost at 200-300 trials, docs/benchmarks/multi-objective.md).
//! 2. A conditional space: TPE (a GP needs every parameter in every trial).
//! 3. Early stopping by median or PBT: TPE, which learns from the stopped trials as well as
//!    the completed ones.
//! 4. More choices than numbers among the parameters: TPE (a GP's kernel on categories is a
//!    Hamming distance, and with mostly categories it has little to model).
//! 5. Otherwise a GP (its random start growing with the dimension: [`gp_options`]) while
//!    fewer than [`GP_TRIALS`] trials are modelled, then TPE. Under ASHA or HyperBand the GP
//!    is fitted at the highest rung where as many trials reported as its random start has
//!    ([`GpOptions::rung_model`]; BOHB's model, with a GP); the trials modelled are those.
//!    There it took the defaults on LCBench's development tasks below SMAC3's multi-fidelity
//!    facade where TPE was not (docs/benchmarks/early-stopping.md). Elsewhere a GP led
//!    TPE on all six development functions at 100-200 trials (docs/benchmarks/gp.md), and
//!    its cost grows with the square of the trials per suggestion and their cube per fit
//!    (17-29 ms and 250 ms at 300 trials), where TPE's grows linearly. OptunaHub's AutoSampler
//!    switches at the same count (`_MAX_BUDGET_FOR_SINGLE_GP = 250`).
//!
//! Constraints and slots change none of these: the GP, which models each constraint, led TPE
//! on three constrained problems, and with 4 and 8 trials at once on all six development
//! functions (docs/benchmarks/auto.md).
//!
//! A sweep with a known budget and no early stopping spends the last tenth of its trials
//! ([`AutoOptions::gp_exploit_fraction`]) where the GP's mean is best: pure exploitation, the
//! greedy end of the trade-off De Ath et al. ("Greed is good", ACM TELO 2021) found competitive
//! with EI. At half of each development function's budget it cut the median regret on all six
//! (Branin 1.1e-6 to 3.1e-8, MixedOptNet 2.3e-9 to 6.8e-12; docs/benchmarks/auto.md). With
//! several slots, trials of the window suggested beside each other land close together (the
//! believer leaves the mean where it was); with 4 and 8 at once that still cut the median
//! regret on four and five of the six, more than one trial of the window at a time did
//! (docs/benchmarks/auto.md).
//!
//! The GP's kernel is HEBO's Matérn 3/2 where the sweep ends with that greedy tenth and no
//! parameter is a choice, Optuna's 5/2 elsewhere ([`gp_kernel`]).
//!
//! Trial durations are not among the inputs: given the GP's wall time, TPE ended behind it
//! even with trials that cost nothing (docs/benchmarks/auto.md), and a rule on measured
//! durations would let two runs of one sweep choose differently.

use serde::{Deserialize, Serialize};

use crate::gp::{GpOptions, GpSearch, Matern};
use crate::{
    Domain, History, Params, Searcher, Space, Status, Suggestion, Tpe, TpeOptions, TrialId,
};

/// The share of a sweep's trials, at its end, that the GP spends refining its best
/// ([`AutoOptions::gp_exploit_fraction`]): a tenth had the lowest mean log regret over the
/// development functions of the fractions tried (0.06, 0.1, 0.14, 0.2 of 50 trials).
pub const EXPLOIT_FRACTION: f64 = 0.1;

/// The kernel of `auto`'s GP over `space` in a sweep of `shape`: `options.gp_kernel` where
/// set; else HEBO's Matérn 3/2 (Cowen-Rivers et al., JAIR 2022) where no parameter is a
/// choice and the sweep ends with trials where the mean is best (a FIFO sweep of known
/// `samples`: [`AutoOptions::gp_exploit_fraction`]), and Optuna's 5/2 (`algorithm = "gp"`'s)
/// otherwise.
///
/// A rougher process follows a funnel's tip and a narrow valley between trials where 5/2's
/// smooths them over, and its expected improvement explores more widely: ending with the
/// greedy tenth, at half of each development function's budget, 3/2 lowered the median regret
/// on the five without choices (Rosenbrock4D 16.8 to 8.0, Ackley5D 3.2 to 2.6, Branin 3.1e-8
/// to 7.1e-9); by expected improvement to the end it ended higher on three of them (Branin
/// 1.1e-6 to 2.3e-5). With a choice among the parameters it left a third of the runs on
/// MixedOptNet in the best of a wrong category (38 of 60 within 0.01 of the minimum at half
/// the budget, against 60 of 60 with 5/2; docs/benchmarks/auto.md).
///
/// ```
/// use tune_search::{auto_gp_kernel, gp::Matern, AutoOptions, Space, SweepShape};
/// let numeric = Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
/// let mixed = Space::builder().uniform("x", 0.0, 1.0).choice("opt", ["sgd", "adam"]).build().unwrap();
/// let fifo = SweepShape { samples: Some(50), ..SweepShape::default() };
/// let defaults = AutoOptions::default();
/// assert_eq!(auto_gp_kernel(&numeric, &fifo, &defaults), Matern::ThreeHalves);
/// assert_eq!(auto_gp_kernel(&mixed, &fifo, &defaults), Matern::FiveHalves);
/// // No known end to refine at: expected improvement throughout, with 5/2.
/// assert_eq!(auto_gp_kernel(&numeric, &SweepShape::default(), &defaults), Matern::FiveHalves);
/// let set = AutoOptions { gp_kernel: Some(Matern::ThreeHalves), ..defaults };
/// assert_eq!(auto_gp_kernel(&mixed, &fifo, &set), Matern::ThreeHalves);
/// ```
pub fn gp_kernel(space: &Space, shape: &SweepShape, options: &AutoOptions) -> Matern {
    let ends_greedy = exploit_from(shape, options.gp_exploit_fraction).is_some();
    options
        .gp_kernel
        .unwrap_or(if choice_count(space) == 0 && ends_greedy {
            Matern::ThreeHalves
        } else {
            Matern::FiveHalves
        })
}

/// How many of `space`'s parameters are choices (a grid's values count as one).
fn choice_count(space: &Space) -> usize {
    space
        .params()
        .iter()
        .filter(|p| matches!(p.domain, Domain::Choice(_) | Domain::Grid(_)))
        .count()
}

/// Trials completed with a value, up to which a single-objective numeric sweep is
/// modelled by a GP.
pub const GP_TRIALS: usize = 250;

/// Random trials before the GP's model, per parameter: 2.5 d, at least 10 (Optuna's default).
///
/// A GP fitted on ten points in six dimensions settles in the first basin it models: on
/// Hartmann6 at 100 trials 23 of 60 runs end outside the global one (most in the second basin,
/// regret 0.119). Designs that
/// grow with the dimension are the rule for GP models of computer experiments (Loeppky, Sacks
/// and Welch 2009, "Choosing the sample size of a computer experiment", suggest 10 d for a
/// first fit); 2.5 d was the factor the development functions favoured
/// (docs/benchmarks/auto.md), the held-out ones checked after.
const STARTUP_PER_PARAMETER: f64 = 2.5;

/// `auto`'s settings beside what it derives from the sweep: kept in the spec so that a sweep
/// stored by an earlier build resumes with the models that build ran.
///
/// ```
/// let options = tune_search::AutoOptions::default();
/// assert_eq!(options.gp_minimum_noise, tune_search::gp::GpOptions::default().minimum_noise);
/// assert!(options.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AutoOptions {
    /// The noise floor of the GP it hands a space to ([`GpOptions::minimum_noise`]).
    pub gp_minimum_noise: f64,
    /// Under ASHA or HyperBand, the rules go on to a GP fitted at a rung (rule 5); off, TPE
    /// models such sweeps, as in sweeps stored before format 9.
    pub gp_under_rungs: bool,
    /// The share of a FIFO sweep's `samples`, at its end, that the GP suggests where its mean
    /// is best instead of where its expected improvement is ([`EXPLOIT_FRACTION`]; 0: none,
    /// as in sweeps stored before format 10).
    pub gp_exploit_fraction: f64,
    /// The GP's kernel ([`GpOptions::kernel`]) on every space; unset, by the space
    /// ([`gp_kernel`]). Matérn 5/2 in sweeps stored before format 11.
    pub gp_kernel: Option<Matern>,
}

impl Default for AutoOptions {
    fn default() -> Self {
        AutoOptions {
            gp_minimum_noise: GpOptions::default().minimum_noise,
            gp_under_rungs: true,
            gp_exploit_fraction: EXPLOIT_FRACTION,
            gp_kernel: None,
        }
    }
}

impl AutoOptions {
    /// Checks the settings' ranges (those of the GP's options they set).
    ///
    /// ```
    /// let bad = tune_search::AutoOptions { gp_minimum_noise: 2.0, ..Default::default() };
    /// assert_eq!(bad.validate().unwrap_err().key, "gp_minimum_noise");
    /// ```
    pub fn validate(&self) -> Result<(), crate::FieldError> {
        crate::FieldError::check_within("gp_exploit_fraction", self.gp_exploit_fraction, 0.0, 1.0)?;
        GpOptions {
            minimum_noise: self.gp_minimum_noise,
            ..GpOptions::default()
        }
        .validate()
        .map_err(|e| crate::FieldError::new(format!("gp_{}", e.key), e.message))
    }
}

/// The options of the GP `auto` hands a space to: the defaults, with a random start that
/// grows with the space's dimension (2.5 trials per parameter), and `options`' noise floor;
/// [`AutoSearch`] sets the kernel ([`gp_kernel`]) and the trials by the mean.
///
/// ```
/// let space = tune_search::Space::builder()
///     .uniform("a", 0.0, 1.0).uniform("b", 0.0, 1.0).uniform("c", 0.0, 1.0)
///     .uniform("d", 0.0, 1.0).uniform("e", 0.0, 1.0).uniform("f", 0.0, 1.0)
///     .build().unwrap();
/// let options = tune_search::AutoOptions::default();
/// let gp = tune_search::auto_gp_options(&space, &options);
/// assert_eq!(gp.n_startup_trials, 15);
/// ```
pub fn gp_options(space: &Space, options: &AutoOptions) -> GpOptions {
    let defaults = GpOptions::default();
    let per_dimension = (STARTUP_PER_PARAMETER * space.len() as f64).ceil() as u64;
    GpOptions {
        n_startup_trials: defaults.n_startup_trials.max(per_dimension),
        minimum_noise: options.gp_minimum_noise,
        ..defaults
    }
}

/// How a sweep stops trials early, as far as the choice of a searcher goes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EarlyStopping {
    /// Every trial runs to its end (FIFO).
    #[default]
    None,
    /// A scheduler stops or pauses trials at rungs: ASHA or HyperBand.
    Rungs,
    /// Another scheduler stops trials or changes them (median stopping, PBT).
    Scheduler,
}

/// What `auto` knows of a sweep before it runs.
///
/// ```
/// use tune_search::{EarlyStopping, SweepShape};
/// let shape = SweepShape { objectives: 1, early_stopping: EarlyStopping::None, samples: None };
/// assert_eq!(shape, SweepShape::default());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SweepShape {
    /// How many objectives the sweep optimises (1 for one metric).
    pub objectives: usize,
    pub early_stopping: EarlyStopping,
    /// The trials the sweep creates (its `samples`), where known: the last of them refine
    /// the best ([`AutoOptions::gp_exploit_fraction`]).
    pub samples: Option<u64>,
}

impl Default for SweepShape {
    fn default() -> Self {
        SweepShape {
            objectives: 1,
            early_stopping: EarlyStopping::None,
            samples: None,
        }
    }
}

/// A searcher `auto` hands suggestions to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AutoPick {
    Gp,
    Tpe,
}

impl AutoPick {
    /// Its `algorithm` name in a spec.
    ///
    /// ```
    /// assert_eq!(tune_search::AutoPick::Gp.as_str(), "gp");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            AutoPick::Gp => "gp",
            AutoPick::Tpe => "tpe",
        }
    }
}

/// Which searcher suggests a trial, and the rule that chose it, for people: the same words
/// for every trial the rule holds for, so that a sweep's log and status show each switch once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutoChoice {
    pub algorithm: AutoPick,
    pub reason: String,
}

/// Hands each suggestion to a GP or TPE by the rules in this module's documentation.
///
/// ```
/// use tune_search::{AutoPick, AutoSearch, History, Mode, Searcher, Space, SweepShape, TpeOptions};
/// let space = Space::builder().uniform("x", 0.0, 1.0).uniform("y", 0.0, 1.0).build().unwrap();
/// let mut auto = AutoSearch::new(space, 7, SweepShape::default(), TpeOptions::default(), &Default::default());
/// let history = History::new(Mode::Min);
/// let first = auto.suggest_with_reason(0, &history).unwrap();
/// assert_eq!(first.suggested_by.unwrap().algorithm, AutoPick::Gp);
/// ```
#[derive(Debug, Clone)]
pub struct AutoSearch {
    space: Space,
    shape: SweepShape,
    tpe: Tpe,
    /// `None` for a conditional space, which a GP cannot model (and the rules never give it).
    gp: Option<GpSearch>,
    /// The GP is fitted at a rung ([`GpOptions::rung_model`]).
    gp_at_rungs: bool,
    /// Its settings: the share of the budget the GP ends on where its mean is best, and the
    /// kernel where set.
    options: AutoOptions,
}

impl AutoSearch {
    /// `tpe` are the options TPE runs with when chosen (the spec's, as its scheduler makes
    /// them).
    pub fn new(
        space: Space,
        seed: u64,
        shape: SweepShape,
        tpe: TpeOptions,
        options: &AutoOptions,
    ) -> AutoSearch {
        let gp_at_rungs = shape.early_stopping == EarlyStopping::Rungs && options.gp_under_rungs;
        let gp = GpOptions {
            rung_model: gp_at_rungs,
            exploit_from: exploit_from(&shape, options.gp_exploit_fraction),
            kernel: gp_kernel(&space, &shape, options),
            ..gp_options(&space, options)
        };
        AutoSearch {
            tpe: Tpe::new(space.clone(), seed, tpe),
            gp: GpSearch::new(space.clone(), seed, gp).ok(),
            gp_at_rungs,
            options: options.clone(),
            space,
            shape,
        }
    }

    /// The first trial its GP suggests where its mean is best (`None` without a GP).
    fn exploit_from(&self) -> Option<u64> {
        self.gp.as_ref().and_then(GpSearch::exploit_from)
    }

    /// The searcher for the next trial, given the history so far, and why.
    fn decide(&self, id: TrialId, history: &History) -> AutoChoice {
        let tpe = |reason: String| AutoChoice {
            algorithm: AutoPick::Tpe,
            reason,
        };
        if self.shape.objectives > 1 {
            return tpe(format!("{} objectives", self.shape.objectives));
        }
        let conditional: Vec<&str> = self
            .space
            .params()
            .iter()
            .filter(|p| !p.when.is_empty())
            .map(|p| p.name.as_str())
            .collect();
        if let Some(first) = conditional.first() {
            return tpe(format!(
                "a conditional space ({first}{})",
                if conditional.len() > 1 { ", .." } else { "" }
            ));
        }
        let tpe_learns_from_stopped = match self.shape.early_stopping {
            EarlyStopping::None => false,
            EarlyStopping::Rungs => !self.gp_at_rungs,
            EarlyStopping::Scheduler => true,
        };
        if tpe_learns_from_stopped {
            return tpe("a scheduler stops trials early, and TPE learns from them".into());
        }
        let choices = choice_count(&self.space);
        let numbers = self.space.len() - choices;
        if choices > numbers {
            return tpe(format!(
                "{choices} of {} parameters are choices",
                self.space.len()
            ));
        }
        let rung = match &self.gp {
            Some(gp) if self.gp_at_rungs => history.rung_step(gp.startup_trials()),
            _ => None,
        };
        let modelled = match rung {
            Some(step) => history.reported_at(step),
            None => history
                .iter()
                .filter(|o| o.status == Status::Completed && o.value.is_some())
                .count(),
        };
        let (limit, modelled_so_far) = if self.gp_at_rungs {
            (
                "trials have reported at the rung the GP is fitted at",
                format!(
                    "fitted at the highest rung with enough results, fewer than {GP_TRIALS} \
                     trials there"
                ),
            )
        } else {
            (
                "trials have completed",
                format!("fewer than {GP_TRIALS} trials completed"),
            )
        };
        if modelled >= GP_TRIALS {
            return tpe(format!("{GP_TRIALS} {limit}, the most a GP models"));
        }
        let refining = match (self.exploit_from(), self.shape.samples) {
            (Some(from), Some(samples)) if id >= from => format!(
                "; the last {} of {samples} trials go where its mean is best",
                samples - from
            ),
            _ => String::new(),
        };
        AutoChoice {
            algorithm: AutoPick::Gp,
            reason: format!(
                "one objective over {numbers} numeric and {choices} categorical parameters \
                 ({}), {modelled_so_far}{refining}",
                gp_kernel(&self.space, &self.shape, &self.options).name()
            ),
        }
    }
}

/// The first trial of a sweep of `shape` that its GP suggests where its mean is best: the
/// last `fraction` of its `samples`, rounded; `None` for none.
fn exploit_from(shape: &SweepShape, fraction: f64) -> Option<u64> {
    // Under a scheduler the last trials created are rarely the last to end, nor trained as
    // far as the others: only a FIFO sweep ends with them.
    let samples = shape
        .samples
        .filter(|_| shape.early_stopping == EarlyStopping::None)?;
    let from = samples - ((fraction * samples as f64).round() as u64).min(samples);
    (from < samples).then_some(from)
}

impl Searcher for AutoSearch {
    fn set_samples(&mut self, samples: u64) {
        self.shape.samples = Some(samples);
        let from = exploit_from(&self.shape, self.options.gp_exploit_fraction);
        let kernel = gp_kernel(&self.space, &self.shape, &self.options);
        if let Some(gp) = &mut self.gp {
            gp.set_exploit_from(from);
            gp.set_kernel(kernel);
        }
    }

    fn suggest(&mut self, id: TrialId, history: &History) -> Option<Params> {
        self.suggest_with_reason(id, history).map(|s| s.params)
    }

    fn suggest_with_reason(&mut self, id: TrialId, history: &History) -> Option<Suggestion> {
        let choice = self.decide(id, history);
        let params = match (choice.algorithm, &mut self.gp) {
            (AutoPick::Gp, Some(gp)) => gp.suggest(id, history),
            _ => self.tpe.suggest(id, history),
        }?;
        Some(Suggestion {
            params,
            suggested_by: Some(choice),
        })
    }
}

#[cfg(test)]
mod tests;
