//! A PostgreSQL server for the tests: `TUNE_TEST_DATABASE_URL` when set, else a private,
//! throwaway server started once per test process (initdb + postgres from the installed
//! binaries, in a temporary folder, on a free loopback port) and stopped when the process ends.
//! Each caller gets a database of its own. Shared by the unit tests (`src/store/mod.rs`
//! includes this file) and the integration tests.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The server every test of this process uses: the URL of its maintenance database.
struct Server {
    admin_url: String,
    /// The watchdog shell that stops the private server when this process exits (its stdin
    /// closes then); `None` for a server given by `TUNE_TEST_DATABASE_URL`.
    _watchdog: Option<Mutex<Child>>,
}

static SERVER: OnceLock<Server> = OnceLock::new();

/// The URL of a new, empty database on the test server, for one test.
pub fn fresh_database() -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let server = SERVER.get_or_init(start);
    let name = format!(
        "tune_test_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let mut admin = postgres::Client::connect(&server.admin_url, postgres::NoTls)
        .unwrap_or_else(|e| panic!("the test PostgreSQL at {}: {e}", server.admin_url));
    // One statement each: CREATE DATABASE cannot run in a (multi-statement) transaction.
    for sql in [
        format!("DROP DATABASE IF EXISTS {name}"),
        format!("CREATE DATABASE {name}"),
    ] {
        admin
            .batch_execute(&sql)
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }
    with_database(&server.admin_url, &name)
}

/// `url` with its database (the last path segment) replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let host_end = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{name}", &base[..host_end]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

fn start() -> Server {
    if let Ok(url) = std::env::var("TUNE_TEST_DATABASE_URL") {
        return Server {
            admin_url: url,
            _watchdog: None,
        };
    }
    let cluster = Cluster::init("tune-pg-", |_| ());
    let admin_url = format!("postgres://tune@127.0.0.1:{}/postgres", cluster.port);
    let watchdog = cluster.launch("", || {
        postgres::Client::connect(&admin_url, postgres::NoTls)
    });
    Server {
        admin_url,
        _watchdog: Some(Mutex::new(watchdog)),
    }
}

/// A private PostgreSQL cluster made by `initdb` (as nobody when this process is root), not yet
/// running: its folder (the server's log and Unix socket are there), data folder and port.
pub(crate) struct Cluster {
    bin: PathBuf,
    pub(crate) root: PathBuf,
    pub(crate) data: PathBuf,
    pub(crate) port: u16,
    as_root: bool,
}

impl Cluster {
    /// `initdb` in a new temporary folder (named from `prefix`); `prepare` then writes what
    /// the server needs in the folder (certificates, pg_hba.conf) before it is handed to the
    /// server's user.
    pub(crate) fn init(prefix: &str, prepare: impl FnOnce(&Cluster)) -> Cluster {
        let bin = postgres_bin().unwrap_or_else(|| {
            panic!(
                "PostgreSQL is not installed: the tests start a private server with its `initdb` \
                 and `postgres` (Debian: apt-get install postgresql), or set \
                 TUNE_TEST_DATABASE_URL to a server where the user may create databases"
            )
        });
        let root = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir()
            .unwrap()
            .keep();
        let as_root = effective_uid() == 0;
        if as_root {
            // initdb refuses root: the server runs as nobody, in a folder nobody owns.
            chown_nobody(&root);
        }
        let data = root.join("data");
        let initdb = privileged(as_root, &bin.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args(["-U", "tune", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .stdout(Stdio::null())
            .output()
            .expect("running initdb");
        assert!(
            initdb.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&initdb.stderr)
        );
        let cluster = Cluster {
            bin,
            root,
            data,
            port: free_port(),
            as_root,
        };
        prepare(&cluster);
        if as_root {
            let status = Command::new("chown")
                .args(["-R", "65534:65534"])
                .arg(&cluster.root)
                .status()
                .expect("chown");
            assert!(
                status.success(),
                "chown -R nobody {}",
                cluster.root.display()
            );
        }
        cluster
    }

    /// Starts the server with `settings` (more `-c name=value` arguments) and waits until
    /// `ready` connects. The watchdog shell returned stops the server, and removes its folder,
    /// when its stdin (held by this process) closes: when this process ends.
    pub(crate) fn launch<T, E: std::fmt::Display>(
        &self,
        settings: &str,
        ready: impl Fn() -> Result<T, E>,
    ) -> Child {
        let log = self.root.join("server.log");
        let script = format!(
            "{postgres} -D {data} -p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off \
             -c max_connections=200 {settings} >{log} 2>&1 & pid=$!; cat >/dev/null; \
             kill -INT $pid; wait $pid; rm -rf {root}",
            postgres = self.bin.join("postgres").display(),
            data = self.data.display(),
            port = self.port,
            root = self.root.display(),
            log = log.display(),
        );
        let mut sh = privileged(self.as_root, Path::new("sh"));
        let mut watchdog = sh
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .spawn()
            .expect("starting postgres");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match ready() {
                Ok(_) => break,
                Err(e) if Instant::now() > deadline => panic!(
                    "the private PostgreSQL did not start: {e}\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                ),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        // Nothing is ever written: the pipe only has to stay open while this process lives.
        let _ = watchdog.stdin.as_mut().map(|s| s.flush());
        watchdog
    }
}

/// `program`, run as nobody when this process is root.
fn privileged(as_root: bool, program: &Path) -> Command {
    if as_root {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(program);
        cmd
    } else {
        Command::new(program)
    }
}

fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn chown_nobody(dir: &Path) {
    let status = Command::new("chown")
        .args(["65534:65534"])
        .arg(dir)
        .status()
        .expect("chown");
    assert!(status.success(), "chown nobody {}", dir.display());
}

/// Where `initdb` and `postgres` are: on PATH, or Debian's /usr/lib/postgresql/<v>/bin.
fn postgres_bin() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>());
    let mut debian: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .collect();
    debian.sort();
    debian.reverse();
    on_path
        .chain(debian)
        .find(|dir| dir.join("initdb").is_file() && dir.join("postgres").is_file())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A private server of one test's own, run by `pg_ctl` so that the test can restart it
/// ([`RestartableServer::restart`]); stopped, and its folder removed, when the test process
/// ends. It listens on 127.0.0.1 and on `also_on` (addresses of network namespaces the test
/// made: testkit/src/netns.rs), trusting every connection from them.
pub struct RestartableServer {
    cluster: Cluster,
    _watchdog: Mutex<Child>,
}

impl RestartableServer {
    pub fn start(also_on: &[std::net::Ipv4Addr]) -> RestartableServer {
        let cluster = Cluster::init("tune-pg-restartable-", |c| {
            let hba = c.data.join("pg_hba.conf");
            let mut text = std::fs::read_to_string(&hba).unwrap();
            // The namespaces' own ends connect from their 10.x addresses; the server listens
            // only where those namespaces reach it.
            text += "host all all 10.0.0.0/8 trust\n";
            std::fs::write(&hba, text).unwrap();
        });
        let listen: Vec<String> = std::iter::once("127.0.0.1".to_string())
            .chain(also_on.iter().map(|a| a.to_string()))
            .collect();
        let options = format!(
            "-p {port} -k {root} -c listen_addresses={listen} -c fsync=off -c max_connections=200",
            port = cluster.port,
            root = cluster.root.display(),
            listen = listen.join(","),
        );
        let log = cluster.root.join("server.log");
        let started = cluster
            .pg_ctl()
            .args(["-w", "-t", "60", "-l"])
            .arg(&log)
            .args(["-o", &options, "start"])
            .output()
            .expect("pg_ctl start");
        assert!(
            started.status.success(),
            "pg_ctl start: {}{}",
            String::from_utf8_lossy(&started.stderr),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        let script = format!(
            "cat >/dev/null; {pg_ctl} -D {data} -m immediate stop >/dev/null; rm -rf {root}",
            pg_ctl = cluster.bin.join("pg_ctl").display(),
            data = cluster.data.display(),
            root = cluster.root.display(),
        );
        let mut watchdog = privileged(cluster.as_root, Path::new("sh"))
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .spawn()
            .expect("the server's watchdog");
        let _ = watchdog.stdin.as_mut().map(|s| s.flush());
        RestartableServer {
            cluster,
            _watchdog: Mutex::new(watchdog),
        }
    }

    /// The URL of database `postgres` on `host` (127.0.0.1 or one of `also_on`).
    pub fn url(&self, host: impl std::fmt::Display) -> String {
        format!("postgres://tune@{host}:{}/postgres", self.cluster.port)
    }

    /// Where it listens on loopback.
    pub fn loopback(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.cluster.port))
    }

    /// `pg_ctl restart -m fast`: every connection is closed, and the server is back (it
    /// accepts connections) when this returns.
    pub fn restart(&self) {
        let out = self
            .cluster
            .pg_ctl()
            .args(["-w", "-t", "60", "-m", "fast", "-l"])
            .arg(self.cluster.root.join("server.log"))
            .arg("restart")
            .output()
            .expect("pg_ctl restart");
        assert!(
            out.status.success(),
            "pg_ctl restart: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Cluster {
    fn pg_ctl(&self) -> Command {
        let mut cmd = privileged(self.as_root, &self.bin.join("pg_ctl"));
        cmd.arg("-D").arg(&self.data).stdout(Stdio::null());
        cmd
    }
}
