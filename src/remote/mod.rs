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

use crate::objective::{Heard, Outcome};

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
}

impl Heard {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Heard::Continue => "continue",
            Heard::Pause => "pause",
            Heard::Stop => "stop",
        }
    }

    pub(crate) fn parse(text: &str) -> Heard {
        match text {
            "continue" => Heard::Continue,
            "pause" => Heard::Pause,
            // Anything else ends the run: the safe reading of a decision not understood.
            _ => Heard::Stop,
        }
    }
}

impl Outcome {
    /// The outcome as `tune_attempts.outcome` holds it.
    pub(crate) fn to_text(&self) -> String {
        match self {
            Outcome::Returned => "returned".into(),
            Outcome::Stopped => "stopped".into(),
            Outcome::Interrupted => "interrupted".into(),
            Outcome::Failed(why) => format!("failed: {why}"),
        }
    }

    pub(crate) fn from_text(text: &str) -> Outcome {
        match text {
            "returned" => Outcome::Returned,
            "stopped" => Outcome::Stopped,
            "interrupted" => Outcome::Interrupted,
            other => Outcome::Failed(other.strip_prefix("failed: ").unwrap_or(other).into()),
        }
    }
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

/// A worker serving an experiment, as `tune status` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerInfo {
    /// `host:pid`.
    pub id: String,
    pub slots: u32,
    /// The experiment it serves only, or `None` for every one in the database.
    pub serving: Option<String>,
    /// Seconds since its last heartbeat, by the database's clock.
    pub heartbeat_age_s: f64,
    /// Its heartbeat is within its lease.
    pub live: bool,
    /// The experiment's trials it runs now.
    pub running: Vec<tune_search::TrialId>,
}

/// The workers that serve experiment `name` at `url` (registered and not yet exited), with
/// the trials of it each one runs.
///
/// ```no_run
/// for w in tune::remote::workers("postgres://tune@db/tune", "mnist-lr")? {
///     println!("{} ({} slots): {:?}", w.id, w.slots, w.running);
/// }
/// # Ok::<(), tune::StoreError>(())
/// ```
pub fn workers(url: &str, name: &str) -> Result<Vec<WorkerInfo>, crate::StoreError> {
    use crate::store::pg_store::{connect, db_error, existing};
    let location = crate::store::postgres_location(url, name);
    let mut client = connect(url, &location)?;
    let experiment = existing(&mut client, name, &location)?;
    let rows = client
        .query(
            "SELECT w.id, w.slots, e.name,
                    extract(epoch FROM now() - w.heartbeat_at)::float8,
                    w.heartbeat_at > now() - make_interval(secs => w.lease_s),
                    coalesce((SELECT array_agg(a.trial ORDER BY a.trial) FROM tune_attempts a
                              WHERE a.worker = w.id AND a.state = 'running'
                                AND a.experiment = $1), '{}')
             FROM tune_workers w LEFT JOIN tune_experiments e ON e.id = w.experiment
             WHERE w.experiment IS NULL OR w.experiment = $1 ORDER BY w.id",
            &[&experiment],
        )
        .map_err(|e| db_error(&location, e))?;
    Ok(rows
        .iter()
        .map(|r| WorkerInfo {
            id: r.get(0),
            slots: r.get::<_, i32>(1).max(0) as u32,
            serving: r.get(2),
            heartbeat_age_s: r.get(3),
            live: r.get(4),
            running: r
                .get::<_, Vec<i64>>(5)
                .into_iter()
                .map(|t| t as tune_search::TrialId)
                .collect(),
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

    #[test]
    fn outcomes_and_decisions_read_back_as_written() {
        for o in [
            Outcome::Returned,
            Outcome::Stopped,
            Outcome::Interrupted,
            Outcome::Failed("exit code 3: oops".into()),
        ] {
            assert_eq!(Outcome::from_text(&o.to_text()), o);
        }
        for h in [Heard::Continue, Heard::Pause, Heard::Stop] {
            assert_eq!(Heard::parse(h.as_str()), h);
        }
        assert_eq!(Heard::parse("garbled"), Heard::Stop);
    }
}
