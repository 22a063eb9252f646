//! One run: a publisher with a frame ring, its subscriber processes, frames published at the
//! configured pacing, and the figures of the run (throughput, publisher cost, latency, CPU).

use std::io::BufRead;
use std::time::{Duration, Instant};

use cuframes_core::cuda::{self, CudaDevice, DeviceBuffer, Stream};
use cuframes_core::publisher::{FrameRingConfig, MemoryChoice, Publisher, PublisherOptions};
use cuframes_core::wire::{Format, Policy};

use crate::bench_common::child::{start, this_binary};
use crate::cli::ChildArgs;
use crate::config::{Acks, Config, Publish};
use crate::latency::{nanoseconds, pct};

/// The figures of one run.
pub struct Row {
    pub label: String,
    pub subs: usize,
    pub fps: f64,
    pub pub_us: f64,
    pub p50: f64,
    pub p99: f64,
    /// Publication -> seen in the header by the probe (NaN for other subscribers).
    pub visible_p50: f64,
    pub visible_p99: f64,
    /// How long the probe's read of the slot-descriptor table took, once the publication was
    /// visible (NaN for other subscribers).
    pub table_p50: f64,
    /// How long one non-blocking `recv` on an empty socket took right after (NaN for others).
    pub recv_p50: f64,
    /// The probe's other frames, read by `next_frame` spinning itself (NaN for others).
    pub own_p50: f64,
    pub own_p99: f64,
    /// Mean CPU of a subscriber process over its life (1.0 = one core).
    pub cpu: f64,
}

/// Runs `f` with a runtime directory of this process's own (its sockets), removed after.
pub fn in_private_runtime_dir(f: impl FnOnce()) {
    let dir = std::env::temp_dir().join(format!("cuframes-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::env::set_var("CUFRAMES_RUNTIME_DIR", &dir);
    f();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run with the default settings but for the ACKs.
pub fn run(w: u32, h: u32, subs: usize, frames: u64, pace: Option<Duration>, acks: Acks) -> Row {
    run_config(Config {
        acks,
        ..Config::new(w, h, subs, frames, pace)
    })
}

/// The run `c` describes.
pub fn run_config(c: Config) -> Row {
    let Config {
        w,
        h,
        subs,
        frames,
        pace,
        acks,
        policy,
        publish,
        spin,
        copy,
        host,
        probe,
        publisher_spins,
    } = c;
    let publish = if host { Publish::Plain } else { publish };
    let key = format!(
        "bench-{}-{}",
        std::process::id(),
        cuframes_core::testing::unique_suffix() & 0xFFFFFF
    );
    let options = PublisherOptions {
        allow_legacy_subscribers: acks == Acks::Header,
        ..Default::default()
    };
    let p = Publisher::create(&key, options).unwrap();
    let mut cfg = FrameRingConfig::new(Format::Nv12, w, h);
    cfg.policy = policy;
    cfg.ring_size = 4;
    cfg.ack_timeout = Duration::from_secs(10);
    cfg.memory = if host {
        MemoryChoice::Host
    } else {
        MemoryChoice::Cuda { device: 0 }
    };
    p.enable_frames(cfg).unwrap();
    let layout = p.frame_layout().unwrap().clone();
    let child = ChildArgs {
        key: key.clone(),
        acks,
        spin,
        copy,
        probe,
    };
    let mut kids: Vec<_> = (0..subs)
        .map(|_| {
            let mut cmd = this_binary();
            cmd.args(child.to_args());
            let c = start(cmd);
            (c.child, c.out)
        })
        .collect();
    // The frames' source on the GPU (none for a host ring: those rows run without CUDA).
    let gpu = (!host).then(|| {
        let dev = CudaDevice::open(0).unwrap();
        dev.make_current().unwrap();
        let stream = Stream::new(&dev).unwrap();
        let src = DeviceBuffer::new(&dev, layout.frame_size).unwrap();
        // SAFETY: `src` is a live device buffer of frame_size bytes, on our own stream.
        unsafe { cuda::memset_d8_async(src.device_ptr(), 0x5A, layout.frame_size, &stream) }
            .unwrap();
        stream.synchronize().unwrap();
        (dev, stream, src)
    });
    let mut pub_cost = Duration::ZERO;
    let start = Instant::now();
    for n in 0..frames {
        if let Some(period) = pace {
            let due = start + period * n as u32;
            if publisher_spins {
                while Instant::now() < due {
                    std::hint::spin_loop();
                }
            } else if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        let t = Instant::now();
        let slot = p.acquire().unwrap();
        // The frame's content: one device-to-device copy per plane, like a decoder's output
        // (none for `Plain`).
        let (stream, src) = match &gpu {
            Some((_, stream, src)) if publish != Publish::Plain => (stream, src),
            _ => {
                p.publish(slot, None).unwrap();
                pub_cost += t.elapsed();
                continue;
            }
        };
        for pl in layout.planes() {
            // SAFETY: plane `pl` of the acquired slot and of `src` (both at least frame_size
            // bytes, alive until the publish below has synchronised the stream).
            unsafe {
                cuda::copy_2d_async(
                    slot.address + pl.offset as u64,
                    pl.pitch,
                    src.device_ptr() + pl.offset as u64,
                    pl.pitch,
                    pl.row_bytes,
                    pl.rows,
                    stream,
                )
            }
            .unwrap();
        }
        // pts None: taken when the frame is made visible (after the copy, for AfterStream).
        if publish == Publish::AfterStream {
            p.publish_after_stream(slot, Some(stream.as_cuda_stream()), None)
        } else {
            p.publish_on_stream(slot, stream.as_cuda_stream(), None)
        }
        .unwrap();
        pub_cost += t.elapsed();
    }
    if let Some((_, stream, _)) = &gpu {
        stream.synchronize().unwrap(); // publications queued on the stream have run
    }
    let elapsed = start.elapsed();
    if policy == Policy::StrictWait {
        while p.subscribers().iter().any(|s| s.lag > 0) {
            std::thread::sleep(Duration::from_millis(2));
        }
    } else {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(p);
    let (mut lat, mut visible, mut table, mut recv, mut own, mut cpu) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        0.0,
    );
    for (mut c, mut out) in kids.drain(..) {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        c.wait().unwrap();
        // "lat CPU LATENCIES... [| VISIBLE... | TABLE... | RECV... | OWN...]" (the lists
        // after the first from the probe only).
        let mut lists = line.split('|');
        let reads = lists.next().unwrap_or("");
        let (seen, read, polled, spun) = (
            lists.next().unwrap_or(""),
            lists.next().unwrap_or(""),
            lists.next().unwrap_or(""),
            lists.next().unwrap_or(""),
        );
        let mut fields = reads.split_whitespace().skip(1);
        cpu += fields
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN);
        lat.extend(fields.filter_map(|v| v.parse::<i64>().ok()));
        visible.extend(nanoseconds(seen));
        table.extend(nanoseconds(read));
        recv.extend(nanoseconds(polled));
        own.extend(nanoseconds(spun));
    }
    Row {
        label: format!("{w}x{h}"),
        subs,
        fps: frames as f64 / elapsed.as_secs_f64(),
        pub_us: pub_cost.as_secs_f64() * 1e6 / frames as f64,
        p50: pct(&mut lat, 0.5),
        p99: pct(&mut lat, 0.99),
        visible_p50: pct(&mut visible, 0.5),
        visible_p99: pct(&mut visible, 0.99),
        table_p50: pct(&mut table, 0.5),
        recv_p50: pct(&mut recv, 0.5),
        own_p50: pct(&mut own, 0.5),
        own_p99: pct(&mut own, 0.99),
        cpu: cpu / subs.max(1) as f64,
    }
}
