//! Where trials are kept. Nothing outside this module knows which database holds them.

mod sled_store;

pub use sled_store::SledStore;

use serde::{Deserialize, Serialize};
use tune_search::TrialId;

use crate::spec::ExperimentSpec;
use crate::trial::{Trial, TrialResult};

/// The experiment-wide record: the frozen spec and the current budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// Store layout version.
    pub format: u32,
    pub spec: ExperimentSpec,
    /// The budget in force: the spec's `samples`, or what `--samples` raised it to.
    pub samples: u64,
}

/// What a store holds: the meta record and every trial with its results, in id order.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub meta: Meta,
    pub trials: Vec<Trial>,
}

/// Why the store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the experiment is in use by another tune process ({0})")]
    InUse(String),
    #[error("database error: {0}")]
    Database(String),
    #[error("stored {what} is unreadable: {source}")]
    Corrupt {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("the store holds no experiment record")]
    NoMeta,
}

/// Durable storage of one experiment.
///
/// Writes may be buffered; [`TrialStore::sync`] returns only when everything written before
/// it survives a crash. The coordinator syncs before it acts on (or acknowledges) a change.
pub trait TrialStore: Send {
    fn load(&self) -> Result<Snapshot, StoreError>;
    fn put_meta(&mut self, meta: &Meta) -> Result<(), StoreError>;
    /// Writes the trial's record (not its results).
    fn put_trial(&mut self, trial: &Trial) -> Result<(), StoreError>;
    fn add_result(&mut self, id: TrialId, result: &TrialResult) -> Result<(), StoreError>;
    fn sync(&mut self) -> Result<(), StoreError>;
}
