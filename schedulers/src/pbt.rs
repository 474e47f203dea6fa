//! Population-based training (Jaderberg et al. 2017), as Ray Tune's
//! `PopulationBasedTraining` runs it (asynchronous).
//!
//! Every `perturbation_interval` steps of a trial, the population is ranked by the last reported
//! value. A trial in the bottom `quantile_fraction` exploits a trial drawn from the top one: it
//! takes over that trial's checkpoint and its params, explored. Exploring resamples a parameter
//! from its domain with probability `resample_probability`, else multiplies a number by 1.2 or
//! 0.8 (kept in the domain) or shifts a choice to a neighbouring value. Every draw is seeded by
//! (seed, trial, step), so replaying the same results makes the same decisions.

use std::collections::{BTreeMap, VecDeque};

use rand::Rng;
use tune_search::{trial_rng, Domain, Params, Space, Value};

use serde::{Deserialize, Serialize};
use tune_search::FieldError;

use crate::{reward, shown, Decision, Mode, Scheduler, TrialId};

/// PBT's settings (Ray Tune's names; the interval is in steps).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PbtConfig {
    /// Steps between a trial's perturbations.
    pub perturbation_interval: u64,
    /// The share of the population at each end that exploits / is exploited.
    pub quantile_fraction: f64,
    /// The chance of resampling a parameter instead of perturbing it.
    pub resample_probability: f64,
}

impl PbtConfig {
    /// Checks the settings' ranges.
    ///
    /// ```
    /// let bad = tune_schedulers::PbtConfig { quantile_fraction: 0.75, ..Default::default() };
    /// assert_eq!(bad.validate().unwrap_err().message, "expected a number in (0, 0.5], found 0.75");
    /// ```
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.perturbation_interval == 0 {
            return Err(FieldError::new(
                "perturbation_interval",
                "expected at least 1 step, found 0",
            ));
        }
        if !(self.quantile_fraction > 0.0 && self.quantile_fraction <= 0.5) {
            return Err(FieldError::new(
                "quantile_fraction",
                format!(
                    "expected a number in (0, 0.5], found {}",
                    self.quantile_fraction
                ),
            ));
        }
        FieldError::check_within("resample_probability", self.resample_probability, 0.0, 1.0)
    }
}

impl Default for PbtConfig {
    fn default() -> Self {
        PbtConfig {
            perturbation_interval: 5,
            quantile_fraction: 0.25,
            resample_probability: 0.25,
        }
    }
}

#[derive(Debug, Clone)]
struct Member {
    params: Params,
    /// Reward (higher is better) and step of the last report.
    last: Option<f64>,
    last_step: u64,
    last_perturbation: u64,
    /// Ended trials leave the ranking: there is nothing left to train from their checkpoints.
    finished: bool,
}

/// The PBT scheduler.
///
/// ```
/// use tune_schedulers::{Decision, Mode, Pbt, PbtConfig, Scheduler};
/// use tune_search::{Params, Space, Value};
/// let space = Space::builder().loguniform("lr", 1e-4, 1e-1).build().unwrap();
/// let config = PbtConfig { perturbation_interval: 2, ..PbtConfig::default() };
/// let mut pbt = Pbt::new(config, space, Mode::Min, 0);
/// for id in 0..4 {
///     let mut p = Params::default();
///     p.insert("lr", Value::Float(1e-3 * (id + 1) as f64));
///     pbt.on_trial_add(id, &p);
///     pbt.on_result(id, 1, id as f64);
/// }
/// // At step 2 the worst trial (loss 3) copies the best (trial 0).
/// match pbt.on_result(3, 2, 3.0) {
///     Decision::Exploit { from, .. } => assert_eq!(from, 0),
///     other => panic!("{other:?}"),
/// }
/// ```
#[derive(Debug, Clone)]
pub struct Pbt {
    config: PbtConfig,
    space: Space,
    mode: Mode,
    seed: u64,
    population: BTreeMap<TrialId, Member>,
    /// The latest exploits as (trial, source, step), oldest first, for `describe`.
    exploits: VecDeque<(TrialId, TrialId, u64)>,
}

impl Pbt {
    pub fn new(config: PbtConfig, space: Space, mode: Mode, seed: u64) -> Pbt {
        Pbt {
            config,
            space,
            mode,
            seed,
            population: BTreeMap::new(),
            exploits: VecDeque::new(),
        }
    }

    /// (bottom, top) of the population by last reward, each `ceil(n * q)` trials but at most
    /// half (Ray's `_quantiles`).
    fn quantiles(&self) -> (Vec<TrialId>, Vec<TrialId>) {
        let mut ranked: Vec<(TrialId, f64)> = self
            .population
            .iter()
            .filter(|(_, m)| !m.finished)
            .filter_map(|(&id, m)| m.last.map(|r| (id, r)))
            .collect();
        if ranked.len() <= 1 {
            return (Vec::new(), Vec::new());
        }
        ranked.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        let n = ranked.len();
        let k = ((n as f64 * self.config.quantile_fraction).ceil() as usize).min(n / 2);
        let ids: Vec<TrialId> = ranked.into_iter().map(|(id, _)| id).collect();
        (ids[..k].to_vec(), ids[n - k..].to_vec())
    }

    /// Explores `params`: each active parameter resampled or perturbed; conditional ones that
    /// become active are drawn, those that become inactive dropped.
    fn explore<R: Rng>(&self, params: &Params, rng: &mut R) -> Params {
        let mut out = Params::default();
        let fresh = self.space.sample(rng);
        for p in self.space.params() {
            let Some(old) = params.get(&p.name) else {
                continue;
            };
            let value = if rng.random::<f64>() < self.config.resample_probability {
                fresh
                    .get(&p.name)
                    .cloned()
                    .unwrap_or_else(|| p.domain.sample(rng))
            } else {
                perturb(&p.domain, old, rng)
            };
            out.insert(p.name.clone(), value);
        }
        // Keep exactly the parameters active under the new values.
        let mut fixed = Params::default();
        for p in self.space.params() {
            if self.space.is_active(p, &out) {
                let v = out
                    .get(&p.name)
                    .cloned()
                    .unwrap_or_else(|| p.domain.sample(rng));
                fixed.insert(p.name.clone(), v);
            }
        }
        fixed
    }
}

/// x1.2 or x0.8 for numbers (kept inside the domain, on its grid), a neighbouring value for
/// choices and grids.
fn perturb<R: Rng>(domain: &Domain, old: &Value, rng: &mut R) -> Value {
    let up = rng.random::<bool>();
    if let Some(values) = domain.values() {
        let i = values.iter().position(|v| v == old).unwrap_or(0);
        let j = if up {
            (i + 1).min(values.len() - 1)
        } else {
            i.saturating_sub(1)
        };
        return values[j].clone();
    }
    let x = old.as_f64().unwrap_or(0.0) * if up { 1.2 } else { 0.8 };
    match *domain {
        Domain::Uniform { low, high } => Value::Float(x.clamp(low, high - (high - low) * 1e-12)),
        Domain::LogUniform { low, high } => Value::Float(x.clamp(low, high)),
        Domain::QUniform { low, high, q } | Domain::QLogUniform { low, high, q } => {
            let k = ((x - low) / q).round().max(0.0);
            let v = low + k * q;
            let v = if v > high { v - q } else { v };
            Value::Float(v.clamp(low, high))
        }
        Domain::Int {
            low, high, step, ..
        } => Value::Int(Domain::int_nearest(low, high, step, x)),
        Domain::Normal { .. } => Value::Float(x),
        Domain::Choice(_) | Domain::Grid(_) => old.clone(),
    }
}

impl Scheduler for Pbt {
    fn on_trial_add(&mut self, id: TrialId, params: &Params) {
        self.population.insert(
            id,
            Member {
                params: params.clone(),
                last: None,
                last_step: 0,
                last_perturbation: 0,
                finished: false,
            },
        );
    }

    fn on_complete(&mut self, id: TrialId, _last: Option<(u64, f64)>) {
        if let Some(m) = self.population.get_mut(&id) {
            m.finished = true;
        }
    }

    fn on_result(&mut self, id: TrialId, step: u64, value: f64) -> Decision {
        let r = reward(self.mode, value);
        let Some(member) = self.population.get_mut(&id) else {
            return Decision::Continue;
        };
        member.last = Some(r);
        member.last_step = step;
        if step < member.last_perturbation + self.config.perturbation_interval {
            return Decision::Continue;
        }
        member.last_perturbation = step;
        let (bottom, top) = self.quantiles();
        if !bottom.contains(&id) || top.is_empty() {
            return Decision::Continue;
        }
        let mut rng = trial_rng(self.seed ^ 0x5EED_0F9B, id ^ step.rotate_left(32));
        let from = top[rng.random_range(0..top.len())];
        let params = self.explore(&self.population[&from].params, &mut rng);
        // It continues from the source's checkpoint, with the source's standing, and trains a
        // whole interval from there before it can be perturbed again.
        let (source_last, source_step) = self
            .population
            .get(&from)
            .map_or((None, 0), |m| (m.last, m.last_step));
        if let Some(member) = self.population.get_mut(&id) {
            member.params = params.clone();
            member.last = source_last;
            member.last_perturbation = source_step;
        }
        if self.exploits.len() == 5 {
            self.exploits.pop_front();
        }
        self.exploits.push_back((id, from, step));
        Decision::Exploit { from, params }
    }

    /// The population, the values that mark its top and bottom quantiles, and the latest
    /// exploits.
    fn describe(&self) -> Vec<String> {
        let training = self.population.values().filter(|m| !m.finished).count();
        let mut lines = vec![format!(
            "population {}, {training} training, perturbed every {} steps",
            self.population.len(),
            self.config.perturbation_interval
        )];
        let (bottom, top) = self.quantiles();
        let value = |ids: &[TrialId], pick: fn(f64, f64) -> f64| {
            ids.iter()
                .filter_map(|id| self.population[id].last)
                .reduce(pick)
                .map(|r| shown(self.mode, r))
        };
        if let (Some(b), Some(t)) = (value(&bottom, f64::max), value(&top, f64::min)) {
            lines.push(format!(
                "the bottom {} (at best {b}) copy the top {} (at worst {t})",
                bottom.len(),
                top.len()
            ));
        }
        lines.extend(self.exploits.iter().rev().map(|(id, from, step)| {
            format!("trial {id} took trial {from}'s weights at step {step}")
        }));
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space() -> Space {
        Space::builder()
            .loguniform("lr", 1e-4, 1e-1)
            .int("batch", 16, 256)
            .choice("opt", ["sgd", "adam", "rmsprop"])
            .build()
            .unwrap()
    }

    fn params(lr: f64, batch: i64, opt: &str) -> Params {
        let mut p = Params::default();
        p.insert("lr", Value::Float(lr));
        p.insert("batch", Value::Int(batch));
        p.insert("opt", Value::from(opt));
        p
    }

    fn population(pbt: &mut Pbt, n: u64) {
        for id in 0..n {
            pbt.on_trial_add(id, &params(1e-3, 64, "adam"));
        }
    }

    #[test]
    fn quantiles_follow_ray() {
        let mut pbt = Pbt::new(PbtConfig::default(), space(), Mode::Max, 0);
        population(&mut pbt, 8);
        for id in 0..8 {
            pbt.on_result(id, 1, id as f64);
        }
        // ceil(8 * 0.25) = 2 at each end.
        assert_eq!(pbt.quantiles(), (vec![0, 1], vec![6, 7]));
        let mut small = Pbt::new(
            PbtConfig {
                quantile_fraction: 0.9,
                ..PbtConfig::default()
            },
            space(),
            Mode::Max,
            0,
        );
        population(&mut small, 3);
        for id in 0..3 {
            small.on_result(id, 1, id as f64);
        }
        // At most half the population: floor(3 / 2) = 1.
        assert_eq!(small.quantiles(), (vec![0], vec![2]));
    }

    #[test]
    fn bottom_trials_exploit_top_ones_at_the_interval_with_a_fixed_seed() {
        let config = PbtConfig {
            perturbation_interval: 4,
            ..PbtConfig::default()
        };
        let mut a = Pbt::new(config.clone(), space(), Mode::Min, 11);
        let mut b = Pbt::new(config, space(), Mode::Min, 11);
        for pbt in [&mut a, &mut b] {
            population(pbt, 8);
            for id in 0..8 {
                // Losses: trial 0 best, trial 7 worst.
                for step in 1..4 {
                    assert_eq!(
                        pbt.on_result(id, step, id as f64),
                        Decision::Continue,
                        "before the interval"
                    );
                }
            }
        }
        let da = a.on_result(7, 4, 7.0);
        let db = b.on_result(7, 4, 7.0);
        assert_eq!(da, db, "same seed, same results, same decision");
        let Decision::Exploit { from, params: p } = da else {
            panic!("{da:?}")
        };
        assert!(from == 0 || from == 1, "from the top quantile: {from}");
        // Explored from (1e-3, 64, adam): each value resampled or moved one notch.
        let lr = p.f64("lr").unwrap();
        assert!((1e-4..=1e-1).contains(&lr));
        let opt = p.str("opt").unwrap();
        assert!(["sgd", "adam", "rmsprop"].contains(&opt));
        // The middle of the pack and the best continue.
        assert_eq!(a.on_result(3, 4, 3.0), Decision::Continue);
        assert_eq!(a.on_result(0, 4, 0.0), Decision::Continue);
        // Trial 7 is not perturbed again before another interval.
        assert_eq!(a.on_result(7, 5, 7.0), Decision::Continue);
    }

    #[test]
    fn perturbation_multiplies_or_shifts_and_stays_in_the_domain() {
        let mut rng = trial_rng(3, 3);
        let (mut up, mut down) = (0, 0);
        for _ in 0..400 {
            match perturb(
                &Domain::LogUniform {
                    low: 1e-4,
                    high: 1e-1,
                },
                &Value::Float(1e-2),
                &mut rng,
            ) {
                Value::Float(x) if (x - 1.2e-2).abs() < 1e-12 => up += 1,
                Value::Float(x) if (x - 0.8e-2).abs() < 1e-12 => down += 1,
                other => panic!("{other:?}"),
            }
        }
        assert!(up > 150 && down > 150);
        // Near the top, x1.2 is clipped to the bound.
        for _ in 0..50 {
            let x = perturb(
                &Domain::LogUniform {
                    low: 1e-4,
                    high: 1e-1,
                },
                &Value::Float(0.099),
                &mut rng,
            )
            .as_f64()
            .unwrap();
            assert!(x == 0.1 || (x - 0.0792).abs() < 1e-12, "{x}");
        }
        let choice = Domain::Choice(vec!["a".into(), "b".into(), "c".into()]);
        for _ in 0..50 {
            let v = perturb(&choice, &Value::from("a"), &mut rng);
            assert!(
                v == Value::from("a") || v == Value::from("b"),
                "a shifts to b or stays at the end: {v:?}"
            );
        }
        let int = Domain::Int {
            low: 16,
            high: 256,
            step: 1,
            log: false,
        };
        for _ in 0..50 {
            let v = perturb(&int, &Value::Int(250), &mut rng).as_i64().unwrap();
            assert!(v == 200 || v == 256, "{v}");
        }
    }

    #[test]
    fn describe_shows_the_population_quantiles_and_exploits() {
        let config = PbtConfig {
            perturbation_interval: 2,
            ..PbtConfig::default()
        };
        let mut pbt = Pbt::new(config, space(), Mode::Min, 0);
        for id in 0..4 {
            pbt.on_trial_add(id, &params(1e-3, 32, "sgd"));
            pbt.on_result(id, 1, id as f64);
        }
        assert!(matches!(
            pbt.on_result(3, 2, 3.0),
            Decision::Exploit { from: 0, .. }
        ));
        let lines = pbt.describe();
        assert_eq!(
            lines[0],
            "population 4, 4 training, perturbed every 2 steps"
        );
        // Trial 3 now stands where its source stood (loss 0): the bottom is trial 2 (loss 2),
        // the top trial 0 or 3 (loss 0).
        assert_eq!(
            lines[1],
            "the bottom 1 (at best 2) copy the top 1 (at worst 0)"
        );
        assert_eq!(lines[2], "trial 3 took trial 0's weights at step 2");
    }
}
