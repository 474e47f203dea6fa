//! `[store]` and `[tracking]`: where the sweep keeps its records and checkpoints, and the
//! trackers it copies its results to.

use super::*;

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
    /// Where trial folders (checkpoints) live so that every machine of the sweep finds them:
    /// a shared folder, or `"database"` (the sweep's PostgreSQL database). Default: the
    /// experiment folder on the coordinator, `--dir` on each worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoints: Option<CheckpointPlace>,
    /// With `checkpoints = "database"`: the largest trial folder kept, in MiB (default 1024);
    /// a trial whose folder grows past it fails, saying so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_checkpoint_mb: Option<u64>,
}

/// `[store] checkpoints`: where trial folders travel between machines.
///
/// ```
/// use tune::CheckpointPlace;
/// let spec = tune::ExperimentSpec::from_toml(
///     "name = \"m\"\nmetric = \"loss\"\nsamples = 4\n[store]\ncheckpoints = \"database\"\n\
///      [space]\nx = { uniform = [0.0, 1.0] }",
///     "space.toml".as_ref(),
/// ).unwrap();
/// assert_eq!(spec.store.checkpoints, Some(CheckpointPlace::Database));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "PathBuf", into = "PathBuf")]
pub enum CheckpointPlace {
    /// A folder every machine running the sweep's trials sees (a shared file system): trial
    /// folders go to `<folder>/<name>/trials/<id>`. Relative to the spec file's folder.
    Folder(PathBuf),
    /// `"database"`: each trial's folder is kept in the sweep's PostgreSQL database (chunked,
    /// with a checksum), written there by the worker as the trial checkpoints and fetched by
    /// whichever worker runs it next; an exploit's copy is made in the database. Trial folders
    /// stay in each machine's own folder. A folder named `database` is `"./database"`.
    Database,
}

impl From<PathBuf> for CheckpointPlace {
    fn from(path: PathBuf) -> CheckpointPlace {
        match path.to_str() {
            Some("database") => CheckpointPlace::Database,
            _ => CheckpointPlace::Folder(path),
        }
    }
}

impl From<CheckpointPlace> for PathBuf {
    fn from(place: CheckpointPlace) -> PathBuf {
        match place {
            CheckpointPlace::Folder(path) => path,
            CheckpointPlace::Database => PathBuf::from("database"),
        }
    }
}

/// The largest trial folder kept in the database where `max_checkpoint_mb` is not set.
const DEFAULT_MAX_CHECKPOINT_MB: u64 = 1024;

impl StoreSpec {
    pub(super) fn is_default(&self) -> bool {
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
    pub(super) fn is_default(&self) -> bool {
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

/// An MLflow tracking URI tune can talk to: `http://` or `https://` and a host, `databricks`
/// (the default profile of `~/.databrickscfg`, or `DATABRICKS_HOST` and `DATABRICKS_TOKEN`), or
/// `databricks://PROFILE`.
///
/// ```
/// assert!(tune::check_mlflow_url("databricks://staging").is_ok());
/// assert!(tune::check_mlflow_url("file:///tmp/mlruns").is_err());
/// ```
pub fn check_mlflow_url(url: &str) -> Result<(), String> {
    #[cfg(feature = "mlflow")]
    return crate::tracking::mlflow::check_uri(url);
    #[cfg(not(feature = "mlflow"))]
    {
        let _ = url;
        Ok(())
    }
}

impl ExperimentSpec {
    /// The folder that holds this sweep's trial folders (`trials/<id>`): `[store] checkpoints`
    /// joined with the name, else `experiment_dir` (the experiment folder, or a worker's own).
    pub fn trials_folder(&self, experiment_dir: &Path) -> PathBuf {
        match &self.store.checkpoints {
            Some(CheckpointPlace::Folder(shared)) => shared.join(&self.name),
            Some(CheckpointPlace::Database) | None => experiment_dir.to_path_buf(),
        }
    }

    /// The size cap of a trial folder kept in the database, in bytes, where the sweep keeps
    /// them there (`[store] checkpoints = "database"`); `None` otherwise.
    pub fn database_checkpoints(&self) -> Option<u64> {
        (self.store.checkpoints == Some(CheckpointPlace::Database)).then(|| {
            self.store
                .max_checkpoint_mb
                .unwrap_or(DEFAULT_MAX_CHECKPOINT_MB)
                .saturating_mul(1 << 20)
        })
    }

    /// `[store]` and `[tracking]`: folders and servers named, not empty.
    pub(super) fn validate_store_and_tracking(&self) -> Result<(), InvalidSetting> {
        if self
            .store
            .checkpoints
            .as_ref()
            .is_some_and(|c| matches!(c, CheckpointPlace::Folder(f) if f.as_os_str().is_empty()))
        {
            return Err(InvalidSetting::new(
                "store",
                FieldError::new("checkpoints", "expected a folder, found an empty string"),
            ));
        }
        match (&self.store.checkpoints, self.store.max_checkpoint_mb) {
            (_, Some(0)) => {
                return Err(InvalidSetting::new(
                    "store",
                    FieldError::new("max_checkpoint_mb", "expected at least 1 (MiB), found 0"),
                ))
            }
            (Some(CheckpointPlace::Database), _) | (_, None) => {}
            (_, Some(_)) => {
                return Err(InvalidSetting::new(
                    "store",
                    FieldError::new(
                        "max_checkpoint_mb",
                        "caps checkpoints kept in the database: set it with \
                         checkpoints = \"database\", found none",
                    ),
                ))
            }
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
}
