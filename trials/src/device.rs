//! Opening the device a trial computes on ([`DeviceId`]).

use candle_core::Device;

use crate::{DeviceId, TrialsError};

/// Opens `device`: the CPU, or GPU N (the `cuda` build).
///
/// ```
/// use tune_trials::{open_device, DeviceId};
/// assert!(open_device(DeviceId::Cpu).unwrap().is_cpu());
/// ```
pub fn open_device(device: DeviceId) -> Result<Device, TrialsError> {
    match device {
        DeviceId::Cpu => Ok(Device::Cpu),
        DeviceId::Cuda(ordinal) => open_cuda(ordinal),
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
