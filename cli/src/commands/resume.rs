//! `tune resume DIR | NAME --store URL`: an interrupted (or finished) sweep goes on.

use std::path::Path;
use std::process::ExitCode;

use tune::experiment::StoreLocation;
use tune::{ExperimentSpec, TuneError, Tuner};

use crate::args::{Named, ResumeArgs};
use crate::commands::sweep::sweep_to_end;

pub fn resume(args: ResumeArgs) -> Result<ExitCode, TuneError> {
    let ResumeArgs {
        experiment,
        store,
        dir,
        samples,
        max_t,
        no_stop,
        no_tui,
        slots,
    } = args;
    let (mut tuner, dir) = match Named::new(experiment, &store)? {
        Named::Folder(folder) => {
            if dir.is_some() {
                return Err(TuneError::Invalid(format!(
                "--dir is for an experiment in a database (--store); {} is the experiment's folder",
                folder.display()
            )));
            }
            (Tuner::resume(&folder), folder)
        }
        Named::InDatabase { url, name } => {
            let folder = dir.unwrap_or_else(|| Path::new("runs").join(&name));
            let at = StoreLocation::Postgres(url);
            (Tuner::resume_in(at, name).dir(&folder), folder)
        }
    };
    // The frozen copy holds the resources the sweep runs with; a folder without one is
    // reported by the resume itself.
    let frozen = dir.join(tune::experiment::SPEC_FILE);
    if let Ok(text) = std::fs::read_to_string(&frozen) {
        if let Ok(spec) = ExperimentSpec::from_toml(&text, &frozen) {
            // SAFETY: tune has started no thread yet.
            unsafe { tune::share_cores_among_trials(&spec, slots) };
        }
    }
    if let Some(n) = samples {
        tuner = tuner.samples(n);
    }
    if let Some(steps) = max_t {
        tuner = tuner.max_t(steps);
    }
    if no_stop {
        tuner = tuner.stop_when(tune::StopConditions::default());
    }
    println!("tune: resuming {}", dir.display());
    sweep_to_end(tuner, slots, !no_tui)
}
