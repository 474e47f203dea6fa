//! The dashboard end to end: the real binary in tmux (send-keys, capture-pane). Needs tmux;
//! `.ci/run` installs it when it is missing.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{export_json, write_spec};

/// A private tmux server, killed when dropped. One test at a time holds one: live sweeps
/// and terminals side by side on a 2-core machine make every timing in them worse.
struct Tmux {
    socket: String,
    _turn: std::sync::MutexGuard<'static, ()>,
}

static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Tmux {
    fn new(tag: &str) -> Tmux {
        let ok = Command::new("tmux").arg("-V").output();
        assert!(
            ok.is_ok_and(|o| o.status.success()),
            "tmux is needed for the dashboard tests (.ci/run installs it)"
        );
        Tmux {
            socket: format!("tune-test-{tag}-{}", std::process::id()),
            _turn: TURN.lock().unwrap_or_else(|e| e.into_inner()),
        }
    }

    fn cmd(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Starts `command` in a new 120x40 window called `name`; the pane stays after it exits.
    fn start(&self, name: &str, command: &str) {
        if !self.has_session() {
            self.cmd(&[
                "new-session",
                "-d",
                "-s",
                "main",
                "-x",
                "120",
                "-y",
                "40",
                "sleep 600",
            ]);
            self.cmd(&["set-option", "-g", "remain-on-exit", "on"]);
        }
        self.cmd(&["new-window", "-d", "-n", name, command]);
        self.cmd(&["resize-window", "-t", name, "-x", "120", "-y", "40"]);
    }

    fn has_session(&self) -> bool {
        Command::new("tmux")
            .args(["-L", &self.socket, "has-session"])
            .output()
            .is_ok_and(|o| o.status.success())
    }

    fn screen(&self, name: &str) -> String {
        self.cmd(&["capture-pane", "-p", "-t", name])
    }

    fn keys(&self, name: &str, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", name];
        args.extend(keys);
        self.cmd(&args);
    }

    /// Waits until the window shows `needle`; fails with the last screen after `secs`.
    fn wait_for(&self, name: &str, needle: &str, secs: u64) -> String {
        self.wait_until(name, needle, secs, |s| s.contains(needle))
    }

    /// Waits until the window shows every one of `needles` at once. A capture may catch a
    /// frame half drawn (its first lines, not yet its last: seen with both cores busy), so
    /// what a frame must hold is waited for, not asserted on the first capture that shows
    /// one part of it.
    fn wait_for_all(&self, name: &str, needles: &[&str], secs: u64) -> String {
        let all = needles.join("` and `");
        self.wait_until(name, &all, secs, |s| needles.iter().all(|n| s.contains(n)))
    }

    /// Waits until the program in the window has exited; returns its last screen.
    fn wait_exit(&self, name: &str, secs: u64) -> String {
        let start = Instant::now();
        while self
            .cmd(&["display-message", "-p", "-t", name, "#{pane_dead}"])
            .trim()
            != "1"
        {
            assert!(
                start.elapsed() < Duration::from_secs(secs),
                "{name} still running after {secs}s; the screen:\n{}",
                self.screen(name)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        self.screen(name)
    }

    fn wait_until(&self, name: &str, needle: &str, secs: u64, ok: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen(name);
            if ok(&screen) {
                return screen;
            }
            assert!(
                start.elapsed() < Duration::from_secs(secs),
                "`{needle}` not on {name} after {secs}s; the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.cmd(&["kill-server"]);
    }
}

fn tune_bin() -> &'static str {
    env!("CARGO_BIN_EXE_tune")
}

/// A sweep of 6 trials, 2 at a time, each reporting 4 steps 0.4 s apart (~5 s in all).
fn slow_spec(dir: &Path) -> std::path::PathBuf {
    write_spec(
        dir,
        "samples = 6\nseed = 3\n[resources]\ncpu_slots = 2",
        &["--steps", "4", "--sleep", "0.4"],
        "x = { uniform = [-5.0, 5.0] }",
    )
}

#[test]
fn run_shows_the_live_and_final_dashboard_and_watch_shows_it_too() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = slow_spec(tmp.path());
    let dir = tmp.path().join("runs/t");
    let tmux = Tmux::new("run");
    tmux.start(
        "run",
        &format!(
            "env -u NO_COLOR {} run {} --dir {}",
            tune_bin(),
            spec.display(),
            dir.display()
        ),
    );
    // Live: the header says running, trials have rows, workers are busy.
    tmux.wait_for_all("run", &["tune · t · auto + fifo", "· running"], 30);
    tmux.wait_for_all("run", &["cpu:0   trial", "trials ("], 30);
    // A watcher in another window sees the same sweep while it runs.
    tmux.start("watch", &format!("{} watch {}", tune_bin(), dir.display()));
    tmux.wait_until("watch", "the sweep, running or finished", 30, |s| {
        s.contains("tune · t · auto + fifo") && (s.contains("· running") || s.contains("finished"))
    });
    // The end: the dashboard stays, saying so, until q.
    tmux.wait_for_all(
        "run",
        &[
            "finished (q to leave)",
            "6/6 trials: 6 completed",
            "best loss",
        ],
        60,
    );
    tmux.wait_for("watch", "finished (q to leave)", 30);
    // Details of the selected trial, then q leaves and prints the best trial.
    tmux.keys("run", &["Enter"]);
    tmux.wait_for("run", "params:", 10);
    tmux.keys("run", &["Escape", "q"]);
    tmux.wait_for_all("run", &["best trial", "results: tune status"], 10);
    tmux.keys("watch", &["q"]);
    tmux.wait_exit("watch", 30);

    // `tune watch` on the finished folder: the stored sweep, read-only.
    tmux.start("again", &format!("{} watch {}", tune_bin(), dir.display()));
    tmux.wait_for_all(
        "again",
        &[
            "finished (q to leave)",
            "6/6 trials: 6 completed",
            "FIFO: every trial runs to its end",
        ],
        30,
    );
    tmux.keys("again", &["q"]);
    tmux.wait_exit("again", 30);
    assert_eq!(export_json(&dir).len(), 6);
}

#[test]
fn quitting_a_running_sweep_asks_then_stops_it_for_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = slow_spec(tmp.path());
    let dir = tmp.path().join("runs/t");
    let tmux = Tmux::new("quit");
    tmux.start(
        "run",
        &format!(
            "{} run {} --dir {}",
            tune_bin(),
            spec.display(),
            dir.display()
        ),
    );
    tmux.wait_for("run", "cpu:1   trial", 30);
    tmux.keys("run", &["q"]);
    tmux.wait_for("run", "Stop the sweep?", 10);
    // Any other key keeps it running.
    tmux.keys("run", &["n"]);
    tmux.wait_until("run", "the dialog gone, still running", 10, |s| {
        !s.contains("Stop the sweep?") && s.contains("· running")
    });
    tmux.keys("run", &["q"]);
    tmux.wait_for("run", "Stop the sweep?", 10);
    tmux.keys("run", &["y"]);
    let after = tmux.wait_exit("run", 60);
    assert!(after.contains("tune: stopping"), "{after}");
    assert!(after.contains("tune resume"), "{after}");
    // Nothing lost: the resume finishes the sweep.
    let out = Command::new(tune_bin())
        .args(["resume", &dir.display().to_string(), "--no-tui"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let trials = export_json(&dir);
    assert_eq!(trials.len(), 6);
    assert!(
        trials.iter().all(|t| t["status"] == "completed"),
        "{trials:?}"
    );
}

#[test]
fn watch_without_a_terminal_prints_one_frame_and_bad_folders_fail() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(
        tmp.path(),
        "samples = 3\nseed = 1\n[resources]\ncpu_slots = 1",
        &["--steps", "2"],
        "x = { uniform = [-5.0, 5.0] }",
    );
    let dir = tmp.path().join("runs/t");
    common::run_ok(&mut common::tune_run(&spec, &dir));
    let out = common::run_ok(Command::new(tune_bin()).args(["watch", &dir.display().to_string()]));
    let frame = String::from_utf8_lossy(&out.stdout);
    assert!(frame.contains("3/3 trials: 3 completed"), "{frame}");
    assert!(frame.contains("finished (q to leave)"), "{frame}");
    let out = Command::new(tune_bin())
        .args(["watch", &tmp.path().join("nope").display().to_string()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}
