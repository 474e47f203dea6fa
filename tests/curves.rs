//! benches/common/curves.rs reproduces ../shared/bench/curves.py bit for bit.

#[path = "../benches/common/curves.rs"]
mod curves;

#[test]
fn reference_values_of_curves_py() {
    // From curves.py's docstring.
    assert_eq!(
        curves::val_loss(0.001, 100, 0.1, 5).to_bits(),
        0.467760090594774f64.to_bits()
    );
    assert_eq!(
        curves::noise(0.001, 100, 0.1, 5).to_bits(),
        (-0.0043646481011770984f64).to_bits()
    );
    assert_eq!(
        curves::floor_min().to_bits(),
        0.05000000047501583f64.to_bits()
    );
}

#[test]
fn the_final_epoch_is_the_floor_plus_noise_and_curves_cross() {
    let (lr, w, d) = (0.1, 64, 0.0);
    let last = curves::val_loss(lr, w, d, 81);
    assert!((last - curves::floor(lr, w, d) - curves::noise(lr, w, d, 81)).abs() < 1e-15);
    // A fast starter leads at epoch 1 but the best configuration wins at 81.
    let best = (10f64.powf(-2.5), 181, 0.25);
    assert!(curves::val_loss(lr, w, d, 1) < curves::val_loss(best.0, best.1, best.2, 1));
    assert!(curves::val_loss(lr, w, d, 81) > curves::val_loss(best.0, best.1, best.2, 81));
}
