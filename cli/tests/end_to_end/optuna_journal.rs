//! `tune export --format optuna-journal`, read back by Optuna 5 itself.

use crate::common;

use std::process::Command;

use common::*;
use serde_json::Value as Json;

/// Optuna's view of the journal at `log`: each trial's state, params, value and intermediate
/// values, and the best value.
const READ_BACK: &str = r#"
import json, sys, optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
study = optuna.load_study(study_name="t", storage=JournalStorage(JournalFileBackend(sys.argv[1])))
print(json.dumps({
    "direction": study.direction.name,
    "best": study.best_value,
    "trials": [{"state": t.state.name, "params": t.params, "value": t.value,
                "steps": {str(k): v for k, v in t.intermediate_values.items()},
                "tune_id": t.user_attrs["tune_id"]} for t in study.trials],
}))
"#;

/// The sweep in `dir` exported as a journal (into `tmp`) and read by Optuna's `script`, which
/// prints JSON.
fn optuna_reads_export(dir: &std::path::Path, tmp: &std::path::Path, script: &str) -> Json {
    read_export_with(optuna_python(), dir, tmp, script)
}

/// The sweep in `dir` exported as a journal (into `tmp`) and read by `script` under `python`.
fn read_export_with(
    python: std::path::PathBuf,
    dir: &std::path::Path,
    tmp: &std::path::Path,
    script: &str,
) -> Json {
    let out = run_ok(
        tune()
            .arg("export")
            .arg(dir)
            .args(["--format", "optuna-journal"]),
    );
    let log = tmp.join("sweep.log");
    std::fs::write(&log, &out.stdout).unwrap();
    let read = Command::new(python)
        .args(["-c", script])
        .arg(&log)
        .output()
        .unwrap();
    assert!(read.status.success(), "{}", stderr(&read));
    serde_json::from_slice(&read.stdout).unwrap()
}

#[test]
fn optuna_reads_the_exported_journal_as_the_sweep_was() {
    let tmp = tempfile::tempdir().unwrap();
    // ASHA stops some trials, x > 0 crashes others; a choice, a log int and a stepped float.
    let spec = write_spec(
        tmp.path(),
        "samples = 12\nseed = 2\n[scheduler]\nkind = \"asha\"\nmax_t = 9\ngrace_period = 1\nreduction_factor = 3\n[stop]\nmax_failed_trials = 0\n[resources]\ncpu_slots = 1",
        &["--steps", "9", "--behaviour", "crash"],
        "x = { uniform = [-3.0, 3.0] }\nk = { choice = [\"a\", \"b\"] }\nn = { int = [1, 64], log = true }\nq = { quniform = [0.0, 1.0, 0.25] }",
    );
    let dir = tmp.path().join("sweep");
    tune_run(&spec, &dir).output().unwrap();
    let trials = export_json(&dir);
    let optuna = optuna_reads_export(&dir, tmp.path(), READ_BACK);
    assert_eq!(optuna["direction"], "MINIMIZE");
    let seen = optuna["trials"].as_array().unwrap();
    assert_eq!(seen.len(), trials.len());
    let mut states = std::collections::BTreeMap::new();
    for (t, o) in trials.iter().zip(seen) {
        assert_eq!(o["tune_id"], t["id"]);
        let state = match t["status"].as_str().unwrap() {
            "completed" => "COMPLETE",
            "stopped" => "PRUNED",
            "failed" => "FAIL",
            other => panic!("trial {} is {other}", t["id"]),
        };
        assert_eq!(o["state"], state, "trial {}", t["id"]);
        *states.entry(state).or_insert(0) += 1;
        assert_eq!(o["params"], t["params"], "trial {}", t["id"]);
        if state != "FAIL" {
            assert_eq!(o["value"], t["value"], "trial {}", t["id"]);
        }
        for r in t["results"].as_array().unwrap() {
            assert_eq!(
                o["steps"][r["step"].to_string()],
                r["loss"],
                "trial {}",
                t["id"]
            );
        }
    }
    assert!(
        states.len() == 3,
        "completed, stopped and failed trials all appear: {states:?}"
    );
    let best = trials
        .iter()
        .filter(|t| t["status"] == "completed")
        .map(|t| t["value"].as_f64().unwrap())
        .fold(f64::INFINITY, f64::min);
    assert_eq!(optuna["best"].as_f64(), Some(best));
}

/// What optuna-dashboard's server answers for the journal `sys.argv[1]`: its studies and the
/// first study's trials (state, params, intermediate values).
const ASK_DASHBOARD: &str = r#"
import json, socket, subprocess, sys, time, urllib.request
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
# Its console script, run by this Python (the script's own first line names the folder the
# virtual environment was made in, before the tests moved it into place).
command = [sys.executable, "-c", "import sys; from optuna_dashboard._cli import main; sys.exit(main())"]
server = subprocess.Popen(command + [sys.argv[1], "--host", "127.0.0.1",
                           "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
base = f"http://127.0.0.1:{port}"
try:
    while True:
        if server.poll() is not None:
            sys.exit("optuna-dashboard exited: " + server.stderr.read().decode())
        try:
            studies = json.load(urllib.request.urlopen(base + "/api/studies", timeout=30))
            break
        except OSError:
            time.sleep(0.1)
    study = json.load(urllib.request.urlopen(base + "/api/studies/0?after=0", timeout=60))
    print(json.dumps({
        "studies": [s["study_name"] for s in studies["study_summaries"]],
        "trials": [{"state": t["state"],
                    "params": {p["name"]: p["param_internal_value"] for p in t["params"]},
                    "steps": len(t["intermediate_values"])} for t in study["trials"]],
    }))
finally:
    server.terminate(); server.wait()
"#;

#[test]
fn optuna_dashboard_serves_the_exported_journal() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(
        tmp.path(),
        "samples = 6\nseed = 2\n[scheduler]\nkind = \"asha\"\nmax_t = 9\ngrace_period = 1\nreduction_factor = 3\n[stop]\nmax_failed_trials = 0\n[resources]\ncpu_slots = 1",
        &["--steps", "9", "--behaviour", "crash"],
        "x = { uniform = [-3.0, 3.0] }\nn = { int = [1, 64], log = true }",
    );
    let dir = tmp.path().join("sweep");
    tune_run(&spec, &dir).output().unwrap();
    let trials = export_json(&dir);
    let served = read_export_with(optuna_dashboard_python(), &dir, tmp.path(), ASK_DASHBOARD);
    assert_eq!(served["studies"], serde_json::json!(["t"]));
    let seen = served["trials"].as_array().unwrap();
    assert_eq!(seen.len(), trials.len());
    for (t, o) in trials.iter().zip(seen) {
        let state = match t["status"].as_str().unwrap() {
            "completed" => "Complete",
            "stopped" => "Pruned",
            "failed" => "Fail",
            other => panic!("trial {} is {other}", t["id"]),
        };
        assert_eq!(o["state"], state, "trial {}", t["id"]);
        for (k, v) in t["params"].as_object().unwrap() {
            assert_eq!(o["params"][k].as_f64(), v.as_f64(), "trial {} {k}", t["id"]);
        }
        assert_eq!(
            o["steps"],
            serde_json::json!(t["results"].as_array().unwrap().len())
        );
    }
}

/// Optuna's PED-ANOVA importances of the study in the journal at `log`, as optuna-dashboard
/// shows them (normalised).
const IMPORTANCES: &str = r#"
import json, sys, warnings, optuna
from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
warnings.simplefilter("ignore")
optuna.logging.set_verbosity(optuna.logging.ERROR)
study = optuna.load_study(study_name="t", storage=JournalStorage(JournalFileBackend(sys.argv[1])))
print(json.dumps(get_param_importances(study, evaluator=PedAnovaImportanceEvaluator())))
"#;

/// A sweep's worth of trials over every kind of domain, a conditional one among them, with a
/// value that depends on some parameters much more than on others; some stopped and failed
/// (which importances leave out, as Optuna leaves out pruned and failed trials).
fn mixed_trials() -> Vec<tune::Trial> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    (0..90u64)
        .map(|id| {
            let mut params = tune::Params::default();
            let x: f64 = rng.random_range(-3.0..3.0);
            let lr: f64 = 10f64.powf(rng.random_range(-4.0..-1.0));
            let n: i64 = 2f64.powf(rng.random_range(0.0..6.0)).round() as i64;
            let q = rng.random_range(0..5) as f64 * 0.25;
            let m: i64 = rng.random_range(0..=10);
            let k = ["a", "b", "c"][rng.random_range(0..3)];
            params.insert("x", tune::Value::Float(x));
            params.insert("lr", tune::Value::Float(lr));
            params.insert("n", tune::Value::Int(n));
            params.insert("q", tune::Value::Float(q));
            params.insert("m", tune::Value::Int(m));
            params.insert("k", tune::Value::Str(k.into()));
            let mut loss = (x - 1.0).powi(2) + 0.3 * (lr.log10() + 2.5).powi(2) + 0.01 * m as f64;
            if k == "a" {
                let momentum: f64 = rng.random_range(0.5..0.99);
                params.insert("momentum", tune::Value::Float(momentum));
                loss += (momentum - 0.9).abs();
            }
            if k == "c" {
                loss += 0.5;
            }
            let mut t = tune::Trial::new(id, params);
            t.status = match id % 10 {
                3 => tune::Status::Stopped,
                7 => tune::Status::Failed,
                _ => tune::Status::Completed,
            };
            t.started_at = Some(1_700_000_000_000 + id * 1000);
            t.finished_at = t.started_at.map(|s| s + 500);
            if t.status != tune::Status::Failed {
                t.results.push(tune::TrialResult {
                    step: 1,
                    seq: id,
                    attempt: 1,
                    metrics: [("loss".to_string(), loss)].into(),
                });
            }
            t
        })
        .collect()
}

#[test]
fn parameter_importances_equal_optunas_ped_anova() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = tune::ExperimentSpec::from_toml(
        r#"
        name = "t"
        metric = "loss"
        samples = 90
        [space]
        x = { uniform = [-3.0, 3.0] }
        lr = { loguniform = [1e-4, 1e-1] }
        n = { int = [1, 64], log = true }
        q = { quniform = [0.0, 1.0, 0.25] }
        m = { int = [0, 10] }
        k = { choice = ["a", "b", "c"] }
        momentum = { uniform = [0.5, 0.99], when = { k = "a" } }
        "#,
        std::path::Path::new("space.toml"),
    )
    .unwrap();
    let trials = mixed_trials();
    for mode in [tune::Mode::Min, tune::Mode::Max] {
        let mut journal = Vec::new();
        let loss = tune::Goal {
            metric: "loss".into(),
            mode,
        };
        tune::export::write_optuna_journal(
            &mut journal,
            "t",
            &trials,
            &spec.space,
            &[loss],
            &Default::default(),
        )
        .unwrap();
        let log = tmp.path().join(format!("{mode:?}.log"));
        std::fs::write(&log, journal).unwrap();
        let read = Command::new(optuna_python())
            .args(["-c", IMPORTANCES])
            .arg(&log)
            .output()
            .unwrap();
        assert!(read.status.success(), "{}", stderr(&read));
        let optuna: std::collections::BTreeMap<String, f64> =
            serde_json::from_slice(&read.stdout).unwrap();
        let ours: std::collections::BTreeMap<String, f64> =
            tune_cli::plot::param_importances(&trials, &spec.space, "loss", mode)
                .into_iter()
                .collect();
        assert_eq!(
            ours.keys().collect::<Vec<_>>(),
            optuna.keys().collect::<Vec<_>>()
        );
        eprintln!("{mode:?}: tune {ours:?}\nOptuna {optuna:?}");
        for (name, theirs) in &optuna {
            let mine = ours[name];
            assert!(
                (mine - theirs).abs() <= 1e-9 + 1e-6 * theirs.abs(),
                "{mode:?} {name}: tune {mine}, Optuna {theirs}\ntune {ours:?}\nOptuna {optuna:?}"
            );
        }
        // The value depends on x most when minimised (hand-made so).
        if mode == tune::Mode::Min {
            let top = ours.iter().max_by(|a, b| a.1.total_cmp(b.1)).unwrap();
            assert_eq!(top.0, "x", "{ours:?}");
        }
    }
}

/// Optuna's best trials (its Pareto front, feasible trials only) of the journal at `log`, by
/// tune id, and its directions.
const BEST_TRIALS: &str = r#"
import json, sys, optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
study = optuna.load_study(study_name="t", storage=JournalStorage(JournalFileBackend(sys.argv[1])))
print(json.dumps({
    "directions": [d.name for d in study.directions],
    "best": sorted(t.user_attrs["tune_id"] for t in study.best_trials),
    "values": {str(t.user_attrs["tune_id"]): t.values for t in study.trials},
}))
"#;

#[test]
fn optuna_finds_the_same_pareto_front_in_a_constrained_two_objective_export() {
    let tmp = tempfile::tempdir().unwrap();
    // f1 = x, f2 = (x - 1)^2 + y (maximised: -f2 minimised is the same front the other way
    // round), constrained to y <= 0.5: trials above it are off the front, however good.
    let script = tmp.path().join("pair.py");
    std::fs::write(
        &script,
        "import json, sys\n\
         x, y = float(sys.argv[1]), float(sys.argv[2])\n\
         print(json.dumps({'step': 1, 'f1': x, 'f2': -((x - 1) ** 2) - y, 'y': y}))\n",
    )
    .unwrap();
    let spec = tmp.path().join("space.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"t\"\nmetric = [\"f1\", \"f2\"]\nmode = [\"min\", \"max\"]\nsamples = 24\nseed = 5\n\
             [constraints]\ny = {{ max = 0.5 }}\n[resources]\ncpu_slots = 1\n\
             [objective]\ncommand = [\"python3\", {:?}, \"{{x}}\", \"{{y}}\"]\n\
             [space]\nx = {{ uniform = [0.0, 1.0] }}\ny = {{ uniform = [0.0, 1.0] }}\n",
            script.display().to_string()
        ),
    )
    .unwrap();
    let dir = tmp.path().join("sweep");
    run_ok(&mut tune_run(&spec, &dir));
    let trials = export_json(&dir);
    let ours: Vec<u64> = trials
        .iter()
        .filter(|t| t["pareto_optimal"] == true)
        .map(|t| t["id"].as_u64().unwrap())
        .collect();
    assert!(ours.len() >= 2, "{ours:?}");
    assert!(trials.iter().any(|t| t["feasible"] == false));
    let optuna = optuna_reads_export(&dir, tmp.path(), BEST_TRIALS);
    assert_eq!(
        optuna["directions"],
        serde_json::json!(["MINIMIZE", "MAXIMIZE"])
    );
    let theirs: Vec<u64> = optuna["best"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(ours, theirs);
    for t in &trials {
        assert_eq!(
            optuna["values"][t["id"].to_string()],
            serde_json::json!([t["values"]["f1"], t["values"]["f2"]])
        );
    }
}
