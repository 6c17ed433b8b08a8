//! Devices: where tensors live and kernels run.

use std::fmt;

/// A device that runs kernels.
///
/// ```
/// use tessera::Device;
/// assert_eq!(Device::cpu().name(), "cpu");
/// // Without a GPU driver the default device is the CPU.
/// assert!(Device::default().is_cpu());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    /// The CPU backend: Tile IR on a rayon grid, SIMD micro-kernels.
    Cpu,
}

impl Device {
    /// The CPU device.
    pub fn cpu() -> Device {
        Device::Cpu
    }

    /// The best available device: a CUDA GPU when one is usable, else the CPU.
    /// (The CUDA backend arrives with the PTX work; until then this is the CPU.)
    #[allow(clippy::should_implement_trait)]
    pub fn default() -> Device {
        Device::Cpu
    }

    /// True for the CPU.
    pub fn is_cpu(&self) -> bool {
        matches!(self, Device::Cpu)
    }

    /// A short name: `cpu`.
    pub fn name(&self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
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
        f.write_str(self.name())
    }
}
