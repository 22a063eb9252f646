//! Codec helpers of the C API (§10.3, R30): converting a producer's extradata to the packet
//! ring's form and reading the picture size from it. The parsing is in
//! `cuframes_core::codec`; this file only checks pointers and copies results out.

use std::ffi::c_int;

use cuframes_core::codec::{self, Codec};

use crate::ffi::args::{bytes, copy_out, out};
use crate::ffi::status;

/// Mirrors `cuframes_codec_video_info_t`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct CCodecVideoInfo {
    /// Displayed width (cropping applied; AV1: the maximum frame width).
    pub width: u32,
    /// Displayed height (cropping applied; AV1: the maximum frame height).
    pub height: u32,
    /// H.264 profile_idc, HEVC general_profile_idc, AV1 seq_profile.
    pub profile: i32,
    /// H.264 level_idc, HEVC general_level_idc, AV1 `seq_level_idx[0]`.
    pub level: i32,
    /// 0 = monochrome, 1 = 4:2:0, 2 = 4:2:2, 3 = 4:4:4.
    pub chroma_format: u32,
    /// Luma bit depth.
    pub bit_depth: u32,
}

/// Convert extradata (avcC, hvcC, av1C, Annex B or OBUs) into the ring's form.
///
/// # Safety
/// The C contract (crate docs): `data` is NULL or readable for `size` bytes; `buf` is NULL or
/// writable for `cap` bytes; `out_size` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_codec_ring_extradata(
    codec_id: u32,
    data: *const u8,
    size: usize,
    buf: *mut u8,
    cap: usize,
    out_size: *mut usize,
) -> c_int {
    status(|| {
        let codec = Codec::from_id(codec_id)?;
        // SAFETY: the C contract: `data` is readable for `size` bytes during the call.
        let input = unsafe { bytes(data, size, "extradata") }?;
        let v = codec::ring_extradata(codec, input)?;
        // SAFETY: the C contract: `out_size` is NULL or writable, `buf` NULL or writable
        // for `cap` bytes; `v` is ours, so they do not overlap.
        unsafe { copy_out(&v, buf, cap, out_size) }
    })
}

/// The in-band parameter sets (or AV1 sequence header) of a packet, in the ring's form.
///
/// # Safety
/// The C contract (crate docs): `data` is NULL or readable for `size` bytes; `buf` is NULL or
/// writable for `cap` bytes; `out_size` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_codec_keyframe_extradata(
    codec_id: u32,
    data: *const u8,
    size: usize,
    buf: *mut u8,
    cap: usize,
    out_size: *mut usize,
) -> c_int {
    status(|| {
        let codec = Codec::from_id(codec_id)?;
        // SAFETY: the C contract: `data` is readable for `size` bytes during the call.
        let packet = unsafe { bytes(data, size, "packet") }?;
        let v = codec::keyframe_extradata(codec, packet)?;
        // SAFETY: as in cuframes_codec_ring_extradata.
        unsafe { copy_out(&v, buf, cap, out_size) }
    })
}

/// Picture size and format from ring-form extradata.
///
/// # Safety
/// The C contract (crate docs): `data` is NULL or readable for `size` bytes; `info` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_codec_video_info(
    codec_id: u32,
    data: *const u8,
    size: usize,
    info: *mut CCodecVideoInfo,
) -> c_int {
    status(|| {
        let codec = Codec::from_id(codec_id)?;
        // SAFETY: the C contract: `data` is readable for `size` bytes during the call.
        let i = codec::video_info(codec, unsafe { bytes(data, size, "extradata") }?)?;
        // SAFETY: the C contract: `info` is NULL or a writable cuframes_codec_video_info_t.
        *unsafe { out(info, "info") }? = CCodecVideoInfo {
            width: i.width,
            height: i.height,
            profile: i.profile,
            level: i.level,
            chroma_format: i.chroma_format,
            bit_depth: i.bit_depth,
        };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::library::cuframes_last_error;
    use cuframes_core::ErrorCode;
    use std::ffi::CStr;

    const AVCC: [u8; 16] = [
        1, 0x4D, 0x40, 0x0D, 0xFF, 0xE1, 0, 3, 0x67, 0x4D, 0x40, 1, 0, 2, 0x68, 0xEE,
    ];

    #[test]
    fn ring_extradata_through_the_c_abi() {
        let mut size = 0usize;
        // SAFETY: every pointer is NULL (where the function allows it) or a live local
        // of the size passed with it.
        let rc = unsafe {
            cuframes_codec_ring_extradata(
                27,
                AVCC.as_ptr(),
                AVCC.len(),
                std::ptr::null_mut(),
                0,
                &mut size,
            )
        };
        assert_eq!(rc, 0);
        assert_eq!(size, 13);
        let mut buf = [0u8; 13];
        // SAFETY: every pointer is NULL (where the function allows it) or a live local
        // of the size passed with it.
        let rc = unsafe {
            cuframes_codec_ring_extradata(
                27,
                AVCC.as_ptr(),
                AVCC.len(),
                buf.as_mut_ptr(),
                4,
                &mut size,
            )
        };
        assert_eq!(rc, ErrorCode::NoMemory as i32);
        // SAFETY: every pointer is NULL (where the function allows it) or a live local
        // of the size passed with it.
        let rc = unsafe {
            cuframes_codec_ring_extradata(
                27,
                AVCC.as_ptr(),
                AVCC.len(),
                buf.as_mut_ptr(),
                13,
                &mut size,
            )
        };
        assert_eq!(rc, 0);
        assert_eq!(&buf[..5], &[0, 0, 0, 1, 0x67]);
    }

    #[test]
    fn errors_are_codes_with_messages() {
        let mut size = 0usize;
        // SAFETY: every pointer is NULL (where the function allows it) or a live local
        // of the size passed with it.
        let rc = unsafe {
            cuframes_codec_ring_extradata(99, AVCC.as_ptr(), 3, std::ptr::null_mut(), 0, &mut size)
        };
        assert_eq!(rc, ErrorCode::Format as i32);
        // SAFETY: cuframes_last_error returns a NUL-terminated string of this thread,
        // valid until its next failing call.
        let msg = unsafe { CStr::from_ptr(cuframes_last_error()) };
        assert!(msg.to_str().unwrap().contains("codec id 99"));
        // SAFETY: every pointer is NULL (where the function allows it) or a live local
        // of the size passed with it.
        let rc = unsafe {
            cuframes_codec_ring_extradata(
                27,
                std::ptr::null(),
                3,
                std::ptr::null_mut(),
                0,
                &mut size,
            )
        };
        assert_eq!(rc, ErrorCode::InvalidArg as i32);
        let mut info = CCodecVideoInfo::default();
        // SAFETY: every pointer is NULL (where the function allows it) or a live local
        // of the size passed with it.
        let rc = unsafe { cuframes_codec_video_info(27, AVCC.as_ptr(), AVCC.len(), &mut info) };
        assert_ne!(rc, 0);
        // SAFETY: every pointer is NULL (where the function allows it) or a live local
        // of the size passed with it.
        let rc = unsafe { cuframes_codec_video_info(27, AVCC.as_ptr(), 0, std::ptr::null_mut()) };
        assert_ne!(rc, 0);
        // SAFETY: every pointer is NULL (where the function allows it) or a live local
        // of the size passed with it.
        let rc = unsafe {
            cuframes_codec_keyframe_extradata(
                173,
                [0u8, 0, 1].as_ptr(),
                3,
                std::ptr::null_mut(),
                0,
                &mut size,
            )
        };
        assert_eq!((rc, size), (0, 0));
    }
}
