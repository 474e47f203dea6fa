//! Median stopping (Golovin et al. 2017, Vizier), as Ray Tune's `MedianStoppingRule` runs it.
//!
//! At step t (past the grace period), a trial stops if its best value so far is strictly worse
//! than the median, over the other trials that reached t, of their running means up to t.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::{reward, Decision, Mode, Scheduler, TrialId};

/// Median stopping's settings (Ray Tune's names, in steps).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MedianConfig {
    /// No trial is stopped before this step.
    pub grace_period: u64,
    /// How many other trials must have reached the step for the median to count.
    pub min_samples_required: usize,
}

impl Default for MedianConfig {
    fn default() -> Self {
        MedianConfig {
            grace_period: 1,
            min_samples_required: 3,
        }
    }
}

/// The median stopping rule.
///
/// ```
/// use tune_schedulers::{Decision, MedianConfig, MedianStopping, Mode, Scheduler};
/// let mut m = MedianStopping::new(MedianConfig { grace_period: 1, min_samples_required: 2 }, Mode::Min);
/// for id in 0..2 {
///     m.on_result(id, 1, 1.0);
/// }
/// assert_eq!(m.on_result(2, 1, 5.0), Decision::Stop);
/// ```
#[derive(Debug, Clone)]
pub struct MedianStopping {
    config: MedianConfig,
    mode: Mode,
    /// (step, reward) of every result, by trial.
    results: BTreeMap<TrialId, Vec<(u64, f64)>>,
    stopped: BTreeSet<TrialId>,
}

impl MedianStopping {
    pub fn new(config: MedianConfig, mode: Mode) -> MedianStopping {
        MedianStopping {
            config,
            mode,
            results: BTreeMap::new(),
            stopped: BTreeSet::new(),
        }
    }

    /// Mean reward of `trial` over results with grace_period <= step <= t.
    fn running_mean(&self, trial: &[(u64, f64)], t: u64) -> f64 {
        let scoped: Vec<f64> = trial
            .iter()
            .filter(|(s, _)| self.config.grace_period <= *s && *s <= t)
            .map(|(_, r)| *r)
            .collect();
        scoped.iter().sum::<f64>() / scoped.len() as f64
    }
}

impl Scheduler for MedianStopping {
    fn on_result(&mut self, id: TrialId, step: u64, value: f64) -> Decision {
        if self.stopped.contains(&id) {
            return Decision::Stop;
        }
        self.results
            .entry(id)
            .or_default()
            .push((step, reward(self.mode, value)));
        if step < self.config.grace_period {
            return Decision::Continue;
        }
        let means: Vec<f64> = self
            .results
            .iter()
            .filter(|(other, r)| **other != id && r.last().is_some_and(|(s, _)| *s >= step))
            .map(|(_, r)| self.running_mean(r, step))
            .collect();
        if means.len() < self.config.min_samples_required {
            return Decision::Continue;
        }
        let median = crate::asha::percentile(means, 50.0).unwrap_or(f64::NEG_INFINITY);
        let best = self.results[&id]
            .iter()
            .map(|(_, r)| *r)
            .fold(f64::NEG_INFINITY, f64::max);
        if best < median {
            self.stopped.insert(id);
            Decision::Stop
        } else {
            Decision::Continue
        }
    }

    /// How many trials report and how many were stopped.
    fn describe(&self) -> Vec<String> {
        vec![format!(
            "median stopping after step {} with {}+ others: {} trials reporting, {} stopped",
            self.config.grace_period,
            self.config.min_samples_required,
            self.results.len(),
            self.stopped.len()
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_checked_median_rule() {
        let mut m = MedianStopping::new(
            MedianConfig {
                grace_period: 2,
                min_samples_required: 2,
            },
            Mode::Min,
        );
        // Trials 0 and 1: losses 4, 2, 1 and 6, 4, 3 at steps 1..3.
        for (id, losses) in [(0, [4.0, 2.0, 1.0]), (1, [6.0, 4.0, 3.0])] {
            for (i, l) in losses.iter().enumerate() {
                assert_eq!(m.on_result(id, i as u64 + 1, *l), Decision::Continue);
            }
        }
        // Trial 2 at step 1: inside the grace period.
        assert_eq!(m.on_result(2, 1, 100.0), Decision::Continue);
        // Step 2: running means over steps 2..2 of the others: 2 and 4, median 3 (as rewards -3).
        // Trial 2's best loss so far is 3.5 > 3: stopped.
        assert_eq!(m.on_result(2, 2, 3.5), Decision::Stop);
        assert_eq!(
            m.on_result(2, 3, 0.0),
            Decision::Stop,
            "a stopped trial stays stopped"
        );
        // Trial 3 at step 3: means over steps 2..3 are 1.5 and 3.5, median 2.5; best 2.4 < 2.5 continues.
        assert_eq!(m.on_result(3, 2, 2.6), Decision::Continue);
        assert_eq!(m.on_result(3, 3, 2.4), Decision::Continue);
    }

    #[test]
    fn too_few_peers_never_stop() {
        let mut m = MedianStopping::new(MedianConfig::default(), Mode::Max);
        assert_eq!(m.on_result(0, 5, 1.0), Decision::Continue);
        assert_eq!(m.on_result(1, 5, 0.0), Decision::Continue);
        assert_eq!(m.on_result(2, 5, -1.0), Decision::Continue);
        // Now three others reached step 5: median of 1, 0, -1 is 0; best -5 < 0.
        assert_eq!(m.on_result(3, 5, -5.0), Decision::Stop);
    }

    #[test]
    fn describe_counts_reporting_and_stopped_trials() {
        let mut m = MedianStopping::new(
            MedianConfig {
                grace_period: 1,
                min_samples_required: 2,
            },
            Mode::Min,
        );
        for id in 0..2 {
            m.on_result(id, 1, 1.0);
        }
        m.on_result(2, 1, 5.0);
        assert_eq!(
            m.describe(),
            ["median stopping after step 1 with 2+ others: 3 trials reporting, 1 stopped"]
        );
    }
}
