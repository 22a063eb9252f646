//! The tables on the GPU, in order, as far as the flags ask.

use cuframes_core::cuda;

use crate::ack_pages::ack_pages_against_header_acks;
use crate::cli::Tables;
use crate::publisher_cost::publisher_cost;
use crate::run::in_private_runtime_dir;
use crate::throughput::throughput;
use crate::wake_ups::wake_ups;

/// Tables 1 to 4 (1 only with `--wake-ups-only`, 1 and 2 with `--tables-1-2`); exits with 2
/// when there is no CUDA device.
pub fn run(t: &Tables) {
    if let Err(e) = cuda::driver_available() {
        eprintln!("frame_bench needs a CUDA device: {e}");
        std::process::exit(2);
    }
    let frames = t.frames;
    in_private_runtime_dir(|| {
        wake_ups(frames);
        if t.wake_ups_only {
            return;
        }
        publisher_cost(frames);
        if t.tables_1_2 {
            return;
        }
        throughput(frames);
        ack_pages_against_header_acks(frames);
    });
}
