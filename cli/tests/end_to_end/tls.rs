//! PostgreSQL over TLS through the real binary: a sweep on a `tune worker` over
//! `sslmode=verify-full`, read by every command, and certificates the checks refuse, each an
//! exit code 2 naming the check, in every command that connects. The servers are testkit's
//! (testkit/src/pg_tls_server.rs); they take no TCP connection without TLS.

use crate::common;
use crate::workers::{attempts_ran, coordinator, export_in, finish_ok, spawn, worker};
use tune_testkit::pg_tls_server::{fresh_tls_database, ServerCert, TlsDatabase, PASSWORD};

use std::path::Path;
use std::process::Command;

use common::*;

fn verified(db: &TlsDatabase, host: &str, ca: &str, extra: &str) -> String {
    db.password_url(
        host,
        &format!(
            "sslmode=verify-full&sslrootcert={}{extra}",
            db.file(ca).display()
        ),
    )
}

/// Every file under `dir`, and `texts`, without the password.
fn assert_no_password(dir: &Path, texts: &[String]) {
    for text in texts {
        assert!(!text.contains(PASSWORD), "the password shown: {text}");
    }
    for entry in walk(dir) {
        let bytes = std::fs::read(&entry).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains(PASSWORD),
            "the password in {}",
            entry.display()
        );
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// `cmd` as a machine without `~/.postgresql/` runs it (libpq's default files are read from
/// there).
fn homeless(mut cmd: Command, home: &Path) -> Command {
    cmd.env("HOME", home);
    cmd
}

#[test]
fn a_sweep_over_verify_full_runs_on_a_worker_and_every_command_reads_it() {
    let tmp = tempfile::tempdir().unwrap();
    let db = fresh_tls_database(ServerCert::Valid);
    let url = verified(&db, "localhost", "ca.pem", "");
    let spec = write_spec(
        tmp.path(),
        "samples = 3\nseed = 1",
        &["--steps", "2"],
        "x = { uniform = [-3.0, 3.0] }",
    );
    let coord = spawn(homeless(
        coordinator(&spec, &url, &tmp.path().join("c")),
        tmp.path(),
    ));
    let mut w = homeless(worker(&url, 2, "15", &tmp.path().join("w")), tmp.path());
    w.args(["--wait", "300"]);
    let w = spawn(w);
    let mut shown = vec![stderr(&finish_ok(coord, "the coordinator"))];
    let out = finish_ok(w, "the worker");
    assert_eq!(attempts_ran(&out), 3);
    shown.push(stderr(&out));
    let trials = export_in(&url);
    assert_eq!(trials.len(), 3);
    assert!(
        trials.iter().all(|t| t["status"] == "completed"),
        "{trials:?}"
    );
    for command in [&["status"][..], &["watch"], &["export", "--format", "csv"]] {
        let mut cmd = homeless(tune(), tmp.path());
        cmd.arg(command[0])
            .args(["t", "--store", &url])
            .args(&command[1..]);
        let out = run_ok(&mut cmd);
        shown.push(String::from_utf8_lossy(&out.stdout).into_owned());
        shown.push(stderr(&out));
    }
    assert_no_password(tmp.path(), &shown);
}

#[test]
fn a_certificate_the_checks_refuse_exits_2_naming_the_check_in_every_command() {
    let tmp = tempfile::tempdir().unwrap();
    let db = fresh_tls_database(ServerCert::Valid);
    let expired = fresh_tls_database(ServerCert::Expired);
    let spec = write_spec(
        tmp.path(),
        "samples = 1",
        &["--steps", "1"],
        "x = { uniform = [-3.0, 3.0] }",
    );
    let cases = [
        (
            verified(&db, "localhost", "other-ca.pem", ""),
            "the server's certificate is not signed by the CA in sslrootcert",
        ),
        (
            verified(&db, "not-the-server", "ca.pem", "&hostaddr=127.0.0.1"),
            "the server's certificate is not issued for the host the URL names",
        ),
        (
            verified(&expired, "localhost", "ca.pem", ""),
            "the server's certificate has expired",
        ),
        (
            db.password_url("localhost", "sslmode=verify-ca"),
            "sslmode=verify-ca checks the server's certificate against a CA, and the URL names none",
        ),
    ];
    for (url, says) in cases {
        let commands: [Vec<String>; 5] = [
            vec![
                "run".into(),
                spec.display().to_string(),
                "--store".into(),
                url.clone(),
            ],
            vec![
                "worker".into(),
                url.clone(),
                "--experiment".into(),
                "t".into(),
            ],
            vec!["status".into(), "t".into(), "--store".into(), url.clone()],
            vec!["watch".into(), "t".into(), "--store".into(), url.clone()],
            vec!["export".into(), "t".into(), "--store".into(), url.clone()],
        ];
        for args in commands {
            let mut cmd = homeless(tune(), tmp.path());
            cmd.args(&args).current_dir(tmp.path());
            if args[0] == "run" || args[0] == "worker" {
                cmd.arg("--dir").arg(tmp.path().join("runs"));
            }
            let out = cmd.output().unwrap();
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(2), "tune {}: {err}", args[0]);
            assert!(err.contains(says), "tune {}: {err}", args[0]);
            assert!(err.contains("TLS: "), "tune {}: {err}", args[0]);
            assert_no_password(tmp.path(), &[err]);
        }
    }
}
