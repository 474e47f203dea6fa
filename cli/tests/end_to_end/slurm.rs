//! The Slurm recipe (`examples/slurm/workers.sbatch`) submitted as written to a real Slurm
//! cluster on this machine (testkit's: slurmctld, one slurmd, munged, as root): its job
//! array's sixteen workers run the example sweep to its end.

use std::path::Path;
use std::time::Duration;

use tune_testkit::slurm::SlurmCluster;

use crate::common::*;
use crate::workers::{finish_ok, spawn};

#[test]
fn the_slurm_recipe_runs_a_sweep_on_its_job_arrays_workers() {
    let cluster = SlurmCluster::start();
    let url = tune_testkit::pg_server::fresh_database();
    let tmp = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let tune_dir = Path::new(env!("CARGO_BIN_EXE_tune")).parent().unwrap();
    let path = format!(
        "{}:{}",
        tune_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // As the recipe says: the coordinator on the login node, then the array.
    let mut coordinator = tune();
    coordinator
        .args(["run"])
        .arg(root.join("examples/quadratic/space.toml"))
        .args(["--slots", "0", "--no-tui", "--dir"])
        .arg(tmp.path().join("coordinator"))
        .env("TUNE_STORE", &url);
    let coordinator = spawn(coordinator);
    let submitted = run_ok(
        cluster
            .command("sbatch")
            .args(["--export=ALL"])
            .arg(root.join("examples/slurm/workers.sbatch"))
            .arg("quadratic")
            .current_dir(tmp.path())
            .env("TUNE_STORE", &url)
            .env("PATH", &path),
    );
    let said = String::from_utf8_lossy(&submitted.stdout);
    let job = said
        .trim()
        .strip_prefix("Submitted batch job ")
        .unwrap_or_else(|| panic!("sbatch said: {said}"))
        .to_string();
    finish_ok(coordinator, "the coordinator");
    // Each array task's worker exits once the sweep is finished.
    assert!(
        cluster.wait_for_no_jobs(Duration::from_secs(300)),
        "the job array did not end: {}",
        cluster.logs()
    );
    let mut ran = 0;
    for task in 0..16 {
        let log = tmp.path().join(format!("tune-worker-{job}_{task}.log"));
        let text = std::fs::read_to_string(&log)
            .unwrap_or_else(|e| panic!("{}: {e}\n{}", log.display(), cluster.logs()));
        let attempts = text
            .lines()
            .find_map(|l| l.strip_prefix("tune worker: ran "))
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("task {task} did not end as a worker does: {text}"));
        ran += attempts;
    }
    // The coordinator ran none (`--slots 0`): the array's workers ran every trial, once.
    assert_eq!(ran, 40);
    let out = run_ok(tune().args(["export", "quadratic", "--store", &url, "--format", "json"]));
    let trials: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(trials.len(), 40);
    assert!(
        trials.iter().all(|t| t["status"] == "completed"),
        "{trials:?}"
    );
}
