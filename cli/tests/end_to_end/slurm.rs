//! The Slurm recipes submitted as written to a real Slurm cluster on this machine (testkit's:
//! slurmctld, slurmd, munged, as root): `examples/slurm/workers.sbatch`'s job array of
//! sixteen workers runs the example sweep to its end; `examples/slurm/gang.sbatch` on two
//! nodes (two slurmd on this machine) runs trials that span both.

use std::path::Path;
use std::time::Duration;

use tune_testkit::slurm::{node, SlurmCluster};

use crate::common::*;
use crate::workers::{finish_ok, spawn};

/// The repository's root, where the recipes are.
fn repository() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `sbatch ARGS` from `dir` (a recipe's path in ARGS is the repository's), with the sweep's
/// database as `TUNE_STORE` and the tested `tune` first on the PATH; the job's id.
fn submit(cluster: &SlurmCluster, args: &[&str], dir: &Path, url: &str) -> String {
    let tune_dir = Path::new(env!("CARGO_BIN_EXE_tune")).parent().unwrap();
    let path = format!(
        "{}:{}",
        tune_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let args = args.iter().map(|a| match a.starts_with("examples/") {
        true => repository().join(a).into_os_string(),
        false => a.into(),
    });
    let submitted = run_ok(
        cluster
            .command("sbatch")
            .args(args)
            .current_dir(dir)
            .env("TUNE_STORE", url)
            .env("PATH", &path),
    );
    let said = String::from_utf8_lossy(&submitted.stdout);
    said.trim()
        .strip_prefix("Submitted batch job ")
        .unwrap_or_else(|| panic!("sbatch said: {said}"))
        .to_string()
}

#[test]
fn the_slurm_recipe_runs_a_sweep_on_its_job_arrays_workers() {
    let cluster = SlurmCluster::start();
    let url = tune_testkit::pg_server::fresh_database();
    let tmp = tempfile::tempdir().unwrap();
    let root = repository();
    // As the recipe says: the coordinator on the login node, then the array.
    let mut coordinator = tune();
    coordinator
        .args(["run"])
        .arg(root.join("examples/quadratic/space.toml"))
        .args(["--slots", "0", "--no-tui", "--dir"])
        .arg(tmp.path().join("coordinator"))
        .env("TUNE_STORE", &url);
    let coordinator = spawn(coordinator);
    let job = submit(
        &cluster,
        &["--export=ALL", "examples/slurm/workers.sbatch", "quadratic"],
        tmp.path(),
        &url,
    );
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

/// `examples/slurm/gang.sbatch` as written, on a job of two nodes (two slurmd here): Slurm
/// starts one worker per node (srun), and they run each 2-node trial of the sweep together,
/// node 0 on one Slurm node and node 1 on the other, meeting at node 0's host name.
#[test]
fn the_slurm_gang_recipe_runs_each_trial_on_two_nodes_of_one_job() {
    let cluster = SlurmCluster::with_nodes(2);
    let url = tune_testkit::pg_server::fresh_database();
    let tmp = tempfile::tempdir().unwrap();
    let spec = crate::gangs::gang_spec(tmp.path(), "samples = 3", 2, &["3"], "");
    let coordinator = spawn(crate::workers::coordinator(
        &spec,
        &url,
        &tmp.path().join("coordinator"),
    ));
    let job = submit(
        &cluster,
        &[
            "--export=ALL",
            "--nodes=2",
            "examples/slurm/gang.sbatch",
            "t",
        ],
        tmp.path(),
        &url,
    );
    finish_ok(coordinator, "the coordinator");
    assert!(
        cluster.wait_for_no_jobs(Duration::from_secs(300)),
        "the gang job did not end: {}",
        cluster.logs()
    );
    let log = std::fs::read_to_string(tmp.path().join(format!("tune-gang-{job}.log"))).unwrap();
    let ran: u64 = log
        .lines()
        .filter_map(|l| l.strip_prefix("tune worker: ran "))
        .filter_map(|rest| rest.split(' ').next()?.parse::<u64>().ok())
        .sum();
    // Two workers, each a node of every one of the 3 trials.
    assert_eq!(ran, 6, "{log}");
    let trials = crate::workers::export_in(&url);
    assert_eq!(trials.len(), 3);
    assert!(
        trials.iter().all(|t| t["status"] == "completed"),
        "{trials:?}"
    );
    let records = crate::distributed_trials::rank_records(tmp.path());
    assert_eq!(records.len(), 6, "{records:?}");
    crate::distributed_trials::assert_each_attempt_met(&records, 2);
    for pair in records.chunks(2) {
        let mut placed: Vec<String> = (pair.iter())
            .map(|r| r["slurm_node"].as_str().unwrap_or("none").to_string())
            .collect();
        placed.sort();
        assert_eq!(placed, [node(1), node(2)], "{pair:?}");
    }
    crate::distributed_trials::assert_nothing_left(tmp.path());
}
