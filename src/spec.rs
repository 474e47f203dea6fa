//! The experiment spec: what `space.toml` says, validated, and what the store freezes.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tune_search::{did_you_mean, did_you_mean_hint, Mode, Params, Space, TpeOptions};

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
    /// The reported key that is optimised.
    pub metric: String,
    #[serde(default = "default_mode")]
    pub mode: Mode,
    /// Trials to create (grid search: repeats of the whole grid).
    pub samples: u64,
    #[serde(default)]
    pub seed: u64,
    /// How many times a failed trial is retried before it stays failed (Ray Tune's
    /// `FailureConfig.max_failures`).
    #[serde(default)]
    pub max_failures: u32,
    #[serde(default)]
    pub search: SearchSpec,
    #[serde(default)]
    pub scheduler: SchedulerSpec,
    #[serde(default)]
    pub resources: Resources,
    /// How a trial runs; `None` for experiments driven by a Rust closure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objective: Option<ObjectiveSpec>,
    pub space: Space,
}

fn default_mode() -> Mode {
    Mode::Min
}

/// `[search]`: the algorithm and, for TPE, any option of [`TpeOptions`] by its name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchSpec {
    #[serde(default)]
    pub algorithm: Algorithm,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_startup_trials: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_ei_candidates: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gamma_fraction: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gamma_max: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linear_forgetting: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prior_weight: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consider_magic_clip: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consider_endpoints: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multivariate: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constant_liar: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_min_depth: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_bandwidth_factor: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub magic_clip_exponent: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discrete_min_bandwidth: Option<f64>,
}

impl SearchSpec {
    /// TPE's options: the defaults, overridden by what the spec sets.
    ///
    /// ```
    /// let s = tune::SearchSpec { n_ei_candidates: Some(64), ..Default::default() };
    /// assert_eq!(s.tpe_options().n_ei_candidates, 64);
    /// assert_eq!(s.tpe_options().n_startup_trials, 10);
    /// ```
    pub fn tpe_options(&self) -> TpeOptions {
        let d = TpeOptions::default();
        TpeOptions {
            n_startup_trials: self.n_startup_trials.unwrap_or(d.n_startup_trials),
            n_ei_candidates: self.n_ei_candidates.unwrap_or(d.n_ei_candidates),
            gamma_fraction: self.gamma_fraction.unwrap_or(d.gamma_fraction),
            gamma_max: self.gamma_max.unwrap_or(d.gamma_max),
            linear_forgetting: self.linear_forgetting.unwrap_or(d.linear_forgetting),
            prior_weight: self.prior_weight.unwrap_or(d.prior_weight),
            consider_magic_clip: self.consider_magic_clip.unwrap_or(d.consider_magic_clip),
            consider_endpoints: self.consider_endpoints.unwrap_or(d.consider_endpoints),
            multivariate: self.multivariate.unwrap_or(d.multivariate),
            group: self.group.unwrap_or(d.group),
            constant_liar: self.constant_liar.unwrap_or(d.constant_liar),
            stopped_min_depth: self.stopped_min_depth.unwrap_or(d.stopped_min_depth),
            min_bandwidth_factor: self.min_bandwidth_factor,
            magic_clip_exponent: self.magic_clip_exponent,
            discrete_min_bandwidth: self.discrete_min_bandwidth,
        }
    }

    /// The TPE options the spec sets (they only apply to `algorithm = "tpe"`).
    fn tpe_keys_set(&self) -> Vec<&'static str> {
        let set = [
            ("n_startup_trials", self.n_startup_trials.is_some()),
            ("n_ei_candidates", self.n_ei_candidates.is_some()),
            ("gamma_fraction", self.gamma_fraction.is_some()),
            ("gamma_max", self.gamma_max.is_some()),
            ("linear_forgetting", self.linear_forgetting.is_some()),
            ("prior_weight", self.prior_weight.is_some()),
            ("consider_magic_clip", self.consider_magic_clip.is_some()),
            ("consider_endpoints", self.consider_endpoints.is_some()),
            ("multivariate", self.multivariate.is_some()),
            ("group", self.group.is_some()),
            ("constant_liar", self.constant_liar.is_some()),
            ("stopped_min_depth", self.stopped_min_depth.is_some()),
            ("min_bandwidth_factor", self.min_bandwidth_factor.is_some()),
            ("magic_clip_exponent", self.magic_clip_exponent.is_some()),
            (
                "discrete_min_bandwidth",
                self.discrete_min_bandwidth.is_some(),
            ),
        ];
        set.iter().filter(|(_, on)| *on).map(|(k, _)| *k).collect()
    }
}

/// The search algorithm.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    #[default]
    Random,
    Grid,
    Tpe,
}

impl Algorithm {
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Random => "random",
            Algorithm::Grid => "grid",
            Algorithm::Tpe => "tpe",
        }
    }
}

/// `[scheduler]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerSpec {
    #[serde(default)]
    pub kind: SchedulerKind,
    /// ASHA: the step at which trials end (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_t: Option<u64>,
    /// ASHA: the first rung; median: no stop before this step (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_period: Option<u64>,
    /// ASHA: the rung spacing and 1/fraction kept (default 4, as in Ray Tune).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reduction_factor: Option<u64>,
    /// ASHA: number of brackets (default 1); bracket `s` starts at `grace_period *
    /// reduction_factor^s`. Several with the promotion variant: asynchronous HyperBand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub brackets: Option<usize>,
    /// ASHA: `stopping` (Ray Tune's, the default) or `promotion` (the paper's: pause at each
    /// rung, promote the best later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<AshaVariant>,
    /// ASHA: trials reaching max_t end there (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_last_trials: Option<bool>,
    /// Median: other trials needed at a step before the rule applies (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_samples_required: Option<usize>,
    /// PBT: steps between a trial's perturbations (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perturbation_interval: Option<u64>,
    /// PBT: the share of the population at each end that exploits / is exploited (default 0.25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantile_fraction: Option<f64>,
    /// PBT: the chance of resampling a parameter instead of perturbing it (default 0.25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resample_probability: Option<f64>,
}

/// Which ASHA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AshaVariant {
    Stopping,
    Promotion,
}

impl SchedulerSpec {
    /// ASHA's settings: Ray Tune's defaults, overridden by the spec.
    pub fn asha(&self) -> tune_schedulers::AshaConfig {
        let d = tune_schedulers::AshaConfig::default();
        tune_schedulers::AshaConfig {
            max_t: self.max_t.unwrap_or(d.max_t),
            grace_period: self.grace_period.unwrap_or(d.grace_period),
            reduction_factor: self.reduction_factor.unwrap_or(d.reduction_factor),
            brackets: self.brackets.unwrap_or(d.brackets),
            stop_last_trials: self.stop_last_trials.unwrap_or(d.stop_last_trials),
        }
    }

    /// HyperBand's settings: max_t = 81, reduction_factor = 3 unless the spec says otherwise.
    pub fn hyperband(&self) -> tune_schedulers::HyperBandConfig {
        let d = tune_schedulers::HyperBandConfig::default();
        tune_schedulers::HyperBandConfig {
            max_t: self.max_t.unwrap_or(d.max_t),
            reduction_factor: self.reduction_factor.unwrap_or(d.reduction_factor),
        }
    }

    /// PBT's settings: the defaults, overridden by the spec.
    pub fn pbt(&self) -> tune_schedulers::PbtConfig {
        let d = tune_schedulers::PbtConfig::default();
        tune_schedulers::PbtConfig {
            perturbation_interval: self
                .perturbation_interval
                .unwrap_or(d.perturbation_interval),
            quantile_fraction: self.quantile_fraction.unwrap_or(d.quantile_fraction),
            resample_probability: self.resample_probability.unwrap_or(d.resample_probability),
        }
    }

    /// Median stopping's settings: the defaults, overridden by the spec.
    pub fn median(&self) -> tune_schedulers::MedianConfig {
        let d = tune_schedulers::MedianConfig::default();
        tune_schedulers::MedianConfig {
            grace_period: self.grace_period.unwrap_or(d.grace_period),
            min_samples_required: self.min_samples_required.unwrap_or(d.min_samples_required),
        }
    }

    /// The first key set that `kind` does not use.
    fn stray_key(&self) -> Option<&'static str> {
        let set = [
            (
                "max_t",
                self.max_t.is_some(),
                &[SchedulerKind::Asha, SchedulerKind::Hyperband][..],
            ),
            (
                "grace_period",
                self.grace_period.is_some(),
                &[SchedulerKind::Asha, SchedulerKind::Median][..],
            ),
            (
                "reduction_factor",
                self.reduction_factor.is_some(),
                &[SchedulerKind::Asha, SchedulerKind::Hyperband][..],
            ),
            (
                "brackets",
                self.brackets.is_some(),
                &[SchedulerKind::Asha][..],
            ),
            (
                "stop_last_trials",
                self.stop_last_trials.is_some(),
                &[SchedulerKind::Asha][..],
            ),
            (
                "min_samples_required",
                self.min_samples_required.is_some(),
                &[SchedulerKind::Median][..],
            ),
            (
                "perturbation_interval",
                self.perturbation_interval.is_some(),
                &[SchedulerKind::Pbt][..],
            ),
            (
                "quantile_fraction",
                self.quantile_fraction.is_some(),
                &[SchedulerKind::Pbt][..],
            ),
            (
                "resample_probability",
                self.resample_probability.is_some(),
                &[SchedulerKind::Pbt][..],
            ),
            (
                "variant",
                self.variant.is_some(),
                &[SchedulerKind::Asha][..],
            ),
        ];
        set.iter()
            .find(|(_, on, kinds)| *on && !kinds.contains(&self.kind))
            .map(|(k, _, _)| *k)
    }
}

/// The trial scheduler.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SchedulerKind {
    #[default]
    Fifo,
    Median,
    Asha,
    Hyperband,
    Pbt,
}

impl SchedulerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SchedulerKind::Fifo => "fifo",
            SchedulerKind::Median => "median",
            SchedulerKind::Asha => "asha",
            SchedulerKind::Hyperband => "hyperband",
            SchedulerKind::Pbt => "pbt",
        }
    }
}

/// `[resources]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    /// Concurrent trials on CPU; defaults to the number of cores.
    #[serde(default = "default_cpu_slots")]
    pub cpu_slots: usize,
    /// `"auto"` or a list of device ordinals; used by the `cuda` build only.
    #[serde(default)]
    pub gpus: Gpus,
    #[serde(default = "one")]
    pub trials_per_gpu: u32,
}

impl Default for Resources {
    fn default() -> Self {
        Resources {
            cpu_slots: default_cpu_slots(),
            gpus: Gpus::default(),
            trials_per_gpu: 1,
        }
    }
}

fn default_cpu_slots() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn one() -> u32 {
    1
}

/// `gpus = "auto"` or `gpus = [0, 1]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Gpus {
    #[default]
    #[serde(with = "auto")]
    Auto,
    List(Vec<u32>),
}

mod auto {
    //! The literal string "auto".
    use serde::{de, Deserialize, Deserializer, Serializer};
    pub fn serialize<S: Serializer>(s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("auto")
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<(), D::Error> {
        let s = String::deserialize(d)?;
        if s == "auto" {
            Ok(())
        } else {
            Err(de::Error::custom(format!(
                "expected \"auto\" or a list of GPU numbers, found \"{s}\""
            )))
        }
    }
}

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
    /// The built-in trainable's other keys: its data (`dataset = "digits"`) and fixed
    /// hyperparameters (`epochs = 30`). Any key is rejected for a command.
    #[serde(flatten)]
    pub options: BTreeMap<String, toml::Value>,
}

/// The keys `[objective]` itself defines (the rest belong to a built-in trainable).
const OBJECTIVE_KEYS: [&str; 5] = ["command", "builtin", "timeout_s", "env", "workdir"];

/// What a built-in trainable reports each epoch (candidates for `metric`).
pub const BUILTIN_METRICS: [&str; 4] = ["val_loss", "val_accuracy", "train_loss", "lr"];

/// A spec that cannot be used: which file, where, and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct SpecError {
    pub file: PathBuf,
    /// 1-based line and column, when the problem has a place in the file.
    pub location: Option<(usize, usize)>,
    pub message: String,
    /// The offending line of the file, shown under the message.
    pub snippet: Option<String>,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some((line, col)) = self.location {
            write!(f, ":{line}:{col}")?;
        }
        write!(f, ": {}", self.message)?;
        if let (Some(snippet), Some((line, col))) = (&self.snippet, self.location) {
            let gutter = line.to_string().len();
            write!(f, "\n {line} | {snippet}\n {:gutter$} | {:>col$}", "", "^")?;
        }
        Ok(())
    }
}

impl ExperimentSpec {
    /// TPE's options for this experiment: `[search]`'s, and where it leaves
    /// `stopped_min_depth` unset, [`TpeOptions::RUNG_STOPPED_MIN_DEPTH`] under ASHA or
    /// HyperBand (Optuna's 0 otherwise).
    ///
    /// ```
    /// let mut spec: tune::ExperimentSpec = toml::from_str(
    ///     "name = \"demo\"\nmetric = \"loss\"\nsamples = 8\n[search]\nalgorithm = \"tpe\"\n[scheduler]\nkind = \"asha\"\n[space]\nx = { uniform = [0.0, 1.0] }",
    /// ).unwrap();
    /// assert_eq!(spec.tpe_options().stopped_min_depth, 0.1);
    /// assert_eq!(spec.tpe_options().kernel_floors(), (0.01, 1.0, 0.0));
    /// spec.search.stopped_min_depth = Some(0.0);
    /// assert_eq!(spec.tpe_options().stopped_min_depth, 0.0);
    /// ```
    pub fn tpe_options(&self) -> TpeOptions {
        let mut tpe = self.search.tpe_options();
        let rungs = matches!(
            self.scheduler.kind,
            SchedulerKind::Asha | SchedulerKind::Hyperband
        );
        if self.search.stopped_min_depth.is_none() && rungs {
            tpe.stopped_min_depth = TpeOptions::RUNG_STOPPED_MIN_DEPTH;
        }
        if self.scheduler.kind == SchedulerKind::Fifo {
            tpe
        } else {
            tpe.under_scheduler()
        }
    }

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
        if let Some(obj) = spec.objective.as_mut() {
            obj.workdir = Some(match obj.workdir.take() {
                Some(w) if w.is_absolute() => w,
                Some(w) => base.join(w),
                None => base,
            });
        }
        Ok((spec, text))
    }

    /// Parses and validates spec text; `file` only names the source in errors.
    pub fn from_toml(text: &str, file: &Path) -> Result<ExperimentSpec, SpecError> {
        let spec: ExperimentSpec = toml::from_str(text).map_err(|e| {
            let location = e.span().map(|s| line_col(text, s.start));
            SpecError {
                file: file.to_path_buf(),
                location,
                message: with_suggestion(e.message().trim()),
                snippet: location
                    .and_then(|(l, _)| text.lines().nth(l - 1))
                    .map(str::to_string),
            }
        })?;
        spec.validate().map_err(|(section, key, message)| {
            let location = locate_key(text, section, &key);
            SpecError {
                file: file.to_path_buf(),
                location,
                message: match section {
                    "" => format!("`{key}`: {message}"),
                    _ => format!("[{section}] `{key}`: {message}"),
                },
                snippet: location
                    .and_then(|(l, _)| text.lines().nth(l - 1))
                    .map(str::to_string),
            }
        })?;
        Ok(spec)
    }

    /// Checks what serde cannot: ranges, placeholders, a built-in trainable's keys.
    /// Errors are (section, key, message).
    pub fn validate(&self) -> Result<(), (&'static str, String, String)> {
        self.validate_fields()
            .map_err(|(section, key, message)| (section, key.to_string(), message))?;
        match &self.objective {
            Some(obj) if obj.builtin.is_some() => self.validate_builtin(obj),
            Some(obj) => match obj.options.keys().next() {
                Some(key) => Err(("objective", key.clone(), unknown_key(key, &OBJECTIVE_KEYS))),
                None => Ok(()),
            },
            None => Ok(()),
        }
    }

    fn validate_builtin(&self, obj: &ObjectiveSpec) -> Result<(), (&'static str, String, String)> {
        use tune_trials::{Builtin, DataSpec, TrainConfig, DATA_KEYS, TRAIN_KEYS};
        let name = obj.builtin.as_deref().unwrap_or_default();
        let problem = |section, key: &str, message: String| (section, key.to_string(), message);
        name.parse::<Builtin>().map_err(|e| {
            problem(
                "objective",
                "builtin",
                e.to_string().replace("builtin: ", ""),
            )
        })?;
        if !obj.command.is_empty() {
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
        for key in obj.options.keys() {
            if !known.contains(&key.as_str()) {
                return Err(problem("objective", key, unknown_key(key, &known)));
            }
        }
        let (data, fixed) = builtin_options(obj);
        for (key, value) in &data {
            let one = toml::Value::Table(toml::Table::from_iter([(key.clone(), value.clone())]));
            one.try_into::<DataSpec>()
                .map_err(|e| problem("objective", key, e.message().trim().to_string()))?;
        }
        if !obj.options.contains_key("dataset") && !obj.options.contains_key("csv") {
            return Err(problem(
                "objective",
                "builtin",
                format!(
                    "a built-in trainable needs `dataset = \"...\"` (one of {}) or `csv = \"file.csv\"`",
                    tune_trials::DATASETS.join(", ")
                ),
            ));
        }
        for (key, value) in &fixed {
            let one = serde_json::Map::from_iter([(key.clone(), value.clone())]);
            TrainConfig::from_parts(&one, &Params::default())
                .map_err(|e| problem("objective", key, e.to_string()))?;
        }
        // Every [space] entry is a hyperparameter; try each one's edge values.
        for param in self.space.params() {
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
        if !BUILTIN_METRICS.contains(&self.metric.as_str()) {
            let hint = did_you_mean_hint(&self.metric, BUILTIN_METRICS);
            return Err(problem(
                "",
                "metric",
                format!(
                    "the `{name}` trainable reports {}, not \"{}\"{hint}",
                    BUILTIN_METRICS.join(", "),
                    self.metric
                ),
            ));
        }
        Ok(())
    }

    /// Checks what serde cannot, for the fields whose keys are fixed names.
    fn validate_fields(&self) -> Result<(), (&'static str, &'static str, String)> {
        if self.name.is_empty()
            || self.name.contains(['/', '\\'])
            || self.name == "."
            || self.name == ".."
        {
            return Err((
                "",
                "name",
                format!(
                    "expected a folder name without slashes, found \"{}\"",
                    self.name
                ),
            ));
        }
        if self.metric.is_empty() {
            return Err((
                "",
                "metric",
                "expected the name of a reported key, found an empty string".into(),
            ));
        }
        if self.samples == 0 {
            return Err(("", "samples", "expected at least 1 trial, found 0".into()));
        }
        if self.resources.cpu_slots == 0 {
            return Err((
                "resources",
                "cpu_slots",
                "expected at least 1 slot, found 0".into(),
            ));
        }
        if self.search.algorithm != Algorithm::Tpe {
            if let Some(key) = self.search.tpe_keys_set().first() {
                return Err(("search", key, "applies to algorithm = \"tpe\" only".into()));
            }
        }
        let tpe = self.tpe_options();
        if !(tpe.gamma_fraction > 0.0 && tpe.gamma_fraction <= 1.0) {
            return Err((
                "search",
                "gamma_fraction",
                format!("expected a number in (0, 1], found {}", tpe.gamma_fraction),
            ));
        }
        if tpe.gamma_max == 0 || tpe.n_ei_candidates == 0 {
            let key = if tpe.gamma_max == 0 {
                "gamma_max"
            } else {
                "n_ei_candidates"
            };
            return Err(("search", key, "expected at least 1, found 0".into()));
        }
        if !(tpe.prior_weight > 0.0 && tpe.prior_weight.is_finite()) {
            return Err((
                "search",
                "prior_weight",
                format!("expected a positive number, found {}", tpe.prior_weight),
            ));
        }
        let (min_bandwidth_factor, magic_clip_exponent, discrete_min_bandwidth) =
            tpe.kernel_floors();
        for (key, value) in [
            ("stopped_min_depth", tpe.stopped_min_depth),
            ("min_bandwidth_factor", min_bandwidth_factor),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err((
                    "search",
                    key,
                    format!("expected a number in [0, 1], found {value}"),
                ));
            }
        }
        for (key, value) in [
            ("magic_clip_exponent", magic_clip_exponent),
            ("discrete_min_bandwidth", discrete_min_bandwidth),
        ] {
            if !(value >= 0.0 && value.is_finite()) {
                return Err((
                    "search",
                    key,
                    format!("expected a number >= 0, found {value}"),
                ));
            }
        }
        let sched = &self.scheduler;
        if sched.kind == SchedulerKind::Pbt {
            let pbt = sched.pbt();
            if pbt.perturbation_interval == 0 {
                return Err((
                    "scheduler",
                    "perturbation_interval",
                    "expected at least 1 step, found 0".into(),
                ));
            }
            if !(pbt.quantile_fraction > 0.0 && pbt.quantile_fraction <= 0.5) {
                return Err((
                    "scheduler",
                    "quantile_fraction",
                    format!(
                        "expected a number in (0, 0.5], found {}",
                        pbt.quantile_fraction
                    ),
                ));
            }
            if !(0.0..=1.0).contains(&pbt.resample_probability) {
                return Err((
                    "scheduler",
                    "resample_probability",
                    format!(
                        "expected a number in [0, 1], found {}",
                        pbt.resample_probability
                    ),
                ));
            }
        }
        if let Some(key) = sched.stray_key() {
            return Err((
                "scheduler",
                key,
                format!("does not apply to kind = \"{}\"", sched.kind.as_str()),
            ));
        }
        if sched.kind == SchedulerKind::Hyperband {
            let hb = sched.hyperband();
            if hb.reduction_factor < 2 || hb.max_t < hb.reduction_factor {
                let key = if hb.reduction_factor < 2 {
                    "reduction_factor"
                } else {
                    "max_t"
                };
                return Err((
                    "scheduler",
                    key,
                    format!(
                        "expected reduction_factor >= 2 and max_t >= reduction_factor, found {} and {}",
                        hb.reduction_factor, hb.max_t
                    ),
                ));
            }
        }
        let asha = sched.asha();
        if sched.kind == SchedulerKind::Asha {
            if asha.reduction_factor < 2 {
                return Err((
                    "scheduler",
                    "reduction_factor",
                    format!("expected at least 2, found {}", asha.reduction_factor),
                ));
            }
            if asha.grace_period == 0 || asha.grace_period > asha.max_t {
                return Err((
                    "scheduler",
                    "grace_period",
                    format!(
                        "expected 1 <= grace_period <= max_t ({}), found {}",
                        asha.max_t, asha.grace_period
                    ),
                ));
            }
            if asha.brackets == 0 {
                return Err((
                    "scheduler",
                    "brackets",
                    "expected at least 1, found 0".into(),
                ));
            }
        }
        if let Some(obj) = self.objective.as_ref().filter(|o| o.builtin.is_none()) {
            if obj.command.is_empty() {
                return Err((
                    "objective",
                    "command",
                    "expected a non-empty argv list like [\"python3\", \"train.py\"], or `builtin = \"mlp\"`".into(),
                ));
            }
            if let Some(t) = obj.timeout_s {
                if !(t > 0.0 && t.is_finite()) {
                    return Err((
                        "objective",
                        "timeout_s",
                        format!("expected a positive number of seconds, found {t}"),
                    ));
                }
            }
            let names: Vec<&str> = self
                .space
                .params()
                .iter()
                .map(|p| p.name.as_str())
                .collect();
            for arg in &obj.command {
                for placeholder in
                    crate::objective::placeholders(arg).map_err(|m| ("objective", "command", m))?
                {
                    if !names.contains(&placeholder) {
                        let hint = did_you_mean(placeholder, names.iter().copied())
                            .map(|s| format!(" (did you mean `{{{s}}}`?)"))
                            .unwrap_or_default();
                        return Err((
                            "objective",
                            "command",
                            format!("placeholder `{{{placeholder}}}` in \"{arg}\" names no parameter of [space]{hint}"),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// A built-in objective's options split into data keys (TOML) and fixed hyperparameters
/// (JSON, as [`tune_trials::TrainConfig::from_parts`] takes them).
pub(crate) fn builtin_options(
    obj: &ObjectiveSpec,
) -> (toml::Table, serde_json::Map<String, serde_json::Value>) {
    let mut data = toml::Table::new();
    let mut fixed = serde_json::Map::new();
    for (key, value) in &obj.options {
        if tune_trials::DATA_KEYS.contains(&key.as_str()) {
            data.insert(key.clone(), value.clone());
        } else {
            fixed.insert(
                key.clone(),
                serde_json::to_value(value).expect("TOML converts to JSON"),
            );
        }
    }
    (data, fixed)
}

/// "unknown key", with the nearest known one when it looks like a typo.
fn unknown_key(key: &str, known: &[&str]) -> String {
    match did_you_mean(key, known.iter().copied()) {
        Some(s) => format!("unknown key `{key}` (did you mean `{s}`?)"),
        None => format!("unknown key `{key}`; expected one of {}", known.join(", ")),
    }
}

/// Values at a domain's edges, enough to catch a wrong type or an out-of-range bound.
fn edge_values(domain: &tune_search::Domain) -> Vec<tune_search::Value> {
    use tune_search::{Domain, Value};
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

/// 1-based (line, column) of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// Where `key = ...` is written inside `[section]` (top level for ""), if it is.
fn locate_key(text: &str, section: &str, key: &str) -> Option<(usize, usize)> {
    let mut current = "";
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix('[') {
            current = rest.split(']').next().unwrap_or("").trim();
            continue;
        }
        if current == section {
            if let Some(rest) = trimmed.strip_prefix(key) {
                if rest.trim_start().starts_with('=') {
                    return Some((i + 1, line.len() - trimmed.len() + 1));
                }
            }
        }
    }
    None
}

/// Adds "did you mean" to serde's unknown field / variant messages.
fn with_suggestion(message: &str) -> String {
    let quoted: Vec<&str> = message.split('`').skip(1).step_by(2).collect();
    let unknown = message.starts_with("unknown field") || message.starts_with("unknown variant");
    match quoted.split_first() {
        Some((found, candidates)) if unknown => {
            match did_you_mean(found, candidates.iter().copied()) {
                Some(s) => format!("{message} (did you mean `{s}`?)"),
                None => message.to_string(),
            }
        }
        _ => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"name = "q"
metric = "loss"
samples = 5

[objective]
command = ["python3", "obj.py", "--x", "{x}"]

[space]
x = { uniform = [-5.0, 10.0] }
"#;

    fn err(text: &str) -> String {
        ExperimentSpec::from_toml(text, Path::new("space.toml"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn good_spec_has_defaults() {
        let spec = ExperimentSpec::from_toml(GOOD, Path::new("space.toml")).unwrap();
        assert_eq!(spec.mode, Mode::Min);
        assert_eq!(spec.search.algorithm, Algorithm::Random);
        assert_eq!(spec.scheduler.kind, SchedulerKind::Fifo);
        assert!(spec.resources.cpu_slots >= 1);
        assert_eq!(spec.resources.gpus, Gpus::Auto);
    }

    #[test]
    fn malformed_toml_gives_line_and_column() {
        let e = err("name = \"q\"\nmetric = = \"loss\"\n");
        assert!(e.starts_with("space.toml:2:"), "{e}");
        assert!(e.contains(" 2 | metric = = \"loss\""), "{e}");
    }

    #[test]
    fn unknown_keys_suggest_the_right_one() {
        let e = err(&GOOD.replace("samples", "sampels"));
        assert!(
            e.starts_with("space.toml:3:1: unknown field `sampels`"),
            "{e}"
        );
        assert!(e.contains("(did you mean `samples`?)"), "{e}");
        let e = err(&GOOD.replace("metric = \"loss\"", "metric = \"loss\"\nmode = \"mim\""));
        assert!(
            e.contains("unknown variant `mim`") && e.contains("did you mean `min`?"),
            "{e}"
        );
        let e = err(&format!("{GOOD}\n[resources]\ncpu_slot = 2\n"));
        assert!(e.contains("did you mean `cpu_slots`?"), "{e}");
    }

    #[test]
    fn semantic_errors_name_section_and_key() {
        let e = err(&GOOD.replace("samples = 5", "samples = 0"));
        assert_eq!(
            e.lines().next().unwrap(),
            "space.toml:3:1: `samples`: expected at least 1 trial, found 0"
        );
        let e = err(&GOOD.replace("{x}", "{y}"));
        assert!(
            e.contains("[objective] `command`: placeholder `{y}`"),
            "{e}"
        );
        let e = err(&format!("{GOOD}\n[search]\nn_ei_candidates = 48\n"));
        assert!(
            e.contains("[search] `n_ei_candidates`: applies to algorithm = \"tpe\" only"),
            "{e}"
        );
        let e = err(&format!(
            "{GOOD}\n[search]\nalgorithm = \"tpe\"\ngamma_fraction = 1.5\n"
        ));
        assert!(e.contains("space.toml:13:1: [search] `gamma_fraction`: expected a number in (0, 1], found 1.5"), "{e}");
        let e = err(&format!(
            "{GOOD}\n[search]\nalgorithm = \"tpe\"\nstopped_min_depth = 2.0\n"
        ));
        assert!(
            e.contains("[search] `stopped_min_depth`: expected a number in [0, 1], found 2"),
            "{e}"
        );
        let e = err(&format!(
            "{GOOD}\n[search]\nalgorithm = \"tpe\"\nmin_bandwidth_factor = -0.1\n"
        ));
        assert!(
            e.contains("[search] `min_bandwidth_factor`: expected a number in [0, 1], found -0.1"),
            "{e}"
        );
        let e = err(&format!(
            "{GOOD}\n[search]\nalgorithm = \"tpe\"\ndiscrete_min_bandwidth = nan\n"
        ));
        assert!(
            e.contains("[search] `discrete_min_bandwidth`: expected a number >= 0, found NaN"),
            "{e}"
        );
        let e = err(&format!(
            "{GOOD}\n[search]\nalgorithm = \"tpe\"\nn_startup = 5\n"
        ));
        assert!(e.contains("did you mean `n_startup_trials`?"), "{e}");
    }

    #[test]
    fn space_errors_point_at_the_parameter() {
        let e = err(&GOOD.replace("[-5.0, 10.0]", "[10.0, -5.0]"));
        assert!(e.starts_with("space.toml:9:"), "{e}");
        assert!(
            e.contains("expected low < high, found low = 10 and high = -5"),
            "{e}"
        );
    }

    #[test]
    fn the_readme_spec_is_valid() {
        let readme = include_str!("../README.md");
        let start = readme.find("```toml\n").unwrap() + 8;
        let end = start + readme[start..].find("```").unwrap();
        let spec = ExperimentSpec::from_toml(&readme[start..end], Path::new("README.md")).unwrap();
        assert_eq!(spec.space.len(), 10);
        assert_eq!(spec.objective.unwrap().env["OMP_NUM_THREADS"], "1");
    }

    #[test]
    fn spec_round_trips_through_json() {
        let spec = ExperimentSpec::from_toml(GOOD, Path::new("space.toml")).unwrap();
        let back: ExperimentSpec =
            serde_json::from_str(&serde_json::to_string(&spec).unwrap()).unwrap();
        assert_eq!(spec, back);
    }
}
