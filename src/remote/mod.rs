//! Remote workers: trials of an experiment in PostgreSQL run by `tune worker` processes on any
//! machine that reaches the database.
//!
//! The protocol lives in three tables (migration 3 in `store/pg_store.rs`):
//!
//! - `tune_attempts`: one row per attempt the coordinator offers. A worker claims an `offered`
//!   row with `FOR UPDATE SKIP LOCKED` (no lock on any shared row, so workers never queue
//!   behind each other), which makes it `running` with a fresh fencing `token` and a lease
//!   (`lease_until`, set and judged by the database's clock). The worker renews the lease;
//!   it writes `ended` with the outcome. The coordinator marks a row whose lease ran out
//!   `lost` (the trial runs again as a new attempt, counted against `max_lost_attempts`, not
//!   `max_failures`), and rows
//!   it no longer wants `cancelled`.
//! - `tune_reports`: a worker's report, inserted only while its attempt is `running` with its
//!   token (a fenced write: a worker that lost its lease is refused and told to stop). The
//!   coordinator stores the result, runs the scheduler, syncs, then writes the decision into
//!   `heard`; the worker waits for it, as a local trial waits for its acknowledgement.
//! - `tune_workers`: who is serving, with how many slots, and their last heartbeat: the
//!   coordinator offers as many attempts as live workers have slots.
//!
//! Each side is woken by `LISTEN/NOTIFY` (the coordinator on `tune_e<experiment id>`, workers
//! on `tune_offers` and `tune_decisions`) and polls as well, so a lost notification only
//! delays.

#[cfg(feature = "postgres")]
pub(crate) mod bridge;
#[cfg(not(feature = "postgres"))]
pub(crate) mod bridge_unbuilt;
#[cfg(feature = "postgres")]
mod checkpoints;
#[cfg(feature = "postgres")]
mod db;
#[cfg(feature = "postgres")]
mod queries;
#[cfg(feature = "postgres")]
mod wire;
#[cfg(feature = "postgres")]
mod worker;

#[cfg(not(feature = "postgres"))]
pub(crate) use bridge_unbuilt as bridge;
#[cfg(feature = "postgres")]
pub use queries::{experiment_names, ExperimentReader};
#[cfg(feature = "postgres")]
pub(crate) use queries::{worker_from_row, WORKERS_SQL};
#[cfg(feature = "postgres")]
pub(crate) use wire::*;
#[cfg(feature = "postgres")]
pub use worker::{Worker, WorkerSummary};

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tune_search::{Params, TrialId};

pub use crate::protocol::WorkerInfo;

/// The default lease of a claimed attempt: a worker silent this long has lost its trials. As
/// long as a coordinator rides out a database that does not answer.
pub const DEFAULT_LEASE: Duration = crate::store::OUTAGE_RIDDEN;

/// What a worker needs to run an attempt, as the coordinator offers it (`tune_attempts.job`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Offer {
    pub params: Params,
    pub timeout_s: Option<f64>,
    /// The trial's last stored step: a run that goes on from a checkpoint numbers its
    /// step-less reports after it.
    pub last_step: Option<u64>,
    /// It goes on from another trial's checkpoint (population-based training).
    pub exploited: bool,
    /// That trial, where the worker copies its checkpoint (`[store] checkpoints =
    /// "database"`); an offer of an older coordinator has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exploit_from: Option<TrialId>,
    /// The step the scheduler completes trials at ([`crate::objective::Job::completes_at`]);
    /// an offer of an older coordinator has none.
    #[serde(default)]
    pub completes_at: Option<u64>,
}

/// Where a remote attempt runs, as trials record it in `device`: `host:pid/cpu:0`, the
/// worker and its slot. This and [`split_remote_slot`] are the only places that know the form.
#[cfg(feature = "postgres")]
pub(crate) fn remote_slot(worker: Option<&str>, device: Option<&str>) -> String {
    let worker = worker.unwrap_or("?");
    match device {
        Some(d) => format!("{worker}/{d}"),
        None => worker.to_string(),
    }
}

/// The worker (`host:pid`) and its slot (`cpu:0`) of a remote trial's `device`; `None` for a
/// local slot.
///
/// ```
/// assert_eq!(tune::remote::split_remote_slot("gpu7:4242/cuda:1"), Some(("gpu7:4242", "cuda:1")));
/// assert_eq!(tune::remote::split_remote_slot("cpu:0"), None);
/// ```
pub fn split_remote_slot(device: &str) -> Option<(&str, &str)> {
    device.split_once('/')
}

/// The slots of a trial's `device`, one per machine: a trial on several machines (a gang,
/// `nodes_per_trial`) records node 0's slot and then each other node's worker as
/// `worker/node N`, joined by ` + `; any other trial has one. `gang_device` writes the form.
///
/// ```
/// let gang: Vec<&str> = tune::remote::gang_slots("a:1/cpu:0 + b:2/node 1").collect();
/// assert_eq!(gang, ["a:1/cpu:0", "b:2/node 1"]);
/// assert_eq!(tune::remote::gang_slots("cpu:3").collect::<Vec<_>>(), ["cpu:3"]);
/// ```
pub fn gang_slots(device: &str) -> impl Iterator<Item = &str> {
    device.split(GANG_JOIN)
}

const GANG_JOIN: &str = " + ";

/// The device a gang's attempt records on its node 0's worker ([`gang_slots`] reads it back
/// once the worker's name is put before it): node 0's `slot`, then the other nodes' workers.
#[cfg(feature = "postgres")]
pub(crate) fn gang_device(slot: &str, others: &[String]) -> String {
    std::iter::once(slot.to_string())
        .chain((others.iter().enumerate()).map(|(i, w)| format!("{w}/node {}", i + 1)))
        .collect::<Vec<_>>()
        .join(GANG_JOIN)
}

/// Who serves an experiment in a database now: the coordinator running it, if any, and the
/// workers registered for it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Serving {
    /// The coordinator that holds the experiment (`host:pid since <time>`), `None` when no
    /// coordinator runs it.
    pub coordinator: Option<String>,
    /// The workers that serve it (registered and not yet exited), with the trials of it each
    /// one runs.
    pub workers: Vec<WorkerInfo>,
}
