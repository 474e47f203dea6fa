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
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::{substitute, Job};
use crate::protocol::{Outcome, ReportAnswer, WorkerMsg};
pub(crate) use launch::{GangPlace, Launch, Launcher, PortLease, LAUNCH_PLACEHOLDERS};
use process::{held_outside_the_group, pipe_holds, TrialProcess};
use ranks::OtherRanks;
use reports::shortened;
pub(crate) use reports::ReportParser;

mod keeper;
mod launch;
mod log;
mod process;
mod ranks;
mod reports;
mod starts;

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
    /// Who starts the processes of a trial.
    pub launcher: Launcher,
    /// Processes of a trial on this machine: started by tune under [`Launcher::Tune`], told
    /// to the command (`{nproc_per_node}`) otherwise.
    pub processes_per_node: u32,
    /// Whether trials are distributed: each attempt gets a rendezvous port and the launch
    /// placeholders and environment ([`Launch`]).
    pub distributed: bool,
}

const STDERR_TAIL: usize = 2000;

/// The longest line of stdout read: a longer one (100 MB of output with no newline) fails the
/// trial instead of filling memory.
pub(crate) const MAX_LINE: usize = 1 << 20;

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
    /// A control stopped the trial (it is settled already).
    Cancelled,
    /// A rank other than 0 ended in failure: the attempt fails with this.
    RankFailed(String),
    /// A report that could not be read: the trial fails with this reason.
    BadReport(String),
}

/// How the read loop ended.
enum ReadEnd {
    /// The child closed its stdout: it is exiting, and ends as its process does.
    Closed,
    /// The trial's process exited while a process it started in a session of its own
    /// (`setsid`) still held its stdout: the trial ends with its process, and that one is
    /// killed by the attempt's mark.
    Escaped,
    /// Cut short before the child closed its stdout.
    Cut(Cut),
}

async fn run_attempt(obj: &CommandObjective, job: &Job) -> Outcome {
    // Held until the attempt ends: no other trial of this process meets on this port. A
    // gang's worker holds its port itself (node 0's, published to the other nodes).
    let local = obj.distributed && job.gang.is_none();
    let port = match local.then(PortLease::take).transpose() {
        Ok(port) => port,
        Err(e) => return Outcome::Failed(format!("no rendezvous port: {e}")),
    };
    let launch = match (&job.gang, &port) {
        (Some(gang), _) => Some(Launch {
            nproc_per_node: obj.processes_per_node,
            nnodes: gang.nnodes,
            node_rank: gang.node_rank,
            master_addr: gang.master_addr.clone(),
            master_port: gang.master_port,
        }),
        (None, Some(port)) => Some(Launch {
            nproc_per_node: obj.processes_per_node,
            nnodes: 1,
            node_rank: 0,
            master_addr: "127.0.0.1".into(),
            master_port: port.port(),
        }),
        (None, None) => None,
    };
    let log = log::TrialLog::open(&obj.experiment_dir, job.id, job.attempt);
    let mark = keeper::attempt_mark();
    let (mut process, mut others) = match spawn(obj, job, (launch.as_ref(), &mark), &log) {
        Ok(started) => started,
        Err(failed) => return failed,
    };
    let Some((stdin, stdout, stderr)) = process.take_pipes() else {
        return Outcome::Failed("the child's pipes were not set up".into());
    };
    // Decisions go through their own task: a trial that never reads stdin must not block us.
    let (decide, decisions) = mpsc::unbounded_channel::<ReportAnswer>();
    let writer = tokio::spawn(write_decisions(stdin, decisions));
    let (leader_gone, leader_exit) = watch::channel(false);
    let stderr_tail = tokio::spawn(stderr_tail(stderr, leader_exit, log.clone()));
    let deadline = job.timeout.and_then(|t| Instant::now().checked_add(t));
    let mut ends = Ends {
        shutdown: job.shutdown.clone(),
        cancel: job.cancel.clone(),
    };
    let read = read_reports(
        obj,
        job,
        (&mut process, &mut others),
        (stdout, &log),
        decide,
        deadline,
        &mut ends,
    )
    .await;
    let escaped = matches!(read, ReadEnd::Escaped);
    let outcome = finish(
        obj,
        job,
        (&mut process, &mut others),
        read,
        (stderr_tail, &leader_gone),
        deadline,
        &mut ends,
    )
    .await;
    let _ = leader_gone.send(true);
    writer.abort();
    // Every path has ended it by now; this only makes sure nothing of it is left.
    let _ = process.end().await;
    others.terminate(Duration::ZERO, obj.grace).await;
    others.end().await;
    if obj.distributed || escaped {
        // Out of reach of the groups' signals, in sessions of their own: a launcher's ranks
        // (mpirun starts them so), or what held the trial's output open. What carries the
        // attempt's mark goes too.
        let killed = tokio::task::spawn_blocking(move || keeper::end_leftovers(&mark))
            .await
            .unwrap_or(0);
        let why = if escaped {
            "its process exited while a process it started in a session of its own (setsid) \
             still held its output open; the trial ended with its process"
                .to_string()
        } else {
            format!("its attempt {} ended", job.attempt)
        };
        if killed > 0 || escaped {
            let _ = job.tx.send(WorkerMsg::Note(format!(
                "trial {}: {why}; {killed} processes of it outside its process groups were \
                 still running, and were killed",
                job.id
            )));
        }
    }
    outcome
}

/// Starts the trial's processes: rank 0, whose pipes speak the protocol, and under
/// `launcher = "tune"` the other ranks. `Err` is the failed outcome.
fn spawn(
    obj: &CommandObjective,
    job: &Job,
    (launch, mark): (Option<&Launch>, &str),
    log: &log::TrialLog,
) -> Result<(TrialProcess, OtherRanks), Outcome> {
    let argv: Vec<String> = obj
        .argv
        .iter()
        .map(|a| substitute(a, &job.params, launch))
        .collect();
    if let Err(e) = std::fs::create_dir_all(&job.trial_dir) {
        return Err(Outcome::Failed(format!(
            "cannot create {}: {e}",
            job.trial_dir.display()
        )));
    }
    let params = serde_json::to_string(&job.params)
        .map_err(|e| Outcome::Failed(format!("the params cannot be written as JSON: {e}")))?;
    let cannot_start = |e: std::io::Error| {
        Outcome::Failed(format!(
            "cannot start `{}` (in {}): {e}",
            argv[0],
            obj.workdir.display()
        ))
    };
    let ranks = match (obj.launcher, launch) {
        (Launcher::Tune, Some(launch)) => launch.nproc_per_node,
        _ => 1,
    };
    let command = |local_rank: u32| {
        let mut cmd = trial_command(obj, job, (&argv, &params), launch);
        cmd.env(keeper::MARK_VAR, mark);
        if let (Launcher::Tune, Some(launch)) = (obj.launcher, launch) {
            cmd.envs(launch.rank_env(local_rank));
        }
        // The spec's own `env` has the last word.
        cmd.envs(&obj.env);
        cmd
    };
    let leader = TrialProcess::start(command(0)).map_err(cannot_start)?;
    let others = OtherRanks::start((1..ranks).map(|r| (r, command(r))).collect(), log)
        .map_err(cannot_start)?;
    Ok((leader, others))
}

/// The command of one of the trial's processes: argv with the params filled in, the `TUNE_*`
/// environment and, for a distributed trial, the launch environment.
fn trial_command(
    obj: &CommandObjective,
    job: &Job,
    (argv, params): (&[String], &str),
    launch: Option<&Launch>,
) -> tokio::process::Command {
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
        // A trial on GPUs sees only its own (numbered from 0), as with Ray Tune.
        .envs(
            job.device
                .visible_gpus()
                .map(|gpus| ("CUDA_VISIBLE_DEVICES", gpus)),
        );
    if let Some(launch) = launch {
        cmd.envs(launch.env());
    }
    cmd
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
async fn stderr_tail(
    mut stderr: ChildStderr,
    mut leader_exit: watch::Receiver<bool>,
    log: log::TrialLog,
) -> String {
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
        log.write(&buf[..n]);
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
    (process, others): (&mut TrialProcess, &mut OtherRanks),
    (stdout, log): (ChildStdout, &log::TrialLog),
    decide: mpsc::UnboundedSender<ReportAnswer>,
    deadline: Option<Instant>,
    ends: &mut Ends,
) -> ReadEnd {
    use std::os::fd::AsRawFd;
    let mut stdout = BufReader::new(stdout);
    let mut parser = ReportParser::new(&obj.metric);
    let mut line = Vec::new();
    // Once the leader has exited: how much of what it wrote is left to read. The trial ends
    // with its process, not with its stdout, which a process it started in a session of its
    // own (`setsid`) can hold open for ever.
    let mut left: Option<usize> = None;
    loop {
        if left == Some(0) && line.is_empty() {
            if held_outside_the_group(stdout.get_ref().as_raw_fd(), process.group()).await {
                return ReadEnd::Escaped;
            }
            return ReadEnd::Closed;
        }
        // A line partly read when the leader's exit won the race goes on where it stopped
        // (`read_line_capped` keeps what it consumed in `line`).
        let read = tokio::select! {
            r = read_line_capped(&mut stdout, &mut line, &mut left) => r,
            _ = process.exited(), if left.is_none() => {
                // What it wrote is still in the pipe, read next; what it left running goes.
                let _ = process.end().await;
                left = Some(stdout.buffer().len() + pipe_holds(stdout.get_ref().as_raw_fd()));
                continue;
            }
            _ = sleep_until(deadline) => return ReadEnd::Cut(Cut::TimedOut),
            cut = ends.cut() => return ReadEnd::Cut(cut),
            why = others.failure() => return ReadEnd::Cut(Cut::RankFailed(why)),
        };
        match read {
            Ok(0) | Err(_) => return ReadEnd::Closed,
            Ok(n) if n > MAX_LINE => {
                return ReadEnd::Cut(Cut::BadReport(format!(
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
            Ok(None) => {
                // Not a report: the trial's own output, kept in its log.
                log.write(text.as_bytes());
                if !text.ends_with('\n') {
                    log.write(b"\n");
                }
                continue;
            }
            Err(reason) => return ReadEnd::Cut(Cut::BadReport(reason)),
        };
        let Some(decision) = decision_on(job, step, metrics).await else {
            return ReadEnd::Cut(Cut::Interrupted);
        };
        let _ = decide.send(decision);
        if decision != ReportAnswer::Continue {
            return ReadEnd::Cut(Cut::Stopped);
        }
    }
}

/// Sends the report to the coordinator and waits for its decision; `None` where it is not
/// kept (then the trial gets no line, which it would take as the acknowledgement and save the
/// step) or nobody answers: the run is over.
async fn decision_on(
    job: &Job,
    step: Option<u64>,
    metrics: BTreeMap<String, f64>,
) -> Option<ReportAnswer> {
    let (ack, answer) = oneshot::channel();
    let msg = WorkerMsg::Report {
        id: job.id,
        attempt: job.attempt,
        step,
        metrics,
        ack,
    };
    job.tx.send(msg).ok()?;
    match answer.await {
        Ok(ReportAnswer::Refused) | Err(_) => None,
        Ok(decision) => Some(decision),
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
    (process, others): (&mut TrialProcess, &mut OtherRanks),
    read: ReadEnd,
    (stderr_tail, leader_gone): (tokio::task::JoinHandle<String>, &watch::Sender<bool>),
    deadline: Option<Instant>,
    ends: &mut Ends,
) -> Outcome {
    let cut = match read {
        ReadEnd::Cut(cut) => cut,
        ReadEnd::Closed | ReadEnd::Escaped => {
            let exited = tokio::select! {
                _ = process.exited() => None,
                _ = sleep_until(deadline) => Some(Cut::TimedOut),
                cut = ends.cut() => Some(cut),
                why = others.failure() => Some(Cut::RankFailed(why)),
            };
            match exited {
                Some(cut) => cut,
                None => match process.end().await {
                    Ok(status) if status.success() => {
                        return match others.wait_all(obj.grace).await {
                            Ok(()) => Outcome::Returned,
                            Err(why) => Outcome::Failed(why),
                        }
                    }
                    Ok(status) => {
                        // It has exited: its stderr is read no further than it wrote.
                        let _ = leader_gone.send(true);
                        let tail = stderr_tail.await.unwrap_or_default();
                        return Outcome::Failed(describe_exit(status, &tail));
                    }
                    Err(e) => {
                        return Outcome::Failed(format!("waiting for the process failed: {e}"))
                    }
                },
            }
        }
    };
    // A trial told to stop may end on its own (and checkpoint) within the grace; otherwise
    // it is ended at once. Every rank alike, all at the same time.
    let (patience, outcome) = match cut {
        Cut::Stopped => (obj.grace, Outcome::Stopped),
        Cut::TimedOut => (Duration::ZERO, timed_out(job)),
        Cut::Interrupted => (Duration::ZERO, Outcome::Interrupted),
        Cut::Cancelled => (Duration::ZERO, Outcome::Stopped),
        Cut::BadReport(reason) | Cut::RankFailed(reason) => {
            (Duration::ZERO, Outcome::Failed(reason))
        }
    };
    tokio::join!(
        process.terminate(patience, obj.grace),
        others.terminate(patience, obj.grace)
    );
    outcome
}

fn timed_out(job: &Job) -> Outcome {
    let secs = job.timeout.map_or(0.0, |t| t.as_secs_f64());
    Outcome::Failed(format!("timed out after {secs} s"))
}

/// What ends a run from outside: the sweep's shutdown, or a control stopping its trial.
struct Ends {
    shutdown: watch::Receiver<bool>,
    cancel: watch::Receiver<bool>,
}

impl Ends {
    /// Waits for either, and says which came.
    async fn cut(&mut self) -> Cut {
        tokio::select! {
            _ = until_shutdown(&mut self.shutdown) => Cut::Interrupted,
            _ = until_shutdown(&mut self.cancel) => Cut::Cancelled,
        }
    }
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
