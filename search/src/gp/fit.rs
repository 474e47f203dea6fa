//! Fitting the kernel: Optuna's priors, the marginal likelihood and its gradient in
//! Optuna's raw parameters, maximised with argmin's L-BFGS.

use argmin::core::{CostFunction, Gradient};

use super::linalg::GpError;
use super::model::{GpRegressor, KernelParams, Matern, PairDiffs};
use super::{lbfgs_minimise, LastAnswer};

/// Optuna's log prior of the kernel parameters (optuna/_gp/prior.py), without constants:
/// `-(0.1 / l + 0.1 l)` for each inverse squared length scale `l`, Gamma(2, 1) on the kernel
/// scale and Gamma(1.1, 30) on the noise variance.
pub(super) fn log_prior(p: &KernelParams) -> f64 {
    let gamma = |x: f64, concentration: f64, rate: f64| (concentration - 1.0) * x.ln() - rate * x;
    -p.inverse_squared_lengthscales
        .iter()
        .map(|l| 0.1 / l + 0.1 * l)
        .sum::<f64>()
        + gamma(p.kernel_scale, 2.0, 1.0)
        + gamma(p.noise_var, 1.1, 30.0)
}

/// The fitting problem in Optuna's raw parameters: the logs of the inverse squared length
/// scales and of the kernel scale, and log(noise - minimum noise).
#[derive(Clone, Copy)]
pub(super) struct Fitting<'a> {
    pub(super) x: &'a [Vec<f64>],
    pub(super) y: &'a [f64],
    pub(super) categorical: &'a [bool],
    pub(super) diffs: &'a PairDiffs,
    pub(super) minimum_noise: f64,
    /// A noiseless objective: the noise stays at the minimum.
    pub(super) deterministic: bool,
    pub(super) kernel: Matern,
    pub(super) last: &'a LastAnswer<LossAndGradient>,
}

type LossAndGradient = Result<(f64, Vec<f64>), GpError>;

impl Fitting<'_> {
    pub(super) fn params(&self, raw: &[f64]) -> KernelParams {
        let dims = self.categorical.len();
        KernelParams {
            inverse_squared_lengthscales: raw[..dims].iter().map(|r| r.exp()).collect(),
            kernel_scale: raw[dims].exp(),
            noise_var: if self.deterministic {
                self.minimum_noise
            } else {
                self.minimum_noise + raw[dims + 1].exp()
            },
            kernel: self.kernel,
        }
    }

    /// The raw parameters of `p` itself (its noise above the minimum), where [`Fitting::raw`]
    /// moves the noise to start a fit.
    #[cfg(test)]
    pub(super) fn raw_exact(&self, p: &KernelParams) -> Vec<f64> {
        let mut raw = self.raw(p);
        let last = raw.len() - 1;
        raw[last] = (p.noise_var - self.minimum_noise).ln();
        raw
    }

    pub(super) fn raw(&self, p: &KernelParams) -> Vec<f64> {
        let mut raw: Vec<f64> = p
            .inverse_squared_lengthscales
            .iter()
            .map(|l| l.ln())
            .collect();
        raw.push(p.kernel_scale.ln());
        // As Optuna starts: 1 % of the minimum above it, so that the log is finite.
        raw.push((p.noise_var - 0.99 * self.minimum_noise).max(1e-300).ln());
        raw
    }

    pub(super) fn model(&self, raw: &[f64]) -> Result<GpRegressor, GpError> {
        GpRegressor::conditioned(
            self.x.to_vec(),
            self.y.to_vec(),
            self.categorical.to_vec(),
            self.params(raw),
            self.diffs,
        )
    }

    pub(super) fn loss_and_gradient(&self, raw: &[f64]) -> LossAndGradient {
        self.last.at(raw, || self.compute(raw))
    }

    /// -(log likelihood + log prior), and its gradient in the raw parameters: nearly all
    /// of a fit's time, so compiled twice, for AVX2 where the CPU has it (the same
    /// arithmetic in wider registers: the results are the same to the bit, see the test
    /// `the_avx2_build_of_the_loss_is_the_portable_one_to_the_bit`).
    pub(super) fn compute(&self, raw: &[f64]) -> LossAndGradient {
        avx2_or_portable!(
            Fitting::compute_portable,
            (problem: &Fitting = self, raw: &[f64] = raw) -> LossAndGradient
        )
    }

    #[inline(always)]
    pub(super) fn compute_portable(&self, raw: &[f64]) -> LossAndGradient {
        let (gp, derivatives) = GpRegressor::with_kernel_derivatives(
            self.x.to_vec(),
            self.y.to_vec(),
            self.categorical.to_vec(),
            self.params(raw),
            self.diffs,
        )?;
        let p = gp.params();
        let dims = self.categorical.len();
        let (lengthscales, scale, noise) = gp.mll_gradient(self.diffs, &derivatives);
        let mut gradient: Vec<f64> = lengthscales
            .iter()
            .zip(&p.inverse_squared_lengthscales)
            .map(|(g, l)| -(g + 0.1 / l - 0.1 * l))
            .collect();
        gradient.push(-(scale + 1.0 - p.kernel_scale));
        gradient.push(if self.deterministic {
            0.0
        } else {
            let raw_noise = raw[dims + 1].exp();
            -(noise + 0.1 / p.noise_var - 30.0) * raw_noise
        });
        Ok((-(gp.marginal_log_likelihood() + log_prior(p)), gradient))
    }
}

impl CostFunction for Fitting<'_> {
    type Param = Vec<f64>;
    type Output = f64;
    fn cost(&self, raw: &Vec<f64>) -> Result<f64, argmin::core::Error> {
        // A point where the matrix fails is as bad as can be: the line search backs off.
        Ok(self
            .loss_and_gradient(raw)
            .map_or(f64::INFINITY, |(l, _)| l))
    }
}

impl Gradient for Fitting<'_> {
    type Param = Vec<f64>;
    type Gradient = Vec<f64>;
    fn gradient(&self, raw: &Vec<f64>) -> Result<Vec<f64>, argmin::core::Error> {
        Ok(self.loss_and_gradient(raw)?.1)
    }
}

/// The process fitted to `y` at `x`: kernel parameters maximising the marginal likelihood plus
/// Optuna's priors, by L-BFGS from `start` (the last fit's, or [`KernelParams::ones`]), then
/// from the ones if that fails, else the ones unfitted (as Optuna falls back); `kernel` is
/// the smoothness of the process fitted (`start`'s is not read).
///
/// ```
/// use tune_search::gp::{fit, Matern};
/// let x: Vec<Vec<f64>> = (0..12).map(|i| vec![i as f64 / 11.0]).collect();
/// let y: Vec<f64> = x.iter().map(|p| (6.0 * p[0]).sin()).collect();
/// let gp = fit(&x, &y, &[false], Matern::FiveHalves, 1e-6, false, None);
/// let (mean, _) = gp.posterior(&[0.5]);
/// assert!((mean - 3f64.sin()).abs() < 0.05, "{mean}");
/// ```
pub fn fit(
    x: &[Vec<f64>],
    y: &[f64],
    categorical: &[bool],
    kernel: Matern,
    minimum_noise: f64,
    deterministic: bool,
    start: Option<&KernelParams>,
) -> GpRegressor {
    let diffs = PairDiffs::new(x, categorical);
    let last = LastAnswer::default();
    let problem = Fitting {
        x,
        y,
        categorical,
        diffs: &diffs,
        minimum_noise,
        deterministic,
        kernel,
        last: &last,
    };
    let ones = KernelParams {
        kernel,
        ..KernelParams::ones(categorical.len())
    };
    for from in start.into_iter().chain([&ones]) {
        if let Some(gp) = lbfgs(&problem, from) {
            return gp;
        }
    }
    let mut fallback = ones;
    fallback.noise_var = fallback.noise_var.max(minimum_noise);
    GpRegressor::new(x.to_vec(), y.to_vec(), categorical.to_vec(), fallback)
        .expect("a unit kernel with unit noise is positive definite")
}

/// Optuna's gradient tolerance (`gtol = 1e-2`).
pub(super) const GRADIENT_TOLERANCE: f64 = 1e-2;
pub(super) const MAX_ITERATIONS: u64 = 200;

pub(super) fn lbfgs(problem: &Fitting, from: &KernelParams) -> Option<GpRegressor> {
    let (best, _) = lbfgs_minimise(
        *problem,
        problem.raw(from),
        GRADIENT_TOLERANCE,
        MAX_ITERATIONS,
    )?;
    if !best.iter().all(|r| r.is_finite()) {
        return None;
    }
    problem.model(&best).ok()
}
