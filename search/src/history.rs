//! What searchers see of the sweep so far.

use serde::{Deserialize, Serialize};

use crate::Params;

/// Dense trial number, in creation order.
pub type TrialId = u64;

/// Whether the metric is minimised or maximised.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Min,
    Max,
}

impl Mode {
    /// The mode as the spec writes it: `"min"` or `"max"`.
    ///
    /// ```
    /// assert_eq!(tune_search::Mode::Max.as_str(), "max");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Min => "min",
            Mode::Max => "max",
        }
    }

    /// Whether `a` is strictly better than `b` in this mode.
    ///
    /// ```
    /// use tune_search::Mode;
    /// assert!(Mode::Min.better(1.0, 2.0));
    /// assert!(Mode::Max.better(2.0, 1.0));
    /// ```
    pub fn better(self, a: f64, b: f64) -> bool {
        match self {
            Mode::Min => a < b,
            Mode::Max => a > b,
        }
    }

    /// Whether trial `candidate` (id, value) takes the incumbent's place as the best trial:
    /// a better value, or the same value and a lower id. The one rule for "the best trial",
    /// wherever it is picked (search history, results, status, dashboard, progress line).
    ///
    /// ```
    /// use tune_search::Mode;
    /// assert!(Mode::Min.beats((5, 1.0), (2, 2.0)));
    /// assert!(Mode::Min.beats((1, 2.0), (2, 2.0))); // a tie goes to the lower id
    /// assert!(!Mode::Min.beats((3, 2.0), (2, 2.0)));
    /// ```
    pub fn beats(self, candidate: (TrialId, f64), incumbent: (TrialId, f64)) -> bool {
        self.better(candidate.1, incumbent.1)
            || (candidate.1 == incumbent.1 && candidate.0 < incumbent.0)
    }

    /// The best of (id, value) pairs by [`Mode::beats`], in whatever order they come.
    ///
    /// ```
    /// use tune_search::Mode;
    /// let best = Mode::Max.best_of([(4, 0.9), (1, 0.9), (2, 0.5)]);
    /// assert_eq!(best, Some((1, 0.9)));
    /// ```
    pub fn best_of(
        self,
        trials: impl IntoIterator<Item = (TrialId, f64)>,
    ) -> Option<(TrialId, f64)> {
        trials.into_iter().fold(None, |best, t| match best {
            Some(b) if !self.beats(t, b) => Some(b),
            _ => Some(t),
        })
    }
}

/// Where a trial is in its life: `Pending -> Running -> (Paused -> Running ->) Completed | Stopped | Failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Created, waiting for a slot (or re-queued after an interrupted run).
    Pending,
    Running,
    /// Checkpointed and waiting for the scheduler to resume or end it.
    Paused,
    /// Ran to its end.
    Completed,
    /// Ended early by the scheduler.
    Stopped,
    /// The objective failed (error, non-zero exit, bad metric, timeout).
    Failed,
}

impl Status {
    /// Completed, stopped and failed trials are final; they are never run again.
    pub fn is_finished(self) -> bool {
        matches!(self, Status::Completed | Status::Stopped | Status::Failed)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Running => "running",
            Status::Paused => "paused",
            Status::Completed => "completed",
            Status::Stopped => "stopped",
            Status::Failed => "failed",
        }
    }
}

/// A searcher's view of one trial.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    pub id: TrialId,
    pub params: Params,
    pub status: Status,
    /// The metric at the last report (Ray Tune's `scope="last"`), when there was one; with
    /// several objectives, the first's.
    pub value: Option<f64>,
    /// Every objective's value at the last report, in the order of [`History::objectives`]
    /// (empty before the first report).
    pub values: Vec<f64>,
    /// The constraints' values at the last report, each feasible at or below 0 (Optuna's
    /// convention); empty in a sweep without constraints.
    pub constraints: Vec<f64>,
    /// The step of the last report.
    pub last_step: Option<u64>,
    /// The (first) objective at every step reported, by step (Optuna's
    /// `intermediate_values`): what a model fitted at a rung reads.
    pub intermediate: Vec<(u64, f64)>,
}

impl Observation {
    /// How far the trial is from meeting its constraints: the sum of the constraint values
    /// above 0 (Optuna's violation score); 0 when feasible or unconstrained.
    pub fn violation(&self) -> f64 {
        self.constraints.iter().map(|c| c.max(0.0)).sum()
    }

    /// Meets every constraint (or has none).
    pub fn feasible(&self) -> bool {
        self.violation() == 0.0
    }

    /// The (first) objective reported at `step`, if the trial reported there.
    ///
    /// ```
    /// use tune_search::{History, Mode, Params, Status};
    /// let mut h = History::new(Mode::Min);
    /// h.record(0, Params::default(), Status::Running);
    /// for (step, v) in [(1, 0.9), (3, 0.5), (9, 0.2)] {
    ///     h.report(0, step, v);
    /// }
    /// let t = h.get(0).unwrap();
    /// assert_eq!((t.value_at(3), t.value_at(4), t.value), (Some(0.5), None, Some(0.2)));
    /// ```
    pub fn value_at(&self, step: u64) -> Option<f64> {
        self.intermediate
            .binary_search_by_key(&step, |&(s, _)| s)
            .ok()
            .map(|i| self.intermediate[i].1)
    }
}

/// Every trial of the sweep, running ones included, indexed by id.
///
/// ```
/// use tune_search::{History, Mode, Params, Status};
/// let mut h = History::new(Mode::Min);
/// h.record(0, Params::default(), Status::Running);
/// h.report(0, 1, 3.5);
/// h.set_status(0, Status::Completed);
/// assert_eq!(h.best().unwrap().value, Some(3.5));
/// ```
#[derive(Debug, Clone)]
pub struct History {
    mode: Mode,
    /// One direction per objective; `mode` is the first.
    objectives: Vec<Mode>,
    trials: Vec<Observation>,
}

impl History {
    pub fn new(mode: Mode) -> History {
        History {
            mode,
            objectives: vec![mode],
            trials: Vec::new(),
        }
    }

    /// A history of a sweep with several objectives, one direction each (none: one minimised).
    ///
    /// ```
    /// use tune_search::{History, Mode, Params, Status};
    /// let mut h = History::with_objectives(vec![Mode::Min, Mode::Max]);
    /// h.record(0, Params::default(), Status::Running);
    /// h.report_values(0, 1, &[0.3, 12.0]);
    /// assert_eq!(h.get(0).unwrap().values, [0.3, 12.0]);
    /// assert_eq!(h.losses(h.get(0).unwrap()), Some(vec![0.3, -12.0]));
    /// ```
    pub fn with_objectives(objectives: Vec<Mode>) -> History {
        let objectives = if objectives.is_empty() {
            vec![Mode::Min]
        } else {
            objectives
        };
        History {
            mode: objectives[0],
            objectives,
            trials: Vec::new(),
        }
    }

    /// The direction of the (first) objective.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Every objective's direction.
    pub fn objectives(&self) -> &[Mode] {
        &self.objectives
    }

    /// A trial's last values as losses (maximised objectives negated), when it reported every
    /// objective and all are finite: what dominance and hypervolume compare.
    pub fn losses(&self, t: &Observation) -> Option<Vec<f64>> {
        if t.values.len() != self.objectives.len() || t.values.iter().any(|v| !v.is_finite()) {
            return None;
        }
        Some(
            t.values
                .iter()
                .zip(&self.objectives)
                .map(|(&v, m)| if *m == Mode::Max { -v } else { v })
                .collect(),
        )
    }

    /// Adds trial `id` (ids are dense: `id` must be `len()`), or replaces its params and status.
    pub fn record(&mut self, id: TrialId, params: Params, status: Status) {
        let obs = Observation {
            id,
            params,
            status,
            value: None,
            values: Vec::new(),
            constraints: Vec::new(),
            last_step: None,
            intermediate: Vec::new(),
        };
        match self.trials.get_mut(id as usize) {
            Some(slot) => *slot = obs,
            None => {
                debug_assert_eq!(id as usize, self.trials.len(), "trial ids are dense");
                self.trials.push(obs);
            }
        }
    }

    /// Notes a report of the metric at `step`.
    pub fn report(&mut self, id: TrialId, step: u64, value: f64) {
        self.report_values(id, step, &[value]);
    }

    /// Notes a report of every objective at `step` (in the order of [`History::objectives`]).
    pub fn report_values(&mut self, id: TrialId, step: u64, values: &[f64]) {
        if let Some(t) = self.trials.get_mut(id as usize) {
            t.value = values.first().copied();
            t.values.clear();
            t.values.extend_from_slice(values);
            t.last_step = Some(step);
            if let Some(&v) = values.first() {
                // Reports come in step order; a repeated step keeps its latest value.
                match t.intermediate.binary_search_by_key(&step, |&(s, _)| s) {
                    Ok(i) => t.intermediate[i].1 = v,
                    Err(i) => t.intermediate.insert(i, (step, v)),
                }
            }
        }
    }

    /// Notes the constraints' values at the trial's last report (each feasible at or below 0).
    ///
    /// ```
    /// use tune_search::{History, Mode, Params, Status};
    /// let mut h = History::new(Mode::Min);
    /// h.record(0, Params::default(), Status::Running);
    /// h.report(0, 1, 0.5);
    /// h.report_constraints(0, &[-1.0, 0.25, 0.5]);
    /// assert_eq!(h.get(0).unwrap().violation(), 0.75);
    /// assert!(!h.get(0).unwrap().feasible());
    /// ```
    pub fn report_constraints(&mut self, id: TrialId, constraints: &[f64]) {
        if let Some(t) = self.trials.get_mut(id as usize) {
            t.constraints.clear();
            t.constraints.extend_from_slice(constraints);
        }
    }

    /// Replaces a trial's params (population-based training), keeping its status and results.
    pub fn set_params(&mut self, id: TrialId, params: Params) {
        if let Some(t) = self.trials.get_mut(id as usize) {
            t.params = params;
        }
    }

    /// Moves a trial to `status` (started, finished, re-queued).
    pub fn set_status(&mut self, id: TrialId, status: Status) {
        if let Some(t) = self.trials.get_mut(id as usize) {
            t.status = status;
        }
    }

    pub fn get(&self, id: TrialId) -> Option<&Observation> {
        self.trials.get(id as usize)
    }

    pub fn len(&self) -> usize {
        self.trials.len()
    }

    pub fn is_empty(&self) -> bool {
        self.trials.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Observation> {
        self.trials.iter()
    }

    /// The highest step at which a trial stopped, completed or paused and at least `n_min`
    /// trials (not failed) reported: the budget a model fitted at a rung reads (BOHB's "largest
    /// budget with enough observations", Falkner et al. 2018).
    ///
    /// ```
    /// use tune_search::{History, Mode, Params, Status};
    /// let mut h = History::new(Mode::Min);
    /// for id in 0..3 {
    ///     h.record(id, Params::default(), Status::Running);
    ///     h.report(id, 1, 0.5);
    /// }
    /// h.report(0, 3, 0.2);
    /// for id in 0..3 {
    ///     h.set_status(id, Status::Stopped);
    /// }
    /// assert_eq!((h.rung_step(3), h.rung_step(1), h.rung_step(4)), (Some(1), Some(3), None));
    /// ```
    pub fn rung_step(&self, n_min: usize) -> Option<u64> {
        let mut steps: Vec<u64> = self
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
        steps
            .into_iter()
            .rev()
            .find(|&s| self.reported_at(s) >= n_min)
    }

    /// How many trials (not failed) reported at `step`: what a model fitted there reads.
    pub(crate) fn reported_at(&self, step: u64) -> usize {
        self.iter()
            .filter(|t| t.status != Status::Failed && t.value_at(step).is_some())
            .count()
    }

    /// This history as a model fitted at `step` reads it: every trial (not failed) that
    /// reported there completed with that value (and its last constraints); the running and
    /// pending trials that did not, still running; the rest (stopped or paused below it, failed) failed, which
    /// models leave out. Ids stay the same.
    pub(crate) fn at_step(&self, step: u64) -> History {
        let mut view = History::with_objectives(vec![self.mode]);
        for t in self.iter() {
            let status = match t.value_at(step) {
                Some(_) if t.status != Status::Failed => Status::Completed,
                _ if matches!(t.status, Status::Running | Status::Pending) => t.status,
                _ => Status::Failed,
            };
            view.record(t.id, t.params.clone(), status);
            if let (Status::Completed, Some(v)) = (status, t.value_at(step)) {
                view.report(t.id, step, v);
                // Constraints are reported with every value: the last ones stand for the rung's.
                view.report_constraints(t.id, &t.constraints);
            }
        }
        view
    }

    /// The completed trial with the best value ([`Mode::beats`]: ties go to the lower id),
    /// among those that meet their constraints.
    pub fn best(&self) -> Option<&Observation> {
        let completed = self
            .trials
            .iter()
            .filter(|t| t.status == Status::Completed && t.feasible())
            .filter_map(|t| Some((t.id, t.value?)));
        let (id, _) = self.mode.best_of(completed)?;
        self.get(id)
    }
}
