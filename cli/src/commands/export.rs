//! `tune export`: every trial as JSON, CSV, Optuna's journal or TensorBoard's files, or
//! sent to MLflow.

use std::io::Write;
use std::process::ExitCode;

use tune::TuneError;

use crate::args::{ExportArgs, Format, Named};
use crate::commands::state::{quiet_on_broken_pipe, SweepState};

pub fn export(args: ExportArgs) -> Result<ExitCode, TuneError> {
    let ExportArgs {
        experiment,
        folder,
        store,
        format,
        salvage,
        to_mlflow,
    } = args;
    if let Some(url) = to_mlflow {
        return export_to_mlflow(&Named::new(experiment, &store)?, salvage, &url);
    }
    check_destination(format, folder.as_deref())?;
    let named = Named::new(experiment, &store)?;
    let mut sweep = load_to_export(&named, salvage)?;
    let workers = match &mut sweep.db {
        Some(db) if format == Format::Json => db.attempt_workers()?,
        _ => Default::default(),
    };
    let spec = &sweep.spec;
    let mut out = std::io::stdout().lock();
    let written = match format {
        Format::Json => serde_json::to_writer_pretty(
            &mut out,
            &tune::export::to_json(
                &sweep.trials,
                &spec.objectives(),
                &spec.constraints,
                &workers,
            ),
        )
        .map_err(std::io::Error::from)
        .and_then(|_| writeln!(out)),
        Format::Csv => tune::export::write_csv(
            &mut out,
            &sweep.trials,
            &spec.space,
            &spec.objectives(),
            &spec.constraints,
        ),
        Format::OptunaJournal => tune::export::write_optuna_journal(
            &mut out,
            &spec.name,
            &sweep.trials,
            &spec.space,
            &spec.objectives(),
            &spec.constraints,
        ),
        Format::Tensorboard => {
            let folder = folder.expect("checked above");
            tune::tracking::tensorboard::write_sweep(&folder, &sweep.trials).map_err(|e| {
                TuneError::Invalid(format!(
                    "cannot write TensorBoard's folder {}: {e}",
                    folder.display()
                ))
            })?;
            Ok(())
        }
    };
    quiet_on_broken_pipe(written)?;
    Ok(ExitCode::SUCCESS)
}

/// Whether `format` goes where `folder` says: TensorBoard's into a folder, the others to
/// stdout.
fn check_destination(format: Format, folder: Option<&std::path::Path>) -> Result<(), TuneError> {
    match (format, folder) {
        (Format::Tensorboard, None) => Err(TuneError::Invalid(
            "--format tensorboard writes a folder: name it after the experiment \
             (tune export NAME --format tensorboard OUT)"
                .into(),
        )),
        (Format::Json | Format::Csv | Format::OptunaJournal, Some(folder)) => {
            Err(TuneError::Invalid(format!(
                "unexpected argument {}: only --format tensorboard writes to a folder; the \
                 other formats go to stdout",
                folder.display()
            )))
        }
        _ => Ok(()),
    }
}

/// The sweep to export; `salvage`: read what a damaged sled store still holds.
fn load_to_export(named: &Named, salvage: bool) -> Result<SweepState, TuneError> {
    match (named, salvage) {
        (Named::Folder(dir), true) => SweepState::salvage(dir),
        (Named::InDatabase { .. }, true) => Err(TuneError::Invalid(
            "--salvage reads a damaged sled store (tune.db/); a PostgreSQL store is read as it is"
                .into(),
        )),
        (named, false) => SweepState::load(named),
    }
}

/// `tune export NAME --to-mlflow URL`.
fn export_to_mlflow(named: &Named, salvage: bool, url: &str) -> Result<ExitCode, TuneError> {
    tune::check_mlflow_url(url).map_err(|e| TuneError::Invalid(format!("--to-mlflow: {e}")))?;
    let sweep = match (named, salvage) {
        (Named::Folder(dir), true) => SweepState::salvage(dir)?,
        (_, _) => SweepState::load(named)?,
    };
    if sweep.live {
        return Err(TuneError::Invalid(format!(
            "{} is running: its own `[tracking] mlflow` logs it live; send it with --to-mlflow \
             once it has ended",
            sweep.place
        )));
    }
    let complete = sweep.trials.len() as u64 >= sweep.samples
        && sweep.trials.iter().all(|t| t.status.is_finished());
    let record = tune::tracking::mlflow::SweepRecord::new(&sweep.spec, sweep.created_at);
    let started = sweep
        .trials
        .iter()
        .filter(|t| t.started_at.is_some())
        .count();
    tune::tracking::mlflow::sync_sweep(url, record.clone(), &sweep.trials, complete).map_err(
        |e| {
            let message = format!("sending {} to MLflow: {e}", sweep.place);
            if e.is_transient() {
                TuneError::Io {
                    context: message,
                    source: std::io::Error::other(
                        "MLflow did not answer; nothing sent is lost, run it again",
                    ),
                }
            } else {
                TuneError::Invalid(message)
            }
        },
    )?;
    eprintln!(
        "tune: {started} trials of {} in MLflow at {url}, experiment {:?}{}",
        record.name,
        record.experiment,
        if complete {
            ""
        } else {
            " (the sweep has not ended: its run stays RUNNING)"
        }
    );
    Ok(ExitCode::SUCCESS)
}
