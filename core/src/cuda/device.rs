//! A CUDA device and the context work on it runs in.
//!
//! [`CudaDevice::open`] retains the device's primary context (what the runtime API and FFmpeg's
//! `hwcontext_cuda` with the primary-context flag use too); [`CudaDevice::from_context`] wraps a
//! context the caller owns (FFmpeg's `AVCUDADeviceContext::cuda_ctx`). Every object of this
//! module that holds device memory or a stream keeps an `Arc<CudaDevice>`, so the context
//! outlives them.

use std::ffi::{c_void, CStr};
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys;

use super::driver::{call, driver_available, release};
use super::kernels::Kernels;
use super::vmm;
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
    pub(crate) kernels: OnceLock<Result<Kernels>>,
}

// SAFETY: a CUcontext is a driver handle usable from any thread (cuCtxSetCurrent binds it per
// thread); the other fields are plain data or synchronised by OnceLock.
unsafe impl Send for CudaDevice {}
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
    call("cuDeviceGet", || unsafe {
        sys::cuDeviceGet(&mut dev, ordinal)
    })?;
    Ok(dev)
}

fn device_name(dev: sys::CUdevice) -> Result<String> {
    let mut buf = [0 as std::ffi::c_char; 256];
    call("cuDeviceGetName", || unsafe {
        sys::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as i32, dev)
    })?;
    // SAFETY: the driver NUL-terminates within the buffer; the last byte is 0 regardless.
    buf[buf.len() - 1] = 0;
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned())
}

impl CudaDevice {
    /// Opens device `ordinal`: retains its primary context (`cuDevicePrimaryCtxRetain`) and
    /// binds it to the calling thread. Other threads call [`CudaDevice::make_current`].
    pub fn open(ordinal: i32) -> Result<Arc<CudaDevice>> {
        let device = device_handle(ordinal)?;
        let name = device_name(device)?;
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        call("cuDevicePrimaryCtxRetain", || unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut ctx, device)
        })?;
        let dev = Arc::new(CudaDevice {
            ordinal,
            device,
            ctx,
            owns_primary: true,
            name,
            granularity: OnceLock::new(),
            kernels: OnceLock::new(),
        });
        dev.make_current()?;
        Ok(dev)
    }

    /// Wraps a context the caller created (a `CUcontext`, e.g. FFmpeg's hwcontext's
    /// `cuda_ctx`) on device `ordinal`. The context is not retained nor destroyed here: the
    /// caller keeps it alive for as long as this device and everything made on it live.
    /// Binds it to the calling thread and checks that it belongs to device `ordinal`.
    pub fn from_context(ctx: *mut c_void, ordinal: i32) -> Result<Arc<CudaDevice>> {
        if ctx.is_null() {
            return Err(Error::invalid("CudaDevice::from_context: null CUcontext"));
        }
        let device = device_handle(ordinal)?;
        let name = device_name(device)?;
        let ctx = ctx as sys::CUcontext;
        call("cuCtxSetCurrent", || unsafe { sys::cuCtxSetCurrent(ctx) })?;
        let mut ctx_dev: sys::CUdevice = -1;
        call("cuCtxGetDevice", || unsafe {
            sys::cuCtxGetDevice(&mut ctx_dev)
        })?;
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
            kernels: OnceLock::new(),
        }))
    }

    /// Binds this device's context to the calling thread (`cuCtxSetCurrent`). Every call of
    /// this module that works on the device does this itself; callers need it only for their
    /// own raw driver calls.
    pub fn make_current(&self) -> Result<()> {
        call("cuCtxSetCurrent", || unsafe {
            sys::cuCtxSetCurrent(self.ctx)
        })
    }

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
            .get_or_init(|| vmm::query_granularity(self))
            .clone()
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        if let Some(Ok(kernels)) = self.kernels.take() {
            if self.make_current().is_ok() {
                kernels.unload();
            }
        }
        if self.owns_primary {
            let device = self.device;
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
        let e = CudaDevice::from_context(&mut fake as *mut u8 as *mut c_void, 0).unwrap_err();
        assert_eq!(e.code(), ErrorCode::Cuda);
    }

    #[test]
    fn bad_arguments_are_refused_before_the_driver() {
        assert_eq!(
            CudaDevice::open(-1).unwrap_err().code(),
            ErrorCode::InvalidArg
        );
        assert_eq!(
            CudaDevice::from_context(std::ptr::null_mut(), 0)
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
