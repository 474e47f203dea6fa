//! The coordinator: the one place that turns searcher suggestions and scheduler decisions
//! into running trials, and worker reports into durable state.
//!
//! It runs as a plain loop on the caller's thread; workers (closure threads, command tasks
//! on tokio) talk to it over one channel. Each round it handles every waiting message, writes
//! the changes, syncs the store once (group commit), and only then answers reports: nothing
//! is acknowledged before it is durable, and a sweep that returns has synced everything.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot, watch};
use tune_schedulers::{Decision, Scheduler};
use tune_search::{History, Mode, Searcher, Status, TrialId};

use crate::error::TuneError;
use crate::experiment::trial_dir;
use crate::objective::{Heard, Job, Objective, Outcome, WorkerMsg};
use crate::pool::{Pool, Slot};
use crate::store::TrialStore;
use crate::trial::{now_ms, Trial, TrialResult};

/// Something that happened in the sweep, for observers (progress line, dashboard).
#[derive(Debug)]
pub enum Event<'a> {
    Started(&'a Trial),
    Result(&'a Trial, &'a TrialResult),
    /// The scheduler paused the trial (to resume it later, or to exploit another's weights).
    Paused(&'a Trial),
    Finished(&'a Trial),
    /// The scheduler's account of itself ([`tune_schedulers::Scheduler::describe`]), sent at
    /// most four times a second and at the end.
    Scheduler(&'a [String]),
    /// Something the user should know (the GPUs used, a fallback to CPU).
    Note(&'a str),
}

/// Running counts of the sweep, kept current by the coordinator.
#[derive(Debug, Clone)]
pub struct Summary {
    pub metric: String,
    pub mode: Mode,
    /// Trials the sweep will create in all.
    pub total: u64,
    pub pending: u64,
    pub running: u64,
    pub paused: u64,
    pub completed: u64,
    pub stopped: u64,
    pub failed: u64,
    /// The best completed trial and its value.
    pub best: Option<(TrialId, f64)>,
    pub started: Instant,
}

impl Summary {
    fn count(&mut self, status: Status) -> &mut u64 {
        match status {
            Status::Pending => &mut self.pending,
            Status::Running => &mut self.running,
            Status::Paused => &mut self.paused,
            Status::Completed => &mut self.completed,
            Status::Stopped => &mut self.stopped,
            Status::Failed => &mut self.failed,
        }
    }

    /// Trials that will not run again.
    pub fn finished(&self) -> u64 {
        self.completed + self.stopped + self.failed
    }
}

/// What observers learn when a sweep starts (or resumes).
#[derive(Debug)]
pub struct SweepInfo<'a> {
    pub name: &'a str,
    pub dir: &'a Path,
    /// Search algorithm and scheduler, as named in the spec (`tpe`, `asha`).
    pub search: &'a str,
    pub scheduler: &'a str,
    /// The worker slots (`cpu:0`, `cuda:1`).
    pub slots: Vec<String>,
    /// The trials so far, with their results (a resumed sweep has some).
    pub trials: &'a [Trial],
}

/// Receives events on the coordinator's thread; must be quick (throttle, or forward to a channel).
pub trait Observer: Send {
    fn on_start(&mut self, _info: &SweepInfo<'_>, _summary: &Summary) {}
    fn on_event(&mut self, event: &Event<'_>, summary: &Summary);
    fn on_end(&mut self, _summary: &Summary) {}
}

/// What the coordinator needs to know about an attempt in flight.
struct InFlight {
    attempt: u32,
    slot: Slot,
    /// Reports this run made, re-runs of stored steps included.
    reports: u64,
    /// Where this run's reports without a step number on from: the trial's last stored step
    /// when it continues from a checkpoint (its own or an exploited one), else 0.
    base_step: u64,
    /// A relaunch of the trial's own work redoes the steps after its checkpoint (or all of
    /// them, with none): reports up to this step, its last stored one, were already stored
    /// and decided, so they are not taken again. Cleared by the first report past it.
    redo_through: Option<u64>,
    /// The checkpoint this run continues from (a trial that ran before and left one).
    restore_dir: Option<std::path::PathBuf>,
    /// The trial's end was decided (and stored) at a report: a bad metric failed it, or the
    /// scheduler stopped or completed it. The worker is only winding down.
    settled: bool,
}

/// Settings of one sweep run.
pub(crate) struct Plan {
    pub name: String,
    /// Search algorithm and scheduler names, for observers.
    pub search: String,
    pub scheduler: String,
    /// Told to observers at the start (or printed when there are none).
    pub note: Option<String>,
    /// Set to end the sweep early, resumable.
    pub stop: StopHandle,
    pub dir: PathBuf,
    pub metric: String,
    pub mode: Mode,
    pub samples: u64,
    /// Where trials run.
    pub pool: Pool,
    pub max_failures: u32,
    pub timeout: Option<Duration>,
}

pub(crate) struct Coordinator {
    plan: Plan,
    store: Box<dyn TrialStore>,
    searcher: Box<dyn Searcher>,
    scheduler: Box<dyn Scheduler>,
    objective: Objective,
    observers: Vec<Box<dyn Observer>>,
    history: History,
    trials: Vec<Trial>,
    budget: u64,
    next_seq: u64,
    queue: VecDeque<TrialId>,
    in_flight: HashMap<TrialId, InFlight>,
    summary: Summary,
    tx: mpsc::UnboundedSender<WorkerMsg>,
    rx: mpsc::UnboundedReceiver<WorkerMsg>,
    shutdown: watch::Sender<bool>,
    acks: Vec<(oneshot::Sender<Heard>, Heard)>,
    to_launch: Vec<TrialId>,
    /// The budget is spent: the scheduler has been told no trial will join.
    all_added: bool,
    /// Paused trials chosen for resuming whose previous run has not ended yet.
    deferred: VecDeque<TrialId>,
    /// When observers last heard the scheduler describe itself.
    described_at: Option<Instant>,
    /// Decisions made before a kill whose effect was not stored yet (see [`replay`]).
    undelivered: Vec<(TrialId, u64, Decision)>,
}

impl Coordinator {
    /// Takes over a loaded experiment: finished trials stay as they are, unfinished ones are
    /// re-queued with their ids and params.
    pub(crate) fn new(
        plan: Plan,
        store: Box<dyn TrialStore>,
        trials: Vec<Trial>,
        searcher: Box<dyn Searcher>,
        scheduler: Box<dyn Scheduler>,
        objective: Objective,
        observers: Vec<Box<dyn Observer>>,
    ) -> Coordinator {
        let mut history = History::new(plan.mode);
        let mut summary = Summary {
            metric: plan.metric.clone(),
            mode: plan.mode,
            total: 0,
            pending: 0,
            running: 0,
            paused: 0,
            completed: 0,
            stopped: 0,
            failed: 0,
            best: None,
            started: Instant::now(),
        };
        let mut queue = VecDeque::new();
        let mut next_seq = 0;
        let mut trials = trials;
        for t in &mut trials {
            // Paused trials stay paused: the scheduler resumes or ends them.
            if !t.status.is_finished() && t.status != Status::Paused {
                t.status = Status::Pending;
                queue.push_back(t.id);
            }
            history.record(t.id, t.params.clone(), t.status);
            if let (Some(v), Some(step)) = (t.value(&plan.metric), t.last_step()) {
                history.report(t.id, step, v);
            }
            next_seq = t.results.iter().map(|r| r.seq + 1).fold(next_seq, u64::max);
            *summary.count(t.status) += 1;
            note_best(&mut summary, t);
        }
        let trials_pending_exploit: VecDeque<TrialId> = trials
            .iter()
            .filter(|t| t.status == Status::Paused && t.restore_from.is_some())
            .map(|t| t.id)
            .collect();
        let mut scheduler = scheduler;
        let undelivered = replay(scheduler.as_mut(), &trials, &plan.metric);
        let budget = searcher.total_trials(plan.samples).max(trials.len() as u64);
        let all_added = trials.len() as u64 >= budget;
        if all_added {
            scheduler.on_no_more_trials();
        }
        summary.total = budget;
        let (tx, rx) = mpsc::unbounded_channel();
        let shutdown = plan.stop.0.clone();
        Coordinator {
            plan,
            store,
            searcher,
            scheduler,
            objective,
            observers,
            history,
            trials,
            budget,
            next_seq,
            queue,
            in_flight: HashMap::new(),
            summary,
            tx,
            rx,
            shutdown,
            acks: Vec::new(),
            to_launch: Vec::new(),
            all_added,
            // Paused by an exploit not yet applied: they run again as soon as a slot is free.
            deferred: trials_pending_exploit,
            described_at: None,
            undelivered,
        }
    }

    /// Tells observers what the scheduler is doing, at most four times a second unless `now`.
    fn describe_scheduler(&mut self, now: bool) {
        if self.observers.is_empty()
            || !now
                && self
                    .described_at
                    .is_some_and(|t| t.elapsed() < Duration::from_millis(250))
        {
            return;
        }
        self.described_at = Some(Instant::now());
        let lines = self.scheduler.describe();
        emit(
            &mut self.observers,
            &Event::Scheduler(&lines),
            &self.summary,
        );
    }

    /// Runs until the budget is spent and every trial has ended, or until interrupted.
    pub(crate) fn run(mut self, rt: &Handle) -> Result<Vec<Trial>, TuneError> {
        let mut shutdown_rx = self.shutdown.subscribe();
        let info = SweepInfo {
            name: &self.plan.name,
            dir: &self.plan.dir,
            search: &self.plan.search,
            scheduler: &self.plan.scheduler,
            slots: self.plan.pool.slots().iter().map(Slot::to_string).collect(),
            trials: &self.trials,
        };
        for o in &mut self.observers {
            o.on_start(&info, &self.summary);
        }
        if let Some(note) = &self.plan.note {
            if self.observers.is_empty() {
                eprintln!("tune: {note}");
            }
            emit(&mut self.observers, &Event::Note(note), &self.summary);
        }
        for (id, step, decision) in std::mem::take(&mut self.undelivered) {
            self.queue.retain(|&q| q != id);
            self.apply_decision(id, step, decision)?;
        }
        self.describe_scheduler(true);
        loop {
            let interrupted = *shutdown_rx.borrow();
            self.settle_ended()?;
            if !interrupted {
                self.fill_slots()?;
            }
            // Sync before acknowledging, and at the end. Launches need not wait: what a new
            // attempt does reaches anyone only through reports, acknowledged after a later sync.
            if !self.acks.is_empty() || self.in_flight.is_empty() {
                self.store.sync()?;
            }
            for (ack, decision) in self.acks.drain(..) {
                let _ = ack.send(decision);
            }
            for id in std::mem::take(&mut self.to_launch) {
                self.launch(id, rt);
            }
            if self.in_flight.is_empty() {
                if !interrupted {
                    // Nothing runs and nothing will start: paused trials the scheduler never
                    // resumed are over.
                    let leftover: Vec<TrialId> = self
                        .trials
                        .iter()
                        .filter(|t| t.status == Status::Paused)
                        .map(|t| t.id)
                        .collect();
                    for id in leftover {
                        self.settle(id, Status::Stopped, None)?;
                    }
                    self.store.sync()?;
                }
                break;
            }
            let msg = rt.block_on(async {
                tokio::select! {
                    m = self.rx.recv() => m,
                    _ = shutdown_rx.changed(), if !interrupted => None,
                }
            });
            if let Some(msg) = msg {
                self.handle(msg)?;
            }
            while let Ok(msg) = self.rx.try_recv() {
                self.handle(msg)?;
            }
        }
        self.describe_scheduler(true);
        for o in &mut self.observers {
            o.on_end(&self.summary);
        }
        let unfinished = (self.trials.len() as u64) < self.budget
            || self.summary.pending > 0
            || self.summary.paused > 0;
        if *shutdown_rx.borrow() && unfinished {
            return Err(TuneError::Interrupted(self.plan.dir.clone()));
        }
        Ok(self.trials)
    }

    fn set_status(&mut self, id: TrialId, status: Status) {
        let old = self.trials[id as usize].status;
        *self.summary.count(old) -= 1;
        *self.summary.count(status) += 1;
        self.trials[id as usize].status = status;
        self.history.set_status(id, status);
    }

    /// Claims free slots for re-queued trials first, then for new ones while the budget lasts.
    fn fill_slots(&mut self) -> Result<(), TuneError> {
        while self.plan.pool.has_free() {
            let id = if let Some(id) = self.queue.pop_front() {
                id
            } else if let Some(id) = self.next_paused() {
                id
            } else if (self.trials.len() as u64) < self.budget {
                let id = self.trials.len() as u64;
                let Some(params) = self.searcher.suggest(id, &self.history) else {
                    self.budget = id;
                    self.summary.total = id;
                    break;
                };
                self.history.record(id, params.clone(), Status::Pending);
                self.trials.push(Trial::new(id, params));
                self.summary.pending += 1;
                self.scheduler
                    .on_trial_add(id, &self.trials[id as usize].params);
                if self.trials.len() as u64 >= self.budget && !self.all_added {
                    self.all_added = true;
                    self.scheduler.on_no_more_trials();
                }
                id
            } else {
                break;
            };
            let slot = self.plan.pool.claim().expect("a free slot");
            let exploited = self.trials[id as usize].restore_from.is_some();
            self.apply_exploit(id)?;
            self.set_status(id, Status::Running);
            let t = &mut self.trials[id as usize];
            t.attempts += 1;
            t.started_at = Some(now_ms());
            t.finished_at = None;
            t.device = Some(slot.to_string());
            self.store.put_trial(t)?;
            let last_step = t.results.last().map(|r| r.step);
            let restore_dir = Some(trial_dir(&self.plan.dir, id)).filter(|d| {
                last_step.is_some() && std::fs::read_dir(d).is_ok_and(|mut e| e.next().is_some())
            });
            // An exploit goes on from another trial's point: its steps are new, not redone.
            let redo_through = last_step.filter(|_| !exploited);
            let base_step = if restore_dir.is_some() || exploited {
                last_step.unwrap_or(0)
            } else {
                0
            };
            self.in_flight.insert(
                id,
                InFlight {
                    attempt: t.attempts,
                    slot,
                    reports: 0,
                    base_step,
                    redo_through,
                    restore_dir,
                    settled: false,
                },
            );
            self.to_launch.push(id);
        }
        Ok(())
    }

    fn launch(&mut self, id: TrialId, rt: &Handle) {
        let t = &self.trials[id as usize];
        let job = Job {
            id,
            attempt: t.attempts,
            params: t.params.clone(),
            device: t.device.clone().unwrap_or_default(),
            trial_dir: trial_dir(&self.plan.dir, id),
            restore_dir: self.in_flight.get(&id).and_then(|r| r.restore_dir.clone()),
            timeout: self.plan.timeout,
            tx: self.tx.clone(),
            shutdown: self.shutdown.subscribe(),
        };
        let _guard = rt.enter();
        self.objective.launch(job);
        emit(&mut self.observers, &Event::Started(t), &self.summary);
    }

    fn handle(&mut self, msg: WorkerMsg) -> Result<(), TuneError> {
        match msg {
            WorkerMsg::Report {
                id,
                attempt,
                step,
                metrics,
                ack,
            } => self.on_report(id, attempt, step, metrics, ack),
            WorkerMsg::Finished {
                id,
                attempt,
                outcome,
            } => self.on_finished(id, attempt, outcome),
        }
    }

    fn on_report(
        &mut self,
        id: TrialId,
        attempt: u32,
        step: Option<u64>,
        mut metrics: std::collections::BTreeMap<String, f64>,
        ack: oneshot::Sender<Heard>,
    ) -> Result<(), TuneError> {
        let metric = &self.plan.metric;
        let Some(run) = self
            .in_flight
            .get_mut(&id)
            .filter(|r| r.attempt == attempt && !r.settled)
        else {
            // A late report after a decision: discarded.
            self.acks.push((ack, Heard::Stop));
            return Ok(());
        };
        run.reports += 1;
        let step = step.unwrap_or(run.base_step + run.reports);
        if run.redo_through.is_some_and(|last| step <= last) {
            // A step this run redoes, restarted from an older checkpoint (a kill came between
            // the step's acknowledgement and its checkpoint) or from scratch: its result and
            // decision are already stored.
            self.acks.push((ack, Heard::Continue));
            return Ok(());
        }
        run.redo_through = None;
        let value = match metrics.get(metric) {
            Some(&v) if v.is_finite() => v,
            bad => {
                let reason = match bad {
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
                };
                run.settled = true;
                self.settle(id, Status::Failed, Some(reason))?;
                self.acks.push((ack, Heard::Stop));
                return Ok(());
            }
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
        self.history.report(id, step, value);
        let decision = self.scheduler.on_result(id, step, value);
        let t = &mut self.trials[id as usize];
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

    /// Acts on the scheduler's `decision` for trial `id`'s result at `step`: stores what it
    /// changes (status, params, lineage) and says what the trial's run is to hear.
    fn apply_decision(
        &mut self,
        id: TrialId,
        step: u64,
        decision: Decision,
    ) -> Result<Heard, TuneError> {
        if decision != Decision::Continue {
            // The trial's end (or pause) is decided: its run, if any, is only winding down.
            if let Some(run) = self.in_flight.get_mut(&id) {
                run.settled = true;
            }
        }
        let heard = match decision {
            Decision::Continue => Heard::Continue,
            Decision::Pause => {
                self.set_status(id, Status::Paused);
                self.store.put_trial(&self.trials[id as usize])?;
                let t = &self.trials[id as usize];
                emit(&mut self.observers, &Event::Paused(t), &self.summary);
                Heard::Pause
            }
            Decision::Exploit { from, params } => {
                // The run checkpoints and ends; the trial then starts again from `from`'s
                // checkpoint with the new params (see `fill_slots`).
                self.set_status(id, Status::Paused);
                let t = &mut self.trials[id as usize];
                let previous = std::mem::replace(&mut t.params, params.clone());
                t.lineage.push(crate::trial::Lineage {
                    step,
                    from,
                    previous,
                });
                t.parent = Some(from);
                t.restore_from = Some(from);
                self.store.put_trial(t)?;
                // Take the source's checkpoint as it is now (as Ray Tune does): it moves on.
                let staged = exploit_staging(&self.plan.dir, id);
                let _ = std::fs::remove_dir_all(&staged);
                copy_dir(&trial_dir(&self.plan.dir, from), &staged).map_err(|e| {
                    TuneError::io(format!("copying the checkpoint of trial {from}"), e)
                })?;
                self.history.set_params(id, params);
                self.deferred.push_back(id);
                let t = &self.trials[id as usize];
                emit(&mut self.observers, &Event::Paused(t), &self.summary);
                Heard::Pause
            }
            Decision::Stop => {
                self.settle(id, Status::Stopped, None)?;
                Heard::Stop
            }
            Decision::Complete => {
                self.settle(id, Status::Completed, None)?;
                Heard::Stop
            }
        };
        Ok(heard)
    }

    /// Copies the checkpoint of the trial that `id` exploited into `id`'s folder (then forgets
    /// the pending copy, durably). A crash before the copy repeats it on resume.
    fn apply_exploit(&mut self, id: TrialId) -> Result<(), TuneError> {
        let Some(from) = self.trials[id as usize].restore_from else {
            return Ok(());
        };
        let (staged, dst) = (
            exploit_staging(&self.plan.dir, id),
            trial_dir(&self.plan.dir, id),
        );
        let _ = std::fs::remove_dir_all(&dst);
        let moved = staged.is_dir() && std::fs::rename(&staged, &dst).is_ok();
        if !moved {
            // No snapshot (a crash came between the decision and it): take the source's latest.
            copy_dir(&trial_dir(&self.plan.dir, from), &dst).map_err(|e| {
                TuneError::io(
                    format!("copying the checkpoint of trial {from} to trial {id}"),
                    e,
                )
            })?;
        }
        let t = &mut self.trials[id as usize];
        t.restore_from = None;
        self.store.put_trial(t)?;
        Ok(())
    }

    /// A paused trial the scheduler wants resumed now (ids it names that are not paused here,
    /// as after a replay, are skipped).
    fn next_paused(&mut self) -> Option<TrialId> {
        let is_paused = |trials: &[Trial], id: TrialId| {
            trials
                .get(id as usize)
                .is_some_and(|t| t.status == Status::Paused)
        };
        // Resumes that had to wait for the trial's previous run to end come first.
        self.deferred.retain(|&id| is_paused(&self.trials, id));
        if let Some(pos) = self
            .deferred
            .iter()
            .position(|id| !self.in_flight.contains_key(id))
        {
            return self.deferred.remove(pos);
        }
        while let Some(id) = self.scheduler.choose_paused() {
            if !is_paused(&self.trials, id) {
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

    /// Settles the paused trials the scheduler has ended.
    fn settle_ended(&mut self) -> Result<(), TuneError> {
        for (id, decision) in self.scheduler.drain_ended() {
            if self
                .trials
                .get(id as usize)
                .is_some_and(|t| t.status == Status::Paused)
            {
                let status = if decision == Decision::Complete {
                    Status::Completed
                } else {
                    Status::Stopped
                };
                self.settle(id, status, None)?;
            }
        }
        Ok(())
    }

    /// Ends trial `id` with `status`: stored, told to the scheduler, the summary and observers.
    fn settle(
        &mut self,
        id: TrialId,
        status: Status,
        error: Option<String>,
    ) -> Result<(), TuneError> {
        self.set_status(id, status);
        let t = &mut self.trials[id as usize];
        t.error = error;
        t.finished_at = Some(now_ms());
        self.store.put_trial(t)?;
        let last = t.last_step().zip(t.value(&self.plan.metric));
        self.scheduler.on_complete(id, last);
        note_best(&mut self.summary, t);
        emit(&mut self.observers, &Event::Finished(t), &self.summary);
        Ok(())
    }

    fn on_finished(
        &mut self,
        id: TrialId,
        attempt: u32,
        outcome: Outcome,
    ) -> Result<(), TuneError> {
        // A stale message (an earlier run of a trial since relaunched) must not touch the new run.
        if self.in_flight.get(&id).is_none_or(|r| r.attempt != attempt) {
            return Ok(());
        }
        let Some(run) = self.in_flight.remove(&id) else {
            return Ok(());
        };
        self.plan.pool.release(run.slot);
        if run.settled {
            return Ok(());
        }
        let t = &self.trials[id as usize];
        // A run that reported completes the trial; so does one that only redid stored steps, or
        // one resumed from a checkpoint with nothing left to report (its earlier results
        // stand). A fresh run must report.
        let this_run_reported = t.results.last().is_some_and(|r| r.attempt == attempt);
        let redid_stored_steps = run.reports > 0 && run.redo_through.is_some();
        let reported = this_run_reported
            || redid_stored_steps
            || (run.restore_dir.is_some() && !t.results.is_empty());
        let (status, error) = match outcome {
            Outcome::Interrupted => {
                // Left as running in the store: `resume` re-queues it.
                self.set_status(id, Status::Pending);
                return Ok(());
            }
            Outcome::Stopped => (Status::Stopped, None),
            Outcome::Returned if reported => (Status::Completed, None),
            Outcome::Returned => (
                Status::Failed,
                Some(format!(
                    "the objective ended without reporting `{}`",
                    self.plan.metric
                )),
            ),
            Outcome::Failed(reason) if t.attempts <= self.plan.max_failures => {
                // Retried at once, same id and params (Ray Tune's max_failures).
                self.set_status(id, Status::Pending);
                let t = &mut self.trials[id as usize];
                t.error = Some(reason);
                self.store.put_trial(t)?;
                self.queue.push_front(id);
                return Ok(());
            }
            Outcome::Failed(reason) => (Status::Failed, Some(reason)),
        };
        self.settle(id, status, error)
    }
}

/// Where the checkpoint an exploit took waits until the exploiting trial runs again.
fn exploit_staging(dir: &std::path::Path, id: TrialId) -> std::path::PathBuf {
    dir.join(crate::experiment::TRIALS_DIR)
        .join(format!(".exploit-{id}"))
}

/// Copies a folder tree (a trial's checkpoint); a missing source copies nothing.
fn copy_dir(src: &std::path::Path, dst: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dst)?;
    let Ok(entries) = std::fs::read_dir(src) else {
        return Ok(());
    };
    for entry in entries {
        let entry = entry?;
        let to = dst.join(entry.file_name());
        let copied = match entry.file_type()?.is_dir() {
            true => copy_dir(&entry.path(), &to),
            false => std::fs::copy(entry.path(), to).map(drop),
        };
        match copied {
            // The running source renamed its temporary file over its checkpoint meanwhile:
            // the checkpoint itself is copied (old or new, whole) under its own name.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            other => other?,
        }
    }
    Ok(())
}

/// Rebuilds a scheduler's state from stored trials: every result in the order the coordinator
/// received it, and each finished trial's completion right after its last result.
///
/// Returns the decisions the store has not caught up with: an unfinished trial whose last
/// result the scheduler answers with more than `Continue`, because a kill came after the
/// result was stored and before the decision's effect was (a paused trial's was).
pub(crate) fn replay(
    scheduler: &mut dyn Scheduler,
    trials: &[Trial],
    metric: &str,
) -> Vec<(TrialId, u64, Decision)> {
    enum Step {
        Result(TrialId, u64, f64),
        Complete(TrialId, Option<(u64, f64)>),
    }
    // Trials joined in id order (a synchronous scheduler fills its brackets that way).
    for t in trials {
        scheduler.on_trial_add(t.id, t.original_params());
    }
    let mut events: Vec<(u64, u8, Step)> = Vec::new();
    for t in trials {
        for r in &t.results {
            if let Some(&v) = r.metrics.get(metric) {
                events.push((r.seq, 0, Step::Result(t.id, r.step, v)));
            }
        }
        if t.status.is_finished() {
            if let Some(last) = t.results.last() {
                let final_result = t.last_step().zip(t.value(metric));
                events.push((last.seq, 1, Step::Complete(t.id, final_result)));
            }
        }
    }
    events.sort_by_key(|e| (e.0, e.1));
    let mut last_decision: HashMap<TrialId, (u64, Decision)> = HashMap::new();
    for (_, _, step) in events {
        match step {
            Step::Result(id, s, v) => {
                let decision = scheduler.on_result(id, s, v);
                last_decision.insert(id, (s, decision));
            }
            Step::Complete(id, last) => scheduler.on_complete(id, last),
        }
    }
    trials
        .iter()
        .filter(|t| !t.status.is_finished() && t.status != Status::Paused)
        .filter_map(|t| {
            let (step, decision) = last_decision.remove(&t.id)?;
            (decision != Decision::Continue).then_some((t.id, step, decision))
        })
        .collect()
}

fn note_best(summary: &mut Summary, t: &Trial) {
    if t.status != Status::Completed {
        return;
    }
    if let Some(v) = t.value(&summary.metric) {
        if summary.best.is_none_or(|(_, b)| summary.mode.better(v, b)) {
            summary.best = Some((t.id, v));
        }
    }
}

fn emit(observers: &mut [Box<dyn Observer>], event: &Event<'_>, summary: &Summary) {
    for o in observers.iter_mut() {
        o.on_event(event, summary);
    }
}

/// Asks a running sweep to stop cleanly: no new trials start, running ones are ended and
/// left for `tune resume` (what Ctrl-C and the dashboard's quit do).
///
/// ```
/// let tuner = tune::Tuner::new(tune::Space::builder().uniform("x", 0.0, 1.0).build().unwrap());
/// let stop = tuner.stop_handle();
/// std::thread::spawn(move || { /* later */ stop.stop(); });
/// ```
#[derive(Clone, Debug)]
pub struct StopHandle(pub(crate) watch::Sender<bool>);

impl StopHandle {
    pub(crate) fn new() -> StopHandle {
        StopHandle(watch::channel(false).0)
    }

    pub fn stop(&self) {
        self.0.send_replace(true);
    }

    /// Whether a stop was asked for.
    pub fn is_stopped(&self) -> bool {
        *self.0.borrow()
    }
}
