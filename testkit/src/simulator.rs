//! A simulated clock for searcher + scheduler pairs on the synthetic curves (like Syne Tune's
//! simulator): `workers` virtual workers each train one epoch per tick; every epoch costs one
//! unit of budget. Nothing waits, so asynchronous behaviour with many workers is cheap to run.

use tune_schedulers::{Decision, Scheduler};
use tune_search::{History, Mode, Params, Searcher, Status, TrialId};

use crate::curves::MAX_T;

/// A family of learning curves: the loss of a configuration after an epoch, and the regret of
/// choosing it (its noise-free final loss minus the best possible).
pub struct Curves {
    pub loss: fn(&Params, u64) -> f64,
    pub regret: fn(&Params) -> f64,
}

/// The curves of `benches/peers/curves.py`.
pub fn shared_curves() -> Curves {
    use crate::curves::{config, floor, floor_min, val_loss};
    Curves {
        loss: |p, t| {
            let (lr, width, dropout) = config(p);
            val_loss(lr, width, dropout, t)
        },
        regret: |p| {
            let (lr, width, dropout) = config(p);
            floor(lr, width, dropout) - floor_min()
        },
    }
}

struct Slot {
    id: TrialId,
    params: Params,
    epoch: u64,
}

/// Runs until `budget` epochs are spent; returns, at each checkpoint (in epochs), the regret of
/// the incumbent: among configurations trained to epoch 81, the one with the lowest observed
/// loss there (`None` before any reaches 81). This is `run_asha.py`'s definition.
pub fn simulate(
    curves: &Curves,
    searcher: &mut dyn Searcher,
    scheduler: &mut dyn Scheduler,
    workers: usize,
    budget: u64,
    checkpoints: &[u64],
) -> Vec<Option<f64>> {
    let mut history = History::new(Mode::Min);
    let mut slots: Vec<Option<Slot>> = (0..workers).map(|_| None).collect();
    // Paused trials keep their params and next epoch (a simulated checkpoint).
    let mut paused: std::collections::BTreeMap<TrialId, Slot> = std::collections::BTreeMap::new();
    let mut next_id: TrialId = 0;
    let mut used = 0;
    let mut incumbent: Option<(f64, f64)> = None;
    let mut out = vec![None; checkpoints.len()];
    let mut next_checkpoint = 0;
    loop {
        for slot in slots.iter_mut().filter(|s| s.is_none()) {
            if let Some(s) = scheduler.choose_paused().and_then(|id| paused.remove(&id)) {
                history.set_status(s.id, Status::Running);
                *slot = Some(s);
                continue;
            }
            let params = searcher.suggest(next_id, &history).expect("a suggestion");
            history.record(next_id, params.clone(), Status::Running);
            scheduler.on_trial_add(next_id, &params);
            *slot = Some(Slot {
                id: next_id,
                params,
                epoch: 1,
            });
            next_id += 1;
        }
        for slot in slots.iter_mut() {
            let Some(s) = slot.as_mut() else { continue };
            let loss = (curves.loss)(&s.params, s.epoch);
            used += 1;
            history.report(s.id, s.epoch, loss);
            let decision = scheduler.on_result(s.id, s.epoch, loss);
            if let Decision::Exploit { params, .. } = &decision {
                // The curves' only state is the epoch: go on from it on the new configuration.
                history.set_params(s.id, params.clone());
                s.params = params.clone();
            }
            let end = match decision {
                Decision::Exploit { .. } => None,
                Decision::Stop => Some(Status::Stopped),
                Decision::Complete => Some(Status::Completed),
                Decision::Continue if s.epoch >= MAX_T => Some(Status::Completed),
                Decision::Continue => None,
                Decision::Pause => Some(Status::Paused),
            };
            if s.epoch == MAX_T && incumbent.is_none_or(|(best, _)| loss < best) {
                incumbent = Some((loss, (curves.regret)(&s.params)));
            }
            match end {
                Some(Status::Paused) => {
                    history.set_status(s.id, Status::Paused);
                    s.epoch += 1;
                    let s = slot.take().expect("a running slot");
                    paused.insert(s.id, s);
                }
                Some(status) => {
                    history.set_status(s.id, status);
                    scheduler.on_complete(s.id, Some((s.epoch, loss)));
                    *slot = None;
                }
                None => s.epoch += 1,
            }
            end_paused(scheduler, &mut paused, &mut history);
            while next_checkpoint < checkpoints.len() && used >= checkpoints[next_checkpoint] {
                out[next_checkpoint] = incumbent.map(|(_, regret)| regret);
                next_checkpoint += 1;
            }
            if used >= budget {
                return out;
            }
        }
    }
}

/// A benchmark seen one epoch at a time on a simulated clock, like Syne Tune's simulator
/// backend: an epoch ends when the benchmark says training has reached it.
pub trait Timed: Sync {
    /// The last epoch a trial can train.
    fn max_t(&self) -> u64;
    /// The metric after `epoch`, and the seconds of training from the start to its end.
    fn observe(&self, params: &Params, epoch: u64) -> (f64, f64);
    /// The score of choosing a configuration that reached `value` at `max_t` (lower is
    /// better).
    fn regret(&self, params: &Params, value: f64) -> f64;
}

/// The incumbent's regret at each epoch checkpoint and at each second checkpoint, and the
/// history the searcher saw.
pub struct Timeline {
    pub at_epochs: Vec<Option<f64>>,
    pub at_seconds: Vec<Option<f64>>,
    pub history: History,
}

struct Running {
    id: TrialId,
    params: Params,
    epoch: u64,
    /// Seconds of training reached before this epoch (the benchmark's clock for the trial).
    trained: f64,
    /// This epoch's result and when it lands on the simulated clock.
    value: f64,
    done_at: f64,
}

/// `workers` virtual workers on one clock: each runs its trial's next epoch, which takes the
/// seconds `bench` says it takes; the earliest to finish reports next (ties by worker). Runs
/// until `budget` epochs are spent and the last second checkpoint is passed. The incumbent
/// is the best value at `max_t` so far, as in `run_lcbench.py`.
#[allow(clippy::too_many_arguments)]
pub fn simulate_timed(
    bench: &dyn Timed,
    mode: Mode,
    searcher: &mut dyn Searcher,
    scheduler: &mut dyn Scheduler,
    workers: usize,
    budget: u64,
    epoch_checkpoints: &[u64],
    second_checkpoints: &[f64],
) -> Timeline {
    simulate_sweep(
        bench,
        mode,
        searcher,
        scheduler,
        (workers, None),
        budget,
        epoch_checkpoints,
        second_checkpoints,
    )
}

/// [`simulate_timed`] of a sweep of at most `samples` trials (`(workers, samples)`), as
/// `tune run` runs one: the scheduler hears that no more trials come when the last is added,
/// and the run ends early once nothing is left to run (paused trials the scheduler never
/// resumes are stopped, as the coordinator stops them).
#[allow(clippy::too_many_arguments)]
pub fn simulate_sweep(
    bench: &dyn Timed,
    mode: Mode,
    searcher: &mut dyn Searcher,
    scheduler: &mut dyn Scheduler,
    (workers, samples): (usize, Option<u64>),
    budget: u64,
    epoch_checkpoints: &[u64],
    second_checkpoints: &[f64],
) -> Timeline {
    let max_t = bench.max_t();
    let better = |a: f64, b: f64| match mode {
        Mode::Min => a < b,
        Mode::Max => a > b,
    };
    let mut history = History::new(mode);
    let mut slots: Vec<Option<Running>> = (0..workers).map(|_| None).collect();
    let mut paused: std::collections::BTreeMap<TrialId, Running> = Default::default();
    let mut next_id: TrialId = 0;
    let (mut used, mut now) = (0u64, 0.0f64);
    let mut incumbent: Option<(f64, f64)> = None;
    let mut at_epochs = vec![None; epoch_checkpoints.len()];
    let mut at_seconds = vec![None; second_checkpoints.len()];
    let (mut next_epoch_mark, mut next_second_mark) = (0, 0);
    let start = |run: &mut Running, now: f64| {
        let (value, trained) = bench.observe(&run.params, run.epoch);
        // The surrogate's cumulative times are not always increasing: an epoch takes at
        // least a millisecond.
        run.done_at = now + (trained - run.trained).max(1e-3);
        run.trained = trained;
        run.value = value;
    };
    loop {
        for slot in slots.iter_mut().filter(|s| s.is_none()) {
            let mut run = match scheduler.choose_paused().and_then(|id| paused.remove(&id)) {
                Some(run) => {
                    history.set_status(run.id, Status::Running);
                    run
                }
                None if samples.is_some_and(|n| next_id >= n) => continue,
                None => {
                    let params = searcher.suggest(next_id, &history).expect("a suggestion");
                    history.record(next_id, params.clone(), Status::Running);
                    scheduler.on_trial_add(next_id, &params);
                    next_id += 1;
                    if samples == Some(next_id) {
                        scheduler.on_no_more_trials();
                    }
                    Running {
                        id: next_id - 1,
                        params,
                        epoch: 1,
                        trained: 0.0,
                        value: 0.0,
                        done_at: 0.0,
                    }
                }
            };
            start(&mut run, now);
            *slot = Some(run);
        }
        if slots.iter().all(Option::is_none) {
            // The sweep's trials are all created and none runs: what is still paused is over.
            for (id, _) in std::mem::take(&mut paused) {
                history.set_status(id, Status::Stopped);
            }
            return Timeline {
                at_epochs,
                at_seconds,
                history,
            };
        }
        let w = (0..workers)
            .min_by(|&a, &b| {
                let at = |i: usize| slots[i].as_ref().map_or(f64::INFINITY, |r| r.done_at);
                at(a).total_cmp(&at(b))
            })
            .expect("a worker");
        let mut run = slots[w].take().expect("a worker with a trial");
        now = run.done_at;
        while next_second_mark < second_checkpoints.len()
            && second_checkpoints[next_second_mark] < now
        {
            at_seconds[next_second_mark] = incumbent.map(|(_, regret)| regret);
            next_second_mark += 1;
        }
        let value = run.value;
        used += 1;
        history.report(run.id, run.epoch, value);
        let decision = scheduler.on_result(run.id, run.epoch, value);
        if run.epoch == max_t && incumbent.is_none_or(|(best, _)| better(value, best)) {
            incumbent = Some((value, bench.regret(&run.params, value)));
        }
        let end = match &decision {
            Decision::Exploit { params, .. } => {
                history.set_params(run.id, params.clone());
                run.params = params.clone();
                None
            }
            Decision::Stop => Some(Status::Stopped),
            Decision::Complete => Some(Status::Completed),
            Decision::Continue if run.epoch >= max_t => Some(Status::Completed),
            Decision::Continue => None,
            Decision::Pause => Some(Status::Paused),
        };
        match end {
            Some(Status::Paused) => {
                history.set_status(run.id, Status::Paused);
                run.epoch += 1;
                paused.insert(run.id, run);
            }
            Some(status) => {
                history.set_status(run.id, status);
                scheduler.on_complete(run.id, Some((run.epoch, value)));
            }
            None => {
                run.epoch += 1;
                start(&mut run, now);
                slots[w] = Some(run);
            }
        }
        end_paused(scheduler, &mut paused, &mut history);
        while next_epoch_mark < epoch_checkpoints.len()
            && used >= epoch_checkpoints[next_epoch_mark]
        {
            at_epochs[next_epoch_mark] = incumbent.map(|(_, regret)| regret);
            next_epoch_mark += 1;
        }
        if used >= budget && next_second_mark >= second_checkpoints.len() {
            return Timeline {
                at_epochs,
                at_seconds,
                history,
            };
        }
    }
}

/// Trials the scheduler ended while they were paused (a rung's losers, or the sweep's end)
/// leave `paused` with the status its decision gives them.
fn end_paused<T>(
    scheduler: &mut dyn Scheduler,
    paused: &mut std::collections::BTreeMap<TrialId, T>,
    history: &mut History,
) {
    for (id, decision) in scheduler.drain_ended() {
        if paused.remove(&id).is_some() {
            let status = if decision == Decision::Complete {
                Status::Completed
            } else {
                Status::Stopped
            };
            history.set_status(id, status);
        }
    }
}
