//! `[resources]`: slots, GPUs, fused packs, and what one trial takes of them.

use super::*;

/// `[resources]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    /// Concurrent trials on CPU; defaults to the number of cores.
    #[serde(default = "default_cpu_slots")]
    pub cpu_slots: usize,
    /// `"auto"` or a list of device ordinals; used by the `cuda` build only.
    #[serde(default)]
    pub gpus: Gpus,
    #[serde(default = "one")]
    pub trials_per_gpu: u32,
    /// Trials of the built-in mlp per slot, trained as one fused model when they share a
    /// shape: `"auto"` (the default) or a number.
    #[serde(default, skip_serializing_if = "Fuse::is_auto")]
    pub fuse: Fuse,
    /// The CPU slots one trial takes ([`Resources::cpus_per_trial`] resolves the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus_per_trial: Option<usize>,
    /// The GPUs one trial takes, all its own (`CUDA_VISIBLE_DEVICES` lists them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus_per_trial: Option<u32>,
    /// The machines one trial spans (`tune worker`s serving it as one gang).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes_per_trial: Option<u32>,
    /// The processes of a trial on each machine ([`Resources::processes_per_node`] resolves
    /// the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes_per_node: Option<u32>,
}

impl Resources {
    /// Processes per machine of one trial: as set, else one per GPU of the trial, else 1.
    ///
    /// ```
    /// let mut r = tune::Resources { gpus_per_trial: Some(4), ..Default::default() };
    /// assert_eq!(r.processes_per_node(), 4);
    /// r.processes_per_node = Some(2);
    /// assert_eq!(r.processes_per_node(), 2);
    /// assert_eq!(tune::Resources::default().processes_per_node(), 1);
    /// ```
    pub fn processes_per_node(&self) -> u32 {
        self.processes_per_node
            .or(self.gpus_per_trial.filter(|&g| g > 0))
            .unwrap_or(1)
    }

    /// CPU slots one trial takes: as set; else, for a trial on CPU only, one per process
    /// (`processes_per_node`), so that two 2-process trials fill 4 slots; else 1.
    ///
    /// ```
    /// let r = tune::Resources { processes_per_node: Some(2), ..Default::default() };
    /// assert_eq!(r.cpus_per_trial(), 2);
    /// let r = tune::Resources { processes_per_node: Some(2), gpus_per_trial: Some(2), ..Default::default() };
    /// assert_eq!(r.cpus_per_trial(), 1);
    /// ```
    pub fn cpus_per_trial(&self) -> usize {
        match (self.cpus_per_trial, self.gpus_per_trial) {
            (Some(n), _) => n,
            (None, None) => self.processes_per_node() as usize,
            (None, Some(_)) => 1,
        }
    }

    /// GPUs one trial takes where it runs on GPUs: as set, else 1 (a share of one GPU).
    pub fn gpus_per_trial(&self) -> usize {
        self.gpus_per_trial.unwrap_or(1).max(1) as usize
    }

    /// Machines one trial spans: as set, else 1. A trial on several is run by as many `tune
    /// worker`s at once, one gang (docs/guide/distributed-trials.md).
    ///
    /// ```
    /// let r = tune::Resources { nodes_per_trial: Some(2), ..Default::default() };
    /// assert_eq!(r.nodes_per_trial(), 2);
    /// assert_eq!(tune::Resources::default().nodes_per_trial(), 1);
    /// ```
    pub fn nodes_per_trial(&self) -> u32 {
        self.nodes_per_trial.unwrap_or(1).max(1)
    }

    /// Whether one trial takes more than one slot or more than one machine: a `tune worker`
    /// serving every sweep runs one trial per slot, so such a sweep's trials run only on
    /// workers started for it alone (`tune worker --experiment`).
    ///
    /// ```
    /// let r = tune::Resources { nodes_per_trial: Some(2), ..Default::default() };
    /// assert!(r.needs_workers_of_its_own());
    /// assert!(!tune::Resources::default().needs_workers_of_its_own());
    /// ```
    pub fn needs_workers_of_its_own(&self) -> bool {
        self.cpus_per_trial() > 1 || self.gpus_per_trial() > 1 || self.nodes_per_trial() > 1
    }

    /// Whether trials are distributed: several processes or machines (or GPUs) each, with
    /// the rendezvous placeholders and environment (docs/guide/distributed-trials.md).
    pub fn distributed(&self) -> bool {
        self.gpus_per_trial.is_some()
            || self.processes_per_node.is_some()
            || self.nodes_per_trial.is_some()
    }
}

impl Default for Resources {
    fn default() -> Self {
        Resources {
            cpu_slots: default_cpu_slots(),
            gpus: Gpus::default(),
            trials_per_gpu: 1,
            fuse: Fuse::Auto,
            cpus_per_trial: None,
            gpus_per_trial: None,
            nodes_per_trial: None,
            processes_per_node: None,
        }
    }
}

/// `fuse = "auto"` or `fuse = K`: how many trials of the built-in mlp one slot (a CPU slot, or
/// a GPU share) trains at a time as one fused model (HFTA).
///
/// ```
/// use tune::Fuse;
/// // "auto" packs 16 on a GPU and none on CPU, where a slot per core does as well.
/// assert_eq!(Fuse::Auto.trials_per_pack(true, true), 16);
/// assert_eq!(Fuse::Auto.trials_per_pack(true, false), 1);
/// assert_eq!(Fuse::Auto.trials_per_pack(false, true), 1); // a command objective
/// assert_eq!(Fuse::Trials(4).trials_per_pack(true, false), 4);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Fuse {
    #[default]
    Auto,
    Trials(u32),
}

impl Fuse {
    /// Trials per pack that `"auto"` chooses on a GPU.
    pub const AUTO_GPU: usize = 16;

    /// Most packs the searched keys may split a sweep's trials into for `"auto"` to fuse:
    /// the 16 trials in flight on a slot then average two a pack (on an H200 a pack of 4
    /// mixed shapes trained several times faster than the 4 alone: docs/design/fused-trials.md).
    pub const AUTO_MOST_PACKS: usize = 8;

    fn is_auto(&self) -> bool {
        *self == Fuse::Auto
    }

    /// Trials per pack for an objective whose trials can fuse (`fusable`: a built-in
    /// trainable whose searched keys leave few packs) or not, on a GPU or on CPU.
    pub fn trials_per_pack(self, fusable: bool, on_gpu: bool) -> usize {
        match self {
            Fuse::Trials(k) => k.max(1) as usize,
            Fuse::Auto if fusable && on_gpu => Self::AUTO_GPU,
            Fuse::Auto => 1,
        }
    }
}

impl Serialize for Fuse {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Fuse::Auto => s.serialize_str("auto"),
            Fuse::Trials(k) => s.serialize_u32(*k),
        }
    }
}

impl<'de> Deserialize<'de> for Fuse {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Fuse, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Fuse;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("\"auto\" or a number of trials per pack, at least 1")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Fuse, E> {
                match s {
                    "auto" => Ok(Fuse::Auto),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(s), &self)),
                }
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Fuse, E> {
                match u32::try_from(n) {
                    Ok(k) if k >= 1 => Ok(Fuse::Trials(k)),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Signed(n), &self)),
                }
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Fuse, E> {
                self.visit_i64(i64::try_from(n).unwrap_or(i64::MAX))
            }
        }
        d.deserialize_any(Visitor)
    }
}

fn default_cpu_slots() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn one() -> u32 {
    1
}

/// `gpus = "auto"` or `gpus = [0, 1]`.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Gpus {
    #[default]
    Auto,
    List(Vec<u32>),
}

impl Serialize for Gpus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Gpus::Auto => s.serialize_str("auto"),
            Gpus::List(list) => list.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Gpus {
    /// One message for anything else ("untagged enum" says nothing to a user).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Gpus, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Gpus;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("\"auto\" or a list of GPU numbers such as [0, 1]")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Gpus, E> {
                match s {
                    "auto" => Ok(Gpus::Auto),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(s), &self)),
                }
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Gpus, A::Error> {
                let mut list = Vec::new();
                while let Some(n) = seq.next_element::<u32>()? {
                    list.push(n);
                }
                Ok(Gpus::List(list))
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl ExperimentSpec {
    /// Whether the objective's trials can train fused ([`Fuse`]): the built-in trainables'
    /// can (the mlp and the cnn), a command's cannot.
    pub fn fusable(&self) -> bool {
        self.objective.as_ref().is_some_and(|o| o.builtin.is_some())
    }

    /// Trials per pack on a slot of this sweep ([`Fuse::trials_per_pack`]). `"auto"` packs
    /// where the sweep's trials fall into few packs: the searched keys whose values trials
    /// of one pack must share ([`tune_trials::PACK_KEYS`]; depth, width, batch size and
    /// optimizer mix) are lists of at most [`Fuse::AUTO_MOST_PACKS`] combinations. Otherwise
    /// packs would hold one trial each and only raise the number of trials running at once.
    pub fn trials_per_pack(&self, on_gpu: bool) -> usize {
        let packs = self
            .space
            .params()
            .iter()
            .filter(|p| tune_trials::PACK_KEYS.contains(&p.name.as_str()))
            .try_fold(1usize, |n, p| {
                p.domain.values().map(|v| n.saturating_mul(v.len()))
            });
        let few_packs = packs.is_some_and(|n| n <= Fuse::AUTO_MOST_PACKS);
        self.resources
            .fuse
            .trials_per_pack(self.fusable() && few_packs, on_gpu)
    }

    /// What one trial takes, for people (`tune status`), where trials are distributed:
    /// "2 processes per machine (started by tune), 2 CPU slots".
    ///
    /// ```
    /// let mut spec = tune::ExperimentSpec::from_toml(
    ///     "name = \"d\"\nmetric = \"loss\"\nsamples = 2\n[resources]\nprocesses_per_node = 2\n\
    ///      [objective]\nlauncher = \"tune\"\ncommand = [\"true\"]\n[space]\nx = { uniform = [0.0, 1.0] }\n",
    ///     std::path::Path::new("d.toml"),
    /// ).unwrap();
    /// assert_eq!(
    ///     spec.trial_shape().as_deref(),
    ///     Some("2 processes per machine (started by tune), 2 CPU slots")
    /// );
    /// spec.resources.processes_per_node = None;
    /// assert_eq!(spec.trial_shape(), None);
    /// ```
    pub fn trial_shape(&self) -> Option<String> {
        let r = &self.resources;
        if !r.distributed() {
            return None;
        }
        let launcher = match self.objective.as_ref().and_then(|o| o.launcher.as_deref()) {
            Some("tune") => "started by tune",
            _ => "started by its command",
        };
        let plural = |n: usize| if n == 1 { "" } else { "s" };
        let takes = match r.gpus_per_trial {
            Some(_) => format!("{} GPU{}", r.gpus_per_trial(), plural(r.gpus_per_trial())),
            None => format!(
                "{} CPU slot{}",
                r.cpus_per_trial(),
                plural(r.cpus_per_trial())
            ),
        };
        let processes = r.processes_per_node() as usize;
        let machines = match r.nodes_per_trial() {
            1 => String::new(),
            n => format!(" on each of {n} machines (a gang of `tune worker`s)"),
        };
        Some(format!(
            "{processes} process{} per machine ({launcher}), {takes}{machines}",
            if processes == 1 { "" } else { "es" }
        ))
    }

    /// `[resources]`: slots, and packs only where trials can be fused.
    pub(super) fn validate_resources(&self) -> Result<(), InvalidSetting> {
        if self.resources.cpu_slots == 0 {
            return Err(InvalidSetting::new(
                "resources",
                FieldError::new("cpu_slots", "expected at least 1 slot, found 0"),
            ));
        }
        self.validate_per_trial()?;
        if let (Fuse::Trials(k @ 2..), false) = (self.resources.fuse, self.fusable()) {
            let found = match &self.objective {
                Some(_) => "a command objective",
                None => "an objective of code (Tuner::fit)",
            };
            return Err(InvalidSetting::new(
                "resources",
                FieldError::new(
                    "fuse",
                    format!(
                        "packs of {k} trials train as one model only with a built-in \
                         trainable (builtin = \"mlp\" or \"cnn\"), found {found}: use fuse = 1 \
                         or \"auto\""
                    ),
                ),
            ));
        }
        Ok(())
    }

    /// What one trial takes: at least one of each, no more than can ever be placed, and
    /// only what its objective can use.
    fn validate_per_trial(&self) -> Result<(), InvalidSetting> {
        let r = &self.resources;
        let invalid = |key: &str, message: String| {
            Err(InvalidSetting::new(
                "resources",
                FieldError::new(key, message),
            ))
        };
        let counts = [
            ("cpus_per_trial", r.cpus_per_trial.map(|n| n as u64)),
            ("gpus_per_trial", r.gpus_per_trial.map(u64::from)),
            ("nodes_per_trial", r.nodes_per_trial.map(u64::from)),
            ("processes_per_node", r.processes_per_node.map(u64::from)),
        ];
        if let Some((key, _)) = counts.iter().find(|(_, n)| *n == Some(0)) {
            return invalid(key, "expected at least 1, found 0".into());
        }
        if r.gpus_per_trial.is_none() && r.cpus_per_trial() > r.cpu_slots {
            let why = match r.cpus_per_trial {
                Some(_) => String::new(),
                None => " (one per process: processes_per_node)".into(),
            };
            return invalid(
                "cpus_per_trial",
                format!(
                    "a trial takes {} CPU slots{why}, but there are {} (cpu_slots): no trial \
                     could ever start",
                    r.cpus_per_trial(),
                    r.cpu_slots
                ),
            );
        }
        if let (Some(g @ 2..), 2..) = (r.gpus_per_trial, r.trials_per_gpu) {
            return invalid(
                "gpus_per_trial",
                format!(
                    "a trial that takes {g} GPUs has them to itself: trials_per_gpu must be 1, \
                     found {}",
                    r.trials_per_gpu
                ),
            );
        }
        // The key a refusal names: what makes the trial more than one process.
        let several = if r.nodes_per_trial() > 1 {
            Some("nodes_per_trial")
        } else if r.gpus_per_trial() > 1 {
            Some("gpus_per_trial")
        } else if r.processes_per_node() > 1 {
            Some("processes_per_node")
        } else {
            None
        };
        match (&self.objective, several) {
            (Some(o), Some(key)) if o.builtin.is_some() => invalid(
                key,
                "a built-in trainable trains on one device in one process: give it one GPU, \
                 one process and one machine per trial, or use a command objective"
                    .into(),
            ),
            (None, Some(key)) => invalid(
                key,
                "an objective of code (Tuner::fit) runs in this process on one device: trials \
                 of several processes, GPUs or machines need a command objective"
                    .into(),
            ),
            _ => Ok(()),
        }
    }
}
