//! TPE options for the benches: the defaults, or `TUNE_TPE_OPTS` (JSON) for experiments.

use tune_search::TpeOptions;

/// `TpeOptions::default()`, or what `TUNE_TPE_OPTS` holds (e.g. `{"gamma_fraction":0.1}`).
pub fn tpe_options() -> TpeOptions {
    std::env::var("TUNE_TPE_OPTS")
        .map(|j| serde_json::from_str(&j).expect("TUNE_TPE_OPTS"))
        .unwrap_or_default()
}
