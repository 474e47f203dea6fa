//! Built-in Candle trainables through the real binary: curves in the export, ASHA stopping
//! them, HyperBand pausing and resuming them from checkpoints, kill -9 and resume; each trial's
//! curve must equal the same model trained without interruption, bit for bit.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value as Json;
use tune_search::{Params, Value};
use tune_trials::{Builtin, DataSpec, TrainConfig, Trainer};

/// Fixed keys of every spec below.
const FIXED: &str = "builtin = \"mlp\"\ndataset = \"wine\"\nbatch_size = 16\nwidth = 12\n";

fn spec(dir: &Path, top: &str, objective: &str) -> PathBuf {
    let path = dir.join("space.toml");
    let text = format!(
        "name = \"wine\"\nmetric = \"val_loss\"\nmode = \"min\"\n{top}\n[objective]\n{FIXED}{objective}\n[space]\nlr = {{ loguniform = [1e-3, 1e-1] }}\ndropout = {{ uniform = [0.0, 0.3] }}\noptimizer = {{ choice = [\"sgd\", \"adamw\"] }}\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// A sweep run to the end: its folder (gone with `_tmp`) and its export.
struct Swept {
    _tmp: tempfile::TempDir,
    run: PathBuf,
    trials: Vec<Json>,
}

/// Runs a sweep of `spec(top, objective)` to the end.
fn sweep(top: &str, objective: &str) -> Swept {
    let tmp = tempfile::tempdir().unwrap();
    let spec = spec(tmp.path(), top, objective);
    let run = tmp.path().join("run");
    run_ok(&mut tune_run(&spec, &run));
    let trials = export_json(&run);
    Swept {
        _tmp: tmp,
        run,
        trials,
    }
}

/// The trial's steps, checked to be 1, 2, .. with none repeated or skipped.
fn dense_steps(t: &Json) -> Vec<u64> {
    let s = steps(t);
    assert_eq!(
        s,
        (1..=s.len() as u64).collect::<Vec<_>>(),
        "trial {}",
        t["id"]
    );
    s
}

/// Trains the trial's params without any pause and checks that every exported result equals
/// that run's epoch.
fn assert_matches_uninterrupted(t: &Json, epochs: u64) {
    let (wine, fixed) = wine_spec(epochs);
    assert_matches_trained_alone(t, Builtin::Mlp, &wine, &fixed);
}

/// The data and fixed keys of [`spec`]'s sweeps (its `FIXED`), with `epochs`.
fn wine_spec(epochs: u64) -> (DataSpec, Json) {
    let wine = DataSpec {
        dataset: Some("wine".into()),
        ..DataSpec::default()
    };
    let fixed = serde_json::json!({"batch_size": 16, "width": 12, "epochs": epochs});
    (wine, fixed)
}

/// The exported trial `t` of `builtin` on `data` with the `fixed` keys, trained alone from the
/// start.
fn trainer_alone(t: &Json, builtin: Builtin, data: &DataSpec, fixed: &Json) -> Trainer {
    let split = data.load(".".as_ref()).unwrap();
    let mut params = Params::default();
    for (k, v) in t["params"].as_object().unwrap() {
        let v = match v {
            Json::String(s) => Value::Str(s.clone()),
            Json::Number(n) if n.is_i64() => Value::Int(n.as_i64().unwrap()),
            v => Value::Float(v.as_f64().unwrap()),
        };
        params.insert(k.clone(), v);
    }
    let cfg = TrainConfig::from_parts(fixed.as_object().unwrap(), &params).unwrap();
    let id = t["id"].as_u64().unwrap();
    Trainer::new(builtin, cfg, &split, &candle_core::Device::Cpu, id).unwrap()
}

/// [`assert_matches_uninterrupted`] for a trial of `builtin` on `data` with the `fixed` keys.
fn assert_matches_trained_alone(t: &Json, builtin: Builtin, data: &DataSpec, fixed: &Json) {
    let id = t["id"].as_u64().unwrap();
    let mut trainer = trainer_alone(t, builtin, data, fixed);
    let mut expected = Vec::new();
    while !trainer.finished() {
        expected.push(trainer.train_epoch().unwrap());
    }
    let results = t["results"].as_array().unwrap();
    assert!(!results.is_empty(), "trial {id} has no results");
    for r in results {
        let step = r["step"].as_u64().unwrap();
        let e = expected[step as usize - 1];
        for (key, want) in [
            ("val_loss", e.val_loss),
            ("val_accuracy", e.val_accuracy),
            ("train_loss", e.train_loss),
            ("lr", e.lr),
        ] {
            assert_eq!(
                r[key].as_f64(),
                Some(want),
                "trial {id}, epoch {step}, {key}"
            );
        }
    }
}

/// A completed trial's checkpoint in the sweep's folder `run` holds the model of its last
/// report, bit for bit: the trial trained alone to that epoch, every tensor and counter. ASHA
/// ends a trial at `max_t` with `Complete`, which the trial hears as a stop; its last epoch
/// must still be kept.
fn assert_completed_with_its_last_checkpoint(run: &Path, t: &Json, epochs: u64) {
    let id = t["id"].as_u64().unwrap();
    assert_eq!(t["status"], "completed", "trial {id}");
    let folder = run.join("trials").join(id.to_string());
    let kept = tune_trials::checkpoint::Checkpoint::read(&folder, &candle_core::Device::Cpu)
        .unwrap_or_else(|e| panic!("trial {id}: {e}"));
    let (wine, fixed) = wine_spec(epochs);
    let mut alone = trainer_alone(t, Builtin::Mlp, &wine, &fixed);
    for _ in 0..t["results"].as_array().unwrap().len() {
        alone.train_epoch().unwrap();
    }
    let saved = tempfile::tempdir().unwrap();
    alone.save(saved.path()).unwrap();
    let want =
        tune_trials::checkpoint::Checkpoint::read(saved.path(), &candle_core::Device::Cpu).unwrap();
    assert_eq!(kept.metadata, want.metadata, "trial {id}");
    let names: std::collections::BTreeSet<&String> = want.tensors.keys().collect();
    assert_eq!(
        kept.tensors
            .keys()
            .collect::<std::collections::BTreeSet<_>>(),
        names,
        "trial {id}"
    );
    for name in names {
        let bits = |t: &candle_core::Tensor| -> Vec<u32> {
            let v = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            v.into_iter().map(f32::to_bits).collect()
        };
        assert!(
            bits(&kept.tensors[name]) == bits(&want.tensors[name]),
            "trial {id}: {name} differs from the trial trained alone"
        );
    }
}

#[test]
fn a_builtin_sweep_exports_per_epoch_curves_and_asha_stops_some() {
    // ASHA completes the best trials at max_t, two epochs before their own end.
    let swept = sweep(
        "samples = 10\nseed = 5\n[scheduler]\nkind = \"asha\"\ngrace_period = 1\nreduction_factor = 2\nmax_t = 8\n[resources]\ncpu_slots = 1",
        "epochs = 10",
    );
    let trials = &swept.trials;
    assert_eq!(trials.len(), 10);
    let mut stopped = 0;
    for t in trials {
        let s = dense_steps(t);
        match t["status"].as_str().unwrap() {
            "completed" => {
                assert_eq!(s.len(), 8);
                assert_completed_with_its_last_checkpoint(&swept.run, t, 10);
            }
            "stopped" => {
                assert!(s.len() < 8);
                stopped += 1
            }
            other => panic!("trial {}: {other}", t["id"]),
        }
        assert_matches_uninterrupted(t, 10);
    }
    assert!(stopped >= 4, "{stopped} stopped");
    let best = trials.iter().filter_map(|t| {
        t["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["val_accuracy"].as_f64().unwrap())
            .reduce(f64::max)
    });
    assert!(
        best.clone().fold(0.0, f64::max) >= 0.9,
        "{:?}",
        best.collect::<Vec<_>>()
    );
}

#[test]
fn builtin_trials_paused_and_resumed_by_hyperband_train_as_if_never_paused() {
    // max_t 9, eta 3: brackets of 9, 5 and 3 trials with milestones at 1 and 3.
    let swept = sweep(
        "samples = 17\nseed = 2\n[scheduler]\nkind = \"hyperband\"\nmax_t = 9\nreduction_factor = 3\n[resources]\ncpu_slots = 2",
        "epochs = 9",
    );
    assert_hyperband_paused_resumed_and_completed(&swept);
}

/// The checks of a HyperBand sweep of 17 trials (max_t 9, eta 3) of 9 epochs: trials were
/// paused and resumed, each trained as if it never was, and each bracket completed one.
fn assert_hyperband_paused_resumed_and_completed(swept: &Swept) {
    let trials = &swept.trials;
    let resumed = trials
        .iter()
        .filter(|t| t["attempts"].as_u64().unwrap() > 1)
        .count();
    // The 9-trial bracket promotes 3 from epoch 1, and only the last of them to finish that
    // epoch can go on without a pause: at least 2 are paused and resumed.
    assert!(
        resumed >= 2,
        "only {resumed} trials were paused and resumed"
    );
    let mut completed = 0;
    for t in trials {
        dense_steps(t);
        assert_matches_uninterrupted(t, 9);
        if t["status"] == "completed" {
            assert_completed_with_its_last_checkpoint(&swept.run, t, 9);
            completed += 1;
        }
    }
    // Each of the three brackets completes at least one trial at max_t.
    assert!(completed >= 3, "{completed} completed");
}

#[test]
fn a_builtin_sweep_killed_and_resumed_trains_as_if_never_killed() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = spec(
        tmp.path(),
        "samples = 6\nseed = 9\n[resources]\ncpu_slots = 2",
        "epochs = 25",
    );
    let dir = tmp.path().join("killed");
    // Killed (SIGKILL, through a failure point) after the n-th round of acknowledgements of
    // each run:
    // the trials are in the middle of their epochs, between a report and its checkpoint.
    // Every epoch reported once. A kill between an epoch's report and its checkpoint makes
    // the resumed run redo that epoch (all of them, before the first checkpoint), which is
    // not stored twice; the stored values are an uninterrupted run's.
    kill_resume_and_check(
        &spec,
        &dir,
        &[9, 23, 4, 40].map(|n| format!("ack.after=kill@{n}")),
        6,
        25,
    );
}

/// A trial that ASHA completes at `max_t` is completed in the store before the trial hears
/// it, and a completed trial never runs again: its last checkpoint must be on disk by then,
/// so it is written before the epoch is reported. Killed right after the coordinator stored
/// the completion (before it answered), the trial keeps the model of its last report; killed
/// between that checkpoint and the report, the resumed run reports the epoch again rather
/// than skip it. Alone and in a pack.
#[test]
fn a_trial_completed_just_before_a_kill_keeps_its_last_checkpoint() {
    for fuse in [1, 2] {
        // (the kill, and the attempts the trial then took)
        for (kill, attempts) in [
            ("ack.before=kill@4", 1),
            ("checkpoint.before-report=kill", 2),
        ] {
            let tmp = tempfile::tempdir().unwrap();
            // One trial on one slot: acknowledgement n answers its report of epoch n, and
            // ASHA completes it at epoch 4, two before its own end.
            let spec = spec(
                tmp.path(),
                &format!(
                    "samples = 1\nseed = 5\n[scheduler]\nkind = \"asha\"\ngrace_period = 1\n\
                     reduction_factor = 2\nmax_t = 4\n[resources]\ncpu_slots = 1\nfuse = {fuse}"
                ),
                "epochs = 6",
            );
            let dir = tmp.path().join("killed");
            let out = tune_run(&spec, &dir)
                .env("TUNE_FAILPOINTS", kill)
                .stdout(std::process::Stdio::null())
                .output()
                .unwrap();
            assert!(
                killed(&out),
                "fuse {fuse}, {kill}: not killed: {}",
                stderr(&out)
            );
            run_ok(tune().arg("resume").arg(&dir));
            let exported = export_json(&dir);
            assert_eq!(exported.len(), 1);
            let t = &exported[0];
            assert_eq!(t["attempts"], attempts, "fuse {fuse}, {kill}");
            assert_eq!(dense_steps(t).len(), 4, "fuse {fuse}, {kill}");
            assert_matches_uninterrupted(t, 6);
            assert_completed_with_its_last_checkpoint(&dir, t, 6);
        }
    }
}

/// Runs (then resumes) the sweep of `spec` in `dir` once per entry of `kills`, a
/// `TUNE_FAILPOINTS` value each run must be killed by; resumes it to the end, and checks that
/// each of its `trials` completed with `epochs` epochs, each reported once and equal to the
/// trial trained without interruption.
fn kill_resume_and_check(spec: &Path, dir: &Path, kills: &[String], trials: usize, epochs: u64) {
    for kill in kills {
        let out = run_or_resume(spec, dir)
            .env("TUNE_FAILPOINTS", kill)
            .stdout(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(killed(&out), "not killed at {kill}: {}", stderr(&out));
    }
    run_ok(tune().arg("resume").arg(dir));
    let exported = export_json(dir);
    assert_eq!(exported.len(), trials);
    for t in &exported {
        assert_eq!(
            t["status"], "completed",
            "trial {}: {}",
            t["id"], t["error"]
        );
        assert_eq!(dense_steps(t).len() as u64, epochs, "trial {}", t["id"]);
        assert_matches_uninterrupted(t, epochs);
        assert_completed_with_its_last_checkpoint(dir, t, epochs);
    }
}

#[test]
fn bad_builtin_specs_exit_2_with_the_key_and_leave_nothing() {
    let cases = [
        (
            "builtin = \"mpl\"\ndataset = \"wine\"",
            "",
            "did you mean `mlp`?",
        ),
        (
            "builtin = \"mlp\"\ndataset = \"wines\"",
            "",
            "did you mean `wine`?",
        ),
        (
            "builtin = \"mlp\"\ndataset = \"wine\"\nepocs = 3",
            "",
            "unknown key `epocs` (did you mean `epochs`?)",
        ),
        (
            "builtin = \"mlp\"\ndataset = \"wine\"",
            "lrr = { uniform = [0.1, 0.2] }",
            "`lrr` is not a hyperparameter",
        ),
        (
            "builtin = \"mlp\"\ndataset = \"wine\"",
            "width = { uniform = [8.0, 64.0] }",
            "expected usize",
        ),
        (
            "builtin = \"mlp\"\ndataset = \"wine\"",
            "optimizer = { choice = [\"sgd\", \"adma\"] }",
            "unknown variant `adma`",
        ),
        (
            "builtin = \"mlp\"\ndataset = \"wine\"\ndropout = 1.5",
            "",
            "dropout: expected a probability",
        ),
        (
            "builtin = \"cnn\"\ndataset = \"wine\"",
            "",
            "the cnn trains on images",
        ),
        (
            "builtin = \"mlp\"\ncsv = \"missing.csv\"",
            "",
            "missing.csv: cannot read the file",
        ),
        ("builtin = \"mlp\"", "", "needs `dataset"),
        // The data's settings are judged with the spec, before any data is made.
        (
            "builtin = \"mlp\"\ndataset = \"wine\"\nval_fraction = 1.5",
            "",
            "[objective] `val_fraction`: expected a number between 0 and 1, found 1.5",
        ),
        (
            "builtin = \"mlp\"\ndataset = \"wine\"\nval_fraction = 0.001",
            "",
            "[objective] `val_fraction`: 178 rows are too few to hold out 0.001 for validation",
        ),
        (
            "builtin = \"mlp\"\ndataset = \"glyphs\"\nclasses = 12",
            "",
            "[objective] `classes`: glyphs draws 2 to 10 shapes, found 12",
        ),
        (
            "builtin = \"mlp\"\ndataset = \"spirals\"\nsamples = 5",
            "",
            "[objective] `samples`: a synthetic dataset needs samples >= 10, found 5",
        ),
        (
            "builtin = \"mlp\"\ndataset = \"wine\"\ncsv = \"wine.csv\"",
            "",
            "[objective] `csv`: give either `dataset` or `csv`, not both",
        ),
        (
            "command = [\"true\"]\ndataset = \"wine\"",
            "",
            "unknown key `dataset`",
        ),
    ];
    for (objective, space, want) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("space.toml");
        let text = format!(
            "name = \"bad\"\nmetric = \"val_loss\"\nsamples = 2\n[objective]\n{objective}\n[space]\nlr = {{ loguniform = [1e-3, 1e-1] }}\n{space}\n"
        );
        std::fs::write(&path, &text).unwrap();
        let dir = tmp.path().join("run");
        let out = tune_run(&path, &dir).output().unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{objective} / {space}: {err}");
        assert!(
            err.contains(want),
            "{objective} / {space}: wanted {want:?} in {err}"
        );
        assert!(err.contains("space.toml"), "{err}");
        assert!(!dir.exists(), "{objective}: a folder was left");
    }
    // A metric the trainable does not report.
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("space.toml");
    std::fs::write(&path, "name = \"m\"\nmetric = \"accuracy\"\nmode = \"max\"\nsamples = 2\n[objective]\nbuiltin = \"mlp\"\ndataset = \"wine\"\n[space]\nlr = { loguniform = [1e-3, 1e-1] }\n").unwrap();
    let out = tune_run(&path, &tmp.path().join("run")).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("`metric`: the `mlp` trainable reports val_loss, val_accuracy, train_loss, lr, n_params, not \"accuracy\""), "{}", stderr(&out));
}

/// The shipped example loads and validates (its result, 0.983 in 1.6 s in release, is in
/// docs/guide/builtin.md; in a debug build it takes minutes, too long for the suite).
#[test]
fn the_mlp_digits_example_is_a_valid_spec() {
    let path = tune_testkit::workspace_root().join("examples/mlp-digits/space.toml");
    let (spec, _) = tune::ExperimentSpec::read(&path).unwrap();
    assert_eq!((spec.samples, spec.metric.as_str()), (40, "val_accuracy"));
    assert_eq!(spec.space.len(), 8);
    // Width, depth, batch size and optimizer mix in a pack on a GPU: `auto` fuses there.
    assert_eq!(spec.trials_per_pack(true), tune::Fuse::AUTO_GPU);
    assert_eq!(spec.objective.unwrap().builtin.as_deref(), Some("mlp"));
}

#[test]
fn the_glyphs_example_fixes_the_shape_so_its_trials_fuse() {
    let path = tune_testkit::workspace_root().join("examples/glyphs/space.toml");
    let (spec, _) = tune::ExperimentSpec::read(&path).unwrap();
    assert_eq!((spec.samples, spec.space.len()), (64, 5));
    // No searched key separates packs (see `FuseKey`): every trial can join one.
    for p in spec.space.params() {
        assert!(
            !tune_trials::PACK_KEYS.contains(&p.name.as_str()),
            "{} separates packs",
            p.name
        );
    }
    assert_eq!(spec.trials_per_pack(true), tune::Fuse::AUTO_GPU);
    assert_eq!(spec.trials_per_pack(false), 1);
}

/// PBT on a built-in trainable: an exploited trial continues from its source's checkpoint
/// (its next epoch follows the source's), under perturbed params.
#[test]
fn pbt_exploits_continue_builtin_trials_from_their_sources_checkpoints() {
    let trials = sweep(
        "samples = 6\nseed = 4\n[scheduler]\nkind = \"pbt\"\nperturbation_interval = 2\n[resources]\ncpu_slots = 3",
        "epochs = 10",
    )
    .trials;
    let mut continued = 0;
    for t in &trials {
        assert_eq!(
            t["status"], "completed",
            "trial {}: {}",
            t["id"], t["error"]
        );
        let results = t["results"].as_array().unwrap();
        for w in results.windows(2) {
            let (a, b) = (
                w[0]["step"].as_u64().unwrap(),
                w[1]["step"].as_u64().unwrap(),
            );
            if w[0]["attempt"] == w[1]["attempt"] {
                assert_eq!(b, a + 1, "trial {}", t["id"]);
            } else if b > 1 {
                // A new run that did not start over: it restored a checkpoint.
                continued += 1;
            }
        }
        assert!(results.last().unwrap()["step"].as_u64().unwrap() <= 10);
    }
    let exploited = trials
        .iter()
        .filter(|t| t["lineage"].as_array().is_some_and(|l| !l.is_empty()))
        .count();
    assert!(exploited >= 1, "no exploits");
    assert!(continued >= 1, "no run continued from a checkpoint");
}

/// Runs the sweep of `spec` (with `fuse = 4`) in `dir`, checks that it said its trials train
/// fused, and returns its export.
fn run_in_packs_of_4(spec: &Path, dir: &Path) -> Vec<Json> {
    let out = run_ok(&mut tune_run(spec, dir));
    assert!(
        stderr(&out).contains("up to 4 trials per slot train as one fused model"),
        "{}",
        stderr(&out)
    );
    export_json(dir)
}

/// Fused packs (`[resources] fuse`): the trials of one slot and pack key train as one model,
/// and each must still be exactly the trial trained alone, through ASHA's stops (members
/// leave, new trials join), HyperBand's pauses (checkpoints written from the pack, restored
/// alone or into another pack) and a kill -9 with resume. The optimizer is searched (and, under
/// ASHA, the depth), so packs mix SGD and AdamW trials (and depths).
#[test]
fn fused_trials_under_asha_train_as_if_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = spec(
        tmp.path(),
        "samples = 12\nseed = 5\n[scheduler]\nkind = \"asha\"\ngrace_period = 1\nreduction_factor = 2\nmax_t = 8\n[resources]\ncpu_slots = 1\nfuse = 4",
        "epochs = 8",
    );
    // Depths mix in a pack too: the shallower members pass through the layers they lack.
    let mut text = std::fs::read_to_string(&spec).unwrap();
    text.push_str("depth = { int = [1, 3] }\n");
    std::fs::write(&spec, text).unwrap();
    let run = tmp.path().join("run");
    let trials = run_in_packs_of_4(&spec, &run);
    assert_eq!(trials.len(), 12);
    let depths: std::collections::BTreeSet<i64> = trials
        .iter()
        .map(|t| t["params"]["depth"].as_i64().unwrap())
        .collect();
    assert!(depths.len() > 1, "{depths:?}");
    // How many ASHA stops depends on the order in which a pack's members report, which is
    // not fixed (it is with one unfused slot, above): whatever was decided, each trial must
    // be the one trained alone, cut where it was stopped.
    for t in &trials {
        assert!(
            ["completed", "stopped"].contains(&t["status"].as_str().unwrap()),
            "trial {}: {}",
            t["id"],
            t["error"]
        );
        let trained = dense_steps(t).len();
        match t["status"].as_str().unwrap() {
            "completed" => {
                assert_eq!(trained, 8, "trial {}", t["id"]);
                assert_completed_with_its_last_checkpoint(&run, t, 8);
            }
            _ => assert!(trained < 8, "trial {}", t["id"]),
        }
        assert_matches_uninterrupted(t, 8);
        // How many trials each epoch's pack trained depends on when they arrived; it is
        // reported, and never more than a pack holds.
        for r in t["results"].as_array().unwrap() {
            let k = r["trials_in_pack"].as_f64().unwrap();
            assert!((1.0..=4.0).contains(&k), "trial {}: {k}", t["id"]);
        }
    }
}

/// The cnn fuses too: its trials on digits train in packs (convolutions batched over the
/// members), each trial's curve the cnn's trained alone.
#[test]
fn fused_cnn_trials_train_as_if_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = tmp.path().join("space.toml");
    std::fs::write(
        &spec,
        "name = \"digits-cnn\"\nmetric = \"val_loss\"\nmode = \"min\"\nsamples = 4\nseed = 7\n\
         [resources]\ncpu_slots = 1\nfuse = 4\n[objective]\nbuiltin = \"cnn\"\n\
         dataset = \"digits\"\nval_fraction = 0.75\nbatch_size = 32\nchannels = 4\nwidth = 16\n\
         epochs = 2\n[space]\nlr = { loguniform = [1e-3, 1e-1] }\n\
         dropout = { uniform = [0.0, 0.3] }\n",
    )
    .unwrap();
    let trials = run_in_packs_of_4(&spec, &tmp.path().join("run"));
    assert_eq!(trials.len(), 4);
    let digits = DataSpec {
        dataset: Some("digits".into()),
        val_fraction: 0.75,
        ..DataSpec::default()
    };
    let fixed = serde_json::json!({"batch_size": 32, "channels": 4, "width": 16, "epochs": 2});
    let mut packed = 0;
    for t in &trials {
        assert_eq!(
            t["status"], "completed",
            "trial {}: {}",
            t["id"], t["error"]
        );
        assert_eq!(dense_steps(t).len(), 2, "trial {}", t["id"]);
        assert_matches_trained_alone(t, Builtin::Cnn, &digits, &fixed);
        packed += t["results"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["trials_in_pack"].as_f64().unwrap() > 1.0)
            .count();
    }
    assert!(packed > 0, "no epoch trained in a pack of more than one");
}

#[test]
fn fused_trials_paused_by_hyperband_and_killed_train_as_if_alone() {
    let swept = sweep(
        "samples = 17\nseed = 2\n[scheduler]\nkind = \"hyperband\"\nmax_t = 9\nreduction_factor = 3\n[resources]\ncpu_slots = 1\nfuse = 3",
        "epochs = 9",
    );
    assert_hyperband_paused_resumed_and_completed(&swept);

    let tmp = tempfile::tempdir().unwrap();
    let spec = spec(
        tmp.path(),
        "samples = 6\nseed = 9\n[resources]\ncpu_slots = 1\nfuse = 3",
        "epochs = 12",
    );
    let dir = tmp.path().join("killed");
    // Killed after acknowledgements, and once as a pack is about to train an epoch.
    kill_resume_and_check(
        &spec,
        &dir,
        &["ack.after=kill@7", "pack.epoch=kill@4", "ack.after=kill@3"].map(String::from),
        6,
        12,
    );
}

/// A pack that fails (a failure point standing in for a device error at the second epoch any
/// pack trains) fails its members, and no one else: the other trials, and those started later
/// in a new pack, train as if alone.
#[test]
fn a_failing_pack_fails_its_members_and_later_trials_train_in_a_new_one() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = spec(
        tmp.path(),
        "samples = 6\nseed = 3\n[resources]\ncpu_slots = 1\nfuse = 3",
        "epochs = 3",
    );
    let dir = tmp.path().join("run");
    let out = tune_run(&spec, &dir)
        .env("TUNE_FAILPOINTS", "pack.epoch=error-once@2")
        .output()
        .unwrap();
    let trials = export_json(&dir);
    assert_eq!(trials.len(), 6, "{}", stderr(&out));
    let failed: Vec<&Json> = trials.iter().filter(|t| t["status"] == "failed").collect();
    assert!(
        !failed.is_empty() && failed.len() <= 3,
        "{} failed",
        failed.len()
    );
    for t in &failed {
        let error = t["error"].as_str().unwrap();
        assert!(
            error.contains("the pack failed"),
            "trial {}: {error}",
            t["id"]
        );
        // The epochs trained before the failure (if any) are kept, as they were.
        if !dense_steps(t).is_empty() {
            assert!(steps(t).len() < 3, "trial {}", t["id"]);
            assert_matches_uninterrupted(t, 3);
        }
    }
    for t in trials.iter().filter(|t| t["status"] != "failed") {
        assert_eq!(
            t["status"], "completed",
            "trial {}: {}",
            t["id"], t["error"]
        );
        assert_matches_uninterrupted(t, 3);
    }
}
