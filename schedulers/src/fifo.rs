//! FIFO: every trial runs to its end, in creation order.

use crate::{Decision, Scheduler, TrialId};

/// Lets every trial run to completion (Ray Tune's `FIFOScheduler`).
///
/// ```
/// use tune_schedulers::{Decision, Fifo, Scheduler};
/// assert_eq!(Fifo.on_result(7, 100, f64::MAX), Decision::Continue);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Fifo;

impl Scheduler for Fifo {
    fn on_result(&mut self, _id: TrialId, _step: u64, _value: f64) -> Decision {
        Decision::Continue
    }

    fn describe(&self) -> Vec<String> {
        vec!["FIFO: every trial runs to its end".into()]
    }
}
