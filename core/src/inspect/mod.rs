//! Inspection for operators (the `cuframes` tool): what publishers a runtime directory has,
//! what their rings say, and which leftovers of dead publishers may be removed.
//!
//! Nothing here disturbs a running publisher or subscriber:
//! - SHM objects are opened `O_RDONLY` and mapped `PROT_READ`; nothing is written, no futex
//!   is waited on or woken, no waiter is counted.
//! - Whether a publisher listens on its socket is read from `/proc/net/unix` rather than by
//!   connecting (a connection would start a handshake on the publisher's side).
//! - Rates come from sampling `global_seq` / `write_offset` twice.
//!
//! Liveness follows the rules of `Publisher::create` (§1): a publisher is alive while its
//! socket listens or the producer pid recorded in one of its SHM objects is alive. Unlike
//! create, which connects, listening is judged from `/proc/net/unix`; [`clean()`] confirms a
//! "dead" verdict by connecting, exactly as create does, before it removes anything (a
//! refused connection disturbs nobody), so a publisher in another network namespace is never
//! mistaken for a dead one.

pub mod clean;
pub mod frame_ring;
pub mod listing;
pub mod objects;
pub mod ownership;
pub mod packet_ring;
pub mod sockets;

pub use clean::{clean, CleanReport, Removal};
pub use frame_ring::{read_frame_shm, FrameSnapshot, SubscriberSnapshot};
pub use listing::{
    inspect, list, sample, Liveness, OtherObject, PublisherInfo, Rates, ShmObject, CREATION_GRACE,
};
pub use objects::{ObjectMeta, SHM_DIR};
pub use packet_ring::{codec_name, read_packet_shm, PacketSnapshot};
pub use sockets::SocketState;
