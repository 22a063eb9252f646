//! Protocol v4 wire layer: the constants, enums and byte layouts of `protocol-v4.md` with the
//! project's resolutions (`docs/protocol.md`, R1–R33).
//!
//! The shared-memory structs are `repr(C)` with native integers rather than zerocopy's
//! byte-order wrappers: the `global_seq`, `seq` and bitmap fields are accessed atomically
//! from several processes, which needs natural alignment, and the byte-order wrappers have
//! alignment 1. The protocol is little-endian only (§0), so big-endian targets are refused
//! at compile time instead.

pub mod ack_page;
pub mod frame;
pub mod generation;
pub mod gop_store;
pub mod meta_ext;
pub mod packet;
mod shm_header;

pub use shm_header::{PRODUCER_PID_OFFSET, SHM_MAGICS};

#[cfg(not(target_endian = "little"))]
compile_error!("cuframes protocol v4 is little-endian only (protocol-v4.md, header)");

/// Magic of the frame SHM header (§2.0).
pub const FRAME_MAGIC: u32 = 0xCC7C_1DCE;
/// Magic of the v1–v3 frame SHM header; a v4 reader refuses it.
pub const LEGACY_FRAME_MAGIC: u32 = 0xCC7C_1DCC;
/// Magic of the packet SHM header (§10.2).
pub const PACKET_MAGIC: u32 = 0xCC7C_1DCD;
/// The wire protocol version this library speaks (§7.1).
pub const PROTOCOL_VERSION: u32 = 4;

/// Library version written into the SHM header for diagnostics (§7.2).
pub const LIB_VERSION: (u32, u32, u32) = (0, 4, 0);

/// Frame ring sizes (§2.0).
pub const MAX_RING_SIZE: usize = 16;
/// Subscriber slots in the frame SHM header (bit 0 included).
pub const MAX_SUBSCRIBER_SLOTS: usize = 32;
/// Bit 0 is a sentinel (§2.3, R2): bits 1..=31 are usable.
pub const MAX_SUBSCRIBERS: usize = 31;

/// Packet ring limits (§10.2, §10.3).
pub const MAX_PACKET_RING_SLOTS: u32 = 1024;
/// Largest codec extradata in the packet SHM header.
pub const MAX_EXTRADATA_SIZE: usize = 4096;
/// Packet slots of a ring when the publisher names no count.
pub const DEFAULT_PACKET_RING_SLOTS: u32 = 64;
/// Bytes of a packet data ring when the publisher names no size.
pub const DEFAULT_PACKET_DATA_SIZE: u32 = 8 * 1024 * 1024;

/// `seq` value of a slot that holds nothing valid (§2.2, §10.4, R10).
pub const INVALID_SEQ: u64 = u64::MAX;
/// Missing packet pts/dts (R25).
pub const NO_PTS: i64 = i64::MIN;

/// Key length limit (§1).
pub const MAX_KEY_LEN: usize = 63;
/// Consumer names are stored in 32 bytes with a terminator (§2.3).
pub const MAX_CONSUMER_NAME_LEN: usize = 31;

/// `cuframes_format_t` (R7).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// No frames (a packet-only publisher).
    None = 0,
    /// Y plane, interleaved UV plane (4:2:0), 8 bits.
    Nv12 = 1,
    /// As NV12 with 16-bit samples holding 10 bits at the top.
    P010 = 2,
    /// As NV12 with 16-bit samples.
    P016 = 3,
    /// Y, U and V planes, 4:2:0, 8 bits.
    Yuv420p = 4,
    /// Y, U and V planes, 4:4:4, 8 bits.
    Yuv444p = 5,
    /// Packed R, G, B, A bytes.
    Rgba = 6,
    /// Packed B, G, R, A bytes.
    Bgra = 7,
}

impl Format {
    /// Every format, in wire order.
    pub const ALL: [Format; 8] = [
        Format::None,
        Format::Nv12,
        Format::P010,
        Format::P016,
        Format::Yuv420p,
        Format::Yuv444p,
        Format::Rgba,
        Format::Bgra,
    ];

    /// The format of a wire value, None for an unknown one.
    pub fn from_u32(v: u32) -> Option<Format> {
        Format::ALL.iter().copied().find(|f| *f as u32 == v)
    }

    /// The lower-case name (FFmpeg's pixel format name where it has one).
    pub fn name(self) -> &'static str {
        match self {
            Format::None => "none",
            Format::Nv12 => "nv12",
            Format::P010 => "p010",
            Format::P016 => "p016",
            Format::Yuv420p => "yuv420p",
            Format::Yuv444p => "yuv444p",
            Format::Rgba => "rgba",
            Format::Bgra => "bgra",
        }
    }
}

/// `cuframes_subscriber_mode_t` (R7).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SubscriberMode {
    /// The subscriber copies each frame into memory it owns.
    Copy = 0,
    /// Frames reference ring memory until released (R12).
    ZeroCopy = 1,
}

impl SubscriberMode {
    /// The mode of a wire value, None for an unknown one.
    pub fn from_u32(v: u32) -> Option<SubscriberMode> {
        match v {
            0 => Some(SubscriberMode::Copy),
            1 => Some(SubscriberMode::ZeroCopy),
            _ => None,
        }
    }
}

/// Publisher policy (§2.0 `policy`).
#[repr(u64)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Policy {
    /// A publish overwrites the oldest slot; slow subscribers lose frames.
    DropOldest = 0,
    /// A publish waits for every subscriber to ACK the slot it reuses.
    StrictWait = 1,
}

impl Policy {
    /// The policy of a wire value, None for an unknown one.
    pub fn from_u64(v: u64) -> Option<Policy> {
        match v {
            0 => Some(Policy::DropOldest),
            1 => Some(Policy::StrictWait),
            _ => None,
        }
    }

    /// The name operators see.
    pub fn name(self) -> &'static str {
        match self {
            Policy::DropOldest => "drop_oldest",
            Policy::StrictWait => "strict_wait",
        }
    }
}

/// Where frame slots live (R14: first 4 bytes of VMM_FDS's reserved field).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemoryKind {
    /// CUDA VMM allocations shared as POSIX file descriptors.
    CudaVmm = 0,
    /// Sealed host memfds.
    HostMemfd = 1,
}

impl MemoryKind {
    /// The memory kind of a wire value, None for an unknown one.
    pub fn from_u32(v: u32) -> Option<MemoryKind> {
        match v {
            0 => Some(MemoryKind::CudaVmm),
            1 => Some(MemoryKind::HostMemfd),
            _ => None,
        }
    }

    /// The name operators see.
    pub fn name(self) -> &'static str {
        match self {
            MemoryKind::CudaVmm => "cuda",
            MemoryKind::HostMemfd => "host",
        }
    }
}

/// Subscriber slot state (§2.3).
#[repr(u64)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SubscriberState {
    /// Unused.
    Free = 0,
    /// Handshake in progress.
    Connecting = 1,
    /// Subscribed and reading.
    Active = 2,
    /// Leaving (draining its last frames).
    Draining = 3,
}

impl SubscriberState {
    /// The state of a wire value, None for an unknown one.
    pub fn from_u64(v: u64) -> Option<SubscriberState> {
        match v {
            0 => Some(SubscriberState::Free),
            1 => Some(SubscriberState::Connecting),
            2 => Some(SubscriberState::Active),
            3 => Some(SubscriberState::Draining),
            _ => None,
        }
    }
}

/// Ownership mode (§2.0): LIBRARY is the only one in v4.
pub const OWNERSHIP_LIBRARY: u64 = 0;

/// HELLO_REQ subscribe flags (§10.9, R3).
pub const SUBSCRIBE_WANTS_FRAMES: u32 = 1 << 0;
/// The subscriber wants the packet ring.
pub const SUBSCRIBE_WANTS_PACKETS: u32 = 1 << 1;
/// Extension (negotiated, `docs/protocol.md` "ACK pages"): this subscriber ACKs through a page
/// of its own and maps the frame SHM read-only.
pub const SUBSCRIBE_ACK_PAGE: u32 = 1 << 2;
/// Extension (negotiated, `docs/protocol.md` "GOP store"): this packet subscriber wants the
/// publisher's GOP store, which the publisher sends as GOP_STORE after SUBSCRIBE_RESP.
pub const SUBSCRIBE_GOP_STORE: u32 = 1 << 3;

/// HELLO_RESP `publisher_flags` (extension, the first 4 of the 12 reserved bytes after
/// `shm_path`): the publisher hands each frame subscriber that asks an ACK page.
pub const PUBLISHER_ACK_PAGES: u32 = 1 << 0;
/// HELLO_RESP `publisher_flags`: the publisher answers `SUBSCRIBE_GOP_STORE` with a GOP_STORE
/// message (carrying the store, or no descriptor when it keeps none).
pub const PUBLISHER_GOP_STORE: u32 = 1 << 1;

/// Packet flags (§10.5).
pub const PACKET_FLAG_KEY: u32 = 1 << 0;
/// The publisher detected a damaged packet; a subscriber may skip it.
pub const PACKET_FLAG_CORRUPT: u32 = 1 << 1;
/// There is a gap before this packet (a reconnect to the source, or an overrun the reader
/// re-anchored after).
pub const PACKET_FLAG_DISCONTINUITY: u32 = 1 << 2;
/// The last NAL unit of an access unit (for muxers that wait for a whole frame).
pub const PACKET_FLAG_LAST_IN_AU: u32 = 1 << 3;
/// Every flag bit this version knows.
pub const PACKET_FLAGS_KNOWN: u32 = 0xF;

/// SHUTDOWN reasons (§3.8).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShutdownReason {
    /// The publisher ended normally.
    Normal = 0,
    /// The publisher ended on an error.
    Error = 1,
    /// The publisher ends to be upgraded.
    Upgrade = 2,
    /// Extension: see [`SHUTDOWN_NEW_RING`].
    NewRing = 3,
}

impl ShutdownReason {
    /// The reason of a wire value, None for an unknown one.
    pub fn from_u32(v: u32) -> Option<ShutdownReason> {
        match v {
            0 => Some(ShutdownReason::Normal),
            1 => Some(ShutdownReason::Error),
            2 => Some(ShutdownReason::Upgrade),
            3 => Some(ShutdownReason::NewRing),
            _ => None,
        }
    }
}

/// SHUTDOWN reason (extension, compatible): the frame ring was replaced by a new generation
/// (new geometry or format) under the same key; the publisher lives on. Frame subscribers
/// drain the old ring and subscribe again. Peers that do not know it end, as for any
/// SHUTDOWN.
pub const SHUTDOWN_NEW_RING: u32 = ShutdownReason::NewRing as u32;

/// Codec ids the packet ring carries (§10.3). Fixed wire values: the `AV_CODEC_ID_*` numbers
/// of FFmpeg 4.x–7.x, which the spec quotes (H.264 27, HEVC 173). FFmpeg 8/9 renumbered the
/// enum (9.0: HEVC 172, AV1 222), so FFmpeg code maps explicitly
/// (`ffmpeg-glue/libavformat/cuframes_pkt.h`).
pub const CODEC_ID_H264: u32 = 27;
/// HEVC (`AV_CODEC_ID_HEVC`).
pub const CODEC_ID_HEVC: u32 = 173;
/// AV1 (`AV_CODEC_ID_AV1`).
pub const CODEC_ID_AV1: u32 = 226;
