//! ASHA's promotion variant, as in the paper (Li et al. 2018, Algorithm 2).
//!
//! A trial trains to the first rung and pauses. Whenever a worker is free, the scheduler looks
//! from the highest rung down for a paused trial that is in the top `1/reduction_factor` of
//! its rung and not yet promoted, and promotes it to the next rung; if there is none, a new
//! trial starts. Trials reaching `max_t` complete; paused trials never promoted are stopped
//! when the sweep ends.
//!
//! With several brackets this is the paper's asynchronous HyperBand: bracket `s` has its first
//! rung at `grace_period * reduction_factor^s`, each new trial joins a bracket drawn as the
//! stopping variant draws it, and promotions happen within a bracket, deepest rung first.

use std::collections::{BTreeMap, BTreeSet};

use crate::asha::{bracket_probs, draw_bracket};
use crate::{reward, AshaConfig, Decision, Mode, Params, Scheduler, TrialId};

/// The promotion variant of ASHA.
///
/// ```
/// use tune_schedulers::{AshaConfig, AshaPromotion, Decision, Mode, Params, Scheduler};
/// let config = AshaConfig { max_t: 9, grace_period: Some(1), reduction_factor: 3, ..Default::default() };
/// let mut asha = AshaPromotion::new(config, Mode::Min, 0);
/// for (id, loss) in [(0, 0.5), (1, 0.2), (2, 0.9)] {
///     asha.on_trial_add(id, &Params::default());
///     assert_eq!(asha.on_result(id, 1, loss), Decision::Pause);
/// }
/// assert_eq!(asha.choose_paused(), Some(1)); // the best third of rung 1 goes on
/// assert_eq!(asha.choose_paused(), None); // nobody else yet: start a new trial
/// ```
#[derive(Debug, Clone)]
pub struct AshaPromotion {
    max_t: u64,
    eta: usize,
    mode: Mode,
    seed: u64,
    brackets: Vec<Ladder>,
    /// Each bracket's selection probability (as the stopping variant's).
    probs: Vec<f64>,
    /// The rung (index in its bracket) each trial is heading for.
    target: BTreeMap<TrialId, usize>,
    /// Trials paused at a rung, waiting for a promotion.
    waiting: BTreeSet<TrialId>,
}

/// The rungs of one bracket.
#[derive(Debug, Clone)]
struct Ladder {
    /// Rung milestones below max_t, lowest first.
    milestones: Vec<u64>,
    /// Rewards recorded at each rung.
    recorded: Vec<BTreeMap<TrialId, f64>>,
    /// Trials promoted out of each rung.
    promoted: Vec<BTreeSet<TrialId>>,
}

impl AshaPromotion {
    /// `seed` draws each trial's bracket (unused with one bracket).
    pub fn new(config: AshaConfig, mode: Mode, seed: u64) -> AshaPromotion {
        let eta = config.reduction_factor.max(2);
        let brackets: Vec<Ladder> = (0..config.brackets.max(1) as u32)
            .map(|s| {
                let mut milestones = Vec::new();
                let mut m = config
                    .grace_period()
                    .max(1)
                    .saturating_mul(eta.saturating_pow(s));
                while m < config.max_t {
                    milestones.push(m);
                    m = m.saturating_mul(eta);
                }
                Ladder {
                    recorded: vec![BTreeMap::new(); milestones.len()],
                    promoted: vec![BTreeSet::new(); milestones.len()],
                    milestones,
                }
            })
            .collect();
        // Counted as the stopping variant counts them: max_t is a rung there.
        let rungs: Vec<usize> = brackets.iter().map(|b| b.milestones.len() + 1).collect();
        AshaPromotion {
            max_t: config.max_t,
            eta: eta as usize,
            mode,
            seed,
            probs: bracket_probs(&rungs),
            brackets,
            target: BTreeMap::new(),
            waiting: BTreeSet::new(),
        }
    }

    /// The rung milestones of bracket `b` below `max_t`, lowest first.
    ///
    /// ```
    /// use tune_schedulers::{AshaConfig, AshaPromotion, Mode};
    /// let config = AshaConfig { max_t: 81, grace_period: Some(1), reduction_factor: 3, brackets: 5, ..Default::default() };
    /// let asha = AshaPromotion::new(config, Mode::Min, 0);
    /// assert_eq!(asha.milestones(0), vec![1, 3, 9, 27]);
    /// assert_eq!(asha.milestones(3), vec![27]);
    /// assert!(asha.milestones(4).is_empty()); // runs straight to max_t
    /// ```
    pub fn milestones(&self, b: usize) -> Vec<u64> {
        self.brackets[b].milestones.clone()
    }

    /// The bracket trial `id` belongs to.
    pub fn bracket_of(&self, id: TrialId) -> usize {
        draw_bracket(&self.probs, self.seed, id)
    }
}

impl Scheduler for AshaPromotion {
    fn on_trial_add(&mut self, id: TrialId, _params: &Params) {
        self.target.insert(id, 0);
    }

    fn on_result(&mut self, id: TrialId, step: u64, value: f64) -> Decision {
        if step >= self.max_t {
            self.waiting.remove(&id);
            return Decision::Complete;
        }
        let b = self.bracket_of(id);
        let ladder = &mut self.brackets[b];
        let mut rung = self.target.get(&id).copied().unwrap_or(0);
        // Results past a rung it was recorded at mean it was promoted from there (this is how a
        // replay of stored results learns of promotions).
        while rung < ladder.milestones.len()
            && ladder.recorded[rung].contains_key(&id)
            && step > ladder.milestones[rung]
        {
            ladder.promoted[rung].insert(id);
            self.waiting.remove(&id);
            rung += 1;
        }
        self.target.insert(id, rung);
        if rung < ladder.milestones.len()
            && step >= ladder.milestones[rung]
            && !ladder.recorded[rung].contains_key(&id)
        {
            ladder.recorded[rung].insert(id, reward(self.mode, value));
            self.waiting.insert(id);
            return Decision::Pause;
        }
        Decision::Continue
    }

    fn on_complete(&mut self, id: TrialId, _last: Option<(u64, f64)>) {
        self.waiting.remove(&id);
    }

    /// One line per rung: trials recorded, promoted and waiting there.
    fn rungs(&self) -> Vec<u64> {
        crate::merged_milestones((0..self.brackets.len()).map(|b| self.milestones(b)))
    }

    fn completes_at(&self) -> Option<u64> {
        Some(self.max_t)
    }

    fn describe(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for (b, ladder) in self.brackets.iter().enumerate() {
            let prefix = match self.brackets.len() {
                1 => String::new(),
                _ => format!("bracket {b} "),
            };
            if ladder.milestones.is_empty() {
                lines.push(format!("{prefix}no rungs: trials run to t={}", self.max_t));
            }
            for (k, m) in ladder.milestones.iter().enumerate() {
                let waiting = ladder.recorded[k]
                    .keys()
                    .filter(|id| self.waiting.contains(id) && !ladder.promoted[k].contains(id))
                    .count();
                lines.push(format!(
                    "{prefix}rung t={m}: {} recorded, {} promoted, {waiting} waiting",
                    ladder.recorded[k].len(),
                    ladder.promoted[k].len()
                ));
            }
        }
        lines
    }

    fn choose_paused(&mut self) -> Option<TrialId> {
        // The deepest rungs first, over all brackets (ties: the lower bracket).
        let mut rungs: Vec<(u64, usize, usize)> = self
            .brackets
            .iter()
            .enumerate()
            .flat_map(|(b, l)| {
                l.milestones
                    .iter()
                    .enumerate()
                    .map(move |(k, &m)| (m, b, k))
            })
            .collect();
        rungs.sort_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)));
        for (_, b, k) in rungs {
            let ladder = &mut self.brackets[b];
            let mut ranked: Vec<(TrialId, f64)> =
                ladder.recorded[k].iter().map(|(&id, &r)| (id, r)).collect();
            ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            let top = ranked.len() / self.eta;
            let pick = ranked[..top]
                .iter()
                .map(|(id, _)| *id)
                .find(|id| !ladder.promoted[k].contains(id) && self.waiting.contains(id));
            if let Some(id) = pick {
                ladder.promoted[k].insert(id);
                self.waiting.remove(&id);
                self.target.insert(id, k + 1);
                return Some(id);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rungs 1, 3, 9 below max_t 27 (bracket 0), in `brackets` brackets.
    fn config(brackets: usize) -> AshaConfig {
        AshaConfig {
            max_t: 27,
            grace_period: Some(1),
            reduction_factor: 3,
            brackets,
            ..AshaConfig::default()
        }
    }

    fn asha() -> AshaPromotion {
        AshaPromotion::new(config(1), Mode::Min, 0)
    }

    #[test]
    fn promotions_follow_the_paper() {
        let mut a = asha();
        assert_eq!(a.milestones(0), vec![1, 3, 9]);
        let losses = [0.5, 0.2, 0.9, 0.1, 0.4, 0.8];
        for (id, l) in losses.iter().enumerate() {
            a.on_trial_add(id as u64, &Params::default());
            assert_eq!(a.on_result(id as u64, 1, *l), Decision::Pause);
        }
        // Rung 1 holds 6: the top 2 (losses 0.1 and 0.2) may go on, best first.
        assert_eq!(a.choose_paused(), Some(3));
        assert_eq!(a.choose_paused(), Some(1));
        assert_eq!(a.choose_paused(), None);
        // Trial 3 trains on to rung 3 and pauses there; rung 3 holds one trial: no promotion
        // from it (1 / 3 rounds down), nor from rung 1 (its top two are promoted already).
        assert_eq!(a.on_result(3, 2, 0.09), Decision::Continue);
        assert_eq!(a.on_result(3, 3, 0.08), Decision::Pause);
        assert_eq!(a.choose_paused(), None);
        // A seventh trial at rung 1 with loss 0.15 enters its top two (0.1, 0.15): promoted,
        // although trial 1 (0.2) was promoted before on a smaller rung.
        a.on_trial_add(6, &Params::default());
        assert_eq!(a.on_result(6, 1, 0.15), Decision::Pause);
        assert_eq!(a.choose_paused(), Some(6));
        assert_eq!(a.choose_paused(), None);
        // Reaching max_t completes.
        assert_eq!(a.on_result(1, 27, 0.01), Decision::Complete);
    }

    #[test]
    fn a_replay_of_results_infers_the_promotions() {
        let results = [
            (0, 1, 0.5),
            (1, 1, 0.2),
            (2, 1, 0.9),
            (1, 2, 0.15),
            (1, 3, 0.1),
        ];
        let mut a = asha();
        for id in 0..3 {
            a.on_trial_add(id, &Params::default());
        }
        for (id, step, v) in results {
            a.on_result(id, step, v);
        }
        // Trial 1 reported past rung 1: it was promoted, and now waits at rung 3.
        assert!(a.brackets[0].promoted[0].contains(&1));
        assert!(a.waiting.contains(&1) && a.brackets[0].recorded[1].contains_key(&1));
        assert_eq!(
            a.choose_paused(),
            None,
            "rung 1's top third is trial 1, already promoted"
        );
    }

    #[test]
    fn brackets_pause_at_their_own_rungs_and_promote_within_themselves() {
        let mut a = AshaPromotion::new(config(2), Mode::Min, 7);
        assert_eq!(
            (a.milestones(0), a.milestones(1)),
            (vec![1, 3, 9], vec![3, 9])
        );
        // Softmax of 4 and 3 rungs (max_t counted, as the stopping variant counts it).
        let p1 = (-1f64).exp() / (1.0 + (-1f64).exp());
        let ids: Vec<TrialId> = (0..4000).collect();
        let in_1: Vec<TrialId> = ids
            .iter()
            .copied()
            .filter(|&i| a.bracket_of(i) == 1)
            .collect();
        let share = in_1.len() as f64 / ids.len() as f64;
        assert!((share - p1).abs() < 0.03, "{share} vs {p1}");
        let in_0: Vec<TrialId> = ids
            .iter()
            .copied()
            .filter(|&i| a.bracket_of(i) == 0)
            .collect();
        for &id in in_0[..3].iter().chain(&in_1[..3]) {
            a.on_trial_add(id, &Params::default());
        }
        // Bracket 0 pauses at 1; bracket 1 trains through 1 and pauses at 3.
        for (&id, loss) in in_0[..3].iter().zip([0.5, 0.3, 0.7]) {
            assert_eq!(a.on_result(id, 1, loss), Decision::Pause);
        }
        for (&id, loss) in in_1[..3].iter().zip([0.6, 0.2, 0.4]) {
            assert_eq!(a.on_result(id, 1, loss + 0.1), Decision::Continue);
            assert_eq!(a.on_result(id, 2, loss + 0.05), Decision::Continue);
            assert_eq!(a.on_result(id, 3, loss), Decision::Pause);
        }
        // The deeper rung (bracket 1's t=3) promotes first, then bracket 0's t=1.
        assert_eq!(a.choose_paused(), Some(in_1[1]));
        assert_eq!(a.choose_paused(), Some(in_0[1]));
        assert_eq!(a.choose_paused(), None);
        // Bracket 0's promoted trial reaches its own rung 3, which holds only itself: the
        // better trials waiting at bracket 1's rung 3 do not count against it.
        assert_eq!(a.on_result(in_0[1], 2, 0.25), Decision::Continue);
        assert_eq!(a.on_result(in_0[1], 3, 0.9), Decision::Pause);
        assert_eq!(a.brackets[0].recorded[1].len(), 1);
        assert_eq!(a.brackets[1].recorded[0].len(), 3);
        assert_eq!(a.choose_paused(), None);
        // A replay of the same results in order rebuilds both brackets' promotions.
        let mut r = AshaPromotion::new(config(2), Mode::Min, 7);
        for &id in in_0[..3].iter().chain(&in_1[..3]) {
            r.on_trial_add(id, &Params::default());
        }
        for (&id, loss) in in_0[..3].iter().zip([0.5, 0.3, 0.7]) {
            r.on_result(id, 1, loss);
        }
        for (&id, loss) in in_1[..3].iter().zip([0.6, 0.2, 0.4]) {
            for (step, v) in [(1, loss + 0.1), (2, loss + 0.05), (3, loss)] {
                r.on_result(id, step, v);
            }
        }
        r.on_result(in_1[1], 4, 0.15);
        for (step, v) in [(2, 0.25), (3, 0.9)] {
            r.on_result(in_0[1], step, v);
        }
        assert!(r.brackets[1].promoted[0].contains(&in_1[1]));
        assert!(r.brackets[0].promoted[0].contains(&in_0[1]));
        assert_eq!(r.choose_paused(), None);
    }
}
