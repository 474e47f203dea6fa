//! The embedded default store: one sled database in the experiment folder.

use std::cell::RefCell;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tune_search::TrialId;

use super::{decode, encode, Meta, StoreError, StorePlace, StoredExperiment, TrialStore};
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
    /// What the database holds, for [`CHECK_FILE`].
    counting: RefCell<Counting>,
    /// [`CHECK_FILE`], opened at the first sync.
    check: Option<File>,
}

/// The file inside the database folder that [`SledStore`] locks.
const LOCK_FILE: &str = "tune.lock";

/// The file in the database folder where [`SledStore`] notes, after each sync, how much the
/// database holds. sled recovers from a damaged log by dropping everything after the damage,
/// silently; a database holding less than its note says was damaged, not merely killed (the
/// note is written after the sync, so a kill leaves it behind the database, never ahead).
const CHECK_FILE: &str = "tune.check";

/// What a database holds, in counts that only ever grow: trials, results, finished trials.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Tally {
    trials: u64,
    results: u64,
    finished: u64,
}

impl Tally {
    fn of(stored: &StoredExperiment) -> Tally {
        Tally {
            trials: stored.trials.len() as u64,
            results: stored.trials.iter().map(|t| t.results.len() as u64).sum(),
            finished: stored
                .trials
                .iter()
                .filter(|t| t.status.is_finished())
                .count() as u64,
        }
    }

    /// Whether `self` holds at least what `other` counts, in every count.
    fn covers(&self, other: &Tally) -> bool {
        self.trials >= other.trials
            && self.results >= other.results
            && self.finished >= other.finished
    }

    fn to_line(self) -> String {
        let body = format!(
            "tune.check 1 trials={} results={} finished={}",
            self.trials, self.results, self.finished
        );
        format!("{body} fnv={:016x}\n", fnv1a(body.as_bytes()))
    }

    fn parse(text: &str) -> Option<Tally> {
        let (body, sum) = text.trim_end().rsplit_once(" fnv=")?;
        if u64::from_str_radix(sum, 16).ok()? != fnv1a(body.as_bytes()) {
            return None;
        }
        let mut fields = body.strip_prefix("tune.check 1 ")?.split(' ');
        let mut next = |key: &str| fields.next()?.strip_prefix(key)?.parse().ok();
        Some(Tally {
            trials: next("trials=")?,
            results: next("results=")?,
            finished: next("finished=")?,
        })
    }

    fn describe(&self) -> String {
        format!(
            "{} trials, {} results and {} finished trials",
            self.trials, self.results, self.finished
        )
    }
}

/// The note's decoder, on any bytes (for the fuzz targets).
#[cfg(feature = "fuzzing")]
pub(super) fn parse_note(bytes: &[u8]) {
    if let Ok(text) = std::str::from_utf8(bytes) {
        let _ = Tally::parse(text);
    }
}

/// FNV-1a, 64 bits: a checksum for the note (not for security).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

/// What [`SledStore::salvage`] could read.
#[derive(Debug)]
pub struct Salvaged {
    /// The experiment record, unless it is lost.
    pub meta: Option<Meta>,
    /// Every trial record that decodes, in id order, with every result of it that decodes.
    pub trials: Vec<Trial>,
    /// What the database held at its last sync, in words, where its note says.
    pub held: Option<String>,
}

/// The counts kept up to date as records are written, from the last load on.
#[derive(Debug, Default)]
struct Counting {
    /// Trials and results; its `finished` is derived (see [`Counting::tally`]).
    tally: Tally,
    /// The trials whose stored record is not finished: few at any time, where the finished
    /// ones grow with the sweep (a set of those would break flat memory).
    unfinished: std::collections::HashSet<TrialId>,
}

impl Counting {
    fn tally(&self) -> Tally {
        Tally {
            finished: self
                .tally
                .trials
                .saturating_sub(self.unfinished.len() as u64),
            ..self.tally
        }
    }
}

/// A database error at `path`.
fn db_err(path: &Path) -> impl Fn(sled::Error) -> StoreError + Copy + '_ {
    move |e| match e {
        // sled's I/O errors are the file system's: keep the io::Error itself.
        sled::Error::Io(io) => io_err(path)(io),
        sled::Error::Corruption { at, .. } => StoreError::Damaged {
            at: StorePlace::Folder(path.to_path_buf()),
            problem: match at {
                Some(at) => format!("sled found corrupted data at {at:?}"),
                None => "sled found corrupted data".into(),
            },
        },
        sled::Error::Unsupported(what) => StoreError::Damaged {
            at: StorePlace::Folder(path.to_path_buf()),
            problem: format!("sled cannot read it: {what}"),
        },
        e => StoreError::Database {
            at: StorePlace::Folder(path.to_path_buf()),
            source: Box::new(e),
        },
    }
}

/// An I/O error at `path`.
fn io_err(path: &Path) -> impl Fn(std::io::Error) -> StoreError + Copy + '_ {
    move |e| {
        // sled hands some errors on as the Debug text of the original (`Os { code: 28, ...`):
        // a full disk is said as the system says it.
        let e = match e.kind() {
            std::io::ErrorKind::StorageFull => std::io::Error::from_raw_os_error(libc::ENOSPC),
            _ => e,
        };
        StoreError::Database {
            at: StorePlace::Folder(path.to_path_buf()),
            source: Box::new(e),
        }
    }
}

/// How long [`SledStore::open`] waits for a lock another process holds. A process killed a
/// moment ago can still hold it: after SIGKILL, a tune with GPU trials was seen (H100) to keep
/// it while its threads were torn down, so a `tune resume` started right then failed.
const LOCK_WAIT: Duration = Duration::from_secs(3);

/// sled's page cache (its default is 1 GiB). The coordinator writes and reads back only at
/// resume, so a small cache costs nothing and keeps a long sweep's memory flat.
const CACHE_BYTES: u64 = 16 << 20;

impl SledStore {
    /// Opens (or creates) the database at `path`; fails with `InUse` if another process has
    /// held it for a few seconds.
    pub fn open(path: &Path) -> Result<SledStore, StoreError> {
        SledStore::open_waiting(path, LOCK_WAIT)
    }

    /// [`SledStore::open`], waiting at most `wait` for a lock another process holds.
    pub fn open_waiting(path: &Path, wait: Duration) -> Result<SledStore, StoreError> {
        refuse_odd_files(path)?;
        let deadline = Instant::now()
            .checked_add(wait)
            .unwrap_or_else(Instant::now);
        let lock = loop {
            match lock_exclusive(path) {
                Err(StoreError::InUse { .. }) if Instant::now() < deadline => {
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
            let opened = sled::Config::new()
                .path(path)
                .flush_every_ms(None)
                .cache_capacity(CACHE_BYTES)
                .open();
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
            counting: RefCell::default(),
            check: None,
        })
    }

    /// Every record the database can still give, whatever its note (`tune.check`) says it held and
    /// skipping those that do not decode: for `tune export --salvage`. The experiment record
    /// may be among the lost; with them, what the note says was held (when it can be read).
    pub fn salvage(&self) -> Salvaged {
        let meta = self
            .meta
            .get("meta")
            .ok()
            .flatten()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok());
        let mut trials: Vec<Trial> = self
            .trials
            .iter()
            .flatten()
            .filter_map(|(_, value)| serde_json::from_slice::<Trial>(&value).ok())
            .collect();
        trials.sort_by_key(|t| t.id);
        for (key, value) in self.results.iter().flatten() {
            let Some(id) = key.get(..8).and_then(|k| k.try_into().ok()) else {
                continue;
            };
            let id = u64::from_be_bytes(id);
            let result = serde_json::from_slice::<TrialResult>(&value);
            if let (Ok(i), Ok(result)) = (trials.binary_search_by_key(&id, |t| t.id), result) {
                trials[i].results.push(result);
            }
        }
        Salvaged {
            meta,
            trials,
            held: self.noted().ok().flatten().map(|t| t.describe()),
        }
    }

    /// What [`CHECK_FILE`] says the database held at its last sync; `None` without one (a
    /// store written before it existed).
    fn noted(&self) -> Result<Option<Tally>, StoreError> {
        let file = self.path.join(CHECK_FILE);
        match std::fs::read_to_string(&file) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(&file)(e)),
            Ok(text) => Tally::parse(&text)
                .map(Some)
                .ok_or_else(|| StoreError::Damaged {
                    at: StorePlace::Folder(self.path.clone()),
                    problem: format!("its note of what it holds ({CHECK_FILE}) is unreadable"),
                }),
        }
    }

    fn load_unchecked(&self) -> Result<StoredExperiment, StoreError> {
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
}

/// Takes the exclusive lock of the database at `path` (created if missing), without waiting.
/// A store folder holds folders and regular files only: anything else (a link to a device, a
/// pipe) is damage, refused before sled opens it (sled panics closing a log it cannot sync).
fn refuse_odd_files(path: &Path) -> Result<(), StoreError> {
    let damaged = |at: &Path, what: &str| StoreError::Damaged {
        at: StorePlace::Folder(path.to_path_buf()),
        problem: format!("{} is {what}, not a regular file", at.display()),
    };
    let kind = |meta: &std::fs::Metadata| {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        match () {
            _ if t.is_char_device() => "a character device",
            _ if t.is_block_device() => "a block device",
            _ if t.is_fifo() => "a pipe",
            _ if t.is_socket() => "a socket",
            _ => "not a file",
        }
    };
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        // A new store; or one a link points away from, which opening reports.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(path)(e)),
    };
    if !meta.is_dir() {
        return Err(damaged(path, kind(&meta)));
    }
    let mut folders = vec![path.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).map_err(io_err(path))? {
            let at = entry.map_err(io_err(path))?.path();
            // Links are followed: what sled would open is what counts.
            let meta = std::fs::metadata(&at).map_err(io_err(path))?;
            if meta.is_dir() {
                folders.push(at);
            } else if !meta.is_file() {
                return Err(damaged(&at, kind(&meta)));
            }
        }
    }
    Ok(())
}

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
            std::io::ErrorKind::WouldBlock => StoreError::InUse { holder: None },
            _ => io(e),
        });
    }
    Ok(file)
}

impl TrialStore for SledStore {
    fn load(&self) -> Result<StoredExperiment, StoreError> {
        let stored = self.load_unchecked()?;
        let tally = Tally::of(&stored);
        if let Some(noted) = self.noted()? {
            if !tally.covers(&noted) {
                return Err(StoreError::Damaged {
                    at: StorePlace::Folder(self.path.clone()),
                    problem: format!(
                        "it holds {}, but held {} when last synced ({CHECK_FILE}): what was written last is lost",
                        tally.describe(),
                        noted.describe()
                    ),
                });
            }
        }
        let unfinished = stored
            .trials
            .iter()
            .filter(|t| !t.status.is_finished())
            .map(|t| t.id)
            .collect();
        *self.counting.borrow_mut() = Counting { tally, unfinished };
        Ok(stored)
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
        let old = self
            .trials
            .insert(trial.id.to_be_bytes(), bytes)
            .map_err(db_err(&self.path))?;
        let counting = self.counting.get_mut();
        counting.tally.trials += old.is_none() as u64;
        // The counts are the database's as written (a sweep only ever adds to them).
        if trial.status.is_finished() {
            counting.unfinished.remove(&trial.id);
        } else {
            counting.unfinished.insert(trial.id);
        }
        Ok(())
    }

    fn add_result(&mut self, id: TrialId, result: &TrialResult) -> Result<(), StoreError> {
        let bytes = encode(result, || format!("result {} of trial {id}", result.seq))?;
        let mut key = [0u8; 16];
        key[..8].copy_from_slice(&id.to_be_bytes());
        key[8..].copy_from_slice(&result.seq.to_be_bytes());
        failpoint::hit("store.write").map_err(io_err(&self.path))?;
        let old = self
            .results
            .insert(&key[..], bytes)
            .map_err(db_err(&self.path))?;
        self.counting.get_mut().tally.results += old.is_none() as u64;
        Ok(())
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        failpoint::hit("store.sync.before").map_err(io_err(&self.path))?;
        self.db.flush().map_err(db_err(&self.path))?;
        failpoint::hit("store.sync.after").map_err(io_err(&self.path))?;
        // After the sync, unsynced: the note may fall behind the database, never get ahead.
        let file = self.path.join(CHECK_FILE);
        let check = match self.check.take() {
            Some(f) => f,
            None => File::options()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&file)
                .map_err(io_err(&file))?,
        };
        let line = self.counting.get_mut().tally().to_line();
        check
            .write_all_at(line.as_bytes(), 0)
            .and_then(|()| check.set_len(line.len() as u64))
            .map_err(io_err(&file))?;
        self.check = Some(check);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_note_round_trips_and_a_changed_digit_is_refused() {
        let tally = Tally {
            trials: 20,
            results: 60,
            finished: 19,
        };
        let line = tally.to_line();
        assert_eq!(Tally::parse(&line), Some(tally));
        assert_eq!(
            Tally::parse(&line.replace("results=60", "results=50")),
            None
        );
        assert_eq!(Tally::parse(&line[..line.len() / 2]), None);
        assert!(
            tally.covers(&tally)
                && !tally.covers(&Tally {
                    results: 61,
                    ..tally
                })
        );
    }

    #[test]
    fn open_waits_for_a_lock_released_soon_and_gives_up_on_one_held() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tune.db");
        let held = SledStore::open(&path).unwrap();
        // Held throughout: `InUse`, once the wait is over.
        let started = Instant::now();
        assert!(matches!(
            SledStore::open_waiting(&path, Duration::from_millis(300)),
            Err(StoreError::InUse { .. })
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
