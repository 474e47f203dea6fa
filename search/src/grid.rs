//! Grid search with Ray Tune's `grid_search` semantics.

use crate::{trial_rng, Domain, History, Params, Searcher, Space, TrialId, Value};

/// Enumerates every combination of the space's `grid` parameters, `samples` times over; the
/// other parameters are drawn at random for each trial (as Ray Tune does). Trial `id` gets
/// grid point `id % points`, so a sweep of `samples` repeats has `samples * points` trials.
///
/// ```
/// use tune_search::{GridSearch, History, Mode, Searcher, Space};
/// let space = Space::builder().grid("a", [1, 2]).grid("b", ["x", "y", "z"]).build().unwrap();
/// let mut g = GridSearch::new(space, 0).unwrap();
/// assert_eq!(g.points(), 6);
/// assert_eq!(g.total_trials(2), 12);
/// let h = History::new(Mode::Min);
/// assert_eq!(g.suggest(0, &h), g.suggest(6, &h)); // second repeat of point 0
/// ```
#[derive(Debug, Clone)]
pub struct GridSearch {
    space: Space,
    seed: u64,
    axes: Vec<(String, Vec<Value>)>,
}

/// Grid search was asked for a space without `grid` parameters.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("grid search needs at least one parameter with a `grid` domain, found none (use `grid = [..]` in the space, or the random algorithm)")]
pub struct NoGridParams;

impl GridSearch {
    pub fn new(space: Space, seed: u64) -> Result<GridSearch, NoGridParams> {
        let axes: Vec<(String, Vec<Value>)> = space
            .params()
            .iter()
            .filter_map(|p| match &p.domain {
                Domain::Grid(v) => Some((p.name.clone(), v.clone())),
                _ => None,
            })
            .collect();
        if axes.is_empty() {
            return Err(NoGridParams);
        }
        Ok(GridSearch { space, seed, axes })
    }

    /// Number of grid points (the product of the grid parameters' sizes).
    pub fn points(&self) -> u64 {
        self.axes.iter().map(|(_, v)| v.len() as u64).product()
    }

    /// The grid values of point `index`; the first grid parameter varies fastest.
    fn point(&self, mut index: u64) -> Params {
        let mut p = Params::default();
        for (name, values) in &self.axes {
            let n = values.len() as u64;
            p.insert(name.clone(), values[(index % n) as usize].clone());
            index /= n;
        }
        p
    }
}

impl Searcher for GridSearch {
    fn suggest(&mut self, id: TrialId, _history: &History) -> Option<Params> {
        let fixed = self.point(id % self.points());
        Some(
            self.space
                .sample_with(&mut trial_rng(self.seed, id), &fixed),
        )
    }

    fn total_trials(&self, samples: u64) -> u64 {
        samples.saturating_mul(self.points())
    }

    fn reads_history(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Mode;

    #[test]
    fn every_point_once_per_repeat_and_random_rest() {
        let space = Space::builder()
            .grid("a", [1, 2, 3])
            .grid("b", [true, false])
            .uniform("x", 0.0, 1.0)
            .build()
            .unwrap();
        let mut g = GridSearch::new(space, 9).unwrap();
        let h = History::new(Mode::Min);
        let trials: Vec<Params> = (0..12).map(|id| g.suggest(id, &h).unwrap()).collect();
        let key = |p: &Params| (p.i64("a").unwrap(), p.bool("b").unwrap());
        let mut first: Vec<_> = trials[..6].iter().map(key).collect();
        first.sort();
        first.dedup();
        assert_eq!(first.len(), 6, "one repeat covers the whole grid");
        for i in 0..6 {
            assert_eq!(key(&trials[i]), key(&trials[i + 6]));
            assert_ne!(trials[i].f64("x").unwrap(), trials[i + 6].f64("x").unwrap());
        }
    }

    #[test]
    fn space_without_grid_is_refused() {
        let space = Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
        assert!(GridSearch::new(space, 0).is_err());
    }
}
