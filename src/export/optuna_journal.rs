//! `tune export --format optuna-journal`: a sweep as the log of Optuna's `JournalStorage`
//! (`JournalFileBackend`), so that `optuna-dashboard sweep.log` and `optuna.load_study` read
//! it. One `CREATE_STUDY` record, then one `CREATE_TRIAL` record per trial carrying its state,
//! params with their distributions, intermediate values and value (the op codes and fields of
//! optuna/storages/journal/_storage.py, Optuna 5). With several objectives, the study has a
//! direction each and a trial its values; with `[constraints]`, a trial carries its constraint
//! values where Optuna keeps them (system attribute `constraints`), so that `best_trials` and
//! optuna-dashboard see which trials are feasible.

use std::io::Write;

use serde_json::{json, Map, Value as Json};
use tune_search::{Domain, Mode, Space, Status, Value};

use crate::spec::{Constraints, Goal};
use crate::trial::{rfc3339, Trial};

/// Optuna's `JournalOperation` codes used here.
const CREATE_STUDY: u8 = 0;
const CREATE_TRIAL: u8 = 4;

/// Optuna's `TrialState`.
fn state(status: Status) -> u8 {
    match status {
        Status::Running => 0,
        Status::Completed => 1,
        // Ended early by the scheduler: what Optuna calls pruned.
        Status::Stopped => 2,
        Status::Failed => 3,
        // Not running now: waiting for a slot (or for the scheduler, when paused).
        Status::Pending | Status::Paused => 4,
    }
}

/// Writes `trials` of the sweep `name` as an Optuna journal, one JSON record per line.
///
/// ```
/// let space = tune::Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
/// let mut t = tune::Trial::new(0, tune::Params::default());
/// t.params.insert("x", tune::Value::Float(0.5));
/// let mut out = Vec::new();
/// let loss = tune::Goal { metric: "loss".into(), mode: tune::Mode::Min };
/// tune::export::write_optuna_journal(&mut out, "demo", &[t], &space, &[loss], &Default::default())
///     .unwrap();
/// let text = String::from_utf8(out).unwrap();
/// assert!(text.lines().next().unwrap().contains("\"study_name\":\"demo\""));
/// assert!(text.contains("FloatDistribution"));
/// ```
pub fn write_optuna_journal(
    out: &mut impl Write,
    name: &str,
    trials: &[Trial],
    space: &Space,
    objectives: &[Goal],
    constraints: &Constraints,
) -> std::io::Result<()> {
    let directions: Vec<u8> = objectives
        .iter()
        .map(|o| match o.mode {
            Mode::Min => 1,
            Mode::Max => 2,
        })
        .collect();
    let study = json!({
        "op_code": CREATE_STUDY,
        "worker_id": "tune",
        "study_name": name,
        "directions": directions,
    });
    writeln!(out, "{study}")?;
    let distributions: Map<String, Json> = space
        .params()
        .iter()
        // As Optuna stores them: each distribution a JSON text inside the record.
        .map(|p| {
            let text = OptunaDistribution::of(&p.domain, &p.name, trials)
                .to_json()
                .to_string();
            (p.name.clone(), Json::String(text))
        })
        .collect();
    for t in trials {
        let record = trial_record(t, &distributions, space, objectives, constraints);
        writeln!(out, "{record}")?;
    }
    Ok(())
}

fn trial_record(
    t: &Trial,
    distributions: &Map<String, Json>,
    space: &Space,
    objectives: &[Goal],
    constraints: &Constraints,
) -> Json {
    let metric = objectives.first().map_or("", |o| o.metric.as_str());
    let mut params = Map::new();
    let mut used = Map::new();
    for p in space.params() {
        let Some(value) = t.params.get(&p.name) else {
            continue; // inactive (a conditional parameter)
        };
        params.insert(p.name.clone(), internal(&p.domain, value));
        used.insert(p.name.clone(), distributions[&p.name].clone());
    }
    // Optuna keeps one value per step: a step redone after a restart keeps its last report.
    // (Optuna reports intermediate values for one objective only.)
    let mut intermediate = Map::new();
    for r in t.results.iter().filter(|_| objectives.len() == 1) {
        if let Some(v) = r.metrics.get(metric) {
            intermediate.insert(r.step.to_string(), json!(v));
        }
    }
    let values = match t.status {
        // A pruned trial's value is its last intermediate value, as Optuna's `tell` sets it.
        Status::Completed | Status::Stopped => objectives
            .iter()
            .map(|o| t.value(&o.metric))
            .collect::<Option<Vec<f64>>>()
            .map(|v| json!(v)),
        _ => None,
    };
    let mut system = Map::new();
    if let Some(Ok(c)) = t
        .results
        .last()
        .filter(|_| !constraints.is_empty())
        .map(|r| constraints.values(&r.metrics))
    {
        system.insert("constraints".into(), json!(c));
    }
    let mut attrs = Map::new();
    attrs.insert("tune_id".into(), json!(t.id));
    attrs.insert("tune_status".into(), json!(t.status.as_str()));
    if let Some(e) = &t.error {
        attrs.insert("error".into(), json!(e));
    }
    let iso = |ms: u64| rfc3339(ms).replace('Z', "+00:00");
    let mut record = json!({
        "op_code": CREATE_TRIAL,
        "worker_id": "tune",
        "study_id": 0,
        "state": state(t.status),
        "datetime_start": t.started_at.map(iso),
        "params": params,
        "distributions": used,
        "intermediate_values": intermediate,
        "user_attrs": attrs,
        "system_attrs": system,
        "value": null,
        "values": values,
    });
    if t.status.is_finished() {
        let end = t.finished_at.or(t.started_at).unwrap_or(t.created_at);
        record["datetime_complete"] = json!(iso(end));
    }
    record
}

/// A parameter's distribution as Optuna sees it (optuna/distributions.py): what the journal
/// records and what PED-ANOVA importances (`tune plot`) discretise.
#[derive(Debug, Clone, PartialEq)]
pub enum OptunaDistribution {
    Float {
        low: f64,
        high: f64,
        log: bool,
        step: Option<f64>,
    },
    Int {
        low: i64,
        high: i64,
        log: bool,
        step: i64,
    },
    Categorical(Vec<Value>),
}

impl OptunaDistribution {
    /// The distribution of parameter `name`. Optuna has no unbounded normal: it becomes a
    /// float range holding every value `trials` drew (and mu +- 3 sigma).
    pub fn of(domain: &Domain, name: &str, trials: &[Trial]) -> OptunaDistribution {
        let float = |low: f64, high: f64, log: bool, step: Option<f64>| OptunaDistribution::Float {
            low,
            high,
            log,
            step,
        };
        match domain {
            Domain::Uniform { low, high } => float(*low, *high, false, None),
            Domain::LogUniform { low, high } => float(*low, *high, true, None),
            // Optuna requires high - low to be a multiple of the step: the largest one that is.
            Domain::QUniform { low, q, .. } => {
                let top = domain
                    .highest_step()
                    .and_then(|v| v.as_f64())
                    .unwrap_or(*low);
                float(*low, top, false, Some(*q))
            }
            // Optuna has no stepped log range: the log range itself.
            Domain::QLogUniform { low, high, .. } => float(*low, *high, true, None),
            Domain::Int { low, step, log, .. } => OptunaDistribution::Int {
                low: *low,
                high: match domain.highest_step() {
                    Some(Value::Int(h)) => h,
                    _ => *low,
                },
                log: *log,
                step: *step,
            },
            Domain::Normal { mu, sigma } => {
                let drawn = trials
                    .iter()
                    .filter_map(|t| t.params.get(name).and_then(Value::as_f64));
                let (low, high) = drawn.fold((mu - 3.0 * sigma, mu + 3.0 * sigma), |(l, h), x| {
                    (l.min(x), h.max(x))
                });
                float(low, high, false, None)
            }
            Domain::Choice(choices) | Domain::Grid(choices) => {
                OptunaDistribution::Categorical(choices.clone())
            }
        }
    }

    /// As `distribution_to_json` writes it.
    fn to_json(&self) -> Json {
        match self {
            OptunaDistribution::Float {
                low,
                high,
                log,
                step,
            } => json!({"name": "FloatDistribution",
                        "attributes": {"low": low, "high": high, "log": log, "step": step}}),
            OptunaDistribution::Int {
                low,
                high,
                log,
                step,
            } => json!({"name": "IntDistribution",
                        "attributes": {"low": low, "high": high, "log": log, "step": step}}),
            OptunaDistribution::Categorical(choices) => {
                json!({"name": "CategoricalDistribution", "attributes": {"choices": choices}})
            }
        }
    }
}

/// A param value in Optuna's internal representation: a categorical's index, else the number.
fn internal(domain: &Domain, value: &Value) -> Json {
    match domain {
        Domain::Choice(choices) | Domain::Grid(choices) => {
            json!(choices.iter().position(|c| c == value).unwrap_or(0))
        }
        _ => json!(value),
    }
}
