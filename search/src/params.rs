//! Concrete parameter values of one trial.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// One concrete value: what a choice lists or a numeric domain yields.
///
/// ```
/// use tune_search::Value;
/// assert_eq!(Value::from(3).to_string(), "3");
/// assert_eq!(Value::from("adam").as_str(), Some("adam"));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Value {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

impl Value {
    /// The value as a float; integers convert, strings and bools do not.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Float(x) => Some(*x),
            Value::Int(i) => Some(*i as f64),
            _ => None,
        }
    }

    /// The value as an integer; only `Int` converts (a float never rounds silently).
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// A short name of the value's type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Bool(_) => "bool",
            Value::Int(_) => "integer",
            Value::Float(_) => "float",
            Value::Str(_) => "string",
        }
    }
}

impl fmt::Display for Value {
    /// Floats print in their shortest round-trip form, so a command line gets the exact value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Str(s) => f.write_str(s),
        }
    }
}

impl From<f64> for Value {
    fn from(x: f64) -> Self {
        Value::Float(x)
    }
}
impl From<i64> for Value {
    fn from(i: i64) -> Self {
        Value::Int(i)
    }
}
impl From<i32> for Value {
    fn from(i: i32) -> Self {
        Value::Int(i64::from(i))
    }
}
impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}
impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Str(s.to_string())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Str(s)
    }
}

/// Why a typed read of a parameter failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParamError {
    #[error("parameter `{0}` is not set in this trial (unknown, or inactive by its `when`)")]
    Missing(String),
    #[error("parameter `{name}` is a {found}, not a {expected}")]
    WrongType {
        name: String,
        expected: &'static str,
        found: &'static str,
    },
}

/// The parameters of one trial, by name. Inactive conditional parameters are absent.
///
/// ```
/// use tune_search::{Params, Value};
/// let mut p = Params::default();
/// p.insert("lr", Value::from(0.01));
/// p.insert("opt", Value::from("sgd"));
/// assert_eq!(p.f64("lr").unwrap(), 0.01);
/// assert_eq!(p.str("opt").unwrap(), "sgd");
/// assert!(p.f64("momentum").is_err());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Params(BTreeMap<String, Value>);

impl Params {
    pub fn insert(&mut self, name: impl Into<String>, value: Value) {
        self.0.insert(name.into(), value);
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn typed<T>(
        &self,
        name: &str,
        expected: &'static str,
        read: impl Fn(&Value) -> Option<T>,
    ) -> Result<T, ParamError> {
        let value = self
            .get(name)
            .ok_or_else(|| ParamError::Missing(name.to_string()))?;
        read(value).ok_or_else(|| ParamError::WrongType {
            name: name.to_string(),
            expected,
            found: value.type_name(),
        })
    }

    /// A numeric parameter as f64 (integers convert).
    pub fn f64(&self, name: &str) -> Result<f64, ParamError> {
        self.typed(name, "number", Value::as_f64)
    }

    /// An integer parameter.
    pub fn i64(&self, name: &str) -> Result<i64, ParamError> {
        self.typed(name, "integer", Value::as_i64)
    }

    /// A string parameter (a choice of strings).
    pub fn str(&self, name: &str) -> Result<&str, ParamError> {
        let value = self
            .get(name)
            .ok_or_else(|| ParamError::Missing(name.to_string()))?;
        value.as_str().ok_or_else(|| ParamError::WrongType {
            name: name.to_string(),
            expected: "string",
            found: value.type_name(),
        })
    }

    /// A boolean parameter.
    pub fn bool(&self, name: &str) -> Result<bool, ParamError> {
        self.typed(name, "bool", Value::as_bool)
    }
}

impl FromIterator<(String, Value)> for Params {
    fn from_iter<I: IntoIterator<Item = (String, Value)>>(iter: I) -> Self {
        Params(iter.into_iter().collect())
    }
}
