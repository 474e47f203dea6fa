//! Where a trial computes: the coordinator names a slot's device (`cpu:0`, `cuda:1`) and the
//! trainable opens it here.

use candle_core::Device;

use crate::TrialsError;

/// Opens the device a slot names: `cpu:N` is the CPU; `cuda:N` is GPU N (the `cuda` build).
///
/// ```
/// assert!(tune_trials::open_device("cpu:3").unwrap().is_cpu());
/// assert!(tune_trials::open_device("tpu:0").is_err());
/// ```
pub fn open_device(name: &str) -> Result<Device, TrialsError> {
    let bad = || {
        TrialsError::Config(format!(
            "device: expected `cpu:N` or `cuda:N`, found \"{name}\""
        ))
    };
    let (kind, ordinal) = name.split_once(':').ok_or_else(bad)?;
    let ordinal: usize = ordinal.parse().map_err(|_| bad())?;
    match kind {
        "cpu" => Ok(Device::Cpu),
        "cuda" => open_cuda(ordinal),
        _ => Err(bad()),
    }
}

#[cfg(feature = "cuda")]
fn open_cuda(ordinal: usize) -> Result<Device, TrialsError> {
    if !crate::gpu::driver_present() {
        return Err(TrialsError::Device(
            "no CUDA driver (libcuda.so.1) on this machine".into(),
        ));
    }
    // cudarc panics when a library it needs cannot be loaded; that must fail the trial, not
    // the sweep.
    let device = std::panic::catch_unwind(|| Device::new_cuda(ordinal))
        .map_err(|_| {
            TrialsError::Device(format!(
                "cuda:{ordinal}: the CUDA libraries could not be loaded"
            ))
        })?
        .map_err(|e| TrialsError::Device(format!("cuda:{ordinal}: {e}")))?;
    if let Device::Cuda(cuda) = &device {
        // cudarc gives every allocation two CUDA events, made and destroyed with it, which
        // it records and waits on only in a context with streams of its own: this one has
        // none (each thread computes on its per-thread default stream), and where work
        // crosses threads tune synchronizes (`Trainer::synchronize`). So the events are four
        // driver calls per tensor that order nothing; a pack makes ~100 tensors a step.
        // SAFETY: no stream is made in this context, so no allocation's use needs them.
        unsafe { cuda.disable_event_tracking() };
        crate::gpu::keep_freed_memory(cuda);
    }
    Ok(device)
}

#[cfg(not(feature = "cuda"))]
fn open_cuda(ordinal: usize) -> Result<Device, TrialsError> {
    Err(TrialsError::Device(format!(
        "cuda:{ordinal}: this tune was built without the `cuda` feature"
    )))
}
