//! Devices: where kernels run and where tensors live.

use crate::backend::gpu::stats::{DeviceStats, MemoryStats, TransferStats};
use crate::backend::gpu::{self, GpuDevice, GpuOps};
use crate::backend::sim::device::SimApi;
use crate::{Error, Result};
use std::any::Any;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tessera_ir::target::ptx::Arch;

/// A device that runs kernels and holds tensors.
///
/// A tensor placed on a GPU or the simulator with [`crate::Tensor::to`] lives in that
/// device's memory: kernels read it there and write their results there, and only
/// [`crate::Tensor::to_vec`] (or `.to(&Device::cpu())`) copies it back. Work on a device is
/// queued on its one stream in call order; [`Device::synchronize`] waits for it and
/// [`Device::record_event`] marks a point in it. [`Device::stats`] counts the transfers,
/// launches and allocations, so you can check your own code's traffic:
///
/// ```
/// use tessera::{Device, Tensor, ir::target::ptx::Arch};
/// tessera::tile! {
///     fn double<const B: i64 = 64>(x: In<f32, 1>, y: Out<f32, 1>) grid = (cdiv(x.dim(0), B)) {
///         let i = program_id(0) * B;
///         store(y, [i], load(x, [i], [B]) * 2.0);
///     }
/// }
/// let dev = Device::new_sim(Arch::Sm80);             // a simulated GPU of its own
/// let xh = Tensor::<f32>::randn(&[200], 1);
/// let x = xh.to(&dev)?;                               // the one upload
/// let mut y = Tensor::<f32>::zeros_on(&[200], &dev)?;
/// double::launch(&x, &mut y)?;                        // runs on the simulator, stays there
/// let mut z = Tensor::<f32>::zeros_on(&[200], &dev)?;
/// double::launch(&y, &mut z)?;
/// assert_eq!(z.device(), &dev);
/// let host = z.to_vec()?;                             // the one download
/// assert_eq!(host[7], 4.0 * xh.as_slice()?[7]);
/// let s = dev.stats();
/// assert_eq!((s.transfers.uploads, s.transfers.downloads, s.launches), (1, 1, 2));
/// # Ok::<(), tessera::Error>(())
/// ```
///
/// Without a GPU driver the default device is the CPU, and asking for a GPU is an error:
///
/// ```
/// use tessera::Device;
/// assert_eq!(Device::cpu().name(), "cpu");
/// if !tessera::backend::cuda_driver_present() {
///     assert!(Device::default().is_cpu());
///     let e = Device::cuda(0).unwrap_err().to_string();
///     assert!(e.contains("no CUDA driver"), "{e}");
/// }
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Device {
    /// The CPU backend: Tile IR on a rayon grid, SIMD micro-kernels; tensors in host memory.
    Cpu,
    /// The PTX simulator: a simulated GPU of one arch with its own device memory, running the
    /// PTX emitted for that arch on the CPU, with race, bounds and barrier checkers.
    Sim(SimHandle),
    /// A CUDA GPU running the emitted PTX.
    #[cfg(feature = "cuda")]
    Cuda(CudaHandle),
}

/// A shared handle to a simulated GPU (compared by identity).
#[derive(Clone)]
pub struct SimHandle(pub(crate) Arc<GpuDevice<SimApi>>);

impl PartialEq for SimHandle {
    fn eq(&self, o: &Self) -> bool {
        Arc::ptr_eq(&self.0, &o.0)
    }
}
impl Eq for SimHandle {}
impl std::hash::Hash for SimHandle {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        (Arc::as_ptr(&self.0) as usize).hash(h)
    }
}

/// A shared handle to an opened GPU (one per ordinal in a process; compared by identity).
#[cfg(feature = "cuda")]
#[derive(Clone)]
pub struct CudaHandle(pub(crate) Arc<GpuDevice<crate::backend::cuda::CudaApi>>);

#[cfg(feature = "cuda")]
impl PartialEq for CudaHandle {
    fn eq(&self, o: &Self) -> bool {
        Arc::ptr_eq(&self.0, &o.0)
    }
}
#[cfg(feature = "cuda")]
impl Eq for CudaHandle {}
#[cfg(feature = "cuda")]
impl std::hash::Hash for CudaHandle {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        (Arc::as_ptr(&self.0) as usize).hash(h)
    }
}

/// What `TESSERA_DEVICE` accepts, in words.
pub(crate) const DEVICE_VALUES: &str =
    "auto, cpu, sim, sim:sm_80, sim:sm_89, sim:sm_90a, cuda or cuda:N";

/// The process's shared simulated GPU of each arch ([`Device::sim_arch`]).
fn shared_sim(arch: Arch) -> Device {
    static SIMS: [OnceLock<SimHandle>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let i = Arch::ALL.iter().position(|a| *a == arch).unwrap_or(0);
    let h = SIMS[i].get_or_init(|| {
        SimHandle(Arc::new(GpuDevice::new(
            SimApi::new(),
            format!("sim:{arch}"),
            Some(arch),
        )))
    });
    Device::Sim(h.clone())
}

impl Device {
    /// The CPU device.
    pub fn cpu() -> Device {
        Device::Cpu
    }

    /// The process's simulated GPU running `sm_80` PTX (the same device on every call).
    pub fn sim() -> Device {
        shared_sim(Arch::Sm80)
    }

    /// The process's simulated GPU running the PTX emitted for `arch` (one per arch).
    pub fn sim_arch(arch: Arch) -> Device {
        shared_sim(arch)
    }

    /// A new simulated GPU of `arch` with its own memory, stream and counters (named
    /// `sim:<arch>#<n>`): tensors on it cannot meet tensors of another device in a launch.
    ///
    /// ```
    /// use tessera::{Device, ir::target::ptx::Arch};
    /// let a = Device::new_sim(Arch::Sm90a);
    /// assert_ne!(a, Device::new_sim(Arch::Sm90a));
    /// assert_eq!(a, a.clone());
    /// assert_eq!(Device::sim(), Device::sim());
    /// assert!(a.name().starts_with("sim:sm_90a#"));
    /// ```
    pub fn new_sim(arch: Arch) -> Device {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        Device::Sim(SimHandle(Arc::new(GpuDevice::new(
            SimApi::new(),
            format!("sim:{arch}#{n}"),
            Some(arch),
        ))))
    }

    /// GPU `ordinal` through the CUDA driver (opened once per process: every call returns the
    /// same device, with one stream and one caching allocator). Errors (never panics) when no
    /// driver is present, the ordinal does not exist, or the context cannot be created.
    pub fn cuda(ordinal: usize) -> Result<Device> {
        #[cfg(feature = "cuda")]
        {
            use std::collections::HashMap;
            use std::sync::Mutex;
            static OPEN: Mutex<Option<HashMap<usize, CudaHandle>>> = Mutex::new(None);
            let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
            let open = open.get_or_insert_with(HashMap::new);
            if let Some(h) = open.get(&ordinal) {
                return Ok(Device::Cuda(h.clone()));
            }
            let h = CudaHandle(Arc::new(crate::backend::cuda::CudaApi::open(ordinal)?));
            open.insert(ordinal, h.clone());
            Ok(Device::Cuda(h))
        }
        #[cfg(not(feature = "cuda"))]
        {
            Err(Error::DeviceUnavailable(format!(
                "cuda:{ordinal}: tessera was built without the `cuda` feature"
            )))
        }
    }

    /// The device kernels run on when every argument is in host memory, and the one to place
    /// new data on: the `TESSERA_DEVICE` setting when it is set, else the best available
    /// device (GPU 0 when a driver is present and the GPU is one we emit PTX for — sm_80,
    /// sm_89, sm_90 —, else the CPU).
    ///
    /// `TESSERA_DEVICE` accepts `auto` (the same as unset), `cpu`, `sim`, `sim:sm_80`,
    /// `sim:sm_89`, `sim:sm_90a`, `cuda` and `cuda:N`. [`Device::try_default`] is the
    /// fallible form; every launch on host tensors asks it, so an invalid value there is an
    /// [`Error::Env`] naming the variable and the value. The variable is read once per
    /// process (parsed, a named GPU opened); [`crate::reload_env`] reads it again.
    ///
    /// # Panics
    ///
    /// When `TESSERA_DEVICE` is set to a value it does not accept, or names a GPU that cannot
    /// be opened (`cuda:0` without a driver): the message names the variable and the value.
    /// It never falls back to another device in silence.
    ///
    /// ```
    /// use tessera::Device;
    /// if std::env::var_os("TESSERA_DEVICE").is_none() {
    ///     assert_eq!(Device::default(), Device::try_default()?);
    /// }
    /// # Ok::<(), tessera::Error>(())
    /// ```
    #[allow(clippy::should_implement_trait)]
    pub fn default() -> Device {
        Device::try_default().unwrap_or_else(|e| panic!("Device::default(): {e}"))
    }

    /// [`Device::default`], with an invalid `TESSERA_DEVICE` value ([`Error::Env`], naming
    /// the variable, the value and what it accepts), or a device it names that cannot be opened
    /// ([`Error::DeviceUnavailable`]), as an error.
    ///
    /// ```
    /// use tessera::Device;
    /// // Unset here: the automatic choice (the CPU on a machine without a GPU driver).
    /// if std::env::var_os("TESSERA_DEVICE").is_none() {
    ///     assert_eq!(Device::try_default()?, Device::default());
    /// }
    /// assert_eq!(Device::parse("sim:sm_90a")?.name(), "sim:sm_90a");
    /// assert!(Device::parse("tpu").unwrap_err().to_string().contains("TESSERA_DEVICE"));
    /// # Ok::<(), tessera::Error>(())
    /// ```
    pub fn try_default() -> Result<Device> {
        crate::env::default_device(Device::auto)
    }

    /// The device a `TESSERA_DEVICE` value names (see [`Device::default`]).
    pub fn parse(value: &str) -> Result<Device> {
        let bad = || {
            Error::Env(tessera_ir::env::EnvError::new(
                "TESSERA_DEVICE",
                value,
                DEVICE_VALUES,
            ))
        };
        let v = value.trim().to_ascii_lowercase();
        match v.as_str() {
            "" | "auto" => Ok(Device::auto()),
            "cpu" => Ok(Device::Cpu),
            "sim" => Ok(Device::sim()),
            "cuda" => Device::cuda(0),
            _ => {
                if let Some(a) = v.strip_prefix("sim:") {
                    return Arch::parse(a).map(Device::sim_arch).ok_or_else(bad);
                }
                if let Some(n) = v.strip_prefix("cuda:") {
                    return Device::cuda(n.parse().map_err(|_| bad())?);
                }
                Err(bad())
            }
        }
    }

    /// The automatic choice: GPU 0 when usable, else the CPU. Probed once per process: every
    /// launch on host tensors asks for it, and probing loads the CUDA driver (about 1.5 ms
    /// when no driver is installed).
    fn auto() -> Device {
        static AUTO: OnceLock<Device> = OnceLock::new();
        AUTO.get_or_init(|| {
            #[cfg(feature = "cuda")]
            if let Ok(d @ Device::Cuda(_)) = Device::cuda(0)
                && d.arch().is_some()
            {
                return d;
            }
            Device::Cpu
        })
        .clone()
    }

    /// True for the CPU.
    pub fn is_cpu(&self) -> bool {
        matches!(self, Device::Cpu)
    }

    /// The device layer of a GPU or the simulator (`None` for the CPU).
    pub(crate) fn gpu(&self) -> Option<&dyn GpuOps> {
        match self {
            Device::Cpu => None,
            Device::Sim(h) => Some(&*h.0),
            #[cfg(feature = "cuda")]
            Device::Cuda(h) => Some(&*h.0),
        }
    }

    /// The PTX architecture of a GPU device (`None` for the CPU or an unsupported GPU).
    pub fn arch(&self) -> Option<Arch> {
        self.gpu().and_then(|g| g.arch())
    }

    /// A short name: `cpu`, `cuda:0`, `sim:sm_80` (`sim:sm_80#3` for [`Device::new_sim`]).
    pub fn name(&self) -> String {
        match self.gpu() {
            None => "cpu".into(),
            Some(g) => g.label().to_string(),
        }
    }

    /// Waits until every operation queued on the device (launches, copies) has finished; a
    /// fault of an asynchronous launch is reported here at the latest. On the CPU and the
    /// simulator, work is complete when its call returns.
    pub fn synchronize(&self) -> Result<()> {
        self.gpu().map_or(Ok(()), |g| g.synchronize())
    }

    /// Marks the current point of the device's stream.
    ///
    /// ```
    /// use tessera::{Device, Tensor};
    /// let cpu = Device::cpu();
    /// let start = cpu.record_event()?;
    /// let y = Tensor::<f32>::randn(&[64, 64], 1).to_f64_vec()?; // some host work
    /// let end = cpu.record_event()?;
    /// assert!(end.elapsed_since(&start)?.is_some());      // the CPU has a clock
    /// let sim = Device::sim();
    /// let (a, b) = (sim.record_event()?, sim.record_event()?);
    /// assert_eq!(b.elapsed_since(&a)?, None);             // the simulator has none
    /// assert!(b.elapsed_since(&start).is_err());          // events of two devices
    /// # drop(y);
    /// # Ok::<(), tessera::Error>(())
    /// ```
    pub fn record_event(&self) -> Result<Event> {
        let at = match self.gpu() {
            None => EventAt::Host(Instant::now()),
            Some(g) => EventAt::Device(g.record()?),
        };
        Ok(Event {
            device: self.clone(),
            at,
        })
    }

    /// Transfers, launches and allocator state of this device (all zero on the CPU, which
    /// moves nothing).
    pub fn stats(&self) -> DeviceStats {
        self.gpu().map_or_else(gpu::no_stats, |g| g.stats())
    }

    /// Host↔device transfers since the device was opened or [`Device::reset_stats`].
    pub fn transfer_stats(&self) -> TransferStats {
        self.stats().transfers
    }

    /// The caching allocator's counters and gauges.
    pub fn memory_stats(&self) -> MemoryStats {
        self.stats().memory
    }

    /// Zeroes the transfer and launch counters and the allocator's cumulative counters.
    pub fn reset_stats(&self) {
        if let Some(g) = self.gpu() {
            g.reset_stats()
        }
    }

    /// Returns the caching allocator's free blocks to the device.
    pub fn empty_cache(&self) {
        if let Some(g) = self.gpu() {
            g.empty_cache()
        }
    }
}

/// [`Device::default`]: panics on an invalid `TESSERA_DEVICE` (see there).
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

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// A point in a device's stream ([`Device::record_event`]).
pub struct Event {
    device: Device,
    at: EventAt,
}

enum EventAt {
    Host(Instant),
    Device(Box<dyn Any + Send + Sync>),
}

impl Event {
    /// The device whose stream it marks.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Waits until the device has reached this event.
    pub fn synchronize(&self) -> Result<()> {
        match (&self.at, self.device.gpu()) {
            (EventAt::Device(e), Some(g)) => g.wait(&**e),
            _ => Ok(()),
        }
    }

    /// The device time from `start` to this event, waiting for this one: `None` on a device
    /// without a clock (the simulator). Events of two devices are an error.
    pub fn elapsed_since(&self, start: &Event) -> Result<Option<Duration>> {
        if start.device != self.device {
            return Err(Error::Unsupported {
                device: self.device.name(),
                message: format!("an event of {} cannot start this interval", start.device),
            });
        }
        let secs = match (&start.at, &self.at, self.device.gpu()) {
            (EventAt::Host(a), EventAt::Host(b), _) => Some(b.duration_since(*a).as_secs_f64()),
            (EventAt::Device(a), EventAt::Device(b), Some(g)) => g.elapsed(&**a, &**b)?,
            _ => None,
        };
        Ok(secs.map(Duration::from_secs_f64))
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Event({})", self.device)
    }
}
