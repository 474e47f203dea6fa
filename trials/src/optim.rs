//! SGD with momentum and AdamW, written here because their state must checkpoint: candle-nn's
//! AdamW keeps its moments private. Both follow PyTorch's update rules exactly.

use candle_core::backprop::GradStore;
use candle_core::Tensor;

use crate::config::{OptimizerKind, TrainConfig};
use crate::model::NamedVars;
use crate::TrialsError;

/// An optimizer's per-parameter state and step count.
///
/// ```
/// use candle_core::{Device, Tensor, Var};
/// use tune_trials::{Optimizer, TrainConfig, OptimizerKind};
/// let cfg = TrainConfig { optimizer: OptimizerKind::Sgd, momentum: 0.0, ..TrainConfig::default() };
/// let w = Var::new(&[1.0f32, -2.0], &Device::Cpu).unwrap();
/// let vars = vec![("w".to_string(), w.clone())];
/// let mut opt = Optimizer::new(&cfg, &vars).unwrap();
/// let grads = w.as_tensor().sqr().unwrap().sum_all().unwrap().backward().unwrap(); // d/dw = 2w
/// opt.step(&vars, &grads, 0.25, &cfg).unwrap();
/// assert_eq!(w.to_vec1::<f32>().unwrap(), vec![0.5, -1.0]);
/// ```
pub struct Optimizer {
    pub(crate) kind: OptimizerKind,
    /// Per variable: `[momentum]` for SGD, `[m, v]` for AdamW.
    pub(crate) state: Vec<Vec<Tensor>>,
    pub(crate) steps: u64,
}

impl Optimizer {
    pub fn new(cfg: &TrainConfig, vars: &NamedVars) -> Result<Optimizer, TrialsError> {
        let slots = match cfg.optimizer {
            OptimizerKind::Sgd => 1,
            OptimizerKind::Adamw => 2,
        };
        let state = vars
            .iter()
            .map(|(_, v)| (0..slots).map(|_| v.zeros_like()).collect())
            .collect::<candle_core::Result<_>>()?;
        Ok(Optimizer {
            kind: cfg.optimizer,
            state,
            steps: 0,
        })
    }

    pub fn kind(&self) -> OptimizerKind {
        self.kind
    }

    /// Updates taken so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// One update of every variable from its gradient, at learning rate `lr`.
    pub fn step(
        &mut self,
        vars: &NamedVars,
        grads: &GradStore,
        lr: f64,
        cfg: &TrainConfig,
    ) -> Result<(), TrialsError> {
        self.steps += 1;
        let t = self.steps as i32;
        for ((name, var), state) in vars.iter().zip(&mut self.state) {
            let Some(g) = grads.get(var) else {
                return Err(TrialsError::Train(format!("no gradient reached `{name}`")));
            };
            let p = var.as_tensor();
            match self.kind {
                OptimizerKind::Sgd => {
                    let g = if cfg.weight_decay > 0.0 {
                        (g + p.affine(cfg.weight_decay, 0.0)?)?
                    } else {
                        g.clone()
                    };
                    // PyTorch starts the buffer at the first gradient; with dampening 0 that
                    // equals momentum * 0 + g.
                    let buf = (state[0].affine(cfg.momentum, 0.0)? + &g)?;
                    let update = if cfg.nesterov {
                        (g + buf.affine(cfg.momentum, 0.0)?)?
                    } else {
                        buf.clone()
                    };
                    var.set(&(p - update.affine(lr, 0.0)?)?)?;
                    state[0] = buf;
                }
                OptimizerKind::Adamw => {
                    let decayed = p.affine(1.0 - lr * cfg.weight_decay, 0.0)?;
                    let m = (state[0].affine(cfg.beta1, 0.0)? + g.affine(1.0 - cfg.beta1, 0.0)?)?;
                    let v = (state[1].affine(cfg.beta2, 0.0)?
                        + g.sqr()?.affine(1.0 - cfg.beta2, 0.0)?)?;
                    let bias1 = 1.0 - cfg.beta1.powi(t);
                    let bias2 = 1.0 - cfg.beta2.powi(t);
                    // PyTorch: p -= lr / bias1 * m / (sqrt(v) / sqrt(bias2) + eps)
                    let denom = v.sqrt()?.affine(1.0 / bias2.sqrt(), cfg.eps)?;
                    let update = m.div(&denom)?.affine(lr / bias1, 0.0)?;
                    var.set(&(decayed - update)?)?;
                    state[0] = m;
                    state[1] = v;
                }
            }
        }
        Ok(())
    }

    /// The state as named tensors, for a checkpoint.
    pub fn state_tensors(&self, vars: &NamedVars) -> Vec<(String, Tensor)> {
        self.named(vars, &self.state)
    }

    /// `state` (this optimizer's, or copies of it) named as [`Optimizer::state_tensors`]
    /// names it.
    pub(crate) fn named(&self, vars: &NamedVars, state: &[Vec<Tensor>]) -> Vec<(String, Tensor)> {
        let slots: &[&str] = match self.kind {
            OptimizerKind::Sgd => &["momentum"],
            OptimizerKind::Adamw => &["m", "v"],
        };
        vars.iter()
            .zip(state)
            .flat_map(|((name, _), state)| {
                slots
                    .iter()
                    .zip(state)
                    .map(move |(slot, t)| (format!("optim.{slot}.{name}"), t.clone()))
            })
            .collect()
    }

    /// Restores what [`Optimizer::state_tensors`] saved.
    pub fn load_state(
        &mut self,
        vars: &NamedVars,
        steps: u64,
        get: &mut dyn FnMut(&str) -> Result<Tensor, TrialsError>,
    ) -> Result<(), TrialsError> {
        let names: Vec<String> = self
            .state_tensors(vars)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        let mut it = names.iter();
        for state in &mut self.state {
            for slot in state.iter_mut() {
                let name = it.next().expect("one name per slot");
                let t = get(name)?;
                if t.shape() != slot.shape() {
                    return Err(TrialsError::Checkpoint(format!(
                        "`{name}` has shape {:?} in the checkpoint, {:?} in this model",
                        t.dims(),
                        slot.dims()
                    )));
                }
                *slot = t;
            }
        }
        self.steps = steps;
        Ok(())
    }
}

/// The learning rate at update `step` (0-based) of `total`: linear warmup over `warmup`
/// updates, then the configured decay to 0 at `total`.
///
/// ```
/// use tune_trials::{lr_at, LrDecay};
/// assert_eq!(lr_at(0.1, 0, 10, 100, LrDecay::None), 0.01);
/// assert_eq!(lr_at(0.1, 10, 10, 100, LrDecay::None), 0.1);
/// assert!((lr_at(0.1, 55, 10, 100, LrDecay::Cosine) - 0.05).abs() < 1e-12);
/// ```
pub fn lr_at(lr: f64, step: u64, warmup: u64, total: u64, decay: crate::LrDecay) -> f64 {
    if step < warmup {
        return lr * (step + 1) as f64 / warmup as f64;
    }
    let span = total.saturating_sub(warmup).max(1) as f64;
    let done = ((step - warmup) as f64 / span).min(1.0);
    match decay {
        crate::LrDecay::None => lr,
        crate::LrDecay::Linear => lr * (1.0 - done),
        crate::LrDecay::Cosine => lr * 0.5 * (1.0 + (std::f64::consts::PI * done).cos()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    /// Gradients of f(w) = sum(w^2), that is 2w.
    fn grads_of_sum_of_squares(w: &Var) -> GradStore {
        w.as_tensor()
            .sqr()
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap()
    }

    /// Two AdamW steps on f(w) = sum(w^2), computed by hand with PyTorch's formulas.
    #[test]
    fn adamw_matches_hand_computed_pytorch_steps() {
        let cfg = TrainConfig {
            weight_decay: 0.1,
            ..TrainConfig::default()
        };
        let w = Var::new(&[1.0f32], &Device::Cpu).unwrap();
        let vars = vec![("w".to_string(), w.clone())];
        let mut opt = Optimizer::new(&cfg, &vars).unwrap();
        let (lr, b1, b2, eps) = (0.1f64, 0.9f64, 0.999f64, 1e-8f64);
        let (mut p, mut m, mut v) = (1.0f64, 0.0f64, 0.0f64);
        for t in 1..=2 {
            let grads = grads_of_sum_of_squares(&w);
            opt.step(&vars, &grads, lr, &cfg).unwrap();
            let g = 2.0 * p;
            p *= 1.0 - lr * 0.1;
            m = b1 * m + (1.0 - b1) * g;
            v = b2 * v + (1.0 - b2) * g * g;
            let mhat = m / (1.0 - b1.powi(t));
            let denom = v.sqrt() / (1.0 - b2.powi(t)).sqrt() + eps;
            p -= lr * mhat / denom;
            let got = w.to_vec1::<f32>().unwrap()[0] as f64;
            assert!((got - p).abs() < 1e-6, "step {t}: {got} vs {p}");
        }
    }

    #[test]
    fn sgd_momentum_and_nesterov_follow_pytorch() {
        for nesterov in [false, true] {
            let cfg = TrainConfig {
                optimizer: OptimizerKind::Sgd,
                momentum: 0.5,
                nesterov,
                weight_decay: 0.01,
                ..TrainConfig::default()
            };
            let w = Var::new(&[2.0f32], &Device::Cpu).unwrap();
            let vars = vec![("w".to_string(), w.clone())];
            let mut opt = Optimizer::new(&cfg, &vars).unwrap();
            let (mut p, mut buf) = (2.0f64, 0.0f64);
            for _ in 0..3 {
                let grads = grads_of_sum_of_squares(&w);
                opt.step(&vars, &grads, 0.1, &cfg).unwrap();
                let g = 2.0 * p + 0.01 * p;
                buf = 0.5 * buf + g;
                p -= 0.1 * if nesterov { g + 0.5 * buf } else { buf };
                let got = w.to_vec1::<f32>().unwrap()[0] as f64;
                assert!((got - p).abs() < 1e-5, "nesterov {nesterov}: {got} vs {p}");
            }
        }
    }

    #[test]
    fn warmup_then_decay_reaches_zero() {
        use crate::LrDecay;
        assert!((lr_at(1.0, 99, 0, 100, LrDecay::Linear) - 0.01).abs() < 1e-12);
        assert!(lr_at(1.0, 100, 0, 100, LrDecay::Cosine).abs() < 1e-12);
        assert_eq!(lr_at(1.0, 4, 5, 100, LrDecay::Cosine), 1.0);
        assert_eq!(lr_at(1.0, 500, 0, 100, LrDecay::None), 1.0);
    }
}
