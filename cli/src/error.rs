//! How the command line words an error: with the command that goes on from it.

use tune::store::StorePlace;
use tune::{StoreError, TuneError};

/// The error as the command line words it: with the command that goes on from it.
pub fn cli_message(e: &TuneError) -> String {
    match e {
        TuneError::ExperimentExists(dir) => format!(
            "{} already holds an experiment; continue it with `tune resume {}`, or pass --dir for a new one",
            dir.display(),
            dir.display()
        ),
        TuneError::Failing { dir, reason } => format!(
            "{reason}\n  the sweep stopped; fix the objective, then `tune resume {}` goes on (failed trials stay failed)",
            dir.display()
        ),
        TuneError::Interrupted(dir) => format!(
            "interrupted; continue the sweep with `tune resume {}`",
            dir.display()
        ),
        TuneError::Samples(why) => format!("--samples: {why}"),
        TuneError::Store(StoreError::Damaged { at, .. }) => format!(
            "{e}\n  `tune export {} --salvage` writes out every trial it can still read",
            at.experiment()
        ),
        TuneError::Store(StoreError::Database {
            at: at @ StorePlace::Postgres { .. },
            ..
        }) => {
            // A database's URL, not a folder: the experiment is resumed by its name.
            let name = at.experiment();
            format!(
                "{e}\n  check the server, the URL and the credentials (--store or TUNE_STORE); a sweep stopped by this goes on from its last acknowledged result with `tune resume {name} --store URL`"
            )
        }
        TuneError::Store(StoreError::Database { at, .. }) => format!(
            // The sweep stopped at its last sync: what was acknowledged is kept.
            "{e}\n  once that is fixed (a full disk freed), `tune resume {}` continues the sweep from its last acknowledged result",
            at.experiment()
        ),
        other => other.to_string(),
    }
}
