//! GPU utilisation and memory through NVML (`libnvidia-ml.so.1`, installed with the NVIDIA
//! driver), loaded with `dlopen` at the first call: every build can report it, and a machine
//! without the driver simply has none to report.
//!
//! NVML numbers GPUs in PCI bus order; CUDA's ordinals follow `CUDA_DEVICE_ORDER`, which
//! defaults to fastest first, so on a machine with mixed GPUs the two may differ.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::OnceLock;

/// One GPU's use, sampled now.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GpuUse {
    /// NVML's index (PCI bus order).
    pub index: usize,
    pub name: String,
    /// Percent of the last sample period (1/6 s to 1 s, by model) in which a kernel ran.
    pub busy_percent: u32,
    pub memory_used_bytes: u64,
    pub memory_total_bytes: u64,
}

impl GpuUse {
    /// One line for people: `gpu 0 NVIDIA H100 · 93% busy · 12.3 / 79.6 GiB`.
    ///
    /// ```
    /// let g = tune_trials::GpuUse {
    ///     index: 0,
    ///     name: "NVIDIA H100".into(),
    ///     busy_percent: 93,
    ///     memory_used_bytes: 3 << 29,
    ///     memory_total_bytes: 80 << 30,
    /// };
    /// assert_eq!(g.line(), "gpu 0 NVIDIA H100 · 93% busy · 1.5 / 80.0 GiB");
    /// ```
    pub fn line(&self) -> String {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        format!(
            "gpu {} {} · {}% busy · {:.1} / {:.1} GiB",
            self.index,
            self.name,
            self.busy_percent,
            gib(self.memory_used_bytes),
            gib(self.memory_total_bytes)
        )
    }
}

/// Every GPU's use now, or `None` where NVML is not there (no NVIDIA driver) or fails.
///
/// ```
/// match tune_trials::gpu_use() {
///     Some(gpus) => gpus.iter().for_each(|g| println!("{}", g.line())),
///     None => println!("no NVIDIA driver here"),
/// }
/// ```
pub fn gpu_use() -> Option<Vec<GpuUse>> {
    static NVML: OnceLock<Option<Nvml>> = OnceLock::new();
    NVML.get_or_init(Nvml::open).as_ref()?.sample()
}

type Device = *mut c_void;

#[repr(C)]
#[derive(Default)]
struct Utilization {
    gpu: c_uint,
    memory: c_uint,
}

#[repr(C)]
#[derive(Default)]
struct Memory {
    total: u64,
    free: u64,
    used: u64,
}

/// The NVML functions used; the library stays loaded for the life of the process.
struct Nvml {
    count: unsafe extern "C" fn(*mut c_uint) -> c_int,
    handle: unsafe extern "C" fn(c_uint, *mut Device) -> c_int,
    utilization: unsafe extern "C" fn(Device, *mut Utilization) -> c_int,
    memory: unsafe extern "C" fn(Device, *mut Memory) -> c_int,
    name: unsafe extern "C" fn(Device, *mut c_char, c_uint) -> c_int,
}

/// The function `name` of the library `lib`, as a function pointer of type `F`.
///
/// # Safety
/// `lib` must be a live handle and `F` the function's true pointer type.
unsafe fn entry<F: Copy>(lib: *mut c_void, name: &CStr) -> Option<F> {
    assert_eq!(
        size_of::<F>(),
        size_of::<*mut c_void>(),
        "a function pointer"
    );
    // SAFETY: as the caller promises; `F` is pointer-sized (checked above).
    unsafe {
        let p = libc::dlsym(lib, name.as_ptr());
        (!p.is_null()).then(|| std::mem::transmute_copy::<*mut c_void, F>(&p))
    }
}

impl Nvml {
    fn open() -> Option<Nvml> {
        // SAFETY: a NUL-terminated name; the handle is never closed, so the function
        // pointers taken from it stay valid.
        let lib = unsafe { libc::dlopen(c"libnvidia-ml.so.1".as_ptr(), libc::RTLD_LAZY) };
        if lib.is_null() {
            return None;
        }
        // SAFETY: `lib` is a live handle, and each entry point is taken at the type its C
        // signature in nvml.h spells out (API version 2 where there is one).
        unsafe {
            let init: unsafe extern "C" fn() -> c_int = entry(lib, c"nvmlInit_v2")?;
            if init() != 0 {
                return None;
            }
            Some(Nvml {
                count: entry(lib, c"nvmlDeviceGetCount_v2")?,
                handle: entry(lib, c"nvmlDeviceGetHandleByIndex_v2")?,
                utilization: entry(lib, c"nvmlDeviceGetUtilizationRates")?,
                memory: entry(lib, c"nvmlDeviceGetMemoryInfo")?,
                name: entry(lib, c"nvmlDeviceGetName")?,
            })
        }
    }

    fn sample(&self) -> Option<Vec<GpuUse>> {
        let mut n: c_uint = 0;
        // SAFETY: NVML was initialised in `open`; every out-pointer is a live local of the
        // type NVML writes, and the name buffer's length is passed.
        unsafe {
            if (self.count)(&mut n) != 0 {
                return None;
            }
            (0..n)
                .map(|i| {
                    let mut device: Device = std::ptr::null_mut();
                    if (self.handle)(i, &mut device) != 0 {
                        return None;
                    }
                    let (mut busy, mut memory) = (Utilization::default(), Memory::default());
                    let mut name = [0 as c_char; 96];
                    if (self.utilization)(device, &mut busy) != 0
                        || (self.memory)(device, &mut memory) != 0
                    {
                        return None;
                    }
                    let name = if (self.name)(device, name.as_mut_ptr(), name.len() as c_uint) == 0
                    {
                        CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned()
                    } else {
                        format!("GPU {i}")
                    };
                    Some(GpuUse {
                        index: i as usize,
                        name,
                        busy_percent: busy.gpu,
                        memory_used_bytes: memory.used,
                        memory_total_bytes: memory.total,
                    })
                })
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn without_nvml_there_is_nothing_to_report() {
        let driver = ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"]
            .iter()
            .any(|d| std::path::Path::new(d).join("libnvidia-ml.so.1").exists());
        if !driver {
            assert_eq!(super::gpu_use(), None);
        }
    }
}
