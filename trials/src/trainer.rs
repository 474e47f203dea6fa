//! One trial of a built-in trainable: epochs of minibatch training, validation after each,
//! early stopping, and checkpoints that restore bit for bit.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor, D};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::checkpoint::{self, Checkpoint};
use crate::config::{Builtin, TrainConfig, ARCHITECTURE_KEYS};
use crate::data::{Dataset, Split};
use crate::model::{Cnn, Dropout, Mlp, Model};
use crate::optim::{lr_at, Optimizer};
use crate::{EarlyStopping, TrialsError};

/// What one epoch measured.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EpochReport {
    /// 1 after the first epoch.
    pub epoch: u64,
    /// Mean cross-entropy over the epoch's minibatches (with dropout).
    pub train_loss: f64,
    pub val_loss: f64,
    pub val_accuracy: f64,
    /// Learning rate of the epoch's last update.
    pub lr: f64,
    /// Early stopping says this was the last epoch.
    pub stop_early: bool,
}

/// Trains one model on one split.
///
/// ```
/// use tune_trials::{Builtin, Split, TrainConfig, Trainer};
/// let split = Split::shipped("wine").unwrap();
/// let cfg = TrainConfig { epochs: 30, lr: 0.01, width: 16, ..TrainConfig::default() };
/// let mut t = Trainer::new(Builtin::Mlp, cfg, &split, &candle_core::Device::Cpu, 1).unwrap();
/// let mut last = None;
/// while !t.finished() {
///     last = Some(t.train_epoch().unwrap());
/// }
/// assert!(last.unwrap().val_accuracy > 0.9);
/// ```
pub struct Trainer {
    pub(crate) builtin: Builtin,
    /// The images' `(channels, height, width)` where the model takes images (the CNN).
    pub(crate) image: Option<(usize, usize, usize)>,
    pub(crate) cfg: TrainConfig,
    pub(crate) seed: u64,
    pub(crate) model: Box<dyn Model>,
    pub(crate) optimizer: Optimizer,
    pub(crate) early: Option<EarlyStopping>,
    pub(crate) epoch: u64,
    pub(crate) stopped_early: bool,
    /// What its last epoch measured, kept in its checkpoints too ([`Trainer::last_report`]).
    pub(crate) last_report: Option<EpochReport>,
    pub(crate) train: (Tensor, Tensor, usize),
    pub(crate) val: (Tensor, Tensor, usize),
    pub(crate) device: Device,
}

/// A split's rows as tensors on one device, which trainers made with
/// [`Trainer::with_tensors`] share rather than each uploading its own copy (on a GPU, a
/// sweep's glyphs are 81 MB a trial, and an upload waits for the queue to drain).
///
/// ```
/// use tune_trials::{Builtin, Split, SplitTensors, TrainConfig, Trainer};
/// let split = Split::shipped("wine").unwrap();
/// let tensors = SplitTensors::new(&split, &candle_core::Device::Cpu).unwrap();
/// let trainers: Vec<Trainer> = (0..2)
///     .map(|seed| {
///         let cfg = TrainConfig::default();
///         Trainer::with_tensors(Builtin::Mlp, cfg, &split, &tensors, seed).unwrap()
///     })
///     .collect();
/// assert_eq!(trainers.len(), 2);
/// ```
#[derive(Clone)]
pub struct SplitTensors {
    train: (Tensor, Tensor, usize),
    val: (Tensor, Tensor, usize),
}

impl SplitTensors {
    /// Uploads `split`'s rows to `device`.
    pub fn new(split: &Split, device: &Device) -> Result<SplitTensors, TrialsError> {
        let made = SplitTensors {
            train: tensors(&split.train, device)?,
            val: tensors(&split.val, device)?,
        };
        // Other threads read the rows (a slot's trials, its packs); see `Trainer::synchronize`.
        device.synchronize()?;
        Ok(made)
    }

    /// The device the rows are on.
    pub fn device(&self) -> &Device {
        self.train.0.device()
    }
}

impl Trainer {
    pub fn new(
        builtin: Builtin,
        cfg: TrainConfig,
        split: &Split,
        device: &Device,
        seed: u64,
    ) -> Result<Trainer, TrialsError> {
        Trainer::with_tensors(
            builtin,
            cfg,
            split,
            &SplitTensors::new(split, device)?,
            seed,
        )
    }

    /// [`Trainer::new`] on `split`'s rows already on a device, shared with other trainers.
    pub fn with_tensors(
        builtin: Builtin,
        cfg: TrainConfig,
        split: &Split,
        tensors: &SplitTensors,
        seed: u64,
    ) -> Result<Trainer, TrialsError> {
        if (tensors.train.2, tensors.val.2) != (split.train.len(), split.val.len()) {
            return Err(TrialsError::Train(format!(
                "the tensors hold {} and {} rows, the split {} and {}: not made from it",
                tensors.train.2,
                tensors.val.2,
                split.train.len(),
                split.val.len()
            )));
        }
        let device = tensors.device();
        let data = &split.train;
        let mut image = None;
        let model: Box<dyn Model> = match builtin {
            Builtin::Mlp => Box::new(Mlp::new(
                data.features,
                data.classes,
                cfg.depth,
                cfg.width,
                cfg.activation,
                seed,
                device,
            )?),
            Builtin::Cnn => {
                let dims = data.image.ok_or_else(|| {
                    TrialsError::Config(format!(
                        "the cnn trains on images; dataset `{}` has plain feature rows (use `mlp`)",
                        data.name
                    ))
                })?;
                image = Some(dims);
                Box::new(Cnn::new(
                    dims,
                    data.classes,
                    cfg.channels,
                    cfg.width,
                    cfg.activation,
                    seed,
                    device,
                )?)
            }
        };
        let optimizer = Optimizer::new(&cfg, model.vars())?;
        Ok(Trainer {
            builtin,
            image,
            early: cfg.patience.map(|p| EarlyStopping::new(p, cfg.min_delta)),
            seed,
            model,
            optimizer,
            epoch: 0,
            stopped_early: false,
            last_report: None,
            train: tensors.train.clone(),
            val: tensors.val.clone(),
            device: device.clone(),
            cfg,
        })
    }

    /// Epochs trained so far.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// What the last epoch trained measured, restored with a checkpoint (`None` before the
    /// first epoch, and from a checkpoint written before tune 2026-11-28). A run that saves
    /// an epoch's checkpoint before reporting the epoch, then dies before the report is
    /// kept, can report it again from here rather than skip it.
    ///
    /// ```
    /// use tune_trials::{Builtin, Split, TrainConfig, Trainer};
    /// let split = Split::shipped("wine").unwrap();
    /// let cpu = candle_core::Device::Cpu;
    /// let mut trainer = Trainer::new(Builtin::Mlp, TrainConfig::default(), &split, &cpu, 1).unwrap();
    /// let report = trainer.train_epoch().unwrap();
    /// let dir = tempfile::tempdir().unwrap();
    /// trainer.save(dir.path()).unwrap();
    /// let mut restored = Trainer::new(Builtin::Mlp, TrainConfig::default(), &split, &cpu, 1).unwrap();
    /// restored.restore(dir.path()).unwrap();
    /// assert_eq!(restored.last_report(), Some(report));
    /// ```
    pub fn last_report(&self) -> Option<EpochReport> {
        self.last_report
    }

    /// All `epochs` trained, or early stopping ended the trial.
    pub fn finished(&self) -> bool {
        self.epoch >= self.cfg.epochs || self.stopped_early
    }

    pub fn model(&self) -> &dyn Model {
        self.model.as_ref()
    }

    /// How many weights the model trains (every element of every variable).
    pub fn parameter_count(&self) -> usize {
        self.model
            .vars()
            .iter()
            .map(|(_, v)| v.as_tensor().elem_count())
            .sum()
    }

    /// Optimizer updates an epoch: the training rows in batches, the last one short.
    ///
    /// ```
    /// use tune_trials::{Builtin, Split, TrainConfig, Trainer};
    /// let split = Split::shipped("wine").unwrap(); // 142 training rows
    /// let cfg = TrainConfig { batch_size: 32, ..TrainConfig::default() };
    /// let t = Trainer::new(Builtin::Mlp, cfg, &split, &candle_core::Device::Cpu, 0).unwrap();
    /// assert_eq!(t.steps_per_epoch(), 5);
    /// ```
    pub fn steps_per_epoch(&self) -> u64 {
        self.train.2.div_ceil(self.cfg.batch_size) as u64
    }

    /// Trains one epoch over a seeded shuffle of the training rows, then validates.
    pub fn train_epoch(&mut self) -> Result<EpochReport, TrialsError> {
        let (x, y, n) = &self.train;
        let order = epoch_order(self.seed, self.epoch, *n);
        let mut dropout = Dropout::new(self.cfg.dropout, self.seed, self.epoch);
        let mut loss_sum = Tensor::zeros((), DType::F32, &self.device)?;
        let mut lr = self.cfg.lr;
        let first_update = self.epoch * self.steps_per_epoch();
        // One upload per epoch: on a GPU each upload from pageable memory waits for the queue.
        let rows = Tensor::new(order.as_slice(), &self.device)?;
        for (i, batch) in order.chunks(self.cfg.batch_size).enumerate() {
            let start = i * self.cfg.batch_size;
            let idx = rows.narrow(0, start, batch.len())?;
            let (bx, by) = (x.index_select(&idx, 0)?, y.index_select(&idx, 0)?);
            let logits = self.model.forward(&bx, Some(&mut dropout))?;
            let loss = candle_nn::loss::cross_entropy(&logits, &by)?;
            let grads = loss.backward()?;
            lr = self.lr_at_update(first_update + i as u64);
            self.optimizer
                .step(self.model.vars(), &grads, lr, &self.cfg)?;
            loss_sum = (loss_sum + loss.detach().affine(batch.len() as f64, 0.0)?)?;
        }
        let train_loss = loss_sum.to_scalar::<f32>()? as f64 / *n as f64;
        let (val_loss, val_accuracy) = self.evaluate()?;
        self.end_epoch(train_loss, val_loss, val_accuracy, lr)
    }

    /// The learning rate of update `update` (0-based, counted over the whole trial).
    pub(crate) fn lr_at_update(&self, update: u64) -> f64 {
        let per_epoch = self.steps_per_epoch();
        let warmup = (self.cfg.warmup_epochs * per_epoch as f64).round() as u64;
        let total = self.cfg.epochs * per_epoch;
        lr_at(self.cfg.lr, update, warmup, total, self.cfg.lr_decay)
    }

    /// Counts the epoch just trained, asks early stopping, and refuses a diverged loss.
    pub(crate) fn end_epoch(
        &mut self,
        train_loss: f64,
        val_loss: f64,
        val_accuracy: f64,
        lr: f64,
    ) -> Result<EpochReport, TrialsError> {
        self.epoch += 1;
        let stop_early = match &mut self.early {
            Some(es) => es.observe(val_loss),
            None => false,
        };
        self.stopped_early = stop_early;
        if !train_loss.is_finite() {
            return Err(TrialsError::Train(format!(
                "the training loss diverged to {train_loss} in epoch {} (lr {})",
                self.epoch, self.cfg.lr
            )));
        }
        let report = EpochReport {
            epoch: self.epoch,
            train_loss,
            val_loss,
            val_accuracy,
            lr,
            stop_early,
        };
        self.last_report = Some(report);
        Ok(report)
    }

    /// Mean cross-entropy and accuracy on the validation rows (no dropout).
    pub fn evaluate(&self) -> Result<(f64, f64), TrialsError> {
        let (x, y, n) = &self.val;
        let logits = self.model.forward(x, None)?;
        let loss = candle_nn::loss::cross_entropy(&logits, y)?.to_scalar::<f32>()? as f64;
        let hits = logits
            .argmax(D::Minus1)?
            .eq(y)?
            .to_dtype(DType::F32)?
            .sum_all()?
            .to_scalar::<f32>()?;
        Ok((loss, hits as f64 / *n as f64))
    }

    /// Writes the checkpoint (weights, optimizer state, counters) into `dir`: on disk when
    /// this returns.
    pub fn save(&self, dir: &Path) -> Result<(), TrialsError> {
        checkpoint::write(dir, self.checkpoint(false)?)
    }

    /// Queues the checkpoint of `dir` for the process's checkpoint thread and returns, the
    /// weights already copied on their device ([`checkpoint::write_behind`]): training goes on
    /// while the thread copies them to the host, serialises and writes them.
    /// [`checkpoint::settle`] waits for it.
    ///
    /// ```
    /// use tune_trials::{checkpoint, Builtin, Split, TrainConfig, Trainer, CHECKPOINT_FILE};
    /// let split = Split::shipped("wine").unwrap();
    /// let cpu = candle_core::Device::Cpu;
    /// let mut trainer = Trainer::new(Builtin::Mlp, TrainConfig::default(), &split, &cpu, 0).unwrap();
    /// trainer.train_epoch().unwrap();
    /// let dir = tempfile::tempdir().unwrap();
    /// trainer.save_behind(dir.path()).unwrap();
    /// trainer.train_epoch().unwrap(); // while it is written
    /// checkpoint::settle(dir.path()).unwrap();
    /// assert!(dir.path().join(CHECKPOINT_FILE).exists());
    /// ```
    pub fn save_behind(&self, dir: &Path) -> Result<(), TrialsError> {
        let contents = self.checkpoint(true)?;
        // The checkpoint thread reads the tensors: the copies just queued must be done.
        self.synchronize()?;
        checkpoint::write_behind(dir, contents)
    }

    /// Waits until the device has done the work this thread queued for the trainer, before
    /// another thread (a pack's, the checkpoint writer) reads its tensors. On a GPU each
    /// thread queues on a stream of its own (candle opens a device on the per-thread default
    /// stream), which does not wait for another thread's, and an upload from host memory
    /// may still be on its way when it returns. Nothing to wait for on CPU.
    ///
    /// ```
    /// use tune_trials::{Builtin, Split, TrainConfig, Trainer};
    /// let split = Split::shipped("wine").unwrap();
    /// let cpu = candle_core::Device::Cpu;
    /// let trainer = Trainer::new(Builtin::Mlp, TrainConfig::default(), &split, &cpu, 0).unwrap();
    /// trainer.synchronize().unwrap(); // now another thread may train it
    /// ```
    pub fn synchronize(&self) -> Result<(), TrialsError> {
        Ok(self.device.synchronize()?)
    }

    /// What the checkpoint holds; with `copy_weights`, copies of the weights, which the next
    /// update writes into in place (the optimizer's state is replaced, not written into).
    fn checkpoint(&self, copy_weights: bool) -> Result<checkpoint::Contents, TrialsError> {
        let weights = self
            .model
            .vars()
            .iter()
            .map(|(_, v)| {
                let t = v.as_tensor();
                Ok(if copy_weights {
                    t.force_contiguous()?.detach()
                } else {
                    t.clone()
                })
            })
            .collect::<Result<Vec<Tensor>, TrialsError>>()?;
        self.checkpoint_of(weights, &self.optimizer.state)
    }

    /// The checkpoint of this trainer with `weights` (one per var, in order) and optimizer
    /// `state` in place of its own: a packed member's, whose own are stale
    /// ([`crate::FusedTrainer::member`]).
    pub(crate) fn checkpoint_of(
        &self,
        weights: Vec<Tensor>,
        state: &[Vec<Tensor>],
    ) -> Result<checkpoint::Contents, TrialsError> {
        let vars = self.model.vars();
        let mut tensors: Vec<(String, Tensor)> = vars
            .iter()
            .zip(weights)
            .map(|((n, _), t)| (format!("model.{n}"), t))
            .collect();
        tensors.extend(self.optimizer.named(vars, state));
        let cfg = serde_json::to_value(&self.cfg).expect("a config serialises");
        let arch: serde_json::Map<String, serde_json::Value> = ARCHITECTURE_KEYS
            .iter()
            .map(|k| (k.to_string(), cfg[k].clone()))
            .collect();
        let mut meta = HashMap::from([
            ("format".to_string(), "tune-trials/1".to_string()),
            ("builtin".to_string(), self.builtin.name().to_string()),
            ("epoch".to_string(), self.epoch.to_string()),
            (
                "optimizer".to_string(),
                serde_json::to_string(&self.optimizer.kind()).unwrap(),
            ),
            (
                "optimizer_steps".to_string(),
                self.optimizer.steps().to_string(),
            ),
            (
                "architecture".to_string(),
                serde_json::Value::Object(arch).to_string(),
            ),
        ]);
        if let Some(es) = &self.early {
            meta.insert("early_stopping".into(), serde_json::to_string(es).unwrap());
        }
        if let Some(report) = &self.last_report {
            // JSON writes each f64 so that it reads back to the bit.
            meta.insert("report".into(), serde_json::to_string(report).unwrap());
        }
        Ok(checkpoint::Contents {
            tensors,
            metadata: meta,
        })
    }

    /// Continues from the checkpoint in `dir`. Keys that shape the model must match; others
    /// (the learning rate, say, after a PBT exploit) take this trial's values. A changed
    /// optimizer starts with fresh state.
    pub fn restore(&mut self, dir: &Path) -> Result<(), TrialsError> {
        let ck = Checkpoint::read(dir, &self.device)?;
        let builtin: String = ck.meta("builtin")?;
        if builtin != self.builtin.name() {
            return Err(TrialsError::Checkpoint(format!(
                "{}: a `{builtin}` checkpoint cannot restore into `{}`",
                ck.path(),
                self.builtin.name()
            )));
        }
        for (name, var) in self.model.vars() {
            let t = ck.tensor(&format!("model.{name}"))?;
            if t.shape() != var.shape() {
                return Err(TrialsError::Checkpoint(format!(
                    "{}: `{name}` is {:?} there but {:?} in this trial; the keys {} must not change between a checkpoint and its restore",
                    ck.path(),
                    t.dims(),
                    var.dims(),
                    ARCHITECTURE_KEYS.join(", ")
                )));
            }
            var.set(&t)?;
        }
        let steps: u64 = ck.meta("optimizer_steps")?;
        let saved_kind: String = ck.meta("optimizer")?;
        if saved_kind == serde_json::to_string(&self.optimizer.kind()).unwrap() {
            self.optimizer
                .load_state(self.model.vars(), steps, &mut |n| ck.tensor(n))?;
        } else {
            self.optimizer = Optimizer::new(&self.cfg, self.model.vars())?;
        }
        self.epoch = ck.meta("epoch")?;
        self.last_report = match ck.metadata.get("report") {
            Some(saved) => Some(
                serde_json::from_str(saved)
                    .map_err(|e| TrialsError::Checkpoint(format!("{}: report: {e}", ck.path())))?,
            ),
            None => None,
        };
        if let (Some(es), Some(saved)) = (&mut self.early, ck.metadata.get("early_stopping")) {
            let saved: EarlyStopping = serde_json::from_str(saved).map_err(|e| {
                TrialsError::Checkpoint(format!("{}: early_stopping: {e}", ck.path()))
            })?;
            es.best = saved.best;
            es.bad_epochs = saved.bad_epochs;
        }
        Ok(())
    }
}

/// The order in which a trial seeded with `seed` visits the `n` training rows in `epoch`.
pub(crate) fn epoch_order(seed: u64, epoch: u64, n: usize) -> Vec<u32> {
    let mut order: Vec<u32> = (0..n as u32).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(epoch);
    order.shuffle(&mut rng);
    order
}

fn tensors(d: &Dataset, device: &Device) -> Result<(Tensor, Tensor, usize), TrialsError> {
    Ok((
        Tensor::from_slice(&d.x, (d.len(), d.features), device)?,
        Tensor::from_slice(&d.y, d.len(), device)?,
        d.len(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DataSpec;

    /// Trainers made from one `SplitTensors` share its rows (a pack then has nothing to
    /// compare), and tensors of another split are refused.
    #[test]
    fn trainers_share_their_split_tensors_and_refuse_another_splits() {
        let load = |dataset: &str| {
            DataSpec {
                dataset: Some(dataset.into()),
                ..DataSpec::default()
            }
            .load(".".as_ref())
            .unwrap()
        };
        let (wine, cancer) = (load("wine"), load("breast_cancer"));
        let tensors = SplitTensors::new(&wine, &Device::Cpu).unwrap();
        let make = |split: &Split, seed| {
            Trainer::with_tensors(Builtin::Mlp, TrainConfig::default(), split, &tensors, seed)
        };
        let (a, b) = (make(&wine, 1).unwrap(), make(&wine, 2).unwrap());
        assert_eq!(a.train.0.id(), b.train.0.id());
        assert_eq!(a.val.1.id(), b.val.1.id());
        let err = make(&cancer, 3).err().expect("another split's tensors");
        assert!(err.to_string().contains("not made from it"), "{err}");
    }

    /// What `save_behind` queues is the trial as it was when queued: training on (which
    /// writes the weights in place) before the checkpoint thread reads it changes nothing.
    #[test]
    fn a_checkpoint_queued_behind_training_holds_the_state_it_was_queued_with() {
        let split = Split::shipped("wine").unwrap();
        let cfg = TrainConfig {
            width: 8,
            epochs: 3,
            ..TrainConfig::default()
        };
        let mut t = Trainer::new(Builtin::Mlp, cfg, &split, &Device::Cpu, 3).unwrap();
        t.train_epoch().unwrap();
        let values = |c: &checkpoint::Contents| -> Vec<Vec<f32>> {
            c.tensors
                .iter()
                .map(|(_, t)| t.flatten_all().unwrap().to_vec1().unwrap())
                .collect()
        };
        let queued = t.checkpoint(true).unwrap();
        let then = values(&t.checkpoint(false).unwrap());
        assert_eq!(values(&queued), then);
        t.train_epoch().unwrap();
        assert_eq!(values(&queued), then, "the queued copy moved with training");
        assert_ne!(values(&t.checkpoint(false).unwrap()), then);
    }
}
