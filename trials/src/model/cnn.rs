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
        let y = x.conv2d(w, 1, 1, 1, 1)?;
        activate(
            &y.broadcast_add(&b.reshape((1, (), 1, 1))?)?,
            self.activation,
        )
    }
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
