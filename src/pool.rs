//! The worker pool: the places trials run. With GPUs (the `cuda` build on a machine that has
//! them) that is `trials_per_gpu` shares of each chosen GPU, a new trial going to the GPU with
//! the most free memory, or `gpus_per_trial` whole GPUs per trial; otherwise `cpu_slots` CPU
//! slots, `cpus_per_trial` of them per trial.
//!
//! Every trial of a sweep takes the same, so a trial waits only for the one before it in line
//! to start: a large trial never starves behind small ones. A `tune worker` serving several
//! sweeps places each offer as it comes, first come first served.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tune_trials::gpu::GpuInfo;

use tune_trials::DeviceId;

use crate::error::TuneError;
use crate::spec::{Gpus, Resources};

/// Where one trial runs.
///
/// ```
/// use tune::Slot;
/// assert_eq!(Slot::Gpu(1).to_string(), "cuda:1");
/// assert_eq!(Slot::Cpu(0).to_string(), "cpu:0");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Slot {
    /// CPU slot number N.
    Cpu(usize),
    /// A share of GPU N (its CUDA ordinal).
    Gpu(usize),
    /// Several GPUs, all one trial's (`gpus_per_trial`).
    Gpus(GpuSet),
    /// A slot of a remote worker (`tune worker`), whichever claims the trial.
    Remote,
}

impl Slot {
    /// The device a trial on this slot computes on: the CPU, or the GPU whose share it is;
    /// `None` for a remote worker's slot, which is no device of this machine.
    ///
    /// ```
    /// use tune::Slot;
    /// use tune_trials::DeviceId;
    /// assert_eq!(Slot::Gpu(1).device(), Some(DeviceId::Cuda(1)));
    /// assert_eq!(Slot::Remote.device(), None);
    /// ```
    pub fn device(self) -> Option<DeviceId> {
        match self {
            Slot::Cpu(_) => Some(DeviceId::Cpu),
            Slot::Gpu(n) => Some(DeviceId::Cuda(n)),
            Slot::Gpus(set) => set.iter().next().map(DeviceId::Cuda),
            Slot::Remote => None,
        }
    }

    /// The GPUs a trial on this slot sees, as `CUDA_VISIBLE_DEVICES` lists them.
    ///
    /// ```
    /// use tune::{GpuSet, Slot};
    /// assert_eq!(Slot::Gpus(GpuSet::of(&[1, 3])).visible_gpus().as_deref(), Some("1,3"));
    /// assert_eq!(Slot::Cpu(0).visible_gpus(), None);
    /// ```
    pub fn visible_gpus(self) -> Option<String> {
        match self {
            Slot::Gpu(n) => Some(n.to_string()),
            Slot::Gpus(set) => Some(set.to_string()),
            Slot::Cpu(_) | Slot::Remote => None,
        }
    }

    /// Every GPU of the slot.
    fn gpus(self) -> Vec<usize> {
        match self {
            Slot::Gpu(n) => vec![n],
            Slot::Gpus(set) => set.iter().collect(),
            Slot::Cpu(_) | Slot::Remote => Vec::new(),
        }
    }
}

/// A set of GPUs of one machine, by CUDA ordinal (below 64).
///
/// ```
/// let set = tune::GpuSet::of(&[2, 0]);
/// assert_eq!(set.iter().collect::<Vec<_>>(), [0, 2]);
/// assert_eq!(set.to_string(), "0,2");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct GpuSet(u64);

impl GpuSet {
    /// The set of these ordinals (those of 64 and above are left out: no machine has them).
    pub fn of(ordinals: &[usize]) -> GpuSet {
        GpuSet(
            ordinals
                .iter()
                .filter(|&&n| n < 64)
                .fold(0, |bits, &n| bits | 1 << n),
        )
    }

    /// Its ordinals, lowest first.
    pub fn iter(self) -> impl Iterator<Item = usize> {
        (0..64).filter(move |n| self.0 & (1 << n) != 0)
    }
}

impl fmt::Display for GpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list: Vec<String> = self.iter().map(|n| n.to_string()).collect();
        f.write_str(&list.join(","))
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Slot::Cpu(n) => write!(f, "cpu:{n}"),
            Slot::Gpu(n) => write!(f, "cuda:{n}"),
            Slot::Gpus(set) => write!(f, "cuda:{set}"),
            Slot::Remote => write!(f, "remote"),
        }
    }
}

struct GpuShare {
    ordinal: usize,
    running: usize,
}

/// Hands out slots and takes them back.
pub(crate) struct Pool {
    cpu_free: Vec<usize>,
    gpus: Vec<GpuShare>,
    per_gpu: usize,
    /// GPUs one trial takes: 1 (a share of one) or more (whole ones, `gpus_per_trial`).
    gpus_per_trial: usize,
    /// Free memory of a GPU now (bytes), asked at each placement.
    free_memory: Box<dyn FnMut(usize) -> Option<u64> + Send>,
    /// Slots of remote workers, when the sweep takes them: how many they have now (kept up to
    /// date by the database bridge), and how many this sweep uses.
    remote: Option<(Arc<AtomicUsize>, usize)>,
}

/// The ordinals of the GPUs `gpus` asks for among those `found`: all of them (`"auto"`), or
/// the listed ones, each of which must exist.
fn chosen_gpus(gpus: &Gpus, found: &[GpuInfo]) -> Result<Vec<usize>, TuneError> {
    let list = match gpus {
        Gpus::Auto => return Ok(found.iter().map(|g| g.ordinal).collect()),
        Gpus::List(list) => list,
    };
    if let Some(n) = (list.iter()).find(|&&n| !found.iter().any(|g| g.ordinal == n as usize)) {
        let there: Vec<String> = found.iter().map(|g| g.ordinal.to_string()).collect();
        return Err(TuneError::Invalid(format!(
            "[resources] `gpus`: GPU {n} does not exist; this machine has {}",
            there.join(", ")
        )));
    }
    Ok(list.iter().map(|&n| n as usize).collect())
}

impl Pool {
    /// The pool for `resources` on a machine whose GPUs are `found` (or, as `Err`, why there
    /// are none). Returns a note for the user: the GPUs used, or why GPUs that were wanted
    /// cannot be.
    pub(crate) fn new(
        resources: &Resources,
        found: Result<Vec<GpuInfo>, String>,
        free_memory: Box<dyn FnMut(usize) -> Option<u64> + Send>,
    ) -> Result<(Pool, Option<String>), TuneError> {
        // Each trial takes `cpus_per_trial` CPU slots: the slots are numbered by trial.
        let cpus_per_trial = resources.cpus_per_trial().max(1);
        let cpu_trials = resources.cpu_slots / cpus_per_trial;
        let cpu = |note: Option<String>| {
            let note = note.or_else(|| {
                (cpus_per_trial > 1).then(|| {
                    format!(
                        "running up to {cpu_trials} trials at a time, {cpus_per_trial} CPU \
                         slots each"
                    )
                })
            });
            let pool = Pool {
                cpu_free: (0..cpu_trials).rev().collect(),
                gpus: Vec::new(),
                per_gpu: 0,
                gpus_per_trial: 1,
                free_memory: Box::new(|_| None),
                remote: None,
            };
            Ok((pool, note))
        };
        let fallback = |why: &str| {
            Some(format!(
                "no GPU used ({why}); running {cpu_trials} trials at a time on CPU slots"
            ))
        };
        let wanted = resources.gpus_per_trial;
        // Trials that must have GPUs never fall back to CPU slots.
        let no_gpu = |why: &str| {
            Err(TuneError::Invalid(format!(
                "[resources] gpus_per_trial = {}: no GPU can be used ({why})",
                wanted.unwrap_or(1)
            )))
        };
        let found = match (found, &resources.gpus) {
            (_, Gpus::List(list)) if list.is_empty() && wanted.is_some() => {
                return no_gpu("`gpus = []` chooses none")
            }
            (_, Gpus::List(list)) if list.is_empty() => return cpu(None),
            (Err(why), _) if wanted.is_some() => return no_gpu(&why),
            (Ok(found), _) if found.is_empty() && wanted.is_some() => return no_gpu("none found"),
            (Err(why), Gpus::Auto) if !cfg!(feature = "cuda") => {
                let _ = why; // the default build: CPU is expected, nothing to say
                return cpu(None);
            }
            (Err(why), _) => return cpu(fallback(&why)),
            (Ok(found), _) if found.is_empty() => return cpu(fallback("none found")),
            (Ok(found), _) => found,
        };
        let ordinals = chosen_gpus(&resources.gpus, &found)?;
        let per_gpu = resources.trials_per_gpu.max(1) as usize;
        let gpus_per_trial = resources.gpus_per_trial();
        if gpus_per_trial > ordinals.len() {
            let listed: Vec<String> = ordinals.iter().map(|n| format!("cuda:{n}")).collect();
            return Err(TuneError::Invalid(format!(
                "[resources] gpus_per_trial = {gpus_per_trial}, but this machine has {} GPU{} \
                 to use ({}): no trial could ever start",
                ordinals.len(),
                if ordinals.len() == 1 { "" } else { "s" },
                listed.join(", ")
            )));
        }
        let used = ordinals
            .iter()
            .filter_map(|&n| found.iter().find(|g| g.ordinal == n))
            .map(|g| {
                format!(
                    "cuda:{} ({}, {:.1} GiB free)",
                    g.ordinal,
                    g.name,
                    g.free_bytes as f64 / (1u64 << 30) as f64
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        let note = if gpus_per_trial > 1 {
            format!(
                "running up to {} trials at a time, {gpus_per_trial} GPUs each: {used}",
                ordinals.len() / gpus_per_trial
            )
        } else {
            format!(
                "running up to {per_gpu} trial{} at a time on each GPU: {used}",
                if per_gpu == 1 { "" } else { "s" }
            )
        };
        let pool = Pool {
            cpu_free: Vec::new(),
            gpus: ordinals
                .into_iter()
                .map(|ordinal| GpuShare {
                    ordinal,
                    running: 0,
                })
                .collect(),
            per_gpu,
            gpus_per_trial,
            free_memory,
            remote: None,
        };
        Ok((pool, Some(note)))
    }

    /// Whether trials run on GPUs.
    pub(crate) fn on_gpu(&self) -> bool {
        !self.gpus.is_empty()
    }

    /// Lets each local slot (a CPU slot, a GPU share) hold `trials` trials, trained as fused
    /// packs by the objective.
    pub(crate) fn pack_trials(&mut self, trials: usize) {
        let trials = trials.max(1);
        self.per_gpu *= trials;
        let slots: Vec<usize> = std::mem::take(&mut self.cpu_free);
        self.cpu_free = slots
            .into_iter()
            .flat_map(|n| std::iter::repeat_n(n, trials))
            .collect();
    }

    /// Adds the slots of remote workers: `capacity` says how many they have now.
    pub(crate) fn take_remote(&mut self, capacity: Arc<AtomicUsize>) {
        self.remote = Some((capacity, 0));
    }

    /// Whether slots may appear later (remote workers may join).
    pub(crate) fn may_grow(&self) -> bool {
        self.remote.is_some()
    }

    /// Counts an attempt already running remotely (taken over on resume) as using a slot.
    pub(crate) fn hold_remote(&mut self) {
        if let Some((_, used)) = &mut self.remote {
            *used += 1;
        }
    }

    fn remote_free(&self) -> bool {
        self.remote
            .as_ref()
            .is_some_and(|(capacity, used)| *used < capacity.load(Ordering::SeqCst))
    }

    /// How many more trials can start now.
    #[cfg(test)]
    fn capacity(&self) -> usize {
        let gpu_room: usize = self.gpus.iter().map(|g| self.per_gpu - g.running).sum();
        self.cpu_free.len() + gpu_room / self.gpus_per_trial
    }

    /// Every slot of the pool, free or not, in order.
    pub(crate) fn slots(&self) -> Vec<Slot> {
        let ordinals: Vec<usize> = self.gpus.iter().map(|g| g.ordinal).collect();
        let gpus: Vec<Slot> = if self.gpus_per_trial > 1 {
            let whole = ordinals.chunks_exact(self.gpus_per_trial);
            whole.map(|set| Slot::Gpus(GpuSet::of(set))).collect()
        } else {
            (ordinals.iter())
                .flat_map(|&n| std::iter::repeat_n(Slot::Gpu(n), self.per_gpu))
                .collect()
        };
        let mut cpu: Vec<usize> = self.cpu_free.clone();
        cpu.sort_unstable();
        gpus.into_iter()
            .chain(cpu.into_iter().map(Slot::Cpu))
            .collect()
    }

    /// Whether a slot is free (without claiming it).
    pub(crate) fn has_free(&self) -> bool {
        let gpus_with_room = self.gpus.iter().filter(|g| g.running < self.per_gpu);
        !self.cpu_free.is_empty()
            || (!self.gpus.is_empty() && gpus_with_room.count() >= self.gpus_per_trial)
            || self.remote_free()
    }

    /// A free slot: the GPU with room and the most free memory (then the fewest trials, then
    /// the lowest number), or the `gpus_per_trial` such GPUs; else the lowest free CPU slot.
    pub(crate) fn claim(&mut self) -> Option<Slot> {
        let per_gpu = self.per_gpu;
        let free_memory = &mut self.free_memory;
        let mut room: Vec<(u64, &mut GpuShare)> = self
            .gpus
            .iter_mut()
            .filter(|g| g.running < per_gpu)
            .map(|g| ((free_memory)(g.ordinal).unwrap_or(0), g))
            .collect();
        room.sort_by(|(ma, a), (mb, b)| {
            mb.cmp(ma)
                .then(a.running.cmp(&b.running))
                .then(a.ordinal.cmp(&b.ordinal))
        });
        if !room.is_empty() && room.len() >= self.gpus_per_trial {
            let taken: Vec<usize> = (room.into_iter().take(self.gpus_per_trial))
                .map(|(_, g)| {
                    g.running += 1;
                    g.ordinal
                })
                .collect();
            return Some(match taken[..] {
                [one] => Slot::Gpu(one),
                _ => Slot::Gpus(GpuSet::of(&taken)),
            });
        }
        if let Some(n) = self.cpu_free.pop() {
            return Some(Slot::Cpu(n));
        }
        if self.remote_free() {
            self.hold_remote();
            return Some(Slot::Remote);
        }
        None
    }

    pub(crate) fn release(&mut self, slot: Slot) {
        match slot {
            Slot::Cpu(n) => {
                self.cpu_free.push(n);
                // Lowest number first, so slots are reused in a stable order.
                self.cpu_free.sort_unstable_by(|a, b| b.cmp(a));
            }
            Slot::Gpu(_) | Slot::Gpus(_) => {
                for n in slot.gpus() {
                    if let Some(g) = self.gpus.iter_mut().find(|g| g.ordinal == n) {
                        g.running = g.running.saturating_sub(1);
                    }
                }
            }
            Slot::Remote => {
                if let Some((_, used)) = &mut self.remote {
                    *used = used.saturating_sub(1);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    fn gpus(n: usize) -> Vec<GpuInfo> {
        (0..n)
            .map(|i| GpuInfo {
                ordinal: i,
                name: format!("GPU {i}"),
                total_bytes: 80 << 30,
                free_bytes: 80 << 30,
            })
            .collect()
    }

    fn resources(cpu: usize, gpus: Gpus, per_gpu: u32) -> Resources {
        Resources {
            cpu_slots: cpu,
            gpus,
            trials_per_gpu: per_gpu,
            ..Resources::default()
        }
    }

    #[test]
    fn without_gpus_the_cpu_slots_run_trials() {
        let (mut pool, note) = Pool::new(
            &resources(2, Gpus::Auto, 1),
            Err("x".into()),
            Box::new(|_| None),
        )
        .unwrap();
        assert_eq!(note.is_some(), cfg!(feature = "cuda"));
        assert_eq!(pool.capacity(), 2);
        assert_eq!(
            (pool.claim(), pool.claim(), pool.claim()),
            (Some(Slot::Cpu(0)), Some(Slot::Cpu(1)), None)
        );
        pool.release(Slot::Cpu(0));
        assert_eq!(pool.claim(), Some(Slot::Cpu(0)));
        // Asked for GPUs explicitly, found none: say so.
        let (_, note) = Pool::new(
            &resources(3, Gpus::List(vec![0]), 1),
            Err("no CUDA driver".into()),
            Box::new(|_| None),
        )
        .unwrap();
        assert_eq!(
            note.unwrap(),
            "no GPU used (no CUDA driver); running 3 trials at a time on CPU slots"
        );
        let (_, note) =
            Pool::new(&resources(1, Gpus::Auto, 1), Ok(vec![]), Box::new(|_| None)).unwrap();
        assert!(note.unwrap().contains("none found"));
    }

    #[test]
    fn packs_let_each_slot_hold_several_trials() {
        let (mut pool, _) = Pool::new(
            &resources(2, Gpus::Auto, 1),
            Err("x".into()),
            Box::new(|_| None),
        )
        .unwrap();
        pool.pack_trials(3);
        assert_eq!(pool.capacity(), 6);
        let placed: Vec<String> = std::iter::from_fn(|| pool.claim())
            .map(|s| s.to_string())
            .collect();
        // The lowest slot fills first, so a pack forms on it.
        assert_eq!(
            placed,
            ["cpu:0", "cpu:0", "cpu:0", "cpu:1", "cpu:1", "cpu:1"]
        );
        pool.release(Slot::Cpu(1));
        assert_eq!(pool.claim(), Some(Slot::Cpu(1)));
        let (mut pool, _) = Pool::new(
            &resources(4, Gpus::Auto, 2),
            Ok(gpus(1)),
            Box::new(|_| Some(1)),
        )
        .unwrap();
        pool.pack_trials(16);
        assert!(pool.on_gpu());
        assert_eq!(pool.capacity(), 32);
    }

    #[test]
    fn trials_pack_onto_gpus_by_free_memory() {
        // GPU 1 has more free memory; each trial placed takes 10 GiB.
        let free = Arc::new(Mutex::new(vec![30u64 << 30, 35 << 30]));
        let probe = free.clone();
        let (mut pool, note) = Pool::new(
            &resources(4, Gpus::Auto, 3),
            Ok(gpus(2)),
            Box::new(move |i| Some(probe.lock().unwrap()[i])),
        )
        .unwrap();
        assert_eq!(pool.capacity(), 6);
        assert_eq!(
            note.unwrap(),
            "running up to 3 trials at a time on each GPU: cuda:0 (GPU 0, 80.0 GiB free), \
             cuda:1 (GPU 1, 80.0 GiB free)"
        );
        let mut placed = Vec::new();
        while let Some(slot) = pool.claim() {
            if let Slot::Gpu(i) = slot {
                free.lock().unwrap()[i] -= 10 << 30;
            }
            placed.push(slot.to_string());
        }
        // Most free memory first: 35 (GPU 1), 30 (0), 25 (1), 20 (0), 15 (1, now full), then
        // GPU 0 alone; the CPU slots stay unused while GPUs exist.
        assert_eq!(
            placed,
            ["cuda:1", "cuda:0", "cuda:1", "cuda:0", "cuda:1", "cuda:0"]
        );
        assert!(!pool.has_free());
        pool.release(Slot::Gpu(1));
        assert_eq!(pool.claim(), Some(Slot::Gpu(1)));
    }

    #[test]
    fn a_gpu_list_picks_devices_and_rejects_missing_ones() {
        let (mut pool, _) = Pool::new(
            &resources(1, Gpus::List(vec![1]), 2),
            Ok(gpus(2)),
            Box::new(|_| Some(1)),
        )
        .unwrap();
        assert_eq!(
            (pool.claim(), pool.claim(), pool.claim()),
            (Some(Slot::Gpu(1)), Some(Slot::Gpu(1)), None)
        );
        let e = Pool::new(
            &resources(1, Gpus::List(vec![0, 3]), 1),
            Ok(gpus(2)),
            Box::new(|_| None),
        )
        .err()
        .unwrap();
        assert!(
            e.to_string()
                .contains("`gpus`: GPU 3 does not exist; this machine has 0, 1"),
            "{e}"
        );
        // An empty list means CPU only, without a note.
        let (pool, note) = Pool::new(
            &resources(2, Gpus::List(vec![]), 1),
            Ok(gpus(2)),
            Box::new(|_| None),
        )
        .unwrap();
        assert_eq!((pool.capacity(), note), (2, None));
    }

    #[test]
    fn a_trial_of_several_cpu_slots_takes_them_together() {
        let r = Resources {
            cpus_per_trial: Some(2),
            ..resources(5, Gpus::Auto, 1)
        };
        let (mut pool, _) = Pool::new(&r, Err("x".into()), Box::new(|_| None)).unwrap();
        // 5 slots hold two 2-slot trials; the fifth is never enough for a third.
        assert_eq!(pool.slots(), [Slot::Cpu(0), Slot::Cpu(1)]);
        assert_eq!(
            (pool.claim(), pool.claim(), pool.claim()),
            (Some(Slot::Cpu(0)), Some(Slot::Cpu(1)), None)
        );
        pool.release(Slot::Cpu(0));
        assert_eq!(pool.claim(), Some(Slot::Cpu(0)));
    }

    #[test]
    fn a_trial_of_several_gpus_gets_whole_ones_with_the_most_free_memory() {
        let free = Arc::new(Mutex::new([10u64, 40, 30, 20]));
        let f = free.clone();
        let r = Resources {
            gpus_per_trial: Some(2),
            ..resources(1, Gpus::Auto, 1)
        };
        let (mut pool, note) = Pool::new(
            &r,
            Ok(gpus(4)),
            Box::new(move |n| Some(f.lock().unwrap()[n])),
        )
        .unwrap();
        assert!(note
            .unwrap()
            .contains("up to 2 trials at a time, 2 GPUs each"));
        let first = pool.claim().unwrap();
        assert_eq!(first, Slot::Gpus(GpuSet::of(&[1, 2])));
        assert_eq!(first.visible_gpus().as_deref(), Some("1,2"));
        assert_eq!(first.to_string(), "cuda:1,2");
        assert_eq!(pool.claim(), Some(Slot::Gpus(GpuSet::of(&[0, 3]))));
        assert!(!pool.has_free());
        assert_eq!(pool.claim(), None);
        pool.release(first);
        assert_eq!(pool.capacity(), 1);
        assert_eq!(pool.claim(), Some(first));
    }

    #[test]
    fn gpus_per_trial_that_can_never_be_placed_is_refused_with_the_numbers() {
        let r = Resources {
            gpus_per_trial: Some(3),
            ..resources(4, Gpus::Auto, 1)
        };
        let e = Pool::new(&r, Ok(gpus(2)), Box::new(|_| None))
            .err()
            .unwrap();
        assert!(
            e.to_string().contains(
                "gpus_per_trial = 3, but this machine has 2 GPUs to use (cuda:0, cuda:1)"
            ),
            "{e}"
        );
        // Wanting GPUs never falls back to CPU slots.
        let e = Pool::new(&r, Err("no driver".into()), Box::new(|_| None))
            .err()
            .unwrap();
        assert!(
            e.to_string()
                .contains("gpus_per_trial = 3: no GPU can be used (no driver)"),
            "{e}"
        );
        let r = Resources {
            gpus_per_trial: Some(1),
            ..resources(4, Gpus::List(vec![]), 1)
        };
        assert!(Pool::new(&r, Ok(gpus(2)), Box::new(|_| None)).is_err());
    }
}
