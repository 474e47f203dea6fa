//! A fused pack trains each member as it would train alone: the same weights, bit for bit,
//! the same validation metrics, and the same training loss within 1e-5 (it is summed per
//! member in another order); beside members of other widths, depths and optimizers, within
//! 1e-5. Members leave and join at epoch boundaries, through checkpoints
//! too, and a diverging member does not disturb the others.

use candle_core::Device;
use tune_trials::{
    Activation, Builtin, Checkpoint, DataSpec, EpochReport, FusedTrainer, HeldCheckpoint, LrDecay,
    OptimizerKind, Split, TrainConfig, Trainer,
};

fn digits() -> Split {
    Split::shipped("digits").unwrap()
}

fn trainer(split: &Split, cfg: &TrainConfig, seed: u64) -> Trainer {
    trainer_of(Builtin::Mlp, split, cfg, seed)
}

fn trainer_of(builtin: Builtin, split: &Split, cfg: &TrainConfig, seed: u64) -> Trainer {
    Trainer::new(builtin, cfg.clone(), split, &Device::Cpu, seed).unwrap()
}

/// A trainer of `builtin` for each of `members` (config and seed).
fn trainers_of(builtin: Builtin, split: &Split, members: &[(TrainConfig, u64)]) -> Vec<Trainer> {
    members
        .iter()
        .map(|(c, s)| trainer_of(builtin, split, c, *s))
        .collect()
}

/// Every weight of the trainer, flattened in order.
fn weights(t: &Trainer) -> Vec<Vec<f32>> {
    t.model()
        .vars()
        .iter()
        .map(|(_, v)| v.as_tensor().flatten_all().unwrap().to_vec1().unwrap())
        .collect()
}

fn assert_same_epoch(fused: &EpochReport, alone: &EpochReport, who: &str) {
    assert_eq!(fused.epoch, alone.epoch, "{who}");
    assert_eq!(fused.val_loss, alone.val_loss, "{who}: val_loss");
    assert_eq!(
        fused.val_accuracy, alone.val_accuracy,
        "{who}: val_accuracy"
    );
    assert_eq!(fused.lr, alone.lr, "{who}: lr");
    assert_eq!(fused.stop_early, alone.stop_early, "{who}: stop_early");
    let gap = (fused.train_loss - alone.train_loss).abs();
    assert!(
        gap <= 1e-5 * alone.train_loss.abs().max(1.0),
        "{who}: train_loss {} fused, {} alone",
        fused.train_loss,
        alone.train_loss
    );
}

/// Four AdamW members that differ in everything a member may: learning rate and schedule,
/// weight decay, betas, eps, dropout, seed and length.
fn adamw_members() -> Vec<(TrainConfig, u64)> {
    let base = TrainConfig {
        depth: 2,
        width: 24,
        epochs: 3,
        ..TrainConfig::default()
    };
    vec![
        (base.clone(), 1),
        (
            TrainConfig {
                lr: 3e-3,
                weight_decay: 0.05,
                dropout: 0.2,
                warmup_epochs: 0.5,
                lr_decay: LrDecay::Cosine,
                ..base.clone()
            },
            2,
        ),
        (
            TrainConfig {
                lr: 1e-2,
                beta1: 0.8,
                beta2: 0.99,
                eps: 1e-6,
                lr_decay: LrDecay::Linear,
                epochs: 4,
                ..base.clone()
            },
            3,
        ),
        (
            TrainConfig {
                lr: 5e-4,
                dropout: 0.5,
                ..base
            },
            2,
        ),
    ]
}

/// Trains `members` of `builtin` for `epochs` epochs in one pack and each alone, and compares.
fn fused_equals_alone(
    builtin: Builtin,
    split: &Split,
    members: &[(TrainConfig, u64)],
    epochs: u64,
) {
    let mut alone = trainers_of(builtin, split, members);
    let mut pack = FusedTrainer::new(trainers_of(builtin, split, members)).unwrap();
    for epoch in 1..=epochs {
        let fused = pack.train_epoch().unwrap();
        for (k, (t, report)) in alone.iter_mut().zip(&fused).enumerate() {
            let own = t.train_epoch().unwrap();
            assert_same_epoch(
                report.as_ref().unwrap(),
                &own,
                &format!("member {k}, epoch {epoch}"),
            );
        }
    }
    let unpacked = pack.into_trainers().unwrap();
    for (k, (f, a)) in unpacked.iter().zip(&alone).enumerate() {
        assert_eq!(f.epoch(), a.epoch());
        assert!(
            weights(f) == weights(a),
            "member {k}: weights differ after unpacking"
        );
    }
}

#[test]
fn adamw_members_train_bit_for_bit_as_alone() {
    fused_equals_alone(Builtin::Mlp, &digits(), &adamw_members(), 3);
}

#[test]
fn cnn_members_train_bit_for_bit_as_alone() {
    // The CNN's convolutions fused (one batched im2col matmul per layer), its dropout after
    // the pool and after the dense layer drawn per member; AdamW and SGD with momentum.
    let cnn = |cfg: TrainConfig| TrainConfig {
        channels: 4,
        width: 16,
        depth: 1,
        epochs: 2,
        ..cfg
    };
    let adamw: Vec<(TrainConfig, u64)> = adamw_members()
        .into_iter()
        .map(|(cfg, seed)| (cnn(cfg), seed))
        .collect();
    // A quarter of digits' rows to train on: the test is about the arithmetic, not the fit.
    let split = DataSpec {
        dataset: Some("digits".into()),
        val_fraction: 0.75,
        ..DataSpec::default()
    }
    .load(".".as_ref())
    .unwrap();
    fused_equals_alone(Builtin::Cnn, &split, &adamw, 2);
    let sgd = cnn(TrainConfig {
        optimizer: OptimizerKind::Sgd,
        lr: 0.05,
        ..TrainConfig::default()
    });
    let members = vec![
        (sgd.clone(), 3),
        (
            TrainConfig {
                momentum: 0.5,
                weight_decay: 1e-3,
                dropout: 0.25,
                ..sgd
            },
            4,
        ),
    ];
    fused_equals_alone(Builtin::Cnn, &split, &members, 2);
    // Dense layers of other widths, and both optimizers, in one cnn pack (padded: within
    // 1e-5, see below).
    let members = vec![
        (members[1].0.clone(), 5),
        (
            cnn(TrainConfig {
                width: 8,
                dropout: 0.1,
                ..TrainConfig::default()
            }),
            6,
        ),
    ];
    fused_near_alone(Builtin::Cnn, &split, &members, 2, 1e-5);
}

/// The pack computes its own gradients (autograd's operations, less the ones nobody reads),
/// so each activation's derivative is checked: members of every activation, with dropout,
/// of two depths (the shallower passing its activations through the deeper one's second
/// layer), train bit for bit as alone.
#[test]
fn members_of_every_activation_and_depth_train_bit_for_bit_as_alone() {
    let split = digits();
    for activation in [
        Activation::Relu,
        Activation::Tanh,
        Activation::Gelu,
        Activation::Silu,
    ] {
        let base = TrainConfig {
            activation,
            width: 12,
            depth: 2,
            dropout: 0.2,
            batch_size: 64,
            ..TrainConfig::default()
        };
        let members = vec![
            (base.clone(), 1),
            (
                TrainConfig {
                    depth: 1,
                    lr: 3e-3,
                    ..base.clone()
                },
                2,
            ),
            (
                TrainConfig {
                    optimizer: OptimizerKind::Sgd,
                    lr: 0.05,
                    dropout: 0.0,
                    ..base
                },
                3,
            ),
        ];
        fused_equals_alone(Builtin::Mlp, &split, &members, 2);
    }
}

#[test]
fn sgd_members_with_momentum_nesterov_and_decay_train_bit_for_bit_as_alone() {
    let split = digits();
    for nesterov in [false, true] {
        let base = TrainConfig {
            optimizer: OptimizerKind::Sgd,
            nesterov,
            width: 16,
            depth: 1,
            lr: 0.05,
            ..TrainConfig::default()
        };
        let members = vec![
            (base.clone(), 5),
            (
                TrainConfig {
                    momentum: 0.5,
                    weight_decay: 1e-3,
                    lr: 0.1,
                    ..base.clone()
                },
                6,
            ),
            (
                TrainConfig {
                    momentum: 0.0,
                    dropout: 0.3,
                    ..base
                },
                7,
            ),
        ];
        fused_equals_alone(Builtin::Mlp, &split, &members, 2);
    }
}

/// A pack re-formed at epoch boundaries: one member leaves through a checkpoint, goes on
/// alone and comes back restored from it; a fresh trial joins members two epochs ahead. Every
/// member ends where it would have ended trained alone from start to finish.
#[test]
fn members_leave_and_join_through_checkpoints_and_end_as_alone() {
    let split = digits();
    let members = adamw_members();
    let dir = tempfile::tempdir().unwrap();
    let alone_run = |(cfg, seed): &(TrainConfig, u64)| {
        let mut t = trainer(&split, cfg, *seed);
        let reports: Vec<EpochReport> = (0..cfg.epochs).map(|_| t.train_epoch().unwrap()).collect();
        (weights(&t), reports)
    };
    let expected: Vec<_> = members.iter().map(alone_run).collect();
    let mut reports: Vec<Vec<EpochReport>> = vec![Vec::new(); members.len()];
    let mut record = |pack: &mut FusedTrainer, ids: &[usize]| {
        for (r, &id) in pack.train_epoch().unwrap().into_iter().zip(ids) {
            reports[id].push(r.unwrap());
        }
    };

    // Epochs 1 and 2: members 0, 1 and 2 together; member 3 has not started.
    let mut pack = FusedTrainer::new(
        members[..3]
            .iter()
            .map(|(c, s)| trainer(&split, c, *s))
            .collect(),
    )
    .unwrap();
    record(&mut pack, &[0, 1, 2]);
    record(&mut pack, &[0, 1, 2]);
    // Member 1 leaves through a checkpoint; member 3 joins at its epoch 0.
    let mut out = pack.into_trainers().unwrap();
    out[1].save(dir.path()).unwrap();
    let joined = vec![
        out.remove(0),
        out.remove(1),
        trainer(&split, &members[3].0, members[3].1),
    ];
    let mut pack = FusedTrainer::new(joined).unwrap();
    assert_eq!(pack.epochs(), vec![2, 2, 0]);
    record(&mut pack, &[0, 2, 3]);
    // Member 0 has its 3 epochs and must leave before the pack trains again.
    let err = pack.train_epoch().unwrap_err().to_string();
    assert!(err.contains("member 0 has finished"), "{err}");
    let mut out = pack.into_trainers().unwrap();
    let finished = out.remove(0);
    assert!(finished.finished());
    assert!(
        weights(&finished) == expected[0].0,
        "member 0's final weights"
    );
    // Member 1 comes back from its checkpoint, into a fresh trainer.
    let mut restored = trainer(&split, &members[1].0, members[1].1);
    restored.restore(dir.path()).unwrap();
    out.push(restored);
    let mut pack = FusedTrainer::new(out).unwrap();
    assert_eq!(pack.epochs(), vec![3, 1, 2]);
    record(&mut pack, &[2, 3, 1]);
    // Members 2 and 1 have all their epochs; member 3 finishes alone.
    for (mut t, id) in pack.into_trainers().unwrap().into_iter().zip([2, 3, 1]) {
        assert_eq!(t.finished(), id != 3, "member {id}");
        while !t.finished() {
            reports[id].push(t.train_epoch().unwrap());
        }
        assert!(weights(&t) == expected[id].0, "member {id}'s final weights");
    }
    for (id, (_, want)) in expected.iter().enumerate() {
        assert_eq!(reports[id].len(), want.len(), "member {id}");
        for (got, want) in reports[id].iter().zip(want) {
            assert_same_epoch(got, want, &format!("member {id}, epoch {}", want.epoch));
        }
    }
}

#[test]
fn a_diverging_member_fails_alone() {
    let split = digits();
    let base = TrainConfig {
        optimizer: OptimizerKind::Sgd,
        width: 16,
        lr: 0.05,
        ..TrainConfig::default()
    };
    let wild = TrainConfig {
        lr: 1e6,
        ..base.clone()
    };
    let mut calm = trainer(&split, &base, 1);
    let mut pack =
        FusedTrainer::new(vec![trainer(&split, &base, 1), trainer(&split, &wild, 1)]).unwrap();
    let reports = pack.train_epoch().unwrap();
    let err = reports[1].as_ref().unwrap_err().to_string();
    assert!(err.contains("diverged"), "{err}");
    assert_same_epoch(
        reports[0].as_ref().unwrap(),
        &calm.train_epoch().unwrap(),
        "the calm member",
    );
}

#[test]
fn packs_refuse_other_keys_finished_trials_and_other_data() {
    let split = digits();
    let cfg = TrainConfig {
        width: 16,
        epochs: 1,
        ..TrainConfig::default()
    };
    let other_activation = TrainConfig {
        activation: tune_trials::Activation::Tanh,
        ..cfg.clone()
    };
    let err = FusedTrainer::new(vec![
        trainer(&split, &cfg, 1),
        trainer(&split, &other_activation, 1),
    ])
    .err()
    .unwrap()
    .to_string();
    assert!(
        err.contains("member 1 has") && err.contains("only trials of one key fuse"),
        "{err}"
    );
    let nesterov = TrainConfig {
        optimizer: OptimizerKind::Sgd,
        nesterov: true,
        ..cfg.clone()
    };
    assert!(FusedTrainer::new(vec![
        trainer(&split, &cfg, 1),
        trainer(&split, &nesterov, 1)
    ])
    .is_err());
    let no_hidden_layer = TrainConfig {
        depth: 0,
        ..cfg.clone()
    };
    assert!(FusedTrainer::new(vec![
        trainer(&split, &cfg, 1),
        trainer(&split, &no_hidden_layer, 1)
    ])
    .is_err());

    let mut done = trainer(&split, &cfg, 1);
    done.train_epoch().unwrap();
    let err = FusedTrainer::new(vec![done]).err().unwrap().to_string();
    assert!(err.contains("member 0 has finished (epoch 1)"), "{err}");

    let other = DataSpec {
        dataset: Some("digits".into()),
        split_seed: 9,
        ..DataSpec::default()
    }
    .load(".".as_ref())
    .unwrap();
    let err = FusedTrainer::new(vec![trainer(&split, &cfg, 1), trainer(&other, &cfg, 1)])
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("different data"), "{err}");

    // The cnn fuses, but not with the mlp.
    let cnn = trainer_of(Builtin::Cnn, &split, &cfg, 1);
    let err = FusedTrainer::new(vec![trainer(&split, &cfg, 1), cnn])
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("only trials of one key fuse"), "{err}");
    assert!(FusedTrainer::new(Vec::new()).is_err());
}

/// Trains `members` for `epochs` epochs in one pack and each alone: every report and weight
/// within `tolerance` (relative, or absolute below 1), the accuracy within one validation row.
fn fused_near_alone(
    builtin: Builtin,
    split: &Split,
    members: &[(TrainConfig, u64)],
    epochs: u64,
    tolerance: f64,
) {
    let near = |a: f64, b: f64| (a - b).abs() <= tolerance * b.abs().max(1.0);
    let mut alone = trainers_of(builtin, split, members);
    let mut pack = FusedTrainer::new(trainers_of(builtin, split, members)).unwrap();
    for epoch in 1..=epochs {
        let fused = pack.train_epoch().unwrap();
        for (k, (t, report)) in alone.iter_mut().zip(&fused).enumerate() {
            let (got, want) = (report.as_ref().unwrap(), t.train_epoch().unwrap());
            let who = format!("member {k}, epoch {epoch}");
            assert_near_epoch(got, &want, split, tolerance, &who);
        }
    }
    for (k, (f, a)) in pack.into_trainers().unwrap().iter().zip(&alone).enumerate() {
        assert_eq!(f.epoch(), a.epoch());
        for (j, (fw, aw)) in weights(f).iter().zip(weights(a)).enumerate() {
            assert_eq!(
                fw.len(),
                aw.len(),
                "member {k}, weight {j}: its own shape back"
            );
            for (x, y) in fw.iter().zip(&aw) {
                assert!(
                    near(*x as f64, *y as f64),
                    "member {k}, weight {j}: {x} fused, {y} alone"
                );
            }
        }
    }
}

/// The same epoch within `tolerance` (relative, or absolute below 1), the accuracy within
/// one validation row of `split`.
fn assert_near_epoch(
    got: &EpochReport,
    want: &EpochReport,
    split: &Split,
    tolerance: f64,
    who: &str,
) {
    let near = |a: f64, b: f64| (a - b).abs() <= tolerance * b.abs().max(1.0);
    assert_eq!((got.epoch, got.lr), (want.epoch, want.lr), "{who}");
    for (what, g, w) in [
        ("train_loss", got.train_loss, want.train_loss),
        ("val_loss", got.val_loss, want.val_loss),
    ] {
        assert!(near(g, w), "{who}: {what} {g} fused, {w} alone");
    }
    assert!(
        (got.val_accuracy - want.val_accuracy).abs() <= 1.0 / split.val.len() as f64 + 1e-12,
        "{who}: val_accuracy {} fused, {} alone",
        got.val_accuracy,
        want.val_accuracy
    );
}

/// Members of different widths, depths and batch sizes, SGD and AdamW, with dropout and weight
/// decay, in one pack: the narrower padded with zeros, the shallower passing through layers
/// they lack, the shorter batches padded with rows of no weight.
/// Their units compute what they compute alone, summed over extra zero terms: a matmul of
/// another size may round in another order (seen: the last bit of a few weights of the
/// 8-unit member padded to 32 after 3 epochs), so within 1e-5 rather than bit for bit.
#[test]
fn members_of_other_widths_depths_batches_and_optimizers_train_as_alone() {
    let members = mixed_members();
    fused_near_alone(Builtin::Mlp, &digits(), &members, 3, 1e-5);
}

/// Four MLPs of other widths, depths, optimizers, dropout and weight decay.
fn mixed_members() -> Vec<(TrainConfig, u64)> {
    let adamw = TrainConfig {
        epochs: 3,
        ..TrainConfig::default()
    };
    let sgd = TrainConfig {
        optimizer: OptimizerKind::Sgd,
        lr: 0.05,
        ..adamw.clone()
    };
    vec![
        (
            TrainConfig {
                depth: 2,
                width: 24,
                dropout: 0.2,
                ..adamw.clone()
            },
            1,
        ),
        (
            TrainConfig {
                depth: 1,
                width: 16,
                weight_decay: 1e-3,
                ..sgd.clone()
            },
            2,
        ),
        (
            TrainConfig {
                depth: 3,
                width: 8,
                dropout: 0.5,
                weight_decay: 0.05,
                lr: 3e-3,
                lr_decay: LrDecay::Cosine,
                ..adamw
            },
            3,
        ),
        (
            TrainConfig {
                depth: 2,
                width: 32,
                momentum: 0.5,
                dropout: 0.1,
                ..sgd
            },
            4,
        ),
    ]
}

/// A packed member's checkpoint, written from its slices of the pack (now or behind
/// training), is the one its trainer writes unpacked, and, where members train bit for bit
/// as alone (of one width), the one it writes trained alone: every tensor to the bit, the
/// same metadata. Members of other widths (padded), depths and optimizers (an SGD member's
/// one slot in a pack of AdamW's two).
#[test]
fn a_packed_members_checkpoint_is_its_unpacked_and_its_alone_checkpoint() {
    let split = digits();
    let one_width: Vec<(TrainConfig, u64)> = mixed_members()
        .into_iter()
        .map(|(cfg, seed)| (TrainConfig { width: 16, ..cfg }, seed))
        .collect();
    for (set, members) in [("mixed widths", mixed_members()), ("one width", one_width)] {
        let mut pack = FusedTrainer::new(trainers_of(Builtin::Mlp, &split, &members)).unwrap();
        let mut alone = trainers_of(Builtin::Mlp, &split, &members);
        for _ in 0..2 {
            pack.train_epoch().unwrap();
            alone.iter_mut().for_each(|t| {
                t.train_epoch().unwrap();
            });
        }
        let tmp = tempfile::tempdir().unwrap();
        let dir = |k: usize, how: &str| tmp.path().join(format!("{k}-{how}"));
        for k in 0..members.len() {
            let member = pack.member(k).unwrap();
            assert!(!member.finished());
            member.save(&dir(k, "now")).unwrap();
            member.save_behind(&dir(k, "behind")).unwrap();
        }
        assert!(pack.member(members.len()).is_err());
        for (k, (t, a)) in pack.into_trainers().unwrap().iter().zip(&alone).enumerate() {
            t.save(&dir(k, "unpacked")).unwrap();
            a.save(&dir(k, "alone")).unwrap();
            tune_trials::checkpoint::settle(&dir(k, "behind")).unwrap();
            let read = |how| Checkpoint::read(&dir(k, how), &Device::Cpu).unwrap();
            let want = read("unpacked");
            assert_eq!(want.meta::<u64>("epoch").unwrap(), 2);
            let against: &[&str] = if set == "one width" {
                &["now", "behind", "alone"]
            } else {
                &["now", "behind"]
            };
            for &how in against {
                assert_same_checkpoint(&read(how), &want, &format!("{set}, member {k}, {how}"));
            }
        }
    }
}

/// A member's checkpoint held at its boundary (`hold`, which copies nothing) is, copied out
/// after the pack has trained on, re-formed without another member and trained again, the
/// checkpoint the member had at the boundary, to the bit: the pack's updates replace its
/// tensors, never write into them. Members of mixed widths (views of padded tensors), depths
/// and optimizers.
#[test]
fn a_held_checkpoint_is_what_the_member_had_when_held() {
    let split = digits();
    let members = mixed_members();
    let mut pack = FusedTrainer::new(trainers_of(Builtin::Mlp, &split, &members)).unwrap();
    pack.train_epoch().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = |k: usize, how: &str| tmp.path().join(format!("{k}-{how}"));
    let held: Vec<HeldCheckpoint> = (0..members.len())
        .map(|k| {
            let member = pack.member(k).unwrap();
            member.save(&dir(k, "then")).unwrap();
            member.hold().unwrap()
        })
        .collect();
    pack.train_epoch().unwrap();
    let mut leaving = vec![false; members.len()];
    leaving[0] = true;
    let mut pack = pack.reform(&leaving, Vec::new()).unwrap();
    pack.train_epoch().unwrap();
    for (k, held) in held.into_iter().enumerate() {
        tune_trials::checkpoint::write(&dir(k, "held"), held.copy_out().unwrap()).unwrap();
        let read = |how| Checkpoint::read(&dir(k, how), &Device::Cpu).unwrap();
        assert_eq!(read("held").meta::<u64>("epoch").unwrap(), 1);
        assert_same_checkpoint(&read("held"), &read("then"), &format!("member {k}"));
    }
}

/// Asserts that two checkpoints hold the same metadata and tensors, to the bit.
fn assert_same_checkpoint(got: &Checkpoint, want: &Checkpoint, who: &str) {
    assert_eq!(got.metadata, want.metadata, "{who}");
    let mut names: Vec<&String> = got.tensors.keys().collect();
    names.sort();
    let mut want_names: Vec<&String> = want.tensors.keys().collect();
    want_names.sort();
    assert_eq!(names, want_names, "{who}");
    for name in names {
        let bits = |c: &Checkpoint| -> (Vec<usize>, Vec<u32>) {
            let t = &c.tensors[name];
            let values: Vec<f32> = t.flatten_all().unwrap().to_vec1().unwrap();
            (
                t.dims().to_vec(),
                values.iter().map(|v| v.to_bits()).collect(),
            )
        };
        assert!(bits(got) == bits(want), "{who}: {name}");
    }
}

/// Re-forming a pack at a boundary (leavers out, joiners in, from the pack's own tensors) makes
/// the pack that packing the staying members unpacked and the joiners anew makes: the same
/// members' checkpoints to the bit, and the same next epoch. With the widest member leaving
/// (the pack narrows), the deepest leaving while a wider one joins, only SGD members staying
/// while an AdamW one joins (the optimizer slots grow), and everyone leaving.
#[test]
fn a_reformed_pack_is_the_pack_made_anew_of_its_members() {
    let split = digits();
    let members = mixed_members();
    let joiner = |i: usize| -> Trainer {
        let (cfg, seed) = match i {
            0 => (
                TrainConfig {
                    depth: 3,
                    width: 40,
                    ..members[0].0.clone()
                },
                10,
            ),
            _ => (members[0].0.clone(), 11),
        };
        trainer(&split, &cfg, seed)
    };
    let cases: [(&str, [bool; 4], Vec<usize>); 5] = [
        ("nobody leaves or joins", [false; 4], vec![]),
        ("the widest leaves", [false, false, false, true], vec![]),
        (
            "the deepest leaves, a wider joins",
            [false, false, true, false],
            vec![0],
        ),
        (
            "SGD stays, AdamW joins",
            [true, false, true, false],
            vec![1],
        ),
        ("everyone leaves, two join", [true; 4], vec![0, 1]),
    ];
    for (case, leaving, joining) in cases {
        let trained = || {
            let mut pack = FusedTrainer::new(trainers_of(Builtin::Mlp, &split, &members)).unwrap();
            pack.train_epoch().unwrap();
            pack
        };
        let reformed = trained()
            .reform(&leaving, joining.iter().map(|&i| joiner(i)).collect())
            .unwrap();
        let mut anew: Vec<Trainer> = trained()
            .into_trainers()
            .unwrap()
            .into_iter()
            .zip(leaving)
            .filter(|(_, leaves)| !leaves)
            .map(|(t, _)| t)
            .collect();
        anew.extend(joining.iter().map(|&i| joiner(i)));
        let anew = FusedTrainer::new(anew).unwrap();
        let mut packs = [reformed, anew];
        assert_eq!(packs[0].epochs(), packs[1].epochs(), "{case}");
        let tmp = tempfile::tempdir().unwrap();
        for round in 0..2 {
            for (p, pack) in packs.iter().enumerate() {
                for k in 0..pack.epochs().len() {
                    let dir = tmp.path().join(format!("{round}-{p}-{k}"));
                    pack.member(k).unwrap().save(&dir).unwrap();
                }
            }
            for k in 0..packs[0].epochs().len() {
                let read = |p: usize| {
                    let dir = tmp.path().join(format!("{round}-{p}-{k}"));
                    Checkpoint::read(&dir, &Device::Cpu).unwrap()
                };
                let who = format!("{case}, round {round}, member {k}");
                assert_same_checkpoint(&read(0), &read(1), &who);
            }
            if round == 0 {
                let [a, b] = &mut packs;
                let (a, b) = (a.train_epoch().unwrap(), b.train_epoch().unwrap());
                for (k, (a, b)) in a.iter().zip(&b).enumerate() {
                    let (a, b) = (a.as_ref().unwrap(), b.as_ref().unwrap());
                    let who = format!("{case}, member {k}");
                    assert_eq!(
                        (a.epoch, a.lr, a.val_loss),
                        (b.epoch, b.lr, b.val_loss),
                        "{who}"
                    );
                    assert_eq!(a.val_accuracy, b.val_accuracy, "{who}");
                    assert_eq!(a.train_loss, b.train_loss, "{who}");
                }
            }
        }
    }
}

/// The same mixed members with other batch sizes too, and of one width (bit for bit).
#[test]
fn mixed_members_of_other_batch_sizes_or_of_one_width_train_as_alone() {
    let members = mixed_members();
    // Batch sizes too: 1,438 rows make 12, 23, 45 and 29 updates an epoch (the last batch of
    // each shorter), in 45 steps of the pack.
    let batches: Vec<(TrainConfig, u64)> = members
        .iter()
        .zip([128, 64, 32, 50])
        .map(|((cfg, seed), batch_size)| {
            (
                TrainConfig {
                    batch_size,
                    ..cfg.clone()
                },
                *seed,
            )
        })
        .collect();
    fused_near_alone(Builtin::Mlp, &digits(), &batches, 3, 1e-5);
    // Of one width, the other depths and optimizers mix bit for bit: a missing layer passes
    // its input through exactly, and each member takes its own optimizer's update.
    let one_width: Vec<(TrainConfig, u64)> = members
        .into_iter()
        .map(|(cfg, seed)| (TrainConfig { width: 16, ..cfg }, seed))
        .collect();
    fused_equals_alone(Builtin::Mlp, &digits(), &one_width, 3);
}

/// Members of other batch sizes trained each through its own epochs, to the pack's
/// boundaries: a member of larger batches starts its next epoch while the others go on in
/// theirs, one joins in the middle of the others' epochs, and each leaves when it finishes.
/// Every epoch is as alone (dropout included, drawn on from where each member was), and the
/// pack takes as many updates as its longest member. With the stops a tick apart made one,
/// the members whose epochs end a tick sooner sit it out, and still train as alone.
#[test]
fn members_training_through_their_own_epochs_train_as_alone() {
    // Stops merged within no tick, then one: the pack's ticks and stops.
    for (merge_within, want_ticks, want_stops) in [(0, 135, 12), (1, 135, 10)] {
        own_epochs_as_alone(merge_within, want_ticks, want_stops);
    }
}

fn own_epochs_as_alone(merge_within: u64, want_ticks: u64, want_stops: u64) {
    let split = digits();
    // 1,438 rows: 12, 23, 45 and 29 updates an epoch. The last joins after the first
    // boundary, 12 updates into the others' epochs.
    let members: Vec<(TrainConfig, u64)> = mixed_members()
        .into_iter()
        .zip([128, 64, 32, 50])
        .map(|((cfg, seed), batch_size)| (TrainConfig { batch_size, ..cfg }, seed))
        .collect();
    let mut alone = trainers_of(Builtin::Mlp, &split, &members);
    let mut pack = FusedTrainer::new(trainers_of(Builtin::Mlp, &split, &members[..3])).unwrap();
    // Each member of the pack, in its order: its place in `members`.
    let mut ids = vec![0, 1, 2];
    let mut reported = vec![0; members.len()];
    let (mut ticks, mut stops) = (0, 0);
    while !ids.is_empty() {
        ticks += pack.ticks_to_boundary(merge_within);
        stops += 1;
        let reports = pack.train_to_boundary(merge_within).unwrap();
        assert!(reports.iter().any(Option::is_some), "a boundary every call");
        let mut leaving = vec![false; ids.len()];
        for (k, report) in reports.into_iter().enumerate() {
            let Some(report) = report else { continue };
            let id = ids[k];
            let want = alone[id].train_epoch().unwrap();
            let who = format!("member {id}, epoch {}, within {merge_within}", want.epoch);
            assert_near_epoch(&report.unwrap(), &want, &split, 1e-5, &who);
            reported[id] += 1;
            leaving[k] = pack.member(k).unwrap().finished();
        }
        let joiners = if ticks == 12 {
            ids.push(3);
            trainers_of(Builtin::Mlp, &split, &members[3..])
        } else {
            Vec::new()
        };
        if leaving.contains(&true) || !joiners.is_empty() {
            let mut flags = leaving.iter().chain(std::iter::repeat(&false));
            ids.retain(|_| flags.next() == Some(&false));
            if ids.is_empty() {
                break;
            }
            pack = pack.reform(&leaving, joiners).unwrap();
        }
    }
    assert_eq!(reported, vec![3; 4], "every member's three epochs");
    // The batch-32 member's 135 updates, the longest; the joiner's 87 from update 12 end
    // sooner. Epoch by epoch (`train_epoch`) each round lasts its longest epoch's 45. Within
    // a tick, the batch-64 member's epochs end with the batch-128 member's (23 with 24):
    // two stops fewer, and the batch-32 member, never sitting out, still sets the length.
    assert_eq!(
        (ticks, stops),
        (want_ticks, want_stops),
        "within {merge_within}"
    );
}

/// Only a member at its epoch's end unpacks or checkpoints; a whole epoch starts from every
/// member's boundary.
#[test]
fn a_member_in_the_middle_of_its_epoch_neither_unpacks_nor_checkpoints() {
    let split = Split::shipped("wine").unwrap(); // 142 training rows: 3 and 5 updates
    let trainers = [64, 32]
        .iter()
        .map(|&batch_size| {
            let cfg = TrainConfig {
                batch_size,
                ..TrainConfig::default()
            };
            trainer(&split, &cfg, 1)
        })
        .collect();
    let mut pack = FusedTrainer::new(trainers).unwrap();
    pack.train_to_boundary(0).unwrap();
    let middle = |e: String| assert!(e.contains("member 1 is 3 updates into its epoch"), "{e}");
    middle(
        pack.member(1)
            .unwrap()
            .checkpoint()
            .err()
            .unwrap()
            .to_string(),
    );
    middle(pack.train_epoch().unwrap_err().to_string());
    assert!(pack.member(0).unwrap().checkpoint().is_ok());
    let joiner = trainer(&split, &TrainConfig::default(), 2);
    let batch_32 = trainer(
        &split,
        &TrainConfig {
            batch_size: 32,
            ..TrainConfig::default()
        },
        3,
    );
    assert!(!pack.in_step_with(&batch_32, &[false, false]));
    assert!(
        pack.in_step_with(&batch_32, &[false, true]),
        "the batch-32 member in its epoch leaves"
    );
    assert!(
        pack.in_step_with(&joiner, &[]),
        "the batch-64 member is at its boundary"
    );
    middle(pack.into_trainers().err().unwrap().to_string());
}
