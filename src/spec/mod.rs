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
    Domain, FieldError, GridSearch, Mode, NoGridParams, Nsga2, Nsga2Options, Params, PointError,
    PriorTrial, RandomSearch, Searcher, Space, Tpe, TpeOptions, WithInitialPoints, WithPriorTrials,
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
#[cfg(test)]
mod tests;

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

/// `[store]`: where a sweep keeps what its trials write.
///
/// ```
/// let spec = tune::ExperimentSpec::from_toml(r#"
///     name = "mnist"
///     metric = "loss"
///     samples = 20
///     [store]
///     checkpoints = "/shared/tune"
///     [space]
///     x = { uniform = [0.0, 1.0] }
/// "#, "space.toml".as_ref()).unwrap();
/// assert_eq!(spec.trials_folder("runs/mnist".as_ref()), std::path::Path::new("/shared/tune/mnist"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSpec {
    /// A folder that every machine running the sweep's trials sees (a shared file system):
    /// trial folders go to `<checkpoints>/<name>/trials/<id>`, so that a paused trial resumes,
    /// and an exploit finds its source's checkpoint, on whichever worker runs it. Relative to
    /// the spec file's folder. Default: the experiment folder on the coordinator, `--dir` on
    /// each worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoints: Option<PathBuf>,
}

impl StoreSpec {
    fn is_default(&self) -> bool {
        *self == StoreSpec::default()
    }
}

/// `[tracking]`: tools that get a copy of the results as they arrive.
///
/// ```
/// let spec = tune::ExperimentSpec::from_toml(r#"
///     name = "mnist"
///     metric = "loss"
///     samples = 20
///     [tracking]
///     tensorboard = "tb"
///     [space]
///     x = { uniform = [0.0, 1.0] }
/// "#, "space.toml".as_ref()).unwrap();
/// assert_eq!(spec.tracking.tensorboard.as_deref(), Some(std::path::Path::new("tb")));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrackingSpec {
    /// An MLflow tracking server (`"http://host:5000"`), or `true` for the one
    /// `MLFLOW_TRACKING_URI` names when the sweep runs
    /// ([`crate::tracking::mlflow::MlflowLogger`]). Credentials come from
    /// `MLFLOW_TRACKING_TOKEN`, or `MLFLOW_TRACKING_USERNAME` and `MLFLOW_TRACKING_PASSWORD`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlflow: Option<MlflowServer>,
    /// The MLflow experiment that holds the sweep's runs; default: the sweep's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlflow_experiment: Option<String>,
    /// A folder for TensorBoard (`tensorboard --logdir DIR`): a run per trial with its
    /// metrics by step, and the HParams tab's table
    /// ([`crate::tracking::tensorboard::TensorBoardLogger`]). Relative to the spec file's
    /// folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensorboard: Option<PathBuf>,
}

impl TrackingSpec {
    fn is_default(&self) -> bool {
        *self == TrackingSpec::default()
    }

    /// The MLflow server's URL, if MLflow logging is on: the spec's, or `MLFLOW_TRACKING_URI`'s
    /// for `mlflow = true`.
    pub fn mlflow_url(&self) -> Result<Option<String>, FieldError> {
        match &self.mlflow {
            None | Some(MlflowServer::FromEnvironment(false)) => Ok(None),
            Some(MlflowServer::Url(url)) => Ok(Some(url.clone())),
            Some(MlflowServer::FromEnvironment(true)) => {
                match std::env::var("MLFLOW_TRACKING_URI") {
                    Ok(url) if !url.is_empty() => {
                        check_mlflow_url(&url).map_err(|e| {
                            FieldError::new("mlflow", format!("MLFLOW_TRACKING_URI: {e}"))
                        })?;
                        Ok(Some(url))
                    }
                    _ => Err(FieldError::new(
                        "mlflow",
                        "`true` takes the server from MLFLOW_TRACKING_URI, which is not set",
                    )),
                }
            }
        }
    }
}

/// `[tracking] mlflow`: a server's URL, or `true` for `MLFLOW_TRACKING_URI`'s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MlflowServer {
    FromEnvironment(bool),
    Url(String),
}

/// An MLflow URL tune can talk to: `http://` or `https://` and a host.
pub fn check_mlflow_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    match rest {
        Some(r) if !r.is_empty() && !r.starts_with('/') => Ok(()),
        _ => Err(format!(
            "expected an http:// or https:// URL of an MLflow tracking server, found {url:?} \
             (file: and databricks URIs are not supported)"
        )),
    }
}

fn default_mode() -> Mode {
    Mode::Min
}

/// `[search]`: the algorithm with its options, and the points its first trials evaluate.
///
/// ```
/// let spec = tune::ExperimentSpec::from_toml(r#"
///     name = "warm"
///     metric = "loss"
///     samples = 10
///     [search]
///     algorithm = "tpe"
///     [[search.initial]]
///     lr = 0.01
///     layers = 2
///     [space]
///     lr = { loguniform = [1e-4, 1e-1] }
///     layers = { int = [1, 4] }
/// "#, "space.toml".as_ref()).unwrap();
/// assert_eq!(spec.search.algorithm.algorithm(), tune::Algorithm::Tpe);
/// assert_eq!(spec.search.initial[0].get("layers"), Some(&tune::Value::Int(2)));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Search {
    /// The algorithm, by its `algorithm` key, with its options.
    #[serde(flatten)]
    pub algorithm: SearchSpec,
    /// `[[search.initial]]`: params the first trials evaluate, in order, before the algorithm
    /// suggests any (Optuna's `enqueue_trial`, Ray Tune's `points_to_evaluate`). A point may
    /// leave parameters out: they are drawn at random. They count toward `samples`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub initial: Vec<Params>,
    /// Trials of an earlier sweep the algorithm learns from as its oldest (`tune run
    /// --warm-start`, SageMaker's warm start): copied into the sweep when it is created, so
    /// that a resume decides as the first run did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warm_start: Option<WarmStart>,
}

/// An earlier sweep's completed trials, as `--warm-start` found them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WarmStart {
    /// Where they came from (the folder or the store's experiment name), for people.
    pub from: String,
    pub trials: Vec<PriorTrial>,
}

impl From<SearchSpec> for Search {
    fn from(algorithm: SearchSpec) -> Search {
        Search {
            algorithm,
            initial: Vec::new(),
            warm_start: None,
        }
    }
}

// By hand: `initial` sits beside the algorithm's own keys, which its tagged enum checks
// strictly (an unknown key is an error), so it is taken out of the table first. The table is
// read as TOML values, and a null (an unset option in the stored JSON copy) as left out.
impl<'de> Deserialize<'de> for Search {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Search, D::Error> {
        use serde::de::Error;
        let mut table = table_without_nulls(d)?;
        let initial = match table.remove("initial") {
            Some(points) => Vec::<Params>::deserialize(points).map_err(|e| {
                D::Error::custom(format!(
                    "`initial`: expected tables of parameter values ([[search.initial]]), {e}"
                ))
            })?,
            None => Vec::new(),
        };
        let warm_start = table
            .remove("warm_start")
            .map(WarmStart::deserialize)
            .transpose()
            .map_err(|e| D::Error::custom(format!("`warm_start`: {e}")))?;
        let algorithm =
            tagged_naming_the_key::<SearchSpec>(table, "algorithm").map_err(D::Error::custom)?;
        Ok(Search {
            algorithm,
            initial,
            warm_start,
        })
    }
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

/// `[search]`: the algorithm and its options (`algorithm = "tpe"` takes any of
/// [`TpeOptions`] by its name; random and grid search have none).
///
/// ```
/// use tune::{SearchSpec, TpeOptions};
/// let tpe = SearchSpec::Tpe(TpeOptions { n_ei_candidates: 64, ..Default::default() });
/// assert_eq!(tpe.algorithm(), tune::Algorithm::Tpe);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "algorithm", rename_all = "lowercase", deny_unknown_fields)]
pub enum SearchSpec {
    /// Independent uniform draws from the space (the default).
    Random {},
    /// Every combination of the `grid` parameters, `samples` times over.
    Grid {},
    /// The tree-structured Parzen estimator.
    Tpe(TpeOptions),
    /// Bayesian optimisation with a Gaussian process (Optuna's GPSampler's model and
    /// acquisition); spaces without conditions.
    Gp(GpOptions),
    /// The genetic algorithm NSGA-II (Optuna's NSGAIISampler), for several objectives.
    Nsga2(Nsga2Options),
}

impl Default for SearchSpec {
    fn default() -> Self {
        SearchSpec::Random {}
    }
}

impl SearchSpec {
    pub fn algorithm(&self) -> Algorithm {
        match self {
            SearchSpec::Random {} => Algorithm::Random,
            SearchSpec::Grid {} => Algorithm::Grid,
            SearchSpec::Tpe(_) => Algorithm::Tpe,
            SearchSpec::Gp(_) => Algorithm::Gp,
            SearchSpec::Nsga2(_) => Algorithm::Nsga2,
        }
    }

    /// The algorithm with its default options.
    pub fn of(algorithm: Algorithm) -> SearchSpec {
        match algorithm {
            Algorithm::Random => SearchSpec::Random {},
            Algorithm::Grid => SearchSpec::Grid {},
            Algorithm::Tpe => SearchSpec::Tpe(TpeOptions::default()),
            Algorithm::Gp => SearchSpec::Gp(GpOptions::default()),
            Algorithm::Nsga2 => SearchSpec::Nsga2(Nsga2Options::default()),
        }
    }
}

/// The search algorithm, by name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    /// Independent uniform draws from the space.
    #[default]
    Random,
    /// Every combination of the `grid` parameters.
    Grid,
    /// The tree-structured Parzen estimator (Bergstra et al. 2011; Optuna 5's multivariate TPE).
    Tpe,
    /// Bayesian optimisation with a Gaussian process (Matérn 5/2, log expected improvement).
    Gp,
    /// NSGA-II (Deb et al. 2002), a genetic algorithm for several objectives.
    Nsga2,
}

impl Algorithm {
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Random => "random",
            Algorithm::Grid => "grid",
            Algorithm::Tpe => "tpe",
            Algorithm::Gp => "gp",
            Algorithm::Nsga2 => "nsga2",
        }
    }
}

/// `[scheduler]`: the trial scheduler, by `kind`, with its settings (each kind's own keys;
/// another kind's key is an unknown field).
///
/// ```
/// use tune::{AshaConfig, SchedulerSpec};
/// let asha = SchedulerSpec::Asha(AshaConfig { max_t: 27, ..Default::default() });
/// assert_eq!(asha.name(), "asha");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum SchedulerSpec {
    /// Every trial runs to its end (the default).
    Fifo {},
    /// Median stopping: a trial below the median of the others at the same step stops.
    Median(MedianConfig),
    /// ASHA: Ray Tune's stopping variant, or the paper's promotion variant.
    Asha(AshaConfig),
    /// Synchronous HyperBand, pausing and resuming trials from checkpoints.
    Hyperband(HyperBandConfig),
    /// Population-based training: exploit (copy a better trial's checkpoint) and explore.
    Pbt(PbtConfig),
}

impl Default for SchedulerSpec {
    fn default() -> Self {
        SchedulerSpec::Fifo {}
    }
}

impl SchedulerSpec {
    /// The `kind`, as written in the spec.
    pub fn name(&self) -> &'static str {
        match self {
            SchedulerSpec::Fifo {} => "fifo",
            SchedulerSpec::Median(_) => "median",
            SchedulerSpec::Asha(_) => "asha",
            SchedulerSpec::Hyperband(_) => "hyperband",
            SchedulerSpec::Pbt(_) => "pbt",
        }
    }

    /// The settings' own check.
    pub fn validate(&self) -> Result<(), FieldError> {
        match self {
            SchedulerSpec::Fifo {} | SchedulerSpec::Median(_) => Ok(()),
            SchedulerSpec::Asha(c) => c.validate(),
            SchedulerSpec::Hyperband(c) => c.validate(),
            SchedulerSpec::Pbt(c) => c.validate(),
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
    /// Trials of the built-in mlp per slot, trained as one fused model when they share a
    /// shape: `"auto"` (the default) or a number.
    #[serde(default, skip_serializing_if = "Fuse::is_auto")]
    pub fuse: Fuse,
}

impl Default for Resources {
    fn default() -> Self {
        Resources {
            cpu_slots: default_cpu_slots(),
            gpus: Gpus::default(),
            trials_per_gpu: 1,
            fuse: Fuse::Auto,
        }
    }
}

/// `fuse = "auto"` or `fuse = K`: how many trials of the built-in mlp one slot (a CPU slot, or
/// a GPU share) trains at a time as one fused model (HFTA).
///
/// ```
/// use tune::Fuse;
/// // "auto" packs 16 on a GPU and none on CPU, where a slot per core does as well.
/// assert_eq!(Fuse::Auto.trials_per_pack(true, true), 16);
/// assert_eq!(Fuse::Auto.trials_per_pack(true, false), 1);
/// assert_eq!(Fuse::Auto.trials_per_pack(false, true), 1); // a command objective
/// assert_eq!(Fuse::Trials(4).trials_per_pack(true, false), 4);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Fuse {
    #[default]
    Auto,
    Trials(u32),
}

impl Fuse {
    /// Trials per pack that `"auto"` chooses on a GPU.
    pub const AUTO_GPU: usize = 16;

    /// Most packs the searched keys may split a sweep's trials into for `"auto"` to fuse:
    /// the 16 trials in flight on a slot then average two a pack (on an H200 a pack of 4
    /// mixed shapes trained several times faster than the 4 alone: docs/design/fused-trials.md).
    pub const AUTO_MOST_PACKS: usize = 8;

    fn is_auto(&self) -> bool {
        *self == Fuse::Auto
    }

    /// Trials per pack for an objective whose trials can fuse (`fusable`: a built-in
    /// trainable whose searched keys leave few packs) or not, on a GPU or on CPU.
    pub fn trials_per_pack(self, fusable: bool, on_gpu: bool) -> usize {
        match self {
            Fuse::Trials(k) => k.max(1) as usize,
            Fuse::Auto if fusable && on_gpu => Self::AUTO_GPU,
            Fuse::Auto => 1,
        }
    }
}

impl Serialize for Fuse {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Fuse::Auto => s.serialize_str("auto"),
            Fuse::Trials(k) => s.serialize_u32(*k),
        }
    }
}

impl<'de> Deserialize<'de> for Fuse {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Fuse, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Fuse;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("\"auto\" or a number of trials per pack, at least 1")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Fuse, E> {
                match s {
                    "auto" => Ok(Fuse::Auto),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(s), &self)),
                }
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Fuse, E> {
                match u32::try_from(n) {
                    Ok(k) if k >= 1 => Ok(Fuse::Trials(k)),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Signed(n), &self)),
                }
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Fuse, E> {
                self.visit_i64(i64::try_from(n).unwrap_or(i64::MAX))
            }
        }
        d.deserialize_any(Visitor)
    }
}

fn default_cpu_slots() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn one() -> u32 {
    1
}

/// `gpus = "auto"` or `gpus = [0, 1]`.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Gpus {
    #[default]
    Auto,
    List(Vec<u32>),
}

impl Serialize for Gpus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Gpus::Auto => s.serialize_str("auto"),
            Gpus::List(list) => list.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Gpus {
    /// One message for anything else ("untagged enum" says nothing to a user).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Gpus, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Gpus;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("\"auto\" or a list of GPU numbers such as [0, 1]")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Gpus, E> {
                match s {
                    "auto" => Ok(Gpus::Auto),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(s), &self)),
                }
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Gpus, A::Error> {
                let mut list = Vec::new();
                while let Some(n) = seq.next_element::<u32>()? {
                    list.push(n);
                }
                Ok(Gpus::List(list))
            }
        }
        d.deserialize_any(Visitor)
    }
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
    /// Whether the objective's trials can train fused ([`Fuse`]): the built-in trainables'
    /// can (the mlp and the cnn), a command's cannot.
    pub fn fusable(&self) -> bool {
        self.objective.as_ref().is_some_and(|o| o.builtin.is_some())
    }

    /// Trials per pack on a slot of this sweep ([`Fuse::trials_per_pack`]). `"auto"` packs
    /// where the sweep's trials fall into few packs: the searched keys whose values trials
    /// of one pack must share ([`tune_trials::PACK_KEYS`]; depth, width, batch size and
    /// optimizer mix) are lists of at most [`Fuse::AUTO_MOST_PACKS`] combinations. Otherwise
    /// packs would hold one trial each and only raise the number of trials running at once.
    pub fn trials_per_pack(&self, on_gpu: bool) -> usize {
        let packs = self
            .space
            .params()
            .iter()
            .filter(|p| tune_trials::PACK_KEYS.contains(&p.name.as_str()))
            .try_fold(1usize, |n, p| {
                p.domain.values().map(|v| n.saturating_mul(v.len()))
            });
        let few_packs = packs.is_some_and(|n| n <= Fuse::AUTO_MOST_PACKS);
        self.resources
            .fuse
            .trials_per_pack(self.fusable() && few_packs, on_gpu)
    }

    /// TPE's options for this experiment (`None` for another algorithm): `[search]`'s, as
    /// [`TpeOptions::under_rungs`] makes them under ASHA, [`TpeOptions::under_hyperband`]
    /// under HyperBand and
    /// [`TpeOptions::under_scheduler`] under median stopping or PBT.
    ///
    /// ```
    /// let spec = tune::ExperimentSpec::from_toml(
    ///     "name = \"demo\"\nmetric = \"loss\"\nsamples = 8\n[search]\nalgorithm = \"tpe\"\n[scheduler]\nkind = \"asha\"\n[space]\nx = { uniform = [0.0, 1.0] }",
    ///     "space.toml".as_ref(),
    /// ).unwrap();
    /// let tpe = spec.tpe_options().unwrap();
    /// assert_eq!(tpe.stopped_min_depth(), 0.1);
    /// assert_eq!(tpe.kernel_floors(), (0.01, 1.0, 0.0));
    /// ```
    pub fn tpe_options(&self) -> Option<TpeOptions> {
        let SearchSpec::Tpe(tpe) = &self.search.algorithm else {
            return None;
        };
        let tpe = tpe.clone();
        Some(match self.scheduler {
            SchedulerSpec::Fifo {} => tpe,
            SchedulerSpec::Asha(_) => tpe.under_rungs(),
            SchedulerSpec::Hyperband(_) => tpe.under_hyperband(),
            SchedulerSpec::Median(_) | SchedulerSpec::Pbt(_) => tpe.under_scheduler(),
        })
    }

    /// The search algorithm this spec asks for, with its options.
    pub fn make_searcher(&self) -> Result<Box<dyn Searcher>, SearcherError> {
        let space = self.space.clone();
        let searcher: Box<dyn Searcher> = match &self.search.algorithm {
            SearchSpec::Random {} => Box::new(RandomSearch::new(space, self.seed)),
            SearchSpec::Grid {} => Box::new(GridSearch::new(space, self.seed)?),
            SearchSpec::Tpe(_) => {
                let options = self.tpe_options().unwrap_or_default();
                Box::new(Tpe::new(space, self.seed, options))
            }
            SearchSpec::Gp(options) => Box::new(GpSearch::new(space, self.seed, options.clone())?),
            SearchSpec::Nsga2(options) => Box::new(Nsga2::new(space, self.seed, options.clone())),
        };
        let searcher: Box<dyn Searcher> = match &self.search.warm_start {
            Some(warm) => Box::new(WithPriorTrials::new(warm.trials.clone(), searcher)),
            None => searcher,
        };
        if self.search.initial.is_empty() {
            return Ok(searcher);
        }
        let points = self.initial_points()?;
        Ok(Box::new(WithInitialPoints::new(
            points,
            self.space.clone(),
            self.seed,
            searcher,
        )))
    }

    /// `[[search.initial]]` checked against the space (numbered from 1 in errors).
    fn initial_points(&self) -> Result<Vec<Params>, SearcherError> {
        self.search
            .initial
            .iter()
            .enumerate()
            .map(|(i, p)| {
                self.space
                    .check_point(p)
                    .map_err(|error| SearcherError::InitialPoint {
                        number: i + 1,
                        error,
                    })
            })
            .collect()
    }

    /// The trial scheduler this spec asks for, with its settings.
    pub fn make_scheduler(&self) -> Box<dyn Scheduler> {
        match &self.scheduler {
            SchedulerSpec::Fifo {} => Box::new(Fifo),
            SchedulerSpec::Median(c) => Box::new(MedianStopping::new(c.clone(), self.mode)),
            SchedulerSpec::Asha(c) => c.build(self.mode, self.seed),
            SchedulerSpec::Hyperband(c) => Box::new(HyperBand::new(c.clone(), self.mode)),
            SchedulerSpec::Pbt(c) => Box::new(Pbt::new(
                c.clone(),
                self.space.clone(),
                self.mode,
                self.seed,
            )),
        }
    }

    /// The folder that holds this sweep's trial folders (`trials/<id>`): `[store] checkpoints`
    /// joined with the name, else `experiment_dir` (the experiment folder, or a worker's own).
    pub fn trials_folder(&self, experiment_dir: &Path) -> PathBuf {
        match &self.store.checkpoints {
            Some(shared) => shared.join(&self.name),
            None => experiment_dir.to_path_buf(),
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
        for folder in [
            spec.store.checkpoints.as_mut(),
            spec.tracking.tensorboard.as_mut(),
        ]
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
                obj.validate(&self.space, &o.metric)
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

    /// `[store]` and `[tracking]`: folders and servers named, not empty.
    fn validate_store_and_tracking(&self) -> Result<(), InvalidSetting> {
        if self
            .store
            .checkpoints
            .as_ref()
            .is_some_and(|c| c.as_os_str().is_empty())
        {
            return Err(InvalidSetting::new(
                "store",
                FieldError::new("checkpoints", "expected a folder, found an empty string"),
            ));
        }
        if self
            .tracking
            .tensorboard
            .as_ref()
            .is_some_and(|c| c.as_os_str().is_empty())
        {
            return Err(InvalidSetting::new(
                "tracking",
                FieldError::new("tensorboard", "expected a folder, found an empty string"),
            ));
        }
        if let Some(MlflowServer::Url(url)) = &self.tracking.mlflow {
            check_mlflow_url(url)
                .map_err(|e| InvalidSetting::new("tracking", FieldError::new("mlflow", e)))?;
        }
        if cfg!(not(feature = "mlflow"))
            && !matches!(
                self.tracking.mlflow,
                None | Some(MlflowServer::FromEnvironment(false))
            )
        {
            return Err(InvalidSetting::new(
                "tracking",
                FieldError::new(
                    "mlflow",
                    "this build of tune has no MLflow client (it was built without the \
                     `mlflow` feature)",
                ),
            ));
        }
        if self
            .tracking
            .mlflow_experiment
            .as_ref()
            .is_some_and(|e| e.trim().is_empty())
        {
            return Err(InvalidSetting::new(
                "tracking",
                FieldError::new(
                    "mlflow_experiment",
                    "expected an MLflow experiment name, found an empty string",
                ),
            ));
        }
        Ok(())
    }

    /// `[resources]`: slots, and packs only where trials can be fused.
    fn validate_resources(&self) -> Result<(), InvalidSetting> {
        if self.resources.cpu_slots == 0 {
            return Err(InvalidSetting::new(
                "resources",
                FieldError::new("cpu_slots", "expected at least 1 slot, found 0"),
            ));
        }
        if let (Fuse::Trials(k @ 2..), false) = (self.resources.fuse, self.fusable()) {
            let found = match &self.objective {
                Some(_) => "a command objective",
                None => "an objective of code (Tuner::fit)",
            };
            return Err(InvalidSetting::new(
                "resources",
                FieldError::new(
                    "fuse",
                    format!(
                        "packs of {k} trials train as one model only with a built-in \
                         trainable (builtin = \"mlp\" or \"cnn\"), found {found}: use fuse = 1 \
                         or \"auto\""
                    ),
                ),
            ));
        }
        Ok(())
    }

    /// `grid` parameters belong to grid search.
    fn validate_grid(&self) -> Result<(), InvalidSetting> {
        if !matches!(self.search.algorithm, SearchSpec::Grid {}) {
            // Drawn like a choice by random search and TPE, which is rarely what was meant.
            let grid = self
                .space
                .params()
                .iter()
                .find(|p| matches!(p.domain, Domain::Grid(_)));
            if let Some(p) = grid {
                return Err(InvalidSetting::new(
                    "space",
                    FieldError::new(
                        &p.name,
                        format!(
                            "a `grid` parameter is enumerated only by `[search] algorithm = \"grid\"`, and this sweep's is \"{}\"; use `choice` to have it drawn at random",
                            self.search.algorithm.algorithm().as_str()
                        ),
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `[[search.initial]]`: points in the space, within the budget, not for grid search.
    fn validate_initial(&self) -> Result<(), InvalidSetting> {
        if !self.search.initial.is_empty() {
            let initial = |message: String| {
                Err(InvalidSetting::new(
                    "search",
                    FieldError::new("initial", message),
                ))
            };
            if matches!(self.search.algorithm, SearchSpec::Grid {}) {
                return initial(
                    "grid search enumerates its grid and takes no initial points: use \
                     algorithm = \"random\", \"tpe\" or \"gp\""
                        .to_string(),
                );
            }
            if self.search.initial.len() as u64 > self.samples {
                return initial(format!(
                    "{} initial points, but samples = {}: the points count toward samples",
                    self.search.initial.len(),
                    self.samples
                ));
            }
            if let Err(SearcherError::InitialPoint { number, error }) = self.initial_points() {
                // Keyed `initial[N].name`, so that the error points at that line of the N-th
                // [[search.initial]] table.
                let text = error.to_string();
                let prefix = format!("`{}`: ", error.name());
                return Err(InvalidSetting::new(
                    "search",
                    FieldError::new(
                        format!("initial[{number}].{}", error.name()),
                        text.strip_prefix(&prefix).unwrap_or(&text),
                    ),
                ));
            }
        }
        Ok(())
    }

    /// A warm start: an algorithm that learns, trials in the space with finite values.
    fn validate_warm_start(&self) -> Result<(), InvalidSetting> {
        if let Some(warm) = &self.search.warm_start {
            let warm_start = |message: String| {
                Err(InvalidSetting::new(
                    "search",
                    FieldError::new("warm_start", message),
                ))
            };
            if matches!(
                self.search.algorithm,
                SearchSpec::Random {} | SearchSpec::Grid {}
            ) {
                return warm_start(format!(
                    "{} search does not learn from earlier trials: use algorithm = \"tpe\" or \"gp\"",
                    self.search.algorithm.algorithm().as_str()
                ));
            }
            for (i, trial) in warm.trials.iter().enumerate() {
                if let Err(e) = self.space.check_point(&trial.params) {
                    return warm_start(format!("trial {} of {}: {e}", i + 1, warm.from));
                }
                if !trial.value.is_finite() {
                    return warm_start(format!(
                        "trial {} of {}: expected a finite value, found {}",
                        i + 1,
                        warm.from,
                        trial.value
                    ));
                }
            }
        }
        Ok(())
    }

    /// The algorithm's own options, and a space the algorithm can model.
    fn validate_algorithm(&self) -> Result<(), InvalidSetting> {
        if let SearchSpec::Tpe(tpe) = &self.search.algorithm {
            tpe.validate()
                .map_err(|e| InvalidSetting::new("search", e))?;
        }
        if let SearchSpec::Gp(gp) = &self.search.algorithm {
            gp.validate()
                .map_err(|e| InvalidSetting::new("search", e))?;
            // The searcher's own rule, checked here so that it is exit 2 before anything runs.
            if let Err(ConditionalSpace(names)) = UnitSpace::new(&self.space) {
                let first = names[0].clone();
                return Err(InvalidSetting::new(
                    "space",
                    FieldError::new(&first, ConditionalSpace(vec![first.clone()]).to_string()),
                ));
            }
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
        let names: Vec<&str> = self.objectives.iter().map(|o| o.metric.as_str()).collect();
        let several = format!(
            "this sweep has {} objectives ({})",
            names.len(),
            names.join(", ")
        );
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
