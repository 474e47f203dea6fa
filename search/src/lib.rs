//! Search spaces and search algorithms for `tune`.
//!
//! A [`Space`] names each parameter's [`Domain`]; a [`Searcher`] turns the sweep's
//! [`History`] into the [`Params`] of the next trial. Nothing here knows about storage,
//! threads or processes, so every algorithm is a deterministic function of its seed.
//!
//! ```
//! use tune_search::{History, Mode, RandomSearch, Searcher, Space};
//! let space: Space = toml::from_str(r#"
//!     lr = { loguniform = [1e-5, 1e-1] }
//!     optimizer = { choice = ["sgd", "adam"] }
//! "#).unwrap();
//! let mut search = RandomSearch::new(space, 42);
//! let params = search.suggest(0, &History::new(Mode::Min)).unwrap();
//! assert!(params.f64("lr").unwrap() < 0.1);
//! ```

mod auto;
mod domain;
mod field;
pub mod gp;
mod grid;
mod history;
mod initial;
mod nsga2;
mod number;
mod params;
pub mod pareto;
mod prior;
mod random;
mod searcher;
mod space;
mod space_serde;
mod tpe;

pub use auto::{
    gp_kernel as auto_gp_kernel, gp_options as auto_gp_options, AutoChoice, AutoOptions, AutoPick,
    AutoSearch, EarlyStopping, SweepShape, EXPLOIT_FRACTION, GP_TRIALS,
};
pub use domain::{Domain, DomainError};
pub use field::FieldError;
pub use grid::{GridSearch, NoGridParams};
pub use history::{History, Mode, Observation, Status, TrialId};
pub use initial::{PointError, WithInitialPoints};
pub use nsga2::{Nsga2, Nsga2Options};
pub use number::{params_digits, value_brief, value_digits, value_short, value_text};
pub use params::{ParamError, Params, Value};
pub use prior::{PriorTrial, WithPriorTrials};
pub use random::RandomSearch;
pub use searcher::{trial_rng, Searcher, Suggestion};
pub use space::{Condition, Param, Space, SpaceBuilder, SpaceError};
pub use tpe::{Fidelity, Tpe, TpeOptions};

/// The candidate closest to `found` by edit distance, if it is close enough to be a likely
/// typo, or a candidate that `found` abbreviates (`n_startup` for `n_startup_trials`).
///
/// ```
/// assert_eq!(tune_search::did_you_mean("sampels", ["samples", "seed"]), Some("samples"));
/// assert_eq!(tune_search::did_you_mean("n_startup", ["n_startup_trials", "seed"]), Some("n_startup_trials"));
/// assert_eq!(tune_search::did_you_mean("zzz", ["samples"]), None);
/// ```
pub fn did_you_mean<'a>(
    found: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let limit = (found.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .filter_map(|c| {
            let d = edit_distance(found, c);
            let abbreviates = found.chars().count() >= 4 && c.starts_with(found);
            (d <= limit || abbreviates).then_some((if abbreviates { 0 } else { d }, c))
        })
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

/// [`did_you_mean`] as the tail of an error message: `` (did you mean `samples`?)``, or
/// nothing when no candidate is close.
///
/// ```
/// assert_eq!(tune_search::did_you_mean_hint("sampels", ["samples"]), " (did you mean `samples`?)");
/// assert_eq!(tune_search::did_you_mean_hint("zzz", ["samples"]), "");
/// ```
pub fn did_you_mean_hint<'a>(found: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    did_you_mean(found, candidates)
        .map(|s| format!(" (did you mean `{s}`?)"))
        .unwrap_or_default()
}

/// Levenshtein distance with adjacent transpositions counted as one edit.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}
