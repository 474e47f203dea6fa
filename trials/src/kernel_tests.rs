//! The `cuda` build's custom ops on a GPU against their CPU paths: each op's arguments as
//! its `cuda_fwd` passes them and its kernel's indexing and reductions, where
//! `TUNE_TEST_GPU=1`. A real GPU runs them, or, on a machine without one,
//! `scripts/null-cuda` with `NULL_CUDA_RUN_KERNELS=1`, which runs tune's kernels compiled for
//! the host on its host-memory "device" (scripts/null-cuda-check). Elsewhere they pass
//! untested, as tests/gpu.rs does.

use candle_core::{DType, Device, Tensor};

use crate::fused_dense::{DenseBackward, DenseForward};
use crate::fused_loss::{SoftmaxLoss, SoftmaxScore};
use crate::fused_step::{column, FusedStep};

fn gpu() -> Option<Device> {
    if std::env::var("TUNE_TEST_GPU").as_deref() != Ok("1") {
        return None;
    }
    Some(
        crate::open_device(crate::DeviceId::Cuda(0))
            .expect("TUNE_TEST_GPU=1, but cuda:0 does not open"),
    )
}

/// `n` values of every sign and a few magnitudes, the same for a seed.
fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let x = ((i + seed * 7919) as u32).wrapping_mul(2_654_435_761) as f32 / u32::MAX as f32;
            (x - 0.5) * if i % 7 == 0 { 10.0 } else { 1.0 }
        })
        .collect()
}

fn on(t: &Tensor, device: &Device) -> Tensor {
    t.to_device(device).unwrap()
}

fn flat(t: &Tensor) -> Vec<f32> {
    t.to_device(&Device::Cpu)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
}

/// The largest gap between two runs of values, relative to 1 or the value.
fn gap(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / x.abs().max(1.0))
        .fold(0.0, f32::max)
}

/// Three weights of a pack of 3 (AdamW, SGD, SGD sitting the update out), one larger than
/// a launch's first row of blocks: the GPU's new weights and states are the CPU's, bit for
/// bit (no multiply-adds either side).
#[test]
fn fused_step_on_the_gpu_is_the_cpu_step() {
    let Some(gpu) = gpu() else { return };
    let cpu = Device::Cpu;
    let k = 3;
    let shapes: [&[usize]; 3] = [&[k, 50, 40], &[k, 1, 50], &[k, 10, 50]];
    let tensor = |shape: &[usize], seed| {
        Tensor::from_vec(values(shape.iter().product(), seed), shape, &cpu).unwrap()
    };
    let weights: Vec<Tensor> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| tensor(s, i))
        .collect();
    let grads: Vec<Tensor> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| tensor(s, 10 + i))
        .collect();
    let states: Vec<Tensor> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let s = [&[2], *s].concat();
            tensor(&s, 20 + i).abs().unwrap() // v >= 0
        })
        .collect();
    let mut rows = vec![0f32; k * column::COUNT];
    for (m, row) in rows.chunks_exact_mut(column::COUNT).enumerate() {
        row[column::ADAMW] = f32::from(m == 0);
        row[column::ACTIVE] = f32::from(m < 2);
        row[column::WEIGHT_DECAY] = 0.01;
        row[column::BETA1] = 0.9;
        row[column::REST1] = 0.1;
        row[column::BETA2] = 0.999;
        row[column::REST2] = 0.001;
        row[column::EPS] = 1e-8;
        row[column::DECAYED] = 0.9999;
        row[column::UNBIAS2] = 3.0;
        row[column::STEP] = 0.01;
    }
    let coefficients = Tensor::from_vec(rows, (k, column::COUNT), &cpu).unwrap();
    let run = |device: &Device| {
        let moved = |ts: &[Tensor]| ts.iter().map(|t| on(t, device)).collect::<Vec<_>>();
        let (w, g, s) = (moved(&weights), moved(&grads), moved(&states));
        let op = FusedStep {
            weights: &w,
            grads: &g,
            states: &s,
            decay: true,
            nesterov: true,
        };
        flat(&on(&coefficients, device).apply_op1_no_bwd(&op).unwrap())
    };
    assert_eq!(run(&gpu), run(&cpu));
}

/// Members of 300 rows (more than a block's threads) and 7 classes, with and without
/// padding: the gradient and the losses within rounding of the CPU's (the block sums its
/// rows' losses in a tree, the CPU in order), the output bias's gradient the GPU's own
/// gradient summed in the kernel's order, bit for bit.
#[test]
fn softmax_loss_on_the_gpu_is_the_cpu_loss() {
    let Some(gpu) = gpu() else { return };
    let cpu = Device::Cpu;
    let (members, rows, classes) = (3, 300, 7);
    let n = members * rows;
    let z = Tensor::from_vec(values(n * classes, 1), (n, classes), &cpu).unwrap();
    let bias = Tensor::from_vec(values(members * classes, 2), (members, classes), &cpu).unwrap();
    let targets: Vec<u32> = (0..n).map(|g| (g * 5 % classes) as u32).collect();
    let targets = Tensor::new(targets.as_slice(), &cpu).unwrap();
    let own: Vec<f32> = (0..n)
        .map(|g| f32::from(g % rows < 250 || g < rows))
        .collect();
    let weights: Vec<f32> = own.iter().map(|&o| -o / 250.0).collect();
    let own = Tensor::new(own.as_slice(), &cpu).unwrap();
    let weights = Tensor::new(weights.as_slice(), &cpu).unwrap();
    let losses = Tensor::new(&[0.5f32, 1.0, 2.0], &cpu).unwrap();
    for padded in [true, false] {
        let run = |device: &Device| {
            let op = SoftmaxLoss {
                bias: on(&bias, device),
                targets: on(&targets, device),
                weights: on(&weights, device),
                own: padded.then(|| on(&own, device)),
                losses: on(&losses, device),
            };
            flat(&on(&z, device).apply_op1_no_bwd(&op).unwrap())
        };
        let (on_gpu, on_cpu) = (run(&gpu), run(&cpu));
        let (at, bias) = (n * classes, n * classes + members);
        assert!(
            gap(&on_gpu[..at], &on_cpu[..at]) <= 1e-6,
            "gradient, padded {padded}"
        );
        assert!(
            gap(&on_gpu[at..bias], &on_cpu[at..bias]) <= 1e-5,
            "losses, padded {padded}"
        );
        assert!(
            gap(&on_gpu[bias..], &on_cpu[bias..]) <= 1e-5,
            "bias, padded {padded}"
        );
        // The output bias's gradient is the GPU's own gradient summed in the kernel's order
        // (its threads' rows in order, then a tree), to the bit.
        for k in 0..members {
            for c in 0..classes {
                let mut lanes = [0f32; crate::fused_loss::LANES];
                for r in 0..rows {
                    lanes[r % lanes.len()] += on_gpu[(k * rows + r) * classes + c];
                }
                let want = crate::fused_dense::tree_sum(&mut lanes);
                assert_eq!(
                    on_gpu[bias + k * classes + c],
                    want,
                    "bias of member {k}, class {c}, padded {padded}"
                );
            }
        }
    }
}

/// A validation of 3 members of 300 rows (more than a block's threads) and 7 classes: the
/// losses within rounding of the CPU's (the device's `exp` and `log`), the hits exactly.
#[test]
fn softmax_score_on_the_gpu_is_the_cpu_score() {
    let Some(gpu) = gpu() else { return };
    let cpu = Device::Cpu;
    let (members, rows, classes) = (3, 300, 7);
    let n = members * rows;
    let z = Tensor::from_vec(values(n * classes, 3), (n, classes), &cpu).unwrap();
    let bias = Tensor::from_vec(values(members * classes, 4), (members, classes), &cpu).unwrap();
    let targets: Vec<u32> = (0..rows).map(|r| (r * 5 % classes) as u32).collect();
    let targets = Tensor::new(targets.as_slice(), &cpu).unwrap();
    let run = |device: &Device| {
        let op = SoftmaxScore {
            bias: on(&bias, device),
            targets: on(&targets, device),
            scale: -1.0 / rows as f32,
        };
        flat(&on(&z, device).apply_op1_no_bwd(&op).unwrap())
    };
    let (on_gpu, on_cpu) = (run(&gpu), run(&cpu));
    assert!(
        gap(&on_gpu[..members], &on_cpu[..members]) <= 1e-5,
        "losses"
    );
    assert_eq!(on_gpu[members..], on_cpu[members..], "hits");
    assert!(on_cpu[members..]
        .iter()
        .all(|&h| h > 0.0 && h < rows as f32));
}

/// A layer of 3 members, 70 rows and 9 units, with a mask, a member without the layer and
/// a gradient carried from above, and without any: both ways the CPU's, bit for bit, the
/// bias's gradient (summed in tiles of columns, 16 threads down each) included.
#[test]
fn dense_layers_on_the_gpu_are_the_cpu_layers() {
    let Some(gpu) = gpu() else { return };
    let cpu = Device::Cpu;
    let shape = (3, 70, 9);
    let numel = 3 * 70 * 9;
    let tensor = |seed| Tensor::from_vec(values(numel, seed), shape, &cpu).unwrap();
    let product = tensor(1);
    let bias = Tensor::from_vec(values(27, 2), (3, 1, 9), &cpu).unwrap();
    let mask = (tensor(3).ge(0.0).unwrap().to_dtype(DType::F32).unwrap() * 1.25).unwrap();
    let has = Tensor::new(&[1u8, 0, 1], &cpu)
        .unwrap()
        .reshape((3, 1, 1))
        .unwrap();
    let input = tensor(4);
    // Magnitudes 4,000 apart, so that summing the bias's gradient in another order than the
    // CPU path's rounds otherwise.
    let spread: Vec<f32> = values(numel, 5)
        .iter()
        .enumerate()
        .map(|(i, v)| if i % 5 == 0 { v * 4099.0 } else { *v })
        .collect();
    let at_x = Tensor::from_vec(spread, shape, &cpu).unwrap();
    let (carried, z) = (tensor(6), tensor(7));
    for full in [true, false] {
        let forward = |device: &Device| {
            let op = DenseForward {
                bias: on(&bias, device),
                mask: full.then(|| on(&mask, device)),
                has: full.then(|| on(&has, device)),
                input: on(&input, device),
            };
            flat(&on(&product, device).apply_op1_no_bwd(&op).unwrap())
        };
        assert_eq!(forward(&gpu), forward(&cpu), "forward, full {full}");
        let backward = |device: &Device| {
            let op = DenseBackward {
                carried: full.then(|| on(&carried, device)),
                z: on(&z, device),
                mask: full.then(|| on(&mask, device)),
                has: full.then(|| on(&has, device)),
            };
            flat(&on(&at_x, device).apply_op1_no_bwd(&op).unwrap())
        };
        assert_eq!(backward(&gpu), backward(&cpu), "backward, full {full}");
    }
}

/// An epoch of dropout masks of three members, padded every way, drawn by the GPU from the
/// table (`DropoutMasks` on a GPU) against the host's draws: bit for bit.
#[test]
fn dropout_masks_drawn_on_the_gpu_are_the_hosts() {
    use crate::fused_dropout::tests::{dropouts, masks, padded_plan};
    let Some(gpu) = gpu() else { return };
    let host = masks(dropouts(), padded_plan(), &Device::Cpu, false);
    assert!(host == masks(dropouts(), padded_plan(), &gpu, true));
}
