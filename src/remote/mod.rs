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
//!   `lost` (the trial is retried as a new attempt, counted against `max_failures`), and rows
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

pub(crate) mod bridge;
mod db;
mod worker;

pub use worker::{Worker, WorkerSummary};

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tune_search::Params;

pub use crate::protocol::WorkerInfo;

/// How often each side looks at the database when no notification woke it.
pub(crate) const POLL: Duration = Duration::from_millis(200);

/// The default lease of a claimed attempt: a worker silent this long has lost its trials.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(15);

/// The channel a coordinator listens on for its experiment.
pub(crate) fn coordinator_channel(experiment: i64) -> String {
    format!("tune_e{experiment}")
}

/// What a worker's notification to its coordinator says it wrote.
pub(crate) const NOTE_REPORT: &str = "report";
pub(crate) const NOTE_CLAIM: &str = "claim";
pub(crate) const NOTE_END: &str = "end";

/// The channels workers listen on: new offers, and decisions (the payload is `id:decision`,
/// the report's id and what it heard).
pub(crate) const OFFERS_CHANNEL: &str = "tune_offers";
pub(crate) const DECISIONS_CHANNEL: &str = "tune_decisions";

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
    /// The step the scheduler completes trials at ([`crate::objective::Job::completes_at`]);
    /// an offer of an older coordinator has none.
    #[serde(default)]
    pub completes_at: Option<u64>,
}

/// Metrics as `tune_reports.metrics` holds them: JSON with each value as Rust prints it, so
/// that NaN and infinities (which JSON lacks) reach the coordinator, which judges them.
pub(crate) fn metrics_to_text(metrics: &BTreeMap<String, f64>) -> String {
    let printed: BTreeMap<&str, String> = metrics
        .iter()
        .map(|(k, v)| (k.as_str(), v.to_string()))
        .collect();
    serde_json::to_string(&printed).unwrap_or_else(|_| "{}".into())
}

pub(crate) fn metrics_from_text(text: &str) -> BTreeMap<String, f64> {
    let printed: BTreeMap<String, String> = serde_json::from_str(text).unwrap_or_default();
    printed
        .into_iter()
        .map(|(k, v)| {
            let value = v.parse().unwrap_or(f64::NAN);
            (k, value)
        })
        .collect()
}

/// Where a remote attempt runs, as trials record it in `device`: `host:pid/cpu:0`, the
/// worker and its slot. This and [`split_remote_slot`] are the only places that know the form.
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

/// The workers of experiment `$1` (registered and not yet exited), as [`worker_from_row`]
/// reads them.
pub(crate) const WORKERS_SQL: &str = "SELECT w.id, w.slots, e.name,
        extract(epoch FROM now() - w.heartbeat_at)::float8,
        w.heartbeat_at > now() - make_interval(secs => w.lease_s),
        coalesce((SELECT array_agg(a.trial ORDER BY a.trial) FROM tune_attempts a
                  WHERE a.worker = w.id AND a.state = 'running' AND a.experiment = $1), '{}'),
        w.gpus
     FROM tune_workers w LEFT JOIN tune_experiments e ON e.id = w.experiment
     WHERE w.experiment IS NULL OR w.experiment = $1 ORDER BY w.id";

pub(crate) fn worker_from_row(r: &postgres::Row) -> WorkerInfo {
    let age_s: f64 = r.get(3);
    WorkerInfo {
        id: r.get(0),
        slots: r.get::<_, i32>(1).max(0) as u32,
        serving: r.get(2),
        heartbeat_at: crate::trial::now_ms().saturating_sub((age_s.max(0.0) * 1000.0) as u64),
        live: r.get(4),
        running: r
            .get::<_, Vec<i64>>(5)
            .into_iter()
            .map(|t| t as tune_search::TrialId)
            .collect(),
        // Written by the worker itself as JSON; a worker of another version may write what
        // this one cannot read, which shows as no GPUs rather than an error.
        gpus: r
            .get::<_, Option<String>>(6)
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_default(),
    }
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

/// Who serves experiment `name` at `url` now (one connection, one snapshot).
///
/// ```no_run
/// let serving = tune::remote::serving("postgres://tune@db/tune", "mnist-lr")?;
/// println!("coordinator: {:?}", serving.coordinator);
/// for w in &serving.workers {
///     println!("{} ({} slots): {:?}", w.id, w.slots, w.running);
/// }
/// # Ok::<(), tune::StoreError>(())
/// ```
pub fn serving(url: &str, name: &str) -> Result<Serving, crate::StoreError> {
    use crate::store::pg_store::{connect, coordinator, db_error, existing};
    let location = crate::store::postgres_location(url, name);
    let mut client = connect(url, &location)?;
    let experiment = existing(&mut client, name, &location)?;
    let err = |e| db_error(&location, e);
    let mut snapshot = client
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .map_err(err)?;
    let coordinator = coordinator(&mut snapshot, experiment).map_err(err)?;
    let workers = snapshot
        .query(WORKERS_SQL, &[&experiment])
        .map_err(err)?
        .iter()
        .map(worker_from_row)
        .collect();
    snapshot.commit().map_err(err)?;
    Ok(Serving {
        coordinator,
        workers,
    })
}

/// The worker (`host:pid`) of each attempt of experiment `name` at `url` that a worker
/// claimed, by (trial, attempt): what `tune export` gives each result.
///
/// ```no_run
/// let by_attempt = tune::remote::attempt_workers("postgres://tune@db/tune", "mnist-lr")?;
/// println!("trial 0's first attempt ran on {:?}", by_attempt.get(&(0, 1)));
/// # Ok::<(), tune::StoreError>(())
/// ```
pub fn attempt_workers(
    url: &str,
    name: &str,
) -> Result<BTreeMap<(tune_search::TrialId, u32), String>, crate::StoreError> {
    use crate::store::pg_store::{connect, db_error, existing};
    let location = crate::store::postgres_location(url, name);
    let mut client = connect(url, &location)?;
    let experiment = existing(&mut client, name, &location)?;
    let rows = client
        .query(
            "SELECT trial, attempt, worker FROM tune_attempts
             WHERE experiment = $1 AND worker IS NOT NULL",
            &[&experiment],
        )
        .map_err(|e| db_error(&location, e))?;
    Ok(rows
        .iter()
        .map(|r| {
            let key = (
                r.get::<_, i64>(0) as tune_search::TrialId,
                r.get::<_, i32>(1) as u32,
            );
            (key, r.get(2))
        })
        .collect())
}

/// Every report remote workers sent for experiment `name` at `url` that the coordinator
/// answered, in the order sent: what `tune check` holds against the stored results.
///
/// ```no_run
/// let decided = tune::remote::decided_reports("postgres://tune@db/tune", "mnist-lr")?;
/// println!("{} reports answered", decided.len());
/// # Ok::<(), tune::StoreError>(())
/// ```
pub fn decided_reports(
    url: &str,
    name: &str,
) -> Result<Vec<crate::check::DecidedReport>, crate::StoreError> {
    use crate::store::pg_store::{connect, db_error, existing};
    let location = crate::store::postgres_location(url, name);
    let mut client = connect(url, &location)?;
    let experiment = existing(&mut client, name, &location)?;
    let rows = client
        .query(
            "SELECT trial, attempt, step, heard FROM tune_reports
             WHERE experiment = $1 AND heard IS NOT NULL AND step IS NOT NULL ORDER BY id",
            &[&experiment],
        )
        .map_err(|e| db_error(&location, e))?;
    Ok(rows
        .iter()
        .map(|r| crate::check::DecidedReport {
            trial: r.get::<_, i64>(0) as tune_search::TrialId,
            attempt: r.get::<_, i32>(1) as u32,
            step: r.get::<_, i64>(2) as u64,
            heard: r.get(3),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_keep_every_value_exactly_nan_included() {
        let metrics = BTreeMap::from([
            ("a".to_string(), 0.1 + 0.2),
            ("b".to_string(), f64::NAN),
            ("c".to_string(), f64::NEG_INFINITY),
            ("d".to_string(), 1e-300),
        ]);
        let back = metrics_from_text(&metrics_to_text(&metrics));
        assert_eq!(back["a"], 0.1 + 0.2);
        assert!(back["b"].is_nan());
        assert_eq!(back["c"], f64::NEG_INFINITY);
        assert_eq!(back["d"], 1e-300);
    }
}
