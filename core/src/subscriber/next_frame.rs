//! Reading frames: [`Subscriber::next_frame`], with its futex wait and optional spin, and
//! the end of the frame timeline.

use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorCode, Result};
use crate::frame_ring::reader::RingView;

use super::end::EndReason;
use super::frame_handle::Frame;
use super::frame_source::Got;
use super::state::{Subscriber, WAIT_SLICE};

/// While spinning, the socket is looked at this often. A frame seen by the spin is then read
/// at once, without a socket poll first: a message (SHUTDOWN, ERROR, PING) is handled at most
/// this late, and the spin's hot path has no system call between the publication and the
/// return. Short against any frame interval; one `recv` per 100 µs is ~1 % of the spinning core.
const POLL_WHILE_SPINNING: Duration = Duration::from_micros(100);

impl Subscriber {
    /// The next frame, waiting at most `timeout` (None = forever). Errors: TIMEOUT,
    /// DISCONNECTED (SHUTDOWN, publisher death, or dropped by the publisher).
    pub fn next_frame(&mut self, timeout: Option<Duration>) -> Result<Frame> {
        self.check_here()?;
        let deadline = timeout.map(|t| Instant::now() + t);
        if self.frames.is_none() {
            return Err(Error::new(
                ErrorCode::NotFound,
                "this subscriber did not ask for frames",
            ));
        }
        if let Some(e) = &self.frames_ended {
            return Err(e.clone());
        }
        // True right after a spin saw a publication: the socket was polled at most
        // POLL_WHILE_SPINNING ago (by the spin, or before it at the top of this loop).
        let mut skip_poll = false;
        loop {
            if !std::mem::take(&mut skip_poll) {
                self.poll_connection();
            }
            // What rings of ended connections still hold comes first (their frames are older
            // than any of the current ring's).
            if let Some(got) = self.next_retired_frame() {
                return got;
            }
            if let Some(e) = &self.given_up {
                // Dropped by the publisher: our bit is no longer ours and frames are no longer
                // kept for us, so none is delivered past this point (not even a COPY).
                let e = e.clone();
                self.ended.get_or_insert(EndReason::Kicked);
                return Err(e);
            }
            let source = self.frames.as_mut().expect("checked above");
            // The shutdown flag is loaded *before* the ring is looked at: a publisher that
            // publishes its last frame and leaves between the two loads is then caught by the
            // ring read, never reported as DISCONNECTED with that frame unread.
            let shut_down = source.ring.shm.shutdown_flag().load(Ordering::Acquire) != 0;
            #[cfg(test)]
            super::tests::between_shutdown_and_ring_loads();
            match source.try_read() {
                Got::Frame(mut f) => {
                    f.pts_ns += self.frame_times.shift_for(Some(f.pts_ns));
                    return Ok(f);
                }
                // A frame lost to the writer (lapped, or torn under a COPY): the next one is
                // tried at once, within the deadline, which a writer that tears every copy
                // (frames published faster than they copy, or a hostile one) would otherwise
                // never let come.
                Got::Skipped => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(Error::new(
                            ErrorCode::Timeout,
                            "no whole frame within the timeout: each one was overwritten while \
                             it was read",
                        ));
                    }
                    continue;
                }
                Got::Failed(e) => return Err(e),
                Got::Empty => {}
            }
            // Everything published was delivered: now the end of the stream may be reported.
            if shut_down && self.closing.is_none() {
                self.wait_for_reason();
                if self.closing.is_none() {
                    self.close(
                        Error::new(ErrorCode::Disconnected, "the publisher shut down"),
                        Some(EndReason::Shutdown),
                    );
                }
            }
            if self.closing.is_some() {
                // The old ring is drained (Empty above): follow a new ring or a restarted
                // publisher, or end, for good: nothing published after the end is delivered.
                if let Err(e) = self.reopen_or_end(deadline) {
                    if self.is_end(&e) {
                        self.frames_ended = Some(e.clone());
                        self.mark_ended();
                    }
                    return Err(e);
                }
                continue;
            }
            let source = self.frames.as_mut().expect("checked above");
            let left = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(Error::new(
                            ErrorCode::Timeout,
                            "no frame within the timeout",
                        ));
                    }
                    left
                }
                None => WAIT_SLICE,
            };
            let ring = &source.ring;
            if !self.options.spin.is_zero() {
                let (ring, last_seq) = (Arc::clone(ring), source.reader.last_seq);
                if self.spin_for_publish(&ring, last_seq, self.options.spin.min(left)) {
                    skip_poll = true;
                    continue;
                }
            }
            let source = self.frames.as_mut().expect("checked above");
            let ring = &source.ring;
            if ring.counts_waiters() {
                ring.shm.waiters().fetch_add(1, Ordering::SeqCst);
            }
            // The 64-bit field as the publisher stores it (no 32-bit atomic view of it); the
            // futex compares its low half, which changes with every publish.
            let seen = ring.shm.global_seq().load(Ordering::SeqCst);
            if seen == source.reader.last_seq {
                crate::futex::wait(
                    ring.shm.global_seq_word(),
                    seen as u32,
                    Some(left.min(WAIT_SLICE)),
                );
            }
            if ring.counts_waiters() {
                ring.shm.waiters().fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// Poll `global_seq` for up to `budget` until it moves past `last_seq` (true) or the
    /// budget is spent (false); true also when a socket poll on the way (every
    /// [`POLL_WHILE_SPINNING`]) found the connection closing, so that the caller looks at once.
    /// Reads only: a spinning reader costs the publisher nothing (no waiter count, no wake).
    /// The clock is read every 64 loads: cheap, and still within a few microseconds.
    fn spin_for_publish(&mut self, ring: &RingView, last_seq: u64, budget: Duration) -> bool {
        let start = Instant::now();
        let mut polled = start;
        loop {
            for _ in 0..64 {
                if ring.shm.global_seq().load(Ordering::Acquire) != last_seq {
                    return true;
                }
                std::hint::spin_loop();
            }
            let now = Instant::now();
            if now.duration_since(start) >= budget {
                return false;
            }
            if now.duration_since(polled) >= POLL_WHILE_SPINNING {
                self.poll_connection();
                if self.closing.is_some() {
                    return true;
                }
                polled = now;
            }
        }
    }

    /// After the shutdown flag was seen: give the socket a moment to say why (a SHUTDOWN
    /// follows the flag), so that a new ring is told from the end of the stream.
    fn wait_for_reason(&mut self) {
        let deadline = Instant::now() + Duration::from_millis(500);
        while self.closing.is_none() && Instant::now() < deadline {
            let mut fds = [nix::poll::PollFd::new(
                self.stream.as_fd(),
                nix::poll::PollFlags::POLLIN,
            )];
            let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(20u16));
            self.poll_connection();
        }
    }
}
