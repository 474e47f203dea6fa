//! Rebuilding a scheduler from a stored sweep: what `resume` does before it goes on, and what
//! `tune status` and the dashboard show of a sweep that is not running.

use std::collections::HashMap;

use tune_schedulers::{Decision, Scheduler};
use tune_search::{Status, TrialId};

use crate::store::StoredExperiment;
use crate::trial::Trial;

/// Rebuilds a scheduler's state from stored trials, feeding it what the coordinator fed it, in
/// the same order: every trial's arrival (`all_added`: then that no more will come), every
/// result by `seq`, and each finished trial's end where it happened (`Trial::end_seq`).
///
/// Returns the decisions the store has not caught up with: an unfinished trial whose last
/// result, from its latest attempt, the scheduler answers with more than `Continue`, because
/// a kill came after the result was stored and before the decision's effect was (a paused
/// trial's was).
pub(crate) fn replay(
    scheduler: &mut dyn Scheduler,
    trials: &[Trial],
    metric: &str,
    all_added: bool,
) -> Vec<(TrialId, u64, Decision)> {
    enum Step {
        Result(TrialId, u64, f64),
        End(TrialId, Option<(u64, f64)>),
    }
    // Arrivals first, in id order: a trial is added before its first result, and what a
    // scheduler does on an arrival (a bracket to join) depends only on the arrivals before it.
    for t in trials {
        scheduler.on_trial_add(t.id, t.original_params());
    }
    if all_added {
        // Said when the last trial was added, before that trial's first result.
        scheduler.on_no_more_trials();
    }
    // (position, 0 for an end that came before the result at that position / 1 for a result).
    let mut events: Vec<(u64, u8, Step)> = Vec::new();
    for t in trials {
        for r in &t.results {
            if let Some(&v) = r.metrics.get(metric) {
                events.push((r.seq, 1, Step::Result(t.id, r.step, v)));
            }
        }
        if t.status.is_finished() {
            // Stores written before `end_seq` existed: right after the trial's last result.
            let at = t
                .end_seq
                .unwrap_or_else(|| t.results.last().map_or(0, |r| r.seq + 1));
            let final_result = t.last_step().zip(t.value(metric));
            events.push((at, 0, Step::End(t.id, final_result)));
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
            Step::End(id, last) => scheduler.on_complete(id, last),
        }
    }
    trials
        .iter()
        .filter(|t| !t.status.is_finished() && t.status != Status::Paused)
        // A trial relaunched since its last result (a paused one promoted, a failed one
        // retried) had that result's decision acted on: a new attempt starts only after it.
        .filter(|t| t.results.last().is_some_and(|r| r.attempt == t.attempts))
        .filter_map(|t| {
            let (step, decision) = last_decision.remove(&t.id)?;
            (decision != Decision::Continue).then_some((t.id, step, decision))
        })
        .collect()
}

/// What the sweep's scheduler would say about itself after its stored trials (a finished or
/// interrupted sweep, rebuilt by replaying its results as `resume` does).
///
/// ```no_run
/// let exp = tune::experiment::Experiment::open("runs/quadratic".as_ref())?;
/// for line in tune::scheduler_status(&exp.stored) {
///     println!("{line}");
/// }
/// # Ok::<(), tune::TuneError>(())
/// ```
pub fn scheduler_status(stored: &StoredExperiment) -> Vec<String> {
    let spec = &stored.meta.spec;
    let budget = spec
        .make_searcher()
        .map_or(stored.meta.samples, |s| s.total_trials(stored.meta.samples));
    let all_added = stored.trials.len() as u64 >= budget;
    let mut scheduler = spec.make_scheduler();
    let _undelivered = replay(scheduler.as_mut(), &stored.trials, &spec.metric, all_added);
    scheduler.describe()
}
