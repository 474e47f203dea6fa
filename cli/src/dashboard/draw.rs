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
use tune_search::{value_brief, Mode, Status, TrialId};

use super::app::{params_text, App, Focus, Popup};
use super::board::{Board, TrialView};
use tune::remote::{gang_slots, split_remote_slot, WorkerInfo};

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
    let shown: Vec<&TrialView> = (rows.iter().skip(offset).take(height))
        .filter_map(|&id| app.board.trial(id))
        .collect();
    // Trials on remote workers (`tune worker`) get a column naming the worker of each (each
    // machine of a trial on several).
    let worker_width = (app.board.header.slots.iter())
        .filter_map(|s| split_remote_slot(s).map(|(w, _)| w.chars().count()))
        .chain(shown.iter().map(|t| workers_of(t).chars().count()))
        .max()
        .filter(|_| {
            app.board
                .header
                .slots
                .iter()
                .any(|s| split_remote_slot(s).is_some())
        });
    let remote = worker_width.is_some();
    let body: Vec<Row> = (shown.into_iter())
        .map(|t| trial_row(t, (&metric, mode), remote, theme))
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

/// A trial's row: id, status, step, the metric's last and peak values, its worker (where
/// trials run on remote workers) and params.
fn trial_row<'a>(
    t: &'a TrialView,
    (metric, mode): (&str, Mode),
    remote: bool,
    theme: Theme,
) -> Row<'a> {
    let step = t.results.last().map_or("-".into(), |r| r.step.to_string());
    let value = |v: Option<f64>| v.map_or("-".into(), value_brief);
    let mut cells = vec![
        Cell::from(t.trial.id.to_string()),
        Cell::from(t.trial.status.as_str()).style(theme.status(t.trial.status)),
        Cell::from(step),
        Cell::from(value(t.last(metric))),
        Cell::from(value(t.best(metric, mode))),
    ];
    if remote {
        cells.push(Cell::from(workers_of(t)));
    }
    cells.push(Cell::from(params_text(&t.trial.params)));
    Row::new(cells)
}

/// The worker a trial runs on, or each machine's of a trial on several (a gang), node 0
/// first; its local slot where it runs here.
fn workers_of(t: &TrialView) -> String {
    let device = t.trial.device.as_deref().unwrap_or("-");
    let workers: Vec<&str> = gang_slots(device)
        .map(|slot| split_remote_slot(slot).map_or(slot, |(w, _)| w))
        .collect();
    workers.join(" + ")
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
    let to_points = |t: Option<&TrialView>| -> Vec<(f64, f64)> {
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

/// One line per slot of `slots` (each with the trial it runs, if any). A slot named more than
/// once holds several trials: a GPU's shares, or a pack of fused trials (`fuse`), here or on
/// a remote worker. One line each, with every trial running there, after how many of its
/// places are busy (`places`: a remote worker's places per slot are not known here).
fn slot_lines(
    b: &Board,
    slots: Vec<(&str, Option<TrialId>)>,
    places: bool,
    indent: &str,
) -> Vec<Line<'static>> {
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
                    let listed: Vec<String> = trials.iter().filter_map(|&id| each(id)).collect();
                    match places {
                        true => format!("{}/{n}: {}", trials.len(), listed.join(" · ")),
                        false => format!("{}: {}", trials.len(), listed.join(" · ")),
                    }
                }
            };
            Line::from(format!("{indent}{slot:<7} {text}"))
        })
        .collect()
}

pub(crate) fn draw_workers(frame: &mut Frame, area: Rect, app: &App, now: u64) {
    let b = &app.board;
    let slots = || b.header.slots.iter().zip(&b.workers);
    let local: Vec<(&str, Option<TrialId>)> = slots()
        .filter(|(slot, _)| split_remote_slot(slot).is_none())
        .map(|(slot, &trial)| (slot.as_str(), trial))
        .collect();
    let mut lines: Vec<Line> = slot_lines(b, local, true, "");
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
        lines.extend(slot_lines(b, busy, false, "  "));
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
mod tests;
