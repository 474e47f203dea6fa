//! Tree-structured Parzen Estimator (Bergstra et al. 2011), as Optuna 5 runs it.
//!
//! The policy lives here: which trials are "good" (the best `gamma(n)`), how they are
//! weighted, how the space is cut into groups, how candidates are chosen. The mixture itself is
//! in `estimator.rs`, the numerics in `numerics.rs`, the coordinate transforms in `coords.rs`.

pub(crate) mod coords;
pub(crate) mod estimator;
mod eval;
mod index;
mod multi;
mod numerics;
mod options;

pub use options::{Fidelity, TpeOptions};

use std::cmp::Ordering;

use rand_chacha::ChaCha8Rng;

use crate::{trial_rng, Condition, History, Params, Searcher, Space, TrialId};
use coords::{dim_spec, from_internal, to_internal, TrialCoords};
use estimator::{DimSpec, EstimatorOptions, NormMemo, Parzen};
use eval::Table;
use index::TrialIndex;

/// A suggestion's buffers, reused: late in a sweep they are megabytes, and allocating them
/// afresh each time cost more in page faults than the arithmetic done in them.
#[derive(Debug, Clone, Default)]
struct Workspace {
    /// Per trial id: among the best `gamma(n)`?
    good: Vec<bool>,
    /// Per trial id: kernel index on the bad side in the current group (u32::MAX: none).
    kernel_of: Vec<u32>,
    below_ids: Vec<TrialId>,
    above_ids: Vec<TrialId>,
    /// Per group dimension: the bad observations' internal coordinates.
    above_cols: Vec<Vec<f64>>,
    /// Per group dimension: bad kernel indices in the order of their values.
    orders: Vec<Vec<usize>>,
    weights: Vec<f64>,
    kernel_bufs: (Vec<f64>, Vec<f64>),
    /// The bad side's scoring table.
    bad: Table,
    /// Per-component terms of a density evaluation.
    terms: Vec<f32>,
    /// How the good trials weigh; per trial id where it is [`GoodWeights::PerTrial`].
    good_weights: GoodWeights,
}

/// How the good side's kernels weigh.
#[derive(Debug, Clone, Default)]
enum GoodWeights {
    /// One objective: Optuna's linear forgetting ([`TpeOptions::weights`]).
    #[default]
    ByAge,
    /// Several objectives, Optuna 5's MOTPE: all the same.
    Equal,
    /// Several objectives, [`TpeOptions::hypervolume_weights`]: per trial id.
    PerTrial(Vec<f64>),
}

/// Parameters sampled together: same activation condition.
#[derive(Debug, Clone)]
struct Group {
    /// Indices into the space's parameters.
    params: Vec<usize>,
    specs: Vec<DimSpec>,
    when: Vec<Condition>,
    /// Whether other parameters with the same `when` may join.
    shared: bool,
}

/// The TPE searcher.
///
/// ```
/// use tune_search::{History, Mode, Params, Searcher, Space, Status, Tpe, TpeOptions, Value};
/// let space = Space::builder().uniform("x", -5.0, 5.0).build().unwrap();
/// let mut tpe = Tpe::new(space, 0, TpeOptions::default());
/// let mut h = History::new(Mode::Min);
/// for id in 0..30 {
///     let p = tpe.suggest(id, &h).unwrap();
///     let x = p.f64("x").unwrap();
///     h.record(id, p, Status::Running);
///     h.report(id, 1, (x - 1.0) * (x - 1.0));
///     h.set_status(id, Status::Completed);
/// }
/// let best = h.best().unwrap().params.f64("x").unwrap();
/// assert!((best - 1.0).abs() < 0.5);
/// ```
#[derive(Debug, Clone)]
pub struct Tpe {
    space: Space,
    seed: u64,
    opts: TpeOptions,
    groups: Vec<Group>,
    /// Internal coordinates of each trial's params (NaN where inactive), by trial id.
    coords: TrialCoords,
    /// Normalisers of the bad-trial kernels (the many), reused between suggestions.
    norms: NormMemo,
    /// Rankings and per-parameter orders, kept current between suggestions.
    index: TrialIndex,
    /// Buffers of a suggestion, kept for the next one.
    work: Workspace,
}

impl Tpe {
    pub fn new(space: Space, seed: u64, opts: TpeOptions) -> Tpe {
        let groups = make_groups(&space, &opts);
        Tpe {
            norms: NormMemo::new(space.len()),
            coords: TrialCoords::new(space.len()),
            space,
            seed,
            opts,
            groups,
            index: TrialIndex::default(),
            work: Workspace::default(),
        }
    }

    /// Records the internal coordinates of trial `id` (once: a trial's params never change).
    fn record_coords(&mut self, id: TrialId, params: &Params) {
        let space = &self.space;
        self.coords.ensure(id, |row| {
            for (x, p) in row.iter_mut().zip(space.params()) {
                *x = params
                    .get(&p.name)
                    .and_then(|v| to_internal(&p.domain, v))
                    .unwrap_or(f64::NAN);
            }
        });
    }
}

fn make_groups(space: &Space, opts: &TpeOptions) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for (i, p) in space.params().iter().enumerate() {
        // Multivariate: unconditional parameters share one group; with `group`, so do
        // parameters with the same `when`. Everything else is modelled on its own.
        let shared = opts.multivariate && (opts.group || p.when.is_empty());
        match groups
            .iter_mut()
            .find(|g| shared && g.shared && g.when == p.when)
        {
            Some(g) => {
                g.params.push(i);
                g.specs.push(dim_spec(&p.domain));
            }
            None => groups.push(Group {
                params: vec![i],
                specs: vec![dim_spec(&p.domain)],
                when: p.when.clone(),
                shared,
            }),
        }
    }
    // Parents before children: a group is sampled once its conditions can be checked.
    let position = |g: &Group| {
        g.when
            .iter()
            .filter_map(|c| space.params().iter().position(|p| p.name == c.param))
            .max()
            .map_or(0, |i| i + 1)
    };
    groups.sort_by_key(|g| position(g));
    groups
}

impl Searcher for Tpe {
    fn suggest(&mut self, id: TrialId, history: &History) -> Option<Params> {
        let mut rng = trial_rng(self.seed, id);
        for t in history.iter() {
            self.record_coords(t.id, &t.params);
        }
        let at_step = match self.opts.fidelity() {
            Fidelity::Rung => history.rung_step(self.space.len() + 2),
            Fidelity::Last => None,
        };
        self.index.sync(
            history,
            &self.coords,
            self.space.len(),
            self.opts.constant_liar(),
            self.opts.stopped_min_depth(),
            at_step,
        );
        let finished = self.index.finished();
        let ended = if self.opts.startup_counts_unmodelled {
            self.index.ended()
        } else {
            finished
        };
        if ended < self.opts.n_startup_trials {
            return Some(self.space.sample(&mut rng));
        }
        // Like Optuna, gamma counts finished trials only; liars only join the bad side.
        if history.objectives().len() > 1 {
            multi::below_into(
                history,
                self.opts.multi_objective_gamma_fraction,
                &mut self.work.good,
            );
        } else {
            self.index
                .below_into(self.opts.gamma(finished), &mut self.work.good);
        }
        self.work.good_weights = if history.objectives().len() == 1 {
            GoodWeights::ByAge
        } else if self.opts.hypervolume_weights {
            let mut w = match std::mem::take(&mut self.work.good_weights) {
                GoodWeights::PerTrial(w) => w,
                _ => Vec::new(),
            };
            multi::hypervolume_weights_into(history, &self.work.good, &mut w);
            GoodWeights::PerTrial(w)
        } else {
            GoodWeights::Equal
        };
        let mut params = Params::default();
        self.work.kernel_of.clear();
        self.work.kernel_of.resize(self.index.len(), u32::MAX);
        for g in 0..self.groups.len() {
            let first = &self.space.params()[self.groups[g].params[0]];
            if !self.space.is_active(first, &params) {
                continue;
            }
            self.partition(g);
            let l = self.fit(g);
            let chosen = self.choose(g, &l, &mut rng)?;
            for (&p, &x) in self.groups[g].params.iter().zip(&chosen) {
                let param = &self.space.params()[p];
                params.insert(param.name.clone(), from_internal(&param.domain, x));
            }
        }
        Some(params)
    }
}

impl Tpe {
    /// The estimators' options: the kernel floors in force and the prior.
    fn estimator_options(&self) -> EstimatorOptions {
        let (min_bandwidth_factor, magic_clip_exponent, discrete_min_bandwidth) =
            self.opts.kernel_floors();
        EstimatorOptions {
            prior_weight: self.opts.prior_weight,
            magic_clip: self.opts.consider_magic_clip,
            consider_endpoints: self.opts.consider_endpoints,
            min_bandwidth_factor,
            magic_clip_exponent,
            discrete_min_bandwidth,
        }
    }

    /// Splits the modelled trials in which every parameter of group `g` was active into the
    /// good side (`work.below_ids`) and the bad one (`work.above_ids`), in id order; a bad
    /// trial's kernel index goes in `work.kernel_of`.
    fn partition(&mut self, g: usize) {
        let (group, work) = (&self.groups[g], &mut self.work);
        work.below_ids.clear();
        work.above_ids.clear();
        for i in 0..self.index.len().min(self.coords.len()) {
            let Some(c) = self.coords.get(i as TrialId) else {
                continue;
            };
            if !self.index.modelled(i as TrialId) || group.params.iter().any(|&p| c[p].is_nan()) {
                continue;
            }
            if work.good[i] {
                work.below_ids.push(i as TrialId);
            } else {
                work.kernel_of[i] = work.above_ids.len() as u32;
                work.above_ids.push(i as TrialId);
            }
        }
    }

    /// Fits group `g`'s densities on the sides [`Tpe::partition`] made: returns l (good) and
    /// leaves g (bad) as the scoring table `work.bad`.
    fn fit(&mut self, g: usize) -> Parzen {
        let est_opts = self.estimator_options();
        let (group, work, coords) = (&self.groups[g], &mut self.work, &self.coords);
        let column = |p: usize, ids: &[TrialId], out: &mut Vec<f64>| {
            out.clear();
            out.extend(
                ids.iter()
                    .map(|&i| coords.get(i).map_or(f64::NAN, |c| c[p])),
            );
        };
        let dims = group.params.len();
        work.above_cols.resize_with(dims, Vec::new);
        work.orders.resize_with(dims, Vec::new);
        for (d, &p) in group.params.iter().enumerate() {
            column(p, &work.above_ids, &mut work.above_cols[d]);
            // The bad kernels' order along this dimension, read off the index (no sorting).
            let kernel_of = &work.kernel_of;
            let order = &mut work.orders[d];
            order.clear();
            order.extend(self.index.sorted(p).filter_map(|i| {
                kernel_of
                    .get(i as usize)
                    .filter(|&&k| k != u32::MAX)
                    .map(|&k| k as usize)
            }));
        }
        for &i in &work.above_ids {
            work.kernel_of[i as usize] = u32::MAX;
        }
        let below_cols: Vec<Vec<f64>> = group
            .params
            .iter()
            .map(|&p| {
                let mut out = Vec::new();
                column(p, &work.below_ids, &mut out);
                out
            })
            .collect();
        let good_weights = match &work.good_weights {
            GoodWeights::ByAge => self.opts.weights(work.below_ids.len()),
            GoodWeights::Equal => vec![1.0; work.below_ids.len()],
            GoodWeights::PerTrial(w) => work.below_ids.iter().map(|&i| w[i as usize]).collect(),
        };
        let l = Parzen::new(&group.specs, &below_cols, &good_weights, est_opts);
        let memo = Some((
            &mut self.norms,
            work.above_ids.as_slice(),
            group.params.as_slice(),
        ));
        self.opts
            .weights_into(work.above_ids.len(), &mut work.weights);
        Parzen::scoring_table(
            &mut work.bad,
            &mut work.kernel_bufs,
            &group.specs,
            &work.above_cols[..dims],
            &work.weights,
            est_opts,
            memo,
            &work.orders[..dims],
        );
        l
    }

    /// Of `n_ei_candidates` drawn from `l`, the one with the highest l/g (the first of equals),
    /// in internal coordinates.
    fn choose(&mut self, g: usize, l: &Parzen, rng: &mut ChaCha8Rng) -> Option<Vec<f64>> {
        let group = &self.groups[g];
        let (bad, terms) = (&self.work.bad, &mut self.work.terms);
        let mut candidate = vec![0.0; group.params.len()];
        let mut best: Option<(f64, Vec<f64>)> = None;
        for _ in 0..self.opts.n_ei_candidates.max(1) {
            l.sample(rng, &mut candidate);
            // Score the value the candidate stands for (the centre of its bin).
            for (x, &p) in candidate.iter_mut().zip(&group.params) {
                let domain = &self.space.params()[p].domain;
                *x = to_internal(domain, &from_internal(domain, *x)).unwrap_or(*x);
            }
            let score = l.log_pdf(&candidate, terms) - bad.log_pdf(&candidate, terms);
            if best
                .as_ref()
                .is_none_or(|(b, _)| score.partial_cmp(b) == Some(Ordering::Greater))
            {
                best = Some((score, candidate.clone()));
            }
        }
        best.map(|(_, chosen)| chosen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Mode, Status};

    fn run(
        space: &Space,
        opts: TpeOptions,
        seed: u64,
        n: u64,
        f: impl Fn(&Params) -> f64,
    ) -> History {
        let mut tpe = Tpe::new(space.clone(), seed, opts);
        let mut h = History::new(Mode::Min);
        for id in 0..n {
            let p = tpe.suggest(id, &h).unwrap();
            let v = f(&p);
            h.record(id, p, Status::Running);
            h.report(id, 1, v);
            h.set_status(id, Status::Completed);
        }
        h
    }

    #[test]
    fn the_rung_is_the_highest_step_enough_trials_reached() {
        let mut h = History::new(crate::Mode::Min);
        // Ten trials to step 1, four of them to 3, two to 9 (one paused there).
        for id in 0..10u64 {
            h.record(id, Params::default(), Status::Running);
            let last = match id {
                0 => 9,
                1 => 9,
                2 | 3 => 3,
                _ => 1,
            };
            for step in 1..=last {
                h.report(id, step, 0.5);
            }
            h.set_status(
                id,
                if id == 1 {
                    Status::Paused
                } else {
                    Status::Stopped
                },
            );
        }
        assert_eq!(h.rung_step(2), Some(9));
        assert_eq!(h.rung_step(3), Some(3));
        assert_eq!(h.rung_step(5), Some(1));
        assert_eq!(h.rung_step(11), None);
        // A running trial's steps are not rungs, but it counts where it reported.
        h.record(10, Params::default(), Status::Running);
        h.report(10, 1, 0.5);
        h.report(10, 2, 0.5);
        assert_eq!(h.rung_step(11), Some(1));
        assert_eq!(h.rung_step(2), Some(9));
    }

    #[test]
    fn gamma_and_weights_tables() {
        let o = TpeOptions::default();
        let ns = [0, 1, 9, 10, 11, 100, 166, 167, 250, 10_000];
        let gammas: Vec<usize> = ns.iter().map(|&n| o.gamma(n)).collect();
        // ceil(0.15 n): 1.35 -> 2, 1.5 -> 2, 24.9 -> 25, 25.05 -> 26 capped at 25.
        assert_eq!(gammas, vec![0, 1, 2, 2, 2, 15, 25, 25, 25, 25]);
        // Optuna 5's gamma_fraction = 0.1.
        let optuna = TpeOptions {
            gamma_fraction: 0.1,
            ..TpeOptions::default()
        };
        let gammas: Vec<usize> = [0, 1, 9, 10, 11, 100, 249, 250, 251, 10_000]
            .iter()
            .map(|&n| optuna.gamma(n))
            .collect();
        assert_eq!(gammas, vec![0, 1, 1, 1, 2, 10, 25, 25, 25, 25]);
        assert_eq!(o.weights(3), vec![1.0; 3]);
        assert_eq!(o.weights(25), vec![1.0; 25]);
        // numpy.linspace(1/30, 1, 5) then 25 ones.
        let w = o.weights(30);
        let expect = [
            1.0 / 30.0,
            0.275,
            0.5166666666666667,
            0.7583333333333333,
            1.0,
        ];
        for (a, b) in w[..5].iter().zip(expect) {
            assert!((a - b).abs() < 1e-12, "{w:?}");
        }
        assert!(w[5..].iter().all(|&x| x == 1.0));
    }

    #[test]
    fn identical_seed_and_history_give_identical_suggestions() {
        let space = Space::builder()
            .uniform("x", 0.0, 1.0)
            .int("n", 1, 64)
            .log()
            .choice("c", ["a", "b"])
            .build()
            .unwrap();
        let f = |p: &Params| p.f64("x").unwrap() + p.i64("n").unwrap() as f64 / 64.0;
        let h = run(&space, TpeOptions::default(), 3, 25, f);
        let mut a = Tpe::new(space.clone(), 3, TpeOptions::default());
        let mut b = Tpe::new(space.clone(), 3, TpeOptions::default());
        // `b` has seen other histories first: caches must not change its answer.
        let _ = b.suggest(5, &History::new(Mode::Min));
        assert_eq!(a.suggest(25, &h), b.suggest(25, &h));
        assert_ne!(a.suggest(25, &h), a.suggest(26, &h));
        let mut c = Tpe::new(space, 4, TpeOptions::default());
        assert_ne!(a.suggest(25, &h), c.suggest(25, &h));
    }

    #[test]
    fn incremental_caches_agree_with_a_fresh_searcher() {
        let space = Space::builder()
            .uniform("x", 0.0, 1.0)
            .int("n", 1, 16)
            .choice("c", ["a", "b", "c"])
            .uniform("m", 0.0, 1.0)
            .when("c", "a")
            .build()
            .unwrap();
        // Also with the stopped trials left out of the model (their step 2 is below 0.6 x 4).
        let shallow_out = TpeOptions {
            stopped_min_depth: Some(0.6),
            ..TpeOptions::default()
        };
        for opts in [TpeOptions::default(), shallow_out] {
            let mut warm = Tpe::new(space.clone(), 5, opts.clone());
            let mut h = History::new(Mode::Min);
            for id in 0..80u64 {
                let p = warm.suggest(id, &h).unwrap();
                let fresh = Tpe::new(space.clone(), 5, opts.clone())
                    .suggest(id, &h)
                    .unwrap();
                assert_eq!(p, fresh, "trial {id}");
                let v = p.f64("x").unwrap() + p.i64("n").unwrap() as f64 / 16.0;
                h.record(id, p, Status::Running);
                // A mix of fates: most complete, some stop early, some fail, some stay running.
                match id % 7 {
                    3 => {
                        h.report(id, 2, v);
                        h.set_status(id, Status::Stopped);
                    }
                    5 => h.set_status(id, Status::Failed),
                    6 if id > 60 => {}
                    _ => {
                        h.report(id, 4, v);
                        h.set_status(id, Status::Completed);
                    }
                }
                // An earlier running trial finishes later.
                if id % 7 == 0 && id >= 63 {
                    h.report(id - 1, 4, 0.5);
                    h.set_status(id - 1, Status::Completed);
                }
            }
        }
    }

    #[test]
    fn startup_trials_are_random_draws() {
        let space = Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
        let mut tpe = Tpe::new(space.clone(), 9, TpeOptions::default());
        let mut random = crate::RandomSearch::new(space, 9);
        let h = History::new(Mode::Min);
        assert_eq!(tpe.suggest(0, &h), random.suggest(0, &h));
    }

    #[test]
    fn the_startup_counts_trials_the_model_leaves_out() {
        // As under ASHA: ten trials stopped at step 1, two completed at step 9. With a 0.5
        // `stopped_min_depth` only the two completed ones are modelled, but twelve have
        // ended, so the startup (ten) is over, as Optuna counts it.
        let space = Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
        let mut h = History::new(Mode::Min);
        for id in 0..12u64 {
            let x = id as f64 / 12.0;
            let mut p = Params::default();
            p.insert("x", x.into());
            h.record(id, p, Status::Running);
            let last = if id < 10 { 1 } else { 9 };
            h.report(id, last, x);
            h.set_status(
                id,
                if id < 10 {
                    Status::Stopped
                } else {
                    Status::Completed
                },
            );
        }
        let random = crate::RandomSearch::new(space.clone(), 9).suggest(12, &h);
        let opts = TpeOptions {
            stopped_min_depth: Some(0.5),
            ..TpeOptions::default()
        };
        let mut counted = Tpe::new(space.clone(), 9, opts.clone());
        assert_ne!(counted.suggest(12, &h), random);
        let modelled_only = TpeOptions {
            startup_counts_unmodelled: false,
            ..opts
        };
        let mut before = Tpe::new(space, 9, modelled_only);
        assert_eq!(before.suggest(12, &h), random);
    }

    #[test]
    fn conditional_parameters_only_when_active() {
        let space = Space::builder()
            .choice("opt", ["sgd", "adam"])
            .uniform("momentum", 0.0, 1.0)
            .when("opt", "sgd")
            .uniform("beta", 0.0, 1.0)
            .when("opt", "adam")
            .uniform("x", -1.0, 1.0)
            .build()
            .unwrap();
        for opts in [
            TpeOptions::default(),
            TpeOptions {
                group: false,
                ..TpeOptions::default()
            },
            TpeOptions {
                multivariate: false,
                ..TpeOptions::default()
            },
        ] {
            let h = run(&space, opts, 1, 60, |p| {
                let x = p.f64("x").unwrap();
                match p.str("opt").unwrap() {
                    "sgd" => x * x + (p.f64("momentum").unwrap() - 0.9).powi(2),
                    _ => 1.0 + x * x + p.f64("beta").unwrap(),
                }
            });
            for t in h.iter() {
                let sgd = t.params.str("opt").unwrap() == "sgd";
                assert_eq!(t.params.contains("momentum"), sgd);
                assert_eq!(t.params.contains("beta"), !sgd);
            }
            // The model learns that sgd is better.
            let late_sgd = h
                .iter()
                .skip(30)
                .filter(|t| t.params.str("opt").unwrap() == "sgd")
                .count();
            assert!(late_sgd > 20, "{late_sgd}");
        }
    }

    #[test]
    fn every_domain_stays_in_bounds_and_improves_on_random() {
        let space: Space = toml_space(
            r#"
            a = { uniform = [-5.0, 10.0] }
            b = { loguniform = [1e-5, 1e-1] }
            c = { int = [16, 1024], log = true }
            d = { int = [1, 8] }
            e = { quniform = [0.0, 1.0, 0.1] }
            f = { qloguniform = [1, 1000, 10] }
            g = { normal = [0.0, 2.0] }
            h = { choice = ["x", "y", "z"] }
            "#,
        );
        let f = |p: &Params| {
            (p.f64("a").unwrap() - 2.0).powi(2)
                + (p.f64("b").unwrap().log10() + 3.0).powi(2)
                + ((p.i64("c").unwrap() as f64).log2() - 8.0).powi(2)
                + (p.i64("d").unwrap() - 3).pow(2) as f64
                + (p.f64("e").unwrap() - 0.7).powi(2)
                + (p.f64("f").unwrap() / 100.0 - 1.0).powi(2)
                + (p.f64("g").unwrap() - 1.0).powi(2)
                + if p.str("h").unwrap() == "y" { 0.0 } else { 1.0 }
        };
        let best = |h: &History| h.best().unwrap().value.unwrap();
        let mut tpe_wins = 0;
        for seed in 0..5 {
            let h = run(&space, TpeOptions::default(), seed, 120, f);
            for t in h.iter() {
                for p in space.params() {
                    assert!(
                        p.domain.contains(t.params.get(&p.name).unwrap()),
                        "{}: {:?}",
                        p.name,
                        t.params.get(&p.name)
                    );
                }
            }
            let startup_only = TpeOptions {
                n_startup_trials: 1000,
                ..TpeOptions::default()
            };
            let r = run(&space, startup_only, seed, 120, f);
            tpe_wins += usize::from(best(&h) < best(&r));
        }
        assert!(tpe_wins >= 4, "TPE beat random on {tpe_wins}/5 seeds");
    }

    #[test]
    fn constant_liar_spreads_parallel_suggestions() {
        let space = Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
        let mut h = run(&space, TpeOptions::default(), 2, 20, |p| {
            (p.f64("x").unwrap() - 0.3).abs()
        });
        let mut tpe = Tpe::new(space, 2, TpeOptions::default());
        // Four workers ask in turn while the others' trials still run.
        let mut xs = Vec::new();
        for id in 20..24 {
            let p = tpe.suggest(id, &h).unwrap();
            xs.push(p.f64("x").unwrap());
            h.record(id, p, Status::Running);
        }
        xs.sort_by(f64::total_cmp);
        assert!(xs.windows(2).all(|w| w[1] - w[0] > 1e-9), "{xs:?}");
    }

    #[test]
    fn under_the_rung_model_running_trials_are_not_liars_unless_asked() {
        let space = Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
        let mut h = run(&space, TpeOptions::default(), 4, 20, |p| {
            (p.f64("x").unwrap() - 0.3).abs()
        });
        let rung = TpeOptions {
            fidelity: Some(Fidelity::Rung),
            ..TpeOptions::default()
        };
        let suggest = |opts: &TpeOptions, h: &History| {
            Tpe::new(space.clone(), 4, opts.clone())
                .suggest(21, h)
                .unwrap()
        };
        // Trial 20 runs, not reported yet, at the very point trial 21 would be given.
        let first = suggest(&rung, &h);
        let without = h.clone();
        h.record(20, first.clone(), Status::Running);
        assert_eq!(suggest(&rung, &h), first);
        let lying = TpeOptions {
            constant_liar: Some(true),
            ..rung
        };
        // With the liar asked for, it is bad there, and trial 21 goes elsewhere.
        assert_eq!(suggest(&lying, &without), first);
        assert_ne!(suggest(&lying, &h), first);
    }

    fn toml_space(text: &str) -> Space {
        toml::from_str(text).unwrap()
    }
}
