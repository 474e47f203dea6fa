//! A trial's process: the leader of a process group of its own, signalled as a group and
//! reaped last, and the pipes it writes to.
//!
//! A process group id is the leader's pid, and the kernel hands a pid out again once nothing
//! uses it: after the leader is reaped and its group is empty, `kill(-pgid)` can reach an
//! unrelated process that got that number. So every signal to the group is sent while the
//! leader is unreaped (a zombie still holds its pid), and the leader is reaped only after
//! what is left of its group has been killed.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::process::ExitStatus;
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::time::Instant;

use super::starts;

/// The trial's running process, the leader of its own process group.
pub(super) struct TrialProcess {
    child: Child,
    /// The leader's pid, which is its group's id.
    group: libc::pid_t,
    /// Readable once the leader has exited (Linux 5.3 and later); without it, exits are
    /// polled for.
    exit_fd: Option<AsyncFd<OwnedFd>>,
    /// Its exit status, once reaped: nothing is signalled after that.
    reaped: Option<ExitStatus>,
}

/// How often an exit is looked for where the kernel has no pidfd.
const EXIT_POLL: Duration = Duration::from_millis(10);

impl TrialProcess {
    /// Starts `cmd` with piped stdin, stdout and stderr, as the leader of a process group of
    /// its own, killed by the kernel when the coordinator dies.
    pub(super) fn start(mut cmd: Command) -> std::io::Result<TrialProcess> {
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            // Its own process group, so signals reach the whole trial (a shell's children too).
            .process_group(0)
            .kill_on_drop(true);
        let coordinator = std::process::id();
        // SAFETY: prctl and getppid are async-signal-safe; prctl only asks the kernel to kill
        // the child when the coordinator dies, so a `kill -9` of tune leaves no orphaned trials
        // behind. A coordinator killed between the fork and the prctl is caught by the parent
        // check.
        unsafe {
            cmd.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::getppid() as u32 != coordinator {
                    libc::_exit(137);
                }
                Ok(())
            });
        }
        // `spawn` returns once the child has exec'd (it waits for the exec to report).
        let child = {
            let _starting = starts::starting();
            cmd.spawn()?
        };
        let group = child
            .id()
            .ok_or_else(|| std::io::Error::other("the started process has no pid"))?
            as libc::pid_t;
        // What the group starts dies with tune too, not only its leader.
        super::keeper::watch(group);
        Ok(TrialProcess {
            child,
            group,
            exit_fd: pidfd(group),
            reaped: None,
        })
    }

    /// Its stdin, stdout and stderr, the first time they are asked for.
    pub(super) fn take_pipes(&mut self) -> Option<(ChildStdin, ChildStdout, ChildStderr)> {
        Some((
            self.child.stdin.take()?,
            self.child.stdout.take()?,
            self.child.stderr.take()?,
        ))
    }

    /// Its process group's id (the leader's pid).
    pub(super) fn group(&self) -> libc::pid_t {
        self.group
    }

    /// Resolves once the leader has exited, without reaping it: until [`TrialProcess::end`],
    /// its pid, and so its group's id, stays its own.
    pub(super) async fn exited(&self) {
        if self.reaped.is_some() {
            return;
        }
        if let Some(fd) = &self.exit_fd {
            if fd.readable().await.is_ok() {
                return;
            }
        }
        while !self.has_exited() {
            tokio::time::sleep(EXIT_POLL).await;
        }
    }

    /// Whether the leader has exited (it may be a zombie, not yet reaped).
    pub(super) fn has_exited(&self) -> bool {
        // SAFETY: siginfo_t is plain data, for which all zeroes is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid(2) writes one siginfo_t to a local that outlives the call; WNOWAIT
        // leaves the child to be reaped by `end`.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                self.group as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: si_pid is set by a waitid that found an exited child, and zero otherwise.
        r != 0 || unsafe { info.si_pid() } != 0
    }

    /// Sends `signal` to every process of its group; nothing once the leader is reaped.
    pub(super) fn signal_group(&self, signal: libc::c_int) {
        if self.reaped.is_none() {
            // SAFETY: kill(2) on the group this trial leads, whose id its unreaped leader
            // still holds; no memory is involved.
            unsafe { libc::kill(-self.group, signal) };
        }
    }

    /// Kills what is left of its group (a forked worker, a shell's children, which also hold
    /// its stdout open), then reaps the leader, waiting for it to exit: its exit status.
    pub(super) async fn end(&mut self) -> std::io::Result<ExitStatus> {
        if let Some(status) = self.reaped {
            return Ok(status);
        }
        self.exited().await;
        self.signal_group(libc::SIGKILL);
        let status = self.child.wait().await?;
        self.reaped = Some(status);
        super::keeper::forget(self.group);
        Ok(status)
    }

    /// Lets the leader exit within `patience`, then SIGTERMs the group, then SIGKILLs it
    /// after `grace`. The leader is left for [`TrialProcess::end`] to reap.
    pub(super) async fn terminate(&mut self, patience: Duration, grace: Duration) {
        if !patience.is_zero() && tokio::time::timeout(patience, self.exited()).await.is_ok() {
            return;
        }
        self.signal_group(libc::SIGTERM);
        if tokio::time::timeout(grace, self.exited()).await.is_err() {
            self.signal_group(libc::SIGKILL);
        }
    }
}

impl Drop for TrialProcess {
    /// An attempt dropped before its end (its task aborted) leaves nothing of its group
    /// running; the leader is reaped by tokio (`kill_on_drop`).
    fn drop(&mut self) {
        if self.reaped.is_none() {
            self.signal_group(libc::SIGKILL);
            super::keeper::forget(self.group);
        }
    }
}

/// A pidfd for `pid`, watched for its exit; `None` where the kernel has none (before 5.3).
fn pidfd(pid: libc::pid_t) -> Option<AsyncFd<OwnedFd>> {
    // SAFETY: pidfd_open(2) takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` was just returned by pidfd_open and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    // SAFETY: the OwnedFd moves into the AsyncFd, which alone owns it: it stays open and the
    // same descriptor until the AsyncFd is dropped.
    unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }.ok()
}

/// How many bytes wait in the pipe `fd` (FIONREAD).
pub(super) fn pipe_holds(fd: RawFd) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int through the pointer, to a local that outlives the call.
    let ok = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n as *mut libc::c_int) } == 0;
    if ok {
        n.max(0) as usize
    } else {
        0
    }
}

/// Once the trial's process has ended (its group killed, its leader reaped): waits until
/// nothing holds the write end of its stdout `fd`, or until nothing of its process `group` is
/// left; `true` when something outside the group still holds it. The group's killed members
/// close the pipe as they die, and a trial ends only once they have (nothing of it outlives
/// it); what holds the pipe after that is in a session of its own, out of the group's reach.
///
/// This only asks whether the group has members (signal 0): a group id handed out again
/// meanwhile makes it wait longer, never signals anything.
pub(super) async fn held_outside_the_group(fd: RawFd, group: libc::pid_t) -> bool {
    // Members that never go (zombies nobody reaps) end the wait after this long.
    const DYING: Duration = Duration::from_secs(10);
    let since = Instant::now();
    loop {
        if !pipe_has_writer(fd) {
            return false;
        }
        // SAFETY: kill(2) with signal 0 only asks whether the group has members.
        let gone = unsafe { libc::kill(-group, 0) } != 0;
        if gone {
            // Another trial's process between its fork and its exec holds the pipe too, and
            // one just past its exec may not have let go of it yet (the kernel releases a
            // closed pipe a moment later): with no start under way, a process that still
            // lists it among its descriptors is the trial's.
            // Waiting for starts and scanning /proc block: off the runtime's workers, on a
            // copy of the descriptor that stays open even if this wait is dropped.
            let Ok(pipe) = dup(fd) else {
                return true;
            };
            return tokio::task::spawn_blocking(move || {
                let _no_start = starts::no_start_under_way();
                pipe_has_writer(pipe.as_raw_fd()) && held_by_another_process(pipe.as_raw_fd())
            })
            .await
            .unwrap_or(true);
        }
        if since.elapsed() >= DYING {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A descriptor of its own for what `fd` refers to, closed on exec like tune's others.
fn dup(fd: RawFd) -> std::io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC only reads `fd` and returns a new descriptor, owned from here.
    let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if copy < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `copy` was just returned by fcntl and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(copy) })
}

/// Whether a process other than this one has the pipe `fd` among its descriptors, as
/// `/proc` lists them (a trial's processes run as tune's user, so their lists are readable).
fn held_by_another_process(fd: RawFd) -> bool {
    let Ok(pipe) = std::fs::read_link(format!("/proc/self/fd/{fd}")) else {
        return true;
    };
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return true;
    };
    let me = std::process::id().to_string();
    processes.flatten().any(|process| {
        let pid = process.file_name();
        let pid = pid.to_string_lossy();
        if pid == me || !pid.bytes().all(|b| b.is_ascii_digit()) {
            return false;
        }
        let Ok(fds) = std::fs::read_dir(process.path().join("fd")) else {
            return false;
        };
        fds.flatten()
            .any(|f| std::fs::read_link(f.path()).is_ok_and(|target| target == pipe))
    })
}

/// Whether a process still holds the write end of the pipe `fd` (no hang-up reported yet).
fn pipe_has_writer(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll(2) on one pollfd that lives on this stack frame, without waiting.
    let ready = unsafe { libc::poll(&mut p, 1, 0) };
    ready >= 0 && p.revents & libc::POLLHUP == 0
}

#[cfg(test)]
mod tests;
