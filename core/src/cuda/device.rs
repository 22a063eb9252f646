//! A CUDA device and the context work on it runs in.
//!
//! [`CudaDevice::open`] retains the device's primary context (what the runtime API and FFmpeg's
//! `hwcontext_cuda` with the primary-context flag use too); [`CudaDevice::from_context`] wraps a
//! context the caller owns (FFmpeg's `AVCUDADeviceContext::cuda_ctx`). Every object of this
//! module that holds device memory or a stream keeps an `Arc<CudaDevice>`, so the context
//! outlives them.
//!
//! Nothing here changes the calling thread's current context behind the caller's back: work
//! on a device runs under [`CudaDevice::push_current`] (a [`ContextGuard`]), which restores
//! the previous current context when it returns. Only [`CudaDevice::make_current`] binds a
//! context for good, when the caller asks for it.

use std::ffi::{c_void, CStr};
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys;

use super::context::ContextGuard;
#[cfg(feature = "testing")]
use super::driver::release_failed;
use super::driver::{call, driver_available, release};
use super::vmm_prop;
use crate::error::{Error, Result};

/// One CUDA device with a context. `Send + Sync`; share it as `Arc<CudaDevice>`.
pub struct CudaDevice {
    ordinal: i32,
    device: sys::CUdevice,
    ctx: sys::CUcontext,
    /// True when the primary context was retained by `open` (released on drop).
    owns_primary: bool,
    name: String,
    granularity: OnceLock<Result<usize>>,
    /// What another module loaded into this context for the life of the device (the test
    /// kernels of `crate::testing`); released in `Drop` with the context current, before the
    /// context is released.
    #[cfg(feature = "testing")]
    attached: OnceLock<Box<dyn ContextResource>>,
}

/// A resource that lives in a device's context (a loaded module, device memory) and is
/// released with the device: with the context current, before the context is released. The
/// device knows nothing else about it; its owner downcasts it back ([`CudaDevice::attached`]).
#[cfg(feature = "testing")]
pub(crate) trait ContextResource: std::any::Any + Send + Sync {
    /// Releases the resource; the device's context is current on the calling thread.
    fn release(self: Box<Self>);
    /// `self`, for the downcast back to the owner's type.
    fn as_any(&self) -> &dyn std::any::Any;
}

// SAFETY: a CUcontext is a driver handle usable from any thread (cuCtxSetCurrent binds it per
// thread); the other fields are plain data or synchronised by OnceLock.
unsafe impl Send for CudaDevice {}
// SAFETY: `&CudaDevice` reads plain data and the context handle (every driver call through it
// pushes the context on the calling thread's own stack); the lazily computed fields are
// OnceLocks.
unsafe impl Sync for CudaDevice {}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDevice")
            .field("ordinal", &self.ordinal)
            .field("name", &self.name)
            .field("ctx", &self.ctx)
            .field("owns_primary", &self.owns_primary)
            .finish()
    }
}

fn device_handle(ordinal: i32) -> Result<sys::CUdevice> {
    if ordinal < 0 {
        return Err(Error::invalid(format!(
            "CUDA device ordinal {ordinal} is negative"
        )));
    }
    driver_available()?;
    let mut dev: sys::CUdevice = 0;
    // SAFETY: `dev` is a valid out-pointer.
    call("cuDeviceGet", || unsafe {
        sys::cuDeviceGet(&mut dev, ordinal)
    })?;
    Ok(dev)
}

fn device_name(dev: sys::CUdevice) -> Result<String> {
    let mut buf = [0 as std::ffi::c_char; 256];
    // SAFETY: the driver writes at most `buf.len()` bytes into `buf`.
    call("cuDeviceGetName", || unsafe {
        sys::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as i32, dev)
    })?;
    // SAFETY: the driver NUL-terminates within the buffer; the last byte is 0 regardless.
    buf[buf.len() - 1] = 0;
    // SAFETY: `buf` is NUL-terminated (its last byte was just set to 0) and outlives the CStr.
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned())
}

impl CudaDevice {
    /// Opens device `ordinal`: retains its primary context (`cuDevicePrimaryCtxRetain`). The
    /// calling thread's current context is left as it was; the calls of this crate make the
    /// device's context current themselves, for their duration ([`CudaDevice::push_current`]).
    pub fn open(ordinal: i32) -> Result<Arc<CudaDevice>> {
        let device = device_handle(ordinal)?;
        let name = device_name(device)?;
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: `ctx` is a valid out-pointer and `device` a handle from cuDeviceGet.
        call("cuDevicePrimaryCtxRetain", || unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut ctx, device)
        })?;
        Ok(Arc::new(CudaDevice {
            ordinal,
            device,
            ctx,
            owns_primary: true,
            name,
            granularity: OnceLock::new(),
            #[cfg(feature = "testing")]
            attached: OnceLock::new(),
        }))
    }

    /// Wraps a context the caller created (a `CUcontext`, e.g. FFmpeg's hwcontext's
    /// `cuda_ctx`) on device `ordinal`, after checking that it belongs to that device. The
    /// context is not retained nor destroyed here. The calling thread's current context is
    /// left as it was.
    ///
    /// # Safety
    /// `ctx` must be null (refused) or a live `CUcontext`, and the caller must keep it alive
    /// (not `cuCtxDestroy` it) for as long as the returned device and everything made on it
    /// (streams, events, buffers, VMM mappings) live: the driver dereferences it on every
    /// call.
    pub unsafe fn from_context(ctx: *mut c_void, ordinal: i32) -> Result<Arc<CudaDevice>> {
        if ctx.is_null() {
            return Err(Error::invalid("CudaDevice::from_context: null CUcontext"));
        }
        let device = device_handle(ordinal)?;
        let name = device_name(device)?;
        let ctx = ctx as sys::CUcontext;
        let ctx_dev = {
            let _current = ContextGuard::push(ctx)?;
            let mut ctx_dev: sys::CUdevice = -1;
            // SAFETY: `ctx_dev` is a valid out-pointer; a context is current (the guard).
            call("cuCtxGetDevice", || unsafe {
                sys::cuCtxGetDevice(&mut ctx_dev)
            })?;
            ctx_dev
        };
        if ctx_dev != device {
            return Err(Error::invalid(format!(
                "CudaDevice::from_context: the context belongs to CUdevice {ctx_dev}, \
                 not to device ordinal {ordinal} (CUdevice {device})"
            )));
        }
        Ok(Arc::new(CudaDevice {
            ordinal,
            device,
            ctx,
            owns_primary: false,
            name,
            granularity: OnceLock::new(),
            #[cfg(feature = "testing")]
            attached: OnceLock::new(),
        }))
    }

    /// Binds this device's context to the calling thread for good (`cuCtxSetCurrent`),
    /// replacing the thread's current context. The calls of this crate never need it (they
    /// use [`CudaDevice::push_current`]); callers use it for their own raw driver calls.
    pub fn make_current(&self) -> Result<()> {
        // SAFETY: `self.ctx` is live for the life of `self` (retained, or kept alive by the
        // caller of `from_context`).
        call("cuCtxSetCurrent", || unsafe {
            sys::cuCtxSetCurrent(self.ctx)
        })
    }

    /// Makes this device's context current on the calling thread until the guard is dropped,
    /// then restores the thread's previous current context (`cuCtxPushCurrent` /
    /// `cuCtxPopCurrent`; nothing at all when the context is current already).
    pub fn push_current(&self) -> Result<ContextGuard> {
        ContextGuard::push(self.ctx)
    }

    /// Blocks until all work in this device's context has finished (`cuCtxSynchronize`, under
    /// [`CudaDevice::push_current`]): every stream of the context, including the legacy
    /// default stream, but no other context's work.
    pub fn synchronize(&self) -> Result<()> {
        let _current = self.push_current()?;
        // SAFETY: no arguments; the device's context is current (the guard).
        call("cuCtxSynchronize", || unsafe { sys::cuCtxSynchronize() })
    }

    /// Free and total memory of the device in bytes (`cuMemGetInfo`), as the driver counts
    /// it: device-wide, all processes included.
    pub fn memory_info(&self) -> Result<(usize, usize)> {
        let _current = self.push_current()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers; the device's context is current (the guard).
        call("cuMemGetInfo", || unsafe {
            sys::cuMemGetInfo_v2(&mut free, &mut total)
        })?;
        Ok((free, total))
    }

    /// The CUDA ordinal of the device in this process.
    pub fn ordinal(&self) -> i32 {
        self.ordinal
    }

    /// The device's name as the driver reports it (e.g. "NVIDIA H200").
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The raw `CUcontext`, for FFmpeg and other driver-API users.
    pub fn context(&self) -> *mut c_void {
        self.ctx as *mut c_void
    }

    pub(crate) fn cu_device(&self) -> sys::CUdevice {
        self.device
    }

    /// The minimum VMM granularity for POSIX-fd-shareable pinned memory on this device
    /// (`cuMemGetAllocationGranularity`, queried once): every VMM size is a multiple of it.
    pub fn vmm_granularity(&self) -> Result<usize> {
        self.granularity
            .get_or_init(|| {
                let _current = self.push_current()?;
                vmm_prop::query_granularity(self.device)
            })
            .clone()
    }

    /// The resource attached to this device, made by `init` on first use (the caller made
    /// the context current if `init` needs it); `None` when the slot holds a resource of
    /// another type. One slot: its only user is `crate::testing`.
    #[cfg(feature = "testing")]
    pub(crate) fn attached<T: ContextResource>(&self, init: impl FnOnce() -> T) -> Option<&T> {
        self.attached
            .get_or_init(|| Box::new(init()))
            .as_any()
            .downcast_ref::<T>()
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        #[cfg(feature = "testing")]
        if let Some(resource) = self.attached.take() {
            match self.push_current() {
                Ok(_current) => resource.release(),
                Err(e) => release_failed(&e),
            }
        }
        if self.owns_primary {
            let device = self.device;
            // SAFETY: `open` retained the primary context of `device` once; this is the
            // matching release, after everything made on the device was dropped (they hold
            // an Arc of it).
            release("cuDevicePrimaryCtxRelease", || unsafe {
                sys::cuDevicePrimaryCtxRelease_v2(device)
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn open_without_a_driver_is_a_clean_error() {
        if driver_available().is_ok() {
            return;
        }
        let e = CudaDevice::open(0).unwrap_err();
        assert_eq!(e.code(), ErrorCode::Cuda);
        let mut fake = 1u8;
        // SAFETY: without a driver the context is never handed to it (refused before).
        let e = unsafe { CudaDevice::from_context(&mut fake as *mut u8 as *mut c_void, 0) }
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::Cuda);
    }

    #[test]
    fn bad_arguments_are_refused_before_the_driver() {
        assert_eq!(
            CudaDevice::open(-1).unwrap_err().code(),
            ErrorCode::InvalidArg
        );
        assert_eq!(
            // SAFETY: null is refused before the driver is called.
            unsafe { CudaDevice::from_context(std::ptr::null_mut(), 0) }
                .unwrap_err()
                .code(),
            ErrorCode::InvalidArg
        );
    }

    #[test]
    fn device_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<CudaDevice>();
        check::<Arc<CudaDevice>>();
    }
}
