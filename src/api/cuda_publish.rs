//! Publishing frames of a CUDA ring from the GPU in the C API: a slot written by work on a
//! CUDA stream (waiting for the stream, or published by the stream itself), or planes in
//! device memory copied into the next slot (now, or queued on a stream).

use std::ffi::{c_int, c_void};

use cuframes_core::cuda::CudaStream;
use cuframes_core::{Error, Result};

use super::frame_ring::{pts, to_core_slot, CSlot};
use super::publisher::CPublisher;
use crate::ffi::args::input;
use crate::ffi::status;

/// CUDA rings: publish a slot written by GPU work on `cuda_stream` (a CUstream; NULL = the
/// legacy default stream). The stream is synchronised first (§5).
///
/// # Safety
/// The C contract (crate docs): `p` is NULL or a live publisher handle; `slot` is NULL or
/// points to an initialised `CSlot`; `cuda_stream` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_publish_after_stream(
    p: *mut CPublisher,
    slot: *const CSlot,
    cuda_stream: *mut c_void,
    pts_ns: i64,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `p` is NULL or a live publisher handle, `slot` NULL or a
        // valid cuframes_slot_t.
        let (p, slot) = unsafe { (input(p, "publisher")?, input(slot, "slot")?) };
        // SAFETY: the C contract: `cuda_stream` is NULL or a live CUstream of the current
        // context (cuframes.h); NULL is the ring's own context's legacy stream.
        let stream = unsafe { CudaStream::from_raw_or_none(cuda_stream) };
        p.0.publish_after_stream(to_core_slot(slot)?, stream, pts(pts_ns))
            .map(|_| ())
    })
}

/// CUDA rings: publish a slot written by GPU work on `cuda_stream` without waiting for it: the
/// frame becomes visible when the stream's work so far has completed, and this returns at once
/// (cuframes.h).
///
/// # Safety
/// The C contract (crate docs): `p` is NULL or a live publisher handle; `slot` is NULL or
/// points to an initialised `CSlot`; `cuda_stream` is NULL, `CU_STREAM_LEGACY` or a live
/// CUstream of the current context.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_publish_on_stream(
    p: *mut CPublisher,
    slot: *const CSlot,
    cuda_stream: *mut c_void,
    pts_ns: i64,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `p` is NULL or a live publisher handle, `slot` NULL or a
        // valid cuframes_slot_t.
        let (p, slot) = unsafe { (input(p, "publisher")?, input(slot, "slot")?) };
        // SAFETY: the C contract: `cuda_stream` is NULL/CU_STREAM_LEGACY with a context of
        // the ring's device current, or a live CUstream of the current context (cuframes.h).
        let stream = unsafe { CudaStream::from_raw(cuda_stream) };
        p.0.publish_on_stream(to_core_slot(slot)?, stream, pts(pts_ns))
            .map(|_| ())
    })
}

/// CUDA rings: `cuframes_publisher_publish_device` without waiting: the copy and the
/// publication are queued on `cuda_stream` (cuframes.h).
///
/// # Safety
/// As for `cuframes_publisher_publish_device`, with the source planes unchanged until the
/// stream has run the copy.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_publish_device_async(
    p: *mut CPublisher,
    planes: *const u64,
    pitches: *const usize,
    plane_count: c_int,
    cuda_stream: *mut c_void,
    pts_ns: i64,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `p` is NULL or a live publisher handle.
        let p = unsafe { input(p, "publisher") }?;
        // SAFETY: the C contract: arrays of `plane_count` elements or NULL (checked there).
        let (planes, pitches) = unsafe { plane_arrays(planes, pitches, plane_count) }?;
        // SAFETY: the C contract: `cuda_stream` is NULL (the ring's own stream) or a live
        // CUstream of the current context; each plane device memory of its rows at its
        // pitch, unchanged until the stream has run the copy (cuframes.h).
        unsafe {
            let stream = CudaStream::from_raw_or_none(cuda_stream);
            p.0.publish_device_planes_on_stream(planes, pitches, stream, pts(pts_ns))
        }
        .map(|_| ())
    })
}

/// The plane and pitch arrays of a device publish: `plane_count` (1..=3) elements each.
///
/// # Safety
/// `planes` and `pitches` are NULL or arrays of `plane_count` elements, unwritten while the
/// returned slices live.
unsafe fn plane_arrays<'a>(
    planes: *const u64,
    pitches: *const usize,
    plane_count: c_int,
) -> Result<(&'a [u64], &'a [usize])> {
    let n = usize::try_from(plane_count).map_err(|_| Error::invalid("plane_count"))?;
    if planes.is_null() || pitches.is_null() || n == 0 || n > 3 {
        return Err(Error::invalid(
            "planes/pitches NULL or plane_count not in 1..3",
        ));
    }
    // SAFETY: the caller's contract: arrays of `plane_count` = n elements (checked non-NULL
    // above), unwritten while the slices live.
    Ok(unsafe {
        (
            std::slice::from_raw_parts(planes, n),
            std::slice::from_raw_parts(pitches, n),
        )
    })
}

/// CUDA rings: copy a frame from device memory (one CUdeviceptr and pitch per plane),
/// ordered after earlier work on `cuda_stream` (NULL: the library's stream), and publish it.
///
/// # Safety
/// The C contract (crate docs): `p` is NULL or a live publisher handle; `planes` is NULL or
/// holds `plane_count` elements; `pitches` is NULL or holds `plane_count` elements;
/// `cuda_stream` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_publish_device(
    p: *mut CPublisher,
    planes: *const u64,
    pitches: *const usize,
    plane_count: c_int,
    cuda_stream: *mut c_void,
    pts_ns: i64,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `p` is NULL or a live publisher handle.
        let p = unsafe { input(p, "publisher") }?;
        // SAFETY: the C contract: arrays of `plane_count` elements or NULL (checked there).
        let (planes, pitches) = unsafe { plane_arrays(planes, pitches, plane_count) }?;
        // SAFETY: the C contract: `cuda_stream` is NULL (the library's stream) or a live
        // CUstream of the current context, each plane device memory of its rows at its pitch
        // (cuframes.h).
        unsafe {
            let stream = CudaStream::from_raw_or_none(cuda_stream);
            p.0.publish_device_planes(planes, pitches, stream, pts(pts_ns))
        }
        .map(|_| ())
    })
}
