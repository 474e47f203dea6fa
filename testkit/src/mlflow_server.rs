//! A private, throwaway MLflow tracking server for the tests and benches: `mlflow server` from
//! a pinned virtual environment, on a free loopback port, its SQLite store and artifacts in a
//! temporary folder; stopped (its whole process group) when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct MlflowServer {
    pub url: String,
    port: u16,
    dir: tempfile::TempDir,
    python: PathBuf,
    child: Option<Child>,
    /// With MLflow's basic-auth app: its admin's user name and password.
    admin: Option<(String, String)>,
}

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl MlflowServer {
    /// A server on a free port, started and answering.
    pub fn start(python: &Path) -> MlflowServer {
        let mut server = MlflowServer::stopped(python, free_port());
        server.resume();
        server
    }

    /// A server on a free port that runs MLflow's basic-auth app (`--app-name basic-auth`),
    /// its users kept in the server's folder, `user` its admin with `password`: every request
    /// needs their credentials.
    pub fn start_with_basic_auth(python: &Path, user: &str, password: &str) -> MlflowServer {
        let mut server = MlflowServer::stopped(python, free_port());
        server.admin = Some((user.to_string(), password.to_string()));
        server.resume();
        server
    }

    /// A server that will listen on `port` once [`MlflowServer::resume`]d.
    pub fn stopped(python: &Path, port: u16) -> MlflowServer {
        MlflowServer {
            url: format!("http://127.0.0.1:{port}"),
            port,
            dir: tempfile::tempdir().unwrap(),
            python: python.to_path_buf(),
            child: None,
            admin: None,
        }
    }

    /// Starts it (again, on the same port and store) and waits until it answers.
    pub fn resume(&mut self) {
        assert!(self.child.is_none(), "already running");
        let log = std::fs::File::create(self.dir.path().join("server.log")).unwrap();
        let mut cmd = Command::new(&self.python);
        cmd.args([
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--workers",
            "1",
        ])
        .arg("--port")
        .arg(self.port.to_string())
        .arg("--backend-store-uri")
        .arg(format!(
            "sqlite:///{}",
            self.dir.path().join("mlflow.db").display()
        ))
        .arg("--default-artifact-root")
        .arg(self.dir.path().join("artifacts"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
        if let Some((user, password)) = &self.admin {
            let config = self.dir.path().join("basic_auth.ini");
            std::fs::write(
                &config,
                format!(
                    "[mlflow]\ndefault_permission = READ\ndatabase_uri = sqlite:///{}\n\
                     admin_username = {user}\nadmin_password = {password}\n\
                     authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n",
                    self.dir.path().join("basic_auth.db").display()
                ),
            )
            .unwrap();
            // The app's forms need a fixed key (CSRF); a throwaway server's own will do.
            cmd.args(["--app-name", "basic-auth"])
                .env("MLFLOW_AUTH_CONFIG_PATH", config)
                .env(
                    "MLFLOW_FLASK_SERVER_SECRET_KEY",
                    format!("tune-test-{}", self.port),
                );
        }
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        self.child = Some(cmd.spawn().expect("starting mlflow server"));
        let health = format!("{}/health", self.url);
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(5)))
            .build()
            .into();
        let since = Instant::now();
        // Its start is slow (seconds) and slower on a loaded machine; this only waits for it.
        while agent.get(&health).call().is_err() {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("mlflow server exited ({status}): {}", self.log());
            }
            assert!(
                since.elapsed() < Duration::from_secs(300),
                "mlflow server did not answer in 300 s: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Stops it (every process of it); its store stays for [`MlflowServer::resume`].
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) with a process group id; the group is the server's own (it was
            // started as a group leader) and is still there until it is waited for below.
            unsafe {
                libc::kill(-(child.id() as i32), libc::SIGKILL);
            }
            let _ = child.wait();
        }
    }

    /// CPU seconds (user + system) its processes have used so far, from /proc (Linux): what
    /// the overhead bench weighs against tune's own.
    #[allow(dead_code)] // the bench's, not the tests'
    pub fn cpu_seconds(&self) -> f64 {
        let Some(group) = self.child.as_ref().map(|c| c.id().to_string()) else {
            return 0.0;
        };
        // SAFETY: sysconf reads a constant of the system.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let mut total = 0.0;
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // After the command's ")": state, ppid, pgrp, ..., utime (12th), stime (13th).
            let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
                continue;
            };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            if fields.get(2) == Some(&group.as_str()) {
                let t = |i: usize| {
                    fields
                        .get(i)
                        .and_then(|f| f.parse::<f64>().ok())
                        .unwrap_or(0.0)
                };
                total += (t(11) + t(12)) / ticks;
            }
        }
        total
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

impl Drop for MlflowServer {
    fn drop(&mut self) {
        self.stop();
    }
}
