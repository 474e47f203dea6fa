//! `[tracking] mlflow`: results sent to MLflow as they arrive, from a thread of its own that
//! retries with backoff while the server is down, so that MLflow never holds up the sweep.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use tune_search::TrialId;

use super::client::{MlflowClient, MlflowError};
use super::mirror::{SweepMirror, SweepRecord};
use crate::observer::{Event, Notes, Observer, Summary, SweepInfo};
use crate::tracking::Background;
use crate::trial::{now_ms, Trial, TrialResult};

/// How long the end of a sweep waits for MLflow when it makes no progress (a server that keeps
/// answering is waited for until it has everything).
const END_WAIT: Duration = Duration::from_secs(10);
/// The longest wait between tries while MLflow does not answer.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A request that takes longer is given up (and tried again later).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Logs the sweep to an MLflow tracking server as it runs: an [`Observer`] that hands copies
/// of events to a thread, which keeps the MLflow runs in step ([`super::sync_sweep`] does the
/// same after the fact). While the server is down it retries with backoff; at the end of the
/// sweep it waits until 10 s pass without progress, then says what is missing and how to send it
/// (`tune resume`, or `tune export NAME --to-mlflow URL`); nothing is sent twice. A server that
/// answers but is slower than the sweep is waited for at the end until it has everything.
pub struct MlflowLogger {
    /// Completed with the experiment's creation time on start.
    sweep: SweepRecord,
    /// The server, as the probe at the start resolved it.
    client: MlflowClient,
    /// The warning for a server that did not answer when asked before the sweep.
    unanswered: Option<String>,
    /// The best completed trial so far, for the parent run at the end.
    best: Option<Trial>,
    /// The sender's thread, from the sweep's start.
    sender: Background<Msg>,
}

enum Msg {
    Start(Vec<Trial>),
    Started(Trial),
    Result(TrialId, TrialResult, u64),
    Finished(Trial),
    End { complete: bool, best: Option<Trial> },
}

impl MlflowLogger {
    /// A logger to the server at `url`. It asks the server for the experiment now (waiting
    /// 5 s at most): one that answers but is not MLflow, or refuses, is an error before the
    /// sweep starts; one that does not answer is a warning, and logging starts when it does.
    pub fn new(url: &str, sweep: SweepRecord) -> Result<MlflowLogger, MlflowError> {
        let probe = MlflowClient::new(url, Duration::from_secs(5))?;
        let mut unanswered = None;
        match probe.experiment_id(&sweep.experiment) {
            Ok(_) => {}
            Err(e) if e.is_transient() => {
                // Told when the sweep starts, where it shows its notes.
                unanswered = Some(format!(
                    "warning: {e}; the sweep goes on, and its results are sent to MLflow \
                     when it answers"
                ));
            }
            Err(e) => return Err(e),
        }
        Ok(MlflowLogger {
            sweep,
            client: probe.with_timeout(REQUEST_TIMEOUT),
            unanswered,
            best: None,
            sender: Background::none(),
        })
    }

    fn send(&self, msg: Msg) {
        self.sender.send(msg);
    }
}

impl Observer for MlflowLogger {
    fn on_start(&mut self, info: &SweepInfo<'_>, summary: &Summary) {
        let mut sweep = self.sweep.clone();
        sweep.created_at = info.created_at;
        let client = self.client.clone();
        if let Some(warning) = self.unanswered.take() {
            info.notes.tell(warning);
        }
        let mut sender = Sender::new(client, sweep, info.notes.clone());
        match Background::spawn("tune-mlflow", move |rx| sender.serve(&rx)) {
            Ok(thread) => self.sender = thread,
            Err(e) => info
                .notes
                .tell(format!("warning: MLflow logging not started: {e}")),
        }
        self.best = summary
            .best
            .and_then(|(id, _)| info.trials.iter().find(|t| t.id == id).cloned());
        self.send(Msg::Start(info.trials.to_vec()));
    }

    fn on_event(&mut self, event: &Event<'_>, summary: &Summary) {
        match event {
            Event::Started(t) => self.send(Msg::Started((*t).clone())),
            Event::Result(t, r) => self.send(Msg::Result(t.id, (*r).clone(), now_ms())),
            Event::Finished(t) => {
                if summary.best.is_some_and(|(id, _)| id == t.id) {
                    self.best = Some((*t).clone());
                }
                self.send(Msg::Finished((*t).clone()))
            }
            Event::Paused(_)
            | Event::Scheduler(_)
            | Event::Note(_)
            | Event::Workers(_)
            | Event::Budget(_) => {}
        }
    }

    fn on_end(&mut self, summary: &Summary) {
        let complete = summary.unfinished() == 0 && summary.finished() >= summary.total;
        let best = self.best.take();
        self.send(Msg::End { complete, best });
        self.sender.finish();
    }

    fn shows_notes(&self) -> bool {
        false
    }
}

/// A trial as the sender knows it, with when each result was reported.
struct Local {
    trial: Trial,
    reported_at: Vec<u64>,
}

/// The thread that talks to MLflow.
struct Sender {
    mirror: SweepMirror,
    notes: Notes,
    trials: BTreeMap<TrialId, Local>,
    /// Trials with something MLflow does not have yet.
    dirty: BTreeSet<TrialId>,
    /// The best trial, for the parent run, once the sweep has ended.
    best: Option<Trial>,
    retry_at: Option<Instant>,
    backoff: Duration,
    /// The error of the outage under way, told once.
    outage: Option<String>,
    /// Logging gave up (MLflow refused the sweep itself).
    off: bool,
    /// The end of the sweep: whether it completed, and when it came.
    end: Option<(bool, Instant)>,
    /// When MLflow last took a trial's update.
    progress: Instant,
    ended: bool,
}

impl Sender {
    fn new(client: MlflowClient, sweep: SweepRecord, notes: Notes) -> Sender {
        Sender {
            mirror: SweepMirror::new(client, sweep),
            notes,
            trials: BTreeMap::new(),
            dirty: BTreeSet::new(),
            best: None,
            retry_at: None,
            backoff: Duration::from_secs(1),
            outage: None,
            off: false,
            end: None,
            ended: false,
            progress: Instant::now(),
        }
    }

    fn serve(&mut self, rx: &mpsc::Receiver<Msg>) {
        let mut open = true;
        loop {
            let wait = match (self.retry_at, self.dirty.is_empty() && self.end.is_none()) {
                (Some(t), _) => t.saturating_duration_since(Instant::now()),
                (None, true) => Duration::from_secs(3600),
                (None, false) => Duration::ZERO,
            };
            if open {
                match rx.recv_timeout(wait) {
                    Ok(msg) => self.handle(msg),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => {
                        open = false;
                        // Dropped without an end (the sweep failed): send what is here.
                        if self.end.is_none() {
                            self.end = Some((false, Instant::now()));
                        }
                    }
                }
                while let Ok(msg) = rx.try_recv() {
                    self.handle(msg);
                }
            } else {
                std::thread::sleep(wait.min(Duration::from_millis(200)));
            }
            if self.off {
                return;
            }
            if self.retry_at.is_none_or(|t| Instant::now() >= t) {
                self.flush();
            }
            if let Some((_, since)) = self.end {
                if self.ended {
                    return;
                }
                if Instant::now() >= since.max(self.progress) + END_WAIT {
                    self.notes.tell(format!(
                        "warning: {} trials not (fully) logged to MLflow at {}{}; \
                         `tune resume` or `tune export NAME --to-mlflow {}` sends them",
                        self.dirty.len(),
                        self.mirror.url(),
                        self.outage
                            .as_ref()
                            .map(|e| format!(" ({e})"))
                            .unwrap_or_default(),
                        self.mirror.url()
                    ));
                    return;
                }
            }
        }
    }

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Start(trials) => {
                for t in trials {
                    self.track(t);
                }
            }
            Msg::Started(t) | Msg::Finished(t) => {
                let reported_at = self
                    .trials
                    .remove(&t.id)
                    .map(|l| l.reported_at)
                    .unwrap_or_default();
                let id = t.id;
                self.track(t);
                if let Some(l) = self.trials.get_mut(&id) {
                    // Times of results this copy already had.
                    for (i, at) in reported_at.into_iter().enumerate() {
                        if let Some(slot) = l.reported_at.get_mut(i) {
                            *slot = at;
                        }
                    }
                }
            }
            Msg::Result(id, r, at) => {
                if let Some(l) = self.trials.get_mut(&id) {
                    l.trial.results.push(r);
                    l.reported_at.push(at);
                    self.dirty.insert(id);
                }
            }
            Msg::End { complete, best } => {
                self.best = best;
                // What is left is tried now, then every second or two while MLflow answers.
                self.retry_at = None;
                self.backoff = Duration::from_secs(1);
                self.end = Some((complete, Instant::now()));
            }
        }
    }

    fn track(&mut self, t: Trial) {
        let now = now_ms();
        self.dirty.insert(t.id);
        self.trials.insert(
            t.id,
            Local {
                reported_at: vec![now; t.results.len()],
                trial: t,
            },
        );
    }

    /// Sends what MLflow lacks, trial by trial; on an error that may pass, waits before the
    /// next try.
    fn flush(&mut self) {
        self.retry_at = None;
        let ids: Vec<TrialId> = self.dirty.iter().copied().collect();
        for id in ids {
            let Some(l) = self.trials.get(&id) else {
                self.dirty.remove(&id);
                continue;
            };
            let times = &l.reported_at;
            match self.mirror.sync_trial(&l.trial, &|i| times[i]) {
                Ok(()) => {
                    self.progress = Instant::now();
                    self.dirty.remove(&id);
                    if l.trial.status.is_finished() {
                        // Nothing more will come for it.
                        self.trials.remove(&id);
                    }
                }
                Err(e) if e.is_transient() => return self.wait_after(e),
                Err(e) if !self.mirror.is_connected() => {
                    self.notes
                        .tell(format!("warning: MLflow logging stopped: {e}"));
                    self.off = true;
                    return;
                }
                Err(e) => {
                    self.notes
                        .tell(format!("warning: trial {id} is not logged to MLflow: {e}"));
                    self.dirty.remove(&id);
                }
            }
        }
        if let Some((complete, _)) = self.end {
            if !self.ended {
                match self.mirror.end(complete, self.best.as_ref()) {
                    Ok(()) => self.ended = true,
                    Err(e) if e.is_transient() => return self.wait_after(e),
                    Err(e) => {
                        self.notes
                            .tell(format!("warning: the sweep's MLflow run is not ended: {e}"));
                        self.ended = true;
                    }
                }
            }
        }
        if self.outage.take().is_some() {
            self.notes.tell(format!(
                "MLflow at {} answers again; what it missed is sent",
                self.mirror.url()
            ));
        }
        self.backoff = Duration::from_secs(1);
    }

    fn wait_after(&mut self, e: MlflowError) {
        if self.outage.is_none() {
            self.notes.tell(format!(
                "warning: {e}; results are kept and sent when it answers (trying again with \
                 backoff)"
            ));
        }
        self.outage = Some(e.to_string());
        self.retry_at = Some(Instant::now() + self.backoff);
        let longest = if self.end.is_some() {
            Duration::from_secs(2)
        } else {
            MAX_BACKOFF
        };
        self.backoff = (self.backoff * 2).min(longest);
    }
}
