//! TPE with several objectives (MOTPE: Ozaki et al., GECCO 2020 and JAIR 2022), as Optuna 5
//! splits the trials: the good side is the `ceil(gamma_fraction * n)` completed trials of the
//! lowest non-domination ranks, ties in the last rank it reaches broken by greedy hypervolume
//! subset selection. The good trials weigh their shares of the good set's hypervolume, as in
//! the MOTPE paper and Optuna 3 and 4 (Optuna 5 weighs them equally:
//! `TpeOptions::hypervolume_weights = false`). Trials outside their constraints come after
//! every feasible one, the least violating first, as in Optuna.

use crate::pareto::{
    fronts, greedy_hypervolume_subset, hypervolume, hypervolume_contributions, reference_point,
};
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

/// MOTPE's weights of the good trials (Ozaki et al. 2022; Optuna 3 and 4): each feasible
/// good trial's share of the good set's hypervolume (the volume lost without it), over the
/// largest share; dominated and infeasible ones get 1e-12. Trials with the same losses share
/// one point's share (Optuna would give each of them nothing, since none is missed alone).
/// `weights` is indexed by trial id.
pub(crate) fn hypervolume_weights_into(history: &History, good: &[bool], weights: &mut Vec<f64>) {
    const LEAST: f64 = 1e-12;
    weights.clear();
    weights.resize(good.len(), LEAST);
    let members: Vec<(TrialId, Vec<f64>)> = history
        .iter()
        .filter(|t| good.get(t.id as usize).copied().unwrap_or(false) && t.feasible())
        .filter_map(|t| Some((t.id, history.losses(t)?)))
        .collect();
    let losses: Vec<&[f64]> = members.iter().map(|(_, l)| l.as_slice()).collect();
    let Some(front) = fronts(&losses, 1).into_iter().next() else {
        return;
    };
    // The front's distinct points, each with the members at it.
    let mut points: Vec<(&[f64], Vec<TrialId>)> = Vec::new();
    for i in front {
        match points.iter_mut().find(|(p, _)| *p == losses[i]) {
            Some((_, ids)) => ids.push(members[i].0),
            None => points.push((losses[i], vec![members[i].0])),
        }
    }
    let reference = reference_point(&losses);
    let all: Vec<&[f64]> = points.iter().map(|(p, _)| *p).collect();
    if !hypervolume(&all, &reference).is_finite() {
        // A volume past f64's range (losses near 1e150 and beyond): weigh them all alike.
        for (id, _) in &members {
            weights[*id as usize] = 1.0;
        }
        return;
    }
    let shares = hypervolume_contributions(&all, &reference);
    let largest = shares.iter().copied().fold(LEAST, f64::max);
    for ((_, ids), share) in points.iter().zip(shares) {
        let w = (share / largest / ids.len() as f64).max(LEAST);
        for &id in ids {
            weights[id as usize] = w;
        }
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
    fn good_trials_weigh_their_share_of_the_hypervolume() {
        // Second objective maximised, so the losses are (1, 3), (2, 2), (3, 1) on the front
        // and (3, 3) behind it. Reference: 1.1 x the worst, (3.3, 3.3). Each front point's
        // box of its own: (2 - 1) x (3.3 - 3) = 0.3, (3 - 2) x (3 - 2) = 1, (3.3 - 3) x
        // (2 - 1) = 0.3; over the largest, 0.3, 1, 0.3.
        let mut h = history(&[
            [1.0, -3.0],
            [2.0, -2.0],
            [3.0, -1.0],
            [3.0, -3.0],
            [9.0, -9.0],
        ]);
        let mut good = Vec::new();
        below_into(&h, 0.8, &mut good);
        assert_eq!(good, vec![true, true, true, true, false]);
        let mut weights = Vec::new();
        hypervolume_weights_into(&h, &good, &mut weights);
        let expected = [0.3, 1.0, 0.3, 1e-12, 1e-12];
        for (w, e) in weights.iter().zip(expected) {
            assert!((w - e).abs() < 1e-12, "{weights:?}");
        }
        // An infeasible good trial weighs next to nothing and leaves the others' shares
        // alone; here it would otherwise dominate (2, 2).
        h.record(5, Params::default(), Status::Running);
        h.report_values(5, 1, &[1.5, -1.5]);
        h.report_constraints(5, &[1.0]);
        h.set_status(5, Status::Completed);
        let good = vec![true, true, true, true, false, true];
        hypervolume_weights_into(&h, &good, &mut weights);
        let expected = [0.3, 1.0, 0.3, 1e-12, 1e-12, 1e-12];
        for (w, e) in weights.iter().zip(expected) {
            assert!((w - e).abs() < 1e-12, "{weights:?}");
        }
    }

    #[test]
    fn volumes_past_the_range_of_f64_weigh_alike() {
        let h = history(&[[1e200, -1e-200], [-1e200, -1e200]]);
        let mut weights = Vec::new();
        hypervolume_weights_into(&h, &[true, true], &mut weights);
        assert_eq!(weights, vec![1.0, 1.0]);
    }

    #[test]
    fn repeated_good_trials_share_one_point_s_weight() {
        let h = history(&[[1.0, -3.0], [1.0, -3.0], [3.0, -1.0]]);
        let good = vec![true; 3];
        let mut weights = Vec::new();
        hypervolume_weights_into(&h, &good, &mut weights);
        // Reference (3.3, 3.3); (1, 3) alone holds (3 - 1) x (3.3 - 3) = 0.6, (3, 1) holds
        // (3.3 - 3) x (3 - 1) = 0.6: equal shares, the first split between its two trials.
        for (w, e) in weights.iter().zip([0.5, 0.5, 1.0]) {
            assert!((w - e).abs() < 1e-12, "{weights:?}");
        }
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
