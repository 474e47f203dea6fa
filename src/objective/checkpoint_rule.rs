//! When a built-in trial's checkpoint is written, relative to its report: one rule for a
//! trial trained alone (`builtin.rs`) and one trained in a pack (`pack.rs`).

use super::Stop;

/// Whether the checkpoint of `epoch` is written before the epoch is reported: at the step
/// where the scheduler completes every trial (`completes_at`, ASHA's and HyperBand's
/// `max_t`). The coordinator stores the completion before the trial hears it, so a checkpoint
/// written after the decision could be lost to a `kill -9` in between, and a completed trial
/// is never run again.
pub(crate) fn written_before_report(epoch: u64, completes_at: Option<u64>) -> bool {
    completes_at == Some(epoch)
}

/// When a trial's checkpoint is written after a report was `heard` (none where it was
/// written `before` the report, see [`written_before_report`]): a trial going on has it
/// written behind the next epoch's training; a paused one, one that trained all its epochs and
/// one the scheduler completes (ASHA at `max_t`) have it on disk before the trial goes on (it
/// is resumed from it, or kept as the trial's last, the model of its last report); a stopped
/// one needs none. Whether a trial trains in a pack or alone, this is where it is decided.
pub(crate) fn checkpoint_after(
    heard: &Result<(), Stop>,
    finished: bool,
    before: bool,
) -> Option<CheckpointWrite> {
    match heard {
        _ if before => None,
        Ok(()) if !finished => Some(CheckpointWrite::Behind),
        Ok(()) | Err(Stop::Paused | Stop::Completed) => Some(CheckpointWrite::Now),
        Err(Stop::Scheduler | Stop::Interrupted | Stop::TimedOut) => None,
    }
}

/// When a checkpoint is written: see [`checkpoint_after`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CheckpointWrite {
    /// Queued for the process's checkpoint threads ([`tune_trials::checkpoint::write_behind`]).
    Behind,
    /// On disk before the trial goes on ([`tune_trials::checkpoint::write`]).
    Now,
}
