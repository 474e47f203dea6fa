//! [`Worker`]: a process that runs trials of experiments in a PostgreSQL database, for
//! coordinators anywhere (`tune worker URL`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};
use tune_search::TrialId;

use super::bridge::listen;
use super::checkpoints::{KeptFolder, Saved};
use super::db::Db;
use super::{DECISIONS_CHANNEL, DEFAULT_LEASE, OFFERS_CHANNEL, POLL};
use crate::error::TuneError;
use crate::objective::{BoxError, Objective, TrialContext};
use crate::observer::StopHandle;
use crate::pool::{Pool, Slot};
use crate::protocol::{Outcome, ReportAnswer, WorkerMsg};
use crate::spec::{ExperimentSpec, Gpus, Resources};
use crate::store::pg_store::{connect_with, db_error, existing, this_process};
use crate::store::{Meta, StoreError};
use sending::Unsent;

/// A worker: claims trials that coordinators offer in a PostgreSQL database and runs them,
/// streaming each report into the database and waiting for the coordinator's decision, as a
/// local slot does.
///
/// ```no_run
/// use tune::remote::Worker;
/// // Runs trials of "mnist-lr" on 4 slots of this machine until that sweep is finished.
/// let ran = Worker::new("postgres://tune@db.example/tune")
///     .experiment("mnist-lr")
///     .slots(4)
///     .run(|ctx| {
///         let lr = ctx.params().f64("lr")?;
///         ctx.report(1, [("loss", (lr - 0.01).abs())])?;
///         Ok(())
///     })?;
/// println!("ran {} attempts", ran.attempts);
/// # Ok::<(), tune::TuneError>(())
/// ```
pub struct Worker {
    url: String,
    experiment: Option<String>,
    resources: Resources,
    dir: PathBuf,
    lease: Duration,
    grace: Duration,
    stop: StopHandle,
    handle_signals: bool,
    /// How long to wait for the experiment to be created.
    wait: Duration,
    /// Where other machines reach this one (node 0 of a gang); `None`: its host name.
    address: Option<String>,
}

/// What a worker did, when it ends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerSummary {
    /// Attempts it claimed and ran.
    pub attempts: u64,
    /// Attempts it lost: its lease ran out (or the coordinator cancelled them), so its later
    /// writes were refused and the trial was stopped here.
    pub lost: u64,
    /// Trial folders it wrote to the database (`[store] checkpoints = "database"`), and the
    /// bytes of their files.
    pub checkpoints_written: u64,
    pub checkpoint_bytes_written: u64,
    /// Trial folders it read from the database (not those it held already), and their bytes.
    pub checkpoints_read: u64,
    pub checkpoint_bytes_read: u64,
}

impl WorkerSummary {
    fn count(&mut self, saved: Saved) {
        if let Saved::Written { bytes } = saved {
            self.checkpoints_written += 1;
            self.checkpoint_bytes_written += bytes;
        }
    }
}

impl Worker {
    /// A worker for the database at `url`, serving every experiment there, with one slot per
    /// core, its trial folders under `runs/<experiment>`.
    pub fn new(url: impl Into<String>) -> Worker {
        Worker {
            url: url.into(),
            experiment: None,
            resources: Resources::default(),
            dir: PathBuf::from("runs"),
            lease: DEFAULT_LEASE,
            grace: Duration::from_secs(5),
            stop: StopHandle::new(),
            handle_signals: false,
            wait: Duration::ZERO,
            address: None,
        }
    }

    /// The address other machines reach this one at (default: its host name): where the
    /// processes of a trial on several machines (`[resources] nodes_per_trial`) meet its
    /// node 0 when this worker runs that node (`MASTER_ADDR`, `{master_addr}`).
    ///
    /// ```
    /// let worker = tune::remote::Worker::new("postgres://tune@db/tune").address("10.0.0.7");
    /// # drop(worker);
    /// ```
    pub fn address(mut self, address: impl Into<String>) -> Self {
        self.address = Some(address.into());
        self
    }

    /// Serves only experiment `name` (it must exist), and ends once its sweep is finished.
    pub fn experiment(mut self, name: impl Into<String>) -> Self {
        self.experiment = Some(name.into());
        self
    }

    /// With [`Worker::experiment`]: waits up to `wait` for the experiment to be created (its
    /// coordinator may start after its workers, as in a batch job that starts them all at
    /// once) instead of failing at once.
    pub fn wait_for_experiment(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Trials run at once on CPU (without GPUs).
    pub fn slots(mut self, slots: usize) -> Self {
        self.resources.cpu_slots = slots;
        self
    }

    /// Which GPUs to use (the `cuda` build), and how many trials share each.
    pub fn gpus(mut self, gpus: Gpus, trials_per_gpu: u32) -> Self {
        self.resources.gpus = gpus;
        self.resources.trials_per_gpu = trials_per_gpu;
        self
    }

    /// Where trial folders go: `<dir>/<experiment>/trials/<id>` (default `runs`).
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = dir.into();
        self
    }

    /// How long a claimed trial is this worker's without a heartbeat (default 15 s). A worker
    /// cut off from the database for longer stops its trials: they are run again elsewhere.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// A handle that ends the worker: running trials are interrupted and handed back.
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// Stop cleanly on Ctrl-C, SIGTERM or SIGHUP (the command line's behaviour).
    pub fn handle_signals(mut self, on: bool) -> Self {
        self.handle_signals = on;
        self
    }

    /// Runs `objective` for every trial claimed, until stopped (or, with
    /// [`Worker::experiment`], until that sweep is finished).
    pub fn run<F>(self, objective: F) -> Result<WorkerSummary, TuneError>
    where
        F: Fn(&mut TrialContext) -> Result<(), BoxError> + Send + Sync + 'static,
    {
        let f: Arc<crate::objective::ObjectiveFn> = Arc::new(objective);
        // A closure trains each trial alone: its sweep's `fuse` does not apply.
        self.serve(
            Box::new(move |_, _, _| Ok(Objective::Closure(f.clone()))),
            false,
        )
    }

    /// Runs each experiment's own `[objective]` (its command, or its built-in trainable).
    /// A worker serving one sweep ([`Worker::experiment`]) fuses its built-in trials as a
    /// local slot does: its `[resources] fuse`, `"auto"` judged by this machine's GPUs, lets
    /// each of the worker's slots hold that many trials, trained as one model.
    pub fn run_spec(self) -> Result<WorkerSummary, TuneError> {
        let (grace, slots) = (self.grace, self.resources.cpu_slots);
        self.serve(
            Box::new(move |spec, dir, trials_per_pack| {
                crate::tuner::spec_objective(spec, dir, grace, slots, trials_per_pack)
            }),
            true,
        )
    }

    /// Serves trials with the objectives `objective_of` makes; `fuses`: whether they may
    /// train in packs (built-in trainables), as the sweep's `fuse` says.
    fn serve(
        self,
        objective_of: Box<ObjectiveOf>,
        fuses: bool,
    ) -> Result<WorkerSummary, TuneError> {
        if self.lease < Duration::from_millis(200) {
            return Err(TuneError::Invalid(format!(
                "the worker's lease must be at least 0.2 s; found {} s",
                self.lease.as_secs_f64()
            )));
        }
        let location = crate::store::StorePlace::Postgres {
            url: crate::store::redact_url(&self.url),
            name: None,
        };
        let config = self.connection_config(&location)?;
        let mut client = connect_with(&config, &location)?;
        let rt = crate::tuner::runtime()?;
        if self.handle_signals {
            rt.spawn(crate::tuner::stop_on_signals(self.stop.clone(), self.grace));
        }
        let only = match &self.experiment {
            Some(name) => match self.experiment_id(&mut client, name, &location)? {
                Some(id) => Some(id),
                None => return Ok(WorkerSummary::default()),
            },
            None => None,
        };
        let (pool, note) = Pool::new(
            &self.resources,
            tune_trials::gpu::discover(),
            Box::new(tune_trials::gpu::free_bytes),
        )?;
        if let Some(note) = note {
            eprintln!("tune worker: {note}");
        }
        let (wake_tx, wake_rx) = mpsc::unbounded_channel();
        let listening = Arc::new(Mutex::new(HashSet::new()));
        let stop_listener = Arc::new(AtomicBool::new(false));
        let listener = spawn_listener(config.clone(), &listening, &stop_listener, wake_tx);
        let (tx, rx) = mpsc::unbounded_channel();
        let mut state = WorkerState {
            me: this_process(),
            settings: &self,
            location,
            db: Db::new(client, config),
            only,
            pool,
            objective_of,
            fuses,
            experiments: HashMap::new(),
            not_served: Vec::new(),
            running: HashMap::new(),
            pending: HashMap::new(),
            listening,
            tx,
            summary: WorkerSummary::default(),
            last_heartbeat: None,
            last_error: None,
            unsent: VecDeque::new(),
            heartbeat_ok: Instant::now(),
        };
        let result = state.serve(&rt, rx, wake_rx);
        let _ = state
            .db
            .execute("DELETE FROM tune_workers WHERE id = $1", &[&state.me]);
        stop_listener.store(true, Ordering::SeqCst);
        let _ = listener.join();
        rt.shutdown_timeout(Duration::from_secs(5));
        result
    }

    /// The database's connection settings from the worker's URL, with timeouts within its
    /// lease: a worker must notice a database it cannot reach within its lease (a stalled
    /// network otherwise blocks a query for as long as TCP retries), so it stops its trials
    /// then.
    fn connection_config(
        &self,
        location: &crate::store::StorePlace,
    ) -> Result<crate::store::pg_store::PgSettings, TuneError> {
        let mut settings = crate::store::pg_store::parse_url(&self.url, location)?;
        let config = &mut settings.config;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(self.lease);
        }
        config
            .tcp_user_timeout(self.lease)
            .keepalives(true)
            .keepalives_idle((self.lease / 2).max(Duration::from_secs(1)));
        Ok(settings)
    }

    /// The id of the experiment `name`, waiting up to `--wait` for its sweep to store it;
    /// `None` where the worker is stopped meanwhile.
    fn experiment_id(
        &self,
        client: &mut postgres::Client,
        name: &str,
        location: &crate::store::StorePlace,
    ) -> Result<Option<i64>, TuneError> {
        let deadline = Instant::now() + self.wait;
        loop {
            match existing(client, name, location) {
                Ok(id) => return Ok(Some(id)),
                Err(StoreError::NoMeta) if self.stop.is_stopped() => return Ok(None),
                Err(StoreError::NoMeta) if Instant::now() < deadline => std::thread::sleep(POLL),
                Err(StoreError::NoMeta) => {
                    return Err(TuneError::Invalid(format!(
                        "{location} holds no experiment named {name:?}{}: start its sweep with \
                         `tune run SPEC --store URL` (the spec's `name`), then its workers, or \
                         give them --wait",
                        if self.wait.is_zero() {
                            String::new()
                        } else {
                            format!(" after {} s", self.wait.as_secs_f64())
                        }
                    )))
                }
                Err(e) => return Err(TuneError::Store(e)),
            }
        }
    }
}

/// A thread listening for offers and decisions until `stop`: an offer wakes the worker
/// (`None`), and so does a decision on one of the reports `listening` holds, with the
/// decision.
fn spawn_listener(
    settings: crate::store::pg_store::PgSettings,
    listening: &Arc<Mutex<HashSet<i64>>>,
    stop: &Arc<AtomicBool>,
    wake: mpsc::UnboundedSender<Option<(i64, ReportAnswer)>>,
) -> std::thread::JoinHandle<()> {
    let (filter, stop) = (listening.clone(), stop.clone());
    std::thread::spawn(move || {
        listen(
            &settings,
            &[OFFERS_CHANNEL, DECISIONS_CHANNEL],
            |channel, payload| {
                if channel != DECISIONS_CHANNEL {
                    return wake.send(None).is_ok();
                }
                let decided = payload
                    .split_once(':')
                    .and_then(|(id, heard)| Some((id.parse::<i64>().ok()?, heard)))
                    .filter(|(id, _)| filter.lock().unwrap().contains(id));
                match decided {
                    Some((id, heard)) => wake.send(Some((id, ReportAnswer::parse(heard)))).is_ok(),
                    None => true,
                }
            },
            &stop,
        )
    })
}

/// This machine's GPUs' use now as JSON, for `tune_workers.gpus`; `None` without a driver.
/// Builds with the `failpoints` feature (the tests') take it from `TUNE_TEST_GPU_USE` where
/// that is set: the test machines have no GPU.
fn gpus_now() -> Option<String> {
    #[cfg(feature = "failpoints")]
    if let Some(given) = std::env::var_os("TUNE_TEST_GPU_USE") {
        return given.into_string().ok();
    }
    tune_trials::gpu_use()
        .filter(|gpus| !gpus.is_empty())
        .and_then(|gpus| serde_json::to_string(&gpus).ok())
}

/// How a worker gets the objective of an experiment, from its spec, its trial folder and the
/// trials each slot holds (more than 1: trained in packs, see [`Worker::run_spec`]).
type ObjectiveOf = dyn Fn(&ExperimentSpec, &Path, usize) -> Result<Objective, TuneError> + Send;

/// An attempt, as the worker knows it: (experiment id, trial, attempt).
type Key = (i64, TrialId, u32);

/// An experiment this worker ran trials of.
struct Served {
    name: String,
    dir: PathBuf,
    /// Why its trials cannot run here (its spec has no objective a worker can run).
    objective: Result<Objective, String>,
    /// Trials per slot, trained as one model (1: each alone).
    trials_per_pack: usize,
    /// The size cap of its trial folders, where it keeps them in the database
    /// (`[store] checkpoints = "database"`).
    checkpoint_cap: Option<u64>,
    /// What one of its trials takes, where that is more than one slot: `cpus_per_trial`,
    /// `gpus_per_trial`.
    takes: Option<(usize, Option<u32>)>,
    /// The machines one of its trials spans (`nodes_per_trial`): above 1, gangs of workers.
    nodes: u32,
}

/// How many trials of a sweep each of a worker's slots holds, trained as one fused model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Packing {
    /// The worker serves this sweep only, and its pool is sized for it: the sweep's `fuse`.
    Sized { on_gpu: bool },
    /// The worker serves every sweep, one trial per slot: its pool is shared by sweeps whose
    /// `fuse` may differ.
    Shared { on_gpu: bool },
    /// Its objective (a closure) trains each trial alone.
    Never,
}

struct Running {
    token: i64,
    slot: Slot,
    shutdown: watch::Sender<bool>,
    /// Step-less reports are numbered after `base` (the trial's last stored step when this
    /// run goes on from a checkpoint).
    base: u64,
    reports: u64,
    /// Its lease is gone: nothing more it writes is sent.
    lost: bool,
    /// Its trial folder, where the sweep keeps trial folders in the database.
    kept: Option<KeptFolder>,
    /// What the attempt ends with whatever its trial ends with: failed (its folder could not
    /// be kept, another node of its gang failed) or lost (another node was lost).
    ends_as: Option<Outcome>,
    /// Its trial was told to end (a decision other than continue): what the rest of its gang
    /// does next no longer changes its outcome.
    decided: bool,
    /// Its place in a gang across machines (`nodes_per_trial` above 1).
    gang: Option<GangRole>,
}

/// A run's place in a gang (src/remote/worker/gang.rs).
struct GangRole {
    node_rank: u32,
    /// Node 0: the rendezvous port, no other trial's on this machine while the attempt runs.
    _port: Option<crate::objective::command::PortLease>,
    /// Its trial printed a report (a node above 0: not heard), told once.
    told_reports: bool,
}

impl Running {
    /// Whether this run holds the attempt itself (its token is the attempt's): every run but
    /// the nodes above 0 of a gang.
    fn holds_attempt(&self) -> bool {
        self.gang.as_ref().is_none_or(|g| g.node_rank == 0)
    }
}

struct WorkerState<'a> {
    me: String,
    settings: &'a Worker,
    location: crate::store::StorePlace,
    db: Db,
    only: Option<i64>,
    pool: Pool,
    objective_of: Box<ObjectiveOf>,
    /// Whether its objectives may train trials in packs (see [`Worker::run_spec`]).
    fuses: bool,
    experiments: HashMap<i64, Served>,
    /// Sweeps whose trials take several slots each, which a worker serving every sweep
    /// leaves to workers that serve them alone.
    not_served: Vec<i64>,
    running: HashMap<Key, Running>,
    /// Reports sent and waiting for the decision: report id -> (attempt, answer).
    pending: HashMap<i64, (Key, oneshot::Sender<ReportAnswer>)>,
    /// The pending report ids, shared with the listener (it wakes us for these only).
    listening: Arc<Mutex<HashSet<i64>>>,
    tx: mpsc::UnboundedSender<(Key, WorkerMsg)>,
    summary: WorkerSummary,
    last_heartbeat: Option<Instant>,
    /// When the database last renewed our leases.
    heartbeat_ok: Instant,
    /// The last database error told on stderr (each new one is told once).
    last_error: Option<String>,
    /// What trials sent that the database did not take (it stopped answering: a restart, a
    /// network cut), in the order sent: sent again once it answers, for as long as the
    /// attempts' leases last (past that the heartbeat loses them, and their reports are
    /// refused).
    unsent: VecDeque<(Key, Unsent)>,
}

impl WorkerState<'_> {
    /// How the trials of the sweeps it serves pack onto its slots.
    fn packing(&self) -> Packing {
        let on_gpu = self.pool.on_gpu();
        match (self.fuses, self.only) {
            (false, _) => Packing::Never,
            (true, Some(_)) => Packing::Sized { on_gpu },
            (true, None) => Packing::Shared { on_gpu },
        }
    }

    fn err(&self, e: postgres::Error) -> TuneError {
        TuneError::Store(db_error(&self.location, e))
    }

    fn serve(
        &mut self,
        rt: &tokio::runtime::Runtime,
        mut rx: mpsc::UnboundedReceiver<(Key, WorkerMsg)>,
        mut wake: mpsc::UnboundedReceiver<Option<(i64, ReportAnswer)>>,
    ) -> Result<WorkerSummary, TuneError> {
        self.register()?;
        let mut stop = self.settings.stop.0.subscribe();
        // Offers are looked for when a notification says there are some, a slot came free, or
        // (as notifications may be missed) every poll interval; so are decisions and the end.
        let mut may_claim = true;
        let mut looked = Instant::now();
        loop {
            if !self.unsent.is_empty() {
                if let Err(e) = self.send_unsent() {
                    self.recover(e);
                }
            }
            let timer = looked.elapsed() >= POLL;
            if timer {
                looked = Instant::now();
                if let Err(e) = self.take_decisions() {
                    self.recover(e);
                }
                if let Err(e) = self.watch() {
                    self.recover(e);
                }
            }
            let stopping = *stop.borrow();
            if stopping {
                for r in self.running.values() {
                    r.shutdown.send_replace(true);
                }
            }
            if self.heartbeat_due() {
                self.heartbeat();
            }
            if !stopping && (may_claim || timer) {
                may_claim = false;
                match self.claim(rt) {
                    Ok(()) => {}
                    Err(e) if self.db.is_closed() => self.recover(e),
                    Err(e) => return Err(e),
                }
            }
            if self.running.is_empty() {
                if stopping {
                    break;
                }
                if timer && self.experiment_finished() {
                    break;
                }
            }
            let tick = (self.settings.lease / 4).min(POLL.saturating_sub(looked.elapsed()));
            let (msg, woke) = rt.block_on(async {
                tokio::select! {
                    m = rx.recv() => (m, None),
                    w = wake.recv() => (None, w),
                    _ = stop.changed(), if !stopping => (None, None),
                    _ = tokio::time::sleep(tick) => (None, None),
                }
            });
            may_claim |= self.take_wakes(woke, &mut wake);
            may_claim |= self.take_messages(msg, &mut rx);
        }
        Ok(self.summary.clone())
    }

    /// Registers the worker in `tune_workers` with its slots; one serving a single sweep
    /// first sizes its pool by that sweep's `fuse`, before the slots are told.
    fn register(&mut self) -> Result<(), TuneError> {
        if let Some(e) = self.only {
            let packing = self.packing();
            let served =
                serve_experiment(&mut self.db, e, self.settings, &*self.objective_of, packing)
                    .map_err(|e| self.err(e))?;
            if let Some((cpus, gpus)) = served.takes {
                // Its trials take several slots or GPUs each: the pool is placed by trial.
                let resources = Resources {
                    cpus_per_trial: Some(cpus),
                    gpus_per_trial: gpus,
                    ..self.settings.resources.clone()
                };
                let (pool, note) = Pool::new(
                    &resources,
                    tune_trials::gpu::discover(),
                    Box::new(tune_trials::gpu::free_bytes),
                )?;
                self.pool = pool;
                if let Some(note) = note {
                    eprintln!("tune worker: {note}");
                }
            }
            if served.trials_per_pack > 1 {
                self.pool.pack_trials(served.trials_per_pack);
                eprintln!(
                    "tune worker: up to {} trials per slot train as one fused model",
                    served.trials_per_pack
                );
            }
            self.experiments.insert(e, served);
        } else {
            // Before it is seen serving: once registered, it has met every sweep there was.
            self.meet_new_sweeps()?;
        }
        let slots = self.pool.slots().len() as i32;
        let lease = self.settings.lease.as_secs_f64();
        self.db
            .execute(
                "INSERT INTO tune_workers (id, experiment, slots, lease_s, gpus)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (id) DO UPDATE SET experiment = $2, slots = $3, lease_s = $4,
                     started_at = now(), heartbeat_at = now(), gpus = $5",
                &[&self.me, &self.only, &slots, &lease, &gpus_now()],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Whether the one sweep this worker serves has finished (not known: not finished).
    fn experiment_finished(&mut self) -> bool {
        let Some(e) = self.only else {
            return false;
        };
        self.db
            .query_one("SELECT finished FROM tune_experiments WHERE id = $1", &[&e])
            .map(|r| r.get(0))
            .unwrap_or(false)
    }

    /// Answers the decisions heard (`woke` and whatever else waits); whether an offer was
    /// heard of, so that the worker looks for one.
    fn take_wakes(
        &mut self,
        woke: Option<Option<(i64, ReportAnswer)>>,
        wake: &mut mpsc::UnboundedReceiver<Option<(i64, ReportAnswer)>>,
    ) -> bool {
        let mut offered = false;
        let mut wakes: Vec<Option<(i64, ReportAnswer)>> = woke.into_iter().collect();
        while let Ok(w) = wake.try_recv() {
            wakes.push(w);
        }
        for w in wakes {
            match w {
                Some((id, heard)) => self.answer(id, heard),
                None => offered = true,
            }
        }
        offered
    }

    /// Handles the trials' messages (`msg` and whatever else waits); whether a trial
    /// finished, freeing a slot.
    fn take_messages(
        &mut self,
        msg: Option<(Key, WorkerMsg)>,
        rx: &mut mpsc::UnboundedReceiver<(Key, WorkerMsg)>,
    ) -> bool {
        let mut freed = false;
        let mut msgs: Vec<(Key, WorkerMsg)> = msg.into_iter().collect();
        while let Ok(m) = rx.try_recv() {
            msgs.push(m);
        }
        for (key, msg) in msgs {
            freed |= matches!(msg, WorkerMsg::Finished { .. });
            if let Err(e) = self.handle(key, msg) {
                self.recover(e);
            }
        }
        freed
    }

    /// After database error `e` (not returned: the next round retries what failed, and the
    /// lease decides the fate of trials meanwhile): a new connection, or a pause before the
    /// next try. Each new error is told on stderr, so that one that persists (a permission
    /// taken away, a full disk on the server) is not retried in silence.
    fn recover(&mut self, e: TuneError) {
        let text = e.to_string();
        if self.last_error.as_ref() != Some(&text) {
            eprintln!(
                "tune worker: {text}; retrying every {} ms",
                POLL.as_millis()
            );
            self.last_error = Some(text);
        }
        if self.db.is_closed() && self.db.reconnect() {
            return;
        }
        std::thread::sleep(POLL);
    }

    fn heartbeat_due(&self) -> bool {
        self.last_heartbeat
            .is_none_or(|t| t.elapsed() >= self.settings.lease / 4)
    }

    /// Renews the leases of running attempts; those the database no longer grants (expired,
    /// cancelled) are stopped here. Cut off from the database for longer than the lease, the
    /// worker stops them all: the coordinator has given them to others by now.
    fn heartbeat(&mut self) {
        self.last_heartbeat = Some(Instant::now());
        let tokens: Vec<i64> = (self.running.values())
            .filter(|r| r.holds_attempt())
            .map(|r| r.token)
            .collect();
        let members: Vec<i64> = (self.running.values())
            .filter(|r| r.gang.is_some())
            .map(|r| r.token)
            .collect();
        let lease = self.settings.lease.as_secs_f64();
        let renewed = self
            .db
            .execute(
                "UPDATE tune_workers SET heartbeat_at = now(), gpus = $2 WHERE id = $1",
                &[&self.me, &gpus_now()],
            )
            .and_then(|_| gang::renew_members(&mut self.db, &members, lease))
            .and_then(|_| {
                self.db.query(
                    "UPDATE tune_attempts SET lease_until = now() + make_interval(secs => $2)
                     WHERE token = ANY($1) AND state = 'running' RETURNING token",
                    &[&tokens, &lease],
                )
            });
        match renewed {
            Ok(rows) => {
                self.heartbeat_ok = Instant::now();
                let kept: HashSet<i64> = rows.iter().map(|r| r.get(0)).collect();
                let gone: Vec<Key> = self
                    .running
                    .iter()
                    .filter(|(_, r)| !r.lost && r.holds_attempt() && !kept.contains(&r.token))
                    .map(|(k, _)| *k)
                    .collect();
                for key in gone {
                    self.lose(key, "its lease was taken back");
                }
            }
            Err(_) => {
                if self.heartbeat_ok.elapsed() > self.settings.lease {
                    let all: Vec<Key> = self
                        .running
                        .iter()
                        .filter(|(_, r)| !r.lost)
                        .map(|(k, _)| *k)
                        .collect();
                    for key in all {
                        self.lose(
                            key,
                            "this worker lost the database for longer than its lease",
                        );
                    }
                }
                if self.db.is_closed() {
                    self.db.reconnect();
                }
            }
        }
    }

    /// Stops attempt `key` here: the coordinator no longer counts on it.
    fn lose(&mut self, key: Key, why: &str) {
        let Some(r) = self.running.get_mut(&key) else {
            return;
        };
        if r.lost {
            return;
        }
        r.lost = true;
        r.shutdown.send_replace(true);
        self.summary.lost += 1;
        let name = self
            .experiments
            .get(&key.0)
            .map_or("?", |s| s.name.as_str());
        eprintln!(
            "tune worker: stopping trial {} (attempt {}) of {name:?}: {why}; it runs again elsewhere",
            key.1, key.2
        );
        let answered: Vec<i64> = self
            .pending
            .iter()
            .filter(|(_, (k, _))| *k == key)
            .map(|(id, _)| *id)
            .collect();
        for id in answered {
            if let Some((_, ack)) = self.pending.remove(&id) {
                let _ = ack.send(ReportAnswer::Refused);
            }
            self.listening.lock().unwrap().remove(&id);
        }
        let (theirs, others): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut self.unsent)
            .into_iter()
            .partition(|(k, u)| *k == key && matches!(u, Unsent::Report { .. }));
        self.unsent = others;
        for (_, unsent) in theirs {
            if let Unsent::Report { ack, .. } = unsent {
                let _ = ack.send(ReportAnswer::Refused);
            }
        }
    }

    fn handle(&mut self, key: Key, msg: WorkerMsg) -> Result<(), TuneError> {
        match msg {
            WorkerMsg::Report {
                step, metrics, ack, ..
            } => {
                let Some(r) = self.running.get_mut(&key) else {
                    let _ = ack.send(ReportAnswer::Refused);
                    return Ok(());
                };
                if r.lost {
                    let _ = ack.send(ReportAnswer::Refused);
                    return Ok(());
                }
                if let Some(role) = r.gang.as_mut().filter(|g| g.node_rank > 0) {
                    // The trial's reports come from node 0; this one goes on unheard.
                    let _ = ack.send(ReportAnswer::Continue);
                    if !std::mem::replace(&mut role.told_reports, true) {
                        eprintln!(
                            "tune worker: trial {} (attempt {}), node {}: its reports are \
                             ignored: a trial on several machines is heard from node 0 only",
                            key.1, key.2, role.node_rank
                        );
                    }
                    return Ok(());
                }
                r.reports += 1;
                let step = step.unwrap_or(r.base + r.reports);
                if let Err((unsent, e)) = self.send_report(key, step, metrics, ack, false) {
                    // Not taken: sent again while the lease lasts; the trial waits.
                    self.unsent.push_back((key, unsent));
                    return Err(self.err(e));
                }
            }
            WorkerMsg::Finished { outcome, .. } => {
                let Some(r) = self.running.remove(&key) else {
                    return Ok(());
                };
                self.pool.release(r.slot);
                if r.lost {
                    return Ok(());
                }
                if !r.holds_attempt() {
                    // A node above 0 of a gang: its end tells the other nodes, not the
                    // coordinator.
                    let ending = match outcome {
                        _ if r.decided => gang::MemberEnding::Ended,
                        Outcome::Failed(why) => gang::MemberEnding::Failed(why),
                        Outcome::Interrupted => gang::MemberEnding::Interrupted,
                        _ => gang::MemberEnding::Ended,
                    };
                    self.unsent.push_back((
                        key,
                        Unsent::MemberEnd {
                            token: r.token,
                            ending,
                        },
                    ));
                    return self.send_unsent();
                }
                let outcome = r.ends_as.unwrap_or(outcome);
                let end = Unsent::End {
                    token: r.token,
                    outcome,
                    kept: r.kept,
                };
                // After what waits: a trial's writes reach the database in order.
                self.unsent.push_back((key, end));
                return self.send_unsent();
            }
            WorkerMsg::Claimed { .. }
            | WorkerMsg::Wake
            | WorkerMsg::Workers(_)
            | WorkerMsg::Unreachable(_) => {}
            WorkerMsg::Note(note) => eprintln!("tune: {note}"),
        }
        Ok(())
    }

    /// Answers the reports the coordinator has decided.
    fn take_decisions(&mut self) -> Result<(), TuneError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let ids: Vec<i64> = self.pending.keys().copied().collect();
        let rows = self
            .db
            .query(
                "SELECT id, heard FROM tune_reports WHERE id = ANY($1) AND heard IS NOT NULL",
                &[&ids],
            )
            .map_err(|e| self.err(e))?;
        for row in rows {
            self.answer(row.get(0), ReportAnswer::parse(row.get(1)));
        }
        Ok(())
    }

    /// Gives the trial waiting on report `id` its decision.
    fn answer(&mut self, id: i64, heard: ReportAnswer) {
        if let Some((key, ack)) = self.pending.remove(&id) {
            if heard != ReportAnswer::Continue {
                if let Some(r) = self.running.get_mut(&key) {
                    r.decided = true;
                }
            }
            let _ = ack.send(heard);
        }
        self.listening.lock().unwrap().remove(&id);
    }
}

/// Reads experiment `id`'s name and spec, and builds its objective here.
fn serve_experiment(
    db: &mut Db,
    id: i64,
    settings: &Worker,
    objective_of: &ObjectiveOf,
    packing: Packing,
) -> Result<Served, postgres::Error> {
    let row = db.query_one(
        "SELECT name, meta FROM tune_experiments WHERE id = $1",
        &[&id],
    )?;
    let name: String = row.get(0);
    let meta: Option<String> = row.get(1);
    let own = settings.dir.join(&name);
    let mut trials_per_pack = 1;
    let mut checkpoint_cap = None;
    let mut takes = None;
    let mut nodes = 1;
    let (dir, objective) = match meta.map(|m| serde_json::from_str::<Meta>(&m)) {
        Some(Ok(meta)) => {
            checkpoint_cap = meta.spec.database_checkpoints();
            let r = &meta.spec.resources;
            nodes = r.nodes_per_trial();
            if r.needs_workers_of_its_own() {
                takes = Some((r.cpus_per_trial(), r.gpus_per_trial));
            }
            // `[store] checkpoints`: the sweep's shared folder, else this worker's own.
            let dir = meta.spec.trials_folder(&own);
            match packing {
                Packing::Sized { on_gpu } => trials_per_pack = meta.spec.trials_per_pack(on_gpu),
                Packing::Shared { on_gpu } if meta.spec.trials_per_pack(on_gpu) > 1 => eprintln!(
                    "tune worker: trials of {name:?} train alone here, one per slot: a worker \
                     fuses only the sweep it serves alone (--experiment {name})"
                ),
                Packing::Shared { .. } | Packing::Never => {}
            }
            let objective =
                objective_of(&meta.spec, &dir, trials_per_pack).map_err(|e| e.to_string());
            (dir, objective)
        }
        Some(Err(e)) => (
            own,
            Err(format!("its experiment record is unreadable: {e}")),
        ),
        None => (own, Err("the experiment has no record yet".into())),
    };
    Ok(Served {
        name,
        dir,
        objective,
        trials_per_pack,
        checkpoint_cap,
        takes,
        nodes,
    })
}

mod claim;
mod gang;
mod sending;
#[cfg(test)]
mod tests;
