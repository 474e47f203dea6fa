//! Rebuilding a scheduler from a stored sweep: what `resume` does before it goes on, and what
//! `tune status` and the dashboard show of a sweep that is not running.

use std::collections::HashMap;

use tune_schedulers::{Decision, Scheduler};
use tune_search::{Status, TrialId};

use crate::spec::ExperimentSpec;
use crate::trial::Trial;

/// Rebuilds a scheduler's state from stored trials: every result in the order the coordinator
/// received it, and each finished trial's completion right after its last result.
///
/// Returns the decisions the store has not caught up with: an unfinished trial whose last
/// result the scheduler answers with more than `Continue`, because a kill came after the
/// result was stored and before the decision's effect was (a paused trial's was).
pub(crate) fn replay(
    scheduler: &mut dyn Scheduler,
    trials: &[Trial],
    metric: &str,
) -> Vec<(TrialId, u64, Decision)> {
    enum Step {
        Result(TrialId, u64, f64),
        Complete(TrialId, Option<(u64, f64)>),
    }
    // Trials joined in id order (a synchronous scheduler fills its brackets that way).
    for t in trials {
        scheduler.on_trial_add(t.id, t.original_params());
    }
    let mut events: Vec<(u64, u8, Step)> = Vec::new();
    for t in trials {
        for r in &t.results {
            if let Some(&v) = r.metrics.get(metric) {
                events.push((r.seq, 0, Step::Result(t.id, r.step, v)));
            }
        }
        if t.status.is_finished() {
            if let Some(last) = t.results.last() {
                let final_result = t.last_step().zip(t.value(metric));
                events.push((last.seq, 1, Step::Complete(t.id, final_result)));
            }
        }
    }
    events.sort_by_key(|e| (e.0, e.1));
    let mut last_decision: HashMap<TrialId, (u64, Decision)> = HashMap::new();
    for (_, _, step) in events {
        match step {
            Step::Result(id, s, v) => {
                let decision = scheduler.on_result(id, s, v);
                last_decision.insert(id, (s, decision));
            }
            Step::Complete(id, last) => scheduler.on_complete(id, last),
        }
    }
    trials
        .iter()
        .filter(|t| !t.status.is_finished() && t.status != Status::Paused)
        .filter_map(|t| {
            let (step, decision) = last_decision.remove(&t.id)?;
            (decision != Decision::Continue).then_some((t.id, step, decision))
        })
        .collect()
}

/// What the sweep's scheduler would say about itself after these trials (a finished or
/// interrupted sweep, rebuilt by replaying its results as `resume` does).
pub fn scheduler_status(spec: &ExperimentSpec, trials: &[Trial]) -> Vec<String> {
    let mut scheduler = spec.make_scheduler();
    let _undelivered = replay(scheduler.as_mut(), trials, &spec.metric);
    scheduler.describe()
}
