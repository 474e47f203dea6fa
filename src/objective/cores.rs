//! How the built-in trainables' CPU kernels share this machine's cores among the trials that
//! run at once: through `RAYON_NUM_THREADS`, which Candle sizes its work by.

/// Each concurrent trial's share of the cores for Candle's CPU kernels, or `None` where the
/// user (or [`crate::share_cores_among_trials`]) set `RAYON_NUM_THREADS`, which Candle then
/// follows. Small models lose to thread hand-offs when every trial asks for every core: the
/// mlp-digits example ran in 3.1 s with 2 threads per trial on 2 cores and 1.9 s with 1, with
/// identical results.
#[cfg(feature = "builtin")]
pub(crate) fn threads_per_trial(cpu_slots: usize) -> Option<usize> {
    if std::env::var_os("RAYON_NUM_THREADS").is_some() {
        return None;
    }
    Some(cores_per_slot(cpu_slots))
}

fn cores_per_slot(cpu_slots: usize) -> usize {
    share_of(cores(), cpu_slots)
}

/// The cores this process may use.
pub(crate) fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Each of `slots`' share of `cores`, at least one (`slots` 0, a coordinator that runs no
/// trial, counts as one).
fn share_of(cores: usize, slots: usize) -> usize {
    (cores / slots.max(1)).max(1)
}

/// Gives each trial of a built-in trainable its share of the cores through
/// `RAYON_NUM_THREADS`, unless the user set it: what the `tune` binary does before it starts.
///
/// Without it each trial runs in a thread pool of that size, with the same results but, on
/// small models, slower: Candle sizes its matrix products by `RAYON_NUM_THREADS` (else the
/// physical cores), not by the pool, so every trial would split its products over all the
/// cores while the others do the same.
///
/// `local_slots` is the sweep's `--slots` ([`crate::Tuner::local_slots`]) where given: the
/// trials that run at once here are those, not the spec's `cpu_slots`.
///
/// # Safety
/// It writes the process environment: no other thread may be running (call it first thing
/// in `main`), or one reading the environment at the same time is undefined behaviour.
pub unsafe fn share_cores_among_trials(spec: &crate::ExperimentSpec, local_slots: Option<usize>) {
    if let Some(threads) = rayon_threads(spec, local_slots, cores()) {
        // SAFETY: as this function's contract.
        unsafe { set_rayon_threads(threads) };
    }
}

/// [`share_cores_among_trials`] for `tune worker`, which learns its sweeps only once it runs:
/// each of its `slots` gets its share of the cores, whatever it trains. A command objective's
/// process gets the environment without it, as the user left it.
///
/// ```
/// // SAFETY: first thing in `main`, before any thread.
/// unsafe { tune::share_cores_among_worker_slots(4) };
/// ```
///
/// # Safety
/// As [`share_cores_among_trials`]: no other thread may be running.
pub unsafe fn share_cores_among_worker_slots(slots: usize) {
    // SAFETY: as this function's contract.
    unsafe { set_rayon_threads(cores_per_slot(slots)) };
}

/// Whether tune itself set `RAYON_NUM_THREADS` (for its built-in trainables), which a command
/// objective's process then does not inherit.
static RAYON_SET_BY_TUNE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sets `RAYON_NUM_THREADS` to `threads` unless the user set it.
///
/// # Safety
/// It writes the process environment: no other thread may be running.
unsafe fn set_rayon_threads(threads: usize) {
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        // SAFETY: as this function's contract.
        unsafe { std::env::set_var("RAYON_NUM_THREADS", threads.to_string()) };
        RAYON_SET_BY_TUNE.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Whether `RAYON_NUM_THREADS` is tune's own (see [`share_cores_among_worker_slots`]).
pub(crate) fn rayon_set_by_tune() -> bool {
    RAYON_SET_BY_TUNE.load(std::sync::atomic::Ordering::Relaxed)
}

/// The `RAYON_NUM_THREADS` that [`share_cores_among_trials`] sets on a machine of `cores`.
fn rayon_threads(
    spec: &crate::ExperimentSpec,
    local_slots: Option<usize>,
    cores: usize,
) -> Option<usize> {
    let builtin = spec.objective.as_ref().is_some_and(|o| o.builtin.is_some());
    builtin.then(|| share_of(cores, local_slots.unwrap_or(spec.resources.cpu_slots)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cores_are_shared_among_the_slots_the_sweep_runs_with() {
        let spec = |objective: &str| {
            crate::ExperimentSpec::from_toml(
                &format!(
                    "name = \"s\"\nmetric = \"val_accuracy\"\nmode = \"max\"\nsamples = 4\n\
                     [resources]\ncpu_slots = 2\n[objective]\n{objective}\n\
                     [space]\nlr = {{ loguniform = [1e-3, 1e-1] }}\n"
                ),
                std::path::Path::new("s.toml"),
            )
            .unwrap()
        };
        let builtin = spec("builtin = \"mlp\"\ndataset = \"wine\"");
        assert_eq!(rayon_threads(&builtin, None, 16), Some(8));
        // `--slots 16` on 16 cores: one thread each, not the spec's 8 each.
        assert_eq!(rayon_threads(&builtin, Some(16), 16), Some(1));
        assert_eq!(rayon_threads(&builtin, Some(1), 16), Some(16));
        assert_eq!(rayon_threads(&builtin, Some(0), 16), Some(16));
        assert_eq!(rayon_threads(&builtin, Some(32), 16), Some(1));
        // A command's own processes are left to themselves.
        let command = spec("command = [\"true\"]");
        assert_eq!(rayon_threads(&command, Some(2), 16), None);
    }
}
