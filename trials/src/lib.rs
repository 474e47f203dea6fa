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

pub mod checkpoint;
mod config;
#[cfg(feature = "cuda")]
mod cuda_kernel;
mod data;
mod device;
mod early_stopping;
mod fused;
mod fused_dense;
mod fused_dropout;
mod fused_loss;
mod fused_step;
pub mod gpu;
#[cfg(all(test, feature = "cuda"))]
mod kernel_tests;
mod model;
mod nvml;
mod optim;
mod trainer;

pub use checkpoint::{Checkpoint, CHECKPOINT_FILE};
pub use config::{Activation, LrDecay, OptimizerKind, TrainConfig, ARCHITECTURE_KEYS, TRAIN_KEYS};
pub use data::{
    blobs, glyphs, read_csv, spirals, DataSpec, Dataset, Split, DATASETS, DATA_KEYS, GLYPH_SHAPES,
    GLYPH_SIDE,
};
pub use device::open_device;
pub use early_stopping::EarlyStopping;
pub use fused::{FuseKey, FusedTrainer, HeldCheckpoint, PackKey, PackedMember, PACK_KEYS};
pub use model::{parameter_count, Cnn, Dropout, Mlp, Model, NamedVars};
pub use nvml::{gpu_use, GpuUse};
pub use optim::{lr_at, Optimizer};
pub use trainer::{Builtin, EpochReport, SplitTensors, Trainer};

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
    #[error("candle: {0}")]
    Candle(#[from] candle_core::Error),
}
