//! Reading a trial's stdout as reports: JSON objects or `key: value` pairs, each checked
//! against the limits of one line and one report.

use std::collections::BTreeMap;

/// The most metrics one report may carry.
pub(crate) const MAX_METRICS: usize = 1000;

/// A report read off a line: its step, if it gave one, and its metrics.
pub(crate) type Report = (Option<u64>, BTreeMap<String, f64>);

/// Turns stdout lines into reports.
///
/// A JSON object line is a whole report. `key: value` lines without the metric are held and
/// merged into the next line that has it, so `acc: 0.9` then `loss: 0.3` make one report.
/// Any other line is the trial's own log output and is ignored.
pub(crate) struct ReportParser {
    metric: String,
    held: BTreeMap<String, f64>,
}

impl ReportParser {
    pub(crate) fn new(metric: &str) -> ReportParser {
        ReportParser {
            metric: metric.to_string(),
            held: BTreeMap::new(),
        }
    }

    /// The (step, metrics) of a completed report, if `line` completes one. `Err`: the line is
    /// a report in form (a JSON object with the metric's key) that cannot be read, such as a
    /// number JSON cannot hold (`1e400`); the trial fails with the reason, rather than wait
    /// for a decision on a report that was never taken.
    pub(crate) fn feed(&mut self, line: &str) -> Result<Option<Report>, String> {
        let line = line.trim();
        let unreadable = |why: String| {
            format!(
                "a report could not be read ({why}): {}",
                shortened(line, 200)
            )
        };
        let (mut metrics, is_report) = if line.starts_with('{') {
            match parse_json(line) {
                Ok((_, others)) if others.contains_key(&self.metric) => {
                    let found = &others[&self.metric];
                    return Err(unreadable(format!(
                        "`{}` is {found}, expected a number",
                        self.metric
                    )));
                }
                Ok((_, others)) if others.contains_key("step") => {
                    let found = &others["step"];
                    return Err(unreadable(format!(
                        "`step` is {found}, expected a whole number"
                    )));
                }
                Ok((metrics, _)) => (metrics, true),
                Err(e) if names_key(line, &self.metric) => return Err(unreadable(e.to_string())),
                Err(_) => return Ok(None),
            }
        } else {
            let Some(pairs) = parse_pairs(line) else {
                return Ok(None);
            };
            let has_metric = pairs.contains_key(&self.metric);
            (pairs, has_metric)
        };
        if !is_report {
            self.held.append(&mut metrics);
            if self.held.len() > MAX_METRICS {
                return Err(unreadable(format!(
                    "{} metrics held for a report that never came, at most {MAX_METRICS}",
                    self.held.len()
                )));
            }
            return Ok(None);
        }
        let mut all = std::mem::take(&mut self.held);
        all.append(&mut metrics);
        if all.len() > MAX_METRICS {
            return Err(unreadable(format!(
                "{} metrics, at most {MAX_METRICS}",
                all.len()
            )));
        }
        let step = match all.remove("step") {
            None => None,
            // Below 2^53, where every whole number is exact.
            Some(s) if s >= 0.0 && s.fract() == 0.0 && s < 9.0e15 => Some(s as u64),
            Some(s) => {
                return Err(unreadable(format!(
                    "`step` is {s}, expected a whole number from 0 to 9e15"
                )))
            }
        };
        Ok(Some((step, all)))
    }
}

/// Whether a JSON-looking line has `"key":` in it.
fn names_key(line: &str, key: &str) -> bool {
    let quoted = format!("\"{key}\"");
    line.match_indices(&quoted)
        .any(|(i, _)| line[i + quoted.len()..].trim_start().starts_with(':'))
}

/// At most `max` characters of `text`, with "..." where it was cut.
pub(super) fn shortened(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    }
}

/// The fields of a JSON object: the numbers (Python's `NaN`/`Infinity`, not JSON, accepted),
/// and the others, each described as it would be in an error (`the string "0.5"`).
type JsonFields = (BTreeMap<String, f64>, BTreeMap<String, String>);

fn parse_json(line: &str) -> Result<JsonFields, serde_json::Error> {
    let map: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(line).or_else(|e| {
            let fixed = line
                .replace("-Infinity", "\"-inf\"")
                .replace("Infinity", "\"inf\"")
                .replace("NaN", "\"nan\"");
            serde_json::from_str(&fixed).map_err(|_| e)
        })?;
    let (mut numbers, mut others) = (BTreeMap::new(), BTreeMap::new());
    for (k, v) in map {
        let x = match &v {
            serde_json::Value::Number(n) => n.as_f64(),
            serde_json::Value::String(s) if matches!(s.as_str(), "nan" | "inf" | "-inf") => {
                s.parse().ok()
            }
            _ => None,
        };
        match x {
            Some(x) => {
                numbers.insert(k, x);
            }
            None => {
                let kind = match &v {
                    serde_json::Value::String(_) => "the string",
                    serde_json::Value::Bool(_) => "the boolean",
                    serde_json::Value::Null => "null",
                    serde_json::Value::Array(_) => "the list",
                    _ => "the object",
                };
                let shown = match &v {
                    serde_json::Value::Null => String::new(),
                    v => format!(" {}", shortened(&v.to_string(), 40)),
                };
                others.insert(k, format!("{kind}{shown}"));
            }
        }
    }
    Ok((numbers, others))
}

/// `key: number` pairs separated by commas; `None` unless the whole line is such pairs.
fn parse_pairs(line: &str) -> Option<BTreeMap<String, f64>> {
    let mut out = BTreeMap::new();
    for part in line.split(',') {
        let (k, v) = part.split_once(':')?;
        let k = k.trim();
        let valid_key =
            !k.is_empty() && k.chars().all(|c| c.is_alphanumeric() || "_-./".contains(c));
        if !valid_key {
            return None;
        }
        out.insert(k.to_string(), v.trim().parse::<f64>().ok()?);
    }
    Some(out)
}

#[cfg(test)]
mod tests;
