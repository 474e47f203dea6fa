//! When the kernel's parameters are fitted again. A fit is most of a suggestion's time (about
//! 33 likelihood evaluations, each factoring the n x n kernel matrix), and the parameters
//! move little from one trial to the next. So they are fitted on a growing prefix of the
//! training points, at the sizes 1, 2, .., m, max(m + 1, floor(m (1 + growth))), .. (with 0.1:
//! every size to 20, then 22, 24, .., 94, 103, 113, .., 284, 312), and in between the last
//! fit's parameters condition the process on every point (one factoring).
//!
//! The prefix that a suggestion's parameters come from is named by the history alone, and
//! [`KernelMemo`] only keeps the fit of one prefix to hand, compared point by point: a
//! suggestion stays a pure function of seed, id and history (a resumed sweep refits the same
//! prefix and gets the same parameters).

use super::fit::fit;
use super::model::{GpRegressor, KernelParams, Matern};

/// How many of `n` training points the kernel is fitted on under `growth`: the largest size of
/// the schedule at or below `n` (`n` itself where `growth` is 0: every suggestion fits).
pub(super) fn fitted_prefix(n: usize, growth: f64) -> usize {
    if growth <= 0.0 || n == 0 {
        return n;
    }
    let mut size = 1;
    loop {
        let next = ((size as f64 * (1.0 + growth)).floor() as usize).max(size + 1);
        if next > n {
            return size;
        }
        size = next;
    }
}

/// The kernel parameters last fitted, and the prefix (points and values) they were fitted on;
/// and the process last made, which the next suggestion extends by its new points where it
/// can ([`GpRegressor::extended`]: the same to the bit as conditioning on every point again).
#[derive(Debug, Clone, Default)]
pub(super) struct KernelMemo {
    x: Vec<Vec<f64>>,
    values: Vec<f64>,
    params: Option<KernelParams>,
    last: Option<GpRegressor>,
}

/// How a kernel is fitted: the settings every fit of one searcher shares.
pub(super) struct Fitter<'a> {
    pub categorical: &'a [bool],
    pub minimum_noise: f64,
    pub deterministic: bool,
    pub kernel: Matern,
}

impl Fitter<'_> {
    fn fit(&self, x: &[Vec<f64>], y: &[f64]) -> GpRegressor {
        fit(
            x,
            y,
            self.categorical,
            self.kernel,
            self.minimum_noise,
            self.deterministic,
            None,
        )
    }
}

impl KernelMemo {
    /// The process on points `x` with (unstandardised) `values`, `y` being them standardised
    /// by `standardise`: its kernel fitted on the prefix [`fitted_prefix`] names (or this
    /// memo's parameters where they were fitted on that same prefix), conditioned on every
    /// point. Where prefix parameters do not keep the matrix positive definite, it is fitted
    /// on every point.
    pub(super) fn model(
        &mut self,
        fitter: &Fitter,
        (x, values, y): (&[Vec<f64>], &[f64], &[f64]),
        growth: f64,
        standardise: fn(&[f64]) -> Vec<f64>,
    ) -> GpRegressor {
        let size = fitted_prefix(x.len(), growth);
        let (x_prefix, values_prefix) = (&x[..size], &values[..size]);
        let remembered = self.params.as_ref().filter(|p| {
            p.kernel == fitter.kernel
                && size < x.len()
                && self.x == x_prefix
                && self.values == values_prefix
        });
        let params = match remembered {
            Some(params) => params.clone(),
            None => {
                let gp = fitter.fit(x_prefix, &standardise(values_prefix));
                *self = KernelMemo {
                    x: x_prefix.to_vec(),
                    values: values_prefix.to_vec(),
                    params: Some(gp.params().clone()),
                    last: None,
                };
                if size == x.len() {
                    self.last = Some(gp.clone());
                    return gp;
                }
                gp.params().clone()
            }
        };
        let gp = self
            .last
            .take()
            .filter(|last| last.params() == &params)
            .and_then(|last| last.extended(x.to_vec(), y.to_vec()))
            .or_else(|| {
                GpRegressor::new(x.to_vec(), y.to_vec(), fitter.categorical.to_vec(), params).ok()
            })
            .unwrap_or_else(|| fitter.fit(x, y));
        self.last = Some(gp.clone());
        gp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_fits_every_size_until_growth_adds_more_than_one() {
        let sizes: Vec<usize> = (1..=40).map(|n| fitted_prefix(n, 0.1)).collect();
        // One by one up to 20 (19 * 1.1 = 20.9), then 22, 24, 26, 28, 30, 33, 36, ..
        assert_eq!(sizes[..20], (1..=20).collect::<Vec<_>>());
        assert_eq!(
            &sizes[20..37],
            &[20, 22, 22, 24, 24, 26, 26, 28, 28, 30, 30, 30, 33, 33, 33, 36, 36]
        );
        // .. 113, 124, 136: at 135 trials the fit is on the first 124.
        assert_eq!(fitted_prefix(135, 0.1), 124);
        assert_eq!(fitted_prefix(136, 0.1), 136);
        assert_eq!(fitted_prefix(300, 0.0), 300);
        assert_eq!(fitted_prefix(0, 0.1), 0);
    }

    fn points(n: usize) -> (Vec<Vec<f64>>, Vec<f64>) {
        let x: Vec<Vec<f64>> = (0..n).map(|i| vec![(i as f64 * 0.37) % 1.0]).collect();
        let v = x.iter().map(|p| (5.0 * p[0]).sin()).collect();
        (x, v)
    }

    #[test]
    fn a_prefix_is_fitted_once_and_fitted_again_when_it_changes() {
        let fitter = Fitter {
            categorical: &[false],
            minimum_noise: 1e-6,
            deterministic: false,
            kernel: Matern::FiveHalves,
        };
        let mut memo = KernelMemo::default();
        let (x, v) = points(23);
        let y = |v: &[f64]| v.to_vec();
        let fitted_on = |memo: &KernelMemo| memo.x.len();
        // 22 is a fitting size: the whole set is fitted, and that is the process.
        let whole = memo.model(&fitter, (&x[..22], &v[..22], &y(&v[..22])), 0.1, y);
        assert_eq!(fitted_on(&memo), 22);
        assert_eq!(whole.params(), fitter.fit(&x[..22], &v[..22]).params());
        // 23: the 22 points' parameters are the memo's, not fitted again: a marked copy in the
        // memo is what the process on all 23 points gets.
        let mut marked = whole.params().clone();
        marked.kernel_scale *= 2.0;
        memo.params = Some(marked.clone());
        let at_23 = memo.model(&fitter, (&x, &v, &y(&v)), 0.1, y);
        assert_eq!(fitted_on(&memo), 22);
        assert_eq!(at_23.params(), &marked);
        let direct = GpRegressor::new(x.clone(), v.clone(), vec![false], marked).unwrap();
        assert_eq!(at_23.posterior(&[0.5]), direct.posterior(&[0.5]));
        // A history that differs in the prefix (another value at point 3) is fitted afresh.
        let mut changed = v.clone();
        changed[3] += 0.5;
        let other = memo.model(&fitter, (&x, &changed, &y(&changed)), 0.1, y);
        assert_eq!(
            other.params(),
            fitter.fit(&x[..22], &changed[..22]).params()
        );
        assert_ne!(other.params(), whole.params());
        // The same prefix with another kernel (an `auto` sweep given a budget) is fitted
        // afresh with it.
        let rougher = Fitter {
            kernel: Matern::ThreeHalves,
            ..fitter
        };
        let with_32 = memo.model(&rougher, (&x, &changed, &y(&changed)), 0.1, y);
        assert_eq!(
            with_32.params(),
            rougher.fit(&x[..22], &changed[..22]).params()
        );
        assert_eq!(with_32.params().kernel, Matern::ThreeHalves);
        // Growth 0: the whole set, every time.
        let every = memo.model(&fitter, (&x, &changed, &y(&changed)), 0.0, y);
        assert_eq!(fitted_on(&memo), 23);
        assert_eq!(every.params(), fitter.fit(&x, &changed).params());
    }
}
