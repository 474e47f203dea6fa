//! Steering a running sweep from outside: stop a trial, stop the sweep, add samples, enqueue
//! a point. A [`SweepControl`] hands each [`Control`] to the coordinator, which alone changes
//! the sweep (never a write to the store behind its back): it checks the request, stores
//! what it changes, notes it in the sweep's log with who asked, and answers.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tune_search::{Params, TrialId};

/// What can be asked of a running sweep. Its JSON form (`tune serve`'s API, the watch
/// socket) is tagged by `action`.
///
/// ```
/// use tune::Control;
/// let c: Control = serde_json::from_str(r#"{"action": "stop_trial", "trial": 3}"#).unwrap();
/// assert_eq!(c, Control::StopTrial { trial: 3 });
/// let c: Control = serde_json::from_str(r#"{"action": "add_samples", "count": 10}"#).unwrap();
/// assert_eq!(c, Control::AddSamples { count: 10 });
/// let c: Control = serde_json::from_str(r#"{"action": "enqueue", "params": {"lr": 0.01}}"#).unwrap();
/// assert!(matches!(c, Control::Enqueue { .. }));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
pub enum Control {
    /// Ends a pending, paused or running trial as stopped (a running one's process is
    /// terminated; a remote worker's run ends at its next report).
    StopTrial { trial: TrialId },
    /// Ends the sweep as Ctrl-C does: no trial starts, running ones end, `tune resume` goes on.
    StopSweep,
    /// Raises the budget by `count` trials (a grid: `count` more passes over it).
    AddSamples { count: u64 },
    /// Adds one trial with these params (`[[search.initial]]`'s form: parameters left out are
    /// drawn at random), run before the searcher's next suggestion; the budget grows by one.
    Enqueue { params: Params },
}

/// Why a control was not carried out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// The coordinator refused it: why.
    #[error("{0}")]
    Refused(String),
    /// No coordinator runs the sweep (it ended, or never started here).
    #[error("the sweep is not running")]
    NotRunning,
    /// The coordinator did not answer within the wait.
    #[error("the sweep did not answer within {0:?}")]
    NoAnswer(Duration),
}

/// A control on its way to the coordinator, with who asked (for the log) and where the
/// answer goes.
pub(crate) struct ControlRequest {
    pub control: Control,
    pub from: String,
    /// A std channel: the asking thread waits on it without a runtime.
    pub answer: std::sync::mpsc::Sender<Result<String, String>>,
}

/// Sends controls to a sweep's coordinator from any thread ([`crate::Tuner::control`]).
/// Requests sent before the sweep starts wait for it.
///
/// ```no_run
/// use tune::{Control, Tuner, Space, Mode};
/// let space = Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
/// let tuner = Tuner::new(space).metric("loss", Mode::Min).samples(100);
/// let control = tuner.control();
/// std::thread::spawn(move || {
///     std::thread::sleep(std::time::Duration::from_secs(5));
///     let said = control.send(Control::AddSamples { count: 20 }, "my script");
///     println!("{said:?}");
/// });
/// tuner.fit(|ctx| { ctx.report(1, [("loss", ctx.params().f64("x")?)])?; Ok(()) }).unwrap();
/// ```
#[derive(Clone)]
pub struct SweepControl {
    tx: mpsc::UnboundedSender<ControlRequest>,
    rx: Arc<Mutex<Option<mpsc::UnboundedReceiver<ControlRequest>>>>,
}

/// How long [`SweepControl::send`] waits for the coordinator's answer: it answers between two
/// rounds of its loop, after storing what the control changed.
pub(crate) const ANSWER_WAIT: Duration = Duration::from_secs(30);

impl SweepControl {
    pub(crate) fn new() -> SweepControl {
        let (tx, rx) = mpsc::unbounded_channel();
        SweepControl {
            tx,
            rx: Arc::new(Mutex::new(Some(rx))),
        }
    }

    /// Hands `control` to the coordinator without waiting: where its answer will come.
    pub(crate) fn submit(
        &self,
        control: Control,
        from: &str,
    ) -> Result<std::sync::mpsc::Receiver<Result<String, String>>, ControlError> {
        let (answer, answered) = std::sync::mpsc::channel();
        let request = ControlRequest {
            control,
            from: from.to_string(),
            answer,
        };
        self.tx
            .send(request)
            .map_err(|_| ControlError::NotRunning)?;
        Ok(answered)
    }

    /// The coordinator's end: taken once, by the sweep that runs.
    pub(crate) fn take_requests(&self) -> Option<mpsc::UnboundedReceiver<ControlRequest>> {
        self.rx.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Asks the coordinator to carry out `control`, `from` naming who asks (it goes in the
    /// sweep's log), and waits for its answer: what was done. Blocks the calling thread.
    pub fn send(&self, control: Control, from: &str) -> Result<String, ControlError> {
        let answered = self.submit(control, from)?;
        match answered.recv_timeout(ANSWER_WAIT) {
            Ok(Ok(done)) => Ok(done),
            Ok(Err(why)) => Err(ControlError::Refused(why)),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(ControlError::NotRunning),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                Err(ControlError::NoAnswer(ANSWER_WAIT))
            }
        }
    }
}
