//! `tune serve` in a real browser (headless Chromium through ChromeDriver): a running sweep's
//! page updates as trials report, its controls steer the sweep through the coordinator, a
//! request without the token gets nothing, and a param value that is markup shows as text.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Instant;

use serde_json::Value as Json;
use tune_testkit::browser::{Browser, PAGE_WAIT};

use crate::common::*;

/// Trial 0 reports every 50 ms until it is stopped; the others report 3 times and end.
const OBJECTIVE: &str = r#"
import json, os, sys, time
p = json.loads(os.environ["TUNE_PARAMS"])
print("trial " + os.environ["TUNE_TRIAL_ID"] + " starts", file=sys.stderr, flush=True)
print("not a report: <b>bold</b>", flush=True)
last = 100000 if os.environ["TUNE_TRIAL_ID"] == "0" else 3
for step in range(1, last + 1):
    print(json.dumps({"step": step, "loss": p["x"] + 1.0 / step}), flush=True)
    if sys.stdin.readline().strip() != "continue":
        break
    time.sleep(0.05)
"#;

const MARKUP: &str = "<script>window.pwned=1</script><img src=x onerror=window.pwned=2>";

fn spec(tmp: &Path) -> std::path::PathBuf {
    std::fs::write(tmp.join("obj.py"), OBJECTIVE).unwrap();
    let text = format!(
        r#"name = "demo"
metric = "loss"
samples = 3
seed = 1

[search]
algorithm = "random"

[[search.initial]]
tag = {MARKUP:?}

[resources]
cpu_slots = 2

[objective]
command = ["python3", "obj.py"]

[space]
x = {{ uniform = [0.0, 1.0] }}
tag = {{ choice = [{MARKUP:?}, "plain"] }}
"#
    );
    let path = tmp.join("space.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A child process killed if the test fails before it ends.
struct Killed(Child);

impl Killed {
    /// Waits for the process to exit on its own, and checks it exited 0.
    fn ends_well(&mut self, what: &str) {
        let started = Instant::now();
        let status = loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                break status;
            }
            assert!(started.elapsed() < PAGE_WAIT, "{what} did not end");
            std::thread::sleep(std::time::Duration::from_millis(100));
        };
        assert!(status.success(), "{what}: {status:?}");
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `tune run --serve` started, and the page URL it printed.
fn run_serving(spec: &Path, dir: &Path) -> (Killed, String) {
    let mut child = tune()
        .arg("run")
        .arg(spec)
        .arg("--dir")
        .arg(dir)
        .args(["--no-tui", "--serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let mut lines = out.lines();
    let url = loop {
        let line = lines.next().expect("tune printed no page URL").unwrap();
        if let Some(url) = line.strip_prefix("tune: this sweep's page: ") {
            break url.to_string();
        }
    };
    // The rest of its output is not read: drained so that it never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    (Killed(child), url)
}

/// Status and body of a GET without following redirects or failing on 4xx.
fn get(url: &str, bearer: Option<&str>) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    let mut request = agent.get(url);
    if let Some(token) = bearer {
        request = request.header("Authorization", &format!("Bearer {token}"));
    }
    let mut response = request.call().unwrap();
    let status = response.status().as_u16();
    (
        status,
        response.body_mut().read_to_string().unwrap_or_default(),
    )
}

fn number(v: &Json) -> f64 {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| v.as_f64())
        .unwrap_or(f64::NAN)
}

/// Where screenshots go: `TUNE_SCREENSHOTS` (docs/images when refreshing the docs), else the
/// test's folder.
fn screenshot(browser: &Browser, tmp: &Path, name: &str) {
    let dir = std::env::var_os("TUNE_SCREENSHOTS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| tmp.to_path_buf());
    browser.screenshot(&dir.join(name));
}

#[test]
fn a_running_sweeps_page_updates_live_and_its_controls_steer_the_sweep() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = spec(tmp.path());
    let dir = tmp.path().join("runs/demo");
    let (mut child, url) = run_serving(&spec, &dir);
    let (base, _) = url.split_once("/?token=").unwrap();

    // Without the token: nothing, whatever is asked.
    for path in [
        "/",
        "/api/sweeps",
        "/api/sweeps/demo/trials",
        "/assets/app.js",
    ] {
        let (status, body) = get(&format!("{base}{path}"), None);
        assert_eq!(status, 401, "{path}");
        assert!(
            !body.contains("demo") && !body.contains("loss"),
            "{path}: {body}"
        );
        let (status, _) = get(&format!("{base}{path}"), Some(&"0".repeat(32)));
        assert_eq!(status, 401, "{path} with a wrong token");
    }
    let (status, _) = get(&format!("{base}/?token={}", "0".repeat(32)), None);
    assert_eq!(status, 401);

    let browser = Browser::start();
    browser.goto(&url);
    // The token went into a cookie and out of the address bar.
    let address = browser.wait_for(
        "return location.href.includes('#/s/demo') && location.href",
        "the sweep's address",
    );
    assert!(!address.as_str().unwrap().contains("token="), "{address}");
    let step_of_0 = r#"const c = document.querySelector('tr[data-trial="0"] td:nth-child(4)');
        return c && c.textContent"#;
    let first = number(&browser.wait_for(step_of_0, "trial 0's row"));
    browser.run("window.samePage = true; return true");

    // Trial 0 reports on: its row's step grows, and the learning curves are drawn again from
    // the new points, without a reload.
    browser.wait_for(
        &format!("{step_of_0} && Number(c.textContent) > {first}"),
        "trial 0's step grow",
    );
    let drawn = number(&browser.wait_for(
        "const i = document.getElementById('chart-curves'); return i && i.complete && i.naturalWidth > 0 && i.dataset.version",
        "the learning curves",
    ));
    browser.wait_for(
        &format!("const i = document.getElementById('chart-curves'); return Number(i.dataset.version) > {drawn} && i.complete && i.naturalWidth > 0"),
        "the learning curves drawn again",
    );
    assert_eq!(
        browser.run("return window.samePage === true"),
        Json::Bool(true)
    );

    // A param value that is markup shows as text and runs nothing.
    let params = browser.wait_for(
        r#"const c = document.querySelector('tr[data-trial="0"] td.params'); return c && c.textContent"#,
        "trial 0's params",
    );
    assert!(params.as_str().unwrap().contains(MARKUP), "{params}");
    assert_eq!(
        browser.run("return [window.pwned === undefined, document.querySelectorAll('main script, main img[src=\"x\"]').length]"),
        serde_json::json!([true, 0])
    );
    screenshot(&browser, tmp.path(), "serve-sweep.png");

    // Add samples: the sweep grows, and the new trials' rows appear without a reload.
    browser.type_into("#add-count", "2");
    browser.click("#add-samples");
    let said = browser.wait_for(
        "const m = document.getElementById('message').textContent; return m !== '…' && m",
        "the answer to add samples",
    );
    assert_eq!(said, "added 2 samples: the sweep creates 5 trials in all");
    browser.wait_for(
        r#"return document.querySelector('tr[data-trial="4"]') !== null"#,
        "trial 4's row",
    );
    assert_eq!(
        browser.run("return window.samePage === true"),
        Json::Bool(true)
    );

    // The trial's own page: its params and every report.
    browser.goto(&format!("{base}/#/s/demo/t/1"));
    browser.wait_for(
        "return document.querySelectorAll('#trial-reports tbody tr').length === 3",
        "trial 1's reports",
    );
    screenshot(&browser, tmp.path(), "serve-trial.png");

    // The stop button stops trial 0 (which would otherwise run on): the sweep then ends.
    browser.goto(&format!("{base}/#/s/demo"));
    browser.wait_for(
        r#"return document.querySelector('button.stop-trial[data-trial="0"]') !== null"#,
        "trial 0's stop button",
    );
    browser.click(r#"button.stop-trial[data-trial="0"]"#);
    let said = browser.wait_for(
        "const m = document.getElementById('message').textContent; return m !== '…' && m",
        "the answer to stop",
    );
    assert_eq!(said, "stopped trial 0 (running until now)");
    child.ends_well("the sweep, after trial 0 was stopped");
    drop(browser);

    // What the store holds: trial 0 stopped, the budget raised to 5 and spent.
    let trials = export_json(&dir);
    assert_eq!(trials.len(), 5);
    assert_eq!(trials[0]["status"], "stopped");
    assert!(
        trials[1..].iter().all(|t| t["status"] == "completed"),
        "{trials:?}"
    );
}

/// POST `body` to `url` with the bearer token: status and body.
fn post(url: &str, token: &str, body: &str) -> (u16, Json) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut response = agent
        .post(url)
        .header("Authorization", &format!("Bearer {token}"))
        .header("Content-Type", "application/json")
        .send(body)
        .unwrap();
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Json::Null))
}

/// Waits until `check` holds for the JSON at `path`.
fn wait_for_json(base: &str, token: &str, path: &str, what: &str, check: impl Fn(&Json) -> bool) {
    let started = Instant::now();
    loop {
        let (status, body) = get(&format!("{base}{path}"), Some(token));
        let json: Json = serde_json::from_str(&body).unwrap_or(Json::Null);
        if status == 200 && check(&json) {
            return;
        }
        assert!(
            started.elapsed() < PAGE_WAIT,
            "never saw {what}: {status} {body}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn a_sweep_in_postgresql_is_served_and_steered_from_another_process() {
    let url = tune_testkit::pg_server::fresh_database();
    let tmp = tempfile::tempdir().unwrap();
    let spec = spec(tmp.path());
    let dir = tmp.path().join("runs/demo");
    let mut coordinator = Killed(
        tune()
            .arg("run")
            .arg(&spec)
            .args(["--store", &url, "--no-tui", "--dir"])
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut serve = tune()
        .args(["serve", "--store", &url, "--listen", "127.0.0.1:0"])
        .arg(tmp.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(serve.stdout.take().unwrap()).lines();
    let _serve = Killed(serve);
    let printed = lines.next().unwrap().unwrap();
    let page = printed.rsplit(" at ").next().unwrap().to_string();
    assert!(!printed.contains("password"), "{printed}");
    let (base, token) = page.split_once("/?token=").unwrap();

    wait_for_json(base, token, "/api/sweeps", "the sweep running", |j| {
        j["sweeps"][0]["name"] == "demo" && j["sweeps"][0]["state"] == "running"
    });
    wait_for_json(
        base,
        token,
        "/api/sweeps/demo/trials?status=running",
        "trial 0 reporting",
        |j| {
            j["rows"].as_array().is_some_and(|rows| {
                rows.iter()
                    .any(|r| r["id"] == 0 && r["step"].as_u64() >= Some(2))
            })
        },
    );
    let control = format!("{base}/api/sweeps/demo/control");
    let (status, answer) = post(&control, token, r#"{"action": "add_samples", "count": 1}"#);
    assert_eq!(
        (status, &answer["message"]),
        (
            200,
            &Json::from("added 1 samples: the sweep creates 4 trials in all")
        ),
        "{answer}"
    );
    let (status, answer) = post(&control, token, r#"{"action": "stop_trial", "trial": 0}"#);
    assert_eq!(
        (status, &answer["message"]),
        (200, &Json::from("stopped trial 0 (running until now)")),
        "{answer}"
    );
    let (status, answer) = post(&control, token, r#"{"action": "stop_trial", "trial": 99}"#);
    assert_eq!(status, 409, "{answer}");
    coordinator.ends_well("the sweep, after trial 0 was stopped");
    let out = run_ok(tune().args(["export", "demo", "--store", &url, "--format", "json"]));
    let trials: Vec<Json> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(trials.len(), 4);
    assert_eq!(trials[0]["status"], "stopped");
    // The served view follows the database to the end.
    wait_for_json(base, token, "/api/sweeps/demo", "the sweep finished", |j| {
        j["state"] == "finished" && j["counts"]["completed"] == 3
    });
}
