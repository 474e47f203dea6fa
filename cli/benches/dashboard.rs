//! Dashboard costs with 10,000 trials: applying the coordinator's updates to a board, and
//! drawing one frame (the table builds only the rows that fit; sorting and filtering see all).
//!
//!     cargo bench -p tune-cli --bench dashboard
//!
//! No peer has a terminal dashboard to compare with (Ray Tune prints a status table to the
//! log; Optuna has none, its dashboard is a web app): the numbers are ours alone, to watch for
//! regressions.

use std::collections::BTreeMap;
use std::time::Instant;

use tune::{Params, Status, Trial, TrialResult, Value};
use tune_cli::dashboard::{render_to_string, App, Board, Header, SortKey, Update};

fn main() {
    let n: u64 = 10_000;
    let steps = 10;
    let start = Instant::now();
    let mut board = Board::new(Header {
        name: "bench".into(),
        metric: "loss".into(),
        total: n,
        slots: (0..8).map(|i| format!("cpu:{i}")).collect(),
        ..Header::default()
    });
    let mut updates = 0;
    for id in 0..n {
        let mut params = Params::default();
        params.insert("lr", Value::Float(1e-4 * (1 + id % 97) as f64));
        params.insert("units", Value::Int(16 << (id % 5)));
        let mut t = Trial::new(id, params);
        t.status = Status::Running;
        t.device = Some(format!("cpu:{}", id % 8));
        board.apply(Update::Trial(t.clone()));
        for step in 1..=steps {
            let loss = ((id * 7919) % 1000) as f64 / 1000.0 + 1.0 / step as f64;
            board.apply(Update::Result {
                id,
                at: id,
                result: TrialResult {
                    step,
                    seq: id * steps + step,
                    attempt: 1,
                    metrics: BTreeMap::from([("loss".into(), loss)]),
                },
            });
        }
        t.status = Status::Completed;
        board.apply(Update::Trial(t));
        updates += steps + 2;
    }
    let apply = start.elapsed();
    let mut app = App::new(board, false);
    let frame = |app: &mut App| {
        let runs = 20;
        let start = Instant::now();
        for _ in 0..runs {
            std::hint::black_box(render_to_string(app, 160, 50, 0));
        }
        start.elapsed().as_secs_f64() * 1e3 / runs as f64
    };
    let by_id = frame(&mut app);
    app.sort = SortKey::Peak;
    let by_peak = frame(&mut app);
    app.filter = "units=64".into();
    let filtered = frame(&mut app);
    println!("dashboard, {n} trials x {steps} results ({updates} updates)");
    println!("| what | time |");
    println!("| --- | ---: |");
    println!(
        "| apply all updates | {:.1} ms ({:.2} µs per update) |",
        apply.as_secs_f64() * 1e3,
        apply.as_secs_f64() * 1e6 / updates as f64
    );
    println!("| one 160x50 frame, sorted by id | {by_id:.2} ms |");
    println!("| one frame, sorted by peak value | {by_peak:.2} ms |");
    println!("| one frame, filtered (\"units=64\") | {filtered:.2} ms |");
}
