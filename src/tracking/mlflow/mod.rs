//! MLflow tracking over its REST API: a parent run for the sweep (its settings as params, the
//! best value and params at the end), a nested run per trial (`mlflow.parentRunId`) with its
//! params, every reported metric by step, and its end as FINISHED, FAILED or KILLED (with a
//! `tune.stopped` tag such as "stopped by asha at step 9").
//!
//! Live through [`MlflowLogger`] (`[tracking] mlflow = URL`), after the fact through
//! [`sync_sweep`] (`tune export NAME --to-mlflow URL`); both go on from what MLflow already
//! holds, so either can follow the other, or itself, without a point logged twice.

mod client;
mod live;
mod mirror;
mod target;

pub(crate) use target::check_uri;

pub use client::{Batch, MetricPoint, MlflowClient, MlflowError, RunInfo};
pub use live::MlflowLogger;
pub use mirror::{sweep_id, SweepMirror, SweepRecord};

use std::time::Duration;

use crate::spec::ExperimentSpec;
use crate::trial::Trial;

impl SweepRecord {
    /// The parent run of `spec`'s sweep, created at `created_at` (Unix ms; the experiment's
    /// [`crate::store::Meta::created_at`]).
    pub fn new(spec: &ExperimentSpec, created_at: u64) -> SweepRecord {
        let mut params = vec![
            ("metric".to_string(), spec.metric.clone()),
            ("mode".into(), spec.mode.as_str().into()),
            ("samples".into(), spec.samples.to_string()),
            ("seed".into(), spec.seed.to_string()),
            ("max_failures".into(), spec.max_failures.to_string()),
            (
                "search".into(),
                spec.search.algorithm.algorithm().as_str().into(),
            ),
            ("scheduler".into(), spec.scheduler.name().into()),
        ];
        // Each parameter as the spec's `[space]` has it.
        if let Ok(serde_json::Value::Object(space)) = serde_json::to_value(&spec.space) {
            for (name, domain) in space {
                params.push((format!("space.{name}"), domain.to_string()));
            }
        }
        SweepRecord {
            experiment: spec
                .tracking
                .mlflow_experiment
                .clone()
                .unwrap_or_else(|| spec.name.clone()),
            name: spec.name.clone(),
            metric: spec.metric.clone(),
            mode: spec.mode,
            constraints: spec.constraints.clone(),
            scheduler: spec.scheduler.name().into(),
            params,
            created_at,
        }
    }
}

/// Sends a whole sweep to the MLflow server at `url`: whatever MLflow lacks of it, and the
/// parent run's end if the sweep is `complete`. Stops at the first error.
///
/// ```no_run
/// # fn demo(spec: &tune::ExperimentSpec, trials: &[tune::Trial]) -> Result<(), tune::tracking::mlflow::MlflowError> {
/// let sweep = tune::tracking::mlflow::SweepRecord::new(spec, 1_700_000_000_000);
/// tune::tracking::mlflow::sync_sweep("http://127.0.0.1:5000", sweep, trials, true)?;
/// # Ok(()) }
/// ```
pub fn sync_sweep(
    url: &str,
    sweep: SweepRecord,
    trials: &[Trial],
    complete: bool,
) -> Result<(), MlflowError> {
    let best = crate::best::best_trial(trials, &sweep.metric, sweep.mode, &sweep.constraints);
    let mut mirror = SweepMirror::new(MlflowClient::new(url, Duration::from_secs(30))?, sweep);
    let now = crate::trial::now_ms();
    for t in trials {
        mirror.sync_trial(t, &|_| now)?;
    }
    if complete {
        mirror.end(true, best)?;
    }
    Ok(())
}
