//! Network namespaces for the tests that need a real network's faults (root only; CI runs as
//! root): each [`Netns`] is a namespace joined to this one by a veth pair of its own, a /30
//! of 10.0.0.0/8, its faults made with `tc netem` on both ends. Removed (with its veth pair)
//! when dropped.

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
            "this test makes network namespaces and tc netem faults: run it as root (CI does)"
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
            "ip", "link", "add", &ns.host_dev, "type", "veth", "peer", "name", &ns.ns_dev,
        ]);
        run(&["ip", "link", "set", &ns.ns_dev, "netns", &ns.name]);
        run(&["ip", "addr", "add", &format!("{host_addr}/30"), "dev", &ns.host_dev]);
        run(&["ip", "link", "set", &ns.host_dev, "up"]);
        ns.inside(&["ip", "addr", "add", &format!("{ns_addr}/30"), "dev", &ns.ns_dev]);
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

    /// Both ends send through `netem` with `settings` (`delay 100ms loss 5%`), in place of
    /// whatever they had.
    pub fn shape(&self, settings: &str) {
        let netem: Vec<&str> = settings.split_whitespace().collect();
        let mut host = vec!["tc", "qdisc", "replace", "dev", &self.host_dev, "root", "netem"];
        host.extend_from_slice(&netem);
        run(&host);
        let mut ns = vec!["tc", "qdisc", "replace", "dev", &self.ns_dev, "root", "netem"];
        ns.extend_from_slice(&netem);
        self.inside(&ns);
    }

    /// Every packet either way is dropped, silently (no reset, no unreachable): a partition.
    pub fn partition(&self) {
        self.shape("loss 100%");
    }

    /// The link as it was made: no delay, no loss.
    pub fn heal(&self) {
        run(&["tc", "qdisc", "del", "dev", &self.host_dev, "root"]);
        self.inside(&["tc", "qdisc", "del", "dev", &self.ns_dev, "root"]);
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
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_dev])
            .stderr(std::process::Stdio::null())
            .status();
    }
}
