//! The processes of a trial besides rank 0, where tune is the launcher (`launcher = "tune"`):
//! started with it, their output kept in the trial's log, watched for a failure (which fails
//! the attempt), and ended with it.

use std::process::ExitStatus;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tokio::process::Command;
use tokio::task::JoinHandle;

use super::log::TrialLog;
use super::process::TrialProcess;

/// How often the other ranks are looked at for an exit.
const LOOK: Duration = Duration::from_millis(20);

/// Ranks 1 and up of one attempt on this machine.
pub(super) struct OtherRanks {
    ranks: Vec<Rank>,
}

struct Rank {
    rank: u32,
    process: TrialProcess,
    /// Its exit, once reaped.
    status: Option<ExitStatus>,
    /// The tasks copying its stdout and stderr into the log.
    output: [JoinHandle<()>; 2],
}

impl OtherRanks {
    /// Starts each `(rank, command)`; their output goes to `log`, line by line, after a
    /// `[rank N]` mark. On an error the ranks already started are killed (on drop).
    pub(super) fn start(
        commands: Vec<(u32, Command)>,
        log: &TrialLog,
    ) -> std::io::Result<OtherRanks> {
        let mut ranks = Vec::with_capacity(commands.len());
        for (rank, cmd) in commands {
            let mut process = TrialProcess::start(cmd)?;
            let (stdin, stdout, stderr) = process
                .take_pipes()
                .ok_or_else(|| std::io::Error::other("the rank's pipes were not set up"))?;
            // Decisions go to rank 0 alone: the others' stdin is closed at once.
            drop(stdin);
            ranks.push(Rank {
                rank,
                process,
                status: None,
                output: [
                    tokio::spawn(copy_lines(stdout, rank, log.clone())),
                    tokio::spawn(copy_lines(stderr, rank, log.clone())),
                ],
            });
        }
        Ok(OtherRanks { ranks })
    }

    /// Resolves when a rank has ended in failure (a non-zero exit, a signal): what happened,
    /// for the attempt's error. Never resolves while they run or once all have exited 0.
    pub(super) async fn failure(&mut self) -> String {
        loop {
            if let Some(why) = self.reap_exited().await {
                return why;
            }
            if self.ranks.iter().all(|r| r.status.is_some()) {
                // Nothing left to fail (or no other rank at all): no more looks.
                return std::future::pending().await;
            }
            tokio::time::sleep(LOOK).await;
        }
    }

    /// After rank 0 exited 0: waits up to `grace` for the others to exit; a failure or one
    /// still running after that fails the attempt (`Err`, what happened).
    pub(super) async fn wait_all(&mut self, grace: Duration) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            if let Some(why) = self.reap_exited().await {
                return Err(why);
            }
            if self.ranks.iter().all(|r| r.status.is_some()) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                let running: Vec<String> = (self.ranks.iter())
                    .filter(|r| r.status.is_none())
                    .map(|r| r.rank.to_string())
                    .collect();
                return Err(format!(
                    "rank 0 exited, but rank {} was still running {} s later",
                    running.join(", "),
                    grace.as_secs_f64()
                ));
            }
            tokio::time::sleep(LOOK).await;
        }
    }

    /// Reaps the ranks that have exited; the first failure among them, described.
    async fn reap_exited(&mut self) -> Option<String> {
        for r in &mut self.ranks {
            if r.status.is_some() || !r.process.has_exited() {
                continue;
            }
            let status = r.process.end().await;
            let status = match status {
                Ok(status) => status,
                Err(e) => return Some(format!("rank {}: waiting for it failed: {e}", r.rank)),
            };
            r.status = Some(status);
            if !status.success() {
                return Some(format!(
                    "rank {} {} (its output is in the trial's log)",
                    r.rank,
                    super::describe_exit(status, "")
                ));
            }
        }
        None
    }

    /// Ends every rank still running as [`TrialProcess::terminate`] does, all at once.
    pub(super) async fn terminate(&mut self, patience: Duration, grace: Duration) {
        let mut all = tokio::task::JoinSet::new();
        for mut r in std::mem::take(&mut self.ranks) {
            all.spawn(async move {
                if r.status.is_none() {
                    r.process.terminate(patience, grace).await;
                }
                r
            });
        }
        while let Some(r) = all.join_next().await {
            if let Ok(r) = r {
                self.ranks.push(r);
            }
        }
    }

    /// Kills what is left of every rank's group and reaps each.
    pub(super) async fn end(&mut self) {
        for r in &mut self.ranks {
            if let Ok(status) = r.process.end().await {
                r.status.get_or_insert(status);
            }
            for task in &r.output {
                task.abort();
            }
        }
    }
}

/// Copies what a rank writes into the trial's log, each line after its rank.
async fn copy_lines(pipe: impl AsyncRead + Unpin, rank: u32, log: TrialLog) {
    let mut lines = BufReader::new(pipe);
    let mut line = Vec::new();
    loop {
        line.clear();
        // A line without end is cut, as rank 0's are: a rank cannot fill memory.
        let mut capped = (&mut lines).take(super::MAX_LINE as u64);
        match capped.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if !line.ends_with(b"\n") {
            line.push(b'\n');
        }
        let mut marked = format!("[rank {rank}] ").into_bytes();
        marked.extend_from_slice(&line);
        log.write(&marked);
    }
}
