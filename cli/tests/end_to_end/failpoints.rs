//! Crashes and I/O errors at every named failure point (src/failpoint.rs), each at exact hits:
//! the sweep resumed after each ends as the uninterrupted one, keeping every acknowledged result
//! and storing none twice.

use crate::common;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::*;

fn with_failpoint(mut cmd: Command, failpoints: &str) -> Output {
    cmd.env("TUNE_FAILPOINTS", failpoints)
        .stdout(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn a_kill_at_any_failure_point_resumes_to_the_uninterrupted_sweep() {
    let want = uninterrupted_band();
    for point in tune::failpoint::POINTS {
        if *point == "exploit.copy" {
            continue; // HyperBand copies no checkpoint: see the PBT test below.
        }
        if ["pack.epoch", "checkpoint.before-report"].contains(point) {
            // Only built-in trials reach them: cli/tests/end_to_end/builtin.rs kills there.
            continue;
        }
        if point.starts_with("bridge.") || *point == "adopt.after" {
            // Only sweeps on remote workers reach them: cli/tests/end_to_end/workers.rs kills there.
            continue;
        }
        let case = tempfile::tempdir().unwrap();
        let spec = hyperband_band(case.path());
        let dir = case.path().join("killed");
        let kills = kill_at_point_until_done(point, || run_or_resume(&spec, &dir));
        let expected_kills = if *point == "create.before-rename" {
            1
        } else {
            3
        };
        assert!(
            kills >= expected_kills,
            "{point}: killed only {kills} times"
        );
        let trials = export_json(&dir);
        assert_acknowledged_results_kept(case.path(), &by_id(trials.clone()));
        assert_eq!(outcome(&trials), want, "killed at {point}");
    }
}

#[test]
fn a_full_disk_stops_the_sweep_naming_the_store_and_resume_goes_on_exactly() {
    let want = uninterrupted_band();
    for point in ["store.write", "store.sync.before"] {
        let case = tempfile::tempdir().unwrap();
        let spec = hyperband_band(case.path());
        let dir = case.path().join("full");
        let out = with_failpoint(tune_run(&spec, &dir), "ack.after=kill@5");
        assert!(killed(&out), "{}", stderr(&out));
        // The disk fills up in the middle of the sweep: every write or sync from then on fails.
        let out = with_failpoint(tune_resume(&dir), &format!("{point}=error@12"));
        assert_eq!(out.status.code(), Some(1), "{point}: {}", stderr(&out));
        let message = stderr(&out);
        let db = dir.join("tune.db");
        assert!(
            message.contains(&format!("{}: No space left on device", db.display())),
            "{point}: {message}"
        );
        assert!(!message.contains("panicked"), "{point}: {message}");
        // Space freed: the sweep goes on from what was acknowledged.
        run_ok(tune().arg("resume").arg(&dir));
        let trials = export_json(&dir);
        assert_acknowledged_results_kept(case.path(), &by_id(trials.clone()));
        assert_eq!(outcome(&trials), want, "full disk at {point}");
    }
}

#[test]
fn a_kill_during_an_exploits_checkpoint_copy_leaves_a_consistent_population() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = pbt_population(tmp.path(), "0.01");
    let dir = tmp.path().join("pbt");
    // Each copy copies one file (the fixture's `state`): killed at the n-th copy of the run.
    let mut kills = 0;
    for n in [1, 2, 1, 3] {
        let out = with_failpoint(
            run_or_resume(&spec, &dir),
            &format!("exploit.copy=kill@{n}"),
        );
        if killed(&out) {
            kills += 1;
        } else {
            assert!(out.status.success(), "{}", stderr(&out));
        }
    }
    assert!(kills >= 2, "killed only {kills} times");
    run_ok(tune().arg("resume").arg(&dir));
    assert_pbt_consistent(&spec, &dir, 8);
}

/// A tmpfs of `size` mounted on `at` for the life of the value (unmounted on drop).
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    /// `None` where this user may not mount (not root): the test is then skipped, saying so.
    /// As root (CI), a refused mount fails the test.
    fn mount(at: &Path, size: &str) -> Option<SmallDisk> {
        std::fs::create_dir_all(at).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .output();
        match out {
            Ok(out) if out.status.success() => Some(SmallDisk(at.to_path_buf())),
            // SAFETY: geteuid has no preconditions and cannot fail.
            _ if unsafe { libc::geteuid() } != 0 => {
                eprintln!("skipped: mounting a small tmpfs needs root");
                None
            }
            other => panic!(
                "root could not mount a tmpfs on {}: {other:?}",
                at.display()
            ),
        }
    }

    fn resize(&self, size: &str) {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_real_full_disk_stops_the_sweep_and_resume_after_space_is_freed_goes_on_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    // ASHA on one slot, trials that print 9 steps without waiting (awk: ~200 trials a second):
    // 1,000 trials write about 2 MB to the store, twice what the disk holds.
    let spec = tmp.path().join("space.toml");
    std::fs::write(
        &spec,
        r#"name = "small"
metric = "loss"
samples = 1000
seed = 3
[scheduler]
kind = "asha"
max_t = 9
grace_period = 1
reduction_factor = 3
[resources]
cpu_slots = 1
[objective]
command = ["awk", "-v", "x={x}", "BEGIN {{ for (s = 1; s <= 9; s++) printf \"{{\\\"step\\\": %d, \\\"loss\\\": %.9f}}\\n\", s, x * x + 1 / s }}"]
[space]
x = { uniform = [-3.0, 3.0] }
"#,
    )
    .unwrap();
    let Some(disk) = SmallDisk::mount(&tmp.path().join("small"), "1m") else {
        return;
    };
    let reference_dir = tmp.path().join("whole");
    run_ok(&mut tune_run(&spec, &reference_dir));
    let want = outcome(&export_json(&reference_dir));
    let dir = tmp.path().join("small").join("exp");
    let db = dir.join("tune.db");
    let full = format!("{}: No space left on device", db.display());
    let out = tune_run(&spec, &dir).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains(&full), "{}", stderr(&out));
    // Resumed while the disk is still full: the same clean stop, the store left as it was.
    for _ in 0..2 {
        let out = tune_resume(&dir).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    }
    disk.resize("16m");
    run_ok(&mut tune_resume(&dir));
    let trials = export_json(&dir);
    assert_eq!(trials.len(), 1000);
    assert_eq!(outcome(&trials), want);
}
