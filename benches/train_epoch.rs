//! One training epoch of the built-in trainables, beside the same model in PyTorch.
//!
//!     cargo bench --bench train_epoch                          # tune only
//!     TUNE_PEER_PYTHON=/usr/bin/python3 cargo bench --bench train_epoch
//!                                                              # also PyTorch, same run
//!
//! Data: the shipped digits, 1,438 training rows. Models: the MLP (2 hidden layers of 128,
//! ReLU) and the CNN (16 and 32 3x3 filters, max-pool, 64 dense units); AdamW, batch 64.
//! The number is the median over `TUNE_BENCH_EPOCHS` (default 10) epochs after one warm-up
//! epoch, in milliseconds. The `cuda` build on a machine with a GPU adds a GPU column.

use std::process::Command;
use std::time::Instant;

use candle_core::Device;
use tune_trials::{Builtin, DataSpec, Split, TrainConfig, Trainer};

fn epochs() -> usize {
    std::env::var("TUNE_BENCH_EPOCHS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn epoch_ms(builtin: Builtin, split: &Split, device: &Device) -> f64 {
    let cfg = TrainConfig {
        depth: 2,
        width: if builtin == Builtin::Mlp { 128 } else { 64 },
        channels: 16,
        batch_size: 64,
        epochs: 1000,
        ..TrainConfig::default()
    };
    let mut trainer = Trainer::new(builtin, cfg, split, device, 0).expect("trainer");
    trainer.train_epoch().expect("warm-up epoch");
    let times = (0..epochs())
        .map(|_| {
            let start = Instant::now();
            trainer.train_epoch().expect("epoch");
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    median(times)
}

fn main() {
    let split = DataSpec {
        dataset: Some("digits".into()),
        ..DataSpec::default()
    }
    .load(".".as_ref())
    .expect("digits");
    let cpu: Vec<f64> = [Builtin::Mlp, Builtin::Cnn]
        .iter()
        .map(|&b| epoch_ms(b, &split, &Device::Cpu))
        .collect();
    let gpu: Option<Vec<f64>> = tune_trials::gpu::discover()
        .ok()
        .filter(|g| !g.is_empty())
        .and_then(|_| tune_trials::open_device("cuda:0").ok())
        .map(|dev| {
            [Builtin::Mlp, Builtin::Cnn]
                .iter()
                .map(|&b| epoch_ms(b, &split, &dev))
                .collect()
        });
    let peer = std::env::var("TUNE_PEER_PYTHON").ok().and_then(|python| {
        let out = Command::new(&python)
            .arg("benches/peers/torch_epoch.py")
            .arg(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()?;
        if !out.status.success() {
            eprintln!(
                "PyTorch peer failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            return None;
        }
        serde_json::from_slice::<serde_json::Value>(&out.stdout).ok()
    });
    println!(
        "one epoch of digits (1,438 rows, batch 64, AdamW), median of {} epochs, ms",
        epochs()
    );
    println!("| model | tune CPU | PyTorch CPU | PyTorch / tune | tune GPU |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for (i, name) in ["mlp", "cnn"].iter().enumerate() {
        let torch = peer.as_ref().and_then(|p| p[format!("{name}_ms")].as_f64());
        println!(
            "| {name} | {:.1} | {} | {} | {} |",
            cpu[i],
            torch.map_or("-".into(), |t| format!("{t:.1}")),
            torch.map_or("-".into(), |t| format!("{:.2}", t / cpu[i])),
            gpu.as_ref().map_or("-".into(), |g| format!("{:.1}", g[i])),
        );
    }
    if let Some(p) = &peer {
        println!(
            "PyTorch {} with {} threads; tune with {} threads",
            p["torch"],
            p["threads"],
            candle_core::utils::get_num_threads()
        );
    }
}
