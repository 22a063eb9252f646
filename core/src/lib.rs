//! cuframes core: share decoded video frames (CUDA VMM or host memory) and encoded packets
//! between processes on one machine, per protocol v4 (`docs/protocol.md`).
//!
//! # Publish frames
//!
//! ```no_run
//! use cuframes_core::publisher::{FrameRingConfig, Publisher, PublisherOptions};
//! use cuframes_core::wire::Format;
//!
//! # fn main() -> cuframes_core::Result<()> {
//! let publisher = Publisher::create("cam1", PublisherOptions::default())?;
//! // A ring of 640x480 RGBA frames in host memory (`FrameRingConfig::memory` picks CUDA).
//! let config = FrameRingConfig::new(Format::Rgba, 640, 480);
//! publisher.enable_frames(config)?;
//! let layout = publisher.frame_layout().expect("frames are enabled");
//! let pixels = vec![0u8; 640 * 480 * 4];
//! let seq = publisher.publish_host_frame(&layout, &[&pixels], &[640 * 4], Some(0))?;
//! println!("published frame {seq}");
//! # Ok(())
//! # }
//! ```
//!
//! # Subscribe to frames
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use cuframes_core::subscriber::{Subscriber, SubscriberOptions};
//!
//! # fn main() -> cuframes_core::Result<()> {
//! let mut subscriber = Subscriber::connect("cam1", &SubscriberOptions::default())?;
//! let frame = subscriber.next_frame(Some(Duration::from_secs(1)))?;
//! let layout = subscriber.frame_layout().expect("connected to frames");
//! let mut copy = vec![0u8; layout.frame_size];
//! frame.copy_to(&mut copy)?; // the planes at the layout's offsets and pitches
//! frame.release(); // the publisher may reuse the slot
//! # Ok(())
//! # }
//! ```
//!
//! # Packets
//!
//! A publisher can carry an encoded stream beside (or instead of) its frames; a subscriber
//! asks for it with `want_packets`.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use cuframes_core::packet_ring::PacketRingConfig;
//! use cuframes_core::publisher::{Publisher, PublisherOptions};
//! use cuframes_core::subscriber::{Subscriber, SubscriberOptions};
//!
//! # fn main() -> cuframes_core::Result<()> {
//! let publisher = Publisher::create("cam1-h264", PublisherOptions::default())?;
//! publisher.enable_packets(PacketRingConfig {
//!     codec_id: 27, // AV_CODEC_ID_H264
//!     ..PacketRingConfig::default()
//! })?;
//! # let (access_unit, pts_ns, flags) = (vec![0u8; 16], 0, 1);
//! publisher.publish_packet(&access_unit, pts_ns, pts_ns, flags)?;
//!
//! let options = SubscriberOptions {
//!     want_frames: false,
//!     want_packets: true,
//!     ..SubscriberOptions::default()
//! };
//! let mut subscriber = Subscriber::connect("cam1-h264", &options)?;
//! let mut data = Vec::new();
//! let info = subscriber.next_packet(Some(Duration::from_secs(1)), &mut data)?;
//! println!("packet {} of {} bytes, key: {}", info.seq, data.len(), info.is_key());
//! # Ok(())
//! # }
//! ```
//!
//! # Layers, bottom up
//!
//! A module imports only modules of its own layer or of layers below it, and no two files
//! import each other (`tests/import_direction.rs` checks both, reading this table; a module's
//! submodules share its layer, and `testing` is exempt).
//!
//! | layer | modules |
//! |---|---|
//! | 1 protocol | `wire`, `tlv`, `colour`, `error` |
//! | 2 plumbing | `paths`, `shm`, `liveness`, `futex`, `sock`, `util`, `sync` |
//! | 3 devices and formats | `format`, `cuda`, `codec` |
//! | 4 rings | `frame_ring`, `packet_ring`, `memory` |
//! | 5 endpoints | `publisher`, `subscriber` |
//! | 6 features | `rgb`, `inspect` |
//! | 7 compositions | `batch` |
//!
//! 1. Protocol: [`wire`] (byte layouts and constants of the SHM objects), [`tlv`] (the socket
//!    messages), [`colour`] (the code points of a stream's colour description), [`Error`] /
//!    [`ErrorCode`] (the error codes of the C ABI).
//! 2. Operating-system plumbing: [`paths`] ([`Key`], runtime directory, object names),
//!    [`shm`] (the one hardened open of `/dev/shm`, mappings, memfds: [`shm::Mapping`] is in
//!    the signature of [`packet_ring::PacketRingReader::from_mapping`]), [`liveness`] (the one
//!    meaning of "alive": zombies are dead); crate-private: `futex` (idle readers and
//!    publishers sleep on shared futex words, R13, R28), `sock` (SCM_RIGHTS message I/O),
//!    `util` (clocks, C strings), `sync` (the atomics the memory-order models swap).
//! 3. Devices and formats: [`format`](mod@format) (plane geometry), [`cuda`] (devices, streams, VMM
//!    memory, pitched copies), [`codec`] (parameter sets of encoded streams).
//! 4. Rings: [`packet_ring`] (the packet ring: writer, reader, header checks); the frame ring
//!    (`frame_ring`: its SHM, writer, reader and ACK pages) and its slot memory (`memory`, host or
//!    CUDA) are crate-private, reached through [`publisher`] and [`subscriber`].
//! 5. Endpoints: [`publisher`] and [`subscriber`], what the C ABI of the root package wraps
//!    (`subscriber::deferred`, crate-private, is the CUDA release thread).
//! 6. Features: [`rgb`] (RGB conversion of frames, host and CUDA kernel) and [`inspect`] (the
//!    `cuframes` tool: ls / stat / clean), built on the layers below rather than on copies of
//!    them.
//! 7. Compositions: [`batch`] (many cameras read into one inference batch: subscribers, the
//!    assembly policies and the batched RGB conversion together).
//!
//! With the feature `testing` (off by default), `testing` adds the GPU test kernels and
//! re-exports of the crate-private internals for tests and benchmarks.

#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod batch;
pub mod codec;
pub mod colour;
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
pub mod rgb;
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
