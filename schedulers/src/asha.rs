//! ASHA, asynchronous successive halving (Li et al. 2018), as Ray Tune's
//! `AsyncHyperBandScheduler` runs it: the stopping variant.
//!
//! A bracket has rungs at `grace_period * reduction_factor^(k + s)` up to `max_t`. The first
//! time a trial reaches a rung it is compared with the trials recorded there before it: below
//! the `1 - 1/reduction_factor` quantile it stops, otherwise it continues. Either way it is
//! recorded, so later trials meet a growing population. Trials that reach `max_t` complete.

use std::collections::BTreeMap;

use rand::Rng;
use tune_search::trial_rng;

use serde::{Deserialize, Serialize};
use tune_search::FieldError;

use crate::{reward, shown, AshaPromotion, Decision, Mode, Scheduler, TrialId};

/// ASHA's settings (Ray Tune's names and defaults, in steps), as `[scheduler]` with
/// `kind = "asha"` holds them.
///
/// ```
/// use tune_schedulers::{AshaConfig, AshaVariant, Decision, Mode, Params};
/// let config = AshaConfig { max_t: 27, reduction_factor: 3, variant: AshaVariant::Promotion, ..Default::default() };
/// config.validate().unwrap();
/// let mut scheduler = config.build(Mode::Min, 0);
/// scheduler.on_trial_add(0, &Params::default());
/// assert_eq!(scheduler.on_result(0, 1, 0.5), Decision::Pause); // it waits at its rung
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AshaConfig {
    /// The step at which trials end.
    pub max_t: u64,
    /// The first rung; unset: [`AshaConfig::DEFAULT_GRACE_DIVISOR`]th of `max_t`
    /// ([`AshaConfig::grace_period`]).
    pub grace_period: Option<u64>,
    /// The rung spacing and 1/fraction kept.
    pub reduction_factor: u64,
    /// Bracket `s` starts at `grace_period * reduction_factor^s`; several with the promotion
    /// variant: asynchronous HyperBand.
    pub brackets: usize,
    /// Trials reaching `max_t` end there (Ray's `stop_last_trials`).
    pub stop_last_trials: bool,
    /// Which ASHA [`AshaConfig::build`] makes.
    pub variant: AshaVariant,
}

/// Which ASHA: Ray Tune's stopping rule, or the paper's promotions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AshaVariant {
    /// A trial below its rung's cut-off stops there ([`Asha`], Ray Tune's `ASHAScheduler`).
    #[default]
    Stopping,
    /// A trial pauses at each rung and the best are promoted later ([`AshaPromotion`], Li et
    /// al. 2020).
    Promotion,
}

impl Default for AshaConfig {
    fn default() -> Self {
        AshaConfig {
            max_t: 100,
            grace_period: None,
            reduction_factor: 4,
            brackets: 1,
            stop_last_trials: true,
            variant: AshaVariant::Stopping,
        }
    }
}

impl AshaConfig {
    /// Unset, `grace_period` is `max_t` divided by this (at least 1): 3 for `max_t = 52`.
    /// Ray Tune's default is 1 step whatever `max_t` is, which makes the first cut depend on
    /// what a step is (an epoch, or a hundred batches) and, on LCBench's development tasks,
    /// cuts on a first epoch that misleads: TPE + ASHA over 52 epochs, 1 worker, 30 seeds,
    /// mean normalised regret at 2,080 epochs, grace period 1: 0.116 (10 seeds), 2: 0.096,
    /// 3: 0.061, 5: 0.075 (docs/benchmarks/early-stopping.md).
    pub const DEFAULT_GRACE_DIVISOR: u64 = 16;

    /// The first rung: as set, else `max_t / 16`, at least 1.
    ///
    /// ```
    /// use tune_schedulers::AshaConfig;
    /// assert_eq!(AshaConfig { max_t: 52, ..Default::default() }.grace_period(), 3);
    /// assert_eq!(AshaConfig { max_t: 9, ..Default::default() }.grace_period(), 1);
    /// assert_eq!(AshaConfig { max_t: 52, grace_period: Some(1), ..Default::default() }.grace_period(), 1);
    /// ```
    pub fn grace_period(&self) -> u64 {
        (self.grace_period).unwrap_or((self.max_t / Self::DEFAULT_GRACE_DIVISOR).max(1))
    }

    /// Checks the settings' ranges.
    ///
    /// ```
    /// let bad = tune_schedulers::AshaConfig { reduction_factor: 1, ..Default::default() };
    /// assert_eq!(bad.validate().unwrap_err().to_string(), "`reduction_factor`: expected at least 2, found 1");
    /// ```
    pub fn validate(&self) -> Result<(), FieldError> {
        FieldError::check_at_least("reduction_factor", self.reduction_factor, 2)?;
        FieldError::check_at_least("max_t", self.max_t, 1)?;
        let grace = self.grace_period();
        if grace == 0 || grace > self.max_t {
            return Err(FieldError::new(
                "grace_period",
                format!(
                    "expected 1 <= grace_period <= max_t ({}), found {grace}",
                    self.max_t
                ),
            ));
        }
        FieldError::check_at_least("brackets", self.brackets as u64, 1)
    }

    /// The scheduler of this variant.
    pub fn build(&self, mode: Mode, seed: u64) -> Box<dyn Scheduler> {
        match self.variant {
            AshaVariant::Stopping => Box::new(Asha::new(self.clone(), mode, seed)),
            AshaVariant::Promotion => Box::new(AshaPromotion::new(self.clone(), mode, seed)),
        }
    }
}

#[derive(Debug, Clone)]
struct Rung {
    milestone: u64,
    /// Rewards recorded at this rung, by trial.
    recorded: BTreeMap<TrialId, f64>,
}

#[derive(Debug, Clone)]
struct Bracket {
    /// Highest milestone first, so a result finds its rung from the top.
    rungs: Vec<Rung>,
}

/// The ASHA scheduler.
///
/// ```
/// use tune_schedulers::{Asha, AshaConfig, Decision, Mode, Scheduler};
/// let mut asha = Asha::new(AshaConfig { max_t: 9, grace_period: Some(1), reduction_factor: 3, ..Default::default() }, Mode::Min, 0);
/// assert_eq!(asha.milestones(0), vec![9, 3, 1]);
/// assert_eq!(asha.on_result(0, 1, 0.5), Decision::Continue); // first at the rung
/// assert_eq!(asha.on_result(1, 1, 0.9), Decision::Stop);     // worse than the cutoff
/// ```
#[derive(Debug, Clone)]
pub struct Asha {
    config: AshaConfig,
    mode: Mode,
    seed: u64,
    brackets: Vec<Bracket>,
    /// Each bracket's selection probability (Ray: softmax of its number of rungs).
    probs: Vec<f64>,
}

impl Asha {
    pub fn new(config: AshaConfig, mode: Mode, seed: u64) -> Asha {
        let rf = config.reduction_factor.max(2);
        let min_t = config.grace_period().max(1);
        // Rungs a bracket with s = 0 has: every min_t * rf^k <= max_t.
        let mut full = 0u32;
        while min_t.saturating_mul(rf.saturating_pow(full)) <= config.max_t {
            full += 1;
        }
        let brackets: Vec<Bracket> = (0..config.brackets.max(1) as u32)
            .map(|s| Bracket {
                rungs: (0..full.saturating_sub(s))
                    .rev()
                    .map(|k| Rung {
                        milestone: min_t * rf.pow(k + s),
                        recorded: BTreeMap::new(),
                    })
                    .collect(),
            })
            .collect();
        let sizes: Vec<usize> = brackets.iter().map(|b| b.rungs.len()).collect();
        Asha {
            probs: bracket_probs(&sizes),
            config,
            mode,
            seed,
            brackets,
        }
    }

    /// The milestones of bracket `b`, highest first.
    pub fn milestones(&self, b: usize) -> Vec<u64> {
        self.brackets[b].rungs.iter().map(|r| r.milestone).collect()
    }

    fn bracket_of(&self, id: TrialId) -> usize {
        draw_bracket(&self.probs, self.seed, id)
    }

    /// Records the result at the first rung it reaches; `Stop` if it is below that rung's cutoff.
    fn record(&mut self, id: TrialId, step: u64, value: f64) -> Decision {
        let rf = self.config.reduction_factor.max(2) as f64;
        let r = reward(self.mode, value);
        let b = self.bracket_of(id);
        for rung in &mut self.brackets[b].rungs {
            if step < rung.milestone || rung.recorded.contains_key(&id) {
                continue;
            }
            let values: Vec<f64> = rung.recorded.values().copied().collect();
            let stop =
                percentile(values, (1.0 - 1.0 / rf) * 100.0).is_some_and(|cutoff| r < cutoff);
            rung.recorded.insert(id, r);
            return if stop {
                Decision::Stop
            } else {
                Decision::Continue
            };
        }
        Decision::Continue
    }
}

impl Scheduler for Asha {
    fn on_result(&mut self, id: TrialId, step: u64, value: f64) -> Decision {
        if step >= self.config.max_t && self.config.stop_last_trials {
            // Ray stops here without recording; a last report below max_t is recorded on completion.
            return Decision::Complete;
        }
        self.record(id, step, value)
    }

    fn on_complete(&mut self, id: TrialId, last: Option<(u64, f64)>) {
        if let Some((step, value)) = last {
            self.record(id, step, value);
        }
    }

    /// One line per rung, lowest first: how many trials reached it and the value the next
    /// one must beat.
    fn rungs(&self) -> Vec<u64> {
        crate::merged_milestones((0..self.brackets.len()).map(|b| self.milestones(b)))
    }

    fn completes_at(&self) -> Option<u64> {
        self.config.stop_last_trials.then_some(self.config.max_t)
    }

    fn describe(&self) -> Vec<String> {
        let q = (1.0 - 1.0 / self.config.reduction_factor.max(2) as f64) * 100.0;
        let mut lines = Vec::new();
        for (b, bracket) in self.brackets.iter().enumerate() {
            for rung in bracket.rungs.iter().rev() {
                let prefix = if self.brackets.len() > 1 {
                    format!("bracket {b} ")
                } else {
                    String::new()
                };
                let n = rung.recorded.len();
                let cutoff = percentile(rung.recorded.values().copied().collect(), q)
                    .map_or("-".into(), |c| shown(self.mode, c));
                lines.push(format!(
                    "{prefix}rung t={}: {n} trial{}, cut-off {cutoff}",
                    rung.milestone,
                    if n == 1 { "" } else { "s" }
                ));
            }
        }
        lines
    }
}

/// Each bracket's selection probability from its number of rungs (Ray: their softmax), so
/// the aggressive brackets, with more rungs, get more trials.
pub(crate) fn bracket_probs(rungs: &[usize]) -> Vec<f64> {
    let top = rungs.iter().copied().max().unwrap_or(0) as f64;
    let weights: Vec<f64> = rungs.iter().map(|&r| (r as f64 - top).exp()).collect();
    let total: f64 = weights.iter().sum();
    weights.iter().map(|w| w / total).collect()
}

/// The bracket of trial `id`: a seeded draw, so resuming assigns it the same one.
pub(crate) fn draw_bracket(probs: &[f64], seed: u64, id: TrialId) -> usize {
    if probs.len() <= 1 {
        return 0;
    }
    let u: f64 = trial_rng(seed ^ 0x0A5A_5A5A_5A5A_5A5A, id).random();
    let mut acc = 0.0;
    for (i, p) in probs.iter().enumerate() {
        acc += p;
        if u < acc {
            return i;
        }
    }
    probs.len() - 1
}

/// numpy's `percentile` with linear interpolation; `None` for no values.
pub(crate) fn percentile(mut values: Vec<f64>, q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let rank = q / 100.0 * (values.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    Some(values[lo] + (values[hi] - values[lo]) * (rank - lo as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asha(max_t: u64, grace: u64, rf: u64, brackets: usize) -> Asha {
        Asha::new(
            AshaConfig {
                max_t,
                grace_period: Some(grace),
                reduction_factor: rf,
                brackets,
                ..AshaConfig::default()
            },
            Mode::Max,
            7,
        )
    }

    #[test]
    fn rungs_follow_grace_times_powers_of_rf() {
        let a = asha(81, 1, 3, 3);
        assert_eq!(a.milestones(0), vec![81, 27, 9, 3, 1]);
        assert_eq!(a.milestones(1), vec![81, 27, 9, 3]);
        assert_eq!(a.milestones(2), vec![81, 27, 9]);
        assert_eq!(asha(100, 1, 4, 1).milestones(0), vec![64, 16, 4, 1]);
        assert_eq!(asha(10, 2, 2, 1).milestones(0), vec![8, 4, 2]);
        // Bracket probabilities: softmax of rung counts (5, 4, 3).
        let z = 1.0 + (-1f64).exp() + (-2f64).exp();
        assert!(
            (a.probs[0] - 1.0 / z).abs() < 1e-12 && (a.probs[2] - (-2f64).exp() / z).abs() < 1e-12
        );
    }

    #[test]
    fn numpy_percentile() {
        // numpy.percentile([1, 2, 4], 66.666...) = 2 + 2 * (1.3333 - 1) = 2.6667
        let p = percentile(vec![4.0, 1.0, 2.0], 200.0 / 3.0).unwrap();
        assert!((p - 8.0 / 3.0).abs() < 1e-12, "{p}");
        assert_eq!(percentile(vec![5.0], 50.0), Some(5.0));
        assert_eq!(percentile(vec![], 50.0), None);
    }

    #[test]
    fn hand_made_rung_example() {
        // max mode, rungs 1, 3, 9 (rf 3), cutoff = 66.7th percentile of what the rung holds.
        let mut a = asha(9, 1, 3, 1);
        assert_eq!(a.on_result(0, 1, 5.0), Decision::Continue); // rung 1 empty: no cutoff
        assert_eq!(a.on_result(1, 1, 3.0), Decision::Stop); // cutoff = 5
        assert_eq!(a.on_result(2, 1, 6.0), Decision::Continue); // cutoff of [3, 5] = 4.33
                                                                // [3, 5, 6]: 66.7th percentile = 5 + (6 - 5) * 0.333 = 5.333
        assert_eq!(a.on_result(3, 1, 5.2), Decision::Stop);
        assert_eq!(a.on_result(4, 1, 5.4), Decision::Continue);
        // Trial 0 reports again at step 2: no new rung, continue.
        assert_eq!(a.on_result(0, 2, 0.0), Decision::Continue);
        // Rung 3: trial 0 first (continue), then trial 2 worse (stop).
        assert_eq!(a.on_result(0, 3, 7.0), Decision::Continue);
        assert_eq!(a.on_result(2, 3, 6.5), Decision::Stop);
        // A result that skips rung 3 is judged at the highest rung it passed (9 = max_t: complete).
        assert_eq!(a.on_result(4, 5, 1.0), Decision::Stop);
        assert_eq!(a.on_result(0, 9, 8.0), Decision::Complete);
    }

    #[test]
    fn min_mode_flips_the_comparison() {
        let mut a = Asha::new(
            AshaConfig {
                max_t: 9,
                grace_period: Some(1),
                reduction_factor: 3,
                ..Default::default()
            },
            Mode::Min,
            0,
        );
        assert_eq!(a.on_result(0, 1, 0.5), Decision::Continue);
        assert_eq!(a.on_result(1, 1, 0.4), Decision::Continue);
        assert_eq!(a.on_result(2, 1, 0.9), Decision::Stop);
    }

    #[test]
    fn replaying_results_rebuilds_the_same_state() {
        let results = [
            (0, 1, 1.0),
            (1, 1, 0.5),
            (2, 1, 2.0),
            (0, 3, 1.5),
            (2, 3, 2.5),
            (3, 1, 0.1),
        ];
        let mut a = asha(27, 1, 3, 2);
        let first: Vec<Decision> = results
            .iter()
            .map(|&(id, s, v)| a.on_result(id, s, v))
            .collect();
        let mut b = asha(27, 1, 3, 2);
        let again: Vec<Decision> = results
            .iter()
            .map(|&(id, s, v)| b.on_result(id, s, v))
            .collect();
        assert_eq!(first, again);
        assert_eq!(a.on_result(4, 1, 0.7), b.on_result(4, 1, 0.7));
    }

    #[test]
    fn describe_shows_each_rung_with_its_count_and_cutoff() {
        let mut a = asha(9, 1, 3, 1);
        a.on_result(0, 1, 0.5);
        a.on_result(1, 1, 0.9);
        a.on_result(0, 3, 0.4);
        // (Mode max.) Rung 1 holds 0.5 and 0.9; the 66.7th percentile is
        // 0.5 + (2/3)(0.4) = 0.7667, the value the next trial there must reach.
        assert_eq!(
            a.describe(),
            [
                "rung t=1: 2 trials, cut-off 0.7667",
                "rung t=3: 1 trial, cut-off 0.4",
                "rung t=9: 0 trials, cut-off -"
            ]
        );
        assert!(asha(9, 1, 3, 2).describe()[3].starts_with("bracket 1 rung t=3:"));
    }
}
