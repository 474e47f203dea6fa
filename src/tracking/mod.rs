//! Copies of a sweep's results where people already look: MLflow runs and TensorBoard folders.
//! The store stays the record; these are written beside it and never hold a sweep up.

#[cfg(feature = "mlflow")]
pub mod mlflow;
pub mod tensorboard;

use std::sync::mpsc;
use std::thread::JoinHandle;

use crate::error::TuneError;
use crate::observer::Observer;
use crate::spec::ExperimentSpec;

/// The loggers `[tracking]` asks for, as observers of the sweep: MLflow's (where the build has
/// the `mlflow` feature; the spec's validation refuses it otherwise) and TensorBoard's.
pub(crate) fn trackers(spec: &ExperimentSpec) -> Result<Vec<Box<dyn Observer>>, TuneError> {
    let mut trackers: Vec<Box<dyn Observer>> = Vec::new();
    #[cfg(feature = "mlflow")]
    if let Some(url) = spec.tracking.mlflow_url().map_err(|e| {
        TuneError::Invalid(crate::spec::InvalidSetting::new("tracking", e).to_string())
    })? {
        let record = mlflow::SweepRecord::new(spec, 0);
        let logger = mlflow::MlflowLogger::new(&url, record)
            .map_err(|e| TuneError::Invalid(format!("[tracking] mlflow = {url:?}: {e}")))?;
        trackers.push(Box::new(logger));
    }
    if let Some(folder) = &spec.tracking.tensorboard {
        let logger = tensorboard::TensorBoardLogger::new(folder)
            .map_err(|e| TuneError::Invalid(format!("[tracking] tensorboard: {e}")))?;
        trackers.push(Box::new(logger));
    }
    Ok(trackers)
}

/// A tracker's thread of its own, fed through a channel, so that what an observer hands it
/// never holds the sweep up; [`Background::finish`] (and dropping it) waits until the thread
/// has had everything sent.
struct Background<M> {
    tx: Option<mpsc::Sender<M>>,
    thread: Option<JoinHandle<()>>,
}

impl<M: Send + 'static> Background<M> {
    /// A thread named `name` that runs `serve` on what is sent until the sender is gone.
    fn spawn(
        name: &str,
        serve: impl FnOnce(mpsc::Receiver<M>) + Send + 'static,
    ) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || serve(rx))?;
        Ok(Background {
            tx: Some(tx),
            thread: Some(thread),
        })
    }
}

impl<M> Background<M> {
    /// No thread (yet): what is sent is dropped.
    #[cfg(feature = "mlflow")]
    fn none() -> Self {
        Background {
            tx: None,
            thread: None,
        }
    }

    fn send(&self, msg: M) {
        if let Some(tx) = &self.tx {
            // The thread has stopped (and said why) when this fails.
            let _ = tx.send(msg);
        }
    }

    /// Waits for everything sent to be handled.
    fn finish(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl<M> Drop for Background<M> {
    fn drop(&mut self) {
        self.finish();
    }
}
