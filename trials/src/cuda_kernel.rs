//! tune's own CUDA kernels (`src/*.cu`, compiled to PTX by build.rs), looked up once per
//! device. candle's `get_or_load_custom_func` asks the driver for the function at every call
//! (`cuModuleGetFunction`), and a pack's step launches several of them: most of its ~10
//! lookups a tick under the null driver were tune's own kernels.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use candle_core::cuda_backend::cudarc::driver::{CudaFunction, CudaStream, LaunchArgs};
use candle_core::cuda_backend::{CudaDevice, DeviceId};

/// A kernel of tune's on a device, ready for its arguments ([`Kernel::builder`]).
pub(crate) struct Kernel {
    func: CudaFunction,
    stream: Arc<CudaStream>,
}

impl Kernel {
    /// The function `name` of the module `module` (its PTX `ptx`) on `device`, from the
    /// process's table after its first use there.
    pub(crate) fn load(
        device: &CudaDevice,
        name: &'static str,
        module: &'static str,
        ptx: &'static str,
    ) -> candle_core::Result<Kernel> {
        // A function holds its module, so an entry outlives a dropped device: tune opens
        // each GPU once a process (crate::gpu), and candle's ids are never reused.
        static LOADED: OnceLock<Mutex<HashMap<(DeviceId, &str), CudaFunction>>> = OnceLock::new();
        let mut loaded =
            (LOADED.get_or_init(Default::default).lock()).unwrap_or_else(|e| e.into_inner());
        let func = match loaded.get(&(device.id(), name)) {
            Some(func) => func.clone(),
            None => {
                let func =
                    (device.get_or_load_custom_func(name, module, ptx)?).into_cuda_function();
                loaded.insert((device.id(), name), func.clone());
                func
            }
        };
        Ok(Kernel {
            func,
            stream: device.cuda_stream(),
        })
    }

    /// A launch of the kernel on the device's stream, as candle's own launches go.
    pub(crate) fn builder(&self) -> LaunchArgs<'_> {
        self.stream.launch_builder(&self.func)
    }
}
