//! Trial schedulers for `tune`: they answer each reported result with a [`Decision`].
//!
//! Schedulers decide from numbers they are given; the coordinator turns decisions into
//! processes and signals. Every scheduler's state is a function of the results it was fed, in
//! order, so a resumed sweep rebuilds it by replaying the stored results.
//!
//! Written: FIFO, median stopping, ASHA (the stopping variant Ray Tune ships). Not yet:
//! HyperBand, PBT and ASHA's promotion variant, which need pausing trials.

mod asha;
mod fifo;
mod median;

pub use asha::{Asha, AshaConfig};
pub use fifo::Fifo;
pub use median::{MedianConfig, MedianStopping};
pub use tune_search::{Mode, TrialId};

/// What a trial does after a reported result (Ray Tune's CONTINUE / STOP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Continue,
    /// End the trial early: it is not promising.
    Stop,
    /// End the trial: it has the whole budget the scheduler gives (`max_t`).
    Complete,
}

/// Decides, result by result, whether trials continue.
///
/// ```
/// use tune_schedulers::{Decision, Fifo, Scheduler};
/// let mut s = Fifo;
/// assert_eq!(s.on_result(0, 1, 0.5), Decision::Continue);
/// ```
pub trait Scheduler: Send {
    /// Trial `id` reported `value` of the metric at `step`.
    fn on_result(&mut self, id: TrialId, step: u64, value: f64) -> Decision;

    /// Trial `id` ended (completed, stopped or failed) after its last report, if any.
    fn on_complete(&mut self, _id: TrialId, _last: Option<(u64, f64)>) {}
}

/// Values oriented so that higher is better (as Ray Tune does internally).
pub(crate) fn reward(mode: Mode, value: f64) -> f64 {
    match mode {
        Mode::Max => value,
        Mode::Min => -value,
    }
}
