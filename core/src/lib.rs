//! cuframes core: share decoded video frames (CUDA VMM or host memory) and encoded packets
//! between processes on one machine, per protocol v4 (`docs/protocol.md`).
//!
//! # Public layers, bottom up
//!
//! 1. Protocol: [`wire`] (byte layouts and constants of the SHM objects), [`tlv`] (the socket
//!    messages), [`Error`] / [`ErrorCode`] (the error codes of the C ABI).
//! 2. Operating-system plumbing: [`paths`] ([`Key`], runtime directory, object names),
//!    [`shm`] (the one hardened open of `/dev/shm`, mappings, memfds: [`shm::Mapping`] is in
//!    the signature of [`packet_ring::PacketRingReader::from_mapping`]), [`liveness`] (the one
//!    meaning of "alive": zombies are dead).
//! 3. Frames and devices: [`format`] (plane geometry), [`colour`] (colour description), [`cuda`] (devices, streams, VMM
//!    memory, pitched copies), [`codec`] (parameter sets of encoded streams).
//! 4. Rings: [`packet_ring`] (the packet ring: writer, reader, header checks); the frame ring
//!    (`frame_ring`: its SHM, writer, reader and ACK pages) and its slot memory (`memory`, host or
//!    CUDA) are crate-private, reached through [`publisher`] and [`subscriber`].
//! 5. Endpoints: [`publisher`] and [`subscriber`], what the C ABI of the root package wraps.
//! 6. Operations: [`inspect`] (the `cuframes` tool: ls / stat / clean), built on the layers
//!    below rather than on copies of them.
//!
//! Crate-private: `frame_ring`, `memory`, `futex` (R13/R28 waits), `sock` (SCM_RIGHTS message
//! I/O), `util` (clocks, C strings), `subscriber::deferred` (the CUDA release thread). With the feature `testing` (off by default), `testing` adds the GPU test
//! kernels and re-exports of those internals for tests and benchmarks.

#![deny(clippy::undocumented_unsafe_blocks)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod codec;
pub mod colour;
pub mod convert;
pub mod cuda;
mod error;
pub mod format;
pub(crate) mod frame_ring;
pub(crate) mod futex;
pub mod inspect;
pub mod liveness;
pub(crate) mod memory;
pub mod packet_ring;
pub mod paths;
pub mod publisher;
pub mod shm;
pub(crate) mod sock;
pub mod subscriber;
pub(crate) mod sync;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tlv;
pub(crate) mod util;
pub mod wire;

pub use error::{Error, ErrorCode, Result};
pub use paths::Key;
