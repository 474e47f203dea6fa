//! Drawing: a pure function of the [`App`] and the time, one small function per panel.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Axis, Block, Borders, Cell, Chart, Clear, Dataset, GraphType, Paragraph, Row, Table,
    TableState, Wrap,
};
use ratatui::Frame;
use tune_search::{value_brief, Status, TrialId};

use super::app::{params_text, App, Focus, Popup};
use tune::remote::{split_remote_slot, WorkerInfo};

/// Colours, or none at all when `NO_COLOR` is set.
#[derive(Debug, Clone, Copy)]
pub struct Theme {
    pub color: bool,
}

impl Theme {
    /// Colour unless the `NO_COLOR` environment variable is set (<https://no-color.org>).
    pub fn from_env() -> Theme {
        Theme {
            color: std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        }
    }

    fn fg(self, c: Color) -> Style {
        if self.color {
            Style::default().fg(c)
        } else {
            Style::default()
        }
    }

    fn status(self, s: Status) -> Style {
        self.fg(match s {
            Status::Running => Color::Cyan,
            Status::Completed => Color::Green,
            Status::Stopped => Color::Yellow,
            Status::Failed => Color::Red,
            Status::Paused => Color::Magenta,
            Status::Pending => Color::DarkGray,
        })
    }

    fn selected(self) -> Style {
        // Reversed video marks the selection without colour too.
        Style::default().add_modifier(Modifier::REVERSED)
    }
}

/// Draws the whole dashboard for the time `now` (Unix milliseconds).
pub fn draw(frame: &mut Frame, app: &mut App, theme: Theme, now: u64) {
    let area = frame.area();
    if app.board.header.name.is_empty() {
        // Nothing heard from the sweep yet (it is opening its folder, or failing to).
        frame.render_widget(Paragraph::new("tune: starting the sweep..."), area);
        return;
    }
    let bottom_height = match area.height {
        h if h >= 36 => 10,
        h if h >= 24 => 7,
        _ => 5,
    };
    let [header, main, bottom, keys] = Layout::vertical([
        Constraint::Length(3),
        Constraint::Min(5),
        Constraint::Length(bottom_height),
        Constraint::Length(1),
    ])
    .areas(area);
    draw_header(frame, header, app, theme, now);
    // Filtering and sorting every trial is the costly part of a frame: once per frame.
    let rows = app.rows();
    let selected = rows
        .get(app.selected.min(rows.len().saturating_sub(1)))
        .copied();
    if main.width >= 100 {
        let [table, charts] =
            Layout::horizontal([Constraint::Percentage(60), Constraint::Percentage(40)])
                .areas(main);
        let [best, curve] =
            Layout::vertical([Constraint::Percentage(50), Constraint::Percentage(50)])
                .areas(charts);
        draw_trials(frame, table, app, &rows, theme);
        draw_best_over_time(frame, best, app, theme);
        draw_curves(frame, curve, app, selected, theme);
    } else {
        draw_trials(frame, main, app, &rows, theme);
    }
    if bottom.width >= 90 {
        // Remote workers' lines (`host:pid · 1/2 busy · heartbeat ...`) need more room.
        let workers_share = if app.board.remote.is_empty() { 28 } else { 40 };
        let [workers, scheduler, log] = Layout::horizontal([
            Constraint::Percentage(workers_share),
            Constraint::Percentage(34),
            Constraint::Percentage(66 - workers_share),
        ])
        .areas(bottom);
        draw_workers(frame, workers, app, now);
        draw_scheduler(frame, scheduler, app);
        draw_log(frame, log, app, theme);
    } else {
        // Narrow: the scheduler's lines go on the log's side as its title says.
        let [workers, log] =
            Layout::horizontal([Constraint::Percentage(40), Constraint::Percentage(60)])
                .areas(bottom);
        draw_workers(frame, workers, app, now);
        draw_log(frame, log, app, theme);
    }
    draw_keys(frame, keys, app);
    match app.popup {
        Some(Popup::Help) => draw_help(frame, area),
        Some(Popup::Details) => draw_details(frame, area, app, selected),
        Some(Popup::ConfirmQuit) => draw_confirm(frame, area, app),
        None => {}
    }
}

fn clock(ms: u64) -> String {
    let s = ms / 1000;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

pub(crate) fn draw_header(frame: &mut Frame, area: Rect, app: &App, theme: Theme, now: u64) {
    let b = &app.board;
    let h = &b.header;
    let end = b.ended.map_or(now, |(at, _)| at);
    let state = match b.ended {
        Some((_, false)) => "finished (q to leave)".to_string(),
        Some((_, true)) => "interrupted: `tune resume` continues it (q to leave)".to_string(),
        None if app.stopping => "stopping...".into(),
        None => "running".into(),
    };
    let title = Line::from(vec![
        Span::styled(
            format!("tune · {}", h.name),
            Style::default().add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!(
            " · {} + {} · {} · {state}",
            h.search,
            h.scheduler,
            clock(end.saturating_sub(h.started_at))
        )),
    ]);
    let mut counts = vec![Span::raw(format!(
        "{}/{} trials: ",
        b.trials.len(),
        h.total
    ))];
    for s in [
        Status::Completed,
        Status::Running,
        Status::Stopped,
        Status::Failed,
        Status::Paused,
        Status::Pending,
    ] {
        let n = b.count(s);
        if n > 0 || matches!(s, Status::Completed | Status::Running) {
            counts.push(Span::styled(
                format!("{n} {} ", s.as_str()),
                theme.status(s),
            ));
        }
    }
    let not_created = h.total.saturating_sub(b.trials.len() as u64);
    if not_created > 0 {
        counts.push(Span::raw(format!("{not_created} to create ")));
    }
    counts.push(Span::raw(format!("· {} steps trained", b.steps_trained())));
    let front = b.pareto_front();
    let best = match (&front, b.best().and_then(|(id, v)| Some((b.trial(id)?, v)))) {
        (Some(ids), _) => {
            let names: Vec<&str> = h.objectives.iter().map(|o| o.metric.as_str()).collect();
            let shown: Vec<String> = ids.iter().take(12).map(|id| id.to_string()).collect();
            format!(
                "pareto front of {}: {} trial{}{}{}",
                names.join(", "),
                ids.len(),
                if ids.len() == 1 { "" } else { "s" },
                if ids.is_empty() { "" } else { ": " },
                shown.join(", ") + if ids.len() > 12 { ", ..." } else { "" }
            )
        }
        (None, found) => match found {
            Some((t, v)) => format!(
                "best {} {} (trial {}): {}",
                h.metric,
                value_brief(v),
                t.trial.id,
                params_text(&t.trial.params)
            ),
            None => format!("best {}: no completed trial yet", h.metric),
        },
    };
    frame.render_widget(
        Paragraph::new(vec![title, Line::from(counts), Line::from(best)]),
        area,
    );
}

fn focused(title: String, on: bool) -> Block<'static> {
    let block = Block::default().borders(Borders::ALL).title(title);
    if on {
        block.border_style(Style::default().add_modifier(Modifier::BOLD))
    } else {
        block
    }
}

/// The table of `rows` (trial ids as [`App::rows`] orders them).
pub(crate) fn draw_trials(
    frame: &mut Frame,
    area: Rect,
    app: &mut App,
    rows: &[TrialId],
    theme: Theme,
) {
    let metric = app.board.header.metric.clone();
    let mode = app.board.header.mode;
    let filter = if app.filter.is_empty() {
        String::new()
    } else {
        format!(", filter \"{}\"", app.filter)
    };
    let title = format!(
        " trials ({} shown{filter}, sort {}{}) ",
        rows.len(),
        app.sort.name(),
        if app.descending { " reversed" } else { "" }
    );
    let block = focused(title, app.focus == Focus::Trials);
    // Only the rows that fit are built, so ten thousand trials cost what a screenful does.
    let height = area.height.saturating_sub(3).max(1) as usize;
    app.page = height;
    let selected = app.selected.min(rows.len().saturating_sub(1));
    let offset = selected.saturating_sub(height - 1);
    // Trials on remote workers (`tune worker`) get a column naming the worker of each.
    let worker_width = app
        .board
        .header
        .slots
        .iter()
        .filter_map(|s| split_remote_slot(s).map(|(w, _)| w.chars().count()))
        .max();
    let remote = worker_width.is_some();
    let body: Vec<Row> = rows
        .iter()
        .skip(offset)
        .take(height)
        .filter_map(|&id| app.board.trial(id))
        .map(|t| {
            let step = t.results.last().map_or("-".into(), |r| r.step.to_string());
            let value = |v: Option<f64>| v.map_or("-".into(), value_brief);
            let mut cells = vec![
                Cell::from(t.trial.id.to_string()),
                Cell::from(t.trial.status.as_str()).style(theme.status(t.trial.status)),
                Cell::from(step),
                Cell::from(value(t.last(&metric))),
                Cell::from(value(t.best(&metric, mode))),
            ];
            if remote {
                let device = t.trial.device.as_deref().unwrap_or("-");
                let worker = split_remote_slot(device).map_or(device, |(w, _)| w);
                cells.push(Cell::from(worker.to_string()));
            }
            cells.push(Cell::from(params_text(&t.trial.params)));
            Row::new(cells)
        })
        .collect();
    let mut widths = vec![
        Constraint::Length(5),
        Constraint::Length(9),
        Constraint::Length(5),
        Constraint::Length(9),
        Constraint::Length(9),
    ];
    let mut titles = vec!["id", "status", "step", "last", "peak"];
    if remote {
        widths.push(Constraint::Length(
            worker_width.unwrap_or(0).clamp(6, 32) as u16
        ));
        titles.push("worker");
    }
    widths.push(Constraint::Min(10));
    titles.push("params");
    let table = Table::new(body, widths)
        .header(Row::new(titles).style(Style::default().add_modifier(Modifier::BOLD)))
        .block(block)
        .row_highlight_style(theme.selected());
    let mut state = TableState::default();
    if !rows.is_empty() {
        state.select(Some(selected - offset));
    }
    frame.render_stateful_widget(table, area, &mut state);
}

/// Axis bounds a little wider than the data, never empty.
fn bounds(values: impl Iterator<Item = f64>) -> [f64; 2] {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if !lo.is_finite() {
        return [0.0, 1.0];
    }
    let pad = ((hi - lo) * 0.05).max(hi.abs() * 1e-6).max(1e-12);
    [lo - pad, hi + pad]
}

fn axis_labels(b: [f64; 2]) -> Vec<Line<'static>> {
    vec![Line::from(value_brief(b[0])), Line::from(value_brief(b[1]))]
}

pub(crate) fn draw_best_over_time(frame: &mut Frame, area: Rect, app: &App, theme: Theme) {
    let b = &app.board;
    let start = b.header.started_at;
    // A step line: each best holds until the next one.
    let mut points: Vec<(f64, f64)> = Vec::new();
    for &(at, v, _) in &b.best_over_time {
        let x = at.saturating_sub(start) as f64 / 1000.0;
        if let Some(&(_, prev)) = points.last() {
            points.push((x, prev));
        }
        points.push((x, v));
    }
    let title = format!(" best {} over time (s) ", b.header.metric);
    if points.is_empty() {
        frame.render_widget(
            Paragraph::new("no completed trial yet").block(focused(title, false)),
            area,
        );
        return;
    }
    let x = bounds(points.iter().map(|p| p.0));
    let y = bounds(points.iter().map(|p| p.1));
    let data = vec![Dataset::default()
        .marker(Marker::Braille)
        .graph_type(GraphType::Line)
        .style(theme.fg(Color::Green))
        .data(&points)];
    let chart = Chart::new(data)
        .block(focused(title, false))
        .x_axis(Axis::default().bounds(x).labels(axis_labels(x)))
        .y_axis(Axis::default().bounds(y).labels(axis_labels(y)));
    frame.render_widget(chart, area);
}

pub(crate) fn draw_curves(
    frame: &mut Frame,
    area: Rect,
    app: &App,
    selected: Option<TrialId>,
    theme: Theme,
) {
    let b = &app.board;
    let metric = &b.header.metric;
    let selected = selected.and_then(|id| b.trial(id));
    let best = b.best().and_then(|(id, _)| b.trial(id));
    let to_points = |t: Option<&super::board::TrialView>| -> Vec<(f64, f64)> {
        t.map(|t| {
            t.curve(metric)
                .into_iter()
                .map(|(s, v)| (s as f64, v))
                .collect()
        })
        .unwrap_or_default()
    };
    let sel = to_points(selected);
    let top = to_points(best);
    let title = format!(
        " {metric} by step: trial {} vs best {} ",
        selected.map_or("-".into(), |t| t.trial.id.to_string()),
        best.map_or("-".into(), |t| t.trial.id.to_string())
    );
    if sel.is_empty() && top.is_empty() {
        frame.render_widget(
            Paragraph::new("no results yet").block(focused(title, false)),
            area,
        );
        return;
    }
    let x = bounds(sel.iter().chain(&top).map(|p| p.0));
    let y = bounds(sel.iter().chain(&top).map(|p| p.1));
    let mut data = vec![Dataset::default()
        .name("best")
        .marker(Marker::Braille)
        .graph_type(GraphType::Line)
        .style(theme.fg(Color::Green))
        .data(&top)];
    data.push(
        Dataset::default()
            .name("selected")
            .marker(Marker::Dot)
            .graph_type(GraphType::Line)
            .style(theme.fg(Color::Cyan))
            .data(&sel),
    );
    let chart = Chart::new(data)
        .block(focused(title, false))
        .x_axis(Axis::default().bounds(x).labels(axis_labels(x)))
        .y_axis(Axis::default().bounds(y).labels(axis_labels(y)));
    frame.render_widget(chart, area);
}

pub(crate) fn draw_workers(frame: &mut Frame, area: Rect, app: &App, now: u64) {
    let b = &app.board;
    let slots = || b.header.slots.iter().zip(&b.workers);
    // A slot named more than once holds several trials: a GPU's shares, or a pack of fused
    // trials (`fuse`), here or on a remote worker. One line each, with every trial running
    // there, after how many of its places are busy (a remote worker's places per slot are
    // not known here).
    let slot_lines = |slots: Vec<(&str, Option<TrialId>)>, places: bool, indent: &str| {
        let mut grouped: Vec<(&str, Vec<TrialId>, usize)> = Vec::new();
        for (slot, trial) in slots {
            let at = match grouped.iter().position(|(s, _, _)| *s == slot) {
                Some(at) => at,
                None => {
                    grouped.push((slot, Vec::new(), 0));
                    grouped.len() - 1
                }
            };
            grouped[at].1.extend(trial);
            grouped[at].2 += 1;
        }
        let each = |id: TrialId| {
            b.trial(id).map(|t| {
                format!(
                    "trial {} step {}",
                    t.trial.id,
                    t.results.last().map_or(0, |r| r.step)
                )
            })
        };
        grouped
            .into_iter()
            .map(|(slot, trials, n)| {
                let text = match (trials.as_slice(), n) {
                    (&[], _) => "idle".to_string(),
                    (&[one], n) if n == 1 || !places => each(one).unwrap_or_else(|| "idle".into()),
                    (trials, n) => {
                        let listed: Vec<String> =
                            trials.iter().filter_map(|&id| each(id)).collect();
                        match places {
                            true => format!("{}/{n}: {}", trials.len(), listed.join(" · ")),
                            false => format!("{}: {}", trials.len(), listed.join(" · ")),
                        }
                    }
                };
                Line::from(format!("{indent}{slot:<7} {text}"))
            })
            .collect::<Vec<Line>>()
    };
    let local: Vec<(&str, Option<TrialId>)> = slots()
        .filter(|(slot, _)| split_remote_slot(slot).is_none())
        .map(|(slot, &trial)| (slot.as_str(), trial))
        .collect();
    let mut lines: Vec<Line> = slot_lines(local, true, "");
    lines.extend(b.gpus.iter().map(|g| Line::from(g.line())));
    // Remote workers: those serving now, then any only a trial's device names (it exited).
    let mut names: Vec<&str> = b.remote.iter().map(|w| w.id.as_str()).collect();
    for (slot, _) in slots() {
        if let Some((worker, _)) = split_remote_slot(slot) {
            if !names.contains(&worker) {
                names.push(worker);
            }
        }
    }
    for name in names {
        let busy: Vec<(&str, Option<TrialId>)> = slots()
            .filter_map(|(slot, &trial)| {
                let (worker, local) = split_remote_slot(slot)?;
                (worker == name).then_some((local, Some(trial?)))
            })
            .collect();
        let age = |w: &WorkerInfo| now.saturating_sub(w.heartbeat_at) as f64 / 1000.0;
        let title = match b.remote.iter().find(|w| w.id == name) {
            Some(w) if w.live => format!(
                "{name} · {}/{} busy · heartbeat {:.1}s ago",
                busy.len(),
                w.slots,
                age(w)
            ),
            Some(w) => format!("{name} · lost: no heartbeat for {:.0}s", age(w)),
            None if busy.is_empty() => continue,
            None => format!("{name} · gone"),
        };
        lines.push(Line::from(title));
        lines.extend(slot_lines(busy, false, "  "));
        // Its GPUs' use at its last heartbeat, after its slots as a local GPU's is, while
        // that heartbeat is recent.
        if let Some(w) = b.remote.iter().find(|w| w.id == name && w.live) {
            lines.extend(w.gpus.iter().map(|g| Line::from(format!("  {}", g.line()))));
        }
    }
    // Wrapped: a GPU's line is longer than the panel is wide on a 160-column terminal (seen
    // on an H200: its memory cut at "140.4 G").
    frame.render_widget(
        Paragraph::new(lines)
            .block(focused(" workers ".into(), false))
            .wrap(Wrap { trim: false }),
        area,
    );
}

pub(crate) fn draw_scheduler(frame: &mut Frame, area: Rect, app: &App) {
    let b = &app.board;
    let lines: Vec<Line> = if b.scheduler.is_empty() {
        vec![Line::from("(nothing reported yet)")]
    } else {
        b.scheduler.iter().map(|l| Line::from(l.as_str())).collect()
    };
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(focused(format!(" {} ", b.header.scheduler), false)),
        area,
    );
}

pub(crate) fn draw_log(frame: &mut Frame, area: Rect, app: &App, theme: Theme) {
    let b = &app.board;
    let height = area.height.saturating_sub(2) as usize;
    let end = b.log.len().saturating_sub(app.log_back);
    let start = end.saturating_sub(height);
    let lines: Vec<Line> = b
        .log
        .iter()
        .skip(start)
        .take(end - start)
        .map(|(at, text)| {
            let style = if text.contains("failed") {
                theme.fg(Color::Red)
            } else {
                Style::default()
            };
            Line::from(vec![
                Span::raw(format!(
                    "{} ",
                    clock(at.saturating_sub(b.header.started_at))
                )),
                Span::styled(text.clone(), style),
            ])
        })
        .collect();
    let title = if app.log_back > 0 {
        format!(" log ({} newer below) ", app.log_back)
    } else {
        " log ".into()
    };
    frame.render_widget(
        Paragraph::new(lines).block(focused(title, app.focus == Focus::Log)),
        area,
    );
}

fn draw_keys(frame: &mut Frame, area: Rect, app: &App) {
    let text = if app.editing_filter {
        format!("/{}▏ (Enter keeps, Esc clears)", app.filter)
    } else {
        "q quit · ? help · ↑↓ move · Enter details · s sort · / filter · Tab panel".into()
    };
    frame.render_widget(
        Paragraph::new(text).style(Style::default().add_modifier(Modifier::DIM)),
        area,
    );
}

fn popup_area(area: Rect, width: u16, height: u16) -> Rect {
    let w = width.min(area.width);
    let h = height.min(area.height);
    Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    }
}

fn draw_popup(frame: &mut Frame, area: Rect, title: &str, lines: Vec<Line>) {
    let height = lines.len() as u16 + 2;
    let width = lines.iter().map(|l| l.width() as u16).max().unwrap_or(0) + 4;
    let rect = popup_area(area, width.max(title.len() as u16 + 4), height);
    frame.render_widget(Clear, rect);
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(Block::default().borders(Borders::ALL).title(title)),
        rect,
    );
}

pub(crate) fn draw_help(frame: &mut Frame, area: Rect) {
    let lines = [
        "↑ ↓ j k     move (in the focused panel)",
        "PgUp PgDn   a page; g G / Home End: first, last",
        "Enter       the selected trial: params, metrics, error, lineage",
        "s / S       next sort column / reverse the order",
        "/           filter rows by text (status, params, device)",
        "Tab         switch between the trials table and the log",
        "?           this help; Esc closes a window",
        "q           quit (a running sweep is stopped, resumable)",
    ];
    draw_popup(
        frame,
        area,
        " keys ",
        lines.iter().map(|l| Line::from(*l)).collect(),
    );
}

pub(crate) fn draw_details(frame: &mut Frame, area: Rect, app: &App, selected: Option<TrialId>) {
    let Some(t) = selected.and_then(|id| app.board.trial(id)) else {
        return;
    };
    let tr = &t.trial;
    let mut lines = vec![Line::from(format!(
        "status {} · device {} · attempts {} · {} results",
        tr.status.as_str(),
        tr.device.as_deref().unwrap_or("-"),
        tr.attempts,
        t.results.len()
    ))];
    lines.push(Line::from("params:"));
    for (k, v) in tr.params.iter() {
        lines.push(Line::from(format!("  {k} = {v}")));
    }
    if let Some(last) = t.results.last() {
        lines.push(Line::from(format!("last report (step {}):", last.step)));
        for (k, v) in &last.metrics {
            lines.push(Line::from(format!("  {k} = {v}")));
        }
    }
    if let Some(best) = t.best(&app.board.header.metric, app.board.header.mode) {
        lines.push(Line::from(format!(
            "peak {} = {best} (the best at any step)",
            app.board.header.metric
        )));
    }
    if let Some(e) = &tr.error {
        lines.push(Line::from(format!("error: {e}")));
    }
    for l in &tr.lineage {
        lines.push(Line::from(format!(
            "at step {} took trial {}'s weights; params before: {}",
            l.step,
            l.from,
            params_text(&l.previous)
        )));
    }
    draw_popup(frame, area, &format!(" trial {} ", tr.id), lines);
}

fn draw_confirm(frame: &mut Frame, area: Rect, app: &App) {
    let lines = vec![
        Line::from("Trials are still running."),
        Line::from(format!(
            "Stop the sweep? `tune resume {}` continues it.",
            app.board.header.dir
        )),
        Line::from("y or q: stop · any other key: keep running"),
    ];
    draw_popup(frame, area, " quit ", lines);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dashboard::board::{Board, Header, Update};
    use crate::dashboard::render_to_string;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;
    use std::collections::BTreeMap;
    use tune::{Trial, TrialResult};
    use tune_search::{Mode, Value};

    const T0: u64 = 1_000_000;

    fn header(total: u64) -> Header {
        Header {
            name: "demo".into(),
            dir: "runs/demo".into(),
            search: "tpe".into(),
            scheduler: "asha".into(),
            metric: "loss".into(),
            mode: Mode::Min,
            objectives: Vec::new(),
            constraints: Default::default(),
            total,
            slots: vec!["cpu:0".into(), "cpu:1".into()],
            started_at: T0,
        }
    }

    fn trial(b: &mut Board, id: TrialId, status: Status, losses: &[f64]) {
        let mut t = Trial::new(id, Default::default());
        t.params.insert("lr", Value::Float(0.001 * (id + 1) as f64));
        t.params.insert("units", Value::Int(16 << (id % 4)));
        t.created_at = T0;
        t.attempts = 1;
        t.device = Some(format!("cpu:{}", id % 2));
        t.started_at = Some(T0 + id * 1000);
        let mut running = t.clone();
        running.status = Status::Running;
        b.apply(Update::Trial(running));
        for (i, &loss) in losses.iter().enumerate() {
            b.apply(Update::Result {
                id,
                at: T0 + id * 1000 + i as u64,
                result: TrialResult {
                    step: i as u64 + 1,
                    seq: 0,
                    attempt: 1,
                    metrics: BTreeMap::from([("loss".into(), loss), ("acc".into(), 1.0 - loss)]),
                },
            });
        }
        t.status = status;
        if status.is_finished() {
            t.finished_at = Some(T0 + id * 1000 + 500);
        }
        if status == Status::Failed {
            t.error = Some("exit status 3: CUDA out of memory".into());
        }
        b.apply(Update::Trial(t));
    }

    /// A sweep with completed, stopped, failed, running and pending trials.
    fn mixed() -> App {
        let mut b = Board::new(header(8));
        trial(&mut b, 0, Status::Completed, &[0.9, 0.6, 0.4]);
        trial(&mut b, 1, Status::Stopped, &[1.2]);
        trial(&mut b, 2, Status::Failed, &[0.8]);
        trial(&mut b, 3, Status::Completed, &[0.7, 0.3, 0.2]);
        trial(&mut b, 4, Status::Running, &[0.5]);
        b.apply(Update::Scheduler(vec![
            "rung t=1: 4 trials, cut-off 0.85".into(),
            "rung t=3: 2 trials, cut-off 0.36".into(),
        ]));
        App::new(b, true)
    }

    fn panel(width: u16, height: u16, f: impl FnOnce(&mut Frame, Rect)) -> String {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
        terminal.draw(|frame| f(frame, frame.area())).unwrap();
        let buffer = terminal.backend().buffer().clone();
        (0..height)
            .map(|y| {
                let line: String = (0..width).map(|x| buffer[(x, y)].symbol()).collect();
                line.trim_end().to_string() + "\n"
            })
            .collect()
    }

    const PLAIN: Theme = Theme { color: false };

    #[test]
    fn an_empty_sweep_draws_every_panel_with_placeholders() {
        let mut app = App::new(Board::new(header(10)), true);
        let text = render_to_string(&mut app, 120, 30, T0 + 65_000);
        assert!(
            text.contains("tune · demo · tpe + asha · 00:01:05 · running"),
            "{text}"
        );
        assert!(text.contains("0/10 trials: 0 completed 0 running 10 to create"));
        assert!(text.contains("best loss: no completed trial yet"));
        assert!(text.contains("trials (0 shown, sort id)"));
        assert!(text.contains("no completed trial yet"));
        assert!(text.contains("no results yet"));
        assert!(text.contains("cpu:0   idle"));
        assert!(text.contains("(nothing reported yet)"));
        assert!(text.contains("q quit · ? help"));
    }

    #[test]
    fn the_header_counts_states_and_names_the_best() {
        let app = mixed();
        let text = panel(100, 3, |f, a| {
            draw_header(f, a, &app, PLAIN, T0 + 3_723_000)
        });
        assert!(text.contains("01:02:03 · running"), "{text}");
        assert!(
            text.contains("5/8 trials: 2 completed 1 running 1 stopped 1 failed 3 to create"),
            "{text}"
        );
        assert!(
            text.contains("best loss 0.2 (trial 3): lr=0.004 units=128"),
            "{text}"
        );
    }

    #[test]
    fn with_several_objectives_the_header_names_the_front() {
        let mut app = mixed();
        // Minimising both loss and acc = 1 - loss: the completed trials trade one for the
        // other, so both are on the front; the stopped and running ones are not counted.
        app.board.header.objectives = ["loss", "acc"]
            .into_iter()
            .map(|m| tune::Goal {
                metric: m.into(),
                mode: Mode::Min,
            })
            .collect();
        let text = panel(100, 3, |f, a| draw_header(f, a, &app, PLAIN, T0));
        assert!(
            text.contains("pareto front of loss, acc: 2 trials: 0, 3"),
            "{text}"
        );
    }

    #[test]
    fn the_table_shows_status_step_last_peak_and_params() {
        let mut app = mixed();
        let rows = app.rows();
        let text = panel(90, 9, |f, a| draw_trials(f, a, &mut app, &rows, PLAIN));
        let row = |id: &str| {
            text.lines()
                .find(|l| l.starts_with(&format!("│{id} ")))
                .unwrap_or_else(|| panic!("row {id} in\n{text}"))
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(row("0"), "│0 completed 3 0.4 0.4 lr=0.001 units=16 │");
        assert_eq!(row("2"), "│2 failed 1 0.8 0.8 lr=0.003 units=64 │");
        assert!(row("4").starts_with("│4 running 1 0.5 0.5"));
        // Trials not created yet have no row.
        assert!(!text.contains("│5 "), "{text}");
    }

    #[test]
    fn the_table_scrolls_to_keep_the_selection_visible() {
        let mut app = mixed();
        app.selected = 9; // past the end: the last row
        let rows = app.rows();
        let text = panel(90, 6, |f, a| draw_trials(f, a, &mut app, &rows, PLAIN));
        // Three rows fit: the selection (trial 4) is the last of them.
        assert!(text.contains("│2 ") && text.contains("│4 "), "{text}");
        assert!(!text.contains("│1 "), "{text}");
        assert_eq!(app.page, 3);
    }

    #[test]
    fn charts_draw_the_best_so_far_and_the_selected_curve_against_the_best() {
        let mut app = mixed();
        let best = panel(60, 12, |f, a| draw_best_over_time(f, a, &app, PLAIN));
        assert!(best.contains("best loss over time (s)"), "{best}");
        // Y labels span the bests (0.4, then 0.2) with 5% padding.
        assert!(best.contains("0.41") && best.contains("0.19"), "{best}");
        app.selected = 1;
        let curves = panel(60, 12, |f, a| draw_curves(f, a, &app, Some(1), PLAIN));
        assert!(
            curves.contains("loss by step: trial 1 vs best 3"),
            "{curves}"
        );
        assert!(curves.contains('•') && curves.chars().any(|c| ('⠁'..='⣿').contains(&c)));
    }

    #[test]
    fn workers_scheduler_and_log_panels() {
        let app = mixed();
        let workers = panel(40, 4, |f, a| draw_workers(f, a, &app, T0));
        assert!(workers.contains("cpu:0   trial 4 step 1"), "{workers}");
        assert!(workers.contains("cpu:1   idle"), "{workers}");
        let sched = panel(40, 4, |f, a| draw_scheduler(f, a, &app));
        assert!(sched.contains("asha") && sched.contains("rung t=3: 2 trials, cut-off 0.36"));
        let log = panel(70, 5, |f, a| draw_log(f, a, &app, PLAIN));
        // The three newest lines; the failure is among them with its reason.
        assert!(
            log.contains("00:00:02 trial 2 failed: exit status 3"),
            "{log}"
        );
        assert!(log.contains("trial 4 started on cpu:0"), "{log}");
        let mut back = mixed();
        back.log_back = 2;
        let older = panel(70, 5, |f, a| draw_log(f, a, &back, PLAIN));
        assert!(older.contains("2 newer below") && !older.contains("trial 4 started"));
    }

    #[test]
    fn a_slot_holding_a_pack_lists_its_trials_on_one_line() {
        let mut h = header(8);
        h.slots = ["cpu:0", "cpu:0", "cpu:0", "cpu:1", "cpu:1", "cpu:1"]
            .map(String::from)
            .to_vec();
        let mut b = Board::new(h);
        trial(&mut b, 0, Status::Running, &[0.9, 0.8]);
        trial(&mut b, 2, Status::Running, &[0.5]);
        trial(&mut b, 1, Status::Completed, &[0.7]);
        let app = App::new(b, true);
        let workers = panel(70, 4, |f, a| draw_workers(f, a, &app, T0));
        assert!(
            workers.contains("cpu:0   2/3: trial 0 step 2 · trial 2 step 1"),
            "{workers}"
        );
        assert!(workers.contains("cpu:1   idle"), "{workers}");
    }

    #[test]
    fn the_workers_panel_shows_each_gpus_use() {
        let mut app = mixed();
        app.board.apply(Update::Gpus(vec![tune_trials::GpuUse {
            index: 0,
            name: "NVIDIA H100".into(),
            busy_percent: 91,
            memory_used_bytes: 10 << 30,
            memory_total_bytes: 80 << 30,
        }]));
        let workers = panel(60, 5, |f, a| draw_workers(f, a, &app, T0));
        assert!(
            workers.contains("gpu 0 NVIDIA H100 · 91% busy · 10.0 / 80.0 GiB"),
            "{workers}"
        );
    }

    #[test]
    fn a_narrow_workers_panel_wraps_a_gpus_line_rather_than_cut_it() {
        let mut app = mixed();
        app.board.apply(Update::Gpus(vec![tune_trials::GpuUse {
            index: 0,
            name: "NVIDIA H200".into(),
            busy_percent: 94,
            memory_used_bytes: 12 << 30,
            memory_total_bytes: 140 << 30,
        }]));
        let workers = panel(43, 8, |f, a| draw_workers(f, a, &app, T0));
        assert!(workers.contains("140.0 GiB"), "{workers}");
    }

    #[test]
    fn remote_workers_are_listed_with_their_heartbeats_and_trials() {
        let mut app = mixed();
        let on = |id: TrialId, device: &str| {
            let mut t = Trial::new(id, Default::default());
            t.status = Status::Running;
            t.attempts = 1;
            t.device = Some(device.into());
            Update::Trial(t)
        };
        app.board.apply(on(5, "gpu7:42/cuda:1"));
        app.board.apply(on(6, "old:9/cpu:0"));
        // A worker whose slot holds a pack of fused trials.
        app.board.apply(on(7, "pack:3/cpu:0"));
        app.board.apply(on(8, "pack:3/cpu:0"));
        let info = |id: &str, slots, heartbeat_at, live| WorkerInfo {
            id: id.into(),
            slots,
            serving: None,
            heartbeat_at,
            live,
            running: Vec::new(),
            gpus: vec![tune_trials::GpuUse {
                index: 1,
                name: "NVIDIA H200".into(),
                busy_percent: 88,
                memory_used_bytes: 3 << 30,
                memory_total_bytes: 140 << 30,
            }],
        };
        app.board.apply(Update::Workers(vec![
            info("gpu7:42", 2, T0 - 1500, true),
            info("late:7", 1, T0 - 20_000, false),
            info("pack:3", 4, T0 - 1000, true),
        ]));
        let workers = panel(60, 14, |f, a| draw_workers(f, a, &app, T0));
        for line in [
            "cpu:0   trial 4 step 1",
            "gpu7:42 · 1/2 busy · heartbeat 1.5s ago",
            // Its GPUs, as its heartbeat said; a lost worker's are not shown.
            "  gpu 1 NVIDIA H200 · 88% busy · 3.0 / 140.0 GiB",
            "  cuda:1  trial 5 step 0",
            "late:7 · lost: no heartbeat for 20s",
            // A worker no longer listed (it exited) that a trial still names.
            "old:9 · gone",
            "  cpu:0   trial 6 step 0",
            "pack:3 · 2/4 busy · heartbeat 1.0s ago",
            "  cpu:0   2: trial 7 step 0 · trial 8 step 0",
        ] {
            assert!(workers.contains(line), "{line:?} in {workers}");
        }
        assert_eq!(workers.matches("NVIDIA H200").count(), 2, "{workers}");
        // The trials table names each remote trial's worker.
        let text = render_to_string(&mut app, 120, 40, T0);
        let row = text.lines().find(|l| l.contains("│5 ")).unwrap();
        assert!(row.contains(" gpu7:42 "), "{row}");
    }

    #[test]
    fn popups_show_help_details_with_the_error_and_the_quit_question() {
        let mut app = mixed();
        app.selected = 2;
        app.popup = Some(Popup::Details);
        let text = render_to_string(&mut app, 120, 40, T0);
        assert!(text.contains("trial 2"), "{text}");
        assert!(
            text.contains("error: exit status 3: CUDA out of memory"),
            "{text}"
        );
        assert!(text.contains("acc = 0.19999999999999996"), "{text}");
        app.popup = Some(Popup::Help);
        let text = render_to_string(&mut app, 120, 40, T0);
        assert!(text.contains("filter rows by text"), "{text}");
        app.popup = Some(Popup::ConfirmQuit);
        let text = render_to_string(&mut app, 120, 40, T0);
        assert!(
            text.contains("`tune resume runs/demo` continues it"),
            "{text}"
        );
    }

    #[test]
    fn a_finished_or_interrupted_sweep_says_so() {
        let mut app = mixed();
        app.board.apply(Update::Ended {
            at: T0 + 10_000,
            interrupted: false,
        });
        let text = render_to_string(&mut app, 120, 30, T0 + 99_000);
        // The clock stops at the end.
        assert!(text.contains("00:00:10 · finished (q to leave)"), "{text}");
        app.board.ended = Some((T0, true));
        let text = render_to_string(&mut app, 120, 30, T0);
        assert!(
            text.contains("interrupted: `tune resume` continues it"),
            "{text}"
        );
    }

    #[test]
    fn a_small_terminal_keeps_the_table_workers_and_log() {
        let mut app = mixed();
        let text = render_to_string(&mut app, 60, 20, T0);
        assert_eq!(text.lines().count(), 20);
        assert!(text.lines().all(|l| l.chars().count() <= 60));
        for needle in ["tune · demo", "trials (", "│0 ", "workers", "log", "q quit"] {
            assert!(text.contains(needle), "{needle} in\n{text}");
        }
        // Tiny terminals do not panic.
        for (w, h) in [(1, 1), (10, 5), (30, 8), (200, 3)] {
            render_to_string(&mut app, w, h, T0);
        }
    }

    #[test]
    fn ten_thousand_trials_draw_one_screenful() {
        let mut b = Board::new(header(10_000));
        for id in 0..10_000 {
            let loss = ((id * 7919) % 10_000) as f64 / 1e4;
            trial(&mut b, id, Status::Completed, &[loss + 0.5, loss]);
        }
        let mut app = App::new(b, false);
        app.on_key(ratatui::crossterm::event::KeyEvent::from(
            ratatui::crossterm::event::KeyCode::End,
        ));
        let text = render_to_string(&mut app, 120, 40, T0);
        assert!(
            text.contains("10000/10000 trials: 10000 completed"),
            "{text}"
        );
        assert!(text.contains("trials (10000 shown"), "{text}");
        assert!(
            text.contains("│9999 "),
            "the last row is selected and shown\n{text}"
        );
        // Sorted by peak: the minimum (loss 0, trial 0) first.
        app.sort = crate::dashboard::SortKey::Peak;
        app.selected = 0;
        let text = render_to_string(&mut app, 120, 40, T0);
        assert!(text.contains("│0     completed 2     0 "), "{text}");
    }

    #[test]
    fn no_color_means_no_colours() {
        let mut app = mixed();
        let colours = |theme: Theme, app: &mut App| {
            let mut terminal = Terminal::new(TestBackend::new(120, 30)).unwrap();
            terminal.draw(|f| draw(f, app, theme, T0)).unwrap();
            terminal
                .backend()
                .buffer()
                .content()
                .iter()
                .filter(|c| c.fg != Color::Reset)
                .count()
        };
        assert!(colours(Theme { color: true }, &mut app) > 0);
        assert_eq!(colours(Theme { color: false }, &mut app), 0);
    }
}
