//! Controls from outside the sweep ([`crate::control`]): checked, carried out, stored and
//! synced, noted in the sweep's log with who asked, then answered.

use super::*;
use crate::control::{Control, ControlRequest};
use tune_search::Params;

/// Where the draws of the parameters an enqueued point leaves out come from (apart from the
/// searchers' streams and `[[search.initial]]`'s).
const ENQUEUE_STREAM: u64 = 0x0065_6e71_7565_7565;

impl Coordinator {
    /// Carries out one control and answers it once what it changed is durable.
    pub(super) fn on_control(&mut self, request: ControlRequest) -> Result<(), TuneError> {
        let ControlRequest {
            control,
            from,
            answer,
        } = request;
        let done = self.steer(control)?;
        match &done {
            Ok(what) => self.note(&format!("{what} (asked by {from})")),
            Err(why) => self.note(&format!("refused a control from {from}: {why}")),
        }
        self.store.sync()?;
        let _ = answer.send(done);
        Ok(())
    }

    /// What the control did, or why it was refused (nothing changed then).
    fn steer(&mut self, control: Control) -> Result<Result<String, String>, TuneError> {
        let stopping = *self.shutdown.borrow();
        match control {
            Control::StopSweep if stopping => Ok(Ok("the sweep is already stopping".into())),
            Control::StopSweep => {
                let _ = self.shutdown.send(true);
                Ok(Ok("stopping the sweep: `tune resume` continues it".into()))
            }
            Control::StopTrial { trial } => self.stop_trial(trial),
            _ if stopping => Ok(Err(
                "the sweep is stopping: resume it to add trials".to_string()
            )),
            Control::AddSamples { count } => self.add_samples(count),
            Control::Enqueue { params } => self.enqueue(params),
        }
    }

    fn stop_trial(&mut self, id: TrialId) -> Result<Result<String, String>, TuneError> {
        if id >= self.created {
            return Ok(Err(format!(
                "there is no trial {id}: the sweep has {} so far",
                self.created
            )));
        }
        let Some(status) = self.live.get(&id).map(|t| t.status) else {
            return Ok(Err(format!("trial {id} has already ended")));
        };
        if let Some(run) = self.in_flight.get_mut(&id) {
            match (run.settled, status) {
                // A paused trial's run may still be writing its checkpoint: let it finish.
                (true, Status::Paused) => {}
                (true, _) => return Ok(Err(format!("trial {id} is already ending"))),
                (false, _) => {
                    // Its run is only winding down from here: what it says next is not kept.
                    run.settled = true;
                    if let Some(cancel) = &run.cancel {
                        let _ = cancel.send(true);
                    }
                }
            }
        }
        self.queue.retain(|&q| q != id);
        self.deferred.retain(|&q| q != id);
        self.settle(id, Status::Stopped, None)?;
        Ok(Ok(format!(
            "stopped trial {id} ({} until now)",
            status.as_str()
        )))
    }

    fn add_samples(&mut self, count: u64) -> Result<Result<String, String>, TuneError> {
        if count == 0 {
            return Ok(Err(
                "`count`: expected at least 1 trial to add, found 0".into()
            ));
        }
        if self.all_added && self.plan.scheduler == "hyperband" {
            // Its last bracket was closed when the budget ran out; a resume would not close it.
            return Ok(Err(
                "HyperBand has closed its last bracket: stop the sweep and `tune resume --samples` \
                 it for more trials"
                    .into(),
            ));
        }
        let samples = self.plan.meta.samples.saturating_add(count);
        let budget = self.searcher.total_trials(samples).max(self.created);
        self.plan.meta.samples = samples;
        self.searcher.set_samples(samples);
        self.store.put_meta(&self.plan.meta)?;
        self.set_budget(budget);
        Ok(Ok(format!(
            "added {count} samples: the sweep creates {budget} trials in all"
        )))
    }

    fn enqueue(&mut self, point: Params) -> Result<Result<String, String>, TuneError> {
        if self.plan.search == "grid" {
            return Ok(Err(
                "grid search runs its grid: enqueue points in a sweep with another algorithm"
                    .into(),
            ));
        }
        let space = &self.plan.meta.spec.space;
        let point = match space.check_point(&point) {
            Ok(point) => point,
            Err(e) => return Ok(Err(format!("the point: {e}"))),
        };
        let id = self.created;
        let seed = self.plan.meta.spec.seed ^ ENQUEUE_STREAM;
        let params = space.sample_with(&mut tune_search::trial_rng(seed, id), &point);
        // The trial and the budget that counts it are stored together: a resume finds both.
        let samples = self.plan.meta.samples.saturating_add(1);
        self.plan.meta.samples = samples;
        self.searcher.set_samples(samples);
        self.store.put_meta(&self.plan.meta)?;
        if self.searcher.reads_history() {
            self.history.record(id, params.clone(), Status::Pending);
        }
        self.scheduler.on_trial_add(id, &params);
        let trial = Trial::new(id, params);
        self.store.put_trial(&trial)?;
        self.live.insert(id, trial);
        self.created += 1;
        self.summary.pending += 1;
        self.queue.push_back(id);
        let budget = self.searcher.total_trials(samples).max(self.created);
        self.set_budget(budget);
        Ok(Ok(format!("enqueued trial {id}")))
    }

    /// The budget in force from now on, told to observers.
    fn set_budget(&mut self, budget: u64) {
        self.budget = budget;
        self.summary.total = budget;
        emit(&mut self.observers, &Event::Budget(budget), &self.summary);
    }
}
