//! The stream every transport carries (20 Mbit/s, 30 fps, GOP 30), the stamp each payload
//! carries, the UDP framing of a packet, and the writer's pacing.

use std::time::{Duration, Instant};

use cuframes_core::testing::monotonic_ns;

/// Frames (packets) per second of the stream.
pub const FPS: u64 = 30;
/// One keyframe every `GOP` packets.
pub const GOP: u64 = 30;
const BITRATE: f64 = 20e6;
/// The largest payload of one UDP datagram.
pub const UDP_CHUNK: usize = 60_000;
/// A datagram's header: seq, packet length, offset of the chunk.
pub const UDP_HDR: usize = 16;

/// Packet sizes of the 20 Mbit/s, 30 fps stream, deterministic.
fn stream_sizes(n: usize) -> Vec<usize> {
    let avg = BITRATE / 8.0 / FPS as f64;
    let p = avg * GOP as f64 / (GOP as f64 - 1.0 + 8.0);
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let jitter = 0.8 + (x % 1000) as f64 / 2500.0;
            let base = if i as u64 % GOP == 0 { 8.0 * p } else { p };
            (base * jitter) as usize
        })
        .collect()
}

/// Writes `seq` and the publish time (CLOCK_MONOTONIC) at the front of a payload.
pub fn stamp(buf: &mut [u8], seq: u64) {
    buf[0..8].copy_from_slice(&seq.to_le_bytes());
    buf[8..16].copy_from_slice(&monotonic_ns().to_le_bytes());
}

/// The publish time a payload carries.
pub fn stamped_ns(buf: &[u8]) -> i64 {
    i64::from_le_bytes(buf[8..16].try_into().unwrap())
}

/// How the writer paces its packets.
#[derive(Clone, Copy)]
pub enum Pace {
    /// As fast as it can.
    Unthrottled,
    /// At the stream's frame rate (real time).
    RealTime,
    /// At this many packets per second (the same load for every transport).
    PacketsPerSec(f64),
}

/// Waits until packet `i` is due (absolute schedule: a late packet does not delay the next).
pub struct Pacer {
    /// When the first packet was due.
    pub start: Instant,
    interval: Option<Duration>,
}

impl Pacer {
    /// A pacer whose packet 0 is due now.
    pub fn new(pace: Pace) -> Pacer {
        let interval = match pace {
            Pace::Unthrottled => None,
            Pace::RealTime => Some(Duration::from_nanos(1_000_000_000 / FPS)),
            Pace::PacketsPerSec(r) => Some(Duration::from_secs_f64(1.0 / r)),
        };
        Pacer {
            start: Instant::now(),
            interval,
        }
    }

    /// Returns when packet `i` is due.
    pub fn wait(&self, i: usize) {
        let Some(interval) = self.interval else {
            return;
        };
        let due = self.start + interval * i as u32;
        loop {
            let now = Instant::now();
            if due <= now {
                return;
            }
            // A sleep overshoots by the timer slack (~50 µs): sleep only the part of a long
            // wait that leaves room for it, poll the rest (rates of 10^4 packets/s and more).
            if due - now > Duration::from_micros(200) {
                std::thread::sleep(due - now - Duration::from_micros(100));
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// `n` packets of the stream, each filled with its index's low byte.
pub fn packets(n: usize) -> Vec<Vec<u8>> {
    stream_sizes(n)
        .into_iter()
        .enumerate()
        .map(|(i, len)| vec![i as u8; len])
        .collect()
}
