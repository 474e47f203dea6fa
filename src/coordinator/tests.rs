//! The coordinator on its own: a [`MemoryStore`], closure objectives scripted per trial and
//! attempt, and a scheduler scripted per (trial, step). No processes, no sleeps; one slot, so
//! every sweep runs in one order.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tune_schedulers::{
    AshaConfig, AshaVariant, Decision, Fifo, HyperBand, HyperBandConfig, MedianConfig,
    MedianStopping, Scheduler,
};
use tune_search::{Mode, Params, RandomSearch, Space, Status, TrialId, Value};

use super::{Coordinator, Plan};
use crate::error::TuneError;
use crate::experiment::{trial_dir, FORMAT, TRIALS_DIR};
use crate::objective::{BoxError, Objective, Stop, TrialContext};
use crate::observer::{Event, Notes, Observer, StopHandle, Summary, SweepInfo};
use crate::pool::Pool;
use crate::spec::{ExperimentSpec, Gpus, Resources};
use crate::store::conformance::{result, trial};
use crate::store::{MemoryDb, Meta, StoredExperiment, TrialStore};
use crate::trial::{Trial, TrialResult};

/// Decisions by (trial, step), `Continue` elsewhere; paused trials resumed when another ends.
#[derive(Default)]
struct Scripted {
    decisions: HashMap<(TrialId, u64), Decision>,
    /// When the key trial ends, the value (paused) is resumed.
    resume_when_done: HashMap<TrialId, TrialId>,
    ready: VecDeque<TrialId>,
}

impl Scripted {
    fn at(mut self, id: TrialId, step: u64, decision: Decision) -> Scripted {
        self.decisions.insert((id, step), decision);
        self
    }
}

impl Scheduler for Scripted {
    fn on_result(&mut self, id: TrialId, step: u64, _value: f64) -> Decision {
        self.decisions
            .get(&(id, step))
            .cloned()
            .unwrap_or(Decision::Continue)
    }
    fn on_complete(&mut self, id: TrialId, _last: Option<(u64, f64)>) {
        self.ready.extend(self.resume_when_done.remove(&id));
    }
    fn choose_paused(&mut self) -> Option<TrialId> {
        self.ready.pop_front()
    }
}

/// The summary observers saw at the end.
#[derive(Clone, Default)]
struct LastSummary(Arc<Mutex<Option<Summary>>>);

impl Observer for LastSummary {
    fn on_event(&mut self, _event: &Event<'_>, _summary: &Summary) {}
    fn on_end(&mut self, summary: &Summary) {
        *self.0.lock().unwrap() = Some(summary.clone());
    }
}

fn space() -> Space {
    Space::builder().uniform("x", 0.0, 1.0).build().unwrap()
}

fn params(x: f64) -> Params {
    let mut p = Params::default();
    p.insert("x", Value::Float(x));
    p
}

/// A stored trial, as a killed sweep left it.
fn stored(id: TrialId, status: Status, results: Vec<TrialResult>) -> Trial {
    let mut t = trial(id);
    t.status = status;
    t.attempts = 1;
    t.results = results;
    t
}

/// One sweep of `samples` trials on one slot, over what `trials` the store already holds.
struct Sweep {
    samples: u64,
    mode: Mode,
    max_failures: u32,
    timeout: Option<Duration>,
    scheduler: Box<dyn Scheduler>,
    trials: Vec<Trial>,
    stop: StopHandle,
    control: crate::control::SweepControl,
    db: MemoryDb,
    dir: tempfile::TempDir,
    summary: LastSummary,
    /// Observers besides the summary's.
    observers: Vec<Box<dyn Observer>>,
}

/// What a sweep left: its result, what the store synced, and the experiment folder.
struct Ran {
    result: Result<Vec<Trial>, TuneError>,
    synced: StoredExperiment,
    summary: Option<Summary>,
    dir: tempfile::TempDir,
}

impl Ran {
    fn trial(&self, id: TrialId) -> &Trial {
        &self.synced.trials[id as usize]
    }
    fn steps(&self, id: TrialId) -> Vec<u64> {
        self.trial(id).results.iter().map(|r| r.step).collect()
    }
    fn losses(&self, id: TrialId) -> Vec<f64> {
        let t = self.trial(id);
        t.results.iter().map(|r| r.metrics["loss"]).collect()
    }
}

impl Sweep {
    fn new(samples: u64) -> Sweep {
        Sweep {
            samples,
            mode: Mode::Min,
            max_failures: 0,
            timeout: None,
            scheduler: Box::new(Fifo),
            trials: Vec::new(),
            stop: StopHandle::new(),
            control: crate::control::SweepControl::new(),
            db: MemoryDb::new(),
            dir: tempfile::tempdir().unwrap(),
            summary: LastSummary::default(),
            observers: Vec::new(),
        }
    }

    fn observer(mut self, observer: impl Observer + 'static) -> Sweep {
        self.observers.push(Box::new(observer));
        self
    }

    fn scheduler(mut self, scheduler: impl Scheduler + 'static) -> Sweep {
        self.scheduler = Box::new(scheduler);
        self
    }

    /// Runs in `dir` (an earlier run's folder, with its checkpoints).
    fn in_dir(mut self, dir: tempfile::TempDir) -> Sweep {
        self.dir = dir;
        self
    }

    /// Stores `trials` first, as a sweep killed mid-way would have.
    fn stored(mut self, trials: Vec<Trial>) -> Sweep {
        self.trials = trials;
        self
    }

    fn run(
        self,
        objective: impl Fn(&mut TrialContext) -> Result<(), BoxError> + Send + Sync + 'static,
    ) -> Ran {
        let mut spec = ExperimentSpec::from_toml(
            "name = \"u\"\nmetric = \"loss\"\nsamples = 1\n[space]\nx = { uniform = [0.0, 1.0] }\n",
            "spec.toml".as_ref(),
        )
        .unwrap();
        spec.mode = self.mode;
        let mut store = self.db.open().unwrap();
        let meta = Meta {
            format: FORMAT,
            spec,
            samples: self.samples,
            created_at: 0,
        };
        store.put_meta(&meta).unwrap();
        for t in &self.trials {
            store.put_trial(t).unwrap();
            for r in &t.results {
                store.add_result(t.id, r).unwrap();
            }
        }
        store.sync().unwrap();
        let trials = store.load().unwrap().trials;
        let resources = Resources {
            cpu_slots: 1,
            gpus: Gpus::List(Vec::new()),
            trials_per_gpu: 1,
            ..Resources::default()
        };
        let (pool, _) = Pool::new(&resources, Err("none".into()), Box::new(|_| None)).unwrap();
        let plan = Plan {
            created_at: 0,
            name: "u".into(),
            search: "random".into(),
            scheduler: "scripted".into(),
            notes: Vec::new(),
            stop: self.stop.clone(),
            dir: self.dir.path().to_path_buf(),
            trials: self.dir.path().to_path_buf(),
            database_checkpoints: false,
            objectives: vec![crate::spec::Goal {
                metric: "loss".into(),
                mode: self.mode,
            }],
            constraints: Default::default(),
            samples: self.samples,
            pool,
            max_failures: self.max_failures,
            max_lost_attempts: crate::spec::DEFAULT_MAX_LOST_ATTEMPTS,
            stop_when: crate::stop::StopConditions {
                max_failed_trials: 0,
                ..Default::default()
            },
            timeout: self.timeout,
            remote: None,
            meta,
            control: self.control.clone(),
        };
        let coordinator = Coordinator::new(
            plan,
            Box::new(store),
            trials,
            Box::new(RandomSearch::new(space(), 0)),
            self.scheduler,
            Objective::Closure(Arc::new(objective)),
            std::iter::once(Box::new(self.summary.clone()) as Box<dyn Observer>)
                .chain(self.observers)
                .collect(),
        );
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let result = coordinator.run(rt.handle());
        rt.shutdown_background();
        // The sweep holds only unfinished trials: what it did is read back from the store.
        let result = result.map(|_| self.db.synced().unwrap().trials);
        let summary = self.summary.0.lock().unwrap().take();
        Ran {
            result,
            synced: self.db.synced().unwrap(),
            summary,
            dir: self.dir,
        }
    }
}

/// Reports `loss` at steps 1..=n: `value(id, step)`.
fn report_steps(
    n: u64,
    value: impl Fn(TrialId, u64) -> f64 + Send + Sync + 'static,
) -> impl Fn(&mut TrialContext) -> Result<(), BoxError> + Send + Sync + 'static {
    move |ctx| {
        for step in 1..=n {
            ctx.report(step, [("loss", value(ctx.id(), step))])?;
        }
        Ok(())
    }
}

fn error(t: &Trial) -> &str {
    t.error.as_deref().unwrap_or_default()
}

#[test]
fn every_result_is_durable_before_the_trial_hears_its_decision() {
    let db = MemoryDb::new();
    let mut sweep = Sweep::new(4);
    sweep.db = db.clone();
    let ran = sweep.run(move |ctx| {
        for step in 1..=3 {
            let loss = ctx.id() as f64 + 1.0 / step as f64;
            ctx.report(step, [("loss", loss)])?;
            let synced = db.synced()?;
            let mine = &synced.trials[ctx.id() as usize].results;
            assert_eq!(
                mine.last().map(|r| (r.step, r.metrics["loss"])),
                Some((step, loss))
            );
        }
        Ok(())
    });
    let trials = ran.result.as_ref().unwrap();
    assert_eq!(trials.len(), 4);
    assert!(ran
        .synced
        .trials
        .iter()
        .all(|t| t.status == Status::Completed));
    assert!(ran.synced.trials.iter().all(|t| t.attempts == 1));
    let seqs: Vec<u64> = (0..4)
        .flat_map(|id| ran.trial(id).results.iter().map(|r| r.seq))
        .collect();
    assert_eq!(
        seqs,
        (0..12).collect::<Vec<_>>(),
        "one trial at a time: seq in id order"
    );
    assert_eq!(ran.summary.unwrap().best, Some((0, 1.0 / 3.0)));
}

#[test]
fn a_tie_for_the_best_goes_to_the_lower_id_everywhere() {
    for mode in [Mode::Min, Mode::Max] {
        // Trial 0 pauses and completes after trial 1, with the same value: trial 0 is the best
        // all the same (the lower id), not the first to complete.
        let mut scheduler = Scripted::default().at(0, 1, Decision::Pause);
        scheduler.resume_when_done.insert(1, 0);
        let mut sweep = Sweep::new(3).scheduler(scheduler);
        sweep.mode = mode;
        let worse = if mode == Mode::Min { 9.0 } else { -9.0 };
        let ran = sweep.run(move |ctx| {
            let value = if ctx.id() == 2 { worse } else { 0.5 };
            ctx.report(1, [("loss", value)])?;
            Ok(())
        });
        let trials = ran.result.as_ref().unwrap();
        let t0 = ran.trial(0);
        assert_eq!((t0.status, t0.attempts), (Status::Completed, 2));
        assert!(ran.trial(1).finished_at <= t0.finished_at);
        assert_eq!(ran.summary.unwrap().best, Some((0, 0.5)), "{mode:?}");
        assert_eq!(
            crate::best::best_trial(trials, "loss", mode, &Default::default()).map(|t| t.id),
            Some(0)
        );
    }
}

#[test]
fn a_failed_trial_is_retried_up_to_max_failures_then_stays_failed() {
    let mut sweep = Sweep::new(3);
    sweep.max_failures = 1;
    let ran = sweep.run(|ctx| match (ctx.id(), ctx.attempt()) {
        (0, a) => Err(format!("attempt {a} always fails").into()),
        (1, 1) => Err("the first attempt fails".into()),
        _ => {
            ctx.report(1, [("loss", 1.0)])?;
            Ok(())
        }
    });
    ran.result.as_ref().unwrap();
    let (t0, t1, t2) = (ran.trial(0), ran.trial(1), ran.trial(2));
    assert_eq!(
        (t0.status, t0.attempts, error(t0)),
        (Status::Failed, 2, "attempt 2 always fails")
    );
    assert_eq!((t1.status, t1.attempts), (Status::Completed, 2));
    assert_eq!(t1.results[0].attempt, 2);
    assert_eq!((t2.status, t2.attempts), (Status::Completed, 1));
}

#[test]
fn a_run_that_ends_without_reporting_fails_its_trial() {
    let ran = Sweep::new(1).run(|_| Ok(()));
    ran.result.as_ref().unwrap();
    assert_eq!(ran.trial(0).status, Status::Failed);
    assert_eq!(
        error(ran.trial(0)),
        "the objective ended without reporting `loss`"
    );
}

#[test]
fn a_report_without_the_metric_fails_the_trial_naming_what_it_had() {
    let heard = Arc::new(Mutex::new(None));
    let heard_in = heard.clone();
    let ran = Sweep::new(1).run(move |ctx| {
        let answer = ctx.report(1, [("accuracy", 0.5), ("lr", 0.1)]);
        *heard_in.lock().unwrap() = Some(answer);
        Ok(())
    });
    ran.result.as_ref().unwrap();
    // Not kept: the trial hears no decision it could take as the report's acknowledgement.
    assert_eq!(*heard.lock().unwrap(), Some(Err(Stop::Interrupted)));
    assert_eq!(ran.trial(0).status, Status::Failed);
    assert_eq!(
        error(ran.trial(0)),
        "the report at step 1 has no `loss` (it had: accuracy, lr)"
    );
    assert!(ran.trial(0).results.is_empty());
}

#[test]
fn a_non_finite_metric_fails_its_trial_and_other_non_finite_metrics_are_dropped() {
    let ran = Sweep::new(2).run(|ctx| {
        if ctx.id() == 0 {
            ctx.report(1, [("loss", f64::NAN)])?;
        } else {
            ctx.report(1, [("loss", 1.0), ("grad_norm", f64::INFINITY)])?;
        }
        Ok(())
    });
    ran.result.as_ref().unwrap();
    assert_eq!(ran.trial(0).status, Status::Failed);
    assert_eq!(error(ran.trial(0)), "`loss` was NaN at step 1");
    assert_eq!(ran.trial(1).status, Status::Completed);
    let kept: Vec<&String> = ran.trial(1).results[0].metrics.keys().collect();
    assert_eq!(kept, ["loss"]);
}

#[test]
fn a_panicking_objective_fails_its_trial_and_the_sweep_goes_on() {
    let ran = Sweep::new(2).run(|ctx| {
        if ctx.id() == 0 {
            panic!("boom at {}", ctx.id());
        }
        ctx.report(1, [("loss", 1.0)])?;
        Ok(())
    });
    ran.result.as_ref().unwrap();
    assert_eq!(error(ran.trial(0)), "the objective panicked: boom at 0");
    assert_eq!(ran.trial(1).status, Status::Completed);
}

#[test]
fn a_trial_past_its_timeout_fails_at_its_next_report() {
    let mut sweep = Sweep::new(1);
    sweep.timeout = Some(Duration::from_millis(1));
    let ran = sweep.run(|ctx| {
        ctx.report(1, [("loss", 2.0)])?;
        // Past the deadline for sure: the clock is waited on, not slept on.
        let past = Instant::now() + Duration::from_millis(2);
        while Instant::now() < past {
            std::hint::spin_loop();
        }
        let late = ctx.report(2, [("loss", 1.0)]);
        assert_eq!(late, Err(Stop::TimedOut));
        late?;
        Ok(())
    });
    ran.result.as_ref().unwrap();
    assert_eq!(ran.trial(0).status, Status::Failed);
    assert_eq!(error(ran.trial(0)), "timed out after 0.001 s");
    assert_eq!(ran.steps(0), [1], "nothing after the deadline is stored");
}

#[test]
fn a_relaunched_trial_redoes_its_stored_steps_without_storing_them_again() {
    // Killed after two acknowledged steps, with no checkpoint: it starts over.
    let killed = stored(
        0,
        Status::Running,
        vec![result(1, 0, 0.9), result(2, 1, 0.8)],
    );
    let ran = Sweep::new(1)
        .stored(vec![killed])
        .run(report_steps(3, |_, step| 100.0 + step as f64));
    ran.result.as_ref().unwrap();
    let t = ran.trial(0);
    assert_eq!((t.status, t.attempts), (Status::Completed, 2));
    assert_eq!(ran.steps(0), [1, 2, 3]);
    // The redone steps keep their stored values; the new one is the second attempt's.
    assert_eq!(ran.losses(0), [0.9, 0.8, 103.0]);
    let seqs: Vec<(u64, u32)> = t.results.iter().map(|r| (r.seq, r.attempt)).collect();
    assert_eq!(seqs, [(0, 1), (1, 1), (2, 2)]);
}

#[test]
fn a_trial_resumed_from_its_checkpoint_goes_on_and_may_have_nothing_left() {
    let sweep = Sweep::new(2).stored(vec![
        stored(0, Status::Running, vec![result(1, 0, 0.9)]),
        stored(
            1,
            Status::Running,
            vec![result(1, 1, 0.7), result(2, 2, 0.6)],
        ),
    ]);
    for id in [0, 1] {
        let dir = trial_dir(sweep.dir.path(), id);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("state"), "1").unwrap();
    }
    let ran = sweep.run(|ctx| {
        assert!(ctx.restore_dir().is_some_and(|d| d.join("state").exists()));
        if ctx.id() == 0 {
            ctx.report(2, [("loss", 0.5)])?;
        }
        // Trial 1 had reported its last step before the kill: nothing is left to do.
        Ok(())
    });
    ran.result.as_ref().unwrap();
    assert_eq!(ran.steps(0), [1, 2]);
    assert_eq!(ran.trial(0).status, Status::Completed);
    assert_eq!(ran.steps(1), [1, 2]);
    assert_eq!(ran.trial(1).status, Status::Completed);
}

#[test]
fn a_stopped_trial_stays_stopped_whatever_its_run_does_while_winding_down() {
    let sweep = Sweep::new(2).scheduler(Scripted::default().at(0, 2, Decision::Stop));
    let ran = sweep.run(|ctx| {
        for step in 1..=4 {
            if ctx.report(step, [("loss", 1.0)]).is_err() {
                // Ignores the stop and crashes: the trial's end was already decided.
                return Err("crashed while winding down".into());
            }
        }
        Ok(())
    });
    ran.result.as_ref().unwrap();
    assert_eq!(ran.trial(0).status, Status::Stopped);
    assert_eq!(ran.trial(0).error, None);
    assert_eq!(ran.steps(0), [1, 2]);
    assert_eq!(ran.trial(1).status, Status::Completed);
    assert_eq!(ran.steps(1), [1, 2, 3, 4]);
}

#[test]
fn a_complete_decision_ends_the_trial_as_completed() {
    let sweep = Sweep::new(1).scheduler(Scripted::default().at(0, 2, Decision::Complete));
    let heard = Arc::new(Mutex::new(Vec::new()));
    let heard_in = heard.clone();
    let ran = sweep.run(move |ctx| {
        for step in 1..=5 {
            let answer = ctx.report(step, [("loss", 1.0 / step as f64)]);
            heard_in.lock().unwrap().push(answer);
            answer?;
        }
        Ok(())
    });
    ran.result.as_ref().unwrap();
    // The trial hears that it completed, not that it was stopped: it keeps what it trained.
    assert_eq!(*heard.lock().unwrap(), [Ok(()), Err(Stop::Completed)]);
    assert_eq!(ran.trial(0).status, Status::Completed);
    assert_eq!(ran.steps(0), [1, 2]);
    assert_eq!(ran.summary.unwrap().best, Some((0, 0.5)));
}

#[test]
fn a_decision_stored_but_not_applied_is_applied_on_resume_without_running_again() {
    // A kill came after the result at step 2 was stored, before the stop it drew was.
    let killed = stored(
        0,
        Status::Running,
        vec![result(1, 0, 0.9), result(2, 1, 0.8)],
    );
    let runs = Arc::new(AtomicU32::new(0));
    let runs_in = runs.clone();
    let ran = Sweep::new(2)
        .stored(vec![killed])
        .scheduler(Scripted::default().at(0, 2, Decision::Stop))
        .run(move |ctx| {
            runs_in.fetch_add(1, Ordering::SeqCst);
            assert_eq!(ctx.id(), 1, "trial 0 must not run again");
            ctx.report(1, [("loss", 1.0)])?;
            Ok(())
        });
    ran.result.as_ref().unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let t = ran.trial(0);
    assert_eq!((t.status, t.attempts), (Status::Stopped, 1));
    assert_eq!(ran.steps(0), [1, 2]);
    assert!(t.finished_at.is_some());
}

#[test]
fn paused_trials_the_scheduler_never_resumes_are_stopped_at_the_end() {
    let paused = stored(0, Status::Paused, vec![result(1, 0, 0.9)]);
    let ran = Sweep::new(2)
        .stored(vec![paused])
        .run(report_steps(1, |_, _| 1.0));
    ran.result.as_ref().unwrap();
    assert_eq!(ran.trial(0).status, Status::Stopped);
    assert_eq!(ran.trial(0).attempts, 1);
    assert_eq!(ran.trial(1).status, Status::Completed);
    assert_eq!(ran.summary.unwrap().finished(), 2);
}

#[test]
fn a_paused_trial_resumes_from_its_checkpoint_when_the_scheduler_says() {
    let mut scheduler = Scripted::default().at(0, 1, Decision::Pause);
    scheduler.resume_when_done.insert(1, 0);
    let ran = Sweep::new(2).scheduler(scheduler).run(|ctx| {
        let first = match ctx.restore_dir() {
            Some(dir) => std::fs::read_to_string(dir.join("state"))?.parse::<u64>()? + 1,
            None => 1,
        };
        for step in first..=3 {
            let heard = ctx.report(step, [("loss", 1.0 / step as f64)]);
            if matches!(heard, Ok(()) | Err(Stop::Paused)) {
                std::fs::write(ctx.checkpoint_dir()?.join("state"), step.to_string())?;
            }
            heard?;
        }
        Ok(())
    });
    ran.result.as_ref().unwrap();
    let t = ran.trial(0);
    assert_eq!((t.status, t.attempts), (Status::Completed, 2));
    assert_eq!(ran.steps(0), [1, 2, 3]);
    let attempts: Vec<u32> = t.results.iter().map(|r| r.attempt).collect();
    assert_eq!(attempts, [1, 2, 2]);
    // Trial 1 ran between the pause and the resume.
    assert!(ran.trial(1).results[0].seq < t.results[1].seq);
}

/// Trial 0 done with a checkpoint `latest`, trial 1 paused by an exploit of it not yet applied.
fn exploited_sweep() -> Sweep {
    let mut exploiter = stored(1, Status::Paused, vec![result(1, 1, 0.9)]);
    exploiter.restore_from = Some(0);
    let sweep = Sweep::new(2).stored(vec![
        stored(0, Status::Completed, vec![result(1, 0, 0.1)]),
        exploiter,
    ]);
    let source = trial_dir(sweep.dir.path(), 0);
    std::fs::create_dir_all(&source).unwrap();
    std::fs::write(source.join("state"), "latest").unwrap();
    sweep
}

/// Runs trial 1 once, returning the checkpoint it was given.
fn run_exploiter(sweep: Sweep) -> (Ran, String) {
    let seen = Arc::new(Mutex::new(String::new()));
    let seen_in = seen.clone();
    let ran = sweep.run(move |ctx| {
        let dir = ctx.restore_dir().ok_or("no checkpoint to restore")?;
        *seen_in.lock().unwrap() = std::fs::read_to_string(dir.join("state"))?;
        ctx.report(2, [("loss", 0.5)])?;
        Ok(())
    });
    let seen = seen.lock().unwrap().clone();
    (ran, seen)
}

#[test]
fn a_staged_exploit_is_moved_in_before_the_trial_runs_again() {
    let sweep = exploited_sweep();
    let staged = sweep.dir.path().join(TRIALS_DIR).join(".exploit-1");
    std::fs::create_dir_all(&staged).unwrap();
    std::fs::write(staged.join("state"), "at the exploit").unwrap();
    let (ran, seen) = run_exploiter(sweep);
    ran.result.as_ref().unwrap();
    assert_eq!(seen, "at the exploit");
    assert!(!ran.dir.path().join(TRIALS_DIR).join(".exploit-1").exists());
    let t = ran.trial(1);
    assert_eq!((t.status, t.restore_from), (Status::Completed, None));
    assert_eq!(ran.steps(1), [1, 2]);
}

#[test]
fn a_staged_exploit_that_was_never_stored_is_removed_and_not_restored() {
    // A run killed while it copied an exploit's checkpoint, before the exploit was stored:
    // trial 0 is stored as running, with no exploit pending.
    let sweep = Sweep::new(1).stored(vec![stored(0, Status::Running, vec![result(1, 0, 0.9)])]);
    let staged = sweep.dir.path().join(TRIALS_DIR).join(".exploit-0");
    std::fs::create_dir_all(&staged).unwrap();
    std::fs::write(staged.join("state"), "never exploited").unwrap();
    let ran = sweep.run(|ctx| {
        if let Some(dir) = ctx.restore_dir() {
            let state = std::fs::read_to_string(dir.join("state")).unwrap_or_default();
            assert_ne!(state, "never exploited");
        }
        ctx.report(2, [("loss", 0.5)])?;
        Ok(())
    });
    ran.result.as_ref().unwrap();
    assert!(!ran.dir.path().join(TRIALS_DIR).join(".exploit-0").exists());
    assert_eq!(ran.trial(0).status, Status::Completed);
}

#[test]
fn an_exploit_whose_copy_a_crash_prevented_takes_the_sources_latest_checkpoint() {
    let (ran, seen) = run_exploiter(exploited_sweep());
    ran.result.as_ref().unwrap();
    assert_eq!(seen, "latest");
    assert_eq!(ran.trial(1).status, Status::Completed);
}

#[test]
fn an_exploit_decision_copies_the_checkpoint_and_relaunches_with_the_new_params() {
    let mut new_params = params(0.75);
    new_params.insert("x", Value::Float(0.75));
    let exploit = Decision::Exploit {
        from: 0,
        params: new_params.clone(),
    };
    let sweep = Sweep::new(2).scheduler(Scripted::default().at(1, 1, exploit));
    let ran = sweep.run(|ctx| {
        if let Some(dir) = ctx.restore_dir() {
            assert_eq!(std::fs::read_to_string(dir.join("state"))?, "trial 0");
            assert_eq!(ctx.params().f64("x")?, 0.75);
        }
        let first = if ctx.restore_dir().is_some() { 2 } else { 1 };
        for step in first..=2 {
            ctx.report(step, [("loss", 1.0)])?;
            let state = format!("trial {}", ctx.id());
            std::fs::write(ctx.checkpoint_dir()?.join("state"), state)?;
        }
        Ok(())
    });
    ran.result.as_ref().unwrap();
    let t = ran.trial(1);
    assert_eq!(
        (t.status, t.attempts, t.parent),
        (Status::Completed, 2, Some(0))
    );
    assert_eq!(t.params, new_params);
    assert_eq!(t.lineage.len(), 1);
    assert_eq!((t.lineage[0].step, t.lineage[0].from), (1, 0));
    assert_eq!(ran.steps(1), [1, 2]);
}

#[test]
fn a_stop_request_interrupts_the_sweep_and_leaves_the_rest_for_resume() {
    let sweep = Sweep::new(4);
    let stop = sweep.stop.clone();
    let ran = sweep.run(move |ctx| {
        ctx.report(1, [("loss", 1.0)])?;
        if ctx.id() == 1 {
            stop.stop();
        }
        ctx.report(2, [("loss", 0.5)])?;
        Ok(())
    });
    assert!(matches!(ran.result, Err(TuneError::Interrupted(_))));
    assert_eq!(ran.synced.trials.len(), 2, "no trial starts after the stop");
    assert_eq!(ran.trial(0).status, Status::Completed);
    // Left as running in the store, with its acknowledged step: `resume` re-runs it.
    assert_eq!(ran.trial(1).status, Status::Running);
    assert_eq!(ran.steps(1), [1]);
}

/// A trial that trains to step 9 from its checkpoint, reporting `x + 1/step` and checkpointing
/// after each decision it hears; after `stop_after` reports of this run it asks the sweep to stop.
fn checkpointing_trial(
    stop_after: Option<(u32, StopHandle)>,
) -> impl Fn(&mut TrialContext) -> Result<(), BoxError> + Send + Sync + 'static {
    let reports = AtomicU32::new(0);
    move |ctx| {
        let x = ctx.params().get("x").and_then(Value::as_f64).unwrap();
        let first = match ctx.restore_dir() {
            Some(dir) => std::fs::read_to_string(dir.join("state"))?.parse::<u64>()? + 1,
            None => 1,
        };
        for step in first..=9 {
            let heard = ctx.report(step, [("loss", x + 1.0 / step as f64)]);
            if matches!(heard, Ok(()) | Err(Stop::Paused)) {
                std::fs::write(ctx.checkpoint_dir()?.join("state"), step.to_string())?;
            }
            if let Some((n, stop)) = &stop_after {
                if reports.fetch_add(1, Ordering::SeqCst) + 1 == *n {
                    stop.stop();
                }
            }
            heard?;
        }
        Ok(())
    }
}

/// Runs `samples` checkpointing trials under `scheduler()` once through, then again stopping
/// the sweep after every `every` reports and resuming it, for several `every`: each trial's
/// status and steps must come out the same. Returns the uninterrupted outcome.
fn same_after_interruptions(
    samples: u64,
    scheduler: impl Fn() -> Box<dyn Scheduler>,
) -> Vec<(Status, Vec<u64>, Option<Params>)> {
    let outcome = |trials: &[Trial]| -> Vec<(Status, Vec<u64>, Option<Params>)> {
        trials
            .iter()
            .map(|t| {
                let steps = t.results.iter().map(|r| r.step).collect();
                let exploited = t.lineage.last().map(|_| t.params.clone());
                (t.status, steps, exploited)
            })
            .collect()
    };
    let mut whole = Sweep::new(samples);
    whole.scheduler = scheduler();
    let whole = whole.run(checkpointing_trial(None));
    whole.result.as_ref().unwrap();
    let want = outcome(&whole.synced.trials);
    for every in [1, 2, 3, 5, 8] {
        let mut stored = Vec::new();
        let mut dir = tempfile::tempdir().unwrap();
        let mut rounds = 0;
        loop {
            rounds += 1;
            assert!(
                rounds < 500,
                "interrupting every {every} reports never ends"
            );
            let mut sweep = Sweep::new(samples).stored(stored).in_dir(dir);
            sweep.scheduler = scheduler();
            let stop = sweep.stop.clone();
            let ran = sweep.run(checkpointing_trial(Some((every, stop))));
            (stored, dir) = (ran.synced.trials, ran.dir);
            match ran.result {
                Ok(_) => break,
                Err(TuneError::Interrupted(_)) => {}
                Err(e) => panic!("{e}"),
            }
        }
        let results: usize = want.iter().map(|(_, steps, _)| steps.len()).sum();
        assert!(
            rounds > results / every as usize / 2,
            "interrupted only {rounds} times in {results} results"
        );
        assert_eq!(outcome(&stored), want, "interrupted every {every} reports");
    }
    want
}

#[test]
fn hyperband_decides_the_same_however_often_the_sweep_is_interrupted_and_resumed() {
    // One band of R = 9, eta = 3: brackets of 9, 5 and 3 trials (17).
    let config = HyperBandConfig {
        max_t: 9,
        ..HyperBandConfig::default()
    };
    let want = same_after_interruptions(17, || Box::new(HyperBand::new(config.clone(), Mode::Min)));
    let reached = |steps: usize| want.iter().filter(|(_, s, _)| s.len() >= steps).count();
    // Brackets s = 2, 1, 0: 9 + 5 + 3 reach step 1, 3 + 5 + 3 step 3, 1 + 1 + 3 step 9.
    assert_eq!([reached(1), reached(3), reached(9)], [17, 11, 5]);
}

// PBT is left out: on one slot no trial overlaps another, so it never exploits.
#[test]
fn asha_and_median_decide_the_same_however_often_the_sweep_is_interrupted() {
    let asha = |variant, brackets| AshaConfig {
        max_t: 9,
        grace_period: Some(1),
        reduction_factor: 3,
        brackets,
        stop_last_trials: true,
        variant,
    };
    for config in [
        asha(AshaVariant::Stopping, 1),
        asha(AshaVariant::Promotion, 1),
        asha(AshaVariant::Promotion, 2),
    ] {
        let want = same_after_interruptions(12, || config.build(Mode::Min, 3));
        assert!(
            want.iter().any(|(_, s, _)| s.len() < 9),
            "{config:?} stopped none"
        );
    }
    let median = MedianConfig {
        grace_period: 2,
        min_samples_required: 2,
    };
    let want = same_after_interruptions(8, || {
        Box::new(MedianStopping::new(median.clone(), Mode::Min))
    });
    assert!(
        want.iter().any(|(_, s, _)| s.len() < 9),
        "median stopped none"
    );
}

/// Copies results elsewhere (shows no notes) and speaks from threads of its own: once while the
/// sweep runs, once while it ends.
struct ChattyLogger(Option<Notes>);

impl Observer for ChattyLogger {
    fn on_start(&mut self, info: &SweepInfo<'_>, _summary: &Summary) {
        let notes = info.notes.clone();
        std::thread::spawn(move || notes.tell("from the logger's thread"))
            .join()
            .unwrap();
        self.0 = Some(info.notes.clone());
    }
    fn on_event(&mut self, _event: &Event<'_>, _summary: &Summary) {}
    fn on_end(&mut self, _summary: &Summary) {
        let notes = self.0.clone().unwrap();
        std::thread::spawn(move || notes.tell("while ending"))
            .join()
            .unwrap();
    }
    fn shows_notes(&self) -> bool {
        false
    }
}

/// Shows notes (as the dashboard does): what it was told, and when it ended.
#[derive(Clone, Default)]
struct Shown(Arc<Mutex<Vec<String>>>);

impl Observer for Shown {
    fn on_event(&mut self, event: &Event<'_>, _summary: &Summary) {
        if let Event::Note(note) = event {
            self.0.lock().unwrap().push(note.to_string());
        }
    }
    fn on_end(&mut self, _summary: &Summary) {
        self.0.lock().unwrap().push("(ended)".into());
    }
}

#[test]
fn notes_from_an_observers_threads_reach_the_observers_that_show_notes_before_they_end() {
    let shown = Shown::default();
    // The showing observer comes first: it still hears what the logger says while ending.
    let ran = Sweep::new(2)
        .observer(shown.clone())
        .observer(ChattyLogger(None))
        .run(report_steps(2, |_, step| step as f64));
    assert!(ran.result.is_ok());
    assert_eq!(
        *shown.0.lock().unwrap(),
        ["from the logger's thread", "while ending", "(ended)"]
    );
}

#[test]
fn controls_stop_a_trial_add_samples_and_enqueue_a_point_durably() {
    use crate::control::{Control, ControlError};
    let sweep = Sweep::new(2);
    let control = sweep.control.clone();
    let said = Arc::new(Mutex::new(Vec::new()));
    let heard = said.clone();
    let ran = sweep.run(move |ctx| {
        ctx.report(1, [("loss", 1.0)])?;
        if ctx.id() == 0 {
            let mut point = Params::default();
            point.insert("x", Value::Float(0.25));
            let mut bad = Params::default();
            bad.insert("x", Value::Float(7.0));
            let asks = [
                Control::AddSamples { count: 1 },
                Control::Enqueue { params: point },
                Control::Enqueue { params: bad },
                Control::AddSamples { count: 0 },
                Control::StopTrial { trial: 9 },
                Control::StopTrial { trial: 0 },
            ];
            let answers: Vec<Result<String, ControlError>> = asks
                .into_iter()
                .map(|c| control.send(c, "the test"))
                .collect();
            heard.lock().unwrap().extend(answers);
        }
        ctx.report(2, [("loss", 0.5)])?;
        Ok(())
    });
    ran.result.as_ref().unwrap();
    let answers = said.lock().unwrap().clone();
    assert_eq!(
        answers,
        [
            Ok("added 1 samples: the sweep creates 3 trials in all".to_string()),
            Ok("enqueued trial 1".to_string()),
            Err(ControlError::Refused(
                "the point: `x`: expected a number in [0, 1), found 7".into()
            )),
            Err(ControlError::Refused(
                "`count`: expected at least 1 trial to add, found 0".into()
            )),
            Err(ControlError::Refused(
                "there is no trial 9: the sweep has 2 so far".into()
            )),
            Ok("stopped trial 0 (running until now)".to_string()),
        ]
    );
    // Stopped at once: its step 2 was not kept.
    assert_eq!(ran.trial(0).status, Status::Stopped);
    assert_eq!(ran.steps(0), [1]);
    // The enqueued point ran first, then the searcher's trials to the raised budget.
    assert_eq!(ran.trial(1).params.get("x"), Some(&Value::Float(0.25)));
    assert_eq!(ran.synced.trials.len(), 4);
    assert!(ran.synced.trials[1..]
        .iter()
        .all(|t| t.status == Status::Completed));
    assert_eq!(ran.synced.meta.samples, 4);
    assert_eq!(ran.summary.unwrap().total, 4);
}

#[test]
fn a_control_after_the_sweep_ended_hears_that_it_is_not_running() {
    use crate::control::{Control, ControlError};
    let sweep = Sweep::new(1);
    let control = sweep.control.clone();
    sweep
        .run(|ctx| {
            ctx.report(1, [("loss", 1.0)])?;
            Ok(())
        })
        .result
        .unwrap();
    assert_eq!(
        control.send(Control::StopSweep, "the test"),
        Err(ControlError::NotRunning)
    );
}

#[test]
fn a_paused_trial_is_stopped_by_a_control_and_never_resumed() {
    use crate::control::Control;
    let mut scheduler = Scripted::default().at(0, 1, Decision::Pause);
    scheduler.resume_when_done.insert(1, 0);
    let sweep = Sweep::new(2).scheduler(scheduler);
    let control = sweep.control.clone();
    let said = Arc::new(Mutex::new(None));
    let heard = said.clone();
    let ran = sweep.run(move |ctx| {
        ctx.report(1, [("loss", 1.0)])?;
        if ctx.id() == 1 {
            *heard.lock().unwrap() = Some(control.send(Control::StopTrial { trial: 0 }, "test"));
        }
        ctx.report(2, [("loss", 0.5)])?;
        Ok(())
    });
    ran.result.as_ref().unwrap();
    assert_eq!(
        said.lock().unwrap().clone(),
        Some(Ok("stopped trial 0 (paused until now)".to_string()))
    );
    let t0 = ran.trial(0);
    assert_eq!((t0.status, t0.attempts), (Status::Stopped, 1));
    assert_eq!(ran.steps(0), [1]);
    assert_eq!(ran.trial(1).status, Status::Completed);
}
