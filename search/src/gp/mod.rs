//! Bayesian optimisation with a Gaussian process (`algorithm = "gp"`), built as Optuna 5's
//! `GPSampler` builds its own (optuna/_gp/) so that the two can be compared: a Matérn 5/2
//! kernel (3/2 with `GpOptions::kernel`) with one inverse squared length scale per dimension (Hamming distance on
//! categorical ones), a kernel scale and a noise variance, fitted by maximising the marginal
//! likelihood plus Optuna's priors, in log space, with `argmin`'s L-BFGS; log expected
//! improvement maximised from scrambled Sobol points by L-BFGS on continuous coordinates and
//! a discrete search on stepped and categorical ones. Inputs are in [0, 1] (`UnitSpace`) and
//! values standardised, by default after a Yeo-Johnson power transform (HEBO's; `warp`).

/// `$f(values)` (an `#[inline(always)]` function), compiled a second time for AVX2 and run so
/// where the CPU has it. The same arithmetic in wider registers (Rust never fuses a multiply
/// and an add), so the same bits either way: a suggestion does not depend on the CPU.
macro_rules! avx2_or_portable {
    ($f:path, ($($arg:ident: $ty:ty = $value:expr),*) -> $ret:ty) => {{
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        fn avx2($($arg: $ty),*) -> $ret {
            $f($($arg),*)
        }
        #[inline(always)]
        fn either($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            if std::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2, checked just above.
                return unsafe { avx2($($arg),*) };
            }
            $f($($arg),*)
        }
        either($($value),*)
    }};
}

mod acquisition;
mod fit;
mod linalg;
mod model;
mod optimise;
mod refit;
mod searcher;
mod space;
mod warp;

pub use acquisition::{
    log_expected_improvement, log_expected_improvement_with_gradient, log_probability_above,
};
pub use fit::fit;
pub use linalg::GpError;
pub use model::{GpRegressor, KernelParams, Matern};
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

/// Minimises `problem` from `start` with argmin's L-BFGS (memory 10, More-Thuente line
/// search) as scipy's L-BFGS-B does, which Optuna uses: argmin's first step is as long as the
/// gradient, scipy's is of length 1. So the search runs on u = c x with c = sqrt(|g0|), where
/// argmin's first step is scipy's; later steps do not depend on a uniform scale (L-BFGS's
/// initial matrix is scaled from the last step). Stops when the gradient's norm falls below
/// `tolerance` (in x) or after `max_iters`; `None` where argmin fails. Returns the best point
/// and its cost.
fn lbfgs_minimise<P>(
    problem: P,
    start: Vec<f64>,
    tolerance: f64,
    max_iters: u64,
) -> Option<(Vec<f64>, f64)>
where
    P: argmin::core::CostFunction<Param = Vec<f64>, Output = f64>
        + argmin::core::Gradient<Param = Vec<f64>, Gradient = Vec<f64>>,
{
    use argmin::core::{Executor, State};
    use argmin::solver::linesearch::MoreThuenteLineSearch;
    use argmin::solver::quasinewton::LBFGS;
    let g0 = problem.gradient(&start).ok()?;
    let f0 = problem.cost(&start).ok()?;
    let norm = g0.iter().map(|g| g * g).sum::<f64>().sqrt();
    let scale = if norm.is_finite() && norm > 0.0 {
        norm.sqrt()
    } else {
        1.0
    };
    // scipy's other test: a step that lowers the cost by less than factr * machine epsilon
    // (2.2e-9) of it ends the search (argmin's is absolute: taken at the start's cost).
    let solver = LBFGS::new(MoreThuenteLineSearch::new(), 10)
        .with_tolerance_grad(tolerance / scale)
        .ok()?
        .with_tolerance_cost(SCIPY_FTOL * f0.abs().max(1.0))
        .ok()?;
    let u0: Vec<f64> = start.iter().map(|x| x * scale).collect();
    let result = Executor::new(Rescaled { problem, scale }, solver)
        .configure(|s| s.param(u0).max_iters(max_iters))
        .run()
        .ok()?;
    let state = result.state();
    let best = state.get_best_param()?;
    Some((
        best.iter().map(|u| u / scale).collect(),
        state.get_best_cost(),
    ))
}

/// scipy's L-BFGS-B default `ftol` (factr 1e7 times the machine epsilon).
const SCIPY_FTOL: f64 = 1e7 * f64::EPSILON;

/// A problem in x solved for u = scale x.
struct Rescaled<P> {
    problem: P,
    scale: f64,
}

impl<P> Rescaled<P> {
    fn x(&self, u: &[f64]) -> Vec<f64> {
        u.iter().map(|u| u / self.scale).collect()
    }
}

impl<P: argmin::core::CostFunction<Param = Vec<f64>, Output = f64>> argmin::core::CostFunction
    for Rescaled<P>
{
    type Param = Vec<f64>;
    type Output = f64;
    fn cost(&self, u: &Vec<f64>) -> Result<f64, argmin::core::Error> {
        self.problem.cost(&self.x(u))
    }
}

impl<P: argmin::core::Gradient<Param = Vec<f64>, Gradient = Vec<f64>>> argmin::core::Gradient
    for Rescaled<P>
{
    type Param = Vec<f64>;
    type Gradient = Vec<f64>;
    fn gradient(&self, u: &Vec<f64>) -> Result<Vec<f64>, argmin::core::Error> {
        let g = self.problem.gradient(&self.x(u))?;
        Ok(g.iter().map(|g| g / self.scale).collect())
    }
}
