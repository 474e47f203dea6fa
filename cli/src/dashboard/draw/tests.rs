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
