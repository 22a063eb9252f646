//! Page-locked host memory (`cuMemAllocHost`): the source of an asynchronous host-to-device
//! copy that returns without waiting for the stream. A copy from pageable memory would wait
//! for the stream first; one from page-locked memory is queued, so its bytes must stay
//! unchanged until the copy has run (the owner orders that, e.g. with an [`super::Event`]).

use std::sync::Arc;

use cudarc::driver::sys;

use super::device::CudaDevice;
use super::driver::{call, release, release_failed};
use crate::error::{Error, Result};

/// Page-locked host memory of one device's context, zeroed, freed on drop.
pub struct PinnedBuffer {
    dev: Arc<CudaDevice>,
    ptr: *mut u8,
    size: usize,
}

// SAFETY: host memory owned by this value alone; the device handle is thread-safe.
unsafe impl Send for PinnedBuffer {}
// SAFETY: `&PinnedBuffer` gives only shared reads (`as_slice`); writes need `&mut`.
unsafe impl Sync for PinnedBuffer {}

impl std::fmt::Debug for PinnedBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedBuffer")
            .field("ptr", &self.ptr)
            .field("size", &self.size)
            .finish()
    }
}

impl PinnedBuffer {
    /// `size` bytes of page-locked host memory in `dev`'s context, zeroed.
    pub fn new(dev: &Arc<CudaDevice>, size: usize) -> Result<PinnedBuffer> {
        if size == 0 {
            return Err(Error::invalid("page-locked buffer of 0 bytes"));
        }
        let _current = dev.push_current()?;
        let mut ptr: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out-pointer; the device's context is current.
        call("cuMemAllocHost", || unsafe {
            sys::cuMemAllocHost_v2(&mut ptr, size)
        })?;
        let ptr = ptr as *mut u8;
        // SAFETY: the driver returned `size` writable bytes at `ptr`.
        unsafe { std::ptr::write_bytes(ptr, 0, size) };
        Ok(PinnedBuffer {
            dev: Arc::clone(dev),
            ptr,
            size,
        })
    }

    /// The bytes, for reading.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `size` initialised bytes at `ptr`, owned by `self` for the borrow.
        unsafe { std::slice::from_raw_parts(self.ptr, self.size) }
    }

    /// The bytes, for writing: the caller makes sure no queued copy still reads them.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as `as_slice`, and `&mut self` makes the borrow exclusive on the host.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.size) }
    }

    /// Size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        let current = self.dev.push_current();
        if let Err(e) = &current {
            release_failed(e);
        }
        let ptr = self.ptr as *mut std::ffi::c_void;
        // SAFETY: `ptr` came from cuMemAllocHost in `new` and is freed once, here.
        release("cuMemFreeHost", || unsafe { sys::cuMemFreeHost(ptr) });
        drop(current);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_buffer_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<PinnedBuffer>();
    }
}
