//! The objective's values as the process sees them: standardised (Optuna's GPSampler), or
//! first warped by a Yeo-Johnson power transform fitted by maximum likelihood (HEBO's output
//! warping; Cowen-Rivers et al., "HEBO: Pushing the limits of sample-efficient
//! hyper-parameter optimisation", JAIR 2022), which spreads out the values near the best so
//! that a stationary kernel can resolve them.

/// The mean and the (population) standard deviation of `values`.
pub(super) fn mean_and_deviation(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let std = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
    (mean, std)
}

/// `values` less their mean, over their standard deviation (1 where they are all equal).
pub(super) fn standardised(values: &[f64]) -> Vec<f64> {
    let (mean, std) = mean_and_deviation(values);
    let std = if std > 1e-12 { std } else { 1.0 };
    values.iter().map(|v| (v - mean) / std).collect()
}

/// The exponent's range: scikit-learn's Brent search starts from the bracket (-2, 2) and is
/// unbounded; its exponents for losses over six decades are near -4.
const EXPONENT_RANGE: (f64, f64) = (-10.0, 10.0);
/// Golden-section steps over [`EXPONENT_RANGE`]: the bracket ends 20 x 0.618^45 (8e-9) wide.
const EXPONENT_STEPS: usize = 45;
/// scikit-learn's threshold for treating an exponent as its limit (0 or 2).
const AT_LIMIT: f64 = 1e-8;

/// `values` (oriented to be maximised) as HEBO warps them: as losses over their standard
/// deviation (not centred), through Yeo-Johnson with the exponent of highest likelihood,
/// standardised, and turned back to be maximised. HEBO uses Box-Cox where every loss is
/// positive; Yeo-Johnson throughout did better on the development functions (Branin,
/// LogBowl and MixedOptNet's medians 10 to 100 times lower). Falls back to
/// [`standardised`] where the values are all equal or the transform overflows.
pub(super) fn yeo_johnson_standardised(values: &[f64]) -> Vec<f64> {
    let (_, std) = mean_and_deviation(values);
    if std <= 1e-12 {
        return standardised(values);
    }
    let losses: Vec<f64> = values.iter().map(|v| -v / std).collect();
    let logs = LogMagnitudes::of(&losses);
    let exponent = likeliest_exponent(&logs);
    let warped: Vec<f64> = logs
        .iter()
        .map(|(negative, l)| -yeo_johnson(negative, l, exponent))
        .collect();
    if warped.iter().all(|w| w.is_finite()) {
        standardised(&warped)
    } else {
        standardised(values)
    }
}

/// Each value's sign and ln(1 + |x|), which is all the transform needs: (1 + x)^l is
/// e^(l ln(1 + x)).
struct LogMagnitudes(Vec<(bool, f64)>);

impl LogMagnitudes {
    fn of(x: &[f64]) -> LogMagnitudes {
        LogMagnitudes(x.iter().map(|&v| (v < 0.0, v.abs().ln_1p())).collect())
    }

    fn iter(&self) -> impl Iterator<Item = (bool, f64)> + '_ {
        self.0.iter().copied()
    }
}

/// Yeo and Johnson's transform, with exponent `lambda`, of the value whose sign is
/// `negative` and whose ln(1 + |x|) is `log`: for x >= 0, ((x + 1)^l - 1) / l (ln(1 + x) at
/// l = 0); for x < 0, -((1 - x)^(2 - l) - 1) / (2 - l) (-ln(1 - x) at l = 2).
fn yeo_johnson(negative: bool, log: f64, lambda: f64) -> f64 {
    let (power, sign) = if negative {
        (2.0 - lambda, -1.0)
    } else {
        (lambda, 1.0)
    };
    if power.abs() < AT_LIMIT {
        sign * log
    } else {
        sign * (power * log).exp_m1() / power
    }
}

/// The exponent that makes the values look most normal: the maximum of Yeo-Johnson's profile
/// log-likelihood, `-n/2 ln var(T(x)) + (lambda - 1) sum sign(x) ln(1 + |x|)`, by
/// golden-section search over [`EXPONENT_RANGE`].
fn likeliest_exponent(logs: &LogMagnitudes) -> f64 {
    let n = logs.0.len() as f64;
    let jacobian: f64 = logs
        .iter()
        .map(|(negative, l)| if negative { -l } else { l })
        .sum();
    let log_likelihood = |lambda: f64| {
        // Welford's running mean and squared deviations: one pass, without the cancellation
        // of sum(t^2) / n - mean^2 where the transformed values sit far from 0.
        let (mut mean, mut squares) = (0.0, 0.0);
        for (k, (negative, l)) in logs.iter().enumerate() {
            let t = yeo_johnson(negative, l, lambda);
            let delta = t - mean;
            mean += delta / (k + 1) as f64;
            squares += delta * (t - mean);
        }
        let var = squares / n;
        if var.is_finite() && var > 0.0 {
            -n / 2.0 * var.ln() + (lambda - 1.0) * jacobian
        } else {
            f64::NEG_INFINITY
        }
    };
    const SHRINK: f64 = 0.618_033_988_749_894_9; // the golden ratio less 1
    let (mut low, mut high) = EXPONENT_RANGE;
    let mut left = high - SHRINK * (high - low);
    let mut right = low + SHRINK * (high - low);
    let (mut at_left, mut at_right) = (log_likelihood(left), log_likelihood(right));
    for _ in 0..EXPONENT_STEPS {
        if at_left > at_right {
            high = right;
            (right, at_right) = (left, at_left);
            left = high - SHRINK * (high - low);
            at_left = log_likelihood(left);
        } else {
            low = left;
            (left, at_left) = (right, at_right);
            right = low + SHRINK * (high - low);
            at_right = log_likelihood(right);
        }
    }
    (low + high) / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transform_is_yeo_and_johnsons_at_hand_worked_points() {
        // x >= 0: ((x + 1)^l - 1) / l, ln(1 + x) at l = 0; x < 0: -((1 - x)^(2 - l) - 1) / (2 - l),
        // -ln(1 - x) at l = 2.
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        let yeo_johnson = |x: f64, lambda: f64| yeo_johnson(x < 0.0, x.abs().ln_1p(), lambda);
        assert!(close(yeo_johnson(3.0, 0.5), 2.0)); // (2 - 1) / 0.5
        assert!(close(yeo_johnson(3.0, 0.0), 4f64.ln()));
        assert!(close(yeo_johnson(-3.0, 1.0), -3.0)); // l = 1 is the identity
        assert!(close(yeo_johnson(-3.0, 2.0), -(4f64.ln())));
        assert!(close(yeo_johnson(-8.0, 0.0), -40.0)); // -(9^2 - 1) / 2
        assert!(close(yeo_johnson(2.5, 1.0), 2.5));
    }

    #[test]
    fn the_exponent_and_the_warped_values_are_scikit_learns() {
        // testdata/yeo_johnson.py: scikit-learn 1.7.2's PowerTransformer on four sets of
        // losses (a long tail, all negative, both signs, six decades).
        let fixture: serde_json::Value =
            serde_json::from_str(include_str!("testdata/yeo_johnson.json")).unwrap();
        for set in fixture["sets"].as_array().unwrap() {
            let name = set["name"].as_str().unwrap();
            let numbers =
                |key: &str| -> Vec<f64> { serde_json::from_value(set[key].clone()).unwrap() };
            let loss = numbers("loss");
            let (_, std) = mean_and_deviation(&loss);
            let scaled: Vec<f64> = loss.iter().map(|l| l / std).collect();
            let lambda = likeliest_exponent(&LogMagnitudes::of(&scaled));
            let expected = set["lambda"].as_f64().unwrap();
            assert!(
                (lambda - expected).abs() < 1e-6,
                "{name}: {lambda} vs {expected}"
            );
            // Values to maximise are the losses negated, and so is what comes out.
            let values: Vec<f64> = loss.iter().map(|l| -l).collect();
            for (ours, theirs) in yeo_johnson_standardised(&values)
                .iter()
                .zip(numbers("transformed"))
            {
                assert!(
                    (ours + theirs).abs() < 1e-6,
                    "{name}: {ours} vs {}",
                    -theirs
                );
            }
        }
    }

    #[test]
    fn equal_values_are_left_as_standardising_leaves_them() {
        assert_eq!(yeo_johnson_standardised(&[2.0, 2.0, 2.0]), vec![0.0; 3]);
    }
}
