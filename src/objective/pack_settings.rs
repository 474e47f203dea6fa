//! The switches for measuring fused trials against other ways of training them, in one
//! place: each is an environment variable, off unless set, read once per process
//! (`scripts/gpu-fuse-check` sets them for its comparisons; docs/design/fused-trials.md has
//! what each measured).

use std::sync::OnceLock;

/// How packs of built-in trials train, where a measurement asks for another way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct PackSettings {
    /// `TUNE_PACKS_IN_LOCKSTEP`: a pack trains an epoch of every member at a time
    /// ([`tune_trials::FusedTrainer::train_epoch`]), a member of fewer steps an epoch (a
    /// larger batch) sitting the last ones out, as packs did before their members went
    /// through their own epochs. On CPU, where batch sizes never mix, both train alike.
    pub lockstep: bool,
    /// `TUNE_PACKS_BY_STEPS`: trials whose epochs take other numbers of steps (batch sizes)
    /// go into packs of their own ([`tune_trials::Trainer::pack_key_by_steps`]), which train
    /// side by side where `trials_per_gpu` lets them. On CPU batch sizes never mix.
    pub by_steps: bool,
    /// `TUNE_GPU_TRIALS_ALONE`: a GPU trial of a sweep that does not fuse (`fuse = 1`)
    /// trains alone, through candle's autograd and optimizer, as every unfused trial did
    /// before packs of one (which run the fused kernels themselves).
    pub gpu_trials_alone: bool,
    /// `TUNE_PACK_TRACE`: each pack prints its timeline on stderr (`@` and the Unix time,
    /// then what happened), which `scripts/gpu-fuse-check` places among the GPU's busy
    /// samples. Plain lines rather than `tracing` events: they are data that a script and
    /// the pack tests parse, in one format, and the library logs nothing else that would
    /// share a subscriber.
    pub trace: bool,
}

impl PackSettings {
    /// This process's settings.
    pub(crate) fn get() -> &'static PackSettings {
        static SETTINGS: OnceLock<PackSettings> = OnceLock::new();
        SETTINGS.get_or_init(|| PackSettings::from(|name| std::env::var_os(name).is_some()))
    }

    /// The settings whose variables `is_set` says are set.
    fn from(is_set: impl Fn(&str) -> bool) -> PackSettings {
        PackSettings {
            lockstep: is_set("TUNE_PACKS_IN_LOCKSTEP"),
            by_steps: is_set("TUNE_PACKS_BY_STEPS"),
            gpu_trials_alone: is_set("TUNE_GPU_TRIALS_ALONE"),
            trace: is_set("TUNE_PACK_TRACE"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_switch_has_its_own_variable() {
        assert_eq!(PackSettings::from(|_| false), PackSettings::default());
        let only = |var: &'static str| PackSettings::from(move |name| name == var);
        assert!(only("TUNE_PACKS_IN_LOCKSTEP").lockstep);
        assert!(only("TUNE_PACKS_BY_STEPS").by_steps);
        assert!(only("TUNE_GPU_TRIALS_ALONE").gpu_trials_alone);
        assert!(only("TUNE_PACK_TRACE").trace);
        assert!(!only("TUNE_PACK_TRACE").lockstep);
    }
}
