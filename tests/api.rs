//! The Rust API: `Tuner::new(space)...fit(closure)` and `Tuner::resume(dir)`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tune::{Algorithm, Mode, Space, Status, Stop, StopConditions, TuneError, Tuner};

fn space() -> Space {
    Space::builder()
        .uniform("x", -5.0, 5.0)
        .choice("opt", ["sgd", "adam"])
        .uniform("momentum", 0.0, 1.0)
        .when("opt", "sgd")
        .build()
        .unwrap()
}

#[test]
fn fit_runs_every_trial_and_finds_the_best() {
    let tmp = tempfile::tempdir().unwrap();
    let result = Tuner::new(space())
        .metric("score", Mode::Max)
        .samples(30)
        .seed(4)
        .cpu_slots(4)
        .dir(tmp.path().join("api"))
        .fit(|ctx| {
            let x = ctx.params().f64("x")?;
            let opt = ctx.params().str("opt")?;
            // Conditional parameters are there exactly when active.
            assert_eq!(ctx.params().contains("momentum"), opt == "sgd");
            for step in 1..=3 {
                ctx.report(step, [("score", -(x * x) + step as f64), ("x", x)])?;
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(result.trials().unwrap().len(), 30);
    assert!(result
        .trials()
        .unwrap()
        .iter()
        .all(|t| t.status == Status::Completed && t.results.len() == 3));
    let best = result.best().unwrap();
    let best_x = best.params.f64("x").unwrap();
    for t in result.trials().unwrap() {
        assert!(t.params.f64("x").unwrap().abs() >= best_x.abs());
    }
    assert_eq!(best.value("score"), Some(-(best_x * best_x) + 3.0));
    assert!(result.dir().join("tune.db").is_dir());
}

#[test]
fn errors_panics_and_bad_metrics_fail_their_trials_only() {
    let tmp = tempfile::tempdir().unwrap();
    let result = Tuner::new(Space::builder().int("case", 0, 4).build().unwrap())
        .samples(40)
        .cpu_slots(2)
        .dir(tmp.path().join("fail"))
        // Four cases in five fail: never stop for failures in a row.
        .stop_when(StopConditions {
            max_failed_trials: 0,
            ..StopConditions::default()
        })
        .fit(|ctx| {
            match ctx.params().i64("case")? {
                0 => ctx.report(1, [("loss", 1.0)])?,
                1 => return Err("objective gave up".into()),
                2 => panic!("boom"),
                3 => ctx.report(1, [("loss", f64::INFINITY)])?,
                _ => ctx.report(1, [("acc", 1.0)])?,
            }
            Ok(())
        })
        .unwrap();
    for t in result.trials().unwrap() {
        let case = t.params.i64("case").unwrap();
        let expected = match case {
            0 => None,
            1 => Some("objective gave up".to_string()),
            2 => Some("the objective panicked: boom".to_string()),
            3 => Some("`loss` was inf at step 1".to_string()),
            _ => Some("the report at step 1 has no `loss` (it had: acc)".to_string()),
        };
        assert_eq!(t.error, expected, "case {case}");
        let status = if case == 0 {
            Status::Completed
        } else {
            Status::Failed
        };
        assert_eq!(t.status, status, "case {case}");
    }
}

#[test]
fn a_report_after_a_rejected_metric_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let later = Arc::new(AtomicUsize::new(0));
    let seen = later.clone();
    let result = Tuner::new(Space::builder().uniform("x", 0.0, 1.0).build().unwrap())
        .samples(1)
        .dir(tmp.path().join("r"))
        .fit(move |ctx| {
            let first = ctx.report(1, [("loss", f64::NAN)]);
            // Not kept: no decision the objective could take as the report's acknowledgement.
            assert_eq!(first, Err(Stop::Interrupted));
            // The objective ignores it; its next report is refused too.
            if ctx.report(2, [("loss", 1.0)]).is_err() {
                seen.fetch_add(1, Ordering::SeqCst);
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(later.load(Ordering::SeqCst), 1);
    let t = &result.trials().unwrap()[0];
    assert_eq!(t.status, Status::Failed);
    assert!(t.results.is_empty());
}

#[test]
fn retries_give_a_failed_trial_more_attempts() {
    let tmp = tempfile::tempdir().unwrap();
    let result = Tuner::new(Space::builder().uniform("x", 0.0, 1.0).build().unwrap())
        .samples(3)
        .max_failures(2)
        .dir(tmp.path().join("retry"))
        .fit(|ctx| {
            if ctx.attempt() < 3 {
                return Err(format!("attempt {} failed", ctx.attempt()).into());
            }
            ctx.report(1, [("loss", 0.5)])?;
            Ok(())
        })
        .unwrap();
    for t in result.trials().unwrap() {
        assert_eq!(
            (t.status, t.attempts, t.results[0].attempt),
            (Status::Completed, 3, 3)
        );
        assert_eq!(t.error, None);
    }
}

#[test]
fn resume_extends_the_budget_and_keeps_finished_trials() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("grow");
    let objective = |ctx: &mut tune::TrialContext| -> Result<(), tune::BoxError> {
        let x = ctx.params().f64("x")?;
        ctx.report(1, [("loss", x * x)])?;
        Ok(())
    };
    let first = Tuner::new(space())
        .samples(5)
        .seed(8)
        .dir(&dir)
        .fit(objective)
        .unwrap()
        .trials()
        .unwrap();
    let more = Tuner::resume(&dir).samples(9).fit(objective).unwrap();
    assert_eq!(more.trials().unwrap().len(), 9);
    assert_eq!(&more.trials().unwrap()[..5], first);
    // The same sweep in one go gives the same params for every id.
    let whole = Tuner::new(space())
        .samples(9)
        .seed(8)
        .dir(tmp.path().join("whole"))
        .fit(objective)
        .unwrap();
    for (a, b) in more.trials().unwrap().iter().zip(whole.trials().unwrap()) {
        assert_eq!(a.params, b.params);
    }
}

#[test]
fn bad_settings_are_input_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let ok = |_: &mut tune::TrialContext| -> Result<(), tune::BoxError> { Ok(()) };
    let err = Tuner::new(space())
        .samples(0)
        .dir(tmp.path().join("a"))
        .fit(ok)
        .unwrap_err();
    // Worded as a spec file's error is, without the file's place.
    assert!(err.is_input(), "{err}");
    assert_eq!(
        err.to_string(),
        "`samples`: expected at least 1 trial, found 0"
    );
    let bad_asha = tune::SchedulerSpec::Asha(tune::AshaConfig {
        reduction_factor: 1,
        ..Default::default()
    });
    let err = Tuner::new(space())
        .scheduler(bad_asha)
        .dir(tmp.path().join("c"))
        .fit(ok)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "[scheduler] `reduction_factor`: expected at least 2, found 1"
    );
    let err = Tuner::new(space())
        .algorithm(Algorithm::Grid)
        .dir(tmp.path().join("b"))
        .fit(ok)
        .unwrap_err();
    assert!(
        err.is_input() && err.to_string().contains("grid search needs"),
        "{err}"
    );
    assert!(!tmp.path().join("b").exists());
    let err = Tuner::resume(tmp.path().join("nothing"))
        .fit(ok)
        .unwrap_err();
    assert!(matches!(err, TuneError::NotAnExperiment { .. }), "{err}");
}

#[test]
fn an_experiment_is_locked_while_it_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("busy");
    let inner_dir = dir.clone();
    let result = Tuner::new(space())
        .samples(1)
        .dir(&dir)
        .fit(move |ctx| {
            // A second process (here: a second open) cannot take the experiment over.
            let other = tune::experiment::Experiment::open(&inner_dir);
            let msg = other.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(msg.contains("in use by another tune process"), "{msg}");
            ctx.report(1, [("loss", 1.0)])?;
            Ok(())
        })
        .unwrap();
    assert_eq!(result.trials().unwrap()[0].status, Status::Completed);
}

#[test]
fn hyperband_pauses_and_resumes_closures_from_their_checkpoints() {
    use tune::{HyperBandConfig, SchedulerSpec};
    let tmp = tempfile::tempdir().unwrap();
    let hyperband = SchedulerSpec::Hyperband(HyperBandConfig {
        max_t: 81,
        ..HyperBandConfig::default()
    });
    let result = Tuner::new(Space::builder().uniform("x", 0.0, 1.0).build().unwrap())
        .samples(143)
        .cpu_slots(3)
        .scheduler(hyperband)
        .dir(tmp.path().join("hb"))
        .fit(|ctx| checkpointed(ctx, 81, |x, step| x + 1.0 / step as f64))
        .unwrap();
    let mut ended = std::collections::HashMap::new();
    for t in result.trials().unwrap() {
        let steps: Vec<u64> = t.results.iter().map(|r| r.step).collect();
        assert_eq!(
            steps,
            (1..=steps.len() as u64).collect::<Vec<_>>(),
            "trial {}",
            t.id
        );
        *ended.entry((t.status, *steps.last().unwrap())).or_insert(0) += 1;
    }
    let stopped = |s: u64| ended.get(&(Status::Stopped, s)).copied().unwrap_or(0);
    assert_eq!([1, 3, 9, 27].map(stopped), [54, 41, 24, 14], "{ended:?}");
    assert_eq!(ended.get(&(Status::Completed, 81)), Some(&10), "{ended:?}");
    // The first bracket (ids 0..81) keeps the lowest losses at step 1, i.e. the smallest x:
    // the 27 of its trials that went past rung 1 are exactly its 27 smallest.
    let trials = result.trials().unwrap();
    let first: Vec<&tune::Trial> = trials[..81].iter().collect();
    let mut xs: Vec<f64> = first.iter().map(|t| t.params.f64("x").unwrap()).collect();
    xs.sort_by(f64::total_cmp);
    let went_on: Vec<f64> = first
        .iter()
        .filter(|t| t.results.len() > 1)
        .map(|t| t.params.f64("x").unwrap())
        .collect();
    assert_eq!(went_on.len(), 27);
    assert!(went_on.iter().all(|&x| x <= xs[26]), "{went_on:?}");
}

#[test]
fn a_retry_that_reports_nothing_fails_despite_earlier_results() {
    let tmp = tempfile::tempdir().unwrap();
    let result = Tuner::new(Space::builder().uniform("x", 0.0, 1.0).build().unwrap())
        .samples(1)
        .max_failures(1)
        .dir(tmp.path().join("retry-silent"))
        .fit(|ctx| {
            if ctx.attempt() == 1 {
                ctx.report(1, [("loss", 0.5)])?;
                return Err("crashed after a report".into());
            }
            // The retry starts afresh (no checkpoint) and ends without a report.
            Ok(())
        })
        .unwrap();
    let t = &result.trials().unwrap()[0];
    assert_eq!(t.status, Status::Failed);
    assert_eq!(
        t.error.as_deref(),
        Some("the objective ended without reporting `loss`")
    );
    assert_eq!(t.attempts, 2);
}

#[test]
fn a_resumed_sweep_refuses_settings_that_would_change_its_decisions() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fixed");
    let objective = |ctx: &mut tune::TrialContext| -> Result<(), tune::BoxError> {
        ctx.report(1, [("loss", ctx.params().f64("x")?)])?;
        Ok(())
    };
    Tuner::new(space())
        .samples(2)
        .dir(&dir)
        .fit(objective)
        .unwrap();
    let err = Tuner::resume(&dir)
        .seed(99)
        .metric("acc", Mode::Max)
        .fit(objective)
        .unwrap_err();
    assert!(err.is_input());
    assert!(
        err.to_string()
            .starts_with("`seed` cannot change a sweep being resumed"),
        "{err}"
    );
    // Where and how long it runs can change; the budget can grow.
    let more = Tuner::resume(&dir)
        .cpu_slots(1)
        .samples(3)
        .fit(objective)
        .unwrap();
    assert_eq!(more.trials().unwrap().len(), 3);
}

#[test]
fn a_closure_timeout_fails_the_trial_at_its_next_report() {
    let tmp = tempfile::tempdir().unwrap();
    let result = Tuner::new(Space::builder().uniform("x", 0.0, 1.0).build().unwrap())
        .samples(1)
        .timeout(std::time::Duration::from_millis(1))
        .dir(tmp.path().join("slow"))
        .fit(|ctx| {
            ctx.report(1, [("loss", 1.0)])?;
            // Past the limit for sure: the clock is waited on, not slept on.
            let past = std::time::Instant::now() + std::time::Duration::from_millis(2);
            while std::time::Instant::now() < past {
                std::hint::spin_loop();
            }
            ctx.report(2, [("loss", 0.5)])?;
            Ok(())
        })
        .unwrap();
    let t = &result.trials().unwrap()[0];
    assert_eq!(t.status, Status::Failed);
    assert_eq!(t.error.as_deref(), Some("timed out after 0.001 s"));
}

#[test]
fn the_best_params_come_back_typed() {
    #[derive(serde::Deserialize, Debug)]
    struct Best {
        x: f64,
        opt: String,
        momentum: Option<f64>,
    }
    let tmp = tempfile::tempdir().unwrap();
    let result = Tuner::new(space())
        .samples(6)
        .dir(tmp.path().join("typed"))
        .fit(|ctx| {
            ctx.report(1, [("loss", ctx.params().f64("x")?.abs())])?;
            Ok(())
        })
        .unwrap();
    let best: Best = result.best_params().unwrap().unwrap();
    let trial = result.best().unwrap();
    assert_eq!(best.x, trial.params.f64("x").unwrap());
    assert_eq!(best.opt, trial.params.str("opt").unwrap());
    assert_eq!(best.momentum.is_some(), best.opt == "sgd");
    #[derive(serde::Deserialize, Debug)]
    struct Wrong {
        #[allow(dead_code)]
        lr: f64,
    }
    let err = result.best_params::<Wrong>().unwrap_err().to_string();
    assert!(
        err.contains("do not fit the type asked for: missing field `lr`"),
        "{err}"
    );
}

/// Which searcher `auto` named for each trial.
fn suggested_by(trials: &[tune::Trial]) -> Vec<&'static str> {
    trials
        .iter()
        .map(|t| {
            t.suggested_by
                .as_ref()
                .map_or("none", |c| c.algorithm.as_str())
        })
        .collect()
}

#[test]
fn auto_gives_a_numeric_closure_sweep_to_a_gp_and_a_conditional_one_to_tpe() {
    let tmp = tempfile::tempdir().unwrap();
    let numeric = Space::builder()
        .uniform("x", -5.0, 5.0)
        .uniform("y", -5.0, 5.0)
        .build()
        .unwrap();
    let bowl = |ctx: &mut tune::TrialContext| -> Result<(), tune::BoxError> {
        let x = ctx.params().f64("x")?;
        let y = ctx.params().f64("y").unwrap_or(0.0);
        ctx.report(1, [("loss", (x - 1.0).powi(2) + y * y)])?;
        Ok(())
    };
    let trials = Tuner::new(numeric)
        .algorithm(Algorithm::Auto)
        .samples(12)
        .seed(3)
        .cpu_slots(1)
        .dir(tmp.path().join("numeric"))
        .fit(bowl)
        .unwrap()
        .trials()
        .unwrap();
    assert_eq!(suggested_by(&trials), vec!["gp"; 12]);
    let reason = &trials[0].suggested_by.as_ref().unwrap().reason;
    assert!(reason.contains("2 numeric and 0 categorical"), "{reason}");

    let trials = Tuner::new(space())
        .algorithm(Algorithm::Auto)
        .samples(6)
        .dir(tmp.path().join("conditional"))
        .fit(bowl)
        .unwrap()
        .trials()
        .unwrap();
    assert_eq!(suggested_by(&trials), vec!["tpe"; 6]);
    let reason = &trials[0].suggested_by.as_ref().unwrap().reason;
    assert!(reason.contains("conditional space (momentum)"), "{reason}");
}

#[test]
fn auto_gives_a_sweep_with_two_objectives_to_tpe() {
    let tmp = tempfile::tempdir().unwrap();
    let space = Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
    let result = Tuner::new(space)
        .objectives([("loss", Mode::Min), ("size", Mode::Min)])
        .algorithm(Algorithm::Auto)
        .samples(8)
        .dir(tmp.path().join("front"))
        .fit(|ctx| {
            let x = ctx.params().f64("x")?;
            ctx.report(1, [("loss", x), ("size", 1.0 - x)])?;
            Ok(())
        })
        .unwrap();
    let trials = result.trials().unwrap();
    assert_eq!(suggested_by(&trials), vec!["tpe"; 8]);
    assert_eq!(
        trials[0].suggested_by.as_ref().unwrap().reason,
        "2 objectives"
    );
}

#[test]
fn a_resumed_auto_sweep_suggests_what_the_sweep_run_in_one_go_does() {
    let tmp = tempfile::tempdir().unwrap();
    let space = || {
        Space::builder()
            .uniform("x", -5.0, 5.0)
            .loguniform("lr", 1e-4, 1.0)
            .build()
            .unwrap()
    };
    let objective = |ctx: &mut tune::TrialContext| -> Result<(), tune::BoxError> {
        let x = ctx.params().f64("x")?;
        let lr = ctx.params().f64("lr")?;
        ctx.report(1, [("loss", (x - 2.0).powi(2) + (lr.ln() + 4.0).powi(2))])?;
        Ok(())
    };
    let sweep = |name: &str, samples: u64, options: &tune::AutoOptions| {
        Tuner::new(space())
            .search(tune::SearchSpec::Auto(options.clone()))
            .samples(samples)
            .seed(21)
            .cpu_slots(1)
            .dir(tmp.path().join(name))
            .fit(objective)
            .unwrap()
    };
    let extended = |name: &str, options: &tune::AutoOptions| {
        // GP's ten random trials, then two of its own before the resume and four after.
        sweep(name, 12, options);
        Tuner::resume(tmp.path().join(name))
            .samples(16)
            .fit(objective)
            .unwrap()
            .trials()
            .unwrap()
    };
    let params = |ts: &[tune::Trial]| ts.iter().map(|t| t.params.clone()).collect::<Vec<_>>();
    let reason = |t: &tune::Trial| t.suggested_by.as_ref().unwrap().reason.clone();
    // With no trials spent where the GP's mean is best, the extension is the sweep run in one
    // go with the larger budget.
    let by_ei = tune::AutoOptions {
        gp_exploit_fraction: 0.0,
        ..Default::default()
    };
    let resumed = extended("resumed by EI", &by_ei);
    let whole = sweep("whole by EI", 16, &by_ei).trials().unwrap();
    assert_eq!(params(&resumed), params(&whole));
    assert_eq!(suggested_by(&resumed), vec!["gp"; 16]);
    // By default the last tenth of each budget is: the first run's (trial 11 of 12) stays as
    // it was, and the extension's is the last two of 16, as in the one-go sweep.
    let defaults = tune::AutoOptions::default();
    let resumed = extended("resumed", &defaults);
    let whole = sweep("whole", 16, &defaults).trials().unwrap();
    assert_eq!(params(&resumed)[..11], params(&whole)[..11]);
    assert_ne!(resumed[11].params, whole[11].params);
    assert!(reason(&resumed[11]).ends_with("the last 1 of 12 trials go where its mean is best"));
    assert!(
        !reason(&whole[11]).contains("mean"),
        "{}",
        reason(&whole[11])
    );
    for ts in [&resumed, &whole] {
        assert!(!reason(&ts[13]).contains("mean"), "{}", reason(&ts[13]));
        assert!(reason(&ts[14]).ends_with("the last 2 of 16 trials go where its mean is best"));
    }
    assert_eq!(suggested_by(&resumed), vec!["gp"; 16]);
}

#[test]
fn auto_on_a_2000_trial_budget_hands_the_sweep_from_its_gp_to_tpe_at_250_completed() {
    let tmp = tempfile::tempdir().unwrap();
    let space = Space::builder()
        .uniform("x", -5.0, 5.0)
        .uniform("y", -5.0, 5.0)
        .build()
        .unwrap();
    let loss = |x: f64, y: f64| (x - 1.0).powi(2) + y * y;
    // 240 trials of an earlier sweep count as completed: the switch comes at this sweep's
    // tenth trial, not after 250 GP suggestions (minutes in a debug build).
    let prior: Vec<tune::PriorTrial> = (0..240)
        .map(|i| {
            let (x, y) = (-5.0 + (i % 16) as f64 * 0.6, -5.0 + (i / 16) as f64 * 0.6);
            let mut params = tune::Params::default();
            params.insert("x", tune::Value::Float(x));
            params.insert("y", tune::Value::Float(y));
            tune::PriorTrial {
                params,
                value: loss(x, y),
            }
        })
        .collect();
    let trials = Tuner::new(space)
        .algorithm(Algorithm::Auto)
        .warm_start(tune::WarmStart {
            from: "a grid".into(),
            trials: prior,
        })
        .samples(2000)
        .seed(5)
        .cpu_slots(1)
        .dir(tmp.path().join("long"))
        .fit(move |ctx| {
            let x = ctx.params().f64("x")?;
            let y = ctx.params().f64("y")?;
            ctx.report(1, [("loss", loss(x, y))])?;
            Ok(())
        })
        .unwrap()
        .trials()
        .unwrap();
    let by = suggested_by(&trials);
    // One slot: trial n is suggested with 240 + n trials completed.
    assert_eq!(by[..10], vec!["gp"; 10][..]);
    assert_eq!(by[10..], vec!["tpe"; 1990][..]);
    let reason = &trials[10].suggested_by.as_ref().unwrap().reason;
    assert_eq!(reason, "250 trials have completed, the most a GP models");
}

/// Reports `loss(x, step)` up to step `last`, going on after the step its checkpoint holds
/// (written before each report); a pause returns, to be resumed.
fn checkpointed(
    ctx: &mut tune::TrialContext,
    last: u64,
    loss: impl Fn(f64, u64) -> f64,
) -> Result<(), tune::BoxError> {
    let x = ctx.params().f64("x")?;
    let first = match ctx.restore_dir() {
        Some(dir) => {
            std::fs::read_to_string(dir.join("step"))?
                .trim()
                .parse::<u64>()?
                + 1
        }
        None => 1,
    };
    for step in first..=last {
        std::fs::write(ctx.checkpoint_dir()?.join("step"), step.to_string())?;
        match ctx.report(step, [("loss", loss(x, step))]) {
            Ok(()) => {}
            Err(Stop::Paused) => return Ok(()),
            Err(stop) => return Err(stop.into()),
        }
    }
    Ok(())
}

/// Curves that cross (small `x` starts best, `x` near 0.7 ends best), as long as the
/// scheduler lets them run.
fn crossing_curves(ctx: &mut tune::TrialContext) -> Result<(), tune::BoxError> {
    checkpointed(ctx, 1000, |x, step| {
        (x - 0.7) * (x - 0.7) + (1.0 - x) / step as f64
    })
}

fn asha_sweep(max_t: u64) -> tune::SchedulerSpec {
    tune::SchedulerSpec::Asha(tune::AshaConfig {
        max_t,
        grace_period: Some(1),
        reduction_factor: 3,
        ..Default::default()
    })
}

/// A trial as decided: its status, params and (step, loss) pairs.
type Decided = (Status, tune::Params, Vec<(u64, f64)>);

fn decided(trials: &[tune::Trial]) -> Vec<Decided> {
    (trials.iter())
        .map(|t| {
            let results = t
                .results
                .iter()
                .map(|r| (r.step, r.metrics["loss"]))
                .collect();
            (t.status, t.params.clone(), results)
        })
        .collect()
}

#[test]
fn auto_under_asha_fits_its_gp_at_a_rung_and_a_resumed_sweep_decides_the_same() {
    let tmp = tempfile::tempdir().unwrap();
    let sweep = |algorithm: Algorithm, samples: u64, dir: &str| {
        Tuner::new(Space::builder().uniform("x", 0.0, 1.0).build().unwrap())
            .algorithm(algorithm)
            .samples(samples)
            .seed(9)
            .cpu_slots(1)
            .scheduler(asha_sweep(9))
            .dir(tmp.path().join(dir))
    };
    // The GP's ten random trials, six of its own, a kill-free stop, and fourteen more.
    sweep(Algorithm::Auto, 16, "resumed")
        .fit(crossing_curves)
        .unwrap();
    let resumed = Tuner::resume(tmp.path().join("resumed"))
        .samples(30)
        .fit(crossing_curves)
        .unwrap()
        .trials()
        .unwrap();
    let whole = sweep(Algorithm::Auto, 30, "whole")
        .fit(crossing_curves)
        .unwrap()
        .trials()
        .unwrap();
    assert_eq!(decided(&resumed), decided(&whole));
    assert_eq!(suggested_by(&whole), vec!["gp"; 30]);
    let reason = &whole[0].suggested_by.as_ref().unwrap().reason;
    assert!(reason.contains("fitted at the highest rung"), "{reason}");
    // Most trials stop at step 1 or 3: of the first 15, fewer than the GP's ten random ones
    // complete, so a GP of completed trials would still draw at random at trial 15; fitted
    // at a rung, it does not.
    let completed = (whole[..15].iter())
        .filter(|t| t.status == Status::Completed)
        .count();
    assert!(completed < 10, "{completed} completed");
    let random = sweep(Algorithm::Random, 30, "random")
        .fit(crossing_curves)
        .unwrap()
        .trials()
        .unwrap();
    let x = |t: &tune::Trial| t.params.f64("x").unwrap();
    for (gp, drawn) in whole.iter().zip(&random) {
        assert_eq!(x(gp) == x(drawn), gp.id < 10, "trial {}", gp.id);
    }
}

#[test]
fn raising_max_t_decides_as_the_larger_max_t_from_the_start() {
    let tmp = tempfile::tempdir().unwrap();
    let sweep = |max_t: u64, dir: &str| {
        Tuner::new(Space::builder().uniform("x", 0.0, 1.0).build().unwrap())
            .algorithm(Algorithm::Random)
            .samples(30)
            .seed(5)
            .cpu_slots(1)
            .scheduler(asha_sweep(max_t))
            .dir(tmp.path().join(dir))
    };
    let short = sweep(9, "short").fit(crossing_curves).unwrap();
    let completed_at_9 = (short.trials().unwrap().iter())
        .filter(|t| t.status == Status::Completed && t.last_step() == Some(9))
        .count();
    // Rungs 1 and 3 below the old top; 9 becomes a rung of the raised ASHA.
    let raised = Tuner::resume(tmp.path().join("short"))
        .max_t(27)
        .fit(crossing_curves)
        .unwrap();
    let whole = sweep(27, "whole").fit(crossing_curves).unwrap();
    let (raised, whole) = (raised.trials().unwrap(), whole.trials().unwrap());
    assert_eq!(decided(&raised), decided(&whole));
    // Some trials were cut at the new rung 9, some went on to 27, each from its checkpoint
    // (its second attempt starts at step 10).
    let went_on: Vec<&tune::Trial> = raised
        .iter()
        .filter(|t| t.last_step() == Some(27))
        .collect();
    let cut_at_9 = (raised.iter())
        .filter(|t| t.status == Status::Stopped && t.last_step() == Some(9))
        .count();
    assert!(!went_on.is_empty() && cut_at_9 > 0, "{went_on:?}");
    assert_eq!(went_on.len() + cut_at_9, completed_at_9);
    for t in went_on {
        let second: Vec<u64> = (t.results.iter())
            .filter(|r| r.attempt == 2)
            .map(|r| r.step)
            .collect();
        assert_eq!(second, (10..=27).collect::<Vec<_>>(), "trial {}", t.id);
    }
    // Raised again while nothing is left at the old top to reopen: 27 -> 81.
    let again = Tuner::resume(tmp.path().join("short"))
        .max_t(81)
        .fit(crossing_curves)
        .unwrap();
    assert!(again
        .trials()
        .unwrap()
        .iter()
        .any(|t| t.last_step() == Some(81)));
}

#[test]
fn max_t_is_refused_where_it_cannot_be_raised() {
    let tmp = tempfile::tempdir().unwrap();
    let objective = |ctx: &mut tune::TrialContext| -> Result<(), tune::BoxError> {
        ctx.report(1, [("loss", ctx.params().f64("x")?)])?;
        Ok(())
    };
    let space = || Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
    let refused = |tuner: Tuner| match tuner.fit(objective) {
        Err(TuneError::Invalid(e)) => e,
        other => panic!(
            "expected an input error, got {:?}",
            other.map(|r| r.trials())
        ),
    };
    let e = refused(Tuner::new(space()).max_t(10).dir(tmp.path().join("new")));
    assert!(e.contains("a new sweep sets it in its [scheduler]"), "{e}");
    assert!(!tmp.path().join("new").exists());
    for (name, scheduler, expected) in [
        (
            "fifo",
            tune::SchedulerSpec::default(),
            "kind = \"fifo\" has no `max_t` to raise",
        ),
        (
            "brackets",
            tune::SchedulerSpec::Asha(tune::AshaConfig {
                max_t: 9,
                brackets: 2,
                variant: tune::AshaVariant::Promotion,
                ..Default::default()
            }),
            "ASHA with 2 brackets cannot be extended",
        ),
        ("lower", asha_sweep(27), "expected above 27, found 27"),
        (
            "lower-hb",
            tune::SchedulerSpec::Hyperband(tune::HyperBandConfig {
                max_t: 27,
                ..Default::default()
            }),
            "expected above 27, found 27",
        ),
    ] {
        let dir = tmp.path().join(name);
        let first = Tuner::new(space())
            .samples(2)
            .scheduler(scheduler)
            .dir(&dir)
            .fit(objective)
            .unwrap()
            .trials()
            .unwrap();
        let e = refused(Tuner::resume(&dir).max_t(27));
        assert!(e.contains(expected), "{name}: {e}");
        assert!(e.starts_with("[scheduler] `max_t`: "), "{name}: {e}");
        // Nothing was written: the sweep is as it was.
        let after = Tuner::resume(&dir)
            .fit(objective)
            .unwrap()
            .trials()
            .unwrap();
        assert_eq!(after, first, "{name}");
    }
}
