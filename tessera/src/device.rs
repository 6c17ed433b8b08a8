//! Devices: where kernels run.

use std::fmt;

/// A device that runs kernels.
///
/// ```
/// use tessera::Device;
/// assert_eq!(Device::cpu().name(), "cpu");
/// // Without a GPU driver the default device is the CPU, and asking for a GPU is an error.
/// if !tessera::backend::cuda_driver_present() {
///     assert!(Device::default().is_cpu());
///     let e = Device::cuda(0).unwrap_err().to_string();
///     assert!(e.contains("no CUDA driver"), "{e}");
/// }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    /// The CPU backend: Tile IR on a rayon grid, SIMD micro-kernels.
    Cpu,
    /// The PTX simulator: runs the PTX emitted for `arch` on the CPU, with race, bounds and
    /// barrier checkers.
    Sim(tessera_ir::target::ptx::Arch),
    /// A CUDA GPU running the emitted PTX.
    #[cfg(feature = "cuda")]
    Cuda(CudaHandle),
}

/// A shared handle to an opened GPU (compared by ordinal).
#[cfg(feature = "cuda")]
#[derive(Clone, Debug)]
pub struct CudaHandle(pub(crate) std::sync::Arc<crate::backend::cuda::CudaDevice>);

#[cfg(feature = "cuda")]
impl PartialEq for CudaHandle {
    fn eq(&self, o: &Self) -> bool {
        self.0.ordinal() == o.0.ordinal()
    }
}
#[cfg(feature = "cuda")]
impl Eq for CudaHandle {}
#[cfg(feature = "cuda")]
impl std::hash::Hash for CudaHandle {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.0.ordinal().hash(h)
    }
}

impl Device {
    /// The CPU device.
    pub fn cpu() -> Device {
        Device::Cpu
    }

    /// The PTX simulator running `sm_80` PTX.
    pub fn sim() -> Device {
        Device::Sim(tessera_ir::target::ptx::Arch::Sm80)
    }

    /// The PTX simulator running the PTX emitted for `arch`.
    pub fn sim_arch(arch: tessera_ir::target::ptx::Arch) -> Device {
        Device::Sim(arch)
    }

    /// GPU `ordinal` through the CUDA driver. Errors (never panics) when no driver is present,
    /// the ordinal does not exist, or the context cannot be created.
    pub fn cuda(ordinal: usize) -> crate::Result<Device> {
        #[cfg(feature = "cuda")]
        {
            crate::backend::cuda::CudaDevice::open(ordinal).map(|d| Device::Cuda(CudaHandle(d)))
        }
        #[cfg(not(feature = "cuda"))]
        {
            Err(crate::Error::DeviceUnavailable(format!(
                "cuda:{ordinal}: tessera was built without the `cuda` feature"
            )))
        }
    }

    /// The best available device: GPU 0 when a driver is present and the GPU is one we emit
    /// PTX for (sm_80, sm_89, sm_90), else the CPU.
    #[allow(clippy::should_implement_trait)]
    pub fn default() -> Device {
        #[cfg(feature = "cuda")]
        if let Ok(d @ Device::Cuda(_)) = Device::cuda(0)
            && d.arch().is_some()
        {
            return d;
        }
        Device::Cpu
    }

    /// True for the CPU.
    pub fn is_cpu(&self) -> bool {
        matches!(self, Device::Cpu)
    }

    /// The PTX architecture of a GPU device (`None` for the CPU or an unsupported GPU).
    pub fn arch(&self) -> Option<tessera_ir::target::ptx::Arch> {
        match self {
            Device::Cpu => None,
            Device::Sim(a) => Some(*a),
            #[cfg(feature = "cuda")]
            Device::Cuda(h) => h.0.arch(),
        }
    }

    /// A short name: `cpu` or `cuda:0`.
    pub fn name(&self) -> String {
        match self {
            Device::Cpu => "cpu".into(),
            Device::Sim(a) => format!("sim:{a}"),
            #[cfg(feature = "cuda")]
            Device::Cuda(h) => format!("cuda:{}", h.0.ordinal()),
        }
    }
}

impl Default for Device {
    fn default() -> Self {
        Device::default()
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}
