//! `[objective]`: what a trial runs, as the spec file says it, and the checks only the
//! objective knows (placeholders name parameters; a built-in trainable's keys and metric).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tune_search::{did_you_mean, did_you_mean_hint, Domain, FieldError, Params, Space, Value};

use super::command::{Launcher, LAUNCH_PLACEHOLDERS};
use super::placeholders;

/// `[objective]`: a command run once per trial, or a built-in Candle trainable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObjectiveSpec {
    /// argv with `{param}` placeholders; never a shell string.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// A built-in trainable: `"mlp"` or `"cnn"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub builtin: Option<String>,
    /// Wall-clock limit of one trial attempt, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<f64>,
    /// Extra environment variables for the command.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Where the command runs: relative paths are taken from the spec file's folder, which is
    /// also the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<PathBuf>,
    /// Who starts a distributed trial's processes: `"tune"` starts `processes_per_node` copies
    /// of the command with `RANK`, `LOCAL_RANK` and `WORLD_SIZE` set; left out, the command
    /// is started once per machine and is the launcher itself (torchrun, deepspeed, mpirun).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher: Option<String>,
    /// The built-in trainable's other keys: its data (`dataset = "digits"`) and fixed
    /// hyperparameters (`epochs = 30`). Any key is rejected for a command.
    #[serde(flatten)]
    pub options: BTreeMap<String, toml::Value>,
}

/// The keys `[objective]` itself defines (the rest belong to a built-in trainable).
/// Why a build without the `builtin` feature refuses `[objective] builtin`.
pub(crate) const NO_BUILTIN: &str =
    "this build of tune has no built-in trainables (it was built without the `builtin` feature)";

const OBJECTIVE_KEYS: [&str; 6] = [
    "command",
    "builtin",
    "timeout_s",
    "env",
    "workdir",
    "launcher",
];

/// What a built-in trainable reports each epoch (candidates for `metric`); `n_params` is the
/// model's size (its trained weights), an objective to trade against accuracy.
pub const BUILTIN_METRICS: [&str; 5] = ["val_loss", "val_accuracy", "train_loss", "lr", "n_params"];

/// A problem with the objective, and the section of the spec it is in (`objective`, `space`
/// or the top level, "").
pub(crate) type Problem = (&'static str, FieldError);

impl ObjectiveSpec {
    /// Checks what serde cannot, against the sweep's `space` and `metric`, for trials that
    /// are `distributed` (several processes, GPUs or machines each) or not.
    pub(crate) fn validate(
        &self,
        space: &Space,
        metric: &str,
        distributed: bool,
    ) -> Result<(), Problem> {
        let in_objective = |e: FieldError| ("objective", e);
        if self.builtin.is_some() {
            if self.launcher.is_some() {
                return Err(in_objective(FieldError::new(
                    "launcher",
                    "a launcher starts a command's processes: a built-in trainable has none",
                )));
            }
            return self.validate_builtin(space, metric);
        }
        self.launcher().map_err(in_objective)?;
        if let Some(key) = self.options.keys().next() {
            return Err(in_objective(FieldError::new(
                key,
                unknown_key(key, &OBJECTIVE_KEYS),
            )));
        }
        if self.command.is_empty() {
            return Err(in_objective(FieldError::new(
                "command",
                "expected a non-empty argv list like [\"python3\", \"train.py\"], or `builtin = \"mlp\"`",
            )));
        }
        if let Some(t) = self.timeout_s {
            crate::seconds::checked("timeout_s", t, false).map_err(in_objective)?;
        }
        let names: Vec<&str> = space.params().iter().map(|p| p.name.as_str()).collect();
        if distributed {
            if let Some(name) = names.iter().find(|n| LAUNCH_PLACEHOLDERS.contains(n)) {
                return Err((
                    "space",
                    FieldError::new(
                        *name,
                        format!(
                            "`{name}` is a placeholder of distributed trials ([resources] sets \
                         it): give the parameter another name"
                        ),
                    ),
                ));
            }
        }
        for arg in &self.command {
            let found =
                placeholders(arg).map_err(|m| in_objective(FieldError::new("command", m)))?;
            for placeholder in found {
                if LAUNCH_PLACEHOLDERS.contains(&placeholder) && !names.contains(&placeholder) {
                    if distributed {
                        continue;
                    }
                    return Err(in_objective(FieldError::new(
                        "command",
                        format!(
                            "placeholder `{{{placeholder}}}` in \"{arg}\" has a value only for \
                             distributed trials: set [resources] processes_per_node, \
                             gpus_per_trial or nodes_per_trial"
                        ),
                    )));
                }
                if !names.contains(&placeholder) {
                    let hint = did_you_mean(placeholder, names.iter().copied())
                        .map(|s| format!(" (did you mean `{{{s}}}`?)"))
                        .unwrap_or_default();
                    return Err(in_objective(FieldError::new(
                        "command",
                        format!("placeholder `{{{placeholder}}}` in \"{arg}\" names no parameter of [space]{hint}"),
                    )));
                }
            }
        }
        Ok(())
    }

    /// Who starts the command's processes ([`Launcher`]).
    pub(crate) fn launcher(&self) -> Result<Launcher, FieldError> {
        match self.launcher.as_deref() {
            None => Ok(Launcher::Command),
            Some("tune") => Ok(Launcher::Tune),
            Some(other) => Err(FieldError::new(
                "launcher",
                format!(
                    "expected \"tune\" (tune starts each process), or no `launcher` (the \
                     command starts them, as torchrun does), found {other:?}"
                ),
            )),
        }
    }

    fn validate_builtin(&self, space: &Space, metric: &str) -> Result<(), Problem> {
        use tune_trials::{Builtin, DataSpec, TrainConfig, DATA_KEYS, TRAIN_KEYS};
        let name = self.builtin.as_deref().unwrap_or_default();
        let problem =
            |section, key: &str, message: String| (section, FieldError::new(key, message));
        if cfg!(not(feature = "builtin")) {
            return Err(problem("objective", "builtin", NO_BUILTIN.into()));
        }
        let builtin = name.parse::<Builtin>().map_err(|e| {
            problem(
                "objective",
                "builtin",
                e.to_string().replace("builtin: ", ""),
            )
        })?;
        if !self.command.is_empty() {
            return Err(problem(
                "objective",
                "command",
                "give either `command` or `builtin`, not both".into(),
            ));
        }
        let known: Vec<&str> = OBJECTIVE_KEYS
            .iter()
            .chain(&DATA_KEYS)
            .chain(&TRAIN_KEYS)
            .copied()
            .collect();
        for key in self.options.keys() {
            if !known.contains(&key.as_str()) {
                return Err(problem("objective", key, unknown_key(key, &known)));
            }
        }
        let (data, fixed) = self.builtin_options();
        for (key, value) in &data {
            let one = toml::Value::Table(toml::Table::from_iter([(key.clone(), value.clone())]));
            one.try_into::<DataSpec>()
                .map_err(|e| problem("objective", key, e.message().trim().to_string()))?;
        }
        let spec: DataSpec = toml::Value::Table(data)
            .try_into()
            .map_err(|e| problem("objective", "builtin", e.message().trim().to_string()))?;
        spec.check_for(builtin).map_err(|e| match e {
            tune_trials::TrialsError::Key { key, message } => problem("objective", key, message),
            other => problem("objective", "dataset", other.to_string()),
        })?;
        for (key, value) in &fixed {
            let one = serde_json::Map::from_iter([(key.clone(), value.clone())]);
            TrainConfig::from_parts(&one, &Params::default())
                .map_err(|e| problem("objective", key, e.to_string()))?;
        }
        // Every [space] entry is a hyperparameter; try each one's edge values.
        for param in space.params() {
            let without: serde_json::Map<_, _> = fixed
                .iter()
                .filter(|(k, _)| **k != param.name)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            for value in edge_values(&param.domain) {
                let mut params = Params::default();
                params.insert(param.name.clone(), value);
                TrainConfig::from_parts(&without, &params)
                    .map_err(|e| problem("space", &param.name, e.to_string()))?;
            }
        }
        if !BUILTIN_METRICS.contains(&metric) {
            let hint = did_you_mean_hint(metric, BUILTIN_METRICS);
            return Err(problem(
                "",
                "metric",
                format!(
                    "the `{name}` trainable reports {}, not \"{metric}\"{hint}",
                    BUILTIN_METRICS.join(", "),
                ),
            ));
        }
        Ok(())
    }

    /// A built-in objective's options split into data keys (TOML) and fixed hyperparameters
    /// (JSON, as [`tune_trials::TrainConfig::from_parts`] takes them).
    pub(crate) fn builtin_options(
        &self,
    ) -> (toml::Table, serde_json::Map<String, serde_json::Value>) {
        let mut data = toml::Table::new();
        let mut fixed = serde_json::Map::new();
        for (key, value) in &self.options {
            if tune_trials::DATA_KEYS.contains(&key.as_str()) {
                data.insert(key.clone(), value.clone());
            } else {
                fixed.insert(key.clone(), toml_to_json(value));
            }
        }
        (data, fixed)
    }
}

/// A TOML value as JSON (dates become their TOML text).
fn toml_to_json(value: &toml::Value) -> serde_json::Value {
    match value {
        toml::Value::String(s) => s.clone().into(),
        toml::Value::Integer(i) => (*i).into(),
        toml::Value::Float(f) => serde_json::Number::from_f64(*f)
            .map_or(serde_json::Value::Null, serde_json::Value::Number),
        toml::Value::Boolean(b) => (*b).into(),
        toml::Value::Datetime(d) => d.to_string().into(),
        toml::Value::Array(a) => a.iter().map(toml_to_json).collect(),
        toml::Value::Table(t) => t
            .iter()
            .map(|(k, v)| (k.clone(), toml_to_json(v)))
            .collect::<serde_json::Map<_, _>>()
            .into(),
    }
}

/// "unknown key", with the nearest known one when it looks like a typo.
fn unknown_key(key: &str, known: &[&str]) -> String {
    match did_you_mean(key, known.iter().copied()) {
        Some(s) => format!("unknown key `{key}` (did you mean `{s}`?)"),
        None => format!("unknown key `{key}`; expected one of {}", known.join(", ")),
    }
}

/// Values at a domain's edges, enough to catch a wrong type or an out-of-range bound.
fn edge_values(domain: &Domain) -> Vec<Value> {
    match domain {
        Domain::Uniform { low, .. }
        | Domain::LogUniform { low, .. }
        | Domain::QUniform { low, .. }
        | Domain::QLogUniform { low, .. } => vec![Value::Float(*low)],
        Domain::Normal { mu, .. } => vec![Value::Float(*mu)],
        Domain::Int { low, high, .. } => vec![Value::Int(*low), Value::Int(*high)],
        Domain::Choice(values) | Domain::Grid(values) => values.clone(),
    }
}
