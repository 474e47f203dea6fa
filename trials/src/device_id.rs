//! Which device a trial computes on, as the coordinator names a slot's and the trainable
//! opens it ([`crate::open_device`]).

use std::fmt;

use crate::TrialsError;

/// The CPU, or CUDA GPU N (its ordinal on this machine).
///
/// ```
/// use tune_trials::DeviceId;
/// assert_eq!("cuda:1".parse::<DeviceId>().unwrap(), DeviceId::Cuda(1));
/// assert_eq!(DeviceId::Cuda(1).to_string(), "cuda:1");
/// assert_eq!("cpu:3".parse::<DeviceId>().unwrap(), DeviceId::Cpu);
/// assert!("tpu:0".parse::<DeviceId>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceId {
    Cpu,
    Cuda(usize),
}

impl std::str::FromStr for DeviceId {
    type Err = TrialsError;

    /// `cpu:N` (any CPU slot N computes on the one CPU) or `cuda:N`.
    fn from_str(name: &str) -> Result<DeviceId, TrialsError> {
        let bad = || {
            TrialsError::Config(format!(
                "device: expected `cpu:N` or `cuda:N`, found \"{name}\""
            ))
        };
        let (kind, ordinal) = name.split_once(':').ok_or_else(bad)?;
        let ordinal: usize = ordinal.parse().map_err(|_| bad())?;
        match kind {
            "cpu" => Ok(DeviceId::Cpu),
            "cuda" => Ok(DeviceId::Cuda(ordinal)),
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceId::Cpu => write!(f, "cpu"),
            DeviceId::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}
