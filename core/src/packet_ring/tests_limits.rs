//! The reader's limits (`limits.rs`): a ring or a packet larger than the reader accepts.

use std::time::Duration;

use super::tests::writer;
use super::*;
use crate::error::{ErrorCode, Result};
use crate::wire::PACKET_FLAG_KEY;

const POLL: Option<Duration> = Some(Duration::ZERO);

fn limits(max_ring_size: u64, max_packet_size: u64) -> PacketLimits {
    PacketLimits {
        max_ring_size,
        max_packet_size,
    }
}

/// A reader does not map and populate whatever data ring the publisher makes: one larger
/// than `max_ring_size` is refused at open, naming the option.
#[test]
fn a_ring_larger_than_the_bound_is_refused_at_open() {
    let (w, _g) = writer("lim-ring", 4, 1 << 20);
    let e = PacketRingReader::open_with(w.shm_name(), limits(1 << 19, 1 << 20)).unwrap_err();
    assert_eq!(e.code(), ErrorCode::NoMemory, "{e}");
    assert!(e.message().contains("1048576 bytes"), "{e}");
    assert!(e.message().contains("max_packet_ring_size 524288"), "{e}");
    // At the bound it is read.
    let r = PacketRingReader::open_with(w.shm_name(), limits(1 << 20, 1 << 30)).unwrap();
    assert_eq!(r.max_packet_size(), 1 << 20, "never more than the ring");
}

/// A packet larger than `max_packet_size` is skipped before any buffer is asked for it,
/// counted, and the reader resumes at the next keyframe, flagged DISCONTINUITY; with
/// overrun errors on it says so once, naming the sizes and the option.
#[test]
fn an_oversized_packet_is_a_counted_loss() {
    let (mut w, _g) = writer("lim-pkt", 8, 1 << 16);
    for errors in [false, true] {
        let mut r = PacketRingReader::open_with(w.shm_name(), limits(1 << 16, 1000)).unwrap();
        r.set_overrun_errors(errors);
        let base = w.stats().packets;
        w.publish(&[1; 100], 0, 0, PACKET_FLAG_KEY).unwrap();
        w.publish(&[2; 1001], 1, 1, PACKET_FLAG_KEY).unwrap();
        w.publish(&[3; 10], 2, 2, 0).unwrap();
        w.publish(&[4; 1000], 3, 3, PACKET_FLAG_KEY).unwrap();
        let mut buf = Vec::new();
        r.start_at(base + 1);
        assert_eq!(r.next_packet(POLL, &mut buf).unwrap().seq, base + 1);
        struct NoBuffer;
        impl PacketSink for NoBuffer {
            fn buffer(&mut self, len: usize) -> Result<&mut [u8]> {
                panic!("a buffer of {len} bytes was asked for");
            }
        }
        if errors {
            let e = r.next_packet_into(POLL, &mut NoBuffer).unwrap_err();
            assert_eq!(e.code(), ErrorCode::PacketOverrun, "{e}");
            let want = format!("packet {} is 1001 bytes", base + 2);
            assert!(e.message().contains(&want), "{e}");
            assert!(e.message().contains("max_packet_size 1000"), "{e}");
        }
        let info = r.next_packet(POLL, &mut buf).unwrap();
        assert_eq!(
            info.seq,
            base + 4,
            "the packet after it depends on it: skipped"
        );
        assert!(info.is_discontinuity());
        assert_eq!(buf, vec![4; 1000]);
        assert_eq!(r.stats().oversized, 1);
        assert_eq!(r.stats().overruns, 0);
        assert_eq!(r.stats().packets, 2);
    }
}

#[test]
fn zero_limits_are_the_defaults() {
    assert_eq!(PacketLimits::or_defaults(0, 0), PacketLimits::default());
    assert_eq!(PacketLimits::or_defaults(5, 0).max_ring_size, 5);
    assert_eq!(PacketLimits::or_defaults(0, 7).max_packet_size, 7,);
}
