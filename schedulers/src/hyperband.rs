//! Synchronous HyperBand (Li et al. 2017), as Ray Tune's `HyperBandScheduler` runs it.
//!
//! A band holds brackets s = s_max..0 with s_max = floor(log_eta(max_t)), less the brackets
//! whose first rung would come before `grace_period` (BOHB's min_budget). Bracket s takes
//! n = ceil((s_max + 1) / (s + 1) * eta^s) trials and runs successive halving on them: every
//! trial trains to r = ceil(max_t * eta^-s) and pauses; once all of the bracket's trials have
//! reached the rung, the best floor(n_i / eta) resume to the next rung (r * eta) and the others
//! stop. Trials that reach `max_t` complete. New trials join the bracket being filled, so while
//! one bracket waits at a rung, the next one starts.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use tune_search::FieldError;

use crate::{reward, Decision, Mode, Scheduler, TrialId};

/// HyperBand's settings (Ray Tune's names, in steps).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HyperBandConfig {
    /// R: the most steps a trial gets.
    pub max_t: u64,
    /// eta.
    pub reduction_factor: u64,
    /// The fewest steps any bracket trains a trial before its first cut (BOHB's `min_budget`):
    /// it drops the brackets whose first rung would come sooner. 1 keeps every bracket, as Ray
    /// Tune's `HyperBandScheduler` does.
    pub grace_period: u64,
    /// The `max_t`s the sweep had before `tune resume --max-t` raised it, oldest first (the
    /// resume writes them; a spec leaves them out). The band keeps the brackets the first one
    /// sized, and each becomes a rung below `max_t`, where successive halving cuts as at any
    /// other.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub raised_from: Vec<u64>,
}

impl HyperBandConfig {
    /// Checks the settings' ranges.
    ///
    /// ```
    /// use tune_schedulers::HyperBandConfig;
    /// let bad = HyperBandConfig { max_t: 2, ..HyperBandConfig::default() };
    /// assert_eq!(bad.validate().unwrap_err().key, "max_t");
    /// let bad = HyperBandConfig { grace_period: 0, ..HyperBandConfig::default() };
    /// assert_eq!(bad.validate().unwrap_err().key, "grace_period");
    /// ```
    pub fn validate(&self) -> Result<(), FieldError> {
        let tops = self.raised_from.iter().chain([&self.max_t]);
        if self
            .raised_from
            .iter()
            .zip(tops.skip(1))
            .any(|(a, b)| a >= b)
        {
            return Err(FieldError::new(
                "raised_from",
                format!(
                    "expected earlier max_t values, ascending and below max_t ({}), found {:?}",
                    self.max_t, self.raised_from
                ),
            ));
        }
        let band = HyperBandConfig {
            max_t: self.band_max_t(),
            raised_from: Vec::new(),
            ..self.clone()
        };
        if !self.raised_from.is_empty() {
            return band.validate();
        }
        if self.grace_period < 1 || self.grace_period > self.max_t {
            return Err(FieldError::new(
                "grace_period",
                format!(
                    "expected 1 <= grace_period <= max_t ({}), found {}",
                    self.max_t, self.grace_period
                ),
            ));
        }
        if self.reduction_factor < 2 || self.max_t < self.reduction_factor {
            let key = if self.reduction_factor < 2 {
                "reduction_factor"
            } else {
                "max_t"
            };
            return Err(FieldError::new(
                key,
                format!(
                    "expected reduction_factor >= 2 and max_t >= reduction_factor, found {} and {}",
                    self.reduction_factor, self.max_t
                ),
            ));
        }
        Ok(())
    }
}

impl HyperBandConfig {
    /// The `max_t` the band's brackets are sized by: the first the sweep had.
    ///
    /// ```
    /// use tune_schedulers::HyperBandConfig;
    /// let raised = HyperBandConfig { max_t: 243, raised_from: vec![81], ..Default::default() };
    /// assert_eq!(raised.band_max_t(), 81);
    /// ```
    pub fn band_max_t(&self) -> u64 {
        self.raised_from.first().copied().unwrap_or(self.max_t)
    }
}

impl Default for HyperBandConfig {
    fn default() -> Self {
        HyperBandConfig {
            max_t: 81,
            reduction_factor: 3,
            grace_period: 1,
            raised_from: Vec::new(),
        }
    }
}

#[derive(Debug, Clone)]
struct Bracket {
    /// Trials the bracket takes.
    size: usize,
    /// Milestones r * eta^i (capped at max_t), lowest first.
    milestones: Vec<u64>,
    /// Index of the rung its live trials are heading for.
    rung: usize,
    /// Trials still in the bracket (not stopped or failed) and their reward at the current rung.
    live: BTreeMap<TrialId, Option<f64>>,
    added: usize,
}

impl Bracket {
    fn full(&self) -> bool {
        self.added >= self.size
    }
}

/// The HyperBand scheduler.
///
/// ```
/// use tune_schedulers::{HyperBand, HyperBandConfig, Mode};
/// let hb = HyperBand::new(HyperBandConfig::default(), Mode::Min);
/// // (configurations, first milestone) of the brackets of one band, R = 81, eta = 3:
/// assert_eq!(hb.band(), vec![(81, 1), (34, 3), (15, 9), (8, 27), (5, 81)]);
/// ```
#[derive(Debug, Clone)]
pub struct HyperBand {
    config: HyperBandConfig,
    mode: Mode,
    s_max: u32,
    brackets: Vec<Bracket>,
    of: BTreeMap<TrialId, usize>,
    resume: VecDeque<TrialId>,
    ended: Vec<(TrialId, Decision)>,
}

/// Where bracket s first cuts: ceil(max_t / eta^s) steps.
fn first_rung(max_t: u64, eta: u64, s: u32) -> u64 {
    max_t.div_ceil(eta.saturating_pow(s))
}

impl HyperBand {
    pub fn new(config: HyperBandConfig, mode: Mode) -> HyperBand {
        let eta = config.reduction_factor.max(2);
        let band = config.band_max_t();
        let mut s_max = 0;
        // The most aggressive bracket whose first rung is at least the grace period.
        while eta.saturating_pow(s_max + 1) <= band
            && first_rung(band, eta, s_max + 1) >= config.grace_period
        {
            s_max += 1;
        }
        HyperBand {
            config,
            mode,
            s_max,
            brackets: Vec::new(),
            of: BTreeMap::new(),
            resume: VecDeque::new(),
            ended: Vec::new(),
        }
    }

    /// The bracket shape for s: (configurations, milestones). A raised sweep's band keeps
    /// its first `max_t`'s shape; the later tops follow as rungs.
    fn shape(&self, s: u32) -> (usize, Vec<u64>) {
        let eta = self.config.reduction_factor.max(2);
        let n =
            ((self.s_max as f64 + 1.0) / (s as f64 + 1.0) * (eta.pow(s) as f64)).ceil() as usize;
        let band = self.config.band_max_t();
        let r = first_rung(band, eta, s);
        let mut milestones: Vec<u64> = (0..=s).map(|i| (r * eta.pow(i)).min(band)).collect();
        if !self.config.raised_from.is_empty() {
            milestones.extend(self.config.raised_from.iter().skip(1));
            milestones.push(self.config.max_t);
        }
        (n, milestones)
    }

    /// (configurations, first milestone) of each bracket of a band, s = s_max first.
    pub fn band(&self) -> Vec<(usize, u64)> {
        (0..=self.s_max)
            .rev()
            .map(|s| {
                let (n, m) = self.shape(s);
                (n, m[0])
            })
            .collect()
    }

    /// Cuts the bracket's rung once every live trial has reported there.
    fn maybe_cut(&mut self, b: usize) {
        let eta = self.config.reduction_factor.max(2) as usize;
        let bracket = &mut self.brackets[b];
        if !bracket.full() || bracket.live.values().any(Option::is_none) || bracket.live.is_empty()
        {
            return;
        }
        let mut ranked: Vec<(TrialId, f64)> = bracket
            .live
            .iter()
            .map(|(&id, r)| (id, r.unwrap_or(f64::NEG_INFINITY)))
            .collect();
        // Best first; ties by id for determinism.
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let keep = ranked.len() / eta;
        bracket.rung += 1;
        for (i, (id, _)) in ranked.into_iter().enumerate() {
            if i < keep && bracket.rung < bracket.milestones.len() {
                bracket.live.insert(id, None);
                self.resume.push_back(id);
            } else {
                bracket.live.remove(&id);
                self.ended.push((id, Decision::Stop));
            }
        }
    }
}

impl Scheduler for HyperBand {
    fn on_trial_add(&mut self, id: TrialId, _params: &crate::Params) {
        if self.brackets.last().is_none_or(Bracket::full) {
            let band_position = self.brackets.len() as u32 % (self.s_max + 1);
            let (size, milestones) = self.shape(self.s_max - band_position);
            self.brackets.push(Bracket {
                size,
                milestones,
                rung: 0,
                live: BTreeMap::new(),
                added: 0,
            });
        }
        let b = self.brackets.len() - 1;
        let bracket = &mut self.brackets[b];
        bracket.added += 1;
        bracket.live.insert(id, None);
        self.of.insert(id, b);
    }

    fn on_result(&mut self, id: TrialId, step: u64, value: f64) -> Decision {
        let Some(&b) = self.of.get(&id) else {
            return Decision::Continue;
        };
        let bracket = &mut self.brackets[b];
        let Some(&milestone) = bracket.milestones.get(bracket.rung) else {
            return Decision::Continue;
        };
        if step < milestone || !bracket.live.contains_key(&id) {
            return Decision::Continue;
        }
        if step >= self.config.max_t {
            bracket.live.remove(&id);
            self.maybe_cut(b);
            return Decision::Complete;
        }
        bracket.live.insert(id, Some(reward(self.mode, value)));
        self.maybe_cut(b);
        // If this report completed the rung, the cut has just decided the trial's fate.
        match self.brackets[b].live.get(&id) {
            Some(None) => {
                // Promoted: it goes on at once instead of waiting to be resumed.
                self.resume.retain(|&t| t != id);
                Decision::Continue
            }
            Some(Some(_)) => Decision::Pause,
            None => match self.ended.iter().position(|&(t, _)| t == id) {
                Some(pos) => self.ended.remove(pos).1,
                None => Decision::Stop,
            },
        }
    }

    fn on_complete(&mut self, id: TrialId, _last: Option<(u64, f64)>) {
        // A trial that ends on its own (or fails) leaves its bracket; the rung may now be complete.
        if let Some(&b) = self.of.get(&id) {
            if self.brackets[b].live.remove(&id).is_some() {
                self.maybe_cut(b);
            }
        }
    }

    fn on_no_more_trials(&mut self) {
        if let Some(b) = self.brackets.len().checked_sub(1) {
            self.brackets[b].size = self.brackets[b].added;
            self.maybe_cut(b);
        }
    }

    fn choose_paused(&mut self) -> Option<TrialId> {
        // Only a trial promoted and not yet reported at its new rung is waiting to resume
        // (the queue may hold stale entries after a replay of stored results).
        while let Some(id) = self.resume.pop_front() {
            let waiting = self
                .of
                .get(&id)
                .is_some_and(|&b| self.brackets[b].live.get(&id) == Some(&None));
            if waiting {
                return Some(id);
            }
        }
        None
    }

    fn drain_ended(&mut self) -> Vec<(TrialId, Decision)> {
        std::mem::take(&mut self.ended)
    }

    /// The brackets still running (at most the last four), each with its rung and how many of
    /// its live trials have reported there.
    fn rungs(&self) -> Vec<u64> {
        crate::merged_milestones((0..=self.s_max).map(|s| self.shape(s).1))
    }

    fn completes_at(&self) -> Option<u64> {
        Some(self.config.max_t)
    }

    fn describe(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .brackets
            .iter()
            .enumerate()
            .filter(|(_, b)| !b.live.is_empty() || !b.full())
            .map(|(i, b)| {
                let reported = b.live.values().filter(|r| r.is_some()).count();
                let rung = b.milestones.get(b.rung).map_or("done".into(), |m| {
                    format!("rung t={m} ({}/{})", b.rung + 1, b.milestones.len())
                });
                format!(
                    "bracket {i}: {}/{} trials, {rung}, {reported}/{} there",
                    b.added,
                    b.size,
                    b.live.len()
                )
            })
            .collect();
        let hidden = lines.len().saturating_sub(4);
        lines.drain(..hidden);
        if lines.is_empty() {
            lines.push(format!("{} brackets, all done", self.brackets.len()));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::collections::BTreeSet;

    #[test]
    fn rungs_are_every_brackets_milestones_worked_by_hand() {
        let hb = |max_t| {
            HyperBand::new(
                HyperBandConfig {
                    max_t,
                    ..HyperBandConfig::default()
                },
                Mode::Min,
            )
        };
        // s = 2: r = 1 -> 1, 3, 9; s = 1: 3, 9; s = 0: 9.
        assert_eq!(hb(9).rungs(), vec![1, 3, 9]);
        // s = 2: r = ceil(10/9) = 2 -> 2, 6, min(18, 10); s = 1: r = 4 -> 4, min(12, 10); s = 0: 10.
        assert_eq!(hb(10).rungs(), vec![2, 4, 6, 10]);
    }

    #[test]
    fn a_grace_period_drops_the_brackets_that_cut_sooner() {
        let hb = |grace_period| {
            HyperBand::new(
                HyperBandConfig {
                    max_t: 52,
                    reduction_factor: 3,
                    grace_period,
                    ..HyperBandConfig::default()
                },
                Mode::Max,
            )
        };
        // s_max = floor(log3(52)) = 3: r = ceil(52 / 27) = 2, then 6, 18 and 52.
        assert_eq!(hb(1).band(), vec![(27, 2), (12, 6), (6, 18), (4, 52)]);
        assert_eq!(
            hb(2).band(),
            hb(1).band(),
            "2 epochs is the first rung already"
        );
        // ceil(52 / 27) = 2 < 3: s_max = 2, so n = ceil(3 / (s + 1) * 3^s): 9, 5, 3.
        assert_eq!(hb(3).band(), vec![(9, 6), (5, 18), (3, 52)]);
        assert_eq!(hb(3).rungs(), vec![6, 18, 52]);
        assert_eq!(
            hb(6).band(),
            hb(3).band(),
            "6 epochs is the first rung already"
        );
        assert_eq!(hb(7).band(), vec![(3, 18), (2, 52)]);
        assert_eq!(
            hb(52).band(),
            vec![(1, 52)],
            "one bracket of one full trial"
        );
    }

    #[test]
    fn a_raised_max_t_is_one_more_rung_of_the_same_band() {
        let config = |max_t, raised_from| HyperBandConfig {
            max_t,
            reduction_factor: 3,
            grace_period: 1,
            raised_from,
        };
        let raised = HyperBand::new(config(27, vec![9]), Mode::Max);
        let first = HyperBand::new(config(9, vec![]), Mode::Max);
        assert_eq!(raised.band(), vec![(9, 1), (5, 3), (3, 9)]);
        assert_eq!(raised.band(), first.band());
        assert_eq!(raised.shape(2).1, vec![1, 3, 9, 27]);
        assert_eq!(raised.shape(0).1, vec![9, 27]);
        assert_eq!(raised.completes_at(), Some(27));
        assert_eq!(
            config(9, vec![9]).validate().unwrap_err().key,
            "raised_from"
        );
        config(27, vec![3, 9]).validate().unwrap();

        let before = run_band(&mut HyperBand::new(config(9, vec![]), Mode::Max), 17);
        let after = run_band(&mut HyperBand::new(config(27, vec![9]), Mode::Max), 17);
        let reached = |ended: &BTreeMap<TrialId, (u64, Decision)>| -> Vec<TrialId> {
            (ended.iter())
                .filter(|(_, e)| e.0 >= 9)
                .map(|(&id, _)| id)
                .collect()
        };
        // The same five trials reach step 9: one of bracket s = 2, one of s = 1, and the three
        // that s = 0 starts there.
        assert_eq!(reached(&after), reached(&before));
        assert_eq!(reached(&before).len(), 5);
        // At the new rung each bracket keeps a third of its trials there: none of the first
        // two brackets' one each, the best of the last bracket's three (ids 14 to 16).
        let quality = |id: TrialId| ((id * 7919) % 1000) as f64 / 1000.0;
        let best = (14..17)
            .max_by(|&a, &b| quality(a).total_cmp(&quality(b)))
            .unwrap();
        for id in reached(&before) {
            let want = if id == best {
                (27, Decision::Complete)
            } else {
                (9, Decision::Stop)
            };
            assert_eq!(after[&id], want, "trial {id}");
        }
    }

    /// A sequential driver: one trial at a time, paused trials resumed first, each trial's
    /// value at step t = its id-derived quality + 1/t. Returns where each trial ended.
    fn run_band(hb: &mut HyperBand, trials: u64) -> BTreeMap<TrialId, (u64, Decision)> {
        let quality = |id: TrialId| ((id * 7919) % 1000) as f64 / 1000.0;
        let mut step: BTreeMap<TrialId, u64> = BTreeMap::new();
        let mut ended = BTreeMap::new();
        let mut next = 0;
        let mut paused = BTreeSet::new();
        loop {
            for (id, d) in hb.drain_ended() {
                assert!(
                    paused.remove(&id),
                    "only paused trials are ended from outside"
                );
                ended.insert(id, (step[&id], d));
            }
            let id = match hb.choose_paused() {
                Some(id) => {
                    assert!(paused.remove(&id));
                    id
                }
                None if next < trials => {
                    hb.on_trial_add(next, &crate::Params::default());
                    next += 1;
                    next - 1
                }
                None => break,
            };
            loop {
                let t = step.entry(id).or_insert(0);
                *t += 1;
                let d = hb.on_result(id, *t, quality(id) + 1.0 / *t as f64);
                match d {
                    Decision::Continue => continue,
                    Decision::Pause => {
                        paused.insert(id);
                    }
                    Decision::Stop | Decision::Complete => {
                        hb.on_complete(id, None);
                        ended.insert(id, (*t, d));
                    }
                    Decision::Exploit { .. } => unreachable!("HyperBand does not exploit"),
                }
                break;
            }
        }
        assert!(paused.is_empty(), "no trial left waiting: {paused:?}");
        ended
    }

    #[test]
    fn one_band_of_r81_eta3_matches_the_paper() {
        let mut hb = HyperBand::new(
            HyperBandConfig {
                max_t: 81,
                ..HyperBandConfig::default()
            },
            Mode::Min,
        );
        assert_eq!(hb.band(), vec![(81, 1), (34, 3), (15, 9), (8, 27), (5, 81)]);
        let ended = run_band(&mut hb, 143);
        assert_eq!(ended.len(), 143);
        let count = |t: u64, d: Decision| ended.values().filter(|e| **e == (t, d.clone())).count();
        let stops: Vec<usize> = [1, 3, 9, 27]
            .iter()
            .map(|&t| count(t, Decision::Stop))
            .collect();
        assert_eq!(stops, vec![54, 41, 24, 14]);
        assert_eq!(count(81, Decision::Complete), 10);
    }

    #[test]
    fn the_best_of_each_rung_go_on() {
        // min mode: lower is better. Bracket s = 1 of R = 9, eta = 3: 3 trials to step 3, 1 to 9.
        let mut hb = HyperBand::new(
            HyperBandConfig {
                max_t: 9,
                ..HyperBandConfig::default()
            },
            Mode::Min,
        );
        assert_eq!(hb.band(), vec![(9, 1), (5, 3), (3, 9)]);
        for id in 0..9 {
            hb.on_trial_add(id, &crate::Params::default());
        }
        let losses = [0.5, 0.1, 0.9, 0.3, 0.8, 0.2, 0.7, 0.6, 0.4];
        for (id, l) in losses.iter().enumerate() {
            let d = hb.on_result(id as u64, 1, *l);
            // The last to report triggers the cut and learns its fate at once.
            if id < 8 {
                assert_eq!(d, Decision::Pause);
            } else {
                assert_eq!(d, Decision::Stop, "0.4 is fourth best of nine");
            }
        }
        let mut resumed: Vec<TrialId> = std::iter::from_fn(|| hb.choose_paused()).collect();
        resumed.sort();
        assert_eq!(resumed, vec![1, 3, 5], "the three lowest losses go on");
        let stopped: BTreeSet<TrialId> = hb.drain_ended().into_iter().map(|(id, _)| id).collect();
        assert_eq!(stopped, BTreeSet::from([0, 2, 4, 6, 7]));
    }

    #[test]
    fn describe_shows_running_brackets_and_their_rungs() {
        let mut hb = HyperBand::new(
            HyperBandConfig {
                max_t: 9,
                ..HyperBandConfig::default()
            },
            Mode::Min,
        );
        // The first bracket of R = 9, eta = 3 takes 9 trials at t = 1.
        for id in 0..3 {
            hb.on_trial_add(id, &crate::Params::default());
        }
        hb.on_result(0, 1, 0.5);
        assert_eq!(
            hb.describe(),
            ["bracket 0: 3/9 trials, rung t=1 (1/3), 1/3 there"]
        );
    }
}
