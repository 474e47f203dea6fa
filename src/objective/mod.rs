//! Objectives: what a trial runs. A Rust closure on a worker thread, or a command in a child
//! process; both report results to the coordinator and wait for its decision.

#[cfg(feature = "builtin")]
mod builtin;
#[cfg(feature = "builtin")]
mod checkpoint_rule;
mod closure;
pub(crate) mod command;
mod cores;
#[cfg(feature = "builtin")]
mod pack;
#[cfg(feature = "builtin")]
mod pack_settings;
pub(crate) mod spec;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tune_search::{Params, TrialId};

use crate::pool::Slot;
use crate::protocol::WorkerMsg;

#[cfg(feature = "builtin")]
pub(crate) use builtin::builtin_objective;
pub use closure::{ObjectiveFn, TrialContext};
pub(crate) use command::CommandObjective;
pub use cores::{share_cores_among_trials, share_cores_among_worker_slots};

/// The error a closure objective returns (anything that converts with `?`).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why [`TrialContext::report`] asks the objective to end now.
///
/// Return it (with `?`) from the closure; the coordinator records the right status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Stop {
    #[error("the scheduler stopped this trial")]
    Scheduler,
    /// The trial has the whole budget the scheduler gives it (ASHA's `max_t`): it ends as
    /// completed. Keep what it trained (a built-in trainable writes its last checkpoint).
    #[error("the scheduler completed this trial")]
    Completed,
    /// Checkpoint into `checkpoint_dir` and return: the trial is resumed later with
    /// `restore_dir` pointing at that checkpoint.
    #[error("the scheduler paused this trial")]
    Paused,
    /// The sweep is shutting down, or this run is no longer the trial's (its last report was
    /// not kept): return without saving a checkpoint of the step just reported.
    #[error("the sweep is shutting down")]
    Interrupted,
    #[error("the trial ran past its timeout")]
    TimedOut,
}

/// How a trial is run.
#[derive(Clone)]
pub(crate) enum Objective {
    Closure(Arc<ObjectiveFn>),
    Command(Arc<CommandObjective>),
}

/// Everything a worker needs to run one attempt of one trial.
pub(crate) struct Job {
    pub id: TrialId,
    pub attempt: u32,
    pub params: Params,
    /// The slot it runs on (its device; a remote worker's own slot on that worker).
    pub device: Slot,
    pub trial_dir: PathBuf,
    /// The checkpoint to continue from (a paused or interrupted trial that left one).
    pub restore_dir: Option<PathBuf>,
    pub timeout: Option<Duration>,
    /// The step at which the scheduler completes every trial that reaches it, if it does
    /// (`Scheduler::completes_at`): a built-in trial writes that step's checkpoint before
    /// reporting it.
    pub completes_at: Option<u64>,
    pub tx: mpsc::UnboundedSender<WorkerMsg>,
    pub shutdown: watch::Receiver<bool>,
    /// Set when a control stopped the trial: the run ends now (its trial is already settled).
    pub cancel: watch::Receiver<bool>,
    /// Its place in a gang of workers (`nodes_per_trial` above 1); `None` on one machine.
    pub gang: Option<command::GangPlace>,
}

impl Objective {
    /// Starts the attempt on its own thread or task; it ends with a `Finished` message.
    pub(crate) fn launch(&self, job: Job) {
        match self {
            Objective::Closure(f) => closure::launch(f.clone(), job),
            Objective::Command(c) => {
                tokio::spawn(command::run(c.clone(), job));
            }
        }
    }
}

/// Metrics in any of the usual shapes: `&[("loss", 0.3)]`, `[("loss", 0.3)]`, maps, vectors.
pub trait IntoMetrics {
    fn into_metrics(self) -> BTreeMap<String, f64>;
}

impl IntoMetrics for BTreeMap<String, f64> {
    fn into_metrics(self) -> BTreeMap<String, f64> {
        self
    }
}
impl IntoMetrics for HashMap<String, f64> {
    fn into_metrics(self) -> BTreeMap<String, f64> {
        self.into_iter().collect()
    }
}
impl IntoMetrics for Vec<(String, f64)> {
    fn into_metrics(self) -> BTreeMap<String, f64> {
        self.into_iter().collect()
    }
}
impl IntoMetrics for &[(&str, f64)] {
    fn into_metrics(self) -> BTreeMap<String, f64> {
        self.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }
}
impl<const N: usize> IntoMetrics for [(&str, f64); N] {
    fn into_metrics(self) -> BTreeMap<String, f64> {
        self.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }
}

/// The `{name}` placeholders of one argv element (`{{` and `}}` are literal braces).
pub(crate) fn placeholders(arg: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let mut rest = arg;
    while let Some(i) = rest.find(['{', '}']) {
        let (c, after) = (rest.as_bytes()[i], &rest[i + 1..]);
        if after.starts_with(c as char) {
            rest = &after[1..];
            continue;
        }
        if c == b'}' {
            return Err(format!(
                "unmatched `}}` in \"{arg}\" (write `}}}}` for a literal brace)"
            ));
        }
        let end = after.find('}').ok_or_else(|| {
            format!("unclosed `{{` in \"{arg}\" (write `{{{{` for a literal brace)")
        })?;
        out.push(&after[..end]);
        rest = &after[end + 1..];
    }
    Ok(out)
}

/// Replaces each `{name}` with the parameter's value, or the launch placeholder's where the
/// trial is distributed; an inactive parameter becomes "".
pub(crate) fn substitute(arg: &str, params: &Params, launch: Option<&command::Launch>) -> String {
    let mut out = String::with_capacity(arg.len());
    let mut rest = arg;
    while let Some(i) = rest.find(['{', '}']) {
        out.push_str(&rest[..i]);
        let (c, after) = (rest.as_bytes()[i] as char, &rest[i + 1..]);
        if after.starts_with(c) {
            out.push(c);
            rest = &after[1..];
        } else if let (Some(end), '{') = (after.find('}'), c) {
            let name = &after[..end];
            if let Some(v) = params.get(name) {
                out.push_str(&v.to_string());
            } else if let Some(v) = launch.and_then(|l| l.value(name)) {
                out.push_str(&v);
            }
            rest = &after[end + 1..];
        } else {
            out.push(c);
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tune_search::Value;

    #[test]
    fn placeholders_and_escapes() {
        assert_eq!(placeholders("--lr={lr}").unwrap(), vec!["lr"]);
        assert_eq!(placeholders("{a}{b} {{c}}").unwrap(), vec!["a", "b"]);
        assert!(placeholders("{oops").unwrap_err().contains("unclosed"));
        assert!(placeholders("oops}").unwrap_err().contains("unmatched"));
    }

    #[test]
    fn substitution_uses_exact_values() {
        let mut p = Params::default();
        p.insert("lr", Value::Float(0.1 + 0.2));
        p.insert("n", Value::Int(3));
        assert_eq!(
            substitute("--lr={lr}", &p, None),
            "--lr=0.30000000000000004"
        );
        assert_eq!(substitute("{n}x{{n}}{missing}", &p, None), "3x{n}");
    }
}
