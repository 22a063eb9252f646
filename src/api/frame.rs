//! `cuframes_frame_t`: one frame a subscriber handed out, and its queries (where its planes
//! are, its layout, colour and GPU) until `cuframes_frame_release`. After the publisher
//! replaced its ring (a size or format change), the frames of the new ring have another
//! layout than the ones before; each frame says which it has.

use std::ffi::{c_int, c_void};

use cuframes_core::subscriber::Frame;
use cuframes_core::{Error, ErrorCode};

use super::types::{CColour, CFrameLayout};
use crate::ffi::args::{input, out};
use crate::ffi::{guard, status, value};

/// Opaque `cuframes_frame_t`: read only by its queries (any threads at once), consumed once by
/// `cuframes_frame_release`.
pub struct CFrame(Frame);

// What cuframes.h promises: a frame handle's queries may run on several threads at once, and
// it may be released on any thread.
const _: fn() = || {
    fn shared_across_threads<T: Send + Sync>() {}
    shared_across_threads::<CFrame>();
};

impl CFrame {
    /// A frame handle for `frame`, as `cuframes_subscriber_next_frame` hands it out.
    pub(crate) fn new(frame: Frame) -> CFrame {
        CFrame(frame)
    }
}

/// Mirrors `cuframes_frame_info_t`.
#[repr(C)]
pub struct CFrameInfo {
    /// Seq of the frame.
    pub seq: u64,
    /// Presentation time in ns.
    pub pts_ns: i64,
    /// Where `data` points: `CUFRAMES_MEMORY_*` (host memory or a CUdeviceptr).
    pub memory_kind: u32,
    /// 1: the ring's own memory, valid until the frame is released.
    pub zero_copy: u32,
    /// Planes in use: 1..3.
    pub plane_count: u32,
    /// Bytes from one row of each plane to the next.
    pub pitch: [u32; 3],
    /// Address of each plane.
    pub data: [u64; 3],
}

/// Where a frame's planes are and what it is.
///
/// # Safety
/// The C contract (crate docs): `f` is NULL or a live frame handle; `info` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_frame_info(f: *const CFrame, info: *mut CFrameInfo) -> c_int {
    status(|| {
        // SAFETY: the C contract: `f` is NULL or a live (unreleased) frame handle.
        let f = &unsafe { input(f, "frame") }?.0;
        let base = f.address();
        let mut i = CFrameInfo {
            seq: f.seq,
            pts_ns: f.pts_ns,
            memory_kind: f.memory_kind() as u32,
            zero_copy: f.is_zero_copy() as u32,
            plane_count: f.layout.planes().len() as u32,
            pitch: [0; 3],
            data: [0; 3],
        };
        for (k, p) in f.layout.planes().iter().enumerate() {
            i.pitch[k] = p.pitch as u32;
            i.data[k] = base + p.offset as u64;
        }
        // SAFETY: the C contract: `info` is NULL or a writable cuframes_frame_info_t.
        *unsafe { out(info, "info") }? = i;
        Ok(())
    })
}

/// Release a frame. For CUDA frames pass the stream of the last work that reads it: the ACK
/// then follows that work (R12). NULL = the reads are finished now.
///
/// # Safety
/// The C contract (crate docs): `f` is NULL or a live frame handle, released once here with no
/// other call on it in flight; `cuda_stream` is NULL or a live `CUstream` of the ring's device.
#[no_mangle]
pub unsafe extern "C" fn cuframes_frame_release(f: *mut CFrame, cuda_stream: *mut c_void) {
    if f.is_null() {
        return;
    }
    guard((), || {
        // SAFETY: the C contract: a non-NULL `f` came from Box::into_raw in
        // cuframes_subscriber_next_frame and is released once.
        let frame = unsafe { Box::from_raw(f) }.0;
        // SAFETY: the C contract: `cuda_stream` is NULL or a live CUstream of the frame's
        // device, which is release_after_stream's contract.
        unsafe { frame.release_after_stream(cuda_stream) };
    })
}

/// The plane geometry of this frame (its ring's).
///
/// # Safety
/// The C contract (crate docs): `f` is NULL or a live frame handle; `layout` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_frame_layout(
    f: *const CFrame,
    layout: *mut CFrameLayout,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `f` is NULL or a live frame handle, `layout` NULL or a
        // writable cuframes_frame_layout_t.
        let (f, layout) = unsafe { (input(f, "frame")?, out(layout, "layout")?) };
        *layout = CFrameLayout::from(&*f.0.layout);
        Ok(())
    })
}

/// The colour description of this frame's ring (`present` = 0: none announced).
///
/// # Safety
/// The C contract (crate docs): `f` is NULL or a live frame handle; `colour` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_frame_colour(f: *const CFrame, colour: *mut CColour) -> c_int {
    status(|| {
        // SAFETY: the C contract: `f` is NULL or a live frame handle, `colour` NULL or a
        // writable cuframes_colour_t.
        let (f, colour) = unsafe { (input(f, "frame")?, out(colour, "colour")?) };
        *colour = f.0.colour.into();
        Ok(())
    })
}

/// This process's CUDA device ordinal of the GPU this frame's bytes are on, or a negative
/// error: CUFRAMES_ERR_NOT_FOUND for a frame in host memory. A frame says it itself: after a
/// ring replacement or a publisher restart the ring it came from may differ in memory kind and
/// GPU from the one the subscriber now reads.
///
/// # Safety
/// The C contract (crate docs): `f` is NULL or a live frame handle.
#[no_mangle]
pub unsafe extern "C" fn cuframes_frame_cuda_device(f: *const CFrame) -> c_int {
    value(|| {
        // SAFETY: the C contract: `f` is NULL or a live frame handle.
        let f = unsafe { input(f, "frame") }?;
        f.0.cuda_device()
            .map(|d| d.ordinal())
            .ok_or_else(|| Error::new(ErrorCode::NotFound, "the frame is in host memory"))
    })
}
