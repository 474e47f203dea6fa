//! A restored trainer continues exactly as if it had never stopped: the same losses, bit for
//! bit, epoch after epoch.

use candle_core::Device;
use tune_trials::{Builtin, EpochReport, OptimizerKind, Split, TrainConfig, Trainer};

fn digits() -> Split {
    Split::shipped("digits").unwrap()
}

fn run(
    builtin: Builtin,
    cfg: &TrainConfig,
    split: &Split,
    pause_after: Option<u64>,
) -> Vec<EpochReport> {
    let dir = tempfile::tempdir().unwrap();
    let mut t = Trainer::new(builtin, cfg.clone(), split, &Device::Cpu, 11).unwrap();
    let mut reports = Vec::new();
    while !t.finished() {
        reports.push(t.train_epoch().unwrap());
        if Some(t.epoch()) == pause_after {
            t.save(dir.path()).unwrap();
            // A fresh trainer (different seed for its own init, to prove the checkpoint wins).
            t = Trainer::new(builtin, cfg.clone(), split, &Device::Cpu, 11).unwrap();
            t.restore(dir.path()).unwrap();
            assert_eq!(t.epoch(), pause_after.unwrap());
        }
    }
    reports
}

#[test]
fn mlp_with_adamw_dropout_warmup_and_cosine_restores_exactly() {
    let split = digits();
    let cfg = TrainConfig {
        epochs: 4,
        width: 32,
        dropout: 0.2,
        weight_decay: 0.01,
        warmup_epochs: 1.0,
        lr_decay: tune_trials::LrDecay::Cosine,
        patience: Some(10),
        ..TrainConfig::default()
    };
    let straight = run(Builtin::Mlp, &cfg, &split, None);
    for pause in [1, 2, 3] {
        assert_eq!(
            run(Builtin::Mlp, &cfg, &split, Some(pause)),
            straight,
            "paused after {pause}"
        );
    }
    assert!(straight[3].val_loss < straight[0].val_loss);
}

#[test]
fn sgd_momentum_and_the_cnn_restore_exactly() {
    let split = digits();
    let cfg = TrainConfig {
        epochs: 3,
        optimizer: OptimizerKind::Sgd,
        lr: 0.05,
        nesterov: true,
        channels: 4,
        width: 16,
        dropout: 0.1,
        ..TrainConfig::default()
    };
    let straight = run(Builtin::Cnn, &cfg, &split, None);
    assert_eq!(run(Builtin::Cnn, &cfg, &split, Some(2)), straight);
    assert_eq!(
        run(Builtin::Mlp, &cfg, &split, Some(1)),
        run(Builtin::Mlp, &cfg, &split, None)
    );
}

/// A PBT exploit restores another trial's checkpoint under new params: the learning rate may
/// change, the model's shape may not.
#[test]
fn restore_takes_new_hyperparameters_but_refuses_a_new_shape() {
    let split = digits();
    let cfg = TrainConfig {
        epochs: 2,
        width: 16,
        ..TrainConfig::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let mut t = Trainer::new(Builtin::Mlp, cfg.clone(), &split, &Device::Cpu, 3).unwrap();
    t.train_epoch().unwrap();
    t.save(dir.path()).unwrap();

    let faster = TrainConfig {
        lr: 0.01,
        optimizer: OptimizerKind::Sgd,
        ..cfg.clone()
    };
    let mut u = Trainer::new(Builtin::Mlp, faster, &split, &Device::Cpu, 4).unwrap();
    u.restore(dir.path()).unwrap();
    assert_eq!(u.evaluate().unwrap(), t.evaluate().unwrap());
    assert_eq!(u.train_epoch().unwrap().epoch, 2);

    let wider = TrainConfig {
        width: 32,
        ..cfg.clone()
    };
    let mut w = Trainer::new(Builtin::Mlp, wider, &split, &Device::Cpu, 3).unwrap();
    let e = w.restore(dir.path()).unwrap_err().to_string();
    assert!(
        e.contains("hidden.0.weight") && e.contains("must not change"),
        "{e}"
    );
    let mut c = Trainer::new(Builtin::Cnn, cfg, &split, &Device::Cpu, 3).unwrap();
    let e = c.restore(dir.path()).unwrap_err().to_string();
    assert!(
        e.contains("a `mlp` checkpoint cannot restore into `cnn`"),
        "{e}"
    );
    let e = Trainer::new(
        Builtin::Mlp,
        TrainConfig::default(),
        &split,
        &Device::Cpu,
        3,
    )
    .unwrap()
    .restore(tempfile::tempdir().unwrap().path())
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("checkpoint: ") && e.contains("checkpoint.safetensors"),
        "{e}"
    );
}

#[test]
fn early_stopping_ends_a_trial_that_stopped_improving() {
    let split = digits();
    // min_delta far above any real gain: epoch 1 sets the best, epochs 2 and 3 miss it, and
    // patience 2 ends the trial after epoch 3.
    let cfg = TrainConfig {
        epochs: 50,
        patience: Some(2),
        min_delta: 10.0,
        ..TrainConfig::default()
    };
    let mut t = Trainer::new(Builtin::Mlp, cfg, &split, &Device::Cpu, 0).unwrap();
    let mut reports = Vec::new();
    while !t.finished() {
        reports.push(t.train_epoch().unwrap());
    }
    let stops: Vec<bool> = reports.iter().map(|r| r.stop_early).collect();
    assert_eq!(stops, [false, false, true]);
}

#[test]
fn the_mlp_learns_digits() {
    let split = digits();
    let cfg = TrainConfig {
        epochs: 8,
        width: 64,
        lr: 3e-3,
        ..TrainConfig::default()
    };
    let mut t = Trainer::new(Builtin::Mlp, cfg, &split, &Device::Cpu, 5).unwrap();
    let mut last = None;
    while !t.finished() {
        last = Some(t.train_epoch().unwrap());
    }
    let last = last.unwrap();
    assert!(last.val_accuracy >= 0.95, "{last:?}");
}
