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
        let run = move || self.drive_pack(id, slot, segment, &decisions);
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

    /// The pack's rounds, boundary after boundary, until its last member has left.
    fn drive_pack(
        self: &Arc<Self>,
        id: u64,
        slot: Slot,
        segment: Segment,
        decisions: &mpsc::Receiver<(u64, Decision)>,
    ) {
        let mut pack = PackState {
            id,
            slot,
            segment,
            speculates: is_gpu(slot) && segment == Segment::ToBoundary,
            fused: None,
            links: Vec::new(),
            leaving: Vec::new(),
            told: None,
            trace: PackTrace::new(id),
        };
        let empty = |pack: &PackState| pack.leaving.iter().all(|&l| l);
        while let Some(joiners) = self.boundary(id, slot, empty(&pack), |t| {
            (pack.fused.as_ref()).is_none_or(|f| f.in_step_with(t, &pack.leaving))
        }) {
            pack.trace.lap("boundary");
            let formed = pack.form(joiners);
            pack.trace.lap("form");
            let steps = pack.fused.as_ref().map_or(0, |f| segment.ticks(f));
            let reports = pack.train(self, formed);
            pack.trace.lap("train");
            let trained = pack.links.len();
            pack.leaving = pack.decide(self, reports, decisions);
            pack.trace.lap("decide");
            pack.trace.end_epoch(trained, steps);
        }
        // Decisions still owed when the last member left (its last epoch).
        if let Some(t) = pack.told.take() {
            self.settle(id, pack.fused.as_ref(), t, decisions, &mut pack.trace);
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

/// A pack's members and model between its boundaries, on the pack's thread.
struct PackState {
    id: u64,
    slot: Slot,
    segment: Segment,
    /// On a GPU the pack trains on while the members whose epoch ended decide: their
    /// decisions wait in `told` for the next stop, acted on from the checkpoints they had at
    /// theirs. On CPU, where a stopped member's extra training is the cores' time, it waits
    /// for them.
    speculates: bool,
    fused: Option<FusedTrainer>,
    links: Vec<MemberChannel>,
    /// Which of the members (in `links`' order, the model's) left at the last boundary.
    leaving: Vec<bool>,
    told: Option<StopAwaitingDecisions>,
    trace: PackTrace,
}

/// Per member: its report where its epoch ended in a round, `None` where it did not.
type RoundReports = Vec<Option<Result<EpochReport, TrialsError>>>;

impl PackState {
    /// Leavers out and joiners in, in one re-forming of the model. Should it fail, every
    /// member (joiners too) hears why.
    fn form(&mut self, joiners: Vec<Joiner>) -> Result<(), TrialsError> {
        if joiners.is_empty() && !self.leaving.contains(&true) {
            return Ok(());
        }
        self.links = staying(std::mem::take(&mut self.links), &self.leaving);
        let mut joining = Vec::with_capacity(joiners.len());
        for j in joiners {
            joining.push(j.trainer);
            self.links.push(MemberChannel {
                token: j.token,
                tell: j.tell,
                completes_at: j.completes_at,
            });
        }
        let fused = match self.fused.take() {
            Some(f) => f.reform(&self.leaving, joining),
            None => FusedTrainer::new(joining),
        }?;
        self.fused = Some(fused);
        Ok(())
    }

    /// Trains the formed pack to its next stop, in its turn on the slot.
    fn train(
        &mut self,
        packs: &Arc<Packs>,
        formed: Result<(), TrialsError>,
    ) -> Result<RoundReports, TrialsError> {
        let turn = packs.take_turn(self.slot);
        self.trace.lap("turn");
        let reports = formed
            .and_then(|()| {
                crate::failpoint::hit("pack.epoch")
                    .map_err(|e| TrialsError::Train(format!("the pack failed: {e}")))
            })
            .and_then(|()| match self.fused.as_mut() {
                Some(f) => self.segment.train(f),
                None => Err(TrialsError::Train("a pack lost its model".into())),
            });
        drop(turn);
        reports
    }

    /// Settles the last stop's decisions (those that came while the pack trained on), tells
    /// the members this stop's reports and, unless the pack speculates, waits for their
    /// decisions: which members leave.
    fn decide(
        &mut self,
        packs: &Packs,
        reports: Result<RoundReports, TrialsError>,
        decisions: &mpsc::Receiver<(u64, Decision)>,
    ) -> Vec<bool> {
        let (id, fused) = (self.id, self.fused.as_ref());
        let mut gone = match self.told.take() {
            Some(t) => packs.settle(id, fused, t, decisions, &mut self.trace),
            None => Vec::new(),
        };
        match reports {
            Ok(reports) => {
                // A member that left at the last stop trained on for nothing: its report goes
                // untold.
                let reports = reports
                    .into_iter()
                    .zip(&self.links)
                    .map(|(r, l)| r.filter(|_| !gone.contains(&l.token)))
                    .collect();
                let t = packs.tell(
                    id,
                    fused,
                    &self.links,
                    reports,
                    self.speculates,
                    &mut self.trace,
                );
                gone.extend(&t.left);
                if self.speculates {
                    self.told = Some(t);
                } else {
                    gone.extend(packs.settle(id, fused, t, decisions, &mut self.trace));
                }
                self.links.iter().map(|l| gone.contains(&l.token)).collect()
            }
            Err(e) => {
                // The pack itself failed (the device, most likely): so do its members (those
                // that had not left already).
                let failing: Vec<&MemberChannel> = (self.links.iter())
                    .filter(|l| !gone.contains(&l.token))
                    .collect();
                packs.shrink(id, failing.len());
                for link in failing {
                    let _ = link.tell.send(FromPack::Epoch(Err(e.to_string()), 0, None));
                }
                vec![true; self.links.len()]
            }
        }
    }
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
mod tests;
