//! A multilayer perceptron: `depth` hidden layers of `width` units.

use candle_core::{Device, Tensor, Var};

use super::{activate, linear, Dropout, Init, Model, NamedVars};
use crate::config::Activation;
use crate::TrialsError;

/// ```
/// use tune_trials::{Mlp, Model, Activation};
/// let m = Mlp::new(64, 10, 2, 32, Activation::Relu, 0, &candle_core::Device::Cpu).unwrap();
/// assert_eq!(tune_trials::parameter_count(m.vars()), 64 * 32 + 32 + 32 * 32 + 32 + 32 * 10 + 10);
/// ```
pub struct Mlp {
    layers: Vec<(Var, Var)>,
    activation: Activation,
    vars: NamedVars,
}

impl Mlp {
    pub fn new(
        features: usize,
        classes: usize,
        depth: usize,
        width: usize,
        activation: Activation,
        seed: u64,
        device: &Device,
    ) -> Result<Mlp, TrialsError> {
        let mut init = Init::new(seed, device);
        let mut layers = Vec::with_capacity(depth + 1);
        let mut fan_in = features;
        for i in 0..depth {
            layers.push(init.layer(&format!("hidden.{i}"), &[width, fan_in], fan_in)?);
            fan_in = width;
        }
        layers.push(init.layer("out", &[classes, fan_in], fan_in)?);
        Ok(Mlp {
            layers,
            activation,
            vars: init.finish(),
        })
    }
}

impl Model for Mlp {
    fn forward(
        &self,
        x: &Tensor,
        mut dropout: Option<&mut Dropout>,
    ) -> candle_core::Result<Tensor> {
        let (last, hidden) = self.layers.split_last().expect("an output layer");
        let mut h = x.clone();
        for (w, b) in hidden {
            h = activate(&linear(&h, w, b)?, self.activation)?;
            if let Some(d) = dropout.as_deref_mut() {
                h = d.apply(&h)?;
            }
        }
        linear(&h, &last.0, &last.1)
    }

    fn vars(&self) -> &NamedVars {
        &self.vars
    }
}
