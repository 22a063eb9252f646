//! What a read of the packet ring hands out: the packet's [`PacketInfo`], and the payload
//! copied into a buffer the caller's [`PacketSink`] provides.

use crate::error::Result;
use crate::wire::{
    PACKET_FLAG_CORRUPT, PACKET_FLAG_DISCONTINUITY, PACKET_FLAG_KEY, PACKET_FLAG_LAST_IN_AU,
};

/// What [`PacketRingReader::next_packet`](super::PacketRingReader::next_packet) returns besides
/// the payload bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketInfo {
    /// Sequence number (R18: the first packet is 1), strictly increasing per reader.
    pub seq: u64,
    /// Presentation time in ns (R25; `NO_PTS` = `i64::MIN` when unknown).
    pub pts_ns: i64,
    /// Decoding time in ns (R25; `NO_PTS` when unknown).
    pub dts_ns: i64,
    /// §10.5 flags. The reader adds DISCONTINUITY to the first packet after an overrun (R9).
    pub flags: u32,
}

impl PacketInfo {
    /// A keyframe (KEY): a decoder can start here.
    pub fn is_key(&self) -> bool {
        self.flags & PACKET_FLAG_KEY != 0
    }

    /// The producer marked the packet CORRUPT.
    pub fn is_corrupt(&self) -> bool {
        self.flags & PACKET_FLAG_CORRUPT != 0
    }

    /// DISCONTINUITY: packets before this one were lost (an overrun or a skipped packet).
    pub fn is_discontinuity(&self) -> bool {
        self.flags & PACKET_FLAG_DISCONTINUITY != 0
    }

    /// LAST_IN_AU: the last packet of its access unit.
    pub fn is_last_in_au(&self) -> bool {
        self.flags & PACKET_FLAG_LAST_IN_AU != 0
    }
}

/// Where `next_packet_into` copies a payload.
pub trait PacketSink {
    /// A buffer of exactly `len` bytes for the payload. Asked again, superseding the previous
    /// buffer, when a copy raced the writer and another packet is read instead. An error
    /// aborts the read (the packet is not consumed).
    fn buffer(&mut self, len: usize) -> Result<&mut [u8]>;
}

/// A `Vec` keeps its capacity; only growth is zero-filled.
impl PacketSink for Vec<u8> {
    fn buffer(&mut self, len: usize) -> Result<&mut [u8]> {
        if self.len() > len {
            self.truncate(len);
        } else {
            self.resize(len, 0);
        }
        Ok(self.as_mut_slice())
    }
}
