//! Random search: every trial draws each active parameter independently.

use crate::{trial_rng, History, Params, Searcher, Space, TrialId};

/// Independent draws from the space; grid parameters are drawn like choices.
///
/// ```
/// use tune_search::{History, Mode, RandomSearch, Searcher, Space};
/// let space = Space::builder().int("n", 1, 3).build().unwrap();
/// let mut s = RandomSearch::new(space, 0);
/// let n = s.suggest(0, &History::new(Mode::Min)).unwrap().i64("n").unwrap();
/// assert!((1..=3).contains(&n));
/// ```
#[derive(Debug, Clone)]
pub struct RandomSearch {
    space: Space,
    seed: u64,
}

impl RandomSearch {
    pub fn new(space: Space, seed: u64) -> RandomSearch {
        RandomSearch { space, seed }
    }
}

impl Searcher for RandomSearch {
    fn suggest(&mut self, id: TrialId, _history: &History) -> Option<Params> {
        Some(self.space.sample(&mut trial_rng(self.seed, id)))
    }

    fn reads_history(&self) -> bool {
        false
    }
}
