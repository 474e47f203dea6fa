//! Helpers shared by the integration tests: the real `tune` binary, spec files, exports.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value as Json;

pub fn tune() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tune"))
}

/// `tune run SPEC --dir DIR`.
pub fn tune_run(spec: &Path, dir: &Path) -> Command {
    let mut cmd = tune();
    cmd.arg("run").arg(spec).arg("--dir").arg(dir);
    cmd
}

/// Starts the sweep (`tune run`, then `tune resume` for later rounds) once per entry of
/// `waits_ms`, sending SIGKILL after that long if it is still running.
pub fn run_with_kills(spec: &Path, dir: &Path, waits_ms: &[u64]) {
    for &wait in waits_ms {
        // On a loaded machine a kill can land before `run` has made the experiment (creation
        // is atomic, so then there is none): the next round runs again instead of resuming.
        let mut cmd = if !dir.exists() {
            tune_run(spec, dir)
        } else {
            let mut c = tune();
            c.arg("resume").arg(dir);
            c
        };
        let mut child = cmd
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(wait));
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap(); // SIGKILL
        }
        child.wait().unwrap();
    }
    if !dir.exists() {
        run_ok(&mut tune_run(spec, dir));
    }
}

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A spec file running tests/fixtures/objective.py with extra argv `extra`, and a `[space]`
/// of `space` (TOML lines); `top` is added to the top-level keys.
pub fn write_spec(dir: &Path, top: &str, extra: &[&str], space: &str) -> PathBuf {
    let objective = fixture("objective.py");
    let mut argv = vec![
        "python3".to_string(),
        objective.display().to_string(),
        "--x".into(),
        "{x}".into(),
    ];
    argv.extend(extra.iter().map(|s| s.to_string()));
    let argv: Vec<String> = argv.iter().map(|a| format!("{a:?}")).collect();
    let text = format!(
        "name = \"t\"\nmetric = \"loss\"\n{top}\n\n[objective]\ncommand = [{}]\n\n[space]\n{space}\n",
        argv.join(", ")
    );
    let path = dir.join("space.toml");
    std::fs::write(&path, text).unwrap();
    path
}

pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{:?} failed: {}\nstdout: {}\nstderr: {}",
        cmd,
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn export_json(dir: &Path) -> Vec<Json> {
    let out = run_ok(tune().arg("export").arg(dir).args(["--format", "json"]));
    match serde_json::from_slice(&out.stdout).unwrap() {
        Json::Array(v) => v,
        other => panic!("export is not an array: {other}"),
    }
}

/// The objective of tests/fixtures/objective.py, computed the same way.
pub fn quadratic(x: f64, y: f64, step: u64) -> f64 {
    (x - 1.0) * (x - 1.0) + (y + 2.0) * (y + 2.0) + 1.0 / step as f64
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A trial's exported steps, in the order its results were stored.
pub fn steps(t: &Json) -> Vec<u64> {
    t["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["step"].as_u64().unwrap())
        .collect()
}
