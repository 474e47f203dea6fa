//! Log expected improvement, as Optuna 5's GPSampler computes it (optuna/_gp/acqf.py, after
//! Ament et al., "Unexpected Improvements to Expected Improvement for Bayesian
//! Optimization", NeurIPS 2023, Eq. 9): accurate far below the incumbent, where plain EI
//! underflows to 0 and gives the optimiser nothing to climb.

use statrs::function::erf::erfc;

const SQRT_HALF: f64 = std::f64::consts::FRAC_1_SQRT_2;
/// ln(sqrt(2 pi)).
const LOG_SQRT_2PI: f64 = 0.918_938_533_204_672_8;
/// 1 / sqrt(2 pi).
const INV_SQRT_2PI: f64 = 0.398_942_280_401_432_7;
/// sqrt(pi / 2).
const SQRT_HALF_PI: f64 = 1.253_314_137_315_500_3;

/// log E[max(0, Y - best)] for Y ~ N(mean, var): the log expected improvement over `best` of
/// a value to maximise.
///
/// ```
/// use tune_search::gp::log_expected_improvement;
/// // At the incumbent with unit variance: EI = phi(0) = 1 / sqrt(2 pi).
/// let at = log_expected_improvement(0.0, 1.0, 0.0);
/// assert!((at - (-0.5 * (2.0 * std::f64::consts::PI).ln())).abs() < 1e-12);
/// // Far below it: tiny, but finite and still increasing.
/// assert!(log_expected_improvement(-40.0, 1.0, 0.0) < log_expected_improvement(-39.0, 1.0, 0.0));
/// ```
pub fn log_expected_improvement(mean: f64, var: f64, best: f64) -> f64 {
    let sigma = var.sqrt();
    standard_log_ei((mean - best) / sigma) + sigma.ln()
}

/// [`log_expected_improvement`] and its gradient, given the gradients of the mean and the
/// variance ([`crate::gp::GpRegressor::posterior_with_gradient`]).
pub fn log_expected_improvement_with_gradient(
    mean: f64,
    var: f64,
    dmean: &[f64],
    dvar: &[f64],
    best: f64,
) -> (f64, Vec<f64>) {
    let sigma = var.sqrt();
    let z = (mean - best) / sigma;
    let value = standard_log_ei(z) + sigma.ln();
    // d/dz log(z Phi(z) + phi(z)) = Phi(z) / (z Phi(z) + phi(z)), in logs.
    let h = (log_cdf(z) - standard_log_ei(z)).exp();
    let gradient = dmean
        .iter()
        .zip(dvar)
        .map(|(dm, dv)| {
            let dsigma = dv / (2.0 * sigma);
            h * (dm - z * dsigma) / sigma + dsigma / sigma
        })
        .collect();
    (value, gradient)
}

/// log P(Y >= threshold) for Y ~ N(mean, var), and its gradient given the gradients of the
/// mean and the variance: the log probability that a constraint (modelled with its sign
/// flipped, as Optuna's `LogPI`) is met.
///
/// ```
/// use tune_search::gp::log_probability_above;
/// // At the threshold: one half.
/// let (v, _) = log_probability_above(1.0, 4.0, &[0.0], &[0.0], 1.0);
/// assert!((v - 0.5f64.ln()).abs() < 1e-12);
/// // Far below it: tiny, but finite.
/// assert!(log_probability_above(-60.0, 1.0, &[], &[], 0.0).0.is_finite());
/// ```
pub fn log_probability_above(
    mean: f64,
    var: f64,
    dmean: &[f64],
    dvar: &[f64],
    threshold: f64,
) -> (f64, Vec<f64>) {
    let sigma = var.sqrt();
    let z = (mean - threshold) / sigma;
    let value = log_cdf(z);
    // d/dz log Phi(z) = phi(z) / Phi(z), in logs.
    let h = (-0.5 * z * z - LOG_SQRT_2PI - value).exp();
    let gradient = dmean
        .iter()
        .zip(dvar)
        .map(|(dm, dv)| {
            let dsigma = dv / (2.0 * sigma);
            h * (dm - z * dsigma) / sigma
        })
        .collect();
    (value, gradient)
}

/// log Phi(z); below -25 through erfcx, where Phi underflows.
fn log_cdf(z: f64) -> f64 {
    if z >= -25.0 {
        (0.5 * erfc(-SQRT_HALF * z)).ln()
    } else {
        -0.5 * z * z + (0.5 * erfcx_large(-SQRT_HALF * z)).ln()
    }
}

/// log(z Phi(z) + phi(z)), the log EI of a standard normal over -z.
fn standard_log_ei(z: f64) -> f64 {
    if z >= -25.0 {
        (0.5 * z * erfc(-SQRT_HALF * z) + (-0.5 * z * z).exp() * INV_SQRT_2PI).ln()
    } else {
        -0.5 * z * z - LOG_SQRT_2PI + (1.0 + SQRT_HALF_PI * z * erfcx_large(-SQRT_HALF * z)).ln()
    }
}

/// erfcx(x) = exp(x^2) erfc(x) for x >= 17 by its asymptotic series, which is within 1e-12 of
/// it there: 1 / (x sqrt(pi)) * sum_k (-1)^k (2k - 1)!! / (2 x^2)^k.
fn erfcx_large(x: f64) -> f64 {
    let inv = 1.0 / (2.0 * x * x);
    let (mut term, mut sum) = (1.0, 1.0);
    for k in 1..=8 {
        term *= -((2 * k - 1) as f64) * inv;
        sum += term;
    }
    sum / (x * std::f64::consts::PI.sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_log_ei_at_hand_computed_points() {
        // z = 1: Phi(1) + phi(1) = 0.8413447460685429 + 0.24197072451914337.
        let ei1: f64 = 0.841_344_746_068_542_9 + 0.241_970_724_519_143_37;
        assert!((standard_log_ei(1.0) - ei1.ln()).abs() < 1e-9);
        // z = -1: -Phi(-1) + phi(1) = -0.15865525393145707 + 0.24197072451914337.
        let eim1: f64 = -0.158_655_253_931_457_07 + 0.241_970_724_519_143_37;
        assert!((standard_log_ei(-1.0) - eim1.ln()).abs() < 1e-9);
    }

    #[test]
    fn the_two_branches_meet_at_minus_25() {
        // The plain formula loses ~3 digits to cancellation there, the asymptotic one none.
        let plain =
            |z: f64| (0.5 * z * erfc(-SQRT_HALF * z) + (-0.5 * z * z).exp() * INV_SQRT_2PI).ln();
        let below = standard_log_ei(-25.000_001);
        assert!((plain(-25.000_001) - below).abs() < 1e-6, "{below}");
        // And it goes on smoothly where plain EI is 0: log EI = -z^2/2 - log(z^2 sqrt(2 pi))
        // + log(1 - 3/z^2 + ...), so about 3/z^2 below the leading terms.
        for z in [-40.0f64, -100.0, -1000.0] {
            let leading = -0.5 * z * z - LOG_SQRT_2PI - (z * z).ln();
            let below = leading - standard_log_ei(z);
            assert!((below * z * z - 3.0).abs() < 0.1, "{z}: {below}");
        }
    }

    #[test]
    fn the_gradient_matches_finite_differences() {
        // A mean and variance linear in two coordinates, near and far below the incumbent.
        for (m0, best) in [(0.3, 0.5), (-3.0, 2.0), (-40.0, 0.0)] {
            let f = |x: &[f64]| (m0 + 0.7 * x[0] - 0.2 * x[1], 0.5 + 0.1 * x[0] + 0.3 * x[1]);
            let x = [0.4, 0.6];
            let (mean, var) = f(&x);
            let (value, gradient) =
                log_expected_improvement_with_gradient(mean, var, &[0.7, -0.2], &[0.1, 0.3], best);
            assert!((value - log_expected_improvement(mean, var, best)).abs() < 1e-12);
            for i in 0..2 {
                let h = 1e-6;
                let at = |d: f64| {
                    let mut p = x;
                    p[i] += d;
                    let (m, v) = f(&p);
                    log_expected_improvement(m, v, best)
                };
                let numeric = (at(h) - at(-h)) / (2.0 * h);
                assert!(
                    (numeric - gradient[i]).abs() < 1e-5 * (1.0 + numeric.abs()),
                    "{m0} {i}: {numeric} {}",
                    gradient[i]
                );
            }
        }
    }

    #[test]
    fn erfcx_matches_its_definition_where_both_are_finite() {
        for x in [17.0f64, 20.0, 25.0] {
            let direct = (x * x).exp() * erfc(x);
            assert!((erfcx_large(x) / direct - 1.0).abs() < 1e-9, "{x}");
        }
    }
}
