//! What the publisher tells about each admitted subscriber ([`SubscriberInfo`]): its lag and
//! counters, read from its ACK page or, for a plain v4 peer, from the frame SHM.

use std::sync::atomic::Ordering;

use super::subscribers::Table;
use crate::frame_ring::ack_page::Counter;
use crate::frame_ring::shm_region::{
    SUB_DELIVERED_OFFSET, SUB_DROPPED_OVERRUN_OFFSET, SUB_DROPPED_TORN_OFFSET,
};
use crate::frame_ring::FrameWriter;

/// One subscriber as the publisher sees it (operator statistics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriberInfo {
    /// Its subscriber bit (1..=31).
    pub bit: usize,
    /// Its process id (SO_PEERCRED; 0 for a peer in another PID namespace).
    pub pid: u32,
    /// The name it gave at HELLO.
    pub name: String,
    /// It reads frames.
    pub wants_frames: bool,
    /// It reads packets.
    pub wants_packets: bool,
    /// Publisher seq minus the subscriber's last ACK (frames).
    pub lag: u64,
    /// The seq of the last frame it ACKed.
    pub last_seen_seq: u64,
    /// CLOCK_REALTIME of the last ACK, 0 = none yet.
    pub last_ack_ns: i64,
    /// Counters the subscriber keeps in its slot (extension, docs/protocol.md).
    pub delivered: u64,
    /// Frames it lost because the publisher lapped it.
    pub dropped_overrun: u64,
    /// Frames it lost because a copy was torn (the slot was rewritten during the copy).
    pub dropped_torn: u64,
}

/// Every subscriber of `table`, with what `ring` (the current frame ring, if any) and its ACK
/// page say of it. The caller holds the table and took the ring before it (lock hierarchy).
pub(super) fn list(ring: Option<&FrameWriter>, table: &Table) -> Vec<SubscriberInfo> {
    table
        .iter()
        .map(|(bit, e)| {
            let (last_seen, last_ack, delivered, overrun, torn, seq) = match (ring, &e.ack_page) {
                (Some(r), Some(page)) => (
                    page.last_seen_seq(),
                    page.last_ack_ns(),
                    page.counter(Counter::Delivered),
                    page.counter(Counter::DroppedOverrun),
                    page.counter(Counter::DroppedTorn),
                    r.published_seq(),
                ),
                (Some(r), None) => (
                    r.shm.sub_last_seen(bit).load(Ordering::Acquire),
                    r.shm.sub_last_ack_ns(bit).load(Ordering::Acquire) as i64,
                    r.shm
                        .sub_counter(bit, SUB_DELIVERED_OFFSET)
                        .load(Ordering::Relaxed),
                    r.shm
                        .sub_counter(bit, SUB_DROPPED_OVERRUN_OFFSET)
                        .load(Ordering::Relaxed),
                    r.shm
                        .sub_counter(bit, SUB_DROPPED_TORN_OFFSET)
                        .load(Ordering::Relaxed),
                    r.published_seq(),
                ),
                (None, _) => (0, 0, 0, 0, 0, 0),
            };
            SubscriberInfo {
                bit,
                pid: e.pid,
                name: e.name.clone(),
                wants_frames: e.wants_frames,
                wants_packets: e.wants_packets,
                lag: if e.wants_frames {
                    seq.saturating_sub(last_seen.max(e.initial_seq))
                } else {
                    0
                },
                last_seen_seq: last_seen,
                last_ack_ns: last_ack,
                delivered,
                dropped_overrun: overrun,
                dropped_torn: torn,
            }
        })
        .collect()
}
