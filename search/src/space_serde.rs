//! The one textual form of a [`Space`], shared by TOML files and the stored (JSON) spec:
//!
//! ```toml
//! x = { uniform = [-5.0, 10.0] }
//! lr = { loguniform = [1e-5, 1e-1] }
//! units = { int = [16, 1024], log = true }
//! step = { quniform = [0.0, 1.0, 0.1] }
//! optimizer = { choice = ["sgd", "adam"] }
//! momentum = { uniform = [0.5, 0.99], when = { optimizer = "sgd" } }
//! ```

use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{Condition, Domain, Param, Space, Value};

/// A single value or a list of them (`when = { opt = "sgd" }` or `{ opt = ["sgd", "rms"] }`).
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(Value),
    Many(Vec<Value>),
}

/// The table form of one parameter; exactly one domain key must be set.
#[derive(Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ParamTable {
    #[serde(skip_serializing_if = "Option::is_none")]
    uniform: Option<[f64; 2]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    loguniform: Option<[f64; 2]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    quniform: Option<[f64; 3]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    qloguniform: Option<[f64; 3]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    int: Option<[i64; 2]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    log: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    step: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    normal: Option<[f64; 2]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    choice: Option<Vec<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    grid: Option<Vec<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    when: Option<indexed::Conditions>,
}

mod indexed {
    //! `when` tables keep their order through a Vec of pairs.
    use super::*;

    #[derive(Default)]
    pub(super) struct Conditions(pub Vec<(String, OneOrMany)>);

    impl Serialize for Conditions {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut map = s.serialize_map(Some(self.0.len()))?;
            for (k, v) in &self.0 {
                map.serialize_entry(k, v)?;
            }
            map.end()
        }
    }

    impl<'de> Deserialize<'de> for Conditions {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Conditions;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a table of parameter = value (or [values])")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Conditions, A::Error> {
                    let mut out = Vec::new();
                    while let Some((k, v)) = map.next_entry::<String, OneOrMany>()? {
                        out.push((k, v));
                    }
                    Ok(Conditions(out))
                }
            }
            d.deserialize_map(V)
        }
    }
}

const DOMAIN_KEYS: &str =
    "`uniform`, `loguniform`, `quniform`, `qloguniform`, `int`, `normal`, `choice` or `grid`";

impl ParamTable {
    fn into_parts(self) -> Result<(Domain, Vec<Condition>), String> {
        let mut found: Vec<(&str, Domain)> = Vec::new();
        if let Some([low, high]) = self.uniform {
            found.push(("uniform", Domain::Uniform { low, high }));
        }
        if let Some([low, high]) = self.loguniform {
            found.push(("loguniform", Domain::LogUniform { low, high }));
        }
        if let Some([low, high, q]) = self.quniform {
            found.push(("quniform", Domain::QUniform { low, high, q }));
        }
        if let Some([low, high, q]) = self.qloguniform {
            found.push(("qloguniform", Domain::QLogUniform { low, high, q }));
        }
        if let Some([low, high]) = self.int {
            found.push((
                "int",
                Domain::Int {
                    low,
                    high,
                    step: self.step.unwrap_or(1),
                    log: self.log.unwrap_or(false),
                },
            ));
        }
        if let Some([mu, sigma]) = self.normal {
            found.push(("normal", Domain::Normal { mu, sigma }));
        }
        if let Some(v) = self.choice {
            found.push(("choice", Domain::Choice(v)));
        }
        if let Some(v) = self.grid {
            found.push(("grid", Domain::Grid(v)));
        }
        let domain = match found.len() {
            1 => found
                .pop()
                .map(|(_, d)| d)
                .unwrap_or(Domain::Choice(vec![])),
            0 => return Err(format!("expected one of {DOMAIN_KEYS}, found none")),
            _ => {
                let keys: Vec<String> = found.iter().map(|(k, _)| format!("`{k}`")).collect();
                return Err(format!(
                    "expected exactly one of {DOMAIN_KEYS}, found {}",
                    keys.join(" and ")
                ));
            }
        };
        if !matches!(domain, Domain::Int { .. }) {
            for (key, set) in [("log", self.log.is_some()), ("step", self.step.is_some())] {
                if set {
                    return Err(format!(
                        "`{key}` applies to `int` only, found it with `{}` (use `loguniform` or `quniform`)",
                        domain.kind()
                    ));
                }
            }
        }
        domain
            .validate()
            .map_err(|e| format!("{}: {e}", domain.kind()))?;
        let when = self
            .when
            .map(|c| c.0)
            .unwrap_or_default()
            .into_iter()
            .map(|(param, v)| Condition {
                param,
                values: match v {
                    OneOrMany::One(x) => vec![x],
                    OneOrMany::Many(xs) => xs,
                },
            })
            .collect();
        Ok((domain, when))
    }

    fn from_param(p: &Param) -> ParamTable {
        let mut t = ParamTable::default();
        match p.domain.clone() {
            Domain::Uniform { low, high } => t.uniform = Some([low, high]),
            Domain::LogUniform { low, high } => t.loguniform = Some([low, high]),
            Domain::QUniform { low, high, q } => t.quniform = Some([low, high, q]),
            Domain::QLogUniform { low, high, q } => t.qloguniform = Some([low, high, q]),
            Domain::Int {
                low,
                high,
                step,
                log,
            } => {
                t.int = Some([low, high]);
                t.log = log.then_some(true);
                t.step = (step != 1).then_some(step);
            }
            Domain::Normal { mu, sigma } => t.normal = Some([mu, sigma]),
            Domain::Choice(v) => t.choice = Some(v),
            Domain::Grid(v) => t.grid = Some(v),
        }
        if !p.when.is_empty() {
            t.when = Some(indexed::Conditions(
                p.when
                    .iter()
                    .map(|c| {
                        let v = match c.values.as_slice() {
                            [one] => OneOrMany::One(one.clone()),
                            many => OneOrMany::Many(many.to_vec()),
                        };
                        (c.param.clone(), v)
                    })
                    .collect(),
            ));
        }
        t
    }
}

/// One parameter's body, validated while it is read so a TOML error points at its line.
struct ParamBody(Domain, Vec<Condition>);

impl<'de> Deserialize<'de> for ParamBody {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let table = ParamTable::deserialize(d)?;
        let (domain, when) = table.into_parts().map_err(de::Error::custom)?;
        Ok(ParamBody(domain, when))
    }
}

impl Serialize for Space {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.len()))?;
        for p in self.params() {
            map.serialize_entry(&p.name, &ParamTable::from_param(p))?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Space {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct SpaceVisitor;
        impl<'de> Visitor<'de> for SpaceVisitor {
            type Value = Space;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a table of parameters, like `x = { uniform = [0.0, 1.0] }`")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Space, A::Error> {
                let mut params = Vec::new();
                while let Some(name) = map.next_key::<String>()? {
                    let ParamBody(domain, when) = map.next_value()?;
                    params.push(Param { name, domain, when });
                }
                Space::new(params).map_err(de::Error::custom)
            }
        }
        d.deserialize_map(SpaceVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
        x = { uniform = [-5.0, 10.0] }
        lr = { loguniform = [1e-5, 1e-1] }
        units = { int = [16, 1024], log = true }
        layers = { int = [1, 8] }
        step = { quniform = [0.0, 1.0, 0.1] }
        optimizer = { choice = ["sgd", "adam"] }
        momentum = { uniform = [0.5, 0.99], when = { optimizer = "sgd" } }
        w = { normal = [0, 2] }
        flag = { grid = [true, false] }
        mixed = { choice = [1, 2.5, "auto"] }
        coarse = { qloguniform = [1, 1000, 10] }
        even = { int = [2, 10], step = 2 }
    "#;

    #[test]
    fn toml_form_parses_every_domain_in_order() {
        let space: Space = toml::from_str(EXAMPLE).unwrap();
        let names: Vec<&str> = space.params().iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "x",
                "lr",
                "units",
                "layers",
                "step",
                "optimizer",
                "momentum",
                "w",
                "flag",
                "mixed",
                "coarse",
                "even"
            ]
        );
        assert_eq!(
            space.param("units").unwrap().domain,
            Domain::Int {
                low: 16,
                high: 1024,
                step: 1,
                log: true
            }
        );
        assert_eq!(
            space.param("w").unwrap().domain,
            Domain::Normal {
                mu: 0.0,
                sigma: 2.0
            }
        );
        assert_eq!(
            space.param("mixed").unwrap().domain,
            Domain::Choice(vec![
                Value::Int(1),
                Value::Float(2.5),
                Value::Str("auto".into())
            ])
        );
        assert_eq!(
            space.param("momentum").unwrap().when[0].values,
            vec![Value::from("sgd")]
        );
    }

    #[test]
    fn json_round_trip_is_identity() {
        let space: Space = toml::from_str(EXAMPLE).unwrap();
        let json = serde_json::to_string(&space).unwrap();
        let back: Space = serde_json::from_str(&json).unwrap();
        assert_eq!(space, back);
        let toml_text = toml::to_string(&space).unwrap();
        let back: Space = toml::from_str(&toml_text).unwrap();
        assert_eq!(space, back);
    }

    fn err(src: &str) -> String {
        toml::from_str::<Space>(src).unwrap_err().to_string()
    }

    #[test]
    fn malformed_parameters_are_explained_at_their_line() {
        let e = err("a = { uniform = [0, 1] }\nx = { uniform = [5.0, 1.0] }\n");
        assert!(e.contains("line 2"), "{e}");
        assert!(
            e.contains("uniform: expected low < high, found low = 5 and high = 1"),
            "{e}"
        );
        let e = err("x = { loguniform = [0.0, 1.0] }");
        assert!(
            e.contains("log-scaled bounds must be positive, found low = 0"),
            "{e}"
        );
        let e = err("x = { choice = [] }");
        assert!(
            e.contains("choice: expected at least one value, found an empty list"),
            "{e}"
        );
        let e = err("x = { unifrom = [0.0, 1.0] }");
        assert!(e.contains("unknown field `unifrom`"), "{e}");
        let e = err("x = { uniform = [0.0, 1.0], choice = [1] }");
        assert!(e.contains("found `uniform` and `choice`"), "{e}");
        let e = err("x = { uniform = [0.0, 1.0], log = true }");
        assert!(e.contains("`log` applies to `int` only"), "{e}");
        let e = err("x = { int = [1.5, 4] }");
        assert!(e.contains("line 1"), "{e}");
        let e = err("o = { choice = [\"a\"] }\nm = { uniform = [0, 1], when = { o = \"b\" } }");
        assert!(e.contains("`when` expects `o` to be \"b\""), "{e}");
    }
}
