//! `[constraints]`: reported keys that must stay within bounds for a trial to count.
//!
//! A trial's constraint values are Optuna's: one per bound, `value - max` or `min - value`,
//! met at or below 0. Searchers rank trials outside their bounds below every trial within
//! them; the best trial and the Pareto front are taken among the feasible ones.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tune_search::FieldError;

use crate::trial::Trial;

/// One constrained key's bounds (either or both).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bound {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
}

/// `[constraints] memory_mb = { max = 4000 }`: every constrained key, by name.
///
/// ```
/// let spec = tune::ExperimentSpec::from_toml(r#"
///     name = "small"
///     metric = "val_loss"
///     samples = 10
///     [constraints]
///     memory_mb = { max = 4000 }
///     accuracy = { min = 0.5, max = 1.0 }
///     [space]
///     x = { uniform = [0.0, 1.0] }
/// "#, "space.toml".as_ref()).unwrap();
/// let report = [("memory_mb".to_string(), 4500.0), ("accuracy".to_string(), 0.75)].into();
/// // accuracy: 0.5 - 0.75 and 0.75 - 1.0 (both met); memory_mb: 4500 - 4000.
/// assert_eq!(spec.constraints.values(&report), Ok(vec![-0.25, -0.25, 500.0]));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Constraints(pub BTreeMap<String, Bound>);

impl Constraints {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The constrained keys.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// Each bound checked: at least one, finite, `min <= max`.
    pub fn validate(&self) -> Result<(), FieldError> {
        for (key, bound) in &self.0 {
            let fail = |message: String| Err(FieldError::new(key, message));
            match (bound.min, bound.max) {
                (None, None) => {
                    return fail("expected a bound: { min = .. }, { max = .. } or both".into())
                }
                (Some(v), _) | (_, Some(v)) if !v.is_finite() => {
                    return fail(format!("expected finite bounds, found {v}"))
                }
                (Some(lo), Some(hi)) if lo > hi => {
                    return fail(format!("expected min <= max, found min = {lo}, max = {hi}"))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The constraint values of one report, in key order (`min - value` before
    /// `value - max`), each met at or below 0; or the first constrained key it lacks (or
    /// holds a non-finite value for).
    pub fn values(&self, metrics: &BTreeMap<String, f64>) -> Result<Vec<f64>, &str> {
        let mut out = Vec::with_capacity(self.0.len());
        for (key, bound) in &self.0 {
            let Some(&v) = metrics.get(key).filter(|v| v.is_finite()) else {
                return Err(key.as_str());
            };
            out.extend(bound.min.map(|lo| lo - v));
            out.extend(bound.max.map(|hi| v - hi));
        }
        Ok(out)
    }

    /// How far trial `t`'s last report was outside the bounds: the sum of its constraint
    /// values above 0 (Optuna's violation score); 0 within them or without constraints,
    /// infinite where the last report lacks a constrained key.
    pub fn violation(&self, t: &Trial) -> f64 {
        self.violation_of(t.results.last().map(|r| &r.metrics))
    }

    /// [`Constraints::violation`] of a last report (`None`: no report).
    pub fn violation_of(&self, last: Option<&BTreeMap<String, f64>>) -> f64 {
        if self.is_empty() {
            return 0.0;
        }
        match last.map(|metrics| self.values(metrics)) {
            Some(Ok(values)) => values.iter().map(|c| c.max(0.0)).sum(),
            _ => f64::INFINITY,
        }
    }

    /// Trial `t` is within every bound (always, without constraints).
    pub fn feasible(&self, t: &Trial) -> bool {
        self.violation(t) == 0.0
    }
}
