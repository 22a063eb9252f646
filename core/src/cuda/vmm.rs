//! CUDA VMM memory shared between processes as POSIX file descriptors (protocol v4 §3.7).
//!
//! The publisher creates one [`VmmAllocation`] per slot (`cuMemCreate` with
//! `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`, a reserved address range, mapped read-write) and
//! hands [`VmmAllocation::export_fd`] to each subscriber over the socket (SCM_RIGHTS); the
//! subscriber maps it with [`VmmImport::import`], which closes the fd once the driver holds its
//! own reference (§3.7 step 4). Sizes are multiples of the device's VMM granularity (the
//! size rule, R20).

use std::ffi::c_void;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cudarc::driver::sys;

use super::device::CudaDevice;
use super::driver::{call, release, release_failed};
use super::vmm_prop::{allocation_prop, device_location, POSIX_FD};
use crate::error::{Error, Result};

static LIVE_MAPPINGS: AtomicU64 = AtomicU64::new(0);

/// VMM address ranges ([`VmmAllocation`]s and [`VmmImport`]s, mapped or being set up) that
/// this process reserved and has not freed yet. A range whose teardown failed stays counted:
/// a leak shows here (and in [`release_failures`](super::release_failures)).
pub fn live_mappings() -> u64 {
    LIVE_MAPPINGS.load(Ordering::Relaxed)
}

/// `size` rounded up to a multiple of `granularity` (R20); 0 and overflow are refused.
pub fn round_up_to_granularity(size: usize, granularity: usize) -> Result<usize> {
    if size == 0 {
        return Err(Error::invalid("VMM allocation of 0 bytes"));
    }
    if granularity == 0 {
        return Err(Error::invalid("VMM granularity of 0"));
    }
    size.checked_next_multiple_of(granularity).ok_or_else(|| {
        Error::invalid(format!(
            "VMM size {size} overflows when rounded to {granularity}"
        ))
    })
}

/// The size a subscriber is told to map (VMM_FDS `frame_size_bytes`) must be a non-zero
/// multiple of its device's granularity; anything else is a protocol error.
pub fn check_import_size(size: usize, granularity: usize) -> Result<()> {
    if size == 0 {
        return Err(Error::protocol("VMM_FDS frame_size_bytes is 0"));
    }
    if granularity == 0 || size % granularity != 0 {
        return Err(Error::protocol(format!(
            "VMM_FDS frame_size_bytes {size} is not a multiple of the device's VMM \
             granularity {granularity}"
        )));
    }
    Ok(())
}

/// A physical allocation handle mapped at a reserved address range, torn down in reverse
/// order (unmap, free the address range, release the handle) by `Drop`, including after a
/// failure half way through setting it up.
struct Mapping {
    dev: Arc<CudaDevice>,
    handle: Option<sys::CUmemGenericAllocationHandle>,
    ptr: sys::CUdeviceptr,
    size: usize,
    reserved: bool,
    mapped: bool,
}

impl Mapping {
    fn new(dev: &Arc<CudaDevice>, size: usize) -> Mapping {
        Mapping {
            dev: Arc::clone(dev),
            handle: None,
            ptr: 0,
            size,
            reserved: false,
            mapped: false,
        }
    }

    /// Reserve an address range, map the handle there and allow read-write access.
    fn map(&mut self, alignment: usize) -> Result<()> {
        let handle = self.handle.expect("a handle before mapping");
        let size = self.size;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: `ptr` is a valid out-pointer; the caller made the device's context current.
        call("cuMemAddressReserve", || unsafe {
            sys::cuMemAddressReserve(&mut ptr, size, alignment, 0, 0)
        })?;
        self.ptr = ptr;
        self.reserved = true;
        LIVE_MAPPINGS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the range was just reserved with `size` bytes and `handle` is a live
        // allocation of at least `size` bytes (created or imported with that size).
        call("cuMemMap", || unsafe {
            sys::cuMemMap(ptr, size, 0, handle, 0)
        })?;
        self.mapped = true;
        let desc = sys::CUmemAccessDesc {
            location: device_location(self.dev.cu_device()),
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: the range is mapped (above); `desc` lives across the call.
        call("cuMemSetAccess", || unsafe {
            sys::cuMemSetAccess(ptr, size, &desc, 1)
        })
    }
}

impl Drop for Mapping {
    /// Runs on a thread of ours, never inside a CUDA host function (the driver refuses these
    /// calls there with CUDA_ERROR_NOT_PERMITTED): a ring released on a stream is dropped
    /// by the subscriber's release thread (`subscriber::deferred`).
    fn drop(&mut self) {
        let current = self.dev.push_current();
        if let Err(e) = &current {
            release_failed(e);
        }
        let (ptr, size) = (self.ptr, self.size);
        if self.mapped {
            // SAFETY: `ptr..ptr + size` was mapped by `map` and nothing of ours uses it any
            // more (the frames that borrow it hold the owner of this mapping).
            release("cuMemUnmap", || unsafe { sys::cuMemUnmap(ptr, size) });
        }
        if self.reserved {
            // SAFETY: the range was reserved by `map` with this size, and is unmapped now.
            match call("cuMemAddressFree", || unsafe {
                sys::cuMemAddressFree(ptr, size)
            }) {
                Ok(()) => {
                    LIVE_MAPPINGS.fetch_sub(1, Ordering::Relaxed);
                }
                Err(e) => release_failed(&e),
            }
        }
        if let Some(handle) = self.handle.take() {
            // SAFETY: the handle came from cuMemCreate / cuMemImportFromShareableHandle and is
            // released once (taken out of the Option).
            release("cuMemRelease", || unsafe { sys::cuMemRelease(handle) });
        }
        drop(current);
    }
}

/// Device memory created by this process and shareable with others as file descriptors.
pub struct VmmAllocation {
    mapping: Mapping,
    granularity: usize,
}

// SAFETY: the fields are driver handles and addresses, usable from any thread.
unsafe impl Send for VmmAllocation {}
// SAFETY: `&VmmAllocation` only reads the handle and addresses (export_fd makes a new fd per
// call; the driver synchronises it).
unsafe impl Sync for VmmAllocation {}

impl std::fmt::Debug for VmmAllocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VmmAllocation")
            .field("device_ptr", &format_args!("{:#x}", self.mapping.ptr))
            .field("size", &self.mapping.size)
            .field("granularity", &self.granularity)
            .finish()
    }
}

impl VmmAllocation {
    /// At least `min_size` bytes (rounded up to the granularity) of pinned memory on `dev`,
    /// mapped read-write for `dev`, exportable as a POSIX fd.
    pub fn create(dev: &Arc<CudaDevice>, min_size: usize) -> Result<VmmAllocation> {
        if min_size == 0 {
            return Err(Error::invalid("VMM allocation of 0 bytes"));
        }
        let granularity = dev.vmm_granularity()?;
        let size = round_up_to_granularity(min_size, granularity)?;
        let _current = dev.push_current()?;
        let prop = allocation_prop(dev.cu_device());
        let mut mapping = Mapping::new(dev, size);
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: valid out-pointer and property struct; the device's context is current.
        call("cuMemCreate", || unsafe {
            sys::cuMemCreate(&mut handle, size, &prop, 0)
        })?;
        mapping.handle = Some(handle);
        mapping.map(granularity)?;
        Ok(VmmAllocation {
            mapping,
            granularity,
        })
    }

    /// A new file descriptor for the allocation (`cuMemExportToShareableHandle`), one per
    /// call: send it with SCM_RIGHTS and close it.
    pub fn export_fd(&self) -> Result<OwnedFd> {
        let _current = self.mapping.dev.push_current()?;
        let handle = self.mapping.handle.expect("a live allocation has a handle");
        let mut fd: std::ffi::c_int = -1;
        // SAFETY: for a POSIX fd handle the driver writes an int through the out-pointer;
        // `handle` is live (owned by this allocation).
        call("cuMemExportToShareableHandle", || unsafe {
            sys::cuMemExportToShareableHandle(
                &mut fd as *mut std::ffi::c_int as *mut c_void,
                handle,
                POSIX_FD,
                0,
            )
        })?;
        if fd < 0 {
            return Err(Error::new(
                crate::error::ErrorCode::Cuda,
                format!("cuMemExportToShareableHandle returned fd {fd}"),
            ));
        }
        // SAFETY: the driver returned a new descriptor that nobody else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// The device address the allocation is mapped at in this process.
    pub fn device_ptr(&self) -> u64 {
        self.mapping.ptr
    }

    /// Mapped size in bytes (a multiple of [`VmmAllocation::granularity`]).
    pub fn size(&self) -> usize {
        self.mapping.size
    }

    /// The granularity the size was rounded to.
    pub fn granularity(&self) -> usize {
        self.granularity
    }

    /// The device the memory is on.
    pub fn device(&self) -> &Arc<CudaDevice> {
        &self.mapping.dev
    }
}

/// Another process's allocation, imported from a file descriptor and mapped read-write here.
pub struct VmmImport {
    mapping: Mapping,
}

// SAFETY: as for VmmAllocation.
unsafe impl Send for VmmImport {}
// SAFETY: as for VmmAllocation: `&VmmImport` only reads addresses.
unsafe impl Sync for VmmImport {}

impl std::fmt::Debug for VmmImport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VmmImport")
            .field("device_ptr", &format_args!("{:#x}", self.mapping.ptr))
            .field("size", &self.mapping.size)
            .finish()
    }
}

impl VmmImport {
    /// Imports `fd` (`cuMemImportFromShareableHandle`), maps `size` bytes of it read-write on
    /// `dev` and closes the fd (the driver keeps its own reference, §3.7 step 4). `size` is
    /// VMM_FDS `frame_size_bytes` and must be a multiple of the device's granularity
    /// ([`ErrorCode::Protocol`](crate::ErrorCode::Protocol) otherwise). The fd is closed on
    /// failure too.
    pub fn import(dev: &Arc<CudaDevice>, fd: OwnedFd, size: usize) -> Result<VmmImport> {
        let granularity = dev.vmm_granularity()?;
        check_import_size(size, granularity)?;
        let _current = dev.push_current()?;
        let mut mapping = Mapping::new(dev, size);
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // The driver takes the fd itself, cast to a pointer-sized value.
        let os_handle = fd.as_raw_fd() as isize as *mut c_void;
        // SAFETY: `fd` is an open descriptor we own (closed after the call); `handle` is a
        // valid out-pointer; the device's context is current.
        call("cuMemImportFromShareableHandle", || unsafe {
            sys::cuMemImportFromShareableHandle(&mut handle, os_handle, POSIX_FD)
        })?;
        mapping.handle = Some(handle);
        mapping.map(granularity)?;
        drop(fd);
        Ok(VmmImport { mapping })
    }

    /// The device address the import is mapped at.
    pub fn device_ptr(&self) -> u64 {
        self.mapping.ptr
    }

    /// Mapped size in bytes.
    pub fn size(&self) -> usize {
        self.mapping.size
    }

    /// The device the import is mapped on.
    pub fn device(&self) -> &Arc<CudaDevice> {
        &self.mapping.dev
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn sizes_round_up_to_the_granularity() {
        let g = 2 << 20;
        assert_eq!(round_up_to_granularity(1, g).unwrap(), g);
        assert_eq!(round_up_to_granularity(g, g).unwrap(), g);
        assert_eq!(round_up_to_granularity(g + 1, g).unwrap(), 2 * g);
        assert_eq!(
            round_up_to_granularity(0, g).unwrap_err().code(),
            ErrorCode::InvalidArg
        );
        assert!(round_up_to_granularity(usize::MAX - 5, g).is_err());
    }

    #[test]
    fn import_sizes_must_be_granular() {
        let g = 2 << 20;
        check_import_size(g, g).unwrap();
        check_import_size(3 * g, g).unwrap();
        for bad in [0, 1, g - 1, g + 4096] {
            let e = check_import_size(bad, g).unwrap_err();
            assert_eq!(e.code(), ErrorCode::Protocol, "{bad}");
        }
        assert!(check_import_size(g, 0).is_err());
    }

    #[test]
    fn vmm_types_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<VmmAllocation>();
        check::<VmmImport>();
    }
}
