//! A report heard: judged, stored, decided on by the scheduler, and its decision applied
//! (continue, pause, stop, complete, or a PBT exploit).

use super::*;

/// A report's objective values and constraint values, or why it is not kept: a metric under a
/// name results keep for their own, or an objective or constrained key missing or not finite.
fn judge(
    plan: &Plan,
    step: u64,
    metrics: &BTreeMap<String, f64>,
) -> Result<(Vec<f64>, Vec<f64>), String> {
    if let Some(key) = metrics
        .keys()
        .find(|k| crate::export::RESULT_KEYS.contains(&k.as_str()))
    {
        return Err(format!(
            "the report at step {step} has a metric named `{key}`, a name results keep for \
             their own ({}): rename it",
            crate::export::RESULT_KEYS.join(", ")
        ));
    }
    // Every objective's value, or the first missing or non-finite one.
    let values: Result<Vec<f64>, (&str, Option<f64>)> = (plan.objectives.iter())
        .map(|o| match metrics.get(&o.metric) {
            Some(&v) if v.is_finite() => Ok(v),
            bad => Err((o.metric.as_str(), bad.copied())),
        })
        .collect();
    // A constrained key missing is as bad as an objective missing.
    let values = values.and_then(|v| match plan.constraints.values(metrics) {
        Ok(c) => Ok((v, c)),
        Err(key) => Err((key, metrics.get(key).copied())),
    });
    values.map_err(|(metric, bad)| match bad {
        Some(v) => format!("`{metric}` was {v} at step {step}"),
        None => {
            let keys: Vec<&str> = metrics.keys().map(String::as_str).collect();
            let found = if keys.is_empty() {
                "no metrics".to_string()
            } else {
                keys.join(", ")
            };
            format!("the report at step {step} has no `{metric}` (it had: {found})")
        }
    })
}

impl Coordinator {
    /// Report `step` of trial `id`'s `attempt`: judged, stored, decided on; `ack` hears the
    /// decision once it is stored, or that the report was not kept.
    pub(super) fn on_report(
        &mut self,
        id: TrialId,
        attempt: u32,
        step: Option<u64>,
        mut metrics: BTreeMap<String, f64>,
        ack: oneshot::Sender<ReportAnswer>,
    ) -> Result<(), TuneError> {
        let Some(run) = self
            .in_flight
            .get_mut(&id)
            .filter(|r| r.attempt == attempt && !r.settled)
        else {
            // The report that settled the run, delivered again, hears its stored decision;
            // anything else (a late report after a decision, a stale attempt's) is not kept,
            // and is told so: a decision would read as its acknowledgement.
            let heard = self
                .in_flight
                .get(&id)
                .filter(|r| r.attempt == attempt)
                .and_then(|r| r.decided)
                .filter(|&(decided, _)| step == Some(decided))
                .map_or(ReportAnswer::Refused, |(_, heard)| heard);
            self.acks.push((ack, heard));
            return Ok(());
        };
        let step = match run.take_report(step) {
            Taken::New(step) => step,
            Taken::Redone => {
                // Its result and decision are already stored.
                self.acks.push((ack, ReportAnswer::Continue));
                return Ok(());
            }
            Taken::OutOfOrder { step, after } => {
                let reason = format!(
                    "it reported step {step} after step {after} in the same attempt: steps must \
                     increase (each is stored once, in order)"
                );
                return self.fail_at_report(id, ack, reason);
            }
        };
        let (values, constraints) = match judge(&self.plan, step, &metrics) {
            Ok(judged) => judged,
            Err(reason) => return self.fail_at_report(id, ack, reason),
        };
        // Other non-finite metrics are dropped: the stored form (JSON) has no NaN.
        metrics.retain(|_, x| x.is_finite());
        let result = TrialResult {
            step,
            seq: self.next_seq,
            attempt,
            metrics,
        };
        self.next_seq += 1;
        self.store.add_result(id, &result)?;
        self.history.report_values(id, step, &values);
        if !constraints.is_empty() {
            self.history.report_constraints(id, &constraints);
        }
        let decision = self.scheduler.on_result(id, step, values[0]);
        let t = self.live.get_mut(&id).expect("a trial in flight");
        t.results.push(result);
        if let Some(r) = t.results.last() {
            emit(&mut self.observers, &Event::Result(t, r), &self.summary);
        }
        // The decision is stored with the result, before the trial hears it.
        let heard = self.apply_decision(id, step, decision)?;
        self.acks.push((ack, heard));
        self.describe_scheduler(false);
        Ok(())
    }

    /// Fails trial `id` at a report that is not kept (`reason` says why); its run hears so.
    pub(super) fn fail_at_report(
        &mut self,
        id: TrialId,
        ack: oneshot::Sender<ReportAnswer>,
        reason: String,
    ) -> Result<(), TuneError> {
        if let Some(run) = self.in_flight.get_mut(&id) {
            run.settled = true;
        }
        self.settle(id, Status::Failed, Some(reason))?;
        self.acks.push((ack, ReportAnswer::Refused));
        Ok(())
    }

    /// Acts on the scheduler's `decision` for trial `id`'s result at `step`: stores what it
    /// changes (status, params, lineage) and says what the trial's run is to hear.
    pub(super) fn apply_decision(
        &mut self,
        id: TrialId,
        step: u64,
        decision: Decision,
    ) -> Result<ReportAnswer, TuneError> {
        let settles = decision != Decision::Continue;
        let heard = match decision {
            Decision::Continue => ReportAnswer::Continue,
            Decision::Pause => {
                self.set_status(id, Status::Paused);
                let t = self.live.get(&id).expect("a trial being paused");
                self.store.put_trial(t)?;
                emit(&mut self.observers, &Event::Paused(t), &self.summary);
                ReportAnswer::Pause
            }
            Decision::Exploit { from, params } => {
                // The run checkpoints and ends; the trial then starts again from `from`'s
                // checkpoint with the new params (see `fill_slots`).
                self.set_status(id, Status::Paused);
                let t = self.live.get_mut(&id).expect("a trial exploiting another");
                let previous = std::mem::replace(&mut t.params, params.clone());
                t.lineage.push(crate::trial::Lineage {
                    step,
                    from,
                    previous,
                });
                t.parent = Some(from);
                t.restore_from = Some(from);
                self.store.put_trial(t)?;
                // In the database, the worker that runs the exploit copies the checkpoint.
                if !self.plan.database_checkpoints {
                    stage_exploit(&self.plan.trials, id, from)?;
                }
                self.history.set_params(id, params);
                self.deferred.push_back(id);
                let t = &self.live[&id];
                emit(&mut self.observers, &Event::Paused(t), &self.summary);
                ReportAnswer::Pause
            }
            Decision::Stop => {
                self.settle(id, Status::Stopped, None)?;
                ReportAnswer::Stop
            }
            Decision::Complete => {
                self.settle(id, Status::Completed, None)?;
                ReportAnswer::Complete
            }
        };
        if settles {
            // The trial's end (or pause) is decided: its run, if any, is only winding down.
            if let Some(run) = self.in_flight.get_mut(&id) {
                run.settled = true;
                run.decided = Some((step, heard));
            }
        }
        Ok(heard)
    }

    /// Copies the checkpoint of the trial that `id` exploited into `id`'s folder (then forgets
    /// the pending copy, durably). A crash before the copy repeats it on resume.
    pub(super) fn apply_exploit(&mut self, id: TrialId) -> Result<(), TuneError> {
        let Some(from) = self.live(id).restore_from else {
            return Ok(());
        };
        if !self.plan.database_checkpoints {
            take_exploit(&self.plan.trials, id, from)?;
        }
        let t = self.live.get_mut(&id).expect("a trial being started");
        t.restore_from = None;
        self.store.put_trial(t)?;
        Ok(())
    }

    /// A paused trial the scheduler wants resumed now (ids it names that are not paused here,
    /// as after a replay, are skipped).
    pub(super) fn next_paused(&mut self) -> Option<TrialId> {
        let is_paused = |live: &BTreeMap<TrialId, Trial>, id: TrialId| {
            live.get(&id).is_some_and(|t| t.status == Status::Paused)
        };
        // Resumes that had to wait for the trial's previous run to end come first.
        self.deferred.retain(|&id| is_paused(&self.live, id));
        if let Some(pos) = self
            .deferred
            .iter()
            .position(|id| !self.in_flight.contains_key(id))
        {
            return self.deferred.remove(pos);
        }
        while let Some(id) = self.scheduler.choose_paused() {
            if !is_paused(&self.live, id) {
                continue;
            }
            if self.in_flight.contains_key(&id) {
                // Its paused run is still writing its checkpoint: relaunch it after that run ends.
                self.deferred.push_back(id);
                continue;
            }
            return Some(id);
        }
        None
    }
}
