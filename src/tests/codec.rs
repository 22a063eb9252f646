//! The codec helpers through the C ABI: sizes asked for, buffers too small, and errors as codes
//! with messages.

use std::ffi::CStr;

use cuframes_core::ErrorCode;

use crate::api::codec::*;
use crate::api::library::cuframes_last_error;

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
        cuframes_codec_ring_extradata(27, std::ptr::null(), 3, std::ptr::null_mut(), 0, &mut size)
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
