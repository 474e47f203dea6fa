//! One call's training of a pack: its ticks, each one forward pass, loss, backward pass and
//! optimizer update of every member at once, then the reports of the epochs that ended.

use candle_core::{DType, Tensor};

use super::gradients::LogSoftmax;
use super::stacked::{read_validation, with_layouts_cached};
use super::ticks::Ticks;
use super::{Coefficients, FusedTrainer};
use crate::fused_dropout::DropoutMasks;
use crate::fused_loss::SoftmaxLoss;
use crate::trainer::{epoch_order, EpochReport, Trainer};
use crate::TrialsError;

/// Per member: its report where its epoch ended in the call, `None` where it did not.
pub(super) type EpochEnds = Vec<Option<Result<EpochReport, TrialsError>>>;

/// What every tick of one call reads: the rows, their classes and, on the exact path, the
/// loss's gradients.
struct Batches {
    ticks: Ticks,
    /// Each of the ticks' rows' class, in the ticks' order.
    targets: Tensor,
    /// For the exact path (its own log-softmax backward), the loss's gradient at the rows'
    /// log-probabilities for all the ticks: the row's weight at its class, 0 elsewhere, as
    /// the backward pass of candle's `nll` scatters it batch by batch; and the weights
    /// negated. ([`SoftmaxLoss`] needs neither.)
    exact: Option<(Tensor, Tensor)>,
}

impl Batches {
    /// Tick `i` of a pack of `members`: rows per member, and where its `len` rows start.
    fn span(&self, i: usize, members: usize) -> (usize, usize, usize) {
        let rows = self.ticks.rows[i];
        (rows, self.ticks.offsets[i], members * rows)
    }
}

impl FusedTrainer {
    /// Trains `counts[k]` updates of member `k` from where it is in its epoch (not past its
    /// end), in `max(counts)` ticks, then validates the members whose epoch ended: their
    /// reports, `None` for the others.
    pub(super) fn train(&mut self, counts: &[u64]) -> Result<EpochEnds, TrialsError> {
        if let Some(k) = self.members.iter().position(Trainer::finished) {
            return Err(TrialsError::Train(format!(
                "member {k} has finished; re-form the pack without it before the next epoch"
            )));
        }
        let members = self.members.len();
        let (x, y, n) = self.members[0].train.clone();
        let features = x.dim(1)?;
        // Everything a batch needs from the host is uploaded once per call: on a GPU each
        // upload from pageable memory waits for the queue to drain.
        let ticks = self.plan_ticks(counts, n)?;
        let mut masks = self.dropout_masks(&ticks)?;
        let lrs = self.learning_rates(ticks.count(), counts);
        let coefficients = Coefficients::new(&self.members, &lrs, &ticks.lens, &self.device)?;
        let batches = self.batches(ticks, &y)?;
        let mut loss_sums = Tensor::from_vec(self.loss_sums.clone(), members, &self.device)?;
        let device = self.device.clone();
        for i in 0..batches.ticks.count() {
            let (rows, at, len) = batches.span(i, members);
            let tick_masks = masks.as_mut().map(DropoutMasks::next).transpose()?;
            // The masks' upload is the tick's only host data but for layouts.
            loss_sums = with_layouts_cached(&device, || {
                let bx = x
                    .index_select(&batches.ticks.idx.narrow(0, at, len)?, 0)?
                    .reshape((members, rows, features))?;
                let (scores, tape) = self.forward(&bx, tick_masks.as_deref(), true)?;
                let (at_logits, loss_sums, at_bias) =
                    self.loss_gradients(&batches, i, &scores, &loss_sums)?;
                let grads = self.backward(tape, &at_logits, at_bias)?;
                self.step(&grads, &coefficients, i, &batches.ticks.lens[i])?;
                Ok::<_, TrialsError>(loss_sums)
            })?;
        }
        self.end_epochs(counts, &lrs, &loss_sums, n)
    }

    /// The call's ticks over each member's shuffle of the `n` rows: made once per member's
    /// epoch and kept for the calls that train on in it.
    fn plan_ticks(&mut self, counts: &[u64], n: usize) -> Result<Ticks, TrialsError> {
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
        let ticks = Ticks::new(&self.members, &self.at, counts, &orders, n, &self.device)?;
        self.orders = made;
        Ok(ticks)
    }

    /// The ticks' dropout masks, where any member drops out.
    fn dropout_masks(&self, ticks: &Ticks) -> Result<Option<DropoutMasks>, TrialsError> {
        if !self.members.iter().any(|m| m.cfg.dropout > 0.0) {
            return Ok(None);
        }
        let (dropouts, plan) = self.dropout_plan(ticks);
        let masks = DropoutMasks::new(dropouts, plan, &self.device, self.device.is_cuda())?;
        Ok(Some(masks))
    }

    /// A member's learning rate at each of `ticks` ticks; after its last update, that
    /// update's (the tick's results are discarded for it, so it only needs to be finite).
    fn learning_rates(&self, ticks: usize, counts: &[u64]) -> Vec<Vec<f64>> {
        // Each member's first update of the ticks, counted from its first epoch's.
        let first_updates: Vec<u64> = (self.members.iter())
            .zip(&self.at)
            .map(|(m, &at)| m.epoch * m.steps_per_epoch() + at)
            .collect();
        (0..ticks)
            .map(|i| {
                (self.members.iter())
                    .zip(first_updates.iter().zip(counts))
                    .map(|(m, (&first, &count))| {
                        m.lr_at_update(first + (i as u64).min(count.saturating_sub(1)))
                    })
                    .collect()
            })
            .collect()
    }

    fn batches(&self, ticks: Ticks, y: &Tensor) -> Result<Batches, TrialsError> {
        let targets = y.index_select(&ticks.idx, 0)?;
        let exact = if self.exact {
            let row_weights = ticks.weights.unsqueeze(1)?;
            let rows = (ticks.idx.dim(0)?, self.key.classes);
            let at_log_probs = Tensor::zeros(rows, DType::F32, &self.device)?.scatter_add(
                &targets.unsqueeze(1)?,
                &row_weights,
                1,
            )?;
            Some((at_log_probs, row_weights.neg()?))
        } else {
            None
        };
        Ok(Batches {
            ticks,
            targets,
            exact,
        })
    }

    /// Tick `i`'s loss at the members' `scores`: the gradient at the logits, `loss_sums`
    /// with each member's loss over the tick added, and (from the fused kernel) the gradient
    /// at the output bias.
    fn loss_gradients(
        &self,
        batches: &Batches,
        i: usize,
        scores: &Tensor,
        loss_sums: &Tensor,
    ) -> Result<(Tensor, Tensor, Option<Tensor>), TrialsError> {
        let (members, classes) = (self.members.len(), self.key.classes);
        let (rows, at, len) = batches.span(i, members);
        let own = batches.ticks.own.as_ref();
        let targets = batches.targets.narrow(0, at, len)?;
        let bias = self.output_bias();
        let Some((at_log_probs, minus_weights)) = &batches.exact else {
            // One kernel for the ~15 of the exact path, within rounding of them.
            let op = SoftmaxLoss {
                bias: bias.reshape((members, classes))?,
                targets,
                weights: batches.ticks.weights.narrow(0, at, len)?,
                own: own.map(|o| o.narrow(0, at, len)).transpose()?,
                losses: loss_sums.clone(),
            };
            let out = scores.reshape((len, classes))?.apply_op1_no_bwd(&op)?;
            let (at_logits, loss_sums, at_bias) = SoftmaxLoss::split(&out, members, rows, classes)?;
            return Ok((at_logits, loss_sums, Some(at_bias)));
        };
        let logits = scores.broadcast_add(bias)?.reshape((len, classes))?;
        let softmax = LogSoftmax::new(&logits)?;
        let at_logits = softmax.backward(
            &at_log_probs.narrow(0, at, len)?,
            &minus_weights.narrow(0, at, len)?,
            &self.zero,
        )?;
        // Each member's summed loss over its own rows: as an unfused trial sums it (its
        // batch's mean loss times its rows), to the bit.
        let picked = softmax.log_probs.gather(&targets.unsqueeze(1)?, 1)?;
        let tick_losses = match own {
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
        Ok((at_logits, (loss_sums + tick_losses)?, None))
    }

    /// After the ticks: validates the members whose epoch ended and reports for them; the
    /// others keep their place in their epoch.
    fn end_epochs(
        &mut self,
        counts: &[u64],
        lrs: &[Vec<f64>],
        loss_sums: &Tensor,
        n: usize,
    ) -> Result<EpochEnds, TrialsError> {
        let members = self.members.len();
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
}
