//! Which device a trial computes on, as the coordinator names a slot's and the trainable
//! opens it ([`crate::open_device`]).

use std::fmt;

/// The CPU, or CUDA GPU N (its ordinal on this machine).
///
/// ```
/// use tune_trials::DeviceId;
/// assert_eq!(DeviceId::Cuda(1).to_string(), "cuda:1");
/// assert_eq!(DeviceId::Cpu.to_string(), "cpu");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceId {
    Cpu,
    Cuda(usize),
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceId::Cpu => write!(f, "cpu"),
            DeviceId::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}
