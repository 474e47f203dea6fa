//! NSGA-II (Deb et al. 2002) as Optuna 5's `NSGAIISampler` runs it: generations of
//! `population_size` trials; each generation's parents are the elite of the previous parents
//! and the previous generation's completed trials (non-dominated sorting, then crowding
//! distance); a child takes each parameter from one of two parents picked by binary tournament
//! (uniform crossover), and each parameter is redrawn at random with probability 1 / (number
//! of parameters). With constraints, domination is Deb's constrained domination (a feasible
//! trial dominates an infeasible one, the less violating of two infeasible ones dominates),
//! and the infeasible rank after every feasible front, by violation.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::pareto::{crowding_distances, dominates, fronts};
use crate::{trial_rng, FieldError, History, Params, Searcher, Space, Status, TrialId};

/// NSGA-II's settings (Optuna 5's names and defaults).
///
/// ```
/// let o = tune_search::Nsga2Options::default();
/// assert_eq!((o.population_size, o.crossover_prob, o.swapping_prob), (50, 0.9, 0.5));
/// let bad = tune_search::Nsga2Options { population_size: 1, ..o };
/// assert_eq!(bad.validate().unwrap_err().key, "population_size");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Nsga2Options {
    /// Trials per generation, and parents kept.
    pub population_size: u64,
    /// Probability that a child is a crossover of two parents (else a copy of one).
    pub crossover_prob: f64,
    /// In a crossover, the probability that a parameter comes from the second parent.
    pub swapping_prob: f64,
    /// Probability that a parameter is redrawn at random; unset: 1 / number of parameters.
    pub mutation_prob: Option<f64>,
}

impl Default for Nsga2Options {
    fn default() -> Self {
        Nsga2Options {
            population_size: 50,
            crossover_prob: 0.9,
            swapping_prob: 0.5,
            mutation_prob: None,
        }
    }
}

impl Nsga2Options {
    /// Checks the settings' ranges: a population of at least 2 (a crossover needs two
    /// parents), probabilities in [0, 1].
    pub fn validate(&self) -> Result<(), FieldError> {
        FieldError::check_at_least("population_size", self.population_size, 2)?;
        FieldError::check_within("crossover_prob", self.crossover_prob, 0.0, 1.0)?;
        FieldError::check_within("swapping_prob", self.swapping_prob, 0.0, 1.0)?;
        if let Some(p) = self.mutation_prob {
            FieldError::check_within("mutation_prob", p, 0.0, 1.0)?;
        }
        Ok(())
    }
}

/// The NSGA-II searcher. Trial `id` belongs to generation `id / population_size`; generation 0
/// is drawn at random. Where Optuna counts a generation full once `population_size` of its
/// trials completed, here it is full by ids, so that a suggestion stays a pure function of the
/// seed, the id and the history: trials of the previous generation still running when a
/// child is proposed are not among its parents' candidates, as in Optuna. Works for one
/// objective too (dominance is then "better").
///
/// ```
/// use tune_search::{History, Mode, Nsga2, Nsga2Options, Searcher, Space, Status};
/// let space = Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
/// let options = Nsga2Options { population_size: 10, mutation_prob: Some(0.1), ..Default::default() };
/// let mut search = Nsga2::new(space, 0, options);
/// let mut history = History::with_objectives(vec![Mode::Min, Mode::Min]);
/// for id in 0..60 {
///     let params = search.suggest(id, &history).unwrap();
///     let x = params.f64("x").unwrap();
///     history.record(id, params, Status::Running);
///     // Two objectives in conflict: every x in [0.2, 0.8] is Pareto optimal.
///     history.report_values(id, 1, &[(x - 0.2).powi(2), (x - 0.8).powi(2)]);
///     history.set_status(id, Status::Completed);
/// }
/// let last = (50..60).map(|id| history.get(id).unwrap().params.f64("x").unwrap());
/// assert!(last.filter(|x| (0.15..=0.85).contains(x)).count() >= 8);
/// ```
#[derive(Debug, Clone)]
pub struct Nsga2 {
    space: Space,
    seed: u64,
    options: Nsga2Options,
    /// Parents computed for a generation, and the history length they were computed from:
    /// reused while no trial of the generations before has changed.
    cache: Option<ParentsCache>,
}

#[derive(Debug, Clone)]
struct ParentsCache {
    generation: u64,
    key: Vec<(TrialId, Status)>,
    parents: Vec<Member>,
}

/// A completed trial as NSGA-II ranks it.
#[derive(Debug, Clone)]
struct Member {
    id: TrialId,
    losses: Vec<f64>,
    /// How far outside its constraints (0: feasible).
    violation: f64,
}

/// Deb's constrained domination (Optuna's `_constrained_dominates`).
fn constrained_dominates(a: &Member, b: &Member) -> bool {
    match (a.violation == 0.0, b.violation == 0.0) {
        (true, true) => dominates(&a.losses, &b.losses),
        (true, false) => true,
        (false, true) => false,
        (false, false) => a.violation < b.violation,
    }
}

impl Nsga2 {
    /// The searcher over `space` (options as given: call [`Nsga2Options::validate`] first).
    pub fn new(space: Space, seed: u64, options: Nsga2Options) -> Nsga2 {
        Nsga2 {
            space,
            seed,
            options,
            cache: None,
        }
    }

    fn population(&self) -> u64 {
        self.options.population_size.max(2)
    }

    /// The parents of generation `generation`: the elite of the parents of the one before and
    /// its completed trials, from generation 1 on.
    fn parents(&mut self, generation: u64, history: &History) -> Vec<Member> {
        let population = self.population();
        // What the parents depend on: the status of every trial of the earlier generations.
        let key: Vec<(TrialId, Status)> = history
            .iter()
            .take_while(|t| t.id < generation * population)
            .map(|t| (t.id, t.status))
            .collect();
        if let Some(c) = &self.cache {
            if c.generation == generation && c.key == key {
                return c.parents.clone();
            }
        }
        let mut parents: Vec<Member> = Vec::new();
        for g in 0..generation {
            let mut candidates = parents;
            candidates.extend(
                history
                    .iter()
                    .filter(|t| t.id / population == g && t.status == Status::Completed)
                    .filter_map(|t| {
                        Some(Member {
                            id: t.id,
                            losses: history.losses(t)?,
                            violation: t.violation(),
                        })
                    }),
            );
            parents = elite(candidates, population as usize);
        }
        self.cache = Some(ParentsCache {
            generation,
            key,
            parents: parents.clone(),
        });
        parents
    }
}

/// The ranks of `candidates`, best first: the fronts of the feasible ones, then the
/// infeasible ones grouped by equal violation, least first (Optuna's `_rank_population`).
fn ranks(candidates: &[Member], at_least: usize) -> Vec<Vec<usize>> {
    let feasible: Vec<usize> = (0..candidates.len())
        .filter(|&i| candidates[i].violation == 0.0)
        .collect();
    let losses: Vec<&[f64]> = feasible
        .iter()
        .map(|&i| candidates[i].losses.as_slice())
        .collect();
    let mut out: Vec<Vec<usize>> = fronts(&losses, at_least)
        .into_iter()
        .map(|f| f.into_iter().map(|k| feasible[k]).collect())
        .collect();
    let mut infeasible: Vec<usize> = (0..candidates.len())
        .filter(|&i| candidates[i].violation > 0.0)
        .collect();
    infeasible.sort_by(|&a, &b| {
        candidates[a]
            .violation
            .total_cmp(&candidates[b].violation)
            .then(a.cmp(&b))
    });
    for i in infeasible {
        match out.last_mut() {
            Some(last)
                if candidates[last[0]].violation > 0.0
                    && candidates[last[0]].violation == candidates[i].violation =>
            {
                last.push(i)
            }
            _ => out.push(vec![i]),
        }
    }
    out
}

/// The best `size` of `candidates`: whole ranks while they fit, then the least crowded of
/// the next (Optuna's `NSGAIIElitePopulationSelectionStrategy`).
fn elite(candidates: Vec<Member>, size: usize) -> Vec<Member> {
    if candidates.len() <= size {
        return candidates;
    }
    let losses: Vec<&[f64]> = candidates.iter().map(|m| m.losses.as_slice()).collect();
    let mut chosen = Vec::with_capacity(size);
    for front in ranks(&candidates, size) {
        if chosen.len() + front.len() <= size {
            chosen.extend(front);
            continue;
        }
        let points: Vec<&[f64]> = front.iter().map(|&i| losses[i]).collect();
        let distance = crowding_distances(&points);
        let mut order: Vec<usize> = (0..front.len()).collect();
        // Most distant first; ties to the earlier trial.
        order.sort_by(|&a, &b| distance[b].total_cmp(&distance[a]).then(a.cmp(&b)));
        let room = size - chosen.len();
        chosen.extend(order[..room].iter().map(|&k| front[k]));
        break;
    }
    let mut taken: Vec<Option<Member>> = candidates.into_iter().map(Some).collect();
    chosen.iter().filter_map(|&i| taken[i].take()).collect()
}

/// Binary tournament: of two members drawn at random, one that dominates the other, else
/// either with even odds (Optuna's `_select_parent`).
fn tournament<'a>(pool: &[&'a Member], rng: &mut ChaCha8Rng) -> &'a Member {
    let a = pool[rng.random_range(0..pool.len())];
    let b = pool[rng.random_range(0..pool.len())];
    if constrained_dominates(a, b) {
        a
    } else if constrained_dominates(b, a) {
        b
    } else if rng.random::<f64>() < 0.5 {
        a
    } else {
        b
    }
}

impl Searcher for Nsga2 {
    fn suggest(&mut self, id: TrialId, history: &History) -> Option<Params> {
        let mut rng = trial_rng(self.seed, id);
        let generation = id / self.population();
        let parents = if generation == 0 {
            Vec::new()
        } else {
            self.parents(generation, history)
        };
        if parents.is_empty() {
            return Some(self.space.sample(&mut rng));
        }
        let params_of = |m: &Member| history.get(m.id).map(|t| &t.params);
        let pool: Vec<&Member> = parents.iter().collect();
        // The values the child inherits; redrawn parameters are left out.
        let mut inherited = Params::default();
        if pool.len() >= 2 && rng.random::<f64>() < self.options.crossover_prob {
            let first = tournament(&pool, &mut rng);
            let rest: Vec<&Member> = pool.iter().copied().filter(|m| m.id != first.id).collect();
            let second = tournament(&rest, &mut rng);
            let (a, b) = (params_of(first)?, params_of(second)?);
            for p in self.space.params() {
                let swap = rng.random::<f64>() < self.options.swapping_prob;
                let (from, other) = if swap { (b, a) } else { (a, b) };
                if let Some(v) = from.get(&p.name).or_else(|| other.get(&p.name)) {
                    inherited.insert(p.name.clone(), v.clone());
                }
            }
        } else {
            let parent = params_of(pool[rng.random_range(0..pool.len())])?;
            inherited = parent.clone();
        }
        let mutation = self
            .options
            .mutation_prob
            .unwrap_or(1.0 / self.space.len().max(1) as f64);
        let mut kept = Params::default();
        for (name, value) in inherited.iter() {
            if rng.random::<f64>() >= mutation {
                kept.insert(name, value.clone());
            }
        }
        // Parameters not kept (or inactive in the parents) are drawn; conditions are
        // respected as the child's own values decide them.
        Some(self.space.sample_with(&mut rng, &kept))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Mode;

    fn member(id: TrialId, losses: &[f64]) -> Member {
        Member {
            id,
            losses: losses.to_vec(),
            violation: 0.0,
        }
    }

    #[test]
    fn infeasible_trials_rank_after_every_feasible_one_by_violation() {
        let infeasible = |id, losses: &[f64], violation| Member {
            violation,
            ..member(id, losses)
        };
        let candidates = vec![
            infeasible(0, &[0.0, 0.0], 2.0),
            member(1, &[5.0, 5.0]),
            infeasible(2, &[9.0, 9.0], 0.5),
            member(3, &[1.0, 6.0]),
            infeasible(4, &[1.0, 1.0], 0.5),
        ];
        assert_eq!(
            ranks(&candidates, usize::MAX),
            vec![vec![1, 3], vec![2, 4], vec![0]]
        );
        let ids: Vec<TrialId> = elite(candidates.clone(), 3).iter().map(|m| m.id).collect();
        assert_eq!(ids[..2], [1, 3]);
        assert!(ids[2] == 2 || ids[2] == 4);
        // The best-looking trial loses to every feasible one, and to a lesser violation.
        assert!(constrained_dominates(&candidates[1], &candidates[0]));
        assert!(constrained_dominates(&candidates[2], &candidates[0]));
        assert!(!constrained_dominates(&candidates[2], &candidates[4]));
    }

    #[test]
    fn elite_keeps_whole_fronts_then_the_least_crowded() {
        // Front 0: ids 0..4 along a line; front 1: id 4. Room for 3: the two ends (infinite
        // distance) and, of the middle two, the one with the wider gap around it.
        let candidates = vec![
            member(0, &[0.0, 4.0]),
            member(1, &[1.0, 3.0]),
            member(2, &[3.5, 0.5]),
            member(3, &[4.0, 0.0]),
            member(4, &[5.0, 5.0]),
        ];
        let ids: Vec<TrialId> = elite(candidates.clone(), 3).iter().map(|m| m.id).collect();
        // Distances: id 1: (3.5 - 0) / 4 + (4 - 0.5) / 4 = 1.75; id 2: (4 - 1) / 4 + (3 - 0) / 4 = 1.5.
        assert_eq!(ids, vec![0, 3, 1]);
        let ids: Vec<TrialId> = elite(candidates, 4).iter().map(|m| m.id).collect();
        assert_eq!(ids, vec![0, 1, 2, 3]);
    }

    #[test]
    fn generation_zero_is_random_and_children_come_from_parents() {
        let space = Space::builder()
            .choice("a", ["p", "q", "r", "s"])
            .choice("b", ["p", "q", "r", "s"])
            .choice("c", ["p", "q", "r", "s"])
            .choice("d", ["p", "q", "r", "s"])
            .build()
            .unwrap();
        let options = Nsga2Options {
            population_size: 4,
            mutation_prob: Some(0.0),
            crossover_prob: 1.0,
            ..Default::default()
        };
        let mut s = Nsga2::new(space.clone(), 3, options);
        let mut h = History::with_objectives(vec![Mode::Min, Mode::Max]);
        let mut random = crate::RandomSearch::new(space, 3);
        for id in 0..4 {
            let p = s.suggest(id, &h).unwrap();
            assert_eq!(Some(&p), random.suggest(id, &h).as_ref());
            h.record(id, p, Status::Running);
            h.report_values(id, 1, &[id as f64, id as f64]);
            h.set_status(id, Status::Completed);
        }
        // Every child's value of each parameter is some parent's.
        for id in 4..8 {
            let child = s.suggest(id, &h).unwrap();
            for (name, v) in child.iter() {
                assert!((0..4).any(|p| h.get(p).unwrap().params.get(name) == Some(v)));
            }
        }
    }

    #[test]
    fn running_trials_of_the_last_generation_are_left_out_until_they_complete() {
        let space = Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
        let options = Nsga2Options {
            population_size: 3,
            ..Default::default()
        };
        let mut s = Nsga2::new(space, 0, options);
        let mut h = History::with_objectives(vec![Mode::Min, Mode::Min]);
        for id in 0..3 {
            let p = s.suggest(id, &h).unwrap();
            h.record(id, p, Status::Running);
        }
        h.report_values(0, 1, &[1.0, 1.0]);
        h.set_status(0, Status::Completed);
        let ids = |s: &mut Nsga2, h: &History| -> Vec<TrialId> {
            s.parents(1, h).iter().map(|m| m.id).collect()
        };
        assert_eq!(ids(&mut s, &h), vec![0]);
        h.report_values(1, 1, &[0.5, 2.0]);
        h.set_status(1, Status::Completed);
        assert_eq!(ids(&mut s, &h), vec![0, 1]);
        // Same seed, id and history: the same suggestion from a fresh searcher.
        let mut fresh = Nsga2::new(s.space.clone(), 0, s.options.clone());
        assert_eq!(s.suggest(4, &h), fresh.suggest(4, &h));
    }
}
