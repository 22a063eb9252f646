//! The functions of the C API that take no handle: the protocol version, the text of an error
//! code and the calling thread's last error message.

use std::ffi::{c_char, CStr};

use cuframes_core::wire::PROTOCOL_VERSION;
use cuframes_core::ErrorCode;

use crate::ffi::guard;
use crate::ffi::last_error::last_error_ptr;

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

/// The message of the last error on the calling thread ("" if none). Valid until the next
/// failing call on this thread.
#[no_mangle]
pub extern "C" fn cuframes_last_error() -> *const c_char {
    last_error_ptr()
}

fn strerror_cstr(code: ErrorCode) -> &'static CStr {
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
mod tests {
    use super::*;

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
