//! One attempt of a trial in flight, and how its reports are numbered and counted.

use std::path::{Path, PathBuf};

use crate::pool::Slot;
use crate::protocol::ReportAnswer;
use crate::trial::Trial;

/// What a report's step is to the attempt that made it ([`InFlight::take_report`]).
#[derive(Debug, PartialEq)]
pub(super) enum Taken {
    /// A step not stored yet.
    New(u64),
    /// A stored step this run redoes: its result and decision stand.
    Redone,
    /// Not after the attempt's last report (`after`): refused.
    OutOfOrder { step: u64, after: u64 },
}

/// What the coordinator needs to know about an attempt in flight.
pub(super) struct InFlight {
    pub attempt: u32,
    pub slot: Slot,
    /// Reports this run made, re-runs of stored steps included.
    reports: u64,
    /// The step of this run's last report.
    last_reported: Option<u64>,
    /// Where this run's reports without a step number go on from: the trial's last stored step
    /// when it continues from a checkpoint (its own or an exploited one), else 0.
    base_step: u64,
    /// A relaunch of the trial's own work redoes the steps after its checkpoint (or all of
    /// them, with none): reports up to this step, its last stored one, were already stored
    /// and decided, so they are not taken again. Cleared by the first report past it.
    redo_through: Option<u64>,
    /// The checkpoint this run continues from (a trial that ran before and left one).
    pub restore_dir: Option<PathBuf>,
    /// It goes on from a checkpoint: `restore_dir` here, or one a remote worker found.
    restored: bool,
    /// It goes on from another trial's checkpoint (population-based training).
    pub exploited: bool,
    /// The trial whose checkpoint it goes on from, where the attempt is an exploit's.
    pub exploit_from: Option<tune_search::TrialId>,
    /// The trial's end was decided (and stored) at a report: a bad metric failed it, or the
    /// scheduler stopped or completed it. The worker is only winding down.
    pub settled: bool,
    /// The stored report whose decision settled it, and that decision: the same report
    /// delivered again (a coordinator restarted before its worker heard) hears it again.
    pub decided: Option<(u64, ReportAnswer)>,
    /// Ends a local run at once (a control stopped its trial).
    pub cancel: Option<tokio::sync::watch::Sender<bool>>,
}

impl InFlight {
    /// The attempt `trial` starts now on `slot`, its checkpoint folder `trial_dir`;
    /// `exploited`: it goes on from another trial's checkpoint (population-based training).
    pub fn new(trial: &Trial, slot: Slot, trial_dir: &Path, exploited: bool) -> InFlight {
        let last_step = trial.results.last().map(|r| r.step);
        let restore_dir = Some(trial_dir.to_path_buf()).filter(|d| {
            last_step.is_some() && std::fs::read_dir(d).is_ok_and(|mut e| e.next().is_some())
        });
        // An exploit goes on from another trial's point: its steps are new, not redone.
        let redo_through = last_step.filter(|_| !exploited);
        let base_step = if restore_dir.is_some() || exploited {
            last_step.unwrap_or(0)
        } else {
            0
        };
        InFlight {
            attempt: trial.attempts,
            slot,
            reports: 0,
            last_reported: None,
            base_step,
            redo_through,
            restored: restore_dir.is_some(),
            restore_dir,
            exploited,
            exploit_from: None,
            settled: false,
            decided: None,
            cancel: None,
        }
    }

    /// Counts a report and says what its step is (the reported one, or the next after the
    /// last): new, one this run redoes (restarted from an older checkpoint, a kill having come
    /// between the step's acknowledgement and its checkpoint, or from scratch), or out of
    /// order. Within an attempt steps increase: the one rule for every objective, local or
    /// remote.
    pub fn take_report(&mut self, step: Option<u64>) -> Taken {
        self.reports += 1;
        let step = step.unwrap_or(self.base_step + self.reports);
        if let Some(after) = self.last_reported.filter(|&last| step <= last) {
            return Taken::OutOfOrder { step, after };
        }
        self.last_reported = Some(step);
        if self.redo_through.is_some_and(|last| step <= last) {
            return Taken::Redone;
        }
        self.redo_through = None;
        Taken::New(step)
    }

    /// Whether this run, now ended, gave `trial` its results: it reported; or it only redid
    /// stored steps; or it resumed from a checkpoint with nothing left to report (the earlier
    /// results stand). A fresh run must report.
    pub fn reported(&self, trial: &Trial) -> bool {
        let this_run_reported = trial
            .results
            .last()
            .is_some_and(|r| r.attempt == self.attempt);
        let redid_stored_steps = self.reports > 0 && self.redo_through.is_some();
        this_run_reported || redid_stored_steps || (self.restored && !trial.results.is_empty())
    }

    /// A remote worker says whether it found the trial's checkpoint (it numbers step-less
    /// reports itself).
    pub fn set_restored(&mut self, restored: bool) {
        self.restored = restored;
    }
}
