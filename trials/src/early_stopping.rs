//! Early stopping inside a trial: stop once the validation loss has not improved by
//! `min_delta` for `patience` epochs (Keras' and Lightning's rule).

use serde::{Deserialize, Serialize};

/// ```
/// let mut es = tune_trials::EarlyStopping::new(2, 0.01);
/// assert!(!es.observe(1.0)); // best so far
/// assert!(!es.observe(0.995)); // not better by 0.01: 1 bad epoch
/// assert!(es.observe(0.999)); // 2 bad epochs: stop
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EarlyStopping {
    pub patience: u64,
    pub min_delta: f64,
    /// Lowest loss seen so far.
    pub best: f64,
    /// Epochs since `best` last improved.
    pub bad_epochs: u64,
}

impl EarlyStopping {
    pub fn new(patience: u64, min_delta: f64) -> EarlyStopping {
        EarlyStopping {
            patience,
            min_delta,
            best: f64::INFINITY,
            bad_epochs: 0,
        }
    }

    /// Records one epoch's loss; true when the trial should stop.
    pub fn observe(&mut self, loss: f64) -> bool {
        if loss < self.best - self.min_delta {
            self.best = loss;
            self.bad_epochs = 0;
            return false;
        }
        self.bad_epochs += 1;
        self.bad_epochs >= self.patience
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_counts_as_no_improvement_and_patience_zero_stops_at_the_first_miss() {
        let mut es = EarlyStopping::new(3, 0.0);
        assert!(!es.observe(0.5) && !es.observe(f64::NAN) && !es.observe(0.4));
        assert_eq!((es.best, es.bad_epochs), (0.4, 0));
        let mut es = EarlyStopping::new(0, 0.0);
        assert!(!es.observe(1.0) && es.observe(1.0));
    }
}
