//! An in-memory store, for tests and sweeps that need not outlive the process.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tune_search::TrialId;

use super::{decode, encode, Meta, StoreError, StoredExperiment, TrialStore};
use crate::trial::{Trial, TrialResult};

/// The records, encoded as a real store keeps them (so a record that cannot be stored fails
/// here too). Results are keyed by (trial, seq).
#[derive(Default, Clone)]
struct Records {
    meta: Option<Vec<u8>>,
    trials: BTreeMap<TrialId, Vec<u8>>,
    results: BTreeMap<(TrialId, u64), Vec<u8>>,
}

/// One write, kept until the next sync applies it to the durable records.
#[derive(Clone)]
enum Write {
    Meta(Vec<u8>),
    Trial(TrialId, Vec<u8>),
    Result((TrialId, u64), Vec<u8>),
}

impl Records {
    fn load(&self) -> Result<StoredExperiment, StoreError> {
        let meta: Meta = decode(self.meta.as_deref().ok_or(StoreError::NoMeta)?, || {
            "experiment record".into()
        })?;
        let mut trials = Vec::with_capacity(self.trials.len());
        for (id, bytes) in &self.trials {
            let trial: Trial = decode(bytes, || format!("trial record {id}"))?;
            trials.push(trial);
        }
        for ((id, seq), bytes) in &self.results {
            let result: TrialResult = decode(bytes, || format!("result {seq} of trial {id}"))?;
            if let Some(t) = trials.get_mut(*id as usize).filter(|t| t.id == *id) {
                t.results.push(result);
            }
        }
        Ok(StoredExperiment { meta, trials })
    }

    fn apply(&mut self, write: Write) {
        match write {
            Write::Meta(bytes) => self.meta = Some(bytes),
            Write::Trial(id, bytes) => {
                self.trials.insert(id, bytes);
            }
            Write::Result(key, bytes) => {
                self.results.insert(key, bytes);
            }
        }
    }
}

#[derive(Default)]
struct Shared {
    /// What survived the last sync: what a crash leaves.
    durable: Records,
    /// Whether a store has it open (the lock a database file would have).
    open: bool,
}

/// An in-memory database that [`MemoryStore`]s open, one at a time, like a database file:
/// what a store synced is there for the next one; what it wrote and never synced is lost when
/// it is dropped, as a crash would lose it.
///
/// ```
/// use tune::store::{MemoryDb, StoreError, TrialStore};
/// let db = MemoryDb::new();
/// let first = db.open().unwrap();
/// assert!(matches!(db.open(), Err(StoreError::InUse { .. })));
/// drop(first);
/// assert!(db.open().is_ok());
/// ```
#[derive(Clone, Default)]
pub struct MemoryDb(Arc<Mutex<Shared>>);

impl MemoryDb {
    pub fn new() -> MemoryDb {
        MemoryDb::default()
    }

    /// Opens the database; [`StoreError::InUse`] while another store has it open.
    pub fn open(&self) -> Result<MemoryStore, StoreError> {
        let mut shared = self.lock();
        if shared.open {
            return Err(StoreError::InUse { holder: None });
        }
        shared.open = true;
        let records = shared.durable.clone();
        drop(shared);
        Ok(MemoryStore {
            db: self.clone(),
            records,
            unsynced: Vec::new(),
        })
    }

    /// What the last sync left: what a crash now would leave, read without opening the
    /// database (a store may have it open).
    ///
    /// ```
    /// use tune::store::{MemoryDb, StoreError};
    /// let db = MemoryDb::new();
    /// let _store = db.open().unwrap();
    /// assert!(matches!(db.synced(), Err(StoreError::NoMeta)));
    /// ```
    pub fn synced(&self) -> Result<StoredExperiment, StoreError> {
        let records = self.lock().durable.clone();
        records.load()
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        // A panic while holding the lock leaves records that are still whole maps.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A [`TrialStore`] in memory: writes go to a buffer that [`TrialStore::sync`] makes durable
/// in its [`MemoryDb`].
pub struct MemoryStore {
    db: MemoryDb,
    /// The durable records and every write since the last sync: what `load` sees.
    records: Records,
    /// The writes since the last sync, in order.
    unsynced: Vec<Write>,
}

impl MemoryStore {
    fn write(&mut self, write: Write) {
        self.records.apply(write.clone());
        self.unsynced.push(write);
    }
}

impl Drop for MemoryStore {
    fn drop(&mut self) {
        self.db.lock().open = false;
    }
}

impl TrialStore for MemoryStore {
    fn load(&self) -> Result<StoredExperiment, StoreError> {
        self.records.load()
    }

    fn put_meta(&mut self, meta: &Meta) -> Result<(), StoreError> {
        self.write(Write::Meta(encode(meta, || {
            "the experiment record".into()
        })?));
        Ok(())
    }

    fn put_trial(&mut self, trial: &Trial) -> Result<(), StoreError> {
        let bytes = encode(trial, || format!("trial {}", trial.id))?;
        self.write(Write::Trial(trial.id, bytes));
        Ok(())
    }

    fn add_result(&mut self, id: TrialId, result: &TrialResult) -> Result<(), StoreError> {
        let bytes = encode(result, || format!("result {} of trial {id}", result.seq))?;
        self.write(Write::Result((id, result.seq), bytes));
        Ok(())
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        let mut shared = self.db.lock();
        for write in self.unsynced.drain(..) {
            shared.durable.apply(write);
        }
        Ok(())
    }
}
