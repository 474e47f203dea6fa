//! Several objectives: `metric = ["val_loss", "latency_ms"]` with `mode = ["min", "min"]`.
//!
//! The spec keeps `metric` and `mode` as the first objective's (what one-objective code
//! reads) and, with several, every objective in `objectives`. A spec file's lists are turned
//! into that form here, before serde reads the file.

use serde::{Deserialize, Serialize};
use tune_search::{FieldError, Mode};

use super::InvalidSetting;

/// One objective: a reported key and its direction.
///
/// ```
/// let spec = tune::ExperimentSpec::from_toml(r#"
///     name = "front"
///     metric = ["val_loss", "latency_ms"]
///     mode = ["min", "min"]
///     samples = 10
///     [space]
///     x = { uniform = [0.0, 1.0] }
/// "#, "space.toml".as_ref()).unwrap();
/// let names: Vec<String> = spec.objectives().into_iter().map(|o| o.metric).collect();
/// assert_eq!(names, ["val_loss", "latency_ms"]);
/// assert_eq!((spec.metric.as_str(), spec.mode), ("val_loss", tune::Mode::Min));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Goal {
    pub metric: String,
    pub mode: Mode,
}

/// Rewrites a spec table whose `metric` (or `mode`) is a list into `metric`, `mode` (the first
/// objective) and `objectives` (all). A one-element list is one objective. Mismatched lists
/// are refused, naming what was expected and found.
pub(super) fn split_objective_lists(table: &mut toml::Table) -> Result<(), InvalidSetting> {
    let metrics = match table.get("metric") {
        Some(toml::Value::Array(items)) => metric_list(items)?,
        Some(toml::Value::String(_)) | None => {
            if let Some(toml::Value::Array(_)) = table.get("mode") {
                return Err(top_level(
                    "mode",
                    "a list of directions is for several objectives: `metric` must be a list \
                     of the same length"
                        .into(),
                ));
            }
            return Ok(());
        }
        // Left to serde, which says what it expected.
        Some(_) => return Ok(()),
    };
    let Some(modes) = mode_list(table.get("mode"), &metrics)? else {
        return Ok(());
    };
    let mode_text = |m: Mode| toml::Value::String(m.as_str().into());
    table.insert("metric".into(), toml::Value::String(metrics[0].clone()));
    table.insert("mode".into(), mode_text(modes[0]));
    if metrics.len() > 1 {
        let objectives = metrics
            .iter()
            .zip(&modes)
            .map(|(metric, &mode)| {
                let mut t = toml::Table::new();
                t.insert("metric".into(), toml::Value::String(metric.clone()));
                t.insert("mode".into(), mode_text(mode));
                toml::Value::Table(t)
            })
            .collect();
        table.insert("objectives".into(), toml::Value::Array(objectives));
    }
    Ok(())
}

/// An error in a top-level key of the spec.
fn top_level(key: &str, message: String) -> InvalidSetting {
    InvalidSetting::new("", FieldError::new(key, message))
}

/// The names a `metric = [...]` list gives: distinct and not empty, at least one.
fn metric_list(items: &[toml::Value]) -> Result<Vec<String>, InvalidSetting> {
    let mut names: Vec<String> = Vec::new();
    for item in items {
        let Some(name) = item.as_str().filter(|n| !n.is_empty()) else {
            return Err(top_level(
                "metric",
                format!("expected names of reported keys, found {item}"),
            ));
        };
        if names.iter().any(|n| n == name) {
            return Err(top_level("metric", format!("`{name}` is listed twice")));
        }
        names.push(name.to_string());
    }
    if names.is_empty() {
        return Err(top_level(
            "metric",
            "expected at least one reported key, found an empty list".into(),
        ));
    }
    Ok(names)
}

/// One direction per metric from `mode` (none: all "min"); `None` where `mode` is for serde
/// to judge.
fn mode_list(
    mode: Option<&toml::Value>,
    metrics: &[String],
) -> Result<Option<Vec<Mode>>, InvalidSetting> {
    let modes = match mode {
        None => vec![Mode::Min; metrics.len()],
        Some(toml::Value::Array(items)) => {
            if items.len() != metrics.len() {
                return Err(top_level(
                    "mode",
                    format!(
                        "expected {} directions, one per metric ({}), found {}",
                        metrics.len(),
                        metrics.join(", "),
                        items.len()
                    ),
                ));
            }
            items
                .iter()
                .map(|item| match item.as_str() {
                    Some("min") => Ok(Mode::Min),
                    Some("max") => Ok(Mode::Max),
                    _ => Err(top_level(
                        "mode",
                        format!("expected \"min\" or \"max\", found {item}"),
                    )),
                })
                .collect::<Result<_, _>>()?
        }
        Some(other) if metrics.len() == 1 => match other.as_str() {
            Some("max") => vec![Mode::Max],
            Some("min") => vec![Mode::Min],
            _ => return Ok(None),
        },
        Some(other) => {
            return Err(top_level(
                "mode",
                format!(
                    "expected a list of {} directions, one per metric ({}), found {other}",
                    metrics.len(),
                    metrics.join(", ")
                ),
            ))
        }
    };
    Ok(Some(modes))
}
