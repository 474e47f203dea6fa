//! TPE with several objectives (MOTPE: Ozaki et al., GECCO 2020 and JAIR 2022), as Optuna 5
//! splits the trials: the good side is the `ceil(gamma_fraction * n)` completed trials of the
//! lowest non-domination ranks, ties in the last rank it reaches broken by greedy hypervolume
//! subset selection. Optuna 5 weights the good trials equally (no hypervolume-contribution
//! weights any more), and so does tune. Trials outside their constraints come after every
//! feasible one, the least violating first, as in Optuna.

use crate::pareto::{fronts, greedy_hypervolume_subset, reference_point};
use crate::{History, Status, TrialId};

/// Marks the good trials (`good[id]`) of a history with several objectives: `gamma_fraction`
/// of the completed trials that reported every objective, rounded up.
pub(crate) fn below_into(history: &History, gamma_fraction: f64, good: &mut Vec<bool>) {
    good.clear();
    good.resize(history.len(), false);
    // (trial, losses), each losses computed once.
    let completed: Vec<(&crate::Observation, Vec<f64>)> = history
        .iter()
        .filter(|t| t.status == Status::Completed)
        .filter_map(|t| Some((t, history.losses(t)?)))
        .collect();
    let n_below = (gamma_fraction * completed.len() as f64).ceil() as usize;
    let mut infeasible: Vec<(f64, TrialId)> = completed
        .iter()
        .filter(|(t, _)| !t.feasible())
        .map(|(t, _)| (t.violation(), t.id))
        .collect();
    infeasible.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let trials: Vec<(TrialId, Vec<f64>)> = completed
        .into_iter()
        .filter(|(t, _)| t.feasible())
        .map(|(t, losses)| (t.id, losses))
        .collect();
    for &(_, id) in infeasible.iter().take(n_below.saturating_sub(trials.len())) {
        good[id as usize] = true;
    }
    let n_below = n_below.min(trials.len());
    let losses: Vec<&[f64]> = trials.iter().map(|(_, l)| l.as_slice()).collect();
    let mut taken = 0;
    for front in fronts(&losses, n_below) {
        if taken + front.len() <= n_below {
            for &i in &front {
                good[trials[i].0 as usize] = true;
            }
            taken += front.len();
            continue;
        }
        for i in tie_break(&losses, &front, n_below - taken) {
            good[trials[i].0 as usize] = true;
        }
        break;
    }
}

/// `k` of `front` (indices into `losses`) by greedy hypervolume subset selection over its
/// distinct loss vectors (first occurrences); with fewer distinct vectors than `k`, all of
/// them and then the earliest repeats (Optuna's `_solve_hssp`).
fn tie_break(losses: &[&[f64]], front: &[usize], k: usize) -> Vec<usize> {
    let mut distinct: Vec<usize> = Vec::new();
    let mut repeats: Vec<usize> = Vec::new();
    for &i in front {
        if distinct.iter().any(|&j| losses[j] == losses[i]) {
            repeats.push(i);
        } else {
            distinct.push(i);
        }
    }
    if distinct.len() <= k {
        distinct.extend(repeats.into_iter().take(k - distinct.len()));
        return distinct;
    }
    let points: Vec<&[f64]> = distinct.iter().map(|&i| losses[i]).collect();
    let reference = reference_point(&points);
    greedy_hypervolume_subset(&points, &reference, k)
        .into_iter()
        .map(|j| distinct[j])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Mode, Params};

    fn history(values: &[[f64; 2]]) -> History {
        let mut h = History::with_objectives(vec![Mode::Min, Mode::Max]);
        for (id, v) in values.iter().enumerate() {
            h.record(id as TrialId, Params::default(), Status::Running);
            h.report_values(id as TrialId, 1, v);
            h.set_status(id as TrialId, Status::Completed);
        }
        h
    }

    fn good_ids(h: &History, fraction: f64) -> Vec<TrialId> {
        let mut good = Vec::new();
        below_into(h, fraction, &mut good);
        (0..good.len() as TrialId)
            .filter(|&i| good[i as usize])
            .collect()
    }

    #[test]
    fn fronts_first_then_hypervolume_within_the_last() {
        // Second objective maximised: losses (x, -y). Front 0: ids 0, 1, 2; front 1: 3, 4;
        // then 5.
        let h = history(&[
            [1.0, 4.0],
            [2.0, 5.0],
            [4.0, 6.0],
            [2.0, 3.0],
            [4.0, 5.0],
            [5.0, 1.0],
        ]);
        assert_eq!(good_ids(&h, 0.5), vec![0, 1, 2]);
        // Four: front 0 and one of front 1, by the larger box against its reference point
        // (10% beyond its worst: x 4.4, -y -2.7): id 3's (4.4 - 2) x (-2.7 + 3) = 0.72,
        // id 4's (4.4 - 4) x (-2.7 + 5) = 0.92.
        assert_eq!(good_ids(&h, 0.6), vec![0, 1, 2, 4]);
        // Two of front 0.
        assert_eq!(good_ids(&h, 0.3).len(), 2);
    }

    #[test]
    fn infeasible_trials_are_good_only_after_every_feasible_one() {
        let mut h = history(&[[0.0, 9.0], [3.0, 1.0], [2.0, 2.0], [5.0, 0.0]]);
        // Trial 0 dominates all, but breaks its constraint; trial 3 breaks it by less.
        h.report_constraints(0, &[0.5]);
        h.report_constraints(3, &[0.25]);
        assert_eq!(good_ids(&h, 0.5), vec![1, 2]);
        assert_eq!(good_ids(&h, 0.75), vec![1, 2, 3]);
    }

    #[test]
    fn repeated_points_count_once_in_the_tie_break() {
        let h = history(&[[1.0, 1.0], [1.0, 1.0], [0.0, 0.0], [2.0, 2.0]]);
        // All on one front ((0,0): losses (0, 0), (1, -1), (2, -2)); two wanted: the
        // greedy picks the two distinct boxes, never the repeat.
        let good = good_ids(&h, 0.5);
        assert_eq!(good.len(), 2);
        assert!(!(good.contains(&0) && good.contains(&1)));
    }
}
