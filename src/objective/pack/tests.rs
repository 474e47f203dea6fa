use super::*;
use candle_core::Device;
use tune_trials::{Builtin, TrainConfig};

fn wine() -> Split {
    Split::shipped("wine").unwrap()
}

fn trainer(split: &Split, i: usize) -> Trainer {
    let cfg = TrainConfig {
        width: 12,
        batch_size: 16,
        epochs: 3,
        lr: 0.01 * (i + 1) as f64,
        ..TrainConfig::default()
    };
    Trainer::new(Builtin::Mlp, cfg, split, &Device::Cpu, i as u64).unwrap()
}

#[test]
fn trials_arriving_together_share_a_pack_and_leave_it_at_boundaries() {
    let split = Arc::new(wine());
    let tmp = tempfile::tempdir().unwrap();
    let packs = Packs::new(4, 1, Some(1));
    // All three have arrived before any joins: the pack's first epoch waits for them.
    let arrivals: Vec<Arrival> = (0..3).map(|_| packs.arrive(Slot::Cpu(0))).collect();
    let members: Vec<_> = arrivals
        .into_iter()
        .enumerate()
        .map(|(i, arrival)| {
            let (split, dir) = (split.clone(), tmp.path().join(i.to_string()));
            std::thread::spawn(move || {
                let t = trainer(&split, i);
                let key = t.pack_key();
                // Member 2's scheduler completes it at its last epoch: the pack hands
                // it that checkpoint with the report, to be written before reporting.
                let mut member = arrival.join(t, key, (i == 2).then_some(3));
                let mut heard = Vec::new();
                loop {
                    let (report, trials, handed) = member.next_epoch().unwrap();
                    // Member 1 has trained its last epoch at 3: it leaves with its
                    // checkpoint too, to be written as the decision says.
                    let last = report.epoch == 3;
                    match &handed {
                        Some(LeavingCheckpoint::BeforeReport(_)) => assert!(last && i == 2),
                        Some(LeavingCheckpoint::AfterReport(_)) => assert!(last && i == 1),
                        None => assert!(!last, "member {i}"),
                    }
                    heard.push((report, trials));
                    if i == 0 {
                        // Ends without deciding, as a failing trial would: it leaves.
                        return heard;
                    }
                    std::fs::create_dir_all(&dir).unwrap();
                    if let Some(
                        LeavingCheckpoint::BeforeReport(c) | LeavingCheckpoint::AfterReport(c),
                    ) = handed
                    {
                        // It has left the pack: nothing to decide.
                        checkpoint::write(&dir, c).unwrap();
                        return heard;
                    }
                    if member.decide(Decision::Continue(dir.clone())).unwrap() {
                        return heard;
                    }
                }
            })
        })
        .collect();
    for (i, handle) in members.into_iter().enumerate() {
        let heard = handle.join().unwrap();
        let mut alone = trainer(&split, i);
        let sizes: Vec<usize> = heard.iter().map(|h| h.1).collect();
        // Member 0 left after the first epoch; the others went on as a pack of two.
        assert_eq!(
            sizes,
            if i == 0 { vec![3] } else { vec![3, 2, 2] },
            "member {i}"
        );
        for (fused, _) in &heard {
            let want = alone.train_epoch().unwrap();
            assert_eq!(fused.epoch, want.epoch);
            assert_eq!(fused.val_loss, want.val_loss, "member {i}");
            assert_eq!(fused.val_accuracy, want.val_accuracy, "member {i}");
            assert_eq!(fused.lr, want.lr, "member {i}");
            assert!(
                (fused.train_loss - want.train_loss).abs() < 1e-5,
                "member {i}"
            );
        }
        if i > 0 {
            // The last checkpoint, the pack's (or, for member 2, the one that came with
            // its report): it restores to the trial trained alone.
            let mut restored = trainer(&split, i);
            restored.restore(&tmp.path().join(i.to_string())).unwrap();
            assert_eq!(restored.epoch(), 3);
            assert_eq!(restored.evaluate().unwrap(), alone.evaluate().unwrap());
        }
    }
}

/// Member `i` (0 or 1) of the mixed-pack tests: on wine's 142 training rows, batch 64 (3
/// updates an epoch) or 32 (5), 3 epochs.
fn mixed(split: &Split, i: usize) -> Trainer {
    let cfg = TrainConfig {
        batch_size: [64, 32][i],
        epochs: 3,
        ..TrainConfig::default()
    };
    Trainer::new(Builtin::Mlp, cfg, split, &Device::Cpu, i as u64).unwrap()
}

/// Members 0 and 1 ([`mixed`]) in one pack on `slot`, forced with one key (as a GPU mixes
/// batch sizes), member `i` deciding `decide(i, epoch)` on each report until it has left:
/// what each heard, its reports and the trials its pack trained each.
fn in_one_pack(
    split: &Arc<Split>,
    slot: Slot,
    decide: impl Fn(usize, u64) -> Decision + Send + Sync + 'static,
) -> Vec<Vec<(EpochReport, usize)>> {
    let packs = Packs::new(4, 1, Some(1));
    let key = mixed(split, 0).pack_key();
    let decide = Arc::new(decide);
    let arrivals: Vec<Arrival> = (0..2).map(|_| packs.arrive(slot)).collect();
    let members: Vec<_> = arrivals
        .into_iter()
        .enumerate()
        .map(|(i, arrival)| {
            let (t, key, decide) = (mixed(split, i), key.clone(), decide.clone());
            std::thread::spawn(move || {
                let mut member = arrival.join(t, key, None);
                let mut heard = Vec::new();
                loop {
                    let (report, trials, handed) = member.next_epoch().unwrap();
                    let decision = decide(i, report.epoch);
                    heard.push((report, trials));
                    match (handed, decision) {
                        // Its last epoch: it left the pack with its checkpoint.
                        (Some(LeavingCheckpoint::AfterReport(c)), Decision::Continue(dir)) => {
                            checkpoint::write(&dir, c).unwrap();
                            return heard;
                        }
                        (Some(_), _) => return heard,
                        (None, decision) => {
                            if member.decide(decision).unwrap() {
                                return heard;
                            }
                        }
                    }
                }
            })
        })
        .collect();
    members.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Members of other batch sizes in one pack (as on a GPU; forced here with one key) each
/// go through their own epochs: the batch-64 member's three epochs of 3 updates end at
/// the pack's updates 3, 6 and 9, the batch-32 member's of 5 at 5, 10 and 15, its last
/// two after the other has left. Every epoch is as alone.
#[test]
fn members_of_other_batch_sizes_report_at_their_own_boundaries() {
    let split = Arc::new(wine());
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let heard = in_one_pack(&split, Slot::Cpu(0), move |i, _| {
        let dir = root.join(i.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        Decision::Continue(dir)
    });
    let make = |i| mixed(&split, i);
    for (i, heard) in heard.into_iter().enumerate() {
        let sizes: Vec<usize> = heard.iter().map(|h| h.1).collect();
        assert_eq!(sizes, [vec![2, 2, 2], vec![2, 1, 1]][i], "member {i}");
        let mut alone = make(i);
        for (fused, _) in &heard {
            let want = alone.train_epoch().unwrap();
            assert_eq!((fused.epoch, fused.lr), (want.epoch, want.lr), "member {i}");
            for (got, want) in [
                (fused.val_loss, want.val_loss),
                (fused.train_loss, want.train_loss),
            ] {
                assert!(
                    (got - want).abs() < 1e-5,
                    "member {i}: {got} packed, {want} alone"
                );
            }
        }
        let mut restored = make(i);
        restored.restore(&tmp.path().join(i.to_string())).unwrap();
        assert_eq!(restored.epoch(), 3, "member {i}'s last checkpoint");
    }
}

/// On a GPU slot the pack trains on while members decide: a member stopped at its first
/// report (batch 64, 3 updates) trains 2 more updates with the other (batch 32, 5) before
/// the pack hears it, and leaves then, its second epoch untold; the other's checkpoint of
/// each epoch is the one it had at that epoch's end, though written after the pack trained
/// on. (CPU trainers on a slot named as a GPU: the pack never opens the device.)
#[test]
fn a_gpu_pack_trains_on_while_members_decide_and_checkpoints_what_they_had() {
    let split = Arc::new(wine());
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let heard = in_one_pack(&split, Slot::Gpu(0), move |i, epoch| {
        if i == 0 {
            return Decision::Leave;
        }
        let dir = root.join(epoch.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        Decision::Continue(dir)
    });
    let make = |i| mixed(&split, i);
    let sizes = |i: usize| heard[i].iter().map(|h| h.1).collect::<Vec<_>>();
    assert_eq!(sizes(0), [2]);
    // Its first epoch ended at update 5 of the pack, with the stopped member still in it.
    assert_eq!(sizes(1), [2, 1, 1]);
    let mut alone = make(1);
    for (epoch, (fused, _)) in (1..).zip(&heard[1]) {
        let want = alone.train_epoch().unwrap();
        assert_eq!(fused.epoch, want.epoch);
        assert!(
            (fused.val_loss - want.val_loss).abs() < 1e-5,
            "epoch {epoch}"
        );
        let dir = tmp.path().join(epoch.to_string());
        checkpoint::settle(&dir).unwrap();
        let mut restored = make(1);
        restored.restore(&dir).unwrap();
        assert_eq!(restored.epoch(), epoch, "the checkpoint of epoch {epoch}");
        assert_eq!(
            restored.evaluate().unwrap(),
            alone.evaluate().unwrap(),
            "epoch {epoch}'s checkpoint is the member at its end"
        );
    }
}

#[test]
fn a_joiner_waits_for_the_members_of_its_epoch_length_to_be_at_a_boundary() {
    let split = wine();
    let packs = Packs::new(4, 1, Some(1));
    let make = |batch_size| {
        let cfg = TrainConfig {
            batch_size,
            ..TrainConfig::default()
        };
        Trainer::new(Builtin::Mlp, cfg, &split, &Device::Cpu, 0).unwrap()
    };
    let joiner = |token, batch_size| Joiner {
        token,
        trainer: make(batch_size),
        tell: mpsc::channel().0,
        completes_at: None,
    };
    let (decide, _decisions) = mpsc::channel();
    packs.hub().packs.push(PackEntry {
        id: 1,
        slot: Slot::Cpu(0),
        key: make(32).pack_key(),
        size: 4,
        joiners: vec![joiner(10, 32), joiner(11, 64)],
        decisions: decide,
    });
    // Members of batch 32 are in the middle of their epochs, those of 64 are not.
    let mid_32 = |t: &Trainer| t.steps_per_epoch() != 5;
    let tokens = |j: Vec<Joiner>| j.iter().map(|j| j.token).collect::<Vec<_>>();
    assert_eq!(
        tokens(packs.boundary(1, Slot::Cpu(0), false, mid_32).unwrap()),
        [11]
    );
    // The batch-32 joiner waits in the pack's entry; with no member left, it joins.
    assert_eq!(
        tokens(packs.boundary(1, Slot::Cpu(0), false, mid_32).unwrap()),
        Vec::<u64>::new()
    );
    assert_eq!(
        tokens(packs.boundary(1, Slot::Cpu(0), true, mid_32).unwrap()),
        [10]
    );
    assert!(
        packs.boundary(1, Slot::Cpu(0), true, mid_32).is_none(),
        "the pack closes"
    );
}

/// A member that leaves with its report, its checkpoint along (its scheduler completes
/// it at that epoch, or it has trained its last), owes the pack nothing: the pack trains
/// the others on while its trial writes the checkpoint and waits for its report's answer.
#[test]
fn a_member_that_leaves_with_its_last_checkpoint_does_not_hold_up_its_pack() {
    let split = wine();
    let tmp = tempfile::tempdir().unwrap();
    for completed in [true, false] {
        let packs = Packs::new(2, 1, Some(1));
        let arrivals = [packs.arrive(Slot::Cpu(0)), packs.arrive(Slot::Cpu(0))];
        let [first, second] = arrivals;
        let epochs = if completed { 3 } else { 1 };
        let cfg = TrainConfig {
            width: 12,
            batch_size: 16,
            epochs,
            ..TrainConfig::default()
        };
        let t0 = Trainer::new(Builtin::Mlp, cfg, &split, &Device::Cpu, 0).unwrap();
        let t1 = trainer(&split, 1);
        let key = t0.pack_key();
        // Member 0 leaves at epoch 1: completed there, or at the last of its epochs.
        let mut leaving = first.join(t0, key.clone(), completed.then_some(1));
        let mut going_on = second.join(t1, key, None);
        let (_, trials, handed) = leaving.next_epoch().unwrap();
        assert_eq!(trials, 2);
        match handed {
            Some(LeavingCheckpoint::BeforeReport(_)) => assert!(completed),
            Some(LeavingCheckpoint::AfterReport(_)) => assert!(!completed),
            None => panic!("the checkpoint comes with the report"),
        }
        assert!(
            leaving.decide(Decision::Leave).is_err(),
            "the pack asked for no decision"
        );
        // Member 0 neither decides nor ends (its trial is writing the checkpoint,
        // waiting for its report's answer): the pack trains member 1's next epoch all
        // the same.
        going_on.next_epoch().unwrap();
        assert!(!going_on
            .decide(Decision::Continue(tmp.path().to_path_buf()))
            .unwrap());
        let (tx, rx) = mpsc::channel();
        let next = std::thread::spawn(move || {
            let got = going_on
                .next_epoch()
                .map(|(r, trials, _)| (r.epoch, trials));
            tx.send(got.map_err(|e| e.to_string())).unwrap();
            going_on
        });
        // A pack that waited for member 0 would never train again (a generous bound, so
        // that a hang fails the test rather than stalling the suite).
        let got = rx.recv_timeout(Duration::from_secs(120));
        assert_eq!(got.unwrap().unwrap(), (2, 1), "epoch 2, in a pack of one");
        drop(leaving);
        let mut going_on = next.join().unwrap();
        assert!(going_on.decide(Decision::Leave).unwrap());
    }
}

#[test]
fn a_trial_started_in_the_place_of_one_that_left_joins_its_pack() {
    let split = Arc::new(wine());
    let tmp = tempfile::tempdir().unwrap();
    let packs = Packs::new(2, 1, Some(1));
    let mut arrivals = vec![packs.arrive(Slot::Cpu(0)), packs.arrive(Slot::Cpu(0))].into_iter();
    let (joined, has_joined) = mpsc::channel();
    let leaver = {
        let (split, packs, arrival) = (split.clone(), packs.clone(), arrivals.next().unwrap());
        std::thread::spawn(move || {
            let t = trainer(&split, 0);
            let key = t.pack_key();
            let mut member = arrival.join(t, key, None);
            member.next_epoch().unwrap();
            // Stopped by the scheduler, and a new trial starts in its place.
            assert!(member.decide(Decision::Leave).unwrap());
            let arrival = packs.arrive(Slot::Cpu(0));
            let t = trainer(&split, 2);
            let key = t.pack_key();
            let mut newcomer = arrival.join(t, key, None);
            joined.send(()).unwrap();
            let (_, trials, _) = newcomer.next_epoch().unwrap();
            newcomer.decide(Decision::Leave).unwrap();
            trials
        })
    };
    let stayer = {
        let (arrival, dir) = (arrivals.next().unwrap(), tmp.path().join("1"));
        std::thread::spawn(move || {
            let t = trainer(&split, 1);
            let key = t.pack_key();
            let mut member = arrival.join(t, key, None);
            member.next_epoch().unwrap();
            // The pack is still deciding its epoch when the newcomer joins.
            has_joined.recv().unwrap();
            std::fs::create_dir_all(&dir).unwrap();
            assert!(!member.decide(Decision::Continue(dir)).unwrap());
            let (_, trials, _) = member.next_epoch().unwrap();
            member.decide(Decision::Leave).unwrap();
            trials
        })
    };
    // Its place was free once `decide` returned: the newcomer trained in the same pack
    // rather than in one of its own beside it.
    assert_eq!(leaver.join().unwrap(), 2, "the newcomer's pack");
    assert_eq!(stayer.join().unwrap(), 2, "the stayer's pack");
}

#[test]
fn a_pack_waits_for_trials_arriving_on_its_slot_only_while_it_has_room() {
    let split = wine();
    let key = trainer(&split, 0).pack_key();
    let entry = |id, slot: Slot, size| PackEntry {
        id,
        slot,
        key: key.clone(),
        size,
        joiners: Vec::new(),
        decisions: mpsc::channel().0,
    };
    let packs = Packs::new(2, 4, Some(1));
    let mut hub = Hub {
        packs: vec![entry(1, Slot::Gpu(0), 1), entry(2, Slot::Gpu(0), 2)],
        ..Hub::default()
    };
    assert!(
        !packs.waits_for_arrivals(&hub, 1, Slot::Gpu(0)),
        "nobody arriving"
    );
    hub.arriving.insert(Slot::Gpu(0), 1);
    assert!(
        packs.waits_for_arrivals(&hub, 1, Slot::Gpu(0)),
        "room for one"
    );
    // Full: the arriving trial cannot join it, so it trains on (as every pack of one does,
    // a GPU's trials where nothing fuses).
    assert!(!packs.waits_for_arrivals(&hub, 2, Slot::Gpu(0)), "full");
    let ones = Packs::new(1, 4, Some(1));
    assert!(
        !ones.waits_for_arrivals(&hub, 1, Slot::Gpu(0)),
        "a pack of one"
    );
}

#[test]
fn a_cpu_slot_trains_one_pack_at_a_time_and_a_gpu_as_many_as_its_shares() {
    let packs = Packs::new(4, 2, Some(1));
    let training = |slot: Slot| packs.hub().training.get(&slot).copied().unwrap_or(0);
    let gpu = (packs.take_turn(Slot::Gpu(0)), packs.take_turn(Slot::Gpu(0)));
    assert_eq!(training(Slot::Gpu(0)), 2);
    let cpu = packs.take_turn(Slot::Cpu(0));
    let (tx, rx) = mpsc::channel();
    let waiting = {
        let packs = packs.clone();
        std::thread::spawn(move || {
            let _turn = packs.take_turn(Slot::Cpu(0));
            tx.send(packs.hub().training[&Slot::Cpu(0)]).unwrap();
        })
    };
    // The second pack of cpu:0 gets its turn only once the first has given it back.
    assert_eq!(training(Slot::Cpu(0)), 1);
    drop(cpu);
    assert_eq!(rx.recv().unwrap(), 1);
    waiting.join().unwrap();
    drop(gpu);
    assert_eq!((training(Slot::Cpu(0)), training(Slot::Gpu(0))), (0, 0));
}

#[test]
fn trials_of_other_keys_or_slots_get_packs_of_their_own() {
    let split = wine();
    let packs = Packs::new(2, 1, Some(1));
    let other = {
        // Another batch size (a width of its own would share the pack, padded).
        let cfg = TrainConfig {
            batch_size: 8,
            epochs: 3,
            ..TrainConfig::default()
        };
        Trainer::new(Builtin::Mlp, cfg, &split, &Device::Cpu, 9).unwrap()
    };
    // Every trial arrives before any joins, so no pack starts an epoch short.
    let slots = [0, 0, 0, 0, 1].map(Slot::Cpu);
    let arrivals: Vec<Arrival> = slots.iter().map(|&s| packs.arrive(s)).collect();
    let trainers = [
        trainer(&split, 0),
        trainer(&split, 1),
        // The pack of two is full: a third of that key starts another.
        trainer(&split, 2),
        other,
        // Same key, other slot.
        trainer(&split, 3),
    ];
    let mut hold: Vec<Member> = arrivals
        .into_iter()
        .zip(trainers)
        .map(|(a, t)| {
            let key = t.pack_key();
            a.join(t, key, None)
        })
        .collect();
    let sizes: Vec<usize> = hold.iter_mut().map(|m| m.next_epoch().unwrap().1).collect();
    assert_eq!(sizes, [2, 2, 1, 1, 1]);
    for m in &mut hold {
        assert!(m.decide(Decision::Leave).unwrap());
    }
}
