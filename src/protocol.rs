//! What trials and workers tell the coordinator, and what it answers: the messages of local
//! slots ([`WorkerMsg`]), the answer to a report ([`ReportAnswer`]), how an attempt ended
//! ([`Outcome`]) and a remote worker as the coordinator sees it ([`WorkerInfo`]). Local slots
//! and remote workers (`crate::remote`) speak it alike, and each type's text form, where the
//! database or a command needs one, is defined here once.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tune_search::TrialId;

/// What a trial hears after a report: the scheduler's decision as far as the trial is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReportAnswer {
    Continue,
    /// Checkpoint and end this run; the trial runs again later.
    Pause,
    Stop,
    /// End: the trial has the scheduler's whole budget.
    Complete,
    /// Not an acknowledgement: the report was not stored (this run is no longer the trial's:
    /// its end was decided, or its attempt was taken back), so the run must end without
    /// saving anything of it. A command hears no line for it and is terminated; a closure's
    /// `report` returns [`Stop::Interrupted`].
    Refused,
}

impl ReportAnswer {
    /// The one spelling of each answer: `tune_reports.heard` holds it, and a command
    /// objective reads it as a line ([`ReportAnswer::command_line`]).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ReportAnswer::Continue => "continue",
            ReportAnswer::Pause => "pause",
            ReportAnswer::Stop => "stop",
            ReportAnswer::Complete => "complete",
            ReportAnswer::Refused => "refused",
        }
    }

    /// Reads [`ReportAnswer::as_str`] back.
    #[cfg(feature = "postgres")]
    pub(crate) fn parse(text: &str) -> ReportAnswer {
        [
            ReportAnswer::Continue,
            ReportAnswer::Pause,
            ReportAnswer::Stop,
            ReportAnswer::Complete,
        ]
        .into_iter()
        .find(|h| h.as_str() == text)
        // Anything else ends the run without taking the report as kept: the safe reading of
        // a decision not understood.
        .unwrap_or(ReportAnswer::Refused)
    }

    /// The line a command objective reads on stdin, if it gets one. The protocol's commands
    /// know no "complete": both it and `stop` end the run. A refused report gets no line,
    /// since any line would read as the report's acknowledgement.
    pub(crate) fn command_line(self) -> Option<String> {
        match self {
            ReportAnswer::Refused => None,
            ReportAnswer::Complete => Some(format!("{}\n", ReportAnswer::Stop.as_str())),
            other => Some(format!("{}\n", other.as_str())),
        }
    }
}

/// What workers tell the coordinator.
// Remote workers' messages are only sent in a build with the `postgres` feature.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) enum WorkerMsg {
    /// A result; the worker waits on `ack` for the decision, sent once the result is durable.
    Report {
        id: TrialId,
        attempt: u32,
        step: Option<u64>,
        metrics: BTreeMap<String, f64>,
        ack: oneshot::Sender<ReportAnswer>,
    },
    /// The attempt ended; its slot is free.
    Finished {
        id: TrialId,
        attempt: u32,
        outcome: Outcome,
    },
    /// A remote worker (`host:pid/slot`) claimed the attempt; `restored`: it goes on from a
    /// checkpoint it found in its trial folder.
    Claimed {
        id: TrialId,
        attempt: u32,
        worker: String,
        restored: bool,
    },
    /// Something changed that may let trials start (remote workers came or went).
    Wake,
    /// The remote workers serving the sweep, for observers.
    Workers(Vec<WorkerInfo>),
    /// The database that remote trials go through has stopped answering (why): the sweep
    /// ends, resumable.
    Unreachable(String),
    /// Something for the user from an observer's thread ([`crate::observer::Notes`]).
    Note(String),
}

/// How an attempt ended, as the worker saw it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    /// The objective returned or exited 0.
    Returned,
    /// It ended after a `Stop` decision.
    Stopped,
    Failed(String),
    /// The sweep is shutting down; the trial is re-queued on resume.
    Interrupted,
    /// Its machine was lost (a remote worker's lease ran out), why: not the trial's fault.
    /// Only remote workers have a machine to lose.
    #[cfg(feature = "postgres")]
    Lost(String),
}

impl Outcome {
    /// The outcome as `tune_attempts.outcome` holds it.
    #[cfg(feature = "postgres")]
    pub(crate) fn to_text(&self) -> String {
        match self {
            Outcome::Returned => "returned".into(),
            Outcome::Stopped => "stopped".into(),
            Outcome::Interrupted => "interrupted".into(),
            Outcome::Failed(why) => format!("failed: {why}"),
            Outcome::Lost(why) => format!("lost: {why}"),
        }
    }

    #[cfg(feature = "postgres")]
    pub(crate) fn from_text(text: &str) -> Outcome {
        match text {
            "returned" => Outcome::Returned,
            "stopped" => Outcome::Stopped,
            "interrupted" => Outcome::Interrupted,
            other => match other.strip_prefix("lost: ") {
                Some(why) => Outcome::Lost(why.into()),
                None => Outcome::Failed(other.strip_prefix("failed: ").unwrap_or(other).into()),
            },
        }
    }
}

/// A worker serving an experiment, as `tune status` and the dashboard list it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerInfo {
    /// `host:pid`.
    pub id: String,
    pub slots: u32,
    /// The experiment it serves only, or `None` for every one in the database.
    pub serving: Option<String>,
    /// Unix milliseconds of its last heartbeat, by this machine's clock (the database judged
    /// its age; this is now minus that age).
    pub heartbeat_at: u64,
    /// Its heartbeat is within its lease.
    pub live: bool,
    /// The experiment's trials it runs now.
    pub running: Vec<tune_search::TrialId>,
    /// Its machine's GPUs' use at its last heartbeat (NVML's; none without a driver).
    #[serde(default)]
    pub gpus: Vec<tune_trials::GpuUse>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_and_decisions_read_back_as_written() {
        for o in [
            Outcome::Returned,
            Outcome::Stopped,
            Outcome::Interrupted,
            Outcome::Failed("exit code 3: oops".into()),
            Outcome::Failed("lost: a failure whose text says lost".into()),
            Outcome::Lost("worker h:1/0 stopped renewing its lease".into()),
        ] {
            assert_eq!(Outcome::from_text(&o.to_text()), o);
        }
        for h in [
            ReportAnswer::Continue,
            ReportAnswer::Pause,
            ReportAnswer::Stop,
            ReportAnswer::Complete,
            ReportAnswer::Refused,
        ] {
            assert_eq!(ReportAnswer::parse(h.as_str()), h);
        }
        assert_eq!(ReportAnswer::parse("garbled"), ReportAnswer::Refused);
        assert_eq!(
            ReportAnswer::Complete.command_line().as_deref(),
            Some("stop\n")
        );
        assert_eq!(
            ReportAnswer::Pause.command_line().as_deref(),
            Some("pause\n")
        );
        assert_eq!(ReportAnswer::Refused.command_line(), None);
    }
}
