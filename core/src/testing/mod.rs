//! Test support (feature `testing`, off by default): what tests, examples and benchmarks need
//! and production code must not carry.
//!
//! - [`kernels`]: the GPU test kernels (fill / verify a pattern, keep the GPU busy), loaded
//!   per device and unloaded with it.

pub mod kernels;

pub use kernels::{busy, fill_pattern, pattern_byte, pattern_host, verify_pattern};
