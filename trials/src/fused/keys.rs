//! What trials must share to train in one pack.

use super::*;

/// What must be equal for trials to train in one pack: the trainable, the data (features or
/// images, classes, training and validation rows), the CNN's filters, whether the MLP has
/// hidden layers at all, activation, and Nesterov momentum for SGD. Depth, width, optimizer
/// and batch size may differ (see the module's documentation).
///
/// ```
/// use tune_trials::{Builtin, OptimizerKind, Split, TrainConfig, Trainer};
/// let split = Split::shipped("wine").unwrap();
/// let cpu = candle_core::Device::Cpu;
/// let trainer = |cfg: TrainConfig| Trainer::new(Builtin::Mlp, cfg, &split, &cpu, 0).unwrap();
/// let a = trainer(TrainConfig { lr: 0.1, width: 16, ..TrainConfig::default() });
/// let b = trainer(TrainConfig { width: 32, depth: 3, batch_size: 32, optimizer: OptimizerKind::Sgd, ..TrainConfig::default() });
/// let c = trainer(TrainConfig { activation: tune_trials::Activation::Tanh, ..TrainConfig::default() });
/// assert_eq!(a.fuse_key(), b.fuse_key()); // padded to one width, depth and batch; both updates
/// assert_ne!(a.fuse_key(), c.fuse_key()); // another activation is another model
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FuseKey {
    pub builtin: Builtin,
    /// The CNN's images, `(channels, height, width)`.
    pub image: Option<(usize, usize, usize)>,
    /// Input features per row (the images' pixels for the CNN) and classes.
    pub features: usize,
    pub classes: usize,
    /// The CNN's filters: its convolutions are not padded.
    pub channels: Option<usize>,
    /// The model has a hidden layer: an MLP of depth 0 (logistic regression) has no hidden
    /// units to pad, its output layer reads the features.
    pub hidden: bool,
    pub activation: Activation,
    /// SGD with Nesterov momentum (another update than plain momentum's or AdamW's).
    pub nesterov: bool,
    /// Training and validation rows.
    pub rows: (usize, usize),
}

/// What the coordinator packs trials by: their [`FuseKey`] and, on CPU, their width and batch
/// size too. A member padded to a wider pack, or to a longer batch, sums over extra zeros,
/// which a matmul of another size may round in another order; on CPU, where a fused trial
/// otherwise computes what it computes alone bit for bit, whichever trials share its pack,
/// those do not mix, so a resumed sweep decides as the uninterrupted one. On a GPU, whose
/// batched matmuls already round otherwise than one trial's, they do. Depths and optimizers
/// mix everywhere: a shallower member's pass-through and a mixed pack's update are exact.
///
/// ```
/// use tune_trials::{Builtin, Split, TrainConfig, Trainer};
/// let split = Split::shipped("wine").unwrap();
/// let cpu = candle_core::Device::Cpu;
/// let trainer = |cfg: TrainConfig| Trainer::new(Builtin::Mlp, cfg, &split, &cpu, 0).unwrap();
/// let a = trainer(TrainConfig { width: 16, ..TrainConfig::default() });
/// let b = trainer(TrainConfig { width: 32, ..TrainConfig::default() });
/// assert_eq!(a.fuse_key(), b.fuse_key());
/// assert_ne!(a.pack_key(), b.pack_key()); // on CPU
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PackKey {
    pub fuse: FuseKey,
    /// The hidden layers' width and the batch size, on CPU.
    pub exact: Option<(usize, usize)>,
    /// Optimizer steps per epoch, where packs keep them apart
    /// ([`Trainer::pack_key_by_steps`]).
    pub steps: Option<u64>,
}

impl Trainer {
    /// The key of the packs this trial can join.
    pub fn fuse_key(&self) -> FuseKey {
        let cnn = self.builtin == Builtin::Cnn;
        FuseKey {
            builtin: self.builtin,
            image: self.image,
            features: self.train.0.dims().get(1).copied().unwrap_or(0),
            classes: self.classes(),
            channels: cnn.then_some(self.cfg.channels),
            hidden: cnn || self.cfg.depth > 0,
            activation: self.cfg.activation,
            nesterov: self.cfg.nesterov && self.optimizer.kind == OptimizerKind::Sgd,
            rows: (self.train.2, self.val.2),
        }
    }

    /// The key of the packs the coordinator puts this trial in ([`PackKey`]).
    pub fn pack_key(&self) -> PackKey {
        PackKey {
            fuse: self.fuse_key(),
            exact: self
                .device
                .is_cpu()
                .then_some((self.cfg.width, self.cfg.batch_size)),
            steps: None,
        }
    }

    /// [`Trainer::pack_key`], keeping apart trials whose epochs take other numbers of
    /// optimizer steps (other batch sizes). A pack's epoch lasts its members' most steps,
    /// which a member of fewer sits the end of out, so a trial of a larger batch packed with
    /// smaller ones trains its epochs no faster than theirs: on a GPU, where a step's time
    /// hardly depends on its rows, the longest trial of a sweep mixing batch sizes may take
    /// several times its own steps.
    ///
    /// ```
    /// use tune_trials::{Builtin, Split, TrainConfig, Trainer};
    /// let split = Split::shipped("wine").unwrap();
    /// let cpu = candle_core::Device::Cpu;
    /// let trainer = |batch_size| {
    ///     let cfg = TrainConfig { batch_size, ..TrainConfig::default() };
    ///     Trainer::new(Builtin::Mlp, cfg, &split, &cpu, 0).unwrap()
    /// };
    /// let (a, b) = (trainer(16), trainer(64));
    /// assert_eq!(a.pack_key_by_steps().fuse, b.pack_key_by_steps().fuse);
    /// assert_ne!(a.pack_key_by_steps().steps, b.pack_key_by_steps().steps);
    /// ```
    pub fn pack_key_by_steps(&self) -> PackKey {
        PackKey {
            steps: Some(self.steps_per_epoch()),
            ..self.pack_key()
        }
    }

    pub(super) fn classes(&self) -> usize {
        let vars = self.model.vars();
        vars.last().map_or(0, |(_, b)| b.dims()[0])
    }

    /// `(hidden layers, units in each)` of the dense part: the MLP's depth and width, the
    /// CNN's one dense layer.
    pub(super) fn dense_shape(&self) -> (usize, usize) {
        match self.builtin {
            Builtin::Mlp => (self.cfg.depth, self.cfg.width),
            Builtin::Cnn => (1, self.cfg.width),
        }
    }

    /// Weights before the dense layers: the CNN's two convolutions and their biases.
    pub(super) fn conv_vars(&self) -> usize {
        match self.builtin {
            Builtin::Mlp => 0,
            Builtin::Cnn => 4,
        }
    }
}
