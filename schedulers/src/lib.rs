//! Trial schedulers for `tune`: they answer each reported result with a [`Decision`].
//!
//! Schedulers decide from numbers they are given; the coordinator turns decisions into
//! processes and signals. Every scheduler's state is a function of the results it was fed, in
//! order, so a resumed sweep rebuilds it by replaying the stored results.
//!
//! Written: FIFO, median stopping, ASHA (the stopping variant Ray Tune ships), synchronous
//! HyperBand, PBT, and ASHA's promotion variant.

mod asha;
mod asha_promotion;
mod fifo;
mod hyperband;
mod median;
mod pbt;

pub use asha::{Asha, AshaConfig, AshaVariant};
pub use asha_promotion::AshaPromotion;
pub use fifo::Fifo;
pub use hyperband::{HyperBand, HyperBandConfig};
pub use median::{MedianConfig, MedianStopping};
pub use pbt::{Pbt, PbtConfig};
pub use tune_search::{FieldError, Mode, Params, TrialId};

/// What a trial does after a reported result (Ray Tune's CONTINUE / STOP).
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Continue,
    /// End the trial early: it is not promising.
    Stop,
    /// End the trial: it has the whole budget the scheduler gives (`max_t`).
    Complete,
    /// Checkpoint and wait: the scheduler resumes it later through
    /// [`Scheduler::choose_paused`] or ends it through [`Scheduler::drain_ended`].
    Pause,
    /// Population-based training: take over trial `from`'s checkpoint and go on with `params`.
    Exploit {
        from: TrialId,
        params: Params,
    },
}

/// Decides, result by result, whether trials continue.
///
/// ```
/// use tune_schedulers::{Decision, Fifo, Scheduler};
/// let mut s = Fifo;
/// assert_eq!(s.on_result(0, 1, 0.5), Decision::Continue);
/// ```
pub trait Scheduler: Send {
    /// A new trial starts (before its first result), with the params it was created with.
    fn on_trial_add(&mut self, _id: TrialId, _params: &Params) {}

    /// Trial `id` reported `value` of the metric at `step`.
    fn on_result(&mut self, id: TrialId, step: u64, value: f64) -> Decision;

    /// Trial `id` ended (completed, stopped or failed) after its last report, if any.
    fn on_complete(&mut self, _id: TrialId, _last: Option<(u64, f64)>) {}

    /// A paused trial to resume now, if one is ready; asked before a new trial is started.
    fn choose_paused(&mut self) -> Option<TrialId> {
        None
    }

    /// No trial will be added any more (the budget is spent): wait for no one else.
    fn on_no_more_trials(&mut self) {}

    /// Paused trials the scheduler has ended since the last call, with `Stop` or `Complete`.
    fn drain_ended(&mut self) -> Vec<(TrialId, Decision)> {
        Vec::new()
    }

    /// What the scheduler is doing now, a few short lines for a dashboard: rungs with their
    /// counts and cut-offs, brackets, the population and its recent exploits.
    ///
    /// ```
    /// use tune_schedulers::{Fifo, Scheduler};
    /// assert_eq!(Fifo.describe(), vec!["FIFO: every trial runs to its end".to_string()]);
    /// ```
    fn describe(&self) -> Vec<String> {
        Vec::new()
    }

    /// The steps at which this scheduler compares trials (its rungs, over all brackets),
    /// ascending; empty for schedulers that compare at every step or never. Plots mark them.
    ///
    /// ```
    /// use tune_schedulers::{Asha, AshaConfig, Fifo, Mode, Scheduler};
    /// let asha = Asha::new(AshaConfig { max_t: 9, grace_period: Some(1), reduction_factor: 3, ..Default::default() }, Mode::Min, 0);
    /// assert_eq!(asha.rungs(), vec![1, 3, 9]);
    /// assert!(Fifo.rungs().is_empty());
    /// ```
    fn rungs(&self) -> Vec<u64> {
        Vec::new()
    }

    /// The step at which this scheduler ends every trial that reaches it with `Complete`
    /// (ASHA's and HyperBand's `max_t`), where there is one: a trial can keep the checkpoint
    /// of that step before reporting it, so that its last model is on disk by the time its
    /// completion is.
    ///
    /// ```
    /// use tune_schedulers::{Asha, AshaConfig, Fifo, Mode, Scheduler};
    /// let asha = Asha::new(AshaConfig { max_t: 9, ..Default::default() }, Mode::Min, 0);
    /// assert_eq!(asha.completes_at(), Some(9));
    /// assert_eq!(Fifo.completes_at(), None);
    /// ```
    fn completes_at(&self) -> Option<u64> {
        None
    }
}

/// Every milestone of every bracket, ascending, each once.
pub(crate) fn merged_milestones(brackets: impl IntoIterator<Item = Vec<u64>>) -> Vec<u64> {
    let all: std::collections::BTreeSet<u64> = brackets.into_iter().flatten().collect();
    all.into_iter().collect()
}

/// Values oriented so that higher is better (as Ray Tune does internally).
pub(crate) fn reward(mode: Mode, value: f64) -> f64 {
    match mode {
        Mode::Max => value,
        Mode::Min => -value,
    }
}

/// A reward shown as the user's metric again, as the dashboard shows numbers.
pub(crate) fn shown(mode: Mode, reward: f64) -> String {
    tune_search::value_brief(match mode {
        Mode::Max => reward,
        Mode::Min => -reward,
    })
}
