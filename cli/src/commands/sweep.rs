//! What `run` and `resume` share: a sweep under the dashboard or the progress line, and
//! its last words.

use std::io::IsTerminal;
use std::process::ExitCode;

use tune::experiment::StoreLocation;
use tune::{now_ms, value_text, TuneError, Tuner};
use tune_cli::dashboard::{Hub, Update};

/// Runs a sweep: under the dashboard when asked for and stdout and stdin are a terminal,
/// with the progress line otherwise. Either way `tune watch` can look in while it runs.
fn sweep(tuner: Tuner, tui: bool) -> Result<tune::TuneResult, TuneError> {
    let hub = Hub::default();
    let control = tuner.control();
    let tuner = tuner
        .handle_signals(true)
        .observer(hub.serving_observer(control));
    if !(tui && std::io::stdout().is_terminal() && std::io::stdin().is_terminal()) {
        return tuner.progress(true).fit_spec();
    }
    let updates = hub.subscribe();
    let stop = tuner.stop_handle();
    let coordinator = std::thread::Builder::new()
        .name("tune-coordinator".into())
        .spawn(move || {
            let result = tuner.fit_spec();
            if let Err(e) = &result {
                // The dashboard hears why the sweep ended, then is left to the user.
                hub.publish(Update::Log {
                    at: now_ms(),
                    text: format!("error: {e}"),
                });
                hub.publish(Update::Ended {
                    at: now_ms(),
                    interrupted: true,
                });
            }
            drop(hub);
            result
        })
        .map_err(|e| TuneError::io("starting the coordinator", e))?;
    let shown = tune_cli::dashboard::run(updates, Some(stop.clone()));
    if stop.is_stopped() {
        println!("tune: stopping: running trials are ended and left for `tune resume`");
    }
    if let Err(e) = shown {
        // Without a dashboard the sweep goes on; say why and wait for it.
        eprintln!("tune: the dashboard failed ({e}); the sweep goes on without it");
    }
    coordinator.join().unwrap_or_else(|_| {
        Err(TuneError::Io {
            context: "the coordinator".into(),
            source: std::io::Error::other("it panicked"),
        })
    })
}

/// Prints the best trial; exit 1 when no trial completed.
/// What `run` and `resume` end with: the sweep run on `slots` local slots where given (else
/// the spec's), shown on the dashboard where `tui`, then its end said.
pub fn sweep_to_end(
    mut tuner: Tuner,
    slots: Option<usize>,
    tui: bool,
) -> Result<ExitCode, TuneError> {
    if let Some(n) = slots {
        tuner = tuner.local_slots(n);
    }
    Ok(finish(&sweep(tuner, tui)?))
}

fn finish(result: &tune::TuneResult) -> ExitCode {
    let (metric, dir) = (result.metric(), result.dir());
    if let Some(reason) = result.stopped() {
        // A resume would meet a target or a no-improvement limit again at once.
        let flag = match reason {
            tune::StopReason::TimeBudget { .. } => "",
            _ => " --no-stop",
        };
        println!(
            "stopped early: {reason}; `tune resume {}{flag}` goes on from here",
            dir.display()
        );
    }
    if let Some(t) = result.first_failure() {
        println!(
            "{} trial(s) failed; trial {}: {}",
            result.failed(),
            t.id,
            t.error.as_deref().unwrap_or("?")
        );
    }
    match result.best() {
        Some(best) => {
            let params: Vec<String> = best
                .params
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            println!(
                "best trial {}: {metric} = {} ({})",
                best.id,
                value_text(best.value(metric).unwrap_or(f64::NAN)),
                params.join(", ")
            );
            let named = match result.store() {
                StoreLocation::Folder => dir.display().to_string(),
                // The URL itself comes from --store or TUNE_STORE again (it may hold a password).
                StoreLocation::Postgres(_) => format!("{} --store URL", result.name()),
            };
            println!("results: tune status {named} | tune export {named} --format json");
            ExitCode::SUCCESS
        }
        // Stopped early (as asked) before any trial completed: nothing went wrong.
        None if result.stopped().is_some() => {
            println!(
                "no trial completed yet; see `tune status {}`",
                dir.display()
            );
            ExitCode::SUCCESS
        }
        None => {
            eprintln!(
                "error: no trial completed; see `tune status {}`",
                dir.display()
            );
            ExitCode::from(1)
        }
    }
}
