//! What the outside sees of a running sweep: [`Event`]s with a running [`Summary`], delivered
//! to [`Observer`]s (the progress line, the dashboard, a user's own), and a [`StopHandle`] to
//! end it early.

use std::path::Path;
use std::time::Instant;

use tokio::sync::watch;
use tune_search::{Mode, Status, TrialId};

use crate::trial::{Trial, TrialResult};

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
    /// The remote workers serving the sweep (`tune worker`), sent when they change and at
    /// most once a second for their heartbeats.
    Workers(&'a [crate::protocol::WorkerInfo]),
    /// The budget changed while the sweep runs (a control added samples or a point): the
    /// trials it will create in all.
    Budget(u64),
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
    /// The best completed trial (within its constraints) and its value.
    pub best: Option<(TrialId, f64)>,
    pub started: Instant,
    /// `[constraints]`: a trial outside them is never the best.
    pub constraints: crate::spec::Constraints,
}

impl Summary {
    /// Nothing counted yet.
    pub(crate) fn new(metric: &str, mode: Mode, constraints: crate::spec::Constraints) -> Summary {
        Summary {
            metric: metric.to_string(),
            mode,
            total: 0,
            pending: 0,
            running: 0,
            paused: 0,
            completed: 0,
            stopped: 0,
            failed: 0,
            best: None,
            started: Instant::now(),
            constraints,
        }
    }

    pub(crate) fn count(&mut self, status: Status) -> &mut u64 {
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

    /// Trials created but not finished: pending, running or paused.
    pub fn unfinished(&self) -> u64 {
        self.pending + self.running + self.paused
    }

    /// Counts trial `t` as the best if it completed and beats the best so far
    /// ([`Mode::beats`]).
    pub(crate) fn note_best(&mut self, t: &Trial) {
        if t.status != Status::Completed || !self.constraints.feasible(t) {
            return;
        }
        if let Some(v) = t.value(&self.metric) {
            if self.best.is_none_or(|b| self.mode.beats((t.id, v), b)) {
                self.best = Some((t.id, v));
            }
        }
    }
}

/// What observers learn when a sweep starts (or resumes).
#[derive(Debug)]
pub struct SweepInfo<'a> {
    pub name: &'a str,
    pub dir: &'a Path,
    /// When the experiment was created (Unix ms; 0 for stores older than this field).
    pub created_at: u64,
    /// Search algorithm and scheduler, as named in the spec (`tpe`, `asha`).
    pub search: &'a str,
    pub scheduler: &'a str,
    /// The worker slots (`cpu:0`, `cuda:1`).
    pub slots: Vec<String>,
    /// Every objective (the summary's metric is the first).
    pub objectives: &'a [crate::spec::Goal],
    /// The trials so far, with their results (a resumed sweep has some).
    pub trials: &'a [Trial],
    /// Where an observer's own thread tells the user something (a server that does not
    /// answer), so that it shows where the sweep shows: the dashboard's log, else stderr.
    pub notes: Notes,
}

/// A handle for telling the user something from any thread: the coordinator passes each note
/// to the observers that show notes ([`Observer::shows_notes`]), or prints it on stderr when
/// none does or the sweep has ended. Notes told while an observer that shows none is ending
/// ([`Observer::on_end`]) are shown before the others end.
///
/// ```
/// let notes = tune::Notes::stderr();
/// notes.tell("printed as `tune: ...` on stderr");
/// ```
#[derive(Debug, Clone)]
pub struct Notes(Option<tokio::sync::mpsc::UnboundedSender<crate::protocol::WorkerMsg>>);

impl Notes {
    /// Notes that go to the sweep whose coordinator reads `tx`.
    pub(crate) fn to(tx: tokio::sync::mpsc::UnboundedSender<crate::protocol::WorkerMsg>) -> Notes {
        Notes(Some(tx))
    }

    /// Notes printed on stderr.
    pub fn stderr() -> Notes {
        Notes(None)
    }

    /// Tells the user `note` (one line, without the `tune: ` prefix).
    pub fn tell(&self, note: impl Into<String>) {
        let note = note.into();
        let unsent = match &self.0 {
            Some(tx) => match tx.send(crate::protocol::WorkerMsg::Note(note)) {
                Ok(()) => return,
                Err(tokio::sync::mpsc::error::SendError(msg)) => match msg {
                    crate::protocol::WorkerMsg::Note(note) => note,
                    _ => return,
                },
            },
            None => note,
        };
        eprintln!("tune: {unsent}");
    }
}

/// Receives events on the coordinator's thread; must be quick (throttle, or forward to a channel).
pub trait Observer: Send {
    fn on_start(&mut self, _info: &SweepInfo<'_>, _summary: &Summary) {}
    fn on_event(&mut self, event: &Event<'_>, summary: &Summary);
    fn on_end(&mut self, _summary: &Summary) {}
    /// Whether it shows [`Event::Note`]s to the user; when no observer does, the coordinator
    /// prints them on stderr. Loggers that copy results elsewhere say no.
    fn shows_notes(&self) -> bool {
        true
    }
}

/// Tells every observer about `event`.
pub(crate) fn emit(observers: &mut [Box<dyn Observer>], event: &Event<'_>, summary: &Summary) {
    for o in observers.iter_mut() {
        o.on_event(event, summary);
    }
}

/// Tells the user `note`: through the observers that show notes, else on stderr.
pub(crate) fn tell(observers: &mut [Box<dyn Observer>], note: &str, summary: &Summary) {
    if !observers.iter().any(|o| o.shows_notes()) {
        eprintln!("tune: {note}");
    }
    emit(observers, &Event::Note(note), summary);
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
