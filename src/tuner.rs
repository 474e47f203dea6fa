//! The Rust API: `Tuner::new(space)...fit(objective)`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tune_search::{Mode, Params, Space};

use crate::best::pareto_front;
use crate::control::SweepControl;
use crate::coordinator::{Coordinator, Plan};
use crate::error::TuneError;
use crate::experiment::{Experiment, StoreLocation};
use crate::objective::{BoxError, CommandObjective, Objective, TrialContext};
use crate::observer::{Observer, StopHandle};
use crate::pool::Pool;
use crate::progress::ProgressLine;
use crate::spec::{
    Algorithm, Bound, Constraints, ExperimentSpec, Goal, Resources, SchedulerSpec, Search,
    SearchSpec, WarmStart,
};
use crate::stop::{StopConditions, StopReason};
use crate::tracking::trackers;
use crate::trial::Trial;

/// Sets up and runs a sweep.
///
/// ```
/// use tune::{Mode, Space, Tuner};
/// let dir = tempfile::tempdir().unwrap();
/// let space = Space::builder().uniform("x", -5.0, 5.0).build().unwrap();
/// let result = Tuner::new(space)
///     .metric("loss", Mode::Min)
///     .samples(20)
///     .seed(1)
///     .dir(dir.path().join("quadratic"))
///     .fit(|ctx| {
///         let x = ctx.params().f64("x")?;
///         ctx.report(1, [("loss", (x - 2.0).powi(2))])?;
///         Ok(())
///     })
///     .unwrap();
/// assert_eq!(result.trials().unwrap().len(), 20);
/// let best = result.best().unwrap();
/// assert!((best.params.f64("x").unwrap() - 2.0).abs() < 2.0);
/// ```
pub struct Tuner {
    spec: ExperimentSpec,
    dir: Option<PathBuf>,
    /// Continue the experiment in this folder instead of creating one.
    resume: Option<PathBuf>,
    /// With `resume` from a database: the experiment's name there.
    resume_name: Option<String>,
    /// Where the records are kept.
    store: StoreLocation,
    /// With `resume`: raise the budget to this many samples.
    resume_samples: Option<u64>,
    /// With `resume`: raise the scheduler's `max_t` to this step.
    resume_max_t: Option<u64>,
    /// With `resume`: run on this many CPU slots (where trials run does not change what is
    /// decided).
    resume_slots: Option<usize>,
    /// Trials run at once on this machine, when not the spec's resources (0: only remote
    /// workers run trials).
    local_slots: Option<usize>,
    /// With `resume`: new stop conditions (they end the sweep sooner or later, but change no
    /// decision).
    resume_stop: Option<StopConditions>,
    /// With `resume`: settings that were given but cannot change a created sweep.
    fixed_on_resume: Vec<&'static str>,
    spec_text: Option<String>,
    observers: Vec<Box<dyn Observer>>,
    handle_signals: bool,
    grace: Duration,
    /// A closure attempt's time limit (a command's is the spec's `timeout_s`).
    timeout: Option<Duration>,
    stop: StopHandle,
    control: SweepControl,
}

impl Tuner {
    /// A sweep over `space`; defaults: metric `loss` minimised, 10 samples, seed 0, `auto`
    /// search (a GP or TPE, by the sweep), FIFO, one slot per core, folder `runs/<name>` with a time-stamped name.
    pub fn new(space: Space) -> Tuner {
        let stamp = crate::trial::rfc3339(crate::trial::now_ms()).replace([':', '.'], "-");
        Tuner::from_spec(ExperimentSpec {
            name: format!("sweep-{}", stamp.trim_end_matches('Z')),
            metric: "loss".into(),
            mode: Mode::Min,
            objectives: Vec::new(),
            constraints: Constraints::default(),
            samples: 10,
            seed: 0,
            max_failures: 0,
            max_lost_attempts: crate::spec::DEFAULT_MAX_LOST_ATTEMPTS,
            search: Search::default(),
            scheduler: SchedulerSpec::default(),
            resources: Resources::default(),
            stop: StopConditions::default(),
            objective: None,
            store: crate::spec::StoreSpec::default(),
            tracking: crate::spec::TrackingSpec::default(),
            space,
        })
    }

    /// A sweep described by a spec (as read from `space.toml`).
    pub fn from_spec(spec: ExperimentSpec) -> Tuner {
        Tuner {
            spec,
            dir: None,
            resume: None,
            resume_name: None,
            store: StoreLocation::Folder,
            resume_samples: None,
            resume_max_t: None,
            resume_slots: None,
            local_slots: None,
            resume_stop: None,
            fixed_on_resume: Vec::new(),
            spec_text: None,
            observers: Vec::new(),
            handle_signals: false,
            grace: Duration::from_secs(5),
            timeout: None,
            stop: StopHandle::new(),
            control: SweepControl::new(),
        }
    }

    /// Continues the interrupted (or finished) experiment in `dir`: completed trials are kept,
    /// unfinished ones re-run with their ids and params, and the budget carries on. Only the
    /// budget ([`Tuner::samples`]), the slots, observers and signals can be set; a setting that
    /// would change what the sweep decides (seed, metric, search, scheduler, ...) is refused
    /// when it runs.
    pub fn resume(dir: impl Into<PathBuf>) -> Tuner {
        let mut t = Tuner::new(Space::default());
        t.resume = Some(dir.into());
        t
    }

    /// [`Tuner::resume`] for an experiment kept in a database: experiment `name` there, its
    /// trial folders under `runs/<name>` on this machine (or [`Tuner::dir`]).
    ///
    /// ```no_run
    /// use tune::experiment::StoreLocation;
    /// let store = StoreLocation::Postgres("postgres://tune@db.example/tune".into());
    /// let result = tune::Tuner::resume_in(store, "mnist-lr").fit(|ctx| {
    ///     ctx.report(1, [("loss", ctx.params().f64("lr")?)])?;
    ///     Ok(())
    /// })?;
    /// # Ok::<(), tune::TuneError>(())
    /// ```
    pub fn resume_in(at: StoreLocation, name: impl Into<String>) -> Tuner {
        let name = name.into();
        let mut t = Tuner::resume(Path::new("runs").join(&name));
        t.resume_name = Some(name);
        t.store = at;
        t
    }

    /// Keeps the records `at` (default: `tune.db/` in the experiment folder). In PostgreSQL
    /// the experiment is the spec's name, which must be new there; the trial folders stay in
    /// the experiment folder on this machine.
    ///
    /// ```no_run
    /// use tune::experiment::StoreLocation;
    /// let space = tune::Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
    /// let result = tune::Tuner::new(space)
    ///     .name("quadratic")
    ///     .store(StoreLocation::Postgres("postgres://tune@db.example/tune".into()))
    ///     .fit(|ctx| {
    ///         let x = ctx.params().f64("x")?;
    ///         ctx.report(1, [("loss", (x - 0.3).powi(2))])?;
    ///         Ok(())
    ///     })?;
    /// # Ok::<(), tune::TuneError>(())
    /// ```
    pub fn store(mut self, at: StoreLocation) -> Self {
        self.store = at;
        self.fixed("store")
    }

    /// Names the experiment (and its default folder `runs/<name>`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.spec.name = name.into();
        self.fixed("name")
    }

    /// The reported key to optimise, and whether lower or higher is better.
    pub fn metric(mut self, metric: impl Into<String>, mode: Mode) -> Self {
        self.spec.metric = metric.into();
        self.spec.mode = mode;
        self.spec.objectives.clear();
        self.fixed("metric")
    }

    /// A constraint (`[constraints] key = { max = .. }` in a spec): trials whose last report
    /// of `key` is outside `bound` rank below every trial within their bounds, and are never
    /// the best or on the front. TPE and NSGA-II rank by it, GP models it (probability of
    /// feasibility); random and grid search ignore it.
    ///
    /// ```
    /// use tune::{Algorithm, Bound, Space, Tuner};
    /// let dir = tempfile::tempdir().unwrap();
    /// let space = Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
    /// let result = Tuner::new(space)
    ///     .constraint("x_again", Bound { min: Some(0.5), max: None })
    ///     .samples(8)
    ///     .dir(dir.path().join("bounded"))
    ///     .fit(|ctx| {
    ///         let x = ctx.params().f64("x")?;
    ///         ctx.report(1, [("loss", x), ("x_again", x)])?;
    ///         Ok(())
    ///     })
    ///     .unwrap();
    /// // The lowest loss with x >= 0.5, whatever lower losses the others reached.
    /// if let Some(best) = result.best() {
    ///     assert!(best.params.f64("x").unwrap() >= 0.5);
    /// }
    /// ```
    pub fn constraint(mut self, key: impl Into<String>, bound: Bound) -> Self {
        self.spec.constraints.0.insert(key.into(), bound);
        self.fixed("constraints")
    }

    /// Several objectives at once (`metric = [..]`, `mode = [..]` in a spec): the sweep looks
    /// for the Pareto front ([`TuneResult::pareto_front`]); TPE, NSGA-II, random and grid
    /// search take them. One pair is [`Tuner::metric`].
    ///
    /// ```
    /// use tune::{Algorithm, Mode, Space, Tuner};
    /// let dir = tempfile::tempdir().unwrap();
    /// let space = Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
    /// let result = Tuner::new(space)
    ///     .objectives([("loss", Mode::Min), ("size", Mode::Min)])
    ///     .algorithm(Algorithm::Nsga2)
    ///     .samples(12)
    ///     .dir(dir.path().join("front"))
    ///     .fit(|ctx| {
    ///         let x = ctx.params().f64("x")?;
    ///         ctx.report(1, [("loss", x), ("size", 1.0 - x)])?;
    ///         Ok(())
    ///     })
    ///     .unwrap();
    /// // Every completed trial is on this front: lower loss means larger size.
    /// assert_eq!(result.pareto_front().unwrap().len(), 12);
    /// ```
    pub fn objectives<S: Into<String>>(
        mut self,
        objectives: impl IntoIterator<Item = (S, Mode)>,
    ) -> Self {
        let all: Vec<Goal> = objectives
            .into_iter()
            .map(|(metric, mode)| Goal {
                metric: metric.into(),
                mode,
            })
            .collect();
        if let Some(first) = all.first() {
            self.spec.metric = first.metric.clone();
            self.spec.mode = first.mode;
        }
        self.spec.objectives = if all.len() > 1 { all } else { Vec::new() };
        self.fixed("metric")
    }

    /// How many trials to create; with [`Tuner::resume`], the new (larger) budget.
    pub fn samples(mut self, samples: u64) -> Self {
        self.spec.samples = samples;
        self.resume_samples = Some(samples);
        self
    }

    /// The seed: a trial's params depend only on (seed, trial id) and the history.
    pub fn seed(mut self, seed: u64) -> Self {
        self.spec.seed = seed;
        self.fixed("seed")
    }

    /// The search algorithm, with its default options (see [`Tuner::search`] to set them).
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.spec.search.algorithm = SearchSpec::of(algorithm);
        self.fixed("algorithm")
    }

    /// The search algorithm and its options.
    ///
    /// ```
    /// use tune::{SearchSpec, Space, TpeOptions, Tuner};
    /// let tpe = SearchSpec::Tpe(TpeOptions { n_startup_trials: 5, ..Default::default() });
    /// let tuner = Tuner::new(Space::default()).search(tpe);
    /// # drop(tuner);
    /// ```
    pub fn search(mut self, search: SearchSpec) -> Self {
        self.spec.search.algorithm = search;
        self.fixed("search")
    }

    /// Params the first trials evaluate, in order, before the algorithm suggests any (Optuna's
    /// `enqueue_trial`, Ray Tune's `points_to_evaluate`); a point may leave parameters out, and
    /// they are drawn at random. They count toward the samples. A point outside the space
    /// fails `fit` with [`TuneError::Invalid`](crate::TuneError) naming the key.
    ///
    /// ```
    /// use tune::{Params, Space, Tuner, Value};
    /// let space = Space::builder().uniform("lr", 1e-4, 1e-1).build().unwrap();
    /// let mut known_good = Params::default();
    /// known_good.insert("lr", Value::Float(0.01));
    /// let tuner = Tuner::new(space).initial_points(vec![known_good]);
    /// # drop(tuner);
    /// ```
    pub fn initial_points(mut self, points: Vec<Params>) -> Self {
        self.spec.search.initial = points;
        self.fixed("initial")
    }

    /// Trials of an earlier sweep that the algorithm learns from as its oldest (what
    /// [`read_warm_start`](crate::read_warm_start) reads, `tune run --warm-start`); TPE and GP
    /// only. They are kept with the sweep, so that a resume decides as the first run did.
    pub fn warm_start(mut self, warm_start: WarmStart) -> Self {
        self.spec.search.warm_start = Some(warm_start);
        self.fixed("warm_start")
    }

    /// The trial scheduler and its settings (FIFO unless set).
    ///
    /// ```
    /// use tune::{AshaConfig, SchedulerSpec, Space, Tuner};
    /// let asha = SchedulerSpec::Asha(AshaConfig { max_t: 27, ..Default::default() });
    /// let tuner = Tuner::new(Space::default()).scheduler(asha);
    /// # drop(tuner);
    /// ```
    pub fn scheduler(mut self, scheduler: SchedulerSpec) -> Self {
        self.spec.scheduler = scheduler;
        self.fixed("scheduler")
    }

    /// With [`Tuner::resume`]: raises the scheduler's `max_t` (`tune resume --max-t`). The
    /// trials that completed at the old `max_t` go on from their checkpoints where the
    /// scheduler keeps them: ASHA (one bracket) decides at the rungs above it as it would have
    /// with this `max_t` from the start; HyperBand keeps its band and cuts at the old top as
    /// at any rung. The searcher keeps its history. A new sweep sets `max_t` in its
    /// [`Tuner::scheduler`]; this fails its `fit`.
    ///
    /// ```no_run
    /// // A finished ASHA sweep with max_t = 27: its best trials train on to step 81.
    /// let result = tune::Tuner::resume("runs/mnist").max_t(81).fit(|ctx| {
    ///     ctx.report(1, [("loss", ctx.params().f64("lr")?)])?;
    ///     Ok(())
    /// })?;
    /// # Ok::<(), tune::TuneError>(())
    /// ```
    pub fn max_t(mut self, steps: u64) -> Self {
        self.resume_max_t = Some(steps);
        self
    }

    /// Concurrent trials (also for a resumed sweep).
    pub fn cpu_slots(mut self, slots: usize) -> Self {
        self.spec.resources.cpu_slots = slots;
        self.resume_slots = Some(slots);
        self
    }

    /// Trials run at once on this machine, whatever the spec's `[resources]` say; with a
    /// PostgreSQL store, 0 runs the coordinator alone and `tune worker` processes run every
    /// trial. Where trials run changes no decision, so this may differ on resume.
    ///
    /// ```
    /// use tune::experiment::StoreLocation;
    /// let tuner = tune::Tuner::new(tune::Space::default())
    ///     .store(StoreLocation::Postgres("postgres://tune@db/tune".into()))
    ///     .local_slots(0);
    /// # drop(tuner);
    /// ```
    pub fn local_slots(mut self, slots: usize) -> Self {
        self.local_slots = Some(slots);
        self
    }

    /// The most a closure's attempt may run: `report` fails with [`crate::Stop::TimedOut`]
    /// once it has passed, and the trial fails (a command's limit is `timeout_s` in the spec).
    ///
    /// ```
    /// let tuner = tune::Tuner::new(tune::Space::default()).timeout(std::time::Duration::from_secs(600));
    /// # drop(tuner);
    /// ```
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = Some(limit);
        self
    }

    /// When the sweep ends before its budget is spent (`[stop]`): failures in a row, a time
    /// budget, a target value, trials without improvement. Also applies to a resumed sweep.
    ///
    /// ```
    /// use tune::{StopConditions, Tuner};
    /// let tuner = Tuner::new(tune::Space::default()).stop_when(StopConditions {
    ///     time_budget_s: Some(3600.0),
    ///     target: Some(0.01),
    ///     ..StopConditions::default()
    /// });
    /// # drop(tuner);
    /// ```
    pub fn stop_when(mut self, conditions: StopConditions) -> Self {
        if self.resume.is_some() {
            self.resume_stop = Some(conditions.clone());
        }
        self.spec.stop = conditions;
        self
    }

    /// Retries of a failed trial before it stays failed.
    pub fn max_failures(mut self, retries: u32) -> Self {
        self.spec.max_failures = retries;
        self.fixed("max_failures")
    }

    /// Runs of a trial whose machine was lost (a `tune worker` gone past its lease) before it
    /// fails (default 3); `max_failures` does not count them.
    pub fn max_lost_attempts(mut self, runs: u32) -> Self {
        self.spec.max_lost_attempts = runs;
        self.fixed("max_lost_attempts")
    }

    /// The experiment folder (default `runs/<name>`). With [`Tuner::resume_in`], where this
    /// machine keeps the trial folders.
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        let dir = dir.into();
        if self.resume_name.is_some() {
            self.resume = Some(dir);
            return self;
        }
        self.dir = Some(dir);
        self.fixed("dir")
    }

    /// Notes a setting that [`Tuner::resume`] refuses (the sweep goes on as created).
    fn fixed(mut self, setting: &'static str) -> Self {
        if self.resume.is_some() {
            self.fixed_on_resume.push(setting);
        }
        self
    }

    /// Writes the sweep into `dir` for TensorBoard as it runs (`[tracking] tensorboard`):
    /// see [`crate::tracking::tensorboard::TensorBoardLogger`].
    pub fn tensorboard(mut self, dir: impl Into<PathBuf>) -> Self {
        self.spec.tracking.tensorboard = Some(dir.into());
        self.fixed("tensorboard")
    }

    /// Logs the sweep to the MLflow tracking server at `url` as it runs (`[tracking] mlflow`),
    /// in the MLflow experiment `experiment` (default: the sweep's name): see
    /// [`crate::tracking::mlflow::MlflowLogger`].
    pub fn mlflow(mut self, url: impl Into<String>, experiment: Option<&str>) -> Self {
        self.spec.tracking.mlflow = Some(crate::spec::MlflowServer::Url(url.into()));
        self.spec.tracking.mlflow_experiment = experiment.map(String::from);
        self.fixed("mlflow")
    }

    /// Prints the progress line to stdout.
    pub fn progress(self, on: bool) -> Self {
        if on {
            self.observer(ProgressLine::new())
        } else {
            self
        }
    }

    /// Adds an observer of the sweep's events.
    pub fn observer(mut self, observer: impl Observer + 'static) -> Self {
        self.observers.push(Box::new(observer));
        self
    }

    /// A handle that stops the sweep cleanly from another thread (resumable, as Ctrl-C does).
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// A handle that steers the sweep from another thread while it runs: stop a trial, stop
    /// the sweep, add samples, enqueue a point ([`crate::Control`]).
    pub fn control(&self) -> SweepControl {
        self.control.clone()
    }

    /// Stops cleanly on Ctrl-C, SIGTERM or SIGHUP (leaving the sweep resumable); a second one
    /// exits the process at once with 130. Off by default, since a library should not take
    /// over a program's signals.
    pub fn handle_signals(mut self, on: bool) -> Self {
        self.handle_signals = on;
        self
    }

    /// Keeps `text` as the experiment's `spec.toml` (the CLI passes the user's file).
    pub fn spec_text(mut self, text: impl Into<String>) -> Self {
        self.spec_text = Some(text.into());
        self
    }

    /// Runs the sweep with a closure as the objective; returns when every trial has ended.
    pub fn fit<F>(self, objective: F) -> Result<TuneResult, TuneError>
    where
        F: Fn(&mut TrialContext) -> Result<(), BoxError> + Send + Sync + 'static,
    {
        let f: Arc<crate::objective::ObjectiveFn> = Arc::new(objective);
        self.run(|_, _, _| Ok(Objective::Closure(f)))
    }

    /// Runs the sweep with the spec's `[objective]`: its `command`, or its `builtin` trainable.
    pub fn fit_spec(self) -> Result<TuneResult, TuneError> {
        let (grace, local_slots) = (self.grace, self.local_slots);
        self.run(move |spec, dir, pack| {
            let slots = local_slots.unwrap_or(spec.resources.cpu_slots);
            spec_objective(spec, dir, grace, slots, pack)
        })
    }

    fn run(
        mut self,
        objective: impl FnOnce(&ExperimentSpec, &Path, usize) -> Result<Objective, TuneError>,
    ) -> Result<TuneResult, TuneError> {
        // Objective, searcher and scheduler are built before a new experiment folder is
        // created, so bad input leaves nothing behind.
        if self.local_slots == Some(0) && self.store == StoreLocation::Folder {
            return Err(TuneError::Invalid(
                "0 local slots runs no trial here: remote workers need the sweep in a \
                 PostgreSQL database (--store URL)"
                    .into(),
            ));
        }
        let local_slots = self.local_slots;
        let in_database = matches!(self.store, StoreLocation::Postgres(_));
        let prepare = |spec: &ExperimentSpec, dir: &Path| -> Result<_, TuneError> {
            check_workers_only(spec, in_database, local_slots)?;
            let (pool, note, pack) = local_pool(spec, local_slots)?;
            Ok((
                objective(spec, dir, pack)?,
                spec.make_searcher()
                    .map_err(|e| TuneError::Invalid(e.to_string()))?,
                spec.make_scheduler(),
                (pool, note),
                trackers(spec)?,
            ))
        };
        let (mut exp, (objective, searcher, scheduler, (pool, note), trackers), mut notes) =
            self.start(prepare)?;
        notes.extend(note);
        self.observers.extend(trackers);
        let spec = exp.stored.meta.spec.clone();
        let plan = Plan {
            name: spec.name.clone(),
            created_at: exp.stored.meta.created_at,
            search: spec.search.algorithm.algorithm().as_str().into(),
            scheduler: spec.scheduler.name().into(),
            notes,
            stop: self.stop.clone(),
            dir: exp.dir.clone(),
            trials: spec.trials_folder(&exp.dir),
            database_checkpoints: spec.database_checkpoints().is_some(),
            objectives: spec.objectives(),
            constraints: spec.constraints.clone(),
            samples: exp.stored.meta.samples,
            pool,
            max_failures: spec.max_failures,
            max_lost_attempts: spec.max_lost_attempts,
            stop_when: spec.stop.clone(),
            timeout: spec
                .objective
                .as_ref()
                .and_then(|o| o.timeout_s)
                .map(Duration::from_secs_f64)
                .or(self.timeout),
            remote: match &self.store {
                StoreLocation::Postgres(url) => Some(url.clone()),
                StoreLocation::Folder => None,
            },
            meta: exp.stored.meta.clone(),
            control: self.control.clone(),
        };
        let rt = runtime()?;
        let trials = std::mem::take(&mut exp.stored.trials);
        let observers = std::mem::take(&mut self.observers);
        let coordinator = Coordinator::new(
            plan, exp.store, trials, searcher, scheduler, objective, observers,
        );
        if self.handle_signals {
            rt.spawn(stop_on_signals(self.stop.clone(), self.grace));
        }
        let outcome = coordinator.run(rt.handle());
        rt.shutdown_timeout(Duration::from_secs(5));
        let ended = outcome?;
        Ok(TuneResult {
            dir: exp.dir,
            name: spec.name.clone(),
            store: self.store.clone(),
            objectives: spec.objectives(),
            constraints: spec.constraints.clone(),
            metric: spec.metric,
            best: ended.best,
            failed: ended.failed,
            first_failure: ended.first_failure,
            stopped: ended.stopped,
        })
    }

    /// Opens the experiment to resume, or validates the spec and creates one; `prepare` runs
    /// on its spec first (before anything is created).
    fn start<T>(
        &self,
        prepare: impl FnOnce(&ExperimentSpec, &Path) -> Result<T, TuneError>,
    ) -> Result<(Experiment, T, Vec<String>), TuneError> {
        if let Some(dir) = &self.resume {
            if let Some(setting) = self.fixed_on_resume.first() {
                return Err(TuneError::Invalid(format!(
                    "`{setting}` cannot change a sweep being resumed ({}): it goes on as it was \
                     created, so that it decides what the uninterrupted sweep would; start a new \
                     sweep for other settings",
                    dir.display()
                )));
            }
            let mut exp = match &self.resume_name {
                Some(name) => Experiment::open_in(dir, name, &self.store)?,
                None => Experiment::open(dir)?,
            };
            if let Some(slots) = self.resume_slots {
                // Where trials run does not change what is decided.
                exp.stored.meta.spec.resources.cpu_slots = slots;
            }
            if let Some(stop) = &self.resume_stop {
                stop.validate().map_err(|e| {
                    TuneError::Invalid(crate::spec::InvalidSetting::new("stop", e).to_string())
                })?;
                exp.stored.meta.spec.stop = stop.clone();
            }
            // Checked, and the scheduler prepared with it, before anything is written.
            let raised = match self.resume_max_t {
                Some(max_t) => Some(
                    (exp.stored.meta.spec.scheduler.raised_max_t(max_t))
                        .map_err(|e| TuneError::Invalid(e.to_string()))?,
                ),
                None => None,
            };
            // A copy only where the scheduler differs from the stored one.
            let raised_spec = raised.as_ref().map(|(scheduler, _)| ExperimentSpec {
                scheduler: scheduler.clone(),
                ..exp.stored.meta.spec.clone()
            });
            let spec = raised_spec.as_ref().unwrap_or(&exp.stored.meta.spec);
            let prepared = prepare(spec, &exp.dir)?;
            let mut notes = Vec::new();
            if let Some((scheduler, raised)) = raised {
                let reopened = exp.raise_max_t(scheduler, raised)?;
                notes.push(format!(
                    "max_t raised from {} to {}: the {} trial(s) completed at step {} are \
                     reopened, and go on from their checkpoints where the scheduler keeps them",
                    raised.from,
                    raised.to,
                    reopened.len(),
                    raised.from
                ));
            }
            if let Some(n) = self.resume_samples {
                exp.set_samples(n)?;
            }
            return Ok((exp, prepared, notes));
        }
        if self.resume_max_t.is_some() {
            return Err(TuneError::Invalid(
                "`max_t` raises a resumed sweep's; a new sweep sets it in its [scheduler]".into(),
            ));
        }
        self.spec
            .validate()
            .map_err(|e| TuneError::Invalid(e.to_string()))?;
        let dir = self
            .dir
            .clone()
            .unwrap_or_else(|| Path::new("runs").join(&self.spec.name));
        let prepared = prepare(&self.spec, &dir)?;
        let exp = Experiment::create_in(&dir, &self.spec, self.spec_text.as_deref(), &self.store)?;
        Ok((exp, prepared, Vec::new()))
    }
}

/// The runtime that trials' tasks and timers run on, beside the thread that drives them (the
/// coordinator's loop, or a worker's).
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, TuneError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| TuneError::io("starting the runtime", e))
}

/// The spec's `[objective]` (its `command`, or its `builtin` trainable sharing the cores among
/// `slots` slots, each training packs of up to `trials_per_pack`), for the experiment in `dir`.
pub(crate) fn spec_objective(
    spec: &ExperimentSpec,
    dir: &Path,
    grace: Duration,
    slots: usize,
    trials_per_pack: usize,
) -> Result<Objective, TuneError> {
    let Some(obj) = &spec.objective else {
        return Err(TuneError::Invalid(
            "the spec has no [objective] to run (`command = [...]` or `builtin = \"mlp\"`)".into(),
        ));
    };
    let workdir = obj.workdir.clone().unwrap_or_else(|| PathBuf::from("."));
    if obj.builtin.is_some() {
        #[cfg(feature = "builtin")]
        return Ok(Objective::Closure(crate::objective::builtin_objective(
            obj,
            &workdir,
            slots,
            (trials_per_pack, spec.resources.trials_per_gpu as usize),
        )?));
        #[cfg(not(feature = "builtin"))]
        let _ = (slots, trials_per_pack);
        #[cfg(not(feature = "builtin"))]
        return Err(TuneError::Invalid(format!(
            "[objective] builtin: {}",
            crate::objective::spec::NO_BUILTIN
        )));
    }
    check_program(&obj.command[0], &workdir)?;
    let launcher = obj
        .launcher()
        .map_err(|e| TuneError::Invalid(format!("[objective] {e}")))?;
    Ok(Objective::Command(Arc::new(CommandObjective {
        argv: obj.command.clone(),
        env: obj.env.clone(),
        workdir,
        experiment_dir: std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf()),
        metric: spec.metric.clone(),
        grace,
        launcher,
        processes_per_node: spec.resources.processes_per_node(),
        distributed: spec.resources.distributed(),
    })))
}

/// Asks for a clean stop on Ctrl-C, SIGTERM or SIGHUP (a closed terminal); a second one exits
/// at once, with 130, without waiting for trials to wind down (what was acknowledged is
/// already durable; running trials die with the process).
pub(crate) async fn stop_on_signals(stop: StopHandle, grace: Duration) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut kinds: Vec<_> = [
        SignalKind::interrupt(),
        SignalKind::terminate(),
        SignalKind::hangup(),
    ]
    .into_iter()
    .filter_map(|k| signal(k).ok())
    .collect();
    if kinds.is_empty() {
        return;
    }
    for nth in 0.. {
        let any = next_of(&mut kinds);
        any.await;
        if nth == 0 {
            eprintln!(
                "tune: stopping; running trials get SIGTERM and {} s to end (Ctrl-C again to quit at once)",
                grace.as_secs_f64()
            );
            stop.stop();
        } else {
            eprintln!(
                "tune: quitting at once; `tune resume` continues from the last acknowledged result"
            );
            std::process::exit(130);
        }
    }
}

/// The next signal of any of `signals`.
async fn next_of(signals: &mut [tokio::signal::unix::Signal]) {
    std::future::poll_fn(|cx| {
        for s in signals.iter_mut() {
            if s.poll_recv(cx).is_ready() {
                return std::task::Poll::Ready(());
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// Fails early, as bad input, when the objective's program cannot be found.
fn check_program(program: &str, workdir: &Path) -> Result<(), TuneError> {
    let found = if program.contains('/') {
        workdir.join(program).is_file()
    } else {
        std::env::var_os("PATH")
            .map(|paths| std::env::split_paths(&paths).any(|p| p.join(program).is_file()))
            .unwrap_or(false)
    };
    if found {
        Ok(())
    } else if program.contains('/') {
        Err(TuneError::Invalid(format!(
            "[objective] `command`: `{program}` does not exist (relative to {})",
            workdir.display()
        )))
    } else {
        Err(TuneError::Invalid(format!(
            "[objective] `command`: `{program}` was not found on PATH"
        )))
    }
}

/// What a finished sweep gives back: the best trial, the failures, and where every trial is
/// kept ([`TuneResult::trials`] reads them from there: a sweep holds only its unfinished trials
/// in memory, so that a long one stays flat).
#[derive(Debug, Clone)]
pub struct TuneResult {
    dir: PathBuf,
    name: String,
    store: StoreLocation,
    metric: String,
    objectives: Vec<Goal>,
    constraints: Constraints,
    best: Option<Trial>,
    failed: u64,
    first_failure: Option<Trial>,
    stopped: Option<StopReason>,
}

impl TuneResult {
    /// Why the sweep ended before its budget was spent (`[stop]`), if it did: `tune resume`
    /// goes on from there.
    pub fn stopped(&self) -> Option<&StopReason> {
        self.stopped.as_ref()
    }

    /// Every trial, in id order, with its results, read from the experiment's store as it is
    /// now (a later resume of the folder adds to them; an error if the folder is gone or in
    /// use by a running sweep).
    pub fn trials(&self) -> Result<Vec<Trial>, TuneError> {
        match &self.store {
            StoreLocation::Folder => Ok(Experiment::open(&self.dir)?.stored.trials),
            StoreLocation::Postgres(url) => Ok(Experiment::read_postgres(url, &self.name)?.trials),
        }
    }

    /// The completed trial with the best last-reported metric ([`Mode::beats`]: ties go to
    /// the lower id); with several objectives, by the first ([`TuneResult::pareto_front`]
    /// is the answer there).
    pub fn best(&self) -> Option<&Trial> {
        self.best.as_ref()
    }

    /// The completed trials on the Pareto front of the sweep's objectives ([`pareto_front`]),
    /// read from the store; with one objective, the trials with the best value.
    pub fn pareto_front(&self) -> Result<Vec<Trial>, TuneError> {
        let trials = self.trials()?;
        Ok(pareto_front(&trials, &self.objectives, &self.constraints)
            .into_iter()
            .cloned()
            .collect())
    }

    /// How many trials failed.
    pub fn failed(&self) -> u64 {
        self.failed
    }

    /// The failed trial with the lowest id, with its error.
    ///
    /// ```
    /// let dir = tempfile::tempdir().unwrap();
    /// let space = tune::Space::builder().uniform("x", 0.0, 1.0).build().unwrap();
    /// let result = tune::Tuner::new(space)
    ///     .samples(4)
    ///     .dir(dir.path().join("half"))
    ///     .fit(|ctx| {
    ///         if ctx.id() % 2 == 1 {
    ///             return Err("odd trials fail".into());
    ///         }
    ///         ctx.report(1, [("loss", 1.0)])?;
    ///         Ok(())
    ///     })
    ///     .unwrap();
    /// assert_eq!(result.failed(), 2);
    /// let first = result.first_failure().unwrap();
    /// assert_eq!((first.id, first.error.as_deref()), (1, Some("odd trials fail")));
    /// ```
    pub fn first_failure(&self) -> Option<&Trial> {
        self.first_failure.as_ref()
    }

    /// The best trial's params as a type of yours (fields named as the parameters; inactive
    /// conditional parameters are absent, so make those `Option`s). `None` when no trial
    /// completed.
    ///
    /// ```
    /// #[derive(serde::Deserialize)]
    /// struct Best { x: f64 }
    /// let dir = tempfile::tempdir().unwrap();
    /// let result = tune::Tuner::new(tune::Space::builder().uniform("x", 0.0, 1.0).build().unwrap())
    ///     .samples(3)
    ///     .dir(dir.path().join("best"))
    ///     .fit(|ctx| { let x = ctx.params().f64("x")?; ctx.report(1, [("loss", x)])?; Ok(()) })
    ///     .unwrap();
    /// let best: Best = result.best_params().unwrap().unwrap();
    /// assert_eq!(best.x, result.best().unwrap().params.f64("x").unwrap());
    /// ```
    pub fn best_params<T: serde::de::DeserializeOwned>(&self) -> Result<Option<T>, TuneError> {
        let Some(best) = self.best() else {
            return Ok(None);
        };
        let as_json = serde_json::to_value(&best.params)
            .map_err(|e| TuneError::Invalid(format!("the best params cannot be read: {e}")))?;
        serde_json::from_value(as_json).map(Some).map_err(|e| {
            TuneError::Invalid(format!(
                "the best params (trial {}) do not fit the type asked for: {e}",
                best.id
            ))
        })
    }

    /// The experiment folder (pass it to `tune status` or [`Tuner::resume`]).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn metric(&self) -> &str {
        &self.metric
    }

    /// The experiment's name (its key in a database).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where the records are kept.
    pub fn store(&self) -> &StoreLocation {
        &self.store
    }
}

/// Sweeps whose trials run on `tune worker`s only: in PostgreSQL, and with no slot of the
/// coordinator's own (`--slots 0`). `[store] checkpoints = "database"` (the coordinator's
/// slots would keep trial folders on this machine only) and `nodes_per_trial` above 1 (a gang
/// is several workers at once).
fn check_workers_only(
    spec: &ExperimentSpec,
    in_database: bool,
    local_slots: Option<usize>,
) -> Result<(), TuneError> {
    let (setting, why) = if spec.database_checkpoints().is_some() {
        (
            "[store] checkpoints = \"database\"".to_string(),
            "keeps trial folders in the sweep's PostgreSQL database",
        )
    } else if spec.resources.nodes_per_trial() > 1 {
        (
            format!(
                "[resources] nodes_per_trial = {}",
                spec.resources.nodes_per_trial()
            ),
            "runs each trial on that many `tune worker`s at once, which meet through the \
             sweep's PostgreSQL database",
        )
    } else {
        return Ok(());
    };
    if !in_database {
        return Err(TuneError::Invalid(format!(
            "{setting} {why}: run it with --store postgres://... (or TUNE_STORE)"
        )));
    }
    if local_slots != Some(0) {
        return Err(TuneError::Invalid(format!(
            "{setting}: trials run on `tune worker`s only, not on this coordinator's own \
             slots: run it with --slots 0"
        )));
    }
    Ok(())
}

/// The slots this process runs trials on (`local_slots`, where given, in place of the spec's
/// CPU slots; none at all with 0), a note for the user, and how many trials a slot packs.
fn local_pool(
    spec: &ExperimentSpec,
    local_slots: Option<usize>,
) -> Result<(Pool, Option<String>, usize), TuneError> {
    let mut resources = spec.resources.clone();
    if let Some(n) = local_slots {
        resources.cpu_slots = n;
        if n == 0 {
            resources.gpus = crate::spec::Gpus::List(Vec::new());
        }
    }
    let (mut pool, mut note) = Pool::new(
        &resources,
        tune_trials::gpu::discover(),
        Box::new(tune_trials::gpu::free_bytes),
    )?;
    let pack = spec.trials_per_pack(pool.on_gpu());
    // A coordinator that runs no trial itself (`--slots 0`) packs none.
    if pack > 1 && !pool.slots().is_empty() {
        pool.pack_trials(pack);
        let packs = format!("up to {pack} trials per slot train as one fused model");
        note = Some(match note {
            Some(n) => format!("{n}; {packs}"),
            None => packs,
        });
    }
    Ok((pool, note, pack))
}
