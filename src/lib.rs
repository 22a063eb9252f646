//! The C ABI of cuframes: a thin, documented `extern "C"` layer over `cuframes-core`.
//!
//! Every function here is declared in `include/cuframes.h`. No panic crosses this boundary:
//! each entry point runs its body under one of the wrappers of [`ffi`], which turn a panic into
//! an error code and write the last error only when the call fails.
//!
//! # Pointer contract
//!
//! The `unsafe extern "C"` functions rely on what every C caller of cuframes.h must do (the
//! `SAFETY:` comments call it "the C contract"):
//! - a pointer argument is NULL or points to a live, properly aligned, initialised object of
//!   its type, which no other thread writes during the call; an out-pointer is writable;
//! - a byte buffer `(data, size)` is readable for `size` bytes, an output buffer `(buf, cap)`
//!   writable for `cap` bytes, an array argument holds the count of elements the call says;
//!   strings are NUL-terminated;
//! - a handle (`cuframes_publisher_t`, `cuframes_subscriber_t`, `cuframes_frame_t`,
//!   `cuframes_cuda_context_t`) is NULL or came from this library and was not destroyed or
//!   released yet; it is destroyed or released once, with no other call on it in flight;
//!   otherwise calls on one handle may come from several threads at once, as the "Thread
//!   safety" section of cuframes.h says for each kind (no call takes a handle as `&mut`);
//! - a CUDA stream argument is NULL or a live `CUstream` of the right device, as each
//!   function's comment in cuframes.h says.

#![deny(clippy::undocumented_unsafe_blocks)]
#![deny(unsafe_op_in_unsafe_fn)]

use std::ffi::c_char;

use cuframes_core::wire::PROTOCOL_VERSION;
use cuframes_core::ErrorCode;

mod codec;
mod colour;
mod convert;
mod error;
mod ffi;
mod ffmpeg_frames;
mod frame_info;
mod layout;
mod packets;
mod publisher;
mod subscriber;

use ffi::guard;

pub use error::cuframes_last_error;

/// The `repr(C)` structs of the C API, public so that the conformance crate can check them
/// against `cuframes.h` field by field.
pub mod abi {
    pub use crate::codec::CCodecVideoInfo;
    pub use crate::colour::CColour;
    pub use crate::layout::CFrameLayout;
    pub use crate::packets::{CPacketInfo, CPacketRingConfig, CPacketStats};
    pub use crate::publisher::{CFrameRingConfig, CPublisherOptions, CSlot, CSubscriberInfo};
    pub use crate::subscriber::{CFrameInfo, CFrameStats, CSubscriberOptions};
}

/// The wire protocol version this library speaks (4).
#[no_mangle]
pub extern "C" fn cuframes_protocol_version() -> u32 {
    PROTOCOL_VERSION
}

/// A static, human-readable description of an error code; never NULL.
#[no_mangle]
pub extern "C" fn cuframes_strerror(code: i32) -> *const c_char {
    guard(c"unknown error".as_ptr(), || {
        match ErrorCode::from_i32(code) {
            Some(c) => strerror_cstr(c).as_ptr(),
            None => c"unknown error".as_ptr(),
        }
    })
}

fn strerror_cstr(code: ErrorCode) -> &'static std::ffi::CStr {
    match code {
        ErrorCode::Ok => c"success",
        ErrorCode::InvalidArg => c"invalid argument",
        ErrorCode::Protocol => c"protocol error (malformed message or version mismatch)",
        ErrorCode::Format => c"unsupported or mismatching frame format",
        ErrorCode::TooMany => c"too many subscribers (at most 31)",
        ErrorCode::NotFound => c"not found (no such publisher or ring)",
        ErrorCode::AlreadyExists => c"a live publisher already owns this key",
        ErrorCode::Timeout => c"timed out",
        ErrorCode::Disconnected => c"disconnected from the publisher",
        ErrorCode::PacketOverrun => c"packet ring overrun: packets were lost",
        ErrorCode::Permission => c"permission denied",
        ErrorCode::Cuda => c"CUDA error",
        ErrorCode::Io => c"I/O error",
        ErrorCode::NoMemory => c"out of memory",
    }
}

#[cfg(test)]
mod abi_success_tests;
#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn strerror_matches_the_core_descriptions() {
        for code in ErrorCode::ALL {
            // SAFETY: cuframes_strerror returns a static NUL-terminated string.
            let s = unsafe { CStr::from_ptr(cuframes_strerror(code as i32)) };
            assert_eq!(s.to_str().unwrap(), code.description());
        }
        // SAFETY: as above, for an unknown code too.
        let s = unsafe { CStr::from_ptr(cuframes_strerror(12345)) };
        assert_eq!(s.to_str().unwrap(), "unknown error");
    }

    #[test]
    fn version_is_4() {
        assert_eq!(cuframes_protocol_version(), 4);
    }
}
