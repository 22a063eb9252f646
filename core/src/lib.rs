//! cuframes core: share decoded video frames (CUDA VMM or host memory) and encoded packets
//! between processes on one machine, per protocol v4 (`docs/protocol.md`).
//!
//! Layers, bottom up:
//! - [`wire`]: byte layouts and constants of the protocol; [`tlv`]: socket messages.
//! - [`shm`], [`futex`], [`liveness`], [`paths`]: operating-system plumbing.
//! - [`format`]: plane geometry of frames.

#![deny(clippy::undocumented_unsafe_blocks)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod codec;
pub mod cuda;
pub mod error;
pub mod format;
pub mod frames;
pub mod futex;
pub mod inspect;
pub mod liveness;
pub mod memory;
pub mod packet;
pub mod paths;
pub mod publisher;
pub mod shm;
pub mod sock;
pub mod subscriber;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tlv;
pub mod util;
pub mod wire;

pub use error::{Error, ErrorCode, Result};
pub use paths::Key;
