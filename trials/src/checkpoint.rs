//! Checkpoints: one safetensors file holding the weights, the optimizer's state and, in its
//! metadata, the step counters, so a restored trial continues exactly as if never paused.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use candle_core::{Device, Tensor};

use crate::TrialsError;

/// The file a trainer writes in its checkpoint folder.
pub const CHECKPOINT_FILE: &str = "checkpoint.safetensors";

/// Writes `tensors` and `metadata` to `dir/checkpoint.safetensors` atomically: a crash
/// leaves the previous checkpoint or the new one, never half of one.
pub fn write(
    dir: &Path,
    tensors: &[(String, Tensor)],
    metadata: HashMap<String, String>,
) -> Result<(), TrialsError> {
    let io = |e: std::io::Error| TrialsError::Checkpoint(format!("{}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(io)?;
    let bytes =
        safetensors::serialize(tensors.iter().map(|(n, t)| (n.as_str(), t)), Some(metadata))
            .map_err(|e| TrialsError::Checkpoint(e.to_string()))?;
    let tmp = dir.join(format!("{CHECKPOINT_FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(&bytes).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, dir.join(CHECKPOINT_FILE)).map_err(io)?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io)
}

/// A loaded checkpoint: tensors by name and the metadata map.
pub struct Checkpoint {
    pub tensors: HashMap<String, Tensor>,
    pub metadata: HashMap<String, String>,
    path: String,
}

impl Checkpoint {
    pub fn read(dir: &Path, device: &Device) -> Result<Checkpoint, TrialsError> {
        let path = dir.join(CHECKPOINT_FILE);
        let shown = path.display().to_string();
        let bytes =
            std::fs::read(&path).map_err(|e| TrialsError::Checkpoint(format!("{shown}: {e}")))?;
        let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes)
            .map_err(|e| TrialsError::Checkpoint(format!("{shown}: {e}")))?;
        let metadata = meta.metadata().clone().unwrap_or_default();
        let tensors = candle_core::safetensors::load_buffer(&bytes, device)
            .map_err(|e| TrialsError::Checkpoint(format!("{shown}: {e}")))?;
        Ok(Checkpoint {
            tensors,
            metadata,
            path: shown,
        })
    }

    pub fn tensor(&self, name: &str) -> Result<Tensor, TrialsError> {
        self.tensors
            .get(name)
            .cloned()
            .ok_or_else(|| TrialsError::Checkpoint(format!("{}: no tensor `{name}`", self.path)))
    }

    pub fn meta<T: std::str::FromStr>(&self, key: &str) -> Result<T, TrialsError> {
        self.metadata
            .get(key)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| {
                TrialsError::Checkpoint(format!(
                    "{}: metadata `{key}` missing or unreadable",
                    self.path
                ))
            })
    }

    pub fn path(&self) -> &str {
        &self.path
    }
}
