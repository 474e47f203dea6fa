//! Tensors of all members stacked on a leading dimension: masks, views, padding, copies.

use super::*;

/// A `(K, 1, 1)` mask on `device`: 1 where `f` holds for member `k`'s item.
pub(super) fn per_member<T>(
    items: &[T],
    f: impl Fn(&T) -> bool,
    device: &Device,
) -> candle_core::Result<Tensor> {
    let values: Vec<u8> = items.iter().map(|i| u8::from(f(i))).collect();
    Tensor::from_vec(values, (items.len(), 1, 1), device)
}

/// One member's weight as the pack stacks it: a bias `(out)` as `(1, out)`, a kernel
/// `(out, in, 3, 3)` as `(out, in * 9)`.
pub(super) fn as_stacked(w: &Tensor) -> candle_core::Result<Tensor> {
    match w.rank() {
        1 => w.unsqueeze(0),
        2 => Ok(w.clone()),
        _ => w.flatten_from(1),
    }
}

/// Member `k`'s part of a stacked weight or optimizer slot `(K, ...)`, a view `(1, own...)`:
/// its own dims `own` of the pack's (padded) ones.
pub(super) fn member_view(
    stacked: &Tensor,
    k: usize,
    own: &[usize],
) -> candle_core::Result<Tensor> {
    let mut t = stacked.narrow(0, k, 1)?;
    for (d, &n) in own.iter().enumerate() {
        t = t.narrow(d + 1, 0, n)?;
    }
    Ok(t)
}

/// [`FusedTrainer::validation`]'s losses and hits, read back: each member's mean
/// cross-entropy and accuracy.
pub(super) fn read_validation(
    (scored, n): (Tensor, usize),
) -> Result<Vec<(f64, f64)>, TrialsError> {
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
pub(super) fn copy_slice(view: &Tensor, shape: &Shape) -> candle_core::Result<Tensor> {
    view.force_contiguous()?.reshape(shape)
}

/// Checks that `members` may train in one pack: the same [`FuseKey`], the same split, none
/// finished.
pub(super) fn check_members(members: &[Trainer]) -> Result<(), TrialsError> {
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
pub(super) fn pad_to(w: &Tensor, shape: &[usize]) -> candle_core::Result<Tensor> {
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
pub(super) fn fused_conv3x3(x: &Tensor, w: &Tensor, b: &Tensor) -> candle_core::Result<Tensor> {
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
pub(super) fn gradient(grads: &GradStore, var: &Var, j: usize) -> Result<Tensor, TrialsError> {
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
pub(super) fn with_layouts_cached<T>(device: &Device, f: impl FnOnce() -> T) -> T {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(cuda) => {
            let _kept = cuda.enable_cuda_graph_htod_cache();
            f()
        }
        _ => f(),
    }
}

pub(super) fn same_values(a: &Tensor, b: &Tensor) -> Result<bool, TrialsError> {
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
