//! Trials that misbehave: a 100 MB line, binary output, thousands of metrics in a report, a
//! flood of reports, a forked child left running, SIGTERM ignored, stdin closed. Each fails
//! or completes with the reason stored, the sweep goes on, and no process is left behind.

use crate::common;

use std::path::Path;

use common::*;
use serde_json::Value as Json;

/// A sweep of two trials of the fixture with argv `extra` (and `objective`, lines of its
/// `[objective]` table); the exported trials, once no process of it is left.
fn sweep(tmp: &Path, name: &str, objective: &str, extra: &[&str]) -> Vec<Json> {
    let marker = tmp.join(format!("marker-{name}")).display().to_string();
    let mut argv = vec!["--marker", &marker];
    argv.extend_from_slice(extra);
    let spec = write_spec(
        tmp,
        "samples = 2\nseed = 1\n[resources]\ncpu_slots = 2",
        &argv,
        "x = { uniform = [-1.0, 1.0] }",
    );
    let text = std::fs::read_to_string(&spec).unwrap();
    std::fs::write(
        &spec,
        text.replace("\n[space]", &format!("{objective}\n\n[space]")),
    )
    .unwrap();
    let dir = tmp.join(name);
    let out = tune_run(&spec, &dir).output().unwrap();
    assert!(
        !stderr(&out).contains("panicked"),
        "{name}: {}",
        stderr(&out)
    );
    assert_eq!(
        processes_with(&marker),
        Vec::<String>::new(),
        "{name}: left running"
    );
    export_json(&dir)
}

fn errors(trials: &[Json]) -> Vec<(String, String)> {
    trials
        .iter()
        .map(|t| {
            let error = t["error"].as_str().unwrap_or_default();
            (
                t["status"].as_str().unwrap().to_string(),
                error.lines().next().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_line_of_100_mb_fails_its_trial_without_holding_it() {
    let tmp = tempfile::tempdir().unwrap();
    let trials = sweep(tmp.path(), "longline", "", &["--behaviour", "longline"]);
    for (status, error) in errors(&trials) {
        assert_eq!(status, "failed");
        assert!(
            error.starts_with("a line of its output is longer than 1 MiB (it starts: xxxx"),
            "{error}"
        );
    }
}

#[test]
fn binary_output_is_log_output_and_the_reports_after_it_count() {
    let tmp = tempfile::tempdir().unwrap();
    let trials = sweep(tmp.path(), "binary", "", &["--behaviour", "binary"]);
    for t in &trials {
        assert_eq!(t["status"], "completed", "{t}");
        assert_eq!(steps(t), [1, 2, 3]);
    }
}

#[test]
fn thousands_of_metrics_in_one_report_fail_the_trial() {
    let tmp = tempfile::tempdir().unwrap();
    let trials = sweep(tmp.path(), "metrics", "", &["--behaviour", "metrics"]);
    for (status, error) in errors(&trials) {
        assert_eq!(status, "failed");
        assert!(
            error.starts_with(
                "a report could not be read (5002 metrics, at most 1000): {\"step\": 1"
            ),
            "{error}"
        );
    }
}

#[test]
fn a_flood_of_reports_is_taken_one_by_one() {
    let tmp = tempfile::tempdir().unwrap();
    let trials = sweep(
        tmp.path(),
        "flood",
        "",
        &["--behaviour", "flood", "--steps", "1"],
    );
    for t in &trials {
        assert_eq!(t["status"], "completed", "{t}");
        assert_eq!(steps(t), (1..=2000).collect::<Vec<u64>>());
    }
}

#[test]
fn a_child_forked_and_left_running_ends_with_its_trial() {
    let tmp = tempfile::tempdir().unwrap();
    // `sweep` checks no process carrying the marker (the forked child's argv) is left.
    let trials = sweep(tmp.path(), "fork", "", &["--behaviour", "fork"]);
    for t in &trials {
        assert_eq!(t["status"], "completed", "{t}");
    }
}

#[test]
fn a_trial_ignoring_sigterm_is_killed_after_the_grace() {
    let tmp = tempfile::tempdir().unwrap();
    let trials = sweep(
        tmp.path(),
        "ignoreterm",
        "timeout_s = 1",
        &["--behaviour", "ignoreterm", "--sleep", "30"],
    );
    for (status, error) in errors(&trials) {
        assert_eq!(
            (status.as_str(), error.as_str()),
            ("failed", "timed out after 1 s")
        );
    }
}

#[test]
fn a_trial_that_closes_stdin_runs_to_its_end() {
    let tmp = tempfile::tempdir().unwrap();
    let trials = sweep(tmp.path(), "closestdin", "", &["--behaviour", "closestdin"]);
    for t in &trials {
        assert_eq!(t["status"], "completed", "{t}");
        assert_eq!(steps(t), [1, 2, 3]);
    }
}

#[test]
fn a_trial_whose_setsid_child_keeps_its_output_open_ends_with_its_process() {
    let tmp = tempfile::tempdir().unwrap();
    let marker = tmp.path().join("marker-setsid").display().to_string();
    let spec = write_spec(
        tmp.path(),
        "samples = 2\nseed = 1\n[resources]\ncpu_slots = 2",
        &["--marker", &marker, "--behaviour", "setsid"],
        "x = { uniform = [-1.0, 1.0] }",
    );
    let dir = tmp.path().join("setsid");
    // Before: the sweep waited for the pipe, held by the child for 300 s.
    let out = run_ok(tune_run(&spec, &dir).arg("--no-tui"));
    let text = stderr(&out);
    let trials = export_json(&dir);
    for t in &trials {
        assert_eq!(t["status"], "completed", "{t}");
        assert_eq!(steps(t), [1]);
    }
    // Each session child was killed when its trial ended (by its attempt's environment mark,
    // before the attempt's end was told): gone once the kernel has taken it away.
    let killed = text.lines().filter(|l| {
        l.contains("still held its output open; the trial ended with its process;")
            && l.ends_with("outside its process groups were still running, and were killed")
    });
    assert_eq!(killed.count(), 2, "{text}");
    let started = std::time::Instant::now();
    while !processes_with(&marker).is_empty() && started.elapsed().as_secs() < 60 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(processes_with(&marker), Vec::<String>::new(), "{trials:?}");
}
