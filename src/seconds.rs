//! Durations taken from input (spec keys, flags): one range check for all of them.

use std::time::Duration;

use tune_search::FieldError;

/// The longest duration tune takes from input, in seconds (about 31 years): a deadline
/// further off would overflow the clock's arithmetic, so longer ones are refused at
/// validation, not met at run time.
pub const MAX_SECONDS: f64 = 1e9;

/// `value` seconds as the setting `key` gives them: finite, above 0 (`zero`: or 0), and at
/// most [`MAX_SECONDS`].
///
/// ```
/// use std::time::Duration;
/// assert_eq!(tune::seconds::checked("--lease", 2.5, false).unwrap(), Duration::from_millis(2500));
/// let e = tune::seconds::checked("time_budget_s", 1e300, false).unwrap_err();
/// assert_eq!(e.key, "time_budget_s");
/// ```
pub fn checked(key: &str, value: f64, zero: bool) -> Result<Duration, FieldError> {
    let low_ok = if zero { value >= 0.0 } else { value > 0.0 };
    if value.is_finite() && low_ok && value <= MAX_SECONDS {
        return Ok(Duration::from_secs_f64(value));
    }
    let low = if zero { "0 or more" } else { "above 0" };
    // 1e300 as written, not as its 301 digits.
    let found = if value.is_finite() && value.abs() >= 1e16 {
        format!("{value:e}")
    } else {
        value.to_string()
    };
    Err(FieldError::new(
        key,
        format!(
            "expected a number of seconds {low} and at most {MAX_SECONDS:e} (31 years), found \
             {found}"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_out_of_range_are_refused_naming_the_key() {
        assert_eq!(
            checked("t", 1.5, false).unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(checked("t", 0.0, true).unwrap(), Duration::ZERO);
        for bad in [
            0.0,
            -1.0,
            f64::NAN,
            f64::INFINITY,
            1e300,
            MAX_SECONDS * 1.01,
        ] {
            let e = checked("time_budget_s", bad, false).unwrap_err();
            assert_eq!(e.key, "time_budget_s");
            assert!(e.message.contains("found "), "{e}");
        }
        assert!(checked("t", -0.5, true).is_err());
    }
}
