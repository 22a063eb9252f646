//! The C ABI of cuframes: a thin, documented `extern "C"` layer over `cuframes-core`.
//!
//! Every function here is declared in `include/cuframes.h`. No panic crosses this boundary:
//! each entry point runs its body under one of the wrappers of `ffi`, which turn a panic into
//! an error code and write the last error only when the call fails.
//!
//! # Map
//!
//! Imports run downwards only (a module uses the ones below it, never one above):
//!
//! 1. `api`: the `extern "C"` functions, one file per handle or sub-API:
//!    - `publisher` (`cuframes_publisher_t`), with `frame_ring` (its frame ring, host
//!      publishes), `cuda_publish` (publishes from the GPU) and `packet` (its packet ring and
//!      a subscriber's reading of it) built on it;
//!    - `subscriber` (`cuframes_subscriber_t`), built on `frame` (`cuframes_frame_t`, the
//!      frames it hands out); `packet` builds on it too;
//!    - `codec` (extradata helpers), `cuda` (CUDA helpers for FFmpeg), `library` (version,
//!      error texts, the last error);
//!    - `types`: the `repr(C)` value types several handles share (layout, colour).
//! 2. `ffi`: the boundary every function runs through: the panic-safe wrapper, C argument
//!    reading, the calling thread's last error.
//! 3. `cuframes_core`: everything the functions do.
//!
//! Unit tests that call the API across handles, as a C program does, are in `tests/`.
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

#![warn(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![deny(unsafe_op_in_unsafe_fn)]

mod api;
mod ffi;
#[cfg(test)]
mod tests;

pub use api::library::{cuframes_last_error, cuframes_protocol_version, cuframes_strerror};

/// The `repr(C)` structs of the C API, public so that the conformance crate can check them
/// against `cuframes.h` field by field.
pub mod abi {
    pub use crate::api::codec::CCodecVideoInfo;
    pub use crate::api::frame::CFrameInfo;
    pub use crate::api::frame_ring::{CFrameRingConfig, CSlot};
    pub use crate::api::packet::{CPacketInfo, CPacketRingConfig, CPacketStats};
    pub use crate::api::publisher::{CPublisherOptions, CPublisherWaitStats, CSubscriberInfo};
    pub use crate::api::subscriber::{CFrameStats, CSubscriberOptions};
    pub use crate::api::types::{CColour, CFrameLayout};
}
