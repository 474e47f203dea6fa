//! What TPE keeps between suggestions so that none of them sorts the whole history: the
//! ranking of finished trials, and each parameter's values in sorted order. Both are updated
//! from the history on every suggestion, touching only trials whose state changed.

use std::cmp::Ordering;

use super::coords::TrialCoords;
use crate::{History, Mode, Observation, Status, TrialId};

/// How a trial takes part in the model.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Role {
    /// Not modelled (failed, or running without the constant liar).
    Out,
    /// Completed, with its sign-adjusted value (lower is better).
    Complete(f64),
    /// Stopped at `step` with its sign-adjusted value there.
    Stopped(u64, f64),
    /// Completed outside its constraints, by how far (ranked after every feasible trial).
    Infeasible(f64),
    /// Running or pending under the constant liar: always on the bad side.
    Liar,
}

fn by_value(a: &(f64, TrialId), b: &(f64, TrialId)) -> Ordering {
    a.0.total_cmp(&b.0).then(a.1.cmp(&b.1))
}

/// Deepest step first, then value, then id.
fn by_depth(a: &(u64, f64, TrialId), b: &(u64, f64, TrialId)) -> Ordering {
    b.0.cmp(&a.0).then(a.1.total_cmp(&b.1)).then(a.2.cmp(&b.2))
}

fn insert<T>(v: &mut Vec<T>, x: T, cmp: impl Fn(&T, &T) -> Ordering) {
    let at = v.binary_search_by(|y| cmp(y, &x)).unwrap_or_else(|e| e);
    v.insert(at, x);
}

fn remove<T>(v: &mut Vec<T>, x: &T, cmp: impl Fn(&T, &T) -> Ordering) {
    if let Ok(at) = v.binary_search_by(|y| cmp(y, x)) {
        v.remove(at);
    }
}

/// Completed or stopped with a value: what the startup counts, and what sets the deepest step.
fn ended_with_value(t: &Observation) -> bool {
    matches!(t.status, Status::Completed | Status::Stopped) && t.value.is_some()
}

/// Incrementally maintained ranking and per-parameter orders.
#[derive(Debug, Clone, Default)]
pub(crate) struct TrialIndex {
    mode: Option<Mode>,
    liar: bool,
    roles: Vec<Role>,
    /// Trials completed or stopped with a value, modelled or not.
    ended: usize,
    complete: Vec<(f64, TrialId)>,
    stopped: Vec<(u64, f64, TrialId)>,
    /// (violation, id) of the infeasible completed trials.
    infeasible: Vec<(f64, TrialId)>,
    /// Per parameter: (internal value, id) of every modelled trial where it is active.
    by_param: Vec<Vec<(f64, TrialId)>>,
}

impl TrialIndex {
    /// Brings the index up to date with `history`; `coords[id]` are the trials' internal
    /// coordinates (NaN where inactive). Stopped trials that did not reach `min_depth` times
    /// the deepest step of any finished trial are left out (see `TpeOptions::stopped_min_depth`).
    /// With `at_step`, only the values reported at that step are modelled, whatever the
    /// trial's state (`Fidelity::Rung`), and the trials that never reached it are left out.
    pub(crate) fn sync(
        &mut self,
        history: &History,
        coords: &TrialCoords,
        params: usize,
        liar: bool,
        min_depth: f64,
        at_step: Option<u64>,
    ) {
        if self.mode != Some(history.mode())
            || self.liar != liar
            || history.len() < self.roles.len()
        {
            *self = TrialIndex {
                mode: Some(history.mode()),
                liar,
                by_param: vec![Vec::new(); params],
                ..TrialIndex::default()
            };
        }
        let sign = if history.mode() == Mode::Max {
            -1.0
        } else {
            1.0
        };
        // Only needed (a pass over the history) when shallow stopped trials are left out.
        let deepest = if min_depth > 0.0 && at_step.is_none() {
            history
                .iter()
                .filter(|t| ended_with_value(t))
                .filter_map(|t| t.last_step)
                .max()
                .unwrap_or(0)
        } else {
            0
        };
        let shallow = |step: u64| (step as f64) < min_depth * deepest as f64;
        self.roles.resize(history.len(), Role::Out);
        self.ended = 0;
        for t in history.iter() {
            self.ended += usize::from(ended_with_value(t));
            let at_rung = at_step.filter(|_| t.status != Status::Failed);
            let role = match (at_rung.and_then(|s| t.value_at(s)), t.status, t.value) {
                (Some(_), Status::Completed | Status::Stopped, _) if !t.feasible() => {
                    Role::Infeasible(t.violation())
                }
                (Some(v), ..) => Role::Complete(sign * v),
                (None, Status::Running | Status::Pending | Status::Paused, _) if liar => Role::Liar,
                (None, ..) if at_rung.is_some() => Role::Out,
                (None, status, value) => match (status, value) {
                    (Status::Completed, Some(_)) if !t.feasible() => {
                        Role::Infeasible(t.violation())
                    }
                    (Status::Completed, Some(v)) => Role::Complete(sign * v),
                    (Status::Stopped, Some(_)) if shallow(t.last_step.unwrap_or(0)) => Role::Out,
                    (Status::Stopped, Some(_)) if !t.feasible() => Role::Infeasible(t.violation()),
                    (Status::Stopped, Some(v)) => Role::Stopped(t.last_step.unwrap_or(0), sign * v),
                    _ => Role::Out,
                },
            };
            let old = self.roles[t.id as usize];
            if old == role {
                continue;
            }
            self.move_trial(t.id, old, role, coords);
            self.roles[t.id as usize] = role;
        }
    }

    /// Moves trial `id` from the list of its `old` role to that of its new `role`, and into
    /// or out of the per-parameter lists (at its `coords`) as it becomes modelled or not.
    fn move_trial(&mut self, id: TrialId, old: Role, role: Role, coords: &TrialCoords) {
        match old {
            Role::Complete(v) => remove(&mut self.complete, &(v, id), by_value),
            Role::Stopped(s, v) => remove(&mut self.stopped, &(s, v, id), by_depth),
            Role::Infeasible(v) => remove(&mut self.infeasible, &(v, id), by_value),
            _ => {}
        }
        match role {
            Role::Complete(v) => insert(&mut self.complete, (v, id), by_value),
            Role::Stopped(s, v) => insert(&mut self.stopped, (s, v, id), by_depth),
            Role::Infeasible(v) => insert(&mut self.infeasible, (v, id), by_value),
            _ => {}
        }
        let (was, is) = (old != Role::Out, role != Role::Out);
        if was != is {
            if let Some(c) = coords.get(id) {
                for (p, &x) in c.iter().enumerate().filter(|(_, x)| !x.is_nan()) {
                    if is {
                        insert(&mut self.by_param[p], (x, id), by_value);
                    } else {
                        remove(&mut self.by_param[p], &(x, id), by_value);
                    }
                }
            }
        }
    }

    /// Trials that ended (completed or stopped) with a value, modelled or not.
    pub(crate) fn ended(&self) -> usize {
        self.ended
    }

    /// Modelled completed plus stopped trials.
    pub(crate) fn finished(&self) -> usize {
        self.complete.len() + self.stopped.len() + self.infeasible.len()
    }

    /// Optuna's split: completed trials by value, then stopped ones by deepest step and value,
    /// then the infeasible by how far they are from their constraints; the best `n_below` are
    /// good, every other modelled trial (the liars too) is bad.
    /// Fills `good` with a flag per trial id: good?
    pub(crate) fn below_into(&self, n_below: usize, good: &mut Vec<bool>) {
        good.clear();
        good.resize(self.roles.len(), false);
        let ranked = self
            .complete
            .iter()
            .map(|c| c.1)
            .chain(self.stopped.iter().map(|s| s.2))
            .chain(self.infeasible.iter().map(|s| s.1));
        for id in ranked.take(n_below) {
            good[id as usize] = true;
        }
    }

    /// Whether trial `id` is modelled at all.
    pub(crate) fn modelled(&self, id: TrialId) -> bool {
        self.roles.get(id as usize).is_some_and(|r| *r != Role::Out)
    }

    /// Ids of the modelled trials where parameter `p` is active, by (value, id).
    pub(crate) fn sorted(&self, p: usize) -> impl Iterator<Item = TrialId> + '_ {
        self.by_param[p].iter().map(|&(_, id)| id)
    }

    pub(crate) fn len(&self) -> usize {
        self.roles.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Params;

    /// Trials 0..4: completed at step 81, stopped at 1, 3, 9 and 27 (values 0.5, 0.1, 0.2,
    /// 0.3, 0.4: the shallow ones look best, as fast starters do).
    fn history() -> History {
        let mut h = History::new(Mode::Min);
        for (id, (status, step, value)) in [
            (Status::Completed, 81, 0.5),
            (Status::Stopped, 1, 0.1),
            (Status::Stopped, 3, 0.2),
            (Status::Stopped, 9, 0.3),
            (Status::Stopped, 27, 0.4),
        ]
        .into_iter()
        .enumerate()
        {
            h.record(id as TrialId, Params::default(), Status::Running);
            h.report(id as TrialId, step, value);
            h.set_status(id as TrialId, status);
        }
        h
    }

    fn good(index: &TrialIndex, n: usize) -> Vec<TrialId> {
        let mut flags = Vec::new();
        index.below_into(n, &mut flags);
        (0..flags.len() as TrialId)
            .filter(|&id| flags[id as usize])
            .collect()
    }

    #[test]
    fn stopped_trials_rank_by_depth_then_value() {
        let mut index = TrialIndex::default();
        index.sync(&history(), &TrialCoords::default(), 0, false, 0.0, None);
        assert_eq!(index.finished(), 5);
        // Completed first, then the deepest stopped: 27, then 9.
        assert_eq!(good(&index, 3), vec![0, 3, 4]);
    }

    #[test]
    fn infeasible_trials_rank_after_every_feasible_one_by_violation() {
        let mut h = history();
        // Trial 5: the best value, outside its constraint by 2; trial 6 by 1.
        for (id, violation) in [(5, 2.0), (6, 1.0)] {
            h.record(id, Params::default(), Status::Running);
            h.report(id, 81, 0.01);
            h.report_constraints(id, &[violation, -3.0]);
            h.set_status(id, Status::Completed);
        }
        let mut index = TrialIndex::default();
        index.sync(&h, &TrialCoords::default(), 0, false, 0.0, None);
        assert_eq!(index.finished(), 7);
        assert_eq!(good(&index, 1), vec![0]);
        assert_eq!(good(&index, 5), vec![0, 1, 2, 3, 4]);
        assert_eq!(good(&index, 6), vec![0, 1, 2, 3, 4, 6]);
        // Back within its constraints, trial 5 is the best.
        h.report_constraints(5, &[0.0, -3.0]);
        index.sync(&h, &TrialCoords::default(), 0, false, 0.0, None);
        assert_eq!(good(&index, 1), vec![5]);
    }

    #[test]
    fn shallow_stopped_trials_are_left_out() {
        let mut index = TrialIndex::default();
        // 0.1 x 81 = 8.1: the trials stopped at steps 1 and 3 are not modelled.
        index.sync(&history(), &TrialCoords::default(), 0, false, 0.1, None);
        assert_eq!(index.finished(), 3);
        assert!(!index.modelled(1) && !index.modelled(2) && index.modelled(3));
        assert_eq!(good(&index, 5), vec![0, 3, 4]);
        // Back to keeping them all: the same index brings them back in.
        index.sync(&history(), &TrialCoords::default(), 0, false, 0.0, None);
        assert_eq!(index.finished(), 5);
        assert!(index.modelled(1));
    }

    #[test]
    fn at_a_rung_only_the_values_there_are_modelled_whatever_the_state() {
        // Full curves this time: trial i reports 1.0 - 0.1 * i at every step up to where it
        // ended; trial 5 is paused at 9 and trial 6 running at 2 (under the liar); trial 7
        // failed at 9.
        let mut h = History::new(Mode::Min);
        let ends = [
            (Status::Completed, 81),
            (Status::Stopped, 1),
            (Status::Stopped, 3),
            (Status::Stopped, 9),
            (Status::Stopped, 27),
            (Status::Paused, 9),
            (Status::Running, 2),
            (Status::Failed, 9),
        ];
        for (id, (status, last)) in ends.into_iter().enumerate() {
            let id = id as TrialId;
            h.record(id, Params::default(), Status::Running);
            for step in 1..=last {
                h.report(id, step, 1.0 - 0.1 * id as f64 - 0.001 * step as f64);
            }
            h.set_status(id, status);
        }
        let mut index = TrialIndex::default();
        index.sync(&h, &TrialCoords::default(), 0, true, 0.0, Some(9));
        // Reached 9: 0, 3, 4 and the paused 5, ranked by their values at 9 (5 best); the
        // running 6 is a liar, the shallow 1 and 2 and the failed 7 are out.
        assert_eq!(index.finished(), 4);
        assert_eq!(good(&index, 2), vec![4, 5]);
        assert!(index.modelled(6) && !index.modelled(1) && !index.modelled(7));
        // Back to the last reports: the same index ranks by depth again.
        index.sync(&h, &TrialCoords::default(), 0, true, 0.0, None);
        assert_eq!(index.finished(), 5);
        assert_eq!(good(&index, 2), vec![0, 4]);
    }
}
