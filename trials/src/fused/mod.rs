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
use crate::fused_dropout::{DropoutSite, MaskPlan};
use crate::fused_loss::SoftmaxScore;
use crate::fused_step::{column, FusedStep};
use crate::model::{activate, linear, Dropout};
use crate::trainer::{EpochReport, Trainer};
use crate::TrialsError;

mod gradients;
mod keys;
mod members;
mod stacked;
#[cfg(test)]
mod tests;
mod ticks;
mod training;

pub use keys::{FuseKey, PackKey};
pub use members::{HeldCheckpoint, PackedMember};
use stacked::*;
use ticks::Ticks;

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
    /// The members' shuffles of the rows, by `(seed, epoch)`
    /// ([`crate::trainer::epoch_order`]): made once per member's epoch, which the pack stops
    /// in several times where batch sizes mix (a shuffle of the glyphs' 16,000 rows for 16
    /// members is ~1-2 ms of the host's).
    orders: HashMap<(u64, u64), Vec<u32>>,
    /// Whether a member's arithmetic is its unfused arithmetic to the bit, as on CPU (what
    /// lets a resumed sweep decide as the uninterrupted one whichever trials share a pack).
    /// On a GPU, whose batched matmuls round otherwise than one trial's anyway, the pack
    /// leaves out what serves only that (the log-softmax max's gradient, zero but for
    /// rounding, and the training loss's scaling batch by batch) and fuses the elementwise
    /// work into fewer kernels ([`crate::fused_loss::SoftmaxLoss`], [`DenseForward`], [`DenseBackward`]).
    exact: bool,
    device: Device,
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
        (pack.weights, pack.state) = pack.stack_members(&members, from, slots)?;
        if let Some((old, places)) = from {
            for (k, &place) in places.iter().enumerate() {
                pack.at[k] = old.at[place];
                pack.loss_sums[k] = old.loss_sums[place];
            }
        }
        pack.members = members;
        Ok(pack)
    }

    /// Every weight of the pack, and its optimizer's `slots` slots, stacked from the
    /// `members`' parts (zeros where a member has none).
    fn stack_members(
        &self,
        members: &[Trainer],
        from: Option<(&FusedTrainer, &[usize])>,
        slots: usize,
    ) -> candle_core::Result<(Vec<Tensor>, Vec<Tensor>)> {
        let first = &members[0];
        let mut weights = Vec::new();
        let mut state = Vec::new();
        for p in 0..self.convs + 2 * (self.depth + 1) {
            let shape = self.stacked_shape(first, p)?;
            let stacked = |slot: Option<usize>| {
                let parts = (0..members.len())
                    .map(|k| {
                        let got = match self.member_weight(k, p) {
                            Some(j) => member_part(members, from, k, j, slot)?,
                            None => None,
                        };
                        match got {
                            Some(w) => pad_to(&w, &shape),
                            None => Tensor::zeros(shape.as_slice(), DType::F32, &self.device),
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
        Ok((weights, state))
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

/// Member `k`'s weight `j` (`slot: None`) or optimizer slot, as `as_stacked` shapes it: from
/// its earlier pack (`from`: the pack and each member's place in it), or from its trainer;
/// `None` where it has no such slot.
fn member_part(
    members: &[Trainer],
    from: Option<(&FusedTrainer, &[usize])>,
    k: usize,
    j: usize,
    slot: Option<usize>,
) -> candle_core::Result<Option<Tensor>> {
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
