use super::super::fit::*;
use super::super::LastAnswer;
use super::*;

fn params(noise: f64) -> KernelParams {
    KernelParams {
        noise_var: noise,
        ..KernelParams::ones(1)
    }
}

#[test]
fn the_kernels_exp_is_within_one_ulp_of_libms_and_zero_below_its_range() {
    let ulps = |a: f64, b: f64| (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs();
    let mut worst = 0;
    // Dense near 0 (the kernel's usual arguments), then out to the end of the range.
    let xs = (0..200_000)
        .map(|i| -(i as f64) * 1e-4)
        .chain((0..200_000).map(|i| -(i as f64) * 708.0 / 199_999.0))
        .chain([
            -0.0,
            -1e-300,
            -f64::EPSILON,
            -0.5 * std::f64::consts::LN_2,
            -708.0,
        ]);
    for x in xs {
        worst = worst.max(ulps(exp_nonpositive(x), x.exp()));
    }
    assert!(worst <= 1, "{worst} ulps");
    assert_eq!(exp_nonpositive(0.0), 1.0);
    assert_eq!(exp_nonpositive(-708.5), 0.0);
    assert_eq!(exp_nonpositive(f64::NEG_INFINITY), 0.0);
    assert!(exp_nonpositive(f64::NAN).is_nan());
}

#[cfg(target_arch = "x86_64")]
#[test]
fn the_avx2_triangular_product_is_the_portable_one_to_the_bit() {
    if !std::is_x86_feature_detected!("avx2") {
        return;
    }
    for n in 1..=23 {
        let value = |i: usize| ((i * 37 + n * 11) % 101) as f64 / 7.0 - 6.0;
        let inv: Vec<f64> = (0..n * n)
            .map(|i| if i % n <= i / n { value(i) } else { 0.0 })
            .collect();
        let b: Vec<f64> = (0..n).map(|i| value(i + 1000) / 3.0).collect();
        let bits = |v: Vec<f64>| v.into_iter().map(f64::to_bits).collect::<Vec<_>>();
        // SAFETY: the CPU has AVX2, checked at the top.
        let avx2 = unsafe { lower_times_avx2(&inv, n, &b) };
        assert_eq!(
            bits(avx2),
            bits(lower_times_portable(&inv, n, &b)),
            "n = {n}"
        );
    }
}

/// The upper Cholesky factor U (row-major, U^T U = `a`) of the symmetric `n` x `n` matrix
/// `a`, right-looking: every update is a contiguous row minus a multiple of another, which
/// the compiler vectorises (a dot product per entry it cannot, for the order of its sum).
fn cholesky_one_at_a_time(a: &[f64], n: usize) -> Option<Vec<f64>> {
    let mut u = a.to_vec();
    for k in 0..n {
        let d = u[k * n + k];
        if d <= 0.0 || !d.is_finite() {
            return None;
        }
        let d = d.sqrt();
        let (done, rest) = u.split_at_mut((k + 1) * n);
        let row = &mut done[k * n..];
        row[k] = d;
        row[k + 1..].iter_mut().for_each(|x| *x /= d);
        for j in k + 1..n {
            let c = row[j];
            let target = &mut rest[(j - k - 1) * n + j..(j - k) * n];
            for (t, r) in target.iter_mut().zip(&row[j..]) {
                *t -= c * r;
            }
        }
    }
    // The strict lower part held the input; the factor is upper triangular.
    for i in 0..n {
        u[i * n..i * n + i].iter_mut().for_each(|x| *x = 0.0);
    }
    Some(u)
}

/// U^-1 of an upper triangular `u` (row-major), from the last row up: row i of U^-1 is
/// (e_i - sum_{k>i} U_ik row k) / U_ii, so every step is on contiguous rows.
fn upper_inverse_one_at_a_time(u: &[f64], n: usize) -> Vec<f64> {
    let mut inv = vec![0.0; n * n];
    for i in (0..n).rev() {
        let (head, done) = inv.split_at_mut((i + 1) * n);
        let row = &mut head[i * n + i..];
        row[0] = 1.0;
        for k in i + 1..n {
            let c = u[i * n + k];
            let below = &done[(k - i - 1) * n + k..(k - i) * n];
            for (r, b) in row[k - i..].iter_mut().zip(below) {
                *r -= c * b;
            }
        }
        let d = u[i * n + i];
        row.iter_mut().for_each(|r| *r /= d);
    }
    inv
}

/// (L L^T)^-1 = L^-T L^-1 from `inv` = L^-1: a sum over its rows of their outer products.
fn inverse_from_lower_inverse_one_at_a_time(inv: &[f64], n: usize) -> Vec<f64> {
    let mut out = vec![0.0; n * n];
    for i in 0..n {
        let row = &inv[i * n..=i * n + i];
        for (a, &ra) in row.iter().enumerate() {
            for (o, &rb) in out[a * n..=a * n + a].iter_mut().zip(row) {
                *o += ra * rb;
            }
        }
    }
    for a in 0..n {
        for b in 0..a {
            out[b * n + a] = out[a * n + b];
        }
    }
    out
}

#[test]
fn the_factorisations_by_panels_are_the_one_at_a_time_ones_to_the_bit() {
    for n in 1..=23 {
        // A Matérn matrix on scattered points, plus noise: positive definite.
        let x: Vec<Vec<f64>> = (0..n)
            .map(|i| vec![(i as f64 * 0.618) % 1.0, (i as f64 * 0.414) % 1.0])
            .collect();
        let mut a = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                a[i * n + j] = kernel(&KernelParams::ones(2), &x[i], &x[j], &[false, false]);
            }
            a[i * n + i] += 1e-3;
        }
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let u = cholesky(&a, n).unwrap();
        assert_eq!(
            bits(&u),
            bits(&cholesky_one_at_a_time(&a, n).unwrap()),
            "n = {n}"
        );
        let inv = upper_inverse(&u, n);
        assert_eq!(
            bits(&inv),
            bits(&upper_inverse_one_at_a_time(&u, n)),
            "n = {n}"
        );
        let lower = transpose(&inv, n);
        assert_eq!(
            bits(&inverse_from_lower_inverse(&lower, n)),
            bits(&inverse_from_lower_inverse_one_at_a_time(&lower, n)),
            "n = {n}"
        );
    }
}

#[test]
fn a_process_extended_by_more_points_is_the_one_made_on_all_of_them_to_the_bit() {
    let unit = |i: usize, d: usize| ((i * 7 + d * 13) % 31) as f64 / 30.0;
    let x: Vec<Vec<f64>> = (0..29)
        .map(|i| vec![unit(i, 0), unit(i, 1), (i % 3) as f64])
        .collect();
    let y: Vec<f64> = x.iter().map(|p| (4.0 * p[0]).sin() - p[1] + p[2]).collect();
    let categorical = vec![false, false, true];
    let params = KernelParams {
        inverse_squared_lengthscales: vec![3.0, 0.5, 1.5],
        kernel_scale: 1.3,
        noise_var: 1e-4,
        kernel: Matern::FiveHalves,
    };
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (old, n) in [(1, 2), (5, 6), (10, 29), (28, 29)] {
        let whole = GpRegressor::new(
            x[..n].to_vec(),
            y[..n].to_vec(),
            categorical.clone(),
            params.clone(),
        )
        .unwrap();
        let start = GpRegressor::new(
            x[..old].to_vec(),
            y[..old].to_vec(),
            categorical.clone(),
            params.clone(),
        )
        .unwrap();
        let extended = start.extended(x[..n].to_vec(), y[..n].to_vec()).unwrap();
        assert_eq!(bits(&extended.upper), bits(&whole.upper), "{old} -> {n}");
        assert_eq!(
            bits(&extended.chol_inverse),
            bits(&whole.chol_inverse),
            "{old} -> {n}"
        );
        assert_eq!(bits(&extended.alpha), bits(&whole.alpha), "{old} -> {n}");
        assert_eq!(
            extended.half_log_det.to_bits(),
            whole.half_log_det.to_bits()
        );
        assert_eq!(extended.columns, whole.columns);
        assert_eq!(
            extended.posterior(&[0.3, 0.6, 1.0]),
            whole.posterior(&[0.3, 0.6, 1.0])
        );
    }
    // Not an extension: other first points.
    let start = GpRegressor::new(x[1..5].to_vec(), y[1..5].to_vec(), categorical, params).unwrap();
    assert!(start.extended(x[..6].to_vec(), y[..6].to_vec()).is_none());
}

#[test]
fn the_posterior_of_two_points_worked_by_hand() {
    // k(0, 1) = e^-sqrt5 (5/3 + sqrt5 + 1) = 0.523994..., k(0.5, .) = Matérn of d^2 = 1/4
    // = 0.828649...; C = [[1 + n, m], [m, 1 + n]] with n = 1e-4.
    let (m01, mh) = (0.523_994_108_831_820_3, 0.828_649_142_418_125_5);
    let gp = GpRegressor::new(
        vec![vec![0.0], vec![1.0]],
        vec![1.0, 1.0],
        vec![false],
        params(1e-4),
    )
    .unwrap();
    let (mean, var) = gp.posterior(&[0.5]);
    // y = (1, 1): alpha = y / (1 + n + m01); mean = 2 mh alpha; var = 1 - 2 mh^2 / (1 + n + m01).
    let den = 1.0 + 1e-4 + m01;
    assert!((mean - 2.0 * mh / den).abs() < 1e-12, "{mean}");
    assert!((mean - 1.087_398_917_975_300_3).abs() < 1e-12);
    assert!((var - (1.0 - 2.0 * mh * mh / den)).abs() < 1e-12, "{var}");
    // log likelihood: -1/2 log det C - 1/2 y^T C^-1 y, det C = (1 + n)^2 - m01^2.
    let mll = -0.5 * ((1.0f64 + 1e-4).powi(2) - m01 * m01).ln() - 0.5 * (2.0 / den);
    assert!((gp.marginal_log_likelihood() - mll).abs() < 1e-12);
    assert!((mll + 0.495_770_071_096_116_9).abs() < 1e-12);

    // y = (1, -1) at 0.25: (k(0.25, 0) - k(0.25, 1)) / (1 + n - m01).
    let gp = GpRegressor::new(
        vec![vec![0.0], vec![1.0]],
        vec![1.0, -1.0],
        vec![false],
        params(1e-4),
    )
    .unwrap();
    let (mean, _) = gp.posterior(&[0.25]);
    assert!((mean - 0.578_258_170_644_483_6).abs() < 1e-12, "{mean}");
    // At a training point the variance is about the noise.
    assert!(gp.posterior(&[0.0]).1 < 2e-4);
}

#[test]
fn the_matern_32_posterior_of_two_points_worked_by_hand() {
    // k(0, 1) = e^-sqrt3 (1 + sqrt3) = 0.4833577245965077, k(0.5, .) = e^-sqrt(3/4) (1 + sqrt(3/4))
    // = 0.7848876539574506; y = (1, 1), so the mean at 0.5 is 2 k(0.5, .) / (1 + n + k(0, 1)).
    let (m01, mh) = (0.4833577245965077, 0.7848876539574506);
    let params = KernelParams {
        kernel: Matern::ThreeHalves,
        ..params(1e-4)
    };
    let gp = GpRegressor::new(
        vec![vec![0.0], vec![1.0]],
        vec![1.0, 1.0],
        vec![false],
        params,
    )
    .unwrap();
    let (mean, var) = gp.posterior(&[0.5]);
    let den = 1.0 + 1e-4 + m01;
    assert!((mean - 2.0 * mh / den).abs() < 1e-12, "{mean}");
    assert!((mean - 1.0581867497045603).abs() < 1e-12);
    assert!((var - (1.0 - 2.0 * mh * mh / den)).abs() < 1e-12, "{var}");
}

#[test]
fn posteriors_in_blocks_are_each_points_posterior_to_the_bit() {
    // Where the CPU has AVX2 the blocks run in its build, the single points in the
    // portable one: this holds the two builds to the same bits as well.
    // 37 trials (no multiple of the block) in 3 dimensions, one categorical; 21 points
    // (two whole blocks and a part).
    let unit = |i: usize, d: usize| ((i * 7 + d * 13) % 31) as f64 / 30.0;
    let x: Vec<Vec<f64>> = (0..37)
        .map(|i| vec![unit(i, 0), unit(i, 1), (i % 3) as f64])
        .collect();
    let y: Vec<f64> = x.iter().map(|p| (4.0 * p[0]).sin() - p[1] + p[2]).collect();
    let gp = fit(
        &x,
        &y,
        &[false, false, true],
        Matern::FiveHalves,
        1e-6,
        false,
        None,
    );
    let points: Vec<Vec<f64>> = (0..21)
        .map(|i| vec![unit(i + 50, 0), unit(i + 50, 1), (i % 3) as f64])
        .collect();
    let batch = gp.posteriors(&points);
    assert_eq!(batch.len(), points.len());
    for (point, (mean, var)) in points.iter().zip(batch) {
        let (m, v) = gp.posterior(point);
        assert_eq!((mean.to_bits(), var.to_bits()), (m.to_bits(), v.to_bits()));
    }
}

#[test]
fn the_posteriors_gradient_matches_finite_differences() {
    let x: Vec<Vec<f64>> = (0..7)
        .map(|i| {
            vec![
                (i as f64 * 0.37) % 1.0,
                (i * 3 % 4) as f64,
                (i as f64 * 0.71) % 1.0,
            ]
        })
        .collect();
    let y: Vec<f64> = x.iter().map(|p| p[0].sin() + 0.3 * p[1] - p[2]).collect();
    for kernel in [Matern::FiveHalves, Matern::ThreeHalves] {
        let params = KernelParams {
            inverse_squared_lengthscales: vec![3.0, 1.0, 0.5],
            kernel_scale: 1.3,
            noise_var: 1e-3,
            kernel,
        };
        let gp = GpRegressor::new(x.clone(), y.clone(), vec![false, true, false], params).unwrap();
        posterior_gradient_matches_finite_differences(&gp);
    }
}

fn posterior_gradient_matches_finite_differences(gp: &GpRegressor) {
    let point = [0.42, 2.0, 0.13];
    let (mean, var, dmean, dvar) = gp.posterior_with_gradient(&point);
    assert_eq!((mean, var), gp.posterior(&point));
    assert_eq!((dmean[1], dvar[1]), (0.0, 0.0));
    for i in [0, 2] {
        let h = 1e-6;
        let at = |d: f64| {
            let mut p = point;
            p[i] += d;
            gp.posterior(&p)
        };
        let (up, down) = (at(h), at(-h));
        let numeric_mean = (up.0 - down.0) / (2.0 * h);
        let numeric_var = (up.1 - down.1) / (2.0 * h);
        assert!(
            (numeric_mean - dmean[i]).abs() < 1e-6,
            "{i}: {numeric_mean} {}",
            dmean[i]
        );
        assert!(
            (numeric_var - dvar[i]).abs() < 1e-6,
            "{i}: {numeric_var} {}",
            dvar[i]
        );
    }
}

#[test]
fn categorical_dimensions_use_the_hamming_distance() {
    let p = KernelParams::ones(2);
    let near = kernel(&p, &[0.0, 2.0], &[0.0, 3.0], &[false, true]);
    let far = kernel(&p, &[0.0, 2.0], &[0.0, 7.0], &[false, true]);
    assert_eq!(near, far); // any two different choices are one apart
    assert_eq!(near, Matern::FiveHalves.at(1.0).0);
    assert_eq!(kernel(&p, &[0.3, 2.0], &[0.3, 2.0], &[false, true]), 1.0);
}

#[cfg(target_arch = "x86_64")]
#[test]
fn the_avx2_build_of_the_loss_is_the_portable_one_to_the_bit() {
    if !std::is_x86_feature_detected!("avx2") {
        return;
    }
    // Enough points for every vector loop to run whole registers and a remainder.
    let x: Vec<Vec<f64>> = (0..37)
        .map(|i| {
            vec![
                (i as f64 * 0.618) % 1.0,
                (i as f64 * 0.414) % 1.0,
                (i % 3) as f64,
            ]
        })
        .collect();
    let y: Vec<f64> = x
        .iter()
        .map(|p| (4.0 * p[0]).sin() - p[1] + 0.2 * p[2])
        .collect();
    let categorical = [false, false, true];
    let diffs = PairDiffs::new(&x, &categorical);
    let last = LastAnswer::default();
    let problem = Fitting {
        x: &x,
        y: &y,
        categorical: &categorical,
        diffs: &diffs,
        minimum_noise: 1e-6,
        deterministic: false,
        kernel: Matern::FiveHalves,
        last: &last,
    };
    let raw = vec![0.7, -0.2, 0.1, 0.4, -3.0];
    // `compute_portable` called here is the baseline build; `compute` runs the AVX2 one.
    let portable = problem.compute_portable(&raw).unwrap();
    let avx2 = problem.compute(&raw).unwrap();
    assert_eq!(portable.0.to_bits(), avx2.0.to_bits());
    let bits = |g: &[f64]| g.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&portable.1), bits(&avx2.1));
}

#[test]
fn the_loss_gradient_matches_finite_differences() {
    let x: Vec<Vec<f64>> = (0..9)
        .map(|i| vec![(i as f64 * 0.37) % 1.0, (i * 3 % 4) as f64])
        .collect();
    let y: Vec<f64> = x.iter().map(|p| p[0].sin() + 0.3 * p[1]).collect();
    let cases = [false, true].into_iter().flat_map(|deterministic| {
        [Matern::FiveHalves, Matern::ThreeHalves].map(|kernel| (deterministic, kernel))
    });
    for (deterministic, kernel) in cases {
        let diffs = PairDiffs::new(&x, &[false, true]);
        let last = LastAnswer::default();
        let problem = Fitting {
            x: &x,
            y: &y,
            categorical: &[false, true],
            diffs: &diffs,
            minimum_noise: 1e-6,
            deterministic,
            kernel,
            last: &last,
        };
        let raw = vec![0.3, -0.5, 0.2, -2.0];
        let (_, gradient) = problem.loss_and_gradient(&raw).unwrap();
        for j in 0..raw.len() {
            let h = 1e-6;
            let at = |d: f64| {
                let mut r = raw.clone();
                r[j] += d;
                problem.loss_and_gradient(&r).unwrap().0
            };
            let numeric = (at(h) - at(-h)) / (2.0 * h);
            assert!(
                (numeric - gradient[j]).abs() < 1e-5 * (1.0 + numeric.abs()),
                "deterministic {deterministic}, {kernel:?}, parameter {j}: {numeric} against {}",
                gradient[j]
            );
        }
    }
}

#[test]
fn likelihood_and_fit_agree_with_optunas_on_its_own_fits() {
    // testdata/optuna_fits.py: Optuna 5.0.0's fit_kernel_params on three data sets (one
    // with a categorical dimension), its parameters and its penalised loss there.
    let cases: Vec<serde_json::Value> =
        serde_json::from_str(include_str!("../testdata/optuna_fits.json")).unwrap();
    for (i, case) in cases.iter().enumerate() {
        let get = |k: &str| serde_json::from_value::<Vec<f64>>(case[k].clone()).unwrap();
        let x: Vec<Vec<f64>> = serde_json::from_value(case["x"].clone()).unwrap();
        let y = get("y");
        let categorical: Vec<bool> = serde_json::from_value(case["categorical"].clone()).unwrap();
        let theirs = KernelParams {
            inverse_squared_lengthscales: get("inverse_squared_lengthscales"),
            kernel_scale: case["kernel_scale"].as_f64().unwrap(),
            noise_var: case["noise_var"].as_f64().unwrap(),
            kernel: Matern::FiveHalves,
        };
        let diffs = PairDiffs::new(&x, &categorical);
        let last = LastAnswer::default();
        let problem = Fitting {
            x: &x,
            y: &y,
            categorical: &categorical,
            diffs: &diffs,
            minimum_noise: 1e-6,
            deterministic: false,
            kernel: Matern::FiveHalves,
            last: &last,
        };
        let loss = |p: &KernelParams| problem.loss_and_gradient(&problem.raw_exact(p)).unwrap().0;
        // The same penalised likelihood at Optuna's parameters: kernel, priors, constants.
        let expected = case["loss"].as_f64().unwrap();
        assert!(
            (loss(&theirs) - expected).abs() < 1e-9 * expected.abs().max(1.0),
            "case {i}: {} vs {expected}",
            loss(&theirs)
        );
        // And the fit finds Optuna's optimum: the loss to 1e-3, each parameter to 2 %.
        let ours = fit(&x, &y, &categorical, Matern::FiveHalves, 1e-6, false, None);
        let p = ours.params();
        assert!(
            (loss(p) - expected).abs() < 1e-3,
            "case {i}: {} vs {expected}",
            loss(p)
        );
        let pairs = p
            .inverse_squared_lengthscales
            .iter()
            .zip(&theirs.inverse_squared_lengthscales)
            .chain([(&p.kernel_scale, &theirs.kernel_scale)]);
        for (a, b) in pairs {
            assert!((a / b - 1.0).abs() < 0.02, "case {i}: {p:?} vs {theirs:?}");
        }
    }
}

#[test]
fn fitting_raises_the_penalised_likelihood_and_finds_the_relevant_dimension() {
    // y depends on the first dimension only: its length scale ends shorter.
    let x: Vec<Vec<f64>> = (0..30)
        .map(|i| vec![(i as f64 * 0.618_034) % 1.0, (i as f64 * 0.414_214) % 1.0])
        .collect();
    let y: Vec<f64> = x.iter().map(|p| (5.0 * p[0]).sin()).collect();
    let diffs = PairDiffs::new(&x, &[false, false]);
    let last = LastAnswer::default();
    let problem = Fitting {
        x: &x,
        y: &y,
        categorical: &[false, false],
        diffs: &diffs,
        minimum_noise: 1e-6,
        deterministic: false,
        kernel: Matern::FiveHalves,
        last: &last,
    };
    let start = problem.raw(&KernelParams::ones(2));
    let before = problem.loss_and_gradient(&start).unwrap().0;
    let gp = fit(
        &x,
        &y,
        &[false, false],
        Matern::FiveHalves,
        1e-6,
        false,
        None,
    );
    let after = problem
        .loss_and_gradient(&problem.raw(gp.params()))
        .unwrap()
        .0;
    assert!(after < before - 1.0, "{before} -> {after}");
    let isl = &gp.params().inverse_squared_lengthscales;
    assert!(isl[0] > 10.0 * isl[1], "{isl:?}");
    // It predicts a point it has not seen.
    let (mean, var) = gp.posterior(&[0.5, 0.5]);
    assert!(
        (mean - 2.5f64.sin()).abs() < 0.05,
        "{mean} +- {}",
        var.sqrt()
    );
}

#[test]
fn a_singular_matrix_gets_jitter_and_mismatched_dimensions_an_error() {
    // Two identical points and no noise: singular without jitter.
    let gp = GpRegressor::new(
        vec![vec![0.5], vec![0.5]],
        vec![1.0, 1.0],
        vec![false],
        params(0.0),
    )
    .unwrap();
    assert!((gp.posterior(&[0.5]).0 - 1.0).abs() < 1e-3);
    let err =
        GpRegressor::new(vec![vec![0.5, 1.0]], vec![1.0], vec![false], params(0.1)).unwrap_err();
    assert_eq!(
        err,
        GpError::Dimensions {
            expected: 1,
            found: 2
        }
    );
}
