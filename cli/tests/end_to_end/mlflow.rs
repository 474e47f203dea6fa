//! `[tracking] mlflow` and `tune export --to-mlflow`, against a real `mlflow server` (3.17.2,
//! private, on loopback), read back through MLflow's own client (its REST search API).

use crate::common;
use tune_testkit::mlflow_server;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::*;
use mlflow_server::{free_port, MlflowServer};
use serde_json::{json, Value as Json};

/// Every run of the MLflow experiment `sys.argv[2]` at `sys.argv[1]`: name, status, parent,
/// params, tune's tags, and each metric's whole history as sorted [step, value] pairs.
const READ_RUNS: &str = r#"
import json, sys
from mlflow.tracking import MlflowClient
c = MlflowClient(sys.argv[1])
exp = c.get_experiment_by_name(sys.argv[2])
runs = []
for r in (c.search_runs([exp.experiment_id], max_results=50000) if exp else []):
    tags = r.data.tags
    runs.append({
        "name": tags.get("mlflow.runName"),
        "id": r.info.run_id,
        "status": r.info.status,
        "parent": tags.get("mlflow.parentRunId"),
        "params": r.data.params,
        "tags": {k: v for k, v in tags.items() if not k.startswith("mlflow.")},
        "history": {k: sorted([m.step, m.value] for m in c.get_metric_history(r.info.run_id, k))
                    for k in r.data.metrics},
    })
print(json.dumps(sorted(runs, key=lambda r: r["name"])))
"#;

fn read_runs(server: &MlflowServer, experiment: &str) -> Vec<Json> {
    read_runs_with(server, experiment, &[])
}

/// [`read_runs`] with the environment `env` (MLflow's client takes credentials from it).
fn read_runs_with(server: &MlflowServer, experiment: &str, env: &[(&str, &str)]) -> Vec<Json> {
    let out = Command::new(mlflow_python())
        .args(["-c", READ_RUNS, &server.url, experiment])
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    match serde_json::from_slice(&out.stdout).unwrap() {
        Json::Array(runs) => runs,
        other => panic!("{other}"),
    }
}

/// Checks that the runs hold the exported sweep `trials`, each trial once: a parent run for
/// the sweep, and a nested run per started trial with its params as text, every reported key's
/// history equal to the results, and its end.
fn assert_runs_hold(runs: &[Json], trials: &[Json], scheduler: &str) {
    let parents: Vec<&Json> = runs
        .iter()
        .filter(|r| r["tags"]["tune.role"] == "sweep")
        .collect();
    assert_eq!(parents.len(), 1, "{runs:#?}");
    let parent = parents[0];
    let started: Vec<&Json> = trials
        .iter()
        .filter(|t| !t["started_at"].is_null())
        .collect();
    assert_eq!(
        runs.len(),
        started.len() + 1,
        "one run per started trial and the sweep's"
    );
    for t in started {
        let name = format!("trial-{:05}", t["id"].as_u64().unwrap());
        let found: Vec<&Json> = runs.iter().filter(|r| r["name"] == json!(name)).collect();
        assert_eq!(found.len(), 1, "{name}: {found:#?}");
        let run = found[0];
        assert_eq!(run["parent"], parent["id"], "{name}");
        assert_eq!(
            run["tags"]["tune.trial"],
            json!(t["id"].to_string()),
            "{name}"
        );
        for (k, v) in t["params"].as_object().unwrap() {
            let logged = run["params"][k]
                .as_str()
                .unwrap_or_else(|| panic!("{name}: no param {k}"));
            match v {
                Json::String(s) => assert_eq!(logged, s, "{name} {k}"),
                other => assert_eq!(logged.parse::<f64>().ok(), other.as_f64(), "{name} {k}"),
            }
        }
        let mut expected: BTreeMap<String, Vec<Json>> = BTreeMap::new();
        for r in t["results"].as_array().unwrap() {
            for (k, v) in r.as_object().unwrap() {
                if !["step", "seq", "attempt", "worker", "sweep_steps"].contains(&k.as_str()) {
                    expected
                        .entry(k.clone())
                        .or_default()
                        .push(json!([r["step"], v]));
                }
            }
        }
        for points in expected.values_mut() {
            points.sort_by_key(|p| p.to_string());
        }
        let mut history: BTreeMap<String, Vec<Json>> =
            serde_json::from_value(run["history"].clone()).unwrap();
        for points in history.values_mut() {
            points.sort_by_key(|p| p.to_string());
        }
        assert_eq!(history, expected, "{name}: metric histories");
        let (status, stopped) = match t["status"].as_str().unwrap() {
            "completed" => ("FINISHED", None),
            "failed" => ("FAILED", None),
            "stopped" => (
                "KILLED",
                Some(format!(
                    "stopped by {scheduler} at step {}",
                    t["results"].as_array().unwrap().last().unwrap()["step"]
                )),
            ),
            other => panic!("{name} is {other}"),
        };
        assert_eq!(run["status"], status, "{name}");
        assert_eq!(
            run["tags"]["tune.stopped"].as_str().map(String::from),
            stopped,
            "{name}"
        );
    }
}

/// The parent run of a completed sweep: FINISHED, the spec's settings as params, the best
/// value as `best_<metric>` and the best trial's id and params as tags.
fn assert_parent_ended(runs: &[Json], trials: &[Json]) {
    let parent = runs
        .iter()
        .find(|r| r["tags"]["tune.role"] == "sweep")
        .unwrap();
    assert_eq!(parent["status"], "FINISHED");
    assert_eq!(parent["params"]["metric"], "loss");
    assert_eq!(parent["params"]["mode"], "min");
    let best = trials
        .iter()
        .filter(|t| t["status"] == "completed")
        .min_by(|a, b| {
            a["value"]
                .as_f64()
                .partial_cmp(&b["value"].as_f64())
                .unwrap()
        })
        .unwrap();
    assert_eq!(
        parent["tags"]["tune.best_trial"],
        json!(best["id"].to_string())
    );
    assert_eq!(parent["history"]["best_loss"], json!([[0, best["value"]]]));
    for (k, _) in best["params"].as_object().unwrap() {
        assert!(parent["tags"][format!("best.{k}")].is_string(), "best.{k}");
    }
}

fn tracked_spec(tmp: &Path, top: &str, url: &str, extra: &[&str]) -> std::path::PathBuf {
    write_spec(
        tmp,
        &format!("{top}\n[tracking]\nmlflow = {url:?}\nmlflow_experiment = \"exp\""),
        extra,
        "x = { uniform = [-3.0, 3.0] }\nk = { choice = [\"a\", \"b\"] }\nn = { int = [1, 64], log = true }",
    )
}

#[test]
fn mlflow_holds_the_sweep_as_exported_and_a_second_send_adds_nothing() {
    let server = MlflowServer::start(&mlflow_python());
    let tmp = tempfile::tempdir().unwrap();
    // ASHA stops some trials, x > 0 crashes others; every report has two keys.
    let spec = tracked_spec(
        tmp.path(),
        "samples = 12\nseed = 2\n[scheduler]\nkind = \"asha\"\nmax_t = 9\ngrace_period = 1\nreduction_factor = 3\n[stop]\nmax_failed_trials = 0\n[resources]\ncpu_slots = 1",
        &server.url,
        &["--steps", "9", "--behaviour", "crash"],
    );
    let dir = tmp.path().join("sweep");
    let out = tune_run(&spec, &dir).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = export_json(&dir);
    assert_some_trial_in_each(&trials, &["completed", "stopped", "failed"]);
    let runs = read_runs(&server, "exp");
    assert_runs_hold(&runs, &trials, "asha");
    assert_parent_ended(&runs, &trials);

    // Sent again after the fact: MLflow already has it all.
    run_ok(
        tune()
            .arg("export")
            .arg(&dir)
            .args(["--to-mlflow", &server.url]),
    );
    assert_eq!(read_runs(&server, "exp"), runs);
}

#[test]
fn a_sweep_killed_mid_logging_and_resumed_logs_every_point_once() {
    let server = MlflowServer::start(&mlflow_python());
    let tmp = tempfile::tempdir().unwrap();
    // Trial 0's first run SIGKILLs tune after step 3 is acknowledged.
    let spec = tracked_spec(
        tmp.path(),
        "samples = 3\nseed = 4\n[resources]\ncpu_slots = 1",
        &server.url,
        &["--steps", "6", "--behaviour", "ckpt", "--kill-tune-at", "3"],
    );
    let dir = tmp.path().join("run");
    killed_then_resumed(&spec, &dir);
    let trials = export_json(&dir);
    assert_eq!(trials[0]["attempts"], 2);
    let runs = read_runs(&server, "exp");
    assert_runs_hold(&runs, &trials, "fifo");
    assert_parent_ended(&runs, &trials);
}

#[test]
fn a_server_down_at_the_start_gets_everything_once_when_it_answers() {
    let python = mlflow_python();
    let mut server = MlflowServer::stopped(&python, free_port());
    let tmp = tempfile::tempdir().unwrap();
    let hold = tmp.path().join("go");
    let spec = tracked_spec(
        tmp.path(),
        "samples = 3\nseed = 1\n[resources]\ncpu_slots = 1",
        &server.url,
        &["--steps", "3", "--hold", hold.to_str().unwrap()],
    );
    let dir = tmp.path().join("run");
    let sweep = tune_run(&spec, &dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Trial 0 has reported step 1 and waits: the sweep runs while MLflow is down.
    wait_for_results(&dir, 1);
    server.resume();
    std::fs::write(&hold, "").unwrap();
    let out = sweep.wait_with_output().unwrap();
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!("MLflow at {} does not answer", server.url)),
        "{err}"
    );
    assert!(err.contains("answers again"), "{err}");
    assert!(!err.contains("not (fully) logged"), "{err}");
    let trials = export_json(&dir);
    let runs = read_runs(&server, "exp");
    assert_runs_hold(&runs, &trials, "fifo");
    assert_parent_ended(&runs, &trials);
}

#[test]
fn a_sweep_that_ends_while_mlflow_is_down_says_how_to_send_it_later() {
    let python = mlflow_python();
    let mut server = MlflowServer::stopped(&python, free_port());
    let tmp = tempfile::tempdir().unwrap();
    let spec = tracked_spec(
        tmp.path(),
        "samples = 2\nseed = 1\n[resources]\ncpu_slots = 1",
        &server.url,
        &["--steps", "2"],
    );
    let dir = tmp.path().join("run");
    let out = run_ok(&mut tune_run(&spec, &dir));
    let err = stderr(&out);
    assert!(err.contains("trials not (fully) logged to MLflow"), "{err}");
    assert!(
        err.contains(&format!("--to-mlflow {}", server.url)),
        "{err}"
    );
    let trials = export_json(&dir);
    assert_eq!(
        trials.iter().filter(|t| t["status"] == "completed").count(),
        2
    );

    server.resume();
    run_ok(
        tune()
            .arg("export")
            .arg(&dir)
            .args(["--to-mlflow", &server.url]),
    );
    let runs = read_runs(&server, "exp");
    assert_runs_hold(&runs, &trials, "fifo");
    assert_parent_ended(&runs, &trials);
}

#[test]
fn a_url_that_is_not_mlflow_is_refused_before_the_sweep() {
    // A plain web server: it answers, with a 404 page.
    let port = free_port();
    let site = tempfile::tempdir().unwrap();
    let mut web = Command::new("python3")
        .args([
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            &port.to_string(),
        ])
        .current_dir(site.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let tmp = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let spec = tracked_spec(tmp.path(), "samples = 2", &url, &[]);
    let dir = tmp.path().join("run");
    let out = tune_run(&spec, &dir).output().unwrap();
    let _ = web.kill();
    let _ = web.wait();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "{url} does not answer as an MLflow tracking server"
        )),
        "{err}"
    );
    assert!(err.contains("HTTP 404"), "{err}");
    assert!(!dir.exists(), "the experiment was created: {err}");

    // Not a URL at all: the spec's key is named.
    let spec = tracked_spec(tmp.path(), "samples = 2", "localhost:5000", &[]);
    let out = tune_run(&spec, &dir).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("mlflow"), "{}", stderr(&out));
    assert!(stderr(&out).contains("http://"), "{}", stderr(&out));
}

#[test]
fn a_server_that_wants_credentials_gets_them_and_refused_ones_exit_2_before_the_sweep() {
    let (user, password) = ("tune-admin", "a-long-admin-password-1");
    let server = MlflowServer::start_with_basic_auth(&mlflow_python(), user, password);
    let tmp = tempfile::tempdir().unwrap();
    let spec = tracked_spec(
        tmp.path(),
        "samples = 3\n[resources]\ncpu_slots = 1",
        &server.url,
        &["--steps", "2"],
    );
    let run = |name: &str, env: &[(&str, &str)]| {
        let dir = tmp.path().join(name);
        let mut cmd = tune_run(&spec, &dir);
        for var in [
            "MLFLOW_TRACKING_TOKEN",
            "MLFLOW_TRACKING_USERNAME",
            "MLFLOW_TRACKING_PASSWORD",
        ] {
            cmd.env_remove(var);
        }
        (cmd.envs(env.iter().copied()).output().unwrap(), dir)
    };
    let refused = [
        ("none", vec![], "a request without credentials"),
        (
            "wrong",
            vec![
                ("MLFLOW_TRACKING_USERNAME", user),
                ("MLFLOW_TRACKING_PASSWORD", "not-the-password"),
            ],
            "the user and password in MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD",
        ),
        (
            "token",
            vec![("MLFLOW_TRACKING_TOKEN", "not-a-token-it-knows")],
            "the token in MLFLOW_TRACKING_TOKEN",
        ),
    ];
    for (name, env, sent) in refused {
        let (out, dir) = run(name, &env);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(
            err.contains(&format!(
                "MLflow at {} refused {sent} (HTTP 401",
                server.url
            )),
            "{name}: {err}"
        );
        assert!(
            !err.contains("not-the-password") && !err.contains("not-a-token"),
            "{err}"
        );
        assert!(!dir.exists(), "{name}: the experiment was created: {err}");
    }
    let credentials = [
        ("MLFLOW_TRACKING_USERNAME", user),
        ("MLFLOW_TRACKING_PASSWORD", password),
    ];
    let (out, dir) = run("right", &credentials);
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = export_json(&dir);
    let runs = read_runs_with(&server, "exp", &credentials);
    assert_runs_hold(&runs, &trials, "fifo");
    assert_parent_ended(&runs, &trials);
}

/// A proxy in front of a tracking server: it listens on 127.0.0.1:argv[1] and forwards to
/// argv[2]. Where argv[3] is not `-`, it wants `Authorization: Bearer <argv[3]>` and answers
/// 401 to anything else (what Databricks and token gateways do); where argv[4] and argv[5]
/// are given, it serves TLS with that certificate and key.
const PROXY: &str = r#"
import http.server, ssl, sys, urllib.request, urllib.error
port, upstream, token = int(sys.argv[1]), sys.argv[2], sys.argv[3]
class Proxy(http.server.BaseHTTPRequestHandler):
    def forward(self):
        if token != "-" and self.headers.get("Authorization") != "Bearer " + token:
            self.send_response(401)
            self.end_headers()
            self.wfile.write(b"a token is needed")
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
        req = urllib.request.Request(upstream + self.path, data=body, method=self.command,
                                     headers={"Content-Type": "application/json"})
        try:
            answer = urllib.request.urlopen(req)
        except urllib.error.HTTPError as e:
            answer = e
        data = answer.read()
        self.send_response(answer.status if hasattr(answer, "status") else answer.code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    do_GET = do_POST = forward
    def log_message(self, *args):
        pass
    def handle(self):
        try:
            super().handle()
        except (ssl.SSLError, ConnectionResetError):
            pass  # a client that refused the certificate
server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Proxy)
if len(sys.argv) > 5:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(sys.argv[4], sys.argv[5])
    server.socket = context.wrap_socket(server.socket, server_side=True,
                                        do_handshake_on_connect=False)
server.serve_forever()
"#;

#[test]
fn a_bearer_token_reaches_a_server_that_checks_one_and_a_wrong_one_exits_2() {
    let server = MlflowServer::start(&mlflow_python());
    let token = "the-right-token";
    let (_proxy, port) = proxy(&server, token, None);
    let url = format!("http://127.0.0.1:{port}");
    let tmp = tempfile::tempdir().unwrap();
    let spec = tracked_spec(
        tmp.path(),
        "samples = 2\n[resources]\ncpu_slots = 1",
        &url,
        &["--steps", "2"],
    );
    let run = |name: &str, token: &str| {
        let dir = tmp.path().join(name);
        let out = tune_run(&spec, &dir)
            .env_remove("MLFLOW_TRACKING_USERNAME")
            .env("MLFLOW_TRACKING_TOKEN", token)
            .output()
            .unwrap();
        (out, dir)
    };
    let (out, dir) = run("wrong", "an-old-token");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "MLflow at {url} refused the token in MLFLOW_TRACKING_TOKEN (HTTP 401"
        )),
        "{err}"
    );
    assert!(!dir.exists(), "{err}");
    let (out, dir) = run("right", token);
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = export_json(&dir);
    let runs = read_runs(&server, "exp");
    assert_runs_hold(&runs, &trials, "fifo");
}

/// A helper process, killed and reaped when the test ends, passing or not.
struct KilledOnDrop(std::process::Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts [`PROXY`] on a free port in front of `server`, wanting `token` (`-`: none), serving
/// TLS with `tls` (a certificate and its key) where given; the process and its port.
fn proxy(server: &MlflowServer, token: &str, tls: Option<(&Path, &Path)>) -> (KilledOnDrop, u16) {
    let port = free_port();
    let mut cmd = Command::new("python3");
    cmd.args(["-c", PROXY, &port.to_string(), &server.url, token]);
    if let Some((cert, key)) = tls {
        cmd.arg(cert).arg(key);
    }
    let proxy = KilledOnDrop(cmd.spawn().unwrap());
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    (proxy, port)
}

/// `mlflow = "databricks://PROFILE"` takes the workspace and token of that profile in the
/// Databricks config file, as MLflow's client does; a token the workspace refuses is said,
/// naming the profile, with exit 2 before the sweep.
#[test]
fn a_databricks_profile_gives_the_workspace_and_its_token() {
    let server = MlflowServer::start(&mlflow_python());
    let token = "dapi-the-right-one";
    let (_proxy, port) = proxy(&server, token, None);
    let workspace = format!("http://127.0.0.1:{port}");
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("databrickscfg");
    std::fs::write(
        &config,
        format!(
            "[DEFAULT]\nhost = https://not-this-one.example\ntoken = nope\n\n\
             [staging]\nhost = {workspace}/\ntoken = {token}\n\n\
             [stale]\nhost = {workspace}\ntoken = dapi-revoked\n"
        ),
    )
    .unwrap();
    let run = |profile: &str| {
        let folder = tmp.path().join(profile);
        std::fs::create_dir_all(&folder).unwrap();
        let spec = tracked_spec(
            &folder,
            "samples = 2\n[resources]\ncpu_slots = 1",
            &format!("databricks://{profile}"),
            &["--steps", "2"],
        );
        let dir = folder.join("sweep");
        let out = tune_run(&spec, &dir)
            .env("DATABRICKS_CONFIG_FILE", &config)
            .env_remove("MLFLOW_TRACKING_TOKEN")
            .env_remove("MLFLOW_TRACKING_USERNAME")
            .output()
            .unwrap();
        (out, dir)
    };
    let (out, dir) = run("stale");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "MLflow at {workspace} refused the token in profile [stale] of {} (HTTP 401",
            config.display()
        )),
        "{err}"
    );
    assert!(!err.contains("dapi-revoked"), "{err}");
    assert!(!dir.exists(), "{err}");
    let (out, dir) = run("missing");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("has no profile [missing] (it has: DEFAULT, staging, stale)"),
        "{err}"
    );
    let (out, dir_ok) = run("staging");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!dir.exists());
    let trials = export_json(&dir_ok);
    let runs = read_runs(&server, "exp");
    assert_runs_hold(&runs, &trials, "fifo");
}

/// An MLflow server behind TLS with a private CA: refused (exit 2, saying what to set) until
/// `MLFLOW_TRACKING_SERVER_CERT_PATH` names the CA, or `MLFLOW_TRACKING_INSECURE_TLS=true`
/// skips the check; either way the runs arrive.
#[test]
fn an_https_server_of_a_private_ca_is_reached_with_its_bundle_or_without_the_check() {
    let server = MlflowServer::start(&mlflow_python());
    let tmp = tempfile::tempdir().unwrap();
    let files = tmp.path().join("tls");
    std::fs::create_dir_all(&files).unwrap();
    tune_testkit::certificates::write_certificates(false, "client", &files, &files);
    let (cert, key) = (files.join("server.pem"), files.join("server.key"));
    let (_proxy, port) = proxy(&server, "-", Some((&cert, &key)));
    let url = format!("https://127.0.0.1:{port}");
    let run = |name: &str, env: &[(&str, std::path::PathBuf)]| {
        let folder = tmp.path().join(name);
        std::fs::create_dir_all(&folder).unwrap();
        let spec = tracked_spec(
            &folder,
            "samples = 2\n[resources]\ncpu_slots = 1",
            &url,
            &["--steps", "2"],
        );
        // An MLflow experiment per run.
        let text = std::fs::read_to_string(&spec).unwrap();
        let text = text.replace(
            "mlflow_experiment = \"exp\"",
            &format!("mlflow_experiment = \"{name}\""),
        );
        std::fs::write(&spec, text).unwrap();
        let dir = folder.join("sweep");
        let mut cmd = tune_run(&spec, &dir);
        cmd.env_remove("MLFLOW_TRACKING_TOKEN")
            .env_remove("MLFLOW_TRACKING_USERNAME")
            .env_remove("MLFLOW_TRACKING_SERVER_CERT_PATH")
            .env_remove("MLFLOW_TRACKING_INSECURE_TLS");
        for (k, v) in env {
            cmd.env(k, v);
        }
        (cmd.output().unwrap(), dir)
    };
    let (out, dir) = run("unknown-ca", &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("MLflow at {url}: TLS: ")), "{err}");
    assert!(err.contains("MLFLOW_TRACKING_SERVER_CERT_PATH"), "{err}");
    assert!(!dir.exists(), "{err}");
    let other = [(
        "MLFLOW_TRACKING_SERVER_CERT_PATH",
        files.join("other-ca.pem"),
    )];
    let (out, _) = run("other-ca", &other);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("other-ca.pem"), "{err}");
    let bundle = [("MLFLOW_TRACKING_SERVER_CERT_PATH", files.join("ca.pem"))];
    let (out, dir) = run("bundle", &bundle);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_runs_hold(&read_runs(&server, "bundle"), &export_json(&dir), "fifo");
    let insecure = [("MLFLOW_TRACKING_INSECURE_TLS", "true".into())];
    let (out, dir) = run("insecure", &insecure);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_runs_hold(&read_runs(&server, "insecure"), &export_json(&dir), "fifo");
}
