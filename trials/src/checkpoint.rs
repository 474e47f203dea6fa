//! Checkpoints: one safetensors file holding the weights, the optimizer's state and, in its
//! metadata, the step counters, so a restored trial continues exactly as if never paused.
//!
//! Trainers write theirs through [`crate::Trainer::save`] (on disk when it returns) and
//! [`crate::Trainer::save_behind`] (serialised, copied off a GPU and written by the process's
//! checkpoint threads while training goes on):
//!
//! ```
//! use tune_trials::checkpoint::{self, Contents};
//! let dir = tempfile::tempdir().unwrap();
//! let contents = |epoch: u32| Contents {
//!     tensors: Vec::new(),
//!     metadata: [("epoch".to_string(), epoch.to_string())].into(),
//! };
//! checkpoint::write_behind(dir.path(), contents(1)).unwrap(); // returns at once
//! checkpoint::write(dir.path(), contents(2)).unwrap(); // lands after the first: on disk now
//! let read = checkpoint::Checkpoint::read(dir.path(), &candle_core::Device::Cpu).unwrap();
//! assert_eq!(read.meta::<u32>("epoch").unwrap(), 2);
//! checkpoint::settle_all(); // before the process ends
//! ```

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};

use candle_core::{Device, Tensor};

use crate::TrialsError;

/// The file a trainer writes in its checkpoint folder.
pub const CHECKPOINT_FILE: &str = "checkpoint.safetensors";

/// What a checkpoint holds: named tensors and metadata.
///
/// Tensors queued with [`write_behind`] are read when a checkpoint thread gets to them, so
/// nothing may write into them meanwhile: a `Var`'s storage is written in place by its next
/// update, so queue a copy of it (`force_contiguous`); a tensor that is replaced rather than
/// written into (an optimizer's state) can be queued as it is.
pub struct Contents {
    pub tensors: Vec<(String, Tensor)>,
    pub metadata: HashMap<String, String>,
}

impl Contents {
    /// The bytes of the file. On a GPU this is where the tensors are copied to the host.
    fn serialize(&self) -> Result<Vec<u8>, TrialsError> {
        safetensors::serialize(
            self.tensors.iter().map(|(n, t)| (n.as_str(), t)),
            Some(self.metadata.clone()),
        )
        .map_err(|e| TrialsError::Checkpoint(e.to_string()))
    }
}

/// Writes `bytes` to `dir/checkpoint.safetensors` atomically and durably: a crash leaves the
/// previous checkpoint or the new one, never half of one.
fn write_file(dir: &Path, bytes: &[u8]) -> Result<(), TrialsError> {
    let io = |e: std::io::Error| TrialsError::Checkpoint(format!("{}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(io)?;
    let tmp = dir.join(format!("{CHECKPOINT_FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, dir.join(CHECKPOINT_FILE)).map_err(io)?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io)
}

/// Checkpoints written behind training, by [`WRITERS`] threads of the process, so that a GPU
/// trains the next epoch while its last checkpoint is copied to the host, serialised and
/// written (a 3x1024 MLP's checkpoint is 38 MB with its AdamW state, ~0.15 s with its fsync:
/// more than its epoch on a GPU; a pack of 16 spent 0.3 to 0.5 s serialising its members'
/// before the copying moved here).
///
/// Only the newest checkpoint of a folder matters: one queued for a folder replaces the one
/// still waiting there, so a disk slower than training skips checkpoints instead of falling
/// further behind. A trial killed meanwhile restarts from its last written checkpoint and
/// redoes the epochs after it (seeded: on CPU the same ones, bit for bit); its results are
/// in the store already. Writes to one folder never overlap and land in the order they were
/// queued; different folders' are written side by side.
#[derive(Default)]
struct Writer {
    queue: Mutex<Queue>,
    changed: Condvar,
}

/// How many threads write checkpoints behind training. A pack of 16 trials queues 16 an
/// epoch, which one thread wrote one after another (copy off the GPU, serialise, fsync); on
/// an H200 a glyphs sweep's GPU idled ~0.9 s after its last training, which this was the
/// guess for. Several overlap one checkpoint's copying with another's fsync, and fsyncs with
/// each other: on the 2-core machine's disk, 16 queued 38 MB checkpoints were on disk in
/// 0.6-1.6 s with four threads against 1.2-2.9 s with one.
const WRITERS: usize = 4;

#[derive(Default)]
struct Queue {
    /// Folders with a checkpoint waiting, oldest first.
    order: VecDeque<PathBuf>,
    waiting: HashMap<PathBuf, Contents>,
    /// Folders being written now, by a checkpoint thread or a caller of [`write`].
    writing: HashSet<PathBuf>,
    /// Failed writes, told to the next caller for the folder.
    failed: HashMap<PathBuf, String>,
}

impl Queue {
    /// The oldest waiting checkpoint whose folder is not being written, its folder marked as
    /// being written: one folder's writes never overlap, so they land in order.
    fn take_next(&mut self) -> Option<(PathBuf, Contents)> {
        let at = self.order.iter().position(|d| !self.writing.contains(d))?;
        let dir = self.order.remove(at)?;
        let waiting = self.waiting.remove(&dir)?;
        self.writing.insert(dir.clone());
        Some((dir, waiting))
    }

    /// Drops the checkpoint waiting for `dir`, if any.
    fn drop_waiting(&mut self, dir: &Path) {
        if self.waiting.remove(dir).is_some() {
            self.order.retain(|d| d != dir);
        }
    }
}

fn writer() -> &'static Writer {
    static WRITER: OnceLock<&'static Writer> = OnceLock::new();
    WRITER.get_or_init(|| {
        let w: &'static Writer = Box::leak(Box::default());
        for n in 0..WRITERS {
            std::thread::Builder::new()
                .name(format!("tune-checkpoints-{n}"))
                .spawn(move || w.run())
                .expect("spawning a checkpoint writer");
        }
        w
    })
}

impl Writer {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // Every change to the queue is complete when the lock is released.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait<'a>(&self, q: MutexGuard<'a, Queue>) -> MutexGuard<'a, Queue> {
        self.changed.wait(q).unwrap_or_else(|e| e.into_inner())
    }

    /// A checkpoint thread: writes the oldest waiting checkpoint whose folder is free.
    fn run(&self) {
        loop {
            let mut q = self.lock();
            let (dir, contents) = loop {
                match q.take_next() {
                    Some(next) => break next,
                    None => q = self.wait(q),
                }
            };
            drop(q);
            let written = contents.serialize().and_then(|b| write_file(&dir, &b));
            self.done(&dir, written.err());
        }
    }

    /// Ends a write to `dir`, keeping its failure for the folder's next caller.
    fn done(&self, dir: &Path, failed: Option<TrialsError>) {
        let mut q = self.lock();
        q.writing.remove(dir);
        if let Some(e) = failed {
            q.failed.insert(dir.to_path_buf(), e.to_string());
        }
        drop(q);
        self.changed.notify_all();
    }

    fn queue(&self, dir: &Path, checkpoint: Contents) -> Result<(), TrialsError> {
        let mut q = self.lock();
        let failed = q.failed.remove(dir);
        if q.waiting.insert(dir.to_path_buf(), checkpoint).is_none() {
            q.order.push_back(dir.to_path_buf());
        }
        drop(q);
        self.changed.notify_all();
        failed.map_or(Ok(()), |e| Err(TrialsError::Checkpoint(e)))
    }

    /// Waits until nothing for `dir` (or, with `None`, for any folder) waits or is written;
    /// its failure, which the folder's next write is told too.
    fn settle(&self, dir: Option<&Path>) -> Result<(), TrialsError> {
        let mut q = self.lock();
        let busy = |q: &Queue| match dir {
            Some(d) => q.waiting.contains_key(d) || q.writing.contains(d),
            None => !q.order.is_empty() || !q.writing.is_empty(),
        };
        while busy(&q) {
            q = self.wait(q);
        }
        let failed = dir.and_then(|d| q.failed.get(d).cloned());
        failed.map_or(Ok(()), |e| Err(TrialsError::Checkpoint(e)))
    }
}

/// Queues `contents` as the checkpoint of `dir` and returns: one of the process's checkpoint
/// threads serialises it (copying its tensors off a GPU) and writes it as [`write()`] does,
/// unless a newer one for `dir` comes first. An error is that of an earlier write to `dir`
/// that failed. See [`Contents`] for the tensors it may hold.
pub fn write_behind(dir: &Path, contents: Contents) -> Result<(), TrialsError> {
    writer().queue(dir, contents)
}

/// Writes `contents` as the checkpoint of `dir` now, on this thread: when this returns the
/// checkpoint is on disk. It lands after the one being written to `dir`, if any; one still
/// waiting for `dir` is older, and dropped. Checkpoints queued for other folders do not hold
/// it up. An error is this write's, or an earlier one's to `dir`.
pub fn write(dir: &Path, contents: Contents) -> Result<(), TrialsError> {
    let bytes = contents.serialize()?;
    let w = writer();
    let mut q = w.lock();
    while q.writing.contains(dir) {
        q = w.wait(q);
    }
    q.drop_waiting(dir);
    let earlier = q.failed.remove(dir);
    q.writing.insert(dir.to_path_buf());
    drop(q);
    let now = write_file(dir, &bytes);
    // Its failure is told here, once.
    w.done(dir, None);
    match earlier {
        Some(e) => Err(TrialsError::Checkpoint(e)),
        None => now,
    }
}

/// Waits until the checkpoint queued for `dir`, if any, is on disk (or failed: its error,
/// which the next write to `dir` reports again).
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let empty = tune_trials::checkpoint::Contents { tensors: vec![], metadata: Default::default() };
/// tune_trials::checkpoint::write_behind(dir.path(), empty).unwrap();
/// tune_trials::checkpoint::settle(dir.path()).unwrap();
/// assert!(dir.path().join(tune_trials::CHECKPOINT_FILE).exists());
/// ```
pub fn settle(dir: &Path) -> Result<(), TrialsError> {
    writer().settle(Some(dir))
}

/// Waits until every queued checkpoint is written (or has failed): before the process ends.
pub fn settle_all() {
    let _ = writer().settle(None);
}

/// A loaded checkpoint: tensors by name and the metadata map.
pub struct Checkpoint {
    pub tensors: HashMap<String, Tensor>,
    pub metadata: HashMap<String, String>,
    path: String,
}

impl Checkpoint {
    pub fn read(dir: &Path, device: &Device) -> Result<Checkpoint, TrialsError> {
        let path = dir.join(CHECKPOINT_FILE);
        let shown = path.display().to_string();
        let bytes =
            std::fs::read(&path).map_err(|e| TrialsError::Checkpoint(format!("{shown}: {e}")))?;
        let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes)
            .map_err(|e| TrialsError::Checkpoint(format!("{shown}: {e}")))?;
        let metadata = meta.metadata().clone().unwrap_or_default();
        let tensors = candle_core::safetensors::load_buffer(&bytes, device)
            .map_err(|e| TrialsError::Checkpoint(format!("{shown}: {e}")))?;
        Ok(Checkpoint {
            tensors,
            metadata,
            path: shown,
        })
    }

    pub fn tensor(&self, name: &str) -> Result<Tensor, TrialsError> {
        self.tensors
            .get(name)
            .cloned()
            .ok_or_else(|| TrialsError::Checkpoint(format!("{}: no tensor `{name}`", self.path)))
    }

    pub fn meta<T: std::str::FromStr>(&self, key: &str) -> Result<T, TrialsError> {
        self.metadata
            .get(key)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| {
                TrialsError::Checkpoint(format!(
                    "{}: metadata `{key}` missing or unreadable",
                    self.path
                ))
            })
    }

    pub fn path(&self) -> &str {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(v: usize) -> Contents {
        Contents {
            tensors: Vec::new(),
            metadata: HashMap::from([("v".to_string(), v.to_string())]),
        }
    }

    fn written(dir: &Path) -> usize {
        Checkpoint::read(dir, &Device::Cpu)
            .unwrap()
            .meta("v")
            .unwrap()
    }

    #[test]
    fn the_last_checkpoint_queued_for_a_folder_is_the_one_on_disk() {
        let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        for v in 1..=40 {
            for d in &dirs {
                write_behind(d.path(), version(v)).unwrap();
            }
        }
        for d in &dirs {
            settle(d.path()).unwrap();
            assert_eq!(written(d.path()), 40);
        }
        // A checkpoint written now lands after those queued before it.
        write_behind(dirs[0].path(), version(41)).unwrap();
        write(dirs[0].path(), version(42)).unwrap();
        assert_eq!(written(dirs[0].path()), 42);
        settle_all();
        assert_eq!(written(dirs[0].path()), 42);
    }

    #[test]
    fn a_checkpoint_thread_takes_the_oldest_checkpoint_whose_folder_is_free() {
        let (a, b, c) = (PathBuf::from("a"), PathBuf::from("b"), PathBuf::from("c"));
        let mut q = Queue::default();
        for d in [&a, &b, &c] {
            q.order.push_back(d.clone());
            q.waiting.insert(d.clone(), version(1));
        }
        q.writing.insert(a.clone());
        let mut next = || q.take_next().map(|(d, _)| d);
        assert_eq!(next(), Some(b.clone()), "a is being written");
        assert_eq!(next(), Some(c.clone()));
        assert_eq!(next(), None, "a, b and c are being written");
        q.writing.remove(&a);
        assert_eq!(q.take_next().map(|(d, _)| d), Some(a.clone()));
        assert_eq!(q.writing, HashSet::from([a, b, c]));
        assert!(q.order.is_empty() && q.waiting.is_empty());
    }

    #[test]
    fn folders_are_written_side_by_side_and_a_write_now_waits_for_none_of_them() {
        use std::time::{Duration, Instant};
        // Each checkpoint thread is held opening a FIFO for writing until it is read. The
        // deadlines only guard against a hang where the property fails.
        let guard = Duration::from_secs(120);
        let tmp = tempfile::tempdir().unwrap();
        let fifo = |dir: &Path| dir.join(format!("{CHECKPOINT_FILE}.tmp"));
        let held: Vec<PathBuf> = (0..WRITERS)
            .map(|n| tmp.path().join(n.to_string()))
            .collect();
        for dir in &held {
            std::fs::create_dir(dir).unwrap();
            let made = std::process::Command::new("mkfifo").arg(fifo(dir)).status();
            assert!(made.unwrap().success());
            write_behind(dir, version(1)).unwrap();
        }
        let w = writer();
        let until = Instant::now() + guard;
        let mut q = w.lock();
        while !held.iter().all(|d| q.writing.contains(d)) && Instant::now() < until {
            q = w.changed.wait_timeout(q, guard / 10).unwrap().0;
        }
        let side_by_side = held.iter().all(|d| q.writing.contains(d));
        drop(q);
        let now = tmp.path().join("now");
        let (wrote, written_now) = std::sync::mpsc::channel();
        let writing = now.clone();
        std::thread::spawn(move || wrote.send(write(&writing, version(2))));
        let on_disk = written_now.recv_timeout(guard);
        let readers: Vec<_> = held
            .iter()
            .map(|dir| {
                let fifo = fifo(dir);
                std::thread::spawn(move || {
                    let mut f = std::fs::File::open(fifo).unwrap();
                    std::io::Read::read_to_end(&mut f, &mut Vec::new()).unwrap();
                })
            })
            .collect();
        readers.into_iter().for_each(|r| r.join().unwrap());
        assert!(side_by_side, "{WRITERS} folders are written at once");
        on_disk
            .expect("a write now waits behind no other folder")
            .unwrap();
        assert_eq!(written(&now), 2);
        // fsync refuses a FIFO: the held folders' writes fail, and are told.
        for dir in &held {
            assert!(settle(dir).is_err());
        }
    }

    #[test]
    fn a_failed_write_behind_is_told_to_the_next_caller_for_its_folder() {
        let tmp = tempfile::tempdir().unwrap();
        let blocked = tmp.path().join("a-file");
        std::fs::write(&blocked, "not a folder").unwrap();
        let dir = blocked.join("trial");
        write_behind(&dir, version(1)).unwrap();
        let e = settle(&dir).unwrap_err().to_string();
        assert!(e.contains("a-file/trial"), "{e}");
        assert!(settle(&dir).is_err(), "settle tells it again");
        let again = write_behind(&dir, version(2)).unwrap_err().to_string();
        assert_eq!(again, e, "the next write tells it");
        assert!(settle(&dir).is_err(), "and that one fails on its own");
        std::fs::remove_file(&blocked).unwrap();
        // The earlier failure is told once more; this write itself lands.
        assert!(write(&dir, version(3)).is_err());
        settle(&dir).unwrap();
        assert_eq!(written(&dir), 3);
        write(&dir, version(4)).unwrap();
        assert_eq!(written(&dir), 4);
    }
}
