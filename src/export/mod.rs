//! `tune export`: every trial as JSON or CSV, or as an Optuna journal.

mod optuna_journal;

pub use optuna_journal::write_optuna_journal;
pub use optuna_journal::OptunaDistribution;

use std::collections::BTreeMap;
use std::io::Write;

use serde_json::{json, Map, Value as Json};
use tune_search::{Space, TrialId};

use crate::spec::{Constraints, Goal};
use crate::trial::{rfc3339, Trial};

/// The remote worker (`host:pid`) of each attempt a `tune worker` ran, by (trial, attempt)
/// ([`crate::remote::ExperimentReader::attempt_workers`]); empty for a sweep run on one machine.
pub type AttemptWorkers = BTreeMap<(TrialId, u32), String>;

/// The keys an exported result has of its own, beside its metrics: a metric may not take one
/// (a report naming one fails its trial), or the export would lose it.
///
/// ```
/// assert!(tune::export::RESULT_KEYS.contains(&"seq"));
/// ```
pub const RESULT_KEYS: &[&str] = &["step", "seq", "attempt", "sweep_steps", "worker"];

/// One JSON object per trial: `{"id", "status", "params", "value", "results": [{"step", "seq",
/// "attempt", "sweep_steps", <metric>: ..}, ..], "attempts", "device", "started_at",
/// "finished_at", "error"}`; a result's `sweep_steps` is the steps the whole sweep had trained
/// when it arrived ([`crate::budget_by_seq`]).
/// With `algorithm = "auto"` a trial gets `"suggested_by"`: `{"algorithm", "reason"}`; one
/// whose machine was lost (a worker's lease ran out), `"lost_attempts"`.
/// Where `workers` names the worker of an attempt, the trial gets `"worker"` (its last
/// attempt's) and each result of that attempt its `"worker"`. `value` is the first
/// objective's; with several, a trial also gets `"values"` (each objective's last value, by
/// name) and `"pareto_optimal"` (on the front of [`crate::pareto_front`]). With
/// `[constraints]`, a trial that reported gets `"violation"` and `"feasible"`
/// ([`Constraints::violation`]).
///
/// ```
/// let t = tune::Trial::new(0, tune::Params::default());
/// let loss = tune::Goal { metric: "loss".into(), mode: tune::Mode::Min };
/// let json = tune::export::to_json(&[t], &[loss], &Default::default(), &Default::default());
/// assert_eq!(json[0]["status"], "pending");
/// assert!(json[0]["value"].is_null());
/// ```
pub fn to_json(
    trials: &[Trial],
    objectives: &[Goal],
    constraints: &Constraints,
    workers: &AttemptWorkers,
) -> Json {
    let metric = objectives.first().map_or("", |o| o.metric.as_str());
    let front = front_ids(trials, objectives, constraints);
    let budget = crate::budget_by_seq(trials);
    Json::Array(
        trials
            .iter()
            .map(|t| {
                let results: Vec<Json> = t
                    .results
                    .iter()
                    .map(|r| {
                        let mut o = Map::new();
                        o.insert("step".into(), json!(r.step));
                        o.insert("seq".into(), json!(r.seq));
                        o.insert("attempt".into(), json!(r.attempt));
                        o.insert("sweep_steps".into(), json!(budget.get(&r.seq)));
                        if let Some(w) = workers.get(&(t.id, r.attempt)) {
                            o.insert("worker".into(), json!(w));
                        }
                        for (k, v) in &r.metrics {
                            o.entry(k.clone()).or_insert(json!(v));
                        }
                        Json::Object(o)
                    })
                    .collect();
                let mut trial = json!({
                    "id": t.id,
                    "status": t.status.as_str(),
                    "params": t.params,
                    "value": t.value(metric),
                    "results": results,
                    "attempts": t.attempts,
                    "device": t.device,
                    "parent": t.parent,
                    "lineage": t.lineage,
                    "started_at": t.started_at.map(rfc3339),
                    "finished_at": t.finished_at.map(rfc3339),
                    "error": t.error,
                });
                if let Some(w) = workers.get(&(t.id, t.attempts)) {
                    trial["worker"] = json!(w);
                }
                if t.lost_attempts > 0 {
                    trial["lost_attempts"] = json!(t.lost_attempts);
                }
                if let Some(choice) = &t.suggested_by {
                    trial["suggested_by"] = json!(choice);
                }
                if let Some(front) = &front {
                    let values: Map<String, Json> = objectives
                        .iter()
                        .map(|o| (o.metric.clone(), json!(t.value(&o.metric))))
                        .collect();
                    trial["values"] = Json::Object(values);
                    trial["pareto_optimal"] = json!(front.contains(&t.id));
                }
                if !constraints.is_empty() && !t.results.is_empty() {
                    let violation = constraints.violation(t);
                    // JSON has no infinity: a report without a constrained key is null.
                    trial["violation"] = json!(violation.is_finite().then_some(violation));
                    trial["feasible"] = json!(violation == 0.0);
                }
                trial
            })
            .collect(),
    )
}

/// The ids on the Pareto front, for a sweep with several objectives (`None` with one).
fn front_ids(
    trials: &[Trial],
    objectives: &[Goal],
    constraints: &Constraints,
) -> Option<Vec<TrialId>> {
    (objectives.len() > 1).then(|| {
        crate::pareto_front(trials, objectives, constraints)
            .iter()
            .map(|t| t.id)
            .collect()
    })
}

/// One row per trial: id, status, value, last step, attempts, times, error, then one
/// `params.<name>` column per parameter of the space (empty where inactive). With several
/// objectives, `value` is the first's, and `values.<metric>` columns (each objective's) and
/// `pareto_optimal` follow `error`.
pub fn write_csv(
    out: &mut impl Write,
    trials: &[Trial],
    space: &Space,
    objectives: &[Goal],
    constraints: &Constraints,
) -> std::io::Result<()> {
    let metric = objectives.first().map_or("", |o| o.metric.as_str());
    let front = front_ids(trials, objectives, constraints);
    let names: Vec<&str> = space.params().iter().map(|p| p.name.as_str()).collect();
    let mut header = vec![
        "id",
        "status",
        "value",
        "last_step",
        "attempts",
        "started_at",
        "finished_at",
        "error",
    ]
    .into_iter()
    .map(String::from)
    .collect::<Vec<_>>();
    if front.is_some() {
        header.extend(objectives.iter().map(|o| format!("values.{}", o.metric)));
        header.push("pareto_optimal".into());
    }
    if !constraints.is_empty() {
        header.push("violation".into());
    }
    header.extend(names.iter().map(|n| format!("params.{n}")));
    write_csv_row(out, &header)?;
    for t in trials {
        let mut row = vec![
            t.id.to_string(),
            t.status.as_str().to_string(),
            t.value(metric).map(|v| v.to_string()).unwrap_or_default(),
            t.last_step().map(|s| s.to_string()).unwrap_or_default(),
            t.attempts.to_string(),
            t.started_at.map(rfc3339).unwrap_or_default(),
            t.finished_at.map(rfc3339).unwrap_or_default(),
            t.error.clone().unwrap_or_default(),
        ];
        if let Some(front) = &front {
            row.extend(objectives.iter().map(|o| {
                t.value(&o.metric)
                    .map(|v| v.to_string())
                    .unwrap_or_default()
            }));
            row.push(front.contains(&t.id).to_string());
        }
        if !constraints.is_empty() {
            let v = constraints.violation(t);
            row.push(if t.results.is_empty() || !v.is_finite() {
                String::new()
            } else {
                v.to_string()
            });
        }
        row.extend(
            names
                .iter()
                .map(|n| t.params.get(n).map(|v| v.to_string()).unwrap_or_default()),
        );
        write_csv_row(out, &row)?;
    }
    Ok(())
}

/// One CSV line of `fields`.
fn write_csv_row(out: &mut impl Write, fields: &[String]) -> std::io::Result<()> {
    let fields: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
    writeln!(out, "{}", fields.join(","))
}

/// RFC 4180 quoting.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_what_needs_it() {
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\"\nbye"), "\"say \"\"hi\"\"\nbye\"");
    }
}
