//! Protocol v4 conformance (protocol-v4.md §8) of the public headers, `include/cuframes.h`
//! (the C API) and `include/cuframes_protocol.h` (the wire protocol).
//!
//! Two views of the header are built by `build.rs`:
//! - [`run_c_fixture`] runs `c/layout.c`, the C fixture of §8, which checks offsetof, sizeof
//!   and type of every field of every struct, every enum value and every constant against the
//!   values of the spec, and calls the library's functions;
//! - [`c`] is bindgen's translation of the header, which `tests/header_vs_rust.rs` compares
//!   field by field with the Rust wire types of `cuframes_core::wire`.

use std::ffi::{c_char, c_int, CStr};

// The C fixture calls cuframes_protocol_version() and cuframes_strerror(): link the C-ABI
// library itself.
extern crate cuframes;

/// bindgen's translation of `include/cuframes_protocol.h` and the `include/cuframes.h` it
/// includes.
#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    clippy::all,
    clippy::pedantic
)]
pub mod c {
    include!(concat!(env!("OUT_DIR"), "/cuframes_h.rs"));
}

extern "C" {
    /// `c/layout.c`: runs every check, writes a report, returns the number of failures.
    fn cuframes_conformance_run(report: *mut c_char, len: usize) -> c_int;
}

/// Runs the C fixture; returns the number of failed checks and its report.
pub fn run_c_fixture() -> (i32, String) {
    let mut report = vec![0u8; 64 * 1024];
    // SAFETY: the fixture writes at most `len` bytes, NUL-terminated, into `report`.
    let failures = unsafe { cuframes_conformance_run(report.as_mut_ptr().cast(), report.len()) };
    let text = CStr::from_bytes_until_nul(&report)
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    (failures, text)
}
