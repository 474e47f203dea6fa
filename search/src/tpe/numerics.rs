//! Normal-distribution numerics for the Parzen estimators: tail-accurate CDF, truncated
//! sampling, log-sum-exp.

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

/// ln(sum(exp(xs))), stable; -inf for an empty slice.
///
/// Terms more than 40 below the largest add under 4.3e-18 relative each, so even a million of
/// them stay below f64's resolution: they are masked to zero, which also keeps the loop free of
/// branches (and of exp's slow underflow path) so it vectorises, with four accumulators.
pub(crate) fn logsumexp(xs: &[f64]) -> f64 {
    let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !max.is_finite() {
        return max;
    }
    let table = exp2_table();
    let term = |x: f64| {
        let d = x - max;
        let keep = f64::from(u8::from(d > -40.0));
        keep * exp_small_with(table, d.max(-40.0))
    };
    let mut acc = [0.0f64; 4];
    let chunks = xs.chunks_exact(4);
    let tail: f64 = chunks.remainder().iter().map(|&x| term(x)).sum();
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += term(x);
        }
    }
    max + ((acc[0] + acc[1]) + (acc[2] + acc[3]) + tail).ln()
}

/// 2^(j/64) for j in 0..64.
fn exp2_table() -> &'static [f64; 64] {
    static TABLE: std::sync::OnceLock<[f64; 64]> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| std::array::from_fn(|j| (j as f64 / 64.0).exp2()))
}

/// exp(x) for x in [-40, 0] (see [`exp_small_with`]).
#[cfg(test)]
pub(crate) fn exp_small(x: f64) -> f64 {
    exp_small_with(exp2_table(), x)
}

/// exp(x) for x in [-40, 0], inlined and branch-free (log-sum-exp runs it on every term).
///
/// x = (64 m + j) ln2/64 + r with |r| <= ln2/128 (Cody-Waite, two-part ln2/64); then
/// exp(x) = 2^m * 2^(j/64) * exp(r), the middle factor from a table and exp(r) from a degree-6
/// Taylor polynomial (truncation error below 2e-17 relative).
#[inline]
fn exp_small_with(table: &[f64; 64], x: f64) -> f64 {
    // ln2/64 split so that k * HI is exact for |k| < 2^20 (HI has 21 trailing zero bits).
    const LN2_64_HI: f64 = 0.010_830_424_693_267_56;
    const LN2_64_LO: f64 = 2.981_585_826_985_293_3e-12;
    const INV_LN2_64: f64 = 92.332_482_616_893_66;
    // Adding and subtracting 1.5 * 2^52 rounds to the nearest integer without a libm call.
    const ROUND: f64 = 6_755_399_441_055_744.0;
    let k = (x * INV_LN2_64 + ROUND) - ROUND;
    let r = (x - k * LN2_64_HI) - k * LN2_64_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    let k = k as i64;
    let (m, j) = (k >> 6, (k & 63) as usize);
    // 2^m for m in [-58, 0]: a normal number, built from its exponent bits.
    p * table[j] * f64::from_bits(((m + 1023) as u64) << 52)
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

    #[test]
    fn fast_exp_matches_libm() {
        for i in 0..=40_000 {
            let x = -40.0 * i as f64 / 40_000.0;
            let (a, b) = (exp_small(x), x.exp());
            assert!((a / b - 1.0).abs() < 4e-16, "{x}: {a} vs {b}");
        }
        assert_eq!(exp_small(0.0), 1.0);
    }

    #[test]
    fn logsumexp_is_stable() {
        assert!((logsumexp(&[1000.0, 1000.0]) - (1000.0 + 2f64.ln())).abs() < 1e-12);
        assert_eq!(logsumexp(&[]), f64::NEG_INFINITY);
        assert!((logsumexp(&[-1e308, 0.0])).abs() < 1e-12);
    }
}
