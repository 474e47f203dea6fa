//! The trial record: what the store keeps and the result reports.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tune_search::{Params, Status, TrialId};

/// One reported result: the metrics a trial reported at a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialResult {
    pub step: u64,
    /// Position of this result among all results of the sweep, in the order received.
    pub seq: u64,
    /// Which attempt of the trial reported it (1 for the first run).
    pub attempt: u32,
    pub metrics: BTreeMap<String, f64>,
}

/// One trial: its parameters, status and results.
///
/// ```
/// use tune::{Trial, Status};
/// let t = Trial::new(0, tune::Params::default());
/// assert_eq!(t.status, Status::Pending);
/// assert!(t.results.is_empty());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    pub id: TrialId,
    pub status: Status,
    pub params: Params,
    /// How many times it was started.
    pub attempts: u32,
    /// Unix milliseconds.
    pub created_at: u64,
    pub started_at: Option<u64>,
    pub finished_at: Option<u64>,
    /// Why it failed (or, for a retried trial, why its last attempt failed).
    pub error: Option<String>,
    /// Attempts that failed: what `max_failures` counts (an attempt interrupted by a
    /// shutdown or a kill of tune, or whose machine was lost, is not one).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed_attempts: u32,
    /// Attempts that ended with their machine lost (a remote worker's lease ran out), which
    /// `max_failures` does not count.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lost_attempts: u32,
    /// Where the last attempt ran (`cpu:0`, `cuda:1`).
    pub device: Option<String>,
    /// The trial it last copied (population-based training).
    #[serde(default)]
    pub parent: Option<TrialId>,
    /// Every exploit, oldest first: at which step it took over which trial, and the params it
    /// had before (the first entry's are the params it was created with).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lineage: Vec<Lineage>,
    /// An exploit not yet applied: copy this trial's checkpoint in before the next run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_from: Option<TrialId>,
    /// Where in the sweep's stream of results the trial ended: after the first `end_seq`
    /// results (by `seq`). A resume replays its end to the scheduler at that point, so that a
    /// rung cut or an exploit sees the same trials as it did in the uninterrupted sweep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_seq: Option<u64>,
    /// With `algorithm = "auto"`: the searcher that suggested its params, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggested_by: Option<tune_search::AutoChoice>,
    /// Results in the order received; kept apart from the record in the store.
    #[serde(skip)]
    pub results: Vec<TrialResult>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Trial {
    pub fn new(id: TrialId, params: Params) -> Trial {
        Trial {
            id,
            status: Status::Pending,
            params,
            attempts: 0,
            created_at: now_ms(),
            started_at: None,
            finished_at: None,
            error: None,
            failed_attempts: 0,
            lost_attempts: 0,
            device: None,
            parent: None,
            lineage: Vec::new(),
            restore_from: None,
            end_seq: None,
            suggested_by: None,
            results: Vec::new(),
        }
    }

    /// The metric at the last report (Ray Tune's `scope="last"`).
    pub fn value(&self, metric: &str) -> Option<f64> {
        self.results
            .last()
            .and_then(|r| r.metrics.get(metric).copied())
    }

    /// The step of the last report.
    pub fn last_step(&self) -> Option<u64> {
        self.results.last().map(|r| r.step)
    }
}

/// One exploit of population-based training.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lineage {
    /// The step at which it happened.
    pub step: u64,
    /// The trial whose checkpoint and (explored) params it took.
    pub from: TrialId,
    /// Its params before.
    pub previous: Params,
}

impl Trial {
    /// The params the trial was created with (before any exploit).
    pub fn original_params(&self) -> &Params {
        self.lineage.first().map_or(&self.params, |l| &l.previous)
    }
}

/// Milliseconds since the Unix epoch: the clock of every timestamp tune stores or shows.
///
/// ```
/// assert!(tune::now_ms() > 1_700_000_000_000);
/// ```
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// RFC 3339 with milliseconds, UTC.
pub fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// The steps a sweep had trained when each of its reports arrived, by report (`seq`): each
/// report adds how far its trial advanced since its previous report, or its whole step when
/// the trial started lower again (a retry without a checkpoint). With one report per epoch
/// this is the epochs spent, the budget an early-stopping scheduler saves and the x axis of
/// `benches/early_stopping`'s tables.
///
/// ```
/// use tune::{Trial, TrialResult};
/// let result = |step, seq| TrialResult { step, seq, attempt: 1, metrics: Default::default() };
/// let mut a = Trial::new(0, Default::default());
/// let mut b = Trial::new(1, Default::default());
/// a.results = vec![result(1, 0), result(2, 2), result(3, 3)];
/// b.results = vec![result(1, 1)];
/// let budget = tune::budget_by_seq(&[a.clone(), b.clone()]);
/// assert_eq!(budget.values().copied().collect::<Vec<_>>(), [1, 2, 3, 4]);
/// assert_eq!(tune::steps_trained(&[a, b]), 4);
/// ```
pub fn budget_by_seq(trials: &[Trial]) -> BTreeMap<u64, u64> {
    budget_of_reports(trials.iter().map(|t| t.results.as_slice()))
}

/// [`budget_by_seq`] over each trial's results, wherever they are kept.
pub fn budget_of_reports<'a>(
    trials: impl Iterator<Item = &'a [TrialResult]>,
) -> BTreeMap<u64, u64> {
    let mut reports: Vec<(u64, usize, u64)> = trials
        .enumerate()
        .flat_map(|(i, results)| results.iter().map(move |r| (r.seq, i, r.step)))
        .collect();
    reports.sort_unstable();
    let mut last: BTreeMap<usize, u64> = BTreeMap::new();
    let mut spent = 0;
    reports
        .into_iter()
        .map(|(seq, i, step)| {
            let before = last.insert(i, step).unwrap_or(0);
            spent += if step > before { step - before } else { step };
            (seq, spent)
        })
        .collect()
}

/// The steps the sweep has trained in all: [`budget_by_seq`]'s last.
pub fn steps_trained(trials: &[Trial]) -> u64 {
    budget_by_seq(trials).values().last().copied().unwrap_or(0)
}
