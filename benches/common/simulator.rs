//! A simulated clock for searcher + scheduler pairs on the synthetic curves (like Syne Tune's
//! simulator): `workers` virtual workers each train one epoch per tick; every epoch costs one
//! unit of budget. Nothing waits, so asynchronous behaviour with many workers is cheap to run.

#![allow(dead_code)]

use tune_schedulers::{Decision, Scheduler};
use tune_search::{History, Mode, Params, Searcher, Status, TrialId};

use super::curves::MAX_T;

/// A family of learning curves: the loss of a configuration after an epoch, and the regret of
/// choosing it (its noise-free final loss minus the best possible).
pub struct Curves {
    pub loss: fn(&Params, u64) -> f64,
    pub regret: fn(&Params) -> f64,
}

/// The curves of `../shared/bench/curves.py`.
pub fn shared_curves() -> Curves {
    use super::curves::{config, floor, floor_min, val_loss};
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
