//! Finding GPUs (the `cuda` build): how many, their names and free memory. A build without
//! the feature, or a machine without the driver, finds none and says why.

/// One GPU as seen now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInfo {
    pub ordinal: usize,
    pub name: String,
    pub total_bytes: u64,
    pub free_bytes: u64,
}

/// The GPUs of this machine, or why there are none (no `cuda` feature, no driver, no device).
///
/// ```
/// match tune_trials::gpu::discover() {
///     Ok(gpus) => println!("{} GPUs", gpus.len()),
///     Err(why) => println!("CPU only: {why}"),
/// }
/// ```
pub fn discover() -> Result<Vec<GpuInfo>, String> {
    imp::discover()
}

/// Free memory of GPU `ordinal` now, in bytes; `None` when it cannot be asked.
pub fn free_bytes(ordinal: usize) -> Option<u64> {
    imp::free_bytes(ordinal)
}

/// How many freed bytes the memory pool of `device` keeps for its next allocations rather
/// than handing them back to the OS at each synchronization ([`crate::open_device`] raises
/// the driver's default, 0, to all of them); `None` for the CPU, or where the driver cannot
/// say.
///
/// ```
/// let cpu = tune_trials::open_device(tune_trials::DeviceId::Cpu).unwrap();
/// assert_eq!(tune_trials::gpu::pool_release_threshold(&cpu), None);
/// ```
#[cfg(feature = "train")]
pub fn pool_release_threshold(device: &candle_core::Device) -> Option<u64> {
    imp::pool_release_threshold(device)
}

/// Lets the memory pool of `cuda`'s device keep the memory freed back to it (best effort).
/// Tensors are allocated from the pool in stream order (`cuMemAllocAsync`), and with the
/// driver's default release threshold, 0, the pool hands every unused byte back to the OS at
/// each synchronization: a pack synchronizes at each of its stops (several an epoch where
/// batch sizes mix) and each checkpoint it copies out, after which its next allocations map
/// memory anew. The pool then holds up to the process's peak use until it exits.
#[cfg(feature = "cuda")]
pub(crate) fn keep_freed_memory(cuda: &candle_core::CudaDevice) {
    imp::keep_freed_memory(cuda)
}

/// Whether the CUDA driver library can be loaded, checked without touching cudarc (which
/// panics when it cannot load a library).
pub fn driver_present() -> bool {
    imp::driver_present()
}

#[cfg(feature = "cuda")]
mod imp {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};

    use super::GpuInfo;
    use candle_core::cuda_backend::cudarc::driver::{result, CudaContext, DriverError};

    /// GPU `ordinal`'s primary context, held for the rest of the process. Dropping the last
    /// handle destroys a primary context, and making one takes a noticeable part of a second
    /// on a large GPU: asking for free memory once per claimed slot made and destroyed it
    /// each time (seen on an H200: the first 16 trials of a fused sweep started 2.5 s late),
    /// and each unfused trial made it again after the one before it ended.
    fn context(ordinal: usize) -> Result<Arc<CudaContext>, DriverError> {
        static HELD: OnceLock<Mutex<HashMap<usize, Arc<CudaContext>>>> = OnceLock::new();
        let mut held = HELD
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(ctx) = held.get(&ordinal) {
            return Ok(ctx.clone());
        }
        let ctx = CudaContext::new(ordinal)?;
        held.insert(ordinal, ctx.clone());
        Ok(ctx)
    }

    pub fn driver_present() -> bool {
        // dlopen rather than a cudarc call: the same binary must start where there is no
        // driver at all.
        let name = c"libcuda.so.1";
        // SAFETY: a NUL-terminated name; libcuda's initialisers run on load, which is what
        // any CUDA use does anyway, and the handle is only compared with null.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
        !handle.is_null()
    }

    fn guarded<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
            .unwrap_or_else(|_| Err("the CUDA libraries could not be loaded".into()))
    }

    pub fn discover() -> Result<Vec<GpuInfo>, String> {
        if !driver_present() {
            return Err("no CUDA driver (libcuda.so.1) on this machine".into());
        }
        guarded(|| {
            let n = CudaContext::device_count().map_err(|e| format!("cannot count GPUs: {e}"))?;
            if n <= 0 {
                return Err("the CUDA driver reports no GPU".into());
            }
            (0..n as usize)
                .map(|i| {
                    let ctx = context(i).map_err(|e| format!("GPU {i}: {e}"))?;
                    ctx.bind_to_thread().map_err(|e| format!("GPU {i}: {e}"))?;
                    let (free, total) =
                        result::mem_get_info().map_err(|e| format!("GPU {i}: {e}"))?;
                    Ok(GpuInfo {
                        ordinal: i,
                        name: ctx.name().unwrap_or_else(|_| format!("GPU {i}")),
                        total_bytes: total as u64,
                        free_bytes: free as u64,
                    })
                })
                .collect()
        })
    }

    pub fn pool_release_threshold(device: &candle_core::Device) -> Option<u64> {
        let candle_core::Device::Cuda(cuda) = device else {
            return None;
        };
        release_threshold(cuda, None).ok()
    }

    pub fn keep_freed_memory(cuda: &candle_core::CudaDevice) {
        // Best effort: where the driver refuses (or lacks the calls), its default stays,
        // which only costs time; `pool_release_threshold` says which.
        let _ = release_threshold(cuda, Some(u64::MAX));
    }

    /// The release threshold of the default memory pool of `cuda`'s device, set to `to`
    /// first where given.
    fn release_threshold(cuda: &candle_core::CudaDevice, to: Option<u64>) -> Result<u64, String> {
        use candle_core::cuda_backend::cudarc::driver::sys;
        let cu_device = cuda.cuda_stream().context().cu_device();
        let attribute = sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD;
        let mut threshold = to.unwrap_or(0);
        guarded(|| {
            // SAFETY: `cu_device` is the device's own; the release threshold is a u64, as
            // `threshold` is, which lives through the calls.
            unsafe {
                let value = (&mut threshold as *mut u64).cast();
                result::device::get_default_mem_pool(cu_device).and_then(|pool| match to {
                    Some(_) => result::mem_pool::set_attribute(pool, attribute, value),
                    None => result::mem_pool::get_attribute(pool, attribute, value),
                })
            }
            .map_err(|e| e.to_string())
        })?;
        Ok(threshold)
    }

    pub fn free_bytes(ordinal: usize) -> Option<u64> {
        if !driver_present() {
            return None;
        }
        guarded(|| {
            let ctx = context(ordinal).map_err(|e| e.to_string())?;
            ctx.bind_to_thread().map_err(|e| e.to_string())?;
            result::mem_get_info()
                .map(|(free, _)| free as u64)
                .map_err(|e| e.to_string())
        })
        .ok()
    }
}

#[cfg(not(feature = "cuda"))]
mod imp {
    use super::GpuInfo;

    pub fn driver_present() -> bool {
        false
    }

    pub fn discover() -> Result<Vec<GpuInfo>, String> {
        Err("this tune was built without the `cuda` feature".into())
    }

    pub fn free_bytes(_ordinal: usize) -> Option<u64> {
        None
    }

    #[cfg(feature = "train")]
    pub fn pool_release_threshold(_device: &candle_core::Device) -> Option<u64> {
        None
    }
}
