//! What a packet reader accepts from a publisher: the largest data ring it maps and the
//! largest packet it copies.
//!
//! # Why a reader bounds them
//!
//! A publisher chooses the data ring's size and each packet's, and a reader would pay for both:
//! it maps and populates the whole ring, and copies each packet into a buffer of its size (a
//! 1 GiB ring holding one 1 GiB packet takes an FFmpeg reader to 3.2 GB). [`PacketLimits`]
//! bounds them: a ring larger than `max_ring_size` is refused at open, before its pages are
//! touched; a packet larger than `max_packet_size` is skipped before a byte of buffer is asked
//! for, counted ([`PacketReaderStats::oversized`](super::PacketReaderStats::oversized)) and handled as a loss, like an overrun: the
//! reader resumes at the next keyframe and flags it DISCONTINUITY (a decoder cannot use the
//! packets that depend on the skipped one).

/// The largest packet a reader accepts by default: 64 MiB. The largest access units real
/// streams carry are intra frames at 8K (7680x4320). A conforming H.264 stream at level 6.2
/// bounds one to about 25 MB (384 bytes per macroblock over MinCR 2); HEVC and AV1 at their
/// top levels' rates (800 Mbit/s, HEVC level 6.2 high tier) put an intra frame in the tens of
/// MB. 64 MiB even holds an incompressible 8K 4:2:0 10-bit picture (59.3 MiB raw), so only
/// mathematically lossless 4:2:2/4:4:4 at 8K needs more: raise it with
/// `SubscriberOptions::max_packet_size`.
pub const DEFAULT_MAX_PACKET_SIZE: u64 = 64 << 20;

/// The largest data ring a reader maps by default: 256 MiB, four packets of the largest size
/// above, or 2.7 s of the 800 Mbit/s of HEVC level 6.2 high tier (the publisher's default ring
/// is 8 MiB). Every reader maps and populates the whole ring: raise it with
/// `SubscriberOptions::max_packet_ring_size` for rings meant to hold more.
pub const DEFAULT_MAX_PACKET_RING_SIZE: u64 = 256 << 20;

/// What a reader accepts from a publisher (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketLimits {
    /// The largest data ring (`data_size`, in bytes) mapped; a larger one is refused at open.
    pub max_ring_size: u64,
    /// The largest packet (bytes) read; a larger one is skipped as a loss.
    pub max_packet_size: u64,
}

impl Default for PacketLimits {
    fn default() -> Self {
        PacketLimits {
            max_ring_size: DEFAULT_MAX_PACKET_RING_SIZE,
            max_packet_size: DEFAULT_MAX_PACKET_SIZE,
        }
    }
}

impl PacketLimits {
    /// Limits from option values where 0 stands for the default (the C ABI's convention).
    pub fn or_defaults(max_ring_size: u64, max_packet_size: u64) -> PacketLimits {
        let d = PacketLimits::default();
        PacketLimits {
            max_ring_size: if max_ring_size == 0 {
                d.max_ring_size
            } else {
                max_ring_size
            },
            max_packet_size: if max_packet_size == 0 {
                d.max_packet_size
            } else {
                max_packet_size
            },
        }
    }
}
