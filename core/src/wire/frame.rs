//! Frame SHM layout (§2) with its fixed 7424-byte header (R1).

use core::mem::{offset_of, size_of};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::{MAX_RING_SIZE, MAX_SUBSCRIBER_SLOTS};

/// Frame meta (§2.1), 64 bytes; also carried verbatim in HELLO_RESP (§3.4).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct FrameMeta {
    /// `cuframes_format_t` ([`super::Format`]).
    pub format: u32,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Bytes per row of plane 0.
    pub pitch_y: u32,
    /// Bytes per row of the chroma plane(s); 0 for packed formats.
    pub pitch_uv: u32,
    /// Informational.
    pub bits_per_pixel: u32,
    /// Sum of the planes, unrounded (R20).
    pub frame_size_bytes: u64,
    /// Zero in v4; the meta extension (`meta_ext`) lives here.
    pub reserved: [u8; 32],
}

/// Slot descriptor (§2.2), 192 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct SlotDescriptor {
    /// Published seq, atomic; `INVALID_SEQ` while the slot is being written (R10).
    pub seq: u64,
    /// Presentation time in ns of the frame in the slot.
    pub pts_ns: i64,
    /// Atomic; bit i = subscriber i ACKed this seq.
    pub ack_bitmap: u64,
    /// Bytes of the frame written.
    pub written_bytes: u64,
    /// Reserved for a memory handle; zero.
    pub reserved_mem_handle: [u8; 64],
    /// Reserved for external use; zero.
    pub reserved_external: [u8; 32],
    /// Reserved; zero.
    pub reserved_a: [u8; 16],
    /// Reserved; zero.
    pub reserved_b: [u8; 48],
}

/// Subscriber slot (§2.3), 128 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct SubscriberSlot {
    /// Atomic [`super::SubscriberState`].
    pub state: u64,
    /// The subscriber's pid, from `SO_PEERCRED`.
    pub consumer_pid: u64,
    /// Last ACKed seq (R23).
    pub last_seen_seq: u64,
    /// CLOCK_REALTIME ns of the last ACK (R23).
    pub last_ack_ns: i64,
    /// ASCII, zero-terminated, at most 31 characters.
    pub consumer_name: [u8; 32],
    /// Reserved; the counters extension lives here.
    pub reserved: [u8; 64],
}

/// The frame SHM object `/dev/shm/cuframes-<key>` (§2.0), always 7424 bytes (R1).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct SharedHeader {
    /// [`super::FRAME_MAGIC`].
    pub magic: u32,
    /// [`super::PROTOCOL_VERSION`].
    pub proto_version: u32,
    /// Version of the library that created the object (diagnostics).
    pub lib_version_major: u32,
    /// Minor version of that library.
    pub lib_version_minor: u32,
    /// Patch version of that library.
    pub lib_version_patch: u32,
    /// Reserved; zero.
    pub reserved_a: u32,
    /// pid of the publishing process.
    pub producer_pid: u64,
    /// Slots in use (1..=16).
    pub ring_size: u64,
    /// Ownership mode: [`super::OWNERSHIP_LIBRARY`].
    pub ownership_mode: u64,
    /// [`super::Policy`].
    pub policy: u64,
    /// Subscribers the publisher admits.
    pub max_subscribers: u64,
    /// The geometry of every frame of the ring.
    pub meta: FrameMeta,
    /// Reserved; zero.
    pub reserved_events: [u8; 64],
    /// Atomic, monotonic; its low 32 bits double as the futex word waiting readers sleep on
    /// (R13).
    pub global_seq: u64,
    /// Atomic; bit i set while subscriber i is active.
    pub subscriber_bitmap: u64,
    /// Atomic; 1 once the publisher shuts down.
    pub shutdown_flag: u64,
    /// The first 4 bytes hold the count of readers sleeping on the futex, so a publish wakes
    /// only when someone waits (R28, [`FRAME_WAITERS_OFFSET`]).
    pub reserved_b: [u8; 40],
    /// The slot descriptors (the first `ring_size` in use).
    pub slots: [SlotDescriptor; MAX_RING_SIZE],
    /// The subscriber slots (bit i = slot i).
    pub subscribers: [SubscriberSlot; MAX_SUBSCRIBER_SLOTS],
}

/// Size of the frame SHM object (R1).
pub const FRAME_SHM_SIZE: usize = 7424;
/// Offset of the count of readers sleeping on the futex (R28; first 4 bytes of
/// `reserved_b`).
pub const FRAME_WAITERS_OFFSET: usize = 0x00D8;
/// Extension (compatible, in `reserved_b` after the futex waiter count): the ring's memory kind
/// plus one (0 = not recorded), so that operators see it without a handshake
/// (`docs/protocol.md`, "Extensions").
pub const FRAME_MEMORY_KIND_OFFSET: usize = 0x00DC;
/// Extension (compatible, in a subscriber slot's `reserved` bytes, §7.3): counters the
/// subscriber keeps for operators. Offsets inside the 128-byte subscriber slot.
pub const SUB_DELIVERED_OFFSET: usize = 0x40;
/// Frames dropped because the publisher lapped the subscriber.
pub const SUB_DROPPED_OVERRUN_OFFSET: usize = 0x48;
/// Frames dropped because they changed while being copied.
pub const SUB_DROPPED_TORN_OFFSET: usize = 0x50;
/// Offset of `slots[0]` and of `subscribers[0]` (R1).
pub const FRAME_SLOTS_OFFSET: usize = 0x0100;
/// Offset of `subscribers[0]`.
pub const FRAME_SUBSCRIBERS_OFFSET: usize = 0x0D00;

/// Byte offset of slot `index` inside the frame SHM.
pub const fn slot_offset(index: usize) -> usize {
    FRAME_SLOTS_OFFSET + index * size_of::<SlotDescriptor>()
}

/// Byte offset of subscriber slot `index` inside the frame SHM.
pub const fn subscriber_offset(index: usize) -> usize {
    FRAME_SUBSCRIBERS_OFFSET + index * size_of::<SubscriberSlot>()
}

// Every offset of §2.0–§2.3, checked at compile time.
const _: () = {
    assert!(size_of::<FrameMeta>() == 64);
    assert!(offset_of!(FrameMeta, format) == 0x00);
    assert!(offset_of!(FrameMeta, width) == 0x04);
    assert!(offset_of!(FrameMeta, height) == 0x08);
    assert!(offset_of!(FrameMeta, pitch_y) == 0x0C);
    assert!(offset_of!(FrameMeta, pitch_uv) == 0x10);
    assert!(offset_of!(FrameMeta, bits_per_pixel) == 0x14);
    assert!(offset_of!(FrameMeta, frame_size_bytes) == 0x18);
    assert!(offset_of!(FrameMeta, reserved) == 0x20);

    assert!(size_of::<SlotDescriptor>() == 192);
    assert!(offset_of!(SlotDescriptor, seq) == 0x00);
    assert!(offset_of!(SlotDescriptor, pts_ns) == 0x08);
    assert!(offset_of!(SlotDescriptor, ack_bitmap) == 0x10);
    assert!(offset_of!(SlotDescriptor, written_bytes) == 0x18);
    assert!(offset_of!(SlotDescriptor, reserved_mem_handle) == 0x20);
    assert!(offset_of!(SlotDescriptor, reserved_external) == 0x60);
    assert!(offset_of!(SlotDescriptor, reserved_a) == 0x80);
    assert!(offset_of!(SlotDescriptor, reserved_b) == 0x90);

    assert!(size_of::<SubscriberSlot>() == 128);
    assert!(offset_of!(SubscriberSlot, state) == 0x00);
    assert!(offset_of!(SubscriberSlot, consumer_pid) == 0x08);
    assert!(offset_of!(SubscriberSlot, last_seen_seq) == 0x10);
    assert!(offset_of!(SubscriberSlot, last_ack_ns) == 0x18);
    assert!(offset_of!(SubscriberSlot, consumer_name) == 0x20);
    assert!(offset_of!(SubscriberSlot, reserved) == 0x40);

    assert!(size_of::<SharedHeader>() == FRAME_SHM_SIZE);
    assert!(offset_of!(SharedHeader, magic) == 0x0000);
    assert!(offset_of!(SharedHeader, proto_version) == 0x0004);
    assert!(offset_of!(SharedHeader, lib_version_major) == 0x0008);
    assert!(offset_of!(SharedHeader, lib_version_minor) == 0x000C);
    assert!(offset_of!(SharedHeader, lib_version_patch) == 0x0010);
    assert!(offset_of!(SharedHeader, reserved_a) == 0x0014);
    assert!(offset_of!(SharedHeader, producer_pid) == 0x0018);
    assert!(offset_of!(SharedHeader, ring_size) == 0x0020);
    assert!(offset_of!(SharedHeader, ownership_mode) == 0x0028);
    assert!(offset_of!(SharedHeader, policy) == 0x0030);
    assert!(offset_of!(SharedHeader, max_subscribers) == 0x0038);
    assert!(offset_of!(SharedHeader, meta) == 0x0040);
    assert!(offset_of!(SharedHeader, reserved_events) == 0x0080);
    assert!(offset_of!(SharedHeader, global_seq) == 0x00C0);
    assert!(offset_of!(SharedHeader, subscriber_bitmap) == 0x00C8);
    assert!(offset_of!(SharedHeader, shutdown_flag) == 0x00D0);
    assert!(offset_of!(SharedHeader, reserved_b) == FRAME_WAITERS_OFFSET);
    assert!(offset_of!(SharedHeader, slots) == FRAME_SLOTS_OFFSET);
    assert!(offset_of!(SharedHeader, subscribers) == FRAME_SUBSCRIBERS_OFFSET);
    assert!(subscriber_offset(MAX_SUBSCRIBER_SLOTS) == FRAME_SHM_SIZE);
    // The extensions sit inside reserved bytes, 64-bit aligned where they are 64-bit.
    assert!(FRAME_MEMORY_KIND_OFFSET == FRAME_WAITERS_OFFSET + 4);
    assert!(FRAME_MEMORY_KIND_OFFSET + 4 <= offset_of!(SharedHeader, slots));
    assert!(SUB_DELIVERED_OFFSET == offset_of!(SubscriberSlot, reserved));
    assert!(SUB_DROPPED_OVERRUN_OFFSET == SUB_DELIVERED_OFFSET + 8);
    assert!(SUB_DROPPED_TORN_OFFSET == SUB_DROPPED_OVERRUN_OFFSET + 8);
    assert!(SUB_DROPPED_TORN_OFFSET + 8 <= size_of::<SubscriberSlot>());
};
