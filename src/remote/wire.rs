//! How the coordinator and workers speak through the database, beside its tables: the
//! channels each side is woken on, what a notification says, and metrics as text.

use std::collections::BTreeMap;
use std::time::Duration;

/// How often each side looks at the database when no notification woke it.
pub(crate) const POLL: Duration = Duration::from_millis(200);

/// The channel a coordinator listens on for its experiment.
pub(crate) fn coordinator_channel(experiment: i64) -> String {
    format!("tune_e{experiment}")
}

/// What a worker's notification to its coordinator says it wrote.
pub(crate) const NOTE_REPORT: &str = "report";
pub(crate) const NOTE_CLAIM: &str = "claim";
pub(crate) const NOTE_END: &str = "end";
/// A control was asked of the coordinator (`tune_controls`).
pub(crate) const NOTE_CONTROL: &str = "control";

/// The channels workers listen on: new offers, and decisions (the payload is `id:decision`,
/// the report's id and what it heard).
pub(crate) const OFFERS_CHANNEL: &str = "tune_offers";
pub(crate) const DECISIONS_CHANNEL: &str = "tune_decisions";

/// Metrics as `tune_reports.metrics` holds them: JSON with each value as Rust prints it, so
/// that NaN and infinities (which JSON lacks) reach the coordinator, which judges them.
pub(crate) fn metrics_to_text(metrics: &BTreeMap<String, f64>) -> String {
    let printed: BTreeMap<&str, String> = metrics
        .iter()
        .map(|(k, v)| (k.as_str(), v.to_string()))
        .collect();
    serde_json::to_string(&printed).unwrap_or_else(|_| "{}".into())
}

pub(crate) fn metrics_from_text(text: &str) -> BTreeMap<String, f64> {
    let printed: BTreeMap<String, String> = serde_json::from_str(text).unwrap_or_default();
    printed
        .into_iter()
        .map(|(k, v)| {
            let value = v.parse().unwrap_or(f64::NAN);
            (k, value)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_keep_every_value_exactly_nan_included() {
        let metrics = BTreeMap::from([
            ("a".to_string(), 0.1 + 0.2),
            ("b".to_string(), f64::NAN),
            ("c".to_string(), f64::NEG_INFINITY),
            ("d".to_string(), 1e-300),
        ]);
        let back = metrics_from_text(&metrics_to_text(&metrics));
        assert_eq!(back["a"], 0.1 + 0.2);
        assert!(back["b"].is_nan());
        assert_eq!(back["c"], f64::NEG_INFINITY);
        assert_eq!(back["d"], 1e-300);
    }
}
