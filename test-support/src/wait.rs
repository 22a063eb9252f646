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
