//! Memory against sweep size: peak RSS of a closure sweep (random search, FIFO, sled store
//! durable, 8 slots) of 10^4, 10^5 and 10^6 trials, each in a process of its own.
//!
//!     cargo bench --bench memory                    # 10^4 and 10^5
//!     TUNE_BENCH_MAX_TRIALS=1000000 cargo bench --bench memory
//!
//! The coordinator holds only unfinished trials and random search reads no history, so RSS
//! should stay flat; this says by how much it grows per trial.

use tune_testkit::trivial;

use std::process::Command;

use trivial::{report_sum, space};
use tune::{Algorithm, Mode, Tuner};

/// The peak resident set of this process, in bytes (VmHWM).
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn sweep(trials: u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let started = std::time::Instant::now();
    let result = Tuner::new(space())
        .algorithm(Algorithm::Random)
        .metric("loss", Mode::Min)
        .samples(trials)
        .cpu_slots(8)
        .dir(dir.path().join("m"))
        .fit(report_sum)
        .expect("sweep");
    // Measured before reading the trials back, which holds them all.
    let (rss, wall) = (peak_rss(), started.elapsed().as_secs_f64());
    let stored = result.trials().expect("the sweep's trials");
    assert_eq!(stored.len() as u64, trials);
    println!("{trials} {rss} {wall:.1}");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(n) = args
        .iter()
        .position(|a| a == "--one")
        .and_then(|i| args.get(i + 1))
    {
        sweep(n.parse().expect("a trial count"));
        return;
    }
    let max: u64 = std::env::var("TUNE_BENCH_MAX_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    println!("| trials | peak RSS | per trial since the last row | wall |");
    println!("|---|---|---|---|");
    let mut last: Option<(u64, u64)> = None;
    for trials in [10_000u64, 100_000, 1_000_000]
        .into_iter()
        .filter(|&n| n <= max)
    {
        let out = Command::new(&args[0])
            .args(["--one", &trials.to_string()])
            .output()
            .expect("the bench itself");
        let text = String::from_utf8_lossy(&out.stdout);
        let Some(line) = text.lines().last() else {
            eprintln!("{trials}: {}", String::from_utf8_lossy(&out.stderr));
            continue;
        };
        let f: Vec<&str> = line.split(' ').collect();
        let (rss, wall): (u64, &str) = (f[1].parse().unwrap_or(0), f[2]);
        let per = last.map_or("-".to_string(), |(n, r)| {
            format!("{:.0} B", (rss as f64 - r as f64) / (trials - n) as f64)
        });
        println!(
            "| {trials} | {:.1} MiB | {per} | {wall} s |",
            rss as f64 / (1 << 20) as f64
        );
        last = Some((trials, rss));
    }
}
