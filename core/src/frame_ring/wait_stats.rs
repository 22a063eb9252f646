//! Where a publisher's frames waited: for subscribers' ACKs (STRICT_WAIT), for publications
//! still queued on a CUDA stream, and how long the host functions that publish from a stream
//! ran (they hold up the stream behind them). Counted by the writer as it goes, read by
//! operators (the FFmpeg filter prints them at its end): a pipeline slower with subscribers
//! than without shows here which of them it waited on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A snapshot of [`WaitCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WaitStats {
    /// Acquires that found the slot's previous frame not yet ACKed by everyone (STRICT_WAIT).
    pub ack_waits: u64,
    pub ack_wait: Duration,
    /// Acquires and publishes that waited for a publication still queued on a stream.
    pub publication_waits: u64,
    pub publication_wait: Duration,
    /// Publications run by a host function on a CUDA stream, and their time in all.
    pub stream_publications: u64,
    pub stream_publication_time: Duration,
    /// The longest one of them.
    pub stream_publication_max: Duration,
}

/// One event kind's count and total time, in nanoseconds.
#[derive(Default)]
struct Tally {
    count: AtomicU64,
    nanos: AtomicU64,
}

impl Tally {
    fn add(&self, d: Duration) -> u64 {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.nanos.fetch_add(ns, Ordering::Relaxed);
        ns
    }

    fn read(&self) -> (u64, Duration) {
        (
            self.count.load(Ordering::Relaxed),
            Duration::from_nanos(self.nanos.load(Ordering::Relaxed)),
        )
    }
}

/// The writer's counters (relaxed atomics: statistics, read while they move).
#[derive(Default)]
pub struct WaitCounters {
    acks: Tally,
    publications: Tally,
    stream_publications: Tally,
    stream_publication_max_ns: AtomicU64,
}

impl WaitCounters {
    /// A wait for ACKs that began at `start` has ended.
    pub fn ack_wait(&self, start: Instant) {
        self.acks.add(start.elapsed());
    }

    /// A wait for a queued publication that began at `start` has ended.
    pub fn publication_wait(&self, start: Instant) {
        self.publications.add(start.elapsed());
    }

    /// A host function that began at `start` has published its frame.
    pub fn stream_publication(&self, start: Instant) {
        let ns = self.stream_publications.add(start.elapsed());
        self.stream_publication_max_ns
            .fetch_max(ns, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> WaitStats {
        let (ack_waits, ack_wait) = self.acks.read();
        let (publication_waits, publication_wait) = self.publications.read();
        let (stream_publications, stream_publication_time) = self.stream_publications.read();
        WaitStats {
            ack_waits,
            ack_wait,
            publication_waits,
            publication_wait,
            stream_publications,
            stream_publication_time,
            stream_publication_max: Duration::from_nanos(
                self.stream_publication_max_ns.load(Ordering::Relaxed),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_times_add_up_and_the_longest_publication_is_kept() {
        let c = WaitCounters::default();
        assert_eq!(c.snapshot(), WaitStats::default());
        let long_ago = Instant::now() - Duration::from_millis(30);
        c.ack_wait(long_ago);
        c.ack_wait(Instant::now());
        c.stream_publication(long_ago);
        c.stream_publication(Instant::now());
        let s = c.snapshot();
        assert_eq!(
            (s.ack_waits, s.publication_waits, s.stream_publications),
            (2, 0, 2)
        );
        assert!(s.ack_wait >= Duration::from_millis(30));
        assert!(s.stream_publication_max >= Duration::from_millis(30));
        assert!(s.stream_publication_time >= s.stream_publication_max);
    }
}
