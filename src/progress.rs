//! The plain progress line: one line a second at most, and a summary at the end.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

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

/// Whether a value is printed in scientific notation: very large or very small ones (Rust's
/// plain form of 1.7e308 has 309 digits).
fn scientific(v: f64) -> bool {
    v != 0.0 && v.is_finite() && !(1e-4..1e15).contains(&v.abs())
}

/// A metric value in full: every digit needed to read it back, as `1.7e308` rather than 309
/// digits when it is very large or very small.
///
/// ```
/// assert_eq!(tune::value_text(0.125), "0.125");
/// assert_eq!(tune::value_text(1.7e308), "1.7e308");
/// ```
pub fn value_text(v: f64) -> String {
    if scientific(v) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// A metric value to 6 decimals (or 6 decimals of its mantissa, when very large or small).
///
/// ```
/// assert_eq!(tune::value_short(0.125), "0.125000");
/// assert_eq!(tune::value_short(-1.7e308), "-1.700000e308");
/// ```
pub fn value_short(v: f64) -> String {
    if scientific(v) {
        format!("{v:.6e}")
    } else {
        format!("{v:.6}")
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
        };
        let line = format_line(&s);
        assert!(
            line.ends_with("] 11/20 done (7 completed, 3 stopped, 1 failed), 3 running, 4 paused | best loss 0.125000 (trial 5)"),
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
