//! Points given by the user that the first trials evaluate before a searcher suggests any
//! (Optuna's `enqueue_trial`, Ray Tune's `points_to_evaluate`).

use crate::number::value_text;
use crate::{
    did_you_mean_hint, trial_rng, Domain, History, Params, Searcher, Space, Suggestion, TrialId,
    Value,
};

/// Why a given point cannot be evaluated in a space.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PointError {
    #[error("`{name}`: not a parameter of the space{hint}")]
    Unknown { name: String, hint: String },
    #[error("`{name}`: expected {expected}, found {found}")]
    OutOfDomain {
        name: String,
        expected: String,
        found: String,
    },
    #[error("`{name}`: given, but its condition does not hold for the point's other values (it needs {needs})")]
    Inactive { name: String, needs: String },
}

impl PointError {
    /// The parameter the error is about.
    pub fn name(&self) -> &str {
        match self {
            PointError::Unknown { name, .. }
            | PointError::OutOfDomain { name, .. }
            | PointError::Inactive { name, .. } => name,
        }
    }
}

impl Space {
    /// `point` checked against the space, as a user wrote it: every key a parameter, every
    /// value of its domain (an integer is taken for a float domain's number), and no parameter
    /// whose `when` conditions the point's other values rule out. Parameters left out are
    /// allowed: [`WithInitialPoints`] draws them.
    ///
    /// ```
    /// use tune_search::{Params, Space, Value};
    /// let space = Space::builder().uniform("lr", 0.0, 1.0).int("layers", 1, 4).build().unwrap();
    /// let mut p = Params::default();
    /// p.insert("lr", Value::Int(0));
    /// assert_eq!(space.check_point(&p).unwrap().get("lr"), Some(&Value::Float(0.0)));
    /// p.insert("layers", Value::Int(9));
    /// let e = space.check_point(&p).unwrap_err().to_string();
    /// assert_eq!(e, "`layers`: expected an integer in [1, 4], found 9");
    /// ```
    pub fn check_point(&self, point: &Params) -> Result<Params, PointError> {
        let mut checked = Params::default();
        for (name, value) in point.iter() {
            let Some(param) = self.param(name) else {
                let names = self.params().iter().map(|p| p.name.as_str());
                return Err(PointError::Unknown {
                    name: name.to_string(),
                    hint: did_you_mean_hint(name, names),
                });
            };
            let value = match (&param.domain, value) {
                (Domain::Int { .. } | Domain::Choice(_) | Domain::Grid(_), v) => v.clone(),
                (_, Value::Int(i)) => Value::Float(*i as f64),
                (_, v) => v.clone(),
            };
            if !param.domain.contains(&value) {
                return Err(PointError::OutOfDomain {
                    name: name.to_string(),
                    expected: expected(&param.domain),
                    found: value.to_string(),
                });
            }
            checked.insert(name, value);
        }
        for param in self.params() {
            if checked.contains(&param.name) && !self.is_active(param, &checked) {
                let needs = param
                    .when
                    .iter()
                    .map(|c| {
                        let values: Vec<String> = c.values.iter().map(Value::to_string).collect();
                        format!("{} in [{}]", c.param, values.join(", "))
                    })
                    .collect::<Vec<_>>()
                    .join(" and ");
                return Err(PointError::Inactive {
                    name: param.name.clone(),
                    needs,
                });
            }
        }
        Ok(checked)
    }
}

/// What a domain's values are, for an error message.
fn expected(domain: &Domain) -> String {
    let t = value_text;
    match *domain {
        Domain::Uniform { low: a, high: b } => format!("a number in [{}, {})", t(a), t(b)),
        Domain::LogUniform { low: a, high: b }
        | Domain::QUniform {
            low: a, high: b, ..
        }
        | Domain::QLogUniform {
            low: a, high: b, ..
        } => {
            format!("a number in [{}, {}]", t(a), t(b))
        }
        Domain::Int {
            low: a,
            high: b,
            step: 1,
            ..
        } => format!("an integer in [{a}, {b}]"),
        Domain::Int {
            low: a,
            high: b,
            step,
            ..
        } => format!("an integer in [{a}, {b}] in steps of {step} from {a}"),
        Domain::Normal { .. } => "a finite number".to_string(),
        Domain::Choice(ref v) | Domain::Grid(ref v) => {
            let values: Vec<String> = v.iter().map(Value::to_string).collect();
            format!("one of [{}]", values.join(", "))
        }
    }
}

/// Offsets the draws for parameters a point leaves out from the searcher's own streams.
const FILL_STREAM: u64 = 0x0069_6e69_7469_616c;

/// A searcher whose first trials (ids `0..points.len()`) evaluate the given points, then
/// `searcher`'s suggestions. Parameters a point leaves out are drawn at random (the stream of
/// the seed and the trial id); the searcher sees the points' trials in its history as any
/// others. Points should come from [`Space::check_point`].
///
/// ```
/// use tune_search::{History, Mode, Params, RandomSearch, Searcher, Space, Value, WithInitialPoints};
/// let space = Space::builder().uniform("x", 0.0, 1.0).uniform("y", 0.0, 1.0).build().unwrap();
/// let mut point = Params::default();
/// point.insert("x", Value::Float(0.25));
/// let mut s = WithInitialPoints::new(vec![point], space.clone(), 0, Box::new(RandomSearch::new(space, 0)));
/// let h = History::new(Mode::Min);
/// let first = s.suggest(0, &h).unwrap();
/// assert_eq!(first.get("x"), Some(&Value::Float(0.25)));
/// assert!(first.contains("y"));
/// assert_ne!(s.suggest(1, &h).unwrap().get("x"), Some(&Value::Float(0.25)));
/// ```
pub struct WithInitialPoints {
    points: Vec<Params>,
    space: Space,
    seed: u64,
    searcher: Box<dyn Searcher>,
}

impl WithInitialPoints {
    pub fn new(
        points: Vec<Params>,
        space: Space,
        seed: u64,
        searcher: Box<dyn Searcher>,
    ) -> WithInitialPoints {
        WithInitialPoints {
            points,
            space,
            seed,
            searcher,
        }
    }
}

impl WithInitialPoints {
    /// Trial `id`'s initial point, its unnamed parameters drawn at random; `None` past the
    /// points, where the wrapped searcher suggests.
    fn initial(&self, id: TrialId) -> Option<Params> {
        let point = usize::try_from(id).ok().and_then(|i| self.points.get(i))?;
        Some(
            self.space
                .sample_with(&mut trial_rng(self.seed ^ FILL_STREAM, id), point),
        )
    }
}

impl Searcher for WithInitialPoints {
    fn suggest(&mut self, id: TrialId, history: &History) -> Option<Params> {
        match self.initial(id) {
            Some(params) => Some(params),
            None => self.searcher.suggest(id, history),
        }
    }

    fn suggest_with_reason(&mut self, id: TrialId, history: &History) -> Option<Suggestion> {
        match self.initial(id) {
            Some(params) => Some(Suggestion {
                params,
                suggested_by: None,
            }),
            None => self.searcher.suggest_with_reason(id, history),
        }
    }

    fn total_trials(&self, samples: u64) -> u64 {
        self.searcher.total_trials(samples)
    }

    fn reads_history(&self) -> bool {
        self.searcher.reads_history()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Mode, RandomSearch, Status};

    fn space() -> Space {
        Space::builder()
            .choice("opt", ["sgd", "adam"])
            .uniform("momentum", 0.0, 0.99)
            .when("opt", "sgd")
            .loguniform("lr", 1e-4, 1e-1)
            .int("layers", 1, 8)
            .step(1)
            .build()
            .unwrap()
    }

    fn point(pairs: &[(&str, Value)]) -> Params {
        let mut p = Params::default();
        for (k, v) in pairs {
            p.insert(*k, v.clone());
        }
        p
    }

    #[test]
    fn points_are_checked_key_by_key_with_what_was_expected() {
        let s = space();
        let err = |p: Params| s.check_point(&p).unwrap_err().to_string();
        assert_eq!(
            err(point(&[("lrr", Value::Float(0.01))])),
            "`lrr`: not a parameter of the space (did you mean `lr`?)"
        );
        assert_eq!(
            err(point(&[("lr", Value::Float(0.5))])),
            "`lr`: expected a number in [0.0001, 0.1], found 0.5"
        );
        assert_eq!(
            err(point(&[("opt", Value::from("lion"))])),
            "`opt`: expected one of [sgd, adam], found lion"
        );
        assert_eq!(
            err(point(&[("layers", Value::Float(2.5))])),
            "`layers`: expected an integer in [1, 8], found 2.5"
        );
        assert_eq!(
            err(point(&[
                ("opt", Value::from("adam")),
                ("momentum", Value::Float(0.9))
            ])),
            "`momentum`: given, but its condition does not hold for the point's other values (it needs opt in [sgd])"
        );
        // A child given without its parent: the parent is not drawn yet, so it is refused too.
        assert!(err(point(&[("momentum", Value::Float(0.9))])).contains("`momentum`: given"));
        let ok = s
            .check_point(&point(&[
                ("opt", Value::from("sgd")),
                ("momentum", Value::Int(0)),
            ]))
            .unwrap();
        assert_eq!(ok.get("momentum"), Some(&Value::Float(0.0)));
    }

    #[test]
    fn the_first_trials_take_the_points_then_the_searcher_goes_on() {
        let s = space();
        let points = vec![
            point(&[("opt", Value::from("sgd")), ("lr", Value::Float(0.01))]),
            point(&[
                ("opt", Value::from("adam")),
                ("lr", Value::Float(0.001)),
                ("layers", Value::Int(3)),
            ]),
        ];
        let mut with = WithInitialPoints::new(
            points.clone(),
            s.clone(),
            5,
            Box::new(RandomSearch::new(s.clone(), 5)),
        );
        let mut history = History::new(Mode::Min);
        let mut plain = RandomSearch::new(s.clone(), 5);
        for id in 0..4 {
            let p = with.suggest(id, &history).unwrap();
            if let Some(given) = points.get(id as usize) {
                for (k, v) in given.iter() {
                    assert_eq!(p.get(k), Some(v), "trial {id} {k}");
                }
                // The rest drawn, conditions respected: sgd gets a momentum, adam none.
                assert!(p.contains("layers"));
                assert_eq!(
                    p.contains("momentum"),
                    p.get("opt") == Some(&Value::from("sgd"))
                );
            } else {
                assert_eq!(Some(p.clone()), plain.suggest(id, &history));
            }
            // A fresh wrapper (a resumed sweep) answers the same.
            let mut again = WithInitialPoints::new(
                points.clone(),
                s.clone(),
                5,
                Box::new(RandomSearch::new(s.clone(), 5)),
            );
            assert_eq!(again.suggest(id, &history), Some(p.clone()));
            history.record(id, p, Status::Completed);
        }
    }
}
