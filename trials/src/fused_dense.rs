//! A GPU pack's dense ReLU layers, the elementwise work around their matmuls in one kernel
//! each way. Forward: the bias, the ReLU, the dropout mask and a shallower member's pass
//! through the layer (4 kernels). Backward: the pass-through's split of the gradient, the
//! mask, the ReLU's gradient and the sum with the gradient passed by from the layer above
//! (6). The arithmetic is the tensor operations' (`FusedTrainer::forward` and `backward`
//! otherwise), each element on its own, so it rounds as they do; only a pack that need not
//! be exact (a GPU's) uses these, as it uses [`crate::fused_loss::SoftmaxLoss`].

use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};

#[cfg(feature = "cuda")]
const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/fused_dense.ptx"));

/// Applied to a layer's product `x @ w^T` `(K, rows, width)`: `(2, K, rows, width)`, its
/// pre-activation `z` (the product plus the bias) and its output: `relu(z) * mask`, or the
/// layer's `input` for a member without the layer.
pub(crate) struct DenseForward {
    /// `(K, 1, width)`.
    pub bias: Tensor,
    /// `(K, rows, width)`: the dropout mask (scaled), if any.
    pub mask: Option<Tensor>,
    /// `(K, 1, 1)` u8: whether each member has the layer; `None` where all do.
    pub has: Option<Tensor>,
    /// `(K, rows, width)`: the layer's input, which a member without it passes on. Read only
    /// with `has`.
    pub input: Tensor,
}

/// Applied to the gradient at a layer's output from the layer above's input, `(K, rows,
/// width)`: one flat tensor ([`DenseBackward::split`] takes it apart) of the gradient at the
/// layer's pre-activation, with `has` the gradient a member without the layer passes down to
/// the layer's input, and the bias's gradient, `(K, 1, width)`: the pre-activation's summed
/// over each member's rows in the kernel's order ([`tree_sum`] of 16 lanes, each every 16th
/// row), in the same kernel (where a reduction was a kernel of its own per layer and step).
pub(crate) struct DenseBackward {
    /// The gradient passed by the layer above (to be added first), if it passed any.
    pub carried: Option<Tensor>,
    /// The layer's pre-activation.
    pub z: Tensor,
    pub mask: Option<Tensor>,
    pub has: Option<Tensor>,
}

/// Element `e`'s forward: `(z, output)`.
#[inline]
fn forward(product: f32, bias: f32, mask: Option<f32>, has: bool, input: f32) -> (f32, f32) {
    let z = product + bias;
    let a = if z > 0.0 { z } else { 0.0 };
    let out = mask.map_or(a, |m| a * m);
    (z, if has { out } else { input })
}

impl DenseBackward {
    /// The op's output for a gradient of `shape` `(K, rows, width)`: the gradient at the
    /// pre-activation, the gradient passed down (with `has`) and the bias's gradient.
    pub(crate) fn split(
        &self,
        out: &Tensor,
        shape: &Shape,
    ) -> candle_core::Result<(Tensor, Option<Tensor>, Tensor)> {
        let (members, _, width) = shape.dims3()?;
        let numel = shape.elem_count();
        let at_z = out.narrow(0, 0, numel)?.reshape(shape)?;
        let passed = match self.has {
            Some(_) => Some(out.narrow(0, numel, numel)?.reshape(shape)?),
            None => None,
        };
        let at = numel * (1 + usize::from(self.has.is_some()));
        let at_bias = out
            .narrow(0, at, members * width)?
            .reshape((members, 1, width))?;
        Ok((at_z, passed, at_bias))
    }
}

/// Columns a block of `dense_backward_f32` takes (`COLUMNS` there).
#[cfg(feature = "cuda")]
const COLUMNS: usize = 32;

/// Threads that walk one column of a layer in `dense_backward_f32` (`LANES` there), each
/// summing every `LANES`-th row in order.
const LANES: usize = 16;

/// `lanes` summed as a block of the kernels sums its threads' values: in halves, lane `l`
/// adding lane `l + half`, until lane 0 holds the sum.
pub(crate) fn tree_sum(lanes: &mut [f32]) -> f32 {
    let mut half = lanes.len() / 2;
    while half > 0 {
        for l in 0..half {
            lanes[l] += lanes[l + half];
        }
        half /= 2;
    }
    lanes[0]
}

/// Element `e`'s backward: `(at z, passed down)`.
#[inline]
fn backward(at_x: f32, carried: Option<f32>, z: f32, mask: Option<f32>, has: bool) -> (f32, f32) {
    let total = carried.map_or(at_x, |c| c + at_x);
    let at_out = if has { total } else { 0.0 };
    let at_a = mask.map_or(at_out, |m| at_out * m);
    (
        if z >= 0.0 { at_a } else { 0.0 },
        if has { 0.0 } else { total },
    )
}

/// The values of a CPU tensor, row-major.
fn values<T: candle_core::WithDType>(t: &Tensor) -> candle_core::Result<Vec<T>> {
    t.flatten_all()?.to_vec1::<T>()
}

fn contiguous(layout: &Layout, what: &str) -> candle_core::Result<std::ops::Range<usize>> {
    crate::fused_step::contiguous_run("fused dense layer", layout, what)
}

/// `(K, per member, width)` of a layer laid out as `l` `(K, rows, width)`, with `same`
/// tensors of its shape and a bias and `has` of K members, or an error.
fn sizes(
    l: &Layout,
    same: &[Option<&Tensor>],
    bias: Option<&Tensor>,
    has: Option<&Tensor>,
) -> candle_core::Result<(usize, usize, usize)> {
    let &[members, rows, width] = l.dims() else {
        candle_core::bail!("fused dense layer: {:?} is not (K, rows, width)", l.dims());
    };
    let fits = same.iter().flatten().all(|t| t.dims() == l.dims())
        && bias.is_none_or(|b| b.elem_count() == members * width)
        && has.is_none_or(|h| h.elem_count() == members);
    if !fits || members == 0 {
        candle_core::bail!(
            "fused dense layer: inputs of other shapes than {:?}",
            l.dims()
        );
    }
    Ok((members, rows * width, width))
}

fn out_shape(l: &Layout, outputs: usize) -> Shape {
    let mut dims = vec![outputs];
    dims.extend_from_slice(l.dims());
    Shape::from(dims)
}

impl CustomOp1 for DenseForward {
    fn name(&self) -> &'static str {
        "dense-forward"
    }

    fn cpu_fwd(&self, p: &CpuStorage, pl: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let same = [self.mask.as_ref(), self.has.as_ref().map(|_| &self.input)];
        let (_, per, width) = sizes(pl, &same, Some(&self.bias), self.has.as_ref())?;
        let p = &p.as_slice::<f32>()?[contiguous(pl, "the product")?];
        let bias = values::<f32>(&self.bias)?;
        let mask = self.mask.as_ref().map(values::<f32>).transpose()?;
        let has = self.has.as_ref().map(values::<u8>).transpose()?;
        let input = match has {
            Some(_) => values::<f32>(&self.input)?,
            None => Vec::new(),
        };
        let numel = p.len();
        let mut out = vec![0f32; 2 * numel];
        let (zs, outs) = out.split_at_mut(numel);
        for e in 0..numel {
            let k = e / per;
            let (z, o) = forward(
                p[e],
                bias[k * width + e % width],
                mask.as_ref().map(|m| m[e]),
                has.as_ref().is_none_or(|h| h[k] != 0),
                input.get(e).copied().unwrap_or(0.0),
            );
            (zs[e], outs[e]) = (z, o);
        }
        Ok((CpuStorage::F32(out), out_shape(pl, 2)))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        p: &candle_core::CudaStorage,
        pl: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let same = [self.mask.as_ref(), self.has.as_ref().map(|_| &self.input)];
        let (_, per, width) = sizes(pl, &same, Some(&self.bias), self.has.as_ref())?;
        let numel = pl.shape().elem_count();
        let out = cuda::launch(
            "dense_forward_f32",
            (p, pl),
            &[
                Some(&self.bias),
                self.mask.as_ref(),
                self.has.as_ref(),
                Some(&self.input),
            ],
            [numel as u64, per as u64, width as u64],
            (numel.div_ceil(256), 256),
            2 * numel,
        )?;
        Ok((out, out_shape(pl, 2)))
    }
}

impl CustomOp1 for DenseBackward {
    fn name(&self) -> &'static str {
        "dense-backward"
    }

    fn cpu_fwd(&self, g: &CpuStorage, gl: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let same = [self.carried.as_ref(), Some(&self.z), self.mask.as_ref()];
        let (members, per, width) = sizes(gl, &same, None, self.has.as_ref())?;
        let at_x = &g.as_slice::<f32>()?[contiguous(gl, "the gradient")?];
        let carried = self.carried.as_ref().map(values::<f32>).transpose()?;
        let z = values::<f32>(&self.z)?;
        let mask = self.mask.as_ref().map(values::<f32>).transpose()?;
        let has = self.has.as_ref().map(values::<u8>).transpose()?;
        let numel = at_x.len();
        let outputs = 1 + usize::from(has.is_some());
        let mut out = vec![0f32; outputs * numel + members * width];
        for c in 0..members * width {
            let k = c / width;
            let mut lanes = [0f32; LANES];
            for (r, e) in (k * per + c % width..(k + 1) * per)
                .step_by(width)
                .enumerate()
            {
                let (at_z, passed) = backward(
                    at_x[e],
                    carried.as_ref().map(|c| c[e]),
                    z[e],
                    mask.as_ref().map(|m| m[e]),
                    has.as_ref().is_none_or(|h| h[k] != 0),
                );
                out[e] = at_z;
                lanes[r % LANES] += at_z;
                if outputs == 2 {
                    out[numel + e] = passed;
                }
            }
            out[outputs * numel + c] = tree_sum(&mut lanes);
        }
        let n = out.len();
        Ok((CpuStorage::F32(out), Shape::from(n)))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        g: &candle_core::CudaStorage,
        gl: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let same = [self.carried.as_ref(), Some(&self.z), self.mask.as_ref()];
        let (members, per, width) = sizes(gl, &same, None, self.has.as_ref())?;
        let numel = gl.shape().elem_count();
        let outputs = 1 + usize::from(self.has.is_some());
        let size = outputs * numel + members * width;
        let out = cuda::launch(
            "dense_backward_f32",
            (g, gl),
            &[
                self.carried.as_ref(),
                Some(&self.z),
                self.mask.as_ref(),
                self.has.as_ref(),
            ],
            [numel as u64, per as u64, width as u64],
            // A block a tile of columns, its threads the tile's lanes.
            ((members * width).div_ceil(COLUMNS), COLUMNS * LANES),
            size,
        )?;
        Ok((out, Shape::from(size)))
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
    use candle_core::cuda_backend::WrapErr;
    use candle_core::{CudaStorage, Layout, Storage, Tensor};

    use super::{contiguous, PTX};

    /// Launches `kernel` of fused_dense.cu over `first` and the optional `rest` (each passed
    /// as a flag and a pointer, a `None` as 0 and `first`'s pointer, which the kernel does
    /// not read), with `sizes` (numel, per member, width), on `(blocks, threads)` (blocks
    /// beyond 65,535 loop), into a new `outputs` floats.
    pub(super) fn launch(
        kernel: &'static str,
        (first, fl): (&CudaStorage, &Layout),
        rest: &[Option<&Tensor>],
        sizes: [u64; 3],
        (blocks, threads): (usize, usize),
        outputs: usize,
    ) -> candle_core::Result<CudaStorage> {
        let device = first.device.clone();
        let first_view = first
            .as_cuda_slice::<f32>()?
            .slice(contiguous(fl, "the input")?);
        let held: Vec<_> = rest
            .iter()
            .map(|t| t.map(Tensor::storage_and_layout))
            .collect();
        let func = crate::cuda_kernel::Kernel::load(&device, kernel, "tune_fused_dense", PTX)?;
        // SAFETY: the kernel writes every element of `out`.
        let out = unsafe { device.alloc::<f32>(outputs)? };
        let mut builder = func.builder();
        for size in &sizes {
            builder.arg(size);
        }
        let flags: Vec<u32> = held.iter().map(|h| u32::from(h.is_some())).collect();
        for flag in &flags {
            builder.arg(flag);
        }
        builder.arg(&first_view);
        let mut f32_views = Vec::new();
        let mut u8_views = Vec::new();
        for h in &held {
            let Some((storage, layout)) = h else { continue };
            let Storage::Cuda(s) = &**storage else {
                candle_core::bail!("fused dense layer: an input on another device");
            };
            let range = contiguous(layout, "an input")?;
            match storage.dtype() {
                candle_core::DType::U8 => u8_views.push(s.as_cuda_slice::<u8>()?.slice(range)),
                _ => f32_views.push(s.as_cuda_slice::<f32>()?.slice(range)),
            }
        }
        // In the kernel's order: the f32 inputs, then the u8 one (`has`), each present or
        // stood in for by `first`.
        let (mut f, mut u) = (f32_views.iter(), u8_views.iter());
        for h in &held {
            match h {
                Some((storage, _)) if storage.dtype() == candle_core::DType::U8 => {
                    builder.arg(u.next().expect("a u8 view per u8 input"));
                }
                Some(_) => {
                    builder.arg(f.next().expect("an f32 view per f32 input"));
                }
                None => {
                    builder.arg(&first_view);
                }
            }
        }
        builder.arg(&out);
        let config = LaunchConfig {
            grid_dim: (blocks.clamp(1, 65_535) as u32, 1, 1),
            block_dim: (threads as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the arguments match the kernels' signatures in fused_dense.cu.
        unsafe { builder.launch(config) }.w()?;
        Ok(CudaStorage::wrap_cuda_slice(out, device))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    fn filled(shape: (usize, usize, usize), seed: usize) -> Tensor {
        let n = shape.0 * shape.1 * shape.2;
        let v: Vec<f32> = (0..n)
            .map(|i| (((i + seed) * 37 % 23) as f32 - 11.0) * 0.3)
            .collect();
        Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
    }

    /// The ops against the tensor operations the pack uses otherwise (forward: `linear`'s
    /// bias, `relu`, the mask, `where_cond`; backward: as `FusedTrainer::backward`), to the
    /// bit: each element is the same operations in the same order.
    #[test]
    fn the_ops_are_the_tensor_operations() {
        let cpu = Device::Cpu;
        let shape = (3, 2, 4);
        let product = filled(shape, 0);
        let bias = filled((3, 1, 4), 5);
        let mask = filled(shape, 9)
            .ge(0.0)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap();
        let mask = (mask * 1.25).unwrap();
        let has = Tensor::new(&[1u8, 0, 1], &cpu)
            .unwrap()
            .reshape((3, 1, 1))
            .unwrap();
        let input = filled(shape, 13);
        let op = DenseForward {
            bias: bias.clone(),
            mask: Some(mask.clone()),
            has: Some(has.clone()),
            input: input.clone(),
        };
        let out = product.apply_op1_no_bwd(&op).unwrap();
        let z = product.broadcast_add(&bias).unwrap();
        let a = z.relu().unwrap().mul(&mask).unwrap();
        let next = has
            .broadcast_as(shape)
            .unwrap()
            .where_cond(&a, &input)
            .unwrap();
        let bits = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(bits(&out.get(0).unwrap()), bits(&z));
        assert_eq!(bits(&out.get(1).unwrap()), bits(&next));

        let at_x = filled(shape, 17);
        let carried = filled(shape, 19);
        let op = DenseBackward {
            carried: Some(carried.clone()),
            z: z.clone(),
            mask: Some(mask.clone()),
            has: Some(has.clone()),
        };
        let out = at_x.apply_op1_no_bwd(&op).unwrap();
        let zero = Tensor::zeros(shape, DType::F32, &cpu).unwrap();
        let total = (&carried + &at_x).unwrap();
        let has = has.broadcast_as(shape).unwrap();
        let at_out = has.where_cond(&total, &zero).unwrap();
        let passed = has.where_cond(&zero, &total).unwrap();
        let at_z = z
            .ge(&zero)
            .unwrap()
            .where_cond(&at_out.mul(&mask).unwrap(), &zero)
            .unwrap();
        let (got_z, got_passed, got_bias) = op.split(&out, at_x.shape()).unwrap();
        assert_eq!(bits(&got_z), bits(&at_z));
        assert_eq!(bits(&got_passed.unwrap()), bits(&passed));
        assert_eq!(bits(&got_bias), bits(&at_z.sum_keepdim(1).unwrap()));
        assert_eq!(got_bias.dims(), [3, 1, 4]);
        {
            // More rows than lanes: the kernel's order, within rounding of `sum_keepdim`.
            let tall = (2, 37, 3);
            let op = DenseBackward {
                carried: None,
                z: filled(tall, 3),
                mask: None,
                has: None,
            };
            let tall_x = (filled(tall, 7) * 0.37).unwrap();
            let out = tall_x.apply_op1_no_bwd(&op).unwrap();
            let (at_z, _, got_bias) = op.split(&out, tall_x.shape()).unwrap();
            let at_z = bits(&at_z);
            for (c, got) in bits(&got_bias).into_iter().enumerate() {
                let (k, u) = (c / 3, c % 3);
                let mut lanes = [0f32; LANES];
                for r in 0..37 {
                    lanes[r % LANES] += at_z[k * 37 * 3 + r * 3 + u];
                }
                assert_eq!(got, tree_sum(&mut lanes), "column {c}");
                let in_order: f32 = (0..37).map(|r| at_z[k * 37 * 3 + r * 3 + u]).sum();
                assert!(
                    (got - in_order).abs() <= 1e-5 * in_order.abs().max(1.0),
                    "column {c}"
                );
            }
        }

        // Without a mask, a pass-through or a carried gradient: the one output.
        let op = DenseBackward {
            carried: None,
            z: z.clone(),
            mask: None,
            has: None,
        };
        let out = at_x.apply_op1_no_bwd(&op).unwrap();
        assert_eq!(out.dims(), [3 * 2 * 4 + 3 * 4]);
        let want = z.ge(&zero).unwrap().where_cond(&at_x, &zero).unwrap();
        let (got_z, got_passed, got_bias) = op.split(&out, at_x.shape()).unwrap();
        assert_eq!(bits(&got_z), bits(&want));
        assert!(got_passed.is_none());
        assert_eq!(bits(&got_bias), bits(&want.sum_keepdim(1).unwrap()));
    }

    #[test]
    fn mismatched_inputs_are_an_error_not_a_panic() {
        let op = DenseForward {
            bias: filled((3, 1, 5), 0),
            mask: None,
            has: None,
            input: filled((3, 2, 4), 0),
        };
        let err = filled((3, 2, 4), 1).apply_op1_no_bwd(&op).unwrap_err();
        assert!(err.to_string().contains("other shapes"), "{err}");
    }
}
