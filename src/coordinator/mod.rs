//! The coordinator: the one place that turns searcher suggestions and scheduler decisions
//! into running trials, and worker reports into durable state.
//!
//! It runs as a plain loop on the caller's thread; workers (closure threads, command tasks
//! on tokio) talk to it over one channel. Each round it handles every waiting message, writes
//! the changes, syncs the store once (group commit), and only then answers reports: nothing
//! is acknowledged before it is durable, and a sweep that returns has synced everything.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot, watch};
use tune_schedulers::{Decision, Scheduler};
use tune_search::{AutoChoice, History, Mode, Searcher, Status, Suggestion, TrialId};

mod in_flight;
mod reports;
mod steering;
#[cfg(test)]
mod tests;

use crate::error::TuneError;
use crate::experiment::{remove_stale_exploits, stage_exploit, take_exploit, trial_dir};
use crate::objective::{Job, Objective};
use crate::observer::{emit, tell, Event, Notes, Observer, StopHandle, Summary, SweepInfo};
use crate::pool::{Pool, Slot};
use crate::protocol::{Outcome, ReportAnswer, WorkerMsg};
use crate::remote::bridge::{Adopted, Bridge};
use crate::replay::replay;
use crate::stop::{StopConditions, StopReason, StopWatch};
use crate::store::{StoreError, TrialStore};
use crate::trial::{now_ms, Trial, TrialResult};
use in_flight::{InFlight, Taken};

/// What woke the coordinator's loop.
enum Arrived {
    Message(WorkerMsg),
    Control(crate::control::ControlRequest),
}

/// How a sweep ended, for its result (every trial is in the store).
pub(crate) struct Ended {
    pub best: Option<Trial>,
    /// How many trials failed, and the one with the lowest id.
    pub failed: u64,
    pub first_failure: Option<Trial>,
    /// Why the sweep stopped before its budget was spent (`[stop]`).
    pub stopped: Option<StopReason>,
}

/// Settings of one sweep run.
pub(crate) struct Plan {
    pub name: String,
    /// When the experiment was created (Unix ms), for observers.
    pub created_at: u64,
    /// Search algorithm and scheduler names, for observers.
    pub search: String,
    pub scheduler: String,
    /// Told to observers at the start (or printed when there are none).
    pub notes: Vec<String>,
    /// Set to end the sweep early, resumable.
    pub stop: StopHandle,
    pub dir: PathBuf,
    /// Where trial folders go (`trials/<id>` under it): the experiment folder, or the spec's
    /// `[store] checkpoints`.
    pub trials: PathBuf,
    /// `[store] checkpoints = "database"`: remote workers keep trial folders in the database,
    /// and copy an exploit's there.
    pub database_checkpoints: bool,
    /// Every objective, at least one: what the searcher is shown. The first is what one
    /// value is compared by (the summary's best, the scheduler, `[stop]`).
    pub objectives: Vec<crate::spec::Goal>,
    /// `[constraints]`: shown to the searcher, and deciding which trials can be the best.
    pub constraints: crate::spec::Constraints,
    pub samples: u64,
    /// Where trials run.
    pub pool: Pool,
    pub max_failures: u32,
    /// Read only where remote workers (the `postgres` feature) can lose their machine.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub max_lost_attempts: u32,
    /// `[stop]`: when the sweep ends before the budget is spent.
    pub stop_when: StopConditions,
    pub timeout: Option<Duration>,
    /// The PostgreSQL database holding the experiment: remote workers may run its trials.
    pub remote: Option<String>,
    /// The experiment's record: the space and seed enqueued points are drawn in, and the
    /// budget that controls raise.
    pub meta: crate::store::Meta,
    /// Where controls from outside come from ([`crate::control`]).
    pub control: crate::control::SweepControl,
}

impl Plan {
    /// The first objective's key.
    pub fn metric(&self) -> &str {
        &self.objectives[0].metric
    }

    /// The first objective's direction.
    pub fn mode(&self) -> Mode {
        self.objectives[0].mode
    }
}

pub(crate) struct Coordinator {
    plan: Plan,
    store: Box<dyn TrialStore>,
    searcher: Box<dyn Searcher>,
    scheduler: Box<dyn Scheduler>,
    objective: Objective,
    observers: Vec<Box<dyn Observer>>,
    /// What the searcher is shown; left empty for one that does not read it.
    history: History,
    /// The trials not finished (pending, running, paused): the only ones held in memory, so
    /// that a long sweep's memory stays flat. Finished ones are in the store.
    live: BTreeMap<TrialId, Trial>,
    /// The stored trials as loaded, for observers' start; emptied once they have it.
    loaded: Vec<Trial>,
    /// How many trials exist (ids are dense: the next one is this).
    created: u64,
    /// The best completed trial (as [`Summary::best`] picks it) and the failed trial with the
    /// lowest id, for the result.
    best: Option<Trial>,
    first_failure: Option<Trial>,
    budget: u64,
    next_seq: u64,
    queue: VecDeque<TrialId>,
    in_flight: HashMap<TrialId, InFlight>,
    summary: Summary,
    tx: mpsc::UnboundedSender<WorkerMsg>,
    rx: mpsc::UnboundedReceiver<WorkerMsg>,
    /// Controls from outside the sweep; `None` where another run took them first.
    controls: Option<mpsc::UnboundedReceiver<crate::control::ControlRequest>>,
    shutdown: watch::Sender<bool>,
    acks: Vec<(oneshot::Sender<ReportAnswer>, ReportAnswer)>,
    to_launch: Vec<TrialId>,
    /// The budget is spent: the scheduler has been told no trial will join.
    all_added: bool,
    /// Paused trials chosen for resuming whose previous run has not ended yet.
    deferred: VecDeque<TrialId>,
    /// When observers last heard the scheduler describe itself.
    described_at: Option<Instant>,
    /// What `auto` chose for the last trial it suggested in this run.
    last_choice: Option<AutoChoice>,
    /// Decisions made before a kill whose effect was not stored yet (see [`replay`]).
    undelivered: Vec<(TrialId, u64, Decision)>,
    stop_watch: StopWatch,
    /// Why the sweep is stopping early, once a `[stop]` condition is met.
    stopped: Option<StopReason>,
    /// The link to remote workers, while the sweep runs.
    bridge: Option<Bridge>,
    /// The trials stored as running when the sweep was loaded, with their attempt: a remote
    /// worker may still be running them.
    stored_running: Vec<(TrialId, u32)>,
    /// Whether the user was told that the sweep waits for workers.
    told_waiting: bool,
    /// Whether the user was told that PBT's checkpoints do not reach remote workers.
    told_unshared: bool,
}

/// Re-queues the loaded trials that had not finished, with their ids and params: the queue.
/// Paused trials stay paused: the scheduler resumes or ends them.
fn requeue(trials: &mut [Trial]) -> VecDeque<TrialId> {
    let mut queue = VecDeque::new();
    for t in trials {
        if !t.status.is_finished() && t.status != Status::Paused {
            t.status = Status::Pending;
            queue.push_back(t.id);
        }
    }
    queue
}

/// The loaded trials counted by status, and the best of them.
fn summary_of(plan: &Plan, trials: &[Trial]) -> Summary {
    let mut summary = Summary::new(plan.metric(), plan.mode(), plan.constraints.clone());
    for t in trials {
        *summary.count(t.status) += 1;
        summary.note_best(t);
    }
    summary
}

/// The trials paused by an exploit not yet applied: they run again as soon as a slot is free.
fn pending_exploits(live: &BTreeMap<TrialId, Trial>) -> VecDeque<TrialId> {
    (live.values())
        .filter(|t| t.status == Status::Paused && t.restore_from.is_some())
        .map(|t| t.id)
        .collect()
}

/// Records the loaded trials in the searcher's `history`: every report, as the run heard
/// them (a model fitted at a rung reads the values at earlier steps too), and the
/// constraints' values at each one's last.
fn record_loaded(history: &mut History, plan: &Plan, trials: &[Trial]) {
    for t in trials {
        history.record(t.id, t.params.clone(), t.status);
        for r in &t.results {
            let values: Option<Vec<f64>> = (plan.objectives.iter())
                .map(|o| r.metrics.get(&o.metric).copied())
                .collect();
            if let Some(values) = values {
                history.report_values(t.id, r.step, &values);
            }
        }
        let last = t.results.last();
        if let Some(Ok(c)) = last.map(|r| plan.constraints.values(&r.metrics)) {
            history.report_constraints(t.id, &c);
        }
    }
}

impl Coordinator {
    /// Takes over a loaded experiment: finished trials stay as they are, unfinished ones are
    /// re-queued with their ids and params.
    pub(crate) fn new(
        plan: Plan,
        store: Box<dyn TrialStore>,
        mut trials: Vec<Trial>,
        mut searcher: Box<dyn Searcher>,
        mut scheduler: Box<dyn Scheduler>,
        objective: Objective,
        observers: Vec<Box<dyn Observer>>,
    ) -> Coordinator {
        let stored_running = (trials.iter())
            .filter(|t| t.status == Status::Running)
            .map(|t| (t.id, t.attempts))
            .collect();
        let queue = requeue(&mut trials);
        let mut history =
            History::with_objectives(plan.objectives.iter().map(|o| o.mode).collect());
        if searcher.reads_history() {
            record_loaded(&mut history, &plan, &trials);
        }
        let next_seq = (trials.iter().flat_map(|t| &t.results))
            .map(|r| r.seq + 1)
            .max()
            .unwrap_or(0);
        let mut summary = summary_of(&plan, &trials);
        let first_failure = trials.iter().find(|t| t.status == Status::Failed).cloned();
        let best = summary
            .best
            .and_then(|(id, _)| trials.get(id as usize).cloned());
        let live: BTreeMap<TrialId, Trial> = (trials.iter())
            .filter(|t| !t.status.is_finished())
            .map(|t| (t.id, t.clone()))
            .collect();
        let stop_watch = StopWatch::new(
            plan.stop_when.clone(),
            (plan.metric(), plan.mode()),
            plan.constraints.clone(),
            &trials,
        );
        let created = trials.len() as u64;
        searcher.set_samples(plan.samples);
        let budget = searcher.total_trials(plan.samples).max(created);
        let all_added = created >= budget;
        let undelivered = replay(scheduler.as_mut(), &trials, plan.metric(), all_added);
        summary.total = budget;
        let (tx, rx) = mpsc::unbounded_channel();
        let shutdown = plan.stop.0.clone();
        let controls = plan.control.take_requests();
        Coordinator {
            plan,
            store,
            searcher,
            scheduler,
            objective,
            observers,
            history,
            deferred: pending_exploits(&live),
            live,
            loaded: trials,
            created,
            best,
            first_failure,
            budget,
            next_seq,
            queue,
            in_flight: HashMap::new(),
            summary,
            tx,
            rx,
            controls,
            shutdown,
            acks: Vec::new(),
            to_launch: Vec::new(),
            all_added,
            described_at: None,
            last_choice: None,
            undelivered,
            stop_watch,
            stopped: None,
            bridge: None,
            stored_running,
            told_waiting: false,
            told_unshared: false,
        }
    }

    /// Connects to remote workers: attempts a worker still runs from before a restart are
    /// taken over as they are, not run again.
    fn start_bridge(&mut self, rt: &Handle) -> Result<(), TuneError> {
        let Some(url) = &self.plan.remote else {
            return Ok(());
        };
        let (bridge, adopted) = Bridge::start(
            url,
            &self.plan.meta.spec,
            &self.stored_running,
            self.tx.clone(),
            self.shutdown.subscribe(),
            self.plan.control.clone(),
            rt,
        )?;
        self.plan.pool.take_remote(bridge.capacity());
        self.bridge = Some(bridge);
        for Adopted { id, attempt } in adopted {
            let Some(t) = self.live.get(&id) else {
                continue;
            };
            if t.attempts != attempt || t.status != Status::Pending {
                continue;
            }
            self.queue.retain(|&q| q != id);
            self.set_status(id, Status::Running);
            self.plan.pool.hold_remote();
            let t = &self.live[&id];
            let run = InFlight::new(t, Slot::Remote, &trial_dir(&self.plan.trials, id), false);
            self.in_flight.insert(id, run);
        }
        Ok(())
    }

    /// Whether trials are left to start (new ones, re-queued ones, paused ones).
    fn work_remains(&self) -> bool {
        self.created < self.budget
            || !self.queue.is_empty()
            || self.live.values().any(|t| t.status == Status::Paused)
    }

    /// Ends the sweep early, as an interruption does: no trial starts, running ones are left
    /// for `resume`.
    fn stop_sweep(&mut self, reason: StopReason) {
        self.note(&format!("stopping: {reason}"));
        self.stopped = Some(reason);
        let _ = self.shutdown.send(true);
    }

    fn note(&mut self, note: &str) {
        tell(&mut self.observers, note, &self.summary);
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

    /// Runs until the budget is spent and every trial has ended, until interrupted, or until a
    /// `[stop]` condition is met (returned with the trials, or as the error for failures).
    pub(crate) fn run(mut self, rt: &Handle) -> Result<Ended, TuneError> {
        let mut shutdown_rx = self.shutdown.subscribe();
        self.begin(rt)?;
        let budget = self.plan.stop_when.time_budget();
        let deadline = budget.and_then(|b| tokio::time::Instant::now().checked_add(b));
        loop {
            if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) && self.stopped.is_none()
            {
                let seconds = budget.map_or(0.0, |b| b.as_secs_f64());
                self.stop_sweep(StopReason::TimeBudget { seconds });
            }
            let interrupted = *shutdown_rx.borrow();
            self.settle_ended()?;
            if !interrupted {
                self.fill_slots()?;
            }
            self.sync_and_answer()?;
            for id in std::mem::take(&mut self.to_launch) {
                self.launch(id, rt);
            }
            let waiting_for_workers = self.waiting_for_workers(interrupted);
            if self.in_flight.is_empty() && !waiting_for_workers {
                if !interrupted {
                    self.stop_paused_leftovers()?;
                }
                break;
            }
            self.wait_and_handle(rt, &mut shutdown_rx, deadline, interrupted)?;
        }
        self.end(&shutdown_rx)
    }

    /// Tells the observers the sweep starts, connects remote workers, and applies what a
    /// resume found decided but not yet delivered.
    fn begin(&mut self, rt: &Handle) -> Result<(), TuneError> {
        let info = SweepInfo {
            name: &self.plan.name,
            dir: &self.plan.dir,
            created_at: self.plan.created_at,
            search: &self.plan.search,
            scheduler: &self.plan.scheduler,
            slots: self.plan.pool.slots().iter().map(Slot::to_string).collect(),
            objectives: &self.plan.objectives,
            trials: &self.loaded,
            notes: Notes::to(self.tx.clone()),
        };
        for o in &mut self.observers {
            o.on_start(&info, &self.summary);
        }
        self.loaded = Vec::new();
        self.start_bridge(rt)?;
        for note in self.plan.notes.clone() {
            self.note(&note);
        }
        // An exploit's copy staged by a run killed before the exploit was stored is taken by
        // nothing: a replayed decision stages it again.
        let exploiting: Vec<TrialId> = (self.live.values())
            .filter(|t| t.restore_from.is_some())
            .map(|t| t.id)
            .collect();
        remove_stale_exploits(&self.plan.trials, &exploiting);
        for (id, step, decision) in std::mem::take(&mut self.undelivered) {
            self.queue.retain(|&q| q != id);
            self.apply_decision(id, step, decision)?;
        }
        if self.bridge.is_some() {
            crate::failpoint::hit("adopt.after").map_err(|e| TuneError::io("adopting", e))?;
        }
        self.describe_scheduler(true);
        if let Some(reason) = self.stop_watch.already_met() {
            self.stop_sweep(reason);
        }
        Ok(())
    }

    /// Syncs the store where something waits on it (acknowledgements, the end, offers to
    /// remote workers), then answers the reports that waited.
    fn sync_and_answer(&mut self) -> Result<(), TuneError> {
        // Sync before acknowledging, and at the end. Launches need not wait: what a new
        // attempt does reaches anyone only through reports, acknowledged after a later sync.
        // Remote launches wait: an offer is seen by other machines at once, and a resumed
        // coordinator takes over only attempts its store says are running.
        let offering = self.to_launch.iter().any(|id| {
            self.in_flight
                .get(id)
                .is_some_and(|r| r.slot == Slot::Remote)
        });
        if !self.acks.is_empty() || self.in_flight.is_empty() || offering {
            self.store.sync()?;
        }
        if !self.acks.is_empty() {
            let failed = |e| TuneError::io("answering reports", e);
            crate::failpoint::hit("ack.before").map_err(failed)?;
            for (ack, decision) in self.acks.drain(..) {
                let _ = ack.send(decision);
            }
            crate::failpoint::hit("ack.after").map_err(failed)?;
        }
        Ok(())
    }

    /// Whether nothing runs only because no worker has a free slot yet (saying so, once).
    fn waiting_for_workers(&mut self, interrupted: bool) -> bool {
        let waiting_for_workers = self.in_flight.is_empty()
            && !interrupted
            && self.plan.pool.may_grow()
            && !self.plan.pool.has_free()
            && self.work_remains();
        if waiting_for_workers && !self.told_waiting {
            self.told_waiting = true;
            let note = format!(
                "waiting for workers: start `tune worker URL --experiment {}` where the \
                 trials should run",
                self.plan.name
            );
            self.note(&note);
        }
        waiting_for_workers
    }

    /// Nothing runs and nothing will start: paused trials the scheduler never resumed are
    /// over.
    fn stop_paused_leftovers(&mut self) -> Result<(), TuneError> {
        let leftover: Vec<TrialId> = self
            .live
            .values()
            .filter(|t| t.status == Status::Paused)
            .map(|t| t.id)
            .collect();
        for id in leftover {
            self.settle(id, Status::Stopped, None)?;
        }
        self.store.sync()?;
        Ok(())
    }

    /// Waits for the next message or control (or the shutdown, or the time budget's end) and
    /// handles it and every other one already there.
    fn wait_and_handle(
        &mut self,
        rt: &Handle,
        shutdown_rx: &mut watch::Receiver<bool>,
        deadline: Option<tokio::time::Instant>,
        interrupted: bool,
    ) -> Result<(), TuneError> {
        let (rx, controls) = (&mut self.rx, &mut self.controls);
        let arrived = rt.block_on(async {
            let time_is_up = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            let control = async {
                match controls {
                    Some(c) => c.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                m = rx.recv() => m.map(Arrived::Message),
                Some(c) = control => Some(Arrived::Control(c)),
                _ = shutdown_rx.changed(), if !interrupted => None,
                _ = time_is_up, if !interrupted => None,
            }
        });
        match arrived {
            Some(Arrived::Message(msg)) => self.handle(msg)?,
            Some(Arrived::Control(request)) => self.on_control(request)?,
            None => {}
        }
        while let Ok(msg) = self.rx.try_recv() {
            self.handle(msg)?;
        }
        while let Some(request) = self.controls.as_mut().and_then(|c| c.try_recv().ok()) {
            self.on_control(request)?;
        }
        Ok(())
    }

    /// Tells the observers and the workers the sweep ended, and how.
    fn end(mut self, shutdown_rx: &watch::Receiver<bool>) -> Result<Ended, TuneError> {
        self.describe_scheduler(true);
        // Loggers end first, so that what they say while ending (MLflow's last sends) shows on
        // the dashboard or before the progress line's summary.
        for o in self.observers.iter_mut().filter(|o| !o.shows_notes()) {
            o.on_end(&self.summary);
        }
        while let Ok(msg) = self.rx.try_recv() {
            if let WorkerMsg::Note(note) = msg {
                self.note(&note);
            }
        }
        for o in self.observers.iter_mut().filter(|o| o.shows_notes()) {
            o.on_end(&self.summary);
        }
        let unfinished = self.created < self.budget || self.summary.unfinished() > 0;
        if let Some(bridge) = self.bridge.take() {
            bridge.end(!unfinished);
        }
        let stopped = match self.stopped {
            // Met by the last trial to end: the sweep is simply done.
            _ if !unfinished => None,
            Some(reason) if reason.is_failure() => {
                return Err(TuneError::Failing {
                    dir: self.plan.dir.clone(),
                    reason,
                })
            }
            Some(reason) => Some(reason),
            None if *shutdown_rx.borrow() => {
                return Err(TuneError::Interrupted(self.plan.dir.clone()))
            }
            None => None,
        };
        Ok(Ended {
            best: self.best,
            failed: self.summary.failed,
            first_failure: self.first_failure,
            stopped,
        })
    }

    /// A trial not finished, by id (finished trials are only in the store).
    fn live(&mut self, id: TrialId) -> &mut Trial {
        self.live
            .get_mut(&id)
            .expect("only unfinished trials are run or decided on")
    }

    fn set_status(&mut self, id: TrialId, status: Status) {
        let t = self.live(id);
        let old = std::mem::replace(&mut t.status, status);
        *self.summary.count(old) -= 1;
        *self.summary.count(status) += 1;
        self.history.set_status(id, status);
    }

    /// Claims free slots for re-queued trials first, then for new ones while the budget lasts.
    fn fill_slots(&mut self) -> Result<(), TuneError> {
        while self.plan.pool.has_free() {
            let id = if let Some(id) = self.queue.pop_front() {
                id
            } else if let Some(id) = self.next_paused() {
                id
            } else if self.created < self.budget {
                let id = self.created;
                let Some(Suggestion {
                    params,
                    suggested_by,
                }) = self.searcher.suggest_with_reason(id, &self.history)
                else {
                    // The searcher has nothing left (a grid): the budget ends here.
                    self.budget = id;
                    self.summary.total = id;
                    self.note_all_added();
                    break;
                };
                if self.searcher.reads_history() {
                    self.history.record(id, params.clone(), Status::Pending);
                }
                self.scheduler.on_trial_add(id, &params);
                let mut trial = Trial::new(id, params);
                self.note_choice(id, suggested_by.as_ref());
                trial.suggested_by = suggested_by;
                self.live.insert(id, trial);
                self.created += 1;
                self.summary.pending += 1;
                if self.created >= self.budget {
                    self.note_all_added();
                }
                id
            } else {
                break;
            };
            let Some(slot) = self.plan.pool.claim() else {
                // Remote workers' slots change on the bridge's thread: the one seen free a
                // moment ago left with its worker. The trial waits, first in line.
                if self.live(id).status == Status::Paused {
                    self.deferred.push_front(id);
                } else {
                    self.queue.push_front(id);
                }
                break;
            };
            let exploit_from = self.live(id).restore_from;
            let exploited = exploit_from.is_some();
            self.apply_exploit(id)?;
            self.set_status(id, Status::Running);
            let t = self.live.get_mut(&id).expect("a trial being started");
            t.attempts += 1;
            t.started_at = Some(now_ms());
            t.finished_at = None;
            t.end_seq = None;
            t.device = Some(slot.to_string());
            self.store.put_trial(t)?;
            let mut run = InFlight::new(t, slot, &trial_dir(&self.plan.trials, id), exploited);
            run.exploit_from = exploit_from;
            self.in_flight.insert(id, run);
            self.to_launch.push(id);
        }
        Ok(())
    }

    /// Tells observers when `auto` hands trial `id` to another searcher, or for another
    /// reason, than the trial before (and at the first trial of a run or resume).
    fn note_choice(&mut self, id: TrialId, choice: Option<&AutoChoice>) {
        let Some(choice) = choice else {
            return;
        };
        if self.last_choice.as_ref() == Some(choice) {
            return;
        }
        self.note(&format!(
            "search: {} from trial {id} on ({})",
            choice.algorithm.as_str(),
            choice.reason
        ));
        self.last_choice = Some(choice.clone());
    }

    /// Tells the scheduler, once, that no trial will join any more.
    fn note_all_added(&mut self) {
        if !self.all_added {
            self.all_added = true;
            self.scheduler.on_no_more_trials();
        }
    }

    fn launch(&mut self, id: TrialId, rt: &Handle) {
        let (cancel, cancelled) = watch::channel(false);
        if let Some(run) = self.in_flight.get_mut(&id) {
            run.cancel = Some(cancel);
        }
        let t = &self.live[&id];
        let run = self.in_flight.get(&id);
        let job = Job {
            id,
            attempt: t.attempts,
            params: t.params.clone(),
            device: run.map_or(Slot::Remote, |r| r.slot),
            trial_dir: trial_dir(&self.plan.trials, id),
            restore_dir: self.in_flight.get(&id).and_then(|r| r.restore_dir.clone()),
            timeout: self.plan.timeout,
            completes_at: self.scheduler.completes_at(),
            tx: self.tx.clone(),
            shutdown: self.shutdown.subscribe(),
            cancel: cancelled,
            gang: None,
        };
        match (
            &self.bridge,
            run.map(|r| (r.slot, r.exploited, r.exploit_from)),
        ) {
            (Some(bridge), Some((Slot::Remote, exploited, exploit_from))) => {
                if !self.told_unshared
                    && self.plan.scheduler == "pbt"
                    && self.plan.trials == self.plan.dir
                    && !self.plan.database_checkpoints
                {
                    // Exploits copy checkpoints in this machine's folder: a worker elsewhere
                    // does not see them.
                    self.told_unshared = true;
                    let note = "PBT on remote workers without `[store] checkpoints`: an exploit \
                                run on another machine gets the new params but not the source's \
                                checkpoint; name a shared folder in the spec for real PBT";
                    tell(&mut self.observers, note, &self.summary);
                }
                let offer = crate::remote::Offer {
                    params: job.params.clone(),
                    timeout_s: job.timeout.map(|d| d.as_secs_f64()),
                    last_step: t.last_step(),
                    exploited,
                    exploit_from: exploit_from.filter(|_| self.plan.database_checkpoints),
                    completes_at: job.completes_at,
                };
                bridge.offer(id, job.attempt, &offer);
            }
            _ => {
                let _guard = rt.enter();
                self.objective.launch(job);
            }
        }
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
            WorkerMsg::Claimed {
                id,
                attempt,
                worker,
                restored,
            } => {
                let Some(run) = self.in_flight.get_mut(&id).filter(|r| r.attempt == attempt) else {
                    return Ok(());
                };
                run.set_restored(restored);
                // A trial already decided (stopped at a report) is only winding down there.
                let Some(t) = self.live.get_mut(&id) else {
                    return Ok(());
                };
                t.device = Some(worker);
                let t = &self.live[&id];
                self.store.put_trial(t)?;
                emit(&mut self.observers, &Event::Started(t), &self.summary);
                Ok(())
            }
            WorkerMsg::Wake => Ok(()),
            WorkerMsg::Workers(workers) => {
                emit(
                    &mut self.observers,
                    &Event::Workers(&workers),
                    &self.summary,
                );
                Ok(())
            }
            WorkerMsg::Unreachable(why) => Err(TuneError::Store(StoreError::Database {
                at: crate::store::postgres_location(
                    self.plan.remote.as_deref().unwrap_or_default(),
                    &self.plan.name,
                ),
                source: why.into(),
            })),
            WorkerMsg::Note(note) => {
                self.note(&note);
                Ok(())
            }
        }
    }

    /// Settles the paused trials the scheduler has ended.
    fn settle_ended(&mut self) -> Result<(), TuneError> {
        for (id, decision) in self.scheduler.drain_ended() {
            if self
                .live
                .get(&id)
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
        // Finished: from here on it lives only in the store.
        let mut t = self.live.remove(&id).expect("a trial being settled");
        t.error = error;
        t.finished_at = Some(now_ms());
        t.end_seq = Some(self.next_seq);
        self.store.put_trial(&t)?;
        let last = t.last_step().zip(t.value(self.plan.metric()));
        self.scheduler.on_complete(id, last);
        self.summary.note_best(&t);
        let met = self.stop_watch.on_finished(&t);
        emit(&mut self.observers, &Event::Finished(&t), &self.summary);
        if self.summary.best.is_some_and(|(best, _)| best == id) {
            self.best = Some(t);
        } else if status == Status::Failed && self.first_failure.as_ref().is_none_or(|f| id < f.id)
        {
            self.first_failure = Some(t);
        }
        if let Some(reason) = met.filter(|_| self.stopped.is_none()) {
            self.stop_sweep(reason);
        }
        Ok(())
    }

    /// Queues trial `id` to run again first, as a new attempt, stored as pending.
    fn run_again(&mut self, id: TrialId) -> Result<(), TuneError> {
        self.set_status(id, Status::Pending);
        self.store.put_trial(&self.live[&id])?;
        self.queue.push_front(id);
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
        let t = &self.live[&id];
        let reported = run.reported(t);
        let (status, error) = match outcome {
            Outcome::Interrupted => {
                // Left as running in the store: `resume` re-queues it. A remote worker that
                // stopped hands its trial back while the sweep goes on: it runs again now.
                self.set_status(id, Status::Pending);
                if !*self.shutdown.borrow() {
                    self.queue.push_front(id);
                }
                return Ok(());
            }
            Outcome::Stopped => (Status::Stopped, None),
            Outcome::Returned if reported => (Status::Completed, None),
            Outcome::Returned => (
                Status::Failed,
                Some(format!(
                    "the objective ended without reporting `{}`",
                    self.plan.metric()
                )),
            ),
            #[cfg(feature = "postgres")]
            Outcome::Lost(reason) => {
                let t = self.live.get_mut(&id).expect("a trial in flight");
                t.lost_attempts += 1;
                let lost = t.lost_attempts;
                let why = format!("its machine was lost: {reason}");
                let most = self.plan.max_lost_attempts;
                self.note(&format!(
                    "trial {id}: {why}; {}",
                    if lost > most {
                        format!("failed after {lost} lost attempts (max_lost_attempts = {most})")
                    } else {
                        format!("running it again ({lost} of max_lost_attempts = {most})")
                    }
                ));
                let t = self.live.get_mut(&id).expect("a trial in flight");
                if lost > most {
                    (
                        Status::Failed,
                        Some(format!(
                            "{why} ({lost} lost attempts, more than max_lost_attempts = {most})"
                        )),
                    )
                } else {
                    // Run again at once, elsewhere, the failure not the trial's.
                    t.error = Some(why);
                    return self.run_again(id);
                }
            }
            Outcome::Failed(reason) => {
                let t = self.live.get_mut(&id).expect("a trial in flight");
                t.failed_attempts += 1;
                if t.failed_attempts > self.plan.max_failures {
                    (Status::Failed, Some(reason))
                } else {
                    // Retried at once, same id and params (Ray Tune's max_failures).
                    let note = format!(
                        "trial {id}: attempt {} failed ({}); running it again ({} of \
                         max_failures = {})",
                        t.attempts,
                        reason.lines().next().unwrap_or_default(),
                        t.failed_attempts,
                        self.plan.max_failures
                    );
                    t.error = Some(reason);
                    self.note(&note);
                    return self.run_again(id);
                }
            }
        };
        self.settle(id, status, error)
    }
}
