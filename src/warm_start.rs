//! `tune run --warm-start`: an earlier sweep's completed trials, read and checked against this
//! sweep, for its algorithm to learn from.

use std::collections::BTreeSet;
use std::path::Path;

use tune_search::{PriorTrial, Status};

use crate::experiment::Experiment;
use crate::store::StoredExperiment;
use crate::{ExperimentSpec, TuneError, WarmStart};

/// What `--warm-start` found in an earlier sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct WarmStartRead {
    pub warm_start: WarmStart,
    /// Completed trials whose params lie outside this sweep's space (its ranges narrowed), not
    /// taken.
    pub left_out: usize,
}

/// The completed trials of the experiment in folder `from`, for `spec`'s sweep. Refused (with
/// what differs named) where the earlier sweep optimised another metric or direction, or its
/// parameters are not this space's (other names, or a choice where this one has numbers).
/// Trials whose values this space's ranges no longer hold are left out and counted.
///
/// ```no_run
/// # fn main() -> Result<(), tune::TuneError> {
/// let (spec, _) = tune::ExperimentSpec::read("space.toml".as_ref())?;
/// let read = tune::read_warm_start("runs/first".as_ref(), &spec)?;
/// let tuner = tune::Tuner::from_spec(spec).warm_start(read.warm_start);
/// # drop(tuner);
/// # Ok(())
/// # }
/// ```
pub fn read_warm_start(from: &Path, spec: &ExperimentSpec) -> Result<WarmStartRead, TuneError> {
    let exp = Experiment::open(from)?;
    prior_trials(&exp.stored, from.display().to_string(), spec)
}

/// [`read_warm_start`] for experiment `name` kept in the PostgreSQL database at `url`
/// (`tune run --warm-start NAME --store URL`).
///
/// ```no_run
/// # fn main() -> Result<(), tune::TuneError> {
/// let (spec, _) = tune::ExperimentSpec::read("space.toml".as_ref())?;
/// let read = tune::read_warm_start_stored("postgres://tune@db/tune", "first", &spec)?;
/// # drop(read);
/// # Ok(())
/// # }
/// ```
pub fn read_warm_start_stored(
    url: &str,
    name: &str,
    spec: &ExperimentSpec,
) -> Result<WarmStartRead, TuneError> {
    let stored = Experiment::read_postgres(url, name)?;
    prior_trials(&stored, name.to_string(), spec)
}

/// The completed trials of `stored` (called `name` in messages), checked against `spec`.
fn prior_trials(
    stored: &StoredExperiment,
    name: String,
    spec: &ExperimentSpec,
) -> Result<WarmStartRead, TuneError> {
    let earlier = &stored.meta.spec;
    let refuse = |why: String| Err(TuneError::Invalid(format!("--warm-start {name}: {why}")));
    if earlier.metric != spec.metric || earlier.mode != spec.mode {
        return refuse(format!(
            "it optimised `{}` ({}), this sweep `{}` ({}): its values would mean something else",
            earlier.metric,
            earlier.mode.as_str(),
            spec.metric,
            spec.mode.as_str()
        ));
    }
    let names = |s: &ExperimentSpec| -> BTreeSet<String> {
        s.space.params().iter().map(|p| p.name.clone()).collect()
    };
    let (ours, theirs) = (names(spec), names(earlier));
    if ours != theirs {
        let list = |set: BTreeSet<&String>| {
            set.iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut parts = Vec::new();
        let only_ours: BTreeSet<&String> = ours.difference(&theirs).collect();
        let only_theirs: BTreeSet<&String> = theirs.difference(&ours).collect();
        if !only_ours.is_empty() {
            parts.push(format!("only in this sweep's: {}", list(only_ours)));
        }
        if !only_theirs.is_empty() {
            parts.push(format!("only in its: {}", list(only_theirs)));
        }
        return refuse(format!("the spaces differ: {}", parts.join("; ")));
    }
    for param in spec.space.params() {
        let Some(before) = earlier.space.param(&param.name) else {
            continue;
        };
        let choice = |d: &tune_search::Domain| d.values().is_some();
        if choice(&param.domain) != choice(&before.domain) {
            return refuse(format!(
                "`{}` is a {} here and a {} there",
                param.name,
                param.domain.kind(),
                before.domain.kind()
            ));
        }
    }
    let mut trials = Vec::new();
    let mut left_out = 0;
    for trial in &stored.trials {
        let Some(value) = trial.value(&spec.metric).filter(|v| v.is_finite()) else {
            continue;
        };
        if trial.status != Status::Completed {
            continue;
        }
        match spec.space.check_point(&trial.params) {
            Ok(params) => trials.push(PriorTrial { params, value }),
            Err(_) => left_out += 1,
        }
    }
    Ok(WarmStartRead {
        warm_start: WarmStart { from: name, trials },
        left_out,
    })
}
