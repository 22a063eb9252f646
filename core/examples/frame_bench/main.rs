//! GPU frame-ring benchmark (needs a CUDA device), every figure against a baseline of the same
//! run:
//! 1. Wake-ups: publish-to-receive latency at 60 fps and 1 kHz pacing, sleeping and spinning
//!    subscribers, against the machine's own futex handoff between two processes at the same
//!    pacing; CPU per spinning subscriber, and of an idle sleeping one.
//! 2. Publisher cost on the publishing thread, paced (no ACK wait), 1 / 8 / 31 subscribers,
//!    both policies, publication after the stream (the thread waits for the GPU) and on the
//!    stream (a host function publishes).
//! 3. Frames per second and latency for NV12 1080p and 4K with 1, 8 and 31 subscriber
//!    processes; the host path (device-to-host, shared memory, host-to-device) and the
//!    device-to-device copy bandwidth as baselines.
//! 4. For 1080p, ACK pages (the default) against plain v4 header ACKs.
//!
//! ```text
//! cargo run --release -p cuframes-core --example frame_bench [-- --frames N] [--tables-1-2]
//! cargo run --release -p cuframes-core --example frame_bench -- --wake-ups-only  # table 1
//! cargo run --release -p cuframes-core --example frame_bench -- --host-probe     # no GPU
//! ```
//!
//! Latency is measured from the publication (the frame's pts is taken when it is made visible:
//! after its GPU copy) to the subscriber's return from next_frame.

#[path = "../bench_common/mod.rs"]
mod bench_common;

mod ack_pages;
mod child;
mod cli;
mod config;
mod futex;
mod gpu_baseline;
mod latency;
mod probe;
mod publisher_cost;
mod run;
mod tables;
mod throughput;
mod wake_ups;

use cli::Invocation;

fn main() {
    match cli::parse(std::env::args().collect()) {
        Invocation::Child(c) => child::run(&c),
        Invocation::FutexChild { name, spin } => futex::child(&name, spin),
        Invocation::IdleChild { key } => child::idle(&key),
        Invocation::HostProbe => wake_ups::host_probe(),
        Invocation::Tables(t) => tables::run(&t),
    }
}
