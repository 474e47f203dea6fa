//! `tune check`: whether a stored sweep kept what the protocol promises, so that an operator
//! can see damage of the kind a lost acknowledgement leaves: every trial's steps stored once
//! and in order, none missing where an attempt took over from another, and (for a sweep on
//! remote workers) no report answered with a decision whose result is not stored.

use std::fmt;

use tune_search::TrialId;

use crate::trial::Trial;

/// A report a remote worker sent and the coordinator answered (`tune_reports`), as
/// [`crate::remote::ExperimentReader::decided_reports`] reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct DecidedReport {
    pub trial: TrialId,
    pub attempt: u32,
    pub step: u64,
    /// What the trial heard: `continue`, `pause`, `stop`, `complete` or `refused`.
    pub heard: String,
}

/// What is wrong with one trial.
#[derive(Debug, Clone, PartialEq)]
pub enum Problem {
    /// A stored step not after the one stored before it.
    OutOfOrder { step: u64, after: u64 },
    /// Steps come every `stride` within each attempt, but none is stored between `after`
    /// (attempt `from`) and `step` (attempt `to`): a step was lost as one attempt took over.
    Missing {
        after: u64,
        from: u32,
        step: u64,
        to: u32,
        stride: u64,
    },
    /// The trial heard a decision for its report at `step` (attempt `attempt`), whose result
    /// is not stored, and it went on past that step: the step was taken as kept and is lost.
    DecidedNotStored {
        step: u64,
        attempt: u32,
        heard: String,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::OutOfOrder { step, after } => {
                write!(f, "step {step} is stored after step {after}")
            }
            Problem::Missing {
                after,
                from,
                step,
                to,
                stride,
            } => write!(
                f,
                "no step between {after} (attempt {from}) and {step} (attempt {to}), where its \
                 steps come every {stride}: a step was lost between attempts"
            ),
            Problem::DecidedNotStored {
                step,
                attempt,
                heard,
            } => write!(
                f,
                "its report at step {step} (attempt {attempt}) heard `{heard}` but no result is \
                 stored for it, and the trial went on past it"
            ),
        }
    }
}

/// One problem of one trial.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub trial: TrialId,
    pub problem: Problem,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "trial {}: {}", self.trial, self.problem)
    }
}

/// Every problem of `trials`, with `decided` the reports remote workers sent (empty for a
/// sweep run on one machine), in trial order.
///
/// ```
/// use tune::check::{check, Problem};
/// let mut t = tune::Trial::new(0, tune::Params::default());
/// for (step, attempt) in [(1, 1), (3, 3), (4, 3)] {
///     t.results.push(tune::TrialResult { step, seq: step, attempt, metrics: Default::default() });
/// }
/// let found = check(&[t], &[]);
/// assert!(matches!(found[0].problem, Problem::Missing { after: 1, step: 3, stride: 1, .. }));
/// ```
pub fn check(trials: &[Trial], decided: &[DecidedReport]) -> Vec<Finding> {
    let mut found = Vec::new();
    for t in trials {
        let mut problems = steps_problems(t);
        problems.extend(unstored_decisions(t, decided));
        found.extend(problems.into_iter().map(|problem| Finding {
            trial: t.id,
            problem,
        }));
    }
    found
}

fn steps_problems(t: &Trial) -> Vec<Problem> {
    let mut problems = Vec::new();
    for pair in t.results.windows(2) {
        if pair[1].step <= pair[0].step {
            problems.push(Problem::OutOfOrder {
                step: pair[1].step,
                after: pair[0].step,
            });
        }
    }
    if !problems.is_empty() {
        return problems;
    }
    // The stride within attempts, where it is one: only then is a wider gap between
    // attempts a step missing (a trial may report every 10 steps, or at steps of its own).
    let within: Vec<u64> = t
        .results
        .windows(2)
        .filter(|p| p[0].attempt == p[1].attempt)
        .map(|p| p[1].step - p[0].step)
        .collect();
    let Some(&stride) = within.first() else {
        return problems;
    };
    if within.iter().any(|&d| d != stride) {
        return problems;
    }
    // A trial's first step is its stride too when it starts at it (1, 2, 3 or 10, 20, 30).
    for pair in t.results.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if a.attempt != b.attempt && b.step - a.step > stride {
            problems.push(Problem::Missing {
                after: a.step,
                from: a.attempt,
                step: b.step,
                to: b.attempt,
                stride,
            });
        }
    }
    problems
}

fn unstored_decisions(t: &Trial, decided: &[DecidedReport]) -> Vec<Problem> {
    let last = t.last_step().unwrap_or(0);
    decided
        .iter()
        .filter(|d| d.trial == t.id && d.heard != "refused" && d.step < last)
        .filter(|d| !t.results.iter().any(|r| r.step == d.step))
        .map(|d| Problem::DecidedNotStored {
            step: d.step,
            attempt: d.attempt,
            heard: d.heard.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trial::TrialResult;

    fn trial(id: TrialId, steps: &[(u64, u32)]) -> Trial {
        let mut t = Trial::new(id, Default::default());
        t.results = steps
            .iter()
            .enumerate()
            .map(|(i, &(step, attempt))| TrialResult {
                step,
                seq: i as u64,
                attempt,
                metrics: Default::default(),
            })
            .collect();
        t
    }

    #[test]
    fn dense_steps_across_attempts_and_strides_of_their_own_are_clean() {
        let clean = [
            trial(0, &[(1, 1), (2, 1), (3, 2), (4, 3)]),
            trial(1, &[(10, 1), (20, 1), (30, 2)]),
            // Irregular steps: nothing to judge a gap by.
            trial(2, &[(1, 1), (2, 1), (4, 1), (9, 2)]),
            trial(3, &[]),
            trial(4, &[(5, 2)]),
        ];
        assert_eq!(check(&clean, &[]), []);
    }

    #[test]
    fn the_lost_step_of_a_restart_is_found_both_ways() {
        // The report's trial 3: steps [1, 3, 4, ...], attempt 2's step 2 heard `stop`.
        let t = trial(3, &[(1, 1), (3, 3), (4, 3), (5, 3)]);
        let decided = [
            DecidedReport {
                trial: 3,
                attempt: 2,
                step: 2,
                heard: "stop".into(),
            },
            DecidedReport {
                trial: 3,
                attempt: 3,
                step: 3,
                heard: "continue".into(),
            },
        ];
        let found = check(&[t], &decided);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(
            found[0].to_string(),
            "trial 3: no step between 1 (attempt 1) and 3 (attempt 3), where its steps come \
             every 1: a step was lost between attempts"
        );
        assert_eq!(
            found[1].to_string(),
            "trial 3: its report at step 2 (attempt 2) heard `stop` but no result is stored for \
             it, and the trial went on past it"
        );
    }

    #[test]
    fn refused_and_last_reports_are_not_losses_but_steps_out_of_order_are() {
        let t = trial(0, &[(1, 1), (2, 1)]);
        let decided = [
            DecidedReport {
                trial: 0,
                attempt: 1,
                step: 2,
                heard: "refused".into(),
            },
            // A late report after the trial's end: it did not go on past it.
            DecidedReport {
                trial: 0,
                attempt: 1,
                step: 3,
                heard: "stop".into(),
            },
        ];
        assert_eq!(check(&[t], &decided), []);
        let backwards = trial(1, &[(1, 1), (2, 1), (3, 1), (2, 1), (4, 1)]);
        assert_eq!(
            check(&[backwards], &[])[0].problem,
            Problem::OutOfOrder { step: 2, after: 3 }
        );
    }
}
