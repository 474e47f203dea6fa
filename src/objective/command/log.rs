//! A command trial's log: its stderr and the stdout lines that are not reports, appended to
//! `logs/<id>.log` in the experiment folder (each attempt under a line of its own), for `tune
//! serve`'s trial page and for the user. Capped: a trial that prints without end does not fill
//! the disk.

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use tune_search::TrialId;

/// The most one trial's log grows to; past it, one line says what was left out.
const MAX_LOG: u64 = 16 << 20;

/// The log of one attempt, shared by the tasks that read its stdout and stderr.
#[derive(Clone)]
pub(super) struct TrialLog(Arc<Mutex<LogFile>>);

struct LogFile {
    file: Option<std::fs::File>,
    written: u64,
}

impl TrialLog {
    /// Opens (appending) trial `id`'s log for `attempt`; a log that cannot be written is left
    /// out, never failing the trial.
    pub(super) fn open(experiment_dir: &Path, id: TrialId, attempt: u32) -> TrialLog {
        let path = crate::experiment::trial_log(experiment_dir, id);
        let file = path
            .parent()
            .map(std::fs::create_dir_all)
            .and_then(Result::ok)
            .and_then(|_| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .ok()
            });
        let written = file
            .as_ref()
            .and_then(|f| f.metadata().ok())
            .map_or(0, |m| m.len());
        let log = TrialLog(Arc::new(Mutex::new(LogFile { file, written })));
        log.write(format!("--- attempt {attempt} ---\n").as_bytes());
        log
    }

    pub(super) fn write(&self, bytes: &[u8]) {
        let mut log = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let LogFile { file, written } = &mut *log;
        let Some(f) = file else {
            return;
        };
        if *written + bytes.len() as u64 > MAX_LOG {
            let _ = writeln!(
                f,
                "--- the log is cut here: it reached {} MiB ---",
                MAX_LOG >> 20
            );
            *file = None;
            return;
        }
        if f.write_all(bytes).is_err() {
            *file = None;
            return;
        }
        *written += bytes.len() as u64;
    }
}
