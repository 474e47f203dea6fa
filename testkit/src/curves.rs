//! The synthetic learning curves of `benches/peers/curves.py`, bit-exact (reference values in
//! tests/curves.rs): three hyperparameters, 81 epochs, curves that cross.

use sha2::{Digest, Sha256};
use tune_search::{Params, Space};

pub const MAX_T: u64 = 81;
const NOISE_AMPLITUDE: f64 = 0.005;

/// The floor of the best configuration (lr = 10^-2.5, width = 181, dropout = 0.25).
pub fn floor_min() -> f64 {
    floor(10f64.powf(-2.5), 181, 0.25)
}

pub fn space() -> Space {
    toml::from_str(
        "lr = { loguniform = [1e-4, 1.0] }\nwidth = { int = [16, 512] }\ndropout = { uniform = [0.0, 0.7] }",
    )
    .expect("curves space")
}

fn terms(lr: f64, width: i64, dropout: f64) -> (f64, f64, f64) {
    let u = lr.log10();
    let v = (width as f64).log2();
    let d = dropout;
    let s = 1.0 / (1.0 + (-3.0 * (u + 2.0)).exp());
    let floor =
        0.05 + 0.10 * (u + 2.5).powi(2) + 0.02 * (v - 7.5).powi(2) + 0.5 * (d - 0.25).powi(2);
    let a = 0.3 + 0.5 * (floor - 0.05) + 0.6 * (1.0 - s) + 0.3 * d + 0.02 * (v - 4.0);
    let b = 0.5 + 0.6 * s - 0.3 * d;
    (floor, a, b)
}

/// The noise-free final loss of a configuration.
pub fn floor(lr: f64, width: i64, dropout: f64) -> f64 {
    terms(lr, width, dropout).0
}

/// Deterministic noise in [-0.005, 0.005) from SHA-256 of the big-endian (lr, width, dropout, t).
pub fn noise(lr: f64, width: i64, dropout: f64, t: u64) -> f64 {
    let mut h = Sha256::new();
    h.update(lr.to_be_bytes());
    h.update(width.to_be_bytes());
    h.update(dropout.to_be_bytes());
    h.update((t as i64).to_be_bytes());
    let digest = h.finalize();
    let x = u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"));
    NOISE_AMPLITUDE * (2.0 * (x as f64 / 2f64.powi(64)) - 1.0)
}

/// Validation loss after epoch t (1 <= t <= 81).
pub fn val_loss(lr: f64, width: i64, dropout: f64, t: u64) -> f64 {
    let (fl, a, b) = terms(lr, width, dropout);
    let big_t = MAX_T as f64;
    let g = ((t as f64).powf(-b) - big_t.powf(-b)) / (1.0 - big_t.powf(-b));
    fl + a * g + noise(lr, width, dropout, t)
}

/// (lr, width, dropout) of a trial's params.
pub fn config(p: &Params) -> (f64, i64, f64) {
    (
        p.f64("lr").expect("lr"),
        p.i64("width").expect("width"),
        p.f64("dropout").expect("dropout"),
    )
}
