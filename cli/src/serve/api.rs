//! `tune serve`'s JSON API under `/api/`, which its pages use and scripts may too
//! (docs/guide/serve.md lists it), and the page and its assets.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;
use tune::Control;

use super::catalog::{row, trial_page, Catalog, Place, Sweep, TrialQuery};
use crate::plot::{Chart, ImageFormat, PlotInput};

/// The page, its script and its style: compiled into the binary (nothing is fetched from
/// elsewhere: it works on a machine without internet).
const PAGE: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/app.js");
const STYLE: &str = include_str!("assets/app.css");

pub async fn page() -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE).into_response()
}

pub async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        SCRIPT,
    )
        .into_response()
}

pub async fn style() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response()
}

fn not_found(what: String) -> Response {
    (StatusCode::NOT_FOUND, Json(json!({ "error": what }))).into_response()
}

fn bad_request(what: String) -> Response {
    (StatusCode::BAD_REQUEST, Json(json!({ "error": what }))).into_response()
}

fn sweep_of(catalog: &Catalog, name: &str) -> Result<Arc<Sweep>, Box<Response>> {
    catalog
        .get(name)
        .ok_or_else(|| Box::new(not_found(format!("no sweep named {name:?}"))))
}

/// `GET /api/sweeps`: every sweep with its state, counts and best.
pub async fn sweeps(State(catalog): State<Arc<Catalog>>) -> Response {
    let list: Vec<serde_json::Value> = catalog
        .all()
        .iter()
        .map(|s| {
            let mut state = s.state.lock().unwrap_or_else(|e| e.into_inner());
            let mut line = state.summary();
            line["name"] = json!(s.name);
            line
        })
        .collect();
    Json(json!({ "sweeps": list })).into_response()
}

/// `GET /api/sweeps/{name}`: the header, the scheduler's state, the workers, the log, the
/// space's parameters and the charts that apply.
pub async fn sweep(State(catalog): State<Arc<Catalog>>, Path(name): Path<String>) -> Response {
    let sweep = match sweep_of(&catalog, &name) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let mut state = sweep.state.lock().unwrap_or_else(|e| e.into_inner());
    let charts = match &state.charts {
        Some((version, charts)) if *version == state.version => charts.clone(),
        _ => {
            let charts = json!(charts_of(&state));
            state.charts = Some((state.version, charts.clone()));
            charts
        }
    };
    let mut out = state.summary();
    let board = &state.board;
    out["name"] = json!(sweep.name);
    out["scheduler_state"] = json!(board.scheduler);
    out["slots"] = json!(board.header.slots);
    out["workers"] = json!(board.workers);
    out["remote_workers"] = json!(board.remote);
    out["gpus"] = json!(board.gpus);
    out["log"] = json!(board.log.iter().rev().take(200).collect::<Vec<_>>());
    out["pareto_front"] = json!(board.pareto_front());
    out["params"] = json!(state
        .spec
        .as_ref()
        .map(|s| s
            .space
            .params()
            .iter()
            .map(|p| p.name.clone())
            .collect::<Vec<_>>())
        .unwrap_or_default());
    out["charts"] = charts;
    Json(out).into_response()
}

/// The charts of the report that apply to the sweep now, by name and title.
fn charts_of(state: &super::catalog::SweepState) -> Vec<serde_json::Value> {
    let Some(spec) = &state.spec else {
        return Vec::new();
    };
    let trials = state
        .board
        .trials
        .iter()
        .map(|v| v.to_trial())
        .collect::<Vec<_>>();
    let input = plot_input(spec, &trials, state.live);
    Chart::ALL
        .iter()
        .filter(|c| c.not_applicable(&input).is_none())
        .map(|c| json!({ "name": c.name(), "title": c.title() }))
        .collect()
}

fn plot_input<'a>(
    spec: &'a tune::ExperimentSpec,
    trials: &'a [tune::Trial],
    running: bool,
) -> PlotInput<'a> {
    PlotInput {
        name: &spec.name,
        metric: &spec.metric,
        mode: spec.mode,
        constraints: &spec.constraints,
        space: &spec.space,
        trials,
        scheduler: spec.scheduler.name(),
        rungs: spec.make_scheduler().rungs(),
        running,
        objectives: &spec.objectives,
    }
}

/// `GET /api/sweeps/{name}/trials?offset&limit&sort&order&status&q&range`: one page of the
/// trials table.
pub async fn trials(
    State(catalog): State<Arc<Catalog>>,
    Path(name): Path<String>,
    Query(query): Query<TrialQuery>,
) -> Response {
    let sweep = match sweep_of(&catalog, &name) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let state = sweep.state.lock().unwrap_or_else(|e| e.into_inner());
    match trial_page(&state.board, &query) {
        Ok(page) => Json(page).into_response(),
        Err(e) => bad_request(e),
    }
}

/// `GET /api/sweeps/{name}/trials/{id}`: a trial with every report.
pub async fn trial(
    State(catalog): State<Arc<Catalog>>,
    Path((name, id)): Path<(String, u64)>,
) -> Response {
    let sweep = match sweep_of(&catalog, &name) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let state = sweep.state.lock().unwrap_or_else(|e| e.into_inner());
    let Some(view) = state.board.trial(id) else {
        return not_found(format!("sweep {name:?} has no trial {id}"));
    };
    let mut out = row(view, &state.board.header.metric);
    out["results"] = json!(view.results);
    out["lineage"] = json!(view.trial.lineage);
    out["parent"] = json!(view.trial.parent);
    out["log_tail"] = json!(match &sweep.place {
        Place::Folder(dir) => log_tail(&tune::experiment::trial_log(dir, id)),
        // Its log is on the machine that ran it.
        Place::Database { .. } => None,
    });
    out["created_at"] = json!(view.trial.created_at);
    out["started_at"] = json!(view.trial.started_at);
    out["finished_at"] = json!(view.trial.finished_at);
    Json(out).into_response()
}

/// How much of the end of a trial's log its page shows.
const LOG_TAIL: u64 = 16 << 10;

/// The last [`LOG_TAIL`] bytes of the log at `path` (from a line's start), if there is one.
fn log_tail(path: &std::path::Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let from = len.saturating_sub(LOG_TAIL);
    file.seek(SeekFrom::Start(from)).ok()?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Some(match (from > 0, text.find('\n')) {
        (true, Some(i)) => text[i + 1..].to_string(),
        _ => text,
    })
}

/// Which trials a chart shows: all, or `?trials=1,4,7` (the comparison of a few).
#[derive(serde::Deserialize, Default)]
#[serde(default)]
pub struct ChartQuery {
    trials: Option<String>,
}

/// `GET /api/sweeps/{name}/charts/{chart}.svg`: a chart of the report, drawn by the same code.
pub async fn chart(
    State(catalog): State<Arc<Catalog>>,
    Path((name, file)): Path<(String, String)>,
    Query(query): Query<ChartQuery>,
) -> Response {
    let sweep = match sweep_of(&catalog, &name) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let Some(chart) = file
        .strip_suffix(".svg")
        .and_then(|n| Chart::ALL.into_iter().find(|c| c.name() == n))
    else {
        return not_found(format!("no chart {file:?}"));
    };
    let only: Option<Vec<u64>> = match query.trials.as_deref() {
        None | Some("") => None,
        Some(list) => match list.split(',').map(str::parse).collect() {
            Ok(ids) => Some(ids),
            Err(_) => {
                return bad_request(format!("`trials`: expected ids like 1,4,7, found {list:?}"))
            }
        },
    };
    let key = (file.clone(), query.trials.clone().unwrap_or_default());
    let (spec, trials, live, version) = {
        let state = sweep.state.lock().unwrap_or_else(|e| e.into_inner());
        let cached = sweep
            .drawn
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .cloned();
        if let Some((_, svg)) = cached.filter(|(v, _)| *v == state.version) {
            return svg_response(svg.as_ref().clone());
        }
        let Some(spec) = state.spec.clone() else {
            return not_found(format!("sweep {name:?} has no readable spec.toml"));
        };
        let trials: Vec<tune::Trial> = state
            .board
            .trials
            .iter()
            .filter(|v| only.as_ref().is_none_or(|ids| ids.contains(&v.trial.id)))
            .map(|v| v.to_trial())
            .collect();
        (spec, trials, state.live, state.version)
    };
    // Drawing a large sweep takes a while: off the server's threads.
    let drawn = tokio::task::spawn_blocking(move || {
        crate::plot::render(chart, &plot_input(&spec, &trials, live), ImageFormat::Svg)
    })
    .await;
    match drawn {
        Ok(Ok(svg)) => {
            let svg = Arc::new(svg);
            (sweep.drawn.lock().unwrap_or_else(|e| e.into_inner()))
                .insert(key, (version, svg.clone()));
            svg_response(svg.as_ref().clone())
        }
        Ok(Err(e)) => not_found(e.to_string()),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

fn svg_response(svg: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "image/svg+xml")], svg).into_response()
}

/// `GET /api/sweeps/{name}/events`: what changes, pushed as server-sent events.
pub async fn events(State(catalog): State<Arc<Catalog>>, Path(name): Path<String>) -> Response {
    let sweep = match sweep_of(&catalog, &name) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let mut rx = sweep.events.subscribe();
    let stream = async_stream(move |tx| async move {
        loop {
            let data = match rx.recv().await {
                Ok(text) => text.to_string(),
                // Fell behind: the page reloads what it shows.
                Err(RecvError::Lagged(_)) => r#"{"event":{"kind":"reload"}}"#.to_string(),
                Err(RecvError::Closed) => return,
            };
            if tx.send(Ok(Event::default().data(data))).await.is_err() {
                return;
            }
        }
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// A stream fed by `producer` through a small channel.
fn async_stream<F, Fut>(producer: F) -> impl futures_core::Stream<Item = Result<Event, Infallible>>
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<Event, Infallible>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(producer(tx));
    ReceiverStream(rx)
}

struct ReceiverStream(tokio::sync::mpsc::Receiver<Result<Event, Infallible>>);

impl futures_core::Stream for ReceiverStream {
    type Item = Result<Event, Infallible>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

/// `POST /api/sweeps/{name}/control` with a [`Control`] (`{"action": "stop_trial",
/// "trial": 3}`): carried out by the sweep's coordinator, which answers.
pub async fn control(
    State(catalog): State<Arc<Catalog>>,
    Path(name): Path<String>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let sweep = match sweep_of(&catalog, &name) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let control: Control = match serde_json::from_slice(&body) {
        Ok(c) => c,
        Err(e) => return bad_request(format!("not a control: {e}")),
    };
    let from = format!(
        "tune serve ({})",
        headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .map(|ua| ua.split_whitespace().next().unwrap_or(ua))
            .unwrap_or("a script")
    );
    let place = sweep.place.clone();
    let answered = tokio::task::spawn_blocking(move || match place {
        Place::Folder(dir) => crate::dashboard::send_control(&dir, &control, &from),
        Place::Database { url, name } => {
            let asked = tune::remote::ExperimentReader::connect(&url, &name)
                .and_then(|mut r| r.ask(&control, &from));
            match asked {
                Ok(Ok(message)) => Ok(crate::dashboard::ControlAnswer { ok: true, message }),
                Ok(Err(e)) => Ok(crate::dashboard::ControlAnswer {
                    ok: false,
                    message: e.to_string(),
                }),
                Err(e) => Err(e.to_string()),
            }
        }
    })
    .await;
    match answered {
        Ok(Ok(answer)) if answer.ok => {
            Json(json!({ "ok": true, "message": answer.message })).into_response()
        }
        Ok(Ok(answer)) => (
            StatusCode::CONFLICT,
            Json(json!({ "ok": false, "error": answer.message })),
        )
            .into_response(),
        Ok(Err(why)) => (
            StatusCode::CONFLICT,
            Json(json!({ "ok": false, "error": why })),
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}
