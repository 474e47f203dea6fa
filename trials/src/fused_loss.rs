//! A GPU pack's loss and its gradient at the logits as one custom op: for each row, the
//! output layer's bias, the log-softmax, the gradient of the weighted `nll` at the logits,
//! and the member's summed loss, where the same written with tensor operations takes ~15
//! kernels a step (an addition, a max, two subtractions, an exp, a sum, a log, a division, a
//! product and an addition for the gradient; a gather, a product, a sum, a negation and an
//! addition for the loss). The formulas are those of the pack's inexact path
//! (`LogSoftmax::backward` without the max's share, the loss summed without the batch's
//! scaling), which a GPU pack takes anyway: a member's values are its own alone within
//! rounding, not bit for bit, so only a pack that is not exact uses it.

use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Storage, Tensor};

/// For logits `(K * rows, classes)` before the output layer's bias, member after member:
/// `(K * rows * classes + K + K * classes)` values, the gradient at the logits (row after
/// row), each member's running loss, `losses` plus the tick's `-sum(log p(target) * own)`
/// over its rows, and the output bias's gradient, each member's gradient at the logits
/// summed over its rows (each of the kernel's threads its rows in order, then the threads in
/// a tree; a reduction kernel of its own before). All f32, contiguous
/// ([`SoftmaxLoss::split`]).
pub(crate) struct SoftmaxLoss {
    /// `(K, classes)`: the output layer's bias.
    pub bias: Tensor,
    /// `(K * rows)` u32: each row's class.
    pub targets: Tensor,
    /// `(K * rows)`: each row's loss weight (-1 / its member's rows; 0 for padding).
    pub weights: Tensor,
    /// `(K * rows)`: 1 for a member's own row, 0 for padding; `None` where none is padded.
    pub own: Option<Tensor>,
    /// `(K)`: each member's loss so far this epoch.
    pub losses: Tensor,
}

#[cfg(feature = "cuda")]
const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/fused_loss.ptx"));

/// A row's largest logit (`z + bias`) and the sum of each logit's `exp(logit - max)`, in
/// class order: the kernels' `softmax_parts` (fused_loss.cu).
#[inline]
fn max_and_sum(z: &[f32], bias: &[f32]) -> (f32, f32) {
    let logit = |c: usize| z[c] + bias[c];
    let max = (0..z.len()).map(logit).fold(f32::NEG_INFINITY, f32::max);
    let sum = (0..z.len()).fold(0f32, |sum, c| sum + (logit(c) - max).exp());
    (max, sum)
}

/// Row `g`'s gradient into `at` and its loss term (`log p(target)`, times `own`): the CUDA
/// kernel's (fused_loss.cu) arithmetic, in its order.
#[inline]
fn row(z: &[f32], bias: &[f32], target: usize, weight: f32, own: f32, at: &mut [f32]) -> f32 {
    let logit = |c: usize| z[c] + bias[c];
    let (max, sum) = max_and_sum(z, bias);
    let scale = -weight / sum;
    for (c, a) in at.iter_mut().enumerate() {
        let hit = if c == target { weight } else { 0.0 };
        *a = hit + (logit(c) - max).exp() * scale;
    }
    ((logit(target) - max) - sum.ln()) * own
}

use crate::fused_step::contiguous_run as contiguous;

impl SoftmaxLoss {
    /// The op's output for `members` of `rows` rows: the gradient at the logits `(K, rows,
    /// classes)`, the running losses `(K)` and the output bias's gradient `(K, 1, classes)`.
    pub(crate) fn split(
        out: &Tensor,
        members: usize,
        rows: usize,
        classes: usize,
    ) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
        let at = members * rows * classes;
        Ok((
            out.narrow(0, 0, at)?.reshape((members, rows, classes))?,
            out.narrow(0, at, members)?,
            out.narrow(0, at + members, members * classes)?
                .reshape((members, 1, classes))?,
        ))
    }

    /// `(K, rows, classes)` for logits laid out as `l`, checked against the other inputs.
    fn sizes(&self, l: &Layout) -> candle_core::Result<(usize, usize, usize)> {
        let (members, classes) = (self.losses.elem_count(), self.bias.dim(1)?);
        let &[n, c] = l.dims() else {
            candle_core::bail!(
                "softmax-loss: logits {:?} are not (rows, classes)",
                l.dims()
            );
        };
        let fits = |t: &Tensor| t.elem_count() == n;
        if members == 0
            || c != classes
            || n % members != 0
            || self.bias.elem_count() != members * classes
            || !fits(&self.targets)
            || !fits(&self.weights)
            || self.own.as_ref().is_some_and(|o| !fits(o))
        {
            candle_core::bail!(
                "softmax-loss: logits {:?}, bias {:?}, targets {:?}, weights {:?}, losses {:?} do not fit",
                l.dims(),
                self.bias.dims(),
                self.targets.dims(),
                self.weights.dims(),
                self.losses.dims()
            );
        }
        Ok((members, n / members, classes))
    }
}

impl CustomOp1 for SoftmaxLoss {
    fn name(&self) -> &'static str {
        "softmax-loss"
    }

    fn cpu_fwd(&self, z: &CpuStorage, zl: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (members, rows, classes) = self.sizes(zl)?;
        let z = &z.as_slice::<f32>()?[contiguous("softmax-loss", zl, "the logits")?];
        fn cpu<T: candle_core::WithDType>(t: &Tensor, what: &str) -> candle_core::Result<Vec<T>> {
            cpu_values("softmax-loss", t, what)
        }
        let bias = cpu::<f32>(&self.bias, "the bias")?;
        let targets = cpu::<u32>(&self.targets, "the targets")?;
        let weights = cpu::<f32>(&self.weights, "the weights")?;
        let own = self
            .own
            .as_ref()
            .map(|o| cpu::<f32>(o, "own"))
            .transpose()?;
        let losses = cpu::<f32>(&self.losses, "the losses")?;
        let n = members * rows;
        let size = n * classes + members + members * classes;
        let mut out = vec![0f32; size];
        let (at, rest) = out.split_at_mut(n * classes);
        let (new_losses, at_bias) = rest.split_at_mut(members);
        for k in 0..members {
            let mut sum = 0f32;
            for g in k * rows..(k + 1) * rows {
                let target = targets[g] as usize;
                if target >= classes {
                    candle_core::bail!("softmax-loss: row {g}'s class {target} of {classes}");
                }
                sum += row(
                    &z[g * classes..(g + 1) * classes],
                    &bias[k * classes..(k + 1) * classes],
                    target,
                    weights[g],
                    own.as_ref().map_or(1.0, |o| o[g]),
                    &mut at[g * classes..(g + 1) * classes],
                );
            }
            new_losses[k] = losses[k] - sum;
            // The kernel's order: a thread's rows in order, then the threads in a tree.
            for c in 0..classes {
                let mut lanes = [0f32; LANES];
                for r in 0..rows {
                    lanes[r % LANES] += at[(k * rows + r) * classes + c];
                }
                at_bias[k * classes + c] = crate::fused_dense::tree_sum(&mut lanes);
            }
        }
        Ok((CpuStorage::F32(out), Shape::from(size)))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        z: &candle_core::CudaStorage,
        zl: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        use candle_core::cuda_backend::cudarc::driver::PushKernelArg;
        use candle_core::cuda_backend::WrapErr;

        let (members, rows, classes) = self.sizes(zl)?;
        let device = z.device.clone();
        let zv = cuda_view::<f32>("softmax-loss", z, zl, "the logits")?;
        // Each input's storage, held while the kernel's arguments borrow it.
        let held: Vec<_> = [
            Some(&self.bias),
            Some(&self.targets),
            Some(&self.weights),
            self.own.as_ref(),
            Some(&self.losses),
        ]
        .into_iter()
        .flatten()
        .map(Tensor::storage_and_layout)
        .collect();
        let view = |i: usize, what: &str| held_view::<f32>("softmax-loss", &held[i], what);
        let bias = view(0, "the bias")?;
        let targets = held_view::<u32>("softmax-loss", &held[1], "the targets")?;
        let weights = view(2, "the weights")?;
        let own = match self.own {
            Some(_) => Some(view(3, "own")?),
            None => None,
        };
        let losses = view(held.len() - 1, "the losses")?;
        let func =
            crate::cuda_kernel::Kernel::load(&device, "softmax_loss_f32", "tune_fused_loss", PTX)?;
        let n = members * rows;
        let size = n * classes + members + members * classes;
        // SAFETY: the kernel writes every element of `out`.
        let out = unsafe { device.alloc::<f32>(size)? };
        let (rows_arg, classes_arg, has_own) =
            (rows as u32, classes as u32, u32::from(own.is_some()));
        let mut builder = func.builder();
        builder
            .arg(&rows_arg)
            .arg(&classes_arg)
            .arg(&has_own)
            .arg(&zv)
            .arg(&bias)
            .arg(&targets)
            .arg(&weights);
        // Without padding the kernel reads no `own`: any pointer will do.
        match &own {
            Some(own) => builder.arg(own),
            None => builder.arg(&weights),
        };
        builder.arg(&losses).arg(&out);
        // SAFETY: the arguments match the kernel's signature in fused_loss.cu.
        unsafe { builder.launch(block_per_member(members)) }.w()?;
        Ok((
            candle_core::CudaStorage::wrap_cuda_slice(out, device),
            Shape::from(size),
        ))
    }
}

/// A GPU pack's validation as one custom op, where the same written with tensor operations
/// (the bias's addition, a log-softmax, a gather, a sum and a scaling for the loss; an
/// argmax, a comparison, a cast and a sum for the hits, and the targets copied for each
/// member) takes ~14 kernels and two reads: for logits `(K * rows, classes)` before the
/// output layer's bias, every member scoring the same `rows`, `(2K)` values: each member's
/// `sum(log p(target)) * scale`, then its hits (rows whose first largest logit is the
/// target's), each summed as [`SoftmaxLoss`]' kernel sums (a thread's rows in order, then
/// the threads in a tree). Within rounding of the tensor operations (`exp` and `ln` are the
/// device's), so only a pack that is not exact uses it.
pub(crate) struct SoftmaxScore {
    /// `(K, classes)`: the output layer's bias.
    pub bias: Tensor,
    /// `(rows)` u32: each row's class, the same for every member.
    pub targets: Tensor,
    /// What each member's summed log-probability is multiplied by (`-1 / rows`: the mean
    /// cross-entropy).
    pub scale: f32,
}

/// A validation row's log-probability of its target and whether it is a hit: the CUDA
/// kernel's (fused_loss.cu `softmax_score_f32`) arithmetic, in its order.
#[inline]
fn score_row(z: &[f32], bias: &[f32], target: usize) -> (f32, f32) {
    let logit = |c: usize| z[c] + bias[c];
    let (max, sum) = max_and_sum(z, bias);
    // The first of the largest logits, as candle's argmax takes it.
    let (mut first, mut top) = (0, logit(0));
    for c in 1..z.len() {
        if logit(c) > top {
            (top, first) = (logit(c), c);
        }
    }
    let hit = if first == target { 1.0 } else { 0.0 };
    ((logit(target) - max) - sum.ln(), hit)
}

impl SoftmaxScore {
    /// `(K, rows, classes)` for logits laid out as `l`, checked against the other inputs.
    fn sizes(&self, l: &Layout) -> candle_core::Result<(usize, usize, usize)> {
        let (members, classes) = (self.bias.dim(0)?, self.bias.dim(1)?);
        let rows = self.targets.elem_count();
        let &[n, c] = l.dims() else {
            candle_core::bail!(
                "softmax-score: logits {:?} are not (rows, classes)",
                l.dims()
            );
        };
        if members == 0 || rows == 0 || c != classes || n != members * rows {
            candle_core::bail!(
                "softmax-score: logits {:?}, bias {:?}, targets {:?} do not fit",
                l.dims(),
                self.bias.dims(),
                self.targets.dims()
            );
        }
        Ok((members, rows, classes))
    }
}

impl CustomOp1 for SoftmaxScore {
    fn name(&self) -> &'static str {
        "softmax-score"
    }

    fn cpu_fwd(&self, z: &CpuStorage, zl: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (members, rows, classes) = self.sizes(zl)?;
        let z = &z.as_slice::<f32>()?[contiguous("softmax-score", zl, "the logits")?];
        let bias = cpu_values::<f32>("softmax-score", &self.bias, "the bias")?;
        let targets = cpu_values::<u32>("softmax-score", &self.targets, "the targets")?;
        let mut out = vec![0f32; 2 * members];
        for k in 0..members {
            let (mut terms, mut hits) = ([0f32; LANES], [0f32; LANES]);
            for (r, &target) in targets.iter().enumerate() {
                let target = target as usize;
                if target >= classes {
                    candle_core::bail!("softmax-score: row {r}'s class {target} of {classes}");
                }
                let g = k * rows + r;
                let (term, hit) = score_row(
                    &z[g * classes..(g + 1) * classes],
                    &bias[k * classes..(k + 1) * classes],
                    target,
                );
                terms[r % LANES] += term;
                hits[r % LANES] += hit;
            }
            out[k] = crate::fused_dense::tree_sum(&mut terms) * self.scale;
            out[members + k] = crate::fused_dense::tree_sum(&mut hits);
        }
        Ok((CpuStorage::F32(out), Shape::from(2 * members)))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        z: &candle_core::CudaStorage,
        zl: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        use candle_core::cuda_backend::cudarc::driver::PushKernelArg;
        use candle_core::cuda_backend::WrapErr;

        let (members, rows, classes) = self.sizes(zl)?;
        let device = z.device.clone();
        let zv = cuda_view::<f32>("softmax-score", z, zl, "the logits")?;
        let held = [&self.bias, &self.targets].map(Tensor::storage_and_layout);
        let bias = held_view::<f32>("softmax-score", &held[0], "the bias")?;
        let targets = held_view::<u32>("softmax-score", &held[1], "the targets")?;
        let func =
            crate::cuda_kernel::Kernel::load(&device, "softmax_score_f32", "tune_fused_loss", PTX)?;
        // SAFETY: the kernel writes every element of `out`.
        let out = unsafe { device.alloc::<f32>(2 * members)? };
        let (rows_arg, classes_arg) = (rows as u32, classes as u32);
        let mut builder = func.builder();
        builder
            .arg(&rows_arg)
            .arg(&classes_arg)
            .arg(&self.scale)
            .arg(&zv)
            .arg(&bias)
            .arg(&targets)
            .arg(&out);
        // SAFETY: the arguments match the kernel's signature in fused_loss.cu.
        unsafe { builder.launch(block_per_member(members)) }.w()?;
        Ok((
            candle_core::CudaStorage::wrap_cuda_slice(out, device),
            Shape::from(2 * members),
        ))
    }
}

/// Op `op`'s input `what`, a contiguous run of `s` laid out as `l`, for a kernel's argument.
#[cfg(feature = "cuda")]
fn cuda_view<'a, T>(
    op: &str,
    s: &'a candle_core::CudaStorage,
    l: &Layout,
    what: &str,
) -> candle_core::Result<candle_core::cuda_backend::cudarc::driver::CudaView<'a, T>>
where
    T: candle_core::cuda_backend::cudarc::driver::DeviceRepr + candle_core::cuda_backend::CudaDType,
{
    Ok(s.as_cuda_slice::<T>()?.slice(contiguous(op, l, what)?))
}

/// Op `op`'s input `what`, held as a tensor's storage and layout, for a kernel's argument:
/// refused where it is not on the GPU beside the logits.
#[cfg(feature = "cuda")]
fn held_view<'a, T>(
    op: &str,
    (storage, layout): &'a (candle_core::StorageRef<'_>, &Layout),
    what: &str,
) -> candle_core::Result<candle_core::cuda_backend::cudarc::driver::CudaView<'a, T>>
where
    T: candle_core::cuda_backend::cudarc::driver::DeviceRepr + candle_core::cuda_backend::CudaDType,
{
    let Storage::Cuda(s) = &**storage else {
        candle_core::bail!("{op}: {what} on another device than the logits");
    };
    cuda_view(op, s, layout, what)
}

/// A CPU tensor's values, for an op whose main input is on the CPU.
fn cpu_values<T: candle_core::WithDType>(
    op: &str,
    t: &Tensor,
    what: &str,
) -> candle_core::Result<Vec<T>> {
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cpu(s) = &*storage else {
        candle_core::bail!("{op}: {what} on another device than the logits");
    };
    Ok(s.as_slice::<T>()?[contiguous(op, layout, what)?].to_vec())
}

/// Both kernels' grid: a block of [`THREADS`] per member.
#[cfg(feature = "cuda")]
fn block_per_member(members: usize) -> candle_core::cuda_backend::cudarc::driver::LaunchConfig {
    candle_core::cuda_backend::cudarc::driver::LaunchConfig {
        grid_dim: (members as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Threads per member in the CUDA kernel: `THREADS` in fused_loss.cu.
pub(crate) const LANES: usize = 256;
#[cfg(feature = "cuda")]
const THREADS: u32 = LANES as u32;

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device, D};

    /// The op against the same written with candle's operations (as the pack's inexact path
    /// wrote it before): two members of 3 rows, 4 classes, the second member's last row
    /// padding.
    #[test]
    fn the_op_is_the_tensor_operations_within_rounding() {
        let cpu = Device::Cpu;
        let (members, rows, classes) = (2, 3, 4);
        let n = members * rows;
        let z: Vec<f32> = (0..n * classes)
            .map(|i| ((i * 37 % 11) as f32 - 5.0) * 0.7)
            .collect();
        let z = Tensor::from_vec(z, (n, classes), &cpu).unwrap();
        let bias = Tensor::new(&[[0.1f32, -0.2, 0.3, 0.0], [1.0, 0.5, -1.0, 2.0]], &cpu).unwrap();
        let targets = Tensor::new(&[0u32, 3, 2, 1, 1, 0], &cpu).unwrap();
        let own = Tensor::new(&[1f32, 1., 1., 1., 1., 0.], &cpu).unwrap();
        let weights = Tensor::new(&[-1f32 / 3., -1. / 3., -1. / 3., -0.5, -0.5, 0.], &cpu).unwrap();
        let losses = Tensor::new(&[0.25f32, 1.5], &cpu).unwrap();
        let op = SoftmaxLoss {
            bias: bias.clone(),
            targets: targets.clone(),
            weights: weights.clone(),
            own: Some(own.clone()),
            losses: losses.clone(),
        };
        let out = z.apply_op1_no_bwd(&op).unwrap();
        let (at, new_losses, at_bias) = SoftmaxLoss::split(&out, members, rows, classes).unwrap();
        // Fewer rows than the kernel's threads: each a lane of its own, summed in a tree.
        let summed = at.sum_keepdim(1).unwrap().flatten_all().unwrap();
        let got = at_bias.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        for (got, want) in got.iter().zip(summed.to_vec1::<f32>().unwrap()) {
            assert!(
                (got - want).abs() <= 1e-6,
                "the bias's gradient {got} against {want}"
            );
        }
        let at = at.reshape((n, classes)).unwrap();

        // The same with tensor operations.
        let logits = z
            .reshape((members, rows, classes))
            .unwrap()
            .broadcast_add(&bias.unsqueeze(1).unwrap())
            .unwrap()
            .reshape((n, classes))
            .unwrap();
        let log_probs = candle_nn::ops::log_softmax(&logits, D::Minus1).unwrap();
        let probs = log_probs.exp().unwrap();
        let hits = Tensor::zeros((n, classes), DType::F32, &cpu)
            .unwrap()
            .scatter_add(
                &targets.unsqueeze(1).unwrap(),
                &weights.unsqueeze(1).unwrap(),
                1,
            )
            .unwrap();
        let want_at =
            (hits - probs.broadcast_mul(&weights.unsqueeze(1).unwrap()).unwrap()).unwrap();
        let picked = log_probs
            .gather(&targets.unsqueeze(1).unwrap(), 1)
            .unwrap()
            .squeeze(1)
            .unwrap()
            .mul(&own)
            .unwrap()
            .reshape((members, rows))
            .unwrap()
            .sum(1)
            .unwrap();
        let want_losses = (losses - picked).unwrap();
        let gap = |a: &Tensor, b: &Tensor| {
            (a - b)
                .unwrap()
                .abs()
                .unwrap()
                .flatten_all()
                .unwrap()
                .max(0)
                .unwrap()
                .to_scalar::<f32>()
                .unwrap()
        };
        assert!(
            gap(&at, &want_at) <= 1e-6,
            "gradient: {}",
            gap(&at, &want_at)
        );
        assert!(
            gap(&new_losses, &want_losses) <= 1e-5,
            "losses: {:?} against {:?}",
            new_losses.to_vec1::<f32>().unwrap(),
            want_losses.to_vec1::<f32>().unwrap()
        );
        // A padded row neither pulls on the logits nor counts in the loss.
        let padded = at.get(n - 1).unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(padded, vec![0.0; classes]);
    }

    /// The validation op against the tensor operations the exact path keeps: two members of
    /// 300 rows (more than the kernel's threads, so lanes sum several), 7 classes, a row
    /// whose largest logits tie (the first counts, as candle's argmax takes it).
    #[test]
    fn the_score_is_the_tensor_operations_within_rounding() {
        let cpu = Device::Cpu;
        let (members, rows, classes) = (2, 300, 7);
        let n = members * rows;
        let mut z: Vec<f32> = (0..n * classes)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.3)
            .collect();
        // Row 5 of member 0: classes 1 and 4 tie above the rest.
        for c in 0..classes {
            z[5 * classes + c] = if c == 1 || c == 4 { 2.0 } else { -1.0 };
        }
        let z = Tensor::from_vec(z, (n, classes), &cpu).unwrap();
        let bias = Tensor::from_vec(
            // Member 0's bias is 0, so that row 5's tie stands.
            (0..members * classes)
                .map(|i| {
                    if i < classes {
                        0.0
                    } else {
                        0.25 * (i % 4) as f32
                    }
                })
                .collect(),
            (members, classes),
            &cpu,
        )
        .unwrap();
        let targets: Vec<u32> = (0..rows as u32).map(|r| r * 5 % classes as u32).collect();
        assert_eq!(
            targets[5] as usize % classes,
            4,
            "row 5's target is the second of the tie"
        );
        let targets = Tensor::new(targets.as_slice(), &cpu).unwrap();
        let scale = -1.0 / rows as f64;
        let op = SoftmaxScore {
            bias: bias.clone(),
            targets: targets.clone(),
            scale: scale as f32,
        };
        let got = z.apply_op1_no_bwd(&op).unwrap().to_vec1::<f32>().unwrap();

        let logits = z
            .reshape((members, rows, classes))
            .unwrap()
            .broadcast_add(&bias.unsqueeze(1).unwrap())
            .unwrap();
        let ys = targets
            .unsqueeze(0)
            .unwrap()
            .broadcast_as((members, rows))
            .unwrap()
            .contiguous()
            .unwrap();
        let log_probs =
            candle_nn::ops::log_softmax(&logits.reshape((n, classes)).unwrap(), 1).unwrap();
        let losses = log_probs
            .gather(&ys.flatten_all().unwrap().unsqueeze(1).unwrap(), 1)
            .unwrap()
            .reshape((members, rows))
            .unwrap()
            .sum(1)
            .unwrap()
            .affine(scale, 0.0)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let hits = logits
            .argmax(D::Minus1)
            .unwrap()
            .eq(&ys)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
            .sum(1)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        for k in 0..members {
            let (loss, want) = (got[k], losses[k]);
            assert!(
                (loss - want).abs() <= 1e-6,
                "member {k}'s loss {loss} against {want}"
            );
            assert_eq!(got[members + k], hits[k], "member {k}'s hits");
        }
        assert!(
            hits[0] > 0.0 && hits[0] < rows as f32,
            "some hits, some misses: {hits:?}"
        );
        // Row 5 alone: its tie goes to class 1, not its target 4.
        let row5 = SoftmaxScore {
            bias: bias.narrow(0, 0, 1).unwrap(),
            targets: targets.narrow(0, 5, 1).unwrap(),
            scale: 1.0,
        };
        let alone = z.narrow(0, 5, 1).unwrap().apply_op1_no_bwd(&row5).unwrap();
        assert_eq!(
            alone.to_vec1::<f32>().unwrap()[1],
            0.0,
            "a tie counts its first class"
        );
    }

    #[test]
    fn mismatched_inputs_are_an_error_not_a_panic() {
        let cpu = Device::Cpu;
        let op = SoftmaxLoss {
            bias: Tensor::zeros((2, 4), DType::F32, &cpu).unwrap(),
            targets: Tensor::zeros(6, DType::U32, &cpu).unwrap(),
            weights: Tensor::zeros(5, DType::F32, &cpu).unwrap(),
            own: None,
            losses: Tensor::zeros(2, DType::F32, &cpu).unwrap(),
        };
        let z = Tensor::zeros((6, 4), DType::F32, &cpu).unwrap();
        let err = z.apply_op1_no_bwd(&op).unwrap_err().to_string();
        assert!(err.contains("do not fit"), "{err}");
        let op = SoftmaxLoss {
            weights: Tensor::zeros(6, DType::F32, &cpu).unwrap(),
            targets: Tensor::new(&[0u32, 1, 2, 3, 4, 0], &cpu).unwrap(),
            ..op
        };
        let err = z.apply_op1_no_bwd(&op).unwrap_err().to_string();
        assert!(err.contains("class 4 of 4"), "{err}");
        // The validation op: 6 logits rows are not 2 members of 4 rows, and a class too far.
        let score = SoftmaxScore {
            bias: Tensor::zeros((2, 4), DType::F32, &cpu).unwrap(),
            targets: Tensor::zeros(4, DType::U32, &cpu).unwrap(),
            scale: 1.0,
        };
        let err = z.apply_op1_no_bwd(&score).unwrap_err().to_string();
        assert!(
            err.contains("softmax-score") && err.contains("do not fit"),
            "{err}"
        );
        let score = SoftmaxScore {
            targets: Tensor::new(&[0u32, 1, 4], &cpu).unwrap(),
            ..score
        };
        let err = z.apply_op1_no_bwd(&score).unwrap_err().to_string();
        assert!(err.contains("row 2's class 4 of 4"), "{err}");
    }
}
