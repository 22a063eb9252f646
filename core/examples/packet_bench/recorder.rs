//! A reader's record of the packets it read, and the one "BENCH-RESULT key=value ..." line it
//! prints at the end for the parent (`measure::finish` reads it back).

use std::time::Instant;

use cuframes_core::testing::monotonic_ns;

use crate::bench_common::stats::{percentile_us, rank};
use crate::stream::{stamped_ns, GOP};

/// Percentile `p` of `sorted` in µs; 0 for an empty list (a reader that read nothing of a
/// kind reports 0).
fn pct_us(sorted: &[i64], p: f64) -> f64 {
    percentile_us(sorted, p).unwrap_or(0.0)
}

/// One packet as a reader saw it: for the tail breakdown (where p99 comes from).
struct Sample {
    lat_ns: i64,
    key: bool,
    /// Nothing was ready when the reader asked: it waited (slept on the futex or the socket,
    /// or spun) for this packet.
    waited: bool,
    /// Packets (ring) or bytes (socket) already waiting when the reader asked.
    backlog: u64,
}

/// The packets one reader read.
pub struct Recorder {
    samples: Vec<Sample>,
    packets: u64,
    bytes: u64,
    first: Option<Instant>,
    last: Instant,
}

impl Recorder {
    /// An empty record.
    pub fn new() -> Recorder {
        Recorder {
            samples: Vec::with_capacity(1 << 16),
            packets: 0,
            bytes: 0,
            first: None,
            last: Instant::now(),
        }
    }

    /// `backlog`: what was ready when the reader asked for this packet (0: it waited).
    pub fn record(&mut self, payload: &[u8], backlog: u64) {
        let now = monotonic_ns();
        let seq = u64::from_le_bytes(payload[0..8].try_into().unwrap());
        self.samples.push(Sample {
            lat_ns: now - stamped_ns(payload),
            key: seq.saturating_sub(1) % GOP == 0,
            waited: backlog == 0,
            backlog,
        });
        self.packets += 1;
        self.bytes += payload.len() as u64;
        self.last = Instant::now();
        self.first.get_or_insert(self.last);
    }

    /// Prints the BENCH-RESULT line, with the reader's `overruns` and `lost` packets.
    pub fn print(self, overruns: u64, lost: u64) {
        let sorted = |f: &dyn Fn(&Sample) -> bool| {
            let mut v: Vec<i64> = self
                .samples
                .iter()
                .filter(|s| f(s))
                .map(|s| s.lat_ns)
                .collect();
            v.sort_unstable();
            v
        };
        let all = sorted(&|_| true);
        let p99_ns = all.get(rank(all.len(), 0.99));
        let tail: Vec<&Sample> = self
            .samples
            .iter()
            .filter(|s| p99_ns.is_some_and(|&t| s.lat_ns >= t))
            .collect();
        let share = |f: &dyn Fn(&Sample) -> bool| {
            100.0 * tail.iter().filter(|s| f(s)).count() as f64 / tail.len().max(1) as f64
        };
        let waited = self.samples.iter().filter(|s| s.waited).count();
        let secs = self
            .first
            .map_or(0.0, |f| self.last.duration_since(f).as_secs_f64());
        println!(
            "BENCH-RESULT packets={} bytes={} secs={secs:.6} overruns={overruns} lost={lost} \
             p50_us={:.1} p99_us={:.1} max_us={:.1} p99_key_us={:.1} p99_nonkey_us={:.1} \
             waited_pct={:.1} p99_waited_us={:.1} p99_ready_us={:.1} tail_key_pct={:.0} \
             tail_waited_pct={:.0} tail_backlog={:.0}",
            self.packets,
            self.bytes,
            pct_us(&all, 0.5),
            pct_us(&all, 0.99),
            pct_us(&all, 1.0),
            pct_us(&sorted(&|s| s.key), 0.99),
            pct_us(&sorted(&|s| !s.key), 0.99),
            100.0 * waited as f64 / self.samples.len().max(1) as f64,
            pct_us(&sorted(&|s| s.waited), 0.99),
            pct_us(&sorted(&|s| !s.waited), 0.99),
            share(&|s| s.key),
            share(&|s| s.waited),
            tail.iter().map(|s| s.backlog as f64).sum::<f64>() / tail.len().max(1) as f64,
        );
    }
}
