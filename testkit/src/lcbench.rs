//! LCBench (Zimmer, Lindauer & Hutter 2021) through YAHPO Gym's surrogate (Pfisterer et al.
//! 2022), in Rust: `benches/peers/lcbench/model.onnx` evaluated by `onnx.rs`, with the space,
//! tasks and scoring of `benches/peers/run_lcbench.py`. Checked against onnxruntime on
//! `cli/tests/fixtures/lcbench_points.json` (`cli/tests/end_to_end/lcbench.rs`).

use std::collections::HashMap;
use std::path::PathBuf;

use tune_search::{History, Mode, Params, RandomSearch, Searcher, Space};

use crate::onnx::{Model, Tensor};
use crate::simulator::Timed;

pub const MAX_EPOCH: u64 = 52;
/// The surrogate's outputs, in order.
pub const METRICS: [&str; 6] = [
    "time",
    "val_accuracy",
    "val_cross_entropy",
    "val_balanced_accuracy",
    "test_cross_entropy",
    "test_balanced_accuracy",
];
pub const TIME: usize = 0;
pub const VAL_ACCURACY: usize = 1;
/// The searched hyperparameters, in the surrogate's input order (after the epoch).
pub const ORDER: [&str; 7] = [
    "batch_size",
    "learning_rate",
    "momentum",
    "weight_decay",
    "num_layers",
    "max_units",
    "max_dropout",
];
/// The tasks to develop against (`lcbench.py`'s `DEV_TASKS`); the other 28 are held out.
pub const DEV_TASKS: [&str; 6] = ["3945", "7593", "34539", "126025", "146212", "167104"];

/// One epoch's outputs (`METRICS`).
pub type Outputs = [f32; 6];

/// `lcbench.py`'s `SPACE` as a spec's `[space]` lines.
pub const SPACE_TOML: &str = "batch_size = { int = [16, 512], log = true }
learning_rate = { loguniform = [1e-4, 1e-1] }
momentum = { uniform = [0.1, 0.99] }
weight_decay = { uniform = [1e-5, 0.1] }
num_layers = { int = [1, 5] }
max_units = { int = [64, 1024], log = true }
max_dropout = { uniform = [0.0, 1.0] }";

/// `lcbench.py`'s `SPACE` in tune's format.
pub fn space() -> Space {
    toml::from_str(SPACE_TOML).expect("the LCBench space")
}

/// The surrogate's 7 hyperparameter inputs from a suggestion, in `ORDER`.
pub fn config(params: &Params) -> [f64; 7] {
    ORDER.map(|name| {
        params
            .get(name)
            .and_then(|v| v.as_f64())
            .unwrap_or_else(|| panic!("{name} in {params:?}"))
    })
}

/// Where the surrogate's files are: `TUNE_LCBENCH_DIR`, else `benches/peers/lcbench`.
pub fn folder() -> PathBuf {
    std::env::var_os("TUNE_LCBENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::workspace_root().join("benches/peers/lcbench"))
}

/// The loaded surrogate and its task encoding.
pub struct Surrogate {
    model: Model,
    task_codes: HashMap<String, i64>,
    tasks: Vec<String>,
}

impl Surrogate {
    pub fn load() -> Result<Surrogate, String> {
        let dir = folder();
        let read = |name: &str| {
            std::fs::read(dir.join(name)).map_err(|e| format!("{}: {e}", dir.join(name).display()))
        };
        let model = Model::read(&read("model.onnx")?)?;
        let encoding: serde_json::Value =
            serde_json::from_slice(&read("encoding.json")?).map_err(|e| e.to_string())?;
        let task_codes = encoding["OpenML_task_id"]
            .as_object()
            .ok_or("encoding.json: no OpenML_task_id")?
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_i64()?)))
            .collect();
        let space: serde_json::Value =
            serde_json::from_slice(&read("config_space.json")?).map_err(|e| e.to_string())?;
        let tasks = space["hyperparameters"][0]["choices"]
            .as_array()
            .ok_or("config_space.json: no task choices")?
            .iter()
            .filter_map(|t| t.as_str().map(String::from))
            .collect();
        Ok(Surrogate {
            model,
            task_codes,
            tasks,
        })
    }

    /// The 34 tasks, in `config_space.json`'s order.
    pub fn tasks(&self) -> &[String] {
        &self.tasks
    }

    /// Raw surrogate calls: rows of the 8 inputs (epoch first, then `ORDER`).
    pub fn evaluate(&self, task: &str, rows: &[[f32; 8]]) -> Result<Vec<Outputs>, String> {
        let code = *self
            .task_codes
            .get(task)
            .ok_or_else(|| format!("unknown LCBench task {task:?}"))?;
        let n = rows.len();
        let out = self.model.run(vec![
            ("x_cat", Tensor::I64(vec![n, 1], vec![code; n])),
            ("x_cont", Tensor::F32(vec![n, 8], rows.concat())),
        ])?;
        match out {
            Tensor::F32(shape, v) if shape == [n, 6] => Ok(v
                .chunks_exact(6)
                .map(|c| c.try_into().expect("6 outputs"))
                .collect()),
            other => Err(format!("output of shape {:?}", other.shape())),
        }
    }

    /// A whole learning curve, epochs 1..=52.
    pub fn curve(&self, task: &str, config: &[f64; 7]) -> Vec<Outputs> {
        let rows: Vec<[f32; 8]> = (1..=MAX_EPOCH)
            .map(|epoch| {
                let mut row = [epoch as f32; 8];
                for (slot, v) in row[1..].iter_mut().zip(config) {
                    *slot = *v as f32;
                }
                row
            })
            .collect();
        self.evaluate(task, &rows).expect("the LCBench surrogate")
    }
}

/// `run_lcbench.py`'s anchors for one task: normalised regret 0 at `best`, 1 at `median`.
#[derive(Clone, Copy, Debug)]
pub struct Reference {
    pub best: f64,
    pub median: f64,
}

impl Reference {
    /// (best - accuracy) / (best - median), `run_lcbench.py`'s score.
    pub fn normalised_regret(&self, accuracy: f64) -> f64 {
        (self.best - accuracy) / (self.best - self.median)
    }
}

/// `benches/data/lcbench_references.json` (written by `benches/peers/lcbench_fixture.py`).
pub fn references() -> HashMap<String, Reference> {
    let text = include_str!("../../benches/data/lcbench_references.json");
    let json: serde_json::Value = serde_json::from_str(text).expect("lcbench_references.json");
    json["references"]
        .as_object()
        .expect("references")
        .iter()
        .map(|(task, r)| {
            let get = |k: &str| r[k].as_f64().expect("a reference value");
            (
                task.clone(),
                Reference {
                    best: get("ref"),
                    median: get("random_median"),
                },
            )
        })
        .collect()
}

/// One LCBench task on the simulated clock: val_accuracy (maximised) and the surrogate's
/// cumulative training time; the regret is `run_lcbench.py`'s normalised regret.
pub struct Task<'a> {
    pub surrogate: &'a Surrogate,
    pub task: &'a str,
    pub reference: Reference,
}

impl Timed for Task<'_> {
    fn max_t(&self) -> u64 {
        MAX_EPOCH
    }

    fn observe(&self, params: &Params, epoch: u64) -> (f64, f64) {
        let mut row = [epoch as f32; 8];
        for (slot, v) in row[1..].iter_mut().zip(config(params)) {
            *slot = v as f32;
        }
        let out = self
            .surrogate
            .evaluate(self.task, &[row])
            .expect("the surrogate")[0];
        (f64::from(out[VAL_ACCURACY]), f64::from(out[TIME]))
    }

    fn regret(&self, _params: &Params, value: f64) -> f64 {
        self.reference.normalised_regret(value)
    }
}

impl Task<'_> {
    /// The median seconds of a full 52-epoch training over 64 random configurations (the
    /// unit of the bench's wall-clock checkpoints).
    pub fn full_training_seconds(&self) -> f64 {
        let mut random = RandomSearch::new(space(), 12345);
        let history = History::new(Mode::Max);
        let mut times: Vec<f64> = (0..64)
            .map(|id| {
                let params = random.suggest(id, &history).expect("a configuration");
                self.observe(&params, MAX_EPOCH).1
            })
            .collect();
        times.sort_by(f64::total_cmp);
        0.5 * (times[31] + times[32])
    }
}
