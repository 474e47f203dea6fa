//! The experiment spec: what `space.toml` says, validated, and what the store freezes.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::stop::StopConditions;
use serde::{Deserialize, Serialize};
use tune_schedulers::{
    AshaConfig, Fifo, HyperBand, HyperBandConfig, MedianConfig, MedianStopping, Pbt, PbtConfig,
    Scheduler,
};
use tune_search::gp::{ConditionalSpace, GpOptions, GpSearch, UnitSpace};
use tune_search::{
    AutoOptions, AutoSearch, Domain, EarlyStopping, FieldError, GridSearch, Mode, NoGridParams,
    Nsga2, Nsga2Options, Params, PointError, PriorTrial, RandomSearch, Searcher, Space, SweepShape,
    Tpe, TpeOptions, WithInitialPoints, WithPriorTrials,
};

/// Why a spec's search algorithm cannot search its space.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SearcherError {
    #[error(transparent)]
    NoGridParams(#[from] NoGridParams),
    #[error(transparent)]
    Conditional(#[from] ConditionalSpace),
    #[error("[[search.initial]] point {number}: {error}")]
    InitialPoint { number: usize, error: PointError },
}

pub use crate::objective::spec::ObjectiveSpec;
pub use constraints::{Bound, Constraints};
pub use located::SpecError;
pub use objectives::Goal;

mod constraints;
mod located;
mod objectives;
mod resources;
mod scheduler;
mod search;
#[cfg(test)]
mod tests;
mod tracking;

pub use resources::{Fuse, Gpus, Resources};
pub use scheduler::{RaisedMaxT, SchedulerSpec};
pub use search::{Algorithm, Search, SearchSpec, WarmStart};
pub use tracking::{check_mlflow_url, CheckpointPlace, MlflowServer, StoreSpec, TrackingSpec};

/// A whole sweep: metric, budget, search, scheduler, resources, objective and space.
///
/// ```
/// let spec = tune::ExperimentSpec::from_toml(r#"
///     name = "quadratic"
///     metric = "loss"
///     samples = 20
///     [objective]
///     command = ["python3", "objective.py", "--x", "{x}"]
///     [space]
///     x = { uniform = [-5.0, 10.0] }
/// "#, "space.toml".as_ref()).unwrap();
/// assert_eq!(spec.samples, 20);
/// assert_eq!(spec.mode, tune::Mode::Min);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentSpec {
    /// Names the experiment folder (`runs/<name>` unless `--dir` says otherwise).
    pub name: String,
    /// The reported key that is optimised; with several objectives, the first.
    pub metric: String,
    #[serde(default = "default_mode")]
    pub mode: Mode,
    /// With several objectives (`metric = ["val_loss", "latency_ms"]`, `mode = ["min",
    /// "min"]`), every one in order, `metric` and `mode` being the first's; empty with one.
    /// [`ExperimentSpec::objectives`] gives them in either case.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objectives: Vec<Goal>,
    /// `[constraints]`: reported keys a trial must keep within bounds to count as feasible.
    #[serde(default, skip_serializing_if = "Constraints::is_empty")]
    pub constraints: Constraints,
    /// Trials to create (grid search: repeats of the whole grid).
    pub samples: u64,
    #[serde(default)]
    pub seed: u64,
    /// How many times a failed trial is retried before it stays failed (Ray Tune's
    /// `FailureConfig.max_failures`).
    #[serde(default)]
    pub max_failures: u32,
    /// How many times a trial whose machine was lost (a `tune worker` that stopped renewing
    /// its lease: killed, preempted, cut off) runs again elsewhere before it fails. Such an
    /// attempt is not the trial's fault, so `max_failures` does not count it.
    #[serde(default = "default_max_lost_attempts")]
    pub max_lost_attempts: u32,
    #[serde(default)]
    pub search: Search,
    #[serde(default, deserialize_with = "scheduler_naming_the_key")]
    pub scheduler: SchedulerSpec,
    #[serde(default)]
    pub resources: Resources,
    /// `[stop]`: when the sweep ends before its budget is spent.
    #[serde(default)]
    pub stop: StopConditions,
    /// How a trial runs; `None` for experiments driven by a Rust closure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objective: Option<ObjectiveSpec>,
    /// `[store]`: where trial folders go when not in the experiment folder.
    #[serde(default, skip_serializing_if = "StoreSpec::is_default")]
    pub store: StoreSpec,
    /// `[tracking]`: where results are copied as they arrive.
    #[serde(default, skip_serializing_if = "TrackingSpec::is_default")]
    pub tracking: TrackingSpec,
    pub space: Space,
}

fn default_mode() -> Mode {
    Mode::Min
}

/// Reads an internally tagged table (`[search]` by `algorithm`, `[scheduler]` by `kind`).
/// serde reads such a table through a buffer, and its type errors lose the key ("invalid
/// type: string "yes", expected a boolean"), so on such an error each key is read again
/// alone with the tag, and the first that fails names itself. (Unknown fields and variants,
/// and a missing tag, already say what they are.)
fn tagged_naming_the_key<T: serde::de::DeserializeOwned>(
    table: toml::Table,
    tag: &str,
) -> Result<T, String> {
    T::deserialize(toml::Value::Table(table.clone())).map_err(|e| {
        let message = e.to_string();
        let Some(tag_value) = table.get(tag).filter(|_| message.starts_with("invalid ")) else {
            return message;
        };
        let culprit = table
            .iter()
            .filter(|(key, _)| *key != tag)
            .find(|(key, value)| {
                let alone = toml::Table::from_iter([
                    (tag.to_string(), tag_value.clone()),
                    ((*key).clone(), (*value).clone()),
                ]);
                T::deserialize(toml::Value::Table(alone)).is_err()
            });
        match culprit {
            Some((key, _)) => format!("`{key}`: {message}"),
            None => message,
        }
    })
}

/// `max_lost_attempts` when unset: a machine lost three times over is more likely the
/// trial's doing (it runs its machine out of memory) than chance.
pub const DEFAULT_MAX_LOST_ATTEMPTS: u32 = 3;

fn default_max_lost_attempts() -> u32 {
    DEFAULT_MAX_LOST_ATTEMPTS
}

fn scheduler_naming_the_key<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<SchedulerSpec, D::Error> {
    use serde::de::Error;
    tagged_naming_the_key(table_without_nulls(d)?, "kind").map_err(D::Error::custom)
}

/// A table read as TOML values, a null (an unset setting in the stored JSON copy) as left out.
fn table_without_nulls<'de, D: serde::Deserializer<'de>>(d: D) -> Result<toml::Table, D::Error> {
    let read = std::collections::BTreeMap::<String, Option<toml::Value>>::deserialize(d)?;
    Ok(read
        .into_iter()
        .filter_map(|(key, value)| Some((key, value?)))
        .collect())
}

/// A setting that cannot be used, and the section it is in ("" for the top level). The one
/// wording of such errors, for spec files ([`SpecError`] adds the place) and the Rust API.
///
/// ```
/// use tune::InvalidSetting;
/// let e = InvalidSetting::new("scheduler", tune_search::FieldError::new("max_t", "expected at least 1, found 0"));
/// assert_eq!(e.to_string(), "[scheduler] `max_t`: expected at least 1, found 0");
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct InvalidSetting {
    pub section: &'static str,
    pub field: FieldError,
}

impl InvalidSetting {
    pub fn new(section: &'static str, field: FieldError) -> InvalidSetting {
        InvalidSetting { section, field }
    }
}

impl fmt::Display for InvalidSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.section {
            "" => write!(f, "{}", self.field),
            section => write!(f, "[{section}] {}", self.field),
        }
    }
}

impl ExperimentSpec {
    /// Reads and validates a spec file, returning it with the file's text (kept verbatim as
    /// the experiment's frozen copy). The objective's working folder defaults to the file's.
    pub fn read(path: &Path) -> Result<(ExperimentSpec, String), SpecError> {
        let text = std::fs::read_to_string(path).map_err(|e| SpecError {
            file: path.to_path_buf(),
            location: None,
            message: format!("cannot read the file: {e}"),
            snippet: None,
        })?;
        let mut spec = Self::from_toml(&text, path)?;
        let base = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let base = std::fs::canonicalize(base).unwrap_or_else(|_| base.to_path_buf());
        let shared = match spec.store.checkpoints.as_mut() {
            Some(CheckpointPlace::Folder(folder)) => Some(folder),
            _ => None,
        };
        for folder in [shared, spec.tracking.tensorboard.as_mut()]
            .into_iter()
            .flatten()
        {
            if folder.is_relative() {
                *folder = base.join(&*folder);
            }
        }
        if let Some(obj) = spec.objective.as_mut() {
            obj.workdir = Some(match obj.workdir.take() {
                Some(w) if w.is_absolute() => w,
                Some(w) => base.join(w),
                None => base,
            });
        }
        Ok((spec, text))
    }

    /// Every objective, in order: `metric` and `mode` alone for a sweep with one.
    pub fn objectives(&self) -> Vec<Goal> {
        if self.objectives.is_empty() {
            vec![Goal {
                metric: self.metric.clone(),
                mode: self.mode,
            }]
        } else {
            self.objectives.clone()
        }
    }

    /// Parses and validates spec text; `file` only names the source in errors.
    pub fn from_toml(text: &str, file: &Path) -> Result<ExperimentSpec, SpecError> {
        let mut table: toml::Table =
            toml::from_str(text).map_err(|e| SpecError::parse(text, file, &e))?;
        let lists = ["metric", "mode"]
            .iter()
            .any(|k| table.get(*k).is_some_and(toml::Value::is_array));
        let spec: ExperimentSpec = if lists {
            objectives::split_objective_lists(&mut table)
                .map_err(|invalid| SpecError::invalid(text, file, &invalid))?;
            // Read from the rewritten table: serde's errors lose their line here, and keep
            // their message.
            ExperimentSpec::deserialize(toml::Value::Table(table))
                .map_err(|e| SpecError::parse(text, file, &e))?
        } else {
            toml::from_str(text).map_err(|e| SpecError::parse(text, file, &e))?
        };
        spec.validate()
            .map_err(|invalid| SpecError::invalid(text, file, &invalid))?;
        Ok(spec)
    }

    /// Checks what serde cannot: names, ranges (each config checks its own), placeholders, a
    /// built-in trainable's keys.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        self.validate_top()?;
        self.validate_store_and_tracking()?;
        self.validate_resources()?;
        self.validate_grid()?;
        self.validate_initial()?;
        self.validate_warm_start()?;
        self.validate_algorithm()?;
        self.scheduler
            .validate()
            .map_err(|e| InvalidSetting::new("scheduler", e))?;
        self.stop
            .validate()
            .map_err(|e| InvalidSetting::new("stop", e))?;
        self.validate_objectives()?;
        self.validate_constraints()?;
        if let Some(obj) = &self.objective {
            for o in self.objectives() {
                obj.validate(&self.space, &o.metric, self.resources.distributed())
                    .map_err(|(section, e)| InvalidSetting::new(section, e))?;
            }
        }
        Ok(())
    }

    /// The top-level keys: `name`, `metric`, `samples`.
    fn validate_top(&self) -> Result<(), InvalidSetting> {
        let top = |e| InvalidSetting::new("", e);
        // The name is a folder (and a database key): what no file system takes is input.
        if self.name.is_empty()
            || self.name.contains(['/', '\\'])
            || self.name.chars().any(char::is_control)
            || self.name.len() > 255
            || self.name == "."
            || self.name == ".."
        {
            return Err(top(FieldError::new(
                "name",
                format!(
                    "expected a folder name without slashes or control characters, at most 255 \
                     bytes, found {:?}",
                    self.name
                ),
            )));
        }
        if self.metric.is_empty() {
            return Err(top(FieldError::new(
                "metric",
                "expected the name of a reported key, found an empty string",
            )));
        }
        if self.samples == 0 {
            return Err(top(FieldError::new(
                "samples",
                "expected at least 1 trial, found 0",
            )));
        }
        Ok(())
    }

    /// `[constraints]`: bounds that make sense, keys a built-in trainable reports, no warm
    /// start (its trials carry no constraint values).
    fn validate_constraints(&self) -> Result<(), InvalidSetting> {
        let at = |key: &str, message: String| {
            Err(InvalidSetting::new(
                "constraints",
                FieldError::new(key, message),
            ))
        };
        self.constraints
            .validate()
            .map_err(|e| InvalidSetting::new("constraints", e))?;
        let Some(first) = self.constraints.keys().next() else {
            return Ok(());
        };
        if let Some(builtin) = self.objective.as_ref().and_then(|o| o.builtin.as_deref()) {
            use crate::objective::spec::BUILTIN_METRICS;
            if let Some(key) = self
                .constraints
                .keys()
                .find(|k| !BUILTIN_METRICS.contains(k))
            {
                return at(
                    key,
                    format!(
                        "the `{builtin}` trainable never reports \"{key}\" (it reports {}){}",
                        BUILTIN_METRICS.join(", "),
                        tune_search::did_you_mean_hint(key, BUILTIN_METRICS)
                    ),
                );
            }
        }
        if self.search.warm_start.is_some() {
            return at(
                first,
                "a warm start carries no constraint values: run without --warm-start".into(),
            );
        }
        Ok(())
    }

    /// With several objectives: what works with them (FIFO, random, grid, TPE, NSGA-II) and
    /// what needs one value (the other schedulers, GP, `[stop]`'s target and no-improvement
    /// limit, a warm start) is refused, saying so.
    fn validate_objectives(&self) -> Result<(), InvalidSetting> {
        if let SearchSpec::Nsga2(options) = &self.search.algorithm {
            options
                .validate()
                .map_err(|e| InvalidSetting::new("search", e))?;
        }
        if self.objectives.is_empty() {
            return Ok(());
        }
        self.validate_objective_list()?;
        let names: Vec<&str> = self.objectives.iter().map(|o| o.metric.as_str()).collect();
        let several = format!(
            "this sweep has {} objectives ({})",
            names.len(),
            names.join(", ")
        );
        self.refuse_what_needs_one_value(&several)
    }

    /// The objectives' list: distinct names, at least two, the first being `metric` and
    /// `mode`.
    fn validate_objective_list(&self) -> Result<(), InvalidSetting> {
        let first_ok =
            self.objectives[0].metric == self.metric && self.objectives[0].mode == self.mode;
        for (i, o) in self.objectives.iter().enumerate() {
            if o.metric.is_empty() || self.objectives[..i].iter().any(|p| p.metric == o.metric) {
                return Err(InvalidSetting::new(
                    "",
                    FieldError::new(
                        "objectives",
                        format!("expected distinct metric names, found {:?}", o.metric),
                    ),
                ));
            }
        }
        if !first_ok || self.objectives.len() < 2 {
            return Err(InvalidSetting::new(
                "",
                FieldError::new(
                    "objectives",
                    "expected the list of every objective, the first being `metric` and `mode` \
                     (write metric = [..] and mode = [..] instead)",
                ),
            ));
        }
        Ok(())
    }

    /// What needs one value (the other schedulers, GP, a warm start, `[stop]`'s target and
    /// no-improvement limit) is refused: `several` says how many objectives there are.
    fn refuse_what_needs_one_value(&self, several: &str) -> Result<(), InvalidSetting> {
        if !matches!(self.scheduler, SchedulerSpec::Fifo {}) {
            return Err(InvalidSetting::new(
                "scheduler",
                FieldError::new(
                    "kind",
                    format!(
                        "{} compares trials by one value, and {several}: use kind = \"fifo\" \
                         (the default)",
                        self.scheduler.name()
                    ),
                ),
            ));
        }
        if matches!(self.search.algorithm, SearchSpec::Gp(_)) {
            return Err(InvalidSetting::new(
                "search",
                FieldError::new(
                    "algorithm",
                    format!(
                        "gp models one objective, and {several}: use algorithm = \"tpe\" or \
                         \"nsga2\""
                    ),
                ),
            ));
        }
        if self.search.warm_start.is_some() {
            return Err(InvalidSetting::new(
                "search",
                FieldError::new(
                    "warm_start",
                    format!("a warm start carries one value per trial, and {several}"),
                ),
            ));
        }
        for (key, set) in [
            ("target", self.stop.target.is_some()),
            (
                "no_improvement_trials",
                self.stop.no_improvement_trials.is_some(),
            ),
        ] {
            if set {
                return Err(InvalidSetting::new(
                    "stop",
                    FieldError::new(key, format!("needs one value to compare, and {several}")),
                ));
            }
        }
        Ok(())
    }
}
