//! CUDA helpers of the C API: the host copies this process made, the CUDA devices a ring could
//! use, and a reference on a device's primary context (`cuframes_cuda_context_t`). The FFmpeg
//! components (`hwupload_cuframes`, the `cuframes` input device) build their CUDA contexts
//! with them; they are declared in the "Frame helpers for FFmpeg" section of
//! `include/cuframes.h`.

use std::ffi::c_int;

use crate::ffi::args::out;
use crate::ffi::{guard, status};

/// Host<->device copies that cuframes made in this process (uploads of host frames into a
/// CUDA ring, downloads): `core::cuda::host_copy_count`. A frame path that stays on the GPU
/// leaves it unchanged; the FFmpeg components print it when they close.
#[no_mangle]
pub extern "C" fn cuframes_host_copy_count() -> u64 {
    guard(0, cuframes_core::cuda::host_copy_count)
}

/// Number of CUDA devices a CUDA ring could use: 0 when there is no driver or no device.
/// Never fails (the reason, when 0, is not an error: host rings are the fallback).
#[no_mangle]
pub extern "C" fn cuframes_cuda_device_count() -> c_int {
    guard(0, || {
        if cuframes_core::cuda::driver_available().is_err() {
            return 0;
        }
        cuframes_core::cuda::device_count().map_or(0, |n| n as c_int)
    })
}

/// Opaque `cuframes_cuda_context_t`: a reference on a device's primary context, held for
/// its `Drop` (which releases the context).
pub struct CCudaContext {
    _device: std::sync::Arc<cuframes_core::cuda::CudaDevice>,
}

impl CCudaContext {
    /// The handle of a reference already taken on `device`.
    pub(crate) fn new(device: std::sync::Arc<cuframes_core::cuda::CudaDevice>) -> CCudaContext {
        CCudaContext { _device: device }
    }
}

/// Retain the primary context of CUDA device `device` (the context cuframes imports rings
/// into and allocates its copies in) and return it as a `CUcontext` in `*cu_ctx`. FFmpeg
/// builds its CUDA device context on it, so that every frame of the input device lives in one
/// context; the reference keeps it alive until `cuframes_cuda_context_release`.
///
/// # Safety
/// The C contract (crate docs): `cu_ctx` is NULL or writable; `out_ctx` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_cuda_primary_context(
    device: c_int,
    cu_ctx: *mut *mut std::ffi::c_void,
    out_ctx: *mut *mut CCudaContext,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: both out-pointers are NULL or writable, and distinct.
        let (cu_ctx, out_ctx) = unsafe { (out(cu_ctx, "cu_ctx")?, out(out_ctx, "out")?) };
        let dev = cuframes_core::cuda::CudaDevice::open(device)?;
        *cu_ctx = dev.context();
        *out_ctx = Box::into_raw(Box::new(CCudaContext::new(dev)));
        Ok(())
    })
}

/// Drop a reference taken by `cuframes_cuda_primary_context`. NULL is ignored.
///
/// # Safety
/// The C contract (crate docs): `ctx` is NULL or a live context handle from
/// cuframes_cuda_primary_context, released once here with no other call on it in flight.
#[no_mangle]
pub unsafe extern "C" fn cuframes_cuda_context_release(ctx: *mut CCudaContext) {
    if !ctx.is_null() {
        // SAFETY: the C contract: a non-NULL `ctx` came from Box::into_raw in
        // cuframes_cuda_primary_context and is released once.
        guard((), || drop(unsafe { Box::from_raw(ctx) }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_never_fail() {
        let n = cuframes_cuda_device_count();
        assert!(n >= 0);
        let _ = cuframes_host_copy_count();
        let (mut ctx, mut h) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: both out-pointers are live locals.
        let rc = unsafe { cuframes_cuda_primary_context(0, &mut ctx, &mut h) };
        if n == 0 {
            assert_eq!(rc, cuframes_core::ErrorCode::Cuda as i32);
            assert!(h.is_null());
        } else {
            assert_eq!(rc, 0);
            assert!(!ctx.is_null());
        }
        // SAFETY: `h` is NULL or the handle just returned, released once.
        unsafe { cuframes_cuda_context_release(h) };
    }
}
