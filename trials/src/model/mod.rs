//! The built-in models. Weights live in candle `Var`s named like PyTorch's state dict
//! (`hidden.0.weight`), initialised from our own seeded stream because Candle's CPU RNG
//! cannot be seeded.

mod cnn;
mod mlp;

use candle_core::{Device, Tensor, Var};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::config::Activation;
use crate::TrialsError;

pub use cnn::Cnn;
pub use mlp::Mlp;

/// A model's trainable tensors, in a fixed order, with their names.
pub type NamedVars = Vec<(String, Var)>;

/// Anything a trainer can fit: a forward pass and its named parameters.
pub trait Model: Send {
    /// Logits of shape `(batch, classes)`. `dropout` is `Some` while training.
    fn forward(&self, x: &Tensor, dropout: Option<&mut Dropout>) -> candle_core::Result<Tensor>;
    fn vars(&self) -> &NamedVars;
}

/// Weight streams: PyTorch's default initialisation (`kaiming_uniform_(a=sqrt(5))` for
/// weights, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for biases), drawn from ChaCha8 in the order
/// layers are built.
pub(crate) struct Init {
    rng: ChaCha8Rng,
    device: Device,
    vars: NamedVars,
}

impl Init {
    pub(crate) fn new(seed: u64, device: &Device) -> Init {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(INIT_STREAM);
        Init {
            rng,
            device: device.clone(),
            vars: Vec::new(),
        }
    }

    /// A weight of `shape` with `fan_in` inputs per output, and its bias of `shape[0]`.
    pub(crate) fn layer(
        &mut self,
        name: &str,
        shape: &[usize],
        fan_in: usize,
    ) -> Result<(Var, Var), TrialsError> {
        let bound = 1.0 / (fan_in as f64).sqrt();
        let w = self.uniform(&format!("{name}.weight"), shape, bound)?;
        let b = self.uniform(&format!("{name}.bias"), &shape[..1], bound)?;
        Ok((w, b))
    }

    fn uniform(&mut self, name: &str, shape: &[usize], bound: f64) -> Result<Var, TrialsError> {
        let n: usize = shape.iter().product();
        let values: Vec<f32> = (0..n)
            .map(|_| self.rng.random_range(-bound..bound) as f32)
            .collect();
        let var = Var::from_tensor(&Tensor::from_vec(values, shape, &self.device)?)?;
        self.vars.push((name.to_string(), var.clone()));
        Ok(var)
    }

    pub(crate) fn finish(self) -> NamedVars {
        self.vars
    }
}

/// Inverted dropout with masks from a seeded stream, so a run is reproducible.
///
/// ```
/// use candle_core::{Device, Tensor};
/// let mut d = tune_trials::Dropout::new(0.5, 7, 0);
/// let x = Tensor::ones((2, 1000), candle_core::DType::F32, &Device::Cpu).unwrap();
/// let y: Vec<Vec<f32>> = d.apply(&x).unwrap().to_vec2().unwrap();
/// let kept = y.iter().flatten().filter(|&&v| v == 2.0).count();
/// assert!(kept > 900 && kept < 1100); // about half, scaled by 1 / (1 - p)
/// ```
pub struct Dropout {
    p: f64,
    /// The draws that keep a unit: those whose top 53 bits reach it ([`keeps`]).
    threshold: u64,
    rng: ChaCha8Rng,
}

/// Where a [`Dropout`]'s next draws come from, in the terms of a counter-based generator:
/// draw `next + i` is ChaCha8's `u64` at words `2 (next + i)` and the one after of `stream`
/// under `key` (`crate::fused_dropout` computes any one of them on its own, on a GPU).
pub(crate) struct DrawCounter {
    pub key: [u32; 8],
    pub stream: u64,
    pub next: u64,
    /// [`keeps`]'s threshold; 0 (`p` 0) keeps all without drawing.
    pub threshold: u64,
    /// What a kept unit is multiplied by.
    pub scale: f32,
}

/// ChaCha8 stream numbers: initialisation, then one dropout and one shuffle stream per epoch.
const INIT_STREAM: u64 = u64::MAX;
pub(crate) const DROPOUT_STREAMS: u64 = 1 << 32;

impl Dropout {
    /// Masks for `epoch` of a trial seeded with `seed`.
    pub fn new(p: f64, seed: u64, epoch: u64) -> Dropout {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(DROPOUT_STREAMS + epoch);
        // `random::<f64>() >= p` is `(u >> 11) * 2^-53 >= p` for the draw `u`, both sides
        // exact, so it is `u >> 11 >= ceil(p * 2^53)`: one integer comparison, which a GPU
        // makes the same way.
        let threshold = (p * (1u64 << 53) as f64).ceil() as u64;
        Dropout { p, threshold, rng }
    }

    pub fn apply(&mut self, x: &Tensor) -> candle_core::Result<Tensor> {
        if self.p == 0.0 {
            return Ok(x.clone());
        }
        let mut keep = Vec::with_capacity(x.elem_count());
        self.extend_keep(&mut keep, x.elem_count());
        let scale = self.scale();
        let mask: Vec<f32> = keep
            .iter()
            .map(|&k| if k == 1 { scale } else { 0.0 })
            .collect();
        x.mul(&Tensor::from_vec(mask, x.shape(), x.device())?.to_dtype(x.dtype())?)
    }

    /// What a kept unit is multiplied by: `1 / (1 - p)`.
    pub(crate) fn scale(&self) -> f32 {
        (1.0 / (1.0 - self.p)) as f32
    }

    /// Appends whether each of the next `n` elements is kept (1) or dropped (0); all kept,
    /// without drawing, when `p` is 0. A fused pack draws its members' masks with it, so
    /// each draws exactly what it would alone.
    pub(crate) fn extend_keep(&mut self, keep: &mut Vec<u8>, n: usize) {
        if self.p == 0.0 {
            keep.resize(keep.len() + n, 1);
            return;
        }
        keep.extend((0..n).map(|_| u8::from(keeps(self.rng.next_u64(), self.threshold))));
    }

    /// Moves past the next `draws` draws, as drawing them would (a pack member that starts
    /// training in the middle of its epoch); nothing when `p` is 0, which draws nothing.
    pub(crate) fn skip(&mut self, draws: u64) {
        if self.p != 0.0 {
            // Every draw is a `u64`, two words.
            let at = self.rng.get_word_pos();
            self.rng.set_word_pos(at + 2 * u128::from(draws));
        }
    }

    /// The stream this dropout draws its next masks from.
    pub(crate) fn counter(&self) -> DrawCounter {
        let seed = self.rng.get_seed();
        let mut key = [0u32; 8];
        for (word, bytes) in key.iter_mut().zip(seed.chunks_exact(4)) {
            *word = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        }
        DrawCounter {
            key,
            stream: self.rng.get_stream(),
            // Every draw is a `u64`, two words: the position is even.
            next: (self.rng.get_word_pos() / 2) as u64,
            threshold: self.threshold,
            scale: self.scale(),
        }
    }
}

/// Whether a unit whose draw is `draw` is kept at `threshold` ([`Dropout::counter`]).
#[inline]
pub(crate) fn keeps(draw: u64, threshold: u64) -> bool {
    draw >> 11 >= threshold
}

pub(crate) fn activate(x: &Tensor, a: Activation) -> candle_core::Result<Tensor> {
    match a {
        Activation::Relu => x.relu(),
        Activation::Gelu => x.gelu_erf(),
        Activation::Tanh => x.tanh(),
        Activation::Silu => x.silu(),
    }
}

/// `x @ w^T + b` for a `(batch, in)` input.
pub(crate) fn linear(x: &Tensor, w: &Tensor, b: &Tensor) -> candle_core::Result<Tensor> {
    x.matmul(&w.t()?)?.broadcast_add(b)
}

/// Number of scalar parameters.
pub fn parameter_count(vars: &NamedVars) -> usize {
    vars.iter().map(|(_, v)| v.elem_count()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fused pack pads narrower members with zero weights and relies on every activation
    /// mapping 0 to 0 (`crate::fused`): a new activation must too, or padding needs a mask.
    #[test]
    fn every_activation_maps_zero_to_zero() {
        let zeros = Tensor::zeros(4, candle_core::DType::F32, &Device::Cpu).unwrap();
        for a in [
            Activation::Relu,
            Activation::Gelu,
            Activation::Tanh,
            Activation::Silu,
        ] {
            // Every variant listed: a new one fails to compile here until it is added.
            match a {
                Activation::Relu | Activation::Gelu | Activation::Tanh | Activation::Silu => {}
            }
            let y: Vec<f32> = activate(&zeros, a).unwrap().to_vec1().unwrap();
            assert!(y.iter().all(|&v| v == 0.0), "{a:?}: {y:?}");
        }
    }
}
