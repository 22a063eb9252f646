//! The C boundary, below every handle of `api`: what each `extern "C"` function runs
//! through, whatever handle it takes.
//!
//! - [`boundary`]: the one wrapper every entry point runs its body under (no panic crosses,
//!   the last error is written only on failure);
//! - [`args`]: reading C arguments (strings, in/out pointers, byte buffers) into Rust
//!   references under the pointer contract of the crate documentation;
//! - [`last_error`]: the calling thread's message of its last failed call.

pub(crate) mod args;
pub(crate) mod boundary;
pub(crate) mod last_error;

pub(crate) use boundary::{guard, status, value};
