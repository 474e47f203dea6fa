//! The embedded default store: one sled database in the experiment folder.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tune_search::TrialId;

use super::{decode, encode, Meta, StoreError, StoredExperiment, TrialStore};
use crate::failpoint;
use crate::trial::{Trial, TrialResult};

/// Trials in sled: a `meta` tree, a `trials` tree keyed by big-endian id, and a `results` tree
/// keyed by (id, seq) so one report is one small insert.
///
/// ```
/// use tune::store::{SledStore, TrialStore};
/// let dir = tempfile::tempdir().unwrap();
/// let store = SledStore::open(&dir.path().join("tune.db")).unwrap();
/// assert!(store.load().is_err()); // nothing written yet
/// ```
pub struct SledStore {
    path: PathBuf,
    db: sled::Db,
    meta: sled::Tree,
    trials: sled::Tree,
    results: sled::Tree,
    /// Our own exclusive lock on the database (released when the file closes, on any exit):
    /// sled's lock error is an untyped message, this one is an `io::Error` we can match on.
    _lock: File,
}

/// The file inside the database folder that [`SledStore`] locks.
const LOCK_FILE: &str = "tune.lock";

/// A database error at `path`.
fn db_err(path: &Path) -> impl Fn(sled::Error) -> StoreError + Copy + '_ {
    move |e| match e {
        // sled's I/O errors are the file system's: keep the io::Error itself.
        sled::Error::Io(io) => io_err(path)(io),
        e => StoreError::Database {
            path: path.to_path_buf(),
            source: Box::new(e),
        },
    }
}

/// An I/O error at `path`.
fn io_err(path: &Path) -> impl Fn(std::io::Error) -> StoreError + Copy + '_ {
    move |e| StoreError::Database {
        path: path.to_path_buf(),
        source: Box::new(e),
    }
}

/// How long [`SledStore::open`] waits for a lock another process holds. A process killed a
/// moment ago can still hold it: after SIGKILL, a tune with GPU trials was seen (H100) to keep
/// it while its threads were torn down, so a `tune resume` started right then failed.
const LOCK_WAIT: Duration = Duration::from_secs(3);

impl SledStore {
    /// Opens (or creates) the database at `path`; fails with `InUse` if another process has
    /// held it for a few seconds.
    pub fn open(path: &Path) -> Result<SledStore, StoreError> {
        SledStore::open_waiting(path, LOCK_WAIT)
    }

    /// [`SledStore::open`], waiting at most `wait` for a lock another process holds.
    pub fn open_waiting(path: &Path, wait: Duration) -> Result<SledStore, StoreError> {
        let deadline = Instant::now() + wait;
        let lock = loop {
            match lock_exclusive(path) {
                Err(StoreError::InUse(_)) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                locked => break locked?,
            }
        };
        // Holding our lock, sled's can only be held by this process's own sled threads still
        // closing a database dropped a moment ago (as `Experiment::create` does): wait for them,
        // however short `wait` is.
        let deadline = Instant::now() + LOCK_WAIT;
        let db = loop {
            let opened = sled::Config::new().path(path).flush_every_ms(None).open();
            match opened {
                Err(sled::Error::Io(_)) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                opened => break opened.map_err(db_err(path))?,
            }
        };
        Ok(SledStore {
            meta: db.open_tree("meta").map_err(db_err(path))?,
            trials: db.open_tree("trials").map_err(db_err(path))?,
            results: db.open_tree("results").map_err(db_err(path))?,
            path: path.to_path_buf(),
            db,
            _lock: lock,
        })
    }
}

/// Takes the exclusive lock of the database at `path` (created if missing), without waiting.
fn lock_exclusive(path: &Path) -> Result<File, StoreError> {
    let io = io_err(path);
    std::fs::create_dir_all(path).map_err(io)?;
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path.join(LOCK_FILE))
        .map_err(io)?;
    // SAFETY: flock(2) on a descriptor we own and keep open; no memory is involved.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.kind() {
            std::io::ErrorKind::WouldBlock => StoreError::InUse(e),
            _ => io(e),
        });
    }
    Ok(file)
}

impl TrialStore for SledStore {
    fn load(&self) -> Result<StoredExperiment, StoreError> {
        let meta_bytes = self
            .meta
            .get("meta")
            .map_err(db_err(&self.path))?
            .ok_or(StoreError::NoMeta)?;
        let meta: Meta = decode(&meta_bytes, || "experiment record".into())?;
        let mut trials: Vec<Trial> = Vec::new();
        for item in self.trials.iter() {
            let (key, value) = item.map_err(db_err(&self.path))?;
            let trial: Trial = decode(&value, || format!("trial record {key:?}"))?;
            trials.push(trial);
        }
        for item in self.results.iter() {
            let (key, value) = item.map_err(db_err(&self.path))?;
            let Some(id) = key.get(..8).and_then(|k| k.try_into().ok()) else {
                continue;
            };
            let id = u64::from_be_bytes(id);
            let result: TrialResult = decode(&value, || format!("result of trial {id}"))?;
            // Trials are keyed by dense big-endian ids, so the vector index is the id.
            if let Some(t) = trials.get_mut(id as usize).filter(|t| t.id == id) {
                t.results.push(result);
            }
        }
        Ok(StoredExperiment { meta, trials })
    }

    fn put_meta(&mut self, meta: &Meta) -> Result<(), StoreError> {
        let bytes = encode(meta, || "the experiment record".into())?;
        failpoint::hit("store.write").map_err(io_err(&self.path))?;
        self.meta
            .insert("meta", bytes)
            .map_err(db_err(&self.path))?;
        Ok(())
    }

    fn put_trial(&mut self, trial: &Trial) -> Result<(), StoreError> {
        let bytes = encode(trial, || format!("trial {}", trial.id))?;
        failpoint::hit("store.write").map_err(io_err(&self.path))?;
        self.trials
            .insert(trial.id.to_be_bytes(), bytes)
            .map_err(db_err(&self.path))?;
        Ok(())
    }

    fn add_result(&mut self, id: TrialId, result: &TrialResult) -> Result<(), StoreError> {
        let bytes = encode(result, || format!("result {} of trial {id}", result.seq))?;
        let mut key = [0u8; 16];
        key[..8].copy_from_slice(&id.to_be_bytes());
        key[8..].copy_from_slice(&result.seq.to_be_bytes());
        failpoint::hit("store.write").map_err(io_err(&self.path))?;
        self.results
            .insert(&key[..], bytes)
            .map_err(db_err(&self.path))?;
        Ok(())
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        failpoint::hit("store.sync.before").map_err(io_err(&self.path))?;
        self.db.flush().map_err(db_err(&self.path))?;
        failpoint::hit("store.sync.after").map_err(io_err(&self.path))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_waits_for_a_lock_released_soon_and_gives_up_on_one_held() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tune.db");
        let held = SledStore::open(&path).unwrap();
        // Held throughout: `InUse`, once the wait is over.
        let started = Instant::now();
        assert!(matches!(
            SledStore::open_waiting(&path, Duration::from_millis(300)),
            Err(StoreError::InUse(_))
        ));
        assert!(started.elapsed() >= Duration::from_millis(300));
        // Released while `open` waits (as by a process that is exiting): opened. The wait is
        // long enough that no load on the machine makes the release come after it.
        let (released_tx, released_rx) = std::sync::mpsc::channel();
        let releaser = std::thread::spawn(move || {
            released_rx.recv().unwrap();
            drop(held);
        });
        let opener =
            std::thread::spawn(move || SledStore::open_waiting(&path, Duration::from_secs(60)));
        std::thread::sleep(Duration::from_millis(200));
        released_tx.send(()).unwrap();
        assert!(opener.join().unwrap().is_ok());
        releaser.join().unwrap();
    }
}
