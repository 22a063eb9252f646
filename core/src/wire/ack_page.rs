//! The ACK page (our negotiated extension, `docs/protocol.md` "ACK pages"): one sealed memfd
//! per frame subscriber, created by the publisher and passed with ACK_PAGE (0x06). It holds
//! everything a subscriber writes, so that the frame SHM can be read-only for subscribers.
//! The publisher reads nothing else from a subscriber, and from the page only that
//! subscriber's ACKs and counters.

use core::mem::{offset_of, size_of};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::MAX_RING_SIZE;

/// "ACK page" magic, written by the publisher.
pub const ACK_PAGE_MAGIC: u32 = 0xCC7C_1DAC;
/// Layout version of the page.
pub const ACK_PAGE_VERSION: u32 = 1;
/// Size of the memfd: one page.
pub const ACK_PAGE_SIZE: usize = 4096;

/// Layout of the page. Every field but `magic` and `version` is written by the subscriber
/// only, with atomics.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct AckPage {
    /// [`ACK_PAGE_MAGIC`].
    pub magic: u32,
    /// [`ACK_PAGE_VERSION`].
    pub version: u32,
    /// Atomic; incremented after every ACK. Under STRICT_WAIT a publisher waiting for this
    /// subscriber sleeps on it as a futex word, and the subscriber wakes it.
    pub ack_count: u32,
    /// Atomic; the subscriber stores 1 once it has mapped the ring's slots (the READY step of
    /// the VMM import, §3.7).
    /// Only a hint for the publisher's wait for subscribers (`ready_subscriber_count`), never
    /// for what it may overwrite.
    pub ready: u32,
    /// Atomic; `acked_seq[k]` = the seq of the frame in slot k this subscriber ACKed last. The
    /// publisher counts frame s in slot k as ACKed exactly when `acked_seq[k] == s`.
    pub acked_seq: [u64; MAX_RING_SIZE],
    /// Atomic; the highest seq ACKed (`last_seen_seq` of the subscriber slot, R23, for operators).
    pub last_seen_seq: u64,
    /// Atomic; CLOCK_REALTIME ns of the last ACK (`last_ack_ns` of the subscriber slot, R23).
    pub last_ack_ns: i64,
    /// Atomic counters for operators, as in the subscriber slot extension.
    pub delivered: u64,
    /// Frames dropped because the publisher lapped the subscriber.
    pub dropped_overrun: u64,
    /// Frames dropped because they changed while being copied.
    pub dropped_torn: u64,
    /// Reserved; zero.
    pub reserved_b: [u8; ACK_PAGE_SIZE - 0xB8],
}

/// Offset of `ack_count`.
pub const ACK_PAGE_ACK_COUNT_OFFSET: usize = 0x08;
/// Offset of `ready`.
pub const ACK_PAGE_READY_OFFSET: usize = 0x0C;
/// Offset of `acked_seq`.
pub const ACK_PAGE_ACKED_SEQ_OFFSET: usize = 0x10;
/// Offset of `last_seen_seq`.
pub const ACK_PAGE_LAST_SEEN_OFFSET: usize = 0x90;
/// Offset of `last_ack_ns`.
pub const ACK_PAGE_LAST_ACK_NS_OFFSET: usize = 0x98;
/// Offset of `delivered`.
pub const ACK_PAGE_DELIVERED_OFFSET: usize = 0xA0;
/// Offset of `dropped_overrun`.
pub const ACK_PAGE_DROPPED_OVERRUN_OFFSET: usize = 0xA8;
/// Offset of `dropped_torn`.
pub const ACK_PAGE_DROPPED_TORN_OFFSET: usize = 0xB0;

const _: () = {
    assert!(size_of::<AckPage>() == ACK_PAGE_SIZE);
    assert!(offset_of!(AckPage, magic) == 0x00);
    assert!(offset_of!(AckPage, version) == 0x04);
    assert!(offset_of!(AckPage, ack_count) == ACK_PAGE_ACK_COUNT_OFFSET);
    assert!(offset_of!(AckPage, ready) == ACK_PAGE_READY_OFFSET);
    assert!(offset_of!(AckPage, acked_seq) == ACK_PAGE_ACKED_SEQ_OFFSET);
    assert!(offset_of!(AckPage, last_seen_seq) == ACK_PAGE_LAST_SEEN_OFFSET);
    assert!(offset_of!(AckPage, last_ack_ns) == ACK_PAGE_LAST_ACK_NS_OFFSET);
    assert!(offset_of!(AckPage, delivered) == ACK_PAGE_DELIVERED_OFFSET);
    assert!(offset_of!(AckPage, dropped_overrun) == ACK_PAGE_DROPPED_OVERRUN_OFFSET);
    assert!(offset_of!(AckPage, dropped_torn) == ACK_PAGE_DROPPED_TORN_OFFSET);
    assert!(offset_of!(AckPage, reserved_b) == 0xB8);
};
