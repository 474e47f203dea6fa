//! With the `cuda` feature: compiles the fused pack's kernels (src/fused_step.cu, the
//! optimizer step; src/fused_loss.cu, the loss and its gradient; src/fused_dense.cu, the
//! dense layers around their matmuls; src/fused_dropout.cu, the dropout masks) to PTX with the toolkit's nvcc (`CUDA_HOME`, as
//! scripts/build-cuda sets it), for the compute capability in `CUDA_COMPUTE_CAP` (default 80;
//! the driver JIT-compiles PTX for newer GPUs). Without the feature there is nothing to build.

use std::path::PathBuf;
use std::process::Command;

/// The kernels in src/, each compiled to `$OUT_DIR/<name>.ptx`.
const KERNELS: [&str; 4] = ["fused_step", "fused_loss", "fused_dense", "fused_dropout"];

fn main() {
    for kernel in KERNELS {
        println!("cargo::rerun-if-changed=src/{kernel}.cu");
    }
    println!("cargo::rerun-if-env-changed=CUDA_HOME");
    println!("cargo::rerun-if-env-changed=CUDA_COMPUTE_CAP");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let nvcc = std::env::var_os("CUDA_HOME")
        .map(|home| PathBuf::from(home).join("bin").join("nvcc"))
        .unwrap_or_else(|| PathBuf::from("nvcc"));
    let cap = std::env::var("CUDA_COMPUTE_CAP").unwrap_or_else(|_| "80".into());
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    for kernel in KERNELS {
        let status = Command::new(&nvcc)
            .args(["--ptx", "-O3", "--fmad=false"])
            .arg(format!("-arch=compute_{cap}"))
            .arg(format!("src/{kernel}.cu"))
            .arg("-o")
            .arg(out.join(format!("{kernel}.ptx")))
            .status()
            .unwrap_or_else(|e| panic!("running {} for the `cuda` feature: {e}", nvcc.display()));
        assert!(
            status.success(),
            "{} could not compile src/{kernel}.cu ({status})",
            nvcc.display()
        );
    }
}
