//! The experiment folder: `runs/<name>/` with the frozen spec, the database and trial folders.

use std::path::{Path, PathBuf};

use tune_search::TrialId;

use crate::error::TuneError;
use crate::spec::ExperimentSpec;
use crate::store::{Meta, Snapshot, SledStore, StoreError, TrialStore};

/// A human-readable copy of the spec the sweep was started with.
pub const SPEC_FILE: &str = "spec.toml";
/// The sled database.
pub const DB_DIR: &str = "tune.db";
/// One folder per trial, for checkpoints and outputs.
pub const TRIALS_DIR: &str = "trials";
/// The store layout this build writes and reads.
pub const FORMAT: u32 = 1;

/// The folder of trial `id`.
pub fn trial_dir(dir: &Path, id: TrialId) -> PathBuf {
    dir.join(TRIALS_DIR).join(id.to_string())
}

/// An opened experiment: its store and what the store held.
pub struct Experiment {
    pub dir: PathBuf,
    pub store: SledStore,
    pub snapshot: Snapshot,
}

impl Experiment {
    /// Creates a new experiment in `dir`, which must not exist or be empty.
    /// `spec_text` is the original file, kept verbatim; without it the spec is written as TOML.
    pub fn create(dir: &Path, spec: &ExperimentSpec, spec_text: Option<&str>) -> Result<Experiment, TuneError> {
        if dir.join(DB_DIR).exists() {
            return Err(TuneError::ExperimentExists(dir.to_path_buf()));
        }
        if dir.exists() && std::fs::read_dir(dir).map_err(|e| TuneError::io(format!("reading {}", dir.display()), e))?.next().is_some() {
            return Err(TuneError::Invalid(format!(
                "{} exists and is not empty; choose another --dir for the new experiment",
                dir.display()
            )));
        }
        std::fs::create_dir_all(dir).map_err(|e| TuneError::io(format!("creating {}", dir.display()), e))?;
        let text = match spec_text {
            Some(t) => t.to_string(),
            None => toml::to_string(spec).map_err(|e| TuneError::Invalid(format!("the spec cannot be written as TOML: {e}")))?,
        };
        let spec_path = dir.join(SPEC_FILE);
        std::fs::write(&spec_path, text).map_err(|e| TuneError::io(format!("writing {}", spec_path.display()), e))?;
        let mut store = SledStore::open(&dir.join(DB_DIR))?;
        let meta = Meta {
            format: FORMAT,
            spec: spec.clone(),
            samples: spec.samples,
        };
        store.put_meta(&meta)?;
        store.sync()?;
        Ok(Experiment {
            dir: dir.to_path_buf(),
            store,
            snapshot: Snapshot { meta, trials: Vec::new() },
        })
    }

    /// Opens an existing experiment, refusing folders that are not one.
    pub fn open(dir: &Path) -> Result<Experiment, TuneError> {
        let not = |reason: &str| TuneError::NotAnExperiment {
            path: dir.to_path_buf(),
            reason: reason.to_string(),
        };
        if !dir.is_dir() {
            return Err(not("no such folder"));
        }
        if !dir.join(DB_DIR).is_dir() {
            return Err(not(&format!("it has no {DB_DIR} database")));
        }
        let store = SledStore::open(&dir.join(DB_DIR))?;
        let snapshot = match store.load() {
            Ok(s) => s,
            Err(StoreError::NoMeta) => return Err(not("its database holds no experiment record")),
            Err(e) => return Err(e.into()),
        };
        if snapshot.meta.format != FORMAT {
            return Err(not(&format!(
                "it was written in store format {}, this build reads format {FORMAT}",
                snapshot.meta.format
            )));
        }
        Ok(Experiment {
            dir: dir.to_path_buf(),
            store,
            snapshot,
        })
    }

    /// Raises the budget to `samples` (and records it before anything runs).
    pub fn set_samples(&mut self, samples: u64) -> Result<(), TuneError> {
        let created = self.snapshot.trials.len() as u64;
        if samples == 0 {
            return Err(TuneError::Invalid("--samples: expected at least 1, found 0".into()));
        }
        if samples < self.snapshot.meta.samples && samples < created {
            return Err(TuneError::Invalid(format!(
                "--samples {samples} is below the {created} trials already created; the budget can only grow"
            )));
        }
        self.snapshot.meta.samples = samples;
        self.store.put_meta(&self.snapshot.meta)?;
        self.store.sync()?;
        Ok(())
    }
}
