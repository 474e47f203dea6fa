//! The `cuda` build on a GPU: discovery, training that agrees with the CPU, exact restores,
//! and checkpoints that move between devices. Without a GPU these tests check that the build
//! says why there is none; with `TUNE_TEST_GPU=1` a missing GPU is a failure, so a GPU run
//! cannot pass by skipping.
#![cfg(feature = "cuda")]

use candle_core::Device;
use tune_trials::{
    gpu, open_device, Activation, Builtin, DeviceId, EpochReport, FusedTrainer, OptimizerKind,
    Split, TrainConfig, Trainer,
};

fn gpu_device() -> Option<Device> {
    let found = gpu::discover();
    match &found {
        Ok(g) if !g.is_empty() => Some(open_device(DeviceId::Cuda(0)).expect("open cuda:0")),
        _ if std::env::var_os("TUNE_TEST_GPU").is_some() => {
            panic!("TUNE_TEST_GPU is set but no GPU can be used: {found:?}")
        }
        _ => {
            eprintln!("no GPU here ({found:?}): only the fallback is checked");
            None
        }
    }
}

fn digits() -> Split {
    Split::shipped("digits").unwrap()
}

fn config() -> TrainConfig {
    TrainConfig {
        epochs: 4,
        width: 64,
        dropout: 0.1,
        weight_decay: 0.01,
        warmup_epochs: 1.0,
        lr_decay: tune_trials::LrDecay::Cosine,
        ..TrainConfig::default()
    }
}

/// Trains to the end; with `pause`, saves after that epoch and continues in a fresh trainer
/// on `resume_on`.
fn run(
    builtin: Builtin,
    cfg: &TrainConfig,
    split: &Split,
    device: &Device,
    pause: Option<(u64, &Device)>,
) -> Vec<EpochReport> {
    let dir = tempfile::tempdir().unwrap();
    let mut t = Trainer::new(builtin, cfg.clone(), split, device, 5).unwrap();
    let mut reports = Vec::new();
    while !t.finished() {
        reports.push(t.train_epoch().unwrap());
        if let Some((epoch, resume_on)) = pause {
            if t.epoch() == epoch {
                t.save(dir.path()).unwrap();
                t = Trainer::new(builtin, cfg.clone(), split, resume_on, 5).unwrap();
                t.restore(dir.path()).unwrap();
            }
        }
    }
    reports
}

/// Float32 on two devices sums in different orders: close, not equal.
fn assert_close(a: &[EpochReport], b: &[EpochReport], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (x, y) in a.iter().zip(b) {
        let rel = |p: f64, q: f64| (p - q).abs() / p.abs().max(q.abs()).max(1e-12);
        assert!(
            rel(x.train_loss, y.train_loss) < 1e-3 && rel(x.val_loss, y.val_loss) < 1e-3,
            "{what}: {x:?} vs {y:?}"
        );
        assert!((x.val_accuracy - y.val_accuracy).abs() <= 0.01, "{what}");
    }
}

#[test]
fn discovery_names_the_gpus_and_their_memory() {
    let Some(device) = gpu_device() else {
        // The same binary on a machine without a driver: no panic, a reason.
        if !gpu::driver_present() {
            let why = gpu::discover().unwrap_err();
            assert!(why.contains("no CUDA driver"), "{why}");
            assert!(gpu::free_bytes(0).is_none());
            let e = open_device(DeviceId::Cuda(0)).unwrap_err().to_string();
            assert!(e.contains("no CUDA driver"), "{e}");
        }
        return;
    };
    let gpus = gpu::discover().unwrap();
    for g in &gpus {
        assert!(!g.name.is_empty());
        assert!(g.total_bytes > 1 << 30, "{g:?}");
        assert!(g.free_bytes <= g.total_bytes, "{g:?}");
    }
    assert!(gpu::free_bytes(0).unwrap() <= gpus[0].total_bytes);
    // The device as tune opens it keeps what its trainers free for their next allocations.
    assert_eq!(gpu::pool_release_threshold(&device), Some(u64::MAX));
    let e = open_device(DeviceId::Cuda(gpus.len() + 7)).unwrap_err();
    assert!(e.to_string().contains("cuda:"), "{e}");
}

#[test]
fn training_on_the_gpu_agrees_with_the_cpu() {
    let Some(dev) = gpu_device() else { return };
    let split = digits();
    let cfg = config();
    let on_gpu = run(Builtin::Mlp, &cfg, &split, &dev, None);
    assert_close(
        &on_gpu,
        &run(Builtin::Mlp, &cfg, &split, &Device::Cpu, None),
        "mlp",
    );
    assert!(on_gpu[3].val_loss < on_gpu[0].val_loss, "{on_gpu:?}");
    let cnn = TrainConfig {
        epochs: 2,
        optimizer: OptimizerKind::Sgd,
        lr: 0.05,
        channels: 4,
        width: 16,
        ..config()
    };
    assert_close(
        &run(Builtin::Cnn, &cnn, &split, &dev, None),
        &run(Builtin::Cnn, &cnn, &split, &Device::Cpu, None),
        "cnn",
    );
}

#[test]
fn a_gpu_trial_restores_exactly_and_checkpoints_move_between_devices() {
    let Some(dev) = gpu_device() else { return };
    let split = digits();
    let cfg = config();
    let straight = run(Builtin::Mlp, &cfg, &split, &dev, None);
    assert_eq!(
        run(Builtin::Mlp, &cfg, &split, &dev, Some((2, &dev))),
        straight,
        "paused and resumed on the GPU"
    );
    // Saved on the GPU, continued on the CPU (and back): the same run within float error.
    assert_close(
        &run(Builtin::Mlp, &cfg, &split, &dev, Some((1, &Device::Cpu))),
        &straight,
        "gpu to cpu",
    );
    assert_close(
        &run(Builtin::Mlp, &cfg, &split, &Device::Cpu, Some((2, &dev))),
        &straight,
        "cpu to gpu",
    );
}

#[test]
fn fused_packs_on_the_gpu_train_as_their_members_alone() {
    let Some(dev) = gpu_device() else { return };
    let split = digits();
    for (builtin, shape) in [
        (Builtin::Mlp, config()),
        (
            Builtin::Cnn,
            TrainConfig {
                epochs: 2,
                channels: 4,
                width: 16,
                ..config()
            },
        ),
    ] {
        let same: Vec<(TrainConfig, u64)> = (0..3)
            .map(|i| {
                let cfg = TrainConfig {
                    lr: shape.lr * (1.0 + i as f64),
                    weight_decay: 0.01 * i as f64,
                    beta1: 0.85 + 0.05 * i as f64,
                    ..shape.clone()
                };
                (cfg, 11 + i)
            })
            .collect();
        // And a pack of other widths, depths, batch sizes, optimizers and dropout rates (one
        // without: it draws no masks), as a GPU mixes them; the GPU draws the pack's masks.
        let mixed: Vec<(TrainConfig, u64)> = same
            .iter()
            .enumerate()
            .map(|(i, (cfg, seed))| {
                let cfg = TrainConfig {
                    width: cfg.width / (1 + i),
                    depth: 1 + i,
                    batch_size: [64, 32, 50][i],
                    dropout: [0.1, 0.0, 0.3][i],
                    optimizer: if i == 1 {
                        OptimizerKind::Sgd
                    } else {
                        OptimizerKind::Adamw
                    },
                    ..cfg.clone()
                };
                (cfg, *seed)
            })
            .collect();
        if builtin == Builtin::Mlp {
            // A pack computes its own gradients, each activation's derivative its own code.
            for activation in [Activation::Tanh, Activation::Gelu, Activation::Silu] {
                let members: Vec<(TrainConfig, u64)> = mixed
                    .iter()
                    .map(|(cfg, seed)| {
                        let cfg = TrainConfig {
                            activation,
                            ..cfg.clone()
                        };
                        (cfg, *seed)
                    })
                    .collect();
                fused_pack_matches_alone(builtin, &shape, &members, &split, &dev);
            }
        }
        for members in [same, mixed] {
            fused_pack_matches_alone(builtin, &shape, &members, &split, &dev);
        }
    }
}

/// Trains `members` as one pack and each alone on `dev`, and compares their reports.
fn fused_pack_matches_alone(
    builtin: Builtin,
    shape: &TrainConfig,
    members: &[(TrainConfig, u64)],
    split: &Split,
    dev: &candle_core::Device,
) {
    let trainer = |(cfg, seed): &(TrainConfig, u64)| {
        Trainer::new(builtin, cfg.clone(), split, dev, *seed).unwrap()
    };
    let mut pack = FusedTrainer::new(members.iter().map(trainer).collect()).unwrap();
    let mut fused = vec![Vec::new(); members.len()];
    for _ in 0..shape.epochs {
        for (k, report) in pack.train_epoch().unwrap().into_iter().enumerate() {
            fused[k].push(report.unwrap());
        }
    }
    // And as a sweep's packs train: each member through its own epochs, to the pack's
    // boundaries (a member whose epoch ends a tick before another's sitting it out),
    // leaving when it has finished.
    let mut pack = FusedTrainer::new(members.iter().map(trainer).collect()).unwrap();
    let mut own = vec![Vec::new(); members.len()];
    let mut ids: Vec<usize> = (0..members.len()).collect();
    while !ids.is_empty() {
        let reports = pack.train_to_boundary(1).unwrap();
        let mut leaving = vec![false; ids.len()];
        for (k, report) in reports.into_iter().enumerate() {
            if let Some(report) = report {
                own[ids[k]].push(report.unwrap());
                leaving[k] = pack.member(k).unwrap().finished();
            }
        }
        let mut flags = leaving.iter();
        ids.retain(|_| flags.next() == Some(&false));
        if !ids.is_empty() && leaving.contains(&true) {
            pack = pack.reform(&leaving, Vec::new()).unwrap();
        }
    }
    for (k, m) in members.iter().enumerate() {
        let mut alone = trainer(m);
        let reports: Vec<EpochReport> = (0..shape.epochs)
            .map(|_| alone.train_epoch().unwrap())
            .collect();
        // Batched matmuls may sum in another order than one trial's: close, not equal.
        let who = format!("{builtin:?} member {k} of {:?}", m.0);
        assert_close(&fused[k], &reports, &who);
        assert_close(&own[k], &reports, &format!("{who}, to its own boundaries"));
    }
}
