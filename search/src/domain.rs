//! One parameter's set of possible values, and how to draw from it.

use rand::Rng;

use crate::{value_text, Value};

/// The values one parameter may take.
///
/// Bounds are inclusive for integers and `[low, high)` for floats; every sample lies inside
/// them exactly (log and quantized domains included).
///
/// ```
/// use rand::SeedableRng;
/// use tune_search::Domain;
/// let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
/// let units = Domain::Int { low: 16, high: 1024, step: 1, log: true };
/// units.validate().unwrap();
/// let v = units.sample(&mut rng).as_i64().unwrap();
/// assert!((16..=1024).contains(&v));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum Domain {
    /// Float uniform in `[low, high)`.
    Uniform { low: f64, high: f64 },
    /// Float whose logarithm is uniform; `0 < low < high`.
    LogUniform { low: f64, high: f64 },
    /// Multiples `low + k*q` up to `high` (Optuna's discrete uniform).
    QUniform { low: f64, high: f64, q: f64 },
    /// Log-uniform, rounded to a multiple of `q` that lies in `[low, high]` (Hyperopt's qloguniform).
    QLogUniform { low: f64, high: f64, q: f64 },
    /// Integers `low, low+step, ..` up to `high` inclusive; `log` draws uniformly in log space.
    Int {
        low: i64,
        high: i64,
        step: i64,
        log: bool,
    },
    /// Unbounded normal with mean `mu` and standard deviation `sigma`.
    Normal { mu: f64, sigma: f64 },
    /// One of the listed values, each equally likely.
    Choice(Vec<Value>),
    /// Listed values that grid search enumerates (random search draws them like a choice).
    Grid(Vec<Value>),
}

/// A bound as an error shows it.
struct Shown(String);

impl From<f64> for Shown {
    fn from(x: f64) -> Shown {
        Shown(value_text(x))
    }
}

impl From<i64> for Shown {
    fn from(x: i64) -> Shown {
        Shown(x.to_string())
    }
}

/// What is wrong with a domain's definition.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DomainError {
    #[error("expected low < high, found low = {low} and high = {high}")]
    EmptyRange { low: String, high: String },
    #[error("log-scaled bounds must be positive, found low = {0}")]
    NonPositiveLog(String),
    #[error("bounds must be finite numbers, found {0}")]
    NonFinite(String),
    #[error("the step must be positive, found {0}")]
    NonPositiveStep(String),
    #[error("no multiple of q = {} lies in [{}, {}]", value_text(*q), value_text(*low), value_text(*high))]
    NoQuantizedValue { low: f64, high: f64, q: f64 },
    #[error("sigma must be positive and finite, found {}", value_text(*.0))]
    BadSigma(f64),
    /// `high - low` (or the number of steps in it) is not a finite number: sampling would
    /// give infinities, which cannot be stored.
    #[error("the range from {} to {} is too wide: its width overflows a 64-bit float", value_text(*low), value_text(*high))]
    TooWide { low: f64, high: f64 },
    #[error("a log-scaled int cannot also have a step (found step = {0})")]
    StepWithLog(i64),
    #[error("expected at least one value, found an empty list")]
    Empty,
}

/// The first of `xs` that is not finite, as an error.
fn finite(xs: &[f64]) -> Result<(), DomainError> {
    match xs.iter().find(|x| !x.is_finite()) {
        Some(&x) => Err(DomainError::NonFinite(value_text(x))),
        None => Ok(()),
    }
}

/// `low` below `high`.
fn ordered<T: PartialOrd + Into<Shown>>(low: T, high: T) -> Result<(), DomainError> {
    if low < high {
        Ok(())
    } else {
        Err(DomainError::EmptyRange {
            low: low.into().0,
            high: high.into().0,
        })
    }
}

/// A log scale's `low` above 0.
fn positive_log(low: f64) -> Result<(), DomainError> {
    if low > 0.0 {
        Ok(())
    } else {
        Err(DomainError::NonPositiveLog(value_text(low)))
    }
}

/// A range of finitely many steps `q`.
fn finite_width(low: f64, high: f64, q: f64) -> Result<(), DomainError> {
    if ((high - low) / q).is_finite() {
        Ok(())
    } else {
        Err(DomainError::TooWide { low, high })
    }
}

impl Domain {
    /// The domain's key in the TOML form (`uniform`, `int`, `choice`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            Domain::Uniform { .. } => "uniform",
            Domain::LogUniform { .. } => "loguniform",
            Domain::QUniform { .. } => "quniform",
            Domain::QLogUniform { .. } => "qloguniform",
            Domain::Int { .. } => "int",
            Domain::Normal { .. } => "normal",
            Domain::Choice(_) => "choice",
            Domain::Grid(_) => "grid",
        }
    }

    /// The listed values of a choice or grid; `None` for numeric domains.
    pub fn values(&self) -> Option<&[Value]> {
        match self {
            Domain::Choice(v) | Domain::Grid(v) => Some(v),
            _ => None,
        }
    }

    /// Checks the definition: ordered finite bounds, positive log bounds and steps, non-empty lists.
    pub fn validate(&self) -> Result<(), DomainError> {
        match *self {
            Domain::Uniform { low, high } => {
                finite(&[low, high])?;
                ordered(low, high)?;
                finite_width(low, high, 1.0)
            }
            Domain::LogUniform { low, high } => {
                finite(&[low, high])?;
                ordered(low, high)?;
                positive_log(low)
            }
            Domain::QUniform { low, high, q } | Domain::QLogUniform { low, high, q } => {
                finite(&[low, high, q])?;
                ordered(low, high)?;
                if q <= 0.0 {
                    return Err(DomainError::NonPositiveStep(value_text(q)));
                }
                finite_width(low, high, q)?;
                if matches!(self, Domain::QLogUniform { .. }) {
                    positive_log(low)?;
                    if (low / q).ceil() > (high / q).floor() {
                        return Err(DomainError::NoQuantizedValue { low, high, q });
                    }
                }
                Ok(())
            }
            Domain::Int {
                low,
                high,
                step,
                log,
            } => {
                ordered(low, high)?;
                if step <= 0 {
                    return Err(DomainError::NonPositiveStep(step.to_string()));
                }
                if log {
                    if low <= 0 {
                        return Err(DomainError::NonPositiveLog(low.to_string()));
                    }
                    if step != 1 {
                        return Err(DomainError::StepWithLog(step));
                    }
                }
                Ok(())
            }
            Domain::Normal { mu, sigma } => {
                finite(&[mu])?;
                if sigma > 0.0 && sigma.is_finite() {
                    Ok(())
                } else {
                    Err(DomainError::BadSigma(sigma))
                }
            }
            Domain::Choice(ref v) | Domain::Grid(ref v) => {
                if v.is_empty() {
                    Err(DomainError::Empty)
                } else {
                    Ok(())
                }
            }
        }
    }

    /// Draws one value. The domain must be valid (see [`Domain::validate`]).
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> Value {
        match *self {
            Domain::Uniform { low, high } => {
                // `low + u*(high-low)` can round up to `high`; stay in [low, high).
                let x = low + rng.random::<f64>() * (high - low);
                Value::Float(if x < high {
                    x
                } else {
                    low.max(prev_float(high))
                })
            }
            Domain::LogUniform { low, high } => {
                let x = (low.ln() + rng.random::<f64>() * (high.ln() - low.ln())).exp();
                Value::Float(x.clamp(low, high))
            }
            Domain::QUniform { low, high, q } => {
                let n = q_steps(low, high, q) as u64;
                let k = rng.random_range(0..=n);
                Value::Float(round_to_q(low + k as f64 * q, q).clamp(low, high))
            }
            Domain::QLogUniform { low, high, q } => {
                let x = (low.ln() + rng.random::<f64>() * (high.ln() - low.ln())).exp();
                let (kmin, kmax) = ((low / q).ceil(), (high / q).floor());
                let k = (x / q).round().clamp(kmin, kmax);
                Value::Float(round_to_q(k * q, q))
            }
            Domain::Int {
                low,
                high,
                step,
                log,
            } => {
                if log {
                    // Optuna's log-int: uniform in [ln(low-0.5), ln(high+0.5)], rounded, so
                    // every integer gets the mass of its unit interval in log space.
                    let (a, b) = ((low as f64 - 0.5).ln(), (high as f64 + 0.5).ln());
                    let x = (a + rng.random::<f64>() * (b - a)).exp().round() as i64;
                    Value::Int(x.clamp(low, high))
                } else {
                    let k = rng.random_range(0..=int_steps(low, high, step));
                    Value::Int(int_at(low, step, k))
                }
            }
            Domain::Normal { mu, sigma } => {
                // Box-Muller; 1-u is in (0, 1], so the log is finite.
                let (u1, u2) = (1.0 - rng.random::<f64>(), rng.random::<f64>());
                let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
                Value::Float(mu + sigma * z)
            }
            Domain::Choice(ref v) | Domain::Grid(ref v) => v[rng.random_range(0..v.len())].clone(),
        }
    }

    /// Whether `value` is one this domain can produce (used to check stored and user params).
    pub fn contains(&self, value: &Value) -> bool {
        match (self, value) {
            (Domain::Uniform { low, high }, v) => {
                v.as_f64().is_some_and(|x| *low <= x && x < *high)
            }
            (
                Domain::LogUniform { low, high }
                | Domain::QUniform { low, high, .. }
                | Domain::QLogUniform { low, high, .. },
                v,
            ) => v.as_f64().is_some_and(|x| *low <= x && x <= *high),
            (
                Domain::Int {
                    low, high, step, ..
                },
                Value::Int(i),
            ) => low <= i && i <= high && (*i as i128 - *low as i128) % *step as i128 == 0,
            (Domain::Normal { .. }, v) => v.as_f64().is_some_and(f64::is_finite),
            (Domain::Choice(vs) | Domain::Grid(vs), v) => vs.contains(v),
            _ => false,
        }
    }
}

/// The largest float below `x` (for `x > 0` or `x <= 0` alike).
pub(crate) fn prev_float(x: f64) -> f64 {
    if x > 0.0 {
        f64::from_bits(x.to_bits() - 1)
    } else if x == 0.0 {
        -f64::from_bits(1)
    } else {
        f64::from_bits(x.to_bits() + 1)
    }
}

/// Removes the binary noise of `k*q` (0.30000000000000004 -> 0.3) by rounding to the number
/// of decimals `q` has, so quantized values print as the user wrote the grid.
pub(crate) fn round_to_q(x: f64, q: f64) -> f64 {
    let decimals = (0..=12)
        .find(|&d| {
            let scaled = q * 10f64.powi(d);
            (scaled - scaled.round()).abs() < 1e-9 * scaled.abs().max(1.0)
        })
        .unwrap_or(12);
    let rounded: f64 = format!("{x:.*}", decimals as usize).parse().unwrap_or(x);
    rounded
}

/// The number of quantized steps `k` in `low + k*q <= high` (a hair of slack, so that a bound
/// written as a multiple of `q` counts despite binary noise).
pub(crate) fn q_steps(low: f64, high: f64, q: f64) -> f64 {
    ((high - low) / q + 1e-9).floor()
}

/// How many steps of `step` from `low` stay within `high` (`low <= high`, `step > 0`), in
/// 128-bit arithmetic: `high - low` overflows i64 for ranges wider than half of it.
pub(crate) fn int_steps(low: i64, high: i64, step: i64) -> u64 {
    ((high as i128 - low as i128) / step as i128) as u64
}

/// `low + k * step`, for `k <= int_steps(low, high, step)` (so it fits in i64).
pub(crate) fn int_at(low: i64, step: i64, k: u64) -> i64 {
    (low as i128 + k as i128 * step as i128) as i64
}

impl Domain {
    /// The largest value of a stepped range: quniform's last multiple of `q` from `low`, an
    /// int range's last step (its `high`, lowered to a whole number of steps); `None` for
    /// other domains.
    ///
    /// ```
    /// use tune_search::{Domain, Value};
    /// let q = Domain::QUniform { low: 0.0, high: 1.1, q: 0.25 };
    /// assert_eq!(q.highest_step(), Some(Value::Float(1.0)));
    /// let n = Domain::Int { low: 1, high: 10, step: 4, log: false };
    /// assert_eq!(n.highest_step(), Some(Value::Int(9)));
    /// assert_eq!(Domain::Uniform { low: 0.0, high: 1.0 }.highest_step(), None);
    /// ```
    pub fn highest_step(&self) -> Option<Value> {
        match *self {
            Domain::QUniform { low, high, q } => {
                Some(Value::Float(low + q_steps(low, high, q) * q))
            }
            Domain::Int {
                low, high, step, ..
            } => Some(Value::Int(int_at(low, step, int_steps(low, high, step)))),
            _ => None,
        }
    }

    /// The value of an `int` domain `[low, high]` with `step` nearest to `x`: `low + k * step`
    /// with `k` rounded and kept within the range, without overflow at any bounds.
    ///
    /// ```
    /// use tune_search::Domain;
    /// assert_eq!(Domain::int_nearest(-3, 9, 3, 4.4), 3);
    /// assert_eq!(Domain::int_nearest(-3, 9, 3, 1e9), 9);
    /// assert_eq!(Domain::int_nearest(i64::MIN, i64::MAX, 1, 1e300), i64::MAX);
    /// ```
    pub fn int_nearest(low: i64, high: i64, step: i64, x: f64) -> i64 {
        // `as u64` saturates (NaN to 0); the min keeps float rounding from passing the top.
        let k = ((x - low as f64) / step as f64).round().max(0.0) as u64;
        int_at(low, step, k.min(int_steps(low, high, step)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn int_domains_at_the_edges_of_i64_sample_and_contain_without_overflow() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let edges = [
            (i64::MIN, i64::MAX, 1),
            (i64::MIN, i64::MAX, i64::MAX),
            (-5_000_000_000_000_000_000, 5_000_000_000_000_000_000, 1),
            (-5_000_000_000_000_000_000, 5_000_000_000_000_000_000, 7),
            (i64::MIN, i64::MIN + 1, 1),
            (i64::MAX - 1, i64::MAX, 1),
            (0, i64::MAX, 3),
        ];
        for (low, high, step) in edges {
            let d = Domain::Int {
                low,
                high,
                step,
                log: false,
            };
            d.validate().unwrap();
            for _ in 0..200 {
                let v = d.sample(&mut rng);
                assert!(d.contains(&v), "{v:?} from {d:?}");
            }
            let top = int_at(low, step, int_steps(low, high, step));
            assert!(top <= high && (high as i128 - top as i128) < step as i128);
            for x in [
                f64::NEG_INFINITY,
                -1e300,
                0.0,
                1e300,
                f64::INFINITY,
                f64::NAN,
            ] {
                let v = Domain::int_nearest(low, high, step, x);
                assert!(d.contains(&Value::Int(v)), "{v} for {x} in {d:?}");
            }
        }
    }

    #[test]
    fn float_ranges_whose_width_overflows_are_refused() {
        for d in [
            Domain::Uniform {
                low: -1.7e308,
                high: 1.7e308,
            },
            Domain::QUniform {
                low: -1e308,
                high: 1e308,
                q: 0.5,
            },
        ] {
            let e = d.validate().unwrap_err();
            assert!(matches!(e, DomainError::TooWide { .. }), "{e}");
            assert!(e
                .to_string()
                .ends_with("is too wide: its width overflows a 64-bit float"));
        }
        // The widest that fits samples finite values.
        let d = Domain::Uniform {
            low: -8e307,
            high: 8e307,
        };
        d.validate().unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for _ in 0..200 {
            assert!(d.sample(&mut rng).as_f64().unwrap().is_finite());
        }
    }

    fn draws(d: &Domain, n: usize) -> Vec<Value> {
        d.validate().unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(42);
        (0..n).map(|_| d.sample(&mut rng)).collect()
    }

    #[test]
    fn uniform_stays_in_half_open_range() {
        let d = Domain::Uniform {
            low: -5.0,
            high: 10.0,
        };
        for v in draws(&d, 20_000) {
            let x = v.as_f64().unwrap();
            assert!((-5.0..10.0).contains(&x), "{x}");
            assert!(d.contains(&v));
        }
        // A range one ulp wide can only yield `low`.
        let tiny = Domain::Uniform {
            low: 1.0,
            high: f64::from_bits(1.0f64.to_bits() + 1),
        };
        assert!(draws(&tiny, 100).iter().all(|v| v.as_f64() == Some(1.0)));
    }

    #[test]
    fn loguniform_is_uniform_in_log_space() {
        let d = Domain::LogUniform {
            low: 1e-5,
            high: 1e-1,
        };
        let xs: Vec<f64> = draws(&d, 40_000)
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert!(xs.iter().all(|x| (1e-5..=1e-1).contains(x)));
        // Each decade holds about a quarter of the mass.
        for decade in 0..4 {
            let (a, b) = (1e-5 * 10f64.powi(decade), 1e-5 * 10f64.powi(decade + 1));
            let frac = xs.iter().filter(|&&x| a <= x && x < b).count() as f64 / xs.len() as f64;
            assert!((frac - 0.25).abs() < 0.02, "decade {decade}: {frac}");
        }
    }

    #[test]
    fn quniform_hits_every_grid_point_and_nothing_else() {
        let d = Domain::QUniform {
            low: 0.0,
            high: 1.0,
            q: 0.1,
        };
        let mut seen: Vec<f64> = draws(&d, 5_000)
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        seen.sort_by(f64::total_cmp);
        seen.dedup();
        let expected: Vec<f64> = (0..=10)
            .map(|k| format!("{:.1}", k as f64 / 10.0).parse().unwrap())
            .collect();
        assert_eq!(seen, expected);
    }

    #[test]
    fn qloguniform_values_are_in_range_multiples() {
        let d = Domain::QLogUniform {
            low: 3.0,
            high: 100.0,
            q: 5.0,
        };
        for v in draws(&d, 5_000) {
            let x = v.as_f64().unwrap();
            assert!((5.0..=100.0).contains(&x), "{x}");
            assert_eq!(x % 5.0, 0.0);
        }
        assert_eq!(
            Domain::QLogUniform {
                low: 1.0,
                high: 2.0,
                q: 5.0
            }
            .validate(),
            Err(DomainError::NoQuantizedValue {
                low: 1.0,
                high: 2.0,
                q: 5.0
            })
        );
    }

    #[test]
    fn log_int_reaches_both_ends_with_log_mass() {
        let d = Domain::Int {
            low: 1,
            high: 4,
            step: 1,
            log: true,
        };
        let vs: Vec<i64> = draws(&d, 40_000)
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
        // Mass of k is ln((k+0.5)/(k-0.5)) / ln(4.5/0.5).
        let total = (4.5f64 / 0.5).ln();
        for k in 1..=4 {
            let expect = ((k as f64 + 0.5) / (k as f64 - 0.5)).ln() / total;
            let got = vs.iter().filter(|&&v| v == k).count() as f64 / vs.len() as f64;
            assert!((got - expect).abs() < 0.01, "k={k}: {got} vs {expect}");
        }
    }

    #[test]
    fn stepped_int_stays_on_its_lattice() {
        let d = Domain::Int {
            low: 10,
            high: 35,
            step: 5,
            log: false,
        };
        let mut vs: Vec<i64> = draws(&d, 2_000)
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
        vs.sort();
        vs.dedup();
        assert_eq!(vs, vec![10, 15, 20, 25, 30, 35]);
    }

    #[test]
    fn normal_has_its_moments() {
        let d = Domain::Normal {
            mu: 2.0,
            sigma: 3.0,
        };
        let xs: Vec<f64> = draws(&d, 50_000)
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
        assert!((mean - 2.0).abs() < 0.05, "{mean}");
        assert!((var.sqrt() - 3.0).abs() < 0.05, "{var}");
    }

    #[test]
    fn invalid_definitions_are_rejected() {
        let bad = [
            (
                Domain::Uniform {
                    low: 1.0,
                    high: 1.0,
                },
                "expected low < high",
            ),
            (
                Domain::LogUniform {
                    low: 0.0,
                    high: 1.0,
                },
                "must be positive",
            ),
            (
                Domain::Uniform {
                    low: f64::NAN,
                    high: 1.0,
                },
                "finite",
            ),
            (
                Domain::QUniform {
                    low: 0.0,
                    high: 1.0,
                    q: 0.0,
                },
                "step must be positive",
            ),
            (
                Domain::Int {
                    low: 5,
                    high: 2,
                    step: 1,
                    log: false,
                },
                "expected low < high",
            ),
            (
                Domain::Int {
                    low: 0,
                    high: 8,
                    step: 1,
                    log: true,
                },
                "must be positive",
            ),
            (
                Domain::Int {
                    low: 1,
                    high: 8,
                    step: 2,
                    log: true,
                },
                "cannot also have a step",
            ),
            (
                Domain::Normal {
                    mu: 0.0,
                    sigma: 0.0,
                },
                "sigma",
            ),
            (Domain::Choice(vec![]), "empty"),
        ];
        for (d, msg) in bad {
            let err = d.validate().unwrap_err().to_string();
            assert!(err.contains(msg), "{d:?}: {err}");
        }
    }

    #[test]
    fn round_to_q_cleans_binary_noise() {
        assert_eq!(round_to_q(0.1 * 3.0, 0.1), 0.3);
        assert_eq!(round_to_q(7.0, 1.0), 7.0);
        assert_eq!(round_to_q(0.075, 0.025), 0.075);
    }
}
