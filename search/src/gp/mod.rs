//! Gaussian-process regression, the model of the coming `algorithm = "gp"` (issue 19), built
//! as Optuna 5's `GPSampler` builds its own (optuna/_gp/gp.py and prior.py) so that the two
//! can be compared: a Matérn 5/2 kernel with one inverse squared length scale per dimension
//! (Hamming distance on categorical ones), a kernel scale and a noise variance, fitted by
//! maximising the marginal likelihood plus Optuna's priors, in log space, with `argmin`'s
//! L-BFGS. Inputs are expected in [0, 1] and values standardised.

mod acquisition;
mod model;
mod searcher;
mod space;

pub use acquisition::{log_expected_improvement, log_expected_improvement_with_gradient};
pub use model::{fit, GpError, GpRegressor, KernelParams};
pub use searcher::{GpOptions, GpSearch};
pub use space::{ConditionalSpace, UnitSpace};
