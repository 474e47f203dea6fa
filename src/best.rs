//! Which trials are best: the best trial of a sweep and, with several objectives, its Pareto
//! front. The summary, `tune status`, the exports, MLflow and the plots all ask here, so that
//! one rule picks the best everywhere.

use tune_search::{Mode, Status};

use crate::spec::{Constraints, Goal};
use crate::trial::Trial;

/// The completed feasible trials ([`Constraints::feasible`]) no other such trial dominates (no
/// worse in every objective, better in one), in id order: the best trials of a sweep with
/// several objectives (Optuna's `best_trials`). Trials missing an objective's value are left
/// out; trials with equal values are all kept. With one objective: every trial with the best
/// value.
///
/// ```
/// use tune::{Goal, Mode, Params, Status, Trial, TrialResult};
/// let trial = |id, loss: f64, size: f64| {
///     let mut t = Trial::new(id, Params::default());
///     t.status = Status::Completed;
///     t.results.push(TrialResult {
///         step: 1, seq: id, attempt: 1,
///         metrics: [("loss".to_string(), loss), ("size".to_string(), size)].into(),
///     });
///     t
/// };
/// let trials = [trial(0, 0.1, 9.0), trial(1, 0.2, 3.0), trial(2, 0.3, 4.0)];
/// let goals = [
///     Goal { metric: "loss".into(), mode: Mode::Min },
///     Goal { metric: "size".into(), mode: Mode::Min },
/// ];
/// let front: Vec<u64> = tune::pareto_front(&trials, &goals, &Default::default())
///     .iter()
///     .map(|t| t.id)
///     .collect();
/// assert_eq!(front, [0, 1]); // trial 2 is worse than trial 1 in both
/// ```
pub fn pareto_front<'a>(
    trials: &'a [Trial],
    objectives: &[Goal],
    constraints: &Constraints,
) -> Vec<&'a Trial> {
    let scored: Vec<(&Trial, Vec<f64>)> = trials
        .iter()
        .filter(|t| t.status == Status::Completed && constraints.feasible(t))
        .filter_map(|t| {
            let losses = objectives
                .iter()
                .map(|o| {
                    let v = t.value(&o.metric).filter(|v| v.is_finite())?;
                    Some(if o.mode == Mode::Max { -v } else { v })
                })
                .collect::<Option<Vec<f64>>>()?;
            Some((t, losses))
        })
        .collect();
    let losses: Vec<&[f64]> = scored.iter().map(|(_, l)| l.as_slice()).collect();
    tune_search::pareto::fronts(&losses, 1)
        .into_iter()
        .next()
        .unwrap_or_default()
        .into_iter()
        .map(|i| scored[i].0)
        .collect()
}

/// The completed trial with the best value ([`Mode::beats`]: ties go to the lower id) among
/// those within their constraints ([`Constraints::feasible`]).
pub fn best_trial<'a>(
    trials: &'a [Trial],
    metric: &str,
    mode: Mode,
    constraints: &Constraints,
) -> Option<&'a Trial> {
    let completed = trials
        .iter()
        .filter(|t| t.status == Status::Completed && constraints.feasible(t))
        .filter_map(|t| Some((t.id, t.value(metric)?)));
    let (id, _) = mode.best_of(completed)?;
    trials.iter().find(|t| t.id == id)
}
