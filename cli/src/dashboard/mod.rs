//! The terminal dashboard (ratatui): a live view of a sweep, for `tune run` on a terminal and
//! for `tune watch` from another one.
//!
//! The parts are kept apart as ratatui apps do: [`Board`] is the sweep's state, built from
//! [`Update`]s only; [`App`] is the user's view of it (selection, sort, filter, popups) and
//! what keys do; `draw` renders an `App`; [`Hub`] feeds boards from the coordinator and
//! serves them to watchers; [`run`] is the terminal loop that ties them together.

mod app;
mod board;
mod draw;
mod feed;

use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event as TermEvent, KeyEventKind};

pub use app::{params_text, Action, App, Focus, Popup, SortKey};
pub use board::{Board, Header, TrialView, Update};
pub use draw::{draw, Theme};
pub use feed::{
    board_from_trials, connect, live_board, send_control, ControlAnswer, ControlLine, Hub,
    HubObserver, WatchServer, WATCH_ADDR_FILE,
};

use tune::now_ms;
use tune::store::StoredExperiment;
use tune::StopHandle;

/// The board of an experiment as stored; `place` names where it is kept (its folder, or its
/// database), and `serving` who runs it now (for a sweep in a database: its coordinator, which
/// makes the board a running one, and its workers).
pub fn board_of_stored(
    place: &tune::store::StorePlace,
    stored: &StoredExperiment,
    serving: &tune::remote::Serving,
) -> Board {
    let spec = &stored.meta.spec;
    let trials = &stored.trials;
    let mut slots: Vec<String> = (trials.iter())
        .filter_map(|t| t.device.as_deref())
        .flat_map(tune::remote::gang_slots)
        .map(String::from)
        .collect();
    slots.sort();
    slots.dedup();
    let header = Header {
        name: spec.name.clone(),
        dir: place.to_string(),
        search: spec.search.algorithm.algorithm().as_str().into(),
        scheduler: spec.scheduler.name().into(),
        metric: spec.metric.clone(),
        mode: spec.mode,
        objectives: spec.objectives.clone(),
        constraints: spec.constraints.clone(),
        total: stored.meta.samples,
        slots,
        started_at: trials.iter().map(|t| t.created_at).min().unwrap_or(0),
    };
    let ended_at = trials
        .iter()
        .filter_map(|t| t.finished_at.or(t.started_at))
        .max()
        .unwrap_or(header.started_at);
    let running = serving.coordinator.is_some();
    let mut board = board_from_trials(header, trials, (!running).then_some(ended_at));
    if let Some(coordinator) = &serving.coordinator {
        board.apply(Update::Log {
            at: now_ms(),
            text: format!("running: coordinator {coordinator}"),
        });
    }
    board.remote = serving.workers.clone();
    board.scheduler = tune::scheduler_status(stored);
    board
}

/// One frame of the dashboard as text, `width` x `height` cells (for a stdout that is not a
/// terminal, and for tests).
///
/// ```
/// use tune_cli::dashboard::{render_to_string, App, Board, Header};
/// let board = Board::new(Header { name: "demo".into(), ..Header::default() });
/// let text = render_to_string(&mut App::new(board, false), 60, 20, 0);
/// assert!(text.contains("tune · demo") && text.contains("trials ("));
/// ```
pub fn render_to_string(app: &mut App, width: u16, height: u16, now: u64) -> String {
    let backend = ratatui::backend::TestBackend::new(width, height);
    let Ok(mut terminal) = ratatui::Terminal::new(backend);
    let theme = Theme { color: false };
    if terminal.draw(|f| draw(f, app, theme, now)).is_err() {
        return String::new();
    }
    let buffer = terminal.backend().buffer();
    let mut text = String::new();
    for y in 0..buffer.area.height {
        let line: String = (0..buffer.area.width)
            .map(|x| buffer[(x, y)].symbol())
            .collect();
        text += line.trim_end();
        text.push('\n');
    }
    text
}

/// Shows the dashboard on this terminal until the user leaves, fed by `updates`.
///
/// With `stop` (the sweep runs in this process), quitting while trials run asks once, then
/// stops the sweep cleanly. Without it (a watcher), q just leaves. When the updates end
/// before a sweep was seen (it failed to start), the dashboard closes by itself.
pub fn run(updates: Receiver<Update>, stop: Option<StopHandle>) -> std::io::Result<()> {
    let mut terminal = ratatui::try_init()?;
    let result = event_loop(&mut terminal, updates, stop);
    ratatui::try_restore()?;
    result
}

fn event_loop(
    terminal: &mut ratatui::DefaultTerminal,
    updates: Receiver<Update>,
    stop: Option<StopHandle>,
) -> std::io::Result<()> {
    let theme = Theme::from_env();
    let mut app = App::new(Board::default(), stop.is_some());
    let mut connected = true;
    let mut dirty = true;
    let mut drawn_at = Instant::now();
    loop {
        while connected {
            match updates.try_recv() {
                Ok(update) => {
                    app.board.apply(update);
                    dirty = true;
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    connected = false;
                    if app.board.header.name.is_empty() {
                        return Ok(()); // the sweep never started
                    }
                    if app.board.ended.is_none() {
                        app.board.apply(Update::Log {
                            at: now_ms(),
                            text: "lost the sweep: it stopped without a word (killed?)".into(),
                        });
                    }
                    dirty = true;
                }
            }
        }
        // The clock in the header moves even when nothing else does; GPUs are sampled as
        // often, where the sweep runs in this process (a watcher's machine is not its).
        if dirty || drawn_at.elapsed() >= Duration::from_secs(1) {
            if stop.is_some() {
                if let Some(gpus) = tune_trials::gpu_use() {
                    app.board.apply(Update::Gpus(gpus));
                }
            }
            terminal.draw(|frame| draw(frame, &mut app, theme, now_ms()))?;
            dirty = false;
            drawn_at = Instant::now();
        }
        if event::poll(Duration::from_millis(100))? {
            if let TermEvent::Key(key) = event::read()? {
                if key.kind != KeyEventKind::Press {
                    continue;
                }
                match app.on_key(key) {
                    Action::Quit => return Ok(()),
                    Action::StopSweep => {
                        if let Some(stop) = &stop {
                            stop.stop();
                        }
                        return Ok(());
                    }
                    Action::None => {}
                }
            }
            dirty = true; // a key or a resize
        }
    }
}
