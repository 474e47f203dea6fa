//! The one error a config's own check returns: which key, and what was wrong with it.

use std::fmt;

/// A setting that cannot be used: its key and why (what was expected, what was found).
///
/// Configs check themselves (`TpeOptions::validate`, `AshaConfig::validate`, ...) and return
/// this; the caller adds where the setting was written (a file's line, a TOML section).
///
/// ```
/// let e = tune_search::FieldError::new("gamma_max", "expected at least 1, found 0");
/// assert_eq!(e.to_string(), "`gamma_max`: expected at least 1, found 0");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub key: String,
    pub message: String,
}

impl FieldError {
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError {
            key: key.into(),
            message: message.into(),
        }
    }

    /// `key` must be in `[low, high]`.
    pub fn check_within(key: &str, value: f64, low: f64, high: f64) -> Result<(), FieldError> {
        if (low..=high).contains(&value) {
            Ok(())
        } else {
            Err(FieldError::new(
                key,
                format!("expected a number in [{low}, {high}], found {value}"),
            ))
        }
    }

    /// `key` must be at least `low` (an integer setting).
    pub fn check_at_least(key: &str, value: u64, low: u64) -> Result<(), FieldError> {
        if value >= low {
            Ok(())
        } else {
            Err(FieldError::new(
                key,
                format!("expected at least {low}, found {value}"),
            ))
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}`: {}", self.key, self.message)
    }
}

impl std::error::Error for FieldError {}
