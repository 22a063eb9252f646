//! Packet SHM layout (§10.2, §10.4).

use core::mem::{offset_of, size_of};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::MAX_EXTRADATA_SIZE;

/// Header of `/dev/shm/cuframes-<key>-packets` (§10.2), 0x1040 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct PacketRingHeader {
    /// [`super::PACKET_MAGIC`].
    pub magic: u32,
    /// [`super::PROTOCOL_VERSION`].
    pub proto_version: u32,
    /// N, 1..=1024.
    pub ring_slots: u32,
    /// Size of the wrap-around data ring in bytes.
    pub data_size: u32,
    /// `AV_CODEC_ID_*`.
    pub codec_id: u32,
    /// <= 4096.
    pub codec_extradata_size: u32,
    /// pid of the publishing process.
    pub producer_pid: u64,
    /// Atomic; low 32 bits double as the futex word waiting readers sleep on (R13).
    pub global_seq: u64,
    /// Atomic.
    pub last_keyframe_seq: u64,
    /// Atomic absolute byte cursor (R8: advanced before the copy).
    pub write_offset: u64,
    /// Atomic.
    pub shutdown_flag: u64,
    /// The codec's extradata, its first `codec_extradata_size` bytes.
    pub codec_extradata: [u8; MAX_EXTRADATA_SIZE],
}

/// Packet slot entry (§10.4), 64 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct PacketSlotEntry {
    /// Atomic; `INVALID_SEQ` while rewritten (R29).
    pub seq: u64,
    /// Presentation time in ns ([`super::NO_PTS`] when unknown).
    pub pts_ns: i64,
    /// Decoding time in ns ([`super::NO_PTS`] when unknown).
    pub dts_ns: i64,
    /// Absolute cursor; index = `data_offset % header.data_size`.
    pub data_offset: u64,
    /// Bytes of the packet.
    pub data_size: u32,
    /// Packet flags (`PACKET_FLAG_*`).
    pub flags: u32,
    /// Reserved; zero.
    pub reserved: [u8; 24],
}

/// Size of the packet SHM header.
pub const PACKET_HEADER_SIZE: usize = 0x1040;
/// Size of one slot entry.
pub const PACKET_SLOT_SIZE: usize = 64;

/// Offset of slot `index` in the packet SHM.
pub const fn packet_slot_offset(index: usize) -> usize {
    PACKET_HEADER_SIZE + index * PACKET_SLOT_SIZE
}

/// Offset of the data ring for `ring_slots` slots.
pub const fn packet_data_offset(ring_slots: usize) -> usize {
    PACKET_HEADER_SIZE + ring_slots * PACKET_SLOT_SIZE
}

/// Total SHM size for a ring geometry (§10.2).
pub const fn packet_shm_size(ring_slots: usize, data_size: usize) -> usize {
    packet_data_offset(ring_slots) + data_size
}

const _: () = {
    assert!(size_of::<PacketRingHeader>() == PACKET_HEADER_SIZE);
    assert!(offset_of!(PacketRingHeader, magic) == 0x0000);
    assert!(offset_of!(PacketRingHeader, proto_version) == 0x0004);
    assert!(offset_of!(PacketRingHeader, ring_slots) == 0x0008);
    assert!(offset_of!(PacketRingHeader, data_size) == 0x000C);
    assert!(offset_of!(PacketRingHeader, codec_id) == 0x0010);
    assert!(offset_of!(PacketRingHeader, codec_extradata_size) == 0x0014);
    assert!(offset_of!(PacketRingHeader, producer_pid) == 0x0018);
    assert!(offset_of!(PacketRingHeader, global_seq) == 0x0020);
    assert!(offset_of!(PacketRingHeader, last_keyframe_seq) == 0x0028);
    assert!(offset_of!(PacketRingHeader, write_offset) == 0x0030);
    assert!(offset_of!(PacketRingHeader, shutdown_flag) == 0x0038);
    assert!(offset_of!(PacketRingHeader, codec_extradata) == 0x0040);

    assert!(size_of::<PacketSlotEntry>() == PACKET_SLOT_SIZE);
    assert!(offset_of!(PacketSlotEntry, seq) == 0x00);
    assert!(offset_of!(PacketSlotEntry, pts_ns) == 0x08);
    assert!(offset_of!(PacketSlotEntry, dts_ns) == 0x10);
    assert!(offset_of!(PacketSlotEntry, data_offset) == 0x18);
    assert!(offset_of!(PacketSlotEntry, data_size) == 0x20);
    assert!(offset_of!(PacketSlotEntry, flags) == 0x24);
    assert!(offset_of!(PacketSlotEntry, reserved) == 0x28);
};
