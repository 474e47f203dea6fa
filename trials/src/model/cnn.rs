//! A small CNN for small images: two 3x3 convolutions, a 2x2 max-pool, one dense hidden
//! layer.

use candle_core::{Device, Tensor, Var};

use super::{activate, linear, Dropout, Init, Model, NamedVars};
use crate::config::Activation;
use crate::TrialsError;

/// ```
/// use tune_trials::{Cnn, Model, Activation};
/// let m = Cnn::new((1, 8, 8), 10, 8, 32, Activation::Relu, 0, &candle_core::Device::Cpu).unwrap();
/// let x = candle_core::Tensor::zeros((5, 1, 8, 8), candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
/// assert_eq!(m.forward(&x, None).unwrap().dims(), &[5, 10]);
/// ```
pub struct Cnn {
    conv1: (Var, Var),
    conv2: (Var, Var),
    dense: (Var, Var),
    out: (Var, Var),
    image: (usize, usize, usize),
    activation: Activation,
    vars: NamedVars,
}

impl Cnn {
    /// `image` is `(channels, height, width)`; height and width must be even.
    pub fn new(
        image: (usize, usize, usize),
        classes: usize,
        channels: usize,
        width: usize,
        activation: Activation,
        seed: u64,
        device: &Device,
    ) -> Result<Cnn, TrialsError> {
        let (c, h, w) = image;
        if h < 2 || w < 2 || h % 2 == 1 || w % 2 == 1 {
            return Err(TrialsError::Config(format!(
                "the cnn needs images of even height and width, found {h}x{w}"
            )));
        }
        let mut init = Init::new(seed, device);
        let conv1 = init.layer("conv1", &[channels, c, 3, 3], c * 9)?;
        let conv2 = init.layer("conv2", &[2 * channels, channels, 3, 3], channels * 9)?;
        let flat = 2 * channels * (h / 2) * (w / 2);
        let dense = init.layer("dense", &[width, flat], flat)?;
        let out = init.layer("out", &[classes, width], width)?;
        Ok(Cnn {
            conv1,
            conv2,
            dense,
            out,
            image,
            activation,
            vars: init.finish(),
        })
    }

    fn conv(&self, x: &Tensor, (w, b): &(Var, Var)) -> candle_core::Result<Tensor> {
        activate(&conv3x3(x, w, b)?, self.activation)
    }
}

/// A 3x3 convolution with stride 1 and zero padding 1, as im2col and one batched matmul.
/// Candle's own `conv2d` computes its input gradient with a direct `conv_transpose2d` on CPU,
/// which made an epoch 2.5x slower than PyTorch's; this form's backward is slices and a
/// matmul.
pub(crate) fn conv3x3(x: &Tensor, w: &Tensor, b: &Tensor) -> candle_core::Result<Tensor> {
    let (n, c, h, wd) = x.dims4()?;
    let c_out = w.dim(0)?;
    let padded = x.pad_with_zeros(2, 1, 1)?.pad_with_zeros(3, 1, 1)?;
    let mut shifted = Vec::with_capacity(9);
    for dy in 0..3 {
        for dx in 0..3 {
            shifted.push(padded.narrow(2, dy, h)?.narrow(3, dx, wd)?);
        }
    }
    // (c, 9, n, h, w): row c * 9 + dy * 3 + dx matches the kernel's (c_out, c, 3, 3) layout,
    // and the whole batch is one matmul (many small batched ones were slower).
    let patches = Tensor::stack(&shifted, 1)?
        .transpose(0, 2)?
        .contiguous()?
        .reshape((c * 9, n * h * wd))?;
    let y = w.reshape((c_out, c * 9))?.matmul(&patches)?;
    y.reshape((c_out, n, h, wd))?
        .transpose(0, 1)?
        .broadcast_add(&b.reshape((1, c_out, 1, 1))?)
}

impl Model for Cnn {
    fn forward(
        &self,
        x: &Tensor,
        mut dropout: Option<&mut Dropout>,
    ) -> candle_core::Result<Tensor> {
        let (c, h, w) = self.image;
        let x = x.reshape(((), c, h, w))?;
        let y = self.conv(&self.conv(&x, &self.conv1)?, &self.conv2)?;
        let mut y = y.max_pool2d(2)?.flatten_from(1)?;
        if let Some(d) = dropout.as_deref_mut() {
            y = d.apply(&y)?;
        }
        let mut y = activate(&linear(&y, &self.dense.0, &self.dense.1)?, self.activation)?;
        if let Some(d) = dropout {
            y = d.apply(&y)?;
        }
        linear(&y, &self.out.0, &self.out.1)
    }

    fn vars(&self) -> &NamedVars {
        &self.vars
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn im2col_convolution_equals_candles_conv2d_and_its_gradients() {
        let dev = Device::Cpu;
        let x = Var::from_tensor(&Tensor::randn(0f32, 1.0, (3, 2, 8, 6), &dev).unwrap()).unwrap();
        let w = Var::from_tensor(&Tensor::randn(0f32, 1.0, (4, 2, 3, 3), &dev).unwrap()).unwrap();
        let b = Var::from_tensor(&Tensor::randn(0f32, 1.0, 4, &dev).unwrap()).unwrap();
        let ours = conv3x3(&x, &w, &b).unwrap();
        let theirs = x
            .conv2d(&w, 1, 1, 1, 1)
            .unwrap()
            .broadcast_add(&b.reshape((1, 4, 1, 1)).unwrap())
            .unwrap();
        let max_abs = |t: &Tensor| {
            t.abs()
                .unwrap()
                .flatten_all()
                .unwrap()
                .max(0)
                .unwrap()
                .to_scalar::<f32>()
                .unwrap()
        };
        assert!(max_abs(&(&ours - &theirs).unwrap()) < 1e-5);
        // Same gradients for a loss that weights every output differently.
        let weights = Tensor::arange(0f32, ours.elem_count() as f32, &dev)
            .unwrap()
            .reshape(ours.shape())
            .unwrap();
        let g1 = (ours * &weights)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let g2 = (theirs * &weights)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        for v in [&x, &w, &b] {
            let (a, b) = (g1.get(v).unwrap(), g2.get(v).unwrap());
            assert!(
                max_abs(&(a - b).unwrap()) <= 1e-5 * max_abs(b),
                "{:?}",
                v.dims()
            );
        }
    }
}
