//! Closure objectives: a Rust function run on a worker thread.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, oneshot, watch};
use tune_search::{Params, TrialId};

use super::{BoxError, IntoMetrics, Job, Stop};
use crate::pool::Slot;
use crate::protocol::{Outcome, ReportAnswer, WorkerMsg};

/// The signature of a closure objective.
pub type ObjectiveFn = dyn Fn(&mut TrialContext) -> Result<(), BoxError> + Send + Sync;

/// What a closure objective sees of its trial: parameters, reporting, checkpoint folders.
///
/// ```no_run
/// # use tune::{TrialContext, BoxError};
/// fn objective(ctx: &mut TrialContext) -> Result<(), BoxError> {
///     let x = ctx.params().f64("x")?;
///     for step in 1..=10 {
///         ctx.report(step, [("loss", (x - 2.0).powi(2) / step as f64)])?;
///     }
///     Ok(())
/// }
/// ```
pub struct TrialContext {
    id: TrialId,
    attempt: u32,
    params: Params,
    device: Slot,
    trial_dir: PathBuf,
    restore_dir: Option<PathBuf>,
    deadline: Option<Instant>,
    completes_at: Option<u64>,
    tx: mpsc::UnboundedSender<WorkerMsg>,
    shutdown: watch::Receiver<bool>,
    stopped: Option<Stop>,
}

impl TrialContext {
    pub fn id(&self) -> TrialId {
        self.id
    }

    /// Which attempt this is (1 for the first run; more after a retried failure or a resume).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Where the trial runs: a CPU slot, or a share of a GPU (in the `cuda` build);
    /// [`Slot::device`] is the device to open (`tune_trials::open_device` opens it in Candle).
    pub fn device(&self) -> Slot {
        self.device
    }

    /// A folder of this trial's own for checkpoints, created on first use.
    pub fn checkpoint_dir(&self) -> std::io::Result<&Path> {
        std::fs::create_dir_all(&self.trial_dir)?;
        Ok(&self.trial_dir)
    }

    /// The checkpoint to continue from, when this run resumes a paused (or interrupted) trial:
    /// the `checkpoint_dir` of its previous run.
    pub fn restore_dir(&self) -> Option<&Path> {
        self.restore_dir.as_deref()
    }

    /// The step at which the scheduler ends every trial that reaches it as completed (ASHA's
    /// and HyperBand's `max_t`), if it does. A trial that keeps checkpoints can write that
    /// step's before reporting it: its completion is durable once the report is kept, and a
    /// `kill -9` right after would otherwise leave it without its last model. Restored from
    /// such a checkpoint, it must report that step again before going on (the run that wrote
    /// it may have died before its report was kept), or the step is skipped.
    pub fn completes_at(&self) -> Option<u64> {
        self.completes_at
    }

    /// Reports metrics at `step` and waits until the result is durable and decided on.
    ///
    /// `Err` means the trial must end now: return it with `?`.
    pub fn report(&mut self, step: u64, metrics: impl IntoMetrics) -> Result<(), Stop> {
        if let Some(stop) = self.stopped {
            return Err(stop);
        }
        let stop = if self.deadline.is_some_and(|d| Instant::now() > d) {
            Some(Stop::TimedOut)
        } else if *self.shutdown.borrow() {
            Some(Stop::Interrupted)
        } else {
            let (ack, answer) = oneshot::channel();
            let msg = WorkerMsg::Report {
                id: self.id,
                attempt: self.attempt,
                step: Some(step),
                metrics: metrics.into_metrics(),
                ack,
            };
            match self
                .tx
                .send(msg)
                .ok()
                .and_then(|_| answer.blocking_recv().ok())
            {
                Some(ReportAnswer::Continue) => None,
                Some(ReportAnswer::Stop) => Some(Stop::Scheduler),
                Some(ReportAnswer::Complete) => Some(Stop::Completed),
                Some(ReportAnswer::Pause) => Some(Stop::Paused),
                Some(ReportAnswer::Refused) | None => Some(Stop::Interrupted),
            }
        };
        self.stopped = stop;
        stop.map_or(Ok(()), Err)
    }
}

/// Runs the closure on a blocking-pool thread and reports how it ended.
pub(super) fn launch(f: Arc<ObjectiveFn>, job: Job) {
    tokio::task::spawn_blocking(move || {
        let (id, attempt, tx, timeout) = (job.id, job.attempt, job.tx.clone(), job.timeout);
        let started = Instant::now();
        let mut ctx = TrialContext {
            id,
            attempt,
            params: job.params,
            device: job.device,
            trial_dir: job.trial_dir,
            restore_dir: job.restore_dir,
            deadline: timeout.and_then(|t| started.checked_add(t)),
            completes_at: job.completes_at,
            tx: job.tx,
            shutdown: job.shutdown,
            stopped: None,
        };
        let timed_out = || match timeout {
            Some(t) => Outcome::Failed(format!("timed out after {} s", t.as_secs_f64())),
            None => Outcome::Failed("timed out".into()),
        };
        let outcome = match catch_unwind(AssertUnwindSafe(|| f(&mut ctx))) {
            Ok(Ok(())) if ctx.deadline.is_some_and(|d| Instant::now() > d) => timed_out(),
            Ok(Ok(())) => match ctx.stopped {
                Some(Stop::Interrupted) => Outcome::Interrupted,
                Some(Stop::Scheduler | Stop::Completed | Stop::Paused) => Outcome::Stopped,
                Some(Stop::TimedOut) => timed_out(),
                None => Outcome::Returned,
            },
            Ok(Err(e)) => match e.downcast_ref::<Stop>() {
                Some(Stop::Scheduler | Stop::Completed | Stop::Paused) => Outcome::Stopped,
                Some(Stop::Interrupted) => Outcome::Interrupted,
                Some(Stop::TimedOut) => timed_out(),
                None => Outcome::Failed(e.to_string()),
            },
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown payload".into());
                Outcome::Failed(format!("the objective panicked: {msg}"))
            }
        };
        let _ = tx.send(WorkerMsg::Finished {
            id,
            attempt,
            outcome,
        });
    });
}
