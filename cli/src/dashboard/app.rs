//! What the dashboard's user is doing: selection, sort, filter, focus, popups; and what each
//! key does. Kept apart from the sweep's state ([`Board`]) and from drawing.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use tune_search::{Status, TrialId};

use super::board::{Board, TrialView};

/// The column the trials table is sorted by (`s` cycles, `S` reverses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    Id,
    Status,
    /// The metric at the last report.
    Last,
    /// The best value the trial reported at any step (its peak: the sweep itself ranks
    /// trials by their last report, as `last` shows).
    Peak,
    Step,
}

impl SortKey {
    pub fn name(self) -> &'static str {
        match self {
            SortKey::Id => "id",
            SortKey::Status => "status",
            SortKey::Last => "last",
            SortKey::Peak => "peak",
            SortKey::Step => "step",
        }
    }

    fn next(self) -> SortKey {
        match self {
            SortKey::Id => SortKey::Status,
            SortKey::Status => SortKey::Last,
            SortKey::Last => SortKey::Peak,
            SortKey::Peak => SortKey::Step,
            SortKey::Step => SortKey::Id,
        }
    }
}

/// The panel arrows act on (Tab moves between them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Focus {
    Trials,
    Log,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Popup {
    Help,
    /// The selected trial: params, all metrics, error, lineage.
    Details,
    /// q while trials run: stop the sweep?
    ConfirmQuit,
}

/// What the caller does after a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    None,
    /// Leave the dashboard (the sweep has ended, or this is a read-only watcher).
    Quit,
    /// Stop the sweep cleanly (resumable), then leave.
    StopSweep,
}

/// The dashboard: the sweep's state plus the user's view of it.
///
/// ```
/// use tune_cli::dashboard::{Action, App, Board};
/// use ratatui::crossterm::event::{KeyCode, KeyEvent};
/// let mut app = App::new(Board::default(), false);
/// assert_eq!(app.on_key(KeyEvent::from(KeyCode::Char('q'))), Action::Quit);
/// ```
#[derive(Debug, Clone)]
pub struct App {
    pub board: Board,
    /// The sweep runs in this process and can be stopped from here (not a watcher).
    pub controls_sweep: bool,
    /// Index of the selected row among [`App::rows`].
    pub selected: usize,
    pub sort: SortKey,
    pub descending: bool,
    pub filter: String,
    pub editing_filter: bool,
    pub focus: Focus,
    pub popup: Option<Popup>,
    /// Log lines scrolled back from the newest.
    pub log_back: usize,
    /// Set once the user asked to stop the sweep.
    pub stopping: bool,
    /// Rows the table showed last time it was drawn (for Page Up / Down).
    pub page: usize,
}

impl App {
    pub fn new(board: Board, controls_sweep: bool) -> App {
        App {
            board,
            controls_sweep,
            selected: 0,
            sort: SortKey::Id,
            descending: false,
            filter: String::new(),
            editing_filter: false,
            focus: Focus::Trials,
            popup: None,
            log_back: 0,
            stopping: false,
            page: 10,
        }
    }

    /// Trial ids as the table shows them: filtered, then sorted.
    pub fn rows(&self) -> Vec<TrialId> {
        let metric = &self.board.header.metric;
        let mode = self.board.header.mode;
        let needle = self.filter.to_lowercase();
        let rows: Vec<&TrialView> = self
            .board
            .trials
            .iter()
            .filter(|t| needle.is_empty() || row_text(t).to_lowercase().contains(&needle))
            .collect();
        // Missing values sort last either way; "best first" means the mode's order.
        let by_value = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(x), Some(y)) => match mode {
                tune_search::Mode::Min => x.total_cmp(&y),
                tune_search::Mode::Max => y.total_cmp(&x),
            },
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        };
        // Keys are computed once per row, not once per comparison (10,000 rows).
        let key = |t: &TrialView| -> Option<f64> {
            match self.sort {
                SortKey::Last => t.last(metric),
                SortKey::Peak => t.best(metric, mode),
                _ => None,
            }
        };
        let mut keyed: Vec<(&TrialView, Option<f64>)> =
            rows.into_iter().map(|t| (t, key(t))).collect();
        keyed.sort_by(|(a, ka), (b, kb)| {
            let order = match self.sort {
                SortKey::Id => a.trial.id.cmp(&b.trial.id),
                SortKey::Status => status_rank(a.trial.status).cmp(&status_rank(b.trial.status)),
                SortKey::Last | SortKey::Peak => by_value(*ka, *kb),
                SortKey::Step => b.results.len().cmp(&a.results.len()),
            };
            let order = if self.descending {
                order.reverse()
            } else {
                order
            };
            order.then(a.trial.id.cmp(&b.trial.id))
        });
        keyed.into_iter().map(|(t, _)| t.trial.id).collect()
    }

    /// The selected trial, if the table has rows.
    pub fn selected_trial(&self) -> Option<TrialId> {
        let rows = self.rows();
        rows.get(self.selected.min(rows.len().saturating_sub(1)))
            .copied()
    }

    /// Whether the sweep is still going (so quitting has to stop it).
    pub fn sweep_running(&self) -> bool {
        self.controls_sweep && self.board.ended.is_none()
    }

    pub fn on_key(&mut self, key: KeyEvent) -> Action {
        let ctrl_c =
            key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c');
        if self.editing_filter && !ctrl_c {
            self.edit_filter(key.code);
            return Action::None;
        }
        if self.popup == Some(Popup::ConfirmQuit) {
            return self.confirm_quit(key.code, ctrl_c);
        }
        if ctrl_c || key.code == KeyCode::Char('q') {
            if self.sweep_running() && !self.stopping {
                self.popup = Some(Popup::ConfirmQuit);
                return Action::None;
            }
            return Action::Quit;
        }
        let rows = self.rows().len();
        let last = rows.saturating_sub(1);
        match key.code {
            KeyCode::Esc => self.popup = None,
            KeyCode::Char('?') => {
                self.popup = (self.popup != Some(Popup::Help)).then_some(Popup::Help)
            }
            KeyCode::Enter => {
                self.popup =
                    (self.popup != Some(Popup::Details) && rows > 0).then_some(Popup::Details)
            }
            KeyCode::Char('s') => {
                self.sort = self.sort.next();
                self.selected = 0;
            }
            KeyCode::Char('S') => {
                self.descending = !self.descending;
                self.selected = 0;
            }
            KeyCode::Char('/') => {
                self.editing_filter = true;
                self.popup = None;
            }
            KeyCode::Tab | KeyCode::BackTab => {
                self.focus = match self.focus {
                    Focus::Trials => Focus::Log,
                    Focus::Log => Focus::Trials,
                }
            }
            KeyCode::Down | KeyCode::Char('j') => self.scroll(1, last),
            KeyCode::Up | KeyCode::Char('k') => self.scroll(-1, last),
            KeyCode::PageDown => self.scroll(self.page as i64, last),
            KeyCode::PageUp => self.scroll(-(self.page as i64), last),
            KeyCode::Home | KeyCode::Char('g') => self.scroll(i64::MIN / 2, last),
            KeyCode::End | KeyCode::Char('G') => self.scroll(i64::MAX / 2, last),
            _ => {}
        }
        Action::None
    }

    /// A key typed while the filter is being edited.
    fn edit_filter(&mut self, code: KeyCode) {
        match code {
            KeyCode::Enter => self.editing_filter = false,
            KeyCode::Esc => {
                self.editing_filter = false;
                self.filter.clear();
            }
            KeyCode::Backspace => {
                self.filter.pop();
            }
            KeyCode::Char(c) => self.filter.push(c),
            _ => {}
        }
        self.selected = 0;
    }

    /// The answer to "stop the sweep?": yes (`y`, `q`, Enter, Ctrl-C again) or anything else.
    fn confirm_quit(&mut self, code: KeyCode, ctrl_c: bool) -> Action {
        match code {
            KeyCode::Char('y' | 'q') | KeyCode::Enter => {
                self.popup = None;
                self.stopping = true;
                Action::StopSweep
            }
            _ if ctrl_c => {
                self.stopping = true;
                Action::StopSweep
            }
            _ => {
                self.popup = None;
                Action::None
            }
        }
    }

    fn scroll(&mut self, by: i64, last_row: usize) {
        match self.focus {
            Focus::Trials => {
                self.selected = (self.selected.min(last_row) as i64)
                    .saturating_add(by)
                    .clamp(0, last_row as i64) as usize
            }
            // The log counts back from its newest line: down goes towards it.
            Focus::Log => {
                let last = self.board.log.len().saturating_sub(1) as i64;
                self.log_back = (self.log_back as i64)
                    .saturating_sub(by)
                    .clamp(0, last.max(0)) as usize
            }
        }
    }
}

/// Running first, then paused and pending, then the finished ones.
fn status_rank(s: Status) -> u8 {
    match s {
        Status::Running => 0,
        Status::Paused => 1,
        Status::Pending => 2,
        Status::Completed => 3,
        Status::Stopped => 4,
        Status::Failed => 5,
    }
}

/// What `/` matches against: the id, status, device and params as the table shows them.
fn row_text(t: &TrialView) -> String {
    format!(
        "{} {} {} {}",
        t.trial.id,
        t.trial.status.as_str(),
        t.trial.device.as_deref().unwrap_or(""),
        params_text(&t.trial.params)
    )
}

/// `lr=0.00123 width=64 optimizer=sgd`, numbers to 4 significant digits.
pub fn params_text(params: &tune_search::Params) -> String {
    tune_search::params_digits(params, 4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dashboard::board::{Header, Update};
    use std::collections::BTreeMap;
    use tune::{Trial, TrialResult};
    use tune_search::Value;

    fn key(c: char) -> KeyEvent {
        KeyEvent::from(KeyCode::Char(c))
    }

    fn board() -> Board {
        let mut b = Board::new(Header {
            metric: "loss".into(),
            total: 3,
            ..Header::default()
        });
        for (id, loss, status) in [
            (0, Some(0.5), Status::Completed),
            (1, None, Status::Running),
            (2, Some(0.2), Status::Failed),
        ] {
            let mut t = Trial::new(id, Default::default());
            t.params.insert("lr", Value::Float(0.001 * (id + 1) as f64));
            t.status = status;
            b.apply(Update::Trial(t));
            if let Some(loss) = loss {
                b.apply(Update::Result {
                    id,
                    at: 0,
                    result: TrialResult {
                        step: 1,
                        seq: id,
                        attempt: 1,
                        metrics: BTreeMap::from([("loss".into(), loss)]),
                    },
                });
            }
        }
        b
    }

    #[test]
    fn sort_cycles_reverses_and_puts_missing_values_last() {
        let mut app = App::new(board(), false);
        assert_eq!(app.rows(), [0, 1, 2]);
        app.on_key(key('s'));
        assert_eq!(app.sort, SortKey::Status);
        assert_eq!(app.rows(), [1, 0, 2]);
        app.on_key(key('s'));
        assert_eq!((app.sort, app.rows()), (SortKey::Last, vec![2, 0, 1]));
        app.on_key(key('S'));
        assert_eq!(app.rows(), [1, 0, 2]);
    }

    #[test]
    fn the_filter_matches_status_and_params() {
        let mut app = App::new(board(), false);
        for c in "/fail".chars() {
            app.on_key(key(c));
        }
        assert!(app.editing_filter);
        assert_eq!(app.rows(), [2]);
        app.on_key(KeyEvent::from(KeyCode::Enter));
        assert!(!app.editing_filter);
        // Keys act on the table again; Esc in the filter clears it.
        app.on_key(key('/'));
        app.on_key(KeyEvent::from(KeyCode::Backspace));
        app.on_key(KeyEvent::from(KeyCode::Esc));
        assert_eq!(app.rows().len(), 3);
        app.filter = "lr=0.002".into();
        assert_eq!(app.rows(), [1]);
    }

    #[test]
    fn moving_clamps_and_enter_opens_details() {
        let mut app = App::new(board(), false);
        app.on_key(KeyEvent::from(KeyCode::Up));
        assert_eq!(app.selected, 0);
        for _ in 0..5 {
            app.on_key(key('j'));
        }
        assert_eq!((app.selected, app.selected_trial()), (2, Some(2)));
        app.on_key(key('g'));
        assert_eq!(app.selected, 0);
        app.on_key(KeyEvent::from(KeyCode::Enter));
        assert_eq!(app.popup, Some(Popup::Details));
        app.on_key(key('?'));
        assert_eq!(app.popup, Some(Popup::Help));
        app.on_key(KeyEvent::from(KeyCode::Esc));
        assert_eq!(app.popup, None);
    }

    #[test]
    fn quitting_a_running_sweep_asks_once_then_stops_it() {
        let mut app = App::new(board(), true);
        assert_eq!(app.on_key(key('q')), Action::None);
        assert_eq!(app.popup, Some(Popup::ConfirmQuit));
        // Any other key keeps the sweep going.
        assert_eq!(app.on_key(key('n')), Action::None);
        assert_eq!(app.popup, None);
        app.on_key(key('q'));
        assert_eq!(app.on_key(key('y')), Action::StopSweep);
        assert!(app.stopping);
        // Once the sweep has ended, q just leaves.
        let mut done = App::new(board(), true);
        done.board.ended = Some((1, false));
        assert_eq!(done.on_key(key('q')), Action::Quit);
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        let mut watcher = App::new(board(), false);
        assert_eq!(watcher.on_key(ctrl_c), Action::Quit);
    }
}
