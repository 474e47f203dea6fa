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

/// How far a sweep's trials ran before its `max_t` was raised, and to where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaisedMaxT {
    /// The old `max_t`: trials completed there go on.
    pub from: u64,
    pub to: u64,
}

impl SchedulerSpec {
    /// The same scheduler with `max_t` raised to `max_t`, for `tune resume --max-t`, with
    /// the rungs below the old `max_t` as they were, so that replaying the sweep's results
    /// under the raised scheduler makes the decisions they were made with. ASHA with one
    /// bracket keeps them by itself (rungs at `grace_period * reduction_factor^k`, whatever
    /// the top; an unset grace period is fixed at what it was); HyperBand keeps the band its
    /// first `max_t` sized (`raised_from`), the old top becoming a rung. Refused: ASHA with
    /// several brackets (each trial's bracket is drawn by how many rungs each has) and
    /// schedulers without a `max_t`.
    ///
    /// ```
    /// use tune::{AshaConfig, HyperBandConfig, SchedulerSpec};
    /// let asha = SchedulerSpec::Asha(AshaConfig { max_t: 27, ..Default::default() });
    /// let (raised, how) = asha.raised_max_t(81).unwrap();
    /// assert_eq!((how.from, how.to), (27, 81));
    /// let kept = AshaConfig { max_t: 81, grace_period: Some(1), ..Default::default() };
    /// assert_eq!(raised, SchedulerSpec::Asha(kept));
    /// // An unset first rung (max_t / 16) stays where it was: 3, not 104 / 16.
    /// let asha = SchedulerSpec::Asha(AshaConfig { max_t: 52, ..Default::default() });
    /// let SchedulerSpec::Asha(raised) = asha.raised_max_t(104).unwrap().0 else { panic!() };
    /// assert_eq!(raised.grace_period(), 3);
    /// // HyperBand's band stays the one 52 sized.
    /// let hb = SchedulerSpec::Hyperband(HyperBandConfig { max_t: 52, ..Default::default() });
    /// let SchedulerSpec::Hyperband(raised) = hb.raised_max_t(156).unwrap().0 else { panic!() };
    /// assert_eq!((raised.max_t, raised.band_max_t()), (156, 52));
    /// let fifo = SchedulerSpec::default();
    /// assert!(fifo.raised_max_t(81).unwrap_err().to_string().contains("no `max_t`"));
    /// ```
    pub fn raised_max_t(&self, max_t: u64) -> Result<(SchedulerSpec, RaisedMaxT), InvalidSetting> {
        let refuse = |why: String| InvalidSetting::new("scheduler", FieldError::new("max_t", why));
        let raised_only = |old: u64| match max_t > old {
            true => Ok(RaisedMaxT {
                from: old,
                to: max_t,
            }),
            false => Err(refuse(format!(
                "a sweep's max_t can only be raised: expected above {old}, found {max_t}"
            ))),
        };
        let c = match self {
            SchedulerSpec::Asha(c) => c,
            SchedulerSpec::Hyperband(c) => {
                let how = raised_only(c.max_t)?;
                let mut raised = c.clone();
                raised.raised_from.push(c.max_t);
                raised.max_t = max_t;
                return Ok((SchedulerSpec::Hyperband(raised), how));
            }
            other => {
                return Err(refuse(format!(
                    "kind = \"{}\" has no `max_t` to raise (ASHA and HyperBand have)",
                    other.name()
                )))
            }
        };
        let how = raised_only(c.max_t)?;
        if c.brackets > 1 {
            return Err(refuse(format!(
                "ASHA with {} brackets cannot be extended: each trial's bracket is drawn by how \
                 many rungs each has, which max_t changes (one bracket can)",
                c.brackets
            )));
        }
        if !c.stop_last_trials {
            return Err(refuse(
                "ASHA with `stop_last_trials = false` lets trials run past max_t to their own \
                 end; there is no top to raise"
                    .into(),
            ));
        }
        // The first rung stays where it was: unset, it is a fraction of max_t.
        let raised = AshaConfig {
            max_t,
            grace_period: Some(c.grace_period()),
            ..c.clone()
        };
        Ok((SchedulerSpec::Asha(raised), how))
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
