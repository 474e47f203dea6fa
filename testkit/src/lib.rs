//! What tune's tests and benches share, apart from the code they test: private PostgreSQL and
//! MLflow servers, a private Slurm cluster, pinned Python environments, the benchmark
//! functions, the learning-curve simulator and the LCBench surrogate. Not published; nothing in the product depends on it.

use std::path::{Path, PathBuf};

pub mod browser;
pub mod certificates;
pub mod curves;
pub mod functions;
pub mod held_out_curves;
pub mod lcbench;
pub mod mlflow_server;
pub mod mo_functions;
pub mod netns;
pub mod onnx;
pub mod packs;
pub mod pg_server;
pub mod pg_tls_server;
pub mod python;
pub mod runs;
pub mod simulator;
pub mod slurm;
pub mod tpe_env;
pub mod trivial;

/// The repository's root, where `benches/peers` and `benches/data` are.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit/ is inside the repository")
        .to_path_buf()
}

/// The target folder's `tmp/` (what Cargo gives integration tests as `CARGO_TARGET_TMPDIR`),
/// found from the running test or bench binary, `target/<profile>/deps/<binary>`.
pub fn target_tmp() -> PathBuf {
    let exe = std::env::current_exe().expect("the running binary's path");
    let target = exe
        .ancestors()
        .nth(3)
        .expect("a test binary lives in target/<profile>/deps");
    let tmp = target.join("tmp");
    std::fs::create_dir_all(&tmp).expect("creating the target folder's tmp/");
    tmp
}
