//! Network namespaces for the tests that need a real network's faults (root only; CI runs as
//! root): each [`Netns`] is a namespace joined to this one by a veth pair of its own, a /30
//! of 10.0.0.0/8. Its faults are made in the kernel by nftables rules in the namespace
//! (`nft`): packets dropped at random ([`Netns::lose`]) or all of them ([`Netns::partition`]),
//! silently, so TCP retransmits and times out as on a real network. The kernel of the machines
//! this project runs on has no `netem` (`CONFIG_NET_SCH_NETEM` is not set), so latency is a
//! relay's ([`DelayRelay`]): each chunk forwarded after a fixed delay, in order. Removed (with
//! its veth pair) when dropped.

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// A network namespace and the link to it.
pub struct Netns {
    pub name: String,
    host_dev: String,
    ns_dev: String,
    /// This namespace's end of the link: a server listening here is reached from the
    /// namespace.
    pub host_addr: Ipv4Addr,
    /// The namespace's end.
    pub ns_addr: Ipv4Addr,
}

fn run(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", args.join(" ")));
    assert!(
        out.status.success(),
        "{}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether this process may make namespaces (it is root); the tests that need them say so
/// and fail where it is not.
pub fn available() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

impl Netns {
    pub fn new() -> Netns {
        assert!(
            available(),
            "this test makes network namespaces and nftables faults: run it as root (CI does)"
        );
        assert!(
            Command::new("nft").arg("--version").output().is_ok(),
            "this test makes its network faults with `nft`: install Debian's nftables \
             (.ci/run does)"
        );
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let k = COUNTER.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        assert!(k < 64, "at most 64 namespaces per test process");
        // A /30 per namespace: distinct across the test processes that run at once.
        let (b, c, d) = (10 + (pid >> 8) % 200, (pid % 256) as u8, (k * 4) as u8);
        let host_addr = Ipv4Addr::new(10, b as u8, c, d + 1);
        let ns_addr = Ipv4Addr::new(10, b as u8, c, d + 2);
        let tag = format!("{:x}{k}", pid & 0xfffff);
        let ns = Netns {
            name: format!("tune-{tag}"),
            host_dev: format!("tv{tag}h"),
            ns_dev: format!("tv{tag}n"),
            host_addr,
            ns_addr,
        };
        run(&["ip", "netns", "add", &ns.name]);
        run(&[
            "ip",
            "link",
            "add",
            &ns.host_dev,
            "type",
            "veth",
            "peer",
            "name",
            &ns.ns_dev,
        ]);
        run(&["ip", "link", "set", &ns.ns_dev, "netns", &ns.name]);
        run(&[
            "ip",
            "addr",
            "add",
            &format!("{host_addr}/30"),
            "dev",
            &ns.host_dev,
        ]);
        run(&["ip", "link", "set", &ns.host_dev, "up"]);
        ns.inside(&[
            "ip",
            "addr",
            "add",
            &format!("{ns_addr}/30"),
            "dev",
            &ns.ns_dev,
        ]);
        ns.inside(&["ip", "link", "set", &ns.ns_dev, "up"]);
        ns.inside(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    fn inside(&self, args: &[&str]) {
        let mut all = vec!["ip", "netns", "exec", &self.name];
        all.extend_from_slice(args);
        run(&all);
    }

    /// `cmd`, to be run inside the namespace (its program, arguments, environment and folder).
    pub fn wrap(&self, cmd: &Command) -> Command {
        let mut inside = Command::new("ip");
        inside
            .args(["netns", "exec", &self.name])
            .arg(cmd.get_program())
            .args(cmd.get_args());
        for (key, value) in cmd.get_envs() {
            match value {
                Some(v) => inside.env(key, v),
                None => inside.env_remove(key),
            };
        }
        if let Some(dir) = cmd.get_current_dir() {
            inside.current_dir(dir);
        }
        inside
    }

    /// Drops `percent` % of the packets either way on the namespace's link, at random.
    pub fn lose(&self, percent: u32) {
        self.faults(&format!("numgen random mod 100 < {percent} drop"));
    }

    /// Every packet either way is dropped, silently (no reset, no unreachable): a partition.
    pub fn partition(&self) {
        self.faults("drop");
    }

    /// The link as it was made: no fault.
    pub fn heal(&self) {
        let _ = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.name,
                "nft",
                "delete",
                "table",
                "inet",
                "tune_faults",
            ])
            .output();
    }

    /// `rule` (an nftables verdict statement) for every packet through the namespace's end of
    /// the link, in place of the faults it had.
    fn faults(&self, rule: &str) {
        self.heal();
        let dev = &self.ns_dev;
        let ruleset = format!(
            "table inet tune_faults {{\n\
               chain out {{ type filter hook output priority 0; oifname \"{dev}\" {rule}; }}\n\
               chain in {{ type filter hook input priority 0; iifname \"{dev}\" {rule}; }}\n\
             }}\n"
        );
        let file = std::env::temp_dir().join(format!("{}.nft", self.name));
        std::fs::write(&file, ruleset).unwrap();
        self.inside(&["nft", "-f", file.to_str().unwrap()]);
        let _ = std::fs::remove_file(file);
    }
}

impl Default for Netns {
    fn default() -> Netns {
        Netns::new()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the pair, and with it this one.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_dev])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// A TCP relay that forwards what each side sends after `delay`, in order: one-way latency
/// on every connection through it (from `listen` to `target`). Runs until the process ends.
pub struct DelayRelay {
    pub addr: std::net::SocketAddr,
}

impl DelayRelay {
    pub fn start(
        listen: Ipv4Addr,
        target: std::net::SocketAddr,
        delay: std::time::Duration,
    ) -> DelayRelay {
        let listener = std::net::TcpListener::bind((listen, 0)).expect("the relay's port");
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = std::net::TcpStream::connect(target) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                delayed(client, s2, delay);
                delayed(server, c2, delay);
            }
        });
        DelayRelay { addr }
    }
}

/// Copies `from` to `to`, each chunk `delay` after it was read.
fn delayed(mut from: std::net::TcpStream, mut to: std::net::TcpStream, delay: std::time::Duration) {
    use std::io::{Read, Write};
    use std::time::Instant;
    let (tx, rx) = std::sync::mpsc::channel::<(Instant, Vec<u8>)>();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx
                        .send((Instant::now() + delay, buf[..n].to_vec()))
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    });
    std::thread::spawn(move || {
        for (due, bytes) in rx {
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            if to.write_all(&bytes).is_err() {
                break;
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Both);
    });
}
