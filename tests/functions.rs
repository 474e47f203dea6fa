//! The benchmark functions of benches/ are bit-exact with benches/peers/functions.py, and
//! their documented minima hold.

use tune_testkit::functions;

use tune_search::{Params, Value};

fn params(pairs: &[(&str, Value)]) -> Params {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn xs(values: &[f64]) -> Params {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| (format!("x{i}"), Value::Float(*v)))
        .collect()
}

type Case = (fn(&Params) -> f64, Params, f64);

/// Values printed by `functions.py` (repr, so every bit) at random points and the argmin.
#[test]
fn bit_exact_with_the_python_definitions() {
    use functions::*;
    let cases: Vec<Case> = vec![
        (
            branin,
            xs(&[-2.9845363383139816, 12.71150605405849]),
            1.1734076685666324,
        ),
        (
            branin,
            xs(&[6.456619284649211, 3.826035386091325]),
            26.838134902356607,
        ),
        (
            branin,
            xs(&[4.773894590841444, 11.830850267032698]),
            120.51737445722081,
        ),
        (
            branin,
            xs(&[std::f64::consts::PI, 2.275]),
            0.39788735772973816,
        ),
        (
            hartmann6,
            xs(&[
                0.0938595867742349,
                0.02834747652200631,
                0.8357651039198697,
                0.43276706790505337,
                0.762280082457942,
                0.0021060533511106927,
            ]),
            -0.011080244873438321,
        ),
        (
            hartmann6,
            xs(&[
                0.4453871940548014,
                0.7215400323407826,
                0.22876222127045265,
                0.9452706955539223,
                0.9014274576114836,
                0.030589983033553536,
            ]),
            -0.5866104244165472,
        ),
        (
            hartmann6,
            xs(&[
                0.20168951, 0.15001069, 0.47687397, 0.27533243, 0.31165162, 0.65730053,
            ]),
            -3.3223680114155134,
        ),
        (
            rosenbrock4,
            xs(&[
                -1.7182844399346706,
                1.8940519860660041,
                -0.6532757811427166,
                -4.677654421011367,
            ]),
            4526.82837102507,
        ),
        (
            rosenbrock4,
            xs(&[
                9.888151182640977,
                7.899197931929349,
                -3.186650602912904,
                -0.009572219598063647,
            ]),
            1248376.8543113654,
        ),
        (rosenbrock4, xs(&[1.0, 1.0, 1.0, 1.0]), 0.0),
        (
            ackley5,
            xs(&[
                21.629219194426298,
                11.161145600512562,
                -12.886441267500313,
                5.739682604224313,
                25.066143798516627,
            ]),
            20.694733159423482,
        ),
        (
            ackley5,
            xs(&[
                11.435103387800517,
                -8.211462848404501,
                -4.00021061339951,
                0.552238333950811,
                18.248015216649556,
            ]),
            19.36677609943916,
        ),
        (ackley5, xs(&[0.0; 5]), 4.440892098500626e-16),
        (
            log_bowl,
            params(&[
                ("lr", 0.0013354588352272984.into()),
                ("wd", 5.659599046540518e-06.into()),
            ]),
            1.5713266220112712,
        ),
        (
            log_bowl,
            params(&[
                ("lr", 0.7927318434995221.into()),
                ("wd", 0.0001419992703020282.into()),
            ]),
            8.428124385830817,
        ),
        (
            log_bowl,
            params(&[("lr", 0.001.into()), ("wd", 0.0001.into())]),
            0.0,
        ),
        (
            mixed_opt_net,
            params(&[
                ("optimizer", "adam".into()),
                ("lr", 0.017209998267048474.into()),
                ("layers", 3.into()),
                ("units", 530.into()),
            ]),
            1.6873724490619062,
        ),
        (
            mixed_opt_net,
            params(&[
                ("optimizer", "sgd".into()),
                ("lr", 0.8135480111137428.into()),
                ("layers", 4.into()),
                ("units", 568.into()),
            ]),
            2.320888240116273,
        ),
        (
            mixed_opt_net,
            params(&[
                ("optimizer", "rmsprop".into()),
                ("lr", 0.00014483737338394327.into()),
                ("layers", 6.into()),
                ("units", 991.into()),
            ]),
            2.815108746766611,
        ),
    ];
    for (i, (f, p, expected)) in cases.iter().enumerate() {
        let got = f(p);
        assert_eq!(
            got.to_bits(),
            expected.to_bits(),
            "case {i}: {got:e} vs {expected:e} at {p:?}"
        );
    }
}

#[test]
fn documented_minima_hold() {
    let every = functions::all()
        .into_iter()
        .chain(functions::held_out())
        .chain(functions::validation());
    for b in every {
        // Nothing in a sample of the space beats the known minimum.
        let mut rng = tune_search::trial_rng(0, 0);
        for _ in 0..20_000 {
            let v = (b.f)(&b.space.sample(&mut rng));
            assert!(
                v >= b.known_min - 1e-9,
                "{}: {v} below {}",
                b.name,
                b.known_min
            );
        }
    }
    let min = |name: &str| {
        functions::all()
            .into_iter()
            .find(|b| b.name == name)
            .unwrap()
            .known_min
    };
    assert_eq!(min("Branin"), 0.3978873577297384);
    // The validation set's minima are attained where the literature puts them.
    let at = |name: &str, p: &Params| {
        let b = functions::validation()
            .into_iter()
            .find(|b| b.name == name)
            .unwrap();
        ((b.f)(p), b.known_min)
    };
    let stepped = params(&[
        ("lr", Value::Float(0.01)),
        ("batch", Value::Int(64)),
        ("depth", Value::Int(7)),
        ("dropout", Value::Float(0.2)),
    ]);
    let choice = params(&[
        ("opt", Value::Str("adamw".into())),
        ("norm", Value::Str("layer".into())),
        ("wd", Value::Float(0.01)),
        ("warmup", Value::Float(0.1)),
    ]);
    assert_eq!(at("SteppedTrainer", &stepped), (0.0, 0.0));
    assert_eq!(at("ChoiceNet", &choice), (0.0, 0.0));
    for (name, point) in [
        ("GoldsteinPrice", &[0.0, -1.0][..]),
        ("Beale", &[3.0, 0.5]),
        ("Zakharov4D", &[0.0; 4]),
        (
            "DixonPrice4D",
            &[1.0, 0.5f64.sqrt(), 0.5f64.powf(0.75), 0.5f64.powf(0.875)],
        ),
        ("Powell4D", &[0.0; 4]),
        ("Trid4D", &[4.0, 6.0, 6.0, 4.0]),
        ("Griewank5D", &[0.0; 5]),
        ("Hartmann3", &[0.114_588_881, 0.555_648_895, 0.852_546_984]),
        (
            "Shekel4D",
            &[4.000_746_868, 3.999_509_485, 4.000_746_869, 3.999_509_48],
        ),
    ] {
        let (v, min) = at(name, &xs(point));
        assert!(
            (v - min).abs() < 1e-9 * (1.0 + min.abs()),
            "{name}: {v} vs {min}"
        );
    }
    assert!(
        (functions::hartmann6(&xs(&[
            0.20168951, 0.15001069, 0.47687397, 0.27533243, 0.31165162, 0.65730053
        ])) - min("Hartmann6"))
        .abs()
            < 1e-12
    );
}
