//! The experiment folder: `runs/<name>/` with the frozen spec, the database and trial folders.

use std::path::{Path, PathBuf};

use tune_search::{Status, TrialId};

use crate::error::TuneError;
use crate::spec::ExperimentSpec;
use crate::store::{
    Meta, PgStore, SledStore, StoreError, StorePlace, StoredExperiment, TrialStore,
};

/// A human-readable copy of the spec the sweep was started with.
pub const SPEC_FILE: &str = "spec.toml";
pub use crate::store::DB_DIR;
/// One folder per trial, for checkpoints and outputs.
pub const TRIALS_DIR: &str = "trials";
/// In the folder of an experiment kept in PostgreSQL: the database's URL (without its
/// password), so that commands given the folder can say where the records are.
pub const STORE_FILE: &str = "store.url";

/// Where an experiment's records are kept.
///
/// ```
/// use tune::experiment::StoreLocation;
/// let at = StoreLocation::parse(Some("postgres://tune:pw@db/tune")).unwrap();
/// assert_eq!(at, StoreLocation::Postgres("postgres://tune:pw@db/tune".into()));
/// assert_eq!(at.to_string(), "postgres://tune@db/tune"); // no password in messages
/// assert_eq!(StoreLocation::parse(None).unwrap(), StoreLocation::Folder);
/// assert!(StoreLocation::parse(Some("mysql://db")).is_err());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum StoreLocation {
    /// `tune.db/` (sled) in the experiment folder: the default.
    #[default]
    Folder,
    /// A PostgreSQL database (`postgres://` URL): many experiments, each by the spec's name.
    Postgres(String),
}

/// The location as messages show it: a URL without its password.
impl std::fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreLocation::Folder => write!(f, "{DB_DIR}/ in the experiment folder"),
            StoreLocation::Postgres(url) => write!(f, "{}", crate::store::redact_url(url)),
        }
    }
}

impl StoreLocation {
    /// `--store` / `TUNE_STORE` as given: a `postgres://` (or `postgresql://`) URL, or none.
    pub fn parse(url: Option<&str>) -> Result<StoreLocation, TuneError> {
        match url {
            None | Some("") => Ok(StoreLocation::Folder),
            Some(u) if u.starts_with("postgres://") || u.starts_with("postgresql://") => {
                Ok(StoreLocation::Postgres(u.to_string()))
            }
            Some(other) => Err(TuneError::Invalid(format!(
                "--store: expected a postgres:// URL, found {:?}",
                crate::store::redact_url(other)
            ))),
        }
    }
}
/// The store layout this build writes. 2: `[search]` and `[scheduler]` are stored as tagged
/// configs with every setting written out. 3: TPE's `hypervolume_weights` among them. 4: GP's
/// `power_transform` and `avoid_repeats` among them. 5: TPE's `startup_counts_unmodelled`, and
/// its `constant_liar` left unset (off under the rung model) unless the spec sets it. 6: each
/// trial's `failed_attempts`, which `max_failures` counts (before, it counted every attempt).
/// 7: ASHA's `grace_period` left unset (a sixteenth of `max_t`) unless the spec sets it.
/// 8: the GP's `minimum_noise` (`gp_minimum_noise` under `auto`). 9: `auto`'s
/// `gp_under_rungs`. 10: `auto`'s `gp_exploit_fraction`. 11: `auto`'s `gp_kernel` (and the
/// GP's `kernel`).
pub const FORMAT: u32 = 11;
/// The layouts this build reads: 1 (the spec's options stored only where set) reads as 2 does,
/// each missing setting taking its default; 1 to 5 as the builds that wrote them ran them
/// (`read_as_written`).
pub const FORMATS_READ: [u32; 11] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11];

/// Settings added since a meta's layout, set to what the build that wrote it did, so that a
/// sweep resumed by this build decides as the one it started in would have: before format 3,
/// TPE weighed several objectives' good trials equally; before 4, GP standardised values only
/// and could suggest a trial's point again; before 5, TPE's startup counted only the trials
/// its model read, and its constant liar was on under every model; before 6, `max_failures`
/// counted every attempt a trial had started (one a kill of tune interrupted too), so each
/// counts as failed; before 7, ASHA's first rung was at step 1 unless set; before 8, the GP's
/// noise floor (`gp` and `auto`'s) was Optuna's 1e-6; before 9, `auto` gave sweeps under ASHA
/// or HyperBand to TPE; before 10, `auto`'s GP suggested every trial by expected improvement;
/// before 11, `auto`'s GP had a Matérn 5/2 kernel (the GP's `kernel`, new in 11, defaults to
/// the 5/2 every earlier build ran).
fn read_as_written(stored: &mut StoredExperiment) {
    if stored.meta.format < 6 {
        for t in &mut stored.trials {
            t.failed_attempts = t.attempts;
        }
    }
    let meta = &mut stored.meta;
    if let crate::SchedulerSpec::Asha(asha) = &mut meta.spec.scheduler {
        if meta.format < 7 {
            asha.grace_period.get_or_insert(1);
        }
    }
    match &mut meta.spec.search.algorithm {
        crate::spec::SearchSpec::Tpe(tpe) if meta.format < 5 => {
            if meta.format < 3 {
                tpe.hypervolume_weights = false;
            }
            tpe.startup_counts_unmodelled = false;
            tpe.constant_liar.get_or_insert(true);
        }
        crate::spec::SearchSpec::Gp(gp) if meta.format < 8 => {
            if meta.format < 4 {
                gp.power_transform = false;
                gp.avoid_repeats = false;
            }
            gp.minimum_noise = tune_search::gp::GpOptions::OPTUNA_MINIMUM_NOISE;
        }
        crate::spec::SearchSpec::Auto(auto) if meta.format < 11 => {
            if meta.format < 8 {
                auto.gp_minimum_noise = tune_search::gp::GpOptions::OPTUNA_MINIMUM_NOISE;
            }
            if meta.format < 9 {
                auto.gp_under_rungs = false;
            }
            if meta.format < 10 {
                auto.gp_exploit_fraction = 0.0;
            }
            auto.gp_kernel = Some(tune_search::gp::Matern::FiveHalves);
        }
        _ => {}
    }
}

/// What command trials write besides their reports (stderr, and stdout lines that are not
/// reports), one file per trial, on the machine that ran it.
pub const LOGS_DIR: &str = "logs";

/// Trial `id`'s log in experiment folder `dir` (see [`LOGS_DIR`]).
///
/// ```
/// let log = tune::experiment::trial_log(std::path::Path::new("runs/demo"), 7);
/// assert_eq!(log, std::path::Path::new("runs/demo/logs/7.log"));
/// ```
pub fn trial_log(dir: &Path, id: TrialId) -> PathBuf {
    dir.join(LOGS_DIR).join(format!("{id}.log"))
}

/// The folder of trial `id`.
pub fn trial_dir(dir: &Path, id: TrialId) -> PathBuf {
    dir.join(TRIALS_DIR).join(id.to_string())
}

/// Where the checkpoint an exploit took waits until the exploiting trial runs again.
fn exploit_staging(dir: &Path, id: TrialId) -> PathBuf {
    dir.join(TRIALS_DIR).join(format!(".exploit-{id}"))
}

/// Removes the exploits' staged checkpoints but those of the trials `exploiting` (stored as
/// waiting for theirs). Best effort: a folder left behind is only disk.
pub(crate) fn remove_stale_exploits(dir: &Path, exploiting: &[TrialId]) {
    let Ok(entries) = std::fs::read_dir(dir.join(TRIALS_DIR)) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(id) = name.to_str().and_then(|n| n.strip_prefix(".exploit-")) else {
            continue;
        };
        if id.parse().is_ok_and(|id: TrialId| exploiting.contains(&id)) {
            continue;
        }
        let _ = std::fs::remove_dir_all(entry.path());
    }
}

/// Waits for the checkpoint in trial folder `dir` that a built-in trainable may still be
/// writing behind its training (nothing else writes behind). Its error, if any, is its trial's.
pub(crate) fn settle_written_behind(dir: &Path) {
    #[cfg(feature = "builtin")]
    let _ = tune_trials::checkpoint::settle(dir);
    #[cfg(not(feature = "builtin"))]
    let _ = dir;
}

/// Takes the checkpoint of trial `from` for trial `id`, which exploits it, as it is now (as
/// Ray Tune does: `from` moves on); [`take_exploit`] moves it in when `id` runs again.
pub(crate) fn stage_exploit(dir: &Path, id: TrialId, from: TrialId) -> Result<(), TuneError> {
    let staged = exploit_staging(dir, id);
    let _ = std::fs::remove_dir_all(&staged);
    // "As it is now" is the latest checkpoint, also one still on its way to disk.
    settle_written_behind(&trial_dir(dir, from));
    copy_dir(&trial_dir(dir, from), &staged)
        .map_err(|e| TuneError::io(format!("copying the checkpoint of trial {from}"), e))
}

/// Puts the checkpoint trial `id` exploited in its folder: the one [`stage_exploit`] took, or,
/// where a crash came between the decision and that copy, `from`'s latest.
pub(crate) fn take_exploit(dir: &Path, id: TrialId, from: TrialId) -> Result<(), TuneError> {
    let (staged, dst) = (exploit_staging(dir, id), trial_dir(dir, id));
    let _ = std::fs::remove_dir_all(&dst);
    let moved = staged.is_dir() && std::fs::rename(&staged, &dst).is_ok();
    if !moved {
        settle_written_behind(&trial_dir(dir, from));
        copy_dir(&trial_dir(dir, from), &dst).map_err(|e| {
            TuneError::io(
                format!("copying the checkpoint of trial {from} to trial {id}"),
                e,
            )
        })?;
    }
    Ok(())
}

/// Copies a folder tree (a trial's checkpoint); a missing source copies nothing.
fn copy_dir(src: &Path, dst: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dst)?;
    let Ok(entries) = std::fs::read_dir(src) else {
        return Ok(());
    };
    for entry in entries {
        let entry = entry?;
        let to = dst.join(entry.file_name());
        let copied = match entry.file_type()?.is_dir() {
            true => copy_dir(&entry.path(), &to),
            false => std::fs::copy(entry.path(), to)
                .map(drop)
                .and_then(|()| crate::failpoint::hit("exploit.copy")),
        };
        match copied {
            // The running source renamed its temporary file over its checkpoint meanwhile:
            // the checkpoint itself is copied (old or new, whole) under its own name.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            other => other?,
        }
    }
    Ok(())
}

/// An opened experiment: its folder (trial checkpoints), its store and what the store held.
///
/// Reading the trials of a sweep that is not running (a running one holds the store: `open`
/// then fails with `StoreError::InUse`):
///
/// ```no_run
/// let exp = tune::experiment::Experiment::open("runs/quadratic".as_ref())?;
/// for trial in &exp.stored.trials {
///     println!("{} {:?} {:?}", trial.id, trial.status, trial.value("loss"));
/// }
/// # Ok::<(), tune::TuneError>(())
/// ```
pub struct Experiment {
    pub dir: PathBuf,
    pub store: Box<dyn TrialStore>,
    pub stored: StoredExperiment,
}

impl Experiment {
    /// Creates a new experiment in `dir`, which must not exist or be empty.
    /// `spec_text` is the original file, kept verbatim; without it the spec is written as TOML.
    pub fn create(
        dir: &Path,
        spec: &ExperimentSpec,
        spec_text: Option<&str>,
    ) -> Result<Experiment, TuneError> {
        Experiment::create_in(dir, spec, spec_text, &StoreLocation::Folder)
    }

    /// [`Experiment::create`], with the records kept `at` (in PostgreSQL: the experiment named
    /// by the spec's `name`, which must not exist there yet; `dir` holds the trial folders).
    pub fn create_in(
        dir: &Path,
        spec: &ExperimentSpec,
        spec_text: Option<&str>,
        at: &StoreLocation,
    ) -> Result<Experiment, TuneError> {
        let text = match spec_text {
            Some(t) => t.to_string(),
            None => spec_as_toml(spec)?,
        };
        let meta = Meta {
            format: FORMAT,
            spec: spec.clone(),
            samples: spec.samples,
            created_at: crate::trial::now_ms(),
        };
        if let StoreLocation::Postgres(url) = at {
            // The database is checked first: there the name is what must be new.
            return Experiment::create_in_postgres(dir, &text, meta, url);
        }
        refuse_used_folder(dir)?;
        // Built beside `dir` and renamed into place, so a crash mid-way leaves no half-made
        // experiment for `run` to refuse and `resume` to reject.
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let staging = dir.with_file_name(format!(".{name}.creating-{}", std::process::id()));
        let io =
            |what: &str, path: &Path, e| TuneError::io(format!("{what} {}", path.display()), e);
        remove_stale_staging(dir, &name);
        std::fs::create_dir_all(&staging).map_err(|e| io("creating", &staging, e))?;
        std::fs::write(staging.join(SPEC_FILE), text)
            .map_err(|e| io("writing", &staging.join(SPEC_FILE), e))?;
        {
            let mut store = SledStore::open(&staging.join(DB_DIR))?;
            store.put_meta(&meta)?;
            store.sync()?;
        }
        crate::failpoint::hit("create.before-rename")
            .map_err(|e| io("moving the new experiment to", dir, e))?;
        // Another `tune run` may have made the experiment since the check above: it got there
        // first, and this one refuses as if it had been there all along.
        let taken = |e: std::io::Error| {
            let _ = std::fs::remove_dir_all(&staging);
            match e.raw_os_error() {
                Some(libc::ENOTEMPTY | libc::EEXIST) => {
                    TuneError::ExperimentExists(dir.to_path_buf())
                }
                _ => io("moving the new experiment to", dir, e),
            }
        };
        if dir.exists() {
            // An empty folder the user made: replace it.
            std::fs::remove_dir(dir).map_err(taken)?;
        }
        std::fs::rename(&staging, dir).map_err(taken)?;
        // sled's IO threads can hold the closed database's lock a moment longer: `open` waits.
        let store = SledStore::open(&dir.join(DB_DIR))?;
        Ok(Experiment::new_created(dir, Box::new(store), meta))
    }

    /// A just-created experiment: its record written, no trial yet.
    fn new_created(dir: &Path, store: Box<dyn TrialStore>, meta: Meta) -> Experiment {
        Experiment {
            dir: dir.to_path_buf(),
            store,
            stored: StoredExperiment {
                meta,
                trials: Vec::new(),
            },
        }
    }

    /// The PostgreSQL half of [`Experiment::create_in`]: the folder first, the experiment
    /// record last (a crash between leaves a folder that the next `run` takes over, and no
    /// half-made experiment).
    fn create_in_postgres(
        dir: &Path,
        spec_text: &str,
        meta: Meta,
        url: &str,
    ) -> Result<Experiment, TuneError> {
        let name = meta.spec.name.clone();
        let mut store = PgStore::open(url, &name)?;
        match store.load() {
            Ok(_) => {
                return Err(TuneError::ExperimentExistsIn {
                    name,
                    store: crate::store::redact_url(url),
                })
            }
            Err(StoreError::NoMeta) => {}
            Err(e) => return Err(e.into()),
        }
        // A folder with `store.url` and no database is one a creation killed before its
        // experiment record was written (the database says the name is new): it is taken over.
        if !dir.join(STORE_FILE).is_file() || dir.join(DB_DIR).exists() {
            refuse_used_folder(dir)?;
        }
        write_postgres_folder(dir, url, Some(spec_text))?;
        store.put_meta(&meta)?;
        store.sync()?;
        Ok(Experiment::new_created(dir, Box::new(store), meta))
    }

    /// Opens experiment `name` kept `at`, its trial folders under `dir` (for the default
    /// store, `dir` is the experiment and `name` is not used). In a database, `dir` is made
    /// where missing, with its `spec.toml` and `store.url`, as on a machine taking over.
    pub fn open_in(dir: &Path, name: &str, at: &StoreLocation) -> Result<Experiment, TuneError> {
        let StoreLocation::Postgres(url) = at else {
            return Experiment::open(dir);
        };
        let store = PgStore::open_existing(url, name).map_err(|e| no_experiment(e, name, url))?;
        let exp = Experiment::from_store(dir, Box::new(store))?;
        // A folder kept from an earlier run here holds the spec as it was given.
        let spec_text = match dir.join(SPEC_FILE).exists() {
            true => None,
            false => Some(spec_as_toml(&exp.stored.meta.spec)?),
        };
        write_postgres_folder(dir, url, spec_text.as_deref())?;
        Ok(exp)
    }

    /// One connection to experiment `name` in the PostgreSQL database at `url`, for a command
    /// that reads several things of it; a database without it is [`TuneError::NotAnExperiment`].
    #[cfg(feature = "postgres")]
    pub fn postgres_reader(
        url: &str,
        name: &str,
    ) -> Result<crate::remote::ExperimentReader, TuneError> {
        crate::remote::ExperimentReader::connect(url, name).map_err(|e| no_experiment(e, name, url))
    }

    /// What is stored of experiment `name` in the PostgreSQL database at `url`, read without
    /// taking the experiment (its sweep may be running): for `status`, `export` and `watch`.
    pub fn read_postgres(url: &str, name: &str) -> Result<StoredExperiment, TuneError> {
        PgStore::read(url, name).map_err(|e| no_experiment(e, name, url))
    }

    /// Opens an existing experiment, refusing folders that are not one.
    pub fn open(dir: &Path) -> Result<Experiment, TuneError> {
        let not = |reason: &str| TuneError::NotAnExperiment {
            at: StorePlace::Folder(dir.to_path_buf()),
            reason: reason.to_string(),
        };
        match std::fs::metadata(dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => return Err(not("not a folder")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(not("no such folder"))
            }
            // Permission denied, say: the run's fault, not the input's.
            Err(e) => return Err(TuneError::io(format!("opening {}", dir.display()), e)),
        }
        // What this user may not read is said as such, not taken for a missing store.
        std::fs::read_dir(dir)
            .map_err(|e| TuneError::io(format!("reading {}", dir.display()), e))?;
        if let Ok(url) = std::fs::read_to_string(dir.join(STORE_FILE)) {
            return Err(not(&format!(
                "its records are in PostgreSQL, {}: name the experiment and pass --store with that URL (or set TUNE_STORE)",
                url.trim()
            )));
        }
        match std::fs::symlink_metadata(dir.join(DB_DIR)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(not(&format!("it has no {DB_DIR} database")))
            }
            Err(e) => {
                let at = dir.join(DB_DIR);
                return Err(TuneError::io(format!("opening {}", at.display()), e));
            }
            // A folder, or something else there: the store refuses what is not one as damaged.
            Ok(_) => {}
        }
        let store = SledStore::open(&dir.join(DB_DIR))?;
        Experiment::from_store(dir, Box::new(store))
    }

    /// Whatever can still be read of a damaged experiment's store (`tune export --salvage`),
    /// and what the store had held at its last sync, where it noted that.
    ///
    /// ```no_run
    /// let (stored, held) = tune::experiment::Experiment::salvage("runs/quadratic".as_ref())?;
    /// eprintln!("read {} trials; it held {}", stored.trials.len(), held.unwrap_or_default());
    /// # Ok::<(), tune::TuneError>(())
    /// ```
    pub fn salvage(dir: &Path) -> Result<(StoredExperiment, Option<String>), TuneError> {
        if !dir.join(DB_DIR).is_dir() {
            return Err(TuneError::NotAnExperiment {
                at: StorePlace::Folder(dir.to_path_buf()),
                reason: format!("it has no {DB_DIR} database"),
            });
        }
        // Read from a copy: opening a damaged database lets sled repair it its way, which may
        // drop more than it reads.
        let copy = std::env::temp_dir().join(format!("tune-salvage-{}", std::process::id()));
        let io = |e| {
            TuneError::io(
                format!(
                    "copying {} to {}",
                    dir.join(DB_DIR).display(),
                    copy.display()
                ),
                e,
            )
        };
        let _ = std::fs::remove_dir_all(&copy);
        copy_dir(&dir.join(DB_DIR), &copy).map_err(io)?;
        let _ = std::fs::remove_file(copy.join("tune.lock"));
        let mut salvaged = SledStore::open(&copy).map(|s| s.salvage());
        if matches!(salvaged, Err(StoreError::Damaged { .. })) {
            // sled's snapshot is a cache of its log: without it, sled reads the log itself.
            for entry in std::fs::read_dir(&copy).map_err(io)?.flatten() {
                if entry.file_name().to_string_lossy().starts_with("snap.") {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
            salvaged = SledStore::open(&copy).map(|s| s.salvage());
        }
        let _ = std::fs::remove_dir_all(&copy);
        let nothing = |problem: String| StoreError::Damaged {
            at: StorePlace::Folder(dir.join(DB_DIR)),
            problem: format!("{problem}; nothing could be salvaged"),
        };
        let salvaged = salvaged.map_err(|e| match e {
            // Name the experiment's database, not the copy.
            StoreError::Damaged { problem, .. } => nothing(problem),
            other => other,
        })?;
        // The experiment record lost: the frozen copy of the spec stands in for it.
        let meta = match salvaged.meta {
            Some(meta) => meta,
            None => {
                let file = dir.join(SPEC_FILE);
                let text = std::fs::read_to_string(&file).map_err(|_| {
                    nothing(format!(
                        "its experiment record is lost and {} unreadable",
                        file.display()
                    ))
                })?;
                let spec = ExperimentSpec::from_toml(&text, &file)?;
                Meta {
                    format: FORMAT,
                    samples: spec.samples,
                    spec,
                    created_at: 0,
                }
            }
        };
        let stored = StoredExperiment {
            meta,
            trials: salvaged.trials,
        };
        Ok((stored, salvaged.held))
    }

    /// An experiment whose records are in `store` (and whose trial folders are under `dir`),
    /// refusing a store that holds none or holds a format this build cannot read.
    pub fn from_store(dir: &Path, store: Box<dyn TrialStore>) -> Result<Experiment, TuneError> {
        let not = |reason: String| TuneError::NotAnExperiment {
            at: StorePlace::Folder(dir.to_path_buf()),
            reason,
        };
        let stored = match store.load() {
            Ok(s) => s,
            Err(StoreError::NoMeta) => {
                return Err(not("its database holds no experiment record".into()))
            }
            Err(e) => return Err(e.into()),
        };
        if !FORMATS_READ.contains(&stored.meta.format) {
            return Err(StoreError::Format {
                at: StorePlace::Folder(dir.join(DB_DIR)),
                found: stored.meta.format,
                read: &FORMATS_READ,
            }
            .into());
        }
        let mut stored = stored;
        read_as_written(&mut stored);
        Ok(Experiment {
            dir: dir.to_path_buf(),
            store,
            stored,
        })
    }

    /// Raises the scheduler's `max_t` (`raised`, from [`SchedulerSpec::raised_max_t`]): the
    /// trials completed at the old one go on from their checkpoints, queued as interrupted
    /// ones are, and the scheduler (replayed under the new `max_t`) decides at each step
    /// after as it would have. Returns their ids.
    ///
    /// The trials are written before the record: a kill in between leaves the old `max_t`,
    /// under which a resume completes those trials again at once.
    ///
    /// [`SchedulerSpec::raised_max_t`]: crate::SchedulerSpec::raised_max_t
    pub fn raise_max_t(
        &mut self,
        scheduler: crate::SchedulerSpec,
        raised: crate::RaisedMaxT,
    ) -> Result<Vec<TrialId>, TuneError> {
        let mut reopened = Vec::new();
        for t in &mut self.stored.trials {
            if t.status == Status::Completed && t.last_step() == Some(raised.from) {
                t.status = Status::Pending;
                t.finished_at = None;
                t.end_seq = None;
                self.store.put_trial(t)?;
                reopened.push(t.id);
            }
        }
        self.store.sync()?;
        self.stored.meta.spec.scheduler = scheduler;
        self.write_meta()?;
        Ok(reopened)
    }

    /// Raises the budget to `samples` (and records it before anything runs).
    pub fn set_samples(&mut self, samples: u64) -> Result<(), TuneError> {
        let created = self.stored.trials.len() as u64;
        if samples == 0 {
            return Err(TuneError::Samples("expected at least 1, found 0".into()));
        }
        if samples < self.stored.meta.samples && samples < created {
            return Err(TuneError::Samples(format!(
                "the budget can only grow, and {samples} is below the {created} trials already created"
            )));
        }
        self.stored.meta.samples = samples;
        self.write_meta()
    }

    /// Writes the experiment record, durably, in this build's layout; first the trials whose
    /// failures `read_as_written` counted, which a record of format 6 must hold.
    fn write_meta(&mut self) -> Result<(), TuneError> {
        if self.stored.meta.format < 6 {
            for t in self.stored.trials.iter().filter(|t| t.failed_attempts > 0) {
                self.store.put_trial(t)?;
            }
        }
        self.stored.meta.format = FORMAT;
        self.store.put_meta(&self.stored.meta)?;
        self.store.sync()?;
        Ok(())
    }
}

/// Removes what a `run` killed while creating this experiment left beside it: staging folders
/// `.{name}.creating-{pid}` whose process is gone. Best effort, and Linux only (the process
/// check reads `/proc`); elsewhere they stay, harmless, hidden, and never read.
fn remove_stale_staging(dir: &Path, name: &str) {
    if !cfg!(target_os = "linux") {
        return;
    }
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    let prefix = format!(".{name}.creating-");
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(pid) = file_name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new("/proc").join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The spec as TOML, for a `spec.toml` when the original text is not at hand.
fn spec_as_toml(spec: &ExperimentSpec) -> Result<String, TuneError> {
    toml::to_string(spec)
        .map_err(|e| TuneError::Invalid(format!("the spec cannot be written as TOML: {e}")))
}

/// Makes the folder of an experiment kept in PostgreSQL at `url`: its `store.url` (without
/// the password), and its `spec.toml` when `spec_text` is given.
fn write_postgres_folder(dir: &Path, url: &str, spec_text: Option<&str>) -> Result<(), TuneError> {
    let io = |path: &Path, e| TuneError::io(format!("writing {}", path.display()), e);
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    if let Some(text) = spec_text {
        let spec_file = dir.join(SPEC_FILE);
        std::fs::write(&spec_file, text).map_err(|e| io(&spec_file, e))?;
    }
    let store_file = dir.join(STORE_FILE);
    std::fs::write(&store_file, crate::store::redact_url(url) + "\n")
        .map_err(|e| io(&store_file, e))
}

/// A new experiment's folder must not exist or be empty.
fn refuse_used_folder(dir: &Path) -> Result<(), TuneError> {
    if dir.join(DB_DIR).exists() {
        return Err(TuneError::ExperimentExists(dir.to_path_buf()));
    }
    if dir.exists()
        && std::fs::read_dir(dir)
            .map_err(|e| TuneError::io(format!("reading {}", dir.display()), e))?
            .next()
            .is_some()
    {
        return Err(TuneError::Invalid(format!(
            "{} exists and is not empty; choose another folder for the new experiment",
            dir.display()
        )));
    }
    Ok(())
}

/// A store that holds no experiment `name`, said as such.
fn no_experiment(e: StoreError, name: &str, url: &str) -> TuneError {
    match e {
        StoreError::NoMeta => TuneError::NotAnExperiment {
            at: crate::store::postgres_location(url, name),
            reason: format!("no experiment named {name:?} there"),
        },
        other => other.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Meta, StoredExperiment};
    use crate::{AshaConfig, GpOptions, SchedulerSpec};

    /// `spec` (changed by `change` from a one-parameter spec) as a build reads it from a
    /// record of `format`.
    fn read_in_format(format: u32, change: impl FnOnce(&mut ExperimentSpec)) -> ExperimentSpec {
        let text =
            "name = \"t\"\nmetric = \"loss\"\nsamples = 1\n[space]\nx = { uniform = [0.0, 1.0] }\n";
        let mut spec = ExperimentSpec::from_toml(text, Path::new("t.toml")).unwrap();
        change(&mut spec);
        let mut stored = StoredExperiment {
            meta: Meta {
                format,
                samples: 1,
                spec,
                created_at: 0,
            },
            trials: Vec::new(),
        };
        read_as_written(&mut stored);
        stored.meta.spec
    }

    fn asha_read_in_format(format: u32, grace_period: Option<u64>) -> Option<u64> {
        let spec = read_in_format(format, |spec| {
            spec.scheduler = SchedulerSpec::Asha(AshaConfig {
                max_t: 52,
                grace_period,
                ..AshaConfig::default()
            })
        });
        match spec.scheduler {
            SchedulerSpec::Asha(c) => c.grace_period,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn gp_and_auto_keep_optunas_noise_floor_before_format_8() {
        use crate::spec::SearchSpec;
        let gp_floor = |format| {
            let spec = read_in_format(format, |spec| {
                spec.search.algorithm = SearchSpec::Gp(GpOptions::default())
            });
            match spec.search.algorithm {
                SearchSpec::Gp(gp) => gp.minimum_noise,
                other => panic!("{other:?}"),
            }
        };
        let auto_floor = |format| match read_in_format(format, |_| {}).search.algorithm {
            SearchSpec::Auto(auto) => auto.gp_minimum_noise,
            other => panic!("{other:?}"),
        };
        for format in [3, 7] {
            assert_eq!(gp_floor(format), GpOptions::OPTUNA_MINIMUM_NOISE);
            assert_eq!(auto_floor(format), GpOptions::OPTUNA_MINIMUM_NOISE);
        }
        assert_eq!(gp_floor(8), GpOptions::default().minimum_noise);
        assert_eq!(auto_floor(8), GpOptions::default().minimum_noise);
        assert!(GpOptions::default().minimum_noise < GpOptions::OPTUNA_MINIMUM_NOISE);
    }

    #[test]
    fn auto_gives_rung_sweeps_to_tpe_before_format_9() {
        use crate::spec::SearchSpec;
        let under_rungs = |format| match read_in_format(format, |_| {}).search.algorithm {
            SearchSpec::Auto(auto) => (auto.gp_under_rungs, auto.gp_minimum_noise),
            other => panic!("{other:?}"),
        };
        let noise = GpOptions::default().minimum_noise;
        assert_eq!(under_rungs(7), (false, GpOptions::OPTUNA_MINIMUM_NOISE));
        assert_eq!(under_rungs(8), (false, noise));
        assert_eq!(under_rungs(9), (true, noise));
    }

    #[test]
    fn auto_refines_its_best_at_the_end_from_format_10() {
        use crate::spec::SearchSpec;
        let fraction = |format| match read_in_format(format, |_| {}).search.algorithm {
            SearchSpec::Auto(auto) => auto.gp_exploit_fraction,
            other => panic!("{other:?}"),
        };
        assert_eq!(fraction(7), 0.0);
        assert_eq!(fraction(9), 0.0);
        assert_eq!(fraction(10), tune_search::EXPLOIT_FRACTION);
    }

    #[test]
    fn autos_gp_kernel_is_matern_52_before_format_11_and_the_spaces_after() {
        use crate::spec::SearchSpec;
        use tune_search::gp::Matern;
        let kernel = |format| match read_in_format(format, |_| {}).search.algorithm {
            SearchSpec::Auto(auto) => (auto.gp_kernel, auto.gp_exploit_fraction),
            other => panic!("{other:?}"),
        };
        let five = Some(Matern::FiveHalves);
        assert_eq!(kernel(9), (five, 0.0));
        assert_eq!(kernel(10), (five, tune_search::EXPLOIT_FRACTION));
        // From 11 the space picks it (`tune_search::auto_gp_kernel`).
        assert_eq!(kernel(11), (None, tune_search::EXPLOIT_FRACTION));
    }

    #[test]
    fn asha_without_a_grace_period_keeps_its_first_rung_at_1_before_format_7() {
        assert_eq!(asha_read_in_format(1, None), Some(1));
        assert_eq!(asha_read_in_format(6, None), Some(1));
        assert_eq!(asha_read_in_format(6, Some(2)), Some(2));
        assert_eq!(asha_read_in_format(7, None), None);
    }
}
