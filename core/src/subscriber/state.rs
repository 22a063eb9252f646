//! The [`Subscriber`] itself: its fields, the small accessors, and the types its fields
//! hold. The operations are the sibling files, one concept each: `connect` (the handshake
//! and the rings it maps), `reopen` (following a new ring or a restarted publisher),
//! `next_frame`, `next_packet`, and `connection` (the socket and the end of the stream).

use std::collections::VecDeque;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorCode, Result};
use crate::format::FrameGeometry;
use crate::frame_ring::reader::FrameStats;
use crate::packet_ring::PacketRingReader;
use crate::paths::Key;
use crate::sock::Inbox;
use crate::util::Origin;
use crate::wire::MemoryKind;

use super::continuity::Continuity;
use super::end::EndReason;
use super::frame_source::FrameSource;
use super::options::SubscriberOptions;

/// A connected subscriber.
pub struct Subscriber {
    pub(super) key: Key,
    pub(super) stream: UnixStream,
    pub(super) inbox: Inbox,
    pub(super) bit: usize,
    pub(super) frames: Option<FrameSource>,
    pub(super) packets: Option<PacketRingReader>,
    /// Why the connection is ending, once it is (SHUTDOWN, ERROR, EOF).
    pub(super) closing: Option<Error>,
    /// The kind of that end; None while open, and for a replaced ring (followed, no end).
    pub(super) closing_reason: Option<EndReason>,
    /// The end a read has reported (DISCONNECTED returned): what `end_reason` says.
    pub(super) ended: Option<EndReason>,
    /// Set when the publisher gave up on this subscriber (ERROR): frames stop at once.
    pub(super) given_up: Option<Error>,
    /// The wait for a new ring or a restarted publisher ran out: what is left is delivered,
    /// then the stream ends, without another wait.
    pub(super) reopens_over: bool,
    /// The end each timeline returned (DISCONNECTED): every later read returns it again, and
    /// nothing published after it is handed out.
    pub(super) frames_ended: Option<Error>,
    pub(super) packets_ended: Option<Error>,
    /// The packet seq published when the connection ended: later packets are not delivered.
    pub(super) packets_until: Option<u64>,
    /// Rings of ended connections (a replaced frame ring, a publisher gone before a
    /// reconnect) that still hold what was published before their end, oldest first. Reads
    /// deliver it before the current rings' (docs/protocol.md), whichever read noticed the end.
    pub(super) retired_frames: VecDeque<Retired<FrameSource>>,
    pub(super) retired_packets: VecDeque<Retired<PacketRingReader>>,
    /// How it connected: what it connects with again to follow a new frame ring.
    pub(super) options: SubscriberOptions,
    /// The publisher replaced its frame ring (SHUTDOWN with reason NEW_RING): once the old
    /// ring is drained, subscribe to the new one instead of ending.
    pub(super) new_ring: bool,
    /// Frame rings followed so far (0: still the first).
    pub(super) generations: u64,
    /// Publishers followed after a restart.
    pub(super) restarts: u64,
    /// A new connection being waited for (a new ring, or a restarted publisher).
    pub(super) reopening: Option<Reopen>,
    /// The uid the publisher ran as at the first connection: every later connection must be
    /// to a publisher of this uid (see `SubscriberOptions::publisher_uid`).
    pub(super) publisher_uid: u32,
    /// The last listener of another uid refused during the current wait (a reconnect or a new
    /// ring): said while waiting, and the end of the stream if the wait runs out.
    pub(super) refused: Option<Error>,
    /// Timestamps kept increasing across restarts, per timeline.
    pub(super) frame_times: Continuity,
    pub(super) packet_times: Continuity,
    /// The next packet is the first of a restarted publisher: flag DISCONTINUITY.
    pub(super) packet_gap: bool,
    /// The process that connected: in a child forked from it, the subscriber is a copy whose
    /// connection and rings are the parent's (see `Drop`).
    pub(super) origin: Origin,
}

/// A ring left behind by `Subscriber::reopen`, still to be drained.
pub(super) struct Retired<T> {
    pub(super) source: T,
    /// Its publisher was followed by a restarted one: that timeline re-anchors once it is
    /// drained (continuity), and the first packet after it is flagged DISCONTINUITY.
    pub(super) restart: bool,
    /// Packets: the seq published when the connection ended (frames keep theirs, `until`).
    pub(super) until: Option<u64>,
}

/// Retired frame rings kept at most: each keeps its slots mapped, and a ring replaced more
/// often than frames are read loses its frames to lapping anyway.
pub(super) const MAX_RETIRED: usize = 4;

/// What `Subscriber::reopen` is waiting for, and until when.
#[derive(Debug, Clone, Copy)]
pub(super) struct Reopen {
    /// A restarted publisher (frames and packets anew), not only a new frame ring.
    pub(super) restart: bool,
    pub(super) until: Instant,
}

/// How long one futex sleep lasts before the socket is looked at again: bounds how late a
/// publisher crash is noticed, and costs ~10 wake-ups a second when idle.
pub(super) const WAIT_SLICE: Duration = Duration::from_millis(100);

impl Subscriber {
    /// Change `SubscriberOptions::spin` (zero: sleep at once), for frames and packets.
    pub fn set_spin(&mut self, spin: Duration) {
        // Frames read it from here, and a reopened connection (reconnect, a new ring) takes
        // its packet reader's from here too.
        self.options.spin = spin;
        if let Some(p) = self.packets.as_mut() {
            p.set_spin(spin);
        }
    }

    /// The uid the publisher runs as (SO_PEERCRED at the first connection; every later one
    /// is to a publisher of the same uid).
    pub fn publisher_uid(&self) -> u32 {
        self.publisher_uid
    }

    /// True for the error that ends a timeline for good: DISCONNECTED, or the PERMISSION of a
    /// wait for the publisher that only an impostor answered.
    pub(super) fn is_end(&self, e: &Error) -> bool {
        e.code() == ErrorCode::Disconnected
            || (self.reopens_over && e.code() == ErrorCode::Permission)
    }

    /// How many times this subscriber followed a restarted publisher (`reconnect`).
    pub fn restarts(&self) -> u64 {
        self.restarts
    }

    /// How many times the publisher replaced its frame ring and this subscriber followed
    /// (frames of a new ring may have another size or format: each [`Frame`](super::Frame) has its
    /// layout).
    pub fn ring_generations(&self) -> u64 {
        self.generations
    }

    /// The publisher's key.
    pub fn key(&self) -> &str {
        self.key.as_str()
    }

    /// The subscriber bit (1..=31) the publisher assigned.
    pub fn bit(&self) -> usize {
        self.bit
    }

    /// The geometry of the current frame ring's frames (None: no frames subscribed).
    pub fn frame_layout(&self) -> Option<&FrameGeometry> {
        self.frames.as_ref().map(|f| &*f.layout)
    }

    /// True when frames are handed out without a copy (ZERO_COPY granted, R12).
    pub fn is_zero_copy(&self) -> bool {
        self.frames.as_ref().is_some_and(|f| f.zero_copy)
    }

    /// The colour description the publisher announced for its frame ring (None: none
    /// recorded, or no frames subscribed).
    pub fn colour(&self) -> Option<crate::colour::ColourInfo> {
        self.frames.as_ref().and_then(|f| f.colour)
    }

    /// This process's ordinal of the GPU the frame ring is on (CUDA rings; None for host
    /// rings). Resolved from the publisher's GPU UUID where it announces one.
    pub fn cuda_device(&self) -> Option<i32> {
        self.frames
            .as_ref()
            .and_then(|f| f.ring.slots.cuda_device())
            .map(|d| d.ordinal())
    }

    /// Where the frame ring's slots are: host memfds or CUDA VMM (None: no frames
    /// subscribed).
    pub fn memory_kind(&self) -> Option<MemoryKind> {
        self.frames.as_ref().map(|f| f.ring.slots.kind())
    }

    /// The frame reader's counters (delivered, overwritten before they were read, torn);
    /// zero without frames.
    pub fn frame_stats(&self) -> FrameStats {
        self.frames
            .as_ref()
            .map(|f| f.reader.stats)
            .unwrap_or_default()
    }

    /// Reads are refused in a child forked from the subscribing process: the connection,
    /// its messages (SHUTDOWN, a new ring) and the ACKs are the parent's, which goes on
    /// reading.
    pub(super) fn check_here(&self) -> Result<()> {
        if self.origin.is_here() {
            return Ok(());
        }
        Err(Error::new(
            ErrorCode::InvalidArg,
            format!(
                "this subscriber of {:?} belongs to the process that connected it (this one \
                 was forked from it): a child reads with a subscriber of its own",
                self.key.as_str()
            ),
        ))
    }

    /// A read is returning the end of the stream: from now on `end_reason` says why. Without
    /// a recorded reason the end is the packet ring's own shutdown flag, which only its
    /// publisher sets (a killed publisher leaves it clear, and its socket says so).
    pub(super) fn mark_ended(&mut self) {
        if self.ended.is_none() {
            self.ended = Some(self.closing_reason.unwrap_or(EndReason::Shutdown));
        }
    }

    /// Why the stream ended, once a read has returned its end (DISCONNECTED, or PERMISSION
    /// after a reconnect only an impostor answered); None before. A shutdown is the normal
    /// end; the others ([`EndReason::is_clean`] false) are failures a reader should report.
    /// A new frame ring or a restarted publisher that is followed (`reconnect`) is no end.
    pub fn end_reason(&self) -> Option<EndReason> {
        self.ended
    }
}
