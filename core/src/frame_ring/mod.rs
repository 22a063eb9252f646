//! The frame ring (§2, §5, §6): decoded frames in slots of CUDA VMM or host memory, one
//! writer (the publisher) and up to 31 readers (subscribers).
//!
//! - [`shm_region`]: typed access to the frame SHM and the checks a reader makes of it.
//! - [`writer`]: [`FrameWriter`], creation of the ring, slot acquisition, the R24 publish order
//!   and STRICT_WAIT (R11, R27).
//! - [`reader`]: the R10 seqlock read, lapping, and the ACK gate (R12, R23) that keeps a
//!   subscriber from ACKing once it has been given up on or is closing.
//! - [`wait_stats`]: where the publisher's frames waited (ACKs, queued publications).
//! - [`ack_page`]: a subscriber's own page for its ACKs and counters (our extension), which
//!   lets the frame SHM be read-only for subscribers.
//!
//! The socket handshake and the table of subscribers are not here: `publisher/` and
//! `subscriber/` orchestrate them and call into this module.

pub mod ack_page;
#[cfg(all(test, loom))]
mod loom_models;
pub mod publication;
pub mod reader;
#[cfg(all(test, not(loom)))]
mod reader_tests;
pub mod shm_region;
pub mod wait_stats;
pub mod writer;

pub use writer::{AcquiredSlot, FrameRingConfig, FrameWriter, MemoryChoice, RequiredAcks};
