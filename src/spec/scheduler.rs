//! `[scheduler]`: which trial scheduler, and its settings.

use super::*;

/// `[scheduler]`: the trial scheduler, by `kind`, with its settings (each kind's own keys;
/// another kind's key is an unknown field).
///
/// ```
/// use tune::{AshaConfig, SchedulerSpec};
/// let asha = SchedulerSpec::Asha(AshaConfig { max_t: 27, ..Default::default() });
/// assert_eq!(asha.name(), "asha");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum SchedulerSpec {
    /// Every trial runs to its end (the default).
    Fifo {},
    /// Median stopping: a trial below the median of the others at the same step stops.
    Median(MedianConfig),
    /// ASHA: Ray Tune's stopping variant, or the paper's promotion variant.
    Asha(AshaConfig),
    /// Synchronous HyperBand, pausing and resuming trials from checkpoints.
    Hyperband(HyperBandConfig),
    /// Population-based training: exploit (copy a better trial's checkpoint) and explore.
    Pbt(PbtConfig),
}

impl Default for SchedulerSpec {
    fn default() -> Self {
        SchedulerSpec::Fifo {}
    }
}

impl SchedulerSpec {
    /// The `kind`, as written in the spec.
    pub fn name(&self) -> &'static str {
        match self {
            SchedulerSpec::Fifo {} => "fifo",
            SchedulerSpec::Median(_) => "median",
            SchedulerSpec::Asha(_) => "asha",
            SchedulerSpec::Hyperband(_) => "hyperband",
            SchedulerSpec::Pbt(_) => "pbt",
        }
    }

    /// The settings' own check.
    pub fn validate(&self) -> Result<(), FieldError> {
        match self {
            SchedulerSpec::Fifo {} | SchedulerSpec::Median(_) => Ok(()),
            SchedulerSpec::Asha(c) => c.validate(),
            SchedulerSpec::Hyperband(c) => c.validate(),
            SchedulerSpec::Pbt(c) => c.validate(),
        }
    }
}

impl ExperimentSpec {
    /// The trial scheduler this spec asks for, with its settings.
    pub fn make_scheduler(&self) -> Box<dyn Scheduler> {
        match &self.scheduler {
            SchedulerSpec::Fifo {} => Box::new(Fifo),
            SchedulerSpec::Median(c) => Box::new(MedianStopping::new(c.clone(), self.mode)),
            SchedulerSpec::Asha(c) => c.build(self.mode, self.seed),
            SchedulerSpec::Hyperband(c) => Box::new(HyperBand::new(c.clone(), self.mode)),
            SchedulerSpec::Pbt(c) => Box::new(Pbt::new(
                c.clone(),
                self.space.clone(),
                self.mode,
                self.seed,
            )),
        }
    }
}
