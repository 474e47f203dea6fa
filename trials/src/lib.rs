//! What runs inside a trial: the built-in Candle trainables (an MLP and a small CNN), their
//! datasets, optimizers with checkpointable state, early stopping, safetensors checkpoints,
//! device selection, and fused packs of same-shaped MLP trials trained as one model.
//!
//! ```
//! use tune_trials::{Builtin, Split, TrainConfig, Trainer};
//! let split = Split::shipped("breast_cancer").unwrap();
//! let cfg = TrainConfig { epochs: 3, ..TrainConfig::default() };
//! let mut trainer = Trainer::new(Builtin::Mlp, cfg, &split, &candle_core::Device::Cpu, 0).unwrap();
//! let report = trainer.train_epoch().unwrap();
//! assert_eq!(report.epoch, 1);
//! ```

// What needs no Candle: the trainables' configuration and data, early stopping, GPU discovery.
mod config;
mod data;
mod device_id;
mod early_stopping;
pub mod gpu;
mod nvml;

// Training itself (the `train` feature): Candle models, optimizers, packs, checkpoints.
#[cfg(feature = "train")]
pub mod checkpoint;
#[cfg(feature = "cuda")]
mod cuda_kernel;
#[cfg(feature = "train")]
mod device;
#[cfg(feature = "train")]
mod fused;
#[cfg(feature = "train")]
mod fused_dense;
#[cfg(feature = "train")]
mod fused_dropout;
#[cfg(feature = "train")]
mod fused_loss;
#[cfg(feature = "train")]
mod fused_step;
#[cfg(all(test, feature = "cuda"))]
mod kernel_tests;
#[cfg(feature = "train")]
mod model;
#[cfg(feature = "train")]
mod optim;
#[cfg(feature = "train")]
mod trainer;

pub use config::{
    Activation, Builtin, LrDecay, OptimizerKind, TrainConfig, ARCHITECTURE_KEYS, PACK_KEYS,
    TRAIN_KEYS,
};
pub use data::{
    blobs, glyphs, read_csv, spirals, DataSpec, Dataset, Split, DATASETS, DATA_KEYS, GLYPH_SHAPES,
    GLYPH_SIDE,
};
pub use device_id::DeviceId;
pub use early_stopping::EarlyStopping;
pub use nvml::{gpu_use, GpuUse};

#[cfg(feature = "train")]
pub use checkpoint::{Checkpoint, CHECKPOINT_FILE};
#[cfg(feature = "train")]
pub use device::open_device;
#[cfg(feature = "train")]
pub use fused::{FuseKey, FusedTrainer, HeldCheckpoint, PackKey, PackedMember};
#[cfg(feature = "train")]
pub use model::{parameter_count, Cnn, Dropout, Mlp, Model, NamedVars};
#[cfg(feature = "train")]
pub use optim::{lr_at, Optimizer};
#[cfg(feature = "train")]
pub use trainer::{EpochReport, SplitTensors, Trainer};

/// Why a trainable could not run.
#[derive(Debug, thiserror::Error)]
pub enum TrialsError {
    /// A key or value of the trainable's configuration.
    #[error("{0}")]
    Config(String),
    /// The value of one `[objective]` key, named so that a spec's error can point at it.
    #[error("{key}: {message}")]
    Key { key: &'static str, message: String },
    /// The data could not be read or used.
    #[error("{0}")]
    Data(String),
    #[error("checkpoint: {0}")]
    Checkpoint(String),
    #[error("{0}")]
    Train(String),
    #[error("{0}")]
    Device(String),
    #[cfg(feature = "train")]
    #[error("candle: {0}")]
    Candle(#[from] candle_core::Error),
}
