//! What `status`, `export`, `plot`, `check` and `watch` read of an experiment.

use std::path::Path;

use tune::experiment::Experiment;
use tune::remote::ExperimentReader;
use tune::store::StorePlace;
use tune::{ExperimentSpec, TuneError};

use crate::args::Named;

/// An experiment as stored, with how to name where it is kept.
pub struct Stored {
    pub place: StorePlace,
    pub stored: tune::store::StoredExperiment,
    /// The connection it was read over (an experiment in a database), for what else a command
    /// reads there.
    pub db: Option<ExperimentReader>,
}

/// What is stored of the experiment.
pub fn stored_of(named: &Named) -> Result<Stored, TuneError> {
    match named {
        Named::Folder(dir) => Ok(Stored {
            place: StorePlace::Folder(dir.clone()),
            stored: Experiment::open(dir)?.stored,
            db: None,
        }),
        Named::InDatabase { url, name } => {
            let mut db = Experiment::postgres_reader(url, name)?;
            Ok(Stored {
                place: tune::store::postgres_location(url, name),
                stored: db.stored()?,
                db: Some(db),
            })
        }
    }
}

/// A reader that stopped reading (`tune status | head`) is not an error.
pub fn quiet_on_broken_pipe(written: std::io::Result<()>) -> Result<(), TuneError> {
    match written {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(TuneError::Io {
            context: "writing to stdout".into(),
            source: e,
        }),
        _ => Ok(()),
    }
}

/// What `status` and `export` read: the experiment's store, or, while a sweep runs there and
/// holds the store, what that sweep's coordinator holds (as `tune watch` sees it).
pub struct SweepState {
    /// Where it is kept, as messages name it.
    pub place: StorePlace,
    pub spec: ExperimentSpec,
    /// The budget in force.
    pub samples: u64,
    /// When the experiment was created (Unix ms; 0 where unknown: a running folder sweep).
    pub created_at: u64,
    pub trials: Vec<tune::Trial>,
    pub live: bool,
    /// Its coordinator and remote workers (a sweep in a database).
    pub serving: tune::remote::Serving,
    /// The connection it was read over (a sweep in a database).
    pub db: Option<ExperimentReader>,
}

impl SweepState {
    pub fn load(named: &Named) -> Result<SweepState, TuneError> {
        let dir = match named {
            Named::Folder(dir) => dir,
            // A database is read as it is, running sweep or not.
            Named::InDatabase { url, name } => return SweepState::in_database(url, name),
        };
        // A running sweep is asked first: its store stays locked while it runs.
        if let Some(board) = tune_cli::dashboard::live_board(dir) {
            let file = dir.join(tune::experiment::SPEC_FILE);
            let text = std::fs::read_to_string(&file)
                .map_err(|e| TuneError::io(format!("reading {}", file.display()), e))?;
            return Ok(SweepState {
                place: StorePlace::Folder(dir.to_path_buf()),
                spec: ExperimentSpec::from_toml(&text, &file)?,
                samples: board.header.total,
                created_at: 0,
                trials: board.trials.iter().map(|v| v.to_trial()).collect(),
                live: true,
                serving: Default::default(),
                db: None,
            });
        }
        let exp = Experiment::open(dir)?;
        Ok(SweepState {
            place: StorePlace::Folder(exp.dir),
            spec: exp.stored.meta.spec,
            samples: exp.stored.meta.samples,
            created_at: exp.stored.meta.created_at,
            trials: exp.stored.trials,
            live: false,
            serving: Default::default(),
            db: None,
        })
    }

    fn in_database(url: &str, name: &str) -> Result<SweepState, TuneError> {
        let mut db = Experiment::postgres_reader(url, name)?;
        let stored = db.stored()?;
        let serving = db.serving()?;
        Ok(SweepState {
            place: tune::store::postgres_location(url, name),
            spec: stored.meta.spec,
            samples: stored.meta.samples,
            created_at: stored.meta.created_at,
            trials: stored.trials,
            live: serving.coordinator.is_some(),
            serving,
            db: Some(db),
        })
    }

    /// What a damaged store still holds, with a word on stderr about what it lost.
    pub fn salvage(dir: &Path) -> Result<SweepState, TuneError> {
        let (stored, held) = Experiment::salvage(dir)?;
        let results: usize = stored.trials.iter().map(|t| t.results.len()).sum();
        eprintln!(
            "tune: salvaged {} trials and {results} results from {}{}",
            stored.trials.len(),
            dir.join(tune::experiment::DB_DIR).display(),
            held.map(|h| format!("; at its last sync it held {h}"))
                .unwrap_or_default()
        );
        Ok(SweepState {
            place: StorePlace::Folder(dir.to_path_buf()),
            spec: stored.meta.spec,
            samples: stored.meta.samples,
            created_at: stored.meta.created_at,
            trials: stored.trials,
            live: false,
            serving: Default::default(),
            db: None,
        })
    }
}
