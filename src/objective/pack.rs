//! Packs: trials of a built-in trainable that run on one slot and share a [`PackKey`] (their
//! depths and optimizers may differ, and on a GPU their widths) train as one fused model
//! ([`tune_trials::FusedTrainer`], HFTA) on a thread of the pack's own, while each trial's
//! thread reports its epochs and hears its decisions exactly as if it trained alone. A pack
//! trains on to the next epoch boundary of any member ([`FusedTrainer::train_to_boundary`],
//! with those a tick later: [`MERGE_STOPS_WITHIN`]), so that members of other batch sizes (on
//! a GPU) each go through their own epochs rather than wait for the longest; there the
//! members whose epoch ended report and hear their decisions, leavers leave (stopped,
//! paused, finished, failed), and trials join. A trial
//! joins once the members of its epoch length are at a boundary, so that they end their
//! epochs together, one stop of the pack rather than one each.
//!
//! Packing changes nothing a trial computes on CPU (each member's weights equal the unfused
//! trial's bit for bit, a test in `tune-trials`; widths do not mix there, see [`PackKey`]), so
//! which trials happen to share a pack never changes a decision.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tune_trials::checkpoint::{self, Contents};
use tune_trials::{
    open_device, EpochReport, FusedTrainer, HeldCheckpoint, PackKey, Split, SplitTensors, Trainer,
    TrialsError,
};

use super::checkpoint_rule::{checkpoint_after, written_before_report, CheckpointWrite};
use super::pack_settings::PackSettings;
use super::{BoxError, Stop};
use crate::pool::Slot;

/// The packs of one sweep's built-in objective, on every slot.
pub(crate) struct Packs {
    /// Most trials in one pack.
    size: usize,
    /// Most packs of one GPU training at once (its shares); a CPU slot trains one at a time.
    per_gpu: usize,
    /// Threads of a pack's computation (`None`: as `RAYON_NUM_THREADS` says).
    threads: Option<usize>,
    state: Mutex<Hub>,
    /// Signalled when a trial arrives at a pack, joins one or gives up.
    changed: Condvar,
    /// When the sweep's objective was made: [`PackTrace`]'s clock.
    made: Instant,
}

#[derive(Default)]
struct Hub {
    /// Per slot: trials that have started and are still making their trainer, so a pack at
    /// an epoch boundary waits for them rather than training one epoch without them.
    arriving: HashMap<Slot, usize>,
    packs: Vec<PackEntry>,
    next_id: u64,
    /// Per slot, its device and the split's rows on it, once the first trial there has made
    /// them: members of a pack must have their tensors on the same device, and share the
    /// rows rather than upload a copy each.
    data: HashMap<Slot, Arc<Mutex<Option<SplitTensors>>>>,
    /// Per slot: packs training an epoch now. Packs of different keys on one slot take
    /// turns, so that a slot (its share of the cores, a GPU share) trains one model at a time
    /// as it does unfused, rather than several whose kernels only queue behind each other.
    training: HashMap<Slot, usize>,
}

/// An open pack, as trials looking for one see it.
struct PackEntry {
    id: u64,
    slot: Slot,
    key: PackKey,
    /// Members and joiners.
    size: usize,
    joiners: Vec<Joiner>,
    decisions: mpsc::Sender<(u64, Decision)>,
}

struct Joiner {
    token: u64,
    trainer: Trainer,
    tell: mpsc::Sender<FromPack>,
    /// The step its scheduler completes it at ([`written_before_report`]).
    completes_at: Option<u64>,
}

/// What a pack tells a member.
enum FromPack {
    /// The member's epoch, or the error that ends it, how many trials the pack trained, and
    /// its checkpoint where it leaves the pack with this epoch.
    Epoch(
        Result<EpochReport, String>,
        usize,
        Option<LeavingCheckpoint>,
    ),
    /// The answer to a decision (or why the checkpoint asked for failed): whether the member
    /// has left the pack, and the checkpoint its trial writes before it goes on, where one
    /// must be on disk by then (a paused or completed member's). The trial writes it while
    /// the pack trains on; one written behind training is queued already.
    Saved(Result<(bool, Option<Contents>), String>),
}

/// The checkpoint of a member that leaves its pack with its report, which its trial writes
/// without the pack (which trains on).
pub(crate) enum LeavingCheckpoint {
    /// Written before the report: its scheduler completes it at this step
    /// ([`written_before_report`]).
    BeforeReport(Contents),
    /// Written after the report, as the decision says ([`checkpoint_after`]): it has trained
    /// its last epoch, or early stopping ended it.
    AfterReport(Contents),
}

/// What a member tells its pack after each epoch, once its report is decided on.
pub(crate) enum Decision {
    /// Checkpoint into the folder and train on.
    Continue(PathBuf),
    /// Checkpoint into the folder and leave.
    Pause(PathBuf),
    /// Checkpoint into the folder, the trial's last, and leave.
    Complete(PathBuf),
    /// Leave without a checkpoint (stopped, interrupted, timed out).
    Leave,
}

impl Packs {
    pub(crate) fn new(size: usize, per_gpu: usize, threads: Option<usize>) -> Arc<Packs> {
        Arc::new(Packs {
            size,
            per_gpu: per_gpu.max(1),
            threads,
            state: Mutex::new(Hub::default()),
            changed: Condvar::new(),
            made: Instant::now(),
        })
    }

    /// Most trials in one pack.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    fn hub(&self) -> MutexGuard<'_, Hub> {
        // A panic while holding the lock leaves counts that are still consistent (each change
        // is one statement), so a poisoned lock is taken over.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Says a trial has started on `slot`: packs there wait for it to join or give up.
    pub(crate) fn arrive(self: &Arc<Self>, slot: Slot) -> Arrival {
        *self.hub().arriving.entry(slot).or_default() += 1;
        Arrival {
            packs: self.clone(),
            slot,
            counted: true,
            at: Instant::now(),
        }
    }

    /// The rows of the split `split` waits for on the device of `slot`, shared by the trials
    /// of its packs (every trial of a sweep trains on the one split). The device is opened
    /// before the split is waited for.
    pub(crate) fn tensors(
        &self,
        slot: Slot,
        split: impl FnOnce() -> Result<Arc<Split>, TrialsError>,
    ) -> Result<SplitTensors, TrialsError> {
        // The first trial of a slot opens its device and uploads the rows while the others
        // there wait (not the hub: other slots go on). At a sweep's start every trial of the
        // first packs asks at once, and each opening its own device (a cuBLAS handle, a
        // random generator) and uploading a copy to be dropped kept the GPU from training.
        let cell = self.hub().data.entry(slot).or_default().clone();
        let mut data = cell.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = data.as_ref() {
            return Ok(d.clone());
        }
        let opening = Instant::now();
        let device = open_device(device_of(slot)?)?;
        let opened = opening.elapsed();
        let d = SplitTensors::new(&*split()?, &device)?;
        *data = Some(d.clone());
        // Whether `open_device` got the GPU's memory pool to keep what is freed.
        let pool = match tune_trials::gpu::pool_release_threshold(&device) {
            Some(u64::MAX) => ", its memory pool keeping what is freed".to_string(),
            Some(n) => format!(", its memory pool releasing what is freed beyond {n} bytes"),
            None if device.is_cuda() => ", its memory pool's release threshold unknown".into(),
            None => String::new(),
        };
        trace(format_args!(
            "{slot}: device opened in {:.3} s, rows uploaded {:.3} s later{pool}",
            opened.as_secs_f64(),
            (opening.elapsed() - opened).as_secs_f64()
        ));
        Ok(d)
    }
}

/// A trial that has started on a slot and not yet joined a pack; dropping it gives up.
pub(crate) struct Arrival {
    packs: Arc<Packs>,
    slot: Slot,
    counted: bool,
    at: Instant,
}

impl Arrival {
    /// Puts `trainer` (of key `key`, unfinished) into an open pack of its slot and key
    /// with room, or a new one; it trains from the pack's next epoch on. `completes_at`: the
    /// step its scheduler completes it at, whose checkpoint its trial writes before reporting.
    pub(crate) fn join(
        mut self,
        trainer: Trainer,
        key: PackKey,
        completes_at: Option<u64>,
    ) -> Member {
        let packs = self.packs.clone();
        let (tell, hear) = mpsc::channel();
        let mut hub = packs.hub();
        self.leave_arrivals(&mut hub);
        let token = hub.next_id;
        hub.next_id += 1;
        let joiner = Joiner {
            token,
            trainer,
            tell,
            completes_at,
        };
        let open = hub
            .packs
            .iter_mut()
            .find(|p| p.slot == self.slot && p.key == key && p.size < packs.size);
        let decide = match open {
            Some(pack) => {
                pack.size += 1;
                pack.joiners.push(joiner);
                pack.decisions.clone()
            }
            None => {
                let (decide, decisions) = mpsc::channel();
                let id = hub.next_id;
                hub.next_id += 1;
                hub.packs.push(PackEntry {
                    id,
                    slot: self.slot,
                    key,
                    size: 1,
                    joiners: vec![joiner],
                    decisions: decide.clone(),
                });
                let (packs, slot) = (packs.clone(), self.slot);
                std::thread::Builder::new()
                    .name(format!("tune-pack-{id}"))
                    .spawn(move || packs.clone().run_pack(id, slot, decisions))
                    .expect("spawning a pack's thread");
                decide
            }
        };
        drop(hub);
        packs.changed.notify_all();
        trace(format_args!(
            "{}: a trial joined at {:.3} s, {:.3} s after it arrived",
            self.slot,
            packs.made.elapsed().as_secs_f64(),
            self.at.elapsed().as_secs_f64()
        ));
        Member {
            token,
            hear,
            decide,
            owes_decision: false,
        }
    }

    fn leave_arrivals(&mut self, hub: &mut Hub) {
        if std::mem::take(&mut self.counted) {
            if let Some(n) = hub.arriving.get_mut(&self.slot) {
                *n = n.saturating_sub(1);
            }
        }
    }
}

impl Drop for Arrival {
    fn drop(&mut self) {
        if self.counted {
            let packs = self.packs.clone();
            self.leave_arrivals(&mut packs.hub());
            packs.changed.notify_all();
        }
    }
}

/// A trial's end of its pack.
pub(crate) struct Member {
    token: u64,
    hear: mpsc::Receiver<FromPack>,
    decide: mpsc::Sender<(u64, Decision)>,
    /// An epoch was heard and not yet decided on: the pack waits for this member.
    owes_decision: bool,
}

impl Member {
    /// The member's next epoch, trained in the pack, how many trials the pack trained, and
    /// its checkpoint where it leaves the pack with the epoch ([`LeavingCheckpoint`]): then it owes the
    /// pack no decision.
    pub(crate) fn next_epoch(
        &mut self,
    ) -> Result<(EpochReport, usize, Option<LeavingCheckpoint>), BoxError> {
        match self.hear.recv() {
            Ok(FromPack::Epoch(Ok(report), trials, handed)) => {
                self.owes_decision = handed.is_none();
                Ok((report, trials, handed))
            }
            Ok(FromPack::Epoch(Err(e), ..)) => Err(e.into()),
            Ok(FromPack::Saved(_)) => Err("a pack answered a checkpoint nobody asked for".into()),
            Err(_) => Err("the pack this trial trained in has ended".into()),
        }
    }

    /// Tells the pack what became of the last epoch; `Ok(true)` when the member is out of the
    /// pack (left, paused or finished), with its checkpoint written where one was asked for.
    /// It returns once the pack has answered, so a member that leaves has left the pack's
    /// count: the trial started in its place finds the room and joins the same pack.
    pub(crate) fn decide(&mut self, decision: Decision) -> Result<bool, BoxError> {
        if !std::mem::take(&mut self.owes_decision) {
            // (Its pack would never answer.)
            return Err("a decision for a pack that asked for none".into());
        }
        let dir = match &decision {
            Decision::Continue(dir) | Decision::Pause(dir) | Decision::Complete(dir) => {
                Some(dir.clone())
            }
            Decision::Leave => None,
        };
        if self.decide.send((self.token, decision)).is_err() {
            return Err("the pack this trial trained in has ended".into());
        }
        match self.hear.recv() {
            Ok(FromPack::Saved(Ok((left, now)))) => {
                if let (Some(contents), Some(dir)) = (now, dir) {
                    checkpoint::write(&dir, contents)?;
                }
                Ok(left)
            }
            Ok(FromPack::Saved(Err(e))) => Err(e.into()),
            Ok(FromPack::Epoch(..)) => Err("a pack trained on before a checkpoint".into()),
            Err(_) => Err("the pack this trial trained in has ended".into()),
        }
    }
}

impl Drop for Member {
    /// A member that ends without deciding (an error, a panic) leaves, so the pack goes on.
    fn drop(&mut self) {
        if self.owes_decision {
            let _ = self.decide.send((self.token, Decision::Leave));
        }
    }
}

/// The device a trial on `slot` opens; a remote worker's slot is none of this machine's.
pub(super) fn device_of(slot: Slot) -> Result<tune_trials::DeviceId, TrialsError> {
    slot.device()
        .ok_or_else(|| TrialsError::Device(format!("{slot} is not a device of this machine")))
}

/// Whether `slot` is a GPU's rather than a CPU slot.
pub(super) fn is_gpu(slot: Slot) -> bool {
    matches!(slot, Slot::Gpu(_))
}

/// With `TUNE_PACK_TRACE` set, prints `line` on stderr after `@` and the wall-clock time
/// (Unix seconds): `scripts/gpu-fuse-check` places the lines among the GPU's busy samples,
/// which nvidia-smi stamps with the same clock.
pub(super) fn trace(line: std::fmt::Arguments) {
    if PackSettings::get().trace {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        eprintln!("@{now:.3} {line}");
    }
}

/// With `TUNE_PACK_TRACE` set, how long each slot took to open its device and upload the
/// rows, when each trial joined a pack (since the objective was made, and since the trial
/// arrived), and each pack's epoch on stderr, phase by phase: where a GPU's
/// time goes between epochs (waiting for joiners, re-forming with the leavers out and the
/// joiners in, its turn, training, the members' decisions and checkpoints).
struct PackTrace {
    id: u64,
    on: bool,
    lap: Instant,
    phases: Vec<(&'static str, Duration)>,
}

impl PackTrace {
    fn new(id: u64) -> PackTrace {
        PackTrace {
            id,
            on: PackSettings::get().trace,
            lap: Instant::now(),
            phases: Vec::new(),
        }
    }

    /// Ends the phase `what`.
    fn lap(&mut self, what: &'static str) {
        self.add(what, self.lap.elapsed());
        self.lap = Instant::now();
    }

    /// Adds `took` to the phase `what` (summed where a stop has it twice: the checkpoints
    /// of the last stop's decisions and of this one's members leaving with theirs).
    fn add(&mut self, what: &'static str, took: Duration) {
        if self.on {
            match self.phases.iter_mut().find(|(w, _)| *w == what) {
                Some((_, sum)) => *sum += took,
                None => self.phases.push((what, took)),
            }
        }
    }

    /// Prints the epoch's phases, for a pack that trained `trials` in `steps` optimizer steps.
    fn end_epoch(&mut self, trials: usize, steps: u64) {
        if self.on {
            let phases: Vec<String> = self
                .phases
                .drain(..)
                .map(|(what, took)| format!("{what} {:.3}", took.as_secs_f64()))
                .collect();
            trace(format_args!(
                "pack {} ({trials} trials, {steps} steps), s: {}",
                self.id,
                phases.join(", ")
            ));
        }
    }
}

/// A pack's turn to train on its slot.
struct TrainingTurn {
    packs: Arc<Packs>,
    slot: Slot,
}

impl Drop for TrainingTurn {
    fn drop(&mut self) {
        if let Some(n) = self.packs.hub().training.get_mut(&self.slot) {
            *n = n.saturating_sub(1);
        }
        self.packs.changed.notify_all();
    }
}

/// A member as its pack sees it.
struct MemberChannel {
    token: u64,
    tell: mpsc::Sender<FromPack>,
    completes_at: Option<u64>,
}

impl Packs {
    /// A pack's thread: at each boundary take in the trials that joined, train on to the
    /// next end of a member's epoch, tell the members there their reports and act on their
    /// decisions. It ends when the last member has left and nobody is joining.
    fn run_pack(self: Arc<Self>, id: u64, slot: Slot, decisions: mpsc::Receiver<(u64, Decision)>) {
        let threads = self.threads;
        let segment = if PackSettings::get().lockstep {
            Segment::Epoch
        } else {
            Segment::ToBoundary
        };
        let packs = self.clone();
        let run = move || {
            let mut fused: Option<FusedTrainer> = None;
            let mut links: Vec<MemberChannel> = Vec::new();
            // Which of the members (in `links`' order, the model's) left at the last boundary.
            let mut leaving: Vec<bool> = Vec::new();
            // On a GPU the pack trains on while the members whose epoch ended decide: their
            // decisions wait in `told` for the next stop, acted on from the checkpoints they
            // had at theirs. On CPU, where a stopped member's extra training is the cores'
            // time, it waits for them.
            let speculates = is_gpu(slot) && segment == Segment::ToBoundary;
            let mut told: Option<StopAwaitingDecisions> = None;
            let mut trace = PackTrace::new(id);
            while let Some(joiners) = self.boundary(id, slot, leaving.iter().all(|&l| l), |t| {
                fused.as_ref().is_none_or(|f| f.in_step_with(t, &leaving))
            }) {
                trace.lap("boundary");
                let formed = if joiners.is_empty() && !leaving.contains(&true) {
                    Ok(())
                } else {
                    // Leavers out and joiners in, in one re-forming of the model. Should it
                    // fail, every member (joiners too) hears why.
                    links = staying(std::mem::take(&mut links), &leaving);
                    let mut joining = Vec::with_capacity(joiners.len());
                    for j in joiners {
                        joining.push(j.trainer);
                        links.push(MemberChannel {
                            token: j.token,
                            tell: j.tell,
                            completes_at: j.completes_at,
                        });
                    }
                    match fused.take() {
                        Some(f) => f.reform(&leaving, joining),
                        None => FusedTrainer::new(joining),
                    }
                    .map(|f| fused = Some(f))
                };
                trace.lap("form");
                let steps = fused.as_ref().map_or(0, |f| segment.ticks(f));
                let turn = self.take_turn(slot);
                trace.lap("turn");
                let reports = formed
                    .and_then(|()| {
                        crate::failpoint::hit("pack.epoch")
                            .map_err(|e| TrialsError::Train(format!("the pack failed: {e}")))
                    })
                    .and_then(|()| match fused.as_mut() {
                        Some(f) => segment.train(f),
                        None => Err(TrialsError::Train("a pack lost its model".into())),
                    });
                drop(turn);
                trace.lap("train");
                let trained = links.len();
                // The last stop's decisions, which came while the pack trained on.
                let mut gone = match told.take() {
                    Some(t) => self.settle(id, fused.as_ref(), t, &decisions, &mut trace),
                    None => Vec::new(),
                };
                leaving = match reports {
                    Ok(reports) => {
                        // A member that left at the last stop trained on for nothing: its
                        // report goes untold.
                        let reports = reports
                            .into_iter()
                            .zip(&links)
                            .map(|(r, l)| r.filter(|_| !gone.contains(&l.token)))
                            .collect();
                        let t =
                            self.tell(id, fused.as_ref(), &links, reports, speculates, &mut trace);
                        gone.extend(&t.left);
                        if speculates {
                            told = Some(t);
                        } else {
                            gone.extend(self.settle(id, fused.as_ref(), t, &decisions, &mut trace));
                        }
                        links.iter().map(|l| gone.contains(&l.token)).collect()
                    }
                    Err(e) => {
                        // The pack itself failed (the device, most likely): so do its members
                        // (those that had not left already).
                        let failing: Vec<&MemberChannel> =
                            links.iter().filter(|l| !gone.contains(&l.token)).collect();
                        self.shrink(id, failing.len());
                        for link in failing {
                            let _ = link.tell.send(FromPack::Epoch(Err(e.to_string()), 0, None));
                        }
                        vec![true; links.len()]
                    }
                };
                trace.lap("decide");
                trace.end_epoch(trained, steps);
            }
            // Decisions still owed when the last member left (its last epoch).
            if let Some(t) = told.take() {
                self.settle(id, fused.as_ref(), t, &decisions, &mut trace);
            }
        };
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match threads {
            Some(n) => match rayon::ThreadPoolBuilder::new().num_threads(n).build() {
                Ok(pool) => pool.install(run),
                Err(_) => run(),
            },
            None => run(),
        }));
        if ran.is_err() {
            // The members see their pack end (their channels close) and fail; trials that
            // were joining it go with it, and later ones start a new pack.
            packs.hub().packs.retain(|p| p.id != id);
        }
    }

    /// Waits until the slot may train one more pack; the turn ends when the guard drops.
    fn take_turn(self: &Arc<Self>, slot: Slot) -> TrainingTurn {
        let at_once = if is_gpu(slot) { self.per_gpu } else { 1 };
        let mut hub = self.hub();
        while hub.training.get(&slot).is_some_and(|&n| n >= at_once) {
            hub = self.changed.wait(hub).unwrap_or_else(|e| e.into_inner());
        }
        *hub.training.entry(slot).or_default() += 1;
        TrainingTurn {
            packs: self.clone(),
            slot,
        }
    }

    /// The pack's boundary: waits for trials still arriving on the slot, then takes the
    /// pack's joiners that are `in_step` with its members (all, when it has none left).
    /// `None` (and the pack closes) when it has no member and none joins.
    fn boundary(
        &self,
        id: u64,
        slot: Slot,
        empty: bool,
        in_step: impl Fn(&Trainer) -> bool,
    ) -> Option<Vec<Joiner>> {
        let mut hub = self.hub();
        while self.waits_for_arrivals(&hub, id, slot) {
            hub = self.changed.wait(hub).unwrap_or_else(|e| e.into_inner());
        }
        let at = hub.packs.iter().position(|p| p.id == id)?;
        let (joiners, later): (Vec<Joiner>, Vec<Joiner>) =
            std::mem::take(&mut hub.packs[at].joiners)
                .into_iter()
                .partition(|j| empty || in_step(&j.trainer));
        hub.packs[at].joiners = later;
        if empty && joiners.is_empty() {
            hub.packs.swap_remove(at);
            return None;
        }
        Some(joiners)
    }

    /// Whether pack `id` on `slot` waits at its boundary: trials are still arriving there and
    /// it has room for them. A full pack (a pack of one, where nothing fuses) trains on.
    fn waits_for_arrivals(&self, hub: &Hub, id: u64, slot: Slot) -> bool {
        let room = hub
            .packs
            .iter()
            .find(|p| p.id == id)
            .is_some_and(|p| p.size < self.size);
        room && hub.arriving.get(&slot).is_some_and(|&n| n > 0)
    }

    /// Takes `n` members that leave out of pack `id`'s count, making room for joiners. A
    /// member leaves the count before it hears its last answer from the pack.
    fn shrink(&self, id: u64, n: usize) {
        if n > 0 {
            if let Some(p) = self.hub().packs.iter_mut().find(|p| p.id == id) {
                p.size = p.size.saturating_sub(n);
            }
        }
    }

    /// Tells each member whose epoch ended its report (`None`: still in its epoch). Returns
    /// who left with it (out of the pack's count by then) and whose decision the pack waits
    /// for ([`Packs::settle`]), with their checkpoints as they stand now held where
    /// `snapshot` (the pack trains on before it hears them; only those then wanted are
    /// copied).
    fn tell(
        &self,
        id: u64,
        fused: Option<&FusedTrainer>,
        links: &[MemberChannel],
        reports: Vec<Option<Result<EpochReport, TrialsError>>>,
        snapshot: bool,
        trace: &mut PackTrace,
    ) -> StopAwaitingDecisions {
        let mut told = StopAwaitingDecisions {
            left: Vec::new(),
            owing: Vec::new(),
        };
        let mut saving = Duration::ZERO;
        let trained = links.len();
        for (k, (link, report)) in links.iter().zip(reports).enumerate() {
            let Some(report) = report else {
                continue;
            };
            // Its checkpoint goes with its report ([`written_before_report`]).
            let early = report
                .as_ref()
                .is_ok_and(|r| written_before_report(r.epoch, link.completes_at));
            let started = Instant::now();
            let member = || fused.ok_or_else(|| TrialsError::Train("the pack has no model".into()));
            let member = |k| member().and_then(|f| f.member(k));
            // A member that leaves with its report (its scheduler completes it at this epoch,
            // or it has trained its last) takes its checkpoint along: the pack goes on
            // without waiting for its trial to write it and hear the decision.
            let (report, handed, kept) = match report.and_then(|r| {
                let m = member(k)?;
                let handed = if early {
                    Some(LeavingCheckpoint::BeforeReport(m.checkpoint()?))
                } else if m.finished() {
                    Some(LeavingCheckpoint::AfterReport(m.checkpoint()?))
                } else {
                    None
                };
                let kept = match handed {
                    None if snapshot => Some(m.hold()?),
                    _ => None,
                };
                Ok((r, handed, kept))
            }) {
                Ok((r, handed, kept)) => (Ok(r), handed, kept),
                Err(e) => (Err(e), None, None),
            };
            saving += started.elapsed();
            let owes = report.is_ok() && handed.is_none();
            if !owes {
                // Failed or leaving: out of the count before its trial hears, so the trial
                // started in its place finds the room.
                self.shrink(id, 1);
                told.left.push(link.token);
            }
            let heard = link
                .tell
                .send(FromPack::Epoch(
                    report.map_err(|e| e.to_string()),
                    trained,
                    handed,
                ))
                .is_ok();
            if owes && heard {
                told.owing.push(AwaitedDecision {
                    token: link.token,
                    k,
                    tell: link.tell.clone(),
                    snapshot: kept,
                });
            } else if owes {
                // Its trial is gone.
                self.shrink(id, 1);
                told.left.push(link.token);
            }
        }
        trace.add("of which checkpoints", saving);
        told
    }

    /// Waits for the decisions `told` owes and acts on each (a checkpoint written behind, or
    /// handed to the member's trial to write, from the member's snapshot where it has one).
    /// Returns every member of `told` that leaves the pack, each out of its count by then.
    fn settle(
        &self,
        id: u64,
        fused: Option<&FusedTrainer>,
        told: StopAwaitingDecisions,
        decisions: &mpsc::Receiver<(u64, Decision)>,
        trace: &mut PackTrace,
    ) -> Vec<u64> {
        let StopAwaitingDecisions {
            mut left,
            mut owing,
        } = told;
        let mut saving = Duration::ZERO;
        while !owing.is_empty() {
            // The hub's entry holds a sender, so this waits for a member rather than failing.
            let Ok((token, decision)) = decisions.recv() else {
                break;
            };
            // (A member that left ends without a decision, or its drop says `Leave`, which
            // nobody needs.)
            let Some(at) = owing.iter().position(|o| o.token == token) else {
                continue;
            };
            let mut o = owing.swap_remove(at);
            // The checkpoint its trial writes now, if any. (It has not finished: a finished
            // member left with its report.)
            let mut save = |dir: &PathBuf, heard: Result<(), Stop>| {
                let started = Instant::now();
                let mut contents = || match o.snapshot.take() {
                    Some(kept) => kept.copy_out(),
                    None => fused
                        .ok_or_else(|| TrialsError::Train("the pack has no model".into()))?
                        .member(o.k)?
                        .checkpoint(),
                };
                let now = match checkpoint_after(&heard, false, false) {
                    Some(CheckpointWrite::Behind) => {
                        contents().and_then(|c| checkpoint::write_behind(dir, c).map(|()| None))
                    }
                    Some(CheckpointWrite::Now) => contents().map(Some),
                    None => Ok(None),
                };
                saving += started.elapsed();
                now.map_err(|e| e.to_string())
            };
            // Whether the member leaves, and the checkpoint its trial writes now.
            let saved: Result<(bool, Option<Contents>), String> = match &decision {
                Decision::Continue(dir) => save(dir, Ok(())).map(|now| (false, now)),
                Decision::Pause(dir) => save(dir, Err(Stop::Paused)).map(|now| (true, now)),
                Decision::Complete(dir) => save(dir, Err(Stop::Completed)).map(|now| (true, now)),
                Decision::Leave => Ok((true, None)),
            };
            if !matches!(saved, Ok((false, _))) {
                self.shrink(id, 1);
                left.push(o.token);
            }
            let _ = o.tell.send(FromPack::Saved(saved));
        }
        // Members still owing when the channel closed are gone with it.
        left.extend(owing.iter().map(|o| o.token));
        trace.add("of which checkpoints", saving);
        left
    }
}

/// How far a pack trains between its stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Segment {
    /// An epoch of every member at once, a member of fewer steps an epoch sitting the last
    /// ones out ([`PackSettings::lockstep`]).
    Epoch,
    /// On to the soonest end of any member's epoch, each member through its own (those
    /// within [`MERGE_STOPS_WITHIN`] ticks of it too).
    ToBoundary,
}

/// The ticks a member whose epoch ends may sit out so that the pack stops once for it and
/// for members whose epochs end that much later ([`FusedTrainer::train_to_boundary`]). A
/// stop costs a validation, a read-back and the next segment's uploads, a few ticks of the
/// host's time; one tick was the best trade in simulation: more made the longest epochs'
/// members sit out more than the merged stops saved (docs/design/fused-trials.md).
const MERGE_STOPS_WITHIN: u64 = 1;

impl Segment {
    /// The pack's ticks to its next stop.
    fn ticks(self, pack: &FusedTrainer) -> u64 {
        match self {
            Segment::Epoch => pack.steps_per_epoch(),
            Segment::ToBoundary => pack.ticks_to_boundary(MERGE_STOPS_WITHIN),
        }
    }

    /// Trains the pack to its next stop: each member's report where its epoch ended there.
    fn train(
        self,
        pack: &mut FusedTrainer,
    ) -> Result<Vec<Option<Result<EpochReport, TrialsError>>>, TrialsError> {
        match self {
            Segment::Epoch => Ok(pack.train_epoch()?.into_iter().map(Some).collect()),
            Segment::ToBoundary => pack.train_to_boundary(MERGE_STOPS_WITHIN),
        }
    }
}

/// A stop's reports, told ([`Packs::tell`]); the decisions they owe not yet heard.
struct StopAwaitingDecisions {
    /// The members that left with their reports (failed, their trials gone, or finished or
    /// completed, with their last checkpoints), out of the pack's count already.
    left: Vec<u64>,
    owing: Vec<AwaitedDecision>,
}

/// A member whose decision on its report the pack waits for.
struct AwaitedDecision {
    token: u64,
    /// Its place in the pack at the stop.
    k: usize,
    tell: mpsc::Sender<FromPack>,
    /// Its checkpoint at the stop, where the pack trained on before hearing the decision:
    /// copied out only if the decision wants it.
    snapshot: Option<HeldCheckpoint>,
}

/// The `items` whose flag in `leaving` is not set.
fn staying<T>(items: Vec<T>, leaving: &[bool]) -> Vec<T> {
    items
        .into_iter()
        .enumerate()
        .filter(|&(k, _)| leaving.get(k) != Some(&true))
        .map(|(_, item)| item)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;
    use tune_trials::{Builtin, TrainConfig};

    fn wine() -> Split {
        Split::shipped("wine").unwrap()
    }

    fn trainer(split: &Split, i: usize) -> Trainer {
        let cfg = TrainConfig {
            width: 12,
            batch_size: 16,
            epochs: 3,
            lr: 0.01 * (i + 1) as f64,
            ..TrainConfig::default()
        };
        Trainer::new(Builtin::Mlp, cfg, split, &Device::Cpu, i as u64).unwrap()
    }

    #[test]
    fn trials_arriving_together_share_a_pack_and_leave_it_at_boundaries() {
        let split = Arc::new(wine());
        let tmp = tempfile::tempdir().unwrap();
        let packs = Packs::new(4, 1, Some(1));
        // All three have arrived before any joins: the pack's first epoch waits for them.
        let arrivals: Vec<Arrival> = (0..3).map(|_| packs.arrive(Slot::Cpu(0))).collect();
        let members: Vec<_> = arrivals
            .into_iter()
            .enumerate()
            .map(|(i, arrival)| {
                let (split, dir) = (split.clone(), tmp.path().join(i.to_string()));
                std::thread::spawn(move || {
                    let t = trainer(&split, i);
                    let key = t.pack_key();
                    // Member 2's scheduler completes it at its last epoch: the pack hands
                    // it that checkpoint with the report, to be written before reporting.
                    let mut member = arrival.join(t, key, (i == 2).then_some(3));
                    let mut heard = Vec::new();
                    loop {
                        let (report, trials, handed) = member.next_epoch().unwrap();
                        // Member 1 has trained its last epoch at 3: it leaves with its
                        // checkpoint too, to be written as the decision says.
                        let last = report.epoch == 3;
                        match &handed {
                            Some(LeavingCheckpoint::BeforeReport(_)) => assert!(last && i == 2),
                            Some(LeavingCheckpoint::AfterReport(_)) => assert!(last && i == 1),
                            None => assert!(!last, "member {i}"),
                        }
                        heard.push((report, trials));
                        if i == 0 {
                            // Ends without deciding, as a failing trial would: it leaves.
                            return heard;
                        }
                        std::fs::create_dir_all(&dir).unwrap();
                        if let Some(
                            LeavingCheckpoint::BeforeReport(c) | LeavingCheckpoint::AfterReport(c),
                        ) = handed
                        {
                            // It has left the pack: nothing to decide.
                            checkpoint::write(&dir, c).unwrap();
                            return heard;
                        }
                        if member.decide(Decision::Continue(dir.clone())).unwrap() {
                            return heard;
                        }
                    }
                })
            })
            .collect();
        for (i, handle) in members.into_iter().enumerate() {
            let heard = handle.join().unwrap();
            let mut alone = trainer(&split, i);
            let sizes: Vec<usize> = heard.iter().map(|h| h.1).collect();
            // Member 0 left after the first epoch; the others went on as a pack of two.
            assert_eq!(
                sizes,
                if i == 0 { vec![3] } else { vec![3, 2, 2] },
                "member {i}"
            );
            for (fused, _) in &heard {
                let want = alone.train_epoch().unwrap();
                assert_eq!(fused.epoch, want.epoch);
                assert_eq!(fused.val_loss, want.val_loss, "member {i}");
                assert_eq!(fused.val_accuracy, want.val_accuracy, "member {i}");
                assert_eq!(fused.lr, want.lr, "member {i}");
                assert!(
                    (fused.train_loss - want.train_loss).abs() < 1e-5,
                    "member {i}"
                );
            }
            if i > 0 {
                // The last checkpoint, the pack's (or, for member 2, the one that came with
                // its report): it restores to the trial trained alone.
                let mut restored = trainer(&split, i);
                restored.restore(&tmp.path().join(i.to_string())).unwrap();
                assert_eq!(restored.epoch(), 3);
                assert_eq!(restored.evaluate().unwrap(), alone.evaluate().unwrap());
            }
        }
    }

    /// Member `i` (0 or 1) of the mixed-pack tests: on wine's 142 training rows, batch 64 (3
    /// updates an epoch) or 32 (5), 3 epochs.
    fn mixed(split: &Split, i: usize) -> Trainer {
        let cfg = TrainConfig {
            batch_size: [64, 32][i],
            epochs: 3,
            ..TrainConfig::default()
        };
        Trainer::new(Builtin::Mlp, cfg, split, &Device::Cpu, i as u64).unwrap()
    }

    /// Members 0 and 1 ([`mixed`]) in one pack on `slot`, forced with one key (as a GPU mixes
    /// batch sizes), member `i` deciding `decide(i, epoch)` on each report until it has left:
    /// what each heard, its reports and the trials its pack trained each.
    fn in_one_pack(
        split: &Arc<Split>,
        slot: Slot,
        decide: impl Fn(usize, u64) -> Decision + Send + Sync + 'static,
    ) -> Vec<Vec<(EpochReport, usize)>> {
        let packs = Packs::new(4, 1, Some(1));
        let key = mixed(split, 0).pack_key();
        let decide = Arc::new(decide);
        let arrivals: Vec<Arrival> = (0..2).map(|_| packs.arrive(slot)).collect();
        let members: Vec<_> = arrivals
            .into_iter()
            .enumerate()
            .map(|(i, arrival)| {
                let (t, key, decide) = (mixed(split, i), key.clone(), decide.clone());
                std::thread::spawn(move || {
                    let mut member = arrival.join(t, key, None);
                    let mut heard = Vec::new();
                    loop {
                        let (report, trials, handed) = member.next_epoch().unwrap();
                        let decision = decide(i, report.epoch);
                        heard.push((report, trials));
                        match (handed, decision) {
                            // Its last epoch: it left the pack with its checkpoint.
                            (Some(LeavingCheckpoint::AfterReport(c)), Decision::Continue(dir)) => {
                                checkpoint::write(&dir, c).unwrap();
                                return heard;
                            }
                            (Some(_), _) => return heard,
                            (None, decision) => {
                                if member.decide(decision).unwrap() {
                                    return heard;
                                }
                            }
                        }
                    }
                })
            })
            .collect();
        members.into_iter().map(|h| h.join().unwrap()).collect()
    }

    /// Members of other batch sizes in one pack (as on a GPU; forced here with one key) each
    /// go through their own epochs: the batch-64 member's three epochs of 3 updates end at
    /// the pack's updates 3, 6 and 9, the batch-32 member's of 5 at 5, 10 and 15, its last
    /// two after the other has left. Every epoch is as alone.
    #[test]
    fn members_of_other_batch_sizes_report_at_their_own_boundaries() {
        let split = Arc::new(wine());
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let heard = in_one_pack(&split, Slot::Cpu(0), move |i, _| {
            let dir = root.join(i.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            Decision::Continue(dir)
        });
        let make = |i| mixed(&split, i);
        for (i, heard) in heard.into_iter().enumerate() {
            let sizes: Vec<usize> = heard.iter().map(|h| h.1).collect();
            assert_eq!(sizes, [vec![2, 2, 2], vec![2, 1, 1]][i], "member {i}");
            let mut alone = make(i);
            for (fused, _) in &heard {
                let want = alone.train_epoch().unwrap();
                assert_eq!((fused.epoch, fused.lr), (want.epoch, want.lr), "member {i}");
                for (got, want) in [
                    (fused.val_loss, want.val_loss),
                    (fused.train_loss, want.train_loss),
                ] {
                    assert!(
                        (got - want).abs() < 1e-5,
                        "member {i}: {got} packed, {want} alone"
                    );
                }
            }
            let mut restored = make(i);
            restored.restore(&tmp.path().join(i.to_string())).unwrap();
            assert_eq!(restored.epoch(), 3, "member {i}'s last checkpoint");
        }
    }

    /// On a GPU slot the pack trains on while members decide: a member stopped at its first
    /// report (batch 64, 3 updates) trains 2 more updates with the other (batch 32, 5) before
    /// the pack hears it, and leaves then, its second epoch untold; the other's checkpoint of
    /// each epoch is the one it had at that epoch's end, though written after the pack trained
    /// on. (CPU trainers on a slot named as a GPU: the pack never opens the device.)
    #[test]
    fn a_gpu_pack_trains_on_while_members_decide_and_checkpoints_what_they_had() {
        let split = Arc::new(wine());
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let heard = in_one_pack(&split, Slot::Gpu(0), move |i, epoch| {
            if i == 0 {
                return Decision::Leave;
            }
            let dir = root.join(epoch.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            Decision::Continue(dir)
        });
        let make = |i| mixed(&split, i);
        let sizes = |i: usize| heard[i].iter().map(|h| h.1).collect::<Vec<_>>();
        assert_eq!(sizes(0), [2]);
        // Its first epoch ended at update 5 of the pack, with the stopped member still in it.
        assert_eq!(sizes(1), [2, 1, 1]);
        let mut alone = make(1);
        for (epoch, (fused, _)) in (1..).zip(&heard[1]) {
            let want = alone.train_epoch().unwrap();
            assert_eq!(fused.epoch, want.epoch);
            assert!(
                (fused.val_loss - want.val_loss).abs() < 1e-5,
                "epoch {epoch}"
            );
            let dir = tmp.path().join(epoch.to_string());
            checkpoint::settle(&dir).unwrap();
            let mut restored = make(1);
            restored.restore(&dir).unwrap();
            assert_eq!(restored.epoch(), epoch, "the checkpoint of epoch {epoch}");
            assert_eq!(
                restored.evaluate().unwrap(),
                alone.evaluate().unwrap(),
                "epoch {epoch}'s checkpoint is the member at its end"
            );
        }
    }

    #[test]
    fn a_joiner_waits_for_the_members_of_its_epoch_length_to_be_at_a_boundary() {
        let split = wine();
        let packs = Packs::new(4, 1, Some(1));
        let make = |batch_size| {
            let cfg = TrainConfig {
                batch_size,
                ..TrainConfig::default()
            };
            Trainer::new(Builtin::Mlp, cfg, &split, &Device::Cpu, 0).unwrap()
        };
        let joiner = |token, batch_size| Joiner {
            token,
            trainer: make(batch_size),
            tell: mpsc::channel().0,
            completes_at: None,
        };
        let (decide, _decisions) = mpsc::channel();
        packs.hub().packs.push(PackEntry {
            id: 1,
            slot: Slot::Cpu(0),
            key: make(32).pack_key(),
            size: 4,
            joiners: vec![joiner(10, 32), joiner(11, 64)],
            decisions: decide,
        });
        // Members of batch 32 are in the middle of their epochs, those of 64 are not.
        let mid_32 = |t: &Trainer| t.steps_per_epoch() != 5;
        let tokens = |j: Vec<Joiner>| j.iter().map(|j| j.token).collect::<Vec<_>>();
        assert_eq!(
            tokens(packs.boundary(1, Slot::Cpu(0), false, mid_32).unwrap()),
            [11]
        );
        // The batch-32 joiner waits in the pack's entry; with no member left, it joins.
        assert_eq!(
            tokens(packs.boundary(1, Slot::Cpu(0), false, mid_32).unwrap()),
            Vec::<u64>::new()
        );
        assert_eq!(
            tokens(packs.boundary(1, Slot::Cpu(0), true, mid_32).unwrap()),
            [10]
        );
        assert!(
            packs.boundary(1, Slot::Cpu(0), true, mid_32).is_none(),
            "the pack closes"
        );
    }

    /// A member that leaves with its report, its checkpoint along (its scheduler completes
    /// it at that epoch, or it has trained its last), owes the pack nothing: the pack trains
    /// the others on while its trial writes the checkpoint and waits for its report's answer.
    #[test]
    fn a_member_that_leaves_with_its_last_checkpoint_does_not_hold_up_its_pack() {
        let split = wine();
        let tmp = tempfile::tempdir().unwrap();
        for completed in [true, false] {
            let packs = Packs::new(2, 1, Some(1));
            let arrivals = [packs.arrive(Slot::Cpu(0)), packs.arrive(Slot::Cpu(0))];
            let [first, second] = arrivals;
            let epochs = if completed { 3 } else { 1 };
            let cfg = TrainConfig {
                width: 12,
                batch_size: 16,
                epochs,
                ..TrainConfig::default()
            };
            let t0 = Trainer::new(Builtin::Mlp, cfg, &split, &Device::Cpu, 0).unwrap();
            let t1 = trainer(&split, 1);
            let key = t0.pack_key();
            // Member 0 leaves at epoch 1: completed there, or at the last of its epochs.
            let mut leaving = first.join(t0, key.clone(), completed.then_some(1));
            let mut going_on = second.join(t1, key, None);
            let (_, trials, handed) = leaving.next_epoch().unwrap();
            assert_eq!(trials, 2);
            match handed {
                Some(LeavingCheckpoint::BeforeReport(_)) => assert!(completed),
                Some(LeavingCheckpoint::AfterReport(_)) => assert!(!completed),
                None => panic!("the checkpoint comes with the report"),
            }
            assert!(
                leaving.decide(Decision::Leave).is_err(),
                "the pack asked for no decision"
            );
            // Member 0 neither decides nor ends (its trial is writing the checkpoint,
            // waiting for its report's answer): the pack trains member 1's next epoch all
            // the same.
            going_on.next_epoch().unwrap();
            assert!(!going_on
                .decide(Decision::Continue(tmp.path().to_path_buf()))
                .unwrap());
            let (tx, rx) = mpsc::channel();
            let next = std::thread::spawn(move || {
                let got = going_on
                    .next_epoch()
                    .map(|(r, trials, _)| (r.epoch, trials));
                tx.send(got.map_err(|e| e.to_string())).unwrap();
                going_on
            });
            // A pack that waited for member 0 would never train again (a generous bound, so
            // that a hang fails the test rather than stalling the suite).
            let got = rx.recv_timeout(Duration::from_secs(120));
            assert_eq!(got.unwrap().unwrap(), (2, 1), "epoch 2, in a pack of one");
            drop(leaving);
            let mut going_on = next.join().unwrap();
            assert!(going_on.decide(Decision::Leave).unwrap());
        }
    }

    #[test]
    fn a_trial_started_in_the_place_of_one_that_left_joins_its_pack() {
        let split = Arc::new(wine());
        let tmp = tempfile::tempdir().unwrap();
        let packs = Packs::new(2, 1, Some(1));
        let mut arrivals = vec![packs.arrive(Slot::Cpu(0)), packs.arrive(Slot::Cpu(0))].into_iter();
        let (joined, has_joined) = mpsc::channel();
        let leaver = {
            let (split, packs, arrival) = (split.clone(), packs.clone(), arrivals.next().unwrap());
            std::thread::spawn(move || {
                let t = trainer(&split, 0);
                let key = t.pack_key();
                let mut member = arrival.join(t, key, None);
                member.next_epoch().unwrap();
                // Stopped by the scheduler, and a new trial starts in its place.
                assert!(member.decide(Decision::Leave).unwrap());
                let arrival = packs.arrive(Slot::Cpu(0));
                let t = trainer(&split, 2);
                let key = t.pack_key();
                let mut newcomer = arrival.join(t, key, None);
                joined.send(()).unwrap();
                let (_, trials, _) = newcomer.next_epoch().unwrap();
                newcomer.decide(Decision::Leave).unwrap();
                trials
            })
        };
        let stayer = {
            let (arrival, dir) = (arrivals.next().unwrap(), tmp.path().join("1"));
            std::thread::spawn(move || {
                let t = trainer(&split, 1);
                let key = t.pack_key();
                let mut member = arrival.join(t, key, None);
                member.next_epoch().unwrap();
                // The pack is still deciding its epoch when the newcomer joins.
                has_joined.recv().unwrap();
                std::fs::create_dir_all(&dir).unwrap();
                assert!(!member.decide(Decision::Continue(dir)).unwrap());
                let (_, trials, _) = member.next_epoch().unwrap();
                member.decide(Decision::Leave).unwrap();
                trials
            })
        };
        // Its place was free once `decide` returned: the newcomer trained in the same pack
        // rather than in one of its own beside it.
        assert_eq!(leaver.join().unwrap(), 2, "the newcomer's pack");
        assert_eq!(stayer.join().unwrap(), 2, "the stayer's pack");
    }

    #[test]
    fn a_pack_waits_for_trials_arriving_on_its_slot_only_while_it_has_room() {
        let split = wine();
        let key = trainer(&split, 0).pack_key();
        let entry = |id, slot: Slot, size| PackEntry {
            id,
            slot,
            key: key.clone(),
            size,
            joiners: Vec::new(),
            decisions: mpsc::channel().0,
        };
        let packs = Packs::new(2, 4, Some(1));
        let mut hub = Hub {
            packs: vec![entry(1, Slot::Gpu(0), 1), entry(2, Slot::Gpu(0), 2)],
            ..Hub::default()
        };
        assert!(
            !packs.waits_for_arrivals(&hub, 1, Slot::Gpu(0)),
            "nobody arriving"
        );
        hub.arriving.insert(Slot::Gpu(0), 1);
        assert!(
            packs.waits_for_arrivals(&hub, 1, Slot::Gpu(0)),
            "room for one"
        );
        // Full: the arriving trial cannot join it, so it trains on (as every pack of one does,
        // a GPU's trials where nothing fuses).
        assert!(!packs.waits_for_arrivals(&hub, 2, Slot::Gpu(0)), "full");
        let ones = Packs::new(1, 4, Some(1));
        assert!(
            !ones.waits_for_arrivals(&hub, 1, Slot::Gpu(0)),
            "a pack of one"
        );
    }

    #[test]
    fn a_cpu_slot_trains_one_pack_at_a_time_and_a_gpu_as_many_as_its_shares() {
        let packs = Packs::new(4, 2, Some(1));
        let training = |slot: Slot| packs.hub().training.get(&slot).copied().unwrap_or(0);
        let gpu = (packs.take_turn(Slot::Gpu(0)), packs.take_turn(Slot::Gpu(0)));
        assert_eq!(training(Slot::Gpu(0)), 2);
        let cpu = packs.take_turn(Slot::Cpu(0));
        let (tx, rx) = mpsc::channel();
        let waiting = {
            let packs = packs.clone();
            std::thread::spawn(move || {
                let _turn = packs.take_turn(Slot::Cpu(0));
                tx.send(packs.hub().training[&Slot::Cpu(0)]).unwrap();
            })
        };
        // The second pack of cpu:0 gets its turn only once the first has given it back.
        assert_eq!(training(Slot::Cpu(0)), 1);
        drop(cpu);
        assert_eq!(rx.recv().unwrap(), 1);
        waiting.join().unwrap();
        drop(gpu);
        assert_eq!((training(Slot::Cpu(0)), training(Slot::Gpu(0))), (0, 0));
    }

    #[test]
    fn trials_of_other_keys_or_slots_get_packs_of_their_own() {
        let split = wine();
        let packs = Packs::new(2, 1, Some(1));
        let other = {
            // Another batch size (a width of its own would share the pack, padded).
            let cfg = TrainConfig {
                batch_size: 8,
                epochs: 3,
                ..TrainConfig::default()
            };
            Trainer::new(Builtin::Mlp, cfg, &split, &Device::Cpu, 9).unwrap()
        };
        // Every trial arrives before any joins, so no pack starts an epoch short.
        let slots = [0, 0, 0, 0, 1].map(Slot::Cpu);
        let arrivals: Vec<Arrival> = slots.iter().map(|&s| packs.arrive(s)).collect();
        let trainers = [
            trainer(&split, 0),
            trainer(&split, 1),
            // The pack of two is full: a third of that key starts another.
            trainer(&split, 2),
            other,
            // Same key, other slot.
            trainer(&split, 3),
        ];
        let mut hold: Vec<Member> = arrivals
            .into_iter()
            .zip(trainers)
            .map(|(a, t)| {
                let key = t.pack_key();
                a.join(t, key, None)
            })
            .collect();
        let sizes: Vec<usize> = hold.iter_mut().map(|m| m.next_epoch().unwrap().1).collect();
        assert_eq!(sizes, [2, 2, 1, 1, 1]);
        for m in &mut hold {
            assert!(m.decide(Decision::Leave).unwrap());
        }
    }
}
