//! Numbers as tune prints them to people: in full, or to a few significant digits. This is
//! the one rule for every short number (status, progress line, dashboard, plots, scheduler
//! panels), so that one value reads the same wherever it is shown.

/// Whether a value is printed in scientific notation when written in full.
fn scientific(v: f64) -> bool {
    v != 0.0 && v.is_finite() && !(1e-4..1e15).contains(&v.abs())
}

/// A value in full: every digit needed to read it back (Rust's plain form of 1.7e308 has 309
/// digits, so very large and very small values are written with an exponent).
///
/// ```
/// assert_eq!(tune_search::value_text(0.125), "0.125");
/// assert_eq!(tune_search::value_text(1.7e308), "1.7e308");
/// ```
pub fn value_text(v: f64) -> String {
    if scientific(v) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// A value to `digits` significant digits, trailing zeros dropped; with an exponent (and
/// `digits` digits in its mantissa) from 10^(digits + 1) up and below 0.001.
///
/// ```
/// use tune_search::value_digits;
/// assert_eq!(value_digits(0.0031911303, 4), "0.003191");
/// assert_eq!(value_digits(2.5, 6), "2.5");
/// assert_eq!(value_digits(123456.7, 4), "1.235e5");
/// assert_eq!(value_digits(0.00021497, 4), "2.150e-4");
/// assert_eq!(value_digits(-0.0, 4), "0");
/// ```
pub fn value_digits(v: f64, digits: usize) -> String {
    let digits = digits.max(1);
    if !v.is_finite() {
        return v.to_string();
    }
    let big = 10f64.powi(digits as i32 + 1);
    if v != 0.0 && (v.abs() >= big || v.abs() < 1e-3) {
        return format!("{v:.*e}", digits - 1);
    }
    let magnitude = if v == 0.0 {
        0
    } else {
        v.abs().log10().floor() as i32
    };
    let decimals = (digits as i32 - 1 - magnitude).max(0) as usize;
    let s = format!("{v:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        &s
    };
    if s == "-0" { "0" } else { s }.to_string()
}

/// A value as `tune status` and the progress line show it: 6 significant digits.
///
/// ```
/// assert_eq!(tune_search::value_short(0.003939082833821216), "0.00393908");
/// assert_eq!(tune_search::value_short(-1.7e308), "-1.70000e308");
/// ```
pub fn value_short(v: f64) -> String {
    value_digits(v, 6)
}

/// A value where room is short (the dashboard, a chart's axis, a scheduler's panel): 4
/// significant digits.
///
/// ```
/// assert_eq!(tune_search::value_brief(0.97777), "0.9778");
/// ```
pub fn value_brief(v: f64) -> String {
    value_digits(v, 4)
}

/// Params as people read them, `name=value` joined by spaces, each float to `digits`
/// significant digits ([`value_digits`]); the others as they are.
///
/// ```
/// let mut p = tune_search::Params::default();
/// p.insert("lr", tune_search::Value::Float(0.0031911303));
/// p.insert("opt", tune_search::Value::Str("sgd".into()));
/// assert_eq!(tune_search::params_digits(&p, 4), "lr=0.003191 opt=sgd");
/// ```
pub fn params_digits(params: &crate::Params, digits: usize) -> String {
    params
        .iter()
        .map(|(k, v)| match v {
            crate::Value::Float(x) => format!("{k}={}", value_digits(*x, digits)),
            other => format!("{k}={other}"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_up_to_the_next_power_of_ten_drops_the_zeros() {
        assert_eq!(value_digits(9.99996, 4), "10");
        assert_eq!(value_digits(99999.0, 4), "99999");
        assert_eq!(value_digits(-12.345678, 6), "-12.3457");
        assert_eq!(value_digits(1e-3, 4), "0.001");
        assert_eq!(value_digits(f64::NAN, 4), "NaN");
        assert_eq!(value_digits(f64::NEG_INFINITY, 4), "-inf");
        assert_eq!(value_brief(0.012345678), "0.01235");
        assert_eq!(value_brief(1234.5678), "1235");
        assert_eq!(value_brief(3.0), "3");
        assert_eq!(value_brief(0.00001234), "1.234e-5");
        assert_eq!(value_brief(2.5e7), "2.500e7");
    }
}
