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
//! - [`gop_store`]: the GOP store (extension), the publisher's copy of the newest GOPs that
//!   late subscribers start from when the ring has already overwritten the newest keyframe.
//! - [`limits`]: [`PacketLimits`], the largest ring a reader maps and packet it copies.
//! - [`output`]: what a read hands out ([`PacketInfo`]) and where it copies ([`PacketSink`]).
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

pub mod gop_store;
pub mod limits;
pub mod output;
pub mod reader;
pub mod shm_region;
pub mod writer;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_corrupt;
#[cfg(test)]
mod tests_gop_store;
#[cfg(test)]
mod tests_limits;

pub use gop_store::{GopStoreConfig, GopStoreReader, GopStoreWriter};
pub use limits::{PacketLimits, DEFAULT_MAX_PACKET_RING_SIZE, DEFAULT_MAX_PACKET_SIZE};
pub use output::{PacketInfo, PacketSink};
pub use reader::{PacketReaderStats, PacketRingReader};
pub use writer::{PacketRingConfig, PacketRingWriter, PacketWriterStats};
