//! One training epoch of the built-in trainables, beside the same model in PyTorch.
//!
//!     cargo bench --bench train_epoch                          # tune only
//!     TUNE_PEER_PYTHON=/usr/bin/python3 cargo bench --bench train_epoch
//!                                                              # also PyTorch, same run
//!
//! Data: the shipped digits, 1,438 training rows. Models: the MLP (2 hidden layers of 128,
//! ReLU) and the CNN (16 and 32 3x3 filters, max-pool, 64 dense units); AdamW, batch 64.
//! The number is the median over `TUNE_BENCH_EPOCHS` (default 10) epochs after one warm-up
//! epoch, in milliseconds. The `cuda` build (scripts/build-cuda) on a machine with a GPU adds
//! GPU columns.
//!
//! The fused rows train K trials of each of those shapes as one model (`FusedTrainer`, HFTA),
//! each with its own learning rate, weight decay, betas and seed, and report the time per
//! trial-epoch (a pack's epoch over K) beside the same K trials trained one after another;
//! with a GPU, also for the 3x1024 MLP of `examples/glyphs` (too slow for a CPU bench). The
//! mixed rows are the MLPs the mlp-digits example searches (widths 32 to 256, depths 1 to 3,
//! batch sizes 32 to 128, SGD and AdamW), padded in a pack to the widest, deepest and longest;
//! the dropout rows add the example's dropout (rates 0 to 0.4), whose masks are drawn on the
//! host. Beside the CPU times, the tensors candle made per trial-epoch (views included, so an
//! upper bound on the kernels an epoch launches; the same on a GPU but for the few operations
//! a GPU pack leaves out): where a GPU's steps are launch-bound, this count is what the fused
//! pack cuts.
//!
//! `TUNE_BENCH_CPU=0` leaves the CPU columns out (a GPU machine's time is short, and its
//! CPU numbers are not the ones docs/benchmarks/training.md compares).

use std::process::Command;
use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use tune_trials::{Builtin, FusedTrainer, Split, TrainConfig, Trainer};

use packs::{
    digits_shape, glyphs_data, glyphs_shape, member, mixed_member, mixed_member_with_dropout,
    MemberOf,
};
use tune_testkit::packs;

/// Pack sizes of the fused rows.
const PACKS: [usize; 3] = [1, 4, 16];

fn epochs() -> usize {
    std::env::var("TUNE_BENCH_EPOCHS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10)
}

/// Whether the CPU columns are measured (`TUNE_BENCH_CPU=0`: GPU only).
fn cpu_columns() -> bool {
    std::env::var("TUNE_BENCH_CPU").map_or(true, |v| v != "0")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn epoch_ms(builtin: Builtin, split: &Split, device: &Device) -> f64 {
    let cfg = TrainConfig {
        epochs: 1000,
        ..digits_shape(builtin)
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

/// How many tensors candle has made in this process (its ids count up from 1), read from a
/// new tensor's id; `None` should its `Debug` form change.
fn tensors_made() -> Option<u64> {
    let probe = Tensor::zeros((), DType::F32, &Device::Cpu).ok()?;
    format!("{:?}", probe.id())
        .strip_prefix("TensorId(")?
        .strip_suffix(')')?
        .parse()
        .ok()
}

/// A fused row's numbers on one device: ms per trial-epoch fused and unfused, and the
/// tensors made per trial-epoch fused and unfused.
struct FusedRow {
    fused_ms: f64,
    unfused_ms: f64,
    fused_tensors: Option<u64>,
    unfused_tensors: Option<u64>,
}

/// Milliseconds and tensors made per trial-epoch of `k` members (`member(i)`) trained as one
/// pack, and of the same members trained one after another.
fn fused_row(
    k: usize,
    builtin: Builtin,
    member: &MemberOf<'_>,
    split: &Split,
    device: &Device,
) -> FusedRow {
    // Tensors made over one epoch, per trial (every epoch of a row makes as many).
    let per_trial = |before: Option<u64>, after: Option<u64>| Some((after? - before?) / k as u64);
    let (mut fused_tensors, mut unfused_tensors) = (None, None);
    let trainers = || -> Vec<Trainer> {
        (0..k)
            .map(|i| {
                let (cfg, seed) = member(i);
                Trainer::new(builtin, cfg, split, device, seed).expect("trainer")
            })
            .collect()
    };
    let mut pack = FusedTrainer::new(trainers()).expect("pack");
    pack.train_epoch().expect("warm-up epoch");
    let fused = median(
        (0..epochs())
            .map(|_| {
                let (start, made) = (Instant::now(), tensors_made());
                for report in pack.train_epoch().expect("epoch") {
                    report.expect("member epoch");
                }
                let ms = start.elapsed().as_secs_f64() * 1e3 / k as f64;
                fused_tensors = per_trial(made, tensors_made());
                ms
            })
            .collect(),
    );
    let mut alone = trainers();
    for t in &mut alone {
        t.train_epoch().expect("warm-up epoch");
    }
    let unfused = median(
        (0..epochs())
            .map(|_| {
                let (start, made) = (Instant::now(), tensors_made());
                for t in &mut alone {
                    t.train_epoch().expect("epoch");
                }
                let ms = start.elapsed().as_secs_f64() * 1e3 / k as f64;
                unfused_tensors = per_trial(made, tensors_made());
                ms
            })
            .collect(),
    );
    FusedRow {
        fused_ms: fused,
        unfused_ms: unfused,
        fused_tensors,
        unfused_tensors,
    }
}

fn main() {
    let split = Split::shipped("digits").expect("digits");
    let cpu: Option<Vec<f64>> = cpu_columns().then(|| {
        [Builtin::Mlp, Builtin::Cnn]
            .iter()
            .map(|&b| epoch_ms(b, &split, &Device::Cpu))
            .collect()
    });
    let gpu: Option<Vec<f64>> = tune_trials::gpu::discover()
        .ok()
        .filter(|g| !g.is_empty())
        .and_then(|_| tune_trials::open_device(tune_trials::DeviceId::Cuda(0)).ok())
        .map(|dev| {
            [Builtin::Mlp, Builtin::Cnn]
                .iter()
                .map(|&b| epoch_ms(b, &split, &dev))
                .collect()
        });
    let peer = |device: &str| -> Option<serde_json::Value> {
        let python = std::env::var("TUNE_PEER_PYTHON").ok()?;
        let out = Command::new(&python)
            .args(["benches/peers/torch_epoch.py", ".", device])
            .output()
            .ok()?;
        if !out.status.success() {
            eprintln!(
                "PyTorch peer ({device}) failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            return None;
        }
        serde_json::from_slice::<serde_json::Value>(&out.stdout).ok()
    };
    let peer_cpu = cpu.as_ref().and_then(|_| peer("cpu"));
    let peer_gpu = gpu.as_ref().and_then(|_| peer("cuda"));
    println!(
        "one epoch of digits (1,438 rows, batch 64, AdamW), median of {} epochs, ms",
        epochs()
    );
    println!(
        "| model | tune CPU | PyTorch CPU | PyTorch / tune | tune GPU | PyTorch GPU | PyTorch / tune |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    let ms = |v: Option<f64>| v.map_or("-".into(), |t| format!("{t:.1}"));
    let ms2 = |v: Option<f64>| v.map_or("-".into(), |t| format!("{t:.2}"));
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => format!("{:.2}", a / b),
        _ => "-".into(),
    };
    for (i, name) in ["mlp", "cnn"].iter().enumerate() {
        let key = format!("{name}_ms");
        let torch_cpu = peer_cpu.as_ref().and_then(|p| p[&key].as_f64());
        let torch_gpu = peer_gpu.as_ref().and_then(|p| p[&key].as_f64());
        let tune_gpu = gpu.as_ref().map(|g| g[i]);
        let tune_cpu = cpu.as_ref().map(|c| c[i]);
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} |",
            ms(tune_cpu),
            ms(torch_cpu),
            ratio(torch_cpu, tune_cpu),
            ms(tune_gpu),
            ms(torch_gpu),
            ratio(torch_gpu, tune_gpu),
        );
    }
    let gpu_device = gpu
        .as_ref()
        .and_then(|_| tune_trials::open_device(tune_trials::DeviceId::Cuda(0)).ok());
    println!();
    println!(
        "fused trials (HFTA): ms per trial-epoch, K trials as one pack beside the same K one after another"
    );
    println!("| model | K | CPU fused | CPU unfused | unfused / fused | tensors fused | tensors unfused | GPU fused | GPU unfused | unfused / fused |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let count = |v: Option<u64>| v.map_or("-".into(), |n| n.to_string());
    let same = |builtin| move |i| member(&digits_shape(builtin), i);
    let rows: [(&str, Builtin, &MemberOf); 4] = [
        ("mlp", Builtin::Mlp, &same(Builtin::Mlp)),
        ("cnn", Builtin::Cnn, &same(Builtin::Cnn)),
        ("mlp, mixed shapes", Builtin::Mlp, &mixed_member),
        (
            "mlp, mixed shapes, dropout",
            Builtin::Mlp,
            &mixed_member_with_dropout,
        ),
    ];
    for (name, builtin, member) in rows {
        for k in PACKS {
            let on_cpu = cpu_columns().then(|| fused_row(k, builtin, member, &split, &Device::Cpu));
            let on_gpu = gpu_device
                .as_ref()
                .map(|d| fused_row(k, builtin, member, &split, d));
            let (cpu, gpu) = (on_cpu.as_ref(), on_gpu.as_ref());
            // Counted on CPU where its columns are, else on the GPU (whose packs leave out the
            // few operations only bit-exactness needs).
            let counted = cpu.or(gpu);
            println!(
                "| {name} | {k} | {} | {} | {} | {} | {} | {} | {} | {} |",
                ms2(cpu.map(|c| c.fused_ms)),
                ms2(cpu.map(|c| c.unfused_ms)),
                ratio(cpu.map(|c| c.unfused_ms), cpu.map(|c| c.fused_ms)),
                count(counted.and_then(|c| c.fused_tensors)),
                count(counted.and_then(|c| c.unfused_tensors)),
                ms2(gpu.map(|g| g.fused_ms)),
                ms2(gpu.map(|g| g.unfused_ms)),
                ratio(gpu.map(|g| g.unfused_ms), gpu.map(|g| g.fused_ms)),
            );
        }
    }
    // The GPU-sized workload (examples/glyphs): seconds per epoch on CPU, so GPU only.
    if let Some(device) = &gpu_device {
        let glyphs = glyphs_data().load(".".as_ref()).expect("glyphs");
        let wide = glyphs_shape();
        println!();
        println!("fused 3x1024 MLPs on glyphs (16,000 rows, batch 256), GPU: ms per trial-epoch");
        println!("| K | fused | unfused | unfused / fused |");
        println!("| ---: | ---: | ---: | ---: |");
        for k in PACKS {
            let row = fused_row(k, Builtin::Mlp, &|i| member(&wide, i), &glyphs, device);
            let (fused, alone) = (row.fused_ms, row.unfused_ms);
            println!("| {k} | {fused:.2} | {alone:.2} | {:.2} |", alone / fused);
        }
    }
    if let Some(p) = &peer_cpu {
        println!(
            "PyTorch {} with {} threads; tune with {} threads",
            p["torch"],
            p["threads"],
            candle_core::utils::get_num_threads()
        );
    }
    if let Some(p) = &peer_gpu {
        println!("GPU: {}", p["device"]);
    }
}
