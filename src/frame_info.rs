//! Per-frame queries of the C API: the layout and colour description of one frame. After the
//! publisher replaced its ring (a size or format change), the frames of the new ring have
//! another layout than the ones before; each frame says which it has.

use std::ffi::c_int;

use cuframes_core::{Error, ErrorCode};

use crate::colour::CColour;
use crate::convert::{input, out};
use crate::ffi::{status, value};
use crate::layout::CFrameLayout;
use crate::subscriber::CFrame;

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
        *layout = CFrameLayout::from(&*f.inner().layout);
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
        *colour = f.inner().colour.into();
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
        f.inner()
            .cuda_device()
            .map(|d| d.ordinal())
            .ok_or_else(|| Error::new(ErrorCode::NotFound, "the frame is in host memory"))
    })
}
