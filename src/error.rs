//! The errors of the `tune` library, each telling whether the user's input was at fault.

use std::path::PathBuf;

use crate::spec::SpecError;
use crate::stop::StopReason;
use crate::store::{StoreError, StorePlace};

/// Everything that can stop a sweep from starting or finishing.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    #[error("{0}")]
    Spec(#[from] SpecError),
    #[error("{at}: not a tune experiment ({reason})")]
    NotAnExperiment { at: StorePlace, reason: String },
    #[error("{} already holds an experiment; resume it, or use another folder for a new one", .0.display())]
    ExperimentExists(PathBuf),
    /// The database `store` (its URL without a password) already has an experiment `name`.
    #[error("{store} already holds an experiment named {name:?}; resume it, or give the new sweep another name")]
    ExperimentExistsIn { name: String, store: String },
    /// Bad settings given through the API or the command line.
    #[error("{0}")]
    Invalid(String),
    /// A budget (`samples`) that cannot be: none, or fewer than the trials already created.
    #[error("`samples`: {0}")]
    Samples(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("interrupted; the sweep in {} can be resumed", .0.display())]
    Interrupted(PathBuf),
    /// Trials failed in a row (`[stop] max_failed_trials`): the sweep stopped, resumable.
    #[error("the sweep in {} stopped: {reason}", dir.display())]
    Failing { dir: PathBuf, reason: StopReason },
}

impl TuneError {
    /// Whether the user's input caused it (exit code 2) rather than the run (exit code 1).
    pub fn is_input(&self) -> bool {
        matches!(
            self,
            TuneError::Spec(_)
                | TuneError::NotAnExperiment { .. }
                | TuneError::ExperimentExists(_)
                | TuneError::ExperimentExistsIn { .. }
                | TuneError::Invalid(_)
                | TuneError::Samples(_)
                | TuneError::Store(StoreError::Refused { .. })
                | TuneError::Store(StoreError::BadUrl { .. })
                | TuneError::Store(StoreError::Tls { .. })
                | TuneError::Store(StoreError::PostgresNotBuilt { .. })
        )
    }

    /// An I/O error, with what was being done when it happened.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> TuneError {
        TuneError::Io {
            context: context.into(),
            source,
        }
    }
}
