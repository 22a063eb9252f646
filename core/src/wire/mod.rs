//! Protocol v4 wire layer: the constants, enums and byte layouts of `protocol-v4.md` with the
//! project's resolutions (`docs/protocol.md`, R1–R30).
//!
//! The shared-memory structs are `repr(C)` with native integers rather than zerocopy's
//! byte-order wrappers: the `global_seq`, `seq` and bitmap fields are accessed atomically
//! from several processes, which needs natural alignment, and the byte-order wrappers have
//! alignment 1. The protocol is little-endian only (§0), so big-endian targets are refused
//! at compile time instead.

pub mod ack_page;
pub mod frame;
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
pub const MAX_SUBSCRIBER_SLOTS: usize = 32;
/// Bit 0 is a sentinel (§2.3, R2): bits 1..=31 are usable.
pub const MAX_SUBSCRIBERS: usize = 31;

/// Packet ring limits (§10.2, §10.3).
pub const MAX_PACKET_RING_SLOTS: u32 = 1024;
pub const MAX_EXTRADATA_SIZE: usize = 4096;
pub const DEFAULT_PACKET_RING_SLOTS: u32 = 64;
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
    None = 0,
    Nv12 = 1,
    P010 = 2,
    P016 = 3,
    Yuv420p = 4,
    Yuv444p = 5,
    Rgba = 6,
    Bgra = 7,
}

impl Format {
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

    pub fn from_u32(v: u32) -> Option<Format> {
        Format::ALL.iter().copied().find(|f| *f as u32 == v)
    }

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
    DropOldest = 0,
    StrictWait = 1,
}

impl Policy {
    pub fn from_u64(v: u64) -> Option<Policy> {
        match v {
            0 => Some(Policy::DropOldest),
            1 => Some(Policy::StrictWait),
            _ => None,
        }
    }

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
    CudaVmm = 0,
    HostMemfd = 1,
}

impl MemoryKind {
    pub fn from_u32(v: u32) -> Option<MemoryKind> {
        match v {
            0 => Some(MemoryKind::CudaVmm),
            1 => Some(MemoryKind::HostMemfd),
            _ => None,
        }
    }

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
    Free = 0,
    Connecting = 1,
    Active = 2,
    Draining = 3,
}

impl SubscriberState {
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
pub const SUBSCRIBE_WANTS_PACKETS: u32 = 1 << 1;
/// Extension (negotiated, `docs/protocol.md` "ACK pages"): this subscriber ACKs through a page
/// of its own and maps the frame SHM read-only.
pub const SUBSCRIBE_ACK_PAGE: u32 = 1 << 2;

/// HELLO_RESP `publisher_flags` (extension, the first 4 of the 12 reserved bytes after
/// `shm_path`): the publisher hands each frame subscriber that asks an ACK page.
pub const PUBLISHER_ACK_PAGES: u32 = 1 << 0;

/// Packet flags (§10.5).
pub const PACKET_FLAG_KEY: u32 = 1 << 0;
pub const PACKET_FLAG_CORRUPT: u32 = 1 << 1;
pub const PACKET_FLAG_DISCONTINUITY: u32 = 1 << 2;
pub const PACKET_FLAG_LAST_IN_AU: u32 = 1 << 3;
pub const PACKET_FLAGS_KNOWN: u32 = 0xF;

/// SHUTDOWN reasons (§3.8).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShutdownReason {
    Normal = 0,
    Error = 1,
    Upgrade = 2,
    /// Extension: see [`SHUTDOWN_NEW_RING`].
    NewRing = 3,
}

impl ShutdownReason {
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
pub const CODEC_ID_HEVC: u32 = 173;
pub const CODEC_ID_AV1: u32 = 226;
