//! Horizontal fusion (HFTA: Wang et al., "Horizontally Fused Training Array", MLSys 2021):
//! K trials trained as one model whose weights carry a leading trial dimension, so each layer
//! is one batched matmul for all of them instead of K small ones: the MLP's dense layers, and
//! the CNN's convolutions too (each an im2col matmul, batched over the members, where HFTA
//! groups the convolutions).
//!
//! Members need not share every dimension. Narrower hidden layers are padded with zero
//! weights to the pack's widest, and shallower MLPs pass their activations through the
//! layers they do not have: every activation maps 0 to 0, so a padded unit stays exactly 0
//! forward, its weights get exactly zero gradients and keep their zeros under both
//! optimizers, and a member's own units compute what they compute alone (summed over extra
//! zero terms, so within rounding rather than bit for bit). A pack also mixes SGD and AdamW
//! members, each member's slice of a weight updated by its own optimizer in the one pass
//! that updates the weight (`crate::fused_step`), and batch sizes: update `i` of every
//! member is one step of the pack, the shorter batches padded with rows whose loss weighs 0.
//! A pack trains either an epoch of every member ([`FusedTrainer::train_epoch`]: a member
//! with fewer updates in its epoch sits the last ones out, its weights and state kept as
//! they are), or on to the next boundary of any member ([`FusedTrainer::train_to_boundary`]):
//! then each member goes through its own epochs, a member of larger batches starting its
//! next epoch while one of smaller batches is still in its first, sitting out only the few
//! ticks (if any) that make its epoch end at another member's stop.
//!
//! Each member keeps everything that makes it its own trial: learning rate and schedule,
//! weight decay, momentum or betas, dropout rate, seed, data order, epoch, optimizer step
//! count and early stopping. No weight is shared, so each member's gradient is what it
//! would be alone, and the fused optimizer applies PyTorch's update with each member's own
//! coefficients. The pack computes the gradients itself ([`FusedTrainer::backward`]): the
//! operations candle's autograd does for an unfused trial, in its order, less the zero
//! tensors, additions and unread gradients autograd adds around them, which were more than
//! half of a batch's kernels. On CPU a member of a pack whose members share their shape
//! trains bit for bit as it would unfused (tests hold it, for every activation).
//!
//! A pack is formed from [`Trainer`]s and gives them back with [`FusedTrainer::into_trainers`]:
//! that is how a trial leaves (stopped, paused, checkpointed) and how a new one joins, at an
//! epoch boundary: its own ([`FusedTrainer::reform`] keeps the others where they are in
//! theirs).

use std::collections::HashMap;
use std::path::Path;

use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Shape, Tensor, Var, D};

use crate::checkpoint;
use crate::config::Builtin;
use crate::config::{Activation, OptimizerKind};
use crate::fused_dense::{DenseBackward, DenseForward};
use crate::fused_dropout::{DropoutMasks, DropoutSite, MaskPlan};
use crate::fused_loss::{SoftmaxLoss, SoftmaxScore};
use crate::fused_step::{column, FusedStep};
use crate::model::{activate, linear, Dropout};
use crate::trainer::{epoch_order, EpochReport, Trainer};
use crate::TrialsError;

/// What must be equal for trials to train in one pack: the trainable, the data (features or
/// images, classes, training and validation rows), the CNN's filters, whether the MLP has
/// hidden layers at all, activation, and Nesterov momentum for SGD. Depth, width, optimizer
/// and batch size may differ (see the module's documentation).
///
/// ```
/// use tune_trials::{Builtin, OptimizerKind, Split, TrainConfig, Trainer};
/// let split = Split::shipped("wine").unwrap();
/// let cpu = candle_core::Device::Cpu;
/// let trainer = |cfg: TrainConfig| Trainer::new(Builtin::Mlp, cfg, &split, &cpu, 0).unwrap();
/// let a = trainer(TrainConfig { lr: 0.1, width: 16, ..TrainConfig::default() });
/// let b = trainer(TrainConfig { width: 32, depth: 3, batch_size: 32, optimizer: OptimizerKind::Sgd, ..TrainConfig::default() });
/// let c = trainer(TrainConfig { activation: tune_trials::Activation::Tanh, ..TrainConfig::default() });
/// assert_eq!(a.fuse_key(), b.fuse_key()); // padded to one width, depth and batch; both updates
/// assert_ne!(a.fuse_key(), c.fuse_key()); // another activation is another model
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FuseKey {
    pub builtin: Builtin,
    /// The CNN's images, `(channels, height, width)`.
    pub image: Option<(usize, usize, usize)>,
    /// Input features per row (the images' pixels for the CNN) and classes.
    pub features: usize,
    pub classes: usize,
    /// The CNN's filters: its convolutions are not padded.
    pub channels: Option<usize>,
    /// The model has a hidden layer: an MLP of depth 0 (logistic regression) has no hidden
    /// units to pad, its output layer reads the features.
    pub hidden: bool,
    pub activation: Activation,
    /// SGD with Nesterov momentum (another update than plain momentum's or AdamW's).
    pub nesterov: bool,
    /// Training and validation rows.
    pub rows: (usize, usize),
}

/// What the coordinator packs trials by: their [`FuseKey`] and, on CPU, their width and batch
/// size too. A member padded to a wider pack, or to a longer batch, sums over extra zeros,
/// which a matmul of another size may round in another order; on CPU, where a fused trial
/// otherwise computes what it computes alone bit for bit, whichever trials share its pack,
/// those do not mix, so a resumed sweep decides as the uninterrupted one. On a GPU, whose
/// batched matmuls already round otherwise than one trial's, they do. Depths and optimizers
/// mix everywhere: a shallower member's pass-through and a mixed pack's update are exact.
///
/// ```
/// use tune_trials::{Builtin, Split, TrainConfig, Trainer};
/// let split = Split::shipped("wine").unwrap();
/// let cpu = candle_core::Device::Cpu;
/// let trainer = |cfg: TrainConfig| Trainer::new(Builtin::Mlp, cfg, &split, &cpu, 0).unwrap();
/// let a = trainer(TrainConfig { width: 16, ..TrainConfig::default() });
/// let b = trainer(TrainConfig { width: 32, ..TrainConfig::default() });
/// assert_eq!(a.fuse_key(), b.fuse_key());
/// assert_ne!(a.pack_key(), b.pack_key()); // on CPU
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PackKey {
    pub fuse: FuseKey,
    /// The hidden layers' width and the batch size, on CPU.
    pub exact: Option<(usize, usize)>,
    /// Optimizer steps per epoch, where packs keep them apart
    /// ([`Trainer::pack_key_by_steps`]).
    pub steps: Option<u64>,
}

impl Trainer {
    /// The key of the packs this trial can join.
    pub fn fuse_key(&self) -> FuseKey {
        let cnn = self.builtin == Builtin::Cnn;
        FuseKey {
            builtin: self.builtin,
            image: self.image,
            features: self.train.0.dims().get(1).copied().unwrap_or(0),
            classes: self.classes(),
            channels: cnn.then_some(self.cfg.channels),
            hidden: cnn || self.cfg.depth > 0,
            activation: self.cfg.activation,
            nesterov: self.cfg.nesterov && self.optimizer.kind == OptimizerKind::Sgd,
            rows: (self.train.2, self.val.2),
        }
    }

    /// The key of the packs the coordinator puts this trial in ([`PackKey`]).
    pub fn pack_key(&self) -> PackKey {
        PackKey {
            fuse: self.fuse_key(),
            exact: self
                .device
                .is_cpu()
                .then_some((self.cfg.width, self.cfg.batch_size)),
            steps: None,
        }
    }

    /// [`Trainer::pack_key`], keeping apart trials whose epochs take other numbers of
    /// optimizer steps (other batch sizes). A pack's epoch lasts its members' most steps,
    /// which a member of fewer sits the end of out, so a trial of a larger batch packed with
    /// smaller ones trains its epochs no faster than theirs: on a GPU, where a step's time
    /// hardly depends on its rows, the longest trial of a sweep mixing batch sizes may take
    /// several times its own steps.
    ///
    /// ```
    /// use tune_trials::{Builtin, Split, TrainConfig, Trainer};
    /// let split = Split::shipped("wine").unwrap();
    /// let cpu = candle_core::Device::Cpu;
    /// let trainer = |batch_size| {
    ///     let cfg = TrainConfig { batch_size, ..TrainConfig::default() };
    ///     Trainer::new(Builtin::Mlp, cfg, &split, &cpu, 0).unwrap()
    /// };
    /// let (a, b) = (trainer(16), trainer(64));
    /// assert_eq!(a.pack_key_by_steps().fuse, b.pack_key_by_steps().fuse);
    /// assert_ne!(a.pack_key_by_steps().steps, b.pack_key_by_steps().steps);
    /// ```
    pub fn pack_key_by_steps(&self) -> PackKey {
        PackKey {
            steps: Some(self.steps_per_epoch()),
            ..self.pack_key()
        }
    }

    fn classes(&self) -> usize {
        let vars = self.model.vars();
        vars.last().map_or(0, |(_, b)| b.dims()[0])
    }

    /// `(hidden layers, units in each)` of the dense part: the MLP's depth and width, the
    /// CNN's one dense layer.
    fn dense_shape(&self) -> (usize, usize) {
        match self.builtin {
            Builtin::Mlp => (self.cfg.depth, self.cfg.width),
            Builtin::Cnn => (1, self.cfg.width),
        }
    }

    /// Weights before the dense layers: the CNN's two convolutions and their biases.
    fn conv_vars(&self) -> usize {
        match self.builtin {
            Builtin::Mlp => 0,
            Builtin::Cnn => 4,
        }
    }
}
/// K trials of one [`FuseKey`] trained as one model.
///
/// ```
/// use tune_trials::{Builtin, FusedTrainer, Split, TrainConfig, Trainer};
/// let split = Split::shipped("wine").unwrap();
/// let cpu = candle_core::Device::Cpu;
/// let trainers = [(0.003, 16), (0.01, 16), (0.03, 8)]
///     .iter()
///     .map(|&(lr, width)| {
///         let cfg = TrainConfig { lr, width, epochs: 5, ..TrainConfig::default() };
///         Trainer::new(Builtin::Mlp, cfg, &split, &cpu, 7).unwrap()
///     })
///     .collect();
/// let mut pack = FusedTrainer::new(trainers).unwrap();
/// // 142 training rows in batches of 64: 3 optimizer steps an epoch, each one pass of all 3.
/// assert_eq!(pack.steps_per_epoch(), 3);
/// let reports = pack.train_epoch().unwrap(); // one report per member, in order
/// assert_eq!(reports.len(), 3);
/// assert!(reports.iter().all(|r| r.as_ref().unwrap().epoch == 1));
/// let trainers = pack.into_trainers().unwrap(); // each goes on alone, or into a new pack
/// assert_eq!(trainers[2].epoch(), 1);
/// ```
pub struct FusedTrainer {
    key: FuseKey,
    /// The members' bookkeeping (config, seed, epoch, step count, early stopping). Their own
    /// weights and optimizer state are stale while packed; `into_trainers` writes them back.
    members: Vec<Trainer>,
    /// Each member's `(hidden layers, units in each)`.
    shapes: Vec<(usize, usize)>,
    /// The pack's: the most hidden layers and units of any member.
    depth: usize,
    width: usize,
    /// Weights before the dense layers (the CNN's convolutions and their biases).
    convs: usize,
    /// Per weight, in the pack's order (the CNN's convolutions, `depth` dense layers, the
    /// output layer): the members' tensors stacked on a new leading dimension, padded with
    /// zeros to the pack's width. A bias `(out)` becomes `(K, 1, out)`, so it broadcasts over
    /// the batch; a convolution's kernel `(out, in, 3, 3)` becomes `(K, out, in * 9)`, its
    /// im2col matrix. A member without dense layer `i` has zeros there. Plain tensors: the
    /// pack computes its own gradients ([`FusedTrainer::backward`]).
    weights: Vec<Tensor>,
    /// Per weight: the optimizer's slots (`[momentum]`, `[m, v]`, or `[momentum or m, v]` in
    /// a pack of both), stacked the same way, then on a leading slot dimension:
    /// `(slots, K, ...)`, as the fused update reads and writes them.
    state: Vec<Tensor>,
    /// Per dense layer: which members have it, `(K, 1, 1)`, where some do not.
    has_layer: Vec<Option<Tensor>>,
    /// A scalar 0 on the device, broadcast where an operation needs zeros.
    zero: Tensor,
    /// Per member: the updates of its current epoch trained so far (0: at its boundary), and
    /// its summed training loss over them.
    at: Vec<u64>,
    loss_sums: Vec<f32>,
    /// The members' shuffles of the rows, by `(seed, epoch)` ([`epoch_order`]): made once per
    /// member's epoch, which the pack stops in several times where batch sizes mix (a shuffle
    /// of the glyphs' 16,000 rows for 16 members is ~1-2 ms of the host's).
    orders: HashMap<(u64, u64), Vec<u32>>,
    /// Whether a member's arithmetic is its unfused arithmetic to the bit, as on CPU (what
    /// lets a resumed sweep decide as the uninterrupted one whichever trials share a pack).
    /// On a GPU, whose batched matmuls round otherwise than one trial's anyway, the pack
    /// leaves out what serves only that (the log-softmax max's gradient, zero but for
    /// rounding, and the training loss's scaling batch by batch) and fuses the elementwise
    /// work into fewer kernels ([`SoftmaxLoss`], [`DenseForward`], [`DenseBackward`]).
    exact: bool,
    device: Device,
}

/// A member of a [`FusedTrainer`] as its checkpoints see it ([`FusedTrainer::member`]).
pub struct PackedMember<'a> {
    pack: &'a FusedTrainer,
    k: usize,
}

impl PackedMember<'_> {
    /// Whether the member has trained all its epochs or stopped early ([`Trainer::finished`]).
    pub fn finished(&self) -> bool {
        self.pack.members[self.k].finished()
    }

    /// Writes the member's checkpoint into `dir`, as [`Trainer::save`] would unpacked: on
    /// disk when this returns.
    pub fn save(&self, dir: &Path) -> Result<(), TrialsError> {
        checkpoint::write(dir, self.checkpoint()?)
    }

    /// Queues the member's checkpoint of `dir` for the checkpoint thread, as
    /// [`Trainer::save_behind`] does: its slices are copies, which the pack's next updates
    /// leave alone.
    pub fn save_behind(&self, dir: &Path) -> Result<(), TrialsError> {
        checkpoint::write_behind(dir, self.checkpoint()?)
    }

    /// The member's checkpoint, as [`save`](Self::save) writes it: copies of its slices, done
    /// on the device, so another thread may write them (with [`checkpoint::write`]) while the
    /// pack trains on.
    pub fn checkpoint(&self) -> Result<checkpoint::Contents, TrialsError> {
        self.hold()?.copy_out()
    }

    /// The member's checkpoint as it stands, held rather than copied: see [`HeldCheckpoint`].
    ///
    /// ```
    /// # use tune_trials::{Builtin, FusedTrainer, Split, TrainConfig, Trainer};
    /// # let split = Split::shipped("wine").unwrap();
    /// # let cpu = candle_core::Device::Cpu;
    /// # let trainers = (0..2)
    /// #     .map(|seed| Trainer::new(Builtin::Mlp, TrainConfig::default(), &split, &cpu, seed).unwrap())
    /// #     .collect();
    /// let mut pack = FusedTrainer::new(trainers).unwrap();
    /// pack.train_epoch().unwrap();
    /// let held = pack.member(1).unwrap().hold().unwrap(); // no copy yet
    /// pack.train_epoch().unwrap();
    /// let after_one = held.copy_out().unwrap(); // member 1 after its first epoch
    /// assert_eq!(after_one.metadata["epoch"], "1");
    /// ```
    pub fn hold(&self) -> Result<HeldCheckpoint, TrialsError> {
        (self.pack).check_at_boundary(self.k, "only a member at its epoch's end checkpoints")?;
        let view = |t: Tensor, shape: &Shape| Ok((t, shape.clone()));
        let (weights, state) = self.pack.member_parts(self.k, view)?;
        // The checkpoint names the weights, then each weight's optimizer slots in order.
        let shapes = (weights.iter().chain(state.iter().flatten()))
            .map(|(_, shape)| shape.clone())
            .collect::<Vec<_>>();
        let views = |parts: Vec<(Tensor, Shape)>| parts.into_iter().map(|(t, _)| t).collect();
        let state: Vec<Vec<Tensor>> = state.into_iter().map(views).collect();
        let contents = self.pack.members[self.k].checkpoint_of(views(weights), &state)?;
        if contents.tensors.len() != shapes.len() {
            return Err(TrialsError::Checkpoint(format!(
                "member {}: {} tensors named for {} slices",
                self.k,
                contents.tensors.len(),
                shapes.len()
            )));
        }
        Ok(HeldCheckpoint {
            views: contents,
            shapes,
            device: self.pack.device.clone(),
        })
    }
}

/// A packed member's checkpoint as it stood when held ([`PackedMember::hold`]), not yet copied
/// out of the pack's tensors. The pack's updates replace its tensors rather than write into
/// them, so those held keep their values while the pack trains on: holding costs no device
/// work, and only the checkpoints then wanted are copied ([`HeldCheckpoint::copy_out`]). It
/// keeps the pack's weights and optimizer state of that moment alive meanwhile (one more copy
/// of the pack's, at most, however many members it holds).
pub struct HeldCheckpoint {
    /// The checkpoint with, for each tensor, the member's view `(1, own...)` of the stacked
    /// one.
    views: checkpoint::Contents,
    /// Each tensor's shape in the checkpoint, in `views`' order.
    shapes: Vec<Shape>,
    device: Device,
}

impl HeldCheckpoint {
    /// The checkpoint, its tensors copied out of the pack's on the device (what
    /// [`PackedMember::checkpoint`] gives at once), so that another thread may write them.
    pub fn copy_out(self) -> Result<checkpoint::Contents, TrialsError> {
        let checkpoint::Contents { tensors, metadata } = self.views;
        let tensors = (tensors.into_iter().zip(&self.shapes))
            .map(|((name, view), shape)| Ok((name, copy_slice(&view, shape)?)))
            .collect::<Result<Vec<_>, TrialsError>>()?;
        // Another thread reads the copies just queued on this thread's stream.
        self.device.synchronize()?;
        Ok(checkpoint::Contents { tensors, metadata })
    }
}

impl FusedTrainer {
    /// Packs `trainers`, which must share a [`FuseKey`] and have been made from the same
    /// split. A member that has finished cannot be packed.
    pub fn new(trainers: Vec<Trainer>) -> Result<FusedTrainer, TrialsError> {
        check_members(&trainers)?;
        FusedTrainer::assemble(trainers, None)
    }

    /// The pack with the members flagged in `leaving` out and `joiners` in after the others:
    /// bit for bit the pack [`FusedTrainer::new`] makes of the staying members unpacked
    /// ([`FusedTrainer::into_trainers`]) followed by the joiners, the staying members where
    /// they were in their epochs. The staying members' slices
    /// are taken from this pack as they are rather than written back into their trainers and
    /// padded again, and the leavers' are not written back at all: at an epoch boundary of a
    /// 16-trial pack that was a few copies of every weight of every member.
    ///
    /// ```
    /// use tune_trials::{Builtin, FusedTrainer, Split, TrainConfig, Trainer};
    /// let split = Split::shipped("wine").unwrap();
    /// let cpu = candle_core::Device::Cpu;
    /// let trainer = |seed| Trainer::new(Builtin::Mlp, TrainConfig::default(), &split, &cpu, seed).unwrap();
    /// let mut pack = FusedTrainer::new(vec![trainer(0), trainer(1)]).unwrap();
    /// pack.train_epoch().unwrap();
    /// // Member 0 was stopped; a new trial joins at its epoch 0.
    /// let pack = pack.reform(&[true, false], vec![trainer(2)]).unwrap();
    /// assert_eq!(pack.epochs(), vec![1, 0]);
    /// ```
    pub fn reform(
        self,
        leaving: &[bool],
        joiners: Vec<Trainer>,
    ) -> Result<FusedTrainer, TrialsError> {
        if leaving.len() != self.members.len() {
            return Err(TrialsError::Train(format!(
                "{} members' leaving flags for a pack of {}",
                leaving.len(),
                self.members.len()
            )));
        }
        let from: Vec<usize> = (0..leaving.len()).filter(|&k| !leaving[k]).collect();
        if from.is_empty() {
            return FusedTrainer::new(joiners);
        }
        let mut members: Vec<Trainer> = Vec::with_capacity(from.len() + joiners.len());
        let mut old = self;
        // The trainers move to the new pack; `old` keeps the shapes and tensors they are read from.
        let taken = std::mem::take(&mut old.members);
        members.extend(
            taken
                .into_iter()
                .enumerate()
                .filter(|&(k, _)| !leaving[k])
                .map(|(_, t)| t),
        );
        members.extend(joiners);
        check_members(&members)?;
        let mut pack = FusedTrainer::assemble(members, Some((&old, &from)))?;
        // The staying members' shuffles go on with them.
        pack.orders = std::mem::take(&mut old.orders);
        Ok(pack)
    }

    /// The pack of `members` (checked), each member's weights and optimizer state from its
    /// trainer, or, for the first members where `from` is given, from their slices of an
    /// earlier pack (`from.1[i]` is member `i`'s place there).
    fn assemble(
        members: Vec<Trainer>,
        from: Option<(&FusedTrainer, &[usize])>,
    ) -> Result<FusedTrainer, TrialsError> {
        let first = &members[0];
        let device = first.device.clone();
        let shapes: Vec<(usize, usize)> = members.iter().map(Trainer::dense_shape).collect();
        let depth = shapes.iter().map(|s| s.0).max().unwrap_or(0);
        let width = shapes.iter().map(|s| s.1).max().unwrap_or(0);
        let slots = members
            .iter()
            .map(|t| t.optimizer.state[0].len())
            .max()
            .unwrap_or(0);
        let has_layer = (0..depth)
            .map(|i| {
                if shapes.iter().all(|s| s.0 > i) {
                    Ok(None)
                } else {
                    per_member(&shapes, |s| s.0 > i, &device).map(Some)
                }
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let mut pack = FusedTrainer {
            zero: Tensor::zeros((), DType::F32, &device)?,
            exact: device.is_cpu(),
            at: vec![0; members.len()],
            loss_sums: vec![0.0; members.len()],
            orders: HashMap::new(),
            device,
            key: first.fuse_key(),
            members: Vec::new(),
            shapes,
            depth,
            width,
            convs: first.conv_vars(),
            weights: Vec::new(),
            state: Vec::new(),
            has_layer,
        };
        // Member `k`'s weight `j` (`slot: None`) or optimizer slot, as `as_stacked` shapes
        // it: from its earlier pack, or from its trainer.
        let part =
            |k: usize, j: usize, slot: Option<usize>| -> candle_core::Result<Option<Tensor>> {
                let t = &members[k];
                if let Some(s) = slot {
                    if s >= t.optimizer.state[j].len() {
                        return Ok(None);
                    }
                }
                match from {
                    Some((old, places)) if k < places.len() => {
                        let place = places[k];
                        let p = (0..old.weights.len())
                            .find(|&p| old.member_weight(place, p) == Some(j))
                            .ok_or_else(|| {
                                candle_core::Error::Msg(format!(
                                    "member {place}'s weight {j} is not in its pack"
                                ))
                            })?;
                        let stacked = match slot {
                            None => old.weights[p].clone(),
                            Some(s) => old.state[p].get(s)?,
                        };
                        let own = as_stacked(t.model.vars()[j].1.as_tensor())?;
                        member_view(&stacked, place, own.dims())?
                            .squeeze(0)
                            .map(Some)
                    }
                    _ => match slot {
                        None => as_stacked(t.model.vars()[j].1.as_tensor()).map(Some),
                        Some(s) => as_stacked(&t.optimizer.state[j][s]).map(Some),
                    },
                }
            };
        let mut weights = Vec::new();
        let mut state = Vec::new();
        for p in 0..pack.convs + 2 * (depth + 1) {
            let shape = pack.stacked_shape(first, p)?;
            let stacked = |slot: Option<usize>| {
                let parts = (0..members.len())
                    .map(|k| {
                        let got = match pack.member_weight(k, p) {
                            Some(j) => part(k, j, slot)?,
                            None => None,
                        };
                        match got {
                            Some(w) => pad_to(&w, &shape),
                            None => Tensor::zeros(shape.as_slice(), DType::F32, &pack.device),
                        }
                    })
                    .collect::<candle_core::Result<Vec<_>>>()?;
                Tensor::stack(&parts, 0)
            };
            // Stacking one part returns it as it is: a view of an earlier pack's wider weight,
            // which a GPU's matmuls and update cannot read.
            weights.push(stacked(None)?.contiguous()?);
            let slots = (0..slots)
                .map(|s| stacked(Some(s)))
                .collect::<candle_core::Result<Vec<_>>>()?;
            state.push(Tensor::stack(&slots, 0)?.contiguous()?);
        }
        pack.weights = weights;
        pack.state = state;
        if let Some((old, places)) = from {
            for (k, &place) in places.iter().enumerate() {
                pack.at[k] = old.at[place];
                pack.loss_sums[k] = old.loss_sums[place];
            }
        }
        pack.members = members;
        Ok(pack)
    }

    /// Weight `p` of the pack as one member's part of it: `(out, in)` for a dense layer's
    /// weight, `(1, out)` for a bias, `(out, in * 9)` for a convolution's kernel.
    fn stacked_shape(&self, first: &Trainer, p: usize) -> candle_core::Result<Vec<usize>> {
        let vars = first.model.vars();
        if p < self.convs {
            return Ok(as_stacked(vars[p].1.as_tensor())?.dims().to_vec());
        }
        let (layer, bias) = ((p - self.convs) / 2, (p - self.convs) % 2 == 1);
        let out = if layer < self.depth {
            self.width
        } else {
            self.key.classes
        };
        if bias {
            return Ok(vec![1, out]);
        }
        // The first dense layer reads the features (the CNN's pooled maps), as every
        // member's does; the others the hidden units.
        let input = if layer == 0 {
            vars[self.convs].1.dims()[1]
        } else {
            self.width
        };
        Ok(vec![out, input])
    }

    /// Which of member `k`'s weights is the pack's weight `p` (`None`: a dense layer the
    /// member does not have).
    fn member_weight(&self, k: usize, p: usize) -> Option<usize> {
        if p < self.convs {
            return Some(p);
        }
        let (layer, part) = ((p - self.convs) / 2, (p - self.convs) % 2);
        let depth = self.shapes[k].0;
        if layer < depth {
            Some(p)
        } else if layer == self.depth {
            Some(self.convs + 2 * depth + part)
        } else {
            None
        }
    }

    /// Trials in the pack.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn key(&self) -> &FuseKey {
        &self.key
    }

    /// Each member's epochs trained so far.
    pub fn epochs(&self) -> Vec<u64> {
        self.members.iter().map(Trainer::epoch).collect()
    }

    /// The optimizer steps of the pack's next epoch: its members' most (a member of fewer, a
    /// larger batch, sits the last ones out), each one pass of the fused model.
    pub fn steps_per_epoch(&self) -> u64 {
        self.members
            .iter()
            .map(Trainer::steps_per_epoch)
            .max()
            .unwrap_or(0)
    }

    /// Trains one epoch of every member, each over its own shuffle of the rows, then
    /// validates. One result per member, in order: a member whose loss diverged gets its
    /// error without disturbing the others. Members that finish (their last epoch, or early
    /// stopping) must leave through [`FusedTrainer::into_trainers`] before the next epoch.
    /// Every member must be at its epoch's start (see [`FusedTrainer::train_to_boundary`]).
    pub fn train_epoch(&mut self) -> Result<Vec<Result<EpochReport, TrialsError>>, TrialsError> {
        for k in 0..self.members.len() {
            self.check_at_boundary(k, "train the pack to its boundary first")?;
        }
        let counts: Vec<u64> = self.members.iter().map(Trainer::steps_per_epoch).collect();
        self.train(&counts)?
            .into_iter()
            .map(|r| r.ok_or_else(|| TrialsError::Train("a member's epoch did not end".into())))
            .collect()
    }

    /// Trains every member on to the next epoch boundary of any member
    /// ([`FusedTrainer::ticks_to_boundary`] updates each), then validates the members there.
    /// Per member, in order: the report of the epoch it ended, or `None` for one still in its
    /// epoch. Each member goes through its own epochs this way, where
    /// [`FusedTrainer::train_epoch`] has a member of fewer updates an epoch (a larger batch)
    /// wait for the others' epochs to end. Epochs that end up to `merge_within` ticks after
    /// the soonest end at the same stop, their members sitting the ticks between out (a
    /// member's updates are the same whenever the pack trains them); `0` stops at the
    /// soonest alone, and no member sits out. A member that finishes must leave (through
    /// [`FusedTrainer::reform`]) before the next call.
    ///
    /// ```
    /// use tune_trials::{Builtin, FusedTrainer, Split, TrainConfig, Trainer};
    /// let split = Split::shipped("wine").unwrap(); // 142 training rows
    /// let cpu = candle_core::Device::Cpu;
    /// let trainers = [64, 32]
    ///     .iter()
    ///     .map(|&batch_size| {
    ///         let cfg = TrainConfig { batch_size, ..TrainConfig::default() };
    ///         Trainer::new(Builtin::Mlp, cfg, &split, &cpu, 7).unwrap()
    ///     })
    ///     .collect();
    /// let mut pack = FusedTrainer::new(trainers).unwrap();
    /// // 3 updates an epoch for batches of 64, 5 for batches of 32.
    /// assert_eq!(pack.ticks_to_boundary(0), 3);
    /// let reports = pack.train_to_boundary(0).unwrap();
    /// assert!(reports[0].is_some() && reports[1].is_none());
    /// // The second member's epoch ends in 2 ticks, the first's next one in 3.
    /// assert_eq!(pack.ticks_to_boundary(0), 2);
    /// // Within a tick of each other: one stop for both, the second member sitting the last
    /// // tick out.
    /// assert_eq!(pack.ticks_to_boundary(1), 3);
    /// let reports = pack.train_to_boundary(1).unwrap();
    /// assert!(reports.iter().all(Option::is_some));
    /// assert_eq!(pack.epochs(), vec![2, 1]);
    /// ```
    pub fn train_to_boundary(
        &mut self,
        merge_within: u64,
    ) -> Result<Vec<Option<Result<EpochReport, TrialsError>>>, TrialsError> {
        let ticks = self.ticks_to_boundary(merge_within);
        let counts: Vec<u64> = self.ticks_left().map(|left| left.min(ticks)).collect();
        self.train(&counts)
    }

    /// The ticks [`FusedTrainer::train_to_boundary`] trains next: to the latest end of a
    /// member's epoch that is at most `merge_within` ticks after the soonest.
    pub fn ticks_to_boundary(&self, merge_within: u64) -> u64 {
        let soonest = self.ticks_left().min().unwrap_or(0);
        (self.ticks_left())
            .filter(|&left| left <= soonest.saturating_add(merge_within))
            .max()
            .unwrap_or(0)
    }

    /// Each member's updates to the end of its epoch.
    fn ticks_left(&self) -> impl Iterator<Item = u64> + '_ {
        (self.members.iter().zip(&self.at)).map(|(m, &at)| m.steps_per_epoch() - at)
    }

    /// Whether `trainer` joining now keeps the pack's members of its epoch length in step:
    /// none is in the middle of its epoch, but those flagged in `leaving` (which leave as it
    /// joins, [`FusedTrainer::reform`]). Members in step end their epochs together, at one
    /// boundary of the pack rather than one each.
    pub fn in_step_with(&self, trainer: &Trainer, leaving: &[bool]) -> bool {
        let steps = trainer.steps_per_epoch();
        (0..self.members.len()).all(|k| {
            self.at[k] == 0
                || self.members[k].steps_per_epoch() != steps
                || leaving.get(k) == Some(&true)
        })
    }

    /// Trains `counts[k]` updates of member `k` from where it is in its epoch (not past its
    /// end), in `max(counts)` ticks, then validates the members whose epoch ended: their
    /// reports, `None` for the others.
    fn train(
        &mut self,
        counts: &[u64],
    ) -> Result<Vec<Option<Result<EpochReport, TrialsError>>>, TrialsError> {
        if let Some(k) = self.members.iter().position(Trainer::finished) {
            return Err(TrialsError::Train(format!(
                "member {k} has finished; re-form the pack without it before the next epoch"
            )));
        }
        let members = self.members.len();
        let (x, y, n) = self.members[0].train.clone();
        let features = x.dim(1)?;
        let classes = self.key.classes;
        let mut made = std::mem::take(&mut self.orders);
        made.retain(|&(seed, epoch), _| {
            (self.members.iter()).any(|m| m.seed == seed && m.epoch == epoch)
        });
        for m in &self.members {
            (made.entry((m.seed, m.epoch))).or_insert_with(|| epoch_order(m.seed, m.epoch, n));
        }
        let orders: Vec<&[u32]> = (self.members.iter())
            .map(|m| made[&(m.seed, m.epoch)].as_slice())
            .collect();
        // Each member's first update of the ticks, counted from its first epoch's.
        let first_updates: Vec<u64> = self
            .members
            .iter()
            .zip(&self.at)
            .map(|(m, &at)| m.epoch * m.steps_per_epoch() + at)
            .collect();
        // Everything a batch needs from the host is uploaded once per call: on a GPU each
        // upload from pageable memory waits for the queue to drain.
        let ticks = Ticks::new(&self.members, &self.at, counts, &orders, n, &self.device)?;
        self.orders = made;
        let mut masks = if self.members.iter().any(|m| m.cfg.dropout > 0.0) {
            let (dropouts, plan) = self.dropout_plan(&ticks);
            Some(DropoutMasks::new(
                dropouts,
                plan,
                &self.device,
                self.device.is_cuda(),
            )?)
        } else {
            None
        };
        // A member's learning rate at each tick; after its last update, that update's (the
        // tick's results are discarded for it, so it only needs to be finite).
        let lrs: Vec<Vec<f64>> = (0..ticks.count())
            .map(|i| {
                self.members
                    .iter()
                    .zip(first_updates.iter().zip(counts))
                    .map(|(m, (&first, &count))| {
                        m.lr_at_update(first + (i as u64).min(count.saturating_sub(1)))
                    })
                    .collect()
            })
            .collect();
        let coefficients = Coefficients::new(&self.members, &lrs, &ticks.lens, &self.device)?;
        let targets = y.index_select(&ticks.idx, 0)?;
        // For the exact path (its own log-softmax backward), the loss's gradient at the rows'
        // log-probabilities for all the ticks: the row's weight at its class, 0 elsewhere, as
        // the backward pass of candle's `nll` scatters it batch by batch; and the weights
        // negated. ([`SoftmaxLoss`] needs neither.)
        let exact_grads = if self.exact {
            let row_weights = ticks.weights.unsqueeze(1)?;
            let at_log_probs =
                Tensor::zeros((ticks.idx.dim(0)?, classes), DType::F32, &self.device)?
                    .scatter_add(&targets.unsqueeze(1)?, &row_weights, 1)?;
            Some((at_log_probs, row_weights.neg()?))
        } else {
            None
        };
        let mut loss_sums = Tensor::from_vec(self.loss_sums.clone(), members, &self.device)?;
        let device = self.device.clone();
        for i in 0..ticks.count() {
            let (rows, lens) = (ticks.rows[i], &ticks.lens[i]);
            let (at, len) = (ticks.offsets[i], members * rows);
            let tick_masks = masks.as_mut().map(DropoutMasks::next).transpose()?;
            // The masks' upload is the tick's only host data but for layouts.
            loss_sums = with_layouts_cached(&device, || {
                let bx = x
                    .index_select(&ticks.idx.narrow(0, at, len)?, 0)?
                    .reshape((members, rows, features))?;
                let (scores, tape) = self.forward(&bx, tick_masks.as_deref(), true)?;
                let bias = self.output_bias();
                let (at_logits, loss_sums, at_bias) =
                    if let Some((at_log_probs, minus_weights)) = &exact_grads {
                        let logits = scores.broadcast_add(bias)?.reshape((len, classes))?;
                        let softmax = LogSoftmax::new(&logits)?;
                        let at_logits = softmax.backward(
                            &at_log_probs.narrow(0, at, len)?,
                            &minus_weights.narrow(0, at, len)?,
                            &self.zero,
                        )?;
                        // Each member's summed loss over its own rows: as an unfused trial sums
                        // it (its batch's mean loss times its rows), to the bit.
                        let picked = softmax
                            .log_probs
                            .gather(&targets.narrow(0, at, len)?.unsqueeze(1)?, 1)?;
                        let tick_losses = match &ticks.own {
                            None => picked
                                .reshape((members, rows))?
                                .sum(1)?
                                .affine(-1.0 / rows as f64, 0.0)?
                                .affine(rows as f64, 0.0)?,
                            Some(own) => picked
                                .mul(&own.narrow(0, at, len)?.unsqueeze(1)?)?
                                .reshape((members, rows))?
                                .sum(1)?
                                .neg()?,
                        };
                        let at_logits = at_logits.reshape((members, rows, classes))?;
                        (at_logits, (&loss_sums + tick_losses)?, None)
                    } else {
                        // One kernel for the ~15 above, within rounding of them.
                        let op = SoftmaxLoss {
                            bias: bias.reshape((members, classes))?,
                            targets: targets.narrow(0, at, len)?,
                            weights: ticks.weights.narrow(0, at, len)?,
                            own: ticks
                                .own
                                .as_ref()
                                .map(|o| o.narrow(0, at, len))
                                .transpose()?,
                            losses: loss_sums.clone(),
                        };
                        let out = scores.reshape((len, classes))?.apply_op1_no_bwd(&op)?;
                        let (at_logits, loss_sums, at_bias) =
                            SoftmaxLoss::split(&out, members, rows, classes)?;
                        (at_logits, loss_sums, Some(at_bias))
                    };
                let grads = self.backward(tape, &at_logits, at_bias)?;
                self.step(&grads, &coefficients, i, lens)?;
                Ok::<_, TrialsError>(loss_sums)
            })?;
        }
        let ends: Vec<bool> = (0..members)
            .map(|k| self.at[k] + counts[k] >= self.members[k].steps_per_epoch())
            .collect();
        // The validation goes into the device's queue behind the ticks before anything is
        // read back, so that the device runs it without waiting for the host between.
        let validation = if ends.contains(&true) {
            Some(self.validation()?)
        } else {
            None
        };
        self.loss_sums = loss_sums.to_vec1::<f32>()?;
        let validation = match validation {
            Some(v) => read_validation(v)?,
            None => Vec::new(),
        };
        let mut reports = Vec::with_capacity(members);
        for k in 0..members {
            if !ends[k] {
                self.at[k] += counts[k];
                reports.push(None);
                continue;
            }
            let (val_loss, val_accuracy) = validation[k];
            // The learning rate of the member's last update of the epoch.
            let last = (counts[k] as usize).saturating_sub(1);
            let lr = lrs.get(last).map_or(0.0, |l| l[k]);
            let train_loss = std::mem::take(&mut self.loss_sums[k]) as f64 / n as f64;
            self.at[k] = 0;
            let m = &mut self.members[k];
            reports.push(Some(m.end_epoch(train_loss, val_loss, val_accuracy, lr)));
        }
        Ok(reports)
    }

    /// Each member's mean cross-entropy and accuracy on the validation rows.
    pub fn evaluate(&self) -> Result<Vec<(f64, f64)>, TrialsError> {
        read_validation(self.validation()?)
    }

    /// Each member's mean cross-entropy on the validation rows, then each one's number of
    /// hits, on the device (`(2K)`), and the rows.
    fn validation(&self) -> Result<(Tensor, usize), TrialsError> {
        with_layouts_cached(&self.device, || {
            let members = self.members.len();
            let (x, y, n) = &self.members[0].val;
            let (features, classes) = (x.dim(1)?, self.key.classes);
            let xs = x
                .unsqueeze(0)?
                .broadcast_as((members, *n, features))?
                .contiguous()?;
            let (scores, _) = self.forward(&xs, None, false)?;
            let scale = -1.0 / *n as f64;
            if !self.exact {
                // One kernel for the ~14 below (and one read for two), within rounding.
                let op = SoftmaxScore {
                    bias: self.output_bias().reshape((members, classes))?,
                    targets: y.clone(),
                    scale: scale as f32,
                };
                let scored = (scores.reshape((members * n, classes))?).apply_op1_no_bwd(&op)?;
                return Ok((scored, *n));
            }
            let logits = scores.broadcast_add(self.output_bias())?;
            let ys = y.unsqueeze(0)?.broadcast_as((members, *n))?.contiguous()?;
            let log_probs =
                candle_nn::ops::log_softmax(&logits.reshape((members * n, classes))?, 1)?;
            let losses = log_probs
                .gather(&ys.flatten_all()?.unsqueeze(1)?, 1)?
                .reshape((members, *n))?
                .sum(1)?
                .affine(scale, 0.0)?;
            let hits = logits
                .argmax(D::Minus1)?
                .eq(&ys)?
                .to_dtype(DType::F32)?
                .sum(1)?;
            Ok((Tensor::cat(&[&losses, &hits], 0)?, *n))
        })
    }

    /// Unpacks: each member gets its weights and optimizer state back and goes on alone (or
    /// into another pack) exactly where it was. Every member must be at an epoch boundary.
    pub fn into_trainers(mut self) -> Result<Vec<Trainer>, TrialsError> {
        for k in 0..self.members.len() {
            self.check_at_boundary(k, "only a member at its epoch's end unpacks")?;
        }
        for k in 0..self.members.len() {
            self.write_back(k)?;
        }
        Ok(self.members)
    }

    /// Member `k` as it stands now, to checkpoint while it stays in the pack: what
    /// [`Trainer::save`] and [`Trainer::save_behind`] write for it unpacked, bit for bit, from
    /// one copy of each of its slices (writing them back into the member first cost three).
    ///
    /// ```
    /// use tune_trials::{Builtin, FusedTrainer, Split, TrainConfig, Trainer};
    /// let split = Split::shipped("wine").unwrap();
    /// let cpu = candle_core::Device::Cpu;
    /// let trainers = (0..2)
    ///     .map(|seed| Trainer::new(Builtin::Mlp, TrainConfig::default(), &split, &cpu, seed).unwrap())
    ///     .collect();
    /// let mut pack = FusedTrainer::new(trainers).unwrap();
    /// pack.train_epoch().unwrap();
    /// let dir = tempfile::tempdir().unwrap();
    /// let member = pack.member(1).unwrap();
    /// assert!(!member.finished());
    /// member.save(dir.path()).unwrap(); // on disk now; `save_behind` queues it
    /// ```
    pub fn member(&self, k: usize) -> Result<PackedMember<'_>, TrialsError> {
        if k >= self.members.len() {
            return Err(TrialsError::Train(format!(
                "member {k} of a pack of {}",
                self.members.len()
            )));
        }
        Ok(PackedMember { pack: self, k })
    }

    /// Refuses member `k` in the middle of its epoch (which neither a trainer nor a
    /// checkpoint can hold, and where a whole epoch cannot start), saying `why`.
    fn check_at_boundary(&self, k: usize, why: &str) -> Result<(), TrialsError> {
        match self.at[k] {
            0 => Ok(()),
            at => Err(TrialsError::Train(format!(
                "member {k} is {at} updates into its epoch; {why}"
            ))),
        }
    }

    /// Copies of member `k`'s slices of the packed weights (one per var of its model, in its
    /// shapes) and optimizer state (its slots of each).
    fn member_slices(&self, k: usize) -> Result<(Vec<Tensor>, Vec<Vec<Tensor>>), TrialsError> {
        self.member_parts(k, |view, shape| copy_slice(&view, shape))
    }

    /// Member `k`'s parts of the packed weights (one per var of its model) and optimizer
    /// state (its slots of each), each `take` of its view `(1, own...)` and its own shape.
    fn member_parts<T>(
        &self,
        k: usize,
        take: impl Fn(Tensor, &Shape) -> candle_core::Result<T>,
    ) -> Result<(Vec<T>, Vec<Vec<T>>), TrialsError> {
        let m = &self.members[k];
        let pack_weights = (0..self.weights.len()).filter(|&p| self.member_weight(k, p).is_some());
        let (mut weights, mut state) = (Vec::new(), Vec::new());
        for (p, (j, (_, var))) in pack_weights.zip(m.model.vars().iter().enumerate()) {
            let own = as_stacked(var.as_tensor())?.dims().to_vec();
            let part = |t: &Tensor| take(member_view(t, k, &own)?, var.shape());
            weights.push(part(&self.weights[p])?);
            let slots = (0..m.optimizer.state[j].len())
                .map(|s| part(&self.state[p].get(s)?))
                .collect::<candle_core::Result<Vec<_>>>()?;
            state.push(slots);
        }
        debug_assert_eq!(weights.len(), m.model.vars().len());
        Ok((weights, state))
    }

    /// Copies member `k`'s slices of the packed weights and optimizer state into its own.
    fn write_back(&mut self, k: usize) -> Result<(), TrialsError> {
        let (weights, state) = self.member_slices(k)?;
        let m = &mut self.members[k];
        for ((_, var), w) in m.model.vars().iter().zip(&weights) {
            var.set(w)?;
        }
        m.optimizer.state = state;
        Ok(())
    }

    /// Whether the dense layers' work around their matmuls is one kernel each way
    /// ([`DenseForward`], [`DenseBackward`]): for ReLU layers where the pack need not be
    /// exact (on a GPU).
    fn fuses_layers(&self) -> bool {
        !self.exact && self.key.activation == Activation::Relu
    }

    /// The output layer's bias, `(K, 1, classes)`, which [`FusedTrainer::forward`] leaves out.
    fn output_bias(&self) -> &Tensor {
        &self.weights[self.weights.len() - 1]
    }

    /// Logits `(K, batch, classes)` of inputs `(K, batch, features)` but for the output
    /// layer's bias ([`FusedTrainer::output_bias`]: a GPU pack adds it in the loss's kernel),
    /// and what [`FusedTrainer::backward`] needs of the pass where it is `training` (with the
    /// tick's dropout `masks`, one per [`FusedTrainer::dropout_sites`]). Each member's part is
    /// what its own model computes alone.
    fn forward(
        &self,
        x: &Tensor,
        masks: Option<&[Tensor]>,
        training: bool,
    ) -> candle_core::Result<(Tensor, Tape)> {
        let mut masks = masks.map(|m| m.iter());
        let mut next_mask = || masks.as_mut().and_then(Iterator::next).cloned();
        let activation = self.key.activation;
        let mut h = x.clone();
        let mut features = None;
        if let Some((c, height, width)) = self.key.image {
            // The CNN (crate::model::cnn): two convolutions, a 2x2 max-pool, then dense layers
            // as the MLP's, with dropout after the pool and after the dense layer. While
            // training, candle's autograd tracks the convolutions: their kernels are `Var`s.
            let kernels: Vec<Var> = if training {
                self.weights[..self.convs]
                    .iter()
                    .map(Var::from_tensor)
                    .collect::<candle_core::Result<_>>()?
            } else {
                Vec::new()
            };
            let weights: Vec<&Tensor> = if training {
                kernels.iter().map(Var::as_tensor).collect()
            } else {
                self.weights[..self.convs].iter().collect()
            };
            let (members, batch) = (x.dim(0)?, x.dim(1)?);
            h = h.reshape((members, batch, c, height, width))?;
            for conv in weights.chunks(2) {
                h = activate(&fused_conv3x3(&h, conv[0], conv[1])?, activation)?;
            }
            let (channels, height, width) = (h.dim(2)?, h.dim(3)?, h.dim(4)?);
            h = h
                .reshape((members * batch, channels, height, width))?
                .max_pool2d(2)?
                .reshape((members, batch, ()))?;
            if let Some(mask) = next_mask() {
                h = h.mul(&mask)?;
            }
            if training {
                features = Some((h.clone(), kernels));
                h = h.detach();
            }
        }
        let dense = &self.weights[self.convs..];
        let mut layers = Vec::with_capacity(if training { self.depth } else { 0 });
        for i in 0..self.depth {
            let mask = next_mask();
            let (z, a, next) = if self.fuses_layers() {
                let op = DenseForward {
                    bias: dense[2 * i + 1].clone(),
                    mask: mask.clone(),
                    has: self.has_layer[i].clone(),
                    input: h.clone(),
                };
                let out = h.matmul(&dense[2 * i].t()?)?.apply_op1_no_bwd(&op)?;
                (out.get(0)?, None, out.get(1)?)
            } else {
                let z = linear(&h, &dense[2 * i], &dense[2 * i + 1])?;
                let a = activate(&z, activation)?;
                let out = match &mask {
                    Some(mask) => a.mul(mask)?,
                    None => a.clone(),
                };
                // A member without this layer passes its activations through it.
                let next = match &self.has_layer[i] {
                    Some(has) => has.broadcast_as(out.shape())?.where_cond(&out, &h)?,
                    None => out,
                };
                (z, Some(a), next)
            };
            if training {
                layers.push(DenseTape {
                    input: h,
                    z,
                    a,
                    mask,
                });
            }
            h = next;
        }
        // `t()` transposes the last two dimensions: one `(K, batch, in) @ (K, in, out)`. The
        // output layer's bias is the caller's to add (`linear` adds it after the product too).
        let scores = h.matmul(&dense[2 * self.depth].t()?)?;
        let tape = Tape {
            features,
            layers,
            last: h,
        };
        Ok((scores, tape))
    }

    /// Every weight's gradient, in the pack's order, from the gradient at the logits
    /// `(K, batch, classes)` of the forward pass that kept `tape`. The dense layers' are the
    /// operations candle's autograd does for them, in its order, so each member's gradient
    /// is what it gets alone to the bit (on CPU), without what autograd adds around them:
    /// a zero tensor and an addition for every operand of every operation, and the
    /// gradients of the inputs, the dropout masks and the loss weights, which nothing reads.
    /// For a layer of dropout, that was ~27 kernels where these are ~7, and a batch of
    /// small kernels costs its launches. The CNN's convolutions go through autograd, from
    /// their features' gradient. `at_output_bias`: the output bias's gradient, where the
    /// loss's op summed it already ([`SoftmaxLoss`]).
    fn backward(
        &self,
        tape: Tape,
        at_logits: &Tensor,
        at_output_bias: Option<Tensor>,
    ) -> Result<Vec<Tensor>, TrialsError> {
        let mut grads = Vec::with_capacity(self.weights.len());
        let last = self.weights.len() - 2;
        let needs_input = |layer: usize| layer > 0 || tape.features.is_some();
        let (at_w, at_b, mut at_h) = linear_backward(
            &tape.last,
            &self.weights[last],
            at_logits,
            at_output_bias,
            needs_input(self.depth),
        )?;
        grads.extend([at_b, at_w]);
        // The fused layers' pass-through gradient, which the next layer down adds first.
        let mut carried = None;
        for (i, layer) in tape.layers.iter().enumerate().rev() {
            let at_out =
                at_h.ok_or_else(|| TrialsError::Train("no gradient reached a layer".into()))?;
            if self.fuses_layers() {
                let op = DenseBackward {
                    carried: carried.take(),
                    z: layer.z.clone(),
                    mask: layer.mask.clone(),
                    has: self.has_layer[i].clone(),
                };
                let out = at_out.apply_op1_no_bwd(&op)?;
                let (at_z, passed, at_b) = op.split(&out, at_out.shape())?;
                let w = self.convs + 2 * i;
                let (at_w, at_b, at_input) = linear_backward(
                    &layer.input,
                    &self.weights[w],
                    &at_z,
                    Some(at_b),
                    needs_input(i),
                )?;
                grads.extend([at_b, at_w]);
                carried = passed;
                at_h = at_input;
                continue;
            }
            // Where a member has no such layer, its activations passed it by: its gradient
            // goes to the layer's input instead (`where_cond`'s two sides).
            let (at_out, passed) = match &self.has_layer[i] {
                Some(has) => {
                    let has = has.broadcast_as(at_out.shape())?;
                    let zero = self.zero.broadcast_as(at_out.shape())?;
                    (
                        has.where_cond(&at_out, &zero)?,
                        Some(has.where_cond(&zero, &at_out)?),
                    )
                }
                None => (at_out, None),
            };
            let at_a = match &layer.mask {
                Some(mask) => at_out.mul(mask)?,
                None => at_out,
            };
            let a = layer.a.as_ref().ok_or_else(|| {
                TrialsError::Train(
                    "a fused layer's activations reached the unfused backward".into(),
                )
            })?;
            let at_z = activation_backward(&layer.z, a, &at_a, self.key.activation, &self.zero)?;
            let w = self.convs + 2 * i;
            let (at_w, at_b, at_input) =
                linear_backward(&layer.input, &self.weights[w], &at_z, None, needs_input(i))?;
            grads.extend([at_b, at_w]);
            at_h = match (at_input, passed) {
                (Some(at_input), Some(passed)) => Some((passed + at_input)?),
                (at_input, _) => at_input,
            };
        }
        // As the unfused layers add it: where the layer's input has a gradient.
        if let (Some(passed), Some(at_input)) = (carried, &at_h) {
            at_h = Some((passed + at_input)?);
        }
        if let Some((features, kernels)) = tape.features {
            let at_features =
                at_h.ok_or_else(|| TrialsError::Train("no gradient reached the features".into()))?;
            let conv_grads = features.mul(&at_features)?.sum_all()?.backward()?;
            for (j, kernel) in kernels.iter().enumerate().rev() {
                // A gradient may be a transposed view (a matmul operand's); the update reads rows.
                grads.push(gradient(&conv_grads, kernel, j)?.contiguous()?);
            }
        }
        grads.reverse();
        Ok(grads)
    }

    /// The members' dropouts where each is in its epoch, and the masks `ticks` need.
    fn dropout_plan(&self, ticks: &Ticks) -> (Vec<Dropout>, MaskPlan) {
        // Each member draws units per row of its batches at each site it has (`rows` 1).
        let per_row = self.dropout_sites(&vec![1; self.members.len()]);
        let n = self.members.first().map_or(0, |m| m.train.2);
        let dropouts = self
            .members
            .iter()
            .enumerate()
            .map(|(k, m)| {
                let mut dropout = Dropout::new(m.cfg.dropout, m.seed, m.epoch);
                // Past what the member drew in the updates of its epoch trained already.
                let rows = (self.at[k] as usize * m.cfg.batch_size).min(n);
                let units: usize = per_row
                    .iter()
                    .map(|(_, parts)| parts[k].0 * parts[k].1)
                    .sum();
                dropout.skip((rows * units) as u64);
                dropout
            })
            .collect();
        let plan = (0..ticks.count())
            .map(|t| (ticks.rows[t], self.dropout_sites(&ticks.lens[t])))
            .collect();
        (dropouts, plan)
    }

    /// Where the forward pass drops units, in its order (the CNN's pooled maps, then each
    /// dense layer): the units there, and each member's part of a tick whose batch gives
    /// member `k` `rows[k]` rows, `(rows, units)`, its own rows and units (the rest are
    /// padding, set to 0); `(0, _)` draws nothing (a member without the layer, or without
    /// rows in the tick: its part is discarded).
    fn dropout_sites(&self, rows: &[usize]) -> Vec<DropoutSite> {
        let mut sites = Vec::with_capacity(self.depth + 1);
        if self.key.image.is_some() {
            // The first dense weight `(K, out, in)` reads the pooled maps.
            let units = self.weights[self.convs].dims()[2];
            sites.push((units, rows.iter().map(|&r| (r, units)).collect()));
        }
        for i in 0..self.depth {
            let parts = self
                .shapes
                .iter()
                .zip(rows)
                .map(|(&(depth, width), &r)| if depth > i { (r, width) } else { (0, 0) })
                .collect();
            sites.push((self.width, parts));
        }
        sites
    }

    /// Optimizer update `i` of the epoch for every member, each weight's in one pass
    /// ([`FusedStep`]) with each member's own coefficients: the same operations, in the same
    /// order, as [`crate::Optimizer::step`]. A member with no rows in the tick (`lens[k]` 0:
    /// its epoch has fewer updates) sits the update out, its weights and state kept.
    fn step(
        &mut self,
        grads: &[Tensor],
        c: &Coefficients,
        i: usize,
        lens: &[usize],
    ) -> Result<(), TrialsError> {
        for (m, &len) in self.members.iter_mut().zip(lens) {
            m.optimizer.steps += u64::from(len > 0);
        }
        let op = FusedStep {
            weights: &self.weights,
            grads,
            states: &self.state,
            decay: c.decay,
            nesterov: self.key.nesterov,
        };
        let out = c.values.get(i)?.apply_op1_no_bwd(&op)?;
        // The new weights and states are views of the one output: nothing is copied.
        (self.weights, self.state) = FusedStep::split(&out, &self.weights, &self.state)?;
        Ok(())
    }
}

/// What a training tick's forward pass keeps for its backward pass (outside training, only
/// `last`).
struct Tape {
    /// The CNN's features (pooled, dropped out) as autograd tracks them back to its
    /// convolutions' kernels.
    features: Option<(Tensor, Vec<Var>)>,
    layers: Vec<DenseTape>,
    /// The output layer's input.
    last: Tensor,
}

/// A dense layer's input, pre-activation, activation (but where the layer is fused: its
/// backward reads `z` alone) and dropout mask.
struct DenseTape {
    input: Tensor,
    z: Tensor,
    a: Option<Tensor>,
    mask: Option<Tensor>,
}

/// The gradients of `z = x @ w^T + b` ([`linear`]) for `x (K, rows, in)`, `w (K, out, in)`
/// and `b (K, 1, out)`, given `z`'s, `(K, rows, out)`: `w`'s, `b`'s and, where asked, `x`'s,
/// as candle's autograd computes them, but `w`'s as `at_z^T @ x` in one matmul where
/// autograd transposes `x^T @ at_z` and copies it (the same sums in the same order: bit
/// for bit on CPU, which the fused tests hold). `b`'s is `at_b` where the op that made
/// `at_z` summed it already.
fn linear_backward(
    x: &Tensor,
    w: &Tensor,
    at_z: &Tensor,
    at_b: Option<Tensor>,
    input: bool,
) -> candle_core::Result<(Tensor, Tensor, Option<Tensor>)> {
    let at_b = match at_b {
        Some(at_b) => at_b,
        None => at_z.sum_keepdim(1)?,
    };
    let at_w = at_z.t()?.matmul(x)?;
    let at_x = if input { Some(at_z.matmul(w)?) } else { None };
    Ok((at_w, at_b, at_x))
}

/// The gradient at an activation's input `z`, given its output `a`'s: candle's autograd's
/// formula for each, operation for operation.
fn activation_backward(
    z: &Tensor,
    a: &Tensor,
    at_a: &Tensor,
    activation: Activation,
    zero: &Tensor,
) -> candle_core::Result<Tensor> {
    match activation {
        Activation::Relu => {
            let zero = zero.broadcast_as(z.shape())?;
            z.ge(&zero)?.where_cond(at_a, &zero)
        }
        // Autograd subtracts `at_a * (a^2 - 1)`; `1 - a^2` is its exact negation.
        Activation::Tanh => at_a * (1. - a.sqr()?)?,
        Activation::Gelu => {
            let neg_half_square = (z.sqr()?.neg()? / 2.)?;
            let scaled_exp_arg = (0.398942 * neg_half_square.exp()? * z)?;
            let arg_scaled_sqrt = (z / 2f64.sqrt())?;
            let erf_scaled_sqrt = (0.5 * arg_scaled_sqrt.erf()?)?;
            let gelu_erf_grad = (0.5 + scaled_exp_arg + erf_scaled_sqrt)?;
            at_a * gelu_erf_grad
        }
        Activation::Silu => {
            let sigmoid_arg = (z.neg()?.exp()? + 1.)?.recip()?;
            let silu_grad = (&sigmoid_arg * (1. - a)? + a)?;
            at_a * silu_grad
        }
    }
}

/// A tick's log-softmax over its logits `(rows, classes)`, computed as candle's
/// `log_softmax` computes it, with what its backward pass needs kept.
struct LogSoftmax {
    logits: Tensor,
    max: Tensor,
    exp: Tensor,
    sum: Tensor,
    log_probs: Tensor,
}

impl LogSoftmax {
    fn new(logits: &Tensor) -> candle_core::Result<LogSoftmax> {
        let max = logits.max_keepdim(1)?;
        let diff = logits.broadcast_sub(&max)?;
        let exp = diff.exp()?;
        let sum = exp.sum_keepdim(1)?;
        let log_probs = diff.broadcast_sub(&sum.log()?)?;
        Ok(LogSoftmax {
            logits: logits.clone(),
            max,
            exp,
            sum,
            log_probs,
        })
    }

    /// The gradient at the logits, given the log-probabilities' `at_log_probs`, which holds
    /// one value per row (at its class) and whose negated row sums are `minus_weights`
    /// `(rows, 1)`: autograd's operations for `log_softmax`, less its additions to zeros,
    /// bit for bit. (A pack that need not be exact computes the same less the max's share,
    /// zero but for rounding, in one kernel: [`SoftmaxLoss`].)
    fn backward(
        &self,
        at_log_probs: &Tensor,
        minus_weights: &Tensor,
        zero: &Tensor,
    ) -> candle_core::Result<Tensor> {
        // log_probs = diff - log(sum): the sum's gradient is -(row sum of at_log_probs) /
        // sum, and the row sum of one value and zeros is that value, exactly.
        let at_sum = minus_weights.div(&self.sum)?;
        let at_diff = (at_log_probs + self.exp.broadcast_mul(&at_sum)?)?;
        // diff = logits - max: the max takes -(row sum of at_diff), at the row's largest
        // logit. Autograd adds the negated sum; subtracting it is the same to the bit.
        let shape = self.logits.shape();
        let row_sums = at_diff.sum_keepdim(1)?.broadcast_as(shape)?;
        let at_max = self.logits.eq(&self.max.broadcast_as(shape)?)?;
        at_diff - at_max.where_cond(&row_sums, &zero.broadcast_as(shape)?)?
    }
}

/// The members' optimizer coefficients for one epoch, on the pack's device: per update, one
/// row of [`column`]s per member, `(updates, K, column::COUNT)`. Each member's are its own
/// optimizer's; those of the other optimizer are unused.
struct Coefficients {
    values: Tensor,
    /// Whether any SGD member decays its weights.
    decay: bool,
}

impl Coefficients {
    /// For an epoch whose update `i` has learning rates `lrs[i]`, one per member, and gives
    /// member `k` `lens[i][k]` rows (0: it sits the update out), starting after each
    /// member's `optimizer.steps` updates.
    fn new(
        members: &[Trainer],
        lrs: &[Vec<f64>],
        lens: &[Vec<usize>],
        device: &Device,
    ) -> candle_core::Result<Coefficients> {
        let sgd = |m: &Trainer| m.optimizer.kind == OptimizerKind::Sgd;
        let mut values = Vec::with_capacity(lrs.len() * members.len() * column::COUNT);
        for (i, (update, lens)) in lrs.iter().zip(lens).enumerate() {
            for ((m, &lr), &len) in members.iter().zip(update).zip(lens) {
                let t = (m.optimizer.steps + 1 + i as u64) as i32;
                let cfg = &m.cfg;
                let mut row = [0f64; column::COUNT];
                row[column::ADAMW] = if sgd(m) { 0.0 } else { 1.0 };
                row[column::ACTIVE] = if len > 0 { 1.0 } else { 0.0 };
                row[column::WEIGHT_DECAY] = if sgd(m) { cfg.weight_decay } else { 0.0 };
                row[column::BETA1] = if sgd(m) { cfg.momentum } else { cfg.beta1 };
                row[column::REST1] = 1.0 - cfg.beta1;
                row[column::BETA2] = cfg.beta2;
                row[column::REST2] = 1.0 - cfg.beta2;
                row[column::EPS] = cfg.eps;
                row[column::DECAYED] = 1.0 - lr * cfg.weight_decay;
                row[column::UNBIAS2] = 1.0 / (1.0 - cfg.beta2.powi(t)).sqrt();
                row[column::STEP] = if sgd(m) {
                    lr
                } else {
                    lr / (1.0 - cfg.beta1.powi(t))
                };
                values.extend(row.iter().map(|&v| v as f32));
            }
        }
        Ok(Coefficients {
            values: Tensor::from_vec(values, (lrs.len(), members.len(), column::COUNT), device)?,
            decay: members.iter().any(|m| sgd(m) && m.cfg.weight_decay > 0.0),
        })
    }
}

/// Updates in lockstep: tick `i` is the `i`-th update of every member that trains that
/// many, each from where it is in its epoch. Each tick's batch holds the most rows any
/// member has in it, a member's shorter part (another batch size, an epoch's last batch)
/// padded with rows its loss weighs 0, and a member with fewer updates sits the last ticks
/// out.
struct Ticks {
    /// Per tick, per member: its rows in the tick's batch (0: it sits the tick out).
    lens: Vec<Vec<usize>>,
    /// Per tick: rows per member in its batch.
    rows: Vec<usize>,
    /// Each tick's `K * rows` row indices, member after member, one tick after another
    /// from `offsets[i]`.
    idx: Tensor,
    /// Each row's loss weight: -1 / its member's rows in the tick (as `nll` scales a batch's
    /// loss), 0 for padding.
    weights: Tensor,
    /// Where some member's part of a tick is padded: 1 for a member's own row, 0 for
    /// padding.
    own: Option<Tensor>,
    offsets: Vec<usize>,
}

impl Ticks {
    /// For members whose epochs shuffle the `n` rows as `orders`, member `k` training
    /// `counts[k]` updates from its update `at[k]` of the epoch.
    fn new(
        members: &[Trainer],
        at: &[u64],
        counts: &[u64],
        orders: &[&[u32]],
        n: usize,
        device: &Device,
    ) -> candle_core::Result<Ticks> {
        let sizes: Vec<usize> = members.iter().map(|m| m.cfg.batch_size).collect();
        let count = counts.iter().copied().max().unwrap_or(0) as usize;
        // Where member `m`'s batch of tick `i` starts in its epoch's order.
        let start = |m: usize, i: usize| ((at[m] as usize + i) * sizes[m]).min(n);
        let lens: Vec<Vec<usize>> = (0..count)
            .map(|i| {
                (0..members.len())
                    .map(|m| {
                        if i < counts[m] as usize {
                            sizes[m].min(n - start(m, i))
                        } else {
                            0
                        }
                    })
                    .collect()
            })
            .collect();
        let rows: Vec<usize> = lens
            .iter()
            .map(|l| l.iter().copied().max().unwrap_or(0))
            .collect();
        let (mut idx, mut weights, mut own, mut offsets) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (i, tick) in lens.iter().enumerate() {
            offsets.push(idx.len());
            for (m, &len) in tick.iter().enumerate() {
                let start = start(m, i);
                idx.extend_from_slice(&orders[m][start..start + len]);
                // Padding repeats the member's first row of the epoch; its weight is 0.
                idx.resize(idx.len() + rows[i] - len, orders[m][0]);
                weights.resize(weights.len() + len, (-1.0 / len as f64) as f32);
                weights.resize(weights.len() + rows[i] - len, 0.0);
                own.resize(own.len() + len, 1f32);
                own.resize(own.len() + rows[i] - len, 0.0);
            }
        }
        let total = idx.len();
        let padded = own.contains(&0.0);
        Ok(Ticks {
            idx: Tensor::from_vec(idx, total, device)?,
            weights: Tensor::from_vec(weights, total, device)?,
            own: if padded {
                Some(Tensor::from_vec(own, total, device)?)
            } else {
                None
            },
            offsets,
            lens,
            rows,
        })
    }

    fn count(&self) -> usize {
        self.rows.len()
    }
}

/// A `(K, 1, 1)` mask on `device`: 1 where `f` holds for member `k`'s item.
fn per_member<T>(
    items: &[T],
    f: impl Fn(&T) -> bool,
    device: &Device,
) -> candle_core::Result<Tensor> {
    let values: Vec<u8> = items.iter().map(|i| u8::from(f(i))).collect();
    Tensor::from_vec(values, (items.len(), 1, 1), device)
}

/// One member's weight as the pack stacks it: a bias `(out)` as `(1, out)`, a kernel
/// `(out, in, 3, 3)` as `(out, in * 9)`.
fn as_stacked(w: &Tensor) -> candle_core::Result<Tensor> {
    match w.rank() {
        1 => w.unsqueeze(0),
        2 => Ok(w.clone()),
        _ => w.flatten_from(1),
    }
}

/// Member `k`'s part of a stacked weight or optimizer slot `(K, ...)`, a view `(1, own...)`:
/// its own dims `own` of the pack's (padded) ones.
fn member_view(stacked: &Tensor, k: usize, own: &[usize]) -> candle_core::Result<Tensor> {
    let mut t = stacked.narrow(0, k, 1)?;
    for (d, &n) in own.iter().enumerate() {
        t = t.narrow(d + 1, 0, n)?;
    }
    Ok(t)
}

/// [`FusedTrainer::validation`]'s losses and hits, read back: each member's mean
/// cross-entropy and accuracy.
fn read_validation((scored, n): (Tensor, usize)) -> Result<Vec<(f64, f64)>, TrialsError> {
    let scored = scored.to_vec1::<f32>()?;
    let (losses, hits) = scored.split_at(scored.len() / 2);
    Ok(losses
        .iter()
        .zip(hits)
        .map(|(&l, &h)| (l as f64, h as f64 / n as f64))
        .collect())
}

/// A copy of a member's view of a stacked tensor, in the member's `shape`. `force_contiguous`
/// copies the member's slice alone (`copy` clones the whole storage, every member's: 0.1-0.3
/// s and 64 MB per 1024x1024 weight of a 16-trial pack, per member and epoch, seen at 8 GB
/// peak), and before the reshape, which would copy a padded (strided) slice once more.
fn copy_slice(view: &Tensor, shape: &Shape) -> candle_core::Result<Tensor> {
    view.force_contiguous()?.reshape(shape)
}

/// Checks that `members` may train in one pack: the same [`FuseKey`], the same split, none
/// finished.
fn check_members(members: &[Trainer]) -> Result<(), TrialsError> {
    let Some(first) = members.first() else {
        return Err(TrialsError::Train(
            "a fused pack needs at least one trial".into(),
        ));
    };
    let key = first.fuse_key();
    for (k, t) in members.iter().enumerate() {
        if t.fuse_key() != key {
            return Err(TrialsError::Train(format!(
                "member {k} has {:?}, the pack {key:?}: only trials of one key fuse",
                t.fuse_key()
            )));
        }
        if t.finished() {
            return Err(TrialsError::Train(format!(
                "member {k} has finished (epoch {}); a pack trains only unfinished trials",
                t.epoch
            )));
        }
        let same = |a: &(Tensor, Tensor, usize),
                    b: &(Tensor, Tensor, usize)|
         -> Result<bool, TrialsError> {
            Ok(same_values(&a.0, &b.0)? && same_values(&a.1, &b.1)?)
        };
        if k > 0 && !(same(&t.train, &first.train)? && same(&t.val, &first.val)?) {
            return Err(TrialsError::Train(format!(
                "member {k} was made from different data than member 0; a pack trains on one split"
            )));
        }
    }
    Ok(())
}

/// `w` with zeros after its values, up to `shape` (of the same rank, no dimension smaller).
fn pad_to(w: &Tensor, shape: &[usize]) -> candle_core::Result<Tensor> {
    let mut w = w.clone();
    for (d, &n) in shape.iter().enumerate() {
        let have = w.dim(d)?;
        if have < n {
            w = w.pad_with_zeros(d, 0, n - have)?;
        }
    }
    Ok(w)
}

/// [`conv3x3`](crate::model::cnn) for K members at once: images `(K, n, c, h, w)`, kernels
/// as im2col matrices `(K, c_out, c * 9)`, biases `(K, 1, c_out)`; one batched matmul, each
/// member's the matmul its own model does.
fn fused_conv3x3(x: &Tensor, w: &Tensor, b: &Tensor) -> candle_core::Result<Tensor> {
    let (members, n, c, h, wd) = x.dims5()?;
    let c_out = w.dim(1)?;
    let padded = x.pad_with_zeros(3, 1, 1)?.pad_with_zeros(4, 1, 1)?;
    let mut shifted = Vec::with_capacity(9);
    for dy in 0..3 {
        for dx in 0..3 {
            shifted.push(padded.narrow(3, dy, h)?.narrow(4, dx, wd)?);
        }
    }
    // (K, c, 9, n, h, w): per member the unfused layout.
    let patches = Tensor::stack(&shifted, 2)?
        .transpose(1, 3)?
        .contiguous()?
        .reshape((members, c * 9, n * h * wd))?;
    let y = w.matmul(&patches)?;
    y.reshape((members, c_out, n, h, wd))?
        .transpose(1, 2)?
        .broadcast_add(&b.reshape((members, 1, c_out, 1, 1))?)
}

/// Weight `j`'s gradient, detached: a weight used directly as a matmul operand (the fused
/// convolutions' kernels) gets a gradient that still references the batch's forward graph,
/// and the optimizer's state built from it would keep every batch's graph alive (seen: 160 MB
/// more per epoch for one fused cnn).
fn gradient(grads: &GradStore, var: &Var, j: usize) -> Result<Tensor, TrialsError> {
    grads
        .get(var)
        .map(Tensor::detach)
        .ok_or_else(|| TrialsError::Train(format!("no gradient reached fused weight {j}")))
}

/// `f`, with candle keeping the layouts (dimensions and strides) its CUDA kernels read on
/// the device once per layout rather than uploading them for each operation: every
/// reduction, gather, select and strided operand uploads its layout, ~28 uploads (each an
/// allocation, a copy and a free) of a 45-step pack's step. Only around operations whose
/// host data are layouts: candle keeps every small upload made meanwhile, by its bytes, for
/// the rest of the process. (The `cuda` build's candle synchronizes after each upload it
/// keeps, so the other threads training on the device find it there.)
fn with_layouts_cached<T>(device: &Device, f: impl FnOnce() -> T) -> T {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(cuda) => {
            let _kept = cuda.enable_cuda_graph_htod_cache();
            f()
        }
        _ => f(),
    }
}

fn same_values(a: &Tensor, b: &Tensor) -> Result<bool, TrialsError> {
    // Trainers made from one `SplitTensors` share its tensors: nothing to compare (on a GPU,
    // reading the comparison back waits for the queue to drain).
    if a.id() == b.id() {
        return Ok(true);
    }
    Ok(a.shape() == b.shape()
        && a.ne(b)?
            .to_dtype(DType::F32)?
            .sum_all()?
            .to_scalar::<f32>()?
            == 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DataSpec, TrainConfig};

    /// Digits with a tenth of its rows to train on: these tests are about the arithmetic.
    fn tenth_of_digits() -> crate::Split {
        DataSpec {
            dataset: Some("digits".into()),
            val_fraction: 0.9,
            ..DataSpec::default()
        }
        .load(".".as_ref())
        .unwrap()
    }

    /// A pack of `members` trials of `cfg` (seeds 0, 1, ...) on a tenth of digits, after one
    /// epoch.
    fn pack_after_an_epoch(builtin: Builtin, cfg: &TrainConfig, members: u64) -> FusedTrainer {
        let split = tenth_of_digits();
        let members = (0..members)
            .map(|s| Trainer::new(builtin, cfg.clone(), &split, &Device::Cpu, s))
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let mut pack = FusedTrainer::new(members).unwrap();
        pack.train_epoch().unwrap();
        pack
    }

    /// The padding of a mixed pack (a narrower member's extra units, a shallower member's
    /// missing layer) holds exact zeros after training, weights and optimizer state, under
    /// SGD with weight decay and under AdamW.
    #[test]
    fn padding_stays_zero_through_training() {
        let split = tenth_of_digits();
        let wide = TrainConfig {
            depth: 2,
            width: 12,
            dropout: 0.3,
            weight_decay: 0.01,
            epochs: 3,
            ..TrainConfig::default()
        };
        let narrow = TrainConfig {
            depth: 1,
            width: 5,
            optimizer: OptimizerKind::Sgd,
            lr: 0.1,
            ..wide.clone()
        };
        let members = vec![
            Trainer::new(Builtin::Mlp, wide, &split, &Device::Cpu, 1).unwrap(),
            Trainer::new(Builtin::Mlp, narrow, &split, &Device::Cpu, 2).unwrap(),
        ];
        let mut pack = FusedTrainer::new(members).unwrap();
        assert_eq!((pack.depth, pack.width), (2, 12));
        pack.train_epoch().unwrap();
        pack.train_epoch().unwrap();
        // Member 1's part of each weight: (hidden.0 5x64, bias 5), nothing of layer 1, the
        // output layer reading 5 units.
        let own: [Option<(usize, usize)>; 6] = [
            Some((5, 64)),
            Some((1, 5)),
            None,
            None,
            Some((10, 5)),
            Some((1, 10)),
        ];
        for (p, own) in own.iter().enumerate() {
            let slots = pack.state[p].dim(0).unwrap();
            let state = (0..slots).map(|s| pack.state[p].get(s).unwrap());
            for t in std::iter::once(pack.weights[p].clone()).chain(state) {
                let member = t.get(1).unwrap().to_vec2::<f32>().unwrap();
                for (r, row) in member.iter().enumerate() {
                    for (c, &x) in row.iter().enumerate() {
                        let inside = own.is_some_and(|(rows, cols)| r < rows && c < cols);
                        if !inside {
                            assert_eq!(x, 0.0, "weight {p}, ({r}, {c})");
                        }
                    }
                }
            }
        }
        let back = pack.into_trainers().unwrap();
        assert_eq!(back[1].model.vars()[0].1.dims(), &[5, 64]);
        assert_eq!(back[1].optimizer.state[0].len(), 1, "SGD's one slot");
        assert_eq!(back[0].optimizer.state[0].len(), 2, "AdamW's two");
    }

    /// Dropout masks drawn a chunk of ticks at a time (a few ticks under test) are each
    /// member's own, in the order it draws them alone: the weights match bit for bit.
    #[test]
    fn dropout_masks_drawn_in_chunks_are_each_members_own() {
        let split = tenth_of_digits();
        for builtin in [Builtin::Mlp, Builtin::Cnn] {
            let configs: Vec<TrainConfig> = [(2, 0.2), (1, 0.5), (2, 0.0)]
                .iter()
                .map(|&(depth, dropout)| TrainConfig {
                    depth,
                    dropout,
                    width: 8,
                    channels: 2,
                    batch_size: 16,
                    epochs: 3,
                    ..TrainConfig::default()
                })
                .collect();
            let trainers = || {
                configs
                    .iter()
                    .enumerate()
                    .map(|(seed, cfg)| {
                        Trainer::new(builtin, cfg.clone(), &split, &Device::Cpu, seed as u64)
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .unwrap()
            };
            let mut pack = FusedTrainer::new(trainers()).unwrap();
            let mut alone = trainers();
            for _ in 0..2 {
                for report in pack.train_epoch().unwrap() {
                    report.unwrap();
                }
                for t in &mut alone {
                    t.train_epoch().unwrap();
                }
            }
            for (k, (packed, alone)) in pack.into_trainers().unwrap().iter().zip(&alone).enumerate()
            {
                for ((name, a), (_, b)) in packed.model.vars().iter().zip(alone.model.vars()) {
                    assert!(
                        same_values(a.as_tensor(), b.as_tensor()).unwrap(),
                        "{builtin:?} member {k}, {name}"
                    );
                }
            }
        }
    }

    /// A pack that re-forms around one narrower member holds its weights and state
    /// contiguous, not as views of the wider pack's: a GPU's matmuls and update read only
    /// contiguous tensors (found under scripts/null-cuda: such a trial failed in cuBLAS).
    #[test]
    fn a_pack_reformed_around_a_narrower_member_holds_contiguous_tensors() {
        let split = tenth_of_digits();
        let config = |width| TrainConfig {
            width,
            epochs: 3,
            ..TrainConfig::default()
        };
        let members = [16, 8]
            .iter()
            .enumerate()
            .map(|(seed, &w)| {
                Trainer::new(Builtin::Mlp, config(w), &split, &Device::Cpu, seed as u64)
            })
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let mut pack = FusedTrainer::new(members).unwrap();
        pack.train_epoch().unwrap();
        let mut pack = pack.reform(&[true, false], Vec::new()).unwrap();
        assert_eq!(pack.width, 8);
        for (p, t) in pack.weights.iter().chain(&pack.state).enumerate() {
            assert!(
                t.is_contiguous(),
                "tensor {p} of the re-formed pack: {:?}",
                t.layout()
            );
        }
        pack.train_epoch().unwrap();
    }

    /// What a GPU pack leaves out (the log-softmax max's gradient, the loss's scaling batch
    /// by batch) changes nothing but rounding: on CPU, left out too, the members train within
    /// 1e-5 of themselves alone.
    #[test]
    fn a_pack_that_is_not_exact_trains_within_rounding_of_its_members_alone() {
        let split = tenth_of_digits();
        let configs = [(2, 0.2, OptimizerKind::Adamw), (1, 0.0, OptimizerKind::Sgd)];
        let trainers = || {
            configs
                .iter()
                .enumerate()
                .map(|(seed, &(depth, dropout, optimizer))| {
                    let cfg = TrainConfig {
                        depth,
                        dropout,
                        optimizer,
                        lr: 0.01,
                        width: 8,
                        batch_size: 16,
                        epochs: 3,
                        ..TrainConfig::default()
                    };
                    Trainer::new(Builtin::Mlp, cfg, &split, &Device::Cpu, seed as u64)
                })
                .collect::<Result<Vec<_>, _>>()
                .unwrap()
        };
        let mut pack = FusedTrainer::new(trainers()).unwrap();
        pack.exact = false;
        let mut alone = trainers();
        let mut differ = false;
        for _ in 0..3 {
            let reports = pack.train_epoch().unwrap();
            for (k, (t, fused)) in alone.iter_mut().zip(reports).enumerate() {
                let (fused, own) = (fused.unwrap(), t.train_epoch().unwrap());
                for (what, f, a) in [
                    ("train_loss", fused.train_loss, own.train_loss),
                    ("val_loss", fused.val_loss, own.val_loss),
                ] {
                    assert!(
                        (f - a).abs() <= 1e-5 * a.abs().max(1.0),
                        "member {k}: {what} {f} against {a}"
                    );
                    differ |= f != a;
                }
                // Its validation's hits (SoftmaxScore's on this path) are the same rows'.
                let (f, a) = (fused.val_accuracy, own.val_accuracy);
                let row = 1.0 / split.val.len() as f64;
                assert!(
                    (f - a).abs() <= row * 1e-3,
                    "member {k}: val_accuracy {f} against {a}"
                );
            }
        }
        for (k, (packed, alone)) in pack.into_trainers().unwrap().iter().zip(&alone).enumerate() {
            for ((name, a), (_, b)) in packed.model.vars().iter().zip(alone.model.vars()) {
                let gap = (a.as_tensor() - b.as_tensor())
                    .unwrap()
                    .abs()
                    .unwrap()
                    .max_all()
                    .unwrap();
                let gap = gap.to_scalar::<f32>().unwrap();
                assert!(gap <= 1e-5, "member {k}, {name}: {gap}");
                differ |= gap > 0.0;
            }
        }
        // Not vacuous: what it leaves out does show in the last bits.
        assert!(
            differ,
            "an inexact pack matched its members alone to the bit"
        );
    }

    /// A pack's masks drawn on the host are those its device draws ([`DropoutMasks`] on a
    /// GPU), to the bit, whatever the padding (widths, depths and batch sizes mixed).
    #[test]
    fn a_packs_masks_drawn_on_the_device_are_those_drawn_on_the_host() {
        let split = tenth_of_digits();
        let members = (0..5)
            .map(|i| {
                let cfg = TrainConfig {
                    width: [4, 8, 6][i % 3],
                    depth: 1 + i % 2,
                    batch_size: [16, 32][i % 2],
                    dropout: [0.0, 0.3, 0.5][i % 3],
                    ..TrainConfig::default()
                };
                Trainer::new(Builtin::Mlp, cfg, &split, &Device::Cpu, i as u64)
            })
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let pack = FusedTrainer::new(members).unwrap();
        let n = pack.members[0].train.2;
        let orders: Vec<Vec<u32>> = pack
            .members
            .iter()
            .map(|m| epoch_order(m.seed, m.epoch, n))
            .collect();
        let counts: Vec<u64> = pack.members.iter().map(Trainer::steps_per_epoch).collect();
        let at = vec![0; counts.len()];
        let orders: Vec<&[u32]> = orders.iter().map(Vec::as_slice).collect();
        let ticks = Ticks::new(&pack.members, &at, &counts, &orders, n, &Device::Cpu).unwrap();
        let masks = |on_device| {
            let (dropouts, plan) = pack.dropout_plan(&ticks);
            crate::fused_dropout::tests::masks(dropouts, plan, &Device::Cpu, on_device)
        };
        let host = masks(false);
        assert!(host.len() > 10, "{} masks", host.len());
        assert!(host == masks(true));
    }

    #[test]
    fn a_member_written_back_holds_its_own_state_alone() {
        // `Tensor::copy` of a member's slice cloned the whole stacked storage, every
        // member's: 8 GB held by a 16-trial pack of 3x1024 MLPs.
        let cfg = TrainConfig {
            width: 8,
            epochs: 2,
            ..TrainConfig::default()
        };
        let pack = pack_after_an_epoch(Builtin::Mlp, &cfg, 3);
        for (k, t) in pack.into_trainers().unwrap().iter().enumerate() {
            for (j, slots) in t.optimizer.state.iter().enumerate() {
                for slot in slots {
                    let (storage, _) = slot.storage_and_layout();
                    let held = match &*storage {
                        candle_core::Storage::Cpu(c) => c.as_slice::<f32>().unwrap().len(),
                        _ => unreachable!("a CPU pack"),
                    };
                    assert_eq!(held, slot.elem_count(), "member {k}, weight {j}");
                }
            }
        }
    }

    #[test]
    fn the_optimizer_state_keeps_no_graph_between_batches() {
        // A fused kernel is a matmul operand itself, so its gradient references the batch's
        // graph; state built from it undetached kept every batch alive.
        for optimizer in [OptimizerKind::Adamw, OptimizerKind::Sgd] {
            let cfg = TrainConfig {
                channels: 2,
                width: 8,
                optimizer,
                epochs: 2,
                ..TrainConfig::default()
            };
            let pack = pack_after_an_epoch(Builtin::Cnn, &cfg, 2);
            for (j, slots) in pack.state.iter().enumerate() {
                assert!(!slots.track_op(), "{optimizer:?}: weight {j}");
            }
        }
    }
}
