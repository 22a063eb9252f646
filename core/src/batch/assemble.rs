//! The assembly policies: which frame of each camera goes into the next batch, and which
//! cameras are valid in it ([`super::BatchPolicy`]).

use std::time::{Duration, Instant};

use crate::cuda::Stream;

use super::camera::{Camera, Stop};
use super::options::BatchPolicy;

/// Bring every camera's held frame up to date per `policy`, waiting as the policy allows;
/// returns which cameras are valid in the batch (their held frame goes into it), or None when
/// `stop` said to stop during a wait (the frames read so far stay held for the next batch).
pub(super) fn assemble(
    cameras: &mut [Camera],
    policy: BatchPolicy,
    stream: Option<&Stream>,
    retry: Duration,
    stop: &mut Stop<'_>,
) -> Option<Vec<bool>> {
    match policy {
        BatchPolicy::Latest => {
            for c in cameras.iter_mut() {
                c.drain(stream, retry);
            }
            Some(cameras.iter().map(|c| c.held.is_some()).collect())
        }
        BatchPolicy::All { timeout } => {
            let deadline = Instant::now() + timeout;
            for c in cameras.iter_mut() {
                c.drain(stream, retry);
            }
            // Every camera must have a new frame, so waiting for them one after the other is
            // as quick as waiting for all at once: the batch is complete when the last one
            // is. A camera past the deadline is read without waiting.
            for c in cameras.iter_mut() {
                if c.is_connected() && !c.has_new() {
                    c.wait_newer(deadline, stream, retry, stop);
                    if stop.said() {
                        return None;
                    }
                }
            }
            // What came meanwhile from the cameras read first.
            for c in cameras.iter_mut() {
                c.drain(stream, retry);
            }
            Some(cameras.iter().map(Camera::has_new).collect())
        }
        BatchPolicy::Aligned { window, timeout } => {
            aligned(cameras, window, timeout, stream, retry, stop)
        }
    }
}

/// [`BatchPolicy::Aligned`]: wait for the camera that lags the newest frame by more than the
/// window, until every connected camera has a new frame within it or the deadline passes.
fn aligned(
    cameras: &mut [Camera],
    window: Duration,
    timeout: Duration,
    stream: Option<&Stream>,
    retry: Duration,
    stop: &mut Stop<'_>,
) -> Option<Vec<bool>> {
    let deadline = Instant::now() + timeout;
    let window = i64::try_from(window.as_nanos()).unwrap_or(i64::MAX);
    loop {
        for c in cameras.iter_mut() {
            c.drain(stream, retry);
        }
        let newest = cameras
            .iter()
            .filter(|c| c.has_new())
            .filter_map(|c| c.held.as_ref().map(|h| h.frame.pts_ns))
            .max();
        let inside = |c: &Camera| {
            c.has_new()
                && newest.is_some_and(|n| {
                    c.held
                        .as_ref()
                        .is_some_and(|h| h.frame.pts_ns >= n.saturating_sub(window))
                })
        };
        let lagging = cameras.iter().position(|c| c.is_connected() && !inside(c));
        let Some(i) = lagging else {
            return Some(cameras.iter().map(inside).collect());
        };
        if Instant::now() >= deadline {
            return Some(cameras.iter().map(inside).collect());
        }
        // The lagging camera is needed whatever the others do: wait for its next frame.
        let came = cameras[i].wait_newer(deadline, stream, retry, stop);
        if stop.said() {
            return None;
        }
        if !came && !cameras[i].is_connected() {
            // Lost while waiting: the others are looked at again without it.
            continue;
        }
    }
}
