//! The plain progress line: one line a second at most, and a summary at the end.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use crate::coordinator::{Event, Observer, Summary};

/// Prints progress to stdout: rewritten in place on a terminal, one line per update otherwise.
///
/// ```
/// let p = tune::ProgressLine::new();
/// # drop(p);
/// ```
pub struct ProgressLine {
    last: Option<Instant>,
    every: Duration,
    in_place: bool,
}

impl ProgressLine {
    pub fn new() -> ProgressLine {
        ProgressLine {
            last: None,
            every: Duration::from_secs(1),
            in_place: std::io::stdout().is_terminal(),
        }
    }

    fn print(&mut self, summary: &Summary, end: bool) {
        let line = format_line(summary);
        let mut out = std::io::stdout().lock();
        let _ = if self.in_place {
            write!(out, "\r{line}\x1b[K{}", if end { "\n" } else { "" })
        } else {
            writeln!(out, "{line}")
        };
        let _ = out.flush();
    }
}

impl Default for ProgressLine {
    fn default() -> Self {
        Self::new()
    }
}

/// `[ 12.3s] 40/100 done (38 completed, 2 failed), 2 running | best loss 0.0123 (trial 17)`.
pub fn format_line(s: &Summary) -> String {
    let mut line = format!(
        "[{:>6.1}s] {}/{} done ({} completed",
        s.started.elapsed().as_secs_f64(),
        s.finished(),
        s.total,
        s.completed
    );
    if s.stopped > 0 {
        line += &format!(", {} stopped", s.stopped);
    }
    if s.failed > 0 {
        line += &format!(", {} failed", s.failed);
    }
    line += &format!("), {} running", s.running);
    if let Some((id, v)) = s.best {
        line += &format!(" | best {} {v:.6} (trial {id})", s.metric);
    }
    line
}

impl Observer for ProgressLine {
    fn on_event(&mut self, event: &Event<'_>, summary: &Summary) {
        if !matches!(event, Event::Finished(_)) {
            return;
        }
        if self.last.is_none_or(|t| t.elapsed() >= self.every) {
            self.last = Some(Instant::now());
            self.print(summary, false);
        }
    }

    fn on_end(&mut self, summary: &Summary) {
        self.print(summary, true);
    }
}
