//! The search space as the Gaussian process sees it: one coordinate per parameter, numeric
//! ones in [0, 1] over TPE's internal interval (log domains in log space, stepped ones widened
//! by half a step so that every value owns an equal share, the unbounded normal in its prior's
//! quantiles), choices by their index on a dimension compared by Hamming distance.

use rand::Rng;

use crate::domain::{int_at, int_steps, q_steps};
use crate::tpe::coords::{dim_spec, from_internal, to_internal};
use crate::tpe::estimator::DimSpec;
use crate::{Domain, Params, Space, Value};

/// The most values a stepped coordinate lists for the acquisition's discrete search; a finer
/// one is searched as continuous and rounded (its steps are then below 1/4096 of the range,
/// finer than the model resolves).
const MOST_GRID_VALUES: u64 = 4096;

/// Dimensions the scrambled Sobol sequence covers (sobol_burley's limit); further ones are
/// drawn uniformly at random.
const SOBOL_DIMENSIONS: usize = 256;

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

    /// Each coordinate's values where it has a short list of them, ascending: the indices of
    /// a choice, the coordinates of a stepped range's values (int, quniform, qloguniform) of
    /// at most 4096 values; `None` for a continuous coordinate.
    pub fn grids(&self) -> Vec<Option<Vec<f64>>> {
        self.params
            .iter()
            .map(|(_, domain, dim)| match *dim {
                Dim::Categorical { n } => Some((0..n).map(|i| i as f64).collect()),
                Dim::Numeric { low, high } => {
                    let values = stepped_values(domain)?;
                    Some(
                        values
                            .iter()
                            .filter_map(|v| to_internal(domain, v))
                            .map(|x| (x - low) / (high - low))
                            .collect(),
                    )
                }
            })
            .collect()
    }

    /// `point` with its stepped coordinates moved to their nearest value's (as
    /// [`UnitSpace::to_params`] rounds) and its choice indices rounded, so that the model is
    /// asked about points that can be suggested.
    pub fn snap(&self, point: &mut [f64]) {
        for ((_, domain, dim), u) in self.params.iter().zip(point.iter_mut()) {
            match *dim {
                Dim::Categorical { n } => *u = u.round().clamp(0.0, (n - 1) as f64),
                Dim::Numeric { low, high } => {
                    if is_stepped(domain) {
                        let value = from_internal(domain, low + u.clamp(0.0, 1.0) * (high - low));
                        if let Some(x) = to_internal(domain, &value) {
                            *u = ((x - low) / (high - low)).clamp(0.0, 1.0);
                        }
                    }
                }
            }
        }
    }

    /// `n` points spread over the space: a scrambled Sobol sequence (seeded from `rng`) on
    /// the first 256 coordinates, uniform draws beyond, then snapped (Optuna's
    /// `sample_normalized_params`).
    pub fn sample<R: Rng + ?Sized>(&self, n: usize, rng: &mut R) -> Vec<Vec<f64>> {
        let scramble: u32 = rng.random();
        (0..n)
            .map(|i| {
                let mut point: Vec<f64> = self
                    .params
                    .iter()
                    .enumerate()
                    .map(|(d, (_, _, dim))| {
                        let u = if d < SOBOL_DIMENSIONS && i <= u32::MAX as usize {
                            f64::from(sobol_burley::sample(i as u32, d as u32, scramble))
                        } else {
                            rng.random::<f64>()
                        };
                        match *dim {
                            Dim::Categorical { n } => (u * n as f64).floor().min((n - 1) as f64),
                            Dim::Numeric { .. } => u,
                        }
                    })
                    .collect();
                self.snap(&mut point);
                point
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

fn is_stepped(domain: &Domain) -> bool {
    matches!(
        domain,
        Domain::Int { .. } | Domain::QUniform { .. } | Domain::QLogUniform { .. }
    )
}

/// A stepped domain's values in order; `None` for other domains and for more than
/// [`MOST_GRID_VALUES`] values.
fn stepped_values(domain: &Domain) -> Option<Vec<Value>> {
    let count = |steps: u64| (steps < MOST_GRID_VALUES).then_some(steps);
    match *domain {
        Domain::Int {
            low,
            high,
            step,
            log: false,
        } => {
            let steps = count(int_steps(low, high, step))?;
            Some(
                (0..=steps)
                    .map(|k| Value::Int(int_at(low, step, k)))
                    .collect(),
            )
        }
        Domain::Int {
            low,
            high,
            log: true,
            ..
        } => {
            count(int_steps(low, high, 1))?;
            Some((low..=high).map(Value::Int).collect())
        }
        Domain::QUniform { low, high, q } => {
            let steps = count(q_steps(low, high, q) as u64)?;
            Some(
                (0..=steps)
                    .map(|k| from_internal(domain, low + k as f64 * q))
                    .collect(),
            )
        }
        Domain::QLogUniform { low, high, q } => {
            let (first, last) = ((low / q).ceil(), (high / q).floor());
            count((last - first) as u64)?;
            Some(
                (first as u64..=last as u64)
                    .map(|k| from_internal(domain, (k as f64 * q).ln()))
                    .collect(),
            )
        }
        _ => None,
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
    fn stepped_coordinates_list_their_values_and_points_snap_to_them() {
        let unit = UnitSpace::new(&space()).unwrap();
        let grids = unit.grids();
        // x and lr are continuous; layers 1..4 in [0.5, 4.5]; dropout 0, 0.1, .., 0.5 in
        // [-0.05, 0.55]; opt by index.
        assert_eq!(grids[0], None);
        assert_eq!(grids[1], None);
        assert_eq!(grids[2], Some(vec![0.125, 0.375, 0.625, 0.875]));
        let dropout = grids[3].clone().unwrap();
        assert_eq!(dropout.len(), 6);
        for (k, u) in dropout.iter().enumerate() {
            let expected = (0.1 * k as f64 + 0.05) / 0.6;
            assert!((u - expected).abs() < 1e-12, "{dropout:?}");
        }
        assert_eq!(grids[4], Some(vec![0.0, 1.0, 2.0]));
        let mut point = vec![0.3, 0.7, 0.5, 0.3, 1.6];
        unit.snap(&mut point);
        // 0.5 is the border of layers 2 and 3 (2.5): rounded as to_params rounds, up.
        assert_eq!(&point[..3], &[0.3, 0.7, 0.625]);
        // Dropout at 0.3 is 0.13, rounded to 0.1, whose coordinate is 0.15 / 0.6.
        assert!((point[3] - 0.25).abs() < 1e-12, "{point:?}");
        assert_eq!(point[4], 2.0);
        assert_eq!(unit.to_point(&unit.to_params(&point)).unwrap()[2], point[2]);
    }

    #[test]
    fn a_range_of_more_than_4096_values_is_searched_as_continuous() {
        let space = Space::builder()
            .int("small", 0, 4095)
            .int("big", 0, 4096)
            .build()
            .unwrap();
        let grids = UnitSpace::new(&space).unwrap().grids();
        assert_eq!(grids[0].as_ref().map(Vec::len), Some(4096));
        assert_eq!(grids[1], None);
    }

    #[test]
    fn samples_cover_the_space_evenly_and_are_snapped() {
        let unit = UnitSpace::new(&space()).unwrap();
        let mut rng = crate::trial_rng(3, 0);
        let samples = unit.sample(256, &mut rng);
        let grids = unit.grids();
        for p in &samples {
            for (u, grid) in p.iter().zip(&grids) {
                match grid {
                    Some(values) => assert!(values.contains(u), "{u} not in {values:?}"),
                    None => assert!((0.0..=1.0).contains(u)),
                }
            }
        }
        // A Sobol sequence's first 2^k points put 2^k / 4 in each quarter of a coordinate:
        // exactly, where random points would only come close.
        for dim in [0, 1] {
            let mut quarters = [0; 4];
            for p in &samples {
                quarters[((p[dim] * 4.0) as usize).min(3)] += 1;
            }
            assert_eq!(quarters, [64; 4], "coordinate {dim}");
        }
        // Choices: each of the three indices about a third of the time.
        let adam = samples.iter().filter(|p| p[4] == 1.0).count();
        assert!((80..=91).contains(&adam), "{adam}");
        // Another seed, other points.
        let other = unit.sample(256, &mut crate::trial_rng(4, 0));
        assert_ne!(samples, other);
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
