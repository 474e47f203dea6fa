//! A fused pack's optimizer update as one custom op: each weight's new value and optimizer
//! state in one pass over it (one kernel on a GPU), where the same update written with
//! tensor operations takes ~15 passes for AdamW and ~6 for SGD, each a kernel launch and a
//! trip through memory. Each member's coefficients are its own; the arithmetic is
//! [`crate::Optimizer::step`]'s, the same f32 operations in the same order (no fused
//! multiply-adds: the CUDA kernel is compiled with `--fmad=false`), so a member's update is
//! what it would be alone, bit for bit on CPU.

use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Storage, Tensor};

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

/// One update of a stacked weight `p` `(K, ...)` from its gradient `g`, with its optimizer
/// `state` `(slots, K, ...)` (slot 0 SGD's momentum or AdamW's m, slot 1 AdamW's v), all
/// contiguous f32. Gives `(1 + slots, K, ...)`: the new weight, then the new state.
pub(crate) struct FusedStep {
    /// `(K, column::COUNT)`: each member's coefficients for this update.
    pub coefficients: Tensor,
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

/// Where a tensor's elements lie in its storage, which the op reads as one run, or an error
/// naming `what`.
fn contiguous(layout: &Layout, what: &str) -> candle_core::Result<std::ops::Range<usize>> {
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(start..end),
        None => candle_core::bail!("fused-step: {what} is not contiguous"),
    }
}

impl FusedStep {
    /// `(numel, per member, slots)` of a weight laid out as `p` with state `s`, checked.
    fn sizes(
        &self,
        p: &Layout,
        g: &Layout,
        s: &Layout,
    ) -> candle_core::Result<(usize, usize, usize)> {
        let numel = p.shape().elem_count();
        let members = p.dims().first().copied().unwrap_or(0);
        let slots = s.dims().first().copied().unwrap_or(0);
        if g.shape() != p.shape()
            || members == 0
            || !(1..=2).contains(&slots)
            || s.shape().elem_count() != slots * numel
            || self.coefficients.dims() != [members, column::COUNT]
        {
            candle_core::bail!(
                "fused-step: weight {:?}, gradient {:?}, state {:?}, coefficients {:?} do not fit",
                p.dims(),
                g.dims(),
                s.dims(),
                self.coefficients.dims()
            );
        }
        Ok((numel, numel / members, slots))
    }

    fn out_shape(p: &Layout, slots: usize) -> Shape {
        let mut dims = vec![1 + slots];
        dims.extend_from_slice(p.dims());
        Shape::from(dims)
    }
}

impl CustomOp3 for FusedStep {
    fn name(&self) -> &'static str {
        "fused-step"
    }

    fn cpu_fwd(
        &self,
        p: &CpuStorage,
        pl: &Layout,
        g: &CpuStorage,
        gl: &Layout,
        s: &CpuStorage,
        sl: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (numel, per, slots) = self.sizes(pl, gl, sl)?;
        let p = &p.as_slice::<f32>()?[contiguous(pl, "the weight")?];
        let g = &g.as_slice::<f32>()?[contiguous(gl, "the gradient")?];
        let s = &s.as_slice::<f32>()?[contiguous(sl, "the optimizer state")?];
        let (storage, layout) = self.coefficients.storage_and_layout();
        let Storage::Cpu(coefficients) = &*storage else {
            candle_core::bail!("fused-step: coefficients on another device than the weight");
        };
        let coefficients = &coefficients.as_slice::<f32>()?[contiguous(layout, "coefficients")?];
        let mut out = vec![0f32; (1 + slots) * numel];
        let (new_p, new_s) = out.split_at_mut(numel);
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
        Ok((CpuStorage::F32(out), Self::out_shape(pl, slots)))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        p: &candle_core::CudaStorage,
        pl: &Layout,
        g: &candle_core::CudaStorage,
        gl: &Layout,
        s: &candle_core::CudaStorage,
        sl: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        use candle_core::cuda_backend::cudarc::driver::{CudaView, LaunchConfig, PushKernelArg};
        use candle_core::cuda_backend::WrapErr;

        let (numel, per, slots) = self.sizes(pl, gl, sl)?;
        fn view<'a>(
            t: &'a candle_core::CudaStorage,
            l: &Layout,
            what: &str,
        ) -> candle_core::Result<CudaView<'a, f32>> {
            Ok(t.as_cuda_slice::<f32>()?.slice(contiguous(l, what)?))
        }
        let device = p.device.clone();
        let (pv, gv, sv) = (
            view(p, pl, "the weight")?,
            view(g, gl, "the gradient")?,
            view(s, sl, "the optimizer state")?,
        );
        let (storage, layout) = self.coefficients.storage_and_layout();
        let Storage::Cuda(coefficients) = &*storage else {
            candle_core::bail!("fused-step: coefficients on another device than the weight");
        };
        let cv = view(coefficients, layout, "coefficients")?;
        let func = device.get_or_load_custom_func("fused_step_f32", "tune_fused_step", PTX)?;
        // SAFETY: the kernel writes every element of `out`.
        let out = unsafe { device.alloc::<f32>((1 + slots) * numel)? };
        let (numel_arg, per_arg) = (numel as u64, per as u64);
        let (slots_arg, decay, nesterov) = (
            slots as u32,
            u32::from(self.decay),
            u32::from(self.nesterov),
        );
        let mut builder = func.builder();
        builder
            .arg(&numel_arg)
            .arg(&per_arg)
            .arg(&slots_arg)
            .arg(&decay)
            .arg(&nesterov)
            .arg(&pv)
            .arg(&gv)
            .arg(&sv)
            .arg(&cv)
            .arg(&out);
        let blocks = numel.div_ceil(256).min(65_535) as u32;
        let config = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the arguments match the kernel's signature in fused_step.cu.
        unsafe { builder.launch(config) }.w()?;
        Ok((
            candle_core::CudaStorage::wrap_cuda_slice(out, device),
            Self::out_shape(pl, slots),
        ))
    }
}

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
                let op = FusedStep {
                    coefficients,
                    decay,
                    nesterov,
                };
                let out = p.apply_op3_no_bwd(&g, &s, &op).unwrap();
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
        let p = Tensor::zeros((2, 3), DType::F32, &cpu).unwrap();
        let g = Tensor::zeros((2, 4), DType::F32, &cpu).unwrap();
        let s = Tensor::zeros((1, 2, 3), DType::F32, &cpu).unwrap();
        let coefficients = Tensor::zeros((2, column::COUNT), DType::F32, &cpu).unwrap();
        let op = FusedStep {
            coefficients,
            decay: false,
            nesterov: false,
        };
        let err = p.apply_op3_no_bwd(&g, &s, &op).unwrap_err().to_string();
        assert!(err.contains("do not fit"), "{err}");
    }
}
