//! Sweeps kept in PostgreSQL (`--store URL`, `TUNE_STORE`), through the real binary, against
//! the test server (testkit/src/pg_server.rs: `TUNE_TEST_DATABASE_URL`, or a private one).

use crate::common;
use tune_testkit::pg_server;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::*;

fn with_store(mut cmd: Command, url: &str) -> Command {
    cmd.env("TUNE_STORE", url);
    cmd
}

/// `tune run SPEC --store URL --dir DIR`, or `tune resume t --store URL --dir DIR` once the
/// experiment (named `t` by `write_spec`) exists there.
fn run_or_resume_in(spec: &Path, url: &str, dir: &Path, started: bool) -> Command {
    let mut cmd = tune();
    if started {
        cmd.args(["resume", "t"]);
    } else {
        cmd.arg("run").arg(spec);
    }
    cmd.args(["--store", url]).arg("--dir").arg(dir);
    cmd
}

fn export_in(url: &str) -> Vec<serde_json::Value> {
    let out = run_ok(with_store(tune(), url).args(["export", "t", "--format", "json"]));
    match serde_json::from_slice(&out.stdout).unwrap() {
        serde_json::Value::Array(v) => v,
        other => panic!("export is not an array: {other}"),
    }
}

#[test]
fn a_sweep_in_postgres_killed_and_resumed_decides_as_the_same_sweep_in_a_folder() {
    let want = uninterrupted_band();
    let tmp = tempfile::tempdir().unwrap();
    let spec = hyperband_band(tmp.path());
    let url = pg_server::fresh_database();
    let dir = tmp.path().join("trials-here");
    // SIGKILL right after the 3rd, 10th, 15th and 22nd acknowledged results.
    for (round, gap) in [3, 7, 5, 7].into_iter().enumerate() {
        let due = acked_so_far(tmp.path()) + gap;
        set_kill_switch(tmp.path(), &due.to_string());
        let out = run_or_resume_in(&spec, &url, &dir, round > 0)
            .stdout(Stdio::null())
            .output()
            .unwrap();
        assert!(killed(&out), "round {round}: {}", stderr(&out));
    }
    run_ok(&mut run_or_resume_in(&spec, &url, &dir, true));
    let trials = export_in(&url);
    assert_acknowledged_results_kept(tmp.path(), &by_id(trials.clone()));
    assert_eq!(outcome(&trials), want);
    // The folder says where the records are, and status reads them.
    let out = tune().arg("status").arg(&dir).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("its records are in PostgreSQL"),
        "{}",
        stderr(&out)
    );
    let out = run_ok(with_store(tune(), &url).args(["status", "t"]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("trials: 17 of 17 created"), "{text}");
}

/// Runs `args` with `TUNE_STORE` = `store` (when given): the exit code and stderr's first line.
fn outcome_of(args: &[&str], store: Option<&str>, cwd: &Path) -> (Option<i32>, String) {
    let mut cmd = tune();
    cmd.args(args).current_dir(cwd).env_remove("TUNE_STORE");
    if let Some(url) = store {
        cmd.env("TUNE_STORE", url);
    }
    let out: Output = cmd.output().unwrap();
    let first = stderr(&out).lines().next().unwrap_or_default().to_string();
    assert!(
        !stderr(&out).contains("panicked"),
        "{args:?}: {}",
        stderr(&out)
    );
    (out.status.code(), first)
}

#[test]
fn bad_store_input_is_refused_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(
        tmp.path(),
        "samples = 2",
        &[],
        "x = { uniform = [-1.0, 1.0] }",
    );
    let spec = spec.to_str().unwrap();
    let url = pg_server::fresh_database();
    run_ok(
        tune()
            .args(["run", spec, "--store", &url])
            .current_dir(tmp.path()),
    );
    let free_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let unreachable = format!("postgres://tune:hunter2@127.0.0.1:{free_port}/tune");
    let cases: Vec<(Vec<&str>, Option<&str>, i32, String)> = vec![
        (
            vec!["status", "t", "--store", "mysql://db/tune"],
            None,
            2,
            "error: --store: expected a postgres:// URL, found \"mysql://db/tune\"".into(),
        ),
        (
            vec!["status", "t"],
            Some(&unreachable),
            1,
            format!("error: postgres://tune@127.0.0.1:{free_port}/tune (experiment \"t\"): "),
        ),
        (
            vec!["status", "nope"],
            Some(&url),
            2,
            "no experiment named \"nope\" there".into(),
        ),
        (
            vec!["resume", "nope"],
            Some(&url),
            2,
            "no experiment named \"nope\" there".into(),
        ),
        (
            vec!["run", spec],
            Some(&url),
            2,
            "already holds an experiment named \"t\"; resume it, or give the new sweep another name"
                .into(),
        ),
        (
            vec!["resume", "runs/t"],
            None,
            2,
            "error: runs/t: not a tune experiment (its records are in PostgreSQL".into(),
        ),
        (
            vec!["resume", "runs/t", "--dir", "elsewhere"],
            None,
            2,
            "error: --dir is for an experiment in a database (--store)".into(),
        ),
        (
            vec!["export", "t", "--salvage"],
            Some(&url),
            2,
            "error: --salvage reads a damaged sled store".into(),
        ),
    ];
    for (args, store, code, message) in &cases {
        let (got, first) = outcome_of(args, *store, tmp.path());
        assert_eq!(got, Some(*code), "{args:?}: {first}");
        assert!(first.contains(message.as_str()), "{args:?}: {first}");
        assert!(!first.contains("hunter2"), "{args:?}: {first}");
    }
    // A database written by a newer tune.
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    admin
        .execute("INSERT INTO tune_schema (version) VALUES (99)", &[])
        .unwrap();
    let (got, first) = outcome_of(&["status", "t"], Some(&url), tmp.path());
    assert_eq!(got, Some(1), "{first}");
    assert!(first.contains("was written in store format 99"), "{first}");
}

#[test]
fn the_rust_api_keeps_a_sweep_in_postgres_and_resumes_it_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let at = tune::experiment::StoreLocation::Postgres(pg_server::fresh_database());
    let space = tune::Space::builder()
        .uniform("x", -1.0, 1.0)
        .build()
        .unwrap();
    let objective = |ctx: &mut tune::TrialContext| -> Result<(), tune::BoxError> {
        let x = ctx.params().f64("x")?;
        ctx.report(1, [("loss", x * x)])?;
        Ok(())
    };
    let first = tune::Tuner::new(space.clone())
        .name("api")
        .samples(6)
        .seed(4)
        .dir(tmp.path().join("here"))
        .store(at.clone())
        .fit(objective)
        .unwrap();
    assert_eq!(first.trials().unwrap().len(), 6);
    assert!(!tmp.path().join("here").join("tune.db").exists());
    // Resumed by name from another folder, as another machine would.
    let more = tune::Tuner::resume_in(at, "api")
        .dir(tmp.path().join("there"))
        .samples(10)
        .fit(objective)
        .unwrap();
    let trials = more.trials().unwrap();
    assert_eq!(trials.len(), 10);
    let whole = tune::Tuner::new(space)
        .samples(10)
        .seed(4)
        .dir(tmp.path().join("whole"))
        .fit(objective)
        .unwrap();
    let params = |ts: Vec<tune::Trial>| ts.into_iter().map(|t| t.params).collect::<Vec<_>>();
    assert_eq!(params(trials), params(whole.trials().unwrap()));
}

/// Whether experiment `t` was created (its record written). Another error (the server slow to
/// answer on a loaded machine) is asked again: it says nothing either way.
fn experiment_created(url: &str) -> bool {
    for _ in 0..100 {
        match tune::experiment::Experiment::read_postgres(url, "t") {
            Ok(_) => return true,
            Err(tune::TuneError::NotAnExperiment { .. }) => return false,
            Err(e) => {
                eprintln!("reading experiment t: {e}; asking again");
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
        }
    }
    panic!("experiment t could not be read")
}

#[test]
fn a_kill_at_any_failure_point_of_a_sweep_in_postgres_resumes_to_the_uninterrupted_sweep() {
    let want = uninterrupted_band();
    // The points a sweep in PostgreSQL reaches (creation and exploits are the folder's).
    for point in [
        "store.write",
        "store.sync.before",
        "store.sync.after",
        "ack.before",
        "ack.after",
    ] {
        assert!(tune::failpoint::POINTS.contains(&point), "{point}");
        let case = tempfile::tempdir().unwrap();
        let spec = hyperband_band(case.path());
        let url = pg_server::fresh_database();
        let dir = case.path().join("here");
        let kills = kill_at_point_until_done(point, || {
            run_or_resume_in(&spec, &url, &dir, experiment_created(&url))
        });
        assert!(kills >= 3, "{point}: killed only {kills} times");
        let trials = export_in(&url);
        assert_acknowledged_results_kept(case.path(), &by_id(trials.clone()));
        assert_eq!(outcome(&trials), want, "killed at {point}");
    }
}

/// Starts the HyperBand band in `tmp` on `url`, held after its 5th round of acknowledgements
/// until `go` exists; returns it once it runs (its connection made, results stored), with an
/// admin connection to the same database.
fn band_held_at_its_fifth_round(
    tmp: &Path,
    url: &str,
    go: &Path,
) -> (std::process::Child, postgres::Client) {
    let spec = hyperband_band(tmp);
    let sweep = run_or_resume_in(&spec, url, &tmp.join("here"), false)
        .env(
            "TUNE_FAILPOINTS",
            format!("ack.after=wait-{}@5", go.display()),
        )
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(tmp.join("stderr")).unwrap())
        .spawn()
        .unwrap();
    let mut admin = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let mut count = |sql: &str| -> i64 { admin.query_one(sql, &[]).map_or(0, |r| r.get(0)) };
        let connections = count(&format!(
            "SELECT count(*) FROM pg_stat_activity WHERE {OTHER_SESSIONS}"
        ));
        let results = count("SELECT count(*) FROM tune_results");
        if connections > 0 && results > 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the sweep never started: {connections} connections, {results} results, {}",
            std::fs::read_to_string(tmp.join("stderr")).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    (sweep, admin)
}

/// The sessions of this database but the admin's own.
const OTHER_SESSIONS: &str = "datname = current_database() AND pid <> pg_backend_pid()";

/// The server ends the sweep's connections (as a restart or a failover does): the sweep
/// connects again, takes its experiment again and ends as the uninterrupted one.
#[test]
fn a_sweep_whose_database_connection_is_cut_connects_again_and_ends_as_uninterrupted() {
    let want = uninterrupted_band();
    let tmp = tempfile::tempdir().unwrap();
    let url = pg_server::fresh_database();
    let go = tmp.path().join("go");
    let (sweep, mut admin) = band_held_at_its_fifth_round(tmp.path(), &url, &go);
    admin
        .execute(
            &format!(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE {OTHER_SESSIONS}"
            ),
            &[],
        )
        .unwrap();
    std::fs::write(&go, "").unwrap();
    let status = sweep.wait_with_output().unwrap().status;
    let message = std::fs::read_to_string(tmp.path().join("stderr")).unwrap();
    assert!(status.success(), "{message}");
    assert!(!message.contains("panicked"), "{message}");
    let trials = export_in(&url);
    assert_acknowledged_results_kept(tmp.path(), &by_id(trials.clone()));
    assert_eq!(outcome(&trials), want);
}

/// The database refuses the sweep for longer than a coordinator rides out (its connections
/// ended, new ones refused): the sweep stops cleanly, saying how to resume, and the resume
/// once the database is back ends as the uninterrupted sweep.
#[test]
fn a_database_gone_for_longer_than_ridden_out_stops_the_sweep_cleanly_and_it_resumes_exactly() {
    let want = uninterrupted_band();
    let tmp = tempfile::tempdir().unwrap();
    let url = pg_server::fresh_database();
    let go = tmp.path().join("go");
    let (sweep, admin) = band_held_at_its_fifth_round(tmp.path(), &url, &go);
    drop(admin);
    // From the server's own database: a database cannot refuse the session altering it.
    let mut config: postgres::Config = url.parse().unwrap();
    let database = config.get_dbname().unwrap().to_string();
    let mut admin = config.dbname("postgres").connect(postgres::NoTls).unwrap();
    admin
        .batch_execute(&format!(
            "ALTER DATABASE \"{database}\" WITH ALLOW_CONNECTIONS false;
             SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}'"
        ))
        .unwrap();
    std::fs::write(&go, "").unwrap();
    let status = sweep.wait_with_output().unwrap().status;
    let message = std::fs::read_to_string(tmp.path().join("stderr")).unwrap();
    assert_eq!(status.code(), Some(1), "{message}");
    assert!(message.contains("(experiment \"t\")"), "{message}");
    assert!(message.contains("`tune resume t --store URL`"), "{message}");
    assert!(!message.contains("panicked"), "{message}");
    admin
        .batch_execute(&format!(
            "ALTER DATABASE \"{database}\" WITH ALLOW_CONNECTIONS true"
        ))
        .unwrap();
    let spec = tmp.path().join("space.toml");
    run_ok(&mut run_or_resume_in(
        &spec,
        &url,
        &tmp.path().join("here"),
        true,
    ));
    let trials = export_in(&url);
    assert_acknowledged_results_kept(tmp.path(), &by_id(trials.clone()));
    assert_eq!(outcome(&trials), want);
}

#[test]
fn a_sweep_in_postgres_extended_by_max_t_and_killed_decides_as_the_higher_max_t_from_the_start() {
    let tmp = tempfile::tempdir().unwrap();
    let url = pg_server::fresh_database();
    let short = tmp.path().join("short");
    let spec = random_asha_to(&short, 9);
    let dir = short.join("here");
    run_ok(&mut run_or_resume_in(&spec, &url, &dir, false));
    set_kill_switch(&short, "step 12");
    let out = run_or_resume_in(&spec, &url, &dir, true)
        .args(["--max-t", "27"])
        .output()
        .unwrap();
    assert!(killed(&out), "{}", stderr(&out));
    run_ok(&mut run_or_resume_in(&spec, &url, &dir, true));

    let whole = tmp.path().join("whole");
    let spec = random_asha_to(&whole, 27);
    run_ok(&mut tune_run(&spec, &whole.join("run")));
    let raised = export_in(&url);
    assert_eq!(outcome(&raised), outcome(&export_json(&whole.join("run"))));
    assert!(raised.iter().any(|t| steps(t).last() == Some(&27)));
}
