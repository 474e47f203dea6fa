//! A pack's forward pass and the gradients it computes itself: the operations candle's
//! autograd does for an unfused trial, in its order, less what autograd adds around them.

use super::*;

impl FusedTrainer {
    /// Logits `(K, batch, classes)` of inputs `(K, batch, features)` but for the output
    /// layer's bias ([`FusedTrainer::output_bias`]: a GPU pack adds it in the loss's kernel),
    /// and what [`FusedTrainer::backward`] needs of the pass where it is `training` (with the
    /// tick's dropout `masks`, one per [`FusedTrainer::dropout_sites`]). Each member's part is
    /// what its own model computes alone.
    pub(super) fn forward(
        &self,
        x: &Tensor,
        masks: Option<&[Tensor]>,
        training: bool,
    ) -> candle_core::Result<(Tensor, Tape)> {
        let mut masks = masks.map(|m| m.iter());
        let mut next_mask = || masks.as_mut().and_then(Iterator::next).cloned();
        let (mut h, features) = match self.key.image {
            Some(image) => self.conv_features(x, image, &mut next_mask, training)?,
            None => (x.clone(), None),
        };
        let dense = &self.weights[self.convs..];
        let mut layers = Vec::with_capacity(if training { self.depth } else { 0 });
        for i in 0..self.depth {
            let mask = next_mask();
            let (z, a, next) = self.dense_layer(i, &h, mask.clone())?;
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

    /// The CNN's features (crate::model::cnn) of inputs `x` of `image`'s shape (channels,
    /// height, width): two convolutions, a 2x2 max-pool, and dropout after the pool (the
    /// first of `next_mask`'s masks). While training, candle's autograd tracks the
    /// convolutions: their kernels are `Var`s, returned with the features they lead to.
    #[allow(clippy::type_complexity)]
    fn conv_features(
        &self,
        x: &Tensor,
        (c, height, width): (usize, usize, usize),
        next_mask: &mut impl FnMut() -> Option<Tensor>,
        training: bool,
    ) -> candle_core::Result<(Tensor, Option<(Tensor, Vec<Var>)>)> {
        let activation = self.key.activation;
        let mut h = x.clone();
        let mut features = None;
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
        Ok((h, features))
    }

    /// Dense layer `i` on `h` with dropout `mask`: its pre-activation, its activation (not
    /// kept where the layer is fused) and its output, where a member without the layer
    /// passes its activations through.
    fn dense_layer(
        &self,
        i: usize,
        h: &Tensor,
        mask: Option<Tensor>,
    ) -> candle_core::Result<(Tensor, Option<Tensor>, Tensor)> {
        let dense = &self.weights[self.convs..];
        let activation = self.key.activation;
        if self.fuses_layers() {
            let op = DenseForward {
                bias: dense[2 * i + 1].clone(),
                mask: mask.clone(),
                has: self.has_layer[i].clone(),
                input: h.clone(),
            };
            let out = h.matmul(&dense[2 * i].t()?)?.apply_op1_no_bwd(&op)?;
            Ok((out.get(0)?, None, out.get(1)?))
        } else {
            let z = linear(h, &dense[2 * i], &dense[2 * i + 1])?;
            let a = activate(&z, activation)?;
            let out = match &mask {
                Some(mask) => a.mul(mask)?,
                None => a.clone(),
            };
            // A member without this layer passes its activations through it.
            let next = match &self.has_layer[i] {
                Some(has) => has.broadcast_as(out.shape())?.where_cond(&out, h)?,
                None => out,
            };
            Ok((z, Some(a), next))
        }
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
    pub(super) fn backward(
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
            let (at_b, at_w, at_input) =
                self.unfused_layer_backward(i, layer, at_out, needs_input(i))?;
            grads.extend([at_b, at_w]);
            at_h = at_input;
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

    /// Dense layer `i`'s backward pass where it is not fused, from `at_out`, the gradient at
    /// its output: its bias's and weight's gradients and (where `needs_input`) its input's.
    fn unfused_layer_backward(
        &self,
        i: usize,
        layer: &DenseTape,
        at_out: Tensor,
        needs_input: bool,
    ) -> Result<(Tensor, Tensor, Option<Tensor>), TrialsError> {
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
            TrialsError::Train("a fused layer's activations reached the unfused backward".into())
        })?;
        let at_z = activation_backward(&layer.z, a, &at_a, self.key.activation, &self.zero)?;
        let w = self.convs + 2 * i;
        let (at_w, at_b, at_input) =
            linear_backward(&layer.input, &self.weights[w], &at_z, None, needs_input)?;
        let at_h = match (at_input, passed) {
            (Some(at_input), Some(passed)) => Some((passed + at_input)?),
            (at_input, _) => at_input,
        };
        Ok((at_b, at_w, at_h))
    }
}

/// What a training tick's forward pass keeps for its backward pass (outside training, only
/// `last`).
pub(super) struct Tape {
    /// The CNN's features (pooled, dropped out) as autograd tracks them back to its
    /// convolutions' kernels.
    pub(super) features: Option<(Tensor, Vec<Var>)>,
    pub(super) layers: Vec<DenseTape>,
    /// The output layer's input.
    pub(super) last: Tensor,
}

/// A dense layer's input, pre-activation, activation (but where the layer is fused: its
/// backward reads `z` alone) and dropout mask.
pub(super) struct DenseTape {
    pub(super) input: Tensor,
    pub(super) z: Tensor,
    pub(super) a: Option<Tensor>,
    pub(super) mask: Option<Tensor>,
}

/// The gradients of `z = x @ w^T + b` ([`linear`]) for `x (K, rows, in)`, `w (K, out, in)`
/// and `b (K, 1, out)`, given `z`'s, `(K, rows, out)`: `w`'s, `b`'s and, where asked, `x`'s,
/// as candle's autograd computes them, but `w`'s as `at_z^T @ x` in one matmul where
/// autograd transposes `x^T @ at_z` and copies it (the same sums in the same order: bit
/// for bit on CPU, which the fused tests hold). `b`'s is `at_b` where the op that made
/// `at_z` summed it already.
pub(super) fn linear_backward(
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
pub(super) fn activation_backward(
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
pub(super) struct LogSoftmax {
    pub(super) logits: Tensor,
    pub(super) max: Tensor,
    pub(super) exp: Tensor,
    pub(super) sum: Tensor,
    pub(super) log_probs: Tensor,
}

impl LogSoftmax {
    pub(super) fn new(logits: &Tensor) -> candle_core::Result<LogSoftmax> {
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
    pub(super) fn backward(
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
