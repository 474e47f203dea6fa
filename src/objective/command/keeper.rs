//! What ends trials' processes when tune itself dies, `kill -9` included.
//!
//! A trial's first process dies with tune (`PR_SET_PDEATHSIG`), but what it started does not:
//! torchrun's workers, a shell's children, a data loader's. So a helper forked once, before the
//! first trial starts, keeps the list of the process groups of the trials running: tune writes
//! each group's id to a pipe as it starts (and its negation once the group is gone). When tune
//! dies, however it dies, the kernel closes the pipe's write end; the helper reads its end,
//! kills every group still listed with SIGKILL, and exits.
//!
//! The helper is forked from a process with threads, so it does only what is safe there:
//! `read`, `kill`, `close` and `_exit`, on memory of its own stack.

use std::io::Write;
use std::os::fd::{FromRawFd, RawFd};
use std::sync::{Mutex, OnceLock};

/// The most trial process groups listed at once; past this, later ones are not watched (each
/// still dies with its first process).
const MOST_GROUPS: usize = 4096;

/// The write end of the helper's pipe; `None` where no helper could be started.
static KEEPER: OnceLock<Option<Mutex<std::fs::File>>> = OnceLock::new();

/// Lists `group` with the helper: killed if tune dies while it runs.
pub(super) fn watch(group: libc::pid_t) {
    tell(group);
}

/// Takes `group` off the list: it is gone (killed, its leader reaped).
pub(super) fn forget(group: libc::pid_t) {
    tell(-group);
}

fn tell(record: libc::pid_t) {
    if let Some(pipe) = KEEPER.get_or_init(start) {
        let mut pipe = pipe.lock().unwrap_or_else(|e| e.into_inner());
        // Four bytes to a pipe are written whole (below PIPE_BUF): records never interleave.
        let _ = pipe.write_all(&record.to_ne_bytes());
    }
}

/// Forks the helper; `None` (and trials go on without it) where that fails.
fn start() -> Option<Mutex<std::fs::File>> {
    let mut ends = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into the array, which outlives the call.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return None;
    }
    let [read, write] = ends;
    // No trial is between its fork and its exec while the helper is forked: it takes no
    // trial's pipe with it (and it closes what it took at once).
    let _no_start = super::process::no_start_under_way();
    // SAFETY: the child runs `keep`, which calls only async-signal-safe functions on its own
    // stack, and never returns.
    match unsafe { libc::fork() } {
        -1 => {
            // SAFETY: both descriptors were just made by pipe2 and are owned here alone.
            unsafe {
                libc::close(read);
                libc::close(write);
            }
            None
        }
        0 => keep(read, write),
        _ => {
            // SAFETY: `read` is the helper's now: this process's copy is closed.
            unsafe { libc::close(read) };
            // SAFETY: `write` came from pipe2 above and is owned by the File from here on.
            let write = unsafe { std::fs::File::from_raw_fd(write) };
            Some(Mutex::new(write))
        }
    }
}

/// The helper: lists groups until the pipe ends, then kills those still listed.
fn keep(read: RawFd, write: RawFd) -> ! {
    // SAFETY: close, read, kill, setpgid, signal and _exit are async-signal-safe, and every
    // buffer they are given is on this stack.
    unsafe {
        libc::close(write);
        // Every descriptor but the pipe's read end goes: the helper holds nothing of tune's.
        for fd in 0..4096 {
            if fd != read {
                libc::close(fd);
            }
        }
        // Out of tune's process group (a Ctrl-C at the terminal does not end it early), and
        // without tune's signal handlers, which wrote to descriptors it no longer has.
        libc::setpgid(0, 0);
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGCHLD] {
            libc::signal(signal, libc::SIG_DFL);
        }
        let mut groups = [0 as libc::pid_t; MOST_GROUPS];
        let mut record = [0u8; 4];
        let mut have = 0usize;
        loop {
            let n = libc::read(
                read,
                record.as_mut_ptr().add(have) as *mut libc::c_void,
                4 - have,
            );
            if n == 0 {
                break;
            }
            if n < 0 {
                if *libc::__errno_location() == libc::EINTR {
                    continue;
                }
                break;
            }
            have += n as usize;
            if have < 4 {
                continue;
            }
            have = 0;
            let group = libc::pid_t::from_ne_bytes(record);
            if group > 0 {
                if let Some(slot) = groups.iter_mut().find(|g| **g == 0) {
                    *slot = group;
                }
            } else if let Some(slot) = groups.iter_mut().find(|g| **g == -group) {
                *slot = 0;
            }
        }
        for &group in groups.iter().filter(|&&g| g > 0) {
            libc::kill(-group, libc::SIGKILL);
        }
        libc::_exit(0)
    }
}
