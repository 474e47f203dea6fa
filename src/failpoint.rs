//! Named failure points, for tests that crash or starve tune at an exact place.
//!
//! Compiled in only with the cargo feature `failpoints` (the test suite turns it on; release
//! builds leave it out, and there every point is a no-op). A process reads `TUNE_FAILPOINTS`
//! once: `point=action[@n]` entries separated by `;`. The action is `kill` (SIGKILL this
//! process: to the store, a power cut), `error` (an I/O error "No space left on device", as
//! from a full disk), `error-once` (that error at the n-th time only), `delay-MS` (sleep MS milliseconds) or `wait-PATH` (wait until the file
//! PATH exists: a test holds the process there while it does something else); `@n` acts from
//! the n-th time this process reaches the point (default: the first).
//!
//! ```text
//! TUNE_FAILPOINTS='store.sync.before=kill@3' tune resume runs/quadratic
//! ```

/// Every failure point, in the order a sweep reaches them.
///
/// ```
/// assert!(tune::failpoint::POINTS.contains(&"ack.before"));
/// ```
pub const POINTS: &[&str] = &[
    // Experiment::create: the new experiment is written beside its folder, not yet moved in.
    "create.before-rename",
    // SledStore: before a record is written (meta, trial or result).
    "store.write",
    // SledStore::sync: before and after the group sync.
    "store.sync.before",
    "store.sync.after",
    // Coordinator: after the round's sync, before and after the trials hear their decisions.
    "ack.before",
    "ack.after",
    // The coordinator's bridge to remote workers (src/remote/bridge.rs): right after it wrote
    // an offer that resumes a trial (attempt 2 or later: a promotion, a retry); and with
    // decisions synced in the store, before it writes them for the workers.
    "bridge.offer.resumed",
    "bridge.heard.before",
    // A coordinator that took over a sweep kept in PostgreSQL: after it adopted the attempts
    // workers still run and applied the decisions its store had not caught up with.
    "adopt.after",
    // An exploit's checkpoint copy (population-based training), after each file copied.
    "exploit.copy",
    // A pack of fused trials (src/objective/pack.rs), before it trains an epoch: `error` fails
    // the pack as a device error would.
    "pack.epoch",
    // A built-in trial (src/objective/builtin.rs) at the step its scheduler completes it at,
    // between writing that epoch's checkpoint and reporting the epoch.
    "checkpoint.before-report",
];

/// Acts as `TUNE_FAILPOINTS` says for `point`, if anything.
#[cfg(feature = "failpoints")]
pub(crate) fn hit(point: &'static str) -> std::io::Result<()> {
    armed::hit(point)
}

/// Failure points are compiled out.
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn hit(_point: &'static str) -> std::io::Result<()> {
    Ok(())
}

#[cfg(feature = "failpoints")]
mod armed {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    use std::time::Duration;

    use super::POINTS;

    #[derive(Debug, Clone, PartialEq)]
    enum Action {
        Kill,
        Error,
        ErrorOnce,
        Delay(u64),
        WaitFor(std::path::PathBuf),
    }

    struct Armed {
        /// point -> (action, from which hit)
        actions: HashMap<String, (Action, u64)>,
        hits: Mutex<HashMap<&'static str, u64>>,
    }

    fn parse(text: &str) -> Result<HashMap<String, (Action, u64)>, String> {
        let mut actions = HashMap::new();
        for entry in text.split(';').map(str::trim).filter(|e| !e.is_empty()) {
            let (point, rest) = entry
                .split_once('=')
                .ok_or_else(|| format!("`{entry}`: expected point=action[@n]"))?;
            if !POINTS.contains(&point) {
                return Err(format!("`{point}`: no such point; known: {POINTS:?}"));
            }
            let (action, from) = match rest.rsplit_once('@').filter(|(_, n)| !n.contains('/')) {
                Some((a, n)) => (
                    a,
                    n.parse().map_err(|_| format!("`{n}`: expected a count"))?,
                ),
                None => (rest, 1),
            };
            let action = match action {
                "kill" => Action::Kill,
                "error" => Action::Error,
                "error-once" => Action::ErrorOnce,
                other => match (other.strip_prefix("delay-"), other.strip_prefix("wait-")) {
                    (Some(ms), _) if ms.parse::<u64>().is_ok() => {
                        Action::Delay(ms.parse().unwrap_or(0))
                    }
                    (_, Some(path)) if !path.is_empty() => Action::WaitFor(path.into()),
                    _ => {
                        return Err(format!(
                            "`{other}`: expected kill, error, error-once, delay-MS or wait-PATH"
                        ))
                    }
                },
            };
            actions.insert(point.to_string(), (action, from));
        }
        Ok(actions)
    }

    fn armed() -> &'static Armed {
        static ARMED: OnceLock<Armed> = OnceLock::new();
        ARMED.get_or_init(|| {
            let text = std::env::var("TUNE_FAILPOINTS").unwrap_or_default();
            let actions = parse(&text).unwrap_or_else(|e| {
                eprintln!("error: TUNE_FAILPOINTS: {e}");
                std::process::exit(2);
            });
            Armed {
                actions,
                hits: Mutex::new(HashMap::new()),
            }
        })
    }

    pub(super) fn hit(point: &'static str) -> std::io::Result<()> {
        debug_assert!(POINTS.contains(&point), "unlisted failure point {point}");
        let armed = armed();
        let Some((action, from)) = armed.actions.get(point).cloned() else {
            return Ok(());
        };
        let n = {
            let mut hits = armed.hits.lock().unwrap_or_else(|e| e.into_inner());
            let n = hits.entry(point).or_insert(0);
            *n += 1;
            *n
        };
        if n < from || (action == Action::ErrorOnce && n > from) {
            return Ok(());
        }
        match action {
            Action::Kill => {
                // SAFETY: kill(2) on our own pid; no memory is involved.
                unsafe { libc::kill(std::process::id() as libc::pid_t, libc::SIGKILL) };
                // SIGKILL cannot be caught; this thread does not run on.
                loop {
                    std::thread::park();
                }
            }
            Action::Error | Action::ErrorOnce => {
                Err(std::io::Error::from_raw_os_error(libc::ENOSPC))
            }
            Action::Delay(ms) => {
                std::thread::sleep(Duration::from_millis(ms));
                Ok(())
            }
            Action::WaitFor(path) => {
                while !path.exists() {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Ok(())
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn entries_parse_and_mistakes_are_named() {
            let a = parse("store.write=error@3; ack.before=kill;exploit.copy=delay-20").unwrap();
            assert_eq!(a["store.write"], (Action::Error, 3));
            assert_eq!(a["ack.before"], (Action::Kill, 1));
            assert_eq!(a["exploit.copy"], (Action::Delay(20), 1));
            let w = parse("ack.after=wait-/tmp/a@b/go@2").unwrap();
            assert_eq!(w["ack.after"], (Action::WaitFor("/tmp/a@b/go".into()), 2));
            assert!(parse("nope=kill").unwrap_err().contains("no such point"));
            assert!(parse("ack.before=explode")
                .unwrap_err()
                .contains("expected kill"));
            assert!(parse("ack.before=kill@x")
                .unwrap_err()
                .contains("expected a count"));
            assert!(parse("ack.before").unwrap_err().contains("point=action"));
        }
    }
}
