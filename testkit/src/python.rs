//! The Python environments the tests read tune's exports back with: each a pinned virtual
//! environment made once under the target folder (from PyPI), unless an environment variable
//! names a Python that has the packages.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A Python with optuna 5.0.0: `TUNE_TEST_OPTUNA_PYTHON`, else a virtual environment the tests
/// make once under the target folder (`pip install optuna==5.0.0`, from PyPI).
pub fn optuna_python() -> PathBuf {
    venv_python(
        "TUNE_TEST_OPTUNA_PYTHON",
        "optuna-5.0.0",
        &["optuna==5.0.0"],
        "import optuna; assert optuna.__version__ == '5.0.0'",
    )
}

/// A Python with numpy 2.4.6 and onnxruntime 1.32.0 for `benches/peers/lcbench/lcbench.py`:
/// `TUNE_TEST_LCBENCH_PYTHON`, else a virtual environment made once under the target folder.
pub fn lcbench_python() -> PathBuf {
    venv_python(
        "TUNE_TEST_LCBENCH_PYTHON",
        "lcbench-onnxruntime-1.32.0",
        &["numpy==2.4.6", "onnxruntime==1.32.0"],
        "import numpy, onnxruntime; assert onnxruntime.__version__ == '1.32.0'",
    )
}

/// A Python with TensorBoard 2.21.0 (and the protobuf and numpy it was tested with):
/// `TUNE_TEST_TENSORBOARD_PYTHON`, else a virtual environment made once under the target folder.
pub fn tensorboard_python() -> PathBuf {
    venv_python(
        "TUNE_TEST_TENSORBOARD_PYTHON",
        "tensorboard-2.21.0",
        &["tensorboard==2.21.0", "protobuf==7.36.2", "numpy==2.4.6"],
        "import tensorboard; assert tensorboard.__version__ == '2.21.0'",
    )
}

/// A Python with MLflow 3.17.2 (its client and `mlflow server`, with the basic-auth app's
/// extra): `TUNE_TEST_MLFLOW_PYTHON`, else a virtual environment made once under the target
/// folder.
pub fn mlflow_python() -> PathBuf {
    venv_python(
        "TUNE_TEST_MLFLOW_PYTHON",
        "mlflow-auth-3.17.2",
        &["mlflow[auth]==3.17.2"],
        "import mlflow, flask_wtf; assert mlflow.__version__ == '3.17.2'",
    )
}

/// A Python with optuna-dashboard 0.21.0 (and optuna 5.0.0): `TUNE_TEST_OPTUNA_DASHBOARD_PYTHON`,
/// else a virtual environment made once under the target folder.
pub fn optuna_dashboard_python() -> PathBuf {
    venv_python(
        "TUNE_TEST_OPTUNA_DASHBOARD_PYTHON",
        "optuna-dashboard-0.21.0",
        &[
            "optuna==5.0.0",
            "optuna-dashboard==0.21.0",
            "bottle==0.13.4",
        ],
        "import optuna_dashboard, optuna; assert optuna.__version__ == '5.0.0'",
    )
}

/// The Python named by the environment variable `var`, else the one of a virtual environment
/// `name` under the target folder with `requirements` installed from PyPI, made once (and
/// again if `check` fails in it).
fn venv_python(var: &str, name: &str, requirements: &[&str], check: &str) -> PathBuf {
    if let Ok(python) = std::env::var(var) {
        return python.into();
    }
    // The tests of one binary run on threads of one process: one of them makes it, the others
    // wait and find it made.
    static MAKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = MAKING.lock().unwrap_or_else(|e| e.into_inner());
    let venv = crate::target_tmp().join(name);
    let python = venv.join("bin").join("python");
    let ready = |python: &Path| {
        Command::new(python)
            .args(["-c", check])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if ready(&python) {
        return python;
    }
    // Made beside and moved into place, so that a test process killed mid-way leaves none.
    let staging = venv.with_file_name(format!("{name}.making-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&staging)
        .output()
        .and_then(|venv| {
            if !venv.status.success() {
                return Ok(venv);
            }
            Command::new(staging.join("bin").join("pip"))
                .args(["install", "--quiet"])
                .args(requirements)
                .output()
        })
        .unwrap_or_else(|e| panic!("python3: {e}"));
    assert!(
        made.status.success(),
        "installing {requirements:?} for the tests failed (needs python3 with venv and PyPI; or \
         set {var} to a python that has them): {}",
        String::from_utf8_lossy(&made.stderr)
    );
    // Another test process may have finished first: either copy will do.
    if std::fs::rename(&staging, &venv).is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    assert!(ready(&python), "{check:?} fails in {}", python.display());
    python
}
