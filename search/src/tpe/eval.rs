//! The hot loop of TPE: the ln density of a Parzen mixture at a point.
//!
//! Late in a sweep the bad-side estimator has one component per finished trial, and every
//! candidate is scored against all of them, so this loop is most of a suggestion's cost. It
//! runs in f32 lanes (eight per AVX2 register, four with SSE2) over coordinates normalised to
//! the domain, which keeps a point's ln density within ~1e-6 of the f64 value, far below the
//! differences that decide between candidates. Every operation is plain IEEE arithmetic in a
//! fixed order (no FMA, a fixed reduction tree), so the AVX2 and the portable builds return
//! the same bits and suggestions stay reproducible across machines.

/// One numeric dimension: components' means in domain-normalised coordinates and their
/// inverse widths, pre-scaled by sqrt(1/2) so that a component's exponent is `-z * z`.
#[derive(Debug, Clone)]
struct NumericColumn {
    dim: usize,
    low: f64,
    inv_range: f64,
    mus: Vec<f32>,
    scales: Vec<f32>,
}

/// One categorical dimension: ln probability of choice `c` under component `k` at
/// `c * len + k`, so the pass for an observed choice reads one contiguous row.
#[derive(Debug, Clone)]
struct CategoricalColumn {
    dim: usize,
    log_probs: Vec<f32>,
}

/// A mixture laid out for scoring: per component its weight and a constant (the numeric
/// dimensions' ln normalisers), and the per-dimension columns. Rebuilding a table reuses its
/// buffers.
#[derive(Debug, Clone, Default)]
pub(crate) struct Table {
    len: usize,
    /// Normalised weights. They multiply exp(term) instead of adding ln(weight) to the term:
    /// that saves a logarithm per component and suggestion, since linear forgetting changes
    /// every weight whenever a trial finishes.
    weights: Vec<f32>,
    consts: Vec<f32>,
    numeric: Vec<NumericColumn>,
    categorical: Vec<CategoricalColumn>,
    /// Columns of the previous build, kept for their buffers.
    spare_numeric: Vec<NumericColumn>,
    spare_categorical: Vec<CategoricalColumn>,
}

/// sqrt(1/2): z / sqrt(2) squared is the exponent of a unit normal.
const SQRT_HALF: f64 = std::f64::consts::FRAC_1_SQRT_2;

impl Table {
    /// Empties the table for `weights.len()` observations plus a prior component of weight
    /// `prior_weight`.
    pub(crate) fn reset(&mut self, weights: &[f64], prior_weight: f64) {
        self.len = weights.len() + 1;
        let total = weights.iter().sum::<f64>() + prior_weight;
        self.weights.clear();
        self.weights.extend(
            weights
                .iter()
                .chain([&prior_weight])
                .map(|&w| (w / total) as f32),
        );
        self.consts.clear();
        self.consts.resize(self.len, 0.0);
        self.spare_numeric.append(&mut self.numeric);
        self.spare_categorical.append(&mut self.categorical);
    }

    /// Adds numeric dimension `dim` over `[low, low + range]` with the components' means and
    /// widths; `log_norm(k)` is component `k`'s ln normaliser along it.
    pub(crate) fn push_numeric(
        &mut self,
        dim: usize,
        low: f64,
        range: f64,
        mus: &[f64],
        sigmas: &[f64],
        mut log_norm: impl FnMut(usize) -> f64,
    ) {
        debug_assert_eq!(mus.len(), self.len);
        for (k, c) in self.consts.iter_mut().enumerate() {
            *c += log_norm(k) as f32;
        }
        let inv_range = 1.0 / range;
        // Reuse the column buffers left from the previous build, if any.
        let mut col = self.spare_numeric.pop().unwrap_or(NumericColumn {
            dim,
            low,
            inv_range,
            mus: Vec::new(),
            scales: Vec::new(),
        });
        col.dim = dim;
        col.low = low;
        col.inv_range = inv_range;
        col.mus.clear();
        col.mus
            .extend(mus.iter().map(|&m| ((m - low) * inv_range) as f32));
        col.scales.clear();
        col.scales
            .extend(sigmas.iter().map(|&s| (range / s * SQRT_HALF) as f32));
        self.numeric.push(col);
    }

    /// Adds categorical dimension `dim` with `n` choices: component `k`'s ln probabilities are
    /// row `row_of(k)` of `rows` (row-major, `n` per row).
    pub(crate) fn push_categorical(
        &mut self,
        dim: usize,
        n: usize,
        row_of: impl Fn(usize) -> usize,
        rows: &[f64],
    ) {
        let mut col = self.spare_categorical.pop().unwrap_or(CategoricalColumn {
            dim,
            log_probs: Vec::new(),
        });
        col.dim = dim;
        col.log_probs.clear();
        col.log_probs.resize(n * self.len, 0.0);
        for k in 0..self.len {
            let row = &rows[row_of(k) * n..][..n];
            for (c, &lp) in row.iter().enumerate() {
                col.log_probs[c * self.len + k] = lp as f32;
            }
        }
        self.categorical.push(col);
    }

    /// ln density at `x` (one value per dimension, in the estimator's internal coordinates);
    /// `terms` is a buffer reused between calls.
    pub(crate) fn log_pdf(&self, x: &[f64], terms: &mut Vec<f32>) -> f64 {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            return unsafe { self.log_pdf_avx2(x, terms) };
        }
        self.log_pdf_portable(x, terms)
    }

    /// The same loop compiled for AVX2 (FMA stays off: identical results).
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn log_pdf_avx2(&self, x: &[f64], terms: &mut Vec<f32>) -> f64 {
        self.log_pdf_portable(x, terms)
    }

    #[inline(always)]
    fn log_pdf_portable(&self, x: &[f64], terms: &mut Vec<f32>) -> f64 {
        terms.resize(self.len, 0.0);
        // The first numeric pass starts from the constants, which saves copying them.
        let (first, rest) = match self.numeric.split_first() {
            Some((first, rest)) => (Some(first), rest),
            None => (None, &[][..]),
        };
        match first {
            Some(col) => {
                let u = ((x[col.dim] - col.low) * col.inv_range) as f32;
                let columns = col.mus.iter().zip(&col.scales).zip(&self.consts);
                for (t, ((&m, &s), &c)) in terms.iter_mut().zip(columns) {
                    let z = (u - m) * s;
                    *t = c - z * z;
                }
            }
            None => terms.copy_from_slice(&self.consts),
        }
        for col in rest {
            let u = ((x[col.dim] - col.low) * col.inv_range) as f32;
            for ((t, &m), &s) in terms.iter_mut().zip(&col.mus).zip(&col.scales) {
                let z = (u - m) * s;
                *t -= z * z;
            }
        }
        for col in &self.categorical {
            let c = x[col.dim] as usize;
            let row = &col.log_probs[c * self.len..(c + 1) * self.len];
            for (t, &lp) in terms.iter_mut().zip(row) {
                *t += lp;
            }
        }
        log_sum_exp(terms, &self.weights)
    }
}

/// ln(sum(weights * exp(xs))) for f32 terms, accumulated in eight fixed lanes; overwrites `xs`.
///
/// Terms more than 40 below the largest add under 4.3e-18 relative each (times the weights'
/// ratio, at most the number of components) and are masked to zero, which keeps the loop free of branches (and of exp's underflow path). The exp pass and
/// the summing pass are separate loops because each vectorises on its own.
#[inline(always)]
fn log_sum_exp(xs: &mut [f32], weights: &[f32]) -> f64 {
    let max = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return f64::from(max);
    }
    for (x, &w) in xs.iter_mut().zip(weights) {
        let d = *x - max;
        let keep = if d > -40.0 { w } else { 0.0 };
        *x = keep * exp_neg(d.max(-40.0));
    }
    let mut acc = [0.0f32; 8];
    let chunks = xs.chunks_exact(8);
    let tail: f64 = chunks.remainder().iter().map(|&x| f64::from(x)).sum();
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += x;
        }
    }
    let lanes: f64 = acc.iter().map(|&a| f64::from(a)).sum();
    f64::from(max) + (lanes + tail).ln()
}

/// exp(d) for d in [-40, 0], to about 2 ulp, branch-free.
///
/// d = k ln2 + r with |r| <= ln2/2 (Cody-Waite, two-part ln2), exp(r) from its degree-7
/// Taylor polynomial, 2^k built from exponent bits. k itself is read from the low bits of
/// `d * log2(e) + 1.5 * 2^23`, so the loop around this stays in vector lanes.
#[inline(always)]
fn exp_neg(d: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const MAGIC: f32 = 12_582_912.0;
    // ln2 = HI + LO, HI with 9 significant bits so that k * HI is exact for |k| < 2^15.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let t = d * LOG2E + MAGIC;
    let k = t - MAGIC;
    let r = (d - k * LN2_HI) - k * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    let k_bits = t.to_bits().wrapping_sub(MAGIC.to_bits()) as i32;
    p * f32::from_bits(((k_bits + 127) as u32) << 23)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_exp_matches_libm() {
        let mut worst = 0.0f64;
        for i in 0..=400_000 {
            let d = -40.0 * i as f32 / 400_000.0;
            let (a, b) = (f64::from(exp_neg(d)), f64::from(d).exp());
            worst = worst.max((a / b - 1.0).abs());
        }
        assert!(worst < 3e-7, "worst relative error {worst}");
        assert_eq!(exp_neg(0.0), 1.0);
    }

    #[test]
    fn log_sum_exp_is_stable_and_accurate() {
        let xs: Vec<f32> = (0..1001).map(|i| -(i as f32) * 0.05).collect();
        let exact = xs.iter().map(|&x| f64::from(x).exp()).sum::<f64>().ln();
        let ones = vec![1.0; xs.len()];
        assert!((log_sum_exp(&mut xs.clone(), &ones) - exact).abs() < 1e-6);
        let halves = [0.5, 0.5];
        assert!((log_sum_exp(&mut [1000.0, 1000.0], &halves) - 1000.0).abs() < 1e-4);
        assert_eq!(log_sum_exp(&mut [], &[]), f64::NEG_INFINITY);
    }

    #[test]
    fn avx2_and_portable_builds_agree_bit_for_bit() {
        let n = 1003;
        let consts: Vec<f64> = (0..n).map(|k| -((k % 7) as f64) * 0.3).collect();
        let weights: Vec<f64> = (0..n - 1).map(|k| 1.0 + (k % 3) as f64).collect();
        let total = weights.iter().sum::<f64>() + 2.0;
        let mus: Vec<f64> = (0..n)
            .map(|k| 2.0 + (k as f64 * 0.618).fract() * 3.0)
            .collect();
        let sigmas: Vec<f64> = (0..n).map(|k| 0.03 + (k % 5) as f64 * 0.1).collect();
        let probs: Vec<f64> = (0..n * 3).map(|i| -1.0 - (i % 3) as f64 * 0.5).collect();
        let mut t = Table::default();
        let mut terms = Vec::new();
        // The second round rebuilds the table over the first one's buffers.
        for _ in 0..2 {
            t.reset(&weights, 2.0);
            t.push_numeric(0, 2.0, 3.0, &mus, &sigmas, |k| consts[k]);
            t.push_categorical(1, 3, |k| k, &probs);
            for x in [2.0, 2.7, 3.3, 4.99] {
                let p = [x, 1.0];
                let portable = t.log_pdf_portable(&p, &mut terms);
                assert_eq!(t.log_pdf(&p, &mut terms).to_bits(), portable.to_bits());
                // Against the same mixture in f64.
                let exact = (0..n)
                    .map(|k| {
                        let z = (x - mus[k]) / sigmas[k];
                        let w = weights.get(k).copied().unwrap_or(2.0) / total;
                        w * (consts[k] - 0.5 * z * z + probs[k * 3 + 1]).exp()
                    })
                    .sum::<f64>()
                    .ln();
                assert!((portable - exact).abs() < 1e-5, "{portable} vs {exact}");
            }
        }
    }
}
