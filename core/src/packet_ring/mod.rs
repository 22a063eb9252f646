//! The packet ring (§10): encoded H.264/HEVC/AV1 packets shared through
//! `/dev/shm/cuframes-<key>-packets`, one writer (the publisher) and any number of readers
//! (subscribers), no locks, no CUDA.
//!
//! - [`shm_region`]: where every header and slot field lives, and the validation of a mapped
//!   header (everything a reader trusts is checked there once, at open).
//! - [`writer`]: [`PacketRingWriter`], creation of the SHM and the publish protocol of §10.6
//!   with its fixes R8, R18, R29 and the R13/R28 wake-up.
//! - [`reader`]: [`PacketRingReader`], the read protocol of §10.7 with R8, R9, R26, R29, and
//!   the validation of every value read from a slot.
//!
//! # Why the spec's algorithm is not enough (the short version)
//!
//! The slot ring (`ring_slots` entries) and the data ring (`data_size` bytes) wrap
//! independently. §10.7's seqlock re-check on the slot catches a *slot* that was reused while
//! a reader copied it, but not *bytes* of the data ring that newer packets overwrote while the
//! slot itself stayed valid (many small packets after one big one, or one big packet after many
//! small ones). R8 closes that hole: the writer advances `write_offset` before it copies a
//! payload, and the reader, after its copy, re-reads `write_offset` and rejects the packet when
//! the writer has reached `data_offset + data_size`. R29 seqlocks the slot fields themselves.
//!
//! The socket handshake (§10.9) is not here: the control plane hands the SHM name to
//! [`PacketRingReader::open`] and `initial_packet_seq` to [`PacketRingReader::start_at`].

pub mod reader;
pub mod shm_region;
pub mod writer;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_corrupt;

pub use reader::{PacketReaderStats, PacketRingReader, PacketSink};
pub use writer::{PacketRingConfig, PacketRingWriter, PacketWriterStats};

use crate::wire::{
    PACKET_FLAG_CORRUPT, PACKET_FLAG_DISCONTINUITY, PACKET_FLAG_KEY, PACKET_FLAG_LAST_IN_AU,
};

/// What [`PacketRingReader::next_packet`] returns besides the payload bytes.
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
    pub fn is_key(&self) -> bool {
        self.flags & PACKET_FLAG_KEY != 0
    }

    pub fn is_corrupt(&self) -> bool {
        self.flags & PACKET_FLAG_CORRUPT != 0
    }

    pub fn is_discontinuity(&self) -> bool {
        self.flags & PACKET_FLAG_DISCONTINUITY != 0
    }

    pub fn is_last_in_au(&self) -> bool {
        self.flags & PACKET_FLAG_LAST_IN_AU != 0
    }
}
