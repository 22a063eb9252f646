//! A corrupted or hostile packet SHM must give an error, an overrun or a timeout — never a
//! panic, an out-of-bounds read or an oversized packet. Garbage is written through a second,
//! writable mapping of the same object while the reader holds a read-only one.

use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

use proptest::prelude::*;

use super::shm_region::*;
use super::tests::writer;
use super::*;
use crate::error::ErrorCode;
use crate::shm::{self, Mapping};
use crate::wire::packet::{packet_shm_size, packet_slot_offset};
use crate::wire::{FRAME_MAGIC, LEGACY_FRAME_MAGIC, PACKET_FLAG_KEY, PACKET_MAGIC};

const POLL: Option<Duration> = Some(Duration::ZERO);

/// A memfd-backed ring: the writable mapping to corrupt and a way to map it read-only.
struct MemRing {
    fd: std::os::fd::OwnedFd,
    rw: Mapping,
}

impl MemRing {
    fn new(len: usize) -> MemRing {
        let fd = shm::memfd("cuframes-test-pkt", len).unwrap();
        let rw = Mapping::map(fd.as_fd(), len, true, "test ring").unwrap();
        MemRing { fd, rw }
    }

    /// A valid, empty header for `slots` x `data`.
    fn valid(slots: u32, data: u32) -> MemRing {
        let r = MemRing::new(packet_shm_size(slots as usize, data as usize));
        let m = &r.rw;
        m.atomic_u32(HDR_MAGIC)
            .store(PACKET_MAGIC, Ordering::Relaxed);
        m.atomic_u32(HDR_PROTO_VERSION).store(4, Ordering::Relaxed);
        m.atomic_u32(HDR_RING_SLOTS).store(slots, Ordering::Relaxed);
        m.atomic_u32(HDR_DATA_SIZE).store(data, Ordering::Relaxed);
        m.atomic_u64(HDR_PRODUCER_PID)
            .store(u64::from(std::process::id()), Ordering::Relaxed);
        for i in 0..slots as usize {
            m.atomic_u64(packet_slot_offset(i))
                .store(u64::MAX, Ordering::Relaxed);
        }
        r
    }

    fn reader(&self) -> crate::Result<PacketRingReader> {
        let len = self.rw.len();
        PacketRingReader::from_mapping(Mapping::map(self.fd.as_fd(), len, false, "ro").unwrap())
    }
}

fn open_err(ring: &MemRing) -> crate::Error {
    ring.reader().unwrap_err()
}

#[test]
fn header_corruption_is_refused_with_a_clear_error() {
    let ring = MemRing::valid(4, 256);
    assert!(ring.reader().is_ok());
    let m = &ring.rw;
    let set32 = |off: usize, v: u32| m.atomic_u32(off).store(v, Ordering::Relaxed);

    set32(HDR_MAGIC, FRAME_MAGIC);
    let e = open_err(&ring);
    assert_eq!(e.code(), ErrorCode::Protocol);
    assert!(e.message().contains("frame ring"), "{e}");
    set32(HDR_MAGIC, LEGACY_FRAME_MAGIC);
    assert!(open_err(&ring).message().contains("legacy"));
    set32(HDR_MAGIC, 0xDEAD_BEEF);
    assert!(open_err(&ring).message().contains("bad packet-ring magic"));
    set32(HDR_MAGIC, PACKET_MAGIC);

    set32(HDR_PROTO_VERSION, 3);
    assert!(open_err(&ring).message().contains("proto_version 3"));
    set32(HDR_PROTO_VERSION, 4);

    for bad in [0, 1025, u32::MAX] {
        set32(HDR_RING_SLOTS, bad);
        assert!(open_err(&ring).message().contains("ring_slots"), "{bad}");
    }
    // A valid count that does not match the file size.
    set32(HDR_RING_SLOTS, 5);
    assert!(open_err(&ring).message().contains("need exactly"));
    set32(HDR_RING_SLOTS, 4);

    set32(HDR_DATA_SIZE, 0);
    assert!(open_err(&ring).message().contains("data_size is 0"));
    set32(HDR_DATA_SIZE, 257);
    assert!(open_err(&ring).message().contains("need exactly"));
    set32(HDR_DATA_SIZE, u32::MAX);
    assert!(open_err(&ring).message().contains("need exactly"));
    set32(HDR_DATA_SIZE, 256);

    set32(HDR_EXTRADATA_SIZE, 4097);
    assert!(open_err(&ring).message().contains("codec_extradata_size"));
    set32(HDR_EXTRADATA_SIZE, 16);
    let r = ring.reader().unwrap();
    assert_eq!(r.extradata().unwrap().len(), 16);
    // Corrupted after open: extradata() re-validates.
    set32(HDR_EXTRADATA_SIZE, 100_000);
    assert_eq!(r.extradata().unwrap_err().code(), ErrorCode::Protocol);
    // Rewriting the geometry after open changes nothing for an open reader.
    set32(HDR_EXTRADATA_SIZE, 0);
    set32(HDR_DATA_SIZE, u32::MAX);
    set32(HDR_RING_SLOTS, 1024);
    assert_eq!(r.data_size(), 256);
    assert_eq!(r.ring_slots(), 4);
}

#[test]
fn wrong_file_sizes_are_refused() {
    // Too small for a header.
    let tiny = MemRing::new(100);
    assert!(open_err(&tiny).message().contains("smaller than"));
    // Larger than the geometry says.
    let ring = MemRing::new(packet_shm_size(4, 256) + 4096);
    let m = &ring.rw;
    m.atomic_u32(HDR_MAGIC)
        .store(PACKET_MAGIC, Ordering::Relaxed);
    m.atomic_u32(HDR_PROTO_VERSION).store(4, Ordering::Relaxed);
    m.atomic_u32(HDR_RING_SLOTS).store(4, Ordering::Relaxed);
    m.atomic_u32(HDR_DATA_SIZE).store(256, Ordering::Relaxed);
    assert!(open_err(&ring).message().contains("need exactly"));
    // A non-packet SHM through open(): the frames magic is named.
    let (w, _g) = writer("openmagic", 4, 256);
    let (_fd, rw) = shm::open(w.shm_name(), 0, true).unwrap();
    rw.atomic_u32(HDR_MAGIC)
        .store(FRAME_MAGIC, Ordering::Relaxed);
    let e = PacketRingReader::open(w.shm_name()).unwrap_err();
    assert!(e.message().contains("frame ring"), "{e}");
}

/// Publish a few packets with a real writer, then corrupt slot `seq`'s fields and read it.
fn corrupt_slot(edit: impl Fn(&Mapping, usize)) -> crate::Result<PacketInfo> {
    let (mut w, _g) = writer("slot", 8, 256);
    for seq in 1..=3u64 {
        w.publish(&[seq as u8; 30], 0, 0, PACKET_FLAG_KEY).unwrap();
    }
    let (_fd, rw) = shm::open(w.shm_name(), 0, true).unwrap();
    let mut r = PacketRingReader::open(w.shm_name()).unwrap();
    r.start_at(2);
    r.set_overrun_errors(true);
    edit(&rw, packet_slot_offset(2));
    let mut out = Vec::new();
    let res = r.next_packet(POLL, &mut out);
    if res.is_ok() {
        assert!(out.len() <= 256);
    }
    res
}

#[test]
fn slot_corruption_is_an_error_or_an_overrun() {
    let protocol = |e: crate::Error, what: &str| {
        assert_eq!(e.code(), ErrorCode::Protocol, "{e}");
        assert!(e.message().contains(what), "{e}");
    };
    // Unmodified: fine.
    assert_eq!(corrupt_slot(|_, _| {}).unwrap().seq, 2);
    protocol(
        corrupt_slot(|m, s| m.atomic_u32(s + SLOT_DATA_SIZE).store(0, Ordering::Relaxed))
            .unwrap_err(),
        "size 0",
    );
    protocol(
        corrupt_slot(|m, s| {
            m.atomic_u32(s + SLOT_DATA_SIZE)
                .store(257, Ordering::Relaxed)
        })
        .unwrap_err(),
        "exceeds",
    );
    protocol(
        corrupt_slot(|m, s| {
            m.atomic_u32(s + SLOT_DATA_SIZE)
                .store(u32::MAX, Ordering::Relaxed)
        })
        .unwrap_err(),
        "exceeds",
    );
    protocol(
        corrupt_slot(|m, s| m.atomic_u32(s + SLOT_FLAGS).store(0x10, Ordering::Relaxed))
            .unwrap_err(),
        "reserved flag",
    );
    // Beyond write_offset (90): a payload that was never written.
    protocol(
        corrupt_slot(|m, s| {
            m.atomic_u64(s + SLOT_DATA_OFFSET)
                .store(80, Ordering::Relaxed)
        })
        .unwrap_err(),
        "beyond write_offset",
    );
    protocol(
        corrupt_slot(|m, s| {
            m.atomic_u64(s + SLOT_DATA_OFFSET)
                .store(u64::MAX - 5, Ordering::Relaxed)
        })
        .unwrap_err(),
        "beyond write_offset",
    );
    // write_offset rewound below the packet.
    protocol(
        corrupt_slot(|m, _| m.atomic_u64(HDR_WRITE_OFFSET).store(0, Ordering::Relaxed))
            .unwrap_err(),
        "beyond write_offset",
    );
    // A data_offset far behind write_offset: overwritten bytes, an overrun.
    assert_eq!(
        corrupt_slot(|m, _| {
            m.atomic_u64(HDR_WRITE_OFFSET)
                .store(1 << 40, Ordering::Relaxed)
        })
        .unwrap_err()
        .code(),
        ErrorCode::PacketOverrun
    );
    // Wrong or invalid slot seq: overrun.
    for seq in [0, 1, 3, 10, u64::MAX] {
        assert_eq!(
            corrupt_slot(|m, s| m.atomic_u64(s + SLOT_SEQ).store(seq, Ordering::Relaxed))
                .unwrap_err()
                .code(),
            ErrorCode::PacketOverrun
        );
    }
    // global_seq at UINT64_MAX with a reader just before it.
    let (mut w, _g) = writer("gsmax", 8, 256);
    w.publish(b"k", 0, 0, PACKET_FLAG_KEY).unwrap();
    let (_fd, rw) = shm::open(w.shm_name(), 0, true).unwrap();
    let mut r = PacketRingReader::open(w.shm_name()).unwrap();
    rw.atomic_u64(HDR_GLOBAL_SEQ)
        .store(u64::MAX, Ordering::Relaxed);
    r.start_at(u64::MAX - 1);
    let mut out = Vec::new();
    let e = r.next_packet(POLL, &mut out).unwrap_err();
    // seq MAX-1 is not in its slot: overrun, then no keyframe beyond: timeout.
    assert_eq!(e.code(), ErrorCode::Timeout, "{e}");
    rw.atomic_u64(HDR_LAST_KEYFRAME_SEQ)
        .store(u64::MAX, Ordering::Relaxed);
    r.start_at_last_keyframe();
    assert!(r.next_packet(POLL, &mut out).is_err());
}

/// Arbitrary contents behind a valid header.
#[derive(Debug, Clone)]
struct Fuzzed {
    slots: u32,
    data: u32,
    global_seq: u64,
    last_kf: u64,
    write_offset: u64,
    coherent_seqs: bool,
    body: Vec<u8>,
    starts: Vec<u64>,
}

fn fuzzed() -> impl Strategy<Value = Fuzzed> {
    (1u32..=12, 1u32..=2048, any::<bool>())
        .prop_flat_map(|(slots, data, small)| {
            let body_len = slots as usize * 64 + data as usize;
            let seqs = if small {
                (0u64..64).boxed()
            } else {
                any::<u64>().boxed()
            };
            (
                Just(slots),
                Just(data),
                seqs.clone(),
                seqs,
                prop_oneof![0u64..8192, any::<u64>()],
                any::<bool>(),
                proptest::collection::vec(any::<u8>(), body_len),
                proptest::collection::vec(0u64..80, 1..4),
            )
        })
        .prop_map(
            |(slots, data, global_seq, last_kf, write_offset, coherent_seqs, body, starts)| {
                Fuzzed {
                    slots,
                    data,
                    global_seq,
                    last_kf,
                    write_offset,
                    coherent_seqs,
                    body,
                    starts,
                }
            },
        )
}

/// Fill a ring from `f` and read from it; asserts the reader's guarantees.
fn check_fuzzed(f: &Fuzzed) {
    let ring = MemRing::valid(f.slots, f.data);
    let m = &ring.rw;
    m.write_bytes(packet_slot_offset(0), &f.body);
    m.atomic_u64(HDR_GLOBAL_SEQ)
        .store(f.global_seq, Ordering::Relaxed);
    m.atomic_u64(HDR_LAST_KEYFRAME_SEQ)
        .store(f.last_kf, Ordering::Relaxed);
    m.atomic_u64(HDR_WRITE_OFFSET)
        .store(f.write_offset, Ordering::Relaxed);
    if f.coherent_seqs {
        // Make the slots hold the seqs a reader will ask for, so that the field checks and the
        // copy (not just the seq check) see the random contents; small payload sizes, offsets
        // near write_offset.
        for i in 0..f.slots as usize {
            let s = packet_slot_offset(i);
            let n = u64::from(f.slots);
            let mut seq = f.global_seq - f.global_seq % n + i as u64;
            if seq > f.global_seq {
                seq = seq.saturating_sub(n);
            }
            m.atomic_u64(s + SLOT_SEQ).store(seq, Ordering::Relaxed);
            let sz = m.atomic_u32(s + SLOT_DATA_SIZE).load(Ordering::Relaxed) % (f.data * 2);
            m.atomic_u32(s + SLOT_DATA_SIZE)
                .store(sz, Ordering::Relaxed);
            let back = u64::from(m.atomic_u32(s + SLOT_FLAGS).load(Ordering::Relaxed))
                % (u64::from(f.data) * 2 + 1);
            m.atomic_u64(s + SLOT_DATA_OFFSET)
                .store(f.write_offset.wrapping_sub(back), Ordering::Relaxed);
            let flags = m.atomic_u32(s + SLOT_FLAGS).load(Ordering::Relaxed) & 0x1F;
            m.atomic_u32(s + SLOT_FLAGS).store(flags, Ordering::Relaxed);
        }
    }
    let mut r = ring.reader().unwrap();
    let mut out = Vec::new();
    for (k, start) in f.starts.iter().enumerate() {
        match k % 3 {
            0 => r.start_at_last_keyframe(),
            1 => r.start_at(f.global_seq.saturating_sub(*start)),
            _ => r.start_at(*start),
        }
        r.set_overrun_errors(k % 2 == 1);
        let _ = r.extradata();
        for _ in 0..24 {
            match r.next_packet(POLL, &mut out) {
                Ok(p) => {
                    assert!(out.len() <= f.data as usize);
                    assert!(!out.is_empty());
                    assert_eq!(p.flags & !0xF, 0);
                }
                Err(e) => assert!(
                    matches!(
                        e.code(),
                        ErrorCode::Timeout | ErrorCode::Protocol | ErrorCode::PacketOverrun
                    ),
                    "{e}"
                ),
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn reader_survives_arbitrary_ring_contents(f in fuzzed()) {
        check_fuzzed(&f);
    }
}
