//! ASHA's promotion variant, as in the paper (Li et al. 2018, Algorithm 2).
//!
//! A trial trains to the first rung and pauses. Whenever a worker is free, the scheduler looks
//! from the highest rung down for a paused trial that is in the top `1/reduction_factor` of
//! its rung and not yet promoted, and promotes it to the next rung; if there is none, a new
//! trial starts. Trials reaching `max_t` complete; paused trials never promoted are stopped
//! when the sweep ends.

use std::collections::{BTreeMap, BTreeSet};

use crate::{reward, AshaConfig, Decision, Mode, Params, Scheduler, TrialId};

/// The promotion variant of ASHA (one bracket).
///
/// ```
/// use tune_schedulers::{AshaConfig, AshaPromotion, Decision, Mode, Params, Scheduler};
/// let config = AshaConfig { max_t: 9, grace_period: 1, reduction_factor: 3, ..Default::default() };
/// let mut asha = AshaPromotion::new(config, Mode::Min);
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
    /// Rung milestones below max_t, lowest first.
    milestones: Vec<u64>,
    /// Rewards recorded at each rung.
    recorded: Vec<BTreeMap<TrialId, f64>>,
    /// Trials promoted out of each rung.
    promoted: Vec<BTreeSet<TrialId>>,
    /// The rung each trial is heading for.
    target: BTreeMap<TrialId, usize>,
    /// Trials paused at a rung, waiting for a promotion.
    waiting: BTreeSet<TrialId>,
}

impl AshaPromotion {
    pub fn new(config: AshaConfig, mode: Mode) -> AshaPromotion {
        let eta = config.reduction_factor.max(2);
        let mut milestones = Vec::new();
        let mut m = config.grace_period.max(1);
        while m < config.max_t {
            milestones.push(m);
            m = m.saturating_mul(eta);
        }
        AshaPromotion {
            max_t: config.max_t,
            eta: eta as usize,
            mode,
            recorded: vec![BTreeMap::new(); milestones.len()],
            promoted: vec![BTreeSet::new(); milestones.len()],
            milestones,
            target: BTreeMap::new(),
            waiting: BTreeSet::new(),
        }
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
        let mut rung = self.target.get(&id).copied().unwrap_or(0);
        // Results past a rung it was recorded at mean it was promoted from there (this is how a
        // replay of stored results learns of promotions).
        while rung < self.milestones.len()
            && self.recorded[rung].contains_key(&id)
            && step > self.milestones[rung]
        {
            self.promoted[rung].insert(id);
            self.waiting.remove(&id);
            rung += 1;
        }
        self.target.insert(id, rung);
        if rung < self.milestones.len()
            && step >= self.milestones[rung]
            && !self.recorded[rung].contains_key(&id)
        {
            self.recorded[rung].insert(id, reward(self.mode, value));
            self.waiting.insert(id);
            return Decision::Pause;
        }
        Decision::Continue
    }

    fn on_complete(&mut self, id: TrialId, _last: Option<(u64, f64)>) {
        self.waiting.remove(&id);
    }

    /// One line per rung: trials recorded, promoted and waiting there.
    fn describe(&self) -> Vec<String> {
        self.milestones
            .iter()
            .enumerate()
            .map(|(k, m)| {
                let waiting = self.recorded[k]
                    .keys()
                    .filter(|id| self.waiting.contains(id) && !self.promoted[k].contains(id))
                    .count();
                format!(
                    "rung t={m}: {} recorded, {} promoted, {waiting} waiting",
                    self.recorded[k].len(),
                    self.promoted[k].len()
                )
            })
            .collect()
    }

    fn choose_paused(&mut self) -> Option<TrialId> {
        for k in (0..self.milestones.len()).rev() {
            let mut ranked: Vec<(TrialId, f64)> =
                self.recorded[k].iter().map(|(&id, &r)| (id, r)).collect();
            ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            let top = ranked.len() / self.eta;
            let pick = ranked[..top]
                .iter()
                .map(|(id, _)| *id)
                .find(|id| !self.promoted[k].contains(id) && self.waiting.contains(id));
            if let Some(id) = pick {
                self.promoted[k].insert(id);
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

    fn asha() -> AshaPromotion {
        let config = AshaConfig {
            max_t: 27,
            grace_period: 1,
            reduction_factor: 3,
            ..AshaConfig::default()
        };
        AshaPromotion::new(config, Mode::Min)
    }

    #[test]
    fn promotions_follow_the_paper() {
        let mut a = asha();
        assert_eq!(a.milestones, vec![1, 3, 9]);
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
        assert!(a.promoted[0].contains(&1));
        assert!(a.waiting.contains(&1) && a.recorded[1].contains_key(&1));
        assert_eq!(
            a.choose_paused(),
            None,
            "rung 1's top third is trial 1, already promoted"
        );
    }
}
