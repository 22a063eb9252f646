//! The frame reader of the many-cameras benchmark (`scripts/bench-cameras.sh`): one zero-copy
//! subscriber of one camera's frame ring that does what an analytics process does before its
//! own GPU work (wake up, take the frame, release it) and measures each wake-up.
//!
//! ```text
//! camera_reader KEY [--wait-publisher SECS] [--read-timeout SECS] [--cuda-device N]
//!               [--name NAME] [--latencies FILE]
//! ```
//!
//! It prints `ready` once its CUDA context exists (`--cuda-device N`, default 0; -1 for a host
//! ring and no CUDA), so that a benchmark can start the decoders only after every reader paid
//! its start-up. It then waits up to `--wait-publisher` for the publisher and its frame ring,
//! reads every frame until the publisher ends the stream, and prints one line:
//!
//! ```text
//! camera_reader KEY frames=F missed=M end=shutdown lat_p50_us=.. lat_p99_us=.. lat_max_us=..
//!   first_lat_us=.. cpu_us_per_frame=.. zero_copy=1 memory=cuda frame_bytes=.. granularity=..
//!   width=.. height=..
//! ```
//!
//! **Latency** is the reader's wake time (`CLOCK_REALTIME` when `next_frame` returns) minus
//! the frame's pts: the benchmark stamps each frame with the wall clock right before
//! `hwupload_cuframes` (`setpts=RTCTIME/(TB*1000000)`), so the figure covers the filter's
//! device copy, the publication behind it on the stream, the futex wake-up and the reader's
//! return. The first frame is left out of the percentiles (its stamp precedes the filter's
//! wait for its subscribers) and printed apart. `--latencies FILE` writes `seq latency_ns`
//! per frame, the first included, for pooled percentiles over many readers.
//!
//! **CPU per frame** is this process's user + system time (`getrusage`, every thread) from
//! the first frame to the last, over the frames in between: start-up and the import of the
//! slots are not counted.
//!
//! Exit status 0 when the stream ended with the publisher's shutdown and no frame was
//! missed; 1 otherwise, with the reason on stderr.

// Its child-process helpers serve the benchmarks that start copies of themselves.
#[allow(dead_code)]
#[path = "../bench_common/mod.rs"]
mod bench_common;

mod args;
mod read;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args = match args::parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("camera_reader: {e}\n{}", args::USAGE);
            return ExitCode::from(2);
        }
    };
    match read::run(&args) {
        Ok(summary) => {
            read::say(&summary.line(&args.key));
            if let Some(problem) = summary.problem() {
                eprintln!("camera_reader {}: {problem}", args.key);
                return ExitCode::from(1);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("camera_reader {}: {e}", args.key);
            ExitCode::from(1)
        }
    }
}
