use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use super::*;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// `sh -c script` as a trial process; the first line it prints.
async fn start(script: &str, poll: bool) -> (TrialProcess, String) {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(script);
    let mut process = TrialProcess::start(cmd).unwrap();
    if poll {
        process.exit_fd = None;
    }
    let (_stdin, stdout, _stderr) = process.take_pipes().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).await.unwrap();
    (process, line.trim().to_string())
}

/// Whether `pid` is running (not gone, not a zombie).
fn running(pid: libc::pid_t) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

/// Waits until `pid` is not running; a bound for a test that would otherwise hang, not a
/// timing check.
fn wait_gone(pid: libc::pid_t) {
    let since = std::time::Instant::now();
    while running(pid) {
        assert!(
            since.elapsed() < Duration::from_secs(60),
            "{pid} still runs"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn a_leader_that_exits_leaves_its_group_to_be_killed_before_it_is_reaped(poll: bool) {
    runtime().block_on(async {
        // The leader exits at once, leaving a member of its group running.
        let (mut process, member) = start("sleep 30 & echo $!; exit 0", poll).await;
        let member: libc::pid_t = member.parse().unwrap();
        process.exited().await;
        // Exited and not reaped: its pid, the group's id, is still its own.
        assert!(process.reaped.is_none());
        // SAFETY: getpgid(2) takes a pid and only reads.
        let group = unsafe { libc::getpgid(member) };
        assert_eq!(group, process.group());
        assert!(running(member));
        let status = process.end().await.unwrap();
        assert!(status.success(), "{status}");
        wait_gone(member);
        // Reaped: a later signal to its group id reaches nothing.
        assert!(process.reaped.is_some());
        assert_eq!(process.end().await.unwrap(), status);
    });
}

#[test]
fn a_leader_that_exits_leaves_its_group_to_be_killed_before_it_is_reaped_pidfd() {
    a_leader_that_exits_leaves_its_group_to_be_killed_before_it_is_reaped(false);
}

#[test]
fn a_leader_that_exits_leaves_its_group_to_be_killed_before_it_is_reaped_polled() {
    a_leader_that_exits_leaves_its_group_to_be_killed_before_it_is_reaped(true);
}

#[test]
fn a_group_ignoring_sigterm_is_killed_after_the_grace() {
    runtime().block_on(async {
        let (mut process, member) = start("trap '' TERM; sleep 30 & echo $!; wait", false).await;
        let member: libc::pid_t = member.parse().unwrap();
        process
            .terminate(Duration::ZERO, Duration::from_millis(50))
            .await;
        let status = process.end().await.unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");
        wait_gone(member);
    });
}

#[test]
fn a_dropped_process_leaves_nothing_of_its_group_running() {
    runtime().block_on(async {
        let (process, member) = start("sleep 30 & echo $!; sleep 30", false).await;
        let member: libc::pid_t = member.parse().unwrap();
        drop(process);
        wait_gone(member);
    });
}

/// Trials started side by side: each child holds the others' pipes from its fork to its exec,
/// which must not read as a process of the trial's own session holding them (the overhead
/// bench's `echo` trials did, 40 of 200 at 8 slots). Failed before the start lock (a sibling's
/// fork holding the pipe), and with it alone 2 of 320 times (a sibling past its exec not yet
/// having let go of the pipe).
#[test]
fn a_pipe_held_only_by_another_trials_start_is_not_held_outside_the_group() {
    // A coordinator's worth of touched memory, so that each fork copies page tables for a
    // while (as tune's own forks do) and the window between fork and exec is wide.
    let ballast = vec![1u8; 256 << 20];
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let held = runtime.block_on(async {
        let slots = (0..8).map(|_| {
            tokio::spawn(async {
                let mut held = 0;
                for _ in 0..40 {
                    let mut cmd = Command::new("echo");
                    cmd.arg("x");
                    let mut process = TrialProcess::start(cmd).unwrap();
                    let (_stdin, stdout, _stderr) = process.take_pipes().unwrap();
                    process.exited().await;
                    process.end().await.unwrap();
                    use std::os::fd::AsRawFd;
                    if held_outside_the_group(stdout.as_raw_fd(), process.group()).await {
                        held += 1;
                    }
                }
                held
            })
        });
        let mut held = 0;
        for slot in slots.collect::<Vec<_>>() {
            held += slot.await.unwrap();
        }
        held
    });
    assert_eq!(
        held, 0,
        "of 320 trials, {held} read as held outside their group"
    );
    assert_eq!(
        ballast
            .iter()
            .step_by(4096)
            .map(|&b| b as usize)
            .sum::<usize>(),
        65_536
    );
}
