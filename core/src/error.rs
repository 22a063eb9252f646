//! Error codes of protocol v4 (decision R7) and the error type every fallible call returns.
//!
//! The numeric values travel on the wire (HELLO_RESP, SUBSCRIBE_RESP, ERROR) and through the
//! C ABI, so they are defined once here and mirrored in `include/cuframes.h`; the conformance
//! crate checks that both agree. New codes are only ever appended.

use std::fmt;

/// `cuframes_error_t`: negative values are errors, 0 is success.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// Success.
    Ok = 0,
    /// An argument or option the call cannot use.
    InvalidArg = -1,
    /// A peer broke the protocol (a malformed message, a corrupt ring).
    Protocol = -2,
    /// A pixel format or codec the call does not handle.
    Format = -3,
    /// A limit is reached (subscribers of a ring, connections of a uid).
    TooMany = -4,
    /// No such publisher, object or device.
    NotFound = -5,
    /// The key is in use by a live publisher, or the object exists.
    AlreadyExists = -6,
    /// A wait ran out of time.
    Timeout = -7,
    /// The peer is gone or ended the stream.
    Disconnected = -8,
    /// The packet reader was lapped: packets were lost.
    PacketOverrun = -9,
    /// The operating system refused access.
    Permission = -10,
    /// A CUDA driver call failed (or libcuda is missing).
    Cuda = -11,
    /// Another operating-system error.
    Io = -12,
    /// Memory (host, device or SHM) could not be had.
    NoMemory = -13,
}

impl ErrorCode {
    /// Every code, in wire order (for tables and exhaustive tests).
    pub const ALL: [ErrorCode; 14] = [
        ErrorCode::Ok,
        ErrorCode::InvalidArg,
        ErrorCode::Protocol,
        ErrorCode::Format,
        ErrorCode::TooMany,
        ErrorCode::NotFound,
        ErrorCode::AlreadyExists,
        ErrorCode::Timeout,
        ErrorCode::Disconnected,
        ErrorCode::PacketOverrun,
        ErrorCode::Permission,
        ErrorCode::Cuda,
        ErrorCode::Io,
        ErrorCode::NoMemory,
    ];

    /// The code for a wire value; unknown values (a newer peer) are `None`.
    pub fn from_i32(value: i32) -> Option<ErrorCode> {
        ErrorCode::ALL.iter().copied().find(|c| *c as i32 == value)
    }

    /// A short human-readable description (what `cuframes_strerror` returns).
    pub fn description(self) -> &'static str {
        match self {
            ErrorCode::Ok => "success",
            ErrorCode::InvalidArg => "invalid argument",
            ErrorCode::Protocol => "protocol error (malformed message or version mismatch)",
            ErrorCode::Format => "unsupported or mismatching frame format",
            ErrorCode::TooMany => "too many subscribers (at most 31)",
            ErrorCode::NotFound => "not found (no such publisher or ring)",
            ErrorCode::AlreadyExists => "a live publisher already owns this key",
            ErrorCode::Timeout => "timed out",
            ErrorCode::Disconnected => "disconnected from the publisher",
            ErrorCode::PacketOverrun => "packet ring overrun: packets were lost",
            ErrorCode::Permission => "permission denied",
            ErrorCode::Cuda => "CUDA error",
            ErrorCode::Io => "I/O error",
            ErrorCode::NoMemory => "out of memory",
        }
    }

    /// The C name of the code, for logs and the operator tool.
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::Ok => "CUFRAMES_OK",
            ErrorCode::InvalidArg => "CUFRAMES_ERR_INVALID_ARG",
            ErrorCode::Protocol => "CUFRAMES_ERR_PROTOCOL",
            ErrorCode::Format => "CUFRAMES_ERR_FORMAT",
            ErrorCode::TooMany => "CUFRAMES_ERR_TOO_MANY",
            ErrorCode::NotFound => "CUFRAMES_ERR_NOT_FOUND",
            ErrorCode::AlreadyExists => "CUFRAMES_ERR_ALREADY_EXISTS",
            ErrorCode::Timeout => "CUFRAMES_ERR_TIMEOUT",
            ErrorCode::Disconnected => "CUFRAMES_ERR_DISCONNECTED",
            ErrorCode::PacketOverrun => "CUFRAMES_ERR_PACKET_OVERRUN",
            ErrorCode::Permission => "CUFRAMES_ERR_PERMISSION",
            ErrorCode::Cuda => "CUFRAMES_ERR_CUDA",
            ErrorCode::Io => "CUFRAMES_ERR_IO",
            ErrorCode::NoMemory => "CUFRAMES_ERR_NO_MEMORY",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.description())
    }
}

/// An error: a wire code plus a message that says what exactly went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    code: ErrorCode,
    message: String,
}

impl Error {
    /// An error of `code` with `message` (what failed and why).
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Error {
        Error {
            code,
            message: message.into(),
        }
    }

    /// The wire code.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// The message, without the code's name.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// An OS error with the operation and object that failed, mapped to the closest code.
    pub fn os(what: impl fmt::Display, errno: nix::errno::Errno) -> Error {
        use nix::errno::Errno;
        let code = match errno {
            Errno::EACCES | Errno::EPERM => ErrorCode::Permission,
            Errno::ENOENT | Errno::ECONNREFUSED => ErrorCode::NotFound,
            Errno::EEXIST | Errno::EADDRINUSE => ErrorCode::AlreadyExists,
            Errno::ENOMEM | Errno::ENOSPC => ErrorCode::NoMemory,
            Errno::ETIMEDOUT | Errno::EAGAIN => ErrorCode::Timeout,
            Errno::EPIPE | Errno::ECONNRESET => ErrorCode::Disconnected,
            Errno::EINVAL | Errno::ENAMETOOLONG => ErrorCode::InvalidArg,
            _ => ErrorCode::Io,
        };
        Error::new(code, format!("{what}: {}", errno.desc()))
    }

    /// An `InvalidArg` error.
    pub fn invalid(message: impl Into<String>) -> Error {
        Error::new(ErrorCode::InvalidArg, message)
    }

    /// A `Protocol` error.
    pub fn protocol(message: impl Into<String>) -> Error {
        Error::new(ErrorCode::Protocol, message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.name(), self.message)
    }
}

impl std::error::Error for Error {}

/// The result of every fallible call of the crate.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_through_their_wire_values() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_i32(code as i32), Some(code));
            assert!(!code.description().is_empty());
        }
        assert_eq!(ErrorCode::from_i32(-14), None);
        assert_eq!(ErrorCode::from_i32(1), None);
    }

    #[test]
    fn r7_values_are_fixed() {
        assert_eq!(ErrorCode::InvalidArg as i32, -1);
        assert_eq!(ErrorCode::PacketOverrun as i32, -9);
        assert_eq!(ErrorCode::NoMemory as i32, -13);
    }

    #[test]
    fn os_errors_keep_what_failed() {
        let e = Error::os("shm_open /cuframes-x", nix::errno::Errno::EACCES);
        assert_eq!(e.code(), ErrorCode::Permission);
        assert!(e.to_string().contains("shm_open /cuframes-x"));
    }
}
