//! The reading loop of `camera_reader`: wait for the publisher and its frame ring, read every
//! frame zero-copy, measure each wake-up and the CPU, and summarise.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::Arc;
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cuframes_core::cuda::CudaDevice;
use cuframes_core::subscriber::{Subscriber, SubscriberOptions};
use cuframes_core::wire::{MemoryKind, SubscriberMode};
use cuframes_core::{Error, ErrorCode, Result};

use crate::args::Args;
use crate::bench_common::cpu::self_cpu;
use crate::bench_common::stats::percentile_us;

/// What one reader saw.
#[derive(Debug, Default)]
pub struct Summary {
    /// Frames read.
    pub frames: u64,
    /// Frames of the ring's sequence this reader never got (gaps in `seq`).
    pub missed: u64,
    /// Why the stream ended ("shutdown" is the clean end).
    pub end: String,
    /// Latencies of every frame but the first, nanoseconds, sorted.
    pub latencies: Vec<i64>,
    /// The first frame's latency (its stamp precedes the publisher's wait for readers).
    pub first_latency: Option<i64>,
    /// CPU time from the first frame to the last, over the frames after the first, µs.
    pub cpu_us_per_frame: Option<f64>,
    /// Whether the frames were the ring's slots (zero copy).
    pub zero_copy: bool,
    /// The ring's memory: "cuda" or "host".
    pub memory: &'static str,
    /// Bytes of one frame in the ring's layout (pitched planes).
    pub frame_bytes: usize,
    /// The CUDA VMM granularity every slot is rounded up to (0 for a host ring).
    pub granularity: usize,
    /// Frame size in pixels.
    pub width: u32,
    /// Frame height in pixels.
    pub height: u32,
}

impl Summary {
    /// The line the benchmark parses (`key=value` fields after the key; `nan` for a
    /// figure with too few frames).
    pub fn line(&self, key: &str) -> String {
        let us = |v: Option<f64>| v.map_or(String::from("nan"), |v| format!("{v:.1}"));
        let pct = |p| us(percentile_us(&self.latencies, p));
        format!(
            "camera_reader {key} frames={} missed={} end={} lat_p50_us={} lat_p99_us={} \
             lat_max_us={} first_lat_us={} cpu_us_per_frame={} zero_copy={} memory={} \
             frame_bytes={} granularity={} width={} height={}",
            self.frames,
            self.missed,
            self.end,
            pct(0.5),
            pct(0.99),
            pct(1.0),
            us(self.first_latency.map(|ns| ns as f64 / 1000.0)),
            us(self.cpu_us_per_frame),
            u8::from(self.zero_copy),
            self.memory,
            self.frame_bytes,
            self.granularity,
            self.width,
            self.height,
        )
    }

    /// Why this run does not count, if it does not: no frame, a frame missed, a copy instead
    /// of the slot, or an end other than the publisher's shutdown.
    pub fn problem(&self) -> Option<String> {
        if self.frames == 0 {
            Some(String::from("no frame was read"))
        } else if self.missed > 0 {
            Some(format!("{} frames were missed", self.missed))
        } else if !self.zero_copy {
            Some(String::from("frames were copies, not the ring's slots"))
        } else if self.end != "shutdown" {
            Some(format!(
                "the stream ended with {:?}, not a shutdown",
                self.end
            ))
        } else {
            None
        }
    }
}

/// Writes one line to stdout. A benchmark that went away (a closed pipe) is no reason to
/// fail: what matters then is the exit status, so write errors are ignored (`println!` would
/// panic on them).
pub fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|_| out.flush());
}

/// The wall clock in nanoseconds since the epoch (`CLOCK_REALTIME`, what FFmpeg's `RTCTIME`
/// reads in microseconds).
fn realtime_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// Connects to `key`'s frame ring, waiting up to `wait` for a publisher that is not there yet
/// or has no frame ring yet (the filter makes it on its first frame); other errors are final.
fn connect(a: &Args, opts: &SubscriberOptions) -> Result<Subscriber> {
    let deadline = Instant::now() + a.wait_publisher;
    loop {
        match Subscriber::connect(&a.key, opts) {
            Ok(s) => return Ok(s),
            Err(e)
                if matches!(
                    e.code(),
                    ErrorCode::NotFound
                        | ErrorCode::Disconnected
                        | ErrorCode::Io
                        | ErrorCode::Timeout
                ) && Instant::now() < deadline =>
            {
                sleep(Duration::from_millis(20))
            }
            Err(e) => {
                return Err(Error::new(
                    e.code(),
                    format!(
                        "no frame ring within {:?}: {}",
                        a.wait_publisher,
                        e.message()
                    ),
                ))
            }
        }
    }
}

/// Reads until the publisher ends the stream.
pub fn run(a: &Args) -> Result<Summary> {
    // The context this process imports the slots into (the device's primary context, which
    // the subscriber retains too): made before `ready`, so that its start-up is not counted.
    let device: Option<Arc<CudaDevice>> = a.cuda_device.map(CudaDevice::open).transpose()?;
    let mut log = match &a.latencies {
        Some(p) => Some(BufWriter::new(File::create(p).map_err(|e| {
            Error::new(ErrorCode::Io, format!("creating {}: {e}", p.display()))
        })?)),
        None => None,
    };
    say("ready");
    let opts = SubscriberOptions {
        name: a.name.clone(),
        mode: SubscriberMode::ZeroCopy,
        ..Default::default()
    };
    let mut sub = connect(a, &opts)?;
    let mut s = Summary {
        memory: match sub.memory_kind() {
            Some(MemoryKind::CudaVmm) => "cuda",
            _ => "host",
        },
        ..Default::default()
    };
    if let Some(g) = sub.frame_layout() {
        (s.frame_bytes, s.width, s.height) = (g.frame_size, g.width, g.height);
    }
    if s.memory == "cuda" {
        if let Some(d) = &device {
            s.granularity = d.vmm_granularity()?;
        }
    }
    let mut last_seq = None;
    let mut cpu_first = None;
    let mut cpu_last = Duration::ZERO;
    s.zero_copy = true;
    loop {
        let f = match sub.next_frame(Some(a.read_timeout)) {
            Ok(f) => f,
            Err(e) if e.code() == ErrorCode::Disconnected => break,
            Err(e) => return Err(e),
        };
        // Saturating: a frame of a publisher that does not stamp (pts from its own clock, or
        // none: INT64_MIN) gives a meaningless figure, never an overflow.
        let latency = realtime_ns().saturating_sub(f.pts_ns);
        let seq = f.seq;
        s.zero_copy &= f.is_zero_copy();
        // Nothing reads the frame on the GPU: ACK at once, as a consumer whose own work is
        // done would (a plain release would synchronise the whole context first).
        // SAFETY: null stream, and no GPU work was queued on the frame.
        unsafe { f.release_after_stream(std::ptr::null_mut()) };
        let cpu = self_cpu();
        if cpu_first.is_none() {
            cpu_first = Some(cpu);
            s.first_latency = Some(latency);
        } else {
            s.latencies.push(latency);
        }
        cpu_last = cpu;
        if let Some(prev) = last_seq {
            s.missed += seq.saturating_sub(prev + 1);
        }
        last_seq = Some(seq);
        s.frames += 1;
        if let Some(w) = log.as_mut() {
            writeln!(w, "{seq} {latency}")
                .map_err(|e| Error::new(ErrorCode::Io, format!("latency file: {e}")))?;
        }
    }
    if let Some(w) = log.as_mut() {
        w.flush()
            .map_err(|e| Error::new(ErrorCode::Io, format!("latency file: {e}")))?;
    }
    s.end = sub
        .end_reason()
        .map_or(String::from("unknown"), |r| r.name().to_string());
    if let Some(c0) = cpu_first.filter(|_| s.frames > 1) {
        s.cpu_us_per_frame = Some((cpu_last - c0).as_secs_f64() * 1e6 / (s.frames - 1) as f64);
    }
    s.latencies.sort_unstable();
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_counts_only_when_every_frame_came_zero_copy_and_the_stream_shut_down() {
        let ok = Summary {
            frames: 3,
            end: "shutdown".into(),
            zero_copy: true,
            latencies: vec![1_000, 2_000],
            ..Default::default()
        };
        assert_eq!(ok.problem(), None);
        let line = ok.line("k");
        assert!(line.starts_with("camera_reader k frames=3 missed=0 end=shutdown lat_p50_us=2.0 "));
        assert!(
            line.contains(" first_lat_us=nan cpu_us_per_frame=nan "),
            "{line}"
        );
        assert!(Summary::default().problem().is_some());
        for broken in [
            Summary {
                missed: 1,
                ..ok_like(&ok)
            },
            Summary {
                zero_copy: false,
                ..ok_like(&ok)
            },
            Summary {
                end: "kicked".into(),
                ..ok_like(&ok)
            },
        ] {
            assert!(broken.problem().is_some(), "{broken:?}");
        }
    }

    fn ok_like(s: &Summary) -> Summary {
        Summary {
            frames: s.frames,
            end: s.end.clone(),
            zero_copy: s.zero_copy,
            ..Default::default()
        }
    }
}
