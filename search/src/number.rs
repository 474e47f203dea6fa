//! Numbers as tune prints them to people: in full, or short, and in scientific notation when
//! very large or very small (Rust's plain form of 1.7e308 has 309 digits).

/// Whether a value is printed in scientific notation.
fn scientific(v: f64) -> bool {
    v != 0.0 && v.is_finite() && !(1e-4..1e15).contains(&v.abs())
}

/// A value in full: every digit needed to read it back.
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

/// A value to 6 decimals (or 6 decimals of its mantissa, when very large or small).
///
/// ```
/// assert_eq!(tune_search::value_short(0.125), "0.125000");
/// assert_eq!(tune_search::value_short(-1.7e308), "-1.700000e308");
/// ```
pub fn value_short(v: f64) -> String {
    if scientific(v) {
        format!("{v:.6e}")
    } else {
        format!("{v:.6}")
    }
}
