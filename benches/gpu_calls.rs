//! What one optimizer step of a fused pack costs on a GPU, where these small models are
//! launch-bound: the wall time per step (the `cuda` build on a machine with a GPU), and, run
//! under scripts/null-cuda (a CUDA driver, cuBLAS and cuRAND that do nothing and count each
//! call), the CUDA API calls per step by name and the host's own time per step, on any
//! machine:
//!
//!     scripts/build-cuda --bench gpu_calls
//!     scripts/null-cuda target/cuda/release/deps/gpu_calls-<hash>    # no GPU needed
//!
//! Packs of 16: the mlp-digits example's mix of shapes with its dropout (the sweep whose
//! goal is 4x), one 128-128 shape, and the glyphs example's 3x1024 MLP. Each is timed over
//! `TUNE_BENCH_EPOCHS` (default 5) epochs after a warm-up epoch, a step being one update of
//! the pack (its members' most per epoch); an epoch's uploads and validation are counted in
//! its steps. The mix is timed twice: epoch by epoch (`train_epoch`, as packs train under
//! `TUNE_PACKS_IN_LOCKSTEP`), and each member through its own epochs
//! (`train_to_boundary`, as sweeps' packs train), which stops the pack at each batch size's
//! boundary (a validation and reports each) and trains no member's step for nothing: the
//! same number of the pack's steps, its stops counted; and so again with the stops a tick
//! apart made one (a member sitting that tick out, as sweeps' packs do). Each pack trains on the device as tune opens it (`open_device`) and again on
//! candle's default one, whose allocations each make and destroy two CUDA events. Under the
//! null driver the time is the host's alone: the real driver's calls cost more, up to a few
//! microseconds each, and a GPU runs the kernels behind.

use std::collections::BTreeMap;
use std::time::Instant;

use candle_core::Device;
use tune_trials::{Builtin, FusedTrainer, Split, SplitTensors, TrainConfig, Trainer};

use packs::{digits_shape, glyphs_data, glyphs_shape, member, mixed_member_with_dropout, MemberOf};
use tune_testkit::packs;

const K: usize = 16;

fn epochs() -> u64 {
    std::env::var("TUNE_BENCH_EPOCHS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
}

/// The calls the null driver has counted so far, by function; `None` under a real driver.
fn api_calls() -> Option<BTreeMap<String, u64>> {
    type Calls = unsafe extern "C" fn(*mut libc::c_char, libc::size_t) -> libc::size_t;
    // SAFETY: RTLD_NOLOAD only finds a library the process has loaded; `null_cuda_calls`
    // writes at most `len` bytes into `buf` and returns how many it needed.
    unsafe {
        let lib = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        if lib.is_null() {
            return None;
        }
        let sym = libc::dlsym(lib, c"null_cuda_calls".as_ptr());
        if sym.is_null() {
            return None;
        }
        let calls: Calls = std::mem::transmute::<*mut libc::c_void, Calls>(sym);
        let mut buf = vec![0u8; calls(std::ptr::null_mut(), 0) + 1024];
        let used = calls(buf.as_mut_ptr().cast(), buf.len());
        buf.truncate(used.min(buf.len()));
        Some(
            String::from_utf8_lossy(&buf)
                .lines()
                .filter_map(|l| {
                    let (name, n) = l.rsplit_once(' ')?;
                    Some((name.to_string(), n.parse().ok()?))
                })
                .collect(),
        )
    }
}

/// How a row's pack trains: epoch by epoch, or each member through its own epochs, the
/// pack's stops within `merge_within` ticks of each other made one.
#[derive(Clone, Copy, PartialEq)]
enum Training {
    Epochs,
    OwnEpochs { merge_within: u64 },
}

/// One row: a pack of `K` members trained for the bench's epochs.
struct Row {
    micros_per_step: f64,
    steps: u64,
    /// The pack's stops (an epoch's end, or a member's).
    stops: u64,
    /// Calls per step by function, most first (under the null driver).
    calls: Option<Vec<(String, f64)>>,
}

fn measure(
    member: &dyn Fn(usize) -> (TrainConfig, u64),
    split: &Split,
    device: &Device,
    training: Training,
) -> Row {
    // One copy of the rows for the pack, as a sweep's slot has.
    let tensors = SplitTensors::new(split, device).expect("rows on the device");
    let trainers = (0..K)
        .map(|i| {
            let (cfg, seed) = member(i);
            Trainer::with_tensors(Builtin::Mlp, cfg, split, &tensors, seed).expect("trainer")
        })
        .collect();
    let mut pack = FusedTrainer::new(trainers).expect("pack");
    // The first epoch loads the kernels and fills candle's caches.
    pack.train_epoch().expect("warm-up epoch");
    let before = api_calls();
    let start = Instant::now();
    let (mut steps, mut stops) = (0, 0);
    let target = epochs() * pack.steps_per_epoch();
    // Its members' results are garbage under the null driver; only the time counts.
    while steps < target {
        stops += 1;
        match training {
            Training::Epochs => {
                steps += pack.steps_per_epoch();
                let _ = pack.train_epoch().expect("epoch");
            }
            Training::OwnEpochs { merge_within } => {
                steps += pack.ticks_to_boundary(merge_within);
                let _ = pack.train_to_boundary(merge_within).expect("segment");
            }
        }
    }
    let micros_per_step = start.elapsed().as_secs_f64() * 1e6 / steps as f64;
    let calls = before.zip(api_calls()).map(|(before, after)| {
        let mut per_step: Vec<(String, f64)> = after
            .into_iter()
            .map(|(name, n)| {
                let made = n - before.get(&name).copied().unwrap_or(0);
                (name, made as f64 / steps as f64)
            })
            .filter(|(_, n)| *n > 0.0)
            .collect();
        per_step.sort_by(|a, b| b.1.total_cmp(&a.1));
        per_step
    });
    Row {
        micros_per_step,
        steps,
        stops,
        calls,
    }
}

fn main() {
    let device = match tune_trials::gpu::discover() {
        Ok(gpus) if !gpus.is_empty() => {
            tune_trials::open_device(tune_trials::DeviceId::Cuda(0)).expect("cuda:0")
        }
        Ok(_) => return println!("gpu_calls: no GPU; run it under scripts/null-cuda"),
        Err(why) => {
            return println!("gpu_calls: {why}; run the cuda build under scripts/null-cuda")
        }
    };
    let digits = Split::shipped("digits").expect("digits");
    let glyphs = glyphs_data().load(".".as_ref()).expect("glyphs");
    let null_driver = api_calls().is_some();
    println!(
        "one step of a pack of {K} on {}, after a warm-up epoch, over {} epochs{}",
        tune_trials::gpu::discover()
            .ok()
            .and_then(|g| g.first().map(|g| g.name.clone()))
            .unwrap_or_default(),
        epochs(),
        if null_driver {
            " (null driver: host time only)"
        } else {
            ""
        }
    );
    let same = |shape: TrainConfig| move |i| member(&shape, i);
    let rows: [(&str, &MemberOf, &Split, Training); 5] = [
        (
            "mlp-digits mix, dropout",
            &mixed_member_with_dropout,
            &digits,
            Training::Epochs,
        ),
        (
            "mlp-digits mix, dropout, own epochs",
            &mixed_member_with_dropout,
            &digits,
            Training::OwnEpochs { merge_within: 0 },
        ),
        (
            "mlp-digits mix, dropout, own epochs, stops a tick apart merged",
            &mixed_member_with_dropout,
            &digits,
            Training::OwnEpochs { merge_within: 1 },
        ),
        (
            "mlp 128-128, digits",
            &same(digits_shape(Builtin::Mlp)),
            &digits,
            Training::Epochs,
        ),
        (
            "mlp 3x1024, glyphs",
            &same(glyphs_shape()),
            &glyphs,
            Training::Epochs,
        ),
    ];
    // Beside the device as tune opens it, candle's own, which gives each allocation two CUDA
    // events (see `open_device`): what turning them off saves.
    let candle_default = Device::new_cuda(0).expect("cuda:0 as candle opens it");
    let summary = |row: &Row| {
        // The null driver also counts each kernel by name ("kernel <name>"), which are launches
        // already counted.
        let total: f64 = row
            .calls
            .iter()
            .flatten()
            .filter(|(name, _)| !name.starts_with("kernel "))
            .map(|(_, n)| n)
            .sum();
        format!(
            "{:.1} us per step over {} steps and {} stops{}",
            row.micros_per_step,
            row.steps,
            row.stops,
            if null_driver {
                format!(", {total:.1} CUDA API calls per step")
            } else {
                String::new()
            }
        )
    };
    for (name, member, split, training) in rows {
        let row = measure(member, split, &device, training);
        let with_events = measure(member, split, &candle_default, training);
        println!();
        println!("{name}: {}", summary(&row));
        println!("  with candle's events: {}", summary(&with_events));
        for (call, n) in row.calls.iter().flatten() {
            println!("  {n:>8.2}  {call}");
        }
    }
}
