//! `[tracking] tensorboard`: the sweep's event files written as results arrive, on a thread
//! of their own so that a slow disk never holds up the coordinator.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use tune_search::{Params, Status, TrialId};

use super::{
    replace, run_folder, scalars, secs, session_end, session_start, write_sweep, EVENTS_FILE,
};
use crate::observer::{Event, Notes, Observer, Summary, SweepInfo};
use crate::tracking::Background;
use crate::trial::{now_ms, Trial, TrialResult};

/// Writes the sweep into a TensorBoard folder as it runs: an [`Observer`] whose files are the
/// ones [`super::write_sweep`] writes. On start (and on resume) it rewrites every run from
/// the stored trials, so that what a killed process had not yet written is there again; then
/// it appends. A write that fails mid-sweep is reported once on stderr and logging stops; the
/// sweep goes on, and `tune export --format tensorboard` writes the folder again later.
///
/// ```
/// let space = tune::Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
/// let dir = std::env::temp_dir().join(format!("tune-doc-tb-live-{}", std::process::id()));
/// let logger = tune::tracking::tensorboard::TensorBoardLogger::new(&dir).unwrap();
/// let tuner = tune::Tuner::new(space).observer(logger);
/// # drop(tuner);
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub struct TensorBoardLogger {
    writer: Background<Msg>,
}

/// What the writer thread is told; owned copies of the coordinator's borrowed events.
enum Msg {
    /// The trials so far, and where to tell the user about a failure.
    Start(Vec<Trial>, Notes),
    Started(TrialId, Params, f64),
    Result(TrialId, TrialResult, f64),
    Paused(TrialId),
    Ended(TrialId, Status, f64),
}

impl TensorBoardLogger {
    /// Creates `dir` and checks now that a file can be written in it, so that a folder that
    /// cannot be written is an error before the sweep starts, not a warning in the middle of it.
    pub fn new(dir: &Path) -> io::Result<Self> {
        let cannot = |e: io::Error| {
            io::Error::new(
                e.kind(),
                format!("cannot write TensorBoard's folder {}: {e}", dir.display()),
            )
        };
        std::fs::create_dir_all(dir).map_err(cannot)?;
        let probe = dir.join(format!(".tune-probe-{}", std::process::id()));
        replace(&probe, b"").map_err(cannot)?;
        let _ = std::fs::remove_file(&probe);
        let mut writer = Writer {
            dir: dir.to_path_buf(),
            open: HashMap::new(),
            notes: Notes::stderr(),
        };
        let writer = Background::spawn("tune-tensorboard", move |rx| {
            if let Err(e) = writer.serve(&rx) {
                writer.notes.tell(format!(
                    "warning: TensorBoard logging to {} stopped: {e}; the sweep goes on, \
                         and `tune export NAME --format tensorboard {}` writes the folder from \
                         the store later",
                    writer.dir.display(),
                    writer.dir.display()
                ));
            }
        })?;
        Ok(TensorBoardLogger { writer })
    }

    fn send(&self, msg: Msg) {
        self.writer.send(msg);
    }
}

impl Observer for TensorBoardLogger {
    fn on_start(&mut self, info: &SweepInfo<'_>, _summary: &Summary) {
        self.send(Msg::Start(info.trials.to_vec(), info.notes.clone()));
    }

    fn on_event(&mut self, event: &Event<'_>, _summary: &Summary) {
        let now = secs(now_ms());
        match event {
            Event::Started(t) => self.send(Msg::Started(t.id, t.params.clone(), now)),
            Event::Result(t, r) => self.send(Msg::Result(t.id, (*r).clone(), now)),
            Event::Paused(t) => self.send(Msg::Paused(t.id)),
            Event::Finished(t) => self.send(Msg::Ended(t.id, t.status, now)),
            Event::Scheduler(_) | Event::Note(_) | Event::Workers(_) | Event::Budget(_) => {}
        }
    }

    fn on_end(&mut self, _summary: &Summary) {
        // Everything sent is written before the sweep returns.
        self.writer.finish();
    }

    fn shows_notes(&self) -> bool {
        false
    }
}

/// The writer thread's state.
struct Writer {
    dir: PathBuf,
    /// The event files of running trials (closed when a trial pauses or ends, so that a big
    /// sweep holds few files open).
    open: HashMap<TrialId, BufWriter<File>>,
    notes: Notes,
}

impl Writer {
    /// Writes what arrives, flushing whenever the queue is drained, until the logger is done.
    fn serve(&mut self, rx: &mpsc::Receiver<Msg>) -> io::Result<()> {
        while let Ok(msg) = rx.recv() {
            self.handle(msg)?;
            while let Ok(msg) = rx.try_recv() {
                self.handle(msg)?;
            }
            for f in self.open.values_mut() {
                f.flush()?;
            }
        }
        Ok(())
    }

    fn handle(&mut self, msg: Msg) -> io::Result<()> {
        match msg {
            Msg::Start(trials, notes) => {
                self.notes = notes;
                self.open.clear();
                write_sweep(&self.dir, &trials)?;
            }
            Msg::Started(id, params, at) => {
                let f = self.file(id)?;
                f.write_all(&session_start(id, &params, at))?;
            }
            Msg::Result(id, r, at) => self.file(id)?.write_all(&scalars(&r, at))?,
            Msg::Paused(id) => {
                if let Some(mut f) = self.open.remove(&id) {
                    f.flush()?;
                }
            }
            Msg::Ended(id, status, at) => {
                if let Some(end) = session_end(status, at) {
                    self.file(id)?.write_all(&end)?;
                }
                if let Some(mut f) = self.open.remove(&id) {
                    f.flush()?;
                }
            }
        }
        Ok(())
    }

    /// Trial `id`'s event file, opened for appending (created with its version record).
    fn file(&mut self, id: TrialId) -> io::Result<&mut BufWriter<File>> {
        if !self.open.contains_key(&id) {
            let run = run_folder(&self.dir, id);
            std::fs::create_dir_all(&run)?;
            let path = run.join(EVENTS_FILE);
            if !path.exists() {
                replace(&path, &super::file_version(secs(now_ms())))?;
            }
            let f = OpenOptions::new().append(true).open(&path)?;
            self.open.insert(id, BufWriter::new(f));
        }
        Ok(self.open.get_mut(&id).expect("opened above"))
    }
}
