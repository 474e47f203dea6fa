//! When a whole sweep ends early: `[stop]` (Ray Tune's `fail_fast` and `time_budget_s`,
//! Optuna's `timeout`, Hyperopt's `no_progress_loss`, and a target value).
//!
//! A sweep that stops ends like an interrupted one: running trials are left for `tune resume`,
//! which goes on from there (and checks the conditions again).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tune_search::{FieldError, Mode, Status, TrialId};

use crate::trial::Trial;

/// `[stop]`: conditions that end the sweep before its budget is spent.
///
/// ```
/// use tune::StopConditions;
/// let stop = StopConditions { target: Some(0.01), ..StopConditions::default() };
/// assert_eq!(stop.max_failed_trials, 10);
/// assert!(stop.validate().is_ok());
/// let bad = StopConditions { time_budget_s: Some(-1.0), ..StopConditions::default() };
/// assert_eq!(bad.validate().unwrap_err().key, "time_budget_s");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StopConditions {
    /// Trials that may fail in a row (no trial ending otherwise in between) before the sweep
    /// stops with the last error; 1 is Ray Tune's `fail_fast`, 0 never stops. Counted anew by
    /// each run or resume.
    pub max_failed_trials: u32,
    /// Wall-clock seconds this run (or resume) may take.
    pub time_budget_s: Option<f64>,
    /// Stop once a finished trial's value reaches this (at most it under `mode = "min"`).
    pub target: Option<f64>,
    /// Stop once this many trials in a row have ended without beating the best before them.
    pub no_improvement_trials: Option<u64>,
}

impl Default for StopConditions {
    fn default() -> Self {
        StopConditions {
            max_failed_trials: 10,
            time_budget_s: None,
            target: None,
            no_improvement_trials: None,
        }
    }
}

impl StopConditions {
    /// Checks the settings' ranges.
    pub fn validate(&self) -> Result<(), FieldError> {
        if let Some(t) = self.time_budget_s {
            crate::seconds::checked("time_budget_s", t, false)?;
        }
        if let Some(t) = self.target {
            if !t.is_finite() {
                return Err(FieldError::new(
                    "target",
                    format!("expected a finite value, found {t}"),
                ));
            }
        }
        if self.no_improvement_trials == Some(0) {
            return Err(FieldError::new(
                "no_improvement_trials",
                "expected at least 1 trial, found 0",
            ));
        }
        Ok(())
    }

    /// This run's wall-clock budget.
    pub(crate) fn time_budget(&self) -> Option<Duration> {
        // Validated; a value set past validation saturates rather than panics.
        self.time_budget_s
            .map(|t| Duration::try_from_secs_f64(t).unwrap_or(Duration::MAX))
    }
}

/// Why a sweep stopped before its budget was spent.
#[derive(Debug, Clone, PartialEq)]
pub enum StopReason {
    /// `max_failed_trials` trials failed in a row; the last one's error.
    Failing {
        in_a_row: u32,
        trial: TrialId,
        error: String,
    },
    /// This run took `time_budget_s`.
    TimeBudget { seconds: f64 },
    /// A trial's value reached the `target`.
    TargetReached { trial: TrialId, value: f64 },
    /// `no_improvement_trials` trials in a row did not beat `best`.
    NoImprovement { trials: u64, best: TrialId },
}

impl StopReason {
    /// Whether the sweep stopped because its trials fail (an error for the caller).
    pub fn is_failure(&self) -> bool {
        matches!(self, StopReason::Failing { .. })
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopReason::Failing {
                in_a_row,
                trial,
                error,
            } => write!(
                f,
                "{in_a_row} trials failed in a row ([stop] max_failed_trials); the last, trial {trial}: {error}"
            ),
            StopReason::TimeBudget { seconds } => {
                write!(f, "the time budget of {seconds} s is spent ([stop] time_budget_s)")
            }
            StopReason::TargetReached { trial, value } => {
                let value = tune_search::value_text(*value);
                write!(f, "trial {trial} reached the target with {value} ([stop] target)")
            }
            StopReason::NoImprovement { trials, best } => write!(
                f,
                "{trials} trials in a row did not beat trial {best} ([stop] no_improvement_trials)"
            ),
        }
    }
}

/// Watches trials end and says when a condition is met (the time budget is the
/// coordinator's, which owns the clock).
pub(crate) struct StopWatch {
    conditions: StopConditions,
    metric: String,
    mode: Mode,
    /// A trial outside `[constraints]` counts as one without a value.
    constraints: crate::spec::Constraints,
    failed_in_a_row: u32,
    best: Option<(TrialId, f64)>,
    without_improvement: u64,
}

impl StopWatch {
    /// Starts from the stored trials, taken in the order they ended (failures in a row are
    /// counted by this run only).
    pub(crate) fn new(
        conditions: StopConditions,
        (metric, mode): (&str, Mode),
        constraints: crate::spec::Constraints,
        trials: &[Trial],
    ) -> StopWatch {
        let mut watch = StopWatch {
            conditions,
            metric: metric.to_string(),
            mode,
            constraints,
            failed_in_a_row: 0,
            best: None,
            without_improvement: 0,
        };
        let mut ended: Vec<&Trial> = trials.iter().filter(|t| t.status.is_finished()).collect();
        ended.sort_by_key(|t| (t.end_seq.unwrap_or(0), t.id));
        for t in ended {
            watch.note_value(t);
        }
        watch.failed_in_a_row = 0;
        watch
    }

    /// Counts `t`'s value (a failed trial's counts as none) toward the best and the trials
    /// without improvement.
    fn note_value(&mut self, t: &Trial) {
        let value = t
            .value(&self.metric)
            .filter(|_| t.status != Status::Failed && self.constraints.feasible(t));
        let Some(value) = value else {
            self.without_improvement += 1;
            return;
        };
        let improved = self.best.is_none_or(|(_, b)| self.mode.better(value, b));
        if improved {
            self.best = Some((t.id, value));
            self.without_improvement = 0;
        } else {
            self.without_improvement += 1;
        }
    }

    /// The target or no-improvement condition the trials so far meet: at the start, what the
    /// stored trials already meet (a sweep resumed after it stopped).
    pub(crate) fn already_met(&self) -> Option<StopReason> {
        if let (Some(target), Some((trial, value))) = (self.conditions.target, self.best) {
            if !self.mode.better(target, value) {
                return Some(StopReason::TargetReached { trial, value });
            }
        }
        match (self.conditions.no_improvement_trials, self.best) {
            (Some(n), Some((best, _))) if self.without_improvement >= n => {
                Some(StopReason::NoImprovement { trials: n, best })
            }
            _ => None,
        }
    }

    /// Trial `t` has ended (completed, stopped or failed for good).
    pub(crate) fn on_finished(&mut self, t: &Trial) -> Option<StopReason> {
        if t.status == Status::Failed {
            self.failed_in_a_row += 1;
            let limit = self.conditions.max_failed_trials;
            if limit > 0 && self.failed_in_a_row >= limit {
                return Some(StopReason::Failing {
                    in_a_row: self.failed_in_a_row,
                    trial: t.id,
                    error: t.error.clone().unwrap_or_default(),
                });
            }
        } else {
            self.failed_in_a_row = 0;
        }
        self.note_value(t);
        self.already_met()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trial::TrialResult;

    fn ended(id: TrialId, status: Status, loss: Option<f64>) -> Trial {
        let mut t = Trial::new(id, Default::default());
        t.status = status;
        t.end_seq = Some(id);
        if let Some(loss) = loss {
            t.results.push(TrialResult {
                step: 1,
                seq: id,
                attempt: 1,
                metrics: [("loss".to_string(), loss)].into(),
            });
        }
        if status == Status::Failed {
            t.error = Some(format!("boom {id}"));
        }
        t
    }

    fn watch(conditions: StopConditions) -> StopWatch {
        StopWatch::new(conditions, ("loss", Mode::Min), Default::default(), &[])
    }

    #[test]
    fn failures_in_a_row_stop_the_sweep_and_a_success_resets_the_count() {
        let mut w = watch(StopConditions {
            max_failed_trials: 3,
            ..Default::default()
        });
        assert_eq!(w.on_finished(&ended(0, Status::Failed, None)), None);
        assert_eq!(w.on_finished(&ended(1, Status::Failed, None)), None);
        assert_eq!(w.on_finished(&ended(2, Status::Completed, Some(1.0))), None);
        assert_eq!(w.on_finished(&ended(3, Status::Failed, None)), None);
        assert_eq!(w.on_finished(&ended(4, Status::Failed, None)), None);
        let reason = w.on_finished(&ended(5, Status::Failed, None)).unwrap();
        assert_eq!(
            reason,
            StopReason::Failing {
                in_a_row: 3,
                trial: 5,
                error: "boom 5".into()
            }
        );
        assert!(reason.is_failure());
        assert!(
            reason.to_string().ends_with("the last, trial 5: boom 5"),
            "{reason}"
        );
        // 0: never.
        let mut w = watch(StopConditions {
            max_failed_trials: 0,
            ..Default::default()
        });
        assert!((0..100).all(|i| w.on_finished(&ended(i, Status::Failed, None)).is_none()));
    }

    #[test]
    fn the_target_is_reached_at_or_beyond_it_in_the_direction_of_mode() {
        let mut w = watch(StopConditions {
            target: Some(0.5),
            ..Default::default()
        });
        assert_eq!(w.on_finished(&ended(0, Status::Completed, Some(0.7))), None);
        // A failed trial's last value does not count.
        assert_eq!(w.on_finished(&ended(1, Status::Failed, Some(0.1))), None);
        assert_eq!(
            w.on_finished(&ended(2, Status::Stopped, Some(0.5))),
            Some(StopReason::TargetReached {
                trial: 2,
                value: 0.5
            })
        );
        let mut max = StopWatch::new(
            StopConditions {
                target: Some(0.9),
                ..Default::default()
            },
            ("loss", Mode::Max),
            Default::default(),
            &[],
        );
        assert_eq!(
            max.on_finished(&ended(0, Status::Completed, Some(0.5))),
            None
        );
        assert!(max
            .on_finished(&ended(1, Status::Completed, Some(0.95)))
            .is_some());
    }

    #[test]
    fn no_improvement_counts_trials_since_the_best_in_the_order_they_ended() {
        let conditions = StopConditions {
            no_improvement_trials: Some(2),
            ..Default::default()
        };
        let mut w = watch(conditions.clone());
        assert_eq!(w.on_finished(&ended(0, Status::Completed, Some(1.0))), None);
        assert_eq!(w.on_finished(&ended(1, Status::Completed, Some(2.0))), None);
        // An improvement resets the count; a tie is no improvement.
        assert_eq!(w.on_finished(&ended(2, Status::Completed, Some(0.5))), None);
        assert_eq!(w.on_finished(&ended(3, Status::Completed, Some(0.5))), None);
        assert_eq!(
            w.on_finished(&ended(4, Status::Failed, None)),
            Some(StopReason::NoImprovement { trials: 2, best: 2 })
        );
        // Rebuilt from stored trials (a resume): already met, in end order whatever the ids.
        let mut stored = vec![
            ended(0, Status::Completed, Some(0.5)),
            ended(1, Status::Completed, Some(1.0)),
            ended(2, Status::Completed, Some(2.0)),
        ];
        assert!(StopWatch::new(
            conditions.clone(),
            ("loss", Mode::Min),
            Default::default(),
            &stored
        )
        .already_met()
        .is_some());
        stored[0].end_seq = Some(9);
        assert_eq!(
            StopWatch::new(conditions, ("loss", Mode::Min), Default::default(), &stored)
                .already_met(),
            None
        );
    }

    #[test]
    fn bad_settings_are_named() {
        for (bad, key) in [
            (
                StopConditions {
                    time_budget_s: Some(0.0),
                    ..Default::default()
                },
                "time_budget_s",
            ),
            (
                StopConditions {
                    target: Some(f64::NAN),
                    ..Default::default()
                },
                "target",
            ),
            (
                StopConditions {
                    no_improvement_trials: Some(0),
                    ..Default::default()
                },
                "no_improvement_trials",
            ),
        ] {
            assert_eq!(bad.validate().unwrap_err().key, key);
        }
    }
}
