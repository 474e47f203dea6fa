//! The search space: named parameters, their domains, and conditions between them.

use rand::Rng;

use crate::{did_you_mean, Domain, DomainError, Params, Value};

/// `when = { optimizer = "sgd" }`: the parameter is active only while `param` is one of `values`.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    pub param: String,
    pub values: Vec<Value>,
}

/// One named parameter of a [`Space`].
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    pub name: String,
    pub domain: Domain,
    /// All conditions must hold (and their parents be active) for the parameter to be sampled.
    pub when: Vec<Condition>,
}

/// What is wrong with a space.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpaceError {
    #[error("parameter `{param}`: {source}")]
    Domain {
        param: String,
        #[source]
        source: DomainError,
    },
    #[error("parameter `{0}` is defined twice")]
    Duplicate(String),
    #[error("parameter `{param}`: `when` names `{parent}`, which is not a parameter{}", hint(.suggestion))]
    UnknownConditionParam {
        param: String,
        parent: String,
        suggestion: Option<String>,
    },
    #[error("parameter `{param}`: `when` expects `{parent}` to be {value}, but `{parent}` can only be one of [{allowed}]")]
    UnknownConditionValue {
        param: String,
        parent: String,
        value: String,
        allowed: String,
    },
    #[error("parameter `{param}`: `when` can only depend on a choice or grid parameter, but `{parent}` is {kind}")]
    ConditionOnNumeric {
        param: String,
        parent: String,
        kind: &'static str,
    },
    #[error("parameter `{0}`: its `when` conditions form a cycle")]
    Cycle(String),
    #[error("parameter `{param}`: its `when` conditions on `{parent}` cannot hold together (it cannot be {values} at once); for any of them, give them in one condition (`when_any` in Rust, a list in TOML)")]
    ContradictoryConditions {
        param: String,
        parent: String,
        values: String,
    },
    /// A builder modifier (`log`, `step`, `when`) that does not apply where it was called.
    #[error("{0}")]
    Builder(String),
}

fn hint(suggestion: &Option<String>) -> String {
    suggestion
        .as_ref()
        .map(|s| format!(" (did you mean `{s}`?)"))
        .unwrap_or_default()
}

/// An ordered set of parameters: what a sweep searches over.
///
/// Built from TOML (see the crate docs), with [`Space::builder`], or through serde; all three
/// validate the same way.
///
/// ```
/// use tune_search::Space;
/// let space = Space::builder()
///     .loguniform("lr", 1e-5, 1e-1)
///     .int("units", 16, 1024).log()
///     .choice("optimizer", ["sgd", "adam"])
///     .uniform("momentum", 0.5, 0.99).when("optimizer", "sgd")
///     .build()
///     .unwrap();
/// assert_eq!(space.len(), 4);
/// assert!(space.param("momentum").unwrap().when[0].param == "optimizer");
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Space {
    params: Vec<Param>,
    /// Indices of `params` with every parent before its children.
    order: Vec<usize>,
}

impl Space {
    /// Validates `params` and returns the space; the first problem found is the error.
    pub fn new(params: Vec<Param>) -> Result<Space, SpaceError> {
        for (i, p) in params.iter().enumerate() {
            if params[..i].iter().any(|q| q.name == p.name) {
                return Err(SpaceError::Duplicate(p.name.clone()));
            }
            p.domain.validate().map_err(|source| SpaceError::Domain {
                param: p.name.clone(),
                source,
            })?;
        }
        let names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
        for p in &params {
            for c in &p.when {
                let Some(parent) = params.iter().find(|q| q.name == c.param) else {
                    return Err(SpaceError::UnknownConditionParam {
                        param: p.name.clone(),
                        parent: c.param.clone(),
                        suggestion: did_you_mean(&c.param, names.iter().copied())
                            .map(str::to_string),
                    });
                };
                let Some(allowed) = parent.domain.values() else {
                    return Err(SpaceError::ConditionOnNumeric {
                        param: p.name.clone(),
                        parent: parent.name.clone(),
                        kind: parent.domain.kind(),
                    });
                };
                if let Some(other) = p
                    .when
                    .iter()
                    .find(|d| d.param == c.param && !d.values.iter().any(|v| c.values.contains(v)))
                {
                    let values: Vec<String> =
                        c.values.iter().chain(&other.values).map(quoted).collect();
                    return Err(SpaceError::ContradictoryConditions {
                        param: p.name.clone(),
                        parent: c.param.clone(),
                        values: values.join(" and "),
                    });
                }
                if let Some(v) = c.values.iter().find(|v| !allowed.contains(v)) {
                    return Err(SpaceError::UnknownConditionValue {
                        param: p.name.clone(),
                        parent: parent.name.clone(),
                        value: quoted(v),
                        allowed: allowed.iter().map(quoted).collect::<Vec<_>>().join(", "),
                    });
                }
            }
        }
        let order = topological_order(&params)?;
        Ok(Space { params, order })
    }

    /// Starts a [`SpaceBuilder`].
    pub fn builder() -> SpaceBuilder {
        SpaceBuilder::default()
    }

    /// The parameters in the order they were defined.
    pub fn params(&self) -> &[Param] {
        &self.params
    }

    pub fn param(&self, name: &str) -> Option<&Param> {
        self.params.iter().find(|p| p.name == name)
    }

    pub fn len(&self) -> usize {
        self.params.len()
    }

    pub fn is_empty(&self) -> bool {
        self.params.is_empty()
    }

    /// Whether `param`'s conditions hold for the (partial) assignment `params`.
    pub fn is_active(&self, param: &Param, params: &Params) -> bool {
        param
            .when
            .iter()
            .all(|c| params.get(&c.param).is_some_and(|v| c.values.contains(v)))
    }

    /// Draws every active parameter; `fixed` values (grid points) are taken as given.
    pub fn sample_with<R: Rng + ?Sized>(&self, rng: &mut R, fixed: &Params) -> Params {
        let mut out = Params::default();
        for &i in &self.order {
            let p = &self.params[i];
            if !self.is_active(p, &out) {
                continue;
            }
            // Draw even when fixed, so the random stream of the other parameters does not
            // depend on which grid point a trial got.
            let drawn = p.domain.sample(rng);
            let value = fixed.get(&p.name).cloned().unwrap_or(drawn);
            out.insert(p.name.clone(), value);
        }
        out
    }

    /// Draws every active parameter.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> Params {
        self.sample_with(rng, &Params::default())
    }
}

fn quoted(v: &Value) -> String {
    match v {
        Value::Str(s) => format!("\"{s}\""),
        other => other.to_string(),
    }
}

/// Parents before children (Kahn's algorithm, stable in definition order).
fn topological_order(params: &[Param]) -> Result<Vec<usize>, SpaceError> {
    let mut order = Vec::with_capacity(params.len());
    let mut placed = vec![false; params.len()];
    while order.len() < params.len() {
        let ready = (0..params.len()).find(|&i| {
            !placed[i]
                && params[i].when.iter().all(|c| {
                    params
                        .iter()
                        .position(|q| q.name == c.param)
                        .is_some_and(|j| placed[j])
                })
        });
        match ready {
            Some(i) => {
                placed[i] = true;
                order.push(i);
            }
            None => {
                let stuck = (0..params.len()).find(|&i| !placed[i]).unwrap_or(0);
                return Err(SpaceError::Cycle(params[stuck].name.clone()));
            }
        }
    }
    Ok(order)
}

/// Builds a [`Space`] in code; `log()` and `when()` apply to the parameter added last.
///
/// ```
/// use tune_search::Space;
/// let err = Space::builder().uniform("x", 1.0, 0.0).build().unwrap_err();
/// assert!(err.to_string().contains("parameter `x`"));
/// ```
#[derive(Debug, Default)]
pub struct SpaceBuilder {
    params: Vec<Param>,
    /// The first modifier that did not apply, reported by `build`.
    misused: Option<String>,
}

impl SpaceBuilder {
    /// Adds a parameter with any domain.
    pub fn param(mut self, name: impl Into<String>, domain: Domain) -> Self {
        self.params.push(Param {
            name: name.into(),
            domain,
            when: Vec::new(),
        });
        self
    }

    pub fn uniform(self, name: impl Into<String>, low: f64, high: f64) -> Self {
        self.param(name, Domain::Uniform { low, high })
    }

    pub fn loguniform(self, name: impl Into<String>, low: f64, high: f64) -> Self {
        self.param(name, Domain::LogUniform { low, high })
    }

    pub fn quniform(self, name: impl Into<String>, low: f64, high: f64, q: f64) -> Self {
        self.param(name, Domain::QUniform { low, high, q })
    }

    pub fn qloguniform(self, name: impl Into<String>, low: f64, high: f64, q: f64) -> Self {
        self.param(name, Domain::QLogUniform { low, high, q })
    }

    /// Integers in `[low, high]`, inclusive.
    pub fn int(self, name: impl Into<String>, low: i64, high: i64) -> Self {
        self.param(
            name,
            Domain::Int {
                low,
                high,
                step: 1,
                log: false,
            },
        )
    }

    pub fn normal(self, name: impl Into<String>, mu: f64, sigma: f64) -> Self {
        self.param(name, Domain::Normal { mu, sigma })
    }

    pub fn choice<V: Into<Value>>(
        self,
        name: impl Into<String>,
        values: impl IntoIterator<Item = V>,
    ) -> Self {
        self.param(
            name,
            Domain::Choice(values.into_iter().map(Into::into).collect()),
        )
    }

    pub fn grid<V: Into<Value>>(
        self,
        name: impl Into<String>,
        values: impl IntoIterator<Item = V>,
    ) -> Self {
        self.param(
            name,
            Domain::Grid(values.into_iter().map(Into::into).collect()),
        )
    }

    /// Makes the last `int` log-scaled (a float is log-scaled with `loguniform`).
    pub fn log(mut self) -> Self {
        match self.params.last_mut() {
            Some(Param {
                domain: Domain::Int { log, .. },
                ..
            }) => *log = true,
            _ => self.misuse("log", "an int parameter (for floats, use `loguniform`)"),
        }
        self
    }

    /// Sets the step of the last `int`.
    pub fn step(mut self, step: i64) -> Self {
        match self.params.last_mut() {
            Some(Param {
                domain: Domain::Int { step: s, .. },
                ..
            }) => *s = step,
            _ => self.misuse("step", "an int parameter (for floats, use `quniform`)"),
        }
        self
    }

    /// The last parameter is active only while `parent` equals `value`. Several conditions
    /// must all hold (on different parents); for any of several values, use
    /// [`SpaceBuilder::when_any`].
    pub fn when(self, parent: impl Into<String>, value: impl Into<Value>) -> Self {
        self.when_any(parent, [value])
    }

    /// The last parameter is active only while `parent` is one of `values` (TOML's
    /// `when = { optimizer = ["sgd", "rmsprop"] }`).
    ///
    /// ```
    /// let space = tune_search::Space::builder()
    ///     .choice("optimizer", ["sgd", "rmsprop", "adam"])
    ///     .uniform("momentum", 0.5, 0.99).when_any("optimizer", ["sgd", "rmsprop"])
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(space.param("momentum").unwrap().when[0].values.len(), 2);
    /// ```
    pub fn when_any<V: Into<Value>>(
        mut self,
        parent: impl Into<String>,
        values: impl IntoIterator<Item = V>,
    ) -> Self {
        let condition = Condition {
            param: parent.into(),
            values: values.into_iter().map(Into::into).collect(),
        };
        match self.params.last_mut() {
            Some(p) => p.when.push(condition),
            None => self.misuse("when", "a parameter"),
        }
        self
    }

    /// Notes that `.method()` was called where it does not apply (after the last parameter).
    fn misuse(&mut self, method: &str, expected: &str) {
        let found = match self.params.last() {
            Some(p) => format!("`{}`, a {} parameter", p.name, p.domain.kind()),
            None => "no parameter before it".to_string(),
        };
        self.misused.get_or_insert(format!(
            "`.{method}()` applies to {expected}, found {found}"
        ));
    }

    /// The space, or the first problem: a modifier that did not apply, then [`Space::new`]'s.
    pub fn build(self) -> Result<Space, SpaceError> {
        if let Some(message) = self.misused {
            return Err(SpaceError::Builder(message));
        }
        Space::new(self.params)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn builder_modifiers_that_do_not_apply_are_refused() {
        let err = |b: SpaceBuilder| b.build().unwrap_err().to_string();
        assert_eq!(
            err(Space::builder().uniform("lr", 0.0, 1.0).log()),
            "`.log()` applies to an int parameter (for floats, use `loguniform`), found `lr`, a uniform parameter"
        );
        assert_eq!(
            err(Space::builder().normal("w", 0.0, 1.0).step(2)),
            "`.step()` applies to an int parameter (for floats, use `quniform`), found `w`, a normal parameter"
        );
        assert_eq!(
            err(Space::builder().when("opt", "sgd")),
            "`.when()` applies to a parameter, found no parameter before it"
        );
        let units = Space::builder()
            .int("units", 8, 64)
            .log()
            .int("even", 2, 64)
            .step(2)
            .build()
            .unwrap();
        assert!(matches!(
            units.param("units").unwrap().domain,
            Domain::Int {
                step: 1,
                log: true,
                ..
            }
        ));
        assert!(matches!(
            units.param("even").unwrap().domain,
            Domain::Int {
                step: 2,
                log: false,
                ..
            }
        ));
    }

    #[test]
    fn conditions_on_one_parent_that_cannot_hold_together_are_refused() {
        let e = Space::builder()
            .choice("opt", ["sgd", "rmsprop", "adam"])
            .uniform("momentum", 0.5, 0.99)
            .when("opt", "sgd")
            .when("opt", "rmsprop")
            .build()
            .unwrap_err();
        assert!(
            matches!(e, SpaceError::ContradictoryConditions { .. }),
            "{e}"
        );
        assert!(
            e.to_string().starts_with("parameter `momentum`: its `when` conditions on `opt` cannot hold together (it cannot be \"sgd\" and \"rmsprop\" at once)"),
            "{e}"
        );
        // Overlapping ones can: the parameter is active for "sgd" only.
        let space = Space::builder()
            .choice("opt", ["sgd", "rmsprop", "adam"])
            .uniform("momentum", 0.5, 0.99)
            .when_any("opt", ["sgd", "rmsprop"])
            .when("opt", "sgd")
            .build()
            .unwrap();
        let momentum = space.param("momentum").unwrap();
        let mut p = Params::default();
        p.insert("opt", Value::from("rmsprop"));
        assert!(!space.is_active(momentum, &p));
        p.insert("opt", Value::from("sgd"));
        assert!(space.is_active(momentum, &p));
    }
    use rand_chacha::ChaCha8Rng;

    fn conditional() -> Space {
        Space::builder()
            .choice("optimizer", ["sgd", "adam"])
            .uniform("momentum", 0.5, 0.99)
            .when("optimizer", "sgd")
            .choice("nesterov", [true, false])
            .when("optimizer", "sgd")
            .uniform("beta2", 0.9, 0.9999)
            .when("optimizer", "adam")
            .build()
            .unwrap()
    }

    #[test]
    fn conditional_parameters_are_sampled_only_when_active() {
        let space = conditional();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let (mut sgd, mut adam) = (0, 0);
        for _ in 0..1000 {
            let p = space.sample(&mut rng);
            match p.str("optimizer").unwrap() {
                "sgd" => {
                    sgd += 1;
                    assert!(
                        p.contains("momentum") && p.contains("nesterov") && !p.contains("beta2")
                    );
                }
                _ => {
                    adam += 1;
                    assert!(
                        !p.contains("momentum") && !p.contains("nesterov") && p.contains("beta2")
                    );
                }
            }
        }
        assert!(sgd > 400 && adam > 400);
    }

    #[test]
    fn children_may_be_defined_before_their_parent() {
        let space = Space::builder()
            .uniform("momentum", 0.5, 0.99)
            .when("optimizer", "sgd")
            .choice("optimizer", ["sgd"])
            .build()
            .unwrap();
        let p = space.sample(&mut ChaCha8Rng::seed_from_u64(0));
        assert!(p.contains("momentum"));
    }

    #[test]
    fn bad_conditions_are_explained() {
        let unknown = Space::builder()
            .choice("optimizer", ["sgd"])
            .uniform("m", 0.0, 1.0)
            .when("optimiser", "sgd")
            .build()
            .unwrap_err();
        assert_eq!(
            unknown.to_string(),
            "parameter `m`: `when` names `optimiser`, which is not a parameter (did you mean `optimizer`?)"
        );
        let value = Space::builder()
            .choice("optimizer", ["sgd", "adam"])
            .uniform("m", 0.0, 1.0)
            .when("optimizer", "rmsprop")
            .build()
            .unwrap_err();
        assert!(
            value
                .to_string()
                .contains("can only be one of [\"sgd\", \"adam\"]"),
            "{value}"
        );
        let numeric = Space::builder()
            .uniform("x", 0.0, 1.0)
            .uniform("m", 0.0, 1.0)
            .when("x", 0.5)
            .build()
            .unwrap_err();
        assert!(matches!(numeric, SpaceError::ConditionOnNumeric { .. }));
        let cycle = Space::new(vec![
            Param {
                name: "a".into(),
                domain: Domain::Choice(vec![1.into()]),
                when: vec![Condition {
                    param: "b".into(),
                    values: vec![1.into()],
                }],
            },
            Param {
                name: "b".into(),
                domain: Domain::Choice(vec![1.into()]),
                when: vec![Condition {
                    param: "a".into(),
                    values: vec![1.into()],
                }],
            },
        ])
        .unwrap_err();
        assert_eq!(cycle, SpaceError::Cycle("a".into()));
    }

    #[test]
    fn duplicates_are_rejected() {
        let err = Space::builder()
            .uniform("x", 0.0, 1.0)
            .int("x", 0, 1)
            .build()
            .unwrap_err();
        assert_eq!(err, SpaceError::Duplicate("x".into()));
    }
}
