//! Pitched 2D copies and memset on a stream (`cuMemcpy2DAsync`, `cuMemsetD8Async`), and a
//! process-wide count of the copies that crossed between host and device.
//!
//! The count lets tests assert that a frame path stays on the device: [`copy_htod_2d_async`]
//! and [`copy_dtoh_2d`] increment it; device-to-device copies do not. (The 4-byte mismatch
//! count that `verify_pattern` reads back is a test-kernel result, not frame data, and is not
//! counted.)

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::driver::sys;

use super::driver::call;
use super::stream::Stream;
use crate::error::{Error, Result};

static HOST_COPIES: AtomicU64 = AtomicU64::new(0);

/// Host<->device copies made by this module since the process started.
pub fn host_copy_count() -> u64 {
    HOST_COPIES.load(Ordering::Relaxed)
}

/// Checks a pitched 2D region: `pitch >= row_bytes` and, when `len` is given (a host slice),
/// that the last row ends inside it. Returns the bytes the region spans.
pub fn check_region(
    what: &str,
    pitch: usize,
    row_bytes: usize,
    rows: usize,
    len: Option<usize>,
) -> Result<usize> {
    if row_bytes > pitch {
        return Err(Error::invalid(format!(
            "{what}: row of {row_bytes} bytes does not fit in pitch {pitch}"
        )));
    }
    if rows == 0 || row_bytes == 0 {
        return Ok(0);
    }
    let span = (rows - 1)
        .checked_mul(pitch)
        .and_then(|v| v.checked_add(row_bytes))
        .ok_or_else(|| Error::invalid(format!("{what}: {rows} rows of pitch {pitch} overflow")))?;
    if let Some(len) = len {
        if span > len {
            return Err(Error::invalid(format!(
                "{what}: {rows} rows of {row_bytes} bytes at pitch {pitch} need {span} bytes, \
                 the host buffer has {len}"
            )));
        }
    }
    Ok(span)
}

fn memcpy2d(row_bytes: usize, rows: usize) -> sys::CUDA_MEMCPY2D {
    sys::CUDA_MEMCPY2D {
        srcXInBytes: 0,
        srcY: 0,
        srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
        srcHost: std::ptr::null(),
        srcDevice: 0,
        srcArray: std::ptr::null_mut(),
        srcPitch: 0,
        dstXInBytes: 0,
        dstY: 0,
        dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
        dstHost: std::ptr::null_mut(),
        dstDevice: 0,
        dstArray: std::ptr::null_mut(),
        dstPitch: 0,
        WidthInBytes: row_bytes,
        Height: rows,
    }
}

/// # Safety
/// `p` describes regions valid for the copy (see the public functions' contracts) and
/// `stream` is live.
unsafe fn launch_copy(p: &sys::CUDA_MEMCPY2D, stream: &Stream) -> Result<()> {
    let _current = stream.bind()?;
    let raw = stream.cu();
    // SAFETY: the caller's contract: the regions `p` names are valid for the copy, and the
    // stream is live; `p` itself outlives the call (the driver reads it before returning).
    call("cuMemcpy2DAsync", || unsafe {
        sys::cuMemcpy2DAsync_v2(p, raw)
    })
}

/// Device-to-device copy of `rows` rows of `row_bytes` bytes, queued on `stream`.
///
/// # Safety
/// `dst` and `src` must be device addresses, addressable from the stream's context, of
/// regions of at least `(rows - 1) * pitch + row_bytes` bytes (with their own pitches) that
/// stay allocated until the copy has completed on `stream`. `dst` must not be host memory
/// that Rust code may access meanwhile (memory registered or mapped for the device is
/// addressable as device memory under unified addressing). `stream` must be live.
#[allow(clippy::too_many_arguments)]
pub unsafe fn copy_2d_async(
    dst: u64,
    dst_pitch: usize,
    src: u64,
    src_pitch: usize,
    row_bytes: usize,
    rows: usize,
    stream: &Stream,
) -> Result<()> {
    check_region(
        "copy_2d_async destination",
        dst_pitch,
        row_bytes,
        rows,
        None,
    )?;
    check_region("copy_2d_async source", src_pitch, row_bytes, rows, None)?;
    if rows == 0 || row_bytes == 0 {
        return Ok(());
    }
    let mut p = memcpy2d(row_bytes, rows);
    p.srcDevice = src;
    p.srcPitch = src_pitch;
    p.dstDevice = dst;
    p.dstPitch = dst_pitch;
    // SAFETY: this function's contract, and the regions were bounds-checked against the
    // pitches above.
    unsafe { launch_copy(&p, stream) }
}

/// Is `ptr` page-locked host memory the driver knows (cuMemHostAlloc / cuMemHostRegister)?
fn is_page_locked(ptr: *const u8) -> bool {
    let mut memtype: u32 = 0;
    // SAFETY: MEMORY_TYPE is written as a 32-bit value into `memtype`; the driver only looks
    // the address up, it does not access the memory.
    call("cuPointerGetAttribute", || unsafe {
        sys::cuPointerGetAttribute(
            &mut memtype as *mut u32 as *mut c_void,
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            ptr as sys::CUdeviceptr,
        )
    })
    .is_ok()
}

/// Host-to-device copy queued on `stream`. `src` may be reused as soon as this returns: for
/// pageable memory the driver has staged it by then; page-locked memory (which the driver
/// would read later, after the borrow ended) is waited for with a stream synchronize.
/// Counts one host copy.
///
/// # Safety
/// As for [`copy_2d_async`]'s `dst`: a device address, addressable from the stream's
/// context, of at least `(rows - 1) * dst_pitch + row_bytes` bytes that stay allocated until
/// the copy has completed, and not host memory Rust code may access meanwhile. `stream` must
/// be live.
#[allow(clippy::too_many_arguments)]
pub unsafe fn copy_htod_2d_async(
    dst: u64,
    dst_pitch: usize,
    src: &[u8],
    src_pitch: usize,
    row_bytes: usize,
    rows: usize,
    stream: &Stream,
) -> Result<()> {
    check_region(
        "copy_htod_2d_async destination",
        dst_pitch,
        row_bytes,
        rows,
        None,
    )?;
    check_region(
        "copy_htod_2d_async source",
        src_pitch,
        row_bytes,
        rows,
        Some(src.len()),
    )?;
    if rows == 0 || row_bytes == 0 {
        return Ok(());
    }
    let mut p = memcpy2d(row_bytes, rows);
    p.srcMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_HOST;
    p.srcHost = src.as_ptr() as *const c_void;
    p.srcPitch = src_pitch;
    p.dstDevice = dst;
    p.dstPitch = dst_pitch;
    let _current = stream.bind()?;
    // SAFETY: this function's contract for `dst`; `src` was bounds-checked above and is
    // read before this returns (staged, or waited for below).
    unsafe { launch_copy(&p, stream) }?;
    HOST_COPIES.fetch_add(1, Ordering::Relaxed);
    if is_page_locked(src.as_ptr()) {
        stream.synchronize()?;
    }
    Ok(())
}

/// Device-to-host copy on `stream`; returns when the bytes are in `dst` (the stream is
/// synchronised). Counts one host copy.
///
/// # Safety
/// `src` must be a device address, addressable from the stream's context, of at least
/// `(rows - 1) * src_pitch + row_bytes` bytes that stay allocated until this returns.
/// `stream` must be live.
#[allow(clippy::too_many_arguments)]
pub unsafe fn copy_dtoh_2d(
    dst: &mut [u8],
    dst_pitch: usize,
    src: u64,
    src_pitch: usize,
    row_bytes: usize,
    rows: usize,
    stream: &Stream,
) -> Result<()> {
    check_region(
        "copy_dtoh_2d destination",
        dst_pitch,
        row_bytes,
        rows,
        Some(dst.len()),
    )?;
    check_region("copy_dtoh_2d source", src_pitch, row_bytes, rows, None)?;
    if rows == 0 || row_bytes == 0 {
        return Ok(());
    }
    let mut p = memcpy2d(row_bytes, rows);
    p.srcDevice = src;
    p.srcPitch = src_pitch;
    p.dstMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_HOST;
    p.dstHost = dst.as_mut_ptr() as *mut c_void;
    p.dstPitch = dst_pitch;
    // SAFETY: this function's contract for `src`; `dst` was bounds-checked above and stays
    // borrowed until the synchronize below has waited for the copy.
    unsafe { launch_copy(&p, stream) }?;
    HOST_COPIES.fetch_add(1, Ordering::Relaxed);
    stream.synchronize()
}

/// Sets `bytes` bytes at `dst` to `value`, queued on `stream`.
///
/// # Safety
/// `dst` must be a device address, addressable from the stream's context, of at least
/// `bytes` bytes that stay allocated until the memset has completed, and not host memory Rust
/// code may access meanwhile. `stream` must be live.
pub unsafe fn memset_d8_async(dst: u64, value: u8, bytes: usize, stream: &Stream) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    let _current = stream.bind()?;
    let raw = stream.cu();
    // SAFETY: this function's contract for `dst` and `stream`.
    call("cuMemsetD8Async", || unsafe {
        sys::cuMemsetD8Async(dst, value, bytes, raw)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::driver_available;
    use crate::error::ErrorCode;

    #[test]
    fn regions_are_bounds_checked() {
        assert_eq!(
            check_region("t", 256, 200, 10, Some(9 * 256 + 200)).unwrap(),
            9 * 256 + 200
        );
        assert_eq!(
            check_region("t", 256, 200, 10, Some(9 * 256 + 199))
                .unwrap_err()
                .code(),
            ErrorCode::InvalidArg
        );
        assert_eq!(
            check_region("t", 100, 200, 1, None).unwrap_err().code(),
            ErrorCode::InvalidArg
        );
        assert_eq!(check_region("t", 100, 0, 0, Some(0)).unwrap(), 0);
        assert!(check_region("t", usize::MAX, 1, 3, None).is_err());
    }

    #[test]
    fn host_slices_are_checked_before_the_driver_is_touched() {
        // SAFETY: null is the legacy default stream, and every copy below is refused before
        // the driver sees the made-up addresses.
        unsafe {
            let s = Stream::from_raw(std::ptr::null_mut());
            let src = vec![0u8; 1000];
            let before = host_copy_count();
            let e = copy_htod_2d_async(0x1000, 256, &src, 256, 256, 4, &s).unwrap_err();
            assert_eq!(e.code(), ErrorCode::InvalidArg, "{e}");
            let mut dst = vec![0u8; 100];
            let e = copy_dtoh_2d(&mut dst, 64, 0x1000, 64, 64, 2, &s).unwrap_err();
            assert_eq!(e.code(), ErrorCode::InvalidArg, "{e}");
            let e = copy_2d_async(0x1000, 16, 0x2000, 64, 32, 2, &s).unwrap_err();
            assert_eq!(e.code(), ErrorCode::InvalidArg, "{e}");
            assert_eq!(host_copy_count(), before, "refused copies are not counted");
        }
    }

    #[test]
    fn copies_fail_cleanly_without_a_driver() {
        if driver_available().is_ok() {
            return;
        }
        // SAFETY: without a driver no call reaches it, so the made-up addresses are never
        // used.
        unsafe {
            let s = Stream::from_raw(std::ptr::null_mut());
            let src = vec![0u8; 1024];
            let before = host_copy_count();
            let e = copy_htod_2d_async(0x1000, 256, &src, 256, 256, 4, &s).unwrap_err();
            assert_eq!(e.code(), ErrorCode::Cuda);
            let mut dst = vec![0u8; 1024];
            assert_eq!(
                copy_dtoh_2d(&mut dst, 256, 0x1000, 256, 256, 4, &s)
                    .unwrap_err()
                    .code(),
                ErrorCode::Cuda
            );
            assert_eq!(
                copy_2d_async(0x1000, 256, 0x2000, 256, 256, 4, &s)
                    .unwrap_err()
                    .code(),
                ErrorCode::Cuda
            );
            assert_eq!(
                memset_d8_async(0x1000, 7, 64, &s).unwrap_err().code(),
                ErrorCode::Cuda
            );
            assert_eq!(host_copy_count(), before, "failed copies are not counted");
        }
    }
}
