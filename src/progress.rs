//! The plain progress line: one line a second at most, and a summary at the end.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use tune_search::value_short;

use crate::observer::{Event, Observer, Summary};

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
    if s.paused > 0 {
        line += &format!(", {} paused", s.paused);
    }
    if let Some((id, v)) = s.best {
        line += &format!(" | best {} {} (trial {id})", s.metric, value_short(v));
    }
    line
}

impl Observer for ProgressLine {
    fn on_event(&mut self, event: &Event<'_>, summary: &Summary) {
        if let Event::Note(note) = event {
            eprintln!("tune: {note}");
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;
    use tune_search::Mode;

    #[test]
    fn the_line_shows_every_state_that_is_present() {
        let s = Summary {
            metric: "loss".into(),
            mode: Mode::Min,
            total: 20,
            pending: 2,
            running: 3,
            paused: 4,
            completed: 7,
            stopped: 3,
            failed: 1,
            best: Some((5, 0.125)),
            started: Instant::now(),
            constraints: Default::default(),
        };
        let line = format_line(&s);
        assert!(
            line.ends_with("] 11/20 done (7 completed, 3 stopped, 1 failed), 3 running, 4 paused | best loss 0.125 (trial 5)"),
            "{line}"
        );
        let quiet = Summary {
            paused: 0,
            stopped: 0,
            failed: 0,
            best: None,
            ..s
        };
        assert!(
            format_line(&quiet).ends_with("] 7/20 done (7 completed), 3 running"),
            "{}",
            format_line(&quiet)
        );
    }
}
