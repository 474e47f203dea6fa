//! Built-in Candle trainables as objectives: the data is loaded once per sweep, and each trial
//! trains in-process on its slot's device, checkpointing after every decided epoch; with
//! packs of more than one trial, the trials of a slot that share a `PackKey` (whatever their
//! depths and optimizers, and on a GPU their widths) train as one fused model (`super::pack`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

use tune_trials::{
    open_device, Builtin, DataSpec, EpochReport, Split, TrainConfig, Trainer, TrialsError,
    CHECKPOINT_FILE,
};

use super::checkpoint_rule::{checkpoint_after, written_before_report, CheckpointWrite};
use super::cores::{cores, threads_per_trial};
use super::pack::{Decision, LeavingCheckpoint, Member, Packs};
use super::pack_settings::PackSettings;
use super::spec::ObjectiveSpec;
use super::{ObjectiveFn, Stop, TrialContext};
use crate::error::TuneError;
use crate::pool::Slot;

/// The objective for `[objective] builtin = "mlp"` (or `"cnn"`); a relative `csv` path is
/// taken from `workdir`. `trials_per_pack` above 1 fuses the trials of a slot that share a key; a
/// GPU trains up to `trials_per_gpu` packs at once, and trains every trial in a pack (of one
/// where `trials_per_pack` is 1, see [`trains_in_a_pack`]).
pub(crate) fn builtin_objective(
    obj: &ObjectiveSpec,
    workdir: &Path,
    cpu_slots: usize,
    (trials_per_pack, trials_per_gpu): (usize, usize),
) -> Result<Arc<ObjectiveFn>, TuneError> {
    let name = obj.builtin.as_deref().unwrap_or_default();
    let builtin: Builtin = name
        .parse()
        .map_err(|e| TuneError::Invalid(format!("[objective] {e}")))?;
    let (data, fixed) = obj.builtin_options();
    let data: DataSpec = toml::Value::Table(data)
        .try_into()
        .map_err(|e: toml::de::Error| {
            TuneError::Invalid(format!("[objective] {}", e.message().trim()))
        })?;
    let invalid = |e: tune_trials::TrialsError| TuneError::Invalid(format!("[objective] {e}"));
    data.check_for(builtin).map_err(invalid)?;
    if cpu_slots == 0 {
        // A coordinator whose trials all run on `tune worker`s (`--slots 0`) makes no data
        // (the glyphs: 82 MB, 0.6 s on 2 cores): each worker makes its own. A CSV is still
        // read, so that a missing or bad file fails here rather than in every trial: workers
        // read it at the same absolute path (the spec's folder, where the sweep was created).
        if data.csv.is_some() {
            data.load(workdir).map_err(invalid)?;
        }
        return Ok(Arc::new(|_: &mut TrialContext| {
            Err("this process runs no trial (0 local slots)".into())
        }));
    }
    let split = if data.csv.is_some() {
        // Read before the sweep starts, so that a bad file stops it there.
        Arc::new(SweepData::made(Ok(
            make_data(&data, workdir).map_err(invalid)?
        )))
    } else {
        // Its keys are checked (`check_for`); should the drawing still fail, every trial
        // fails with why.
        Arc::new(SweepData::draw(data, workdir.to_path_buf()))
    };
    let threads = threads_per_trial(cpu_slots);
    let packs = Packs::new(trials_per_pack, trials_per_gpu, threads);
    let checkpoints = SettleCheckpoints;
    Ok(Arc::new(move |ctx: &mut TrialContext| {
        // The objective owns it, so it drops (and waits for the writes) with the objective.
        let _ = &checkpoints;
        match threads {
            Some(n) => rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .build()?
                .install(|| train(builtin, &fixed, &split, &packs, ctx)),
            None => train(builtin, &fixed, &split, &packs, ctx),
        }
    }))
}

/// The data every trial of a sweep trains on. A drawn or shipped dataset is made on a thread
/// of its own from the objective's start, while the coordinator starts and each GPU slot's
/// first trial opens its device (its cuBLAS and cuRAND handles), which before waited for it:
/// on a GPU the sweep's first second was idle (docs/design/fused-trials.md).
struct SweepData {
    split: OnceLock<Result<Arc<Split>, String>>,
    drawing: Mutex<Option<JoinHandle<Result<Split, TrialsError>>>>,
}

impl SweepData {
    /// Data made already (or that failed to be).
    fn made(made: Result<Split, TrialsError>) -> SweepData {
        SweepData {
            split: OnceLock::from(made.map(Arc::new).map_err(|e| e.to_string())),
            drawing: Mutex::new(None),
        }
    }

    fn draw(data: DataSpec, workdir: PathBuf) -> SweepData {
        let (spec, dir) = (data.clone(), workdir.clone());
        let drawing = std::thread::Builder::new()
            .name("tune-data".into())
            .spawn(move || make_data(&spec, &dir));
        match drawing {
            Ok(handle) => SweepData {
                split: OnceLock::new(),
                drawing: Mutex::new(Some(handle)),
            },
            // No thread to spare: drawn here, before the sweep starts (the same rows).
            Err(_) => SweepData::made(make_data(&data, &workdir)),
        }
    }

    /// The split, once made: the first caller waits for the drawing, the others for it.
    fn wait(&self) -> Result<Arc<Split>, TrialsError> {
        let made = self.split.get_or_init(|| {
            let drawing = self
                .drawing
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            match drawing.map(JoinHandle::join) {
                Some(Ok(made)) => made.map(Arc::new).map_err(|e| e.to_string()),
                Some(Err(_)) => Err("drawing the data panicked".into()),
                None => Err("the data was not drawn".into()),
            }
        });
        made.clone().map_err(TrialsError::Data)
    }
}

/// `data`'s split, made on every core whatever share of them `RAYON_NUM_THREADS` gives each
/// trial: the glyphs are drawn in parallel (on an H200's machine, drawing them on one core
/// idled the GPU for the sweep's first 2 s).
fn make_data(data: &DataSpec, workdir: &Path) -> Result<Split, TrialsError> {
    let drawing = std::time::Instant::now();
    let split = rayon::ThreadPoolBuilder::new()
        .num_threads(cores())
        .build()
        .map_or_else(
            |_| data.load(workdir),
            |pool| pool.install(|| data.load(workdir)),
        )?;
    super::pack::trace(format_args!(
        "data `{}` made in {:.3} s, {} training rows",
        split.train.name,
        drawing.elapsed().as_secs_f64(),
        split.train.y.len()
    ));
    Ok(split)
}

/// Held by the objective: when the sweep is over and the objective dropped, the checkpoints
/// still being written behind training are waited for, so that the process ends with every
/// trial's latest on disk.
struct SettleCheckpoints;

impl Drop for SettleCheckpoints {
    fn drop(&mut self) {
        let settling = std::time::Instant::now();
        tune_trials::checkpoint::settle_all();
        // After the last trial, the GPU idles: part of a sweep's last second there.
        super::pack::trace(format_args!(
            "checkpoints settled in {:.3} s after the last trial",
            settling.elapsed().as_secs_f64()
        ));
    }
}

/// One trial of a built-in trainable: train, report and checkpoint epoch by epoch.
fn train(
    builtin: Builtin,
    fixed: &serde_json::Map<String, serde_json::Value>,
    data: &SweepData,
    packs: &Arc<Packs>,
    ctx: &mut TrialContext,
) -> Result<(), super::BoxError> {
    let cfg = TrainConfig::from_parts(fixed, ctx.params())?;
    let packs = trains_in_a_pack(
        packs.size(),
        ctx.device(),
        PackSettings::get().gpu_trials_alone,
    )
    .then_some(packs);
    // Packs on this slot wait for the trial until it joins one or trains alone.
    let arrival = packs.map(|p| p.arrive(ctx.device()));
    let seed = cfg.seed.unwrap_or(ctx.id());
    // Each opens the device before it waits for the data.
    let mut trainer = match packs {
        Some(p) => {
            let tensors = p.tensors(ctx.device(), || data.wait())?;
            Trainer::with_tensors(builtin, cfg, &*data.wait()?, &tensors, seed)?
        }
        None => {
            let device = open_device(super::pack::device_of(ctx.device())?)?;
            Trainer::new(builtin, cfg, &*data.wait()?, &device, seed)?
        }
    };
    // A run killed before its first checkpoint landed (or an exploit that snapshotted a
    // source before its first) leaves a folder without one: the trial starts over, and
    // since training is seeded it reports the same epochs again.
    if let Some(dir) = ctx.restore_dir() {
        // A checkpoint of an earlier attempt in this process may still be on its way.
        tune_trials::checkpoint::settle(dir)?;
        if dir.join(CHECKPOINT_FILE).exists() {
            trainer.restore(dir)?;
        }
    }
    let n_params = trainer.parameter_count() as f64;
    // A checkpoint written before its epoch was reported (at the step where the scheduler
    // completes the trial) outlives a run killed before that report was kept: the epoch is
    // reported again, as the checkpoint kept it, rather than skipped. (Had the report been
    // kept, the trial would be completed and not run again.)
    if let Some(r) = trainer
        .last_report()
        .filter(|r| written_before_report(r.epoch, ctx.completes_at()))
    {
        report(ctx, &r, n_params, None)?;
    }
    if let Some(arrival) = arrival {
        if !trainer.finished() {
            let key = if PackSettings::get().by_steps {
                trainer.pack_key_by_steps()
            } else {
                trainer.pack_key()
            };
            // The pack trains it on its own thread (see `Trainer::synchronize`).
            trainer.synchronize()?;
            let fused = packs.is_some_and(|p| p.size() > 1);
            let member = arrival.join(trainer, key, ctx.completes_at());
            return train_in_pack(member, n_params, fused, ctx);
        }
    }
    train_alone(trainer, n_params, ctx)
}

/// Trains on alone, epoch by epoch: each reported, and checkpointed as its decision says.
fn train_alone(
    mut trainer: Trainer,
    n_params: f64,
    ctx: &mut TrialContext,
) -> Result<(), super::BoxError> {
    while !trainer.finished() {
        let r = trainer.train_epoch()?;
        let early = written_before_report(r.epoch, ctx.completes_at());
        if early {
            trainer.save(ctx.checkpoint_dir()?)?;
            written_early()?;
        }
        let heard = report(ctx, &r, n_params, None);
        // The checkpoint follows the decision, as the command protocol's does: a paused
        // trial resumes after the epoch it reported, a stopped one needs none.
        match checkpoint_after(&heard, trainer.finished(), early) {
            Some(CheckpointWrite::Behind) => trainer.save_behind(ctx.checkpoint_dir()?)?,
            Some(CheckpointWrite::Now) => trainer.save(ctx.checkpoint_dir()?)?,
            None => {}
        }
        heard?;
    }
    Ok(())
}

/// After a checkpoint [`written_before_report`], before the report: where a test kills
/// the run between the two (the `checkpoint.before-report` failure point).
fn written_early() -> Result<(), super::BoxError> {
    crate::failpoint::hit("checkpoint.before-report").map_err(|e| e.into())
}

/// Reports an epoch of a built-in trainable; a trial trained in a pack adds how many trials
/// the pack trained that epoch (`trials_in_pack`).
fn report(
    ctx: &mut TrialContext,
    r: &EpochReport,
    n_params: f64,
    trials_in_pack: Option<usize>,
) -> Result<(), Stop> {
    let mut metrics = vec![
        ("val_loss".to_string(), r.val_loss),
        ("val_accuracy".to_string(), r.val_accuracy),
        ("train_loss".to_string(), r.train_loss),
        ("lr".to_string(), r.lr),
        ("n_params".to_string(), n_params),
    ];
    if let Some(k) = trials_in_pack {
        metrics.push(("trials_in_pack".to_string(), k as f64));
    }
    ctx.report(r.epoch, metrics)
}

/// Whether a trial on `slot` trains in a pack of at most `trials_per_pack`: always on a GPU,
/// where a pack, even of one, computes its own gradients and updates its weights in a few
/// fused kernels, while a trial alone goes through candle's autograd and optimizer, ~2.5x the
/// kernel launches of a pack of one (docs/design/fused-trials.md); on CPU only where packs fuse,
/// since there a pack of one is no faster (the bench's K = 1 rows). `gpu_alone`
/// ([`gpu_trials_alone`]) keeps a GPU's trials out of packs of one.
fn trains_in_a_pack(trials_per_pack: usize, slot: Slot, gpu_alone: bool) -> bool {
    trials_per_pack > 1 || (super::pack::is_gpu(slot) && !gpu_alone)
}

/// One trial trained in a pack: the loop of `train`, with the pack training each epoch and
/// writing the checkpoints. A trial of a sweep that `fused` reports how many trials its pack
/// trained each epoch.
fn train_in_pack(
    mut member: Member,
    n_params: f64,
    fused: bool,
    ctx: &mut TrialContext,
) -> Result<(), super::BoxError> {
    loop {
        let (r, trials, handed) = member.next_epoch()?;
        let report = |ctx: &mut TrialContext| report(ctx, &r, n_params, fused.then_some(trials));
        match handed {
            Some(LeavingCheckpoint::BeforeReport(contents)) => {
                // Its scheduler completes it at this epoch: it left the pack with the report,
                // and the pack trains on without waiting for it.
                tune_trials::checkpoint::write(ctx.checkpoint_dir()?, contents)?;
                written_early()?;
                return Ok(report(ctx)?);
            }
            Some(LeavingCheckpoint::AfterReport(contents)) => {
                // It has trained its last epoch and left the pack with it.
                let heard = report(ctx);
                if checkpoint_after(&heard, true, false).is_some() {
                    tune_trials::checkpoint::write(ctx.checkpoint_dir()?, contents)?;
                }
                return Ok(heard?);
            }
            None => {}
        }
        let heard = report(ctx);
        let out = match heard {
            Ok(()) => member.decide(Decision::Continue(ctx.checkpoint_dir()?.to_path_buf()))?,
            Err(Stop::Paused) => {
                member.decide(Decision::Pause(ctx.checkpoint_dir()?.to_path_buf()))?
            }
            Err(Stop::Completed) => {
                member.decide(Decision::Complete(ctx.checkpoint_dir()?.to_path_buf()))?
            }
            Err(_) => member.decide(Decision::Leave)?,
        };
        heard?;
        if out {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trials_waiting_for_the_data_drawn_behind_them_all_get_the_one_split() {
        let spec = |name: &str| DataSpec {
            dataset: Some(name.into()),
            ..DataSpec::default()
        };
        let data = SweepData::draw(spec("wine"), PathBuf::from("."));
        let splits: Vec<Arc<Split>> = std::thread::scope(|s| {
            let waiting: Vec<_> = (0..4).map(|_| s.spawn(|| data.wait().unwrap())).collect();
            waiting.into_iter().map(|w| w.join().unwrap()).collect()
        });
        assert!(splits.iter().all(|s| Arc::ptr_eq(s, &splits[0])));
        assert_eq!(*splits[0], Split::shipped("wine").unwrap());
        // A drawing that fails fails every trial that waits for it, each with why.
        let data = SweepData::draw(spec("no-such-data"), PathBuf::from("."));
        for _ in 0..2 {
            let e = data.wait().unwrap_err().to_string();
            assert!(e.contains("no-such-data"), "{e}");
        }
    }

    #[test]
    fn a_gpu_trains_every_trial_in_a_pack_and_a_cpu_slot_only_where_packs_fuse() {
        assert!(trains_in_a_pack(1, Slot::Gpu(0), false));
        assert!(trains_in_a_pack(16, Slot::Gpu(1), false));
        assert!(!trains_in_a_pack(1, Slot::Cpu(0), false));
        assert!(trains_in_a_pack(4, Slot::Cpu(0), false));
        // Trials alone on a GPU only where the sweep does not fuse.
        assert!(!trains_in_a_pack(1, Slot::Gpu(0), true));
        assert!(trains_in_a_pack(16, Slot::Gpu(0), true));
        assert!(!trains_in_a_pack(1, Slot::Cpu(0), true));
    }
}
