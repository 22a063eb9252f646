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
