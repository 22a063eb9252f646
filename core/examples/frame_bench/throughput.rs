//! Table 3: frames per second, publisher cost and latency for NV12 1080p and 4K with 1, 8 and
//! 31 subscriber processes, against the host path and the device-to-device copy bandwidth.

use cuframes_core::format::FrameGeometry;
use cuframes_core::wire::Format;

use crate::config::{Acks, PERIOD_60FPS};
use crate::gpu_baseline::{dtod_bandwidth, host_path};
use crate::run::run;

/// Table 3, preceded by the device-to-device copy bandwidth.
pub fn throughput(frames: u64) {
    let bw = dtod_bandwidth();
    println!();
    println!("device-to-device copy bandwidth: {bw:.0} GB/s");
    println!("| frame | subscribers | max fps (STRICT_WAIT) | publisher cost/frame | latency p50 @60fps | latency p99 @60fps | host path/frame (mean, p99) | ring vs host path (p50) | 1 frame DtoD at the limit |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for (w, h) in [(1920u32, 1080u32), (3840, 2160)] {
        let (host_mean, host_p99) = host_path(w, h, 50);
        let frame_bytes = FrameGeometry::new(Format::Nv12, w, h).unwrap().frame_size as f64;
        for subs in [1usize, 8, 31] {
            let max = run(w, h, subs, frames, None, Acks::Pages);
            let paced = run(w, h, subs, frames.min(180), Some(PERIOD_60FPS), Acks::Pages);
            println!(
                "| {} NV12 | {subs} | {:.0} | {:.1} µs | {:.1} µs | {:.1} µs | {host_mean:.0} µs, {host_p99:.0} µs | {:.1}x faster | {:.1} µs |",
                max.label,
                max.fps,
                max.pub_us,
                paced.p50,
                paced.p99,
                host_mean / paced.p50,
                frame_bytes / (bw * 1e3)
            );
            let _ = max.subs;
        }
    }
}
