//! `tune serve` with a sweep of 100,000 trials x 10 reports, beside optuna-dashboard 0.21.0
//! on the same trials exported as an Optuna journal.
//!
//!     cargo bench -p tune-cli --bench serve
//!
//! What a page costs the server, measured by a client on loopback (wall time from the request
//! to the last byte, median of 10): the first paint of the sweep's page (the page, its script
//! and style, the header and the first page of the table), a table page deep in the sorted
//! and filtered trials, the charts; and an update's fan-out: one report published by the
//! sweep's coordinator (its hub) until 10 open pages' event streams have it. optuna-dashboard
//! loads a study's every trial in one request (`/api/studies/0?after=0`): its time and bytes
//! are beside ours. `TUNE_BENCH_TRIALS` changes the sweep's size.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use tune::{Params, Status, Trial, TrialResult, Value};
use tune_cli::dashboard::{Board, Header, Hub, Update};
use tune_cli::serve::{Server, Source};

const SPEC: &str = r#"name = "bench"
metric = "loss"
samples = 100000
[space]
lr = { loguniform = [1e-5, 1e-1] }
units = { int = [16, 1024] }
"#;

fn trial(id: u64) -> Trial {
    let mut params = Params::default();
    params.insert("lr", Value::Float(1e-4 * (1 + id % 97) as f64));
    params.insert("units", Value::Int(16 << (id % 5)));
    let mut t = Trial::new(id, params);
    t.status = Status::Completed;
    t.attempts = 1;
    t.device = Some(format!("cpu:{}", id % 8));
    t
}

fn result(id: u64, step: u64) -> TrialResult {
    let loss = ((id * 7919) % 1000) as f64 / 1000.0 + 1.0 / step as f64;
    TrialResult {
        step,
        seq: id * 10 + step,
        attempt: 1,
        metrics: BTreeMap::from([("loss".into(), loss)]),
    }
}

/// (median wall time, bytes) of GET `path` with the bearer token, over `runs` runs.
fn get(addr: &str, token: &str, path: &str, runs: usize) -> (Duration, usize) {
    let mut times = Vec::new();
    let mut bytes = 0;
    for _ in 0..runs {
        let start = Instant::now();
        let mut s = TcpStream::connect(addr).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut body = Vec::new();
        s.read_to_end(&mut body).unwrap();
        times.push(start.elapsed());
        assert!(
            body.starts_with(b"HTTP/1.1 200"),
            "{path}: {}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        );
        bytes = body.len();
    }
    times.sort();
    (times[times.len() / 2], bytes)
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

fn kib(bytes: usize) -> String {
    format!("{:.1}", bytes as f64 / 1024.0)
}

fn main() {
    let n: u64 = std::env::var("TUNE_BENCH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("bench");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(tune::experiment::SPEC_FILE), SPEC).unwrap();

    // The sweep as its coordinator's hub holds it, served on the watch socket as `tune run`
    // serves it.
    let start = Instant::now();
    let mut board = Board::new(Header {
        name: "bench".into(),
        metric: "loss".into(),
        total: n,
        slots: (0..8).map(|i| format!("cpu:{i}")).collect(),
        ..Header::default()
    });
    let mut trials = Vec::with_capacity(n as usize);
    for id in 0..n {
        let mut t = trial(id);
        t.status = Status::Running;
        board.apply(Update::Trial(t.clone()));
        for step in 1..=10 {
            board.apply(Update::Result {
                id,
                at: id,
                result: result(id, step),
            });
        }
        t.status = Status::Completed;
        board.apply(Update::Trial(t.clone()));
        t.results = (1..=10).map(|s| result(id, s)).collect();
        trials.push(t);
    }
    println!(
        "built a board of {n} trials x 10 reports in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    let hub = Hub::default();
    hub.publish(Update::Board(Box::new(board)));
    let _watch = hub.serve(&dir).unwrap();

    let start = Instant::now();
    let server = Server::start(
        Source::Folder(root.path().into()),
        root.path(),
        "127.0.0.1:0".parse().unwrap(),
        None,
    )
    .unwrap();
    let addr = server.addr().to_string();
    let token = server.token().to_string();
    // Wait until the catalog has the sweep's snapshot from its feed.
    loop {
        let (_, bytes) = get(&addr, &token, "/api/sweeps", 1);
        let (_, page) = get(&addr, &token, "/api/sweeps/bench/trials?limit=1", 1);
        if bytes > 0
            && page > 200
            && {
                let mut s = TcpStream::connect(&addr).unwrap();
                write!(s, "GET /api/sweeps/bench HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n").unwrap();
                let mut body = String::new();
                s.read_to_string(&mut body).unwrap();
                body.contains(&format!("\"created\":{n}"))
            }
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    println!(
        "tune serve had the sweep {:.1} s after it started",
        start.elapsed().as_secs_f64()
    );

    println!("\n| request ({n} trials x 10 reports) | tune serve ms | KiB |");
    println!("|---|---|---|");
    let mut paint = (Duration::ZERO, 0);
    for path in [
        "/",
        "/assets/app.js",
        "/assets/app.css",
        "/api/sweeps/bench",
        "/api/sweeps/bench/trials?offset=0&limit=50&sort=id&order=asc",
    ] {
        let (t, b) = get(&addr, &token, path, 10);
        paint.0 += t;
        paint.1 += b;
        println!("| `{path}` | {} | {} |", ms(t), kib(b));
    }
    println!(
        "| **first paint** (the five above) | **{}** | **{}** |",
        ms(paint.0),
        kib(paint.1)
    );
    for path in [
        "/api/sweeps/bench/trials?offset=50000&limit=50&sort=value&order=desc",
        "/api/sweeps/bench/trials?offset=0&limit=50&sort=param:lr&status=completed&q=cpu:3&range=units:64:256",
        &format!("/api/sweeps/bench/trials/{}", n * 7 / 9),
        "/api/sweeps",
    ] {
        let (t, b) = get(&addr, &token, path, 10);
        println!("| `{path}` | {} | {} |", ms(t), kib(b));
    }
    for chart in ["history", "parallel", "curves"] {
        let path = format!("/api/sweeps/bench/charts/{chart}.svg");
        let (t, b) = get(&addr, &token, &path, 1);
        println!("| `{path}` | {} | {} |", ms(t), kib(b));
    }

    // Fan-out: 10 pages' event streams, one report published.
    let mut pages: Vec<BufReader<TcpStream>> = (0..10)
        .map(|_| {
            let mut s = TcpStream::connect(&addr).unwrap();
            write!(s, "GET /api/sweeps/bench/events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n").unwrap();
            let mut r = BufReader::new(s);
            let mut line = String::new();
            // The response's head.
            while r.read_line(&mut line).unwrap() > 0 && line != "\r\n" {
                line.clear();
            }
            r
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut fan = Vec::new();
    for step in 11..=60u64 {
        let start = Instant::now();
        hub.publish(Update::Result {
            id: 0,
            at: 0,
            result: result(0, step),
        });
        for page in &mut pages {
            let mut line = String::new();
            loop {
                line.clear();
                page.read_line(&mut line).unwrap();
                if line.contains(&format!("\"step\":{step}")) {
                    break;
                }
            }
        }
        fan.push(start.elapsed());
    }
    fan.sort();
    println!(
        "| a report's fan-out to 10 open pages (50 reports) | median {} / max {} | |",
        ms(fan[fan.len() / 2]),
        ms(*fan.last().unwrap())
    );

    optuna_dashboard(root.path(), &trials);
}

/// optuna-dashboard 0.21.0 on the same trials as an Optuna journal: when its server answers,
/// and its study request (every trial in one answer), time and bytes.
fn optuna_dashboard(root: &Path, trials: &[Trial]) {
    let journal = root.join("bench.log");
    let spec = tune::ExperimentSpec::from_toml(SPEC, Path::new("spec.toml")).unwrap();
    let mut out = std::io::BufWriter::new(std::fs::File::create(&journal).unwrap());
    tune::export::write_optuna_journal(
        &mut out,
        "bench",
        trials,
        &spec.space,
        &spec.objectives(),
        &Default::default(),
    )
    .unwrap();
    out.flush().unwrap();
    drop(out);
    let python = tune_testkit::python::optuna_dashboard_python();
    let script = r#"
import json, socket, subprocess, sys, time, urllib.request
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
command = [sys.executable, "-c", "import sys; from optuna_dashboard._cli import main; sys.exit(main())"]
started = time.time()
server = subprocess.Popen(command + [sys.argv[1], "--host", "127.0.0.1", "--port", str(port)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
base = f"http://127.0.0.1:{port}"
try:
    while True:
        if server.poll() is not None:
            sys.exit("optuna-dashboard exited: " + server.stderr.read().decode()[-2000:])
        try:
            urllib.request.urlopen(base + "/api/studies", timeout=600).read()
            break
        except OSError:
            time.sleep(0.1)
    ready = time.time() - started
    times, size = [], 0
    for _ in range(3):
        t = time.time()
        size = len(urllib.request.urlopen(base + "/api/studies/0?after=0", timeout=600).read())
        times.append(time.time() - t)
    print(json.dumps({"ready": ready, "study": sorted(times)[1], "bytes": size}))
finally:
    server.terminate(); server.wait()
"#;
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(&journal)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    match serde_json::from_str::<serde_json::Value>(text.trim()) {
        Ok(v) => {
            println!("\n| optuna-dashboard 0.21.0, same trials (journal) | ms | KiB |");
            println!("|---|---|---|");
            println!(
                "| server answers `/api/studies` after start | {:.0} | |",
                v["ready"].as_f64().unwrap_or(0.0) * 1e3
            );
            println!(
                "| `/api/studies/0?after=0` (its first paint's data: every trial) | {:.0} | {} |",
                v["study"].as_f64().unwrap_or(0.0) * 1e3,
                kib(v["bytes"].as_u64().unwrap_or(0) as usize)
            );
        }
        Err(_) => println!(
            "\noptuna-dashboard did not load the journal: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or_default()
        ),
    }
}
