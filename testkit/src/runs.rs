//! What the search benches share: medians, seeds run on both cores, and a peer's script run
//! for its JSON.

use std::process::Command;

/// The median (the mean of the middle two for an even count). With `TUNE_BENCH_QUANTILES`
/// set, the quantiles are printed on stderr too.
pub fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    if std::env::var_os("TUNE_BENCH_QUANTILES").is_some() {
        let q = |f: f64| xs[((xs.len() - 1) as f64 * f) as usize];
        eprintln!(
            "q10 {:.4} q25 {:.4} q50 {:.4} q75 {:.4} q90 {:.4}",
            q(0.1),
            q(0.25),
            q(0.5),
            q(0.75),
            q(0.9)
        );
    }
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        0.5 * (xs[n / 2 - 1] + xs[n / 2])
    }
}

/// The same seeds of `run` on two threads (the bench machine's two cores), in seed order.
pub fn in_parallel(seeds: u64, run: impl Fn(u64) -> f64 + Sync) -> Vec<f64> {
    std::thread::scope(|scope| {
        let odd = scope.spawn(|| (1..seeds).step_by(2).map(&run).collect::<Vec<_>>());
        let even: Vec<f64> = (0..seeds).step_by(2).map(&run).collect();
        let odd = odd.join().expect("a bench thread");
        (0..seeds as usize)
            .map(|i| if i % 2 == 0 { even[i / 2] } else { odd[i / 2] })
            .collect()
    })
}

/// Runs `benches/peers/<script>` with `args` under `TUNE_PEER_PYTHON` and reads the JSON it
/// prints; `None` (said on stderr) without that interpreter or when the script fails.
pub fn peer_json(script: &str, args: &[String]) -> Option<serde_json::Value> {
    let python = std::env::var("TUNE_PEER_PYTHON").ok()?;
    let out = Command::new(&python)
        .arg(format!("benches/peers/{script}"))
        .args(args)
        .current_dir(crate::workspace_root())
        .output()
        .map_err(|e| eprintln!("{python}: {e}"))
        .ok()?;
    if !out.status.success() {
        eprintln!("{script} failed: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    serde_json::from_slice(&out.stdout)
        .map_err(|e| eprintln!("{script} printed no JSON: {e}"))
        .ok()
}
