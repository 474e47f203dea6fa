//! The sweeps `tune serve` shows: every experiment folder under its root, each as a
//! [`Board`] kept current from its running coordinator's feed (the watch socket), or read
//! from its store once it is not running. What changes is fanned out to the open pages as
//! JSON events, serialised once whatever the number of pages.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde_json::{json, Value as Json};
use tokio::sync::broadcast;
use tune::{ExperimentSpec, Status};

use crate::dashboard::{board_of_stored, connect, Board, TrialView, Update, WATCH_ADDR_FILE};

/// How often the root is looked at again for new sweeps, sweeps started or resumed: the one
/// thing polled (a folder listing), never a trial.
pub const RESCAN: Duration = Duration::from_secs(2);

/// Events a page may fall behind by before it is told to reload everything.
const EVENT_BACKLOG: usize = 4096;

/// Where the sweeps `tune serve` shows are kept.
#[derive(Debug, Clone)]
pub enum Source {
    /// A folder of experiment folders, or one experiment folder.
    Folder(PathBuf),
    /// Every experiment in a PostgreSQL database (its URL).
    Database(String),
}

/// Where one sweep is kept, and so how a control reaches its coordinator.
#[derive(Debug, Clone)]
pub enum Place {
    /// Its experiment folder: through the running sweep's watch socket.
    Folder(PathBuf),
    /// An experiment in a database: through `tune_controls`, wherever its coordinator runs.
    Database { url: String, name: String },
}

/// One sweep: its board, its spec, and the pages listening to it.
pub struct Sweep {
    pub name: String,
    pub place: Place,
    pub state: Mutex<SweepState>,
    pub events: broadcast::Sender<Arc<str>>,
    /// The charts last drawn, by chart and query, with the version they show: the pages open
    /// on a sweep ask for the same ones, drawn once.
    pub drawn: Mutex<DrawnCharts>,
}

/// Charts as drawn: by (chart file, trials asked for), the version and the SVG.
pub type DrawnCharts = HashMap<(String, String), (u64, Arc<Vec<u8>>)>;

/// What is known of a sweep now.
pub struct SweepState {
    pub board: Board,
    /// The spec it runs (its space, for charts and the enqueue form); `None` where
    /// `spec.toml` is unreadable.
    pub spec: Option<ExperimentSpec>,
    /// Its coordinator's feed is connected: controls reach it.
    pub live: bool,
    /// Bumped at every change: what a page's charts were drawn from.
    pub version: u64,
    /// The charts that apply, at the version they were worked out for.
    pub charts: Option<(u64, Json)>,
    /// [`summary`] at the version it was worked out for: counting is a pass over every
    /// trial and report, done once per change however many pages ask.
    summary: Option<(u64, Json)>,
}

impl SweepState {
    /// The sweep's summary now: its line in the list and its page's header.
    pub fn summary(&mut self) -> Json {
        match &self.summary {
            Some((version, s)) if *version == self.version => s.clone(),
            _ => {
                let s = summary(self);
                self.summary = Some((self.version, s.clone()));
                s
            }
        }
    }
}

impl Sweep {
    /// Applies `update` and tells the pages what changed.
    fn apply(&self, update: Update) {
        let event = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            state.version += 1;
            let event = event_of(&update, &state.board);
            state.board.apply(update);
            let after = match &event {
                Some(e) => e.clone(),
                None => json!({ "kind": "reload" }),
            };
            // The header's counts are not sent along (counting is a pass over every trial):
            // a page asks for them again, at most once a second.
            json!({ "version": state.version, "event": after })
        };
        let _ = self.events.send(Arc::from(event.to_string()));
    }

    /// A new reading of the whole sweep (from a database): the pages reload what they show
    /// where it differs.
    fn replace(&self, board: Board, live: bool) {
        let event = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if state.board == board && state.live == live {
                return;
            }
            state.board = board;
            state.live = live;
            state.version += 1;
            json!({ "version": state.version, "event": { "kind": "reload" } })
        };
        let _ = self.events.send(Arc::from(event.to_string()));
    }

    fn set_live(&self, live: bool) {
        let event = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            state.live = live;
            state.version += 1;
            json!({ "version": state.version, "event": { "kind": "state" } })
        };
        let _ = self.events.send(Arc::from(event.to_string()));
    }
}

/// What an update means to a page: a row changed, a point added, a log line; `None` for what
/// changes everything (a new snapshot).
fn event_of(update: &Update, board: &Board) -> Option<Json> {
    Some(match update {
        Update::Board(_) => return None,
        Update::Trial(t) => json!({ "kind": "trial", "id": t.id, "status": t.status.as_str() }),
        Update::Result { id, result, .. } => json!({
            "kind": "result",
            "id": id,
            "step": result.step,
            "value": result.metrics.get(&board.header.metric),
        }),
        Update::Log { at, text } => json!({ "kind": "log", "at": at, "text": text }),
        Update::Ended { .. } => json!({ "kind": "ended" }),
        Update::Scheduler(_) | Update::Workers(_) | Update::Gpus(_) | Update::Total(_) => {
            json!({ "kind": "header" })
        }
    })
}

/// A sweep's line in the list, and its page's header: name, state, counts, best.
fn summary(state: &SweepState) -> Json {
    let board = &state.board;
    let mut counts = BTreeMap::new();
    for status in [
        Status::Pending,
        Status::Running,
        Status::Paused,
        Status::Completed,
        Status::Stopped,
        Status::Failed,
    ] {
        counts.insert(status.as_str(), board.count(status));
    }
    let h = &board.header;
    let state_name = match (state.live, board.ended) {
        (true, None) => "running",
        (_, Some((_, true))) => "interrupted",
        (_, Some((_, false))) => "finished",
        (false, None) => "stopped",
    };
    json!({
        "name": h.name,
        "state": state_name,
        "live": state.live,
        "search": h.search,
        "scheduler": h.scheduler,
        "metric": h.metric,
        "mode": h.mode.as_str(),
        "objectives": h.objectives.iter().map(|g| json!({"metric": g.metric, "mode": g.mode.as_str()})).collect::<Vec<_>>(),
        "total": h.total,
        "created": board.trials.len(),
        "counts": counts,
        "best": board.best().map(|(id, value)| json!({ "trial": id, "value": value })),
        "started_at": h.started_at,
        "ended_at": board.ended.map(|(at, _)| at),
        "steps_trained": board.steps_trained(),
        "version": state.version,
    })
}

/// Every sweep of a [`Source`], found again every [`RESCAN`].
pub struct Catalog {
    source: Source,
    sweeps: RwLock<BTreeMap<String, Arc<Sweep>>>,
}

impl Catalog {
    /// The sweeps of `source` now (in a folder: the folder itself if it is one, else the
    /// folders in it and in their subfolders; in a database: every experiment), then kept
    /// current on a thread of its own.
    pub fn watch(source: Source) -> std::io::Result<Arc<Catalog>> {
        let catalog = Arc::new(Catalog {
            source,
            sweeps: RwLock::new(BTreeMap::new()),
        });
        catalog.scan();
        let weak = Arc::downgrade(&catalog);
        std::thread::Builder::new()
            .name("tune-serve-scan".into())
            .spawn(move || loop {
                std::thread::sleep(RESCAN);
                match weak.upgrade() {
                    Some(catalog) => catalog.scan(),
                    None => return,
                }
            })?;
        Ok(catalog)
    }

    /// Every sweep, by name.
    pub fn all(&self) -> Vec<Arc<Sweep>> {
        let sweeps = self.sweeps.read().unwrap_or_else(|e| e.into_inner());
        sweeps.values().cloned().collect()
    }

    pub fn get(&self, name: &str) -> Option<Arc<Sweep>> {
        let sweeps = self.sweeps.read().unwrap_or_else(|e| e.into_inner());
        sweeps.get(name).cloned()
    }

    /// Finds new sweeps, and connects to those that (again) run.
    pub fn scan(&self) {
        match &self.source {
            Source::Folder(root) => self.scan_folder(root),
            Source::Database(url) => self.scan_database(url),
        }
    }

    fn insert(&self, name: String, sweep: Arc<Sweep>) {
        self.sweeps
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name, sweep);
    }

    /// Every experiment in the database: new ones read, those that run read again (the
    /// database has no feed to follow: a page hears `reload` when something changed).
    fn scan_database(&self, url: &str) {
        let Ok(names) = tune::remote::experiment_names(url) else {
            return;
        };
        for name in names {
            match self.get(&name) {
                None => {
                    if let Some((board, spec, live)) = read_database(url, &name) {
                        let sweep = new_sweep(
                            &name,
                            Place::Database {
                                url: url.to_string(),
                                name: name.clone(),
                            },
                            board,
                            spec,
                        );
                        sweep.state.lock().unwrap_or_else(|e| e.into_inner()).live = live;
                        self.insert(name, Arc::new(sweep));
                    }
                }
                Some(sweep) => {
                    let was_live = sweep.state.lock().unwrap_or_else(|e| e.into_inner()).live;
                    if !was_live && !coordinator_runs(url, &name) {
                        continue;
                    }
                    if let Some((board, _, live)) = read_database(url, &name) {
                        sweep.replace(board, live);
                    }
                }
            }
        }
    }

    fn scan_folder(&self, root: &Path) {
        for dir in experiment_folders(root) {
            let name = name_of(root, &dir);
            let known = self.get(&name);
            let running = dir.join(WATCH_ADDR_FILE).exists();
            match known {
                Some(sweep) => {
                    let live = sweep.state.lock().unwrap_or_else(|e| e.into_inner()).live;
                    if running && !live {
                        follow(&sweep);
                    }
                }
                None => {
                    let Some(sweep) = load(&name, &dir) else {
                        continue;
                    };
                    let sweep = Arc::new(sweep);
                    self.insert(name, sweep.clone());
                    if running {
                        follow(&sweep);
                    }
                }
            }
        }
    }
}

/// A sweep's name in URLs: its folder under the root (`mnist`, `2026/mnist`).
fn name_of(root: &Path, dir: &Path) -> String {
    match dir.strip_prefix(root) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel.to_string_lossy().into_owned(),
        _ => dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "sweep".into()),
    }
}

/// Whether a coordinator holds experiment `name` now.
fn coordinator_runs(url: &str, name: &str) -> bool {
    tune::remote::ExperimentReader::connect(url, name)
        .and_then(|mut r| r.serving())
        .is_ok_and(|s| s.coordinator.is_some())
}

/// Experiment `name` as the database holds it: its board, its spec, whether a coordinator
/// runs it.
fn read_database(url: &str, name: &str) -> Option<(Board, Option<ExperimentSpec>, bool)> {
    let mut reader = tune::remote::ExperimentReader::connect(url, name).ok()?;
    let stored = reader.stored().ok()?;
    let serving = reader.serving().ok()?;
    let place = tune::store::postgres_location(url, name);
    let board = board_of_stored(&place, &stored, &serving);
    Some((board, Some(stored.meta.spec), serving.coordinator.is_some()))
}

fn new_sweep(name: &str, place: Place, board: Board, spec: Option<ExperimentSpec>) -> Sweep {
    let (events, _) = broadcast::channel(EVENT_BACKLOG);
    Sweep {
        name: name.to_string(),
        place,
        state: Mutex::new(SweepState {
            board,
            spec,
            live: false,
            version: 0,
            charts: None,
            summary: None,
        }),
        events,
        drawn: Mutex::new(HashMap::new()),
    }
}

/// The experiment folders at `root`: itself if it holds a sweep, else its subfolders that
/// do, two levels down.
fn experiment_folders(root: &Path) -> Vec<PathBuf> {
    let is_sweep = |d: &Path| d.join(tune::experiment::SPEC_FILE).is_file();
    if is_sweep(root) {
        return vec![root.to_path_buf()];
    }
    let mut found = Vec::new();
    let children = |d: &Path| -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(d)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        dirs
    };
    for child in children(root) {
        if is_sweep(&child) {
            found.push(child);
        } else {
            found.extend(children(&child).into_iter().filter(|d| is_sweep(d)));
        }
    }
    found
}

/// A sweep as its folder holds it: its board from the store (or, while it runs and holds the
/// store, an empty one the feed fills); `None` while it cannot be read yet.
fn load(name: &str, dir: &Path) -> Option<Sweep> {
    let spec_file = dir.join(tune::experiment::SPEC_FILE);
    let spec = std::fs::read_to_string(&spec_file)
        .ok()
        .and_then(|text| ExperimentSpec::from_toml(&text, &spec_file).ok());
    let board = if dir.join(WATCH_ADDR_FILE).exists() {
        Board::default()
    } else {
        let exp = tune::experiment::Experiment::open(dir).ok()?;
        let place = tune::store::StorePlace::Folder(dir.to_path_buf());
        board_of_stored(&place, &exp.stored, &Default::default())
    };
    Some(new_sweep(
        name,
        Place::Folder(dir.to_path_buf()),
        board,
        spec,
    ))
}

/// Follows the running sweep's feed on a thread of its own until it ends or is cut.
fn follow(sweep: &Arc<Sweep>) {
    let Place::Folder(dir) = &sweep.place else {
        return;
    };
    let Some(updates) = connect(dir) else {
        return;
    };
    sweep.set_live(true);
    let sweep = sweep.clone();
    let _ = std::thread::Builder::new()
        .name("tune-serve-feed".into())
        .spawn(move || {
            for update in updates {
                sweep.apply(update);
            }
            sweep.set_live(false);
        });
}

/// A page of a sweep's trials, as the table asks for it.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
pub struct TrialQuery {
    pub offset: usize,
    pub limit: Option<usize>,
    /// `id`, `status`, `step`, `value`, or `param:NAME`.
    pub sort: Option<String>,
    /// `desc` for descending.
    pub order: Option<String>,
    /// Statuses, comma separated.
    pub status: Option<String>,
    /// Text every matching row contains (in its params, status, device or error).
    pub q: Option<String>,
    /// `NAME:LOW:HIGH`: a numeric param within [LOW, HIGH] (either side may be empty).
    pub range: Option<String>,
}

/// The most rows one page holds.
pub const MAX_PAGE: usize = 500;

/// The rows of `board` that `query` asks for, sorted and paged, with how many matched.
pub fn trial_page(board: &Board, query: &TrialQuery) -> Result<Json, String> {
    let metric = &board.header.metric;
    let statuses: Option<Vec<&str>> = query
        .status
        .as_deref()
        .filter(|s| !s.is_empty())
        .map(|s| s.split(',').collect());
    let text = query
        .q
        .as_deref()
        .map(str::to_lowercase)
        .filter(|q| !q.is_empty());
    let range = match query.range.as_deref().filter(|r| !r.is_empty()) {
        None => None,
        Some(r) => Some(parse_range(r)?),
    };
    let mut rows: Vec<&TrialView> = board
        .trials
        .iter()
        .filter(|v| {
            statuses
                .as_ref()
                .is_none_or(|s| s.contains(&v.trial.status.as_str()))
        })
        .filter(|v| match &range {
            None => true,
            Some((name, low, high)) => v
                .trial
                .params
                .get(name)
                .and_then(tune::Value::as_f64)
                .is_some_and(|x| low.is_none_or(|l| x >= l) && high.is_none_or(|h| x <= h)),
        })
        .filter(|v| {
            text.as_ref()
                .is_none_or(|q| row_text(v).contains(q.as_str()))
        })
        .collect();
    let sort = query.sort.as_deref().unwrap_or("id");
    let mode = board.header.mode;
    match sort {
        "id" => {}
        "status" => rows.sort_by_key(|v| v.trial.status.as_str()),
        "step" => rows.sort_by_key(|v| v.results.last().map(|r| r.step)),
        "value" => rows.sort_by(|a, b| {
            // Best first; trials without a value last.
            let (a, b) = (a.last(metric), b.last(metric));
            match (a, b) {
                (Some(a), Some(b)) => {
                    let ord = a.total_cmp(&b);
                    if mode == tune::Mode::Max {
                        ord.reverse()
                    } else {
                        ord
                    }
                }
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => std::cmp::Ordering::Equal,
            }
        }),
        other => {
            let Some(name) = other.strip_prefix("param:") else {
                return Err(format!(
                    "`sort`: expected id, status, step, value or param:NAME, found {other:?}"
                ));
            };
            rows.sort_by(|a, b| {
                let (a, b) = (a.trial.params.get(name), b.trial.params.get(name));
                match (
                    a.and_then(tune::Value::as_f64),
                    b.and_then(tune::Value::as_f64),
                ) {
                    (Some(a), Some(b)) => a.total_cmp(&b),
                    _ => a.map(|v| v.to_string()).cmp(&b.map(|v| v.to_string())),
                }
            });
        }
    }
    if query.order.as_deref() == Some("desc") {
        rows.reverse();
    }
    let limit = query.limit.unwrap_or(50).min(MAX_PAGE);
    let matching = rows.len();
    let page: Vec<Json> = rows
        .into_iter()
        .skip(query.offset)
        .take(limit)
        .map(|v| row(v, metric))
        .collect();
    Ok(json!({ "matching": matching, "offset": query.offset, "rows": page }))
}

/// `NAME:LOW:HIGH`, either bound may be empty.
fn parse_range(range: &str) -> Result<(String, Option<f64>, Option<f64>), String> {
    let parts: Vec<&str> = range.rsplitn(3, ':').collect();
    let [high, low, name] = parts[..] else {
        return Err(format!("`range`: expected NAME:LOW:HIGH, found {range:?}"));
    };
    let bound = |s: &str| -> Result<Option<f64>, String> {
        if s.is_empty() {
            return Ok(None);
        }
        s.parse()
            .map(Some)
            .map_err(|_| format!("`range`: expected a number, found {s:?}"))
    };
    Ok((name.to_string(), bound(low)?, bound(high)?))
}

/// What the text filter searches in a row.
fn row_text(v: &TrialView) -> String {
    let t = &v.trial;
    let params: Vec<String> = t.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!(
        "{} {} {} {} {}",
        t.id,
        t.status.as_str(),
        params.join(" "),
        t.device.as_deref().unwrap_or(""),
        t.error.as_deref().unwrap_or("")
    )
    .to_lowercase()
}

/// A trial's row in the table.
pub fn row(v: &TrialView, metric: &str) -> Json {
    let t = &v.trial;
    json!({
        "id": t.id,
        "status": t.status.as_str(),
        "step": v.results.last().map(|r| r.step),
        "value": v.last(metric),
        "params": t.params,
        "attempts": t.attempts,
        "device": t.device,
        "error": t.error,
    })
}
