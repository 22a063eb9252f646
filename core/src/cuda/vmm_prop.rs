//! The properties of the VMM memory cuframes shares (pinned device memory, exportable as a
//! POSIX file descriptor, protocol v4 §3.7), in their own file because both the device (its
//! granularity, [`CudaDevice::vmm_granularity`](super::CudaDevice::vmm_granularity)) and the
//! allocations of [`vmm`](super::vmm) are built on them.

use cudarc::driver::sys;

use super::driver::call;
use crate::error::{Error, ErrorCode, Result};

/// The shareable handle type of every allocation: a POSIX file descriptor.
pub(crate) const POSIX_FD: sys::CUmemAllocationHandleType =
    sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;

/// The memory of `device`, as a VMM location.
pub(crate) fn device_location(device: sys::CUdevice) -> sys::CUmemLocation {
    sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: device,
    }
}

/// Pinned memory on `device`, exportable as a POSIX file descriptor.
pub(crate) fn allocation_prop(device: sys::CUdevice) -> sys::CUmemAllocationProp {
    sys::CUmemAllocationProp {
        type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: POSIX_FD,
        location: device_location(device),
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
            compressionType: 0,
            gpuDirectRDMACapable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    }
}

/// `cuMemGetAllocationGranularity(MINIMUM)` for [`allocation_prop`], with a context of
/// `device` current (use [`CudaDevice::vmm_granularity`](super::CudaDevice::vmm_granularity),
/// which caches it).
pub(crate) fn query_granularity(device: sys::CUdevice) -> Result<usize> {
    let prop = allocation_prop(device);
    let mut granularity = 0usize;
    // SAFETY: valid out-pointer and property struct; the caller made a context current.
    call("cuMemGetAllocationGranularity", || unsafe {
        sys::cuMemGetAllocationGranularity(
            &mut granularity,
            &prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
        )
    })?;
    if granularity == 0 || !granularity.is_power_of_two() {
        return Err(Error::new(
            ErrorCode::Cuda,
            format!("cuMemGetAllocationGranularity returned {granularity}"),
        ));
    }
    Ok(granularity)
}
