//! Frame helpers for FFmpeg (`hwupload_cuframes`, the `cuframes` input device): small queries
//! the FFmpeg components need and that have no other home in the C API.
//!
//! Declared in the "Frame helpers for FFmpeg" section of `include/cuframes.h`.

use std::ffi::c_int;

use crate::guard;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_never_fail() {
        let n = cuframes_cuda_device_count();
        assert!(n >= 0);
        let _ = cuframes_host_copy_count();
    }
}
