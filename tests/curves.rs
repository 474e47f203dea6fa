//! testkit/src/curves.rs reproduces benches/peers/curves.py bit for bit.

use tune_testkit::curves;

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

/// ASHA decides exactly as Ray Tune 2.60's AsyncHyperBandScheduler: on the configurations Ray
/// drew (tests/fixtures/ray_asha_events.json, recorded with benches/peers/run_asha.py), run one
/// at a time with the same settings, every trial stops at the epoch where Ray stopped it.
#[test]
fn asha_stops_every_trial_where_ray_tune_does() {
    use tune_schedulers::{Asha, AshaConfig, Decision, Mode, Scheduler};
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/ray_asha_events.json");
    let fixture: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for (seed, run) in fixture["runs"].as_object().unwrap() {
        let configs = run["configs"].as_array().unwrap();
        let ray_epochs: Vec<u64> = run["epochs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_u64().unwrap())
            .collect();
        let config = AshaConfig {
            max_t: 81,
            grace_period: Some(1),
            reduction_factor: 3,
            ..AshaConfig::default()
        };
        let mut asha = Asha::new(config, Mode::Min, 0);
        let mut budget = 2430u64;
        for (idx, c) in configs.iter().enumerate() {
            let (lr, width, dropout) = (
                c[0].as_f64().unwrap(),
                c[1].as_i64().unwrap(),
                c[2].as_f64().unwrap(),
            );
            let mut last = 0;
            for t in 1..=81 {
                let v = curves::val_loss(lr, width, dropout, t);
                last = t;
                budget -= 1;
                if budget == 0 {
                    break; // the budget cut this trial, in Ray's run too
                }
                if asha.on_result(idx as u64, t, v) != Decision::Continue {
                    asha.on_complete(idx as u64, Some((t, v)));
                    break;
                }
            }
            assert_eq!(last, ray_epochs[idx], "seed {seed}, trial {idx}");
        }
        assert_eq!(budget, 0, "seed {seed}: the same 2430 epochs");
    }
}
