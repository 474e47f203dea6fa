//! `tune run SPEC`: a new sweep.

use std::path::Path;
use std::process::ExitCode;

use tune::experiment::StoreLocation;
use tune::{ExperimentSpec, TuneError, Tuner};

use crate::args::RunArgs;
use crate::commands::sweep::sweep_to_end;

pub fn run(args: RunArgs) -> Result<ExitCode, TuneError> {
    let RunArgs {
        spec,
        dir,
        no_tui,
        seed,
        warm_start,
        slots,
        store,
        serve,
        listen,
    } = args;
    let at = store.location()?;
    let (mut parsed, text) = ExperimentSpec::read(&spec)?;
    if parsed.objective.is_none() {
        return Err(TuneError::Invalid(format!(
        "{}: expected an [objective] table with `command = [...]` or `builtin = \"mlp\"`, found none",
        spec.display()
    )));
    }
    if let Some(seed) = seed {
        parsed.seed = seed;
    }
    if let Some(from) = warm_start {
        let read = match &at {
            StoreLocation::Folder => tune::read_warm_start(&from, &parsed)?,
            StoreLocation::Postgres(url) => {
                tune::read_warm_start_stored(url, &from.to_string_lossy(), &parsed)?
            }
        };
        println!(
            "tune: warm start from {}: {} completed trials{}",
            from.display(),
            read.warm_start.trials.len(),
            match read.left_out {
                0 => String::new(),
                n => format!(" ({n} outside this space's ranges left out)"),
            }
        );
        parsed.search.warm_start = Some(read.warm_start);
        parsed
            .validate()
            .map_err(|e| TuneError::Invalid(format!("{}: {e}", spec.display())))?;
    }
    // SAFETY: tune has started no thread yet.
    unsafe { tune::share_cores_among_trials(&parsed, slots) };
    let dir = dir.unwrap_or_else(|| Path::new("runs").join(&parsed.name));
    match &at {
        StoreLocation::Folder => {
            println!("tune: sweep `{}` in {}", parsed.name, dir.display())
        }
        StoreLocation::Postgres(_) => println!(
            "tune: sweep `{}` in {at} (trial folders in {})",
            parsed.name,
            dir.display()
        ),
    }
    // The web view of the folder the sweep goes in (its page appears once it starts), for as
    // long as the sweep runs.
    let server = if serve {
        let root = dir
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::create_dir_all(root)
            .map_err(|e| TuneError::io(format!("creating {}", root.display()), e))?;
        let source = match &at {
            StoreLocation::Folder => tune_cli::serve::Source::Folder(root.to_path_buf()),
            StoreLocation::Postgres(url) => tune_cli::serve::Source::Database(url.clone()),
        };
        let server = crate::commands::serve::start(source, root, listen)?;
        let name = dir.strip_prefix(root).unwrap_or(&dir).display().to_string();
        println!("tune: this sweep's page: {}#/s/{name}", server.url());
        Some(server)
    } else {
        None
    };
    let tuner = Tuner::from_spec(parsed).dir(dir).spec_text(text).store(at);
    let ended = sweep_to_end(tuner, slots, !no_tui).map_err(|e| match e {
        TuneError::Invalid(msg) => TuneError::Invalid(format!("{}: {msg}", spec.display())),
        other => other,
    });
    // The answer to a control that ended the sweep (its last trial stopped) is still sent.
    if let Some(server) = server {
        server.finish();
    }
    ended
}
