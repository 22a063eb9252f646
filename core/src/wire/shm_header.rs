//! What the headers of every cuframes SHM object share, whichever ring they belong to: a
//! magic from [`SHM_MAGICS`] and the producer's pid at [`PRODUCER_PID_OFFSET`]. In a file of
//! its own because it is defined by both ring layouts (`frame`, `packet`), which take their
//! limits from the parent module.

use super::frame::SharedHeader;
use super::packet::PacketRingHeader;
use super::{FRAME_MAGIC, LEGACY_FRAME_MAGIC, PACKET_MAGIC};

/// Offset of `producer_pid` in every cuframes SHM header: the frame ring's (§2.0, the same in
/// v1–v3) and the packet ring's (§10.2) alike, so an object's producer can be read before
/// knowing which ring it is (crash recovery, `cuframes clean`).
pub const PRODUCER_PID_OFFSET: usize = core::mem::offset_of!(SharedHeader, producer_pid);
const _: () = assert!(PRODUCER_PID_OFFSET == core::mem::offset_of!(PacketRingHeader, producer_pid));
/// The magic of every cuframes SHM object that records a producer pid at
/// [`PRODUCER_PID_OFFSET`].
pub const SHM_MAGICS: [u32; 3] = [FRAME_MAGIC, LEGACY_FRAME_MAGIC, PACKET_MAGIC];
