//! The search space as the Gaussian process sees it: one coordinate per parameter, numeric
//! ones in [0, 1] over TPE's internal interval (log domains in log space, stepped ones widened
//! by half a step so that every value owns an equal share, the unbounded normal in its prior's
//! quantiles), choices by their index on a dimension compared by Hamming distance.

use crate::tpe::coords::{dim_spec, from_internal, to_internal};
use crate::tpe::estimator::DimSpec;
use crate::{Domain, Params, Space};

/// A space the Gaussian process cannot model: these parameters have `when` conditions.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "the Gaussian process needs every parameter in every trial, and {} {} a `when` condition: \
     use algorithm = \"tpe\" for conditional spaces",
    .0.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", "),
    if .0.len() == 1 { "has" } else { "have" }
)]
pub struct ConditionalSpace(pub Vec<String>);

/// One coordinate.
#[derive(Debug, Clone, PartialEq)]
enum Dim {
    /// [0, 1] over the internal interval [low, high].
    Numeric { low: f64, high: f64 },
    /// Choice indices 0..n.
    Categorical { n: usize },
}

/// A space mapped to the GP's coordinates.
///
/// ```
/// use tune_search::gp::UnitSpace;
/// use tune_search::{Params, Space, Value};
/// let space = Space::builder().uniform("x", -1.0, 1.0).choice("opt", ["sgd", "adam"]).build().unwrap();
/// let unit = UnitSpace::new(&space).unwrap();
/// let mut p = Params::default();
/// p.insert("x", Value::Float(-1.0));
/// p.insert("opt", Value::from("adam"));
/// assert_eq!(unit.to_point(&p).unwrap(), vec![0.0, 1.0]);
/// assert_eq!(unit.categorical(), vec![false, true]);
/// assert_eq!(unit.to_params(&[0.0, 1.0]), p);
/// ```
#[derive(Debug, Clone)]
pub struct UnitSpace {
    params: Vec<(String, Domain, Dim)>,
}

impl UnitSpace {
    /// The space's coordinates; a space with conditional parameters is refused (naming them):
    /// a GP needs every parameter in every trial.
    pub fn new(space: &Space) -> Result<UnitSpace, ConditionalSpace> {
        let conditional: Vec<String> = space
            .params()
            .iter()
            .filter(|p| !p.when.is_empty())
            .map(|p| p.name.clone())
            .collect();
        if !conditional.is_empty() {
            return Err(ConditionalSpace(conditional));
        }
        let params = space
            .params()
            .iter()
            .map(|p| {
                let dim = match dim_spec(&p.domain) {
                    DimSpec::Numeric(d) => Dim::Numeric {
                        low: d.low,
                        high: d.high,
                    },
                    DimSpec::Categorical { n } => Dim::Categorical { n },
                };
                (p.name.clone(), p.domain.clone(), dim)
            })
            .collect();
        Ok(UnitSpace { params })
    }

    /// Which coordinates are choices.
    pub fn categorical(&self) -> Vec<bool> {
        self.params
            .iter()
            .map(|(_, _, d)| matches!(d, Dim::Categorical { .. }))
            .collect()
    }

    /// Each coordinate's number of choices; 0 for a numeric one.
    pub fn choices(&self) -> Vec<usize> {
        self.params
            .iter()
            .map(|(_, _, d)| match d {
                Dim::Categorical { n } => *n,
                Dim::Numeric { .. } => 0,
            })
            .collect()
    }

    /// The coordinates of `params`; `None` if one is missing or not of its domain.
    pub fn to_point(&self, params: &Params) -> Option<Vec<f64>> {
        self.params
            .iter()
            .map(|(name, domain, dim)| {
                let x = to_internal(domain, params.get(name)?)?;
                Some(match *dim {
                    Dim::Numeric { low, high } => ((x - low) / (high - low)).clamp(0.0, 1.0),
                    Dim::Categorical { .. } => x,
                })
            })
            .collect()
    }

    /// The params at `point` (numeric coordinates clamped to [0, 1] and rounded to their
    /// domain's values, choice indices rounded).
    pub fn to_params(&self, point: &[f64]) -> Params {
        let mut params = Params::default();
        for ((name, domain, dim), &u) in self.params.iter().zip(point) {
            let x = match *dim {
                Dim::Numeric { low, high } => low + u.clamp(0.0, 1.0) * (high - low),
                Dim::Categorical { .. } => u.round().max(0.0),
            };
            params.insert(name.clone(), from_internal(domain, x));
        }
        params
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Value;

    fn space() -> Space {
        Space::builder()
            .uniform("x", -2.0, 2.0)
            .loguniform("lr", 1e-4, 1e-1)
            .int("layers", 1, 4)
            .quniform("dropout", 0.0, 0.5, 0.1)
            .choice("opt", ["sgd", "adam", "rmsprop"])
            .build()
            .unwrap()
    }

    fn params(x: f64, lr: f64, layers: i64, dropout: f64, opt: &str) -> Params {
        let mut p = Params::default();
        p.insert("x", Value::Float(x));
        p.insert("lr", Value::Float(lr));
        p.insert("layers", Value::Int(layers));
        p.insert("dropout", Value::Float(dropout));
        p.insert("opt", Value::from(opt));
        p
    }

    #[test]
    fn coordinates_worked_by_hand_and_back() {
        let unit = UnitSpace::new(&space()).unwrap();
        assert_eq!(unit.categorical(), vec![false, false, false, false, true]);
        let p = params(0.0, 1e-4, 1, 0.3, "rmsprop");
        let point = unit.to_point(&p).unwrap();
        // x: the middle; lr: the low end; layers 1 in [0.5, 4.5]: 0.5 / 4; dropout 0.3 in
        // [-0.05, 0.55]: 0.35 / 0.6; opt: index 2.
        let expected = [0.5, 0.0, 0.125, 0.35 / 0.6, 2.0];
        for (a, b) in point.iter().zip(expected) {
            assert!((a - b).abs() < 1e-12, "{point:?}");
        }
        // Back again: equal, but for a last bit from exp(ln(x)) on the log dimension.
        let back = unit.to_params(&point);
        for name in ["x", "layers", "dropout", "opt"] {
            assert_eq!(back.get(name), p.get(name), "{name}");
        }
        let lr = back.get("lr").and_then(Value::as_f64).unwrap();
        assert!((lr / 1e-4 - 1.0).abs() < 1e-12, "{lr}");
        // Any point maps to valid params: out of range is clamped, steps rounded.
        let q = unit.to_params(&[1.5, -0.2, 0.99, 0.51, 1.4]);
        assert_eq!(q.get("layers"), Some(&Value::Int(4)));
        assert_eq!(q.get("opt"), Some(&Value::from("adam")));
        assert_eq!(q.get("dropout"), Some(&Value::Float(0.3)));
        let lr = q.get("lr").and_then(Value::as_f64).unwrap();
        assert!((lr / 1e-4 - 1.0).abs() < 1e-12, "{lr}");
    }

    #[test]
    fn conditional_spaces_are_refused_by_name() {
        let space = Space::builder()
            .choice("opt", ["sgd", "adam"])
            .uniform("momentum", 0.5, 0.99)
            .when("opt", "sgd")
            .build()
            .unwrap();
        let err = UnitSpace::new(&space).unwrap_err();
        assert_eq!(err, ConditionalSpace(vec!["momentum".into()]));
        assert!(
            err.to_string()
                .contains("`momentum` has a `when` condition"),
            "{err}"
        );
    }

    #[test]
    fn a_value_outside_the_domain_has_no_point() {
        let unit = UnitSpace::new(&space()).unwrap();
        let mut p = params(0.0, 1e-3, 2, 0.1, "sgd");
        p.insert("opt", Value::from("lion"));
        assert_eq!(unit.to_point(&p), None);
    }
}
