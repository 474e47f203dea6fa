//! `tune watch`: the dashboard of a running or finished sweep, read-only.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use tune::{now_ms, TuneError};
use tune_cli::dashboard::{App, Board, Update};

use crate::args::{Named, WatchArgs};
use crate::commands::state::{quiet_on_broken_pipe, stored_of, Stored};

pub fn watch(args: WatchArgs) -> Result<ExitCode, TuneError> {
    watch_named(&Named::new(args.experiment, &args.store)?)
}

/// `tune watch`: the running sweep's own board over its socket, else the stored one; for an
/// experiment in a database, the stored one read again every second, or four times as long
/// as a read takes (its coordinator and workers may be anywhere).
fn watch_named(named: &Named) -> Result<ExitCode, TuneError> {
    if let Named::Folder(dir) = named {
        if let Some(rx) = live_updates(dir) {
            return show_board(rx);
        }
    }
    let first = stored_board(named)?;
    let (tx, rx) = std::sync::mpsc::channel();
    let _ = tx.send(Update::Board(Box::new(first)));
    if let Named::InDatabase { .. } = named {
        let named = named.clone();
        std::thread::spawn(move || {
            let mut failing = false;
            let mut pause = Duration::from_secs(1);
            loop {
                std::thread::sleep(pause);
                let read_at = Instant::now();
                let read = stored_board(&named);
                // A big sweep takes a while to read: the database is not kept busy with it.
                pause = (read_at.elapsed() * 4).max(Duration::from_secs(1));
                let update = match read {
                    Ok(board) => {
                        failing = false;
                        Update::Board(Box::new(board))
                    }
                    Err(_) if failing => continue,
                    Err(e) => {
                        failing = true;
                        Update::Log {
                            at: now_ms(),
                            text: format!("cannot read the sweep now: {e}"),
                        }
                    }
                };
                if tx.send(update).is_err() {
                    return; // the watcher left
                }
            }
        });
    }
    show_board(rx)
}

/// The board of the experiment as stored now, with who serves it (a sweep in a database).
fn stored_board(named: &Named) -> Result<Board, TuneError> {
    let Stored { place, stored, db } = stored_of(named)?;
    let serving = match db {
        Some(mut db) => db.serving()?,
        None => Default::default(),
    };
    Ok(tune_cli::dashboard::board_of_stored(
        &place, &stored, &serving,
    ))
}

/// The live board of a sweep running from folder `dir`, if one answers.
fn live_updates(dir: &Path) -> Option<std::sync::mpsc::Receiver<Update>> {
    tune_cli::dashboard::connect(dir).and_then(|rx| {
        // A stale address (a sweep killed with -9) answers nothing or refuses.
        let first = rx.recv_timeout(Duration::from_secs(3)).ok()?;
        let (tx, chained) = std::sync::mpsc::channel();
        let _ = tx.send(first);
        std::thread::spawn(move || {
            for u in rx {
                if tx.send(u).is_err() {
                    return;
                }
            }
        });
        Some(chained)
    })
}

/// Shows the board `updates` feed: the dashboard, or one frame when stdout is not a terminal.
fn show_board(updates: std::sync::mpsc::Receiver<Update>) -> Result<ExitCode, TuneError> {
    if !std::io::stdout().is_terminal() {
        // Not a terminal: print one frame of what the dashboard shows now.
        let mut board = Board::default();
        while let Ok(u) = updates.recv_timeout(Duration::from_millis(200)) {
            board.apply(u);
        }
        let mut app = App::new(board, false);
        let frame = tune_cli::dashboard::render_to_string(&mut app, 120, 40, now_ms());
        quiet_on_broken_pipe(std::io::stdout().lock().write_all(frame.as_bytes()))?;
        return Ok(ExitCode::SUCCESS);
    }
    tune_cli::dashboard::run(updates, None).map_err(|e| TuneError::io("the dashboard", e))?;
    Ok(ExitCode::SUCCESS)
}
