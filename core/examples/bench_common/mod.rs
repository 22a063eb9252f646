//! What `frame_bench` and `packet_bench` share: percentiles, CPU time from `rusage`, and the
//! start of a child process (this binary re-executed) that reports ready on its first line.
//! Each benchmark includes this directory with `#[path = "../bench_common/mod.rs"] mod
//! bench_common;`: examples are separate crates, and this is not test scaffolding for
//! `cuframes_test_support`.

pub mod child;
pub mod cpu;
pub mod stats;
