//! A build without the `postgres` feature: every way to a PostgreSQL store says that this
//! build has none, so that the rest of tune needs no feature switch of its own.

use super::{postgres_location, Meta, StoreError, StoredExperiment, TrialStore};
use crate::trial::{Trial, TrialResult};

/// Experiments kept in PostgreSQL, in a build that has no PostgreSQL client: it cannot be
/// opened, so no value of it exists.
pub enum PgStore {}

impl PgStore {
    /// [`StoreError::PostgresNotBuilt`].
    pub fn open(url: &str, name: &str) -> Result<PgStore, StoreError> {
        Err(not_built(url, name))
    }

    /// [`StoreError::PostgresNotBuilt`].
    pub fn open_existing(url: &str, name: &str) -> Result<PgStore, StoreError> {
        Err(not_built(url, name))
    }

    /// [`StoreError::PostgresNotBuilt`].
    pub fn read(url: &str, name: &str) -> Result<StoredExperiment, StoreError> {
        Err(not_built(url, name))
    }
}

fn not_built(url: &str, name: &str) -> StoreError {
    StoreError::PostgresNotBuilt {
        at: postgres_location(url, name),
    }
}

impl TrialStore for PgStore {
    fn load(&self) -> Result<StoredExperiment, StoreError> {
        match *self {}
    }
    fn put_meta(&mut self, _: &Meta) -> Result<(), StoreError> {
        match *self {}
    }
    fn put_trial(&mut self, _: &Trial) -> Result<(), StoreError> {
        match *self {}
    }
    fn add_result(&mut self, _: tune_search::TrialId, _: &TrialResult) -> Result<(), StoreError> {
        match *self {}
    }
    fn sync(&mut self) -> Result<(), StoreError> {
        match *self {}
    }
}
