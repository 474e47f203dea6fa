//! Trials of an earlier sweep that a searcher learns from as if they were this sweep's oldest
//! (SageMaker's warm start, `tune run --warm-start`).

use serde::{Deserialize, Serialize};

use crate::{History, Params, Searcher, Status, Suggestion, TrialId};

/// A completed trial of an earlier sweep: its params and the value of the metric it ended with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PriorTrial {
    pub params: Params,
    pub value: f64,
}

/// `searcher` with `prior` trials in its history before this sweep's: they take ids
/// `0..prior.len()`, this sweep's trials follow (so they count as older for TPE's forgetting),
/// and a suggestion for trial `id` is the searcher's for `id + prior.len()`: a pure function of
/// the seed, the id, the prior trials and the history, as any suggestion.
///
/// ```
/// use tune_search::{History, Mode, Params, PriorTrial, Searcher, Space, Tpe, TpeOptions, Value, WithPriorTrials};
/// let space = Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
/// let prior: Vec<PriorTrial> = (0..20)
///     .map(|i| {
///         let x = i as f64 / 20.0;
///         let mut params = Params::default();
///         params.insert("x", Value::Float(x));
///         PriorTrial { params, value: (x - 0.3).powi(2) }
///     })
///     .collect();
/// let tpe = Tpe::new(space, 0, TpeOptions::default());
/// let mut s = WithPriorTrials::new(prior, Box::new(tpe));
/// // Past its startup trials from the first suggestion: TPE proposes near x = 0.3.
/// let x = s.suggest(0, &History::new(Mode::Min)).unwrap().f64("x").unwrap();
/// assert!((x - 0.3).abs() < 0.2, "{x}");
/// ```
pub struct WithPriorTrials {
    prior: Vec<PriorTrial>,
    searcher: Box<dyn Searcher>,
}

impl WithPriorTrials {
    pub fn new(prior: Vec<PriorTrial>, searcher: Box<dyn Searcher>) -> WithPriorTrials {
        WithPriorTrials { prior, searcher }
    }

    fn offset(&self) -> TrialId {
        self.prior.len() as TrialId
    }

    /// The prior trials, then `history`'s with their ids moved past them.
    fn merged(&self, history: &History) -> History {
        let mut merged = History::with_objectives(history.objectives().to_vec());
        for (id, trial) in self.prior.iter().enumerate() {
            let id = id as TrialId;
            merged.record(id, trial.params.clone(), Status::Running);
            merged.report(id, 1, trial.value);
            merged.set_status(id, Status::Completed);
        }
        for o in history.iter() {
            let id = o.id + self.offset();
            merged.record(id, o.params.clone(), o.status);
            if let Some(step) = o.last_step {
                merged.report_values(id, step, &o.values);
            }
            merged.report_constraints(id, &o.constraints);
        }
        merged
    }
}

impl Searcher for WithPriorTrials {
    fn suggest(&mut self, id: TrialId, history: &History) -> Option<Params> {
        self.suggest_with_reason(id, history).map(|s| s.params)
    }

    fn suggest_with_reason(&mut self, id: TrialId, history: &History) -> Option<Suggestion> {
        let merged = self.merged(history);
        self.searcher
            .suggest_with_reason(id + self.offset(), &merged)
    }

    fn total_trials(&self, samples: u64) -> u64 {
        self.searcher.total_trials(samples)
    }

    fn reads_history(&self) -> bool {
        self.searcher.reads_history()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Mode, Value};

    type Asked = Vec<(TrialId, Vec<(TrialId, Status, Option<f64>)>)>;

    /// Records what it was asked: the id and the history's trials.
    struct Spy(std::sync::Arc<std::sync::Mutex<Asked>>);

    impl Searcher for Spy {
        fn suggest(&mut self, id: TrialId, history: &History) -> Option<Params> {
            let seen = history.iter().map(|o| (o.id, o.status, o.value)).collect();
            self.0.lock().unwrap().push((id, seen));
            Some(Params::default())
        }
    }

    #[test]
    fn the_prior_trials_come_first_and_this_sweeps_follow_them() {
        let prior = |v: f64| PriorTrial {
            params: Params::from_iter([("x".to_string(), Value::Float(v))]),
            value: v,
        };
        let asked = std::sync::Arc::default();
        let spy = Box::new(Spy(std::sync::Arc::clone(&asked)));
        let mut with = WithPriorTrials::new(vec![prior(0.5), prior(0.25)], spy);
        let mut history = History::new(Mode::Min);
        history.record(0, Params::default(), Status::Running);
        history.report(0, 3, 0.75);
        history.set_status(0, Status::Completed);
        history.record(1, Params::default(), Status::Running);
        with.suggest(2, &history);
        assert_eq!(
            *asked.lock().unwrap(),
            vec![(
                4,
                vec![
                    (0, Status::Completed, Some(0.5)),
                    (1, Status::Completed, Some(0.25)),
                    (2, Status::Completed, Some(0.75)),
                    (3, Status::Running, None),
                ]
            )]
        );
    }
}
