//! Packet ring benchmark (§10): what one publisher costs and delivers to 1 and 8 reader
//! processes, against the same packets through a Unix stream socket and UDP on 127.0.0.1 (one
//! reader), and against memcpy bandwidth as the upper limit.
//!
//! ```text
//! cargo run --release -p cuframes-core --example packet_bench            # 6 s throttled runs
//! cargo run --release -p cuframes-core --example packet_bench -- 10 40000 # secs, packets
//! ```
//!
//! Stream: 20 Mbit/s at 30 fps, GOP 30, a keyframe 8x the size of a P frame (I ~540 KB,
//! P ~68 KB, +-20 % jitter). Two modes:
//! - *throttled*: packets published at 30 fps for `secs` seconds (the real-time case);
//! - *unthrottled*: `packets` packets as fast as the writer can (capacity; ring readers that
//!   fall behind are lapped and count overruns; the Unix socket blocks the sender instead; UDP
//!   drops);
//! - *equal load*: the unthrottled packets again at 90 % of the rate the Unix socket sustained,
//!   for the 1-copy demuxer and the socket (latency at the same throughput).
//!
//! Each payload carries its seq and the CLOCK_MONOTONIC time just before publish, so each
//! reader measures publish-to-read latency. Reader CPU comes from `wait4`'s rusage of each
//! reader process. Readers are this binary re-executed with `PKT_BENCH_ROLE` set (`cli.rs`).

#[path = "../bench_common/mod.rs"]
mod bench_common;

mod cli;
mod fresh_packet;
mod measure;
mod readers;
mod recorder;
mod report;
mod scenarios;
mod stream;
mod transports;

fn main() {
    match cli::role() {
        Some((role, arg)) => readers::run(role, &arg),
        None => scenarios::run(&cli::Args::parse()),
    }
}
