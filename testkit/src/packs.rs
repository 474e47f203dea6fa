//! The members of the benches' packs (benches/train_epoch.rs, benches/gpu_calls.rs): K
//! trials of one shape whose searched hyperparameters differ, and the mlp-digits example's
//! mix of shapes.

use tune_trials::{Builtin, DataSpec, OptimizerKind, TrainConfig};

/// The i-th member of a bench's pack: its config and seed.
pub type MemberOf<'a> = dyn Fn(usize) -> (TrainConfig, u64) + 'a;

/// The i-th of K trials of `shape`: the hyperparameters a sweep varies differ.
pub fn member(shape: &TrainConfig, i: usize) -> (TrainConfig, u64) {
    let cfg = TrainConfig {
        epochs: 1000,
        lr: 1e-3 * (1.0 + i as f64 * 0.37),
        weight_decay: 1e-4 * (i % 5) as f64,
        beta1: 0.85 + 0.01 * (i % 10) as f64,
        ..shape.clone()
    };
    (cfg, i as u64)
}

/// The digits model of the bench: the MLP's 2 hidden layers of 128, the CNN's 16 and 32
/// filters and 64 dense units.
pub fn digits_shape(builtin: Builtin) -> TrainConfig {
    TrainConfig {
        depth: 2,
        width: if builtin == Builtin::Mlp { 128 } else { 64 },
        channels: 16,
        batch_size: 64,
        ..TrainConfig::default()
    }
}

/// The i-th of K MLPs of the mlp-digits example's shapes (width 32 to 256, depth 1 to 3,
/// batch 32, 64 or 128, SGD or AdamW), which a pack pads to the widest, deepest and longest
/// and updates both ways.
pub fn mixed_member(i: usize) -> (TrainConfig, u64) {
    const WIDTHS: [usize; 7] = [32, 45, 64, 90, 128, 181, 256];
    let shape = TrainConfig {
        depth: 1 + i % 3,
        width: WIDTHS[i % WIDTHS.len()],
        optimizer: if i.is_multiple_of(2) {
            OptimizerKind::Adamw
        } else {
            OptimizerKind::Sgd
        },
        batch_size: [32, 64, 128][(i + i / 3) % 3],
        ..TrainConfig::default()
    };
    member(&shape, i)
}

/// [`mixed_member`] with dropout at rate 0, 0.1, .. 0.4, as the mlp-digits example searches it.
pub fn mixed_member_with_dropout(i: usize) -> (TrainConfig, u64) {
    let (cfg, seed) = mixed_member(i);
    let dropout = 0.1 * (i % 5) as f64;
    (TrainConfig { dropout, ..cfg }, seed)
}

/// The glyphs example's model (examples/glyphs): a 3x1024 MLP, batch 256.
pub fn glyphs_shape() -> TrainConfig {
    TrainConfig {
        depth: 3,
        width: 1024,
        batch_size: 256,
        ..TrainConfig::default()
    }
}

/// The glyphs example's data: 20,000 images of 10 shapes, 16,000 of them for training.
pub fn glyphs_data() -> DataSpec {
    DataSpec {
        dataset: Some("glyphs".into()),
        samples: 20_000,
        classes: 10,
        noise: 0.3,
        ..DataSpec::default()
    }
}
