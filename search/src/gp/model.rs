//! The regressor: the kernel, the process conditioned on the trials, its posterior.
//! Its linear algebra is in `linalg.rs`, its fitting in `fit.rs`.

use super::linalg::*;

/// The kernel's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelParams {
    /// 1 / length scale^2, one per dimension.
    pub inverse_squared_lengthscales: Vec<f64>,
    /// The prior variance of the function.
    pub kernel_scale: f64,
    /// The observation noise's variance.
    pub noise_var: f64,
}

impl KernelParams {
    /// Optuna's starting point: every parameter 1.
    pub fn ones(dims: usize) -> KernelParams {
        KernelParams {
            inverse_squared_lengthscales: vec![1.0; dims],
            kernel_scale: 1.0,
            noise_var: 1.0,
        }
    }
}

/// Why a model could not be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GpError {
    #[error("the covariance matrix is not positive definite, even with jitter {jitter:e}")]
    NotPositiveDefinite { jitter: f64 },
    #[error("expected {expected} values per point, found {found}")]
    Dimensions { expected: usize, found: usize },
}

/// Matérn 5/2 of a squared (scaled) distance `d2`, and its derivative in `d2`.
#[inline(always)]
fn matern52(d2: f64) -> (f64, f64) {
    let s = (5.0 * d2).sqrt();
    let e = exp_nonpositive(-s);
    (e * (5.0 / 3.0 * d2 + s + 1.0), -5.0 / 6.0 * (s + 1.0) * e)
}

/// e^x for x <= 0 (NaN stays NaN), within 1 ulp, 0 below -708 (where e^x < 3.4e-308): fdlibm's
/// `e_exp.c` without branches, so that a loop over kernel values vectorises it (about a fifth
/// of a suggestion's time went to libm's `exp`, one value at a time). Plain IEEE arithmetic,
/// so every CPU and build gets the same bits, which libm, choosing its code by CPU, does not
/// promise.
#[inline(always)]
#[allow(
    clippy::excessive_precision,
    reason = "fdlibm's constants as published; each parses to the double fdlibm uses"
)]
fn exp_nonpositive(x: f64) -> f64 {
    const LN2_HI: f64 = 6.931_471_803_691_238_164_90e-1;
    const LN2_LO: f64 = 1.908_214_929_270_587_700_02e-10;
    const INV_LN2: f64 = std::f64::consts::LOG2_E;
    const P1: f64 = 1.666_666_666_666_660_190_37e-1;
    const P2: f64 = -2.777_777_777_701_559_338_42e-3;
    const P3: f64 = 6.613_756_321_437_934_361_17e-5;
    const P4: f64 = -1.653_390_220_546_525_153_90e-6;
    const P5: f64 = 4.138_136_797_057_238_460_39e-8;
    // 1.5 * 2^52: adding it rounds to an integer (to even), which its low bits then hold.
    const ROUND: f64 = 6_755_399_441_055_744.0;
    let clamped = if x < -708.0 { -708.0 } else { x };
    let shifted = clamped * INV_LN2 + ROUND;
    let k = shifted - ROUND;
    let hi = clamped - k * LN2_HI;
    let lo = k * LN2_LO;
    let r = hi - lo;
    let t = r * r;
    let c = r - t * (P1 + t * (P2 + t * (P3 + t * (P4 + t * P5))));
    let y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi);
    // 2^k, k in [-1022, 0]: the exponent field of a normal number.
    let k_bits = shifted.to_bits().wrapping_sub(ROUND.to_bits());
    let scale = f64::from_bits(k_bits.wrapping_add(1023) << 52);
    if x < -708.0 {
        0.0
    } else {
        y * scale
    }
}

/// Per-dimension squared differences: Hamming on categorical dimensions.
fn squared_diffs(a: &[f64], b: &[f64], categorical: &[bool]) -> Vec<f64> {
    a.iter()
        .zip(b)
        .zip(categorical)
        .map(|((&x, &y), &cat)| squared_diff(x, y, cat))
        .collect()
}

#[inline(always)]
fn squared_diff(x: f64, y: f64, categorical: bool) -> f64 {
    match categorical {
        true if x != y => 1.0,
        true => 0.0,
        false => (x - y) * (x - y),
    }
}

/// A Gaussian process conditioned on its training points.
///
/// ```
/// use tune_search::gp::{GpRegressor, KernelParams};
/// let x = vec![vec![0.0], vec![1.0]];
/// let params = KernelParams { noise_var: 1e-4, ..KernelParams::ones(1) };
/// let gp = GpRegressor::new(x, vec![1.0, -1.0], vec![false], params).unwrap();
/// let (mean, var) = gp.posterior(&[0.5]);
/// assert!(mean.abs() < 1e-12); // halfway between +1 and -1
/// assert!(var > 0.0 && var < 1.0);
/// ```
#[derive(Debug, Clone)]
pub struct GpRegressor {
    x: Vec<Vec<f64>>,
    /// `x` a dimension at a time, so that a point's distances to every trial are worked
    /// across trials (vectorised), in the order [`kernel`] sums them.
    columns: Vec<Vec<f64>>,
    y: Vec<f64>,
    categorical: Vec<bool>,
    params: KernelParams,
    /// The inverse of the lower Cholesky factor of K + noise I (+ jitter), row-major n x n:
    /// a posterior's variance is then a product with contiguous rows, not a triangular solve.
    chol_inverse: Vec<f64>,
    /// The upper Cholesky factor U of K + noise I, row-major n x n: kept to extend the
    /// process by more points ([`GpRegressor::extended`]).
    upper: Vec<f64>,
    /// Whether U needed jitter on the diagonal (then it cannot be extended).
    jittered: bool,
    /// log det(K + noise I) / 2: the sum of the logs of the factor's diagonal.
    half_log_det: f64,
    /// (K + noise I)^-1 y.
    alpha: Vec<f64>,
}

impl GpRegressor {
    /// The process with `params` conditioned on values `y` at points `x`.
    pub fn new(
        x: Vec<Vec<f64>>,
        y: Vec<f64>,
        categorical: Vec<bool>,
        params: KernelParams,
    ) -> Result<GpRegressor, GpError> {
        let dims = categorical.len();
        if let Some(bad) = x.iter().find(|p| p.len() != dims) {
            return Err(GpError::Dimensions {
                expected: dims,
                found: bad.len(),
            });
        }
        if params.inverse_squared_lengthscales.len() != dims {
            return Err(GpError::Dimensions {
                expected: dims,
                found: params.inverse_squared_lengthscales.len(),
            });
        }
        let diffs = PairDiffs::new(&x, &categorical);
        GpRegressor::conditioned(x, y, categorical, params, &diffs)
    }

    /// [`GpRegressor::new`] with the points' pairwise differences already at hand (a fit
    /// builds many processes on the same points).
    pub(super) fn conditioned(
        x: Vec<Vec<f64>>,
        y: Vec<f64>,
        categorical: Vec<bool>,
        params: KernelParams,
        diffs: &PairDiffs,
    ) -> Result<GpRegressor, GpError> {
        let made = avx2_or_portable!(
            GpRegressor::with_kernel_derivatives,
            (
                x: Vec<Vec<f64>> = x,
                y: Vec<f64> = y,
                categorical: Vec<bool> = categorical,
                params: KernelParams = params,
                diffs: &PairDiffs = diffs
            ) -> Result<(GpRegressor, Vec<(f64, f64)>), GpError>
        );
        Ok(made?.0)
    }

    /// [`GpRegressor::conditioned`], also giving the Matérn value and derivative of each
    /// pair a > b (in [`PairDiffs`]' order), which the likelihood's gradient needs: each exp
    /// once.
    #[inline(always)]
    pub(super) fn with_kernel_derivatives(
        x: Vec<Vec<f64>>,
        y: Vec<f64>,
        categorical: Vec<bool>,
        params: KernelParams,
        diffs: &PairDiffs,
    ) -> Result<(GpRegressor, Vec<(f64, f64)>), GpError> {
        let n = x.len();
        let mut cov = vec![0.0; n * n];
        let mut d2 = Vec::with_capacity(n * n.saturating_sub(1) / 2);
        for a in 0..n {
            for b in 0..a {
                d2.push(diffs.scaled(a, b, &params));
            }
        }
        // Apart from the distances, so that the exps are worked side by side (vectorised; a
        // `for` loop, which stays in this function's AVX2 build where `map(..).collect()`
        // was a function of its own, built for the baseline).
        let mut derivatives = vec![(0.0, 0.0); d2.len()];
        for (out, &d) in derivatives.iter_mut().zip(&d2) {
            *out = matern52(d);
        }
        let mut pair = derivatives.iter();
        for a in 0..n {
            for (b, &(m, _)) in (0..a).zip(&mut pair) {
                let k = params.kernel_scale * m;
                cov[a * n + b] = k;
                cov[b * n + a] = k;
            }
            cov[a * n + a] = params.kernel_scale + params.noise_var;
        }
        let (upper, jittered) = cholesky_with_jitter(&cov, n)?;
        let half_log_det = (0..n).map(|i| upper[i * n + i].ln()).sum();
        let chol_inverse = transpose(&upper_inverse(&upper, n), n);
        let alpha = lower_t_times(&chol_inverse, n, &lower_times(&chol_inverse, n, &y));
        let columns = (0..categorical.len())
            .map(|d| x.iter().map(|p| p[d]).collect())
            .collect();
        let gp = GpRegressor {
            x,
            columns,
            y,
            categorical,
            params,
            chol_inverse,
            upper,
            jittered,
            half_log_det,
            alpha,
        };
        Ok((gp, derivatives))
    }

    /// The process with the same parameters on `x` (this one's points followed by more) and
    /// values `y`, the same to the bit as [`GpRegressor::new`] on them, in O(n^2) per new
    /// point instead of O(n^3): each new point adds a column to the factor U and to U^-1,
    /// worked in the order the whole factorisation works those entries. `None` where `x`
    /// does not start with this process's points, where this factor needed jitter, or where
    /// the new matrix is not positive definite without it (then [`GpRegressor::new`]
    /// decides).
    pub fn extended(&self, x: Vec<Vec<f64>>, y: Vec<f64>) -> Option<GpRegressor> {
        let old = self.x.len();
        if self.jittered || x.len() < old || x[..old] != self.x[..] || y.len() != x.len() {
            return None;
        }
        if x.iter().any(|p| p.len() != self.categorical.len()) {
            return None;
        }
        let n = x.len();
        let params = &self.params;
        // U and U^-1 (kept as L^-1 = its transpose) re-laid at stride n.
        let mut upper = vec![0.0; n * n];
        let mut inverse = vec![0.0; n * n];
        for i in 0..old {
            upper[i * n..i * n + old].copy_from_slice(&self.upper[i * old..(i + 1) * old]);
            inverse[i * n..i * n + old].copy_from_slice(&self.chol_inverse[i * old..(i + 1) * old]);
        }
        let mut half_log_det = self.half_log_det;
        for m in old..n {
            // Column m of U: u_im = (a_im - sum_k<i u_ki u_km) / u_ii, the sum in k order.
            for i in 0..m {
                let d2 =
                    scaled_pair_distance(&squared_diffs(&x[m], &x[i], &self.categorical), params);
                let mut t = params.kernel_scale * matern52(d2).0;
                for k in 0..i {
                    t -= upper[k * n + i] * upper[k * n + m];
                }
                upper[i * n + m] = t / upper[i * n + i];
            }
            let mut t = params.kernel_scale + params.noise_var;
            for k in 0..m {
                t -= upper[k * n + m] * upper[k * n + m];
            }
            if t <= 0.0 || !t.is_finite() {
                return None;
            }
            let d = t.sqrt();
            upper[m * n + m] = d;
            half_log_det += d.ln();
            // Column m of U^-1 (row m of L^-1), from the bottom up.
            let mut column = vec![0.0; m + 1];
            column[m] = 1.0 / d;
            for i in (0..m).rev() {
                let mut r = 0.0;
                for k in i + 1..=m {
                    r -= upper[i * n + k] * column[k];
                }
                column[i] = r / upper[i * n + i];
            }
            inverse[m * n..=m * n + m].copy_from_slice(&column);
        }
        let alpha = lower_t_times(&inverse, n, &lower_times(&inverse, n, &y));
        let columns = (0..self.categorical.len())
            .map(|d| x.iter().map(|p| p[d]).collect())
            .collect();
        Some(GpRegressor {
            x,
            columns,
            y,
            categorical: self.categorical.clone(),
            params: self.params.clone(),
            chol_inverse: inverse,
            upper,
            jittered: false,
            half_log_det,
            alpha,
        })
    }

    pub fn params(&self) -> &KernelParams {
        &self.params
    }

    /// The posterior mean and variance of the function (without noise) at `point`.
    pub fn posterior(&self, point: &[f64]) -> (f64, f64) {
        let n = self.x.len();
        let k: Vec<f64> = self
            .x
            .iter()
            .map(|xi| kernel(&self.params, point, xi, &self.categorical))
            .collect();
        let mean = in_order_dot(&k, &self.alpha);
        let v = lower_times(&self.chol_inverse, n, &k);
        let var = self.params.kernel_scale - v.iter().map(|x| x * x).sum::<f64>();
        (mean, var.max(0.0))
    }

    /// [`GpRegressor::posterior`] at each of `points`, the same to the bit, faster: the
    /// variance's `L^-1 k` is worked for 8 points at once, so each row of `L^-1` is read from
    /// memory once per block rather than once per point (at 300 trials the factor is 360 KB,
    /// more than a core's nearer caches hold). Compiled for AVX2 too, where the CPU has it
    /// (the same arithmetic, without fused multiply-adds: the results are the same to the bit).
    ///
    /// ```
    /// use tune_search::gp::fit;
    /// let x: Vec<Vec<f64>> = (0..12).map(|i| vec![i as f64 / 11.0]).collect();
    /// let y: Vec<f64> = x.iter().map(|p| (6.0 * p[0]).sin()).collect();
    /// let gp = fit(&x, &y, &[false], 1e-6, false, None);
    /// let points = vec![vec![0.25], vec![0.5], vec![0.75]];
    /// for (point, batched) in points.iter().zip(gp.posteriors(&points)) {
    ///     assert_eq!(batched, gp.posterior(point));
    /// }
    /// ```
    pub fn posteriors(&self, points: &[Vec<f64>]) -> Vec<(f64, f64)> {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, checked just above.
            return unsafe { self.posteriors_avx2(points) };
        }
        self.posteriors_portable(points)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn posteriors_avx2(&self, points: &[Vec<f64>]) -> Vec<(f64, f64)> {
        // The closure has this function's AVX2 too.
        self.posteriors_with(points, |row, interleaved| block_dots_avx2(row, interleaved))
    }

    fn posteriors_portable(&self, points: &[Vec<f64>]) -> Vec<(f64, f64)> {
        self.posteriors_with(points, block_dots)
    }

    #[inline(always)]
    fn posteriors_with(
        &self,
        points: &[Vec<f64>],
        dots: impl Fn(&[f64], &[[[f64; 4]; POSTERIOR_BLOCK]]) -> [f64; POSTERIOR_BLOCK],
    ) -> Vec<(f64, f64)> {
        let n = self.x.len();
        let mut ks = vec![vec![0.0; n]; POSTERIOR_BLOCK];
        let mut interleaved = vec![[[0.0; 4]; POSTERIOR_BLOCK]; n.div_ceil(4)];
        let mut out = Vec::with_capacity(points.len());
        for block in points.chunks(POSTERIOR_BLOCK) {
            for (k, point) in ks.iter_mut().zip(block) {
                self.kernel_row(point, k);
            }
            // ks[p][4c + l] at interleaved[c][p][l]: a row's four values meet the block's
            // eight points' in one contiguous run.
            for (c, chunk) in interleaved.iter_mut().enumerate() {
                for (p, k) in ks.iter().enumerate() {
                    for (l, v) in chunk[p].iter_mut().enumerate() {
                        *v = k.get(4 * c + l).copied().unwrap_or(0.0);
                    }
                }
            }
            let mut squares = [0.0; POSTERIOR_BLOCK];
            for i in 0..n {
                let row = &self.chol_inverse[i * n..=i * n + i];
                let vs = dots(row, &interleaved);
                for (square, v) in squares.iter_mut().zip(vs) {
                    *square += v * v;
                }
            }
            // The means: each point's sum in order, the block's eight sums side by side.
            let mut means = [0.0; POSTERIOR_BLOCK];
            for (j, &a) in self.alpha.iter().enumerate() {
                for (mean, k) in means.iter_mut().zip(&ks) {
                    *mean += k[j] * a;
                }
            }
            for ((mean, square), _) in means.into_iter().zip(squares).zip(block) {
                let var = self.params.kernel_scale - square;
                out.push((mean, var.max(0.0)));
            }
        }
        out
    }

    /// `kernel(point, x_j)` for every trial j into `k`, to the bit.
    #[inline(always)]
    fn kernel_row(&self, point: &[f64], k: &mut [f64]) {
        self.scaled_squared_distances(point, k);
        for kj in k.iter_mut() {
            *kj = self.params.kernel_scale * matern52(*kj).0;
        }
    }

    /// `scaled_squared_distance(point, x_j)` for every trial j into `d2`, to the bit.
    #[inline(always)]
    fn scaled_squared_distances(&self, point: &[f64], d2: &mut [f64]) {
        d2.fill(0.0);
        let isl = &self.params.inverse_squared_lengthscales;
        for (((&p, column), &l), &categorical) in point
            .iter()
            .zip(&self.columns)
            .zip(isl)
            .zip(&self.categorical)
        {
            // One loop per kind, each vectorised (`squared_diff` inlined on a fixed kind).
            if categorical {
                for (d2j, &xj) in d2.iter_mut().zip(column) {
                    *d2j += squared_diff(p, xj, true) * l;
                }
            } else {
                for (d2j, &xj) in d2.iter_mut().zip(column) {
                    *d2j += squared_diff(p, xj, false) * l;
                }
            }
        }
    }

    /// [`GpRegressor::posterior`] with the gradients of the mean and the variance in the
    /// point's coordinates (0 on categorical ones, which are not continuous).
    pub fn posterior_with_gradient(&self, point: &[f64]) -> (f64, f64, Vec<f64>, Vec<f64>) {
        avx2_or_portable!(
            GpRegressor::posterior_with_gradient_inline,
            (gp: &GpRegressor = self, point: &[f64] = point) -> (f64, f64, Vec<f64>, Vec<f64>)
        )
    }

    #[inline(always)]
    fn posterior_with_gradient_inline(&self, point: &[f64]) -> (f64, f64, Vec<f64>, Vec<f64>) {
        let n = self.x.len();
        let dims = self.categorical.len();
        let scale = self.params.kernel_scale;
        let mut k = vec![0.0; n];
        self.scaled_squared_distances(point, &mut k);
        // d k_j / d d2_j, then k_j itself, across trials.
        let mut dm = vec![0.0; n];
        for (kj, dmj) in k.iter_mut().zip(&mut dm) {
            let (m, d) = matern52(*kj);
            (*kj, *dmj) = (scale * m, d);
        }
        let mean = in_order_dot(&k, &self.alpha);
        let v = lower_times(&self.chol_inverse, n, &k);
        let var = scale - v.iter().map(|x| x * x).sum::<f64>();
        // d var = -2 (C^-1 k)^T dk.
        let w = lower_t_times(&self.chol_inverse, n, &v);
        let mut dmean = vec![0.0; dims];
        let mut dvar = vec![0.0; dims];
        let mut dk = vec![0.0; n];
        for i in (0..dims).filter(|&i| !self.categorical[i]) {
            // dk_j / dx_i across trials.
            let isl = self.params.inverse_squared_lengthscales[i];
            for ((dkj, &dmj), &xj) in dk.iter_mut().zip(&dm).zip(&self.columns[i]) {
                *dkj = scale * dmj * isl * 2.0 * (point[i] - xj);
            }
            dmean[i] = dot(&self.alpha, &dk);
            dvar[i] = -2.0 * dot(&w, &dk);
        }
        if var <= 0.0 {
            dvar.iter_mut().for_each(|d| *d = 0.0);
        }
        (mean, var.max(0.0), dmean, dvar)
    }

    /// log p(y | x, params) without its constant `-n/2 log(2 pi)` (as Optuna omits it).
    pub fn marginal_log_likelihood(&self) -> f64 {
        let quad: f64 = self.y.iter().zip(&self.alpha).map(|(a, b)| a * b).sum();
        -self.half_log_det - 0.5 * quad
    }

    /// The gradient of [`GpRegressor::marginal_log_likelihood`] in the log of each
    /// inverse squared length scale, the log kernel scale and the noise variance (plain);
    /// `derivatives` are the Matérn values and derivatives of the pairs, from
    /// [`GpRegressor::with_kernel_derivatives`].
    #[inline(always)]
    pub(super) fn mll_gradient(
        &self,
        diffs: &PairDiffs,
        derivatives: &[(f64, f64)],
    ) -> (Vec<f64>, f64, f64) {
        let n = self.x.len();
        let dims = self.categorical.len();
        // W = (alpha alpha^T - C^-1) / 2: the derivative of the likelihood in C.
        let inverse = inverse_from_lower_inverse(&self.chol_inverse, n);
        let w = |a: usize, b: usize| 0.5 * (self.alpha[a] * self.alpha[b] - inverse[a * n + b]);
        // Sums over the pairs a > b count twice (W and the kernel are symmetric); the
        // diagonal, at distance 0, adds to the scale and the noise only.
        let mut by_dim = vec![0.0; dims];
        let mut scale = 0.0;
        let mut noise = 0.0;
        let mut pair = 0;
        for a in 0..n {
            noise += w(a, a);
            scale += w(a, a);
            for b in 0..a {
                let (m, dm) = derivatives[pair];
                let wab = 2.0 * w(a, b);
                scale += wab * m;
                let wdm = wab * dm;
                for (g, d) in by_dim.iter_mut().zip(diffs.pair_at(pair)) {
                    *g += wdm * d;
                }
                pair += 1;
            }
        }
        let s = self.params.kernel_scale;
        let lengthscales = by_dim
            .iter()
            .zip(&self.params.inverse_squared_lengthscales)
            .map(|(g, l)| g * s * l)
            .collect();
        (lengthscales, scale * s, noise)
    }
}

/// The squared differences of every pair of training points, per dimension (Hamming on
/// categorical ones), for the pairs a > b: computed once per fit, not per likelihood.
pub(super) struct PairDiffs {
    dims: usize,
    data: Vec<f64>,
}

impl PairDiffs {
    pub(super) fn new(x: &[Vec<f64>], categorical: &[bool]) -> PairDiffs {
        let mut data =
            Vec::with_capacity(x.len() * x.len().saturating_sub(1) / 2 * categorical.len());
        for a in 0..x.len() {
            for b in 0..a {
                data.extend(squared_diffs(&x[a], &x[b], categorical));
            }
        }
        PairDiffs {
            dims: categorical.len(),
            data,
        }
    }

    fn pair(&self, a: usize, b: usize) -> &[f64] {
        self.pair_at(a * (a - 1) / 2 + b)
    }

    /// The `index`th pair, in the order (1, 0), (2, 0), (2, 1), (3, 0), ...
    #[inline(always)]
    fn pair_at(&self, index: usize) -> &[f64] {
        let at = index * self.dims;
        &self.data[at..at + self.dims]
    }

    /// The squared distance of pair (a, b) in the kernel's length scales.
    #[inline(always)]
    fn scaled(&self, a: usize, b: usize, params: &KernelParams) -> f64 {
        scaled_pair_distance(self.pair(a, b), params)
    }
}

/// The squared distance in the kernel's length scales of a pair with per-dimension squared
/// differences `diffs`, as the kernel matrix has it (a process extended by more points must
/// work its new entries the same way).
#[inline(always)]
fn scaled_pair_distance(diffs: &[f64], params: &KernelParams) -> f64 {
    dot(diffs, &params.inverse_squared_lengthscales)
}

/// The squared distance of `a` and `b` in length-scale units (Hamming on categorical
/// dimensions), without allocating: it is worked for every trial at every point the
/// acquisition asks about.
#[inline(always)]
fn scaled_squared_distance(
    params: &KernelParams,
    a: &[f64],
    b: &[f64],
    categorical: &[bool],
) -> f64 {
    a.iter()
        .zip(b)
        .zip(categorical)
        .zip(&params.inverse_squared_lengthscales)
        .map(|(((&x, &y), &cat), l)| squared_diff(x, y, cat) * l)
        .sum()
}

#[inline(always)]
fn kernel(params: &KernelParams, a: &[f64], b: &[f64], categorical: &[bool]) -> f64 {
    let d2 = scaled_squared_distance(params, a, b, categorical);
    params.kernel_scale * matern52(d2).0
}

#[cfg(test)]
mod tests {
    use super::super::fit::*;
    use super::super::LastAnswer;
    use super::*;

    fn params(noise: f64) -> KernelParams {
        KernelParams {
            noise_var: noise,
            ..KernelParams::ones(1)
        }
    }

    #[test]
    fn the_kernels_exp_is_within_one_ulp_of_libms_and_zero_below_its_range() {
        let ulps = |a: f64, b: f64| (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs();
        let mut worst = 0;
        // Dense near 0 (the kernel's usual arguments), then out to the end of the range.
        let xs = (0..200_000)
            .map(|i| -(i as f64) * 1e-4)
            .chain((0..200_000).map(|i| -(i as f64) * 708.0 / 199_999.0))
            .chain([
                -0.0,
                -1e-300,
                -f64::EPSILON,
                -0.5 * std::f64::consts::LN_2,
                -708.0,
            ]);
        for x in xs {
            worst = worst.max(ulps(exp_nonpositive(x), x.exp()));
        }
        assert!(worst <= 1, "{worst} ulps");
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert_eq!(exp_nonpositive(-708.5), 0.0);
        assert_eq!(exp_nonpositive(f64::NEG_INFINITY), 0.0);
        assert!(exp_nonpositive(f64::NAN).is_nan());
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx2_triangular_product_is_the_portable_one_to_the_bit() {
        if !std::is_x86_feature_detected!("avx2") {
            return;
        }
        for n in 1..=23 {
            let value = |i: usize| ((i * 37 + n * 11) % 101) as f64 / 7.0 - 6.0;
            let inv: Vec<f64> = (0..n * n)
                .map(|i| if i % n <= i / n { value(i) } else { 0.0 })
                .collect();
            let b: Vec<f64> = (0..n).map(|i| value(i + 1000) / 3.0).collect();
            let bits = |v: Vec<f64>| v.into_iter().map(f64::to_bits).collect::<Vec<_>>();
            // SAFETY: the CPU has AVX2, checked at the top.
            let avx2 = unsafe { lower_times_avx2(&inv, n, &b) };
            assert_eq!(
                bits(avx2),
                bits(lower_times_portable(&inv, n, &b)),
                "n = {n}"
            );
        }
    }

    /// The upper Cholesky factor U (row-major, U^T U = `a`) of the symmetric `n` x `n` matrix
    /// `a`, right-looking: every update is a contiguous row minus a multiple of another, which
    /// the compiler vectorises (a dot product per entry it cannot, for the order of its sum).
    fn cholesky_one_at_a_time(a: &[f64], n: usize) -> Option<Vec<f64>> {
        let mut u = a.to_vec();
        for k in 0..n {
            let d = u[k * n + k];
            if d <= 0.0 || !d.is_finite() {
                return None;
            }
            let d = d.sqrt();
            let (done, rest) = u.split_at_mut((k + 1) * n);
            let row = &mut done[k * n..];
            row[k] = d;
            row[k + 1..].iter_mut().for_each(|x| *x /= d);
            for j in k + 1..n {
                let c = row[j];
                let target = &mut rest[(j - k - 1) * n + j..(j - k) * n];
                for (t, r) in target.iter_mut().zip(&row[j..]) {
                    *t -= c * r;
                }
            }
        }
        // The strict lower part held the input; the factor is upper triangular.
        for i in 0..n {
            u[i * n..i * n + i].iter_mut().for_each(|x| *x = 0.0);
        }
        Some(u)
    }

    /// U^-1 of an upper triangular `u` (row-major), from the last row up: row i of U^-1 is
    /// (e_i - sum_{k>i} U_ik row k) / U_ii, so every step is on contiguous rows.
    fn upper_inverse_one_at_a_time(u: &[f64], n: usize) -> Vec<f64> {
        let mut inv = vec![0.0; n * n];
        for i in (0..n).rev() {
            let (head, done) = inv.split_at_mut((i + 1) * n);
            let row = &mut head[i * n + i..];
            row[0] = 1.0;
            for k in i + 1..n {
                let c = u[i * n + k];
                let below = &done[(k - i - 1) * n + k..(k - i) * n];
                for (r, b) in row[k - i..].iter_mut().zip(below) {
                    *r -= c * b;
                }
            }
            let d = u[i * n + i];
            row.iter_mut().for_each(|r| *r /= d);
        }
        inv
    }

    /// (L L^T)^-1 = L^-T L^-1 from `inv` = L^-1: a sum over its rows of their outer products.
    fn inverse_from_lower_inverse_one_at_a_time(inv: &[f64], n: usize) -> Vec<f64> {
        let mut out = vec![0.0; n * n];
        for i in 0..n {
            let row = &inv[i * n..=i * n + i];
            for (a, &ra) in row.iter().enumerate() {
                for (o, &rb) in out[a * n..=a * n + a].iter_mut().zip(row) {
                    *o += ra * rb;
                }
            }
        }
        for a in 0..n {
            for b in 0..a {
                out[b * n + a] = out[a * n + b];
            }
        }
        out
    }

    #[test]
    fn the_factorisations_by_panels_are_the_one_at_a_time_ones_to_the_bit() {
        for n in 1..=23 {
            // A Matérn matrix on scattered points, plus noise: positive definite.
            let x: Vec<Vec<f64>> = (0..n)
                .map(|i| vec![(i as f64 * 0.618) % 1.0, (i as f64 * 0.414) % 1.0])
                .collect();
            let mut a = vec![0.0; n * n];
            for i in 0..n {
                for j in 0..n {
                    a[i * n + j] = kernel(&KernelParams::ones(2), &x[i], &x[j], &[false, false]);
                }
                a[i * n + i] += 1e-3;
            }
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            let u = cholesky(&a, n).unwrap();
            assert_eq!(
                bits(&u),
                bits(&cholesky_one_at_a_time(&a, n).unwrap()),
                "n = {n}"
            );
            let inv = upper_inverse(&u, n);
            assert_eq!(
                bits(&inv),
                bits(&upper_inverse_one_at_a_time(&u, n)),
                "n = {n}"
            );
            let lower = transpose(&inv, n);
            assert_eq!(
                bits(&inverse_from_lower_inverse(&lower, n)),
                bits(&inverse_from_lower_inverse_one_at_a_time(&lower, n)),
                "n = {n}"
            );
        }
    }

    #[test]
    fn a_process_extended_by_more_points_is_the_one_made_on_all_of_them_to_the_bit() {
        let unit = |i: usize, d: usize| ((i * 7 + d * 13) % 31) as f64 / 30.0;
        let x: Vec<Vec<f64>> = (0..29)
            .map(|i| vec![unit(i, 0), unit(i, 1), (i % 3) as f64])
            .collect();
        let y: Vec<f64> = x.iter().map(|p| (4.0 * p[0]).sin() - p[1] + p[2]).collect();
        let categorical = vec![false, false, true];
        let params = KernelParams {
            inverse_squared_lengthscales: vec![3.0, 0.5, 1.5],
            kernel_scale: 1.3,
            noise_var: 1e-4,
        };
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for (old, n) in [(1, 2), (5, 6), (10, 29), (28, 29)] {
            let whole = GpRegressor::new(
                x[..n].to_vec(),
                y[..n].to_vec(),
                categorical.clone(),
                params.clone(),
            )
            .unwrap();
            let start = GpRegressor::new(
                x[..old].to_vec(),
                y[..old].to_vec(),
                categorical.clone(),
                params.clone(),
            )
            .unwrap();
            let extended = start.extended(x[..n].to_vec(), y[..n].to_vec()).unwrap();
            assert_eq!(bits(&extended.upper), bits(&whole.upper), "{old} -> {n}");
            assert_eq!(
                bits(&extended.chol_inverse),
                bits(&whole.chol_inverse),
                "{old} -> {n}"
            );
            assert_eq!(bits(&extended.alpha), bits(&whole.alpha), "{old} -> {n}");
            assert_eq!(
                extended.half_log_det.to_bits(),
                whole.half_log_det.to_bits()
            );
            assert_eq!(extended.columns, whole.columns);
            assert_eq!(
                extended.posterior(&[0.3, 0.6, 1.0]),
                whole.posterior(&[0.3, 0.6, 1.0])
            );
        }
        // Not an extension: other first points.
        let start =
            GpRegressor::new(x[1..5].to_vec(), y[1..5].to_vec(), categorical, params).unwrap();
        assert!(start.extended(x[..6].to_vec(), y[..6].to_vec()).is_none());
    }

    #[test]
    fn the_posterior_of_two_points_worked_by_hand() {
        // k(0, 1) = e^-sqrt5 (5/3 + sqrt5 + 1) = 0.523994..., k(0.5, .) = Matérn of d^2 = 1/4
        // = 0.828649...; C = [[1 + n, m], [m, 1 + n]] with n = 1e-4.
        let (m01, mh) = (0.523_994_108_831_820_3, 0.828_649_142_418_125_5);
        let gp = GpRegressor::new(
            vec![vec![0.0], vec![1.0]],
            vec![1.0, 1.0],
            vec![false],
            params(1e-4),
        )
        .unwrap();
        let (mean, var) = gp.posterior(&[0.5]);
        // y = (1, 1): alpha = y / (1 + n + m01); mean = 2 mh alpha; var = 1 - 2 mh^2 / (1 + n + m01).
        let den = 1.0 + 1e-4 + m01;
        assert!((mean - 2.0 * mh / den).abs() < 1e-12, "{mean}");
        assert!((mean - 1.087_398_917_975_300_3).abs() < 1e-12);
        assert!((var - (1.0 - 2.0 * mh * mh / den)).abs() < 1e-12, "{var}");
        // log likelihood: -1/2 log det C - 1/2 y^T C^-1 y, det C = (1 + n)^2 - m01^2.
        let mll = -0.5 * ((1.0f64 + 1e-4).powi(2) - m01 * m01).ln() - 0.5 * (2.0 / den);
        assert!((gp.marginal_log_likelihood() - mll).abs() < 1e-12);
        assert!((mll + 0.495_770_071_096_116_9).abs() < 1e-12);

        // y = (1, -1) at 0.25: (k(0.25, 0) - k(0.25, 1)) / (1 + n - m01).
        let gp = GpRegressor::new(
            vec![vec![0.0], vec![1.0]],
            vec![1.0, -1.0],
            vec![false],
            params(1e-4),
        )
        .unwrap();
        let (mean, _) = gp.posterior(&[0.25]);
        assert!((mean - 0.578_258_170_644_483_6).abs() < 1e-12, "{mean}");
        // At a training point the variance is about the noise.
        assert!(gp.posterior(&[0.0]).1 < 2e-4);
    }

    #[test]
    fn posteriors_in_blocks_are_each_points_posterior_to_the_bit() {
        // Where the CPU has AVX2 the blocks run in its build, the single points in the
        // portable one: this holds the two builds to the same bits as well.
        // 37 trials (no multiple of the block) in 3 dimensions, one categorical; 21 points
        // (two whole blocks and a part).
        let unit = |i: usize, d: usize| ((i * 7 + d * 13) % 31) as f64 / 30.0;
        let x: Vec<Vec<f64>> = (0..37)
            .map(|i| vec![unit(i, 0), unit(i, 1), (i % 3) as f64])
            .collect();
        let y: Vec<f64> = x.iter().map(|p| (4.0 * p[0]).sin() - p[1] + p[2]).collect();
        let gp = fit(&x, &y, &[false, false, true], 1e-6, false, None);
        let points: Vec<Vec<f64>> = (0..21)
            .map(|i| vec![unit(i + 50, 0), unit(i + 50, 1), (i % 3) as f64])
            .collect();
        let batch = gp.posteriors(&points);
        assert_eq!(batch.len(), points.len());
        for (point, (mean, var)) in points.iter().zip(batch) {
            let (m, v) = gp.posterior(point);
            assert_eq!((mean.to_bits(), var.to_bits()), (m.to_bits(), v.to_bits()));
        }
    }

    #[test]
    fn the_posteriors_gradient_matches_finite_differences() {
        let x: Vec<Vec<f64>> = (0..7)
            .map(|i| {
                vec![
                    (i as f64 * 0.37) % 1.0,
                    (i * 3 % 4) as f64,
                    (i as f64 * 0.71) % 1.0,
                ]
            })
            .collect();
        let y: Vec<f64> = x.iter().map(|p| p[0].sin() + 0.3 * p[1] - p[2]).collect();
        let params = KernelParams {
            inverse_squared_lengthscales: vec![3.0, 1.0, 0.5],
            kernel_scale: 1.3,
            noise_var: 1e-3,
        };
        let gp = GpRegressor::new(x, y, vec![false, true, false], params).unwrap();
        let point = [0.42, 2.0, 0.13];
        let (mean, var, dmean, dvar) = gp.posterior_with_gradient(&point);
        assert_eq!((mean, var), gp.posterior(&point));
        assert_eq!((dmean[1], dvar[1]), (0.0, 0.0));
        for i in [0, 2] {
            let h = 1e-6;
            let at = |d: f64| {
                let mut p = point;
                p[i] += d;
                gp.posterior(&p)
            };
            let (up, down) = (at(h), at(-h));
            let numeric_mean = (up.0 - down.0) / (2.0 * h);
            let numeric_var = (up.1 - down.1) / (2.0 * h);
            assert!(
                (numeric_mean - dmean[i]).abs() < 1e-6,
                "{i}: {numeric_mean} {}",
                dmean[i]
            );
            assert!(
                (numeric_var - dvar[i]).abs() < 1e-6,
                "{i}: {numeric_var} {}",
                dvar[i]
            );
        }
    }

    #[test]
    fn categorical_dimensions_use_the_hamming_distance() {
        let p = KernelParams::ones(2);
        let near = kernel(&p, &[0.0, 2.0], &[0.0, 3.0], &[false, true]);
        let far = kernel(&p, &[0.0, 2.0], &[0.0, 7.0], &[false, true]);
        assert_eq!(near, far); // any two different choices are one apart
        assert_eq!(near, matern52(1.0).0);
        assert_eq!(kernel(&p, &[0.3, 2.0], &[0.3, 2.0], &[false, true]), 1.0);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx2_build_of_the_loss_is_the_portable_one_to_the_bit() {
        if !std::is_x86_feature_detected!("avx2") {
            return;
        }
        // Enough points for every vector loop to run whole registers and a remainder.
        let x: Vec<Vec<f64>> = (0..37)
            .map(|i| {
                vec![
                    (i as f64 * 0.618) % 1.0,
                    (i as f64 * 0.414) % 1.0,
                    (i % 3) as f64,
                ]
            })
            .collect();
        let y: Vec<f64> = x
            .iter()
            .map(|p| (4.0 * p[0]).sin() - p[1] + 0.2 * p[2])
            .collect();
        let categorical = [false, false, true];
        let diffs = PairDiffs::new(&x, &categorical);
        let last = LastAnswer::default();
        let problem = Fitting {
            x: &x,
            y: &y,
            categorical: &categorical,
            diffs: &diffs,
            minimum_noise: 1e-6,
            deterministic: false,
            last: &last,
        };
        let raw = vec![0.7, -0.2, 0.1, 0.4, -3.0];
        // `compute_portable` called here is the baseline build; `compute` runs the AVX2 one.
        let portable = problem.compute_portable(&raw).unwrap();
        let avx2 = problem.compute(&raw).unwrap();
        assert_eq!(portable.0.to_bits(), avx2.0.to_bits());
        let bits = |g: &[f64]| g.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&portable.1), bits(&avx2.1));
    }

    #[test]
    fn the_loss_gradient_matches_finite_differences() {
        let x: Vec<Vec<f64>> = (0..9)
            .map(|i| vec![(i as f64 * 0.37) % 1.0, (i * 3 % 4) as f64])
            .collect();
        let y: Vec<f64> = x.iter().map(|p| p[0].sin() + 0.3 * p[1]).collect();
        for deterministic in [false, true] {
            let diffs = PairDiffs::new(&x, &[false, true]);
            let last = LastAnswer::default();
            let problem = Fitting {
                x: &x,
                y: &y,
                categorical: &[false, true],
                diffs: &diffs,
                minimum_noise: 1e-6,
                deterministic,
                last: &last,
            };
            let raw = vec![0.3, -0.5, 0.2, -2.0];
            let (_, gradient) = problem.loss_and_gradient(&raw).unwrap();
            for j in 0..raw.len() {
                let h = 1e-6;
                let at = |d: f64| {
                    let mut r = raw.clone();
                    r[j] += d;
                    problem.loss_and_gradient(&r).unwrap().0
                };
                let numeric = (at(h) - at(-h)) / (2.0 * h);
                assert!(
                    (numeric - gradient[j]).abs() < 1e-5 * (1.0 + numeric.abs()),
                    "deterministic {deterministic}, parameter {j}: {numeric} against {}",
                    gradient[j]
                );
            }
        }
    }

    #[test]
    fn likelihood_and_fit_agree_with_optunas_on_its_own_fits() {
        // testdata/optuna_fits.py: Optuna 5.0.0's fit_kernel_params on three data sets (one
        // with a categorical dimension), its parameters and its penalised loss there.
        let cases: Vec<serde_json::Value> =
            serde_json::from_str(include_str!("testdata/optuna_fits.json")).unwrap();
        for (i, case) in cases.iter().enumerate() {
            let get = |k: &str| serde_json::from_value::<Vec<f64>>(case[k].clone()).unwrap();
            let x: Vec<Vec<f64>> = serde_json::from_value(case["x"].clone()).unwrap();
            let y = get("y");
            let categorical: Vec<bool> =
                serde_json::from_value(case["categorical"].clone()).unwrap();
            let theirs = KernelParams {
                inverse_squared_lengthscales: get("inverse_squared_lengthscales"),
                kernel_scale: case["kernel_scale"].as_f64().unwrap(),
                noise_var: case["noise_var"].as_f64().unwrap(),
            };
            let diffs = PairDiffs::new(&x, &categorical);
            let last = LastAnswer::default();
            let problem = Fitting {
                x: &x,
                y: &y,
                categorical: &categorical,
                diffs: &diffs,
                minimum_noise: 1e-6,
                deterministic: false,
                last: &last,
            };
            let loss =
                |p: &KernelParams| problem.loss_and_gradient(&problem.raw_exact(p)).unwrap().0;
            // The same penalised likelihood at Optuna's parameters: kernel, priors, constants.
            let expected = case["loss"].as_f64().unwrap();
            assert!(
                (loss(&theirs) - expected).abs() < 1e-9 * expected.abs().max(1.0),
                "case {i}: {} vs {expected}",
                loss(&theirs)
            );
            // And the fit finds Optuna's optimum: the loss to 1e-3, each parameter to 2 %.
            let ours = fit(&x, &y, &categorical, 1e-6, false, None);
            let p = ours.params();
            assert!(
                (loss(p) - expected).abs() < 1e-3,
                "case {i}: {} vs {expected}",
                loss(p)
            );
            let pairs = p
                .inverse_squared_lengthscales
                .iter()
                .zip(&theirs.inverse_squared_lengthscales)
                .chain([(&p.kernel_scale, &theirs.kernel_scale)]);
            for (a, b) in pairs {
                assert!((a / b - 1.0).abs() < 0.02, "case {i}: {p:?} vs {theirs:?}");
            }
        }
    }

    #[test]
    fn fitting_raises_the_penalised_likelihood_and_finds_the_relevant_dimension() {
        // y depends on the first dimension only: its length scale ends shorter.
        let x: Vec<Vec<f64>> = (0..30)
            .map(|i| vec![(i as f64 * 0.618_034) % 1.0, (i as f64 * 0.414_214) % 1.0])
            .collect();
        let y: Vec<f64> = x.iter().map(|p| (5.0 * p[0]).sin()).collect();
        let diffs = PairDiffs::new(&x, &[false, false]);
        let last = LastAnswer::default();
        let problem = Fitting {
            x: &x,
            y: &y,
            categorical: &[false, false],
            diffs: &diffs,
            minimum_noise: 1e-6,
            deterministic: false,
            last: &last,
        };
        let start = problem.raw(&KernelParams::ones(2));
        let before = problem.loss_and_gradient(&start).unwrap().0;
        let gp = fit(&x, &y, &[false, false], 1e-6, false, None);
        let after = problem
            .loss_and_gradient(&problem.raw(gp.params()))
            .unwrap()
            .0;
        assert!(after < before - 1.0, "{before} -> {after}");
        let isl = &gp.params().inverse_squared_lengthscales;
        assert!(isl[0] > 10.0 * isl[1], "{isl:?}");
        // It predicts a point it has not seen.
        let (mean, var) = gp.posterior(&[0.5, 0.5]);
        assert!(
            (mean - 2.5f64.sin()).abs() < 0.05,
            "{mean} +- {}",
            var.sqrt()
        );
    }

    #[test]
    fn a_singular_matrix_gets_jitter_and_mismatched_dimensions_an_error() {
        // Two identical points and no noise: singular without jitter.
        let gp = GpRegressor::new(
            vec![vec![0.5], vec![0.5]],
            vec![1.0, 1.0],
            vec![false],
            params(0.0),
        )
        .unwrap();
        assert!((gp.posterior(&[0.5]).0 - 1.0).abs() < 1e-3);
        let err = GpRegressor::new(vec![vec![0.5, 1.0]], vec![1.0], vec![false], params(0.1))
            .unwrap_err();
        assert_eq!(
            err,
            GpError::Dimensions {
                expected: 1,
                found: 2
            }
        );
    }
}
