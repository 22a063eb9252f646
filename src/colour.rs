//! `cuframes_colour_t`: a stream's colour description and sample aspect ratio for C callers
//! (the frame meta extension, docs/protocol.md), and the subscriber's queries of what the
//! publisher announced (colour, and the local ordinal of the ring's GPU).

use std::ffi::c_int;

use cuframes_core::colour::ColourInfo;
use cuframes_core::{Error, ErrorCode};

use crate::convert::{input, out};
use crate::ffi::{status, value};
use crate::subscriber::CSubscriber;

/// Mirrors `cuframes_colour_t` in cuframes.h.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CColour {
    pub present: u32,
    pub sar_num: u32,
    pub sar_den: u32,
    pub range: u8,
    pub primaries: u8,
    pub transfer: u8,
    pub matrix: u8,
    pub chroma_location: u8,
    pub reserved: [u8; 3],
}

impl CColour {
    /// The description to announce, if the caller filled one in (`present` != 0).
    pub(crate) fn to_core(self) -> Option<ColourInfo> {
        (self.present != 0).then_some(ColourInfo {
            range: self.range,
            primaries: self.primaries,
            transfer: self.transfer,
            matrix: self.matrix,
            chroma_location: self.chroma_location,
            sar: (self.sar_num, self.sar_den),
        })
    }
}

impl From<Option<ColourInfo>> for CColour {
    fn from(c: Option<ColourInfo>) -> Self {
        match c {
            None => CColour::default(),
            Some(c) => CColour {
                present: 1,
                sar_num: c.sar.0,
                sar_den: c.sar.1,
                range: c.range,
                primaries: c.primaries,
                transfer: c.transfer,
                matrix: c.matrix,
                chroma_location: c.chroma_location,
                reserved: [0; 3],
            },
        }
    }
}

/// The colour description the publisher announced for its frame ring: `present` = 0 when it
/// announced none. CUFRAMES_ERR_NOT_FOUND without a frame ring.
///
/// # Safety
/// The C contract (crate docs): `s` is NULL or a live subscriber handle; `colour` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_subscriber_colour(
    s: *const CSubscriber,
    colour: *mut CColour,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `s` is NULL or a live subscriber handle, `colour` NULL or
        // a writable cuframes_colour_t.
        let (s, colour) = unsafe { (input(s, "subscriber")?, out(colour, "colour")?) };
        let view = s.view();
        if view.layout.is_none() {
            return Err(Error::new(ErrorCode::NotFound, "no frame ring"));
        }
        *colour = view.colour.into();
        Ok(())
    })
}

/// This process's CUDA device ordinal of the ring's GPU (resolved from the UUID the publisher
/// announced), or a negative error: CUFRAMES_ERR_NOT_FOUND for a host ring or no frame ring.
///
/// # Safety
/// The C contract (crate docs): `s` is NULL or a live subscriber handle.
#[no_mangle]
pub unsafe extern "C" fn cuframes_subscriber_cuda_device(s: *const CSubscriber) -> c_int {
    value(|| {
        // SAFETY: the C contract: `s` is NULL or a live subscriber handle.
        let s = unsafe { input(s, "subscriber")? };
        s.view()
            .cuda_device
            .ok_or_else(|| Error::new(ErrorCode::NotFound, "the frame ring is not in CUDA memory"))
    })
}
