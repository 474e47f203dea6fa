//! Trials of several processes (`launcher = "tune"`, `processes_per_node`): started together
//! with their rank environment, meeting on a port of their own, read from rank 0 only, failed
//! by any rank, and ended together, leaving no process behind.

use std::path::Path;

use serde_json::Value as Json;

use crate::common::*;

/// A sweep of cli/tests/fixtures/ranks.py: `resources` and `scheduler` are TOML lines, `argv`
/// what follows the fixture's records folder and `{x}`.
pub(crate) fn ranks_spec(
    tmp: &Path,
    top: &str,
    resources: &str,
    scheduler: &str,
    argv: &[&str],
) -> std::path::PathBuf {
    let records = tmp.join("records");
    let mut command = vec![
        "python3".to_string(),
        fixture("ranks.py").display().to_string(),
        records.display().to_string(),
        "{x}".into(),
    ];
    command.extend(argv.iter().map(|a| a.to_string()));
    let command: Vec<String> = command.iter().map(|a| format!("{a:?}")).collect();
    let text = format!(
        "name = \"ranks\"\nmetric = \"loss\"\nseed = 3\n{top}\n\n[objective]\nlauncher = \"tune\"\n\
         command = [{}]\n\n[resources]\n{resources}\n\n[scheduler]\n{scheduler}\n\n[space]\n\
         x = {{ uniform = [0.0, 1.0] }}\n",
        command.join(", ")
    );
    let path = tmp.join("space.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The records the fixture's processes wrote, one per process of each attempt.
pub(crate) fn rank_records(tmp: &Path) -> Vec<Json> {
    let mut all: Vec<Json> = std::fs::read_dir(tmp.join("records/ranks"))
        .unwrap()
        .map(|e| serde_json::from_slice(&std::fs::read(e.unwrap().path()).unwrap()).unwrap())
        .collect();
    all.sort_by_key(|r| {
        (
            r["trial"].as_u64(),
            r["attempt"].as_u64(),
            r["rank"].as_u64(),
        )
    });
    all
}

/// Processes alive whose command line names `marker` (the fixture's records folder).
pub(crate) fn processes_naming(marker: &Path) -> Vec<String> {
    let marker = marker.display().to_string();
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|p| {
            p.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|p| p.file_name().to_string_lossy() != me)
        .filter_map(|p| {
            let cmdline = std::fs::read(p.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline
                .contains(&marker)
                .then(|| format!("{}: {cmdline}", p.file_name().to_string_lossy()))
        })
        .collect()
}

/// Every attempt's `world` processes (the records sorted by trial, attempt and rank) met in
/// one world on one port.
pub(crate) fn assert_each_attempt_met(records: &[Json], world: usize) {
    assert_eq!(records.len() % world, 0, "{records:?}");
    for attempt in records.chunks(world) {
        for r in attempt {
            assert_eq!(r["world"].as_u64(), Some(world as u64), "{attempt:?}");
            assert_eq!(
                (&r["trial"], &r["attempt"], &r["port"]),
                (
                    &attempt[0]["trial"],
                    &attempt[0]["attempt"],
                    &attempt[0]["port"]
                ),
                "{attempt:?}"
            );
        }
    }
}

/// Nothing of the sweep's processes, nor what they started, is left: a `/proc` scan for the
/// fixture's records folder on their command lines.
pub(crate) fn assert_nothing_left(tmp: &Path) {
    assert_eq!(processes_naming(&tmp.join("records")), Vec::<String>::new());
}

#[test]
fn trials_of_two_processes_meet_on_ports_of_their_own_and_fail_as_one() {
    let tmp = tempfile::tempdir().unwrap();
    // Two 2-process trials at once on 4 CPU slots; trial 1's first attempt loses rank 1.
    let spec = ranks_spec(
        tmp.path(),
        "samples = 6\nmax_failures = 1",
        "cpu_slots = 4\nprocesses_per_node = 2",
        "kind = \"fifo\"",
        &["5", "1", "2"],
    );
    let dir = tmp.path().join("run");
    let out = run_ok(tune_run(&spec, &dir).arg("--no-tui"));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("rank 1 exited with code 1"), "{said}");
    assert!(
        !tmp.path().join("records/collision").exists(),
        "two running trials held one port"
    );

    let trials = export_json(&dir);
    assert_eq!(trials.len(), 6);
    for t in &trials {
        assert_eq!(t["status"], "completed", "{t}");
        let x = t["params"]["x"].as_f64().unwrap();
        let results = t["results"].as_array().unwrap();
        // Rank 0's reports, every step; the others' look-alike line is never one.
        let steps: Vec<u64> = results
            .iter()
            .map(|r| r["step"].as_u64().unwrap())
            .collect();
        assert_eq!(steps, [1, 2, 3, 4, 5], "{t}");
        for r in results {
            let step = r["step"].as_f64().unwrap();
            assert_eq!(r["loss"].as_f64(), Some(x + 1.0 / step), "{t}");
        }
    }
    assert_eq!(trials[1]["attempts"], 2, "{}", trials[1]);

    let records = rank_records(tmp.path());
    // Every attempt started both ranks, as torchrun would set them.
    assert_eq!(records.len(), 2 * 7, "{records:?}");
    assert_each_attempt_met(&records, 2);
    for pair in records.chunks(2) {
        let ranks = pair
            .iter()
            .map(|r| (r["rank"].as_u64(), r["local_rank"].as_u64()));
        assert_eq!(
            ranks.collect::<Vec<_>>(),
            [(Some(0), Some(0)), (Some(1), Some(1))]
        );
        assert!(pair.iter().all(|r| r["master"] == "127.0.0.1"), "{pair:?}");
    }
    let status = run_ok(tune().arg("status").arg(&dir));
    assert!(
        String::from_utf8_lossy(&status.stdout)
            .contains("each trial: 2 processes per machine (started by tune), 2 CPU slots"),
        "{}",
        String::from_utf8_lossy(&status.stdout)
    );
    // The other ranks' output is in the trial's log, marked with its rank.
    let log = std::fs::read_to_string(dir.join("logs/1.log")).unwrap();
    assert!(
        log.contains("[rank 1] {\"step\": 99, \"loss\": -1000.0}"),
        "{log}"
    );
    assert!(log.contains("[rank 1] rank 1 joined"), "{log}");
    assert!(log.contains("rank 0 met 1 others"), "{log}");
    assert_nothing_left(tmp.path());
}

#[test]
fn a_stopped_trial_leaves_no_process_of_any_rank() {
    let tmp = tempfile::tempdir().unwrap();
    // One trial at a time, so ASHA's decisions do not hang on the order reports arrive in.
    let spec = ranks_spec(
        tmp.path(),
        "samples = 6",
        "cpu_slots = 3\nprocesses_per_node = 3",
        "kind = \"asha\"\nmax_t = 8\ngrace_period = 1\nreduction_factor = 2",
        &["8"],
    );
    let dir = tmp.path().join("run");
    run_ok(tune_run(&spec, &dir).arg("--no-tui"));
    let trials = export_json(&dir);
    let stopped = trials.iter().filter(|t| t["status"] == "stopped").count();
    assert!(stopped >= 2, "ASHA stopped {stopped} of 6: {trials:?}");
    // Each rank left a grandchild in its process group: none of them, nor any rank, is left.
    assert_eq!(rank_records(tmp.path()).len(), 6 * 3);
    assert_nothing_left(tmp.path());
}

/// Debian's python3, where `.ci/run` installs python3-torch (1.13, CPU only).
pub(crate) const TORCH_PYTHON: &str = "/usr/bin/python3";

#[test]
fn a_pytorch_ddp_sweep_runs_two_trials_of_two_ranks_at_once_under_tpe_and_asha() {
    ddp_sweep(false);
}

/// The same sweep with the real `torchrun` (Debian's, torch 1.13) as the launcher, its
/// command line as in docs/guide/distributed-trials.md: tune starts one torchrun per trial,
/// which starts the ranks.
#[test]
fn a_pytorch_ddp_sweep_launched_by_torchrun_runs_two_trials_at_once_under_tpe_and_asha() {
    ddp_sweep(true);
}

/// [`TORCH_PYTHON`] can run the DDP fixture (gloo).
pub(crate) fn assert_torch() {
    let has_torch = std::process::Command::new(TORCH_PYTHON)
        .args([
            "-c",
            "import torch.distributed as d; assert d.is_gloo_available()",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        has_torch,
        "{TORCH_PYTHON} cannot import torch with gloo: the DDP test needs Debian's \
         python3-torch (`.ci/run` installs it: apt-get install python3-torch)"
    );
}

/// Torch's launcher as a trial's command, before the script and its arguments: the
/// docs' torchrun line (static rendezvous at tune's endpoint, so that node ranks are tune's).
/// Debian's torch 1.13 parses `--redirects` and `--tee` into flags that Python 3.11 cannot
/// list when they are 0 (its default), so they are given here: rank 0's stderr and the other
/// rank's stdout go to torchrun's log folder (and stderr to torchrun's too), which also keeps
/// that rank's report-like lines off the trial's stdout.
pub(crate) const TORCHRUN: [&str; 9] = [
    "torchrun",
    "--redirects",
    "0:2,1:1",
    "--tee",
    "2",
    "--nproc_per_node={nproc_per_node}",
    "--nnodes={nnodes}",
    "--node_rank={node_rank}",
    "--rdzv_endpoint={rdzv_endpoint}",
];

/// The `[objective]` of a ddp.py sweep writing its records under `records`, with `args`
/// after its learning rate: ranks started by tune (`launcher = "tune"`) or by `torchrun`.
pub(crate) fn ddp_objective(records: &Path, args: &[&str], torchrun: bool) -> String {
    let script = [
        fixture("ddp.py").display().to_string(),
        records.display().to_string(),
    ]
    .into_iter()
    .chain(std::iter::once("{lr}".to_string()))
    .chain(args.iter().map(|a| a.to_string()));
    let (launcher, argv): (&str, Vec<String>) = match torchrun {
        false => (
            "launcher = \"tune\"\n",
            std::iter::once(TORCH_PYTHON.to_string())
                .chain(script)
                .collect(),
        ),
        true => (
            "",
            TORCHRUN
                .iter()
                .map(|a| a.to_string())
                .chain(script)
                .collect(),
        ),
    };
    let argv: Vec<String> = argv.iter().map(|a| format!("{a:?}")).collect();
    format!(
        "[objective]\n{launcher}command = [{}]\nenv = {{ OMP_NUM_THREADS = \"1\" }}\n",
        argv.join(", ")
    )
}

/// TPE + ASHA over ddp.py, two 2-rank trials at once on 4 CPU slots, trial 1's first attempt
/// losing rank 1: started by tune (`launcher = "tune"`) or by `torchrun`.
fn ddp_sweep(torchrun: bool) {
    assert_torch();
    let tmp = tempfile::tempdir().unwrap();
    let records_dir = tmp.path().join("records");
    let objective = ddp_objective(&records_dir, &["6", "1"], torchrun);
    // The first rung at epoch 2: every trial reaches its first epoch's end, so trial 1's
    // first attempt always fails (its rank 1 is killed there), never is stopped first.
    let text = format!(
        "name = \"ddp\"\nmetric = \"val_loss\"\nsamples = 6\nseed = 5\nmax_failures = 1\n\n\
         [search]\nalgorithm = \"tpe\"\n\n\
         [scheduler]\nkind = \"asha\"\nmax_t = 6\ngrace_period = 2\nreduction_factor = 2\n\n\
         [resources]\ncpu_slots = 4\nprocesses_per_node = 2\n\n\
         {objective}\n[space]\nlr = {{ loguniform = [0.001, 0.3] }}\n"
    );
    let spec = tmp.path().join("space.toml");
    std::fs::write(&spec, text).unwrap();
    let dir = tmp.path().join("run");
    let out = run_ok(tune_run(&spec, &dir).arg("--no-tui"));
    let said = String::from_utf8_lossy(&out.stderr);
    let failed = match torchrun {
        false => "trial 1: attempt 1 failed (rank 1 killed by signal 9",
        // torchrun ends the other rank and exits 1, saying which rank failed.
        true => "trial 1: attempt 1 failed (exited with code 1",
    };
    assert!(said.contains(failed), "{said}");
    assert!(
        !records_dir.join("collision").exists(),
        "two running trials held one port"
    );

    let trials = export_json(&dir);
    assert_eq!(trials.len(), 6);
    assert_eq!(trials[1]["attempts"], 2, "{}", trials[1]);
    for t in &trials {
        assert!(
            t["status"] == "completed" || t["status"] == "stopped",
            "{t}"
        );
        // Rank 0's validation losses alone: the other rank's -1.0 is never a report.
        for r in t["results"].as_array().unwrap() {
            assert!(r["val_loss"].as_f64().unwrap() > 0.0, "{t}");
        }
    }
    // Which trials ASHA stops hangs on the order two trials at a time report in (and TPE's
    // suggestions on the history then): where it stopped one, it was at a rung.
    for t in trials.iter().filter(|t| t["status"] == "stopped") {
        let last = t["results"].as_array().unwrap().last().unwrap()["step"].as_u64();
        assert!(matches!(last, Some(2 | 4)), "{t}");
    }
    // Both ranks of every attempt met in one world on the attempt's port.
    let records = rank_records(tmp.path());
    assert_eq!(records.len(), 2 * 7, "{records:?}");
    assert_each_attempt_met(&records, 2);
    assert_nothing_left(tmp.path());
}

#[test]
fn tune_killed_leaves_no_process_of_any_rank_nor_what_they_started() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = ranks_spec(
        tmp.path(),
        "samples = 2",
        "cpu_slots = 4\nprocesses_per_node = 2",
        "kind = \"fifo\"",
        &["100"],
    );
    let text = std::fs::read_to_string(&spec).unwrap().replace(
        "\n[resources]",
        "env = { KILL_TUNE_AT = \"3\", KILL_AFTER = \"4\" }\n\n[resources]",
    );
    std::fs::write(&spec, text).unwrap();
    let out = tune_run(&spec, &tmp.path().join("run"))
        .arg("--no-tui")
        .output()
        .unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&out.status),
        Some(9),
        "tune was not killed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Ranks die with tune; the processes they started (each rank's grandchild) die by the
    // keeper tune left, which acts once it sees tune gone: wait for it.
    let records = tmp.path().join("records");
    let started = std::time::Instant::now();
    while !processes_naming(&records).is_empty()
        && started.elapsed() < std::time::Duration::from_secs(60)
    {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(processes_naming(&records), Vec::<String>::new());
    // Both trials had started both ranks, each rank its grandchild.
    assert_eq!(rank_records(tmp.path()).len(), 4);
}

/// A `tune worker` serving the sweep alone places its trials as local slots do (two 2-process
/// trials on its 4 slots); one serving every sweep leaves them alone and says why.
#[test]
fn a_worker_started_for_the_sweep_runs_its_2_process_trials_and_a_shared_one_leaves_them() {
    use crate::workers::{coordinator, finish_ok, spawn, wait_for_experiment, worker};
    let tmp = tempfile::tempdir().unwrap();
    let url = tune_testkit::pg_server::fresh_database();
    let spec = ranks_spec(
        tmp.path(),
        "samples = 4",
        "processes_per_node = 2",
        "kind = \"fifo\"",
        &["3"],
    );
    let text = std::fs::read_to_string(&spec)
        .unwrap()
        .replace("name = \"ranks\"", "name = \"t\"");
    std::fs::write(&spec, text).unwrap();
    let mut coord = spawn(coordinator(&spec, &url, &tmp.path().join("c")));
    wait_for_experiment(&url, &mut coord);
    let mut shared = tune();
    shared
        .args(["worker", &url, "--slots", "4", "--lease", "15", "--dir"])
        .arg(tmp.path().join("shared"));
    let shared = spawn(shared);
    // It meets the sweep before anything of it can end.
    crate::workers::wait_for_shared_worker(&url);
    let alone = spawn(worker(&url, 4, "15", &tmp.path().join("alone")));
    finish_ok(coord, "the coordinator");
    let alone = finish_ok(alone, "the worker serving the sweep");
    assert!(
        stderr(&alone).contains("running up to 2 trials at a time"),
        "{}",
        stderr(&alone)
    );
    // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
    unsafe { libc::kill(shared.id() as i32, libc::SIGTERM) };
    let shared = finish_ok(shared, "the worker serving every sweep");
    let said = stderr(&shared);
    assert!(
        said.contains("trials of \"t\" take 2 CPU slots each") && said.contains("--experiment t"),
        "{said}"
    );
    assert_eq!(crate::workers::attempts_ran(&shared), 0);
    let trials = crate::workers::export_in(&url);
    assert_eq!(trials.len(), 4);
    assert!(
        trials.iter().all(|t| t["status"] == "completed"),
        "{trials:?}"
    );
    let records = rank_records(tmp.path());
    assert_eq!(records.len(), 8);
    assert!(records.iter().all(|r| r["world"] == 2));
}

/// `mpirun` as the launcher (no `launcher`: the command starts the ranks), with Debian's
/// OpenMPI and mpi4py, which `.ci/run` installs: placeholders fill its command line, its
/// ranks see the attempt's port, a rank failing fails the attempt and the retry completes,
/// and stopped trials leave nothing of mpirun, its ranks or what they started.
#[test]
fn an_mpirun_sweep_is_placed_stopped_and_retried_as_one_trial_per_job() {
    let has_mpi = std::process::Command::new(TORCH_PYTHON)
        .args(["-c", "import mpi4py.MPI"])
        .output()
        .is_ok_and(|o| o.status.success())
        && std::process::Command::new("mpirun")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
    assert!(
        has_mpi,
        "mpirun or mpi4py is missing: the mpirun test needs Debian's openmpi-bin and \
         python3-mpi4py (`.ci/run` installs them)"
    );
    let tmp = tempfile::tempdir().unwrap();
    let records_dir = tmp.path().join("records");
    let argv = [
        "mpirun",
        "-np",
        "{world_size}",
        "--oversubscribe",
        TORCH_PYTHON,
        &fixture("mpi_ranks.py").display().to_string(),
        &records_dir.display().to_string(),
        "{x}",
        "6",
        "1",
    ]
    .map(|a| format!("{a:?}"));
    // One trial at a time, so that which trials ASHA stops does not hang on the order of
    // reports. OpenMPI refuses root unless told (CI runs as root).
    let text = format!(
        "name = \"mpi\"\nmetric = \"loss\"\nsamples = 5\nseed = 3\nmax_failures = 1\n\n\
         [scheduler]\nkind = \"asha\"\nmax_t = 6\ngrace_period = 1\nreduction_factor = 2\n\n\
         [resources]\ncpu_slots = 2\nprocesses_per_node = 2\n\n\
         [objective]\ncommand = [{}]\nenv = {{ OMPI_ALLOW_RUN_AS_ROOT = \"1\", \
         OMPI_ALLOW_RUN_AS_ROOT_CONFIRM = \"1\", OMPI_MCA_btl = \"self,vader,tcp\" }}\n\n\
         [space]\nx = {{ uniform = [0.0, 1.0] }}\n",
        argv.join(", ")
    );
    let spec = tmp.path().join("space.toml");
    std::fs::write(&spec, text).unwrap();
    let dir = tmp.path().join("run");
    let out = run_ok(tune_run(&spec, &dir).arg("--no-tui"));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("trial 1: attempt 1 failed (exited with code"),
        "{said}"
    );

    let trials = export_json(&dir);
    assert_eq!(trials.len(), 5);
    assert_eq!(trials[1]["attempts"], 2, "{}", trials[1]);
    assert!(
        trials.iter().any(|t| t["status"] == "stopped"),
        "{trials:?}"
    );
    for t in &trials {
        assert!(
            t["status"] == "completed" || t["status"] == "stopped",
            "{t}"
        );
        let x = t["params"]["x"].as_f64().unwrap();
        for r in t["results"].as_array().unwrap() {
            let step = r["step"].as_f64().unwrap();
            assert_eq!(r["loss"].as_f64(), Some(x + 1.0 / step), "{t}");
        }
    }
    let records = rank_records(tmp.path());
    assert_eq!(records.len(), 2 * 6, "{records:?}");
    assert_each_attempt_met(&records, 2);
    assert_nothing_left(tmp.path());
}
