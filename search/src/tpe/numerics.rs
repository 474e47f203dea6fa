//! Normal-distribution numerics for the Parzen estimators: tail-accurate CDF and truncated
//! sampling.

use statrs::function::erf::{erfc, erfc_inv};

const SQRT2: f64 = std::f64::consts::SQRT_2;
/// ln(sqrt(2 pi)).
pub(crate) const LN_SQRT_2PI: f64 = 0.918_938_533_204_672_8;

/// The standard normal CDF, accurate in both tails (no `1 - tiny` cancellation).
///
/// ```text
/// ndtr(0) = 0.5, ndtr(-1.96) = 0.0249979, ndtr(-inf) = 0, ndtr(inf) = 1
/// ```
pub(crate) fn ndtr(z: f64) -> f64 {
    if z < 0.0 {
        0.5 * erfc(-z / SQRT2)
    } else {
        1.0 - 0.5 * erfc(z / SQRT2)
    }
}

/// The standard normal quantile function, the inverse of [`ndtr`], for p in (0, 1).
pub(crate) fn ndtri(p: f64) -> f64 {
    -SQRT2 * erfc_inv(2.0 * p)
}

/// ln(P(a <= Z <= b)) for a standard normal Z and a < b (either may be infinite).
pub(crate) fn log_mass(a: f64, b: f64) -> f64 {
    // Mirror to the lower tail, where `ndtr` keeps its relative precision.
    let (a, b) = if a > 0.0 { (-b, -a) } else { (a, b) };
    (ndtr(b) - ndtr(a)).max(f64::MIN_POSITIVE).ln()
}

/// Inverse-CDF draw from a standard normal truncated to [a, b], given `u` uniform in [0, 1).
pub(crate) fn truncnorm_std(a: f64, b: f64, u: f64) -> f64 {
    if a > 0.0 {
        return -truncnorm_std(-b, -a, 1.0 - u);
    }
    let (pa, pb) = (ndtr(a), ndtr(b));
    let p = (pa + u * (pb - pa)).clamp(f64::MIN_POSITIVE, 1.0 - f64::EPSILON);
    ndtri(p).clamp(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdf_matches_reference_values() {
        // scipy.stats.norm.cdf; statrs' erfc is good to about 1e-10 relative, plenty for TPE.
        assert!((ndtr(0.0) - 0.5).abs() < 1e-16);
        assert!((ndtr(-1.959963984540054) / 0.025 - 1.0).abs() < 1e-9);
        assert!((ndtr(1.0) - 0.8413447460685429).abs() < 1e-10);
        assert!((ndtr(-10.0) / 7.619853024160527e-24 - 1.0).abs() < 1e-9);
        assert_eq!(ndtr(f64::NEG_INFINITY), 0.0);
        assert_eq!(ndtr(f64::INFINITY), 1.0);
    }

    #[test]
    fn log_mass_is_accurate_in_the_far_tail() {
        // P(8 <= Z <= 9) = 6.2209605742717e-16 - 1.1285884059538e-19
        let expected = (6.220960574271785e-16f64 - 1.1285884059538408e-19).ln();
        assert!((log_mass(8.0, 9.0) - expected).abs() < 1e-9);
        assert!((log_mass(-9.0, -8.0) - expected).abs() < 1e-9);
        assert_eq!(log_mass(f64::NEG_INFINITY, f64::INFINITY), 0.0);
    }

    #[test]
    fn truncated_draws_stay_inside_and_follow_the_cdf() {
        for (a, b) in [(-1.0, 2.0), (3.0, 4.0), (-6.0, -5.5), (0.5, f64::INFINITY)] {
            let z = log_mass(a, b).exp();
            let mut below_mid = 0;
            let n = 4000;
            let mid = truncnorm_std(a, b, 0.5);
            for i in 0..n {
                let u = (i as f64 + 0.5) / n as f64;
                let x = truncnorm_std(a, b, u);
                assert!(a <= x && x <= b, "{x} outside [{a}, {b}]");
                below_mid += usize::from(x < mid);
            }
            assert_eq!(below_mid, n / 2, "[{a}, {b}] median");
            // The median splits the mass in half.
            let half = (ndtr(mid) - ndtr(a)) / z;
            assert!((half - 0.5).abs() < 1e-6, "[{a}, {b}]: {half}");
        }
    }
}
