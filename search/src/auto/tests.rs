use super::*;
use crate::{Mode, Value};

fn numeric() -> Space {
    Space::builder()
        .uniform("x", -2.0, 2.0)
        .loguniform("lr", 1e-4, 1e-1)
        .choice("opt", ["sgd", "adam"])
        .build()
        .unwrap()
}

fn x_of(p: &Params, name: &str) -> f64 {
    match p.get(name) {
        Some(Value::Float(v)) => *v,
        other => panic!("{name}: {other:?}"),
    }
}

/// A history of `n` completed trials of `space`, drawn at random, valued by a bowl.
fn completed(space: &Space, n: u64) -> History {
    let mut random = crate::RandomSearch::new(space.clone(), 99);
    let mut h = History::new(Mode::Min);
    for id in 0..n {
        let p = random.suggest(id, &h).unwrap();
        let v = x_of(&p, "x").powi(2);
        h.record(id, p, Status::Running);
        h.report(id, 1, v);
        h.set_status(id, Status::Completed);
    }
    h
}

fn pick(space: Space, shape: SweepShape, h: &History) -> AutoChoice {
    AutoSearch::new(
        space,
        1,
        shape,
        TpeOptions::default(),
        &AutoOptions::default(),
    )
    .decide(h.len() as TrialId, h)
}

#[test]
fn a_numeric_single_objective_sweep_gets_a_gp_until_250_trials_have_completed() {
    let space = numeric();
    let early = pick(space.clone(), SweepShape::default(), &completed(&space, 0));
    assert_eq!(early.algorithm, AutoPick::Gp, "{}", early.reason);
    assert!(
        early.reason.contains("2 numeric and 1 categorical"),
        "{}",
        early.reason
    );
    let h = completed(&space, 249);
    assert_eq!(
        pick(space.clone(), SweepShape::default(), &h).algorithm,
        AutoPick::Gp
    );
    let h = completed(&space, 250);
    let late = pick(space, SweepShape::default(), &h);
    assert_eq!(late.algorithm, AutoPick::Tpe);
    assert!(
        late.reason
            .contains("250 trials have completed, the most a GP models"),
        "{}",
        late.reason
    );
}

#[test]
fn under_rungs_the_gps_250_are_the_trials_at_the_rung_it_is_fitted_at() {
    let space = numeric();
    let rungs = SweepShape {
        early_stopping: EarlyStopping::Rungs,
        ..SweepShape::default()
    };
    // 300 trials stopped at step 1, `deep` of them at step 4 (the GP's start here is 10).
    let halving = |deep: u64| {
        let mut h = History::new(Mode::Min);
        for id in 0..300 {
            let p = space.sample(&mut crate::trial_rng(5, id));
            h.record(id, p, Status::Running);
            h.report(id, 1, 1.0);
            if id < deep {
                h.report(id, 4, 0.5);
            }
            h.set_status(id, Status::Stopped);
        }
        h
    };
    let c = pick(space.clone(), rungs, &halving(20));
    assert_eq!(c.algorithm, AutoPick::Gp, "{}", c.reason);
    let c = pick(space.clone(), rungs, &halving(9));
    assert_eq!(c.algorithm, AutoPick::Tpe);
    assert_eq!(
        c.reason,
        "250 trials have reported at the rung the GP is fitted at, the most a GP models"
    );
    // Stored before format 9: TPE under rungs from the first trial.
    let tpe_under_rungs = AutoOptions {
        gp_under_rungs: false,
        ..AutoOptions::default()
    };
    let c = AutoSearch::new(space, 1, rungs, TpeOptions::default(), &tpe_under_rungs)
        .decide(0, &History::new(Mode::Min));
    assert_eq!(
        (c.algorithm, c.reason.as_str()),
        (
            AutoPick::Tpe,
            "a scheduler stops trials early, and TPE learns from them"
        )
    );
}

#[test]
fn running_and_failed_trials_do_not_count_toward_the_gps_250() {
    let space = numeric();
    let mut h = completed(&space, 249);
    for id in 249..300 {
        let p = space.sample(&mut crate::trial_rng(5, id));
        h.record(
            id,
            p,
            if id % 2 == 0 {
                Status::Running
            } else {
                Status::Failed
            },
        );
    }
    assert_eq!(
        pick(space, SweepShape::default(), &h).algorithm,
        AutoPick::Gp
    );
}

#[test]
fn a_conditional_space_several_objectives_a_scheduler_and_mostly_choices_get_tpe() {
    let conditional = Space::builder()
        .choice("opt", ["sgd", "adam"])
        .uniform("momentum", 0.0, 0.99)
        .when("opt", "sgd")
        .uniform("x", 0.0, 1.0)
        .build()
        .unwrap();
    let h = History::new(Mode::Min);
    let c = pick(conditional, SweepShape::default(), &h);
    assert_eq!(c.algorithm, AutoPick::Tpe);
    assert!(
        c.reason.contains("conditional space (momentum)"),
        "{}",
        c.reason
    );

    let two = SweepShape {
        objectives: 2,
        ..SweepShape::default()
    };
    let c = pick(numeric(), two, &h);
    assert_eq!(
        (c.algorithm, c.reason.as_str()),
        (AutoPick::Tpe, "2 objectives")
    );

    let stopping = SweepShape {
        early_stopping: EarlyStopping::Scheduler,
        ..SweepShape::default()
    };
    assert_eq!(pick(numeric(), stopping, &h).algorithm, AutoPick::Tpe);
    let rungs = SweepShape {
        early_stopping: EarlyStopping::Rungs,
        ..SweepShape::default()
    };
    let c = pick(numeric(), rungs, &h);
    assert_eq!(c.algorithm, AutoPick::Gp);
    assert!(
        c.reason.contains("fitted at the highest rung"),
        "{}",
        c.reason
    );

    let choices = Space::builder()
        .choice("a", [1, 2, 3])
        .choice("b", ["u", "v"])
        .uniform("x", 0.0, 1.0)
        .build()
        .unwrap();
    let c = pick(choices, SweepShape::default(), &h);
    assert_eq!(c.algorithm, AutoPick::Tpe);
    assert!(
        c.reason.contains("2 of 3 parameters are choices"),
        "{}",
        c.reason
    );
}

#[test]
fn each_suggestion_is_the_chosen_searchers_own() {
    let space = numeric();
    let h = completed(&space, 20);
    let mut auto = AutoSearch::new(
        space.clone(),
        3,
        SweepShape::default(),
        TpeOptions::default(),
        &AutoOptions::default(),
    );
    let mut gp = GpSearch::new(
        space.clone(),
        3,
        gp_options(&space, &AutoOptions::default()),
    )
    .unwrap();
    assert_eq!(auto.suggest(20, &h), gp.suggest(20, &h));

    let h = completed(&space, 250);
    let mut tpe = Tpe::new(space.clone(), 3, TpeOptions::default());
    assert_eq!(auto.suggest(250, &h), tpe.suggest(250, &h));
}

#[test]
fn a_fresh_searcher_given_the_history_suggests_what_the_running_one_does() {
    // What a resumed sweep relies on: no state but the history decides.
    let space = numeric();
    let mut running = AutoSearch::new(
        space.clone(),
        11,
        SweepShape::default(),
        TpeOptions::default(),
        &AutoOptions::default(),
    );
    let mut h = History::new(Mode::Min);
    for id in 0..24 {
        let p = running.suggest(id, &h).unwrap();
        let v = (x_of(&p, "x") - 0.5).powi(2) + x_of(&p, "lr").ln().abs() * 1e-3;
        h.record(id, p, Status::Running);
        h.report(id, 1, v);
        h.set_status(id, Status::Completed);
    }
    let mut fresh = AutoSearch::new(
        space,
        11,
        SweepShape::default(),
        TpeOptions::default(),
        &AutoOptions::default(),
    );
    assert_eq!(fresh.suggest(24, &h), running.suggest(24, &h));
}

#[test]
fn the_gps_random_start_grows_with_the_dimension_from_optunas_ten() {
    let of = |d: usize| {
        let mut b = Space::builder();
        for i in 0..d {
            b = b.uniform(format!("x{i}"), 0.0, 1.0);
        }
        gp_options(&b.build().unwrap(), &AutoOptions::default()).n_startup_trials
    };
    assert_eq!((of(1), of(4), of(5), of(6), of(10)), (10, 10, 13, 15, 25));
}

#[test]
fn a_fifo_sweep_of_known_size_spends_its_last_tenth_where_the_gps_mean_is_best() {
    let space = numeric();
    let h = completed(&space, 44);
    let fifo = SweepShape {
        samples: Some(50),
        ..SweepShape::default()
    };
    let auto = |shape, options: &AutoOptions| {
        AutoSearch::new(space.clone(), 1, shape, TpeOptions::default(), options)
    };
    let a = auto(fifo, &AutoOptions::default());
    assert_eq!(a.exploit_from(), Some(45));
    assert!(!a.decide(44, &h).reason.contains("mean"));
    let last = a.decide(45, &h);
    assert_eq!(last.algorithm, AutoPick::Gp);
    assert!(
        last.reason
            .ends_with("; the last 5 of 50 trials go where its mean is best"),
        "{}",
        last.reason
    );
    // Under a scheduler, with an unknown budget, or with the share at 0 (stored before format
    // 10): every trial by expected improvement.
    let rungs = SweepShape {
        early_stopping: EarlyStopping::Rungs,
        ..fifo
    };
    let none = AutoOptions {
        gp_exploit_fraction: 0.0,
        ..AutoOptions::default()
    };
    for a in [
        auto(rungs, &AutoOptions::default()),
        auto(SweepShape::default(), &AutoOptions::default()),
        auto(fifo, &none),
    ] {
        assert_eq!(a.exploit_from(), None);
        assert!(!a.decide(49, &h).reason.contains("mean"));
    }
    // 100 trials: the last 10; a budget raised to 200 (a resume, or samples added to a running
    // sweep) moves them to its end.
    let hundred = SweepShape {
        samples: Some(100),
        ..fifo
    };
    let mut a = auto(hundred, &AutoOptions::default());
    assert_eq!(a.exploit_from(), Some(90));
    a.set_samples(200);
    assert_eq!(a.exploit_from(), Some(180));
    assert!(!a.decide(95, &h).reason.contains("mean"));
    let bad = AutoOptions {
        gp_exploit_fraction: 1.5,
        ..AutoOptions::default()
    };
    assert_eq!(bad.validate().unwrap_err().key, "gp_exploit_fraction");
}

#[test]
fn the_gp_gets_matern_32_where_the_sweep_ends_greedy_and_no_parameter_is_a_choice() {
    let space = Space::builder()
        .uniform("x", -2.0, 2.0)
        .loguniform("lr", 1e-4, 1e-1)
        .build()
        .unwrap();
    let h = completed(&space, 20);
    let auto = |space: &Space, shape, options: &AutoOptions| {
        AutoSearch::new(space.clone(), 1, shape, TpeOptions::default(), options)
    };
    let kernel_of = |a: &AutoSearch| a.gp.as_ref().unwrap().kernel();
    let fifo = SweepShape {
        samples: Some(50),
        ..SweepShape::default()
    };
    let a = auto(&space, fifo, &AutoOptions::default());
    assert_eq!(kernel_of(&a), Matern::ThreeHalves);
    let reason = a.decide(20, &h).reason;
    assert!(
        reason.contains("parameters (Matérn 3/2), fewer"),
        "{reason}"
    );
    // No known end (its samples unknown, or trials stopped at rungs): 5/2; the budget given
    // later (a resume with `--samples`) switches it, as it moves the greedy tenth.
    for shape in [
        SweepShape::default(),
        SweepShape {
            early_stopping: EarlyStopping::Rungs,
            ..fifo
        },
    ] {
        let a = auto(&space, shape, &AutoOptions::default());
        assert_eq!(kernel_of(&a), Matern::FiveHalves);
        assert!(a.decide(20, &h).reason.contains("(Matérn 5/2)"));
    }
    let mut a = auto(&space, SweepShape::default(), &AutoOptions::default());
    a.set_samples(50);
    assert_eq!(kernel_of(&a), Matern::ThreeHalves);
    assert!(a.decide(20, &h).reason.contains("(Matérn 3/2)"));
    // A choice among the parameters: 5/2; `gp_kernel` set: that, on any space.
    let mixed = numeric();
    assert_eq!(
        kernel_of(&auto(&mixed, fifo, &AutoOptions::default())),
        Matern::FiveHalves
    );
    let set = AutoOptions {
        gp_kernel: Some(Matern::ThreeHalves),
        ..AutoOptions::default()
    };
    assert_eq!(kernel_of(&auto(&mixed, fifo, &set)), Matern::ThreeHalves);
    assert_eq!(
        kernel_of(&auto(&space, SweepShape::default(), &set)),
        Matern::ThreeHalves
    );
}
