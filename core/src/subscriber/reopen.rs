//! Going on after the connection ended: a new frame ring of the same publisher (SHUTDOWN
//! NEW_RING) is always followed, a restarted publisher with `reconnect`. The rings of ended
//! connections are kept until what they hold is delivered.

use std::time::{Duration, Instant};

use crate::error::{Error, ErrorCode, Result};
use crate::packet_ring::PacketInfo;

use super::end::EndReason;
use super::frame_handle::Frame;
use super::frame_source::{FrameSource, Got};
use super::handshake;
use super::state::{Reopen, Retired, Subscriber, MAX_RETIRED};

/// The outcome of one attempt to reopen.
enum Reopened {
    /// Connected: read on.
    Yes,
    /// Still waiting (the caller's timeout is up first).
    NotYet,
    /// Nothing to reopen: the stream ends.
    No,
}

impl Subscriber {
    /// The connection ended and what it delivered is drained: subscribe again where that is
    /// wanted. A new frame ring (SHUTDOWN NEW_RING) is followed always, within the
    /// connect timeout, keeping the packet reader (the packet ring did not change); a
    /// restarted publisher only with `reconnect`, within that bound, with fresh frame and
    /// packet readers. One call tries until the caller's `deadline` at most (NotYet after
    /// it), so that callers that poll stay responsive.
    fn reopen(&mut self, deadline: Option<Instant>) -> Result<Reopened> {
        let plan = match self.reopening {
            Some(plan) => plan,
            None if self.reopens_over => return Ok(Reopened::No),
            None if self.new_ring && self.frames.is_some() => Reopen {
                restart: false,
                until: Instant::now() + self.options.connect_timeout,
            },
            None => match (self.options.reconnect, &self.given_up) {
                (Some(bound), None) => Reopen {
                    restart: true,
                    until: Instant::now() + bound,
                },
                _ => return Ok(Reopened::No),
            },
        };
        self.reopening = Some(plan);
        let stop = deadline.map_or(plan.until, |d| d.min(plan.until));
        let mut opts = self.options.clone();
        if !plan.restart {
            opts.want_frames = true;
            opts.want_packets = false;
        }
        let mut fresh = loop {
            let left = plan.until.saturating_duration_since(Instant::now());
            opts.connect_timeout = left
                .min(self.options.connect_timeout)
                .max(Duration::from_millis(10));
            let e = match Subscriber::connect_to(self.key.as_str(), &opts, Some(self.publisher_uid))
            {
                Ok(s) => break s,
                Err(e) => e,
            };
            // A listener of another uid is not our publisher, and is never subscribed to. It
            // does not end the wait: the key's socket can only be taken while the publisher is
            // away, ours can come back once the impostor leaves, and until then the reader
            // waits as it would for an absent publisher. The refusal is what reads return
            // while waiting, and the end of the stream (PERMISSION) if the wait runs out.
            let impostor = handshake::is_impostor(&e);
            if impostor {
                if self.refused.is_none() {
                    // Once per wait on stderr too: a reader that only sees TIMEOUTs (a tool
                    // that retries them) still tells its operator why.
                    crate::util::diag!("cuframes: {}: {}", self.key.as_str(), e.message());
                }
                self.refused = Some(e.clone());
            }
            // No publisher (yet), a stale socket, one without the rings asked for yet, or one
            // mid-replacement: wait for it. So for a ring whose name another uid took between
            // HELLO_RESP and the open (the publisher we waited for went again, or replaced
            // the ring): the next attempt meets the publisher's ring or its absence.
            let retryable = impostor
                || handshake::is_foreign_object(&e)
                || matches!(
                    e.code(),
                    ErrorCode::Disconnected
                        | ErrorCode::NotFound
                        | ErrorCode::Format
                        | ErrorCode::Timeout
                        | ErrorCode::Io
                );
            if retryable && Instant::now() < plan.until {
                if Instant::now() >= stop {
                    return Ok(Reopened::NotYet);
                }
                // An impostor is asked again less often: each attempt is a connection to it.
                let pause = if impostor { 100 } else { 10 };
                std::thread::sleep(Duration::from_millis(pause));
                continue;
            }
            self.reopening = None;
            let what = if plan.restart {
                "the publisher did not come back in time"
            } else {
                "cannot follow the publisher's new frame ring"
            };
            let refused = self.refused.take();
            if !retryable {
                return Err(Error::new(e.code(), format!("{what}: {}", e.message())));
            }
            // The wait is over: the stream ends as a stream ends (DISCONNECTED, or PERMISSION
            // when only an impostor answered), for good (no further wait on the next call),
            // once what is left is read.
            let end = match refused {
                Some(r) => Error::new(ErrorCode::Permission, format!("{what}: {}", r.message())),
                None => Error::new(ErrorCode::Disconnected, format!("{what} ({})", e.message())),
            };
            self.closing = Some(end);
            // A clean shutdown stays one when no publisher followed it; anything else is a
            // publisher lost (a new ring that could not be followed included).
            self.closing_reason.get_or_insert(EndReason::PublisherLost);
            self.reopens_over = true;
            self.new_ring = false;
            return Ok(Reopened::No);
        };
        // The old connection and rings go with `fresh`: its drop revokes the old ring's ACKs.
        // The old socket is closed by the publisher (or dead): no UNSUBSCRIBE on it.
        std::mem::swap(&mut self.stream, &mut fresh.stream);
        std::mem::swap(&mut self.inbox, &mut fresh.inbox);
        std::mem::swap(&mut self.bit, &mut fresh.bit);
        std::mem::swap(&mut self.frames, &mut fresh.frames);
        // What the old rings hold is delivered first (their ACKs were revoked at the close);
        // the timelines re-anchor on the new publisher once it is.
        if let Some(mut old) = fresh.frames.take() {
            old.ring.revoke_acks();
            old.end_here();
            self.retire(Retired {
                source: old,
                restart: plan.restart,
                until: None,
            });
        }
        if plan.restart {
            std::mem::swap(&mut self.packets, &mut fresh.packets);
            if let Some(old) = fresh.packets.take() {
                self.retired_packets.push_back(Retired {
                    source: old,
                    restart: true,
                    until: self.packets_until,
                });
            }
            self.restarts += 1;
        } else {
            self.generations += 1;
        }
        self.packets_until = None;
        fresh.closing = Some(Error::new(ErrorCode::Disconnected, "replaced"));
        drop(fresh);
        self.closing = None;
        self.closing_reason = None;
        self.given_up = None;
        self.new_ring = false;
        self.reopening = None;
        self.refused = None;
        Ok(Reopened::Yes)
    }

    /// Keep an old frame ring for its frames, dropping the oldest beyond [`MAX_RETIRED`].
    fn retire(&mut self, old: Retired<FrameSource>) {
        if self.retired_frames.len() >= MAX_RETIRED {
            if let Some(oldest) = self.retired_frames.pop_front() {
                self.drained_frames(oldest);
            }
        }
        self.retired_frames.push_back(old);
    }

    /// A retired frame ring is done with: after a restarted publisher's ring, the frame
    /// timeline re-anchors on the next frame.
    fn drained_frames(&mut self, old: Retired<FrameSource>) {
        if old.restart {
            self.frame_times.restarted();
        }
    }

    /// The next frame of a retired ring, oldest ring first; None when they are all drained.
    pub(super) fn next_retired_frame(&mut self) -> Option<Result<Frame>> {
        while let Some(old) = self.retired_frames.front_mut() {
            match old.source.try_read() {
                Got::Frame(mut f) => {
                    f.pts_ns += self.frame_times.shift_for(Some(f.pts_ns));
                    return Some(Ok(f));
                }
                Got::Skipped => continue,
                Got::Empty => {
                    let old = self.retired_frames.pop_front().expect("front");
                    self.drained_frames(old);
                }
                Got::Failed(e) => {
                    // A ring in error has nothing more to give: the next read goes on.
                    let old = self.retired_frames.pop_front().expect("front");
                    self.drained_frames(old);
                    return Some(Err(e));
                }
            }
        }
        None
    }

    /// The next packet of a retired packet ring (a publisher followed by a restarted one), up
    /// to what it published before its end; None when they are all drained.
    pub(super) fn next_retired_packet(
        &mut self,
        out: &mut dyn crate::packet_ring::PacketSink,
    ) -> Option<Result<PacketInfo>> {
        while let Some(old) = self.retired_packets.front_mut() {
            let got = old.source.next_packet_into(Some(Duration::ZERO), &mut *out);
            match got {
                Ok(info) if !old.until.is_some_and(|until| info.seq > until) => {
                    return Some(Ok(info))
                }
                // Not consumed: the next call reads the same packet again.
                Err(e) if e.code() == ErrorCode::NoMemory => return Some(Err(e)),
                // Drained (Timeout, Disconnected, past its end), or in error: the restarted
                // publisher's packets follow, the first flagged DISCONTINUITY.
                other => {
                    let old = self.retired_packets.pop_front().expect("front");
                    if old.restart {
                        self.packet_times.restarted();
                        self.packet_gap = true;
                    }
                    match other {
                        Err(e)
                            if !matches!(
                                e.code(),
                                ErrorCode::Timeout | ErrorCode::Disconnected
                            ) =>
                        {
                            return Some(Err(e))
                        }
                        _ => {}
                    }
                }
            }
        }
        None
    }

    pub(super) fn reopen_or_end(&mut self, deadline: Option<Instant>) -> Result<()> {
        match self.reopen(deadline)? {
            Reopened::Yes => Ok(()),
            Reopened::NotYet => Err(Error::new(
                ErrorCode::Timeout,
                match &self.refused {
                    Some(r) => format!("waiting for the publisher to come back ({})", r.message()),
                    None => String::from("waiting for the publisher to come back"),
                },
            )),
            Reopened::No => Err(self
                .closing
                .clone()
                .unwrap_or_else(|| Error::new(ErrorCode::Disconnected, "disconnected"))),
        }
    }
}
