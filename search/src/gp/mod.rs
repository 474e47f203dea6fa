//! Bayesian optimisation with a Gaussian process (`algorithm = "gp"`), built as Optuna 5's
//! `GPSampler` builds its own (optuna/_gp/) so that the two can be compared: a Matérn 5/2
//! kernel with one inverse squared length scale per dimension (Hamming distance on
//! categorical ones), a kernel scale and a noise variance, fitted by maximising the marginal
//! likelihood plus Optuna's priors, in log space, with `argmin`'s L-BFGS; log expected
//! improvement maximised from scrambled Sobol points by L-BFGS on continuous coordinates and
//! a discrete search on stepped and categorical ones. Inputs are in [0, 1] (`UnitSpace`) and
//! values standardised.

mod acquisition;
mod model;
mod searcher;
mod space;

pub use acquisition::{log_expected_improvement, log_expected_improvement_with_gradient};
pub use model::{fit, GpError, GpRegressor, KernelParams};
pub use searcher::{GpOptions, GpSearch};
pub use space::{ConditionalSpace, UnitSpace};

/// The answer at the last point asked, for argmin's problems: its L-BFGS asks for the cost
/// and then the gradient at the same point, and both come from one computation.
#[derive(Debug)]
struct LastAnswer<T>(std::cell::RefCell<Option<(Vec<f64>, T)>>);

impl<T> Default for LastAnswer<T> {
    fn default() -> Self {
        LastAnswer(std::cell::RefCell::new(None))
    }
}

impl<T: Clone> LastAnswer<T> {
    fn at(&self, point: &[f64], compute: impl FnOnce() -> T) -> T {
        if let Some((last, answer)) = &*self.0.borrow() {
            if last == point {
                return answer.clone();
            }
        }
        let answer = compute();
        *self.0.borrow_mut() = Some((point.to_vec(), answer.clone()));
        answer
    }
}
