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

use super::model::{GpRegressor, KernelParams};

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

/// The kernel parameters last fitted, and the prefix (points and values) they were fitted on.
#[derive(Debug, Clone, Default)]
pub(super) struct KernelMemo {
    x: Vec<Vec<f64>>,
    values: Vec<f64>,
    params: Option<KernelParams>,
}

/// What [`KernelMemo::fitted`] gives.
pub(super) enum Fitted {
    /// Fitted on every point: the process itself.
    Whole(GpRegressor),
    /// Fitted on a prefix: the parameters, for the process on every point.
    Prefix(KernelParams),
}

impl KernelMemo {
    /// The kernel for points `x` with (unstandardised) `values`: fitted by `fit_on` on the
    /// prefix [`fitted_prefix`] names, or this memo's parameters where they were fitted on
    /// that same prefix.
    pub(super) fn fitted(
        &mut self,
        x: &[Vec<f64>],
        values: &[f64],
        growth: f64,
        fit_on: impl Fn(&[Vec<f64>], &[f64]) -> GpRegressor,
    ) -> Fitted {
        let size = fitted_prefix(x.len(), growth);
        let (x_prefix, values_prefix) = (&x[..size], &values[..size]);
        if let Some(params) = &self.params {
            if size < x.len() && self.x == x_prefix && self.values == values_prefix {
                return Fitted::Prefix(params.clone());
            }
        }
        let gp = fit_on(x_prefix, values_prefix);
        *self = KernelMemo {
            x: x_prefix.to_vec(),
            values: values_prefix.to_vec(),
            params: Some(gp.params().clone()),
        };
        if size == x.len() {
            Fitted::Whole(gp)
        } else {
            Fitted::Prefix(gp.params().clone())
        }
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

    fn fit_counting<'a>(
        fits: &'a std::cell::Cell<usize>,
    ) -> impl Fn(&[Vec<f64>], &[f64]) -> GpRegressor + 'a {
        move |x, v| {
            fits.set(fits.get() + 1);
            super::super::model::fit(x, v, &[false], 1e-6, false, None)
        }
    }

    #[test]
    fn a_prefix_is_fitted_once_and_fitted_again_when_it_changes() {
        let fits = std::cell::Cell::new(0);
        let mut memo = KernelMemo::default();
        let (x, v) = points(23);
        // 22 is a fitting size: the whole set is fitted.
        assert!(matches!(
            memo.fitted(&x[..22], &v[..22], 0.1, fit_counting(&fits)),
            Fitted::Whole(_)
        ));
        assert_eq!(fits.get(), 1);
        // 23: the same 22 points' parameters, no fit.
        let Fitted::Prefix(params) = memo.fitted(&x, &v, 0.1, fit_counting(&fits)) else {
            panic!("fitted on the whole set");
        };
        assert_eq!(fits.get(), 1);
        let whole = super::super::model::fit(&x[..22], &v[..22], &[false], 1e-6, false, None);
        assert_eq!(&params, whole.params());
        // A history that differs in the prefix (another value at point 3) is fitted afresh.
        let mut changed = v.clone();
        changed[3] += 0.5;
        let Fitted::Prefix(other) = memo.fitted(&x, &changed, 0.1, fit_counting(&fits)) else {
            panic!("fitted on the whole set");
        };
        assert_eq!(fits.get(), 2);
        assert_ne!(other, params);
        // Growth 0: every call fits.
        memo.fitted(&x, &changed, 0.0, fit_counting(&fits));
        memo.fitted(&x, &changed, 0.0, fit_counting(&fits));
        assert_eq!(fits.get(), 4);
    }
}
