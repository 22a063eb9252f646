//! Plain device memory (`cuMemAlloc`) that a process owns alone: a subscriber's own copy of
//! a frame in COPY mode, scratch space for tests.
//!
//! Dropping one calls `cuMemFree`, which waits for the work on the whole device (seen on the
//! H200: it completed another stream's pending event). Keep buffers for the life of a
//! subscription rather than freeing them per frame.

use std::sync::Arc;

use cudarc::driver::sys;

use super::device::CudaDevice;
use super::driver::{call, release, release_failed};
use crate::error::{Error, Result};

/// Plain device memory of `cuMemAlloc` on one device, freed on drop.
pub struct DeviceBuffer {
    dev: Arc<CudaDevice>,
    ptr: sys::CUdeviceptr,
    size: usize,
}

// SAFETY: a device address and the device it lives on, usable from any thread.
unsafe impl Send for DeviceBuffer {}
// SAFETY: no interior mutability: `&DeviceBuffer` only reads the address and size.
unsafe impl Sync for DeviceBuffer {}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("device_ptr", &format_args!("{:#x}", self.ptr))
            .field("size", &self.size)
            .finish()
    }
}

impl DeviceBuffer {
    /// `size` bytes of uninitialised device memory on `dev`.
    pub fn new(dev: &Arc<CudaDevice>, size: usize) -> Result<DeviceBuffer> {
        if size == 0 {
            return Err(Error::invalid("device buffer of 0 bytes"));
        }
        let _current = dev.push_current()?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: `ptr` is a valid out-pointer; the device's context is current.
        call("cuMemAlloc", || unsafe {
            sys::cuMemAlloc_v2(&mut ptr, size)
        })?;
        Ok(DeviceBuffer {
            dev: Arc::clone(dev),
            ptr,
            size,
        })
    }

    /// The device address of the first byte.
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }

    /// Size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The device the memory is on.
    pub fn device(&self) -> &Arc<CudaDevice> {
        &self.dev
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        let current = self.dev.push_current();
        if let Err(e) = &current {
            release_failed(e);
        }
        let ptr = self.ptr;
        // SAFETY: `ptr` came from cuMemAlloc in `new` and is freed once, here.
        release("cuMemFree", || unsafe { sys::cuMemFree_v2(ptr) });
        drop(current);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_buffer_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<DeviceBuffer>();
    }
}
