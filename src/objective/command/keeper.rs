//! What ends trials' processes when tune itself dies, `kill -9` included, and what a
//! distributed trial left running in sessions of its own.
//!
//! A trial's first process dies with tune (`PR_SET_PDEATHSIG`), but what it started does not:
//! torchrun's workers, a shell's children, a data loader's. So a helper forked once, before the
//! first trial starts, keeps the list of the process groups of the trials running: tune writes
//! each group's id to a pipe as it starts (and its negation once the group is gone). When tune
//! dies, however it dies, the kernel closes the pipe's write end; the helper reads its end,
//! kills every group still listed with SIGKILL, then every process that carries this tune's
//! mark in its environment, and exits.
//!
//! The mark (`TUNE_KEEPER`, random for each tune process, and numbered for each attempt) finds
//! what left the trial's process group: `mpirun` starts each rank in a session of its own, so
//! what a rank starts is out of reach of the group's signals. A distributed trial's attempt
//! ends with a sweep of `/proc` for its mark.
//!
//! The helper is forked from a process with threads, so it does only what is safe there:
//! `read`, `open`, `getdents64`, `kill`, `pidfd_open`, `pidfd_send_signal`, `close` and
//! `_exit`, on memory of its own stack.

use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// The environment variable every trial process of this tune carries: `MARK.N`, this tune
/// process's mark and the attempt's number.
pub(super) const MARK_VAR: &str = "TUNE_KEEPER";

/// The most trial process groups listed at once; past this, later ones are not watched (each
/// still dies with its first process).
const MOST_GROUPS: usize = 4096;

/// The write end of the helper's pipe; `None` where no helper could be started.
static KEEPER: OnceLock<Option<Mutex<std::fs::File>>> = OnceLock::new();

/// This tune process's mark: 64 random bits in hex, the same for its whole life.
fn mark() -> &'static str {
    static MARK: OnceLock<String> = OnceLock::new();
    MARK.get_or_init(|| {
        let mut bytes = [0u8; 8];
        let random = std::fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes));
        if random.is_err() {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            bytes = (now ^ u64::from(std::process::id()) << 32).to_ne_bytes();
        }
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    })
}

/// A new attempt's mark, the value of [`MARK_VAR`] for each of its processes.
pub(super) fn attempt_mark() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{}.{}", mark(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Kills every process still carrying `attempt_mark` (its attempt has ended): what left the
/// trial's process groups. Reads `/proc`: call it off the runtime's threads. How many it
/// killed.
pub(super) fn end_leftovers(attempt_mark: &str) -> usize {
    let needle = format!("{MARK_VAR}={attempt_mark}\0");
    let me = std::process::id();
    // Each process killed, once (a dying one is still listed on the next pass).
    let mut killed = std::collections::BTreeSet::new();
    // What the killed start as they die is found by the next pass.
    for _ in 0..3 {
        let Ok(processes) = std::fs::read_dir("/proc") else {
            break;
        };
        let before = killed.len();
        for pid in processes
            .flatten()
            .filter_map(|p| p.file_name().to_str()?.parse::<u32>().ok())
        {
            if pid == me {
                continue;
            }
            // Held before the environment is read: the signal reaches that very process,
            // never one that got its pid after it exited.
            // SAFETY: pidfd_open(2) takes a pid and flags and returns a new descriptor or -1.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
            if fd < 0 {
                continue;
            }
            // SAFETY: `fd` was just returned by pidfd_open and nothing else owns it.
            let pidfd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
            let carries = std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.windows(needle.len()).any(|w| w == needle.as_bytes()));
            if carries {
                // SAFETY: pidfd_send_signal(2) on a pidfd owned here, without siginfo.
                let sent = unsafe {
                    libc::syscall(
                        libc::SYS_pidfd_send_signal,
                        pidfd.as_raw_fd(),
                        libc::SIGKILL,
                        std::ptr::null::<libc::siginfo_t>(),
                        0,
                    )
                };
                if sent == 0 {
                    killed.insert(pid);
                }
            }
        }
        if killed.len() == before {
            break;
        }
    }
    killed.len()
}

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
    // What the helper looks for, made before the fork (it allocates nothing after).
    let mut needle = [0u8; 64];
    let text = format!("{MARK_VAR}={}.", mark());
    needle[..text.len()].copy_from_slice(text.as_bytes());
    let needle_len = text.len();
    // No trial is between its fork and its exec while the helper is forked: it takes no
    // trial's pipe with it (and it closes what it took at once).
    let _no_start = super::starts::no_start_under_way();
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
        0 => keep(read, write, &needle[..needle_len]),
        _ => {
            // SAFETY: `read` is the helper's now: this process's copy is closed.
            unsafe { libc::close(read) };
            // SAFETY: `write` came from pipe2 above and is owned by the File from here on.
            let write = unsafe { std::fs::File::from_raw_fd(write) };
            Some(Mutex::new(write))
        }
    }
}

/// The helper: lists groups until the pipe ends, then kills those still listed and every
/// process that carries `needle` (`TUNE_KEEPER=MARK.`) in its environment.
fn keep(read: RawFd, write: RawFd, needle: &[u8]) -> ! {
    // SAFETY: close, read, kill, setpgid, signal and _exit are async-signal-safe, and every
    // buffer they are given is on this stack.
    unsafe {
        libc::close(write);
        // Every descriptor but the pipe's read end goes: the helper holds nothing of tune's
        // (no file lock, no trial's pipe). close_range where the kernel has it (5.9), else
        // one by one up to a bound.
        let below = match read {
            0 => 0,
            _ => libc::syscall(libc::SYS_close_range, 0u32, read as u32 - 1, 0u32),
        };
        let above = libc::syscall(libc::SYS_close_range, read as u32 + 1, u32::MAX, 0u32);
        if below != 0 || above != 0 {
            for fd in (0..65536).filter(|&fd| fd != read) {
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
        // What the killed start as they die is found by the next pass.
        for _ in 0..3 {
            if kill_marked(needle) == 0 {
                break;
            }
        }
        libc::_exit(0)
    }
}

/// Kills each process whose environment holds `needle`; how many. Async-signal-safe: raw
/// system calls on stack buffers (the helper calls it after a fork).
fn kill_marked(needle: &[u8]) -> usize {
    // SAFETY: open, getdents64, close and getpid write only into the buffers of this frame,
    // whose lengths they are given.
    unsafe {
        let me = libc::getpid();
        let dir = libc::open(
            c"/proc".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if dir < 0 {
            return 0;
        }
        let mut killed = 0;
        let mut entries = [0u8; 8192];
        loop {
            let n = libc::syscall(
                libc::SYS_getdents64,
                dir,
                entries.as_mut_ptr(),
                entries.len(),
            );
            if n <= 0 {
                break;
            }
            let mut at = 0usize;
            while at + 19 < n as usize {
                // struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1), d_name.
                let reclen = u16::from_ne_bytes([entries[at + 16], entries[at + 17]]) as usize;
                if reclen == 0 {
                    break;
                }
                let mut pid: libc::pid_t = 0;
                let mut digits = true;
                for &b in entries[at + 19..at + reclen]
                    .iter()
                    .take_while(|&&b| b != 0)
                {
                    digits &= b.is_ascii_digit();
                    pid = pid
                        .wrapping_mul(10)
                        .wrapping_add(libc::pid_t::from(b.wrapping_sub(b'0')));
                }
                if digits && pid > 0 && pid != me && carries(pid, needle) {
                    killed += 1;
                }
                at += reclen;
            }
        }
        libc::close(dir);
        killed
    }
}

/// Whether process `pid`'s environment holds `needle`; if so it is killed (through a pidfd
/// taken first, so that the signal reaches that very process). Async-signal-safe.
fn carries(pid: libc::pid_t, needle: &[u8]) -> bool {
    // SAFETY: pidfd_open, open, read, pidfd_send_signal and close, on descriptors opened here
    // and buffers of this frame whose lengths they are given.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0) as libc::c_int;
        if pidfd < 0 {
            return false;
        }
        // "/proc/" + up to 10 digits + "/environ" + NUL.
        let mut path = [0u8; 32];
        let mut len = 0;
        for &b in b"/proc/" {
            path[len] = b;
            len += 1;
        }
        let mut digits = [0u8; 10];
        let (mut n, mut count) = (pid, 0);
        while n > 0 && count < digits.len() {
            digits[count] = b'0' + (n % 10) as u8;
            n /= 10;
            count += 1;
        }
        for &b in digits[..count].iter().rev() {
            path[len] = b;
            len += 1;
        }
        for &b in b"/environ\0" {
            path[len] = b;
            len += 1;
        }
        let fd = libc::open(
            path.as_ptr() as *const libc::c_char,
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        let mut found = false;
        if fd >= 0 {
            // Read in chunks, keeping the needle's length less one of the last chunk, so that a
            // needle across two reads is found.
            let mut window = [0u8; 4096 + 64];
            let mut kept = 0usize;
            loop {
                let n = libc::read(fd, window.as_mut_ptr().add(kept) as *mut libc::c_void, 4096);
                if n <= 0 {
                    break;
                }
                let filled = kept + n as usize;
                if window[..filled].windows(needle.len()).any(|w| w == needle) {
                    found = true;
                    break;
                }
                kept = (needle.len() - 1).min(filled);
                window.copy_within(filled - kept..filled, 0);
            }
            libc::close(fd);
        }
        if found {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                pidfd,
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            );
        }
        libc::close(pidfd);
        found
    }
}
