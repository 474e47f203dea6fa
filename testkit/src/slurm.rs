//! A private, throwaway Slurm cluster on this machine: munged, slurmctld and one slurmd per node
//! (each a node of 64 CPUs, whatever the machine has, so that recipes run as written; several
//! nodes are several slurmd on this one machine, each with a port and spool of its own), in a
//! temporary folder, on free loopback ports; stopped, with every job it still holds, when
//! dropped.
//!
//! Slurm's daemons run as root here (CI runs as root): [`SlurmCluster::start`] says so
//! clearly elsewhere. Debian's `slurm-wlm` and `munge` (`.ci/run` installs them).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The name of node `i` (from 1) in the cluster.
pub fn node(i: usize) -> String {
    format!("tnode{i}")
}

/// A running cluster; its commands (`sbatch`, `squeue`) come from [`SlurmCluster::command`].
pub struct SlurmCluster {
    dir: tempfile::TempDir,
    nodes: usize,
}

impl SlurmCluster {
    /// Starts munged, slurmctld and one slurmd, and waits until the node is idle.
    pub fn start() -> SlurmCluster {
        SlurmCluster::with_nodes(1)
    }

    /// Starts munged, slurmctld and `nodes` slurmd (nodes `tnode1`, `tnode2`, ...), and waits
    /// until every node is idle.
    pub fn with_nodes(nodes: usize) -> SlurmCluster {
        // SAFETY: geteuid(2) reads the process's effective user id; nothing else.
        let root = unsafe { libc::geteuid() } == 0;
        assert!(
            root,
            "the Slurm test starts a cluster's daemons (slurmctld, slurmd, munged), which run as \
             root: run the suite as root, as CI does"
        );
        for name in ["munged", "mungekey", "slurmctld", "slurmd", "sbatch"] {
            assert!(
                program(name).is_file(),
                "`{name}` is missing: the Slurm test needs Debian's slurm-wlm and munge \
                 (`.ci/run` installs them)"
            );
        }
        let dir = tempfile::tempdir().expect("a folder for the cluster");
        let d = dir.path();
        for sub in ["state", "spool", "log", "munge"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        run(Command::new(program("mungekey"))
            .args(["--create", "--keyfile"])
            .arg(d.join("munge/munge.key")));
        std::fs::set_permissions(
            d.join("munge"),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        run(Command::new(program("munged"))
            .arg("--force")
            .arg(format!(
                "--key-file={}",
                d.join("munge/munge.key").display()
            ))
            .arg(format!(
                "--socket={}",
                d.join("munge/munge.socket").display()
            ))
            .arg(format!(
                "--pid-file={}",
                d.join("munge/munged.pid").display()
            ))
            .arg(format!(
                "--log-file={}",
                d.join("munge/munged.log").display()
            ))
            .arg(format!(
                "--seed-file={}",
                d.join("munge/munged.seed").display()
            )));
        let ctld_port = free_port();
        let node_lines: String = (1..=nodes)
            .map(|i| {
                std::fs::create_dir_all(d.join("spool").join(node(i))).unwrap();
                format!(
                    "NodeName={} NodeHostname=localhost NodeAddr=127.0.0.1 Port={} CPUs=64 \
                     State=UNKNOWN\n",
                    node(i),
                    free_port()
                )
            })
            .collect();
        let names: Vec<String> = (1..=nodes).map(node).collect();
        let names = names.join(",");
        let d_str = d.display();
        let conf = format!(
            "ClusterName=tunetest\n\
             SlurmctldHost=localhost(127.0.0.1)\n\
             SlurmctldPort={ctld_port}\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             AuthType=auth/munge\n\
             AuthInfo=socket={d_str}/munge/munge.socket\n\
             CredType=cred/munge\n\
             StateSaveLocation={d_str}/state\n\
             SlurmdSpoolDir={d_str}/spool/%n\n\
             SlurmctldPidFile={d_str}/slurmctld.pid\n\
             SlurmdPidFile={d_str}/slurmd-%n.pid\n\
             SlurmctldLogFile={d_str}/log/slurmctld.log\n\
             SlurmdLogFile={d_str}/log/slurmd-%n.log\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             SchedulerType=sched/builtin\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_Core\n\
             ReturnToService=2\n\
             SlurmdParameters=config_overrides\n\
             MpiDefault=none\n\
             JobCompType=jobcomp/none\n\
             AccountingStorageType=accounting_storage/none\n\
             {node_lines}\
             PartitionName=debug Nodes={names} Default=YES MaxTime=INFINITE State=UP\n"
        );
        std::fs::write(d.join("slurm.conf"), conf).unwrap();
        let cluster = SlurmCluster { dir, nodes };
        run(&mut cluster.command("slurmctld"));
        for i in 1..=nodes {
            run(cluster.command("slurmd").args(["-N", &node(i)]));
        }
        let started = Instant::now();
        loop {
            let out = cluster
                .command("sinfo")
                .args(["-h", "-N", "-o", "%T"])
                .output();
            let idle = out.is_ok_and(|o| {
                let states = String::from_utf8_lossy(&o.stdout).to_string();
                states.lines().filter(|s| s.trim() == "idle").count() == nodes
            });
            if idle {
                return cluster;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "the Slurm nodes never came up: {}",
                cluster.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Where the cluster's configuration is: `SLURM_CONF` for its commands.
    pub fn conf(&self) -> PathBuf {
        self.dir.path().join("slurm.conf")
    }

    /// `program` with the cluster's `SLURM_CONF`.
    pub fn command(&self, name: &str) -> Command {
        let mut cmd = Command::new(program(name));
        cmd.env("SLURM_CONF", self.conf());
        cmd
    }

    /// Waits until the cluster holds no job (each has ended), at most `wait`; `false` if
    /// some are still there then.
    pub fn wait_for_no_jobs(&self, wait: Duration) -> bool {
        let started = Instant::now();
        while started.elapsed() < wait {
            let out = self.command("squeue").args(["-h", "-o", "%i"]).output();
            if out.is_ok_and(|o| o.status.success() && o.stdout.iter().all(u8::is_ascii_whitespace))
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        false
    }

    /// The daemons' logs, for a failure's message.
    pub fn logs(&self) -> String {
        let slurmds = (1..=self.nodes).map(|i| format!("log/slurmd-{}.log", node(i)));
        ["log/slurmctld.log".to_string(), "munge/munged.log".into()]
            .into_iter()
            .chain(slurmds)
            .map(|f| {
                let text = std::fs::read_to_string(self.dir.path().join(&f)).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(20).collect();
                format!(
                    "--- {f}\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for SlurmCluster {
    fn drop(&mut self) {
        let _ = self.command("scancel").args(["--user=root"]).output();
        self.wait_for_no_jobs(Duration::from_secs(30));
        let d = self.dir.path();
        for i in 1..=self.nodes {
            stop(&d.join(format!("slurmd-{}.pid", node(i))));
        }
        for pid_file in ["slurmctld.pid", "munge/munged.pid"] {
            stop(&d.join(pid_file));
        }
    }
}

/// Ends the daemon whose pid is in `pid_file`: SIGTERM, then SIGKILL after 10 s.
fn stop(pid_file: &Path) {
    let Some(pid) = std::fs::read_to_string(pid_file)
        .ok()
        .and_then(|t| t.trim().parse::<libc::pid_t>().ok())
    else {
        return;
    };
    // SAFETY: kill(2) on a daemon this cluster started (its pid file is the cluster's own).
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let started = Instant::now();
    // SAFETY: kill(2) with signal 0 only asks whether the process exists.
    while unsafe { libc::kill(pid, 0) } == 0 {
        if started.elapsed() > Duration::from_secs(10) {
            // SAFETY: as above; it did not end on SIGTERM.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn run(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?} did not start: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Where `name` is: on the PATH, or in the sbin folders a root's PATH may lack.
fn program(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from(name))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}
