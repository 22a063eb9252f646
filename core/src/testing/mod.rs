//! Test support (feature `testing`, off by default): what tests, examples and benchmarks need
//! and production code must not carry.
//!
//! - [`kernels`]: the GPU test kernels (fill / verify a pattern, keep the GPU busy), loaded
//!   per device and unloaded with it.
//! - [`hooks`]: points inside library calls where a test makes a race happen every time.
//! - Re-exports of internals that tests and benchmarks drive directly: the socket message
//!   I/O of `sock` (hostile peers), the clocks and unique names of `util`.

pub mod hooks;
pub mod kernels;

pub use kernels::{busy, fill_pattern, pattern_byte, pattern_host, verify_pattern};

pub use crate::sock::{recv, send};
pub use crate::util::{monotonic_ns, unique_suffix};

/// The library's one way to print a diagnostic (`util::write_diag`), for the tests that check it
/// raises no SIGPIPE and never panics on a closed stderr.
pub fn diag(message: &str) {
    crate::util::write_diag(format_args!("{message}"));
}
// Internals tests drive directly (the frame SHM's typed view; the deferred-release queue).
pub use crate::frame_ring::shm_region::FrameShm;
/// The deferred-release queue of CUDA subscribers.
pub mod deferred {
    pub use crate::subscriber::deferred::flush;
}
