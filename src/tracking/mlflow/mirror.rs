//! A sweep kept in step with MLflow: a parent run for the sweep, a nested run per trial, each
//! result's metrics once. What MLflow already holds is read back from MLflow itself (the runs'
//! tags), so a process killed mid-logging, a server that was down, or an export after the fact
//! all go on from where MLflow is, without sending a point twice.

use std::collections::{HashMap, HashSet};

use tune_search::{Mode, Status, TrialId};

use super::client::{Batch, MetricPoint, MlflowClient, MlflowError, RunInfo};
use crate::trial::{now_ms, Trial};

/// Tag naming the sweep a run belongs to ([`sweep_id`]).
const SWEEP_ID: &str = "tune.sweep_id";
/// `sweep` for the parent run, `trial` for a trial's.
const ROLE: &str = "tune.role";
const TRIAL: &str = "tune.trial";
/// How many of the trial's results are logged (in order): the cursor that makes logging go on
/// where it stopped. Sent in the same request as the metrics it counts.
const LOGGED: &str = "tune.logged_results";
/// Set in the request that logs a run's last params.
const PARAMS_LOGGED: &str = "tune.params_logged";
/// Set on the parent run with the best value, when the sweep completes.
const BEST_LOGGED: &str = "tune.best_logged";

/// An id for the sweep that survives resume and tells apart sweeps of the same name: the
/// name's letters and digits and its creation time (Unix ms). MLflow's search syntax quotes
/// values with `'`, so only characters that need no escaping are kept.
pub fn sweep_id(name: &str, created_at: u64) -> String {
    let name: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{name}-{created_at}")
}

/// The sweep as MLflow's parent run shows it.
#[derive(Debug, Clone)]
pub struct SweepRecord {
    /// The MLflow experiment (`[tracking] mlflow_experiment`, default the sweep's name).
    pub experiment: String,
    pub name: String,
    pub metric: String,
    pub mode: Mode,
    /// `[constraints]`: the best trial is the best within them.
    pub constraints: crate::Constraints,
    /// The scheduler's name, for "stopped by asha at step 9".
    pub scheduler: String,
    /// The spec's settings and space, logged as the parent run's params.
    pub params: Vec<(String, String)>,
    /// Unix ms: the parent run's start, and with the name the sweep's id.
    pub created_at: u64,
}

impl SweepRecord {
    /// The sweep's `tune.sweep_id` ([`sweep_id`]).
    pub fn id(&self) -> String {
        sweep_id(&self.name, self.created_at)
    }
}

/// What this process knows MLflow holds of a trial's run.
#[derive(Debug, Clone, Default)]
struct TrialRun {
    run_id: String,
    params_logged: bool,
    /// Results logged, in the trial's order.
    logged: usize,
    ended: bool,
    /// A request about this run failed without an answer: what MLflow holds is read again
    /// before anything more is sent.
    unsure: bool,
}

/// The MLflow side of one sweep.
pub struct SweepMirror {
    client: MlflowClient,
    sweep: SweepRecord,
    /// Set once the experiment, the parent run and the existing trial runs are known.
    connected: Option<Connected>,
}

struct Connected {
    experiment_id: String,
    parent: String,
    /// The parent run has its end (best value and params): the sweep completed.
    ended: bool,
    runs: HashMap<TrialId, TrialRun>,
    /// Trials whose run may have been created by a request that got no answer.
    maybe_created: HashSet<TrialId>,
}

impl SweepMirror {
    pub fn new(client: MlflowClient, sweep: SweepRecord) -> SweepMirror {
        SweepMirror {
            client,
            sweep,
            connected: None,
        }
    }

    pub fn url(&self) -> &str {
        self.client.url()
    }

    /// Whether the experiment and the parent run are known (an error while finding them
    /// leaves it unconnected).
    pub fn is_connected(&self) -> bool {
        self.connected.is_some()
    }

    /// Finds (or makes) the experiment and the parent run, and reads which trial runs exist
    /// and how far each got. Done once; again after [`SweepMirror::reconnect`].
    fn connect(&mut self) -> Result<&mut Connected, MlflowError> {
        if self.connected.is_none() {
            let experiment_id = self.client.experiment_id(&self.sweep.experiment)?;
            let filter = format!("tags.`{SWEEP_ID}` = '{}'", self.sweep.id());
            let found = self.client.search_runs(&experiment_id, &filter)?;
            let mut ended = false;
            let parent = match found.iter().find(|r| r.tag(ROLE) == Some("sweep")) {
                Some(p) => {
                    // A sweep that completed keeps its end; one interrupted runs again.
                    ended = p.tag(BEST_LOGGED).is_some();
                    if p.status != "RUNNING" && !ended {
                        self.client.update_run(&p.run_id, "RUNNING", 0)?;
                    }
                    if p.tag(PARAMS_LOGGED).is_none() {
                        log_params(&self.client, &p.run_id, &self.sweep.params)?;
                    }
                    p.run_id.clone()
                }
                None => {
                    let run_id = self.client.create_run(
                        &experiment_id,
                        &self.sweep.name,
                        self.sweep.created_at,
                        &[
                            (SWEEP_ID.into(), self.sweep.id()),
                            (ROLE.into(), "sweep".into()),
                            ("mlflow.runName".into(), self.sweep.name.clone()),
                        ],
                    )?;
                    log_params(&self.client, &run_id, &self.sweep.params)?;
                    run_id
                }
            };
            let runs = found
                .iter()
                .filter(|r| r.tag(ROLE) == Some("trial"))
                .filter_map(|r| Some((r.tag(TRIAL)?.parse().ok()?, trial_run(r))))
                .collect();
            self.connected = Some(Connected {
                experiment_id,
                parent,
                ended,
                runs,
                maybe_created: HashSet::new(),
            });
        }
        Ok(self.connected.as_mut().expect("set above"))
    }

    /// Brings trial `t`'s run up to date: made if missing, its params, every result not yet
    /// logged (`reported_at(i)`: when result `i` was reported, Unix ms), and its end once it
    /// has ended. Trials that never started get no run.
    pub fn sync_trial(
        &mut self,
        t: &Trial,
        reported_at: &dyn Fn(usize) -> u64,
    ) -> Result<(), MlflowError> {
        if t.started_at.is_none() {
            return Ok(());
        }
        let scheduler = self.sweep.scheduler.clone();
        let sweep_id = self.sweep.id();
        let client = self.client.clone();
        let c = self.connect()?;
        if !c.runs.contains_key(&t.id) {
            let filter = format!(
                "tags.`{SWEEP_ID}` = '{sweep_id}' and tags.`{TRIAL}` = '{}'",
                t.id
            );
            let existing = if c.maybe_created.contains(&t.id) {
                client.search_runs(&c.experiment_id, &filter)?
            } else {
                Vec::new()
            };
            let run = match existing.iter().find(|r| r.tag(ROLE) == Some("trial")) {
                Some(r) => trial_run(r),
                None => {
                    c.maybe_created.insert(t.id);
                    let name = format!("trial-{:05}", t.id);
                    let run_id = client.create_run(
                        &c.experiment_id,
                        &name,
                        t.started_at.unwrap_or(t.created_at),
                        &[
                            ("mlflow.parentRunId".into(), c.parent.clone()),
                            ("mlflow.runName".into(), name.clone()),
                            (SWEEP_ID.into(), sweep_id),
                            (ROLE.into(), "trial".into()),
                            (TRIAL.into(), t.id.to_string()),
                        ],
                    )?;
                    TrialRun {
                        run_id,
                        ..TrialRun::default()
                    }
                }
            };
            c.maybe_created.remove(&t.id);
            c.runs.insert(t.id, run);
        }
        let run = c.runs.get_mut(&t.id).expect("inserted above");
        let outcome = sync_run(&client, run, t, &scheduler, reported_at);
        if outcome.as_ref().is_err_and(MlflowError::is_transient) {
            run.unsure = true;
        }
        outcome
    }

    /// Ends the parent run: FINISHED with the best value and params when the sweep
    /// `complete`d, KILLED when it was interrupted (a resume sets it running again).
    pub fn end(&mut self, complete: bool, best: Option<&Trial>) -> Result<(), MlflowError> {
        let metric = self.sweep.metric.clone();
        let client = self.client.clone();
        let c = self.connect()?;
        if c.ended {
            // A complete sweep's best does not change: sent once.
            return Ok(());
        }
        if complete {
            let mut tags = Vec::new();
            let mut metrics = Vec::new();
            if let Some(b) = best {
                if let Some(v) = b.value(&metric) {
                    metrics.push(MetricPoint {
                        key: format!("best_{metric}"),
                        value: v,
                        timestamp: now_ms(),
                        step: 0,
                    });
                }
                tags.push(("tune.best_trial".to_string(), b.id.to_string()));
                for (k, v) in b.params.iter() {
                    tags.push((format!("best.{k}"), v.to_string()));
                }
            }
            // The last request says the end is logged, so that it is logged once.
            let mut batches: Vec<Batch> = tags
                .chunks(Batch::MAX_TAGS - 1)
                .map(|chunk| Batch {
                    tags: chunk.to_vec(),
                    ..Batch::default()
                })
                .collect();
            if batches.is_empty() {
                batches.push(Batch::default());
            }
            batches[0].metrics = metrics;
            let last = batches.len() - 1;
            batches[last]
                .tags
                .push((BEST_LOGGED.to_string(), "true".to_string()));
            for batch in &batches {
                client.log_batch(&c.parent, batch)?;
            }
            c.ended = true;
        }
        client.update_run(
            &c.parent,
            if complete { "FINISHED" } else { "KILLED" },
            now_ms(),
        )
    }
}

/// Logs `params` to `run_id`, 100 to a request (params are immutable in MLflow, and sending
/// the same value again is allowed), the last request saying so in a tag.
fn log_params(
    client: &MlflowClient,
    run_id: &str,
    params: &[(String, String)],
) -> Result<(), MlflowError> {
    let done = (PARAMS_LOGGED.to_string(), "true".to_string());
    let mut chunks: Vec<Batch> = params
        .chunks(Batch::MAX_PARAMS)
        .map(|chunk| Batch {
            params: chunk.to_vec(),
            ..Batch::default()
        })
        .collect();
    match chunks.last_mut() {
        Some(last) => last.tags.push(done),
        None => chunks.push(Batch {
            tags: vec![done],
            ..Batch::default()
        }),
    }
    for batch in &chunks {
        client.log_batch(run_id, batch)?;
    }
    Ok(())
}

/// What a trial run found by search tells of how far it got.
fn trial_run(r: &RunInfo) -> TrialRun {
    TrialRun {
        run_id: r.run_id.clone(),
        params_logged: r.tag(PARAMS_LOGGED).is_some(),
        logged: r.tag(LOGGED).and_then(|n| n.parse().ok()).unwrap_or(0),
        ended: r.status != "RUNNING",
        unsure: false,
    }
}

/// The tags a finished trial's run ends with: its status, why it stopped or failed, and its
/// PBT parent, lineage and final params.
fn end_tags(t: &Trial, scheduler: &str) -> Vec<(String, String)> {
    let mut tags = vec![("tune.status".to_string(), t.status.as_str().to_string())];
    match t.status {
        Status::Stopped => tags.push((
            "tune.stopped".into(),
            match t.last_step() {
                Some(step) => format!("stopped by {scheduler} at step {step}"),
                None => format!("stopped by {scheduler}"),
            },
        )),
        Status::Failed => {
            if let Some(e) = &t.error {
                tags.push(("tune.error".into(), e.chars().take(5000).collect()));
            }
        }
        _ => {}
    }
    if let Some(p) = t.parent {
        tags.push(("tune.parent_trial".into(), p.to_string()));
    }
    if !t.lineage.is_empty() {
        let steps: Vec<String> = t
            .lineage
            .iter()
            .map(|l| format!("step {} from trial {}", l.step, l.from))
            .collect();
        tags.push(("tune.lineage".into(), steps.join("; ")));
        for (k, v) in t.params.iter() {
            tags.push((format!("tune.final_params.{k}"), v.to_string()));
        }
    }
    tags
}

/// Sends `batch` to `run`, with the tags that say how far the run now is: its params logged
/// (`params_done`) and its whole results sent (`through`); `batch` is empty afterwards.
fn send_batch(
    client: &MlflowClient,
    batch: &mut Batch,
    run: &mut TrialRun,
    through: usize,
    params_done: bool,
) -> Result<(), MlflowError> {
    if params_done && !run.params_logged {
        batch.tags.push((PARAMS_LOGGED.into(), "true".into()));
    }
    if through != run.logged {
        batch.tags.push((LOGGED.into(), through.to_string()));
    }
    if !batch.is_empty() {
        client.log_batch(&run.run_id, batch)?;
    }
    run.logged = through;
    run.params_logged = params_done;
    *batch = Batch::default();
    Ok(())
}

/// Sends what `run` lacks of trial `t`.
fn sync_run(
    client: &MlflowClient,
    run: &mut TrialRun,
    t: &Trial,
    scheduler: &str,
    reported_at: &dyn Fn(usize) -> u64,
) -> Result<(), MlflowError> {
    if run.unsure {
        // A request got no answer: it may have been carried out.
        *run = trial_run(&client.get_run(&run.run_id)?);
    }
    // As few requests as MLflow's limits allow: params, results and end tags share them. Each
    // request carries the count of whole results sent so far (a result of more than 1,000 keys
    // spans requests, and only its last moves the count), so a sync cut off anywhere resumes
    // where MLflow is.
    let mut batch = Batch::default();
    let mut through = run.logged;
    let mut params_done = run.params_logged;
    if !params_done {
        // An exploited PBT trial's params changed; MLflow's are immutable, so the run keeps
        // the ones it started with, and the current ones go in tags at its end.
        for (k, v) in t.original_params().iter() {
            let value = v.to_string();
            if !batch.has_room(1, 0, 0, k.len() + value.len()) {
                send_batch(client, &mut batch, run, through, false)?;
            }
            batch.params.push((k.to_string(), value));
        }
        params_done = true;
    }
    for (i, r) in t.results.iter().enumerate().skip(run.logged) {
        let at = reported_at(i);
        for (key, value) in &r.metrics {
            if !batch.has_room(0, 1, 0, key.len()) {
                send_batch(client, &mut batch, run, through, params_done)?;
            }
            batch.metrics.push(MetricPoint {
                key: key.clone(),
                value: *value,
                timestamp: at,
                step: r.step,
            });
        }
        through = i + 1;
    }
    let ending = !run.ended && t.status.is_finished();
    if ending {
        for (k, v) in end_tags(t, scheduler) {
            if !batch.has_room(0, 0, 1, k.len() + v.len()) {
                send_batch(client, &mut batch, run, through, params_done)?;
            }
            batch.tags.push((k, v));
        }
    }
    send_batch(client, &mut batch, run, through, params_done)?;
    if ending {
        let status = match t.status {
            Status::Completed => "FINISHED",
            Status::Failed => "FAILED",
            _ => "KILLED",
        };
        client.update_run(&run.run_id, status, t.finished_at.unwrap_or_else(now_ms))?;
        run.ended = true;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_id_needs_no_quoting_in_a_search_filter() {
        assert_eq!(sweep_id("mnist", 1_700_000_000_000), "mnist-1700000000000");
        assert_eq!(sweep_id("it's a b/c", 5), "it_s_a_b_c-5");
    }
}
