//! Where dashboards get their updates: a [`Hub`] fed by the coordinator (as an
//! [`Observer`]) keeps the current [`Board`] and fans updates out to subscribers: this
//! process's dashboard, and `tune watch` processes connected over a local socket.
//!
//! Publishing never waits on a dashboard: updates go into unbounded channels, and a watcher
//! that cannot keep up is dropped.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tune::{now_ms, Control, SweepControl, Trial};
use tune::{Event, Observer, Summary, SweepInfo};

use super::board::{Board, Header, TrialView, Update};

/// The file in an experiment folder that tells `tune watch` where a running sweep listens,
/// and the token it must send first: `127.0.0.1:PORT TOKEN`. Readable by its owner only, so
/// other users of a shared machine cannot read the sweep's params and results.
pub const WATCH_ADDR_FILE: &str = "watch.addr";

/// How long a watcher has to send the token before it is hung up on.
const TOKEN_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// What a connection that sent the token asks for: the updates (`TOKEN`), or to carry out one
/// control (`TOKEN control`, then a line of [`ControlLine`] JSON, answered with one of
/// [`ControlAnswer`]).
#[derive(Debug, PartialEq)]
enum Asked {
    Updates,
    Control,
}

/// What the connection on `stream` asks for, if its first line (read within [`TOKEN_WAIT`])
/// starts with `token`.
fn sent_token(stream: &TcpStream, token: &str) -> Option<Asked> {
    let _ = stream.set_read_timeout(Some(TOKEN_WAIT));
    // Byte by byte, so that nothing after the line is consumed (a control follows it), and
    // at most a token's length and a word: a watcher cannot make us buffer more.
    let mut bytes = Vec::new();
    let mut read = Ok(());
    for byte in std::io::Read::bytes(std::io::Read::take(stream, token.len() as u64 + 10)) {
        match byte {
            Ok(b'\n') => break,
            Ok(b) => bytes.push(b),
            Err(e) => {
                read = Err(e);
                break;
            }
        }
    }
    let line = String::from_utf8_lossy(&bytes);
    let line = line.trim_end();
    let (sent, asked) = match line.split_once(' ') {
        Some((sent, "control")) => (sent, Asked::Control),
        Some(_) => return None,
        None => (line, Asked::Updates),
    };
    (read.is_ok() && crate::secret::is_token(sent, token)).then_some(asked)
}

/// A control sent over the watch socket: what, and who asks (for the sweep's log).
#[derive(Debug, Serialize, Deserialize)]
pub struct ControlLine {
    pub control: Control,
    pub from: String,
}

/// The sweep's answer to a [`ControlLine`]: what was done, or why not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControlAnswer {
    pub ok: bool,
    pub message: String,
}

/// The longest control line read (an enqueued point with its params).
const MAX_CONTROL_LINE: u64 = 1 << 20;

/// Reads one control line from `stream`, has the sweep carry it out, and answers.
fn answer_control(stream: TcpStream, control: Option<&SweepControl>) {
    let mut line = String::new();
    let read = BufReader::new(std::io::Read::take(&stream, MAX_CONTROL_LINE)).read_line(&mut line);
    let answer = match (read, serde_json::from_str::<ControlLine>(&line), control) {
        (Err(e), _, _) => ControlAnswer {
            ok: false,
            message: format!("reading the control: {e}"),
        },
        (_, Err(e), _) => ControlAnswer {
            ok: false,
            message: format!("not a control: {e}"),
        },
        (_, _, None) => ControlAnswer {
            ok: false,
            message: "this sweep takes no controls".into(),
        },
        (_, Ok(asked), Some(control)) => match control.send(asked.control, &asked.from) {
            Ok(message) => ControlAnswer { ok: true, message },
            Err(e) => ControlAnswer {
                ok: false,
                message: e.to_string(),
            },
        },
    };
    let mut out = stream;
    let _ = writeln!(
        out,
        "{}",
        serde_json::to_string(&answer).unwrap_or_default()
    );
}

/// Has the sweep running in `dir` carry out `control` (`from` names who asks), through its
/// watch socket: its answer, or why none came.
pub fn send_control(dir: &Path, control: &Control, from: &str) -> Result<ControlAnswer, String> {
    let text = std::fs::read_to_string(dir.join(WATCH_ADDR_FILE))
        .map_err(|_| "the sweep is not running here".to_string())?;
    let (addr, token) = text
        .trim()
        .split_once(' ')
        .ok_or("the sweep's watch address is unreadable")?;
    let mut stream =
        TcpStream::connect(addr).map_err(|e| format!("the sweep does not answer: {e}"))?;
    let line = serde_json::to_string(&ControlLine {
        control: control.clone(),
        from: from.to_string(),
    })
    .map_err(|e| e.to_string())?;
    stream
        .write_all(format!("{token} control\n{line}\n").as_bytes())
        .map_err(|e| format!("sending the control: {e}"))?;
    let mut answer = String::new();
    BufReader::new(stream)
        .read_line(&mut answer)
        .map_err(|e| format!("reading the answer: {e}"))?;
    serde_json::from_str(&answer).map_err(|_| "the sweep ended before it answered".to_string())
}

#[derive(Default)]
struct HubState {
    board: Board,
    subscribers: Vec<Sender<Update>>,
    /// Where controls from watchers go, while the sweep takes them.
    control: Option<SweepControl>,
}

/// The current board and everyone who wants its updates.
///
/// ```
/// use tune_cli::dashboard::{Hub, Update};
/// let hub = Hub::default();
/// let rx = hub.subscribe();
/// hub.publish(Update::Scheduler(vec!["FIFO".into()]));
/// assert!(matches!(rx.recv().unwrap(), Update::Board(_)));
/// assert_eq!(rx.recv().unwrap(), Update::Scheduler(vec!["FIFO".into()]));
/// ```
#[derive(Clone, Default)]
pub struct Hub {
    state: Arc<Mutex<HubState>>,
}

impl Hub {
    /// Updates from now on, starting with a snapshot of everything so far.
    pub fn subscribe(&self) -> Receiver<Update> {
        let (tx, rx) = channel();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let _ = tx.send(Update::Board(Box::new(state.board.clone())));
        state.subscribers.push(tx);
        rx
    }

    pub fn publish(&self, update: Update) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state
            .subscribers
            .retain(|tx| tx.send(update.clone()).is_ok());
        state.board.apply(update);
    }

    /// The observer that feeds this hub from the coordinator.
    pub fn observer(&self) -> HubObserver {
        HubObserver {
            hub: self.clone(),
            serve: false,
            server: None,
        }
    }

    /// The observer that feeds this hub and, while the sweep runs, serves it to `tune watch`
    /// and `tune serve` (see [`Hub::serve`]), which may steer it through `control`.
    pub fn serving_observer(&self, control: SweepControl) -> HubObserver {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).control = Some(control);
        HubObserver {
            serve: true,
            ..self.observer()
        }
    }

    fn control(&self) -> Option<SweepControl> {
        (self.state.lock().unwrap_or_else(|e| e.into_inner()).control).clone()
    }

    /// Serves the board to `tune watch` processes on a localhost port, written with a
    /// random token to `dir/watch.addr` (mode 0600; removed when the returned guard drops).
    /// A connection that does not send the token first gets nothing; one that sends it with
    /// `control` may steer the sweep ([`send_control`]).
    pub fn serve(&self, dir: &Path) -> std::io::Result<WatchServer> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let addr = listener.local_addr()?;
        let token = crate::secret::new_token()?;
        let file = dir.join(WATCH_ADDR_FILE);
        crate::secret::write_owner_only(&file, &format!("{addr} {token}\n"))?;
        let hub = self.clone();
        std::thread::Builder::new()
            .name("tune-watch".into())
            .spawn(move || {
                for stream in listener.incoming().flatten() {
                    let (hub, token) = (hub.clone(), token.clone());
                    let _ = std::thread::Builder::new()
                        .name("tune-watcher".into())
                        .spawn(move || match sent_token(&stream, &token) {
                            Some(Asked::Updates) => {
                                let _ = stream.set_read_timeout(None);
                                send_updates(stream, hub.subscribe());
                            }
                            Some(Asked::Control) => answer_control(stream, hub.control().as_ref()),
                            None => {}
                        });
                }
            })?;
        Ok(WatchServer { file })
    }
}

/// One JSON line per update, until the watcher hangs up or the sweep ends.
fn send_updates(stream: TcpStream, rx: Receiver<Update>) {
    let mut out = std::io::BufWriter::new(stream);
    while let Ok(first) = rx.recv() {
        // Everything already queued goes in one flush.
        for update in std::iter::once(first).chain(rx.try_iter()) {
            // After the end (or a snapshot of an ended sweep) nothing more comes.
            let ended = match &update {
                Update::Ended { .. } => true,
                Update::Board(board) => board.ended.is_some(),
                _ => false,
            };
            let line = serde_json::to_string(&update).unwrap_or_default();
            if writeln!(out, "{line}").is_err() || ended {
                let _ = out.flush();
                return;
            }
        }
        if out.flush().is_err() {
            return;
        }
    }
}

/// Keeps `watch.addr` while a sweep runs.
pub struct WatchServer {
    file: PathBuf,
}

impl Drop for WatchServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
    }
}

/// Connects to the sweep running in `dir`, if one is listening: its updates, snapshot first.
pub fn connect(dir: &Path) -> Option<Receiver<Update>> {
    let text = std::fs::read_to_string(dir.join(WATCH_ADDR_FILE)).ok()?;
    let (addr, token) = text.trim().split_once(' ')?;
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.write_all(format!("{token}\n").as_bytes()).ok()?;
    let (tx, rx) = channel();
    std::thread::Builder::new()
        .name("tune-watch-client".into())
        .spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { return };
                let Ok(update) = serde_json::from_str::<Update>(&line) else {
                    return;
                };
                if tx.send(update).is_err() {
                    return;
                }
            }
        })
        .ok()?;
    Some(rx)
}

/// The board of the sweep running in `dir`, as its coordinator holds it now; `None` if no
/// sweep answers within a few seconds (none runs, or its address is stale after a kill).
pub fn live_board(dir: &Path) -> Option<Board> {
    match connect(dir)?
        .recv_timeout(std::time::Duration::from_secs(3))
        .ok()?
    {
        Update::Board(board) => Some(*board),
        _ => None,
    }
}

/// The board of a sweep from its stored trials: ended at `ended_at` (Unix ms), or, with
/// `None`, still running (elsewhere).
pub fn board_from_trials(header: Header, trials: &[Trial], ended_at: Option<u64>) -> Board {
    let mut board = Board::new(header);
    for t in trials {
        feed_trial(&mut board, t);
    }
    if let Some(at) = ended_at {
        board.apply(Update::Ended {
            at,
            interrupted: trials.iter().any(|t| !t.status.is_finished())
                || (trials.len() as u64) < board.header.total,
        });
    }
    board
}

/// Adds a stored trial and its results to a board, as the updates of its life would have.
fn feed_trial(board: &mut Board, t: &Trial) {
    let mut record = t.clone();
    record.results.clear();
    let id = t.id;
    // Its results first (under a running status), then its final record, so the best and
    // the log come out as they did live.
    let mut running = record.clone();
    running.status = tune_search::Status::Running;
    board.apply(Update::Trial(running));
    if let Some(view) = board.trials.get_mut(id as usize) {
        *view = TrialView {
            trial: view.trial.clone(),
            results: t.results.clone(),
        };
    }
    board.apply(Update::Trial(record));
}

/// Feeds a [`Hub`] from the coordinator's events.
pub struct HubObserver {
    hub: Hub,
    serve: bool,
    server: Option<WatchServer>,
}

impl Observer for HubObserver {
    fn on_start(&mut self, info: &SweepInfo<'_>, summary: &Summary) {
        let header = Header {
            name: info.name.into(),
            dir: info.dir.display().to_string(),
            search: info.search.into(),
            scheduler: info.scheduler.into(),
            metric: summary.metric.clone(),
            mode: summary.mode,
            objectives: if info.objectives.len() > 1 {
                info.objectives.to_vec()
            } else {
                Vec::new()
            },
            constraints: summary.constraints.clone(),
            total: summary.total,
            slots: info.slots.clone(),
            started_at: now_ms(),
        };
        let mut board = Board::new(header);
        for t in info.trials {
            feed_trial(&mut board, t);
        }
        self.hub.publish(Update::Board(Box::new(board)));
        if self.serve {
            match self.hub.serve(info.dir) {
                Ok(server) => self.server = Some(server),
                Err(e) => self.hub.publish(Update::Log {
                    at: now_ms(),
                    text: format!("`tune watch` cannot connect to this sweep: {e}"),
                }),
            }
        }
    }

    fn on_event(&mut self, event: &Event<'_>, _summary: &Summary) {
        let record = |t: &Trial| {
            let mut t = t.clone();
            t.results.clear();
            Update::Trial(t)
        };
        let update = match event {
            Event::Started(t) | Event::Paused(t) | Event::Finished(t) => record(t),
            Event::Result(t, r) => Update::Result {
                id: t.id,
                at: now_ms(),
                result: (*r).clone(),
            },
            Event::Scheduler(lines) => Update::Scheduler(lines.to_vec()),
            Event::Note(text) => Update::Log {
                at: now_ms(),
                text: text.to_string(),
            },
            Event::Workers(workers) => Update::Workers(workers.to_vec()),
            Event::Budget(total) => Update::Total(*total),
        };
        self.hub.publish(update);
    }

    fn on_end(&mut self, summary: &Summary) {
        self.hub.publish(Update::Ended {
            at: now_ms(),
            interrupted: summary.finished() < summary.total
                || summary.pending > 0
                || summary.paused > 0,
        });
        self.server = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watcher_over_the_socket_sees_what_the_hub_sees() {
        let dir = tempfile::tempdir().unwrap();
        let hub = Hub::default();
        hub.publish(Update::Board(Box::new(Board::new(Header {
            name: "demo".into(),
            total: 2,
            ..Header::default()
        }))));
        hub.publish(Update::Trial(Trial::new(0, Default::default())));
        let server = hub.serve(dir.path()).unwrap();
        let rx = connect(dir.path()).expect("listening");
        let mut seen = Board::default();
        seen.apply(rx.recv().unwrap());
        assert_eq!(seen.header.name, "demo");
        assert_eq!(seen.trials.len(), 1);
        hub.publish(Update::Trial(Trial::new(1, Default::default())));
        hub.publish(Update::Ended {
            at: 5,
            interrupted: false,
        });
        while let Ok(u) = rx.recv() {
            seen.apply(u);
        }
        assert_eq!(seen.trials.len(), 2);
        assert_eq!(seen.ended, Some((5, false)));
        drop(server);
        assert!(!dir.path().join(WATCH_ADDR_FILE).exists());
        assert!(connect(dir.path()).is_none());
    }

    #[test]
    fn a_connection_without_the_token_gets_nothing_and_the_file_is_the_owners_alone() {
        use std::io::Read;
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let hub = Hub::default();
        hub.publish(Update::Trial(Trial::new(0, Default::default())));
        let _server = hub.serve(dir.path()).unwrap();
        let file = dir.path().join(WATCH_ADDR_FILE);
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let text = std::fs::read_to_string(&file).unwrap();
        let (addr, token) = text.trim().split_once(' ').unwrap();
        assert_eq!(token.len(), 32);
        let wrong = format!("{}\n", "0".repeat(32));
        for sent in ["", "\n", wrong.as_str(), &token[..31]] {
            let mut stream = TcpStream::connect(addr).unwrap();
            stream.write_all(sent.as_bytes()).unwrap();
            // Done sending (a watcher that sends nothing more is hung up on after TOKEN_WAIT).
            stream.shutdown(std::net::Shutdown::Write).unwrap();
            // Hung up on: the end of the stream, no byte of the board.
            let mut got = Vec::new();
            let _ = stream.read_to_end(&mut got);
            assert!(got.is_empty(), "{sent:?} got {} bytes", got.len());
        }
        assert!(connect(dir.path()).is_some_and(|rx| rx.recv().is_ok()));
    }

    #[test]
    fn a_control_over_the_socket_is_read_checked_and_answered() {
        let dir = tempfile::tempdir().unwrap();
        let hub = Hub::default();
        let _server = hub.serve(dir.path()).unwrap();
        // A sweep that takes no controls (a hub without one) says so.
        let answer = send_control(dir.path(), &Control::StopSweep, "test").unwrap();
        assert_eq!(
            answer,
            ControlAnswer {
                ok: false,
                message: "this sweep takes no controls".into()
            }
        );
        // Not JSON of a control: refused, naming why.
        let text = std::fs::read_to_string(dir.path().join(WATCH_ADDR_FILE)).unwrap();
        let (addr, token) = text.trim().split_once(' ').unwrap();
        let mut stream = TcpStream::connect(addr).unwrap();
        write!(
            stream,
            "{token} control\n{{\"control\": {{\"action\": \"explode\"}}}}\n"
        )
        .unwrap();
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line).unwrap();
        let answer: ControlAnswer = serde_json::from_str(&line).unwrap();
        assert!(!answer.ok);
        assert!(
            answer
                .message
                .starts_with("not a control: unknown variant `explode`"),
            "{}",
            answer.message
        );
        // A wrong token with `control` gets nothing.
        let mut stream = TcpStream::connect(addr).unwrap();
        write!(stream, "{} control\n{{}}\n", "0".repeat(32)).unwrap();
        let mut got = String::new();
        let _ = std::io::Read::read_to_string(&mut stream, &mut got);
        assert!(got.is_empty(), "{got}");
    }
}
