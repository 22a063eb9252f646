//! Waiting for a state instead of sleeping a fixed time: a loaded CI machine makes any fixed
//! sleep too short some day.

use std::time::{Duration, Instant};

/// Poll `cond` every 5 ms until it holds; panics naming `what` after `limit`.
pub fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Wait until the packet ring of `key` has published at least `seq` packets; panics after
/// `timeout`.
pub fn wait_published(key: &str, seq: u64, timeout: Duration) {
    let name = crate::packet_shm_name(key);
    let what = format!("{key}: {seq} packets published");
    wait_until(&what, timeout, || {
        cuframes_core::packet_ring::PacketRingReader::open(&name)
            .is_ok_and(|r| r.published_seq() >= seq)
    });
}
