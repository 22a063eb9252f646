//! The frame ring, writer side: creation of the slots and the SHM, slot acquisition, the R24
//! publish order, STRICT_WAIT (R11, R27) and the copies of a caller's frame into a slot.
//!
//! Who must ACK is not the writer's business: it asks an [`AckAuthority`] (the publisher's
//! subscriber table), which answers with the owners of the bits it counts on, so that a kick
//! names the subscriber it meant and never the next owner of its bit.
//!
//! One file per job, each depending only on those above it in this list:
//! - [`config`]: what a ring carries ([`FrameRingConfig`], [`MemoryChoice`]) and the slot
//!   handed out ([`AcquiredSlot`]);
//! - [`acks`]: who must ACK ([`RequiredAcks`], [`AckAuthority`]) and the STRICT_WAIT wait
//!   for those ACKs, with its budget of wake-ups;
//! - [`frame_writer`]: [`FrameWriter`]: the ring's creation and installation, acquire,
//!   publish, abandon, the wait for publications still queued on a stream, retirement and
//!   teardown;
//! - [`host_planes`]: copies of host planes into a slot (host memory, or a CUDA slot through
//!   the ring's own stream) and their publication;
//! - [`cuda_publish`]: publication of frames written by GPU work, after or on the caller's
//!   stream, and copies from device memory: the writer owns "copy and publish on this
//!   stream" whole.

pub mod acks;
pub mod config;
pub mod cuda_publish;
pub mod frame_writer;
pub mod host_planes;

pub(crate) use acks::AckAuthority;
pub use acks::RequiredAcks;
pub use config::{AcquiredSlot, FrameRingConfig, MemoryChoice};
pub use frame_writer::FrameWriter;
