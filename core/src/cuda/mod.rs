//! The CUDA layer: device contexts, VMM memory shared as POSIX file descriptors (protocol v4
//! §3.7), streams and events (§5, R12), and pitched copies. The test kernels live in
//! `crate::testing` (feature `testing`).
//!
//! The driver (`libcuda.so.1`) is loaded at run time through cudarc's raw driver API
//! (`cudarc::driver::sys`); nothing here needs CUDA to build. Without a driver every call
//! returns an [`ErrorCode::Cuda`](crate::ErrorCode::Cuda) error saying why, never a panic
//! ([`driver_available`] tells up front).
//!
//! One file per job:
//! - [`driver`]: loading and checking the driver, error mapping, the count of failed
//!   teardown calls ([`release_failures`]).
//! - [`device`]: [`CudaDevice`] (primary or caller-owned context).
//! - [`identity`]: [`GpuUuid`], and which local ordinal a publisher's announced GPU is.
//! - [`context`]: [`ContextGuard`]: every call that needs a context pushes it and pops it
//!   again, so the caller's current context is never replaced.
//! - [`vmm`]: [`VmmAllocation`] (create + export fd) and [`VmmImport`] (import fd + map);
//!   `vmm_prop`: the allocation properties both it and the device's granularity use.
//! - [`module`]: [`KernelModule`], a kernel of ours loaded from PTX.
//! - [`stream`]: [`Stream`] and [`Event`].
//! - [`stream_handle`]: [`CudaStream`], the stream a caller names to the publish API.
//! - [`copy`]: 2D copies, memset, and the host-copy counter.
//! - [`buffer`]: [`DeviceBuffer`], plain device memory.
//! - [`pinned`]: [`PinnedBuffer`], page-locked host memory (sources of asynchronous uploads).

pub mod buffer;
pub mod context;
pub mod copy;
pub mod device;
pub mod driver;
pub mod identity;
pub mod module;
pub mod pinned;
pub mod stream;
pub mod stream_handle;
pub mod vmm;
mod vmm_prop;

pub use buffer::DeviceBuffer;
pub use context::{current_context, ContextGuard};
pub use copy::{copy_2d_async, copy_dtoh_2d, copy_htod_2d_async, host_copy_count, memset_d8_async};
pub use device::CudaDevice;
pub use driver::{device_count, driver_available, driver_version, release_failures};
pub use identity::{device_uuid, resolve_device, visible_gpus, GpuUuid, DEVICE_AUTO};
pub use module::KernelModule;
pub use pinned::PinnedBuffer;
pub use stream::{launch_host_func, Event, Stream, StreamIdentity};
pub use stream_handle::CudaStream;
pub use vmm::{live_mappings, VmmAllocation, VmmImport};
