//! What a distributed trial's processes need to meet: the world's shape, the rendezvous
//! address and a port of its own, as command placeholders and as the environment the common
//! launchers read (torchrun, `torch.distributed`'s `env://`, DeepSpeed, Horovod).

use std::collections::BTreeSet;
use std::sync::Mutex;

/// The placeholders a distributed trial's command may use besides its parameters.
pub(crate) const LAUNCH_PLACEHOLDERS: [&str; 7] = [
    "nproc_per_node",
    "nnodes",
    "node_rank",
    "master_addr",
    "master_port",
    "rdzv_endpoint",
    "world_size",
];

/// Who starts a distributed trial's processes (`[objective] launcher`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Launcher {
    /// The command is started once per machine and starts the processes itself (torchrun,
    /// deepspeed, mpirun).
    #[default]
    Command,
    /// tune starts `processes_per_node` copies of the command, with `RANK`, `LOCAL_RANK` and
    /// `WORLD_SIZE` set, as torchrun would; rank 0 speaks the report protocol.
    Tune,
}

/// One attempt's place in its world: what the placeholders and the environment say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Launch {
    pub nproc_per_node: u32,
    pub nnodes: u32,
    pub node_rank: u32,
    pub master_addr: String,
    pub master_port: u16,
}

impl Launch {
    /// The value of a launch placeholder (`None` for any other name).
    pub(crate) fn value(&self, name: &str) -> Option<String> {
        Some(match name {
            "nproc_per_node" => self.nproc_per_node.to_string(),
            "nnodes" => self.nnodes.to_string(),
            "node_rank" => self.node_rank.to_string(),
            "master_addr" => self.master_addr.clone(),
            "master_port" => self.master_port.to_string(),
            "rdzv_endpoint" => format!("{}:{}", self.master_addr, self.master_port),
            "world_size" => self.world_size().to_string(),
            _ => return None,
        })
    }

    /// Processes in the whole trial.
    pub(crate) fn world_size(&self) -> u32 {
        self.nproc_per_node * self.nnodes
    }

    /// The environment of the command on this machine (the launcher's, or every rank's).
    pub(crate) fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("MASTER_ADDR", self.master_addr.clone()),
            ("MASTER_PORT", self.master_port.to_string()),
            ("WORLD_SIZE", self.world_size().to_string()),
            ("TUNE_NNODES", self.nnodes.to_string()),
            ("TUNE_NODE_RANK", self.node_rank.to_string()),
            ("TUNE_NPROC_PER_NODE", self.nproc_per_node.to_string()),
        ]
    }

    /// What tune's own launcher adds for the process of `local_rank` on this machine.
    pub(crate) fn rank_env(&self, local_rank: u32) -> Vec<(&'static str, String)> {
        let rank = self.node_rank * self.nproc_per_node + local_rank;
        vec![
            ("RANK", rank.to_string()),
            ("LOCAL_RANK", local_rank.to_string()),
            ("LOCAL_WORLD_SIZE", self.nproc_per_node.to_string()),
            ("GROUP_RANK", self.node_rank.to_string()),
        ]
    }
}

/// A trial's place in a gang across machines (`[resources] nodes_per_trial`), as its worker
/// was given it through the database: node 0's worker holds the port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GangPlace {
    pub nnodes: u32,
    pub node_rank: u32,
    pub master_addr: String,
    pub master_port: u16,
}

/// Ports handed to running trials of this process: a port is never handed to two at once.
static HELD: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// A rendezvous port held by one attempt until it is dropped.
#[derive(Debug)]
pub(crate) struct PortLease(u16);

impl PortLease {
    /// A port free on every interface now (the kernel's pick) that no other running trial of
    /// this process holds. Another program may still take it before the trial binds it: the
    /// kernel hands out ephemeral ports in turn, so that is rare, and the attempt fails then
    /// (and is retried) rather than meeting another trial's processes.
    pub(crate) fn take() -> std::io::Result<PortLease> {
        let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
        for _ in 0..64 {
            let port = std::net::TcpListener::bind(("0.0.0.0", 0))?
                .local_addr()?
                .port();
            if held.insert(port) {
                return Ok(PortLease(port));
            }
        }
        Err(std::io::Error::other(
            "no free port for the trial's rendezvous after 64 tries",
        ))
    }

    pub(crate) fn port(&self) -> u16 {
        self.0
    }
}

impl Drop for PortLease {
    fn drop(&mut self) {
        HELD.lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_and_environment_describe_one_world() {
        let launch = Launch {
            nproc_per_node: 2,
            nnodes: 3,
            node_rank: 1,
            master_addr: "10.0.0.5".into(),
            master_port: 29611,
        };
        assert_eq!(launch.value("world_size").as_deref(), Some("6"));
        assert_eq!(
            launch.value("rdzv_endpoint").as_deref(),
            Some("10.0.0.5:29611")
        );
        assert_eq!(launch.value("lr"), None);
        for name in LAUNCH_PLACEHOLDERS {
            assert!(launch.value(name).is_some(), "{name}");
        }
        let env = launch.rank_env(1);
        assert!(env.contains(&("RANK", "3".into())), "{env:?}");
        assert!(env.contains(&("LOCAL_RANK", "1".into())), "{env:?}");
        assert!(launch.env().contains(&("WORLD_SIZE", "6".into())));
    }

    #[test]
    fn running_trials_never_share_a_port() {
        let leases: Vec<PortLease> = (0..50).map(|_| PortLease::take().unwrap()).collect();
        let ports: BTreeSet<u16> = leases.iter().map(PortLease::port).collect();
        assert_eq!(ports.len(), 50);
        let first = leases[0].port();
        drop(leases);
        assert!(!HELD.lock().unwrap().contains(&first));
    }
}
