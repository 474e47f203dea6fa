//! The `Searcher` trait: how a sweep gets the parameters of its next trial.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::{AutoChoice, History, Params, TrialId};

/// Proposes parameters for new trials.
///
/// Suggestions are a pure function of (seed, trial id, history), so a resumed sweep needs no
/// saved searcher state and a one-worker sweep is reproducible bit for bit.
///
/// ```
/// use tune_search::{History, Mode, RandomSearch, Searcher, Space};
/// let space = Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
/// let mut s = RandomSearch::new(space, 7);
/// let h = History::new(Mode::Min);
/// assert_eq!(s.suggest(3, &h), s.suggest(3, &h));
/// ```
pub trait Searcher: Send {
    /// Parameters for trial `id`, or `None` when the searcher has nothing more to propose.
    fn suggest(&mut self, id: TrialId, history: &History) -> Option<Params>;

    /// How many trials a sweep with budget `samples` creates (grid search: samples x points).
    fn total_trials(&self, samples: u64) -> u64 {
        samples
    }

    /// Whether suggestions depend on the history. A searcher that says no is handed an
    /// empty one, so that a long sweep keeps no record of finished trials in memory.
    fn reads_history(&self) -> bool {
        true
    }

    /// The sweep's budget is `samples` trials (told before the first suggestion, and again
    /// when a resume or a running sweep raises it): a searcher that plans for the sweep's end
    /// (`auto`'s last trials) plans for this one. The others ignore it.
    fn set_samples(&mut self, _samples: u64) {}

    /// [`suggest`](Searcher::suggest), with the searcher that made the suggestion and why, for
    /// a searcher that hands each one to another (`auto`). A searcher that is one algorithm
    /// keeps this default, which names none.
    fn suggest_with_reason(&mut self, id: TrialId, history: &History) -> Option<Suggestion> {
        self.suggest(id, history).map(|params| Suggestion {
            params,
            suggested_by: None,
        })
    }
}

/// A trial's parameters and, under `auto`, which searcher suggested them and why (`None` for
/// a searcher that is one algorithm, and for an initial point).
///
/// ```
/// use tune_search::{History, Mode, RandomSearch, Searcher, Space};
/// let space = Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
/// let s = RandomSearch::new(space, 7).suggest_with_reason(0, &History::new(Mode::Min)).unwrap();
/// assert!(s.suggested_by.is_none());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Suggestion {
    pub params: Params,
    pub suggested_by: Option<AutoChoice>,
}

/// The random stream of trial `id`: independent per trial, fixed by (seed, id).
///
/// ```
/// use rand::Rng;
/// let a: u64 = tune_search::trial_rng(1, 5).random();
/// let b: u64 = tune_search::trial_rng(1, 5).random();
/// let c: u64 = tune_search::trial_rng(1, 6).random();
/// assert_eq!(a, b);
/// assert_ne!(a, c);
/// ```
pub fn trial_rng(seed: u64, id: TrialId) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(id);
    rng
}
