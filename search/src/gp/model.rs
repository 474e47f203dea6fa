//! The regressor: the kernel, the process conditioned on the trials, its posterior.
//! Its linear algebra is in `linalg.rs`, its fitting in `fit.rs`.

use serde::{Deserialize, Serialize};

use super::linalg::*;

/// The Matérn kernel's smoothness: 5/2 (Optuna's GPSampler, twice differentiable) or 3/2
/// (HEBO's, once), whose process follows a ridge or a funnel more closely between trials.
///
/// ```
/// use tune_search::gp::Matern;
/// assert_eq!(serde_json::to_string(&Matern::ThreeHalves).unwrap(), "\"matern32\"");
/// assert_eq!(Matern::default(), Matern::FiveHalves);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Matern {
    /// Matérn 5/2: `"matern52"`.
    #[default]
    #[serde(rename = "matern52")]
    FiveHalves,
    /// Matérn 3/2: `"matern32"`.
    #[serde(rename = "matern32")]
    ThreeHalves,
}

impl Matern {
    /// Its name for people.
    ///
    /// ```
    /// assert_eq!(tune_search::gp::Matern::ThreeHalves.name(), "Matérn 3/2");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Matern::FiveHalves => "Matérn 5/2",
            Matern::ThreeHalves => "Matérn 3/2",
        }
    }

    /// The kernel at a squared (scaled) distance `d2`, and its derivative in `d2`.
    #[inline(always)]
    fn at(self, d2: f64) -> (f64, f64) {
        match self {
            Matern::FiveHalves => {
                let s = (5.0 * d2).sqrt();
                let e = exp_nonpositive(-s);
                (e * (5.0 / 3.0 * d2 + s + 1.0), -5.0 / 6.0 * (s + 1.0) * e)
            }
            Matern::ThreeHalves => {
                let s = (3.0 * d2).sqrt();
                let e = exp_nonpositive(-s);
                (e * (s + 1.0), -1.5 * e)
            }
        }
    }
}

/// The kernel's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelParams {
    /// 1 / length scale^2, one per dimension.
    pub inverse_squared_lengthscales: Vec<f64>,
    /// The prior variance of the function.
    pub kernel_scale: f64,
    /// The observation noise's variance.
    pub noise_var: f64,
    /// The kernel's smoothness (fixed, not fitted).
    pub kernel: Matern,
}

impl KernelParams {
    /// Optuna's starting point: every parameter 1.
    pub fn ones(dims: usize) -> KernelParams {
        KernelParams {
            inverse_squared_lengthscales: vec![1.0; dims],
            kernel_scale: 1.0,
            noise_var: 1.0,
            kernel: Matern::FiveHalves,
        }
    }
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
            *out = params.kernel.at(d);
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
                let mut t = params.kernel_scale * params.kernel.at(d2).0;
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
    /// use tune_search::gp::{fit, Matern};
    /// let x: Vec<Vec<f64>> = (0..12).map(|i| vec![i as f64 / 11.0]).collect();
    /// let y: Vec<f64> = x.iter().map(|p| (6.0 * p[0]).sin()).collect();
    /// let gp = fit(&x, &y, &[false], Matern::FiveHalves, 1e-6, false, None);
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
            *kj = self.params.kernel_scale * self.params.kernel.at(*kj).0;
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
            let (m, d) = self.params.kernel.at(*kj);
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
    params.kernel_scale * params.kernel.at(d2).0
}

#[cfg(test)]
mod tests;
