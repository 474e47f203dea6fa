//! A fused pack's optimizer update as one custom op: each weight's new value and optimizer
//! state in one pass over it, every weight of the pack in one kernel launch on a GPU, where
//! the same update written with tensor operations takes ~15 passes per weight for AdamW and
//! ~6 for SGD, each a kernel launch and a trip through memory. Each member's coefficients
//! are its own; the arithmetic is
//! [`crate::Optimizer::step`]'s, the same f32 operations in the same order (no fused
//! multiply-adds: the CUDA kernel is compiled with `--fmad=false`), so a member's update is
//! what it would be alone, bit for bit on CPU.

use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Storage, Tensor};

/// The columns of [`FusedStep::coefficients`], one row per member. Kept in step with
/// `fused_step.cu`.
pub(crate) mod column {
    /// 1 for an AdamW member, 0 for SGD.
    pub const ADAMW: usize = 0;
    /// 1 where the member takes this update; 0 keeps its weight and state as they are.
    pub const ACTIVE: usize = 1;
    /// SGD's weight decay.
    pub const WEIGHT_DECAY: usize = 2;
    /// AdamW's beta1; SGD's momentum.
    pub const BETA1: usize = 3;
    /// `1 - beta1`.
    pub const REST1: usize = 4;
    pub const BETA2: usize = 5;
    /// `1 - beta2`.
    pub const REST2: usize = 6;
    pub const EPS: usize = 7;
    /// AdamW's `1 - lr * weight_decay`.
    pub const DECAYED: usize = 8;
    /// AdamW's `1 / sqrt(1 - beta2^t)`.
    pub const UNBIAS2: usize = 9;
    /// AdamW's `lr / (1 - beta1^t)`; SGD's `lr`.
    pub const STEP: usize = 10;
    pub const COUNT: usize = 11;
}

/// One update of every stacked weight of a pack at once, applied to the members'
/// coefficients `(K, column::COUNT)`: weight `j`, `weights[j]` `(K, ...)`, from its gradient
/// `grads[j]` with its optimizer state `states[j]` `(slots, K, ...)` (slot 0 SGD's momentum
/// or AdamW's m, slot 1 AdamW's v), all contiguous f32. Gives one flat tensor: for each
/// weight in turn, its new value and then its new state ([`FusedStep::split`] takes them
/// apart). One kernel launch for the whole pack rather than one per weight.
pub(crate) struct FusedStep<'a> {
    pub weights: &'a [Tensor],
    pub grads: &'a [Tensor],
    pub states: &'a [Tensor],
    /// Whether any SGD member decays its weights (the unfused SGD adds `p * weight_decay` to
    /// the gradient only then).
    pub decay: bool,
    pub nesterov: bool,
}

#[cfg(feature = "cuda")]
const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/fused_step.ptx"));

/// Element `e`'s new weight and state, given its member's coefficients `c`:
/// [`crate::Optimizer::step`]'s operations, in its order.
#[inline]
fn update(c: &[f32], decay: bool, nesterov: bool, p: f32, g: f32, s: [f32; 2]) -> [f32; 3] {
    use column::*;
    if c[ACTIVE] == 0.0 {
        return [p, s[0], s[1]];
    }
    if c[ADAMW] != 0.0 {
        let kept = p * c[DECAYED];
        let m = s[0] * c[BETA1] + g * c[REST1];
        let v = s[1] * c[BETA2] + (g * g) * c[REST2];
        let denom = v.sqrt() * c[UNBIAS2] + c[EPS];
        [kept - (m / denom) * c[STEP], m, v]
    } else {
        let g = if decay { g + p * c[WEIGHT_DECAY] } else { g };
        let buf = s[0] * c[BETA1] + g;
        let update = if nesterov { g + buf * c[BETA1] } else { buf };
        [p - update * c[STEP], buf, s[1]]
    }
}

/// Where a tensor's elements lie in its storage, which a pack's custom op (named `op`) reads
/// as one run, or an error naming `what`.
pub(crate) fn contiguous_run(
    op: &str,
    layout: &Layout,
    what: &str,
) -> candle_core::Result<std::ops::Range<usize>> {
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(start..end),
        None => candle_core::bail!("{op}: {what} is not contiguous"),
    }
}

fn contiguous(layout: &Layout, what: &str) -> candle_core::Result<std::ops::Range<usize>> {
    contiguous_run("fused-step", layout, what)
}

/// Weight `j`'s place in the op: its elements, elements per member, optimizer slots, and
/// where its new value starts in the output.
#[derive(Clone, Copy)]
struct Part {
    numel: usize,
    per: usize,
    slots: usize,
    at: usize,
}

impl FusedStep<'_> {
    /// Each weight's [`Part`], checked against its gradient, state and the coefficients
    /// `(K, COUNT)`, and the output's length.
    fn parts(&self, coefficients: &Layout) -> candle_core::Result<(Vec<Part>, usize)> {
        let members = coefficients.dims().first().copied().unwrap_or(0);
        if coefficients.dims() != [members, column::COUNT]
            || self.grads.len() != self.weights.len()
            || self.states.len() != self.weights.len()
        {
            candle_core::bail!(
                "fused-step: {} weights, {} gradients, {} states, coefficients {:?} do not fit",
                self.weights.len(),
                self.grads.len(),
                self.states.len(),
                coefficients.dims()
            );
        }
        let mut at = 0;
        let mut parts = Vec::with_capacity(self.weights.len());
        for ((p, g), s) in self.weights.iter().zip(self.grads).zip(self.states) {
            let numel = p.elem_count();
            let slots = s.dims().first().copied().unwrap_or(0);
            if g.shape() != p.shape()
                || p.dims().first() != Some(&members)
                || members == 0
                || !(1..=2).contains(&slots)
                || s.elem_count() != slots * numel
            {
                candle_core::bail!(
                    "fused-step: weight {:?}, gradient {:?}, state {:?}, coefficients {:?} do not fit",
                    p.dims(),
                    g.dims(),
                    s.dims(),
                    coefficients.dims()
                );
            }
            parts.push(Part {
                numel,
                per: numel / members,
                slots,
                at,
            });
            at += (1 + slots) * numel;
        }
        Ok((parts, at))
    }

    /// The op's output taken apart: each weight's new value and new state, in the shapes of
    /// `weights` and `states` (views of the one output: nothing is copied).
    pub fn split(
        out: &Tensor,
        weights: &[Tensor],
        states: &[Tensor],
    ) -> candle_core::Result<(Vec<Tensor>, Vec<Tensor>)> {
        let mut at = 0;
        let mut new_weights = Vec::with_capacity(weights.len());
        let mut new_states = Vec::with_capacity(states.len());
        for (p, s) in weights.iter().zip(states) {
            let (numel, state) = (p.elem_count(), s.elem_count());
            new_weights.push(out.narrow(0, at, numel)?.reshape(p.shape())?);
            new_states.push(out.narrow(0, at + numel, state)?.reshape(s.shape())?);
            at += numel + state;
        }
        Ok((new_weights, new_states))
    }
}

impl CustomOp1 for FusedStep<'_> {
    fn name(&self) -> &'static str {
        "fused-step"
    }

    fn cpu_fwd(&self, c: &CpuStorage, cl: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (parts, total) = self.parts(cl)?;
        let coefficients = &c.as_slice::<f32>()?[contiguous(cl, "coefficients")?];
        let mut out = vec![0f32; total];
        for (j, part) in parts.iter().enumerate() {
            let held =
                [&self.weights[j], &self.grads[j], &self.states[j]].map(Tensor::storage_and_layout);
            let mut read = Vec::with_capacity(3);
            for ((storage, layout), what) in
                held.iter()
                    .zip(["the weight", "the gradient", "the optimizer state"])
            {
                let Storage::Cpu(s) = &**storage else {
                    candle_core::bail!(
                        "fused-step: {what} on another device than the coefficients"
                    );
                };
                read.push(&s.as_slice::<f32>()?[contiguous(layout, what)?]);
            }
            let (p, g, s) = (read[0], read[1], read[2]);
            let Part {
                numel,
                per,
                slots,
                at,
            } = *part;
            let (new_p, new_s) = out[at..at + (1 + slots) * numel].split_at_mut(numel);
            // Member by member, so that the coefficients and the branches on them stay put
            // through each member's elements.
            for (k, c) in coefficients.chunks_exact(column::COUNT).enumerate() {
                for e in k * per..(k + 1) * per {
                    let state = [s[e], if slots > 1 { s[numel + e] } else { 0.0 }];
                    let [np, s0, s1] = update(c, self.decay, self.nesterov, p[e], g[e], state);
                    new_p[e] = np;
                    new_s[e] = s0;
                    if slots > 1 {
                        new_s[numel + e] = s1;
                    }
                }
            }
        }
        Ok((CpuStorage::F32(out), Shape::from(total)))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        c: &candle_core::CudaStorage,
        cl: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
        use candle_core::cuda_backend::WrapErr;

        let (parts, total) = self.parts(cl)?;
        let device = c.device.clone();
        let stream = device.cuda_stream();
        let cv = c
            .as_cuda_slice::<f32>()?
            .slice(contiguous(cl, "coefficients")?);
        let held = [self.weights, self.grads, self.states].map(|ts| {
            ts.iter()
                .map(Tensor::storage_and_layout)
                .collect::<Vec<_>>()
        });
        let views = cuda_views(&held)?;
        let func =
            crate::cuda_kernel::Kernel::load(&device, "fused_step_f32", "tune_fused_step", PTX)?;
        // SAFETY: the kernel writes every element of `out`.
        let out = unsafe { device.alloc::<f32>(total)? };
        let (decay, nesterov) = (u32::from(self.decay), u32::from(self.nesterov));
        for first in (0..parts.len()).step_by(MAX_TENSORS) {
            let chunk = &parts[first..parts.len().min(first + MAX_TENSORS)];
            // The pointers' guards live until the launch is queued.
            let (tensors, guards) = Tensors::of(chunk, &views, first, &stream);
            let largest = chunk.iter().map(|p| p.numel).max().unwrap_or(0);
            let count = chunk.len() as u32;
            let mut builder = func.builder();
            builder
                .arg(&count)
                .arg(&decay)
                .arg(&nesterov)
                .arg(&tensors)
                .arg(&cv)
                .arg(&out);
            let config = LaunchConfig {
                grid_dim: (largest.div_ceil(256).clamp(1, 4_096) as u32, count, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: the arguments match the kernel's signature in fused_step.cu.
            unsafe { builder.launch(config) }.w()?;
            drop(guards);
        }
        Ok((
            candle_core::CudaStorage::wrap_cuda_slice(out, device),
            Shape::from(total),
        ))
    }
}

/// The weights, gradients and optimizer states as the kernel reads them: one list of views
/// of each kind, in the op's order; refused where one is not on the GPU.
#[cfg(feature = "cuda")]
fn cuda_views<'a>(
    held: &'a [Vec<(candle_core::StorageRef<'_>, &Layout)>; 3],
) -> candle_core::Result<Vec<Vec<candle_core::cuda_backend::cudarc::driver::CudaView<'a, f32>>>> {
    let mut views = Vec::with_capacity(3);
    for (kind, what) in held
        .iter()
        .zip(["a weight", "a gradient", "an optimizer state"])
    {
        let mut of_kind = Vec::with_capacity(kind.len());
        for (storage, layout) in kind {
            let Storage::Cuda(s) = &**storage else {
                candle_core::bail!("fused-step: {what} on another device than the coefficients");
            };
            of_kind.push(s.as_cuda_slice::<f32>()?.slice(contiguous(layout, what)?));
        }
        views.push(of_kind);
    }
    Ok(views)
}

/// The kernel's `Tensors` (fused_step.cu): a launch's weights, by value.
#[cfg(feature = "cuda")]
#[repr(C)]
#[derive(Clone, Copy)]
struct Tensors {
    p: [u64; MAX_TENSORS],
    g: [u64; MAX_TENSORS],
    s: [u64; MAX_TENSORS],
    numel: [u64; MAX_TENSORS],
    per: [u64; MAX_TENSORS],
    at: [u64; MAX_TENSORS],
    slots: [u32; MAX_TENSORS],
}

// SAFETY: plain old data, laid out as the kernel's struct.
#[cfg(feature = "cuda")]
unsafe impl candle_core::cuda_backend::cudarc::driver::DeviceRepr for Tensors {}

#[cfg(feature = "cuda")]
impl Tensors {
    /// One launch's weights: parts `first..first + chunk.len()` of the op, with the guards
    /// that keep their device pointers valid until the launch is queued.
    fn of<'a>(
        chunk: &[Part],
        views: &'a [Vec<candle_core::cuda_backend::cudarc::driver::CudaView<'_, f32>>],
        first: usize,
        stream: &'a std::sync::Arc<candle_core::cuda_backend::cudarc::driver::CudaStream>,
    ) -> (
        Self,
        Vec<candle_core::cuda_backend::cudarc::driver::SyncOnDrop<'a>>,
    ) {
        use candle_core::cuda_backend::cudarc::driver::DevicePtr;
        let mut tensors = Tensors {
            p: [0; MAX_TENSORS],
            g: [0; MAX_TENSORS],
            s: [0; MAX_TENSORS],
            numel: [0; MAX_TENSORS],
            per: [0; MAX_TENSORS],
            at: [0; MAX_TENSORS],
            slots: [0; MAX_TENSORS],
        };
        let mut guards = Vec::with_capacity(3 * chunk.len());
        for (i, part) in chunk.iter().enumerate() {
            let j = first + i;
            let (p, gp) = views[0][j].device_ptr(stream);
            let (g, gg) = views[1][j].device_ptr(stream);
            let (s, gs) = views[2][j].device_ptr(stream);
            guards.extend([gp, gg, gs]);
            tensors.p[i] = p;
            tensors.g[i] = g;
            tensors.s[i] = s;
            tensors.numel[i] = part.numel as u64;
            tensors.per[i] = part.per as u64;
            tensors.at[i] = part.at as u64;
            tensors.slots[i] = part.slots as u32;
        }
        (tensors, guards)
    }
}

/// Weights per launch: `MAX_TENSORS` in fused_step.cu (a pack has 2 per dense layer and 4
/// for a cnn's convolutions; more take another launch).
#[cfg(feature = "cuda")]
const MAX_TENSORS: usize = 32;

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    /// A value of each kind an update meets: signs, zero, small and large magnitudes.
    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let x = ((i as u32).wrapping_mul(2_654_435_761) ^ seed) as f32 / u32::MAX as f32;
                (x - 0.5) * if i % 7 == 0 { 100.0 } else { 1.0 }
            })
            .collect()
    }

    /// What the unfused optimizer does to one member, written with tensor operations as
    /// [`crate::Optimizer::step`] writes it: the op must agree with it bit for bit.
    fn composed(
        c: &[f32],
        decay: bool,
        nesterov: bool,
        p: &Tensor,
        g: &Tensor,
        s: &[Tensor],
    ) -> Vec<Tensor> {
        use column::*;
        let mul = |t: &Tensor, x: f32| t.affine(x as f64, 0.0).unwrap();
        if c[ACTIVE] == 0.0 {
            return [p.clone()].into_iter().chain(s.iter().cloned()).collect();
        }
        if c[ADAMW] != 0.0 {
            let kept = mul(p, c[DECAYED]);
            let m = (mul(&s[0], c[BETA1]) + mul(g, c[REST1])).unwrap();
            let v = (mul(&s[1], c[BETA2]) + mul(&g.sqr().unwrap(), c[REST2])).unwrap();
            let denom = v
                .sqrt()
                .unwrap()
                .affine(c[UNBIAS2] as f64, c[EPS] as f64)
                .unwrap();
            let update = mul(&m.div(&denom).unwrap(), c[STEP]);
            vec![(kept - update).unwrap(), m, v]
        } else {
            let g = if decay {
                (g + mul(p, c[WEIGHT_DECAY])).unwrap()
            } else {
                g.clone()
            };
            let buf = (mul(&s[0], c[BETA1]) + &g).unwrap();
            let update = if nesterov {
                (g + mul(&buf, c[BETA1])).unwrap()
            } else {
                buf.clone()
            };
            let mut out = vec![(p - mul(&update, c[STEP])).unwrap(), buf];
            out.extend(s.get(1).cloned());
            out
        }
    }

    /// Three members (AdamW, SGD, SGD sitting the update out) of a pack of both, and a
    /// pack of SGD alone: each member's slice of the op's result is the composed update's.
    #[test]
    fn each_members_update_is_the_unfused_one_bit_for_bit() {
        use column::*;
        let cpu = Device::Cpu;
        let row = |adamw: f32, active: f32| -> [f32; COUNT] {
            let mut c = [0f32; COUNT];
            c[ADAMW] = adamw;
            c[ACTIVE] = active;
            c[WEIGHT_DECAY] = 0.01;
            c[BETA1] = if adamw > 0.0 { 0.9 } else { 0.8 };
            c[REST1] = 0.1;
            c[BETA2] = 0.999;
            c[REST2] = 1.0 - 0.999;
            c[EPS] = 1e-8;
            c[DECAYED] = 1.0 - 0.003 * 0.05;
            c[UNBIAS2] = 1.0 / (1.0f32 - 0.999 * 0.999).sqrt();
            c[STEP] = 0.003;
            c
        };
        for (rows, slots) in [
            (vec![row(1.0, 1.0), row(0.0, 1.0), row(0.0, 0.0)], 2),
            (vec![row(0.0, 1.0), row(0.0, 1.0)], 1),
        ] {
            for (decay, nesterov) in [(true, false), (false, true)] {
                let k = rows.len();
                let shape = (k, 3, 5);
                let numel = k * 15;
                let p = Tensor::from_vec(values(numel, 1), shape, &cpu).unwrap();
                let g = Tensor::from_vec(values(numel, 2), shape, &cpu).unwrap();
                let mut s = values(slots * numel, 3);
                s.iter_mut().skip(numel).for_each(|v| *v = v.abs()); // v >= 0
                let s = Tensor::from_vec(s, (slots, k, 3, 5), &cpu).unwrap();
                let coefficients = Tensor::from_vec(rows.concat(), (k, COUNT), &cpu).unwrap();
                // The weight twice over, as a pack of two weights: each its own part.
                let (ps, gs, ss) = (
                    [p.clone(), p.clone()],
                    [(&g * 0.5).unwrap(), g.clone()],
                    [s.clone(), s.clone()],
                );
                let op = FusedStep {
                    weights: &ps,
                    grads: &gs,
                    states: &ss,
                    decay,
                    nesterov,
                };
                let flat = coefficients.apply_op1_no_bwd(&op).unwrap();
                let (new_p, new_s) = FusedStep::split(&flat, &ps, &ss).unwrap();
                assert_eq!(new_p[1].dims(), [k, 3, 5]);
                assert_eq!(new_s[1].dims(), [slots, k, 3, 5]);
                let half = composed(
                    &rows[0],
                    decay,
                    nesterov,
                    &p.get(0).unwrap(),
                    &(&g * 0.5).unwrap().get(0).unwrap(),
                    &(0..slots)
                        .map(|j| s.get(j).unwrap().get(0).unwrap())
                        .collect::<Vec<_>>(),
                );
                assert_eq!(
                    new_p[0]
                        .get(0)
                        .unwrap()
                        .flatten_all()
                        .unwrap()
                        .to_vec1::<f32>()
                        .unwrap(),
                    half[0].flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                    "the first weight is updated from its own gradient"
                );
                let out =
                    Tensor::cat(&[new_p[1].unsqueeze(0).unwrap(), new_s[1].clone()], 0).unwrap();
                assert_eq!(out.dims(), [1 + slots, k, 3, 5]);
                for (m, c) in rows.iter().enumerate() {
                    let at = |t: &Tensor| t.get(m).unwrap();
                    let state: Vec<Tensor> = (0..slots).map(|j| at(&s.get(j).unwrap())).collect();
                    let want = composed(c, decay, nesterov, &at(&p), &at(&g), &state);
                    for (j, want) in want.iter().enumerate() {
                        let got = out.get(j).unwrap().get(m).unwrap();
                        let (got, want) = (got.flatten_all().unwrap(), want.flatten_all().unwrap());
                        assert_eq!(
                            got.to_dtype(DType::F32).unwrap().to_vec1::<f32>().unwrap(),
                            want.to_vec1::<f32>().unwrap(),
                            "member {m} (adamw {}, active {}), output {j}, decay {decay}, nesterov {nesterov}",
                            c[ADAMW],
                            c[ACTIVE]
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn mismatched_shapes_are_an_error_not_a_panic() {
        let cpu = Device::Cpu;
        let p = [Tensor::zeros((2, 3), DType::F32, &cpu).unwrap()];
        let g = [Tensor::zeros((2, 4), DType::F32, &cpu).unwrap()];
        let s = [Tensor::zeros((1, 2, 3), DType::F32, &cpu).unwrap()];
        let coefficients = Tensor::zeros((2, column::COUNT), DType::F32, &cpu).unwrap();
        let op = FusedStep {
            weights: &p,
            grads: &g,
            states: &s,
            decay: false,
            nesterov: false,
        };
        let err = coefficients.apply_op1_no_bwd(&op).unwrap_err().to_string();
        assert!(err.contains("do not fit"), "{err}");
        let op = FusedStep { grads: &[], ..op };
        let err = coefficients.apply_op1_no_bwd(&op).unwrap_err().to_string();
        assert!(err.contains("1 weights, 0 gradients"), "{err}");
    }
}
