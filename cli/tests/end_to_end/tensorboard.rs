//! `[tracking] tensorboard` and `tune export --format tensorboard`, read back by TensorBoard
//! 2.21 itself: its event reader for every scalar and HParams summary, and its server for
//! what the HParams tab shows.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::{json, Value as Json};

/// Every run folder under `sys.argv[1]` as TensorBoard's EventAccumulator reads it: scalars
/// by tag as [step, value] in file order (nothing purged or sampled away), the session
/// start's hparams and group, and the session end's status.
const READ_RUNS: &str = r#"
import json, os, sys
from google.protobuf import json_format
from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.plugins.hparams import plugin_data_pb2
root, runs = sys.argv[1], {}
for run in sorted(os.listdir(root)):
    if not os.path.isdir(os.path.join(root, run)):
        continue
    acc = ea.EventAccumulator(os.path.join(root, run), size_guidance={ea.SCALARS: 0, ea.TENSORS: 0},
                              purge_orphaned_data=False)
    acc.Reload()
    hp = {tag: json_format.MessageToDict(plugin_data_pb2.HParamsPluginData.FromString(c))
          for tag, c in acc.PluginTagToContent("hparams").items()}
    start = hp["_hparams_/session_start_info"]["sessionStartInfo"]
    end = hp.get("_hparams_/session_end_info", {}).get("sessionEndInfo", {})
    runs[run] = {
        "scalars": {tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]},
        "hparams": start["hparams"],
        "group": start["groupName"],
        "status": end.get("status"),
    }
print(json.dumps(runs))
"#;

/// What TensorBoard's server (the default loader) answers the HParams tab for the folder
/// `sys.argv[1]`: the experiment it derives and every session group.
const ASK_SERVER: &str = r#"
import json, socket, subprocess, sys, time, urllib.request
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
tb = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", sys.argv[1],
                       "--host", "127.0.0.1", "--port", str(port)],
                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
base = f"http://127.0.0.1:{port}"
def post(path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "X-XSRF-Protected": "1"})
    return json.load(urllib.request.urlopen(req, timeout=60))
try:
    want = int(sys.argv[2])
    for _ in range(1200):
        if tb.poll() is not None:
            sys.exit("tensorboard exited: " + tb.stderr.read().decode())
        try:
            exp = post("/data/plugin/hparams/experiment", {"experimentName": ""})
            if len(exp.get("metricInfos", [])) and want == len(post("/data/plugin/hparams/session_groups", {
                    "experimentName": "", "allowedStatuses": ["STATUS_SUCCESS", "STATUS_FAILURE"],
                    "colParams": [], "startIndex": 0, "sliceSize": 100000}).get("sessionGroups", [])):
                break
        except OSError:
            pass
        time.sleep(0.1)
    cols = [{"hparam": h["name"]} for h in exp["hparamInfos"]] + [{"metric": m["name"]} for m in exp["metricInfos"]]
    groups = post("/data/plugin/hparams/session_groups", {
        "experimentName": "", "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"],
        "colParams": cols, "startIndex": 0, "sliceSize": 100000})
    print(json.dumps({"experiment": exp, "groups": groups["sessionGroups"]}))
finally:
    tb.terminate(); tb.wait()
"#;

fn python_json(script: &str, args: &[&str]) -> Json {
    let out = Command::new(tensorboard_python())
        .args(["-c", script])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn read_runs(folder: &Path) -> Json {
    python_json(READ_RUNS, &[folder.to_str().unwrap()])
}

/// The runs a TensorBoard folder should hold for the exported `trials`: one per started trial,
/// each reported key by step as f32 (TensorBoard's scalars), the params as hparams, and
/// SUCCESS for completed and stopped trials, FAILURE for failed ones.
fn expected_runs(trials: &[Json]) -> Json {
    let mut runs = serde_json::Map::new();
    for t in trials.iter().filter(|t| !t["started_at"].is_null()) {
        let mut scalars: BTreeMap<String, Vec<Json>> = BTreeMap::new();
        for r in t["results"].as_array().unwrap() {
            for (k, v) in r.as_object().unwrap() {
                if ["step", "seq", "attempt", "worker", "sweep_steps"].contains(&k.as_str()) {
                    continue;
                }
                let f32_value = v.as_f64().unwrap() as f32 as f64;
                scalars
                    .entry(k.clone())
                    .or_default()
                    .push(json!([r["step"], f32_value]));
            }
        }
        let status = match t["status"].as_str().unwrap() {
            "completed" | "stopped" => json!("STATUS_SUCCESS"),
            "failed" => json!("STATUS_FAILURE"),
            _ => Json::Null,
        };
        let name = format!("trial-{:05}", t["id"].as_u64().unwrap());
        runs.insert(
            name.clone(),
            json!({"scalars": scalars, "hparams": as_hparams(&t["params"]), "group": name, "status": status}),
        );
    }
    Json::Object(runs)
}

/// Params as hparams hold them: numbers as doubles (an int param 4 reads back as 4.0).
fn as_hparams(params: &Json) -> Json {
    let mut hparams = params.as_object().unwrap().clone();
    for v in hparams.values_mut() {
        if let Some(x) = v.as_f64() {
            *v = json!(x);
        }
    }
    Json::Object(hparams)
}

#[test]
fn tensorboard_reads_the_live_and_the_exported_folder_as_the_sweep_was() {
    let tmp = tempfile::tempdir().unwrap();
    // ASHA stops some trials, x > 0 crashes others (no results: a run with a failed session);
    // every report has two keys (loss, x_seen). A choice and a log int as hparams.
    let spec = write_spec(
        tmp.path(),
        "samples = 12\nseed = 2\n[scheduler]\nkind = \"asha\"\nmax_t = 9\ngrace_period = 1\nreduction_factor = 3\n[stop]\nmax_failed_trials = 0\n[resources]\ncpu_slots = 1\n[tracking]\ntensorboard = \"tb\"",
        &["--steps", "9", "--behaviour", "crash"],
        "x = { uniform = [-3.0, 3.0] }\nk = { choice = [\"a\", \"b\"] }\nn = { int = [1, 64], log = true }",
    );
    let dir = tmp.path().join("sweep");
    tune_run(&spec, &dir).output().unwrap();
    let trials = export_json(&dir);
    assert_some_trial_in_each(&trials, &["completed", "stopped", "failed"]);
    let expected = expected_runs(&trials);
    assert_eq!(expected.as_object().unwrap().len(), trials.len());

    // Live: relative to the spec's folder.
    let live = read_runs(&tmp.path().join("tb"));
    assert_eq!(live, expected);

    let exported = tmp.path().join("exported");
    run_ok(
        tune()
            .arg("export")
            .arg(&dir)
            .args(["--format", "tensorboard"])
            .arg(&exported),
    );
    assert_eq!(read_runs(&exported), expected);

    // The server's HParams tab: every trial a session group with its params and its last
    // loss, both keys as metrics.
    let served = python_json(
        ASK_SERVER,
        &[exported.to_str().unwrap(), &trials.len().to_string()],
    );
    let metrics: Vec<&Json> = served["experiment"]["metricInfos"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["name"]["tag"])
        .collect();
    assert_eq!(metrics, [&json!("loss"), &json!("x_seen")]);
    let groups = served["groups"].as_array().unwrap();
    assert_eq!(groups.len(), trials.len());
    for t in &trials {
        let name = format!("trial-{:05}", t["id"].as_u64().unwrap());
        let g = groups
            .iter()
            .find(|g| g["name"] == json!(name))
            .unwrap_or_else(|| panic!("no session group {name}"));
        assert_eq!(g["hparams"], as_hparams(&t["params"]), "{name}");
        let loss = g["metricValues"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"]["tag"] == "loss")
            .map(|m| m["value"].as_f64().unwrap());
        let last = t["results"]
            .as_array()
            .unwrap()
            .last()
            .map(|r| r["loss"].as_f64().unwrap() as f32 as f64);
        assert_eq!(loss, last, "{name}");
    }
}

#[test]
fn a_killed_sweep_resumed_leaves_every_result_in_tensorboard_once() {
    let tmp = tempfile::tempdir().unwrap();
    // Trial 0's first run SIGKILLs tune after step 3 is acknowledged: whatever the logger had
    // not written then is written again on resume, and nothing twice.
    let spec = write_spec(
        tmp.path(),
        "samples = 3\nseed = 4\n[resources]\ncpu_slots = 1\n[tracking]\ntensorboard = \"tb\"",
        &["--steps", "6", "--behaviour", "ckpt", "--kill-tune-at", "3"],
        "x = { uniform = [-2.0, 2.0] }",
    );
    let dir = tmp.path().join("run");
    killed_then_resumed(&spec, &dir);
    let trials = export_json(&dir);
    assert_eq!(trials[0]["attempts"], 2);
    let runs = read_runs(&tmp.path().join("tb"));
    assert_eq!(runs, expected_runs(&trials));
    let steps: Vec<u64> = runs["trial-00000"]["scalars"]["loss"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[0].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [1, 2, 3, 4, 5, 6]);
}

#[test]
fn a_tensorboard_folder_that_cannot_be_written_is_refused_before_the_sweep() {
    let tmp = tempfile::tempdir().unwrap();
    // A folder under a regular file cannot be made, even by root.
    std::fs::write(tmp.path().join("plain-file"), "").unwrap();
    let spec = write_spec(
        tmp.path(),
        "samples = 2\n[tracking]\ntensorboard = \"plain-file/tb\"",
        &[],
        "x = { uniform = [-2.0, 2.0] }",
    );
    let dir = tmp.path().join("run");
    let out = tune_run(&spec, &dir).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("[tracking] tensorboard") && err.contains("plain-file/tb"),
        "{err}"
    );
    assert!(!dir.exists(), "the experiment was created: {err}");

    // The export says what it needs, and where it cannot write.
    run_ok(&mut tune_run(
        &write_spec(
            tmp.path(),
            "samples = 2",
            &[],
            "x = { uniform = [-2.0, 2.0] }",
        ),
        &dir,
    ));
    let out = tune()
        .arg("export")
        .arg(&dir)
        .args(["--format", "tensorboard"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("tune export NAME --format tensorboard OUT"));
    let out = tune()
        .arg("export")
        .arg(&dir)
        .args(["--format", "tensorboard"])
        .arg(tmp.path().join("plain-file/tb"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot write TensorBoard's folder"),
        "{}",
        stderr(&out)
    );
    let out = tune()
        .arg("export")
        .arg(&dir)
        .arg(tmp.path().join("elsewhere"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("only --format tensorboard writes to a folder"));
}
