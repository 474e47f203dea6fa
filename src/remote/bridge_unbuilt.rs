//! A build without the `postgres` feature: no experiment is kept in PostgreSQL, so no sweep
//! has remote workers and no bridge to them can exist. Starting one says why.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use tokio::runtime::Handle;
use tokio::sync::{mpsc, watch};
use tune_search::TrialId;

use super::Offer;
use crate::error::TuneError;
use crate::protocol::WorkerMsg;
use crate::store::StoreError;

/// An attempt that was running remotely when this coordinator started (none, in this build).
#[derive(Debug, Clone)]
pub(crate) struct Adopted {
    pub id: TrialId,
    pub attempt: u32,
}

/// The coordinator's handle on remote workers, which this build cannot have.
pub(crate) enum Bridge {}

impl Bridge {
    /// [`StoreError::PostgresNotBuilt`].
    pub(crate) fn start(
        url: &str,
        spec: &crate::spec::ExperimentSpec,
        _running: &[(TrialId, u32)],
        _tx: mpsc::UnboundedSender<WorkerMsg>,
        _shutdown: watch::Receiver<bool>,
        _control: crate::control::SweepControl,
        _rt: &Handle,
    ) -> Result<(Bridge, Vec<Adopted>), TuneError> {
        Err(StoreError::PostgresNotBuilt {
            at: crate::store::postgres_location(url, &spec.name),
        }
        .into())
    }

    pub(crate) fn capacity(&self) -> Arc<AtomicUsize> {
        match *self {}
    }

    pub(crate) fn offer(&self, _: TrialId, _: u32, _: &Offer) {
        match *self {}
    }

    pub(crate) fn end(self, _: bool) {
        match self {}
    }
}
