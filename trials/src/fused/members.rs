//! A pack's members one by one: checkpointed in place, held for a copy, unpacked.

use super::*;

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
    pub(super) fn check_at_boundary(&self, k: usize, why: &str) -> Result<(), TrialsError> {
        match self.at[k] {
            0 => Ok(()),
            at => Err(TrialsError::Train(format!(
                "member {k} is {at} updates into its epoch; {why}"
            ))),
        }
    }

    /// Copies of member `k`'s slices of the packed weights (one per var of its model, in its
    /// shapes) and optimizer state (its slots of each).
    pub(super) fn member_slices(
        &self,
        k: usize,
    ) -> Result<(Vec<Tensor>, Vec<Vec<Tensor>>), TrialsError> {
        self.member_parts(k, |view, shape| copy_slice(&view, shape))
    }

    /// Member `k`'s parts of the packed weights (one per var of its model) and optimizer
    /// state (its slots of each), each `take` of its view `(1, own...)` and its own shape.
    pub(super) fn member_parts<T>(
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
    pub(super) fn write_back(&mut self, k: usize) -> Result<(), TrialsError> {
        let (weights, state) = self.member_slices(k)?;
        let m = &mut self.members[k];
        for ((_, var), w) in m.model.vars().iter().zip(&weights) {
            var.set(w)?;
        }
        m.optimizer.state = state;
        Ok(())
    }
}
