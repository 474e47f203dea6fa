//! The embedded default store: one sled database in the experiment folder.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use tune_search::TrialId;

use super::{Meta, Snapshot, StoreError, TrialStore};
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
    db: sled::Db,
    meta: sled::Tree,
    trials: sled::Tree,
    results: sled::Tree,
}

fn db_err(e: sled::Error) -> StoreError {
    let text = e.to_string();
    if text.contains("lock")
        || text.contains("WouldBlock")
        || text.contains("temporarily unavailable")
    {
        StoreError::InUse(text)
    } else {
        StoreError::Database(text)
    }
}

fn decode<T: DeserializeOwned>(
    bytes: &[u8],
    what: impl FnOnce() -> String,
) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|source| StoreError::Corrupt {
        what: what(),
        source,
    })
}

fn encode<T: serde::Serialize>(value: &T) -> Vec<u8> {
    // Our records hold no maps with non-string keys and no non-finite floats, so this cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}

/// How long [`SledStore::open`] waits for a lock another process holds. A process killed a
/// moment ago can still hold it: after SIGKILL, a tune with GPU trials was seen (H100) to keep
/// it while its threads were torn down, so a `tune resume` started right then failed.
const LOCK_WAIT: Duration = Duration::from_secs(3);

impl SledStore {
    /// Opens (or creates) the database at `path`; fails with `InUse` if another process has
    /// held it for a few seconds.
    pub fn open(path: &Path) -> Result<SledStore, StoreError> {
        let deadline = Instant::now() + LOCK_WAIT;
        loop {
            match SledStore::open_now(path) {
                Err(StoreError::InUse(_)) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                opened => return opened,
            }
        }
    }

    fn open_now(path: &Path) -> Result<SledStore, StoreError> {
        let db = sled::Config::new()
            .path(path)
            .flush_every_ms(None)
            .open()
            .map_err(db_err)?;
        Ok(SledStore {
            meta: db.open_tree("meta").map_err(db_err)?,
            trials: db.open_tree("trials").map_err(db_err)?,
            results: db.open_tree("results").map_err(db_err)?,
            db,
        })
    }
}

impl TrialStore for SledStore {
    fn load(&self) -> Result<Snapshot, StoreError> {
        let meta_bytes = self
            .meta
            .get("meta")
            .map_err(db_err)?
            .ok_or(StoreError::NoMeta)?;
        let meta: Meta = decode(&meta_bytes, || "experiment record".into())?;
        let mut trials: Vec<Trial> = Vec::new();
        for item in self.trials.iter() {
            let (key, value) = item.map_err(db_err)?;
            let trial: Trial = decode(&value, || format!("trial record {key:?}"))?;
            trials.push(trial);
        }
        for item in self.results.iter() {
            let (key, value) = item.map_err(db_err)?;
            let id = u64::from_be_bytes(key[..8].try_into().unwrap_or_default());
            let result: TrialResult = decode(&value, || format!("result of trial {id}"))?;
            // Trials are keyed by dense big-endian ids, so the vector index is the id.
            if let Some(t) = trials.get_mut(id as usize).filter(|t| t.id == id) {
                t.results.push(result);
            }
        }
        Ok(Snapshot { meta, trials })
    }

    fn put_meta(&mut self, meta: &Meta) -> Result<(), StoreError> {
        self.meta.insert("meta", encode(meta)).map_err(db_err)?;
        Ok(())
    }

    fn put_trial(&mut self, trial: &Trial) -> Result<(), StoreError> {
        self.trials
            .insert(trial.id.to_be_bytes(), encode(trial))
            .map_err(db_err)?;
        Ok(())
    }

    fn add_result(&mut self, id: TrialId, result: &TrialResult) -> Result<(), StoreError> {
        let mut key = [0u8; 16];
        key[..8].copy_from_slice(&id.to_be_bytes());
        key[8..].copy_from_slice(&result.seq.to_be_bytes());
        self.results
            .insert(&key[..], encode(result))
            .map_err(db_err)?;
        Ok(())
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        self.db.flush().map_err(db_err)?;
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
        assert!(matches!(SledStore::open(&path), Err(StoreError::InUse(_))));
        assert!(started.elapsed() >= LOCK_WAIT);
        // Released while `open` waits (as by a process that is exiting): opened.
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(500));
            drop(held);
        });
        assert!(SledStore::open(&path).is_ok());
        releaser.join().unwrap();
    }
}
