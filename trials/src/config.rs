//! The hyperparameters of a built-in trainable: fixed keys from `[objective]`, overridden per
//! trial by the sampled `[space]` entries of the same name.

use serde::{Deserialize, Serialize};
use tune_search::{Params, Value};

use crate::TrialsError;

/// The built-in trainables, as named by `[objective] builtin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Builtin {
    Mlp,
    Cnn,
}

impl std::str::FromStr for Builtin {
    type Err = TrialsError;
    fn from_str(s: &str) -> Result<Builtin, TrialsError> {
        match s {
            "mlp" => Ok(Builtin::Mlp),
            "cnn" => Ok(Builtin::Cnn),
            other => {
                let hint = tune_search::did_you_mean_hint(other, ["mlp", "cnn"]);
                Err(TrialsError::Config(format!(
                    "builtin: expected \"mlp\" or \"cnn\", found \"{other}\"{hint}"
                )))
            }
        }
    }
}

impl Builtin {
    pub fn name(self) -> &'static str {
        match self {
            Builtin::Mlp => "mlp",
            Builtin::Cnn => "cnn",
        }
    }
}

/// The [`TrainConfig`](crate::TrainConfig) keys that make up a pack's key (`FuseKey`, with the data):
/// trials that differ in any of them never share a pack. Depth (but 0), width, optimizer and
/// batch size are not among them.
///
/// ```
/// assert!(tune_trials::PACK_KEYS.contains(&"activation"));
/// assert!(!tune_trials::PACK_KEYS.contains(&"width"));
/// ```
pub const PACK_KEYS: [&str; 3] = ["channels", "activation", "nesterov"];

/// Every hyperparameter of the built-in MLP and CNN, with its default.
///
/// ```
/// use tune_trials::{TrainConfig, OptimizerKind};
/// let mut params = tune_search::Params::default();
/// params.insert("lr", tune_search::Value::Float(0.01));
/// params.insert("optimizer", tune_search::Value::Str("sgd".into()));
/// let cfg = TrainConfig::from_parts(&Default::default(), &params).unwrap();
/// assert_eq!((cfg.lr, cfg.optimizer, cfg.width), (0.01, OptimizerKind::Sgd, 128));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainConfig {
    /// Hidden layers of the MLP (the CNN's dense head has one).
    pub depth: usize,
    /// Units per hidden layer.
    pub width: usize,
    /// Filters of the CNN's first convolution (the second has twice as many).
    pub channels: usize,
    pub activation: Activation,
    /// Probability of zeroing a hidden unit while training.
    pub dropout: f64,
    pub optimizer: OptimizerKind,
    /// Peak learning rate (after warmup).
    pub lr: f64,
    /// SGD momentum.
    pub momentum: f64,
    pub nesterov: bool,
    /// AdamW's moment decay rates and epsilon.
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    /// Decoupled for AdamW; added to the gradient (L2) for SGD, as in PyTorch.
    pub weight_decay: f64,
    pub batch_size: usize,
    /// Most epochs a trial trains (the scheduler may stop it sooner).
    pub epochs: u64,
    /// Epochs of linear warmup from 0 to `lr`.
    pub warmup_epochs: f64,
    pub lr_decay: LrDecay,
    /// Early stopping: epochs without a `min_delta` improvement of `val_loss` before the trial
    /// ends itself; off when absent.
    pub patience: Option<u64>,
    pub min_delta: f64,
    /// Seed of the weight initialisation, batch order and dropout; defaults to the trial id.
    pub seed: Option<u64>,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            depth: 2,
            width: 128,
            channels: 16,
            activation: Activation::Relu,
            dropout: 0.0,
            optimizer: OptimizerKind::Adamw,
            lr: 1e-3,
            momentum: 0.9,
            nesterov: false,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            batch_size: 64,
            epochs: 20,
            warmup_epochs: 0.0,
            lr_decay: LrDecay::None,
            patience: None,
            min_delta: 0.0,
            seed: None,
        }
    }
}

/// The keys of [`TrainConfig`], as written in TOML and `[space]`.
pub const TRAIN_KEYS: [&str; 20] = [
    "depth",
    "width",
    "channels",
    "activation",
    "dropout",
    "optimizer",
    "lr",
    "momentum",
    "nesterov",
    "beta1",
    "beta2",
    "eps",
    "weight_decay",
    "batch_size",
    "epochs",
    "warmup_epochs",
    "lr_decay",
    "patience",
    "min_delta",
    "seed",
];

/// Keys that shape the model: a checkpoint restores only into the same values.
pub const ARCHITECTURE_KEYS: [&str; 4] = ["depth", "width", "channels", "activation"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Activation {
    Relu,
    Gelu,
    Tanh,
    Silu,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    /// SGD with (optionally Nesterov) momentum.
    Sgd,
    /// Adam with decoupled weight decay (Loshchilov & Hutter 2019).
    #[serde(alias = "adam")]
    Adamw,
}

/// How the learning rate falls after warmup, reaching 0 at `epochs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LrDecay {
    None,
    Cosine,
    Linear,
}

impl TrainConfig {
    /// Fixed keys (from `[objective]`) overridden by one trial's sampled params.
    pub fn from_parts(
        fixed: &serde_json::Map<String, serde_json::Value>,
        params: &Params,
    ) -> Result<TrainConfig, TrialsError> {
        let mut merged = fixed.clone();
        for (name, value) in params.iter() {
            merged.insert(name.to_string(), param_json(value));
        }
        for key in merged.keys() {
            check_key(key)?;
        }
        let cfg: TrainConfig = serde_json::from_value(serde_json::Value::Object(merged))
            .map_err(|e| TrialsError::Config(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<(), TrialsError> {
        let bad = |key: &str, want: &str, found: String| {
            Err(TrialsError::Config(format!(
                "{key}: expected {want}, found {found}"
            )))
        };
        if self.width == 0 || self.channels == 0 || self.batch_size == 0 || self.epochs == 0 {
            let (k, v) = [
                ("width", self.width as u64),
                ("channels", self.channels as u64),
                ("batch_size", self.batch_size as u64),
                ("epochs", self.epochs),
            ]
            .into_iter()
            .find(|(_, v)| *v == 0)
            .unwrap();
            return bad(k, "at least 1", v.to_string());
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return bad(
                "dropout",
                "a probability in [0, 1)",
                self.dropout.to_string(),
            );
        }
        if !(self.lr > 0.0 && self.lr.is_finite()) {
            return bad("lr", "a positive number", self.lr.to_string());
        }
        for (k, v) in [
            ("momentum", self.momentum),
            ("beta1", self.beta1),
            ("beta2", self.beta2),
        ] {
            if !(0.0..1.0).contains(&v) {
                return bad(k, "a number in [0, 1)", v.to_string());
            }
        }
        for (k, v) in [
            ("eps", self.eps),
            ("weight_decay", self.weight_decay),
            ("warmup_epochs", self.warmup_epochs),
            ("min_delta", self.min_delta),
        ] {
            if !(v >= 0.0 && v.is_finite()) {
                return bad(k, "a number >= 0", v.to_string());
            }
        }
        Ok(())
    }
}

/// An unknown key, with the nearest known one.
pub(crate) fn check_key(key: &str) -> Result<(), TrialsError> {
    if TRAIN_KEYS.contains(&key) {
        return Ok(());
    }
    let hint = tune_search::did_you_mean_hint(key, TRAIN_KEYS);
    Err(TrialsError::Config(format!(
        "`{key}` is not a hyperparameter of the built-in trainables{hint}; they take {}",
        TRAIN_KEYS.join(", ")
    )))
}

fn param_json(v: &Value) -> serde_json::Value {
    match v {
        Value::Bool(b) => (*b).into(),
        Value::Int(i) => (*i).into(),
        Value::Float(x) => (*x).into(),
        Value::Str(s) => s.clone().into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, Value)]) -> Params {
        let mut p = Params::default();
        for (k, v) in pairs {
            p.insert(*k, v.clone());
        }
        p
    }

    #[test]
    fn params_override_fixed_keys_and_ints_widen_to_floats() {
        let fixed = serde_json::json!({"lr": 0.5, "epochs": 3, "patience": 2})
            .as_object()
            .unwrap()
            .clone();
        let cfg = TrainConfig::from_parts(
            &fixed,
            &params(&[
                ("lr", Value::Int(1)),
                ("activation", Value::Str("gelu".into())),
            ]),
        )
        .unwrap();
        assert_eq!((cfg.lr, cfg.epochs, cfg.patience), (1.0, 3, Some(2)));
        assert_eq!(cfg.activation, Activation::Gelu);
    }

    #[test]
    fn bad_keys_and_values_say_what_was_expected() {
        let none = serde_json::Map::new();
        let e = TrainConfig::from_parts(&none, &params(&[("lrr", Value::Float(0.1))]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`lrr` is not a hyperparameter") && e.contains("`lr`"),
            "{e}"
        );
        let e = TrainConfig::from_parts(&none, &params(&[("optimizer", Value::Str("adm".into()))]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown variant `adm`") && e.contains("sgd"),
            "{e}"
        );
        let e = TrainConfig::from_parts(&none, &params(&[("dropout", Value::Float(1.0))]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("dropout: expected a probability in [0, 1), found 1"),
            "{e}"
        );
        let e = TrainConfig::from_parts(&none, &params(&[("width", Value::Float(1.5))]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("invalid type: floating point `1.5`, expected usize"),
            "{e}"
        );
    }
}
