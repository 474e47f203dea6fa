//! Internal coordinates: where the Parzen estimators live.
//!
//! Log domains are modelled in log space; discrete numeric domains (int, quantized) as a
//! continuous interval widened by half a step on each side, so every value owns an equal-width
//! bin; choices by their index. An unbounded normal domain is modelled in the quantile space of
//! its prior, u = Phi((x - mu) / sigma) in [0, 1]: with unbounded coordinates the ratio l/g
//! tends to the ratio of the prior weights wherever data is missing, which pulls TPE into tails
//! that data never covers.

use crate::domain::{int_at, int_steps, prev_float, q_steps, round_to_q};
use crate::{Domain, TrialId, Value};

use super::estimator::{DimSpec, NumericDim};
use super::numerics::{ndtr, ndtri};

/// The internal interval of a domain, with its prior kernel.
pub(crate) fn dim_spec(domain: &Domain) -> DimSpec {
    let stepped = |low: f64, high: f64, step: f64| {
        DimSpec::Numeric(NumericDim {
            low,
            high,
            range: high - low,
            prior_mu: 0.5 * (low + high),
            prior_sigma: high - low,
            step,
        })
    };
    let numeric = |low: f64, high: f64| stepped(low, high, 0.0);
    match *domain {
        Domain::Uniform { low, high } => numeric(low, high),
        Domain::LogUniform { low, high } => numeric(low.ln(), high.ln()),
        Domain::QUniform { low, high, q } => {
            stepped(low - q / 2.0, low + q_steps(low, high, q) * q + q / 2.0, q)
        }
        Domain::QLogUniform { low, high, q } => {
            let (kmin, kmax) = ((low / q).ceil(), (high / q).floor());
            numeric(((kmin - 0.5) * q).ln(), ((kmax + 0.5) * q).ln())
        }
        Domain::Int {
            low,
            high,
            step,
            log: false,
        } => {
            let top = int_at(low, step, int_steps(low, high, step));
            stepped(
                low as f64 - step as f64 / 2.0,
                top as f64 + step as f64 / 2.0,
                step as f64,
            )
        }
        Domain::Int {
            low,
            high,
            log: true,
            ..
        } => numeric((low as f64 - 0.5).ln(), (high as f64 + 0.5).ln()),
        Domain::Normal { .. } => numeric(0.0, 1.0),
        Domain::Choice(ref v) | Domain::Grid(ref v) => DimSpec::Categorical { n: v.len() },
    }
}

/// A value's internal coordinate; `None` if the value is not one of the domain's.
pub(crate) fn to_internal(domain: &Domain, value: &Value) -> Option<f64> {
    match domain {
        Domain::Choice(v) | Domain::Grid(v) => v.iter().position(|x| x == value).map(|i| i as f64),
        Domain::LogUniform { .. } | Domain::QLogUniform { .. } | Domain::Int { log: true, .. } => {
            value.as_f64().filter(|x| *x > 0.0).map(f64::ln)
        }
        Domain::Normal { mu, sigma } => value.as_f64().map(|x| ndtr((x - mu) / sigma)),
        _ => value.as_f64(),
    }
}

/// The domain value an internal coordinate stands for (rounded to the domain's grid).
pub(crate) fn from_internal(domain: &Domain, x: f64) -> Value {
    match *domain {
        Domain::Uniform { low, high } => Value::Float(if x < high {
            x.max(low)
        } else {
            low.max(prev_float(high))
        }),
        Domain::LogUniform { low, high } => Value::Float(x.exp().clamp(low, high)),
        Domain::QUniform { low, high, q } => {
            let k = ((x - low) / q).round().clamp(0.0, q_steps(low, high, q));
            Value::Float(round_to_q(low + k * q, q).clamp(low, high))
        }
        Domain::QLogUniform { low, high, q } => {
            let k = (x.exp() / q)
                .round()
                .clamp((low / q).ceil(), (high / q).floor());
            Value::Float(round_to_q(k * q, q))
        }
        Domain::Int {
            low,
            high,
            step,
            log: false,
        } => Value::Int(Domain::int_nearest(low, high, step, x)),
        Domain::Int {
            low,
            high,
            log: true,
            ..
        } => Value::Int((x.exp().round() as i64).clamp(low, high)),
        Domain::Normal { mu, sigma } => {
            Value::Float(mu + sigma * ndtri(x.clamp(1e-12, 1.0 - 1e-12)))
        }
        Domain::Choice(ref v) | Domain::Grid(ref v) => v[(x as usize).min(v.len() - 1)].clone(),
    }
}

/// Every trial's internal coordinates in one flat array (trial-major, NaN where a parameter
/// is inactive), so the per-suggestion passes over the history read memory in order.
#[derive(Debug, Clone, Default)]
pub(crate) struct TrialCoords {
    stride: usize,
    values: Vec<f64>,
    known: Vec<bool>,
}

impl TrialCoords {
    pub(crate) fn new(params: usize) -> TrialCoords {
        TrialCoords {
            stride: params,
            ..TrialCoords::default()
        }
    }

    /// Trial `id`'s coordinates, if recorded.
    pub(crate) fn get(&self, id: TrialId) -> Option<&[f64]> {
        let i = id as usize;
        self.known
            .get(i)
            .copied()
            .unwrap_or(false)
            .then(|| &self.values[i * self.stride..(i + 1) * self.stride])
    }

    /// Records trial `id` once (its params never change); `compute` fills its row.
    pub(crate) fn ensure(&mut self, id: TrialId, compute: impl FnOnce(&mut [f64])) {
        let i = id as usize;
        if self.known.len() <= i {
            self.known.resize(i + 1, false);
            self.values.resize((i + 1) * self.stride, f64::NAN);
        }
        if !self.known[i] {
            compute(&mut self.values[i * self.stride..(i + 1) * self.stride]);
            self.known[i] = true;
        }
    }

    /// Trials recorded so far (by id, some perhaps missing).
    pub(crate) fn len(&self) -> usize {
        self.known.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(d: &Domain, values: &[Value]) {
        for v in values {
            let x = to_internal(d, v).unwrap();
            match (from_internal(d, x), v) {
                // exp(ln(v)) may differ from v in the last bit.
                (Value::Float(a), Value::Float(b)) if matches!(d, Domain::LogUniform { .. }) => {
                    assert!((a / b - 1.0).abs() < 1e-15, "{a} vs {b}")
                }
                (back, v) => assert_eq!(&back, v, "{d:?}"),
            }
            if let DimSpec::Numeric(NumericDim { low, high, .. }) = dim_spec(d) {
                assert!(
                    low <= x && x <= high,
                    "{x} outside [{low}, {high}] for {v:?}"
                );
            }
        }
    }

    #[test]
    fn log_int_quantized_round_trips() {
        round_trip(
            &Domain::Int {
                low: 16,
                high: 1024,
                step: 1,
                log: true,
            },
            &[16.into(), 17.into(), 1000.into(), 1024.into()],
        );
        round_trip(
            &Domain::Int {
                low: -3,
                high: 9,
                step: 3,
                log: false,
            },
            &[(-3).into(), 0.into(), 9.into()],
        );
        round_trip(
            &Domain::QUniform {
                low: 0.0,
                high: 1.0,
                q: 0.1,
            },
            &[0.0.into(), 0.3.into(), 1.0.into()],
        );
        round_trip(
            &Domain::QLogUniform {
                low: 3.0,
                high: 100.0,
                q: 5.0,
            },
            &[5.0.into(), 100.0.into()],
        );
        round_trip(
            &Domain::LogUniform {
                low: 1e-5,
                high: 1e-1,
            },
            &[1e-5.into(), 1e-3.into()],
        );
        round_trip(
            &Domain::Choice(vec!["a".into(), true.into(), 3.into()]),
            &["a".into(), true.into(), 3.into()],
        );
        // A normal value goes through its prior's CDF and back: exact up to the CDF's precision.
        let normal = Domain::Normal {
            mu: 1.0,
            sigma: 2.0,
        };
        for x in [-7.5, 0.3, 1.0, 6.0] {
            let u = to_internal(&normal, &Value::Float(x)).unwrap();
            assert!((0.0..=1.0).contains(&u));
            let back = from_internal(&normal, u).as_f64().unwrap();
            assert!((back - x).abs() < 1e-6, "{x} -> {back}");
        }
    }

    #[test]
    fn discrete_bins_are_equal_and_widened_by_half_a_step() {
        let d = Domain::Int {
            low: 1,
            high: 4,
            step: 1,
            log: false,
        };
        assert_eq!(
            dim_spec(&d),
            DimSpec::Numeric(NumericDim {
                low: 0.5,
                high: 4.5,
                range: 4.0,
                prior_mu: 2.5,
                prior_sigma: 4.0,
                step: 1.0
            })
        );
        // Every point of the widened interval maps to a value of the domain.
        for i in 0..=400 {
            let x = 0.5 + 4.0 * i as f64 / 400.0;
            let v = from_internal(&d, x).as_i64().unwrap();
            assert!((1..=4).contains(&v));
            assert!((v as f64 - x).abs() <= 0.5 + 1e-12);
        }
        let q = dim_spec(&Domain::QUniform {
            low: 0.0,
            high: 1.0,
            q: 0.25,
        });
        assert_eq!(
            q,
            DimSpec::Numeric(NumericDim {
                low: -0.125,
                high: 1.125,
                range: 1.25,
                prior_mu: 0.5,
                prior_sigma: 1.25,
                step: 0.25
            })
        );
    }

    #[test]
    fn float_ends_stay_inside() {
        let d = Domain::Uniform {
            low: -1.0,
            high: 2.0,
        };
        assert!(from_internal(&d, 2.0).as_f64().unwrap() < 2.0);
        assert_eq!(from_internal(&d, -5.0).as_f64(), Some(-1.0));
        let l = Domain::LogUniform {
            low: 1e-3,
            high: 1.0,
        };
        assert_eq!(from_internal(&l, 10.0).as_f64(), Some(1.0));
    }
}
