//! Trial schedulers for `tune`: they answer each reported result with a [`Decision`].
//!
//! Schedulers decide from numbers they are given; the coordinator turns decisions into
//! processes and signals. This crate holds the trait and FIFO; the early-stopping schedulers
//! (median stopping, ASHA, HyperBand, PBT) are not written yet.

mod fifo;

pub use fifo::Fifo;
pub use tune_search::TrialId;

/// What a trial does after a reported result (Ray Tune's CONTINUE / STOP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Continue,
    Stop,
}

impl Decision {
    /// The line written to a command objective's stdin.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Continue => "continue",
            Decision::Stop => "stop",
        }
    }
}

/// Decides, result by result, whether trials continue.
///
/// ```
/// use tune_schedulers::{Decision, Fifo, Scheduler};
/// let mut s = Fifo;
/// assert_eq!(s.on_result(0, 1, 0.5), Decision::Continue);
/// ```
pub trait Scheduler: Send {
    /// A trial reported `value` of the metric at `step`.
    fn on_result(&mut self, id: TrialId, step: u64, value: f64) -> Decision;

    /// A trial ended (completed, stopped or failed); `value` is its last metric, if any.
    fn on_complete(&mut self, _id: TrialId, _value: Option<f64>) {}
}
