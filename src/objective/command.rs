//! Command objectives: one child process per trial attempt.
//!
//! The protocol, in full in docs/guide/protocol.md: the trial reports by
//! printing lines to stdout, a JSON object (`{"step": 3, "val_loss": 0.31}`) or `key: value`
//! pairs (`val_loss: 0.31, acc: 0.9`); after each report, once it is durable, the coordinator
//! writes its decision (`continue`, `stop` or `pause`) as one line to the trial's stdin. A
//! trial that ignores `stop` or `pause` gets SIGTERM, then SIGKILL, and whatever it reports
//! after the decision is discarded. Exit 0 completes the trial; anything else fails it with the
//! tail of its stderr.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::{substitute, Job};
use crate::pool::Slot;
use crate::protocol::{Outcome, ReportAnswer, WorkerMsg};

/// A command template and how to run it.
pub(crate) struct CommandObjective {
    /// argv with `{param}` placeholders.
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub workdir: PathBuf,
    pub experiment_dir: PathBuf,
    pub metric: String,
    /// How long a trial told to stop may take before SIGTERM, and after SIGTERM before SIGKILL.
    pub grace: Duration,
}

const STDERR_TAIL: usize = 2000;

/// The longest line of stdout read: a longer one (100 MB of output with no newline) fails the
/// trial instead of filling memory.
pub(crate) const MAX_LINE: usize = 1 << 20;

/// The most metrics one report may carry.
pub(crate) const MAX_METRICS: usize = 1000;

pub(super) async fn run(obj: Arc<CommandObjective>, job: Job) {
    let outcome = run_attempt(&obj, &job).await;
    let _ = job.tx.send(WorkerMsg::Finished {
        id: job.id,
        attempt: job.attempt,
        outcome,
    });
}

/// Why the read loop ended before the child closed its stdout.
enum Cut {
    Stopped,
    TimedOut,
    Interrupted,
    /// A report that could not be read: the trial fails with this reason.
    BadReport(String),
}

async fn run_attempt(obj: &CommandObjective, job: &Job) -> Outcome {
    let mut child = match spawn(obj, job) {
        Ok(child) => child,
        Err(failed) => return failed,
    };
    // The trial leads its own process group (pgid = pid).
    let group = child.id().map(|pid| pid as libc::pid_t);
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Outcome::Failed("the child's pipes were not set up".into());
    };
    // Decisions go through their own task: a trial that never reads stdin must not block us.
    let (decide, decisions) = mpsc::unbounded_channel::<ReportAnswer>();
    let writer = tokio::spawn(write_decisions(stdin, decisions));
    let (leader_gone, leader_exit) = watch::channel(false);
    let stderr_tail = tokio::spawn(stderr_tail(stderr, leader_exit));
    let deadline = job.timeout.and_then(|t| Instant::now().checked_add(t));
    let mut shutdown = job.shutdown.clone();
    let cut = read_reports(
        obj,
        job,
        &mut child,
        stdout,
        decide,
        deadline,
        &mut shutdown,
    )
    .await;
    let outcome = finish(
        obj,
        job,
        &mut child,
        cut,
        (stderr_tail, &leader_gone),
        deadline,
        &mut shutdown,
    )
    .await;
    let _ = leader_gone.send(true);
    writer.abort();
    if let Some(group) = group {
        kill_group(group);
    }
    outcome
}

/// How many bytes wait in the pipe `fd` (FIONREAD).
fn pipe_holds(fd: std::os::fd::RawFd) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int through the pointer, to a local that outlives the call.
    let ok = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n as *mut libc::c_int) } == 0;
    if ok {
        n.max(0) as usize
    } else {
        0
    }
}

/// Once the trial's process has exited and its group was killed: waits until nothing holds
/// the write end of its stdout `fd`, or until nothing of its process `group` is left; `true`
/// when something outside the group still holds it. The group's killed members close the pipe
/// as they die, and a trial ends only once they have (nothing of it outlives it); what holds
/// the pipe after that is in a session of its own, out of the group's reach.
async fn held_outside_the_group(fd: std::os::fd::RawFd, group: Option<libc::pid_t>) -> bool {
    // Members that never go (zombies nobody reaps) end the wait after this long.
    const DYING: Duration = Duration::from_secs(10);
    let since = Instant::now();
    loop {
        if !pipe_has_writer(fd) {
            return false;
        }
        // SAFETY: kill(2) with signal 0 only asks whether the group has members.
        let gone = group.is_none_or(|g| unsafe { libc::kill(-g, 0) } != 0);
        if gone || since.elapsed() >= DYING {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Whether a process still holds the write end of the pipe `fd` (no hang-up reported yet).
fn pipe_has_writer(fd: std::os::fd::RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll(2) on one pollfd that lives on this stack frame, without waiting.
    let ready = unsafe { libc::poll(&mut p, 1, 0) };
    ready >= 0 && p.revents & libc::POLLHUP == 0
}

/// Kills what is left of a trial's process group once its leader has exited: a forked
/// worker, a shell's children. (They also hold its stdout open, which would keep the attempt
/// waiting for an end of output that never comes.)
fn kill_group(group: libc::pid_t) {
    // SAFETY: kill(2) on the process group the trial led; no memory is involved.
    unsafe { libc::kill(-group, libc::SIGKILL) };
}

/// Starts the trial's process: argv with the params filled in, the `TUNE_*` environment, pipes
/// for the protocol, its own process group. `Err` is the failed outcome.
fn spawn(obj: &CommandObjective, job: &Job) -> Result<Child, Outcome> {
    let argv: Vec<String> = obj
        .argv
        .iter()
        .map(|a| substitute(a, &job.params))
        .collect();
    if let Err(e) = std::fs::create_dir_all(&job.trial_dir) {
        return Err(Outcome::Failed(format!(
            "cannot create {}: {e}",
            job.trial_dir.display()
        )));
    }
    let params = serde_json::to_string(&job.params)
        .map_err(|e| Outcome::Failed(format!("the params cannot be written as JSON: {e}")))?;
    let mut cmd = tokio::process::Command::new(&argv[0]);
    if super::cores::rayon_set_by_tune() {
        // Set for tune's own trainables: the command keeps the environment it was given (its
        // spec's `env` may still set it).
        cmd.env_remove("RAYON_NUM_THREADS");
    }
    cmd.args(&argv[1..])
        .current_dir(&obj.workdir)
        .env("TUNE_PARAMS", params)
        .env("TUNE_TRIAL_ID", job.id.to_string())
        .env("TUNE_DEVICE", job.device.to_string())
        .env("TUNE_ATTEMPT", job.attempt.to_string())
        .env("TUNE_CHECKPOINT_DIR", &job.trial_dir)
        .env("TUNE_EXPERIMENT_DIR", &obj.experiment_dir)
        .env_remove("TUNE_RESTORE_DIR")
        .envs(job.restore_dir.iter().map(|d| ("TUNE_RESTORE_DIR", d)))
        .env_remove("TUNE_COMPLETES_AT")
        .envs(
            job.completes_at
                .iter()
                .map(|s| ("TUNE_COMPLETES_AT", s.to_string())),
        )
        // Python buffers a piped stdout; unbuffered, each report arrives when printed.
        .env("PYTHONUNBUFFERED", "1")
        // A trial on a GPU sees only its own (as device 0), as with Ray Tune.
        .envs(match job.device {
            Slot::Gpu(n) => Some(("CUDA_VISIBLE_DEVICES", n.to_string())),
            _ => None,
        })
        .envs(&obj.env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so signals reach the whole trial (a shell's children too).
        .process_group(0)
        .kill_on_drop(true);
    let coordinator = std::process::id();
    // SAFETY: prctl and getppid are async-signal-safe; prctl only asks the kernel to kill the
    // child when the coordinator dies, so a `kill -9` of tune leaves no orphaned trials behind.
    // A coordinator killed between the fork and the prctl is caught by the parent check.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() as u32 != coordinator {
                libc::_exit(137);
            }
            Ok(())
        });
    }
    cmd.spawn().map_err(|e| {
        Outcome::Failed(format!(
            "cannot start `{}` (in {}): {e}",
            argv[0],
            obj.workdir.display()
        ))
    })
}

/// Writes each decision as its protocol line to the trial's stdin, until either side is gone.
async fn write_decisions(
    mut stdin: ChildStdin,
    mut decisions: mpsc::UnboundedReceiver<ReportAnswer>,
) {
    while let Some(d) = decisions.recv().await {
        let Some(line) = d.command_line() else {
            continue;
        };
        if stdin.write_all(line.as_bytes()).await.is_err() || stdin.flush().await.is_err() {
            break;
        }
    }
}

/// The last [`STDERR_TAIL`] bytes of the trial's stderr (whole characters), for its error:
/// read to its end, or, once `leader_exit` says the trial's process is gone, to what was in
/// the pipe then (a process it started in a session of its own may hold stderr open for ever).
async fn stderr_tail(mut stderr: ChildStderr, mut leader_exit: watch::Receiver<bool>) -> String {
    use std::os::fd::AsRawFd;
    let mut tail: Vec<u8> = Vec::new();
    let mut buf = [0u8; 4096];
    let mut left: Option<usize> = None;
    loop {
        let want = left.map_or(buf.len(), |n| n.min(buf.len()));
        if want == 0 {
            break;
        }
        let read = tokio::select! {
            r = stderr.read(&mut buf[..want]) => r,
            _ = leader_exit.wait_for(|gone| *gone), if left.is_none() => {
                left = Some(pipe_holds(stderr.as_raw_fd()));
                continue;
            }
        };
        let n = match read {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(l) = &mut left {
            *l -= n.min(*l);
        }
        tail.extend_from_slice(&buf[..n]);
        if tail.len() > 2 * STDERR_TAIL {
            tail.drain(..tail.len() - STDERR_TAIL);
        }
    }
    let text = String::from_utf8_lossy(&tail).into_owned();
    let start = text.len().saturating_sub(STDERR_TAIL);
    let start = (start..text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    text[start..].trim().to_string()
}

/// Reads reports from the trial's stdout, sends each to the coordinator and its decision back
/// to the trial, until the trial closes stdout (`None`) or the read is cut short.
async fn read_reports(
    obj: &CommandObjective,
    job: &Job,
    child: &mut Child,
    stdout: ChildStdout,
    decide: mpsc::UnboundedSender<ReportAnswer>,
    deadline: Option<Instant>,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<Cut> {
    use std::os::fd::AsRawFd;
    let mut stdout = BufReader::new(stdout);
    let mut parser = ReportParser::new(&obj.metric);
    let mut line = Vec::new();
    let group = child.id().map(|pid| pid as libc::pid_t);
    // Once the leader has exited: how much of what it wrote is left to read. The trial ends
    // with its process, not with its stdout, which a process it started in a session of its
    // own (`setsid`) can hold open for ever.
    let mut left: Option<usize> = None;
    loop {
        if left == Some(0) && line.is_empty() {
            if held_outside_the_group(stdout.get_ref().as_raw_fd(), group).await {
                let note = format!(
                    "trial {}: its process exited while a process it started in a session of \
                     its own (setsid) still held its output open; the trial ended with its \
                     process, that process is left running and its output is ignored",
                    job.id
                );
                let _ = job.tx.send(WorkerMsg::Note(note));
            }
            return None;
        }
        // A line partly read when the leader's exit won the race goes on where it stopped
        // (`read_line_capped` keeps what it consumed in `line`).
        let read = tokio::select! {
            r = read_line_capped(&mut stdout, &mut line, &mut left) => r,
            _ = child.wait(), if left.is_none() => {
                // What it wrote is still in the pipe, read next; what it left running goes.
                if let Some(group) = group {
                    kill_group(group);
                }
                left = Some(stdout.buffer().len() + pipe_holds(stdout.get_ref().as_raw_fd()));
                continue;
            }
            _ = sleep_until(deadline) => return Some(Cut::TimedOut),
            _ = until_shutdown(shutdown) => return Some(Cut::Interrupted),
        };
        match read {
            Ok(0) | Err(_) => return None,
            Ok(n) if n > MAX_LINE => {
                return Some(Cut::BadReport(format!(
                    "a line of its output is longer than {} MiB (it starts: {})",
                    MAX_LINE >> 20,
                    shortened(&String::from_utf8_lossy(&line[..line.len().min(200)]), 80)
                )))
            }
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&line).into_owned();
        line.clear();
        let (step, metrics) = match parser.feed(&text) {
            Ok(Some(report)) => report,
            Ok(None) => continue,
            Err(reason) => return Some(Cut::BadReport(reason)),
        };
        let (ack, answer) = oneshot::channel();
        let msg = WorkerMsg::Report {
            id: job.id,
            attempt: job.attempt,
            step,
            metrics,
            ack,
        };
        if job.tx.send(msg).is_err() {
            return Some(Cut::Interrupted);
        }
        let decision = match answer.await {
            // Not kept: no line (the trial would take it as the acknowledgement and save the
            // step); the run is over.
            Ok(ReportAnswer::Refused) | Err(_) => return Some(Cut::Interrupted),
            Ok(decision) => decision,
        };
        let _ = decide.send(decision);
        if decision != ReportAnswer::Continue {
            return Some(Cut::Stopped);
        }
    }
}

/// Reads up to and including the next newline into `line`, keeping at most [`MAX_LINE`] + 1
/// bytes of it, and no more of the pipe than `left` (counted down) where set; returns how many
/// bytes the line had so far (more than `MAX_LINE`: it was cut there, unread beyond).
async fn read_line_capped(
    stdout: &mut BufReader<ChildStdout>,
    line: &mut Vec<u8>,
    left: &mut Option<usize>,
) -> std::io::Result<usize> {
    loop {
        if *left == Some(0) {
            return Ok(line.len());
        }
        let buf = stdout.fill_buf().await?;
        if buf.is_empty() {
            return Ok(line.len());
        }
        let buf = &buf[..left.map_or(buf.len(), |n| n.min(buf.len()))];
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        let room = (MAX_LINE + 1).saturating_sub(line.len());
        line.extend_from_slice(&buf[..take.min(room)]);
        stdout.consume(take);
        if let Some(n) = left {
            *n -= take;
        }
        if done || line.len() > MAX_LINE {
            return Ok(line.len());
        }
    }
}

/// Ends the attempt after the reads: waits for the exit of a trial that closed its stdout (or
/// terminates it), and says how the attempt went.
async fn finish(
    obj: &CommandObjective,
    job: &Job,
    child: &mut Child,
    cut: Option<Cut>,
    (stderr_tail, leader_gone): (tokio::task::JoinHandle<String>, &watch::Sender<bool>),
    deadline: Option<Instant>,
    shutdown: &mut watch::Receiver<bool>,
) -> Outcome {
    let cut = match cut {
        Some(cut) => cut,
        None => {
            let exited = tokio::select! {
                s = child.wait() => Ok(s),
                _ = sleep_until(deadline) => Err(Cut::TimedOut),
                _ = until_shutdown(shutdown) => Err(Cut::Interrupted),
            };
            match exited {
                Ok(Ok(status)) if status.success() => return Outcome::Returned,
                Ok(Ok(status)) => {
                    // It has exited: its stderr is read no further than it wrote.
                    let _ = leader_gone.send(true);
                    let tail = stderr_tail.await.unwrap_or_default();
                    return Outcome::Failed(describe_exit(status, &tail));
                }
                Ok(Err(e)) => {
                    return Outcome::Failed(format!("waiting for the process failed: {e}"))
                }
                Err(cut) => cut,
            }
        }
    };
    match cut {
        Cut::Stopped => {
            // A trial told to stop may end on its own (and checkpoint) within the grace.
            terminate(child, obj.grace, obj.grace).await;
            Outcome::Stopped
        }
        Cut::TimedOut => {
            terminate(child, Duration::ZERO, obj.grace).await;
            timed_out(job)
        }
        Cut::Interrupted => {
            terminate(child, Duration::ZERO, obj.grace).await;
            Outcome::Interrupted
        }
        Cut::BadReport(reason) => {
            terminate(child, Duration::ZERO, obj.grace).await;
            Outcome::Failed(reason)
        }
    }
}

fn timed_out(job: &Job) -> Outcome {
    let secs = job.timeout.map_or(0.0, |t| t.as_secs_f64());
    Outcome::Failed(format!("timed out after {secs} s"))
}

async fn until_shutdown(shutdown: &mut watch::Receiver<bool>) {
    if shutdown.wait_for(|s| *s).await.is_err() {
        // The coordinator is gone without asking for a stop: nothing will ever ask.
        std::future::pending::<()>().await;
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Lets the child exit within `patience`, then SIGTERM, then SIGKILL after `grace`.
async fn terminate(child: &mut Child, patience: Duration, grace: Duration) {
    if !patience.is_zero() && tokio::time::timeout(patience, child.wait()).await.is_ok() {
        return;
    }
    let Some(pid) = child.id() else { return };
    // The child leads its own process group (pgid = pid): signal the whole group.
    let group = -(pid as libc::pid_t);
    // SAFETY: kill(2) with a process group id we created; no memory is involved.
    unsafe { libc::kill(group, libc::SIGTERM) };
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        // SAFETY: as above.
        unsafe { libc::kill(group, libc::SIGKILL) };
        let _ = child.wait().await;
    }
}

fn describe_exit(status: ExitStatus, stderr: &str) -> String {
    use std::os::unix::process::ExitStatusExt;
    let how = match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with code {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => "ended abnormally".to_string(),
    };
    if stderr.is_empty() {
        how
    } else {
        format!("{how}; stderr ends with:\n{stderr}")
    }
}

/// A report read off a line: its step, if it gave one, and its metrics.
pub(crate) type Report = (Option<u64>, BTreeMap<String, f64>);

/// Turns stdout lines into reports.
///
/// A JSON object line is a whole report. `key: value` lines without the metric are held and
/// merged into the next line that has it, so `acc: 0.9` then `loss: 0.3` make one report.
/// Any other line is the trial's own log output and is ignored.
pub(crate) struct ReportParser {
    metric: String,
    held: BTreeMap<String, f64>,
}

impl ReportParser {
    pub(crate) fn new(metric: &str) -> ReportParser {
        ReportParser {
            metric: metric.to_string(),
            held: BTreeMap::new(),
        }
    }

    /// The (step, metrics) of a completed report, if `line` completes one. `Err`: the line is
    /// a report in form (a JSON object with the metric's key) that cannot be read, such as a
    /// number JSON cannot hold (`1e400`); the trial fails with the reason, rather than wait
    /// for a decision on a report that was never taken.
    pub(crate) fn feed(&mut self, line: &str) -> Result<Option<Report>, String> {
        let line = line.trim();
        let unreadable = |why: String| {
            format!(
                "a report could not be read ({why}): {}",
                shortened(line, 200)
            )
        };
        let (mut metrics, is_report) = if line.starts_with('{') {
            match parse_json(line) {
                Ok((_, others)) if others.contains_key(&self.metric) => {
                    let found = &others[&self.metric];
                    return Err(unreadable(format!(
                        "`{}` is {found}, expected a number",
                        self.metric
                    )));
                }
                Ok((_, others)) if others.contains_key("step") => {
                    let found = &others["step"];
                    return Err(unreadable(format!(
                        "`step` is {found}, expected a whole number"
                    )));
                }
                Ok((metrics, _)) => (metrics, true),
                Err(e) if names_key(line, &self.metric) => return Err(unreadable(e.to_string())),
                Err(_) => return Ok(None),
            }
        } else {
            let Some(pairs) = parse_pairs(line) else {
                return Ok(None);
            };
            let has_metric = pairs.contains_key(&self.metric);
            (pairs, has_metric)
        };
        if !is_report {
            self.held.append(&mut metrics);
            if self.held.len() > MAX_METRICS {
                return Err(unreadable(format!(
                    "{} metrics held for a report that never came, at most {MAX_METRICS}",
                    self.held.len()
                )));
            }
            return Ok(None);
        }
        let mut all = std::mem::take(&mut self.held);
        all.append(&mut metrics);
        if all.len() > MAX_METRICS {
            return Err(unreadable(format!(
                "{} metrics, at most {MAX_METRICS}",
                all.len()
            )));
        }
        let step = match all.remove("step") {
            None => None,
            // Below 2^53, where every whole number is exact.
            Some(s) if s >= 0.0 && s.fract() == 0.0 && s < 9.0e15 => Some(s as u64),
            Some(s) => {
                return Err(unreadable(format!(
                    "`step` is {s}, expected a whole number from 0 to 9e15"
                )))
            }
        };
        Ok(Some((step, all)))
    }
}

/// Whether a JSON-looking line has `"key":` in it.
fn names_key(line: &str, key: &str) -> bool {
    let quoted = format!("\"{key}\"");
    line.match_indices(&quoted)
        .any(|(i, _)| line[i + quoted.len()..].trim_start().starts_with(':'))
}

/// At most `max` characters of `text`, with "..." where it was cut.
fn shortened(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    }
}

/// The fields of a JSON object: the numbers (Python's `NaN`/`Infinity`, not JSON, accepted),
/// and the others, each described as it would be in an error (`the string "0.5"`).
type JsonFields = (BTreeMap<String, f64>, BTreeMap<String, String>);

fn parse_json(line: &str) -> Result<JsonFields, serde_json::Error> {
    let map: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(line).or_else(|e| {
            let fixed = line
                .replace("-Infinity", "\"-inf\"")
                .replace("Infinity", "\"inf\"")
                .replace("NaN", "\"nan\"");
            serde_json::from_str(&fixed).map_err(|_| e)
        })?;
    let (mut numbers, mut others) = (BTreeMap::new(), BTreeMap::new());
    for (k, v) in map {
        let x = match &v {
            serde_json::Value::Number(n) => n.as_f64(),
            serde_json::Value::String(s) if matches!(s.as_str(), "nan" | "inf" | "-inf") => {
                s.parse().ok()
            }
            _ => None,
        };
        match x {
            Some(x) => {
                numbers.insert(k, x);
            }
            None => {
                let kind = match &v {
                    serde_json::Value::String(_) => "the string",
                    serde_json::Value::Bool(_) => "the boolean",
                    serde_json::Value::Null => "null",
                    serde_json::Value::Array(_) => "the list",
                    _ => "the object",
                };
                let shown = match &v {
                    serde_json::Value::Null => String::new(),
                    v => format!(" {}", shortened(&v.to_string(), 40)),
                };
                others.insert(k, format!("{kind}{shown}"));
            }
        }
    }
    Ok((numbers, others))
}

/// `key: number` pairs separated by commas; `None` unless the whole line is such pairs.
fn parse_pairs(line: &str) -> Option<BTreeMap<String, f64>> {
    let mut out = BTreeMap::new();
    for part in line.split(',') {
        let (k, v) = part.split_once(':')?;
        let k = k.trim();
        let valid_key =
            !k.is_empty() && k.chars().all(|c| c.is_alphanumeric() || "_-./".contains(c));
        if !valid_key {
            return None;
        }
        out.insert(k.to_string(), v.trim().parse::<f64>().ok()?);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_pair_reports() {
        let mut p = ReportParser::new("loss");
        let (step, m) = p
            .feed(r#"{"step": 3, "loss": 0.5, "name": "x"}"#)
            .unwrap()
            .unwrap();
        assert_eq!(step, Some(3));
        assert_eq!(m, BTreeMap::from([("loss".to_string(), 0.5)]));
        assert_eq!(p.feed("Epoch 3 done"), Ok(None));
        assert_eq!(p.feed("acc: 0.9"), Ok(None));
        let (step, m) = p.feed("loss: 0.25, lr: 1e-3").unwrap().unwrap();
        assert_eq!(step, None);
        assert_eq!(m.len(), 3);
        assert_eq!(m["acc"], 0.9);
        assert_eq!(m["lr"], 0.001);
    }

    #[test]
    fn json_without_the_metric_is_still_a_report() {
        let mut p = ReportParser::new("loss");
        let (_, m) = p.feed(r#"{"acc": 0.5}"#).unwrap().unwrap();
        assert!(!m.contains_key("loss"));
    }

    #[test]
    fn python_non_finite_numbers_are_read() {
        let mut p = ReportParser::new("loss");
        let (_, m) = p.feed(r#"{"loss": NaN, "b": -Infinity}"#).unwrap().unwrap();
        assert!(m["loss"].is_nan());
        assert_eq!(m["b"], f64::NEG_INFINITY);
        let (_, m) = p.feed("loss: nan").unwrap().unwrap();
        assert!(m["loss"].is_nan());
    }

    #[test]
    fn log_lines_are_not_reports() {
        let mut p = ReportParser::new("loss");
        for line in [
            "",
            "hello world",
            "time: 12:30",
            "loss is: 3",
            "{not json",
            "{'loss': 0.5}",
        ] {
            assert_eq!(p.feed(line), Ok(None), "{line}");
        }
    }

    #[test]
    fn a_metric_that_is_not_a_number_and_a_step_that_is_not_one_are_named() {
        let mut p = ReportParser::new("loss");
        for (line, why) in [
            (
                r#"{"step": 1, "loss": "0.5"}"#,
                r#"`loss` is the string "0.5", expected a number"#,
            ),
            (r#"{"loss": null}"#, "`loss` is null, expected a number"),
            (
                r#"{"loss": [1]}"#,
                "`loss` is the list [1], expected a number",
            ),
            (
                r#"{"step": -1, "loss": 0.5}"#,
                "`step` is -1, expected a whole number from 0 to 9e15",
            ),
            (
                r#"{"step": 1.5, "loss": 0.5}"#,
                "`step` is 1.5, expected a whole number",
            ),
            (
                r#"{"step": "3", "loss": 0.5}"#,
                r#"`step` is the string "3", expected a whole number"#,
            ),
            (
                "step: -2, loss: 0.5",
                "`step` is -2, expected a whole number",
            ),
        ] {
            let e = p.feed(line).unwrap_err();
            assert!(
                e.starts_with(&format!("a report could not be read ({why}")),
                "{line}: {e}"
            );
        }
        // Other fields that are not numbers are not metrics, and no error.
        let (_, m) = p
            .feed(r#"{"loss": 0.5, "phase": "train"}"#)
            .unwrap()
            .unwrap();
        assert_eq!(m.keys().collect::<Vec<_>>(), ["loss"]);
    }

    #[test]
    fn a_report_in_form_that_cannot_be_read_is_an_error_not_a_log_line() {
        let mut p = ReportParser::new("loss");
        let e = p.feed(r#"{"step": 1, "loss": 1e400}"#).unwrap_err();
        assert!(
            e.starts_with("a report could not be read (number out of range"),
            "{e}"
        );
        assert!(e.ends_with(r#": {"step": 1, "loss": 1e400}"#), "{e}");
        // A key-value line with such a number reads as infinite (the metric check fails it).
        let (_, m) = p.feed("loss: 1e400").unwrap().unwrap();
        assert_eq!(m["loss"], f64::INFINITY);
    }
}
